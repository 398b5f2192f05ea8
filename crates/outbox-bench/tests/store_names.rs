//! The benchmark's own statements spell no name the store types and restate none of its
//! predicates: a state, a live status, an outcome, an attempt's kind or outcome written as
//! a SQL literal here would keep measuring the old name after a rename, and a copy of the
//! due predicate would measure a claim the product no longer makes. They take the names
//! from the store (`sql_names`, bound values) and the predicate from
//! `outbox_store::dispatch::due_status`. So this reads the crate's sources.

#![allow(clippy::unwrap_used)] // a test fails loudly at the first surprise

use outbox_core::{AlertState, AttemptKind, AttemptOutcome, LiveStatus, Outcome};
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found.extend(sources(&path));
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            found.push(path);
        }
    }
    found
}

#[test]
fn the_benchmark_spells_no_store_name_and_restates_no_due_predicate() {
    let names: Vec<&str> = AlertState::ALL
        .iter()
        .map(|s| s.as_str())
        .chain(LiveStatus::ALL.iter().map(|s| s.as_str()))
        .chain(Outcome::ALL.iter().map(|s| s.as_str()))
        .chain(AttemptKind::ALL.iter().map(|s| s.as_str()))
        .chain(AttemptOutcome::ALL.iter().map(|s| s.as_str()))
        .collect();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = sources(&src);
    assert!(files.iter().any(|f| f.ends_with("db.rs")), "{files:?}");
    let mut found = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in text.lines().enumerate() {
            // Comments may name a state; statements may not.
            let code = line.split("//").next().unwrap_or_default();
            let literal = names
                .iter()
                .find(|name| code.contains(&format!("'{name}'")));
            if literal.is_some() || code.contains("status IN (") {
                found.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "the benchmark spells a store name or the due predicate:\n{}",
        found.join("\n")
    );
}
