//! After a loss, the survivors find each other and form their world: the survivor side of
//! the elastic launch protocol ([`symheap_types::launch::ELASTIC_DIR`]), which
//! `symheap-run --elastic` drives.
//!
//! The launcher records each loss in the job's directory (`lost-K`: the launch ranks it lost
//! at its K-th loss). Every survivor learns of a loss on its own, from a failed collective,
//! and then reads the record: so the survivors agree on who survived without a step among
//! themselves, which the loss has just made impossible. They keep their order and are
//! renumbered densely; the first of them publishes the root info of their world (`root-K`),
//! and all of them make the new communicator from it.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use symheap_types::launch;

use super::bootstrap::{Placement, root_info_wait};
use super::{Comm, CommConfig, RootInfo, Runtime};
use crate::{Error, Result};

/// How often a survivor looks for the launcher's record of a loss.
const POLL: Duration = Duration::from_millis(2);

/// The ranks of a job that may lose some of them, and this process among them.
#[derive(Clone, Debug)]
pub struct Survivors {
    dir: PathBuf,
    /// The launch ranks of the current world, in rank order.
    world: Vec<u32>,
    /// This process's launch rank.
    me: u32,
    /// The losses handled so far.
    losses: u32,
}

impl Survivors {
    /// The job of `world_size` ranks whose directory is `dir`, seen from launch rank `rank`.
    pub fn new(dir: impl Into<PathBuf>, world_size: u32, rank: u32) -> Survivors {
        Survivors {
            dir: dir.into(),
            world: (0..world_size).collect(),
            me: rank,
            losses: 0,
        }
    }

    /// The job this process was started in, if its launcher made it elastic
    /// (`SYMHEAP_ELASTIC_DIR`, with the rank and world size [`Comm::from_env`] reads).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if the elastic directory is set but the rank or world size
    /// are missing or malformed.
    pub fn from_env() -> Result<Option<Survivors>> {
        let Some(dir) = std::env::var_os(launch::ELASTIC_DIR) else {
            return Ok(None);
        };
        let placement = Placement::from_env()?;
        Ok(Some(Survivors::new(
            dir,
            placement.rank_count,
            placement.rank,
        )))
    }

    /// This process's rank in the current world; `None` if it is not in it (a launch rank
    /// not below the world size given to [`Survivors::new`]).
    pub fn rank(&self) -> Option<u32> {
        self.world
            .iter()
            .position(|&r| r == self.me)
            .map(|i| i as u32)
    }

    /// The number of ranks in the current world.
    pub fn rank_count(&self) -> u32 {
        self.world.len() as u32
    }

    /// The launch ranks of the current world's ranks, in rank order.
    pub fn launch_ranks(&self) -> &[u32] {
        &self.world
    }

    /// The losses handled so far.
    pub fn losses(&self) -> u32 {
        self.losses
    }

    /// Waits for the launcher's record of the next loss, takes the ranks it lost out of the
    /// world, and makes the survivors' communicator (every survivor calls this): its rank is
    /// this process's place among the survivors, in the old order. Waits as long as
    /// [`Comm::from_env`] waits for a root info (the config's exec timeout, at least 30 s).
    ///
    /// A later loss recorded by the time making the communicator fails is folded in: a
    /// survivor lost before it joined makes every other's init fail once its join timeout is
    /// over (every one of them, so all of them fold the same record), and then the survivors
    /// of both losses form the world. After a loss that came once the survivors' world was
    /// formed, call `shrink` again (a [`SymPool::shrink`](crate::SymPool::shrink) under way
    /// fails, and can be repeated on the next world).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if no loss is recorded in time (the failure was not a lost
    /// rank, or the launcher is not elastic), a record is malformed or names ranks not in
    /// the world, or names this rank; the errors of [`RootInfo::publish`],
    /// [`RootInfo::wait_for`] and [`Comm::init`].
    pub fn shrink(&mut self, rt: &Runtime, config: &CommConfig) -> Result<Comm> {
        let wait = root_info_wait(config);
        let mut loss = self.losses + 1;
        let mut lost = self.read_loss(loss, wait)?;
        loop {
            let world = self.world_without(loss, &lost)?;
            match self.form(rt, config, loss, &world) {
                Ok(comm) => {
                    self.world = world;
                    self.losses = loss;
                    return Ok(comm);
                }
                Err(e) => match self.recorded_loss(loss + 1)? {
                    Some(more) => {
                        loss += 1;
                        lost.extend(more);
                    }
                    None => return Err(e),
                },
            }
        }
    }

