//! The page cache of one database (one file, or several as segments): L1,
//! then the grid, then the disk.
//!
//! Read: L1 → push queue → grid (exclusive fetch, envelope checked against the
//! version the file holds) → the backing the adapter passed with the read,
//! asked for a [`PageId`]. Whatever a read found below L1 goes into L1, but
//! only if no write changed the page meanwhile.
//!
//! Write: the adapter writes the file first and only then calls
//! [`PageCache::wrote`]: the page gets a new version (every older grid copy is
//! now rejected) and L1 takes the new bytes. Pages L1 evicts go to the pusher.
//!
//! A version check and the L1 update it guards happen under one stripe lock
//! per page, so a read that raced a write never installs the older bytes.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use crate::backing::{Backing, PageId};
use crate::codec::{Codec, Stored};
use crate::envelope::{self, Identity};
use crate::grid::{Clock, Fetch, Grid, SystemClock};
use crate::pool::{Ahead, Evicted, Pool};
use crate::presence::{DiskReason, Fate, Presence, Verdict};
use crate::pusher::{GridSlot, PushTally, Pusher};
use crate::seal::SealKey;
use crate::stats::{Stats, Tier};
use crate::verify::{self, How, Served, Verifier};
use crate::versions::{self, SavedVersions, Versions, MAX_PAGES, SEGMENT_BITS};
use crate::working_set::{self, WorkingSet};

const STRIPES: usize = 256;
/// Most pages one read-ahead window asks for (one grid round trip, one disk read).
pub const READ_AHEAD_MAX_PAGES: u64 = 32;
/// The first window of a sequential run, in pages (the missed page included):
/// a range query of two or three leaves reads ahead at most three pages.
pub const READ_AHEAD_FIRST_PAGES: u64 = 4;
/// A miss at most this many pages past the last window continues its run
/// (a b-tree scan skips the interior pages between its leaves).
const READ_AHEAD_GAP_PAGES: u64 = 8;
/// A window is at most this fraction of L1, so a scan cannot evict its own window before reading it.
const READ_AHEAD_L1_DIVISOR: u64 = 16;
/// After a window found nothing in the grid, this many windows skip the grid (then one asks again).
const READ_AHEAD_GRID_BACKOFF: u32 = 8;
/// How long a clean close waits for the pusher to send L1 to the grid.
pub const CLOSE_FLUSH_MS: u64 = 10_000;

/// Where a read was answered from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    L1,
    PushQueue,
    L2,
    Disk,
    /// Brought in by a sequential scan's read-ahead window (from the grid or the disk).
    ReadAhead,
}

/// One sequential reader's read-ahead: the adapter keeps one per handle it
/// reads through ([`PageCache::read_sequential`]), as Linux keeps one per open
/// file. A window grows only while its pages are used (Linux's on-demand
/// read-ahead; InnoDB's linear read-ahead waits for most of an extent):
///
/// - a run starts with a window of [`READ_AHEAD_FIRST_PAGES`];
/// - at the next miss past it (within [`READ_AHEAD_GAP_PAGES`] of its end),
///   if the reader read at least half of the pages the window read ahead,
///   the next window doubles (up to [`READ_AHEAD_MAX_PAGES`] and 1/16 of
///   L1); if it read fewer, it halves (not below the first size); if it read
///   none, read-ahead stops: misses read their page alone until the reader
///   reads a page right after the last one it missed, which starts a first
///   window again;
/// - a miss elsewhere (behind the window, or further past it) starts a new run.
///
/// While read-ahead from the disk is off ([`DiskAhead`]) the ramp runs on:
/// a window that left its disk pages unread (`skipped`) counts the reader's
/// misses inside it as used (read ahead, they would have been hits), so a
/// probe window, and the first window after it turns on again, has the size
/// the reader's run has earned.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadAhead {
    /// The last window: pages `start..end` (`start`: the miss that opened it).
    /// Stopped: `end` is the page after the last one the reader read.
    start: u64,
    end: u64,
    /// Pages of `start + 1..end` the reader has read since (found in L1).
    used: u64,
    /// The last window's size in pages: 0 none yet, 1 stopped.
    size: u64,
    /// The last window read nothing ahead from the disk (only the grid's pages).
    skipped: bool,
}

impl ReadAhead {
    pub const fn new() -> ReadAhead {
        ReadAhead { start: 0, end: 0, used: 0, size: 0, skipped: false }
    }

    /// The reader left its run: the next window starts small.
    pub fn reset(&mut self) {
        *self = ReadAhead::new();
    }

    /// The last window's size in pages (its missed page included); 1 when
    /// read-ahead stopped, 0 before the first window.
    pub fn last_window(&self) -> u64 {
        self.size
    }

    /// The reader found `page` in L1 (or the push queue).
    fn read_hit(&mut self, page: u64) {
        if self.size == 1 {
            if page == self.end {
                self.end += 1;
            }
        } else if page > self.start && page < self.end {
            self.used += 1;
        }
    }

    /// The reader missed `page`: the size of the window to read now, in
    /// pages (`page` included), at most `max`; 1: `page` alone.
    fn next_size(&self, page: u64, max: u64) -> u64 {
        let continues = self.size > 0 && page > self.start && page <= self.end + READ_AHEAD_GAP_PAGES;
        let size = if !continues {
            READ_AHEAD_FIRST_PAGES
        } else if self.size == 1 {
            if page == self.end {
                READ_AHEAD_FIRST_PAGES
            } else {
                1
            }
        } else {
            let ahead = self.end - self.start - 1;
            if ahead == 0 {
                READ_AHEAD_FIRST_PAGES
            } else if self.used == 0 {
                1
            } else if self.used * 2 >= ahead {
                self.size * 2
            } else {
                (self.size / 2).max(READ_AHEAD_FIRST_PAGES)
            }
        };
        size.min(max)
    }

    /// A window of `size` pages opened at `page`, reaching `end` (the end of
    /// its file may cut it short).
    fn opened(&mut self, page: u64, end: u64, size: u64) {
        *self = ReadAhead { start: page, end, used: 0, size, skipped: false };
    }

    /// The reader missed `page` inside a window that skipped the disk: the
    /// page is read on demand, and counts as used (the window would have
    /// brought it).
    fn inside_skipped(&mut self, page: u64) -> bool {
        let inside = self.skipped && self.size > 1 && page > self.start && page < self.end;
        if inside {
            self.used += 1;
        }
        inside
    }
}

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
enum DiskAdmit {
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
    let margin = if on { DISK_AHEAD_MARGIN } else { DISK_AHEAD_MARGIN * DISK_AHEAD_MARGIN };
    seq_page_us * margin <= saved
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
    fn note_random(&self, took: Duration) {
        self.random_ns.fetch_add(took.as_nanos() as u64, Ordering::Relaxed);
        self.randoms.fetch_add(1, Ordering::Relaxed);
    }

