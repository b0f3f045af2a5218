//! A node's up/down state: a circuit breaker with exponential backoff.
//!
//! Up: every request goes. A fault that says the node is unusable marks it
//! down for `backoff`. While down, requests are skipped without waiting.
//! When the backoff has passed, exactly one request is let through as a probe
//! (half-open): success brings the node up, failure doubles the backoff (capped).
//! Time is passed in, so the state machine is tested without sleeping.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What a request may do now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// The node is up.
    Go,
    /// The node is down and this request is its one probe.
    Probe,
    /// The node is down: do not ask it.
    Skip,
}

#[derive(Debug)]
struct Down {
    /// When the next probe may go.
    retry_at: Instant,
    backoff: Duration,
    /// When the outstanding probe was let through, if one is.
    probe_since: Option<Instant>,
}

pub struct Health {
    /// Fast path: no lock while the node is up.
    down_flag: AtomicBool,
    down: Mutex<Option<Down>>,
    backoff_min: Duration,
    backoff_max: Duration,
    /// After this long an outstanding probe is presumed lost and another may go.
    /// Longer than any request's deadline.
    probe_expiry: Duration,
}

impl Health {
    pub fn new(backoff_min: Duration, backoff_max: Duration, probe_expiry: Duration) -> Health {
        Health {
            down_flag: AtomicBool::new(false),
            down: Mutex::new(None),
            backoff_min,
            backoff_max: backoff_max.max(backoff_min),
            probe_expiry,
        }
    }

    pub fn is_up(&self) -> bool {
        !self.down_flag.load(Ordering::Acquire)
    }

    pub fn admit(&self, now: Instant) -> Admission {
        if self.is_up() {
            return Admission::Go;
        }
        let mut guard = self.lock();
        let Some(down) = guard.as_mut() else {
            return Admission::Go; // came up between the flag and the lock
        };
        if now < down.retry_at {
            return Admission::Skip;
        }
        match down.probe_since {
            Some(since) if now.saturating_duration_since(since) < self.probe_expiry => Admission::Skip,
            _ => {
                down.probe_since = Some(now);
                Admission::Probe
            }
        }
    }

    /// The node answered. Only a probe brings a down node up: a request let
    /// through before the node went down says nothing about it now.
    /// Returns true if this brought a down node up.
    pub fn on_success(&self, admission: Admission) -> bool {
        if admission != Admission::Probe {
            return false;
        }
        let mut guard = self.lock();
        let was_down = guard.take().is_some();
        self.down_flag.store(false, Ordering::Release);
        was_down
    }

    /// The node failed. Returns true if this marked an up node down.
    pub fn on_failure(&self, admission: Admission, now: Instant) -> bool {
        let mut guard = self.lock();
        match (guard.as_mut(), admission) {
            (None, _) => {
                *guard = Some(Down { retry_at: now + self.backoff_min, backoff: self.backoff_min, probe_since: None });
                self.down_flag.store(true, Ordering::Release);
                true
            }
            (Some(down), Admission::Probe) => {
                down.backoff = (down.backoff * 2).min(self.backoff_max);
                down.retry_at = now + down.backoff;
                down.probe_since = None;
                false
            }
            // Already down (several requests were in flight when it failed): one backoff is enough.
            (Some(_), _) => false,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Down>> {
        // The state is always consistent between statements: a panic elsewhere cannot break it.
        self.down.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn health() -> Health {
        Health::new(100 * MS, 400 * MS, 1000 * MS)
    }

    #[test]
    fn up_until_a_failure_then_skipped_until_the_backoff() {
        let h = health();
        let t0 = Instant::now();
        assert_eq!(h.admit(t0), Admission::Go);
        assert!(h.on_failure(Admission::Go, t0));
        assert!(!h.is_up());
        assert_eq!(h.admit(t0 + 99 * MS), Admission::Skip);
        assert_eq!(h.admit(t0 + 100 * MS), Admission::Probe);
        // Exactly one probe: the others are skipped while it is out.
        assert_eq!(h.admit(t0 + 101 * MS), Admission::Skip);
        assert_eq!(h.admit(t0 + 500 * MS), Admission::Skip);
        assert!(h.on_success(Admission::Probe), "the probe brought the node up");
        assert!(h.is_up());
        assert!(!h.on_success(Admission::Probe), "an up node does not come up again");
        assert_eq!(h.admit(t0 + 501 * MS), Admission::Go);
    }

    #[test]
    fn failed_probes_double_the_backoff_up_to_the_cap() {
        let h = health();
        let t0 = Instant::now();
        assert!(h.on_failure(Admission::Go, t0));
        let mut probe_at = t0 + 100 * MS;
        for next_backoff_ms in [200, 400, 400, 400] {
            assert_eq!(h.admit(probe_at - MS), Admission::Skip);
            assert_eq!(h.admit(probe_at), Admission::Probe);
            assert!(!h.on_failure(Admission::Probe, probe_at));
            probe_at += next_backoff_ms * MS;
        }
        // A success resets the backoff to the minimum.
        assert_eq!(h.admit(probe_at), Admission::Probe);
        assert!(h.on_success(Admission::Probe));
        assert!(h.on_failure(Admission::Go, probe_at));
        assert_eq!(h.admit(probe_at + 99 * MS), Admission::Skip);
        assert_eq!(h.admit(probe_at + 100 * MS), Admission::Probe);
    }

    #[test]
    fn late_failures_and_successes_of_old_requests_change_nothing() {
        let h = health();
        let t0 = Instant::now();
        assert!(h.on_failure(Admission::Go, t0));
        assert!(!h.on_failure(Admission::Go, t0 + 50 * MS));
        assert!(!h.on_success(Admission::Go));
        assert!(!h.is_up());
        assert_eq!(h.admit(t0 + 100 * MS), Admission::Probe);
    }

    #[test]
    fn a_lost_probe_expires() {
        let h = health();
        let t0 = Instant::now();
        h.on_failure(Admission::Go, t0);
        assert_eq!(h.admit(t0 + 100 * MS), Admission::Probe);
        assert_eq!(h.admit(t0 + 1099 * MS), Admission::Skip);
        assert_eq!(h.admit(t0 + 1100 * MS), Admission::Probe);
    }
}
