//! The emulator's wings import one way: a module uses only modules of its own wing or of a
//! wing listed before it in `WINGS` (test code aside). This reads every source file, resolves
//! each `crate::` and `super::` path to the wing it names, and fails on any that points to a
//! later wing.

use std::fs;
use std::path::{Path, PathBuf};

/// The wings, in the order their imports run.
const WINGS: [&str; 5] = ["base", "ipc", "acl", "hccl", "abi"];

#[test]
fn no_module_imports_one_of_a_later_wing() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    for wing in WINGS {
        collect(&src.join(wing), &mut files);
    }
    assert!(files.len() > 30, "found only {} files", files.len());
    let mut back = Vec::new();
    for file in &files {
        let module: Vec<String> = module_path(&src, file);
        if module.iter().any(|m| m == "tests") {
            continue;
        }
        let own = wing_index(&module[0]).expect("a wing");
        let code = without_test_modules(&without_comments(&fs::read_to_string(file).unwrap()));
        for target in named_wings(&code, &module) {
            if let Some(t) = wing_index(&target) {
                if t > own {
                    back.push(format!("{} uses {target}", file.display()));
                }
            }
        }
    }
    assert!(
        back.is_empty(),
        "imports against the wing order:\n{}",
        back.join("\n")
    );
}

/// The detector finds a back-up import, and test modules are exempt.
#[test]
fn the_check_sees_paths_groups_and_supers() {
    let m = |s: &str| s.split("::").map(String::from).collect::<Vec<_>>();
    let code = "use crate::{acl::x, hccl::y::{a, b}};\nfn f() { crate::abi::z(); super::super::ipc::w(); }";
    assert_eq!(
        named_wings(code, &m("base::counters")),
        ["acl", "hccl", "abi", "ipc"]
    );
    // From a module one level deeper, `super::super` stops short of the root.
    assert_eq!(
        named_wings(code, &m("base::counters::inner")),
        ["acl", "hccl", "abi"]
    );
    let stripped =
        without_test_modules("fn a() {}\n#[cfg(test)]\nmod tests {\n use crate::abi::x;\n}\n");
    assert!(!stripped.contains("abi"), "{stripped}");
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            collect(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `src/hccl/collective.rs` is `["hccl", "collective"]`; a `mod.rs` is its folder's module.
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

fn wing_index(name: &str) -> Option<usize> {
    WINGS.iter().position(|w| *w == name)
}

fn without_comments(code: &str) -> String {
    code.lines()
        .map(|line| line.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The code with every `#[cfg(test)]` item removed (a `mod` block, or a `mod x;` whose file
/// is skipped as a `tests` module).
fn without_test_modules(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at..];
        let end = match (after.find('{'), after.find(';')) {
            (Some(open), semi) if semi.is_none_or(|s| open < s) => {
                open + matching_brace(&after[open..])
            }
            (_, Some(semi)) => semi,
            _ => after.len() - 1,
        };
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out
}

/// The index of the brace that closes the one `text` starts with.
fn matching_brace(text: &str) -> usize {
    let mut depth = 0;
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return i;
                }
            }
            _ => {}
        }
    }
    text.len() - 1
}

/// The first path segment below the crate root of every `crate::` path in `code`, and of
/// every `super::` path that climbs to the root from `module` (groups expanded).
fn named_wings(code: &str, module: &[String]) -> Vec<String> {
    let mut found = Vec::new();
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < code.len() {
        let word_start = i == 0
            || !(bytes[i - 1].is_ascii_alphanumeric()
                || bytes[i - 1] == b'_'
                || bytes[i - 1] == b':');
        let rest = &code[i..];
        let tail = if word_start && rest.starts_with("crate::") {
            Some(&rest["crate::".len()..])
        } else if word_start && rest.starts_with("super::") {
            let mut t = rest;
            let mut ups = 0;
            while let Some(s) = t.strip_prefix("super::") {
                t = s;
                ups += 1;
            }
            i += rest.len() - t.len();
            // The file's module is `module`; `super` from it climbs one level per `super`.
            (ups == module.len()).then_some(t)
        } else {
            None
        };
        if let Some(tail) = tail {
            if let Some(group) = tail.strip_prefix('{') {
                let inner = &group[..matching_brace(tail) - 1];
                for item in top_level_items(inner) {
                    found.push(first_ident(item));
                }
            } else {
                found.push(first_ident(tail));
            }
        }
        i += 1;
    }
    found.retain(|w| !w.is_empty());
    found
}

fn top_level_items(inner: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(inner[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(inner[start..].trim());
    items
}

fn first_ident(text: &str) -> String {
    text.trim_start()
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect()
}
