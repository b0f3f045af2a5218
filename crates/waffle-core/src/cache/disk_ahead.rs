//! Whether read-ahead reads from the disk: what a page of a run costs against
//! the random reads it saves, measured as the cache runs.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::stats::Stats;

/// How long [`DiskAhead`] measures before it judges (the cost back-off's window, grid/cost.rs).
pub const DISK_AHEAD_WINDOW: Duration = Duration::from_secs(10);
/// Demand single-page reads and read-ahead runs (of 2 pages or more) a
/// window needs before it is judged: it lasts until it has them.
const DISK_AHEAD_MIN_RANDOM: u64 = 16;
const DISK_AHEAD_MIN_RUNS: u64 = 4;
/// Hysteresis: on, read-ahead from the disk stops when a page of a run costs
/// more than `used_ratio x random / MARGIN`; off, it resumes below
/// `used_ratio x random / MARGIN^2`.
pub const DISK_AHEAD_MARGIN: f64 = 1.25;
/// While read-ahead from the disk is off, one window in this many still reads
/// ahead from it, so runs keep being measured.
pub const DISK_AHEAD_PROBE_EVERY: u64 = 16;

/// Whether read-ahead reads from the disk: only where a page of a run costs
/// clearly less than what reading it ahead saves, measured as the cache runs
/// (issue 20 item 1; the same windows as the grid's cost back-off).
///
/// A window of `n` pages read as one run costs `n x s` (`s`: the run's time
/// per page). Without it, its missed page costs a random read `r` and each of
/// the `n - 1` pages ahead costs another only if the reader comes to it (the
/// share `u` of them: `ahead_used_disk / ahead_pages_disk`). So it pays when
/// `n x s < r x (1 + u x (n - 1))`, i.e. `s < u x r` for long windows (for
/// short ones the bound is higher: `u x r` is the safe side). With MARGIN
/// (1.25, the back-off's): on while `s <= 0.8 x u x r`, back on when
/// `s <= 0.64 x u x r`: for a scan (`u` ~ 1) a page of a run must cost under
/// 0.8 of a random read, for 3-leaf range queries (`u` ~ 2/3) about half.
/// What it leaves out (a page read ahead takes L1 room and a copy) is on the
/// side of the margin.
///
/// - `r`: the mean of demand single-page disk reads (`read_tiers`; not those
///   a skipped window left to its reader, which continue a run);
/// - `s`: the time of read-ahead runs of two pages or more over their pages;
/// - `u`: the window's share of disk pages read ahead that a read used
///   (the last one known when no pages were read ahead in it).
///
/// Sums per window of [`DISK_AHEAD_WINDOW`] (at least 16 random reads and
/// 4 runs), judged when a window opens after the window's end. Off, one
/// window in [`DISK_AHEAD_PROBE_EVERY`] reads ahead from the disk anyway (a
/// probe), so `s` and `u` stay measured. Until the first judgment it is on.
/// The grid's part of a window is not affected: it is a multi-get either way.
pub struct DiskAhead {
    random_ns: AtomicU64,
    randoms: AtomicU64,
    run_ns: AtomicU64,
    run_pages: AtomicU64,
    runs: AtomicU64,
    off: AtomicBool,
    /// Windows opened while off (every PROBE_EVERY-th is a probe).
    off_windows: AtomicU64,
    judge: Mutex<DiskAheadJudge>,
    window: Duration,
}

/// Totals at a window's start.
#[derive(Clone, Copy, Debug, Default)]
struct DiskAheadMark {
    random_ns: u64,
    randoms: u64,
    run_ns: u64,
    run_pages: u64,
    runs: u64,
    ahead_pages: u64,
    ahead_used: u64,
}

#[derive(Default)]
struct DiskAheadJudge {
    /// The running window's start (None before the first window opens).
    start: Option<Instant>,
    mark: DiskAheadMark,
    /// The last judged window's figures (µs, µs per page, share).
    random_us: f64,
    seq_page_us: f64,
    used_ratio: f64,
    judged: bool,
    changes: u64,
}

