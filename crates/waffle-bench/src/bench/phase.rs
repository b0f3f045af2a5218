//! Driving a workload: every connection on a thread of its own, running
//! transactions until the time is up, with a latency histogram and, if
//! asked, the count of each second. Used by the runner and the restart; uses
//! only the workload ([`super::workload`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rand::rngs::SmallRng;
use rand::SeedableRng;
use rusqlite::Connection;

use super::workload::{Tally, Workload};

/// Runs the workload on every connection until `length` has passed (each
/// thread finishes the transaction it is in). Returns the summed tally, the
/// merged latency histogram (microseconds) and the elapsed seconds; with
/// `per_second`, also the transactions done in each whole second.
pub(super) fn phase(
    workload: &dyn Workload,
    conns: &mut [Connection],
    length: Duration,
    seed: u64,
    mut per_second: Option<&mut Vec<u64>>,
) -> (Tally, Histogram<u64>, f64) {
    let stop = AtomicBool::new(false);
    let done = AtomicU64::new(0);
    let start = Instant::now();
    let results: Vec<(Tally, Histogram<u64>)> = std::thread::scope(|s| {
        let handles: Vec<_> = conns
            .iter_mut()
            .enumerate()
            .map(|(i, conn)| {
                let (stop, done) = (&stop, &done);
                s.spawn(move || {
                    let mut rng = SmallRng::seed_from_u64(seed.wrapping_mul(1000).wrapping_add(i as u64 + 1));
                    let mut tally = Tally::default();
                    let mut hist = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3).expect("valid bounds");
                    while !stop.load(Ordering::Relaxed) {
                        let t = Instant::now();
                        let before = tally.done;
                        workload.run_one(conn, &mut rng, &mut tally);
                        if tally.done > before {
                            hist.saturating_record(t.elapsed().as_micros().max(1) as u64);
                            done.fetch_add(tally.done - before, Ordering::Relaxed);
                        }
                    }
                    (tally, hist)
                })
            })
            .collect();
        let deadline = start + length;
        let (mut next_second, mut counted) = (start + Duration::from_secs(1), 0);
        while Instant::now() < deadline && !handles.iter().all(|h| h.is_finished()) {
            let wake = deadline.min(next_second);
            std::thread::sleep(wake.saturating_duration_since(Instant::now()).min(Duration::from_millis(100)));
            if Instant::now() >= next_second {
                let now = done.load(Ordering::Relaxed);
                if let Some(series) = per_second.as_deref_mut() {
                    series.push(now - counted);
                }
                counted = now;
                next_second += Duration::from_secs(1);
            }
        }
        stop.store(true, Ordering::Relaxed);
        handles.into_iter().map(|h| h.join().expect("benchmark thread")).collect()
    });
    let seconds = start.elapsed().as_secs_f64();
    let mut tally = Tally::default();
    let mut hist = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3).expect("valid bounds");
    for (t, h) in &results {
        tally.add(t);
        hist.add(h).expect("same bounds");
    }
    (tally, hist, seconds)
}
