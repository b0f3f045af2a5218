//! A node's up/down state: a circuit breaker with exponential backoff.
//!
//! Up: every request goes. A fault that says the node is unusable (a failed
//! connection, a reset, a reply that cannot be parsed: [`Strike::Fatal`])
//! marks it down for `backoff`; so do [`MISSES_TO_DOWN`] missed deadlines in
//! a row ([`Strike::Miss`], no answer between them), not one: a live node on
//! a loaded machine misses a deadline now and then (a scheduler stall), and
//! one stall misses the deadlines of every request in flight at once, so
//! misses less than one deadline after the last one counted are the same
//! event and count once. While down, requests are skipped without waiting.
//! When the backoff has passed, exactly one request is let through as a probe
//! (half-open): success brings the node up, failure doubles the backoff (capped).
//! Time is passed in, so the state machine is tested without sleeping.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
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

/// Missed deadlines in a row (as separate events) that mark an up node down.
/// Measured (docs/design.md, "The deadline"): on a loopback node under a
/// loaded 2-core machine about 1 request in 50,000 misses a 5 ms deadline,
/// mostly in stalls that miss several at once; three separate misses with no
/// answer between them did not happen to a live node, and a node that stopped
/// answering is down after three deadlines (15 ms by default), not later.
pub const MISSES_TO_DOWN: u32 = 3;

/// How a failed request counts against its node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strike {
    /// The node is unusable: a failed connection, a reset, a broken reply.
    Fatal,
    /// A deadline missed on a working connection: down after [`MISSES_TO_DOWN`] in a row.
    Miss,
}

#[derive(Debug, Default)]
struct Misses {
    /// Separate missed-deadline events since the last answer.
    events: u32,
    /// When the last one counted ended.
    last: Option<Instant>,
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
    /// Fast path of [`Health::on_answer`]: nonzero while misses are counted.
    miss_events: AtomicU32,
    misses: Mutex<Misses>,
    /// Misses closer than this to the last one counted are the same event (the deadline).
    miss_merge: Duration,
    backoff_min: Duration,
    backoff_max: Duration,
    /// After this long an outstanding probe is presumed lost and another may go.
    /// Longer than any request's deadline.
    probe_expiry: Duration,
}