    /// A read-ahead run of `pages` pages took `took` (runs of one page say nothing of sequential reads).
    fn note_run(&self, took: Duration, pages: u64) {
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
    fn admit(&self, now: Instant, stats: &Stats) -> DiskAdmit {
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

    /// `read_ahead_disk` of the stats JSON.
    fn to_json(&self, stats: &Stats) -> Value {
        let j = self.judge.lock().unwrap_or_else(|e| e.into_inner());
        let on = self.is_on();
        let margin = if on { DISK_AHEAD_MARGIN } else { DISK_AHEAD_MARGIN * DISK_AHEAD_MARGIN };
        let round = |x: f64| (x * 10.0).round() / 10.0;
        let m = self.mark(stats);
        json!({
            "on": on,
            "state": if !j.judged { "measuring" } else if on { "on" } else { "off" },
            // The last judged window's figures: a random read, a page of a run,
            // the share of pages read ahead that were used, and the most a page
            // of a run may cost for the state to be on after the next window.
            "random_us": round(j.random_us),
            "seq_page_us": round(j.seq_page_us),
            "used_ratio": (j.used_ratio * 1000.0).round() / 1000.0,
            "limit_us": round(j.used_ratio * j.random_us / margin),
            "changes": j.changes,
            "skipped_windows": stats.read_ahead_disk_skips.get(),
            "probes": stats.read_ahead_disk_probes.get(),
            // The running window's samples so far.
            "window_random_reads": m.randoms - j.mark.randoms,
            "window_runs": m.runs - j.mark.runs,
        })
    }
}

/// What a clean close did with L1.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CloseReport {
    /// Pages L1 held (scan pages, which are never pushed, not counted).
    pub l1_pages: u64,
    /// Of those, stored in the grid.
    pub pushed: u64,
    /// Not stored: no room in time, or the grid refused them.
    pub dropped: u64,
    /// The flush did not finish within CLOSE_FLUSH_MS.
    pub timed_out: bool,
}

/// The adapter's own check of a grid copy, run after the envelope matched and
/// before the bytes reach L1 or the caller (the database knows its page format;
/// InnoDB pages carry their number, space id, checksum and LSN).
pub trait PageCheck: Send + Sync {
    /// Whether `bytes` are a page the database would accept as `page`.
    fn accepts(&self, page: u64, bytes: &[u8]) -> bool;
}

pub struct CacheOptions {
    /// Names this incarnation of the database in every key and envelope.
    pub cache_id: u64,
    /// Versions saved by a clean close (warm restart); None starts cold.
    pub saved: Option<SavedVersions>,
    /// The page size the saved versions were made with; 0 when unknown.
    pub page_bytes: usize,
    pub local_bytes: u64,
    pub push_queue_bytes: u64,
    /// None: L1 only (a grid can be given later with [`PageCache::set_grid`]).
    pub grid: Option<Arc<Grid>>,
    /// Seal grid values (and accept only sealed ones) with this key.
    pub seal_key: Option<Arc<SealKey>>,
    /// Checks grid copies beyond the envelope (None: the envelope is enough).
    pub page_check: Option<Box<dyn PageCheck>>,
    /// How pushed pages are compressed (any form is read back, whatever this says).
    pub codec: Codec,
}

pub struct PageCache {
    cache_id: u64,
    pool: Pool,
    versions: Versions,
    /// Pages the grid may hold (pushed, not taken back or outdated since).
    presence: Arc<Presence>,
    grid: Arc<GridSlot>,
    seal_key: Option<Arc<SealKey>>,
    page_check: Option<Box<dyn PageCheck>>,
    pusher: Pusher,
    stats: Arc<Stats>,
    stripes: Box<[Mutex<()>]>,
    /// The page size in use; 0 until the first whole-page access.
    page_bytes: AtomicUsize,
    /// Windows left that skip the grid (it had nothing for the last one).
    read_ahead_grid_skip: AtomicU32,
    /// Whether read-ahead reads from the disk (what a page of a run costs against a random read).
    disk_ahead: DiskAhead,
    /// Times disk reads for `disk_ahead` (and the latency histograms): the real clock but in tests.
    clock: Arc<dyn Clock + Send + Sync>,
    /// Tripped by an internal error on a write or invalidation path: from then
    /// on every read goes to the file and nothing is cached (see [`PageCache::trip`]).
    fused: AtomicBool,
    fuse_reason: Mutex<Option<String>>,
    /// Distinct pages read or written lately (the stats' `working_set`).
    working_set: WorkingSet,
    /// Verify mode (verify.rs): off unless the adapter enables it.
    verifier: Verifier,
}

impl PageCache {
    pub fn new(opts: CacheOptions) -> PageCache {
        let stats = Arc::new(Stats::new());
        let grid = Arc::new(GridSlot::new(opts.grid));
        let presence = Arc::new(Presence::new());
        // A warm start: the grid may hold any page the saved versions name.
        presence.insert_first(opts.saved.as_ref().map_or(0, |s| s.table.len() as u64));
        let pusher = Pusher::start(
            Arc::clone(&grid),
            Arc::clone(&stats),
            opts.cache_id,
            opts.push_queue_bytes,
            opts.seal_key.clone(),
            Arc::clone(&presence),
            opts.codec,
        );
        PageCache {
            cache_id: opts.cache_id,
            pool: Pool::new(opts.local_bytes),
            versions: opts.saved.map(Versions::restore).unwrap_or_default(),
            presence,
            grid,
            seal_key: opts.seal_key,
            page_check: opts.page_check,
            pusher,
            stats,
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            page_bytes: AtomicUsize::new(opts.page_bytes),
            read_ahead_grid_skip: AtomicU32::new(0),
            disk_ahead: DiskAhead::new(DISK_AHEAD_WINDOW),
            clock: Arc::new(SystemClock),
            fused: AtomicBool::new(false),
            fuse_reason: Mutex::new(None),
            working_set: WorkingSet::new(),
            verifier: Verifier::default(),
        }
    }

    /// Turns verify mode on (`waffle_verify=on`): every page a tier serves is
    /// compared with the file; `label` names the database in its log lines.
    pub fn enable_verify(&self, label: String, log: Option<std::path::PathBuf>) {
        self.verifier.enable(label, log);
    }

    pub fn verifies(&self) -> bool {
        self.verifier.is_on()
    }

    pub fn cache_id(&self) -> u64 {
        self.cache_id
    }

