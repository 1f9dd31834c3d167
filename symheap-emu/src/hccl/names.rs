//! The names of live sub-communicators, unique per global communicator (HCCL keeps one map
//! per device context): claimed while `HcclCreateSubCommConfig` makes one ([`crate::hccl::sub_comm`]),
//! released when the making fails or `HcclCommDestroy` destroys it. Below both, so that
//! destroying a communicator need not know how sub-communicators are made.

use crate::base::errors::{HcclRes, para};
use crate::base::handle::CommHandle;
use crate::base::lock::{RankedMutex, lock, ranks};

/// The live sub-communicator names of each global communicator in this process: a name is
/// unique per global communicator (HCCL keeps one map per device context).
static NAMES: RankedMutex<Vec<(CommHandle, Vec<u8>)>> = RankedMutex::new(ranks::NAMES, Vec::new());

/// Forgets the name of `parent`'s sub-communicator `name`, destroyed, so that it may be made
/// again.
pub(crate) fn forget(parent: CommHandle, name: &[u8]) {
    lock(&NAMES).retain(|(p, n)| !(*p == parent && n == name));
}

/// A name claimed for a sub-communicator being made: released when the making fails.
pub(crate) struct Claim {
    parent: CommHandle,
    name: Vec<u8>,
    kept: bool,
}

impl Claim {
    /// The sub-communicator was made: its destroy releases the name ([`forget`]).
    pub(crate) fn keep(mut self) {
        self.kept = true;
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if !self.kept {
            forget(self.parent, &self.name);
        }
    }
}

/// Claims `name` among the live sub-communicators of `parent` (`HCCL_E_PARA` when taken, as
/// HCCL answers a name already in its group map).
pub(crate) fn claim(parent: CommHandle, name: &[u8]) -> HcclRes<Claim> {
    let mut names = lock(&NAMES);
    if names.iter().any(|(p, n)| *p == parent && n == name) {
        return para(format!(
            "the sub-communicator name {:?} is in use: destroy it first, or pass another \
             subCommId (or hcclCommName)",
            String::from_utf8_lossy(name)
        ));
    }
    names.push((parent, name.to_vec()));
    Ok(Claim {
        parent,
        name: name.to_vec(),
        kept: false,
    })
}
