//! Joining a communicator from a rank table: the JSON file that lists every rank of a job
//! with its server and device (CANN's `HcclCommInitClusterInfoConfig`), the other standard way
//! Ascend jobs bootstrap (MindSpore and many launchers set `RANK_TABLE_FILE`). No root info
//! passes between the ranks: each reads the table.

use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use symheap_types::launch;

use super::launch_vars::number;
use super::{Comm, CommConfig, Runtime, calls};
use crate::{Error, Result};

/// The variable that names the rank table (MindSpore's and Ascend's launchers').
pub const RANK_TABLE_FILE: &str = "RANK_TABLE_FILE";

/// The variables a rank-table job's placement is read from, each value from the first one
/// that is set: MindSpore's, then symheap's launch protocol's, torchrun's and Open MPI's.
const RANK: [&str; 4] = ["RANK_ID", launch::RANK, "RANK", "OMPI_COMM_WORLD_RANK"];
const DEVICE: [&str; 4] = [
    "DEVICE_ID",
    launch::DEVICE,
    "LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_RANK",
];
const RANK_SIZE: [&str; 4] = [
    "RANK_SIZE",
    launch::WORLD_SIZE,
    "WORLD_SIZE",
    "OMPI_COMM_WORLD_SIZE",
];

/// Where this process sits in a rank-table job, read from the environment
/// ([`RankTablePlacement::from_env`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankTablePlacement {
    /// The rank table (`RANK_TABLE_FILE`).
    pub rank_table: PathBuf,
    /// This process's rank: its `rank_id` in the table.
    pub rank: u32,
    /// The device to bind: the rank's `device_id` in the table.
    pub device: u32,
    /// The number of ranks the launcher announced, if it did: the table must have as many.
    pub rank_count: Option<u32>,
}

impl RankTablePlacement {
    /// Reads the placement of a rank-table job from the environment, or `None` when
    /// `RANK_TABLE_FILE` is not set (the job is not one).
    ///
    /// The rank is `RANK_ID` (MindSpore's), else `SYMHEAP_RANK`, `RANK` or
    /// `OMPI_COMM_WORLD_RANK`; the device `DEVICE_ID`, else `SYMHEAP_DEVICE`, `LOCAL_RANK` or
    /// `OMPI_COMM_WORLD_LOCAL_RANK`, else the rank; the rank count, when given, `RANK_SIZE`,
    /// else `SYMHEAP_WORLD_SIZE`, `WORLD_SIZE` or `OMPI_COMM_WORLD_SIZE`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming a variable that is missing or not a number, or a rank
    /// not below the rank count.
    pub fn from_env() -> Result<Option<RankTablePlacement>> {
        RankTablePlacement::from_vars(|name| std::env::var_os(name))
    }

    /// [`RankTablePlacement::from_env`] over any source of variables (for tests).
    fn from_vars(var: impl Fn(&str) -> Option<OsString>) -> Result<Option<RankTablePlacement>> {
        let Some(rank_table) = var(RANK_TABLE_FILE).filter(|v| !v.is_empty()) else {
            return Ok(None);
        };
        let Some((rank_var, rank)) = number(&var, &RANK)? else {
            return Err(Error::invalid(format!(
                "{RANK_TABLE_FILE} is set but this process's rank is not: set {} (or {})",
                RANK[0],
                RANK[1..].join(" / ")
            )));
        };
        let device = number(&var, &DEVICE)?.map_or(rank, |(_, d)| d);
        let rank_count = number(&var, &RANK_SIZE)?;
        if let Some((size_var, size)) = rank_count
            && rank >= size
        {
            return Err(Error::invalid(format!(
                "{rank_var}={rank} is not below {size_var}={size}"
            )));
        }
        Ok(Some(RankTablePlacement {
            rank_table: PathBuf::from(rank_table),
            rank,
            device,
            rank_count: rank_count.map(|(_, n)| n),
        }))
    }

    /// Binds the calling thread to the device and joins the table's communicator
    /// ([`Comm::from_rank_table`]); then checks the rank count the launcher announced.
    ///
    /// # Errors
    /// As [`Comm::from_rank_table`], and [`Error::InvalidArgument`] when the table has
    /// another number of ranks than the launcher announced.
    pub fn join(&self, rt: &Runtime, config: &CommConfig) -> Result<Comm> {
        rt.set_device(self.device)?;
        let comm = Comm::from_rank_table(rt, &self.rank_table, self.rank, config)?;
        match self.rank_count {
            Some(n) if n != comm.rank_count() => Err(Error::invalid(format!(
                "the rank table {} has {} ranks, but the launcher started {n} (RANK_SIZE or \
                 WORLD_SIZE)",
                self.rank_table.display(),
                comm.rank_count()
            ))),
            _ => Ok(comm),
        }
    }
}

