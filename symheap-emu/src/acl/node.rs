//! Where the calling rank is: its emulated node (a server of 16 NPUs, as an Atlas A3 node) and
//! its SuperPoD (the HCCS domain whose nodes share symmetric windows; a CloudMatrix384 is 24
//! nodes). A process is on node [`NODE_ENV`] (default 0); a thread may be put elsewhere with
//! [`set_thread_node`], so that the threads of one process play ranks of many nodes. The
//! SuperPoD of a rank is its node / [`NODES_PER_SUPERPOD_ENV`] (default 24) unless given
//! explicitly (a rank table names it).
//!
//! Device ids are per node ([`crate::acl::device`]): device 0 of node 0 and device 0 of node 1
//! are different emulated devices. The communicators learn every rank's place at init
//! ([`crate::hccl::topology`]).

use std::cell::Cell;
use std::sync::OnceLock;

use crate::sys::ACL_ERROR_INVALID_PARAM;

use crate::base::errors::{AclResult, acl_fail};

/// The environment variable naming the emulated node of this process (0-based; default 0).
pub const NODE_ENV: &str = "SYMHEAP_EMU_NODE";

/// The environment variable saying how many nodes a SuperPoD has (default 24, as a
/// CloudMatrix384: 24 nodes of 16 NPUs).
pub const NODES_PER_SUPERPOD_ENV: &str = "SYMHEAP_EMU_NODES_PER_SUPERPOD";

/// The most nodes a job can have: one rank each at the rendezvous's limit of 4096 ranks.
pub const MAX_NODES: u32 = 4096;

/// A CloudMatrix384 SuperPoD: 24 nodes.
const DEFAULT_NODES_PER_SUPERPOD: u32 = 24;

/// Where one rank is: its node and its SuperPoD.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Place {
    /// The emulated node (server), 0-based.
    pub node: u32,
    /// The SuperPoD, 0-based.
    pub superpod: u32,
}

/// A thread's own place, set by [`set_thread_node`]: its node, and its SuperPoD when given.
#[derive(Clone, Copy)]
struct ThreadPlace {
    node: u32,
    superpod: Option<u32>,
}

thread_local! {
    static THREAD_PLACE: Cell<Option<ThreadPlace>> = const { Cell::new(None) };
}

/// Puts the calling thread on emulated node `node`, in SuperPoD `superpod` (or, when `None`,
/// node / `SYMHEAP_EMU_NODES_PER_SUPERPOD`), whatever `SYMHEAP_EMU_NODE` says: for jobs whose
/// ranks are threads of one process, each playing a rank of its own node. Call it before
/// `aclrtSetDevice`: a device id then names a device of that node, and a communicator made on
/// the thread knows the rank is there.
///
/// # Errors
/// A message when `node` or `superpod` is not below 4096 ([`MAX_NODES`]); nothing changes.
pub fn set_thread_node(node: u32, superpod: Option<u32>) -> Result<(), String> {
    if node >= MAX_NODES {
        return Err(format!("node {node} is not in 0..{MAX_NODES}"));
    }
    if let Some(pod) = superpod.filter(|&p| p >= MAX_NODES) {
        return Err(format!("SuperPoD {pod} is not in 0..{MAX_NODES}"));
    }
    THREAD_PLACE.with(|p| p.set(Some(ThreadPlace { node, superpod })));
    Ok(())
}

/// Puts the calling thread back on its process's node (`SYMHEAP_EMU_NODE`), undoing
/// [`set_thread_node`]. A device the thread is bound to stays bound.
pub fn clear_thread_node() {
    THREAD_PLACE.with(|p| p.set(None));
}

/// The node `value` of [`NODE_ENV`] names: unset or empty is 0; otherwise a whole number
/// below [`MAX_NODES`], or an error saying what is wrong.
fn parse_node(value: Option<&str>) -> Result<u32, String> {
    let Some(text) = value.map(str::trim).filter(|t| !t.is_empty()) else {
        return Ok(0);
    };
    match text.parse::<u32>() {
        Ok(n) if n < MAX_NODES => Ok(n),
        _ => Err(format!(
            "{NODE_ENV}={text:?} is not a node: a whole number in 0..{MAX_NODES}"
        )),
    }
}

/// The SuperPoD size `value` of [`NODES_PER_SUPERPOD_ENV`] asks for: unset or empty is 24;
/// otherwise a whole number in `1..=MAX_NODES`, or an error saying what is wrong.
fn parse_nodes_per_superpod(value: Option<&str>) -> Result<u32, String> {
    let Some(text) = value.map(str::trim).filter(|t| !t.is_empty()) else {
        return Ok(DEFAULT_NODES_PER_SUPERPOD);
    };
    match text.parse::<u32>() {
        Ok(n) if (1..=MAX_NODES).contains(&n) => Ok(n),
        _ => Err(format!(
            "{NODES_PER_SUPERPOD_ENV}={text:?} is not a SuperPoD size: a whole number of nodes \
             in 1..={MAX_NODES}"
        )),
    }
}

