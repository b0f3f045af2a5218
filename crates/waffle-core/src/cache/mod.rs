//! The page cache of one database (one file, or several as segments): L1,
//! then the grid, then the disk.
//!
//! Read: L1 → push queue → grid (exclusive fetch, envelope checked against the
//! version the file holds) → the backing the adapter passed with the read,
//! asked for a [`PageId`](crate::backing::PageId). Whatever a read found below
//! L1 goes into L1, but only if no write changed the page meanwhile.
//!
//! Write: the adapter writes the file first and only then calls
//! [`PageCache::wrote`]: the page gets a new version (every older grid copy is
//! now rejected) and L1 takes the new bytes. Pages L1 evicts go to the pusher.
//!
//! A version check and the L1 update it guards happen under one stripe lock
//! per page, so a read that raced a write never installs the older bytes.
//!
//! One way: warming (above the cache) uses the cache through placement.rs;
//! the cache knows nothing of warming.
//!
//! The files, one job each:
//! - mod.rs: [`PageCache`], its options, construction, the grid it uses,
//!   the fuse, eviction to the pusher, the stripe locks and close;
//! - read_ahead.rs: one sequential reader's window state ([`ReadAhead`]);
//! - disk_ahead.rs: whether read-ahead reads from the disk ([`DiskAhead`]);
//! - read_path.rs: a read through the tiers, the grid's answer, verify mode;
//! - window.rs: a sequential scan's read-ahead windows;
//! - write_path.rs: writes, invalidation, truncation, other writers' changes;
//! - stats_snapshot.rs: the cache's part of the stats (`CacheSnapshot`);
//! - placement.rs: pages read beside the read path (what warming uses).
//!
//! The last five each add an `impl PageCache` over mod.rs's fields and
//! helpers; window.rs also uses read_ahead.rs and disk_ahead.rs, which hold
//! state of their own and use nothing of the cache's. Of the others, mod.rs
//! uses disk_ahead.rs alone (a field; the rest it only re-exports), so no
//! two files use each other.

mod disk_ahead;
mod placement;
mod read_ahead;
mod read_path;
mod stats_snapshot;
#[cfg(test)]
mod tests;
mod window;
mod write_path;

pub use disk_ahead::{DiskAhead, DISK_AHEAD_MARGIN, DISK_AHEAD_PROBE_EVERY, DISK_AHEAD_WINDOW};
pub use placement::Placed;
pub use read_ahead::{ReadAhead, READ_AHEAD_FIRST_PAGES, READ_AHEAD_MAX_PAGES};

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::codec::Codec;
use crate::envelope;
use crate::grid::{Clock, Grid, SystemClock};
use crate::pool::{Evicted, Pool};
use crate::presence::{Fate, Presence};
use crate::pusher::{GridSlot, Pusher};
use crate::seal::SealKey;
use crate::stats::Stats;
use crate::verify::Verifier;
use crate::versions::{SavedVersions, Versions};
use crate::working_set::WorkingSet;

const STRIPES: usize = 256;
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

    /// Runs `hook` once, before the first page gets a new version (a write, a
    /// truncation, another writer's change, an epoch): a warm open's sidecar
    /// is marked dirty there, not at the open (versions.rs).
    pub fn before_first_change(&self, hook: crate::versions::FirstChange) {
        self.versions.before_first_change(hook);
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
        // Writes from now on change no version: a warm open's sidecar says dirty now.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.versions.first_change_now()));
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

    /// Pages ever queued for the grid (tests: a backed-off node's evictions
    /// outside its sample never reach the queue).
    pub fn pages_queued_total(&self) -> u64 {
        self.pusher.queued_total()
    }

    /// Waits until pages already evicted have been pushed (tests, benchmarks).
    pub fn flush_pushes(&self, timeout: Duration) -> bool {
        self.pusher.flush(timeout)
    }

    /// Evicted pages go to the grid; without one they are simply dropped, and
    /// so are a scan's pages nobody read again (disk or grid still has them).
    /// A page dropped here is never pushed ([`Fate::Unpushed`]); the pusher
    /// records what becomes of the others.
    ///
    /// A page whose node is backed off (grid::cost: outside its sample) is
    /// dropped here too, not queued for the pusher to drop: while the grid
    /// does not pay, an eviction costs no queue, no lock shared with the
    /// pusher and no wake-up of its thread (the pusher was 8.6% of mariadbd's
    /// samples with every node backed off, 5.6% since: docs/benchmarks.md).
    fn settle(&self, evicted: Vec<Evicted>) {
        if evicted.is_empty() {
            return;
        }
        let Some(grid) = self.grid.get() else {
            for e in &evicted {
                self.presence.set_fate(e.page, Fate::Unpushed);
            }
            return;
        };
        for e in evicted {
            if e.scan {
                self.stats.scan_drops.incr();
                self.presence.set_fate(e.page, Fate::Unpushed);
            } else if self.pusher.is_closing()
                || grid.admits_push(envelope::GridKey::new(self.cache_id, e.page).as_bytes())
            {
                self.pusher.push(e);
            } else {
                self.stats.l2_push_cost_skips.incr();
                self.presence.set_fate(e.page, Fate::Unpushed);
            }
        }
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
