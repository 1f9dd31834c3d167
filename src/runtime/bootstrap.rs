//! Joining a communicator from the environment, as every launcher sets it up: one process per
//! device, the root info passed through a file.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use symheap_types::launch::{self, ROOT_INFO};

use super::launch_vars::number;
use super::{Comm, CommConfig, RootInfo, Runtime};
use crate::sys::HCCL_ROOT_INFO_BYTES;
use crate::{Error, Result};

/// The variables [`Comm::from_env`] reads, each value from the first one that is set: the
/// launch protocol's (`symheap-types`' `launch`), then torchrun's, then Open MPI's.
const RANK: [&str; 3] = [launch::RANK, "RANK", "OMPI_COMM_WORLD_RANK"];
const WORLD_SIZE: [&str; 3] = [launch::WORLD_SIZE, "WORLD_SIZE", "OMPI_COMM_WORLD_SIZE"];
const DEVICE: [&str; 3] = [launch::DEVICE, "LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK"];

/// How long ranks other than 0 wait for the root-info file when the config sets no exec
/// timeout, and at least in any case: processes of one job may start seconds apart.
const MIN_WAIT: Duration = Duration::from_secs(30);
const DEFAULT_WAIT: Duration = Duration::from_secs(120);

/// Where this process sits in its job, read from the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// This process's rank.
    pub rank: u32,
    /// The number of ranks.
    pub rank_count: u32,
    /// The device this rank uses.
    pub device: u32,
    /// The root-info file rank 0 publishes and the others read.
    pub root_info: PathBuf,
}

impl Placement {
    /// Reads the placement from the process environment; see [`Comm::from_env`].
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the variables that are missing, malformed or
    /// inconsistent.
    pub fn from_env() -> Result<Placement> {
        Placement::from_vars(|name| std::env::var_os(name))
    }

    /// [`Placement::from_env`] over any source of variables (for tests).
    fn from_vars(var: impl Fn(&str) -> Option<OsString>) -> Result<Placement> {
        let rank = number(&var, &RANK)?;
        let world = number(&var, &WORLD_SIZE)?;
        let (Some((rank_var, rank)), Some((world_var, rank_count))) = (rank, world) else {
            return Err(Error::invalid(format!(
                "the rank and world size are not set: set {} and {} (or torchrun's or Open \
                 MPI's variables: {}, {})",
                RANK[0],
                WORLD_SIZE[0],
                RANK[1..].join(" / "),
                WORLD_SIZE[1..].join(" / ")
            )));
        };
        if rank_count == 0 {
            return Err(Error::invalid(format!("{world_var} is 0")));
        }
        if rank >= rank_count {
            return Err(Error::invalid(format!(
                "{rank_var}={rank} is not below {world_var}={rank_count}"
            )));
        }
        let device = number(&var, &DEVICE)?.map_or(rank, |(_, device)| device);
        let root_info = var(ROOT_INFO)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .ok_or_else(|| {
                Error::invalid(format!(
                    "{ROOT_INFO} is not set: it names the file through which rank 0 passes the \
                     root info to the other ranks (symheap-run sets it)"
                ))
            })?;
        Ok(Placement {
            rank,
            rank_count,
            device,
            root_info,
        })
    }
}

