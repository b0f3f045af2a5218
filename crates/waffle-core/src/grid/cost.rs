//! Whether asking a node pays: its measured lookup cost against the disk
//! read a hit saves.
//!
//! A lookup (of a page the presence set says the grid may hold) costs one
//! round trip, `lookup_us`, and saves a disk read, `disk_us`, the fraction
//! `hit_ratio` of the time it finds the page. Asking pays while
//! `lookup_us < hit_ratio × disk_us`. Both sides are measured as the cache
//! runs (moving averages of real requests and real disk reads), so a fast
//! local disk, a loaded node or a distant one each show in the figures.
//!
//! A node that costs more than it saves is backed off: only one lookup and
//! one push in [`SAMPLE_EVERY`] go to it (the rest read the disk and drop the
//! evicted page), a sample small enough to cost little and large enough to
//! notice when the node gets cheap again. A margin ([`MARGIN`]) on either side
//! of the break-even, and [`MIN_SAMPLES`] lookups measured after each change
//! before the next, keep a node near it from flapping. The state and its
//! reason are in [`CostStatus`] (`PRAGMA waffle_stats`, the bench reports).

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::time::Duration;

use serde::Serialize;

/// While backed off, one lookup and one push in this many go to the node.
pub const SAMPLE_EVERY: u64 = 16;
/// Lookups and disk reads measured before the first decision (until then:
/// every request goes), and lookups measured after a change before the next.
pub const MIN_SAMPLES: u64 = 16;
/// A node backs off when a lookup costs more than (1 + MARGIN) × what it
/// saves, and comes back when it costs less than (1 - MARGIN) × that.
pub const MARGIN: f64 = 0.2;
/// The weight of a new sample in a moving average (1/16: the last few dozen
/// requests). While a node is backed off its samples are rare, so each one
/// weighs more ([`SPARSE_WEIGHT_SHIFT`]: 1/4) and recovery is noticed within
/// a few dozen samples.
const WEIGHT_SHIFT: u32 = 4;
const SPARSE_WEIGHT_SHIFT: u32 = 2;
/// Fixed point of the averages: values are kept × 256.
const FIXED_SHIFT: u32 = 8;
/// A hit ratio sample: 1.0 in fixed point of 16 bits.
const RATIO_ONE: u64 = 1 << 16;

/// An exponentially weighted moving average of `u64` samples, lock-free.
#[derive(Default)]
pub struct Ewma {
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

    fn samples(&self) -> u64 {
        self.samples.load(Ordering::Relaxed)
    }
}

/// The disk side, one per grid (a grid serves one cache): single-page reads.
#[derive(Default)]
pub struct DiskCost {
    read_us: Ewma,
}

impl DiskCost {
    pub fn record(&self, took: Duration) {
        self.read_us.record(took.as_micros() as u64, WEIGHT_SHIFT);
    }
}

/// Where a node stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CostState {
    /// Fewer than MIN_SAMPLES lookups or disk reads so far: every request goes.
    Measuring,
    /// A lookup costs less than the disk read it saves: every request goes.
    On,
    /// A lookup costs more than it saves: one in SAMPLE_EVERY goes.
    BackedOff,
}

impl CostState {
    fn from_u8(v: u8) -> CostState {
        match v {
            1 => CostState::On,
            2 => CostState::BackedOff,
            _ => CostState::Measuring,
        }
    }
}

/// A node's costs and decision, for stats and tools.
#[derive(Clone, Debug, Serialize)]
pub struct CostStatus {
    pub state: CostState,
    /// Moving average of a lookup's round trip, µs.
    pub lookup_us: f64,
    /// Moving average of the share of lookups that found their page.
    pub hit_ratio: f64,
    /// Moving average of a single-page disk read, µs (the whole cache's).
    pub disk_us: f64,
    /// What a lookup saves on average: hit_ratio × disk_us.
    pub saved_us: f64,
    /// Lookups not sent (backed off): those pages were read from the disk.
    pub declined_lookups: u64,
    /// Evicted pages not pushed (backed off): dropped, the disk has them.
    pub declined_pushes: u64,
    /// Why the node is in its state, in words.
    pub reason: String,
}

/// One node's measured lookup cost, hit ratio and state.
#[derive(Default)]
pub struct NodeCost {
    /// False: measure and decide, but send everything (`waffle_grid_backoff=off`).
    backoff: bool,
    lookup_us: Ewma,
    hit_ratio: Ewma,
    state: AtomicU8,
    /// Lookups recorded since the state last changed (or since the start).
    since_change: AtomicU64,
    lookup_ticket: AtomicU64,
    push_ticket: AtomicU64,
    declined_lookups: AtomicU64,
    declined_pushes: AtomicU64,
}

impl NodeCost {
    /// `backoff` false keeps the figures and the state but never declines a request.
    pub fn new(backoff: bool) -> NodeCost {
        NodeCost { backoff, ..NodeCost::default() }
    }

