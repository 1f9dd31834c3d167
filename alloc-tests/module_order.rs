//! The workspace's modules import one way. In every crate, no two sibling modules use each
//! other, directly or around a loop (a module counts with the modules inside it; see
//! `module_graph::siblings`); and the main crate's top-level modules form the layers its
//! docs state, each using only layers below it. The emulator's own `wings` test also holds it
//! to its wing order and to no cycle between files at all. The graph is read from the
//! sources by the shared `symheap-emu/tests/support/module_graph.rs`.

use std::path::{Path, PathBuf};

#[path = "../symheap-emu/tests/support/module_graph.rs"]
mod module_graph;

use module_graph::{Graph, Module, cycles, describe, graph, name, siblings};

/// Every crate's `src`, relative to the workspace root.
const CRATES: [&str; 7] = [
    "src",
    "symheap-types/src",
    "symheap-heap/src",
    "symheap-sys/src",
    "symheap-emu/src",
    "symheap-tools/src",
    "symheap-npu/src",
];

/// The main crate's top-level modules, from the bottom up: each may use only those before it
/// (the README's "What is inside" states this order).
const LAYERS: [&str; 15] = [
    "error",
    "path_rules",
    "runtime",
    "raw",
    "pool",
    "host_view",
    "buffer",
    "storage",
    "sym_vec",
    "sym_slice",
    "sym_box",
    "allocator",
    "ops",
    "dlpack",
    "emu",
];

fn src(krate: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(krate)
}

#[test]
fn no_import_cycle_between_sibling_modules_of_any_crate() {
    for krate in CRATES {
        let graph = graph(&src(krate));
        assert!(
            graph.len() > 2,
            "{krate}: found only {} modules",
            graph.len()
        );
        let found = cycles(&siblings(&graph));
        assert!(
            found.is_empty(),
            "{krate}: import cycles:\n{}",
            describe(&found)
        );
    }
}

#[test]
fn the_main_crates_layers_import_downwards() {
    let breaches = layer_breaches(&siblings(&graph(&src("src"))));
    assert!(
        breaches.is_empty(),
        "against the layer order:\n{}",
        breaches.join("\n")
    );
}

/// The imports of `lifted` (a sibling graph) against [`LAYERS`], and every top-level module
/// missing from it (a new module must take its place in the order).
fn layer_breaches(lifted: &Graph) -> Vec<String> {
    let layer = |m: &Module| LAYERS.iter().position(|l| m.len() == 1 && m[0] == *l);
    let mut breaches = Vec::new();
    for (from, targets) in lifted.iter().filter(|(m, _)| m.len() == 1) {
        let Some(own) = layer(from) else {
            breaches.push(format!("{} has no place in LAYERS", name(from)));
            continue;
        };
        for to in targets {
            if layer(to).is_none_or(|t| t > own) {
                breaches.push(format!("{} uses {}", name(from), name(to)));
            }
        }
    }
    breaches
}

/// The checks see what they must: a cycle between siblings through their insides, none
/// between a parent and its child, and an import up the layers.
#[test]
fn the_checks_see_sibling_cycles_and_upward_imports() {
    let m = |s: &str| -> Module { s.split("::").map(String::from).collect() };
    let graph_of = |edges: &[(&str, &str)]| -> Graph {
        let mut g = Graph::new();
        for (a, b) in edges {
            g.entry(m(b)).or_default();
            g.entry(m(a)).or_default().insert(m(b));
        }
        g
    };
    let across = graph_of(&[("pool::block", "raw"), ("raw::window", "pool")]);
    assert_eq!(cycles(&siblings(&across)).len(), 1);
    let family = graph_of(&[("pool", "pool::stats"), ("pool::stats", "pool")]);
    assert!(cycles(&siblings(&family)).is_empty());
    let nested = graph_of(&[("pool::a::x", "pool::b"), ("pool::b", "pool::a")]);
    assert_eq!(
        describe(&cycles(&siblings(&nested))),
        "pool::a -> pool::b -> pool::a"
    );
    let upward = graph_of(&[
        ("runtime::comm", "pool"),
        ("ops", "pool"),
        ("shiny", "error"),
    ]);
    assert_eq!(
        layer_breaches(&siblings(&upward)),
        ["runtime uses pool", "shiny has no place in LAYERS"]
    );
}
