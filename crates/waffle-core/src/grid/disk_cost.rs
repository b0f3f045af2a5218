//! The disk's side of the grid's cost (`grid::cost`): how long the cache's
//! single-page reads take, as a window's mean and as a moving average for
//! windows with too few reads. One per grid (a grid serves one cache).
//! It knows nothing of nodes; `cost` reads it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The weight of a new disk read in the moving average used when a window had
/// too few reads (1/16: the last few dozen).
const WEIGHT_SHIFT: u32 = 4;
/// Fixed point of the averages: values are kept × 256.
const FIXED_SHIFT: u32 = 8;

/// An exponentially weighted moving average of `u64` samples, lock-free.
#[derive(Default)]
struct Ewma {
    /// The average × 2^FIXED_SHIFT.
    fixed: AtomicU64,
    samples: AtomicU64,
}

impl Ewma {
    /// Adds `value`, weighted 2^-`weight_shift` (the first sample is taken whole).
    fn record(&self, value: u64, weight_shift: u32) {
        let sample = value.min(u64::MAX >> (FIXED_SHIFT + 1)) << FIXED_SHIFT;
        let first = self.samples.fetch_add(1, Ordering::Relaxed) == 0;
        // Bounded: a CAS retry only follows another thread's successful update.
        let _ = self.fixed.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
            Some(if first {
                sample
            } else if sample >= old {
                old + ((sample - old) >> weight_shift)
            } else {
                old - ((old - sample) >> weight_shift)
            })
        });
    }

    fn mean(&self) -> f64 {
        self.fixed.load(Ordering::Relaxed) as f64 / (1u64 << FIXED_SHIFT) as f64
    }
}

/// The disk side, one per grid (a grid serves one cache): single-page reads.
#[derive(Default)]
pub struct DiskCost {
    read_us: Ewma,
    sum_us: AtomicU64,
    reads: AtomicU64,
}

/// The disk's totals at a window's start.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct DiskMark {
    sum_us: u64,
    reads: u64,
}

impl DiskCost {
    pub fn record(&self, took: Duration) {
        let us = took.as_micros() as u64;
        self.read_us.record(us, WEIGHT_SHIFT);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
        self.reads.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    pub(super) fn mark(&self) -> DiskMark {
        DiskMark { sum_us: self.sum_us.load(Ordering::Relaxed), reads: self.reads() }
    }

    /// Reads since `mark`.
    pub(super) fn reads_since(&self, mark: DiskMark) -> u64 {
        self.reads().saturating_sub(mark.reads)
    }

    /// A read's mean since `mark`, or the moving average if fewer than `min_reads` since.
    pub(super) fn mean_since(&self, mark: DiskMark, min_reads: u64) -> f64 {
        let now = self.mark();
        let reads = now.reads.saturating_sub(mark.reads);
        if reads >= min_reads {
            now.sum_us.saturating_sub(mark.sum_us) as f64 / reads as f64
        } else {
            self.read_us.mean()
        }
    }

    /// The moving average of a read, µs.
    pub(super) fn mean(&self) -> f64 {
        self.read_us.mean()
    }
}