    /// An internal error on a write or invalidation path means the tiers may
    /// hold bytes the file no longer has: the cache turns itself off for good
    /// (every read goes to the file, nothing is cached or pushed), says so once
    /// on stderr, and shows the reason in the stats. Cheaper than being wrong.
    pub fn trip(&self, why: &str) {
        if self.fused.swap(true, Ordering::AcqRel) {
            return;
        }
        crate::error!("{why}; the cache is off for this database until it is reopened (every read goes to the file)");
        *self.fuse_reason.lock().unwrap_or_else(|e| e.into_inner()) = Some(why.to_string());
        // Best effort: L1 and the queue may be what failed.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.pool.clear();
            self.pusher.discard(|_| true);
        }));
    }

    /// Whether [`PageCache::trip`] turned the cache off.
    pub fn is_fused(&self) -> bool {
        self.fused.load(Ordering::Acquire)
    }

    /// Reads the file only (the fuse is tripped).
    fn read_through(&self, page: u64, buf: &mut [u8], file: &dyn Backing) -> io::Result<(usize, Source)> {
        let n = file.read_pages(PageId::of(page), buf.len(), buf)?;
        buf[n..].fill(0);
        // The cache turned itself off: every copy it held was given up.
        self.stats.disk_read(DiskReason::Invalidated);
        Ok((n, Source::Disk))
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The grid in use now (None: L1 only).
    pub fn grid(&self) -> Option<Arc<Grid>> {
        self.grid.get()
    }

    /// Switches to another grid (or none) while the database is open. Pages
    /// waiting to be pushed go to the new grid; copies on nodes that left are
    /// orphans (misses), and any that come back later are checked by version.
    pub fn set_grid(&self, grid: Option<Arc<Grid>>) {
        let old = self.grid.get();
        self.grid.set(grid.clone());
        // A page whose key now maps to another node is not where the new grid
        // will look: its stamp goes (a lookup would only miss).
        match (old, grid) {
            (Some(old), Some(new)) => self.presence.retain(|page| {
                let key = envelope::GridKey::new(self.cache_id, page);
                old.node_label(key.as_bytes()) == new.node_label(key.as_bytes())
            }),
            // Not `clear`: a grid change is no new epoch; the pages keep their fates.
            _ => self.presence.retain(|_| false),
        }
        // Other nodes keep other pages: what the old grid was seen to keep says nothing of the new one.
        self.presence.forget_reach();
    }

    pub fn page_bytes(&self) -> usize {
        self.page_bytes.load(Ordering::Acquire)
    }

    /// Reads page `page` (of `buf.len()` bytes) into `buf`, from `file` when
    /// no tier has it. Returns the bytes the file holds there (fewer than
    /// `buf.len()` only at end of file; the rest is zeroed) and where they
    /// came from. The adapter passes its file at every read: the cache keeps
    /// pages, never a handle on the files they come from.
    pub fn read(&self, page: u64, buf: &mut [u8], file: &dyn Backing) -> io::Result<(usize, Source)> {
        let served = self.read_tiers(page, buf, file, true)?;
        self.verified(page, buf, served, file)
    }

    /// L1, the push queue, the grid, then the disk. `random`: a disk read
    /// here is a sample of a random read for [`DiskAhead`] (false for the
    /// pages a window that skipped the disk left to its reader: they continue a run).
    fn read_tiers(&self, page: u64, buf: &mut [u8], file: &dyn Backing, random: bool) -> io::Result<(usize, Source)> {
        if self.is_fused() {
            return self.read_through(page, buf, file);
        }
        self.adopt_page_size(buf.len());
        let t0 = Instant::now();
        self.working_set.note(page, t0);
        let version = self.versions.current(page);
        let got = self.pool.get_used(page, buf).map(|(installed, ahead)| {
            // (A stale read-ahead copy counts as used too: it left unread by no eviction.)
            self.count_used(ahead);
            installed
        });
        match got {
            Some(installed) if installed == version => {
                self.stats.l1_hits.incr();
                self.stats.record(Tier::L1, t0.elapsed());
                return Ok((buf.len(), Source::L1));
            }
            // Installed at a version the file has left (a write raced, or a path
            // that should have removed it did not): never served.
            Some(_) => self.drop_stale_l1(page),
            None => {}
        }
        self.stats.l1_misses.incr();

        if let Some(e) = self.pusher.take(page) {
            if e.version == version && e.bytes.len() == buf.len() {
                buf.copy_from_slice(&e.bytes);
                self.stats.push_queue_hits.incr();
                self.fill(page, version, e.bytes, How::PushQueue);
                return Ok((buf.len(), Source::PushQueue));
            }
        }

        let grid = self.grid.get();
        // Why this read goes to the disk, decided at the miss: the grid's answer, else the page's fate.
        let why = match &grid {
            Some(grid) => match self.ask_grid(grid, page, version, buf) {
                Ok(()) => {
                    self.fill(page, version, Box::from(&*buf), How::Grid);
                    return Ok((buf.len(), Source::L2));
                }
                Err(why) => why,
            },
            None => self.presence.absent_reason(page),
        };

        let t2 = self.clock.now();
        let n = file.read_pages(PageId::of(page), buf.len(), buf)?;
        let took = self.clock.now().saturating_duration_since(t2);
        self.stats.record(Tier::Disk, took);
        if random && n == buf.len() {
            self.disk_ahead.note_random(took);
        }
        if let Some(grid) = &grid {
            grid.note_disk_read(took);
        }
        self.stats.disk_read(why);
        if n < buf.len() {
            // Past the end of the file: nothing to cache.
            buf[n..].fill(0);
            self.stats.disk_short_reads.incr();
            return Ok((n, Source::Disk));
        }
        self.versions.touch(page);
        self.fill(page, version, Box::from(&*buf), How::Disk);
        Ok((n, Source::Disk))
    }

    /// Reads page `page` for a sequential scan (the adapter saw consecutive
    /// page reads); `ra` is the reader's read-ahead state (one per handle,
    /// see [`ReadAhead`] for how a window's size is chosen). Pages already in
    /// L1 are read without making them hotter. A miss fetches a window of the
    /// following pages at once: one pipelined grid request (plain `mg`: the
    /// grid keeps its copies) for the window's pages the grid may hold, and
    /// one disk read per contiguous run of what the grid lacked. Window pages
    /// enter L1 marked as scan pages: evicted unread, they are dropped, not
    /// pushed, so a one-pass scan flushes neither L1's hot pages nor the
    /// grid's.
    ///
    /// Counting: a miss here is an `l1_misses` that starts one
    /// `read_ahead_windows` (or, read-ahead stopped, goes the ordinary way);
    /// what the window brings is counted in the `read_ahead_*` counters only,
    /// so `l2_*`, `disk_reads` and the latency histograms keep describing
    /// demand reads one page at a time. The pages it brought ahead of the
    /// missed one are counted by source (`ahead_pages_*`), and again when a
    /// read first uses one (`ahead_used_*`).
    ///
    /// Read-ahead from the disk only where it pays ([`DiskAhead`]): off, a
    /// window still asks the grid for its pages in one multi-get, reads its
    /// missed page from the disk if the grid lacked it, and leaves the other
    /// pages to the reader, whose misses inside the window are demand reads
    /// (`disk_reads`); `read_ahead_disk_skips` counts such windows,
    /// `read_ahead_disk_probes` the one in 16 that reads ahead anyway.
    pub fn read_sequential(
        &self,
        page: u64,
        buf: &mut [u8],
        file: &dyn Backing,
        ra: &mut ReadAhead,
    ) -> io::Result<(usize, Source)> {
        let served = self.read_window(page, buf, file, ra)?;
        self.verified(page, buf, served, file)
    }

    fn read_window(
        &self,
        page: u64,
        buf: &mut [u8],
        file: &dyn Backing,
        ra: &mut ReadAhead,
    ) -> io::Result<(usize, Source)> {
        if self.is_fused() {
            return self.read_through(page, buf, file);
        }
        self.adopt_page_size(buf.len());
        let page_bytes = buf.len() as u64;
        let max = (self.pool.capacity_bytes() / page_bytes / READ_AHEAD_L1_DIVISOR).min(READ_AHEAD_MAX_PAGES);
        if max < 2 {
            return self.read_tiers(page, buf, file, false);
        }
        let t0 = Instant::now();
        self.working_set.note(page, t0);
        let version = self.versions.current(page);
        let peeked = match self.pool.peek(page, buf) {
            Some((installed, scan, ahead)) if installed == version => {
                self.count_used(ahead);
                Some(scan)
            }
            Some((_, _, ahead)) => {
                self.count_used(ahead); // as in read_tiers
                self.drop_stale_l1(page);
                None
            }
            None => None,
        };
        if let Some(scan) = peeked {
            ra.read_hit(page);
            if scan {
                self.stats.read_ahead_hits.incr();
                return Ok((buf.len(), Source::ReadAhead));
            }
            self.stats.l1_hits.incr();
            self.stats.record(Tier::L1, t0.elapsed());
            return Ok((buf.len(), Source::L1));
        }
        if self.pusher.is_queued(page) {
            // Evicted a moment ago and not pushed yet: the ordinary path takes it back.
            ra.read_hit(page);
            return self.read_tiers(page, buf, file, false);
        }
        if ra.inside_skipped(page) {
            // A page the last window left to its reader (read-ahead from the disk is off).
            return self.read_tiers(page, buf, file, false);
        }
        let size = ra.next_size(page, max);
        if size < 2 {
            // Read-ahead stopped: the last window was not read.
            ra.opened(page, page + 1, 1);
            return self.read_tiers(page, buf, file, true);
        }
        self.stats.l1_misses.incr();
        // The window stays in the page's file (a segment holds MAX_PAGES pages).
        let end = (page + size).min((page >> SEGMENT_BITS << SEGMENT_BITS) + MAX_PAGES);
        ra.opened(page, end, size);
        // Off, the disk reads only the missed page (if the grid lacks it); the reader reads the rest on demand.
        let skip = self.disk_ahead.admit(self.clock.now(), &self.stats) == DiskAdmit::Skip;
        ra.skipped = skip;
        // Pages the pusher holds are left to their demand read, which takes them from it: the
        // grid may still hold an older copy until their store lands (presence marks them first).
        let wanted: Vec<u64> =
            (page..end).filter(|&p| p == page || !(self.pool.contains(p) || self.pusher.holds(p))).collect();
        let versions: Vec<u64> = wanted.iter().map(|&p| self.versions.current(p)).collect();
        let mut got: Vec<Option<Box<[u8]>>> = vec![None; wanted.len()];
        let mut from_grid = vec![false; wanted.len()];
        self.stats.read_ahead_windows.incr();

        if let Some(grid) = self.grid.get() {
            // The grid is asked, in one round trip, for the window's pages it
            // may hold (pushed at their version, within its reach); the disk
            // reads only the rest.
            let held = |p: u64| matches!(self.presence.verdict(p), Verdict::Held { .. });
            let asked: Vec<usize> = (0..wanted.len()).filter(|&i| held(wanted[i])).collect();
            if asked.is_empty() {
                self.stats.read_ahead_presence_skips.incr();
            } else if self.read_ahead_grid_skip.load(Ordering::Relaxed) == 0 {
                let keys: Vec<String> = asked.iter().map(|&i| envelope::key(self.cache_id, wanted[i])).collect();
                let key_refs: Vec<&[u8]> = keys.iter().map(|k| k.as_bytes()).collect();
                let fetched = grid.get_many(&key_refs);
                self.stats.read_ahead_grid_requests.incr();
                let mut found = 0;
                for (&i, f) in asked.iter().zip(fetched) {
                    if let Fetch::Hit(value) = f {
                        self.stats.l2_fetch_bytes.add(value.len() as u64);
                        let expect = Identity { cache_id: self.cache_id, page: wanted[i], version: versions[i] };
                        let mut bytes = vec![0u8; page_bytes as usize].into_boxed_slice();
                        match self
                            .open_value(&value, expect, &mut bytes)
                            .and_then(|()| self.check_page(wanted[i], &bytes))
                        {
                            Ok(()) => {
                                got[i] = Some(bytes);
                                from_grid[i] = true;
                                found += 1;
                            }
                            Err(reject) => self.stats.reject(reject),
                        }
                    }
                }
                self.stats.read_ahead_pages_l2.add(found);
                if found == 0 {
                    self.read_ahead_grid_skip.store(READ_AHEAD_GRID_BACKOFF, Ordering::Relaxed);
                }
            } else {
                self.read_ahead_grid_skip.fetch_sub(1, Ordering::Relaxed);
            }
        }

        // The rest from disk: one read per contiguous run (skipping: the missed page alone).
        let mut i = 0;
        while i < wanted.len() {
            if got[i].is_some() {
                i += 1;
                continue;
            }
            if skip && wanted[i] != page {
                break;
            }
            let mut j = i + 1;
            while !skip && j < wanted.len() && got[j].is_none() && wanted[j] == wanted[j - 1] + 1 {
                j += 1;
            }
            let mut run = vec![0u8; (j - i) * page_bytes as usize];
            let t = self.clock.now();
            let n = file.read_pages(PageId::of(wanted[i]), page_bytes as usize, &mut run)?;
            let took = self.clock.now().saturating_duration_since(t);
            self.stats.read_ahead_disk_reads.incr();
            let whole = n / page_bytes as usize;
            if whole == j - i {
                self.disk_ahead.note_run(took, whole as u64);
            }
            self.stats.read_ahead_pages_disk.add(whole as u64);
            for (k, chunk) in run.chunks_exact(page_bytes as usize).take(whole).enumerate() {
                self.versions.touch(wanted[i + k]);
                got[i + k] = Some(Box::from(chunk));
            }
            if whole < j - i {
                break; // end of file: nothing after this run exists
            }
            i = j;
        }

        let mut evicted = Vec::new();
        let mut served = None;
        for (k, bytes) in got.into_iter().enumerate() {
            let Some(bytes) = bytes else { continue };
            let source = if from_grid[k] { Ahead::Grid } else { Ahead::Disk };
            if wanted[k] == page {
                buf.copy_from_slice(&bytes);
                served = Some(if from_grid[k] { Source::L2 } else { Source::Disk });
            }
            // The missed page is served now: only the pages after it are read ahead.
            let ahead = (wanted[k] != page).then_some(source);
            let _g = self.stripe(wanted[k]);
            if self.versions.current(wanted[k]) == versions[k] {
                self.pool.insert_ahead(wanted[k], versions[k], bytes, ahead, &mut evicted);
                self.verifier.entered(wanted[k], versions[k], How::ReadAhead);
                match ahead {
                    Some(Ahead::Disk) => self.stats.ahead_pages_disk.incr(),
                    Some(Ahead::Grid) => self.stats.ahead_pages_l2.incr(),
                    None => {}
                }
            }
        }
        self.settle(evicted);
        match served {
            Some(source) => Ok((buf.len(), source)),
            // Past the end of the file (or a short read): the ordinary path answers.
            None => self.read_tiers(page, buf, file, false),
        }
    }

    /// A read found a page a window read ahead: the first such read uses it.
    fn count_used(&self, ahead: Option<Ahead>) {
        match ahead {
            Some(Ahead::Disk) => self.stats.ahead_used_disk.incr(),
            Some(Ahead::Grid) => self.stats.ahead_used_l2.incr(),
            None => {}
        }
    }

    /// The database wrote `bytes` as page `page`, and the write reached the file.
    pub fn wrote(&self, page: u64, bytes: &[u8]) {
        if self.is_fused() {
            return;
        }
        self.adopt_page_size(bytes.len());
        self.stats.disk_writes.incr();
        self.working_set.note(page, Instant::now());
        let mut evicted = Vec::new();
        {
            let _g = self.stripe(page);
            let version = self.versions.bump(page);
            self.presence.remove(page);
            self.discard_queued(page);
            self.pool.insert(page, version, Box::from(bytes), &mut evicted);
            self.verifier.entered(page, version, How::Write);
        }
        self.settle(evicted);
    }

    /// The database changed part of page `page` (not a whole-page write):
    /// the tiers forget it and the next read goes to the file.
    pub fn invalidate(&self, page: u64) {
        if self.is_fused() {
            return;
        }
        self.stats.partial_writes.incr();
        let _g = self.stripe(page);
        self.versions.bump(page);
        self.give_up_copies(page);
    }

    /// Every tier forgets `page` (its version moved on already); if one held a
    /// copy, a read of it from the disk is [`DiskReason::Invalidated`].
    /// Returns how many copies the push queue and L1 dropped.
    fn give_up_copies(&self, page: u64) -> u64 {
        let stamped = self.presence.remove(page);
        let dropped = u64::from(self.pusher.take(page).is_some()) + u64::from(self.pool.remove(page));
        if stamped || dropped > 0 {
            self.presence.set_fate(page, Fate::Invalidated);
        }
        dropped
    }

    /// The file was cut before page `first_gone`: it and every later page of
    /// its segment (its file) are gone.
    pub fn truncated(&self, first_gone: u64) {
        if self.is_fused() {
            return;
        }
        self.stats.truncates.incr();
        self.cut(first_gone);
    }

    /// Another writer cut the file before page `first_gone` (a checkpoint
    /// elsewhere cuts the file to the database's size). Part of a foreign
    /// change already counted.
    pub fn foreign_truncate(&self, first_gone: u64) {
        if self.is_fused() {
            return;
        }
        self.cut(first_gone);
    }

    fn cut(&self, first_gone: u64) {
        let (segment, _) = versions::split(first_gone);
        let gone = first_gone..((segment as u64 + 1) << versions::SEGMENT_BITS);
        let _all = self.all_stripes();
        self.versions.bump_from(first_gone);
        self.presence.remove_from(first_gone);
        self.pool.remove_range(gone.clone());
        self.pusher.discard(|page| gone.contains(&page));
    }

    /// Another writer (a process or connection that bypasses this cache, a
    /// checkpoint elsewhere) changed exactly these pages in the file: each gets
    /// a new version, so no copy in L1, the push queue or the grid is served
    /// again. Pages the file no longer has are harmless here.
    pub fn foreign_pages(&self, pages: &[u64]) {
        if self.is_fused() {
            return;
        }
        self.stats.foreign_changes.incr();
        self.stats.foreign_pages_invalidated.add(pages.len() as u64);
        let mut dropped = 0;
        for &page in pages {
            let _g = self.stripe(page);
            self.versions.bump(page);
            dropped += self.give_up_copies(page);
        }
        self.stats.foreign_copies_dropped.add(dropped);
    }

    /// Another writer changed the file and the changed pages cannot be named:
    /// a new epoch, in which no copy made before is served.
    pub fn foreign_reset(&self) {
        if self.is_fused() {
            return;
        }
        self.stats.foreign_changes.incr();
        self.stats.foreign_resets.incr();
        let _all = self.all_stripes();
        let dropped = self.pool.len() as u64 + self.pusher.queued_pages() as u64;
        self.versions.reset();
        self.presence.clear();
        self.pool.clear();
        self.pusher.discard(|_| true);
        self.stats.foreign_copies_dropped.add(dropped);
    }

    /// Forgets everything: every page gets a version no grid copy has.
    pub fn reset(&self) {
        if self.is_fused() {
            return;
        }
        self.stats.resets.incr();
        let _all = self.all_stripes();
        self.versions.reset();
        self.presence.clear();
        self.pool.clear();
        self.pusher.discard(|_| true);
    }

    /// Pushes L1 to the grid, waits (bounded by [`CLOSE_FLUSH_MS`]) for the
    /// pusher, and returns the versions to save for a warm restart with what
    /// became of L1. The push queue's bound is for steady state: here pages
    /// wait for room rather than push older ones out. Pushes that did not
    /// finish leave only misses behind: a copy in the grid names the version
    /// it was made at.
    pub fn close(self) -> (SavedVersions, CloseReport) {
        let mut report = CloseReport::default();
        if self.grid.get().is_some() && !self.is_fused() {
            let deadline = Instant::now() + Duration::from_millis(CLOSE_FLUSH_MS);
            let stored_before = self.stats.l2_pushes.get();
            self.pusher.begin_close();
            let mut all = Vec::new();
            self.pool.drain(&mut all);
            for e in all.into_iter().filter(|e| !e.scan) {
                report.l1_pages += 1;
                self.pusher.push_waiting(e, deadline);
            }
            report.timed_out = !self.pusher.flush(deadline.saturating_duration_since(Instant::now()));
            // What the pusher stored since the close began (a few may be pages
            // evicted just before it): the rest of L1 did not reach the grid.
            report.pushed = (self.stats.l2_pushes.get() - stored_before).min(report.l1_pages);
            report.dropped = report.l1_pages - report.pushed;
        }
        (self.versions.save(), report)
    }

    /// Waits until pages already evicted have been pushed (tests, benchmarks).
    pub fn flush_pushes(&self, timeout: Duration) -> bool {
        self.pusher.flush(timeout)
    }

    /// Everything the stats PRAGMA shows.
    pub fn stats_json(&self) -> Map<String, Value> {
        let mut m = self.stats.to_json();
        m.insert("cache_id".into(), json!(format!("{:016x}", self.cache_id)));
        m.insert("page_bytes".into(), json!(self.page_bytes()));
        m.insert(
            "l1".into(),
            json!({
                "capacity_bytes": self.pool.capacity_bytes(),
                "used_bytes": self.pool.used_bytes(),
                "pages": self.pool.len(),
            }),
        );
        // Pages read ahead of their reader, by source: read = used + unused + in_l1.
        let (held, dropped) = self.pool.ahead_counts();
        for (source, read, used, a) in [
            ("disk", &self.stats.ahead_pages_disk, &self.stats.ahead_used_disk, Ahead::Disk),
            ("l2", &self.stats.ahead_pages_l2, &self.stats.ahead_used_l2, Ahead::Grid),
        ] {
            m.insert(format!("ahead_pages_{source}"), json!(read.get()));
            m.insert(format!("ahead_used_{source}"), json!(used.get()));
            m.insert(format!("ahead_unused_{source}"), json!(dropped[a as usize]));
            m.insert(format!("ahead_in_l1_{source}"), json!(held[a as usize]));
        }
        m.insert("read_ahead_disk".into(), self.disk_ahead.to_json(&self.stats));
        m.insert("push_queue_bytes".into(), json!(self.pusher.queued_bytes()));
        m.insert("sealed".into(), json!(self.seal_key.is_some()));
        m.insert("versions_tracked".into(), json!(self.versions.pages_tracked()));
        m.insert("l2_presence_pages".into(), json!(self.presence.len()));
        m.insert("l2_reach_pushes".into(), json!(self.presence.reach()));
        m.insert("fused".into(), json!(*self.fuse_reason.lock().unwrap_or_else(|e| e.into_inner())));
        let pages = self.working_set.estimate(Instant::now());
        let grid_memory = self.grid.get().map(|g| g.memory());
        let held_l1 = self.pool.capacity_bytes();
        m.insert("working_set".into(), working_set::to_json(pages, self.page_bytes() as u64, held_l1, grid_memory));
        let nodes = self.grid.get().map(|g| g.node_status()).unwrap_or_default();
        m.insert("nodes".into(), serde_json::to_value(nodes).expect("node status serializes"));
        m
    }

    /// Asks the grid for `page` at `version` into `buf`, unless the presence
    /// set, the grid's reach or the node's cost says it is not worth a round
    /// trip. Ok when `buf` holds the page (the caller puts it in L1), else
    /// why the page must come from the disk.
    fn ask_grid(&self, grid: &Grid, page: u64, version: u64, buf: &mut [u8]) -> Result<(), DiskReason> {
        let verdict = self.presence.verdict(page);
        match verdict {
            // Never pushed at this version, or taken back since: the grid has nothing to give.
            Verdict::Absent => {
                self.stats.l2_presence_skips.incr();
                return Err(self.presence.absent_reason(page));
            }
            // Pushed longer ago than the grid is seen to keep pages: most likely evicted.
            Verdict::Aged { .. } if !self.presence.sample_aged() => {
                self.stats.l2_aged_skips.incr();
                return Err(DiskReason::AgedOut);
            }
            _ => {}
        }
        let key = envelope::GridKey::new(self.cache_id, page);
        if !grid.admits_lookup(key.as_bytes()) {
            // The node costs more than the disk read it would save (grid::cost).
            self.stats.l2_cost_skips.incr();
            return Err(DiskReason::Skipped);
        }
        let t1 = Instant::now();
        let expect = Identity { cache_id: self.cache_id, page, version };
        // The envelope is opened where the value lies in the connection's buffer, straight into `buf`.
        let fetched = grid.take_with(key.as_bytes(), |value| (value.len(), self.open_value(value, expect, buf)));
        let took = t1.elapsed();
        self.stats.record(Tier::L2, took);
        if matches!(fetched, Fetch::Hit(_) | Fetch::Miss) {
            // The take deleted whatever was there.
            self.presence.remove(page);
            match verdict {
                Verdict::Held { age } => {
                    self.presence.learn(age, fetched.is_hit());
                    grid.note_lookup(key.as_bytes(), took, fetched.is_hit());
                }
                // A sample of an aged page: it tells the reach, not what lookups cost.
                Verdict::Aged { age } => self.presence.learn(age, fetched.is_hit()),
                Verdict::Absent => {}
            }
        }
        match fetched {
            Fetch::Hit((value_bytes, opened)) => {
                self.stats.l2_fetch_bytes.add(value_bytes as u64);
                match opened.and_then(|()| self.check_page(page, buf)) {
                    Ok(()) => {
                        self.stats.l2_hits.incr();
                        Ok(())
                    }
                    Err(reject) => {
                        self.stats.reject(reject);
                        Err(DiskReason::Rejected)
                    }
                }
            }
            Fetch::Miss => {
                // Only marked pages are asked for: every miss is a presence miss.
                self.stats.l2_misses.incr();
                grid.note_presence_miss(key.as_bytes());
                Err(DiskReason::Evicted)
            }
            Fetch::Skipped => {
                self.stats.l2_skipped.incr();
                Err(DiskReason::Skipped)
            }
            Fetch::Fault(kind) => {
                self.stats.fault(kind);
                Err(DiskReason::Skipped)
            }
        }
    }

    /// Opens a grid value into `out` (the envelope's checks, and decompression
    /// when it holds a compressed page, timed and counted).
    fn open_value(&self, value: &[u8], expect: Identity, out: &mut [u8]) -> Result<(), envelope::Reject> {
        let t0 = Instant::now();
        let stored = envelope::open_into(value, expect, self.seal_key.as_deref(), out)?;
        if stored != Stored::Raw {
            self.stats.decompress_ns.add(t0.elapsed().as_nanos() as u64);
            self.stats.decompress_pages.incr();
        }
        Ok(())
    }

    /// The adapter's check of a grid copy whose envelope matched.
    fn check_page(&self, page: u64, bytes: &[u8]) -> Result<(), envelope::Reject> {
        match &self.page_check {
            Some(c) if !c.accepts(page, bytes) => Err(envelope::Reject::Content),
            _ => Ok(()),
        }
    }

    fn drop_stale_l1(&self, page: u64) {
        self.stats.l1_stale_drops.incr();
        let _g = self.stripe(page);
        self.pool.remove(page);
        self.presence.set_fate(page, Fate::Invalidated);
    }

    fn fill(&self, page: u64, version: u64, bytes: Box<[u8]>, how: How) {
        let mut evicted = Vec::new();
        {
            let _g = self.stripe(page);
            if self.versions.current(page) != version {
                return; // a write got there first; its bytes are in L1 already
            }
            self.pool.insert(page, version, bytes, &mut evicted);
            self.verifier.entered(page, version, how);
        }
        self.settle(evicted);
    }

    /// Verify mode: a page a tier served is compared with the file (read now,
    /// under the adapter's lock); a difference is counted, logged with the
    /// copy's provenance, forgotten by every tier, and the file's bytes served.
    fn verified(
        &self,
        page: u64,
        buf: &mut [u8],
        served: (usize, Source),
        file: &dyn Backing,
    ) -> io::Result<(usize, Source)> {
        let tier = match served.1 {
            _ if !self.verifier.is_on() => return Ok(served),
            Source::Disk => return Ok(served),
            Source::L1 | Source::ReadAhead => Served::L1,
            Source::PushQueue => Served::PushQueue,
            Source::L2 => Served::L2,
        };
        let mut on_file = vec![0u8; buf.len()];
        let n = file.read_pages(PageId::of(page), buf.len(), &mut on_file)?;
        self.stats.verify_checked.incr();
        if n == buf.len() && on_file[..] == buf[..] {
            return Ok(served);
        }
        self.stats.verify_mismatch(tier);
        let version = self.versions.current(page);
        let epoch = self.stats.resets.get() + self.stats.foreign_resets.get();
        let diff = verify::first_difference(buf, &on_file[..n]);
        self.verifier.report(&self.verifier.describe(page, tier.name(), version, epoch, diff));
        self.forget(page);
        buf[..n].copy_from_slice(&on_file[..n]);
        buf[n..].fill(0);
        Ok((n, Source::Disk))
    }

    /// Every tier forgets `page` (a new version: no copy made before is served).
    fn forget(&self, page: u64) {
        let _g = self.stripe(page);
        self.versions.bump(page);
        self.give_up_copies(page);
    }

    /// Evicted pages go to the grid; without one they are simply dropped, and
    /// so are a scan's pages nobody read again (disk or grid still has them).
    /// A page dropped here is never pushed ([`Fate::Unpushed`]); the pusher
    /// records what becomes of the others.
    fn settle(&self, evicted: Vec<Evicted>) {
        if evicted.is_empty() {
            return;
        }
        if self.grid.get().is_none() {
            for e in &evicted {
                self.presence.set_fate(e.page, Fate::Unpushed);
            }
            return;
        }
        for e in evicted {
            if e.scan {
                self.stats.scan_drops.incr();
                self.presence.set_fate(e.page, Fate::Unpushed);
            } else {
                self.pusher.push(e);
            }
        }
    }

    fn discard_queued(&self, page: u64) {
        self.pusher.take(page);
    }

    /// A new page size means page numbers now name other byte ranges: start over.
    fn adopt_page_size(&self, len: usize) {
        let old = self.page_bytes.load(Ordering::Acquire);
        if old == len {
            return;
        }
        if self.page_bytes.compare_exchange(old, len, Ordering::AcqRel, Ordering::Acquire).is_ok() && old != 0 {
            self.reset();
        }
    }

    fn stripe(&self, page: u64) -> MutexGuard<'_, ()> {
        let i = (page.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as usize % STRIPES;
        self.stripes[i].lock().unwrap()
    }

    fn all_stripes(&self) -> Vec<MutexGuard<'_, ()>> {
        self.stripes.iter().map(|s| s.lock().unwrap()).collect()
    }
}

