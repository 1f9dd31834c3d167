//! How long a rank waits at a step before it says so: one warning through `tracing`, naming
//! what it waits for, long before the exec timeout fails the step (120 s by default).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The environment variable that sets the interval, in seconds (default 10).
pub const WAIT_WARNING_ENV: &str = "SYMHEAP_EMU_WAIT_WARNING_SECS";

const DEFAULT_WAIT_WARNING: Duration = Duration::from_secs(10);

/// The interval set by [`set_wait_warning`] in milliseconds; `u64::MAX` while unset.
static WARN_AFTER_MS: AtomicU64 = AtomicU64::new(u64::MAX);

/// Sets how long a rank of this process waits at a step before it logs a warning (default
/// 10 s, or [`WAIT_WARNING_ENV`] seconds). Process-global; it applies to steps begun after
/// the call.
pub fn set_wait_warning(after: Duration) {
    let ms = u64::try_from(after.as_millis()).unwrap_or(u64::MAX - 1);
    WARN_AFTER_MS.store(ms.min(u64::MAX - 1), Ordering::Relaxed);
}

/// The interval: [`set_wait_warning`]'s, else the environment's, else the default.
fn wait_warning() -> Duration {
    match WARN_AFTER_MS.load(Ordering::Relaxed) {
        u64::MAX => std::env::var(WAIT_WARNING_ENV)
            .ok()
            .and_then(|v| v.trim().parse::<f64>().ok())
            .and_then(|s| Duration::try_from_secs_f64(s).ok())
            .unwrap_or(DEFAULT_WAIT_WARNING),
        ms => Duration::from_millis(ms),
    }
}

/// One wait at a step: warns once when it has lasted the interval.
pub(crate) struct Patience {
    started: Instant,
    warn_at: Option<Instant>,
}

impl Patience {
    /// A wait that starts now.
    pub(crate) fn new() -> Patience {
        let started = Instant::now();
        Patience {
            started,
            warn_at: started.checked_add(wait_warning()),
        }
    }

    /// Logs `what` (what the rank waits for) if the interval has passed and nothing was
    /// logged yet. Cheap when it has not: call it whenever the wait wakes.
    pub(crate) fn check(&mut self, what: impl FnOnce() -> String) {
        let Some(at) = self.warn_at else { return };
        let now = Instant::now();
        if now < at {
            return;
        }
        self.warn_at = None;
        let waited = now - self.started;
        tracing::warn!(
            "emulated HCCL: waited {:.1} s so far {}",
            waited.as_secs_f64(),
            what()
        );
    }
}