impl Comm {
    /// Joins the communicator of every rank of the rank table at `path` as `rank`
    /// (`HcclCommInitClusterInfoConfig`), on the calling thread's current device, which must
    /// be the rank's `device_id` in the table. Blocks until every rank has joined. Each rank
    /// reads the table itself: no root info passes between them.
    ///
    /// The table is CANN's JSON format (`"version": "1.0"`: a `server_list` of servers and
    /// their devices; `"1.2"`: the same with SuperPoDs), as hicann/hccl's
    /// `docs/zh/user_guide/cluster_info_config/` describes it. On the emulator, the ranks of
    /// one table (of one user) find each other on this machine, whatever the device IPs say.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a path with a NUL byte; the library's error otherwise,
    /// with CANN's codes: a file that cannot be loaded `HCCL_E_INTERNAL`; an unsupported
    /// `version` `HCCL_E_NOT_SUPPORT`; a missing field `HCCL_E_NOT_FOUND`; a malformed one or
    /// `rank` not in the table `HCCL_E_PARA`; the rank's `device_id` not the current device,
    /// or a second rank-table communicator on the device, `HCCL_E_UNAVAIL`;
    /// [`Error::Unsupported`] where the library lacks the call.
    ///
    /// # Examples
    /// ```
    /// use symheap::{Comm, CommConfig, Runtime};
    ///
    /// // One server with one device: a job of one rank.
    /// let dir = std::env::temp_dir().join(format!("symheap-doc-rank-table-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir)?;
    /// let table = dir.join("rank_table.json");
    /// std::fs::write(&table, r#"{
    ///     "status": "completed", "version": "1.0", "server_count": "1",
    ///     "server_list": [{"server_id": "doc-example", "device": [
    ///         {"device_id": "0", "device_ip": "192.168.1.8", "rank_id": "0"}]}]
    /// }"#)?;
    /// let rt = Runtime::emulated()?;
    /// rt.set_device(0)?;
    /// let comm = Comm::from_rank_table(&rt, &table, 0, &CommConfig::new())?;
    /// assert_eq!((comm.rank(), comm.rank_count()), (0, 1));
    /// drop(comm);
    /// std::fs::remove_dir_all(&dir)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_rank_table(
        rt: &Runtime,
        path: &Path,
        rank: u32,
        config: &CommConfig,
    ) -> Result<Comm> {
        let c_path = CString::new(path.as_os_str().as_bytes()).map_err(|_| {
            Error::invalid(format!(
                "the rank table's path {} holds a NUL byte",
                path.display()
            ))
        })?;
        let device = rt.current_device()?;
        let mut raw_config = *config.as_raw();
        let mut raw = std::ptr::null_mut();
        // SAFETY: a C string, a config of its stated size and an out-pointer, all valid for the
        // call.
        unsafe {
            calls::HcclCommInitClusterInfoConfig(
                rt,
                c_path.as_ptr(),
                rank,
                &mut raw_config,
                &mut raw,
            )
        }?;
        let mut size = 0u32;
        // SAFETY: a live communicator and a valid out-pointer.
        let sized = unsafe { calls::HcclGetRankSize(rt, raw, &mut size) };
        if let Err(e) = sized {
            // SAFETY: the communicator just made, destroyed once.
            let _ = unsafe { calls::HcclCommDestroy(rt, raw) };
            return Err(e);
        }
        Comm::wrap(rt, raw, (rank, size), device, config, None)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn placement(vars: &[(&str, &str)]) -> Result<Option<RankTablePlacement>> {
        let vars: HashMap<String, OsString> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        RankTablePlacement::from_vars(|name| vars.get(name).cloned())
    }

    #[test]
    fn without_rank_table_file_a_job_is_not_a_rank_table_job() {
        assert_eq!(
            placement(&[("RANK", "1"), ("WORLD_SIZE", "2")]).unwrap(),
            None
        );
        assert_eq!(placement(&[("RANK_TABLE_FILE", "")]).unwrap(), None);
    }

    #[test]
    fn mindspores_variables_come_first_then_symheap_torchrun_and_open_mpi() {
        let p = placement(&[
            ("RANK_TABLE_FILE", "/t/rank_table.json"),
            ("RANK_ID", "3"),
            ("SYMHEAP_RANK", "1"),
            ("DEVICE_ID", "1"),
            ("LOCAL_RANK", "5"),
            ("RANK_SIZE", "4"),
            ("WORLD_SIZE", "8"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(
            p,
            RankTablePlacement {
                rank_table: PathBuf::from("/t/rank_table.json"),
                rank: 3,
                device: 1,
                rank_count: Some(4),
            }
        );
        let p = placement(&[
            ("RANK_TABLE_FILE", "t.json"),
            ("RANK", "2"),
            ("LOCAL_RANK", "0"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!((p.rank, p.device, p.rank_count), (2, 0, None));
        let p = placement(&[("RANK_TABLE_FILE", "t.json"), ("OMPI_COMM_WORLD_RANK", "6")])
            .unwrap()
            .unwrap();
        assert_eq!(
            (p.rank, p.device),
            (6, 6),
            "the device defaults to the rank"
        );
    }

    #[test]
    fn a_missing_or_malformed_rank_is_named() {
        let e = placement(&[("RANK_TABLE_FILE", "t.json")])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("RANK_ID") && e.contains("OMPI_COMM_WORLD_RANK"),
            "{e}"
        );
        let e = placement(&[("RANK_TABLE_FILE", "t.json"), ("RANK_ID", "x")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("RANK_ID=x"), "{e}");
        let e = placement(&[
            ("RANK_TABLE_FILE", "t.json"),
            ("RANK_ID", "4"),
            ("RANK_SIZE", "4"),
        ])
        .unwrap_err()
        .to_string();
        assert!(e.contains("RANK_ID=4 is not below RANK_SIZE=4"), "{e}");
    }
}
