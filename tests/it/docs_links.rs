//! The project's Markdown links: every relative link in every Markdown file (the README,
//! SECURITY.md, CHANGELOG.md, `docs/`; `target/` and hidden directories skipped) names a
//! file that exists, and its `#anchor`, if any, a heading of that file as GitHub spells
//! heading anchors. The same for the pages that code comments, scripts and configuration
//! name (`docs/delivery.md#upkeep-by-dispatchers`, written out in the text). No database,
//! no network: web and mail links are not followed.

#![allow(clippy::unwrap_used)] // a test fails loudly at the first surprise

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

#[test]
fn every_relative_link_resolves() {
    let root = Path::new(ROOT);
    let mut files = Vec::new();
    project_files(root, &is_markdown, &mut files);
    files.sort();
    assert!(
        files.iter().any(|f| f.ends_with("README.md")),
        "no README.md found under {ROOT}"
    );

    let mut broken = Vec::new();
    let mut checked = 0;
    for file in &files {
        let text = fs::read_to_string(file).unwrap();
        for (line, target) in links(&text) {
            if is_external(&target) {
                continue;
            }
            checked += 1;
            if let Err(why) = resolve(root, file, &target) {
                let shown = file.strip_prefix(root).unwrap_or(file).display();
                broken.push(format!("{shown}:{line}: ({target}) {why}"));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "{} broken link(s) of {checked} relative ones in {} Markdown files:\n{}",
        broken.len(),
        files.len(),
        broken.join("\n")
    );
}

/// Code comments cite measurements and rules by page and heading; a heading renamed or
/// moved to another page must take its citations along.
#[test]
fn every_page_named_outside_markdown_resolves() {
    let root = Path::new(ROOT);
    let mut files = Vec::new();
    project_files(root, &|name| !is_markdown(name), &mut files);
    files.sort();

    let mut broken = Vec::new();
    let mut checked = 0;
    for file in &files {
        // This file's own examples name pages that do not exist.
        if file.ends_with("tests/it/docs_links.rs") {
            continue;
        }
        let Ok(text) = fs::read_to_string(file) else {
            continue; // not UTF-8: not text
        };
        for (line, target) in pages_named(&text) {
            checked += 1;
            if let Err(why) = resolve(root, &root.join("README.md"), &target) {
                let shown = file.strip_prefix(root).unwrap_or(file).display();
                broken.push(format!("{shown}:{line}: {target}: {why}"));
            }
        }
    }
    assert!(checked > 0, "no page named outside Markdown under {ROOT}");
    assert!(
        broken.is_empty(),
        "{} of {checked} pages named outside Markdown do not resolve:\n{}",
        broken.len(),
        broken.join("\n")
    );
}

#[test]
fn anchors_are_spelt_as_github_spells_them() {
    let anchors = anchors(
        "# Console (`decider serve --console-listen`)\n\
         ## Destination health: disabled after failing for a window\n\
         ### `bench run`\n\
         ## Where a delivery's time goes, against graphile-worker\n\
         ```sh\n# not a heading\n```\n\
         ## Tests\n## Tests\n",
    );
    for slug in [
        "console-decider-serve---console-listen",
        "destination-health-disabled-after-failing-for-a-window",
        "bench-run",
        "where-a-deliverys-time-goes-against-graphile-worker",
        "tests",
        "tests-1",
    ] {
        assert!(anchors.contains(slug), "{slug} missing from {anchors:?}");
    }
    assert!(!anchors.contains("not-a-heading"));
    let found = links("[a](x.md#y) `[b](code.md)` ![c](img.png \"title\")\n```\n[d](fenced.md)\n```\n[e]: ref.md\n");
    let targets: Vec<&str> = found.iter().map(|(_, t)| t.as_str()).collect();
    assert_eq!(targets, ["x.md#y", "img.png", "ref.md"]);
}

#[test]
fn pages_are_found_where_comments_name_them() {
    let text = "// see docs/a.md#b-c.\n/// (docs/x-y.md, item 3) and docs/z.md.\n\
                // not these: crates/p/docs/q.md, docs/readme.txt, ../docs/r.md\n";
    let found = pages_named(text);
    assert_eq!(
        found,
        [
            (1, "docs/a.md#b-c".to_owned()),
            (2, "docs/x-y.md".to_owned()),
            (2, "docs/z.md".to_owned())
        ]
    );
}

/// Every file under `dir` whose name `wanted` accepts, skipping `target/` and hidden
/// directories.
fn project_files(dir: &Path, wanted: &dyn Fn(&str) -> bool, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        let kind = entry.file_type().unwrap();
        if kind.is_dir() {
            if name != "target" {
                project_files(&path, wanted, out);
            }
        } else if kind.is_file() && wanted(&name) {
            out.push(path);
        }
    }
}

fn is_markdown(name: &str) -> bool {
    name.ends_with(".md")
}

/// Each `docs/NAME.md`, with its `#anchor` if one follows, that `text` names, with its
/// line: a path from the project's root, so one that continues a longer path
/// (`crates/x/docs/...`, `../docs/...`) is not taken.
fn pages_named(text: &str) -> Vec<(usize, String)> {
    let is_path = |c: char| c.is_ascii_alphanumeric() || "_-./".contains(c);
    let is_anchor = |c: char| c.is_ascii_alphanumeric() || "_-".contains(c);
    let mut out = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let mut from = 0;
        while let Some(at) = line[from..].find("docs/") {
            let start = from + at;
            from = start + "docs/".len();
            if line[..start].ends_with(is_path) {
                continue;
            }
            let path_len = line[start..]
                .find(|c| !is_path(c))
                .unwrap_or(line.len() - start);
            // A sentence's full stop after the name is not part of it.
            let path = line[start..start + path_len].trim_end_matches('.');
            if !path.ends_with(".md") {
                continue;
            }
            let after = &line[start + path.len()..];
            let anchor = after
                .strip_prefix('#')
                .map(|rest| &rest[..rest.find(|c| !is_anchor(c)).unwrap_or(rest.len())])
                .filter(|anchor| !anchor.is_empty());
            out.push((
                number + 1,
                match anchor {
                    Some(anchor) => format!("{path}#{anchor}"),
                    None => path.to_owned(),
                },
            ));
            from = start + path.len();
        }
    }
    out
}