/// What a window opening now does with its disk pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum DiskAdmit {
    /// Reads them (read-ahead from the disk is on).
    Read,
    /// Off, but this window is the probe: reads them.
    Probe,
    /// Off: leaves them to the reader's demand reads.
    Skip,
}

/// The rule: whether read-ahead from the disk should be on after a window
/// that measured `random_us`, `seq_page_us` and `used_ratio`, from `on`.
fn disk_ahead_pays(on: bool, random_us: f64, seq_page_us: f64, used_ratio: f64) -> bool {
    let saved = used_ratio * random_us;
    seq_page_us * margin(on) <= saved
}

/// The rule's margin from `on`: wider to turn back on than to stay on (hysteresis).
fn margin(on: bool) -> f64 {
    if on {
        DISK_AHEAD_MARGIN
    } else {
        DISK_AHEAD_MARGIN * DISK_AHEAD_MARGIN
    }
}

/// What the stats show of [`DiskAhead`] (stats_json.rs writes it out); a
/// copy of its state, so its fields are open.
pub(super) struct DiskAheadView {
    pub(super) on: bool,
    /// A window was judged (until then the first one is still measuring).
    pub(super) judged: bool,
    /// The last judged window's figures: a random read (µs), a page of a run
    /// (µs), the share of pages read ahead that were used.
    pub(super) random_us: f64,
    pub(super) seq_page_us: f64,
    pub(super) used_ratio: f64,
    /// The rule's margin now (a page of a run may cost `used_ratio x random_us / margin`).
    pub(super) margin: f64,
    pub(super) changes: u64,
    /// The running window's samples so far.
    pub(super) window_random_reads: u64,
    pub(super) window_runs: u64,
}

impl DiskAhead {
    pub fn new(window: Duration) -> DiskAhead {
        DiskAhead {
            random_ns: AtomicU64::new(0),
            randoms: AtomicU64::new(0),
            run_ns: AtomicU64::new(0),
            run_pages: AtomicU64::new(0),
            runs: AtomicU64::new(0),
            off: AtomicBool::new(false),
            off_windows: AtomicU64::new(0),
            judge: Mutex::new(DiskAheadJudge { used_ratio: 1.0, ..DiskAheadJudge::default() }),
            window: window.max(Duration::from_millis(1)),
        }
    }

    /// A demand read of one page from the disk took `took`.
    pub(super) fn note_random(&self, took: Duration) {
        self.random_ns.fetch_add(took.as_nanos() as u64, Ordering::Relaxed);
        self.randoms.fetch_add(1, Ordering::Relaxed);
    }

    /// A read-ahead run of `pages` pages took `took` (runs of one page say nothing of sequential reads).
    pub(super) fn note_run(&self, took: Duration, pages: u64) {
        if pages < 2 {
            return;
        }
        self.run_ns.fetch_add(took.as_nanos() as u64, Ordering::Relaxed);
        self.run_pages.fetch_add(pages, Ordering::Relaxed);
        self.runs.fetch_add(1, Ordering::Relaxed);
    }

    pub fn is_on(&self) -> bool {
        !self.off.load(Ordering::Relaxed)
    }

    fn mark(&self, stats: &Stats) -> DiskAheadMark {
        DiskAheadMark {
            random_ns: self.random_ns.load(Ordering::Relaxed),
            randoms: self.randoms.load(Ordering::Relaxed),
            run_ns: self.run_ns.load(Ordering::Relaxed),
            run_pages: self.run_pages.load(Ordering::Relaxed),
            runs: self.runs.load(Ordering::Relaxed),
            ahead_pages: stats.ahead_pages_disk.get(),
            ahead_used: stats.ahead_used_disk.get(),
        }
    }