/// What became of a page read beside the read path and handed to the cache
/// (`PageCache::place_if_room`, `PageCache::place_or_push`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placed {
    /// Into L1's free room.
    L1,
    /// Queued for the grid (stored or not: the [`PushTally`] it was queued with says).
    Queued,
    /// Already there: L1 (a read brought it meanwhile) or the grid (presence `Held`).
    Held,
    /// A write changed the page after its version was captured: the read bytes were dropped.
    Raced,
    /// L1 full and no grid, or no room in the push queue in time.
    NoRoom,
}

/// Pages read beside the read path, ahead of demand, by a caller above the
/// cache: the narrow interface it has to the tiers, kept apart from the read
/// and write paths. The read path's rule holds: a page's version is captured
/// before it is read, and its bytes go in only if the version is unchanged,
/// checked under the page's stripe lock.
impl PageCache {
    /// The version to capture before `page` is read beside the read path, or
    /// None when it needs no reading: L1 or the push queue has it already.
    pub(crate) fn capture_version(&self, page: u64) -> Option<u64> {
        if self.pool.contains(page) || self.pusher.is_queued(page) {
            return None;
        }
        Some(self.versions.current(page))
    }

    /// Places a page read at `version` (captured before the read) into L1's
    /// free room, never evicting: `L1`, `Held` (a read brought it in
    /// meanwhile) or `Raced` (a write since the capture wins, checked under
    /// the page's stripe lock as `fill` does); the bytes come back when the
    /// page's shard has no room.
    pub(crate) fn place_if_room(&self, page: u64, version: u64, bytes: Box<[u8]>) -> Result<Placed, Box<[u8]>> {
        if self.is_fused() {
            return Ok(Placed::Raced);
        }
        self.versions.touch(page);
        let _g = self.stripe(page);
        if self.versions.current(page) != version {
            return Ok(Placed::Raced);
        }
        match self.pool.insert_if_room(page, version, bytes) {
            Ok(()) => {
                self.verifier.entered(page, version, How::Warm);
                Ok(Placed::L1)
            }
            Err(_) if self.pool.contains(page) => Ok(Placed::Held),
            Err(bytes) => Err(bytes),
        }
    }

