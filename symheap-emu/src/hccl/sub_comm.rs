//! `HcclCreateSubCommConfig`: a sub-communicator split from a global one, as hicann/hcomm
//! documents it (`docs/zh/api_ref/comm_mgr_c/HcclCreateSubCommConfig.md`) and implements its
//! checks (`src/legacy/ascend910/framework/op_base/src/op_base.cc`,
//! `topoinfo_ranktable_partition.cc`, and the world-group rule of `op_base_v2.cc`).
//!
//! The call exchanges nothing through the global communicator: only the members meet, at a
//! rendezvous whose name and key are derived from the global communicator's key and the
//! sub-communicator's name (so nobody outside the global group can compute them). Whichever
//! member comes first runs its hub (the others find its name bound, and check that a process
//! of their own user holds it before they send anything); then the members compare their
//! calls and fail alike on any difference.

use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::Arc;

use crate::sys::{HcclCommConfig, HcclResult};

use crate::acl::device;
use crate::base::errors::{HcclRes, hccl_fail, para};
use crate::base::handle::CommHandle;
use crate::hccl::comm::{self, Comm, Meeting, Member, Settings};
use crate::hccl::self_hosted::{self, Purpose};
use crate::hccl::{host_call, names};
use crate::ipc::keyed;
use crate::ipc::wire::{Reader, Wire, Writer};

/// The `subCommId` of a rank that takes no part (with `rankIds == NULL`).
pub(crate) const NOT_A_MEMBER: u64 = 0xFFFF_FFFF;

/// What one rank passed to `HcclCreateSubCommConfig`, its pointers read.
pub(crate) struct Request {
    pub(crate) rank_ids: Vec<u32>,
    pub(crate) sub_comm_id: u64,
    pub(crate) sub_rank: u32,
    pub(crate) config: HcclCommConfig,
}

/// `HcclCreateSubCommConfig` for a member, after the checks that need no communicator: the
/// checks that do, then the members' rendezvous. The new communicator's handle.
pub(crate) fn create(global: &Comm, req: &Request) -> HcclRes<CommHandle> {
    if global.parent.is_some() {
        // As `HcclCreateSubCommConfigV2` answers a communicator that is not the world group.
        return hccl_fail(
            HcclResult::HCCL_E_INTERNAL,
            "a sub-communicator cannot be split again: split from the global communicator",
        );
    }
    let n = req.rank_ids.len() as u32;
    check_rank_ids(global, &req.rank_ids, req.sub_rank)?;
    let settings = comm::settings(&req.config, n)?;
    let name = comm::comm_name(&req.config).unwrap_or_else(|| {
        let mut name = global.name.clone();
        name.extend_from_slice(format!("_sub_{}", req.sub_comm_id).as_bytes());
        name
    });
    if name == global.name {
        return hccl_fail(
            HcclResult::HCCL_E_INTERNAL,
            "the sub-communicator's name is the global communicator's",
        );
    }
    let name_claim = names::claim(global.handle, &name)?;
    let meeting = meeting_of(&global.meeting, &name);
    let member = Member {
        n,
        rank: req.sub_rank,
        name: name.clone(),
        parent: Some(global.handle),
        // A sub-communicator's rank is where the global communicator's is.
        place: global.topology.place(global.rank),
    };
    let handle = comm::form(
        &member,
        &settings,
        meeting.clone(),
        |place, staging, timeout| {
            self_hosted::serve_or_join(
                &meeting,
                n,
                req.sub_rank,
                place,
                staging,
                timeout,
                &SUB_COMM,
            )
        },
    )?;
    let compared = comm::lookup(handle).and_then(|sub| compare_calls(&sub, req, &settings));
    if let Err(e) = compared {
        let _ = comm::destroy(handle);
        return Err(e);
    }
    name_claim.keep();
    Ok(handle)
}

/// `rankIds` as HCCL checks them (`GenerateSubRankTable`): no rank twice, each a rank of the
/// global communicator. And, where HCCL trusts the caller, `rankIds[subCommRankId]` must be
/// this rank: a rank that named another's index would take its place.
fn check_rank_ids(global: &Comm, ids: &[u32], sub_rank: u32) -> HcclRes {
    for (i, &id) in ids.iter().enumerate() {
        if ids[..i].contains(&id) {
            return para(format!("rankIds: rank {id} appears twice"));
        }
        if id >= global.n {
            return para(format!(
                "rankIds[{i}] = {id} is not a rank of the global communicator of {} ranks",
                global.n
            ));
        }
    }
    let mine = ids[sub_rank as usize];
    if mine != global.rank {
        return para(format!(
            "rankIds[subCommRankId = {sub_rank}] is {mine}, but this is rank {} of the global \
             communicator: subCommRankId must be this rank's index in rankIds",
            global.rank
        ));
    }
    Ok(())
}

/// What a sub-communicator's members say when their rendezvous fails.
const SUB_COMM: Purpose = Purpose {
    what: "the sub-communicator's rendezvous",
    remedy: "pass another subCommId (or hcclCommName)",
    same: "a sub-communicator of the same name",
};