    /// A window opens at `now`: judges the running window if it is over,
    /// then says what this one does with its disk pages.
    pub(super) fn admit(&self, now: Instant, stats: &Stats) -> DiskAdmit {
        // One window opening at a time judges; the others go by the state as it is.
        if let Ok(mut j) = self.judge.try_lock() {
            self.judge_window(&mut j, now, stats);
        }
        if self.is_on() {
            return DiskAdmit::Read;
        }
        if self.off_windows.fetch_add(1, Ordering::Relaxed) % DISK_AHEAD_PROBE_EVERY == DISK_AHEAD_PROBE_EVERY - 1 {
            stats.read_ahead_disk_probes.incr();
            DiskAdmit::Probe
        } else {
            stats.read_ahead_disk_skips.incr();
            DiskAdmit::Skip
        }
    }

    fn judge_window(&self, j: &mut DiskAheadJudge, now: Instant, stats: &Stats) {
        let Some(start) = j.start else {
            j.start = Some(now);
            j.mark = self.mark(stats);
            return;
        };
        if now.saturating_duration_since(start) < self.window {
            return;
        }
        let (m, was) = (self.mark(stats), j.mark);
        let randoms = m.randoms - was.randoms;
        let runs = m.runs - was.runs;
        if randoms < DISK_AHEAD_MIN_RANDOM || runs < DISK_AHEAD_MIN_RUNS {
            return; // the window lasts until it has enough of both
        }
        j.random_us = (m.random_ns - was.random_ns) as f64 / randoms as f64 / 1000.0;
        j.seq_page_us = (m.run_ns - was.run_ns) as f64 / (m.run_pages - was.run_pages) as f64 / 1000.0;
        let ahead = m.ahead_pages.saturating_sub(was.ahead_pages);
        if ahead > 0 {
            j.used_ratio = (m.ahead_used.saturating_sub(was.ahead_used) as f64 / ahead as f64).min(1.0);
        }
        let on = self.is_on();
        let pays = disk_ahead_pays(on, j.random_us, j.seq_page_us, j.used_ratio);
        if pays != on {
            j.changes += 1;
            self.off.store(!pays, Ordering::Relaxed);
            self.off_windows.store(0, Ordering::Relaxed);
        }
        j.judged = true;
        j.start = Some(now);
        j.mark = m;
    }

    /// The state and the figures the stats show.
    pub(super) fn view(&self, stats: &Stats) -> DiskAheadView {
        let j = self.judge.lock().unwrap_or_else(|e| e.into_inner());
        let on = self.is_on();
        let m = self.mark(stats);
        DiskAheadView {
            on,
            judged: j.judged,
            random_us: j.random_us,
            seq_page_us: j.seq_page_us,
            used_ratio: j.used_ratio,
            margin: margin(on),
            changes: j.changes,
            window_random_reads: m.randoms - j.mark.randoms,
            window_runs: m.runs - j.mark.runs,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::disk_ahead_pays;

    #[test]
    fn the_rule_weighs_a_page_of_a_run_against_the_share_of_a_random_read_it_saves() {
        // cloud-block's profile: a sequential 4 KiB costs what a random one does.
        assert!(!disk_ahead_pays(true, 667.0, 667.0, 1.0));
        // hdd-10k: 30 us per 4 KiB streaming against a 5 ms seek; pays even for 3-leaf range queries.
        assert!(disk_ahead_pays(true, 5000.0, 30.0, 0.67));
        assert!(disk_ahead_pays(false, 5000.0, 30.0, 0.67));
        // Pages nobody reads: never.
        assert!(!disk_ahead_pays(true, 5000.0, 30.0, 0.0));
        // Hysteresis: at 0.7 of a random read for a scan, on stays on, off stays off.
        assert!(disk_ahead_pays(true, 100.0, 70.0, 1.0));
        assert!(!disk_ahead_pays(false, 100.0, 70.0, 1.0));
        // Range queries using 2 pages of 3: a page of a run must cost under about half a random read.
        assert!(disk_ahead_pays(true, 100.0, 53.0, 0.67));
        assert!(!disk_ahead_pays(true, 100.0, 54.0, 0.67));
    }
}
