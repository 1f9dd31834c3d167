//! The rank-table file of `HcclCommInitClusterInfo` / `HcclCommInitClusterInfoConfig`: its
//! formats, and the checks CANN makes of it, with CANN's codes.
//!
//! Formats, as hicann/hccl documents them (`docs/zh/user_guide/cluster_info_config/
//! rank_table_config_a3.md`, `_a2.md`, `_910.md`): version `"1.0"` (a `server_list` of
//! servers, each with its `device` list) and `"1.2"` (the same, plus `super_device_id` per
//! device and an optional `super_pod_list` that groups servers into SuperPoDs). Every value is
//! a JSON string, numbers included. The checks and their codes follow hicann/hcomm's legacy
//! (A2 / A3) parser: `src/legacy/ascend910/framework/common/src/topo/
//! topoinfo_ranktableParser.cc` (properties: missing `HCCL_E_NOT_FOUND`, not a string
//! `HCCL_E_PARA`), `topoinfo_ranktableConcise.cc` (servers, devices, SuperPoDs, this rank),
//! and `src/legacy/ascend910/framework/common/src/config.cc` (`CfgGetClusterInfo`: the
//! version; `CheckRankListInfo`: rank ids `0..n`).

use std::net::IpAddr;

use crate::sys::HcclResult;

use crate::base::errors::{HcclRes, hccl_fail, para};
use crate::base::json::Json;

/// The longest `server_id` CANN accepts (`SERVERID_MAX_LENGTH`).
const SERVER_ID_MAX: usize = 64;

/// One rank of a table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RankEntry {
    pub(crate) rank: u32,
    /// `device_id`: the device on its server.
    pub(crate) device: u32,
    /// Its server's index in `server_list`: its node.
    pub(crate) server: u32,
    /// Its SuperPoD's index in `super_pod_list`, when the table has one.
    pub(crate) super_pod: Option<u32>,
    /// `super_device_id` (version 1.2).
    pub(crate) super_device: Option<u32>,
    /// `device_ip`, split at commas.
    pub(crate) device_ips: Vec<String>,
}

/// Where a rank runs: the record the emulator's topology takes for every rank of a
/// rank-table communicator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Place {
    pub(crate) rank: u32,
    /// The device on its node (`device_id`).
    pub(crate) device: u32,
    /// Its server's index in `server_list`.
    pub(crate) node: u32,
    /// Its SuperPoD: the index of the `super_pod_list` entry that lists its server, or, in a
    /// table without one, `node / nodes_per_super_pod`.
    pub(crate) super_pod: u32,
}

/// A rank table that passed the checks of its contents (the checks of one rank's place in it
/// are [`RankTable::check_rank`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RankTable {
    pub(crate) version: String,
    /// `server_id`s, in `server_list` order.
    pub(crate) servers: Vec<String>,
    /// `super_pod_id`s, in `super_pod_list` order, when the table has one.
    pub(crate) super_pods: Option<Vec<String>>,
    /// The ranks, sorted by rank id (as CANN sorts them).
    pub(crate) ranks: Vec<RankEntry>,
}

/// The `status` of a table: `Some(document)` once `"completed"`, `None` while not (CANN reads
/// the file again each second until it is). A file that is not JSON, or has no string
/// `status`, cannot be loaded: `HCCL_E_INTERNAL`, the code the init calls give for any load
/// failure (`HcomLoadRanktableFile`).
pub(crate) fn completed(text: &str) -> HcclRes<Option<Json>> {
    let doc = Json::parse(text).or_else(|e| {
        hccl_fail(
            HcclResult::HCCL_E_INTERNAL,
            format!("the rank table is not JSON: {e}"),
        )
    })?;
    match doc.get("status") {
        Some(Json::String(s)) if s == "completed" => Ok(Some(doc)),
        Some(Json::String(_)) => Ok(None),
        Some(other) => hccl_fail(
            HcclResult::HCCL_E_INTERNAL,
            format!(
                "the rank table's \"status\" is {}, not a string (\"completed\" when the table \
                 may be used)",
                other.kind()
            ),
        ),
        None => hccl_fail(
            HcclResult::HCCL_E_INTERNAL,
            "the rank table has no \"status\" (\"completed\" when the table may be used)",
        ),
    }
}

