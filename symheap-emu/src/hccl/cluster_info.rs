//! `HcclCommInitClusterInfo` / `HcclCommInitClusterInfoConfig`: a communicator of every rank
//! of a rank-table file, formed without a root info.
//!
//! As CANN (hicann/hcomm `src/legacy/ascend910/framework/op_base/src/op_base.cc`): the config
//! is checked, the file loaded (waiting while its `status` is not `"completed"`), a second
//! rank-table communicator on a device refused, then the table parsed and this rank's place in
//! it checked ([`crate::hccl::rank_table`]). Then the ranks meet: every rank of one job reads
//! the same table, so they meet at a rendezvous whose name and key are derived from the
//! table's canonical contents and the user's uid ([`keyed::rank_table_meeting`]); whichever
//! rank comes first hosts it ([`self_hosted`]).

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::sys::{HcclCommConfig, HcclResult};

use crate::acl::{device, node};
use crate::base::errors::{HcclRes, hccl_fail, para};
use crate::base::handle::CommHandle;
use crate::base::json::Json;
use crate::hccl::comm::{self, Meeting, Member};
use crate::hccl::rank_table::{self, RankTable};
use crate::hccl::self_hosted::{self, Purpose};
use crate::ipc::keyed;

/// The longest path CANN takes, its NUL included (`HcclCommInitClusterInfo.md`).
pub(crate) const PATH_MAX_BYTES: usize = 4096;
/// The largest rank table read: a table of 384 ranks is about 100 KiB.
const MAX_TABLE_BYTES: u64 = 64 << 20;
/// How often a table whose `status` is not `"completed"` is read again (CANN: each second).
const STATUS_POLL: Duration = Duration::from_secs(1);
/// The name of a rank-table communicator without an `hcclCommName`: HCCL's world group.
const WORLD_GROUP: &str = "hccl_world_group";

/// What a rank-table job's ranks say when their rendezvous fails.
const RANK_TABLE: Purpose = Purpose {
    what: "the rank table's rendezvous",
    remedy: "another job of this user with the same rank table may be running, or another \
             user's process holds the name: change the table (a server_id, say)",
    same: "a communicator of the same rank table",
};

/// `HcclCommInitClusterInfoConfig` after the null checks: `path` is `clusterInfo` without its
/// NUL.
pub(crate) fn init(path: &[u8], rank: u32, config: &HcclCommConfig) -> HcclRes<CommHandle> {
    let device = device::current().or_else(|e| hccl_fail(HcclResult::HCCL_E_RUNTIME, e.msg))?;
    // The config is loaded before the table, as CANN's `commConfig.Load`.
    let exec = comm::settings(config, 1)?.timeout;
    let doc = load(path, comm::connect_timeout(exec)?)?;
    let claim = DeviceClaim::take(device)?;
    let table = rank_table::parse(&doc, device::count())?;
    table.check_rank(rank, device.id)?;
    let n = table.ranks.len() as u32;
    let settings = comm::settings(config, n)?;
    let meeting = meeting_of(&table);
    let name = comm::comm_name(config).unwrap_or_else(|| WORLD_GROUP.as_bytes().to_vec());
    // Where this rank runs, as the table says: its node (server) and SuperPoD.
    let per_pod = node::nodes_per_superpod().or_else(para)?;
    let place = table.places(per_pod)[rank as usize];
    let member = Member {
        n,
        rank,
        name,
        parent: None,
        place: node::Place {
            node: place.node,
            superpod: place.super_pod,
        },
    };
    let handle = comm::form(
        &member,
        &settings,
        meeting.clone(),
        |place, staging, timeout| {
            self_hosted::serve_or_join(&meeting, n, rank, place, staging, timeout, &RANK_TABLE)
        },
    )?;
    claim.keep(handle);
    Ok(handle)
}

/// Where the ranks of `table` meet ([`keyed::rank_table_meeting`]).
fn meeting_of(table: &RankTable) -> Meeting {
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    let (name, session) = keyed::rank_table_meeting(uid, &table.canonical());
    Meeting { name, session }
}

/// A load failure: CANN's init calls answer every one (`HcomLoadRanktableFile`) with
/// `HCCL_E_INTERNAL`.
fn unloadable<T>(path: &str, why: impl std::fmt::Display) -> HcclRes<T> {
    hccl_fail(
        HcclResult::HCCL_E_INTERNAL,
        format!("cannot load the rank table {path:?}: {why}"),
    )
}

