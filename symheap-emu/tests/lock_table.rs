//! The lock order is declared once, in `src/base/lock.rs`; the emulator's docs repeat its
//! table for readers. This keeps the two the same.

use std::fs;
use std::path::Path;

/// The table rows (`| rank | lock | held while taking |`) of `text`, with `prefix` removed.
fn rows(text: &str, prefix: &str) -> Vec<String> {
    text.lines()
        .filter_map(|line| line.strip_prefix(prefix))
        .filter(|row| {
            row.strip_prefix("| ")
                .is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit()))
        })
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_docs_show_the_declared_lock_order() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let declared = rows(
        &fs::read_to_string(root.join("src/base/lock.rs")).unwrap(),
        "//! ",
    );
    let docs = fs::read_to_string(root.join("docs/emulator.md")).unwrap();
    let section = &docs[docs.find("### Lock order").expect("a lock order section")..];
    assert!(declared.len() > 20, "found only {} ranks", declared.len());
    assert_eq!(
        rows(section, "")
            .iter()
            .take(declared.len())
            .collect::<Vec<_>>(),
        declared.iter().collect::<Vec<_>>()
    );
}