impl Comm {
    /// Joins the communicator of this process's job, as launchers describe it in the
    /// environment: the same on real hardware and on the emulator.
    ///
    /// Reads `SYMHEAP_RANK`, `SYMHEAP_WORLD_SIZE`, `SYMHEAP_DEVICE` (default: the rank) and
    /// `SYMHEAP_ROOT_INFO`, each falling back, when unset, to torchrun's `RANK` / `WORLD_SIZE` /
    /// `LOCAL_RANK` and then to Open MPI's `OMPI_COMM_WORLD_RANK` / `OMPI_COMM_WORLD_SIZE` /
    /// `OMPI_COMM_WORLD_LOCAL_RANK`. Then it binds the thread to the device, and rank 0
    /// creates the root info and publishes it in the `SYMHEAP_ROOT_INFO` file (written beside
    /// it and renamed, so readers never see half a file), while the other ranks wait for the
    /// file (for the config's exec timeout, 120 s when unset, and at least 30 s), and every
    /// rank calls [`Comm::init`].
    ///
    /// When `RANK_TABLE_FILE` is set (as MindSpore and Ascend's launchers set it), the job
    /// bootstraps from that rank table instead, without a root info: see
    /// [`Comm::from_rank_table`] and [`RankTablePlacement`](super::RankTablePlacement).
    ///
    /// The file must be fresh for each job: rank 0 refuses to overwrite one that exists, since
    /// another rank might already have read it (`symheap-run` makes a new one per run), and
    /// removes it once every rank has joined. On a filesystem that every node shares, the
    /// same file bootstraps several nodes on real HCCL.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the variables that are missing, malformed or
    /// inconsistent (a rank not below the world size), a root-info file that exists already
    /// (rank 0) or did not appear in time; [`Error::Io`] for one that cannot be written or
    /// read; the runtime's errors of
    /// `aclrtSetDevice`, `HcclGetRootInfo` and communicator initialisation.
    ///
    /// # Examples
    /// ```no_run
    /// use symheap::{Comm, CommConfig};
    ///
    /// // Started by `symheap-run -n 4 ./worker`, torchrun or mpirun.
    /// // SAFETY: the CANN libraries installed on this machine.
    /// let rt = unsafe { symheap::raw::load() }?;
    /// let comm = Comm::from_env(&rt, CommConfig::new())?;
    /// println!("rank {} of {}", comm.rank(), comm.rank_count());
    /// # Ok::<(), symheap::Error>(())
    /// ```
    pub fn from_env(rt: &Runtime, config: CommConfig) -> Result<Comm> {
        // A rank table (RANK_TABLE_FILE) bootstraps the job instead of a root info.
        if let Some(placement) = super::rank_table::RankTablePlacement::from_env()? {
            return placement.join(rt, &config);
        }
        let placement = Placement::from_env()?;
        rt.set_device(placement.device)?;
        let root = if placement.rank == 0 {
            let root = RootInfo::new(rt)?;
            root.publish(&placement.root_info)?;
            root
        } else {
            RootInfo::wait_for(&placement.root_info, root_info_wait(&config))?
        };
        let comm = Comm::init(rt, placement.rank_count, &root, placement.rank, &config);
        if placement.rank == 0 && comm.is_ok() {
            // Every rank has joined: nobody needs the key any more. (After a failure it
            // stays, so that ranks still to read it fail at once on a hub that is gone.)
            let _ = std::fs::remove_file(&placement.root_info);
        }
        comm
    }
}

/// How long ranks wait for rank 0's file.
pub(crate) fn root_info_wait(config: &CommConfig) -> Duration {
    match u64::try_from(config.as_raw().hcclExecTimeOut) {
        Ok(secs) if secs > 0 => Duration::from_secs(secs).max(MIN_WAIT),
        _ => DEFAULT_WAIT,
    }
}

