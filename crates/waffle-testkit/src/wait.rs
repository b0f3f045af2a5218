//! Waiting for a condition with a deadline instead of sleeping.

use std::time::{Duration, Instant};

/// Polls `cond` every 10 ms until it holds or `timeout` passes; returns whether it held.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// [`wait_until`] that fails the test: panics naming `what` (what did not
/// happen, e.g. "the node to be marked down") if it does not within `timeout`.
#[track_caller]
pub fn wait_for(timeout: Duration, what: &str, cond: impl FnMut() -> bool) {
    assert!(wait_until(timeout, cond), "timed out after {timeout:?} waiting for {what}");
}
