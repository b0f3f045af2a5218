//! How late this process's threads wake, measured while a test's phase runs.
//!
//! A test that bounds how long a wait took (a grid fetch from a hung node
//! waits one deadline) reads the wall clock, and the wall clock also counts the
//! time the woken thread waited for a core. On a 2-core machine running three
//! test binaries (each in its own session, so its own scheduling group) a
//! thread woken at its deadline was measured to run 140-440 ms later
//! (docs/reliability.md, "A hung node's slowest fetch"). A [`StallMeter`]
//! sleeps in short steps beside the phase, in the same process, and keeps the
//! largest lateness of its wake-ups: what the machine added to any wait of the
//! phase, so that the bound holds what the code does and the machine's part
//! is measured rather than guessed.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// One sleep of the meter: short enough that any stall longer than it
/// covers one of its wake-ups.
const STEP: Duration = Duration::from_millis(5);

/// A thread measuring its own wake-up lateness until [`StallMeter::stop`].
pub struct StallMeter {
    stop: Arc<AtomicBool>,
    worst_us: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl StallMeter {
    pub fn start() -> StallMeter {
        let stop = Arc::new(AtomicBool::new(false));
        let worst_us = Arc::new(AtomicU64::new(0));
        let (s, w) = (stop.clone(), worst_us.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                let t0 = Instant::now();
                std::thread::sleep(STEP);
                let late = t0.elapsed().saturating_sub(STEP);
                w.fetch_max(late.as_micros() as u64, Ordering::Relaxed);
            }
        });
        StallMeter { stop, worst_us, thread: Some(thread) }
    }

    /// The largest lateness of a wake-up since [`StallMeter::start`] (the thread ends).
    pub fn stop(mut self) -> Duration {
        self.halt();
        Duration::from_micros(self.worst_us.load(Ordering::Relaxed))
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().expect("the stall meter's thread only sleeps");
        }
    }
}

impl Drop for StallMeter {
    fn drop(&mut self) {
        self.halt();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_wake_up_is_a_little_late_and_the_thread_ends() {
        let meter = StallMeter::start();
        std::thread::sleep(Duration::from_millis(50));
        let worst = meter.stop();
        // A sleep wakes after its time plus the timer's slack (50 us for a
        // thread of normal priority): never early, and not by a second.
        assert!(worst > Duration::ZERO && worst < Duration::from_secs(1), "{worst:?}");
    }
}