/// A string property `name` of `obj` (`where_` names `obj` in messages): missing
/// `HCCL_E_NOT_FOUND` when required (`Ok(None)` when optional), not a string `HCCL_E_PARA`.
fn string_prop<'a>(
    obj: &'a Json,
    name: &str,
    where_: &str,
    required: bool,
) -> HcclRes<Option<&'a str>> {
    match obj.get(name) {
        Some(Json::String(s)) => Ok(Some(s)),
        Some(other) => para(format!(
            "{where_}: \"{name}\" is {}; the rank table's values are strings (\"{name}\": \"...\")",
            other.kind()
        )),
        None if required => hccl_fail(
            HcclResult::HCCL_E_NOT_FOUND,
            format!("{where_}: \"{name}\" is missing"),
        ),
        None => Ok(None),
    }
}

/// [`string_prop`], required.
fn required<'a>(obj: &'a Json, name: &str, where_: &str) -> HcclRes<&'a str> {
    Ok(string_prop(obj, name, where_, true)?.unwrap_or_default())
}

/// A non-empty list property `name` (missing `HCCL_E_NOT_FOUND`, empty or not a list
/// `HCCL_E_PARA`).
fn list_prop<'a>(obj: &'a Json, name: &str, where_: &str) -> HcclRes<&'a [Json]> {
    match obj.get(name) {
        Some(Json::Array(items)) if !items.is_empty() => Ok(items),
        Some(Json::Array(_)) => para(format!("{where_}: \"{name}\" is empty")),
        Some(other) => para(format!(
            "{where_}: \"{name}\" is {}, not a list",
            other.kind()
        )),
        None => hccl_fail(
            HcclResult::HCCL_E_NOT_FOUND,
            format!("{where_}: \"{name}\" is missing"),
        ),
    }
}

/// A decimal `u32` as CANN's `SalStrToULong` reads it (digits only): `HCCL_E_PARA` otherwise.
fn decimal(text: &str, name: &str, where_: &str) -> HcclRes<u32> {
    let ok = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    match text.parse::<u32>() {
        Ok(v) if ok => Ok(v),
        _ => para(format!(
            "{where_}: \"{name}\" is \"{text}\", not a non-negative decimal integer"
        )),
    }
}

/// Reads and checks a completed table (`doc`, from [`completed`]) on a machine of
/// `device_count` devices per server.
pub(crate) fn parse(doc: &Json, device_count: u32) -> HcclRes<RankTable> {
    let version = match doc.get("version") {
        None => {
            return hccl_fail(
                HcclResult::HCCL_E_NOT_SUPPORT,
                "the rank table has no \"version\": that is the old \"Standard\" format of the \
                 Atlas training series (group_list), which the emulator does not read; write \
                 version \"1.0\" (servers) or \"1.2\" (servers in SuperPoDs)",
            );
        }
        Some(_) => required(doc, "version", "the rank table")?,
    };
    match version {
        "1.0" | "1.2" => {}
        "1.1" => {
            return hccl_fail(
                HcclResult::HCCL_E_NOT_SUPPORT,
                "rank table version \"1.1\" (heterogeneous clusters) is not supported by the \
                 emulator; write version \"1.0\" or \"1.2\"",
            );
        }
        other => {
            return hccl_fail(
                HcclResult::HCCL_E_NOT_SUPPORT,
                format!(
                    "rank table version \"{other}\" is not one an Atlas A3 reads (\"1.0\": \
                     servers; \"1.2\": servers in SuperPoDs; \"2.0\" is the Ascend 950 format)"
                ),
            );
        }
    }
    let mut table = RankTable {
        version: version.to_owned(),
        servers: Vec::new(),
        super_pods: None,
        ranks: Vec::new(),
    };
    let server_list = list_prop(doc, "server_list", "the rank table")?;
    if let Some(count) = string_prop(doc, "server_count", "the rank table", false)? {
        let count = decimal(count, "server_count", "the rank table")?;
        if count as usize != server_list.len() {
            return para(format!(
                "the rank table's \"server_count\" is {count}, but \"server_list\" lists {} \
                 servers",
                server_list.len()
            ));
        }
    }
    let mut ips: Vec<&str> = Vec::new();
    for (index, server) in server_list.iter().enumerate() {
        table.read_server(server, index, device_count, &mut ips)?;
    }
    if let Some(pods) = doc.get("super_pod_list").filter(|_| version == "1.2") {
        table.read_super_pods(pods)?;
    }
    table.ranks.sort_by_key(|r| r.rank);
    Ok(table)
}