    /// The current world without `lost` (recorded up to loss `loss`), checked.
    fn world_without(&self, loss: u32, lost: &[u32]) -> Result<Vec<u32>> {
        if lost.contains(&self.me) {
            return Err(Error::invalid(format!(
                "{}: the launcher recorded this rank (launch rank {}) as lost",
                self.record(loss).display(),
                self.me
            )));
        }
        if let Some(stranger) = lost.iter().find(|r| !self.world.contains(r)) {
            return Err(Error::invalid(format!(
                "{}: launch rank {stranger} is not in the world {:?}",
                self.record(loss).display(),
                self.world
            )));
        }
        Ok(self
            .world
            .iter()
            .copied()
            .filter(|r| !lost.contains(r))
            .collect())
    }

    /// Makes the communicator of `world`, the survivors up to loss `loss`: its first rank
    /// publishes the root info as that loss's [`launch::survivors_root`].
    fn form(&self, rt: &Runtime, config: &CommConfig, loss: u32, world: &[u32]) -> Result<Comm> {
        let Some(rank) = world.iter().position(|&r| r == self.me) else {
            return Err(Error::invalid(format!(
                "launch rank {} is not in the world {:?}",
                self.me, self.world
            )));
        };
        let rank = rank as u32;
        let root_path = self.dir.join(launch::survivors_root(loss));
        let root = match rank {
            0 => {
                let root = RootInfo::new(rt)?;
                root.publish(&root_path)?;
                root
            }
            _ => RootInfo::wait_for(&root_path, root_info_wait(config))?,
        };
        let comm = Comm::init(rt, world.len() as u32, &root, rank, config);
        if rank == 0 {
            // Every survivor has joined, or the init failed: nobody needs the key any more,
            // and a retry publishes a fresh one.
            let _ = std::fs::remove_file(&root_path);
        }
        comm
    }

    fn record(&self, loss: u32) -> PathBuf {
        self.dir.join(launch::lost_record(loss))
    }

    /// The launch ranks of loss `loss`, if it is recorded now.
    fn recorded_loss(&self, loss: u32) -> Result<Option<Vec<u32>>> {
        let path = self.record(loss);
        match std::fs::read_to_string(&path) {
            Ok(text) => parse_loss(&path, &text).map(Some),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io(
                format!("cannot read the loss record {}", path.display()),
                e,
            )),
        }
    }

    /// The launch ranks of loss `loss`, once its record appears (at most `wait`).
    fn read_loss(&self, loss: u32, wait: Duration) -> Result<Vec<u32>> {
        let deadline = Instant::now() + wait;
        loop {
            if let Some(lost) = self.recorded_loss(loss)? {
                return Ok(lost);
            }
            if Instant::now() >= deadline {
                return Err(Error::invalid(format!(
                    "no loss was recorded in {} within {:.0} s: the failure was not a lost \
                     rank, or the job's launcher is not elastic",
                    self.record(loss).display(),
                    wait.as_secs_f64()
                )));
            }
            std::thread::sleep(POLL);
        }
    }
}

/// The launch ranks of a loss record, one decimal per line.
fn parse_loss(path: &Path, text: &str) -> Result<Vec<u32>> {
    let ranks = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| {
            l.parse::<u32>().map_err(|_| {
                Error::invalid(format!(
                    "{}: {l:?} is not a launch rank (one decimal per line)",
                    path.display()
                ))
            })
        })
        .collect::<Result<Vec<u32>>>()?;
    if ranks.is_empty() {
        return Err(Error::invalid(format!(
            "{}: the loss record names no rank",
            path.display()
        )));
    }
    Ok(ranks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loss_record_is_one_launch_rank_per_line() {
        let path = Path::new("lost-1");
        assert_eq!(parse_loss(path, "2\n5\n").unwrap(), [2, 5]);
        assert_eq!(parse_loss(path, " 3 \n\n").unwrap(), [3]);
        let text = parse_loss(path, "two\n").unwrap_err().to_string();
        assert!(text.contains("\"two\" is not a launch rank"), "{text}");
        assert!(parse_loss(path, "\n").is_err(), "an empty record");
    }

    #[test]
    fn survivors_keep_their_order_and_are_renumbered_densely() {
        let mut s = Survivors::new("/nonexistent", 5, 3);
        assert_eq!((s.rank(), s.rank_count()), (Some(3), 5));
        assert_eq!(Survivors::new("/nonexistent", 2, 2).rank(), None);
        s.world.retain(|r| ![1, 2].contains(r));
        assert_eq!(
            (s.rank(), s.rank_count(), s.launch_ranks()),
            (Some(1), 3, &[0, 3, 4][..])
        );
    }

    #[test]
    fn a_missing_record_names_its_path_once_the_wait_is_over() {
        let s = Survivors::new("/nonexistent-symheap-dir", 2, 0);
        let text = s
            .read_loss(1, Duration::from_millis(30))
            .unwrap_err()
            .to_string();
        assert!(text.contains("/nonexistent-symheap-dir/lost-1"), "{text}");
        assert!(text.contains("not elastic"), "{text}");
    }
}
