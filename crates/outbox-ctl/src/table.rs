//! Left-aligned plain-text tables; long cells are cut so a row stays on one line. Every
//! cell is shown through [`visible`]: what others wrote (a destination's answer, a
//! tenant's subject) cannot send escape sequences or bidirectional controls to the
//! operator's terminal, nor break a row in two.

use outbox_core::untrusted::visible;
use std::fmt;

/// Widest a cell may be before it is shortened with `…`.
const MAX_CELL_CHARS: usize = 60;

/// A table being built.
#[derive(Debug)]
pub(crate) struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub(crate) fn new<const N: usize>(header: [&str; N]) -> Self {
        Table {
            header: header.iter().map(|h| (*h).to_owned()).collect(),
            rows: Vec::new(),
        }
    }

    pub(crate) fn row<const N: usize>(&mut self, cells: [String; N]) {
        self.rows.push(cells.into_iter().map(shorten).collect());
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
}

fn shorten(cell: String) -> String {
    let flat = visible(&cell).into_owned();
    if flat.chars().count() <= MAX_CELL_CHARS {
        return flat;
    }
    let mut cut: String = flat.chars().take(MAX_CELL_CHARS - 1).collect();
    cut.push('…');
    cut
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        for line in std::iter::once(&self.header).chain(&self.rows) {
            let mut text = String::new();
            for (i, (cell, width)) in line.iter().zip(&widths).enumerate() {
                if i > 0 {
                    text.push_str("  ");
                }
                text.push_str(cell);
                let pad = width - cell.chars().count();
                text.extend(std::iter::repeat_n(' ', pad));
            }
            writeln!(f, "{}", text.trim_end())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_cannot_act_on_the_terminal() {
        let mut table = Table::new(["ANSWER"]);
        table.row(["ok\u{1b}]0;pwned\u{7}\u{1b}[2J\nsecond line \u{202e}txt".to_owned()]);
        let text = table.to_string();
        assert_eq!(text.lines().count(), 2, "{text}");
        assert!(text.contains("ok\\x1b]0;pwned\\x07\\x1b[2J\\nsecond line \\u{202e}txt"));
    }

    #[test]
    fn columns_align_and_long_cells_are_cut() {
        let mut table = Table::new(["A", "LONGER"]);
        table.row(["x".to_owned(), "y".to_owned()]);
        table.row(["wide cell".to_owned(), "z".repeat(80)]);
        let text = table.to_string();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "A          LONGER");
        assert_eq!(lines[1], "x          y");
        assert!(lines[2].ends_with('…'));
        assert_eq!(lines[2].chars().count(), 11 + MAX_CELL_CHARS);
    }
}