impl RootInfo {
    /// Writes the root info to `path` for the other ranks ([`RootInfo::wait_for`]): to a
    /// fresh private file beside it first (mode 0600, created exclusively, never through a
    /// symbolic link), then linked into place, so a reader never sees half a file and an
    /// existing file is never replaced (another rank may have read it). The root info carries
    /// the key that lets a process join the job: keep `path` in a directory only this user
    /// can write (`symheap-run` makes a private one per run).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if `path` exists; [`Error::Io`] if it cannot be written.
    pub fn publish(&self, path: &Path) -> Result<()> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let io =
            |what: &str, e| Error::io(format!("{ROOT_INFO}: cannot {what} {}", path.display()), e);
        if path.symlink_metadata().is_ok() {
            return Err(Error::invalid(format!(
                "{ROOT_INFO}: {} exists already; another rank may have read it, so each job \
                 needs a fresh path (remove it, or let symheap-run choose one)",
                path.display()
            )));
        }
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(format!(".{}.{:x}.tmp", std::process::id(), unique()));
        let tmp = PathBuf::from(tmp);
        // O_CREAT | O_EXCL fails on anything already there, a planted link included.
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)
            .and_then(|mut file| file.write_all(&self.as_bytes()));
        if let Err(e) = written {
            if e.kind() != std::io::ErrorKind::AlreadyExists {
                let _ = std::fs::remove_file(&tmp);
            }
            return Err(io("write beside", e));
        }
        // A hard link fails if `path` exists, unlike rename: two ranks 0 cannot both publish.
        let linked = std::fs::hard_link(&tmp, path).map_err(|e| io("publish", e));
        let _ = std::fs::remove_file(&tmp);
        linked
    }

    /// Waits until `path` holds a whole root info ([`RootInfo::publish`]), at most `wait`.
    /// Only a private regular file of this user is read: a FIFO, a device, a symbolic link, a
    /// file another user owns (one planted to send this rank to their job) or one that others
    /// may read or write is refused at once, without blocking.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if the file does not appear in time, is not a root info or
    /// is refused as above; [`Error::Io`] if it cannot be read.
    pub fn wait_for(path: &Path, wait: Duration) -> Result<RootInfo> {
        let deadline = Instant::now() + wait;
        loop {
            match read_private(path) {
                Ok(Some(bytes)) => return RootInfo::from_bytes(&bytes),
                Ok(None) => {}
                Err(e) => return Err(e),
            }
            if Instant::now() >= deadline {
                return Err(Error::invalid(format!(
                    "{ROOT_INFO}: rank 0 did not publish {} within {:.0} s",
                    path.display(),
                    wait.as_secs_f64()
                )));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// A number that differs between calls and runs, for a temporary file's name.
fn unique() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(Instant::now())
}

/// The root info at `path` if it is there (`None` if not yet), after checking that it is a
/// regular file this user owns and no one else may read or write, of a root info's size.
fn read_private(path: &Path) -> Result<Option<Vec<u8>>> {
    use std::io::Read;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let refused = |why: String| {
        Err(Error::invalid(format!(
            "{ROOT_INFO}: {} {why}; refused, as it may send this rank to another job",
            path.display()
        )))
    };
    // O_NONBLOCK: opening a FIFO must not wait for a writer.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path);
    let mut file = match file {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return refused("is a symbolic link".into());
        }
        Err(e) => {
            let what = format!("{ROOT_INFO}: cannot read {}", path.display());
            return Err(Error::io(what, e));
        }
    };
    let io = |e| Error::io(format!("{ROOT_INFO}: cannot read {}", path.display()), e);
    let meta = file.metadata().map_err(io)?;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if !meta.file_type().is_file() {
        return refused("is not a regular file".into());
    }
    if meta.uid() != me {
        return refused(format!(
            "is owned by uid {}, not by this user ({me})",
            meta.uid()
        ));
    }
    if meta.mode() & 0o077 != 0 {
        return refused(format!(
            "has mode {:o}: other users may read or change it (the key to join the job)",
            meta.mode() & 0o777
        ));
    }
    if meta.len() != HCCL_ROOT_INFO_BYTES as u64 {
        return Err(Error::invalid(format!(
            "{ROOT_INFO}: {} holds {} bytes, not a root info ({HCCL_ROOT_INFO_BYTES})",
            path.display(),
            meta.len()
        )));
    }
    let mut bytes = Vec::with_capacity(HCCL_ROOT_INFO_BYTES);
    file.read_to_end(&mut bytes).map_err(io)?;
    Ok(Some(bytes))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn placement(vars: &[(&str, &str)]) -> Result<Placement> {
        let vars: HashMap<String, OsString> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        Placement::from_vars(|name| vars.get(name).cloned())
    }

    fn error(vars: &[(&str, &str)]) -> String {
        placement(vars).unwrap_err().to_string()
    }

    #[test]
    fn symheap_variables_come_first_then_torchrun_then_open_mpi() {
        let p = placement(&[
            ("SYMHEAP_RANK", "1"),
            ("RANK", "2"),
            ("WORLD_SIZE", "4"),
            ("OMPI_COMM_WORLD_SIZE", "8"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "3"),
            ("SYMHEAP_ROOT_INFO", "/tmp/x"),
        ])
        .unwrap();
        assert_eq!(
            p,
            Placement {
                rank: 1,
                rank_count: 4,
                device: 3,
                root_info: PathBuf::from("/tmp/x"),
            }
        );
        let p = placement(&[
            ("OMPI_COMM_WORLD_RANK", "2"),
            ("OMPI_COMM_WORLD_SIZE", "3"),
            ("SYMHEAP_ROOT_INFO", "/tmp/x"),
        ])
        .unwrap();
        assert_eq!(
            (p.rank, p.rank_count, p.device),
            (2, 3, 2),
            "device defaults to the rank"
        );
    }

    /// Under torchrun alone (its variables, no symheap ones) on the second node of 16: the
    /// device is the local rank, not the global rank (which no node of 16 devices has).
    #[test]
    fn under_torchrun_the_device_is_the_local_rank() {
        let p = placement(&[
            ("RANK", "17"),
            ("WORLD_SIZE", "64"),
            ("LOCAL_RANK", "1"),
            ("LOCAL_WORLD_SIZE", "16"),
            ("GROUP_RANK", "1"),
            ("SYMHEAP_ROOT_INFO", "/tmp/x"),
        ])
        .unwrap();
        assert_eq!((p.rank, p.rank_count, p.device), (17, 64, 1));
    }

    #[test]
    fn missing_malformed_and_inconsistent_variables_are_named() {
        let root = ("SYMHEAP_ROOT_INFO", "/tmp/x");
        let text = error(&[root]);
        assert!(
            text.contains("SYMHEAP_RANK") && text.contains("OMPI_COMM_WORLD_SIZE"),
            "{text}"
        );
        let text = error(&[("SYMHEAP_RANK", "0"), root]);
        assert!(text.contains("SYMHEAP_WORLD_SIZE"), "{text}");
        let text = error(&[("SYMHEAP_RANK", "one"), ("SYMHEAP_WORLD_SIZE", "2"), root]);
        assert!(text.contains("SYMHEAP_RANK=one"), "{text}");
        let text = error(&[("SYMHEAP_RANK", "-1"), ("SYMHEAP_WORLD_SIZE", "2"), root]);
        assert!(text.contains("SYMHEAP_RANK=-1"), "{text}");
        let text = error(&[("RANK", "4"), ("WORLD_SIZE", "4"), root]);
        assert!(text.contains("RANK=4 is not below WORLD_SIZE=4"), "{text}");
        let text = error(&[("SYMHEAP_RANK", "0"), ("SYMHEAP_WORLD_SIZE", "0"), root]);
        assert!(text.contains("SYMHEAP_WORLD_SIZE is 0"), "{text}");
        let text = error(&[
            ("SYMHEAP_RANK", "0"),
            ("SYMHEAP_WORLD_SIZE", "2"),
            ("SYMHEAP_DEVICE", "x"),
            root,
        ]);
        assert!(text.contains("SYMHEAP_DEVICE=x"), "{text}");
        let text = error(&[("SYMHEAP_RANK", "0"), ("SYMHEAP_WORLD_SIZE", "2")]);
        assert!(text.contains("SYMHEAP_ROOT_INFO is not set"), "{text}");
    }

    #[test]
    fn the_root_info_file_is_published_once_and_read_whole() {
        let dir = std::env::temp_dir().join(format!("symheap-bootstrap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("root-info");
        let root = RootInfo::from_bytes(&[7u8; HCCL_ROOT_INFO_BYTES]).unwrap();
        let reader = {
            let path = path.clone();
            std::thread::spawn(move || RootInfo::wait_for(&path, Duration::from_secs(10)))
        };
        std::thread::sleep(Duration::from_millis(50));
        root.publish(&path).unwrap();
        let read = reader.join().unwrap().unwrap();
        assert_eq!(read.as_bytes(), root.as_bytes());
        let again = root.publish(&path).unwrap_err().to_string();
        assert!(again.contains("exists already"), "{again}");
        std::fs::write(&path, b"short").unwrap();
        let bad = RootInfo::wait_for(&path, Duration::from_secs(1))
            .unwrap_err()
            .to_string();
        assert!(bad.contains("holds 5 bytes"), "{bad}");
        let late = RootInfo::wait_for(&dir.join("never"), Duration::from_millis(30)).unwrap_err();
        assert!(late.to_string().contains("did not publish"), "{late}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn fresh_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("symheap-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// The published file is the owner's alone (0600, whatever the umask), and a symbolic
    /// link planted where the temporary file used to be written is not followed.
    #[test]
    fn the_root_info_is_private_and_written_through_no_planted_link() {
        use std::os::unix::fs::PermissionsExt;
        let dir = fresh_dir("root-info-private");
        let path = dir.join("root-info");
        let victim = dir.join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let planted = format!("{}.{}.tmp", path.display(), std::process::id());
        std::os::unix::fs::symlink(&victim, &planted).unwrap();
        let root = RootInfo::from_bytes(&[7u8; HCCL_ROOT_INFO_BYTES]).unwrap();
        root.publish(&path).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{mode:o}");
        let read = RootInfo::wait_for(&path, Duration::from_secs(1)).unwrap();
        assert_eq!(read.as_bytes(), root.as_bytes());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A reader refuses what is not a private regular file of this user: a FIFO (without
    /// blocking on it), a symbolic link, a file others may read.
    #[test]
    fn a_reader_refuses_fifos_links_and_files_others_can_read() {
        use std::os::unix::fs::PermissionsExt;
        let dir = fresh_dir("root-info-reader");
        let fifo = dir.join("fifo");
        let c_path = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
        let started = Instant::now();
        let err = RootInfo::wait_for(&fifo, Duration::from_secs(5)).unwrap_err();
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "blocked on the FIFO"
        );
        assert!(err.to_string().contains("not a regular file"), "{err}");

        let file = dir.join("file");
        std::fs::write(&file, [7u8; HCCL_ROOT_INFO_BYTES]).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = RootInfo::wait_for(&file, Duration::from_secs(1)).unwrap_err();
        assert!(err.to_string().contains("other users"), "{err}");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let link = dir.join("link");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        let err = RootInfo::wait_for(&link, Duration::from_secs(1)).unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        RootInfo::wait_for(&file, Duration::from_secs(1)).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A root info another user planted is refused (it would send this rank to their hub).
    /// Needs root, to make a file another user owns.
    #[test]
    fn a_reader_refuses_a_root_info_another_user_owns() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: needs root (to make a file another user owns)");
            return;
        }
        let dir = fresh_dir("root-info-foreign");
        let file = dir.join("file");
        std::fs::write(&file, [7u8; HCCL_ROOT_INFO_BYTES]).unwrap();
        std::os::unix::fs::chown(&file, Some(65534), Some(65534)).unwrap();
        let err = RootInfo::wait_for(&file, Duration::from_secs(1)).unwrap_err();
        assert!(err.to_string().contains("owned by uid 65534"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