/// Reads the rank table at `path` until its `status` is `"completed"`, for at most `wait`:
/// its document.
fn load(path: &[u8], wait: Duration) -> HcclRes<Json> {
    let shown = String::from_utf8_lossy(path).into_owned();
    if path.is_empty() {
        return unloadable(&shown, "clusterInfo is an empty path");
    }
    if path.len() >= PATH_MAX_BYTES {
        return unloadable(
            &shown,
            format!(
                "the path has {} bytes; at most {} are taken",
                path.len(),
                PATH_MAX_BYTES - 1
            ),
        );
    }
    // CANN's `CheckFilePath`: the file type is told by the name.
    if !path.ends_with(b".json") || path.ends_with(b"/.json") || path == b".json" {
        return unloadable(&shown, "the path must name a .json file");
    }
    let until = Instant::now() + wait;
    loop {
        let text = read_file(path, &shown)?;
        let doc = rank_table::completed(&text).map_err(|mut e| {
            e.msg = format!("{shown:?}: {}", e.msg);
            e
        })?;
        if let Some(doc) = doc {
            return Ok(doc);
        }
        if Instant::now() + STATUS_POLL > until {
            return unloadable(
                &shown,
                format!(
                    "its \"status\" was not \"completed\" for {:.0} s (HCCL_CONNECT_TIMEOUT, or \
                     the exec timeout but at least 30 s)",
                    wait.as_secs_f64()
                ),
            );
        }
        std::thread::sleep(STATUS_POLL);
    }
}

/// The text of the file at `path`: a regular file (symbolic links followed: launchers mount
/// rank tables through them) of at most [`MAX_TABLE_BYTES`], in UTF-8. Opened without
/// blocking, so a FIFO planted at the path fails instead of hanging the rank.
fn read_file(path: &[u8], shown: &str) -> HcclRes<String> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::path::Path::new(std::ffi::OsStr::from_bytes(path));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .or_else(|e| unloadable(shown, e))?;
    let meta = file.metadata().or_else(|e| unloadable(shown, e))?;
    if !meta.is_file() {
        return unloadable(shown, "it is not a regular file");
    }
    if meta.len() > MAX_TABLE_BYTES {
        return unloadable(
            shown,
            format!(
                "it has {} bytes, more than a rank table's {MAX_TABLE_BYTES}",
                meta.len()
            ),
        );
    }
    let mut bytes = Vec::new();
    Read::take(&file as &File, MAX_TABLE_BYTES + 1)
        .read_to_end(&mut bytes)
        .or_else(|e| unloadable(shown, e))?;
    String::from_utf8(bytes).or_else(|_| unloadable(shown, "it is not UTF-8 text"))
}

/// The devices with a rank-table communicator in this process: HCCL keeps one per device
/// (`CheckOpBasedHcom`: a second init while one is live is `HCCL_E_UNAVAIL`). One slot per
/// device of every node (slot `node * MAX_DEVICES + id`, made at the first rank-table init and
/// zero pages until used); each holds the live communicator's handle, [`FORMING`] while one is
/// being made, or 0.
fn device_comms() -> &'static [AtomicUsize] {
    static SLOTS: OnceLock<Box<[AtomicUsize]>> = OnceLock::new();
    SLOTS.get_or_init(|| {
        let slots = node::MAX_NODES as usize * device::MAX_DEVICES;
        (0..slots).map(|_| AtomicUsize::new(0)).collect()
    })
}
/// A slot's value while its device's communicator is being made.
const FORMING: usize = usize::MAX;

/// A device claimed for a rank-table communicator being made: released when the making fails.
struct DeviceClaim {
    slot: Option<&'static AtomicUsize>,
}

impl DeviceClaim {
    /// Claims `device` (`HCCL_E_UNAVAIL` while another rank-table communicator of this process
    /// lives on it, or is being made).
    fn take(device: device::Device) -> HcclRes<DeviceClaim> {
        let slot = &device_comms()[device.node as usize * device::MAX_DEVICES + device.id as usize];
        let mut seen = 0;
        loop {
            match slot.compare_exchange(seen, FORMING, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Ok(DeviceClaim { slot: Some(slot) }),
                Err(FORMING) => {
                    return hccl_fail(
                        HcclResult::HCCL_E_UNAVAIL,
                        format!(
                            "another thread is making a rank-table communicator on {device}: \
                             HCCL makes one per device"
                        ),
                    );
                }
                // A destroyed communicator's handle: the device is free again.
                Err(handle) if !comm::is_live(CommHandle::from_raw(handle)) => seen = handle,
                Err(handle) => {
                    return hccl_fail(
                        HcclResult::HCCL_E_UNAVAIL,
                        format!(
                            "{device} already has a rank-table communicator \
                             ({handle:#x}): HCCL makes one per device; destroy it first"
                        ),
                    );
                }
            }
        }
    }

    /// The communicator was made: the device stays claimed until it is destroyed.
    fn keep(mut self, handle: CommHandle) {
        if let Some(slot) = self.slot.take() {
            slot.store(handle.raw(), Ordering::Release);
        }
    }
}

impl Drop for DeviceClaim {
    fn drop(&mut self) {
        if let Some(slot) = self.slot {
            slot.store(0, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests;
