//! The emulator's modules import one way. Between wings: a module uses only modules of its
//! own wing or of a wing listed before it in `WINGS`. Inside a wing: no two modules import
//! each other, directly or around a loop. Test code is exempt from both. The import graph is
//! read from the sources by `support/module_graph.rs`, which other crates' tests include too.

use std::path::Path;

#[path = "support/module_graph.rs"]
mod module_graph;

use module_graph::{Module, cycles, describe, graph, name, named_paths, tangles};

/// The wings, in the order their imports run.
const WINGS: [&str; 5] = ["base", "ipc", "acl", "hccl", "abi"];

fn src() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn no_module_imports_one_of_a_later_wing() {
    let graph = graph(&src());
    assert!(graph.len() > 30, "found only {} modules", graph.len());
    let mut back = Vec::new();
    for (module, targets) in &graph {
        let Some(own) = wing_index(module) else {
            continue;
        };
        for target in targets {
            if wing_index(target).is_some_and(|t| t > own) {
                back.push(format!("{} uses {}", name(module), name(target)));
            }
        }
    }
    assert!(
        back.is_empty(),
        "imports against the wing order:\n{}",
        back.join("\n")
    );
}

#[test]
fn no_import_cycle_between_modules() {
    let graph = graph(&src());
    let found = cycles(&graph);
    assert!(
        found.is_empty(),
        "import cycles:\n{}\nin the tangles:\n{}",
        describe(&found),
        describe(&tangles(&graph))
    );
}

fn wing_index(module: &Module) -> Option<usize> {
    let first = module.first()?;
    WINGS.iter().position(|w| w == first)
}

fn m(s: &str) -> Module {
    s.split("::").map(String::from).collect()
}

/// The reader sees `crate::`, `super::`, `self::` and child-module paths, groups (nested,
/// with `self`), and a `super` that climbs to the root; test items are left out.
#[test]
fn the_reader_sees_paths_groups_and_supers() {
    let code = "use crate::{acl::x, hccl::y::{a, self}};\nfn f() { crate::abi::z(); super::super::ipc::w(); self::q::r(); }";
    assert_eq!(
        named_paths(code, &m("base::counters")),
        [
            m("acl::x"),
            m("hccl::y::a"),
            m("hccl::y"),
            m("abi::z"),
            m("ipc::w"),
            m("base::counters::q::r")
        ]
    );
    // From a module one level deeper, `super::super` stops short of the root.
    assert_eq!(
        named_paths("super::super::ipc::w();", &m("base::counters::inner")),
        [m("base::ipc::w")]
    );
    // A child the file declares is a path start; the group's items are not read again.
    assert_eq!(
        named_paths(
            "mod replay;\nfn f() { replay::{run, stop}(); }",
            &m("acl::graph")
        ),
        [m("acl::graph::replay::run"), m("acl::graph::replay::stop")]
    );
    let stripped = module_graph::without_test_items(
        "fn a() {}\n#[cfg(test)]\nmod tests {\n use crate::abi::x;\n}\n",
    );
    assert!(!stripped.contains("abi"), "{stripped}");
}

/// The detector finds a planted cycle (through a re-export and a `super` path) and names its
/// modules in order, and a crate without one passes.
#[test]
fn the_detector_finds_a_planted_cycle() {
    let dir = std::env::temp_dir().join(format!("module-graph-{}", std::process::id()));
    let write = |file: &str, code: &str| {
        let path = dir.join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, code).unwrap();
    };
    write("lib.rs", "mod a;\nmod b;\npub const ROOT: u8 = 1;\n");
    write(
        "a/mod.rs",
        "pub(crate) mod x;\npub(crate) mod y;\npub(crate) use x::Thing;\n",
    );
    write("a/x.rs", "use super::y::helper;\npub struct Thing;\n");
    write(
        "a/y.rs",
        "pub fn helper() {}\n#[cfg(test)]\nmod tests { use crate::b::z; }\n",
    );
    write("b/z.rs", "use crate::{ROOT, a::Thing};\n");
    let clean = graph(&dir);
    assert_eq!(clean[&m("b::z")], [vec![], m("a::x")].into_iter().collect());
    assert!(cycles(&clean).is_empty(), "{}", describe(&cycles(&clean)));

    // y now uses the re-exported `Thing`, which lives in x, which uses y.
    write("a/y.rs", "pub fn helper() { let _ = crate::a::Thing; }\n");
    let found = cycles(&graph(&dir));
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(describe(&found), "a::x -> a::y -> a::x");
}
