//! The store's rules that live in SQL text, each written in one place. The duplicate
//! scanner cannot see a rule restated inside a statement, so these read the crate's own
//! sources (its modules, not its tests) and hold each rule to its home:
//! - which lane an alert is in: `lane_key::LANE_KEY`;
//! - a new alert's row, its outbox row and its first evidence line: `alerts/insert.rs`,
//!   which every approval statement (single, group, bulk) is built on; a lane's places
//!   taken only through the migration's `outbox_lanes_join`;
//! - a state named in SQL: from its type (`sql_names`), never spelled as a literal.

#![allow(clippy::unwrap_used)] // a test fails loudly at the first surprise

use std::path::{Path, PathBuf};

/// The crate's modules (`src/**/*.rs` but the test modules), each as its path under `src`
/// and its code lines: comments left out, since they may quote SQL to explain it.
fn modules() -> Vec<(String, String)> {
    fn walk(dir: &Path, found: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, found);
            } else if path.extension().is_some_and(|e| e == "rs")
                && path.file_name().is_some_and(|n| n != "tests.rs")
            {
                found.push(path);
            }
        }
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    walk(&src, &mut files);
    files.sort();
    assert!(files.len() > 40, "{files:?}");
    files
        .into_iter()
        .map(|path| {
            let code: Vec<String> = std::fs::read_to_string(&path)
                .unwrap()
                .lines()
                .filter(|line| !line.trim_start().starts_with("//"))
                .map(str::to_owned)
                .collect();
            let name = path
                .strip_prefix(&src)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            (name, code.join("\n"))
        })
        .collect()
}

/// The modules whose code contains `needle`.
fn holding(needle: &str) -> Vec<String> {
    modules()
        .into_iter()
        .filter(|(_, code)| code.contains(needle))
        .map(|(name, _)| name)
        .collect()
}

/// What each `COALESCE(...)` of `code` (in any case) holds, up to its closing parenthesis.
fn coalesced(code: &str) -> Vec<String> {
    let lower = code.to_lowercase();
    let mut found = Vec::new();
    for (start, _) in lower.match_indices("coalesce(") {
        let inside = &code[start + "coalesce(".len()..];
        let mut depth = 1;
        let end = inside
            .char_indices()
            .find(|&(_, c)| {
                match c {
                    '(' => depth += 1,
                    ')' => depth -= 1,
                    _ => {}
                }
                depth == 0
            })
            .map_or(inside.len(), |(i, _)| i);
        found.push(inside[..end].to_owned());
    }
    found
}

#[test]
fn the_lane_key_rule_is_written_once() {
    let mut keyed = Vec::new();
    for (name, code) in modules() {
        for inside in coalesced(&code) {
            if inside.contains("ordering_key") {
                keyed.push((name.clone(), inside));
            }
        }
    }
    assert_eq!(
        keyed,
        [(
            "lane_key.rs".to_owned(),
            "a.ordering_key, a.subject".to_owned()
        )],
        "the ordering key, else the subject, is `lane_key::LANE_KEY`: write that instead"
    );
    // And the statements that name a lane write it: joining one, releasing one, claiming
    // its head, reading where an alert stands in it, and the checker's reads.
    let writers = holding("{LANE_KEY}");
    for module in [
        "alerts/insert.rs",
        "alerts/revise.rs",
        "checker_reads.rs",
        "dispatch/claim.rs",
        "lanes.rs",
        "lifecycle/queue_moves.rs",
        "lifecycle/standing.rs",
    ] {
        assert!(writers.iter().any(|w| w == module), "{module}: {writers:?}");
    }
}

#[test]
fn an_alert_is_written_by_one_approval_path() {
    // Every alert row, approved or a revision, goes through the one insert.
    assert_eq!(holding("INSERT INTO alerts "), ["alerts/insert.rs"]);
    assert_eq!(holding("INSERT INTO alerts("), Vec::<String>::new());
    // An approval's first evidence line is formatted there too, and its statement is
    // built there: every approval statement writes its rows through `approval_statement`.
    assert_eq!(holding("alert approved"), ["alerts/insert.rs"]);
    let built = holding("approval_statement(");
    for module in ["alerts/approve.rs", "alerts/bulk.rs", "alerts/insert.rs"] {
        assert!(built.iter().any(|b| b == module), "{module}: {built:?}");
    }
    // Every way in is under `alerts/`.
    for module in holding("ALERT_INSERT") {
        assert!(module.starts_with("alerts/"), "{module}");
    }
}

#[test]
fn a_lane_place_is_taken_one_way() {
    // The set-based join (migration 20261217000056) is the only one the store calls, and
    // no statement of the store moves a lane's positions itself.
    assert_eq!(holding("outbox_lane_join("), Vec::<String>::new());
    assert_eq!(holding("outbox_lane_join_new("), Vec::<String>::new());
    assert_eq!(holding("outbox_lanes_join_new("), ["alerts/insert.rs"]);
    assert_eq!(holding("outbox_lanes_join("), ["alerts/revise.rs"]);
    assert_eq!(holding("INSERT INTO alert_lanes"), Vec::<String>::new());
    assert_eq!(holding("last_seq ="), Vec::<String>::new());
}

#[test]
fn no_state_is_spelled_in_sql() {
    let states = [
        "pending",
        "sending",
        "uncertain",
        "accepted",
        "held",
        "failed",
        "superseded",
    ];
    for (name, code) in modules() {
        for state in states {
            assert!(
                !code.contains(&format!("'{state}'")),
                "{name} spells '{state}' in SQL: write it from its type (`sql_names`)"
            );
        }
    }
}
