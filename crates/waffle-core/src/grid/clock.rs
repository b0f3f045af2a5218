//! Where a node's health decisions take the time from.
//!
//! When a node went down and when it may be probed again are decided on a
//! [`Clock`]: [`SystemClock`] (`Instant::now()`) in production, a clock the
//! test moves by hand in tests, so "a down node is skipped until its backoff
//! has passed" is checked without sleeping and without timing anything.
//! Request deadlines are not on it: a socket waits in real time.

use std::time::Instant;

pub trait Clock {
    fn now(&self) -> Instant;
}

/// The real clock. A zero-sized type: the grid's `now()` is `Instant::now()`, nothing more.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[inline]
    fn now(&self) -> Instant {
        Instant::now()
    }
}