    /// Bytes of L1's budget not in use.
    pub fn l1_free_bytes(&self) -> u64 {
        self.pool.capacity_bytes().saturating_sub(self.pool.used_bytes())
    }

    /// The pages this cache holds, hottest first, at most `max`: L1 (main
    /// queue before small, frequent before rare, newer before older), then
    /// pages the grid is seen to hold, newest push first. Returns them with
    /// how many of the first are L1's. Call before [`PageCache::close`].
    pub fn hot_pages(&self, max: usize) -> (Vec<u64>, usize) {
        let mut pages = self.pool.hot_pages(max);
        let l1 = pages.len();
        let in_l1: std::collections::HashSet<u64> = pages.iter().copied().collect();
        pages.extend(self.presence.held_newest_first(max - l1, |p| in_l1.contains(&p)));
        (pages, l1)
    }

    /// Asks the grid in one pipelined request for the pages of `want`
    /// (page, version captured before) that it may hold, with the envelope
    /// opened at that version and the adapter's check, as a read-ahead
    /// window does; the grid keeps its copies. None where the grid had no
    /// acceptable copy (or was not asked: no grid, presence `Absent`).
    pub(crate) fn fetch_held(&self, want: &[(u64, u64)]) -> Vec<Option<Box<[u8]>>> {
        let mut got = vec![None; want.len()];
        let Some(grid) = self.grid.get() else { return got };
        let page_bytes = self.page_bytes();
        let asked: Vec<usize> =
            (0..want.len()).filter(|&i| self.presence.verdict(want[i].0) != Verdict::Absent).collect();
        if asked.is_empty() || page_bytes == 0 {
            return got;
        }
        let keys: Vec<String> = asked.iter().map(|&i| envelope::key(self.cache_id, want[i].0)).collect();
        let key_refs: Vec<&[u8]> = keys.iter().map(|k| k.as_bytes()).collect();
        for (&i, f) in asked.iter().zip(grid.get_many(&key_refs)) {
            match f {
                Fetch::Hit(value) => {
                    self.stats.l2_fetch_bytes.add(value.len() as u64);
                    let (page, version) = want[i];
                    let mut bytes = vec![0u8; page_bytes].into_boxed_slice();
                    match self
                        .open_value(&value, Identity { cache_id: self.cache_id, page, version }, &mut bytes)
                        .and_then(|()| self.check_page(page, &bytes))
                    {
                        Ok(()) => got[i] = Some(bytes),
                        Err(reject) => self.stats.reject(reject),
                    }
                }
                Fetch::Miss => {}
                Fetch::Skipped => self.stats.l2_skipped.incr(),
                Fetch::Fault(kind) => self.stats.fault(kind),
            }
        }
        got
    }