/// Where the members of sub-communicator `name` of the group that met at `global` meet: a
/// socket name and a key, both derived from the global key and the name with a keyed hash
/// ([`keyed::sub_meeting`]). Only the global group's members know the key, so only they can
/// compute the name (and bind it first) or join.
fn meeting_of(global: &Meeting, name: &[u8]) -> Meeting {
    let (name, session) = keyed::sub_meeting(&global.name, &global.session, name);
    Meeting { name, session }
}

/// What the members compare: their `rankIds` and the config fields the emulator uses (the
/// hub already compared `rankNum`, the staging buffers' sizes compare `hcclBufferSize`).
#[derive(PartialEq, Eq)]
struct Call {
    rank_ids: Vec<u32>,
    sub_comm_id: u64,
    timeout_ms: u64,
    stride: u64,
    expansion: u64,
}

impl Wire for Call {
    const TAG: u8 = 40;
    fn put<'a>(&'a self, w: &mut Writer, _: &mut Vec<BorrowedFd<'a>>) {
        w.u32(self.rank_ids.len() as u32);
        for &id in &self.rank_ids {
            w.u32(id);
        }
        w.u64(self.sub_comm_id)
            .u64(self.timeout_ms)
            .u64(self.stride)
            .u64(self.expansion);
    }
    fn get(r: &mut Reader<'_>, _: &mut dyn Iterator<Item = OwnedFd>) -> Option<Self> {
        let len = r.u32()?;
        let rank_ids = (0..len).map(|_| r.u32()).collect::<Option<_>>()?;
        Some(Call {
            rank_ids,
            sub_comm_id: r.u64()?,
            timeout_ms: r.u64()?,
            stride: r.u64()?,
            expansion: r.u64()?,
        })
    }
}

/// The members' first step: every member's call, compared with sub-rank 0's. Any difference
/// fails every member alike, naming the first rank that differs and what.
fn compare_calls(sub: &Arc<Comm>, req: &Request, settings: &Settings) -> HcclRes {
    let mine = Call {
        rank_ids: req.rank_ids.clone(),
        // With an `hcclCommName`, HCCL does not look at `subCommId`.
        sub_comm_id: match comm::comm_name(&req.config) {
            Some(_) => 0,
            None => req.sub_comm_id,
        },
        timeout_ms: settings.timeout.as_millis() as u64,
        stride: settings.stride as u64,
        expansion: settings.expansion as u64,
    };
    let seq = sub.next_host_seq();
    let all = host_call::exchange(sub, seq, 0, mine, "HcclCreateSubCommConfig")?;
    let first = &all[0];
    let Some((k, other)) = all.iter().enumerate().find(|(_, c)| *c != first) else {
        return Ok(());
    };
    let what = if other.rank_ids != first.rank_ids {
        format!("rankIds {:?}, rank 0 {:?}", other.rank_ids, first.rank_ids)
    } else if other.sub_comm_id != first.sub_comm_id {
        format!(
            "subCommId {}, rank 0 {}",
            other.sub_comm_id, first.sub_comm_id
        )
    } else if other.timeout_ms != first.timeout_ms {
        format!(
            "an exec timeout of {} ms, rank 0 {} ms",
            other.timeout_ms, first.timeout_ms
        )
    } else if other.stride != first.stride {
        format!(
            "hcclSymWinMaxMemSizePerRank {} GiB, rank 0 {} GiB",
            other.stride >> 30,
            first.stride >> 30
        )
    } else {
        "another hcclOpExpansionMode than rank 0".to_owned()
    };
    para(format!(
        "HcclCreateSubCommConfig: sub-communicator rank {k} passed {what}: every member must pass \
         the same rankNum, rankIds, subCommId and config"
    ))
}

/// The checks of `HcclCreateSubCommConfig` before the global communicator is looked at, in
/// HCCL's order: the device, `subComm`, the non-member form (`Ok(false)`: nothing to do),
/// `rankIds` and `subCommId` both valid, `rankNum`, `subCommRankId`.
pub(crate) fn check_call(
    has_out: bool,
    rank_ids_null: bool,
    sub_comm_id: u64,
    rank_num: u32,
    sub_rank: u32,
) -> HcclRes<bool> {
    if let Err(e) = device::current() {
        return hccl_fail(HcclResult::HCCL_E_RUNTIME, e.msg);
    }
    if !has_out {
        return hccl_fail(HcclResult::HCCL_E_PTR, "subComm is NULL");
    }
    match (rank_ids_null, sub_comm_id == NOT_A_MEMBER) {
        (true, true) => return Ok(false),
        (false, false) => {}
        _ => {
            return para(format!(
                "rankIds is {} but subCommId is {sub_comm_id:#x}: a member passes both, a rank \
                 outside passes rankIds = NULL and subCommId = 0xFFFFFFFF",
                if rank_ids_null { "NULL" } else { "not NULL" }
            ));
        }
    }
    if rank_num == 0 {
        return para("rankNum is 0");
    }
    if sub_rank >= rank_num {
        return para(format!(
            "subCommRankId {sub_rank} is not below rankNum {rank_num}"
        ));
    }
    Ok(true)
}

#[cfg(test)]
mod tests;