    pub fn state(&self) -> CostState {
        CostState::from_u8(self.state.load(Ordering::Relaxed))
    }

    /// Whether a lookup goes to the node (always, unless backed off and not sampled).
    pub fn admits_lookup(&self) -> bool {
        self.admits(&self.lookup_ticket, &self.declined_lookups)
    }

    /// Whether an evicted page is pushed to the node (as for lookups).
    pub fn admits_push(&self) -> bool {
        self.admits(&self.push_ticket, &self.declined_pushes)
    }

    fn admits(&self, ticket: &AtomicU64, declined: &AtomicU64) -> bool {
        if !self.backoff || self.state() != CostState::BackedOff {
            return true;
        }
        if ticket.fetch_add(1, Ordering::Relaxed).is_multiple_of(SAMPLE_EVERY) {
            return true;
        }
        declined.fetch_add(1, Ordering::Relaxed);
        false
    }

    /// A lookup answered (hit or miss) in `took`; decides again. Returns the
    /// new state when it changed (the caller says so once on stderr).
    pub fn record_lookup(&self, took: Duration, hit: bool, disk: &DiskCost) -> Option<CostState> {
        let shift = if self.state() == CostState::BackedOff { SPARSE_WEIGHT_SHIFT } else { WEIGHT_SHIFT };
        self.lookup_us.record(took.as_micros() as u64, shift);
        self.hit_ratio.record(if hit { RATIO_ONE } else { 0 }, shift);
        self.since_change.fetch_add(1, Ordering::Relaxed);
        let old = self.state();
        let new = decide(old, &self.figures(disk));
        if new == old {
            return None;
        }
        // Another thread may have decided the same meanwhile: only the one that moves it reports.
        self.state.compare_exchange(old as u8, new as u8, Ordering::Relaxed, Ordering::Relaxed).ok()?;
        self.since_change.store(0, Ordering::Relaxed);
        Some(new)
    }

    pub fn status(&self, disk: &DiskCost) -> CostStatus {
        let f = self.figures(disk);
        let state = self.state();
        CostStatus {
            state,
            lookup_us: round1(f.lookup_us),
            hit_ratio: (f.hit_ratio * 1000.0).round() / 1000.0,
            disk_us: round1(f.disk_us),
            saved_us: round1(f.saved_us()),
            declined_lookups: self.declined_lookups.load(Ordering::Relaxed),
            declined_pushes: self.declined_pushes.load(Ordering::Relaxed),
            reason: reason(state, &f, self.backoff),
        }
    }

    fn figures(&self, disk: &DiskCost) -> Figures {
        Figures {
            lookups: self.lookup_us.samples(),
            since_change: self.since_change.load(Ordering::Relaxed),
            disk_reads: disk.read_us.samples(),
            lookup_us: self.lookup_us.mean(),
            hit_ratio: self.hit_ratio.mean() / RATIO_ONE as f64,
            disk_us: disk.read_us.mean(),
        }
    }
}

/// What a decision rests on.
#[derive(Clone, Copy, Debug)]
struct Figures {
    lookups: u64,
    since_change: u64,
    disk_reads: u64,
    lookup_us: f64,
    hit_ratio: f64,
    disk_us: f64,
}

impl Figures {
    fn saved_us(&self) -> f64 {
        self.hit_ratio * self.disk_us
    }
}

/// The state after `old` given the figures: break-even with a margin either side.
fn decide(old: CostState, f: &Figures) -> CostState {
    if f.since_change < MIN_SAMPLES || f.disk_reads < MIN_SAMPLES {
        return old;
    }
    let saved = f.saved_us();
    match old {
        CostState::BackedOff if f.lookup_us < saved * (1.0 - MARGIN) => CostState::On,
        CostState::BackedOff => CostState::BackedOff,
        _ if f.lookup_us > saved * (1.0 + MARGIN) => CostState::BackedOff,
        _ => CostState::On,
    }
}

fn reason(state: CostState, f: &Figures, backoff: bool) -> String {
    let costs = format!(
        "a lookup costs {:.0} us and saves {:.2} x {:.0} us = {:.0} us of disk read",
        f.lookup_us,
        f.hit_ratio,
        f.disk_us,
        f.saved_us()
    );
    match state {
        CostState::Measuring => format!(
            "measuring: {} of {MIN_SAMPLES} lookups and {} of {MIN_SAMPLES} disk reads so far",
            f.lookups.min(MIN_SAMPLES),
            f.disk_reads.min(MIN_SAMPLES)
        ),
        CostState::On => format!("on: {costs}"),
        CostState::BackedOff if !backoff => {
            format!("would back off, but waffle_grid_backoff=off: every request is sent: {costs}")
        }
        CostState::BackedOff => format!("backed off (1 in {SAMPLE_EVERY} lookups and pushes sent): {costs}"),
    }
}

