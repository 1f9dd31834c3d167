//! The module-level import graph of a crate's `src` folder, and its cycles.
//!
//! A module is a file (`a/b.rs` is `a::b`, `a/mod.rs` is `a`). An edge `m -> n` means that
//! some code of `m` names a path that resolves to `n`: a `crate::`, `super::` or `self::`
//! path (in `use` groups too, expanded), or a path through a child module `m` declares with
//! `mod x;`. A path resolves to the longest module prefix it names, so `crate::acl::stream::f`
//! is an edge to `acl::stream`. Comments and `#[cfg(test)]` items are left out, and so are the
//! files of `tests` modules: test code may reach anywhere. A parent and its child files are
//! separate modules: a `mod.rs` that uses its child's items while the child uses the
//! parent's (through `super::`) is a cycle; a parent that only declares or re-exports its
//! children is not.
//!
//! This file is shared: a test of another crate includes it with
//! `#[path = "…/support/module_graph.rs"] mod module_graph;` and calls [`cycles`] on its own
//! `src` folder. It is text-based on purpose (no parser dependency): the code it reads follows
//! rustfmt, and its self-tests pin the shapes it understands.

#![allow(dead_code)] // Each including test uses a part.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// A module's path below the crate root, e.g. `["acl", "stream"]`; the root is empty.
pub type Module = Vec<String>;

/// The import graph: every non-test module of the crate, with the modules it names.
pub type Graph = BTreeMap<Module, BTreeSet<Module>>;