    /// Places a page read at `version` (captured before the read): into L1
    /// while its shard has room (never evicting), else to the grid through
    /// the pusher, waiting for room in its queue (`push_wait`, a bounded wait
    /// that stops early when `cancel` is set) rather than dropping anyone's
    /// page; what the grid does with it is counted in `tally`. A write since
    /// the capture wins: the bytes are dropped (checked under the page's
    /// stripe lock, as `fill` does).
    pub(crate) fn place_or_push(
        &self,
        page: u64,
        version: u64,
        bytes: Box<[u8]>,
        push_wait: Duration,
        cancel: &AtomicBool,
        tally: &Arc<PushTally>,
    ) -> Placed {
        let bytes = match self.place_if_room(page, version, bytes) {
            Ok(placed) => return placed,
            Err(bytes) => bytes,
        };
        if self.grid.get().is_none() {
            return Placed::NoRoom;
        }
        if self.presence.held_by_push(page) {
            return Placed::Held; // pushed at this version, within the grid's reach
        }
        let len = bytes.len() as u64;
        let deadline = Instant::now() + push_wait;
        loop {
            if cancel.load(Ordering::Relaxed) {
                return Placed::NoRoom;
            }
            let now = Instant::now();
            if now >= deadline {
                return Placed::NoRoom;
            }
            if self.pusher.wait_room(len, (deadline - now).min(Duration::from_millis(50))) {
                break;
            }
        }
        // Under the stripe lock: a write after this point discards the queued copy (`wrote`).
        let _g = self.stripe(page);
        if self.versions.current(page) != version {
            return Placed::Raced;
        }
        self.pusher.push_tallied(Evicted { page, version, bytes, scan: false }, tally);
        Placed::Queued
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::panic::AssertUnwindSafe;

    use crate::backing::MemoryFile as Mem;

    fn cache() -> PageCache {
        let opts = CacheOptions {
            cache_id: 1,
            saved: None,
            page_bytes: 512,
            local_bytes: 64 * 512,
            push_queue_bytes: 0,
            grid: None,
            seal_key: None,
            page_check: None,
            codec: crate::codec::DEFAULT,
        };
        PageCache::new(opts)
    }

    /// A file of four 512-byte pages of 1s, the cache, and a page buffer.
    fn four_pages_of_ones() -> (Arc<Mutex<Vec<u8>>>, Mem, PageCache, Vec<u8>) {
        let file = Arc::new(Mutex::new(vec![1u8; 4 * 512]));
        (Arc::clone(&file), Mem(file), cache(), vec![0u8; 512])
    }

    /// A write path that panics (here: a poisoned stripe lock, as a panic
    /// elsewhere under it leaves) cannot update L1, which still holds the old
    /// bytes at the version the file is believed to hold. Tripping the fuse
    /// sends every later read to the file.
    #[test]
    fn a_write_path_panic_trips_the_fuse_and_reads_go_to_the_file() {
        let (file, m, c, mut buf) = four_pages_of_ones();
        c.read(2, &mut buf, &m).unwrap();
        assert_eq!(c.read(2, &mut buf, &m).unwrap().1, Source::L1);
        // Poison page 2's stripe.
        let _ = std::panic::catch_unwind(AssertUnwindSafe(|| {
            let _g = c.stripe(2);
            panic!("poison");
        }));
        file.lock().unwrap()[1024..1536].fill(2); // the database writes the file first
        let wrote = std::panic::catch_unwind(AssertUnwindSafe(|| c.wrote(2, &[2u8; 512])));
        assert!(wrote.is_err(), "the write path panicked");
        c.read(2, &mut buf, &m).unwrap();
        assert_eq!(buf[0], 1, "the defect: without the fuse, L1 serves the old bytes");
        c.trip("test: a write path panicked");
        assert!(c.is_fused());
        let (n, source) = c.read(2, &mut buf, &m).unwrap();
        assert_eq!((n, source, buf[0]), (512, Source::Disk, 2), "after the fuse, the file");
        assert_eq!(c.stats_json()["fused"], json!("test: a write path panicked"));
        c.wrote(3, &[3u8; 512]); // ignored: nothing is cached any more
        assert_eq!(c.pool.len(), 0);
    }

    #[test]
    fn reads_and_writes_count_in_the_working_set_once_per_page() {
        let (_file, m, c, mut buf) = four_pages_of_ones();
        for _ in 0..3 {
            for page in 0..3 {
                c.read(page, &mut buf, &m).unwrap(); // L1 hits after the first round
            }
        }
        c.wrote(3, &[3u8; 512]);
        let ws = &c.stats_json()["working_set"];
        assert_eq!((ws["pages_1m"].as_u64(), ws["bytes_15m"].as_u64()), (Some(4), Some(4 * 512)), "{ws}");
        assert_eq!(ws["held_bytes"], 64 * 512, "L1 only: {ws}");
    }

    /// Verify mode: a file changed behind the cache's back (no path told it)
    /// is what verify mode exists to see. Off, L1's stale copy is served (the
    /// control); on, the file's bytes are, the difference is counted by tier,
    /// and the next read finds the file's bytes cached.
    #[test]
    fn verify_mode_serves_the_file_when_a_tier_differs() {
        let (file, m, c, mut buf) = four_pages_of_ones();
        c.read(2, &mut buf, &m).unwrap();
        file.lock().unwrap()[1024..1536].fill(7);
        assert_eq!((c.read(2, &mut buf, &m).unwrap().1, buf[0]), (Source::L1, 1), "off: the stale copy");
        c.enable_verify("test.db".into(), None);
        let (n, source) = c.read(2, &mut buf, &m).unwrap();
        assert_eq!((n, source, buf[0]), (512, Source::Disk, 7), "on: the file's bytes");
        assert_eq!(c.stats.verify_mismatches[Served::L1 as usize].get(), 1);
        c.read(2, &mut buf, &m).unwrap();
        c.read(2, &mut buf, &m).unwrap();
        assert_eq!((buf[0], c.stats.verify_mismatches_total()), (7, 1), "re-read from the file, then served equal");
        let j = Value::Object(c.stats_json());
        assert_eq!(j["verify_checked"], 2, "{j}");
        assert_eq!(j["verify_mismatches_by_tier"]["l1"], 1, "{j}");
    }

    /// A file of `pages` 512-byte pages (page i filled with i as u8) and a
    /// cache with no grid whose L1 holds `l1_pages`.
    fn scan_file(pages: usize, l1_pages: u64) -> (Arc<Mutex<Vec<u8>>>, Mem, PageCache) {
        let file = Arc::new(Mutex::new((0..pages).flat_map(|i| vec![i as u8; 512]).collect::<Vec<u8>>()));
        let c = PageCache::new(CacheOptions { local_bytes: l1_pages * 512, ..cache_opts() });
        (Arc::clone(&file), Mem(file), c)
    }

    fn cache_opts() -> CacheOptions {
        CacheOptions {
            cache_id: 1,
            saved: None,
            page_bytes: 512,
            local_bytes: 64 * 512,
            push_queue_bytes: 0,
            grid: None,
            seal_key: None,
            page_check: None,
            codec: crate::codec::DEFAULT,
        }
    }

    /// Pages read ahead by source add up: read = used + unused + still in L1.
    fn assert_ahead_adds_up(c: &PageCache) -> Value {
        let j = Value::Object(c.stats_json());
        for source in ["disk", "l2"] {
            let k = |what: &str| j[format!("ahead_{what}_{source}")].as_u64().unwrap();
            assert_eq!(k("pages"), k("used") + k("unused") + k("in_l1"), "{source}: {j}");
        }
        j
    }

    #[test]
    fn a_long_scan_ramps_up_to_full_windows() {
        let (_f, m, c) = scan_file(3000, 1024); // windows up to 32 pages (1/16 of L1)
        let (mut ra, mut buf, mut biggest) = (ReadAhead::new(), vec![0u8; 512], 0);
        let mut sizes = Vec::new();
        for page in 0..3000u64 {
            c.read_sequential(page, &mut buf, &m, &mut ra).unwrap();
            assert_eq!(buf[0], page as u8);
            if ra.last_window() != *sizes.last().unwrap_or(&0) || ra.start == page {
                sizes.push(ra.last_window());
            }
            biggest = biggest.max(ra.last_window());
        }
        assert_eq!(&sizes[..5], &[4, 8, 16, 32, 32], "the window doubles while it is used");
        assert_eq!(biggest, READ_AHEAD_MAX_PAGES);
        let j = assert_ahead_adds_up(&c);
        let n = |k: &str| j[k].as_u64().unwrap();
        assert!(n("read_ahead_windows") <= 3000 / 32 + 5, "{j}");
        assert!(n("read_ahead_pages_disk") >= 2990, "the scan read (almost) every page through windows: {j}");
        assert_eq!(n("disk_reads"), 0, "{j}");
        // Every page read ahead was used but the last window's tail (the file ends there).
        assert!(n("ahead_used_disk") + 32 >= n("ahead_pages_disk"), "{j}");
        assert!(n("ahead_used_disk") * 100 >= n("ahead_pages_disk") * 98, "{j}");
    }

    /// Range queries: two or three adjacent pages, then a jump elsewhere. The
    /// window never grows past the first, and most of what it reads is used.
    #[test]
    fn short_ranges_keep_the_first_small_window() {
        let (_f, m, c) = scan_file(3000, 1024);
        let (mut ra, mut buf) = (ReadAhead::new(), vec![0u8; 512]);
        let mut expect_used = 0;
        for r in 0..150u64 {
            let start = (r * 37 % 150) * 19; // every range somewhere else, more than a gap away
            let len = if r % 3 == 2 { 2 } else { 3 };
            for page in start..start + len {
                c.read_sequential(page, &mut buf, &m, &mut ra).unwrap();
                assert_eq!(buf[0], page as u8);
                assert!(ra.last_window() <= READ_AHEAD_FIRST_PAGES, "range {r}: a window of {}", ra.last_window());
            }
            expect_used += len - 1;
        }
        let j = assert_ahead_adds_up(&c);
        let n = |k: &str| j[k].as_u64().unwrap();
        assert_eq!(n("read_ahead_windows"), 150, "one window per range: {j}");
        assert_eq!(n("ahead_pages_disk"), 150 * (READ_AHEAD_FIRST_PAGES - 1), "{j}");
        assert_eq!(n("ahead_used_disk"), expect_used, "{j}");
        assert!(n("ahead_used_disk") * 2 > n("ahead_pages_disk"), "more than half the pages read ahead were used: {j}");
    }

    /// A reader that moves forward but skips past each window stops reading
    /// ahead; reading the next page again starts a small window.
    #[test]
    fn a_window_nobody_reads_stops_read_ahead() {
        let (_f, m, c) = scan_file(600, 1024);
        let (mut ra, mut buf) = (ReadAhead::new(), vec![0u8; 512]);
        for page in (0..300u64).step_by(6) {
            c.read_sequential(page, &mut buf, &m, &mut ra).unwrap();
            assert_eq!(buf[0], page as u8);
        }
        let j = assert_ahead_adds_up(&c);
        let n = |k: &str| j[k].as_u64().unwrap();
        assert_eq!((n("read_ahead_windows"), n("ahead_pages_disk")), (1, 3), "only the first window: {j}");
        assert_eq!(ra.last_window(), 1, "stopped");
        for page in 400..440u64 {
            c.read_sequential(page, &mut buf, &m, &mut ra).unwrap();
        }
        assert_eq!(ra.last_window(), 32, "a new run ramps again (4, 8, 16 over its first 28 pages, then 32)");
    }

    /// Pages read ahead that leave L1 unread (evicted, rewritten, reset) are
    /// counted unused; the counts add up at every step.
    #[test]
    fn pages_read_ahead_are_used_unused_or_still_held() {
        let (_f, m, c) = scan_file(2000, 512); // windows up to 32: a scan of 2000 pages evicts
        let (mut ra, mut buf) = (ReadAhead::new(), vec![0u8; 512]);
        for page in (0..2000u64).filter(|p| p % 10 != 9) {
            c.read_sequential(page, &mut buf, &m, &mut ra).unwrap();
        }
        let j = assert_ahead_adds_up(&c);
        let n = |k: &str| j[k].as_u64().unwrap();
        assert!(n("ahead_unused_disk") > 0 && n("ahead_in_l1_disk") > 0 && n("ahead_used_disk") > 0, "{j}");
        // An ordinary read uses a page read ahead; a write replaces one unread
        // (pages the scan skipped).
        let held: Vec<u64> = (1900..2000).filter(|&p| p % 10 == 9 && c.pool.contains(p)).collect();
        let before = (n("ahead_used_disk"), n("ahead_unused_disk"));
        c.read(held[held.len() - 1], &mut buf, &m).unwrap();
        c.wrote(held[held.len() - 2], &[7u8; 512]);
        let j = assert_ahead_adds_up(&c);
        let n = |k: &str| j[k].as_u64().unwrap();
        assert_eq!((n("ahead_used_disk"), n("ahead_unused_disk")), (before.0 + 1, before.1 + 1), "{j}");
        c.reset();
        let j = assert_ahead_adds_up(&c);
        assert_eq!(j["ahead_in_l1_disk"], 0, "{j}");
    }

    /// `disk_reasons` of the stats, checked to sum to `disk_reads` (the JSON's and the counter's).
    fn disk_reasons(c: &PageCache) -> Value {
        let j = Value::Object(c.stats_json());
        let reasons = j["disk_reasons"].as_object().expect("disk_reasons");
        assert_eq!(reasons.len(), DiskReason::ALL.len(), "{j}");
        let sum: u64 = reasons.values().map(|v| v.as_u64().unwrap()).sum();
        assert_eq!((sum, sum), (j["disk_reads"].as_u64().unwrap(), c.stats.disk_reads.get()), "{j}");
        j["disk_reasons"].clone()
    }

    /// The reasons that moved between two snapshots, as (name, count).
    fn moved(before: &Value, after: &Value) -> Vec<(String, u64)> {
        DiskReason::ALL
            .iter()
            .map(|r| (r.name(), after[r.name()].as_u64().unwrap() - before[r.name()].as_u64().unwrap()))
            .filter(|&(_, n)| n > 0)
            .map(|(k, n)| (k.to_string(), n))
            .collect()
    }

    fn one(reason: DiskReason, n: u64) -> Vec<(String, u64)> {
        vec![(reason.name().to_string(), n)]
    }

    /// Without a grid: a first read is cold, a page L1 evicted is never
    /// pushed, a page whose copy a partial write, another writer or a stale
    /// L1 entry gave up is invalidated; a reset or a truncation makes pages cold again.
    #[test]
    fn without_a_grid_disk_reads_are_cold_then_never_pushed() {
        let (_f, m, c) = scan_file(64, 8);
        let mut buf = vec![0u8; 512];
        let r0 = disk_reasons(&c);
        for page in 0..32 {
            assert_eq!(c.read(page, &mut buf, &m).unwrap().1, Source::Disk);
        }
        let r1 = disk_reasons(&c);
        assert_eq!(moved(&r0, &r1), one(DiskReason::Cold, 32));
        assert!(!c.pool.contains(0));
        c.read(0, &mut buf, &m).unwrap();
        let r2 = disk_reasons(&c);
        assert_eq!(moved(&r1, &r2), one(DiskReason::NeverPushed, 1), "evicted from L1 with no grid");

        // Copies given up: a partial write, another writer, a stale L1 entry.
        let held: Vec<u64> = (0..32).filter(|&p| c.pool.contains(p)).collect();
        assert!(held.len() >= 3, "{held:?}");
        c.invalidate(held[0]);
        c.foreign_pages(&[held[1]]);
        c.versions.bump(held[2]);
        for &page in &held[..3] {
            c.read(page, &mut buf, &m).unwrap();
        }
        let r3 = disk_reasons(&c);
        assert_eq!(moved(&r2, &r3), one(DiskReason::Invalidated, 3));
        // A page with no copy anywhere is not invalidated by being named: it stays never pushed.
        let gone = (1..32).find(|&p| !c.pool.contains(p)).unwrap();
        c.foreign_pages(&[gone]);
        c.read(gone, &mut buf, &m).unwrap();
        let r4 = disk_reasons(&c);
        assert_eq!(moved(&r3, &r4), one(DiskReason::NeverPushed, 1));

        // A truncation makes the pages it cut cold; a reset, every page.
        c.truncated(20);
        c.read(25, &mut buf, &m).unwrap(); // read before the cut, then evicted or cut from L1
        let r5 = disk_reasons(&c);
        assert_eq!(moved(&r4, &r5), one(DiskReason::Cold, 1), "a page the file grew back to is a new page");
        c.reset();
        for page in 0..8 {
            c.read(page, &mut buf, &m).unwrap();
        }
        assert_eq!(moved(&r5, &disk_reasons(&c)), one(DiskReason::Cold, 8), "a reset: a new epoch");

        // The fuse: every read goes to the file, its copies given up.
        let r6 = disk_reasons(&c);
        c.trip("test");
        c.read(0, &mut buf, &m).unwrap();
        assert_eq!(moved(&r6, &disk_reasons(&c)), one(DiskReason::Invalidated, 1));
    }

    /// A grid whose only node refuses connections (a port nobody listens on).
    fn dead_grid() -> Arc<Grid> {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let spec = crate::grid::NodeSpec { host: "127.0.0.1".into(), port, weight: 1 };
        Arc::new(Grid::new(vec![spec], Default::default()))
    }

    /// With a grid: a push the queue could not take is push_dropped; a page
    /// pushed (stamped) whose node does not answer is skipped; a grid change
    /// that drops its stamp leaves it evicted (the grid lost it).
    #[test]
    fn with_a_grid_disk_reads_say_what_became_of_the_push() {
        let mut buf = vec![0u8; 512];
        // No room in the push queue: every eviction is dropped.
        let (_f, m, c) = scan_file(64, 8);
        c.set_grid(Some(dead_grid()));
        let r0 = disk_reasons(&c);
        for page in 0..32 {
            c.read(page, &mut buf, &m).unwrap();
        }
        let r1 = disk_reasons(&c);
        assert_eq!(moved(&r0, &r1), one(DiskReason::Cold, 32));
        c.read(0, &mut buf, &m).unwrap();
        let r2 = disk_reasons(&c);
        assert_eq!(moved(&r1, &r2), one(DiskReason::PushDropped, 1), "{}", Value::Object(c.stats_json()));

        // Room to queue: pages are sent (stamped), the store fails, the lookup is not answered.
        let c = PageCache::new(CacheOptions {
            local_bytes: 8 * 512,
            push_queue_bytes: 1 << 20,
            grid: Some(dead_grid()),
            ..cache_opts()
        });
        for page in 0..32 {
            c.read(page, &mut buf, &m).unwrap();
        }
        assert!(c.flush_pushes(Duration::from_secs(10)));
        let r1 = disk_reasons(&c);
        assert!(!c.pool.contains(0) && c.presence.verdict(0) != Verdict::Absent);
        c.read(0, &mut buf, &m).unwrap();
        let r2 = disk_reasons(&c);
        assert_eq!(moved(&r1, &r2), one(DiskReason::Skipped, 1), "{}", Value::Object(c.stats_json()));
        // The grid goes: its stamps with it; a page it held was lost to this cache.
        c.set_grid(None);
        c.read(1, &mut buf, &m).unwrap();
        assert_eq!(moved(&r2, &disk_reasons(&c)), one(DiskReason::Evicted, 1));
    }

    /// The reasons sum to `disk_reads` at every step of a mixed workload:
    /// reads, scans, writes, partial writes, other writers, truncations,
    /// resets, and a grid that comes and goes.
    #[test]
    fn disk_reasons_sum_to_disk_reads_across_a_mixed_workload() {
        let (file, m, _) = scan_file(400, 32);
        let c = PageCache::new(CacheOptions { local_bytes: 32 * 512, push_queue_bytes: 4 * 512, ..cache_opts() });
        let (mut ra, mut buf) = (ReadAhead::new(), vec![0u8; 512]);
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        for step in 0..6000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let page = (x >> 8) % 300;
            match x % 100 {
                0..=59 => drop(c.read(page, &mut buf, &m).unwrap()),
                60..=79 => drop(c.read_sequential(page, &mut buf, &m, &mut ra).unwrap()),
                80..=89 => {
                    let byte = (x >> 32) as u8;
                    file.lock().unwrap()[page as usize * 512..][..512].fill(byte);
                    c.wrote(page, &[byte; 512]);
                }
                90..=93 => c.invalidate(page),
                94..=96 => c.foreign_pages(&[page, page + 1]),
                97 => c.truncated(300 + page % 50),
                98 => c.reset(),
                _ => c.set_grid(if c.grid().is_some() { None } else { Some(dead_grid()) }),
            }
            if step % 50 == 0 {
                disk_reasons(&c);
            }
        }
        let r = disk_reasons(&c);
        for reason in [DiskReason::Cold, DiskReason::NeverPushed, DiskReason::PushDropped, DiskReason::Invalidated] {
            assert!(r[reason.name()].as_u64().unwrap() > 0, "{reason:?} never seen: {r}");
        }
    }