impl RankTable {
    /// Reads `server_list[index]` and its devices. `ips` are the device IPs seen so far
    /// (each may appear once in the table).
    fn read_server<'a>(
        &mut self,
        server: &'a Json,
        index: usize,
        device_count: u32,
        ips: &mut Vec<&'a str>,
    ) -> HcclRes {
        let where_ = format!("server_list[{index}]");
        let id = required(server, "server_id", &where_)?;
        if id.is_empty() || id.len() > SERVER_ID_MAX {
            return para(format!(
                "{where_}: \"server_id\" must have 1 to {SERVER_ID_MAX} characters, not {}",
                id.len()
            ));
        }
        if self.servers.iter().any(|s| s == id) {
            return para(format!(
                "{where_}: \"server_id\" \"{id}\" appears twice: each server's id is unique"
            ));
        }
        if let Some(ip) = string_prop(server, "host_ip", &where_, false)?
            && ip.parse::<IpAddr>().is_err()
        {
            return para(format!(
                "{where_}: \"host_ip\" \"{ip}\" is not an IP address"
            ));
        }
        self.servers.push(id.to_owned());
        let node = index as u32;
        let devices = list_prop(server, "device", &where_)?;
        for (d, device) in devices.iter().enumerate() {
            let where_ = format!("server_list[{index}] (\"{id}\").device[{d}]");
            let rank_text = required(device, "rank_id", &where_)?;
            let device_id = decimal(
                required(device, "device_id", &where_)?,
                "device_id",
                &where_,
            )?;
            if device_id >= device_count {
                return para(format!(
                    "{where_}: \"device_id\" {device_id} is not a device of this machine (0..{device_count})"
                ));
            }
            let mut device_ips = Vec::new();
            if let Some(list) = string_prop(device, "device_ip", &where_, false)? {
                for ip in list.split(',') {
                    if ips.contains(&ip) {
                        return para(format!(
                            "{where_}: \"device_ip\" {ip} appears twice in the rank table"
                        ));
                    }
                    if ip.parse::<IpAddr>().is_err() {
                        return para(format!(
                            "{where_}: \"device_ip\" \"{ip}\" is not an IP address"
                        ));
                    }
                    ips.push(ip);
                    device_ips.push(ip.to_owned());
                }
            }
            let rank = decimal(rank_text, "rank_id", &where_)?;
            let super_device = match self.version.as_str() {
                "1.2" => string_prop(device, "super_device_id", &where_, false)?
                    .map(|s| decimal(s, "super_device_id", &where_))
                    .transpose()?,
                _ => None,
            };
            // Not a check of CANN's parser: one device of a server serves one rank of a
            // table here (the emulator's devices are the table's devices).
            if let Some(other) = self
                .ranks
                .iter()
                .find(|r| r.server == node && r.device == device_id)
            {
                return para(format!(
                    "{where_}: rank {rank} is on device {device_id} of server \"{id}\", which rank \
                     {} has already: each device of a server serves one rank",
                    other.rank
                ));
            }
            self.ranks.push(RankEntry {
                rank,
                device: device_id,
                server: node,
                super_pod: None,
                super_device,
                device_ips,
            });
        }
        Ok(())
    }

    /// Reads `super_pod_list` (version 1.2) and checks it as `CheckSuperPodInfo` does: every
    /// server in one SuperPoD, every rank with a `super_device_id` unique in its SuperPoD.
    fn read_super_pods(&mut self, pods: &Json) -> HcclRes {
        let Json::Array(pods) = pods else {
            return para(format!(
                "the rank table's \"super_pod_list\" is {}, not a list",
                pods.kind()
            ));
        };
        let mut ids: Vec<String> = Vec::new();
        // How many SuperPoDs list each server.
        let mut listed = vec![0u32; self.servers.len()];
        for (p, pod) in pods.iter().enumerate() {
            let where_ = format!("super_pod_list[{p}]");
            let id = required(pod, "super_pod_id", &where_)?;
            if id.is_empty() {
                return para(format!("{where_}: \"super_pod_id\" is empty"));
            }
            if ids.iter().any(|i| i == id) {
                return para(format!(
                    "{where_}: \"super_pod_id\" \"{id}\" appears twice: each SuperPoD's id is unique"
                ));
            }
            ids.push(id.to_owned());
            let servers = match pod.get("server_list") {
                Some(Json::Array(servers)) => servers,
                Some(other) => {
                    return para(format!(
                        "{where_}: \"server_list\" is {}, not a list",
                        other.kind()
                    ));
                }
                None => {
                    return hccl_fail(
                        HcclResult::HCCL_E_NOT_FOUND,
                        format!("{where_}: \"server_list\" is missing"),
                    );
                }
            };
            for (s, server) in servers.iter().enumerate() {
                let where_ = format!("{where_}.server_list[{s}]");
                let server_id = required(server, "server_id", &where_)?;
                let Some(node) = self.servers.iter().position(|x| x == server_id) else {
                    return hccl_fail(
                        HcclResult::HCCL_E_NOT_FOUND,
                        format!(
                            "{where_}: server \"{server_id}\" is not in the table's \"server_list\""
                        ),
                    );
                };
                listed[node] += 1;
                for rank in self.ranks.iter_mut().filter(|r| r.server == node as u32) {
                    rank.super_pod = Some(p as u32);
                }
            }
        }
        if let Some(node) = listed.iter().position(|&n| n > 1) {
            return para(format!(
                "server \"{}\" is listed in {} SuperPoDs: each server is in one",
                self.servers[node], listed[node]
            ));
        }
        for rank in &self.ranks {
            let server = &self.servers[rank.server as usize];
            if rank.super_pod.is_none() {
                return para(format!(
                    "rank {}: its server \"{server}\" is in no SuperPoD of \"super_pod_list\"",
                    rank.rank
                ));
            }
            let Some(sdid) = rank.super_device else {
                return para(format!(
                    "rank {}: \"super_device_id\" is missing, which a table with \
                     \"super_pod_list\" needs for every device",
                    rank.rank
                ));
            };
            if let Some(other) = self.ranks.iter().find(|o| {
                o.rank != rank.rank && o.super_pod == rank.super_pod && o.super_device == Some(sdid)
            }) {
                return para(format!(
                    "ranks {} and {} have the same \"super_device_id\" {sdid} in SuperPoD \"{}\"",
                    rank.rank.min(other.rank),
                    rank.rank.max(other.rank),
                    ids[rank.super_pod.unwrap_or_default() as usize]
                ));
            }
        }
        self.super_pods = Some(ids);
        Ok(())
    }

    /// The checks of `rank`'s place in the table, in CANN's order (`ParserClusterInfo`,
    /// then `CheckRankListInfo`): `rank` not below the number of ranks `HCCL_E_PARA`; the
    /// table's rank at that position (sorted by rank id) another `HCCL_E_UNAVAIL`; its
    /// `device_id` not `device`, the device set on the calling thread, `HCCL_E_UNAVAIL`; rank
    /// ids not exactly `0..n` `HCCL_E_PARA`.
    pub(crate) fn check_rank(&self, rank: u32, device: u32) -> HcclRes {
        let n = self.ranks.len();
        let Some(entry) = self.ranks.get(rank as usize) else {
            return para(format!(
                "rank {rank} is not in the rank table, which has {n} ranks (rank_id 0..{n})"
            ));
        };
        if entry.rank != rank {
            return hccl_fail(
                HcclResult::HCCL_E_UNAVAIL,
                format!(
                    "rank {rank}: the rank table's rank ids, sorted, have {} at position {rank}: \
                     rank_id must be 0..{n}, each once",
                    entry.rank
                ),
            );
        }
        if entry.device != device {
            return hccl_fail(
                HcclResult::HCCL_E_UNAVAIL,
                format!(
                    "rank {rank} is on device_id {} of server \"{}\" in the rank table, but this \
                     thread's device is {device}: call aclrtSetDevice({}) first",
                    entry.device, self.servers[entry.server as usize], entry.device
                ),
            );
        }
        if let Some((i, r)) = self
            .ranks
            .iter()
            .enumerate()
            .find(|(i, r)| r.rank as usize != *i)
        {
            let what = match self.ranks.iter().filter(|o| o.rank == r.rank).count() {
                1 => format!("rank_id {} is missing", i),
                _ => format!("rank_id {} appears twice", r.rank),
            };
            return para(format!(
                "the rank table's rank ids must be 0..{n}, each once: {what}"
            ));
        }
        Ok(())
    }

    /// Every rank's place, in rank order; in a table without `super_pod_list`, node `k` is in
    /// SuperPoD `k / nodes_per_super_pod`.
    pub(crate) fn places(&self, nodes_per_super_pod: u32) -> Vec<Place> {
        self.ranks
            .iter()
            .map(|r| Place {
                rank: r.rank,
                device: r.device,
                node: r.server,
                super_pod: r.super_pod.unwrap_or(r.server / nodes_per_super_pod.max(1)),
            })
            .collect()
    }

    /// The table's contents as bytes that do not depend on how the file is written (spacing,
    /// member order, fields the emulator ignores): equal for every copy of one job's table.
    pub(crate) fn canonical(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let mut put = |s: &str| {
            out.extend((s.len() as u32).to_le_bytes());
            out.extend(s.as_bytes());
        };
        put(&self.version);
        for s in &self.servers {
            put(s);
        }
        for p in self.super_pods.iter().flatten() {
            put(p);
        }
        for r in &self.ranks {
            put(&format!(
                "{} {} {} {:?} {:?} {}",
                r.rank,
                r.device,
                r.server,
                r.super_pod,
                r.super_device,
                r.device_ips.join(",")
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests;