fn is_external(target: &str) -> bool {
    // A scheme (`https:`, `mailto:`, ...) before any `/`, `#` or `.`.
    match target.find(':') {
        Some(colon) => {
            let scheme = &target[..colon];
            !scheme.is_empty()
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
                && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        }
        None => false,
    }
}

/// Checks one relative link of `file`.
fn resolve(root: &Path, file: &Path, target: &str) -> Result<(), String> {
    let (path, anchor) = match target.split_once('#') {
        Some((path, anchor)) => (path, Some(percent_decode(anchor))),
        None => (target, None),
    };
    let path = percent_decode(path);
    let dest = if path.is_empty() {
        file.to_path_buf()
    } else if let Some(from_root) = path.strip_prefix('/') {
        root.join(from_root)
    } else {
        file.parent().unwrap().join(&path)
    };
    if !dest.exists() {
        return Err(format!("no such file: {}", dest.display()));
    }
    let Some(anchor) = anchor else { return Ok(()) };
    if dest.extension().is_some_and(|e| e == "md") {
        let text = fs::read_to_string(&dest).map_err(|e| format!("reading it: {e}"))?;
        if anchors(&text).contains(&anchor) {
            Ok(())
        } else {
            Err(format!("no heading with the anchor #{anchor}"))
        }
    } else if is_line_anchor(&anchor) {
        Ok(())
    } else {
        Err(format!("#{anchor} in a file that is not Markdown"))
    }
}

/// GitHub's `#L12` and `#L12-L20` in a source file.
fn is_line_anchor(anchor: &str) -> bool {
    anchor.split('-').all(|part| {
        part.strip_prefix('L')
            .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
    })
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
            if let Ok(b) = u8::from_str_radix(hex, 16) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The lines of `text` outside fenced code blocks, numbered from 1.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut fence: Option<&str> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let marker = ["```", "~~~"].into_iter().find(|m| trimmed.starts_with(m));
        match (fence, marker) {
            (None, Some(m)) => fence = Some(m),
            (Some(open), Some(m)) if open == m => fence = None,
            (None, None) => out.push((i + 1, line)),
            _ => {}
        }
    }
    out
}