fn round1(v: f64) -> f64 {
    (v * 10.0).round() / 10.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(v: u64) -> Duration {
        Duration::from_micros(v)
    }

    fn disk_of(read_us: u64) -> DiskCost {
        let disk = DiskCost::default();
        (0..MIN_SAMPLES).for_each(|_| disk.record(us(read_us)));
        disk
    }

    #[test]
    fn a_node_cheaper_than_the_disk_stays_on_and_a_dearer_one_backs_off() {
        let disk = disk_of(500);
        let cheap = NodeCost::new(true);
        for _ in 0..MIN_SAMPLES {
            assert!(cheap.admits_lookup());
            cheap.record_lookup(us(50), true, &disk);
        }
        assert_eq!(cheap.state(), CostState::On);

        let dear = NodeCost::new(true);
        for i in 0..MIN_SAMPLES {
            assert_eq!(dear.state(), CostState::Measuring, "no decision on {i} samples");
            dear.record_lookup(us(2000), true, &disk);
        }
        assert_eq!(dear.state(), CostState::BackedOff);
        assert!(dear.status(&disk).reason.starts_with("backed off"), "{}", dear.status(&disk).reason);
    }

    #[test]
    fn a_low_hit_ratio_backs_off_even_a_fast_node() {
        let disk = disk_of(100);
        let node = NodeCost::new(true);
        // 60 us a lookup, one in four hits: it saves 25 us.
        for i in 0..4 * MIN_SAMPLES {
            node.record_lookup(us(60), i % 4 == 0, &disk);
        }
        assert_eq!(node.state(), CostState::BackedOff, "{:?}", node.status(&disk));
    }

    #[test]
    fn backed_off_sends_one_in_sample_every_and_counts_the_rest() {
        let disk = disk_of(100);
        let node = NodeCost::new(true);
        (0..MIN_SAMPLES).for_each(|_| {
            let _ = node.record_lookup(us(5000), true, &disk);
        });
        assert_eq!(node.state(), CostState::BackedOff);
        let sent = (0..10 * SAMPLE_EVERY).filter(|_| node.admits_lookup()).count() as u64;
        assert_eq!(sent, 10);
        let pushed = (0..10 * SAMPLE_EVERY).filter(|_| node.admits_push()).count() as u64;
        assert_eq!(pushed, 10);
        let s = node.status(&disk);
        assert_eq!((s.declined_lookups, s.declined_pushes), (150, 150));
    }

    #[test]
    fn a_backed_off_node_that_gets_fast_comes_back_within_a_few_dozen_samples_and_no_sooner_than_min_samples() {
        let disk = disk_of(500);
        let node = NodeCost::new(true);
        (0..MIN_SAMPLES).for_each(|_| {
            let _ = node.record_lookup(us(20_000), true, &disk);
        });
        assert_eq!(node.state(), CostState::BackedOff);
        let mut samples = 0;
        while node.state() == CostState::BackedOff {
            samples += 1;
            assert!(samples <= 40, "still backed off after {samples} fast samples: {:?}", node.status(&disk));
            node.record_lookup(us(40), true, &disk);
        }
        assert_eq!(node.state(), CostState::On);
        assert!(samples >= MIN_SAMPLES, "changed again after {samples} samples: no flapping on a burst");
    }

    #[test]
    fn with_backoff_off_the_state_is_shown_but_every_request_goes() {
        let disk = disk_of(100);
        let node = NodeCost::new(false);
        (0..MIN_SAMPLES).for_each(|_| {
            let _ = node.record_lookup(us(5000), true, &disk);
        });
        assert_eq!(node.state(), CostState::BackedOff);
        assert!((0..100).all(|_| node.admits_lookup() && node.admits_push()));
        let s = node.status(&disk);
        assert_eq!((s.declined_lookups, s.declined_pushes), (0, 0));
        assert!(s.reason.contains("waffle_grid_backoff=off"), "{}", s.reason);
    }

    #[test]
    fn near_break_even_the_margin_keeps_the_state() {
        let disk = disk_of(100);
        let node = NodeCost::new(true);
        (0..MIN_SAMPLES).for_each(|_| {
            let _ = node.record_lookup(us(95), true, &disk);
        });
        assert_eq!(node.state(), CostState::On);
        // 115 us against 100 saved: dearer, but within the margin.
        (0..4 * MIN_SAMPLES).for_each(|_| {
            let _ = node.record_lookup(us(115), true, &disk);
        });
        assert_eq!(node.state(), CostState::On);
        (0..4 * MIN_SAMPLES).for_each(|_| {
            let _ = node.record_lookup(us(130), true, &disk);
        });
        assert_eq!(node.state(), CostState::BackedOff);
        (0..4 * MIN_SAMPLES).for_each(|_| {
            let _ = node.record_lookup(us(95), true, &disk);
        });
        assert_eq!(node.state(), CostState::BackedOff, "95 us is not 20% below 100");
    }
}
