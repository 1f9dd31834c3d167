//! The words every layer of symheap shares, in one crate below all of them (as `wgpu-types`
//! is below wgpu): which HCCL operation ([`Collective`]), which reduction ([`ReduceOp`]),
//! which element type ([`DataType`]), which path a collective takes and why it stages
//! ([`CollectivePath`], [`Staged`]), and the environment variables of the launch protocol
//! ([`launch`]).
//!
//! **The rule**: this crate depends on nothing of symheap's (its one optional dependency is
//! `serde`, behind the `serde` feature), and everything of symheap's that needs one of these
//! words takes it from here: `symheap-sys` (which converts them to their C values),
//! `symheap-emu`, `symheap` (which re-exports the enums at its root) and `symheap-tools`.
//! The test `depends_on_nothing_of_symheap_s` reads this crate's manifest and fails on any
//! dependency named `symheap…`; for the crates that use this one, Cargo would refuse the cycle
//! anyway. Nothing here knows about C types, devices or memory.
//!
//! With the `serde` feature every enum is `Serialize` / `Deserialize`; a [`Collective`] is
//! written as its C function's name (`"HcclAllReduce"`), the form pool snapshots have always
//! had.

mod collective;
mod collective_path;
mod data_type;
pub mod launch;
mod reduce_op;

pub use collective::Collective;
pub use collective_path::{CollectivePath, Staged};
pub use data_type::DataType;
pub use reduce_op::ReduceOp;

#[cfg(test)]
mod tests {
    /// The crate's rule: no dependency (normal, dev or build, on any target) on a crate of
    /// symheap's.
    #[test]
    fn depends_on_nothing_of_symheap_s() {
        let manifest = include_str!("../Cargo.toml");
        let mut section = "";
        let mut symheap = Vec::new();
        for line in manifest.lines().map(str::trim) {
            if line.starts_with('[') {
                section = line;
            } else if section.ends_with("dependencies]") && line.starts_with("symheap") {
                symheap.push(format!("{section} {line}"));
            }
        }
        assert!(symheap.is_empty(), "{symheap:?}");
        assert!(
            manifest.contains("[dependencies]"),
            "no [dependencies] section to check"
        );
    }
}