/// `line` without its code spans (`` `...` ``), whose brackets are not links.
fn without_code_spans(line: &str) -> String {
    let chars: Vec<char> = line.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '`' {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let run = chars[i..].iter().take_while(|&&c| c == '`').count();
        // The closing run: the same number of backticks, no more, no less.
        let mut j = i + run;
        let mut close = None;
        while j < chars.len() {
            if chars[j] == '`' {
                let n = chars[j..].iter().take_while(|&&c| c == '`').count();
                if n == run {
                    close = Some(j);
                    break;
                }
                j += n;
            } else {
                j += 1;
            }
        }
        match close {
            Some(j) => {
                out.push(' ');
                i = j + run;
            }
            None => {
                out.extend(&chars[i..i + run]);
                i += run;
            }
        }
    }
    out
}

/// Every link target in `text` with its line: inline links and images (`[text](target)`,
/// `![alt](target "title")`) and reference definitions (`[name]: target`).
fn links(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (number, line) in prose_lines(text) {
        let line = without_code_spans(line);
        let trimmed = line.trim_start();
        if trimmed.starts_with('[') {
            if let Some(close) = trimmed.find("]:") {
                if let Some(target) = trimmed[close + 2..].split_whitespace().next() {
                    out.push((number, clean_target(target)));
                    continue;
                }
            }
        }
        let mut rest = line.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            // The target ends at the `)` that balances the opening one.
            let mut depth = 0usize;
            let mut end = None;
            for (k, c) in after.char_indices() {
                match c {
                    '(' => depth += 1,
                    ')' if depth == 0 => {
                        end = Some(k);
                        break;
                    }
                    ')' => depth -= 1,
                    _ => {}
                }
            }
            let Some(end) = end else { break };
            let inside = after[..end].trim();
            let target = if let Some(angled) = inside.strip_prefix('<') {
                angled.split('>').next().unwrap_or_default()
            } else {
                inside.split_whitespace().next().unwrap_or_default()
            };
            if !target.is_empty() {
                out.push((number, clean_target(target)));
            }
            rest = &after[end..];
        }
    }
    out
}

fn clean_target(target: &str) -> String {
    target
        .trim_start_matches('<')
        .trim_end_matches('>')
        .to_owned()
}

/// The anchors GitHub gives the headings of `text`: lower case, spaces to `-`, every
/// character but letters, digits, `-` and `_` dropped (backticks and other markup too), and
/// `-1`, `-2`, ... after a repeated one.
fn anchors(text: &str) -> HashSet<String> {
    let mut seen = HashSet::new();
    for (_, line) in prose_lines(text) {
        let Some(heading) = heading_text(line) else {
            continue;
        };
        let base = slug(&link_text_only(&heading));
        let mut anchor = base.clone();
        let mut n = 0;
        while seen.contains(&anchor) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
        seen.insert(anchor);
    }
    seen
}

/// The text of an ATX heading (`# ...` to `###### ...`, up to three spaces before it).
fn heading_text(line: &str) -> Option<String> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    if indent > 3 {
        return None;
    }
    let line = &line[indent..];
    let level = line.chars().take_while(|&c| c == '#').count();
    if !(1..=6).contains(&level) {
        return None;
    }
    let rest = &line[level..];
    if !rest.is_empty() && !rest.starts_with([' ', '\t']) {
        return None;
    }
    // An optional closing sequence of `#`s.
    let rest = rest.trim();
    let rest = match rest.trim_end_matches('#') {
        stripped if stripped.is_empty() || stripped.ends_with([' ', '\t']) => stripped.trim_end(),
        _ => rest,
    };
    Some(rest.to_owned())
}

/// `[text](target)` in a heading counts as `text`.
fn link_text_only(heading: &str) -> String {
    let mut out = String::new();
    let mut rest = heading;
    while let Some(at) = rest.find("](") {
        let Some(end) = rest[at..].find(')') else {
            break;
        };
        out.push_str(&rest[..at]);
        rest = &rest[at + end + 1..];
    }
    out.push_str(rest);
    out
}

fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}