impl Health {
    /// `deadline`: a request's deadline (misses within it of each other are one event).
    pub fn new(backoff_min: Duration, backoff_max: Duration, probe_expiry: Duration, deadline: Duration) -> Health {
        Health {
            down_flag: AtomicBool::new(false),
            down: Mutex::new(None),
            miss_events: AtomicU32::new(0),
            misses: Mutex::new(Misses::default()),
            miss_merge: deadline,
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
        if self.miss_events.load(Ordering::Relaxed) != 0 {
            *self.lock_misses() = Misses::default();
            self.miss_events.store(0, Ordering::Relaxed);
        }
        if admission != Admission::Probe {
            return false;
        }
        let mut guard = self.lock();
        let was_down = guard.take().is_some();
        self.down_flag.store(false, Ordering::Release);
        was_down
    }

    /// The node failed. Returns true if this marked an up node down.
    pub fn on_failure(&self, admission: Admission, strike: Strike, now: Instant) -> bool {
        let mut guard = self.lock();
        match (guard.as_mut(), admission) {
            (None, _) if strike == Strike::Miss && !self.count_miss(now) => false,
            (None, _) => {
                *self.lock_misses() = Misses::default();
                self.miss_events.store(0, Ordering::Relaxed);
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

    /// Counts a missed deadline; true when it makes [`MISSES_TO_DOWN`] in a row.
    fn count_miss(&self, now: Instant) -> bool {
        let mut m = self.lock_misses();
        let same_event = m.last.is_some_and(|last| now.saturating_duration_since(last) < self.miss_merge);
        if !same_event {
            m.events += 1;
            m.last = Some(now);
            self.miss_events.store(m.events, Ordering::Relaxed);
        }
        m.events >= MISSES_TO_DOWN
    }

    /// Separate missed deadlines since the last answer (tests, stats).
    pub fn misses_in_a_row(&self) -> u32 {
        self.miss_events.load(Ordering::Relaxed)
    }

    fn lock_misses(&self) -> std::sync::MutexGuard<'_, Misses> {
        self.misses.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
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
        Health::new(100 * MS, 400 * MS, 1000 * MS, 5 * MS)
    }

    #[test]
    fn up_until_a_failure_then_skipped_until_the_backoff() {
        let h = health();
        let t0 = Instant::now();
        assert_eq!(h.admit(t0), Admission::Go);
        assert!(h.on_failure(Admission::Go, Strike::Fatal, t0));
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
        assert!(h.on_failure(Admission::Go, Strike::Fatal, t0));
        let mut probe_at = t0 + 100 * MS;
        for next_backoff_ms in [200, 400, 400, 400] {
            assert_eq!(h.admit(probe_at - MS), Admission::Skip);
            assert_eq!(h.admit(probe_at), Admission::Probe);
            assert!(!h.on_failure(Admission::Probe, Strike::Miss, probe_at));
            probe_at += next_backoff_ms * MS;
        }
        // A success resets the backoff to the minimum.
        assert_eq!(h.admit(probe_at), Admission::Probe);
        assert!(h.on_success(Admission::Probe));
        assert!(h.on_failure(Admission::Go, Strike::Fatal, probe_at));
        assert_eq!(h.admit(probe_at + 99 * MS), Admission::Skip);
        assert_eq!(h.admit(probe_at + 100 * MS), Admission::Probe);
    }

    #[test]
    fn late_failures_and_successes_of_old_requests_change_nothing() {
        let h = health();
        let t0 = Instant::now();
        assert!(h.on_failure(Admission::Go, Strike::Fatal, t0));
        assert!(!h.on_failure(Admission::Go, Strike::Fatal, t0 + 50 * MS));
        assert!(!h.on_success(Admission::Go));
        assert!(!h.is_up());
        assert_eq!(h.admit(t0 + 100 * MS), Admission::Probe);
    }

    #[test]
    fn a_lost_probe_expires() {
        let h = health();
        let t0 = Instant::now();
        h.on_failure(Admission::Go, Strike::Fatal, t0);
        assert_eq!(h.admit(t0 + 100 * MS), Admission::Probe);
        assert_eq!(h.admit(t0 + 1099 * MS), Admission::Skip);
        assert_eq!(h.admit(t0 + 1100 * MS), Admission::Probe);
    }

    #[test]
    fn one_missed_deadline_is_not_a_dead_node_three_in_a_row_are() {
        let h = health();
        let t0 = Instant::now();
        // Misses with answers between them never add up.
        for i in 0..100 {
            assert!(!h.on_failure(Admission::Go, Strike::Miss, t0 + i * 10 * MS));
            assert!(!h.on_failure(Admission::Go, Strike::Miss, t0 + i * 10 * MS + 6 * MS));
            assert!(!h.on_success(Admission::Go));
            assert!(h.is_up());
        }
        // Three separate misses in a row: down, at the third.
        let t1 = t0 + 2000 * MS;
        assert!(!h.on_failure(Admission::Go, Strike::Miss, t1));
        assert!(!h.on_failure(Admission::Go, Strike::Miss, t1 + 5 * MS));
        assert_eq!(h.misses_in_a_row(), 2);
        assert!(h.on_failure(Admission::Go, Strike::Miss, t1 + 10 * MS));
        assert!(!h.is_up());
        assert_eq!(h.admit(t1 + 110 * MS), Admission::Probe);
        assert!(h.on_success(Admission::Probe));
        assert_eq!(h.misses_in_a_row(), 0, "an answer starts the count over");
    }

    #[test]
    fn one_stall_that_misses_every_request_in_flight_is_one_miss() {
        let h = health();
        let t0 = Instant::now();
        // 16 requests in flight miss within one deadline of each other: one event.
        for i in 0..16 {
            assert!(!h.on_failure(Admission::Go, Strike::Miss, t0 + i * MS / 4));
        }
        assert_eq!(h.misses_in_a_row(), 1);
        assert!(h.is_up());
        // A second stall later, then an answer: still up, counting from zero.
        assert!(!h.on_failure(Admission::Go, Strike::Miss, t0 + 50 * MS));
        assert!(!h.on_success(Admission::Go));
        assert!(!h.on_failure(Admission::Go, Strike::Miss, t0 + 100 * MS));
        assert_eq!(h.misses_in_a_row(), 1);
    }

    #[test]
    fn a_failed_connection_is_down_at_once_and_a_missed_probe_backs_off() {
        let h = health();
        let t0 = Instant::now();
        assert!(!h.on_failure(Admission::Go, Strike::Miss, t0));
        assert!(h.on_failure(Admission::Go, Strike::Fatal, t0 + MS), "refused, reset: down at once");
        assert_eq!(h.admit(t0 + 101 * MS), Admission::Probe);
        // The probe missing its deadline is enough to stay down (backoff doubled).
        assert!(!h.on_failure(Admission::Probe, Strike::Miss, t0 + 106 * MS));
        assert!(!h.is_up());
        assert_eq!(h.admit(t0 + 305 * MS), Admission::Skip);
        assert_eq!(h.admit(t0 + 306 * MS), Admission::Probe);
    }
}