/// The import graph of the crate whose sources are under `src`.
pub fn graph(src: &Path) -> Graph {
    let mut files = Vec::new();
    collect(src, &mut files);
    let sources: Vec<(Module, String)> = files
        .iter()
        .map(|f| (module_path(src, f), f))
        .filter(|(m, _)| !m.iter().any(|p| p == "tests"))
        .map(|(m, f)| {
            let code = fs::read_to_string(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            (m, without_test_items(&without_comments(&code)))
        })
        .collect();
    let known: BTreeSet<Module> = sources.iter().map(|(m, _)| m.clone()).collect();
    // A re-export forwards: a path through it is an edge to where the item is defined, and
    // the re-exporting module does not depend on it by re-exporting it.
    let mut reexports: BTreeMap<Module, BTreeMap<String, Module>> = BTreeMap::new();
    let mut bodies = Vec::new();
    for (module, code) in &sources {
        let (body, statements) = split_reexports(code);
        let children = declared_children(code);
        let forwards = reexports.entry(module.clone()).or_default();
        for statement in statements {
            for path in paths_with_children(&statement, module, &children) {
                forwards.insert(path.last().cloned().unwrap_or_default(), path);
            }
        }
        bodies.push((module, body));
    }
    bodies
        .into_iter()
        .map(|(module, body)| {
            let targets = named_paths(&body, module)
                .into_iter()
                .filter_map(|path| resolve(&path, &known, &reexports, 0))
                .filter(|target| target != module)
                .collect();
            (module.clone(), targets)
        })
        .collect()
}

/// The code without its `pub … use …;` statements, and those statements.
fn split_reexports(code: &str) -> (String, Vec<String>) {
    let mut body = String::new();
    let mut statements = Vec::new();
    let mut rest = code;
    while let Some(at) = ["pub use ", "pub(crate) use ", "pub(super) use "]
        .iter()
        .filter_map(|p| rest.find(p))
        .min()
    {
        let end = at + rest[at..].find(';').unwrap_or(rest.len() - at - 1);
        body.push_str(&rest[..at]);
        statements.push(rest[at..end].to_string());
        rest = &rest[end..];
    }
    body.push_str(rest);
    (body, statements)
}

/// The module `path` (absolute, below the root) leads to: the longest known module it starts
/// with, or, where the next segment is re-exported there, where that re-export leads.
fn resolve(
    path: &[String],
    known: &BTreeSet<Module>,
    reexports: &BTreeMap<Module, BTreeMap<String, Module>>,
    depth: usize,
) -> Option<Module> {
    let module = (0..=path.len())
        .rev()
        .map(|n| path[..n].to_vec())
        .find(|prefix| known.contains(prefix))?;
    let forwarded = path
        .get(module.len())
        .and_then(|item| reexports.get(&module)?.get(item));
    match forwarded {
        Some(origin) if depth < 8 => resolve(origin, known, reexports, depth + 1),
        // A name the root defines is an edge to the root; one it only imports leads nowhere.
        _ if module.is_empty() && path.len() > 1 => None,
        _ => Some(module),
    }
}

/// Every cycle of `graph`, one per strongly connected component of more than one module,
/// each as the modules in order (the first repeated at the end), sorted.
pub fn cycles(graph: &Graph) -> Vec<Vec<Module>> {
    tangles(graph)
        .iter()
        .map(|c| cycle_within(graph, c))
        .collect()
}

/// The strongly connected components of more than one module: the modules each of which
/// reaches every other through imports, sorted.
pub fn tangles(graph: &Graph) -> Vec<Vec<Module>> {
    components(graph)
        .into_iter()
        .filter(|c| c.len() > 1)
        .collect()
}

/// The graph between siblings: each edge `m -> n` between modules neither of which contains
/// the other becomes an edge between the two children of their closest common ancestor that
/// hold them (`a::x -> b::y` is `a -> b`; `p::a::x -> p::b` is `p::a -> p::b`), and edges
/// between a module and its own parent or child are left out. Its cycles are the import
/// cycles between modules of one level, each taken whole with the modules inside it: a
/// child may use its parent's items (Rust gives it their private ones for that) and its
/// parent the child's, but two siblings never both use each other, directly or around a loop.
pub fn siblings(graph: &Graph) -> Graph {
    let mut lifted = Graph::new();
    for (from, targets) in graph {
        for to in targets {
            let common = from.iter().zip(to).take_while(|(a, b)| a == b).count();
            if common == from.len() || common == to.len() {
                continue;
            }
            let (a, b) = (from[..=common].to_vec(), to[..=common].to_vec());
            lifted.entry(b.clone()).or_default();
            lifted.entry(a).or_default().insert(b);
        }
    }
    lifted
}

/// `cycles` as lines such as `acl::stream -> acl::graph -> acl::stream`, for a failure message.
pub fn describe(cycles: &[Vec<Module>]) -> String {
    cycles
        .iter()
        .map(|c| c.iter().map(|m| name(m)).collect::<Vec<_>>().join(" -> "))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `acl::stream`, or `crate` for the root.
pub fn name(module: &[String]) -> String {
    if module.is_empty() {
        "crate".into()
    } else {
        module.join("::")
    }
}

/// Every `.rs` file under `dir`, sorted so that messages are stable.
pub fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            collect(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `src/hccl/collective.rs` is `["hccl", "collective"]`; a `mod.rs` is its folder's module;
/// `lib.rs` and `main.rs` are the root.
pub fn module_path(src: &Path, file: &Path) -> Module {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Module = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if parts
        .last()
        .is_some_and(|p| p == "mod" || (parts.len() == 1 && (p == "lib" || p == "main")))
    {
        parts.pop();
    }
    parts
}

/// The code with line comments removed (doc comments included).
pub fn without_comments(code: &str) -> String {
    code.lines()
        .map(|line| line.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The code with every `#[cfg(test)]` item removed (a block item, or one ending in `;`).
pub fn without_test_items(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    // `#[cfg(test)]`, and `#[cfg(all(test, ..))]` (a test that needs a feature too).
    while let Some(at) = ["#[cfg(test)]", "#[cfg(all(test,"]
        .iter()
        .filter_map(|marker| rest.find(marker))
        .min()
    {
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

/// Every path in `code` (the code of `module`) that starts at `crate::`, `super::`, `self::`
/// or a child module the code declares, made absolute, with groups expanded. A `super` that
/// climbs above the root is dropped.
pub fn named_paths(code: &str, module: &[String]) -> Vec<Module> {
    paths_with_children(code, module, &declared_children(code))
}

fn paths_with_children(code: &str, module: &[String], children: &[String]) -> Vec<Module> {
    let bytes = code.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    while i < code.len() {
        let word_start = i == 0 || !is_path_char(bytes[i - 1]);
        if !word_start {
            i += 1;
            continue;
        }
        let rest = &code[i..];
        let (base, tail): (Option<Module>, &str) = if let Some(t) = rest.strip_prefix("crate::") {
            (Some(Vec::new()), t)
        } else if rest.starts_with("super::") {
            let mut t = rest;
            let mut ups = 0;
            while let Some(s) = t.strip_prefix("super::") {
                t = s;
                ups += 1;
            }
            let base = (ups <= module.len()).then(|| module[..module.len() - ups].to_vec());
            (base, t)
        } else if let Some(t) = rest.strip_prefix("self::") {
            (Some(module.to_vec()), t)
        } else if children.iter().any(|c| starts_with_segment(rest, c)) {
            (Some(module.to_vec()), rest)
        } else {
            (None, "")
        };
        if let Some(base) = base {
            for rel in expand(tail) {
                let mut path = base.clone();
                path.extend(rel.into_iter().filter(|s| s != "self"));
                found.push(path);
            }
            // Skip the whole path, so that a group's items are not read again as paths.
            i += rest.len() - tail.len() + path_len(tail);
        } else {
            i += 1;
        }
    }
    found.retain(|p| !p.is_empty());
    found
}

fn is_path_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b':'
}

/// Whether `text` starts with the path segment `seg` followed by `::`.
fn starts_with_segment(text: &str, seg: &str) -> bool {
    text.strip_prefix(seg).is_some_and(|t| t.starts_with("::"))
}

/// The length of the path `text` starts with (identifiers, `::` and a group).
fn path_len(text: &str) -> usize {
    let mut end = 0;
    let bytes = text.as_bytes();
    while end < text.len() {
        if bytes[end] == b'{' {
            return end + matching_brace(&text[end..]) + 1;
        }
        if !is_path_char(bytes[end]) {
            break;
        }
        end += 1;
    }
    end
}

/// The modules a file declares as children (`mod x;` or `mod x {`), tests aside.
fn declared_children(code: &str) -> Vec<String> {
    code.split(';')
        .flat_map(|s| s.split('{'))
        .filter_map(|s| {
            let words: Vec<&str> = s.split_whitespace().collect();
            let at = words.iter().rposition(|w| *w == "mod")?;
            (at + 2 == words.len()).then(|| words[at + 1].to_string())
        })
        .filter(|m| m != "tests")
        .collect()
}

/// The relative paths a path tail names: `a::b` is `[[a, b]]`, `a::{b, c::{d}}` is
/// `[[a, b], [a, c, d]]`. Each stops at its last identifier (`*` and `as` ignored).
fn expand(tail: &str) -> Vec<Module> {
    let mut prefix = Vec::new();
    let mut rest = tail.trim_start();
    loop {
        if let Some(group) = rest.strip_prefix('{') {
            let inner = &group[..matching_brace(rest) - 1];
            return top_level_items(inner)
                .into_iter()
                .filter(|item| !item.is_empty())
                .flat_map(expand)
                .map(|rel| prefix.iter().cloned().chain(rel).collect())
                .collect();
        }
        let ident = first_ident(rest);
        if ident.is_empty() {
            break;
        }
        rest = &rest[ident.len()..];
        prefix.push(ident);
        match rest.strip_prefix("::") {
            Some(r) => rest = r,
            None => break,
        }
    }
    vec![prefix]
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
    text.chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect()
}

/// The strongly connected components of `graph` (Tarjan's algorithm, iterative).
fn components(graph: &Graph) -> Vec<Vec<Module>> {
    let nodes: Vec<&Module> = graph.keys().collect();
    let index_of: BTreeMap<&Module, usize> =
        nodes.iter().enumerate().map(|(i, m)| (*m, i)).collect();
    let succ: Vec<Vec<usize>> = nodes
        .iter()
        .map(|m| {
            graph[*m]
                .iter()
                .filter_map(|t| index_of.get(t).copied())
                .collect()
        })
        .collect();
    let n = nodes.len();
    let (mut index, mut low, mut on_stack) = (vec![usize::MAX; n], vec![0; n], vec![false; n]);
    let (mut stack, mut out, mut next) = (Vec::new(), Vec::new(), 0);
    for root in 0..n {
        if index[root] != usize::MAX {
            continue;
        }
        // Each frame: a node and how many of its successors it has visited.
        let mut frames = vec![(root, 0)];
        index[root] = next;
        low[root] = next;
        next += 1;
        stack.push(root);
        on_stack[root] = true;
        while let Some(&mut (v, ref mut k)) = frames.last_mut() {
            if let Some(&w) = succ[v].get(*k) {
                *k += 1;
                if index[w] == usize::MAX {
                    index[w] = next;
                    low[w] = next;
                    next += 1;
                    stack.push(w);
                    on_stack[w] = true;
                    frames.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            frames.pop();
            if let Some(&(parent, _)) = frames.last() {
                low[parent] = low[parent].min(low[v]);
            }
            if low[v] == index[v] {
                let mut component = Vec::new();
                while let Some(w) = stack.pop() {
                    on_stack[w] = false;
                    component.push(nodes[w].clone());
                    if w == v {
                        break;
                    }
                }
                component.sort();
                out.push(component);
            }
        }
    }
    out.sort();
    out
}

/// One cycle through the first module of `component`, by a breadth-first search inside it.
fn cycle_within(graph: &Graph, component: &[Module]) -> Vec<Module> {
    let inside: BTreeSet<&Module> = component.iter().collect();
    let start = &component[0];
    let mut came_from: BTreeMap<&Module, &Module> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(m) = queue.pop_front() {
        for t in graph[m].iter().filter(|t| inside.contains(t)) {
            if t == start {
                // Walk back from `m` to `start`, then read it forwards and close the loop.
                let mut path = vec![m.clone()];
                let mut at = m;
                while at != start {
                    at = came_from[at];
                    path.push(at.clone());
                }
                path.reverse();
                path.push(start.clone());
                return path;
            }
            if t != start && !came_from.contains_key(t) {
                came_from.insert(t, m);
                queue.push_back(t);
            }
        }
    }
    unreachable!("a strongly connected component has a cycle through each member")
}