    #[test]
    fn an_l1_entry_at_a_version_the_file_has_left_is_never_served() {
        let (file, m, c, mut buf) = four_pages_of_ones();
        c.read(1, &mut buf, &m).unwrap();
        // A path that bumps the version without removing the L1 entry.
        c.versions.bump(1);
        file.lock().unwrap()[512..1024].fill(9);
        let (_, source) = c.read(1, &mut buf, &m).unwrap();
        assert_eq!((source, buf[0]), (Source::Disk, 9));
        assert_eq!(c.stats.l1_stale_drops.get(), 1);
    }

    /// A clock the test moves: here the backing moves it by what a read costs.
    struct TestClock(Mutex<Instant>);

    impl Clock for TestClock {
        fn now(&self) -> Instant {
            *self.0.lock().unwrap()
        }
    }

    /// A file whose reads cost simulated time: a single page `random_us`, a
    /// run `page_us` per page (changeable while the test runs).
    struct CostedFile {
        file: Mem,
        clock: Arc<TestClock>,
        random_us: u64,
        page_us: AtomicU64,
    }

    impl Backing for CostedFile {
        fn read_pages(&self, first: PageId, page_bytes: usize, buf: &mut [u8]) -> io::Result<usize> {
            let pages = (buf.len() / page_bytes) as u64;
            let us = if pages == 1 { self.random_us } else { pages * self.page_us.load(Ordering::Relaxed) };
            *self.clock.0.lock().unwrap() += Duration::from_micros(us);
            self.file.read_pages(first, page_bytes, buf)
        }
        fn is_direct(&self) -> bool {
            false
        }
    }