/// This process's node ([`NODE_ENV`], read once), or why the variable is unusable.
fn process_node() -> Result<u32, String> {
    static NODE: OnceLock<Result<u32, String>> = OnceLock::new();
    NODE.get_or_init(|| parse_node(std::env::var(NODE_ENV).ok().as_deref()))
        .clone()
}

/// How many nodes a SuperPoD has ([`NODES_PER_SUPERPOD_ENV`], read once), or why the variable
/// is unusable.
pub(crate) fn nodes_per_superpod() -> Result<u32, String> {
    static PER_POD: OnceLock<Result<u32, String>> = OnceLock::new();
    PER_POD
        .get_or_init(|| {
            parse_nodes_per_superpod(std::env::var(NODES_PER_SUPERPOD_ENV).ok().as_deref())
        })
        .clone()
}

/// The calling thread's node: its own ([`set_thread_node`]) or its process's.
///
/// # Errors
/// `ACL_ERROR_INVALID_PARAM` naming [`NODE_ENV`] when the variable is set to something that
/// is not a node.
pub(crate) fn current_node() -> AclResult<u32> {
    if let Some(own) = THREAD_PLACE.with(Cell::get) {
        return Ok(own.node);
    }
    process_node().or_else(|why| acl_fail(ACL_ERROR_INVALID_PARAM, why))
}

/// The calling thread's place: its node ([`current_node`]) and its SuperPoD (the thread's
/// own, or node / nodes per SuperPoD).
///
/// # Errors
/// `ACL_ERROR_INVALID_PARAM` naming the variable when [`NODE_ENV`] or
/// [`NODES_PER_SUPERPOD_ENV`] is set to something unusable.
pub(crate) fn current_place() -> AclResult<Place> {
    let node = current_node()?;
    if let Some(ThreadPlace {
        superpod: Some(superpod),
        ..
    }) = THREAD_PLACE.with(Cell::get)
    {
        return Ok(Place { node, superpod });
    }
    let per_pod = nodes_per_superpod().or_else(|why| acl_fail(ACL_ERROR_INVALID_PARAM, why))?;
    Ok(Place {
        node,
        superpod: node / per_pod,
    })
}

/// `aclInit`'s check of the topology variables: an unusable [`NODE_ENV`] or
/// [`NODES_PER_SUPERPOD_ENV`] is an error there already, not only at the first device.
pub(crate) fn check_environment() -> AclResult {
    current_place().map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_variable_is_a_node_or_a_clear_error() {
        assert_eq!(parse_node(None), Ok(0));
        assert_eq!(parse_node(Some(" ")), Ok(0));
        assert_eq!(parse_node(Some("3")), Ok(3));
        assert_eq!(parse_node(Some(" 4095 ")), Ok(4095));
        for bad in ["4096", "-1", "x", "1.5", "0x2"] {
            let why = parse_node(Some(bad)).unwrap_err();
            assert!(why.contains(NODE_ENV) && why.contains(bad), "{why}");
        }
    }

    #[test]
    fn a_superpod_is_24_nodes_unless_the_variable_says_otherwise() {
        assert_eq!(parse_nodes_per_superpod(None), Ok(24));
        assert_eq!(parse_nodes_per_superpod(Some("1")), Ok(1));
        assert_eq!(parse_nodes_per_superpod(Some("4096")), Ok(4096));
        for bad in ["0", "4097", "two", "-4"] {
            let why = parse_nodes_per_superpod(Some(bad)).unwrap_err();
            assert!(why.contains(NODES_PER_SUPERPOD_ENV), "{why}");
        }
    }

    #[test]
    fn a_thread_s_own_place_wins_and_is_its_own() {
        std::thread::spawn(|| {
            // No variable is set in the unit tests: node 0, SuperPoD 0.
            assert_eq!(
                current_place().unwrap(),
                Place {
                    node: 0,
                    superpod: 0
                }
            );
            set_thread_node(49, None).unwrap();
            assert_eq!(
                current_place().unwrap(),
                Place {
                    node: 49,
                    superpod: 2
                }
            );
            set_thread_node(5, Some(7)).unwrap();
            assert_eq!(
                current_place().unwrap(),
                Place {
                    node: 5,
                    superpod: 7
                }
            );
            assert!(set_thread_node(4096, None).unwrap_err().contains("4096"));
            assert!(set_thread_node(1, Some(5000)).unwrap_err().contains("5000"));
            assert_eq!(current_node().unwrap(), 5, "a refused call changes nothing");
            std::thread::spawn(|| assert_eq!(current_node().unwrap(), 0))
                .join()
                .unwrap();
            clear_thread_node();
            assert_eq!(
                current_place().unwrap(),
                Place {
                    node: 0,
                    superpod: 0
                }
            );
        })
        .join()
        .unwrap();
    }
}
