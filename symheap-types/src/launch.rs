//! The launch protocol: the environment variables a launcher (`symheap-run`, in
//! `symheap-tools`) sets for each rank's process, which `symheap`'s `Comm::from_env` reads,
//! and the emulator's ranks write to. Defined here once, so that every side names the same
//! variable.

/// This process's rank, `0..WORLD_SIZE`.
pub const RANK: &str = "SYMHEAP_RANK";

/// The number of ranks in the job.
pub const WORLD_SIZE: &str = "SYMHEAP_WORLD_SIZE";

/// The device this rank uses (`symheap-run` sets its local rank, its rank within its node;
/// default: the rank).
pub const DEVICE: &str = "SYMHEAP_DEVICE";

/// The emulated node this process runs on, `0..nodes` (`symheap-run --nnodes` sets it; the
/// emulator's topology reads it; default 0).
pub const NODE: &str = "SYMHEAP_EMU_NODE";

/// The path of the root-info file: rank 0 publishes the communicator's root info there and
/// the other ranks read it. Each job needs a fresh path.
pub const ROOT_INFO: &str = "SYMHEAP_ROOT_INFO";

/// The file in which the emulator's ranks say whom a failure blames, one line
/// `blamed-pid reporter-pid why` each, in the order they failed: a rank's peers usually exit
/// before it does when they fail because of it, so exit times alone do not say who failed
/// first. The launcher creates the file (mode 0600) and reads it; a rank never creates it.
pub const BLAME: &str = "SYMHEAP_RUN_BLAME";

/// The directory of an elastic job (`symheap-run --elastic`), where the launcher records the
/// ranks it lost and the survivors meet to form their next world: private to the run (mode
/// 0700). Unset in a job that ends at its first lost rank.
pub const ELASTIC_DIR: &str = "SYMHEAP_ELASTIC_DIR";

/// The file in [`ELASTIC_DIR`] where the launcher records its `loss`-th loss (1, 2, ...):
/// the launch ranks ([`RANK`]) of the processes that ended abnormally then, one decimal per
/// line, ascending. Written beside and renamed into place, so a reader never sees half of it.
pub fn lost_record(loss: u32) -> String {
    format!("lost-{loss}")
}

/// The file in [`ELASTIC_DIR`] where the first survivor of the `loss`-th loss publishes the
/// root info of the survivors' world.
pub fn survivors_root(loss: u32) -> String {
    format!("root-{loss}")
}

/// Every variable of the protocol.
pub const ALL: [&str; 7] = [
    RANK,
    WORLD_SIZE,
    DEVICE,
    NODE,
    ROOT_INFO,
    BLAME,
    ELASTIC_DIR,
];

#[cfg(test)]
mod tests {
    /// The names are distinct and in symheap's namespace.
    #[test]
    fn names_are_distinct_symheap_variables() {
        let mut names = super::ALL.to_vec();
        assert!(names.iter().all(|n| n.starts_with("SYMHEAP_")));
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), super::ALL.len());
    }
}