    /// A cache (L1 of 1024 pages: windows up to 32) over `pages` pages whose
    /// reads cost as [`CostedFile`] says, on a clock the file moves.
    fn costed(pages: usize, random_us: u64, page_us: u64) -> (CostedFile, PageCache) {
        let (_f, m, mut c) = scan_file(pages, 1024);
        let clock = Arc::new(TestClock(Mutex::new(Instant::now())));
        c.clock = Arc::clone(&clock) as Arc<dyn Clock + Send + Sync>;
        (CostedFile { file: m, clock, random_us, page_us: AtomicU64::new(page_us) }, c)
    }

    /// A scan of `pages` from `from` (checking every page's bytes), with a
    /// random single-page read elsewhere (pages 5000 and up) every 4 pages.
    fn scan_with_random_reads(c: &PageCache, f: &CostedFile, ra: &mut ReadAhead, from: u64, pages: u64) {
        let mut buf = vec![0u8; 512];
        for page in from..from + pages {
            let (n, _) = c.read_sequential(page, &mut buf, f, ra).unwrap();
            assert_eq!((n, buf[0], buf[511]), (512, page as u8, page as u8), "page {page}");
            if page.is_multiple_of(4) {
                let other = 5000 + (page * 7919) % 5000;
                c.read(other, &mut buf, f).unwrap();
                assert_eq!(buf[0], other as u8);
            }
        }
    }

    fn read_ahead_disk(c: &PageCache) -> Value {
        c.stats_json()["read_ahead_disk"].clone()
    }

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

    /// Runs that cost per page what a random read costs: after the first
    /// measuring window read-ahead from the disk is off, the scan goes on
    /// with demand reads (every page right, the counts adding up), one window
    /// in 16 still reads ahead; when runs get cheap, the probes see it and
    /// read-ahead from the disk comes back.
    #[test]
    fn runs_that_cost_a_random_read_per_page_turn_disk_read_ahead_off_and_probes_go_on() {
        let (f, c) = costed(10_000, 10_000, 10_000);
        let mut ra = ReadAhead::new();
        // 12.5 ms of simulated time per scanned page: 800 pages per window.
        scan_with_random_reads(&c, &f, &mut ra, 0, 400);
        let j = read_ahead_disk(&c);
        assert_eq!((j["state"].as_str(), j["on"].as_bool()), (Some("measuring"), Some(true)), "{j}");
        let before_off = c.stats.ahead_pages_disk.get();
        assert!(before_off > 350, "on: the scan read ahead: {before_off}");

        scan_with_random_reads(&c, &f, &mut ra, 400, 1600);
        let j = read_ahead_disk(&c);
        assert_eq!(
            (j["state"].as_str(), j["on"].as_bool(), j["changes"].as_u64()),
            (Some("off"), Some(false), Some(1)),
            "{j}"
        );
        assert_eq!((j["random_us"].as_f64(), j["seq_page_us"].as_f64()), (Some(10_000.0), Some(10_000.0)), "{j}");
        assert!(j["used_ratio"].as_f64().unwrap() > 0.9, "a scan uses what it reads ahead: {j}");
        let (skips, probes) = (j["skipped_windows"].as_u64().unwrap(), j["probes"].as_u64().unwrap());
        assert!(skips >= 15 && probes >= 1, "{j}");
        assert_eq!(skips / DISK_AHEAD_PROBE_EVERY, probes, "one window in 16 probes: {j}");
        // Off, the windows ramped on (the reader read every page): the probes read full windows.
        assert_eq!(ra.last_window(), READ_AHEAD_MAX_PAGES);
        let aj = assert_ahead_adds_up(&c);
        let ahead = c.stats.ahead_pages_disk.get() - before_off;
        assert!(ahead < 1600 / 2, "most of the scan off was demand reads: {ahead} pages read ahead: {aj}");
        assert!(aj["disk_reads"].as_u64().unwrap() > 1000, "{aj}");
        disk_reasons(&c);

        // Runs get cheap (a twentieth of a random read per page): the probes measure it, on again.
        f.page_us.store(500, Ordering::Relaxed);
        scan_with_random_reads(&c, &f, &mut ra, 2000, 2500);
        let j = read_ahead_disk(&c);
        assert_eq!((j["state"].as_str(), j["changes"].as_u64()), (Some("on"), Some(2)), "{j}");
        // (The window that turned it on may have measured probes of both costs.)
        assert!(j["seq_page_us"].as_f64().unwrap() <= j["random_us"].as_f64().unwrap() * 0.64, "{j}");
        assert_ahead_adds_up(&c);
        disk_reasons(&c);
    }

    /// Runs that cost a twentieth of a random read per page keep read-ahead
    /// from the disk on: judged, never skipped, never probed.
    #[test]
    fn cheap_runs_keep_disk_read_ahead_on() {
        let (f, c) = costed(10_000, 10_000, 500);
        let mut ra = ReadAhead::new();
        // 3 ms of simulated time per scanned page: 5000 pages are 1.5 windows.
        scan_with_random_reads(&c, &f, &mut ra, 0, 5000);
        let j = read_ahead_disk(&c);
        assert_eq!(
            (j["state"].as_str(), j["on"].as_bool(), j["changes"].as_u64()),
            (Some("on"), Some(true), Some(0)),
            "{j}"
        );
        assert_eq!((j["skipped_windows"].as_u64(), j["probes"].as_u64()), (Some(0), Some(0)), "{j}");
        assert_eq!((j["random_us"].as_f64(), j["seq_page_us"].as_f64()), (Some(10_000.0), Some(500.0)), "{j}");
        let aj = assert_ahead_adds_up(&c);
        assert!(aj["ahead_pages_disk"].as_u64().unwrap() >= 4800, "every page but the windows' first: {aj}");
        assert!(aj["ahead_used_disk"].as_u64().unwrap() >= 4800, "{aj}");
    }
}
