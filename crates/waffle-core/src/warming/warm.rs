//! Warming: reading pages ahead of demand, in large sequential reads, into L1
//! while it has free room and past it into the grid.
//!
//! The adapter names runs of pages (a whole file, or the sorted pages of a
//! table's b-tree) and calls [`Warming::warm_run`](super::Warming::warm_run)
//! in bounded pieces ([`Budget`]): between pieces it lets writers in (SQLite:
//! the piece runs inside a read transaction, see waffle-sqlite's warm.rs).
//! Each read covers up to [`WARM_READ_BYTES`] of the run.
//!
//! The rule of every read below L1 holds here too: a page's version is
//! captured before the read, and the bytes are installed (or queued for the
//! grid) only if the version is unchanged, checked under the page's stripe
//! lock. A write that raced the read has bumped the version (and put its own
//! bytes in L1, or discarded a queued copy), so the older bytes are dropped.
//!
//! Placement: L1 only where its shard has free room (a warm never evicts a
//! page someone read); past that, the pusher, waiting for room in its bounded
//! queue instead of dropping older pages (each page waits at most
//! [`PUSH_WAIT`], then counts as dropped). A page the grid already holds at
//! its version (presence `Held`) is not pushed again.
//!
//! What is reported is what was stored, not what was tried: a page queued
//! for the grid counts as pushed only once its node acknowledged it. The
//! pusher tallies what became of the warm's pages (the progress's
//! [`PushTally`]), and a warm that is done waits (at most [`SETTLE_WAIT`])
//! for the push queue to empty before it says so
//! ([`Warming::warm_finish`](super::Warming::warm_finish)).

use std::io;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::run::{Budget, Finish};
use crate::backing::{Backing, PageId};
use crate::cache::{PageCache, Placed};
use crate::pusher::PushTally;
use crate::stats::{Counter, SkippedTarget, WarmSnapshot};
use crate::versions::{split, MAX_PAGES};

/// Most bytes one warming read asks the backing for.
pub const WARM_READ_BYTES: usize = 1 << 20;
/// How long one page may wait for room in the push queue before it is given
/// up, where nothing else waits for the warm (an adapter holding a lock for
/// the warm's reads gives a shorter [`Budget::push_wait`]).
pub const PUSH_WAIT: Duration = Duration::from_secs(10);
/// How long a warm that is done waits for the pages it queued to be stored
/// (or refused) before it reports: about what the close of a database waits.
pub const SETTLE_WAIT: Duration = Duration::from_secs(10);

/// Sees each page a warm read (page number, bytes) and says whether to warm
/// it: a walk reads the small gaps between its pages rather than split a read.
pub type Visit<'a> = dyn FnMut(u64, &[u8]) -> bool + 'a;

/// Targets a warm names in its report, at most (the count goes on).
pub const MAX_SKIPPED_TARGETS: usize = 100;

#[derive(Default)]
struct State {
    running: bool,
    target: String,
    started: Option<Instant>,
    elapsed: Duration,
    finish: Option<Finish>,
    /// Parts of the target not warmed, and why (MariaDB: tablespaces InnoDB has not opened).
    skipped_targets: Vec<(String, String)>,
    skipped_targets_count: u64,
}

/// A warm refused because another one runs: the running warm's target.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("a warm of {target} is running (PRAGMA waffle_stats shows its progress)")]
pub struct WarmBusy {
    pub target: String,
}

/// A warm's progress, shown in the stats under "warm". One warm runs at a time.
#[derive(Default)]
pub struct WarmProgress {
    state: Mutex<State>,
    planned: Counter,
    read: Counter,
    l1: Counter,
    queued: Counter,
    skipped: Counter,
    dropped: Counter,
    bytes: Counter,
    reads: Counter,
    /// What the pusher did with the pages this warm queued (from 0 at each warm's start).
    pushes: Arc<PushTally>,
}

impl WarmProgress {
    /// Starts a warm of `target` (counters from 0); refused while one runs.
    pub fn begin(&self, target: &str) -> Result<(), WarmBusy> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if s.running {
            return Err(WarmBusy { target: s.target.clone() });
        }
        for c in
            [&self.planned, &self.read, &self.l1, &self.queued, &self.skipped, &self.dropped, &self.bytes, &self.reads]
        {
            c.set(0);
        }
        self.pushes.reset();
        *s = State { running: true, target: target.to_string(), started: Some(Instant::now()), ..State::default() };
        Ok(())
    }

    /// `pages` more pages to warm (a table's walk finds them level by level).
    pub fn plan(&self, pages: u64) {
        self.planned.add(pages);
    }

    /// A part of the target (`name`) that this warm does not read, and why:
    /// named in the report (the first [`MAX_SKIPPED_TARGETS`]), counted all.
    pub fn skip_target(&self, name: &str, why: &str) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.skipped_targets_count += 1;
        if s.skipped_targets.len() < MAX_SKIPPED_TARGETS {
            s.skipped_targets.push((name.to_string(), why.to_string()));
        }
    }

    pub fn finish(&self, how: Finish) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.running = false;
        s.elapsed = s.started.map_or(Duration::ZERO, |t| t.elapsed());
        s.finish = Some(how);
    }

    pub fn is_running(&self) -> bool {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).running
    }

    fn count(&self, placed: Placed) {
        match placed {
            Placed::L1 => &self.l1,
            Placed::Queued => &self.queued,
            Placed::Held | Placed::Raced => &self.skipped,
            Placed::NoRoom => &self.dropped,
        }
        .incr();
    }

    /// `warm` of the stats JSON.
    pub fn snapshot(&self) -> WarmSnapshot {
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let state = match (&s.finish, s.running) {
            (_, true) => "running",
            (None, false) => "idle",
            (Some(Finish::Done), false) => "done",
            (Some(Finish::Cancelled), false) => "cancelled",
            (Some(Finish::Failed(_)), false) => "failed",
        };
        let elapsed = if s.running { s.started.map_or(Duration::ZERO, |t| t.elapsed()) } else { s.elapsed };
        let get = Counter::get;
        let pushes = &self.pushes;
        let not_stored = pushes.not_stored();
        // Queued and neither stored nor refused: in the queue or on the way
        // while it runs; after it, taken back by a read or replaced by a write
        // (or still queued when SETTLE_WAIT ran out).
        let unsettled = get(&self.queued).saturating_sub(pushes.stored() + not_stored.total());
        WarmSnapshot {
            state: state.to_string(),
            target: s.target.clone(),
            planned_pages: get(&self.planned),
            read_pages: get(&self.read),
            l1_pages: get(&self.l1),
            queued_pages: get(&self.queued),
            pushed_pages: pushes.stored(),
            not_stored_pages: not_stored.total(),
            not_stored,
            unsettled_pages: unsettled,
            skipped_pages: get(&self.skipped),
            dropped_pages: get(&self.dropped),
            read_bytes: get(&self.bytes),
            disk_reads: get(&self.reads),
            elapsed_ms: elapsed.as_millis() as u64,
            skipped_targets: s
                .skipped_targets
                .iter()
                .map(|(name, why)| SkippedTarget { name: name.clone(), why: why.clone() })
                .collect(),
            skipped_targets_count: s.skipped_targets_count,
            error: match &s.finish {
                Some(Finish::Failed(e)) => Some(e.clone()),
                _ => None,
            },
        }
    }
}

/// Ends the running warm `p` of `cache`: a warm that is done first waits (at
/// most `settle`) until what it queued for the grid was stored or refused, so
/// that its report counts what the grid holds, not what it was sent.
pub(super) fn finish(cache: &PageCache, p: &WarmProgress, how: Finish, settle: Duration) {
    if how == Finish::Done && p.queued.get() > 0 {
        cache.flush_pushes(settle);
    }
    p.finish(how);
}

/// Warms pages `first..first + count` of one file (the run may not leave
/// `first`'s segment) into `cache` with reads of up to [`WARM_READ_BYTES`],
/// until the run is done or `budget` is spent, counting in `p`. Pages L1 or
/// the push queue hold are skipped (not read, unless `visit` wants every
/// page). `visit` sees each page read (the adapter walks its b-trees with it)
/// and picks the pages to warm; without it, every page is. Returns how many
/// pages of the run are done: all of them once the end of the file is reached.
pub(super) fn run(
    cache: &PageCache,
    p: &WarmProgress,
    first: u64,
    count: u64,
    file: &dyn Backing,
    budget: &mut Budget<'_>,
    mut visit: Option<&mut Visit<'_>>,
) -> io::Result<u64> {
    let page_bytes = cache.page_bytes();
    if page_bytes == 0 {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "the page size is not known yet"));
    }
    let (_, index) = split(first);
    let count = count.min(MAX_PAGES - index as u64);
    let per_read = (WARM_READ_BYTES / page_bytes).max(1) as u64;
    let mut done = 0;
    while done < count && !budget.spent() {
        if cache.is_fused() {
            return Err(io::Error::other("the cache turned itself off (see \"fused\")"));
        }
        let n = per_read.min(count - done);
        if run_read(cache, p, first + done, n, file, budget, visit.as_deref_mut())? {
            return Ok(count); // the end of the file: nothing after it exists
        }
        done += n;
    }
    Ok(done)
}

/// Warms pages `start..start + n` with one read at most; true when the file
/// ended inside them.
fn run_read(
    cache: &PageCache,
    p: &WarmProgress,
    start: u64,
    n: u64,
    file: &dyn Backing,
    budget: &mut Budget<'_>,
    mut visit: Option<&mut Visit<'_>>,
) -> io::Result<bool> {
    let page_bytes = cache.page_bytes();
    // Captured before the read: None where L1 or the push queue has the page.
    let versions: Vec<Option<u64>> = (start..start + n).map(|pg| cache.capture_version(pg)).collect();
    // The span read: from the first to the last page to warm (all of them for a visitor).
    let (lo, hi) = if visit.is_some() {
        (0, n as usize)
    } else {
        match versions.iter().position(Option::is_some) {
            Some(lo) => (lo, versions.iter().rposition(Option::is_some).expect("one is some") + 1),
            None => (0, 0),
        }
    };
    p.skipped.add((n as usize - (hi - lo)) as u64);
    if hi == lo {
        return Ok(false);
    }
    let mut span = vec![0u8; (hi - lo) * page_bytes];
    let got = file.read_pages(PageId::of(start + lo as u64), page_bytes, &mut span)?;
    p.reads.add(1);
    p.bytes.add(got as u64);
    budget.bytes = budget.bytes.saturating_sub(got as u64);
    let whole = got / page_bytes;
    for (k, chunk) in span.chunks_exact(page_bytes).take(whole).enumerate() {
        let page = start + (lo + k) as u64;
        if let Some(v) = visit.as_deref_mut() {
            if !v(page, chunk) {
                continue;
            }
        }
        match versions[lo + k] {
            Some(version) => {
                p.read.add(1);
                let bytes = Box::from(chunk);
                p.count(cache.place_or_push(page, version, bytes, budget.push_wait, budget.cancel, &p.pushes));
            }
            None => p.skipped.add(1),
        }
    }
    Ok(whole < hi - lo)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::Source;
    use crate::test_file::{numbered_file_and_cache, HookedFile};
    use crate::warming::Warming;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    const PAGE: usize = 512;

    /// A file of `pages` pages, page i filled with i, and a cache whose L1 holds `l1_pages`.
    fn setup(pages: usize, l1_pages: u64) -> (Arc<Mutex<Vec<u8>>>, HookedFile, Arc<PageCache>) {
        numbered_file_and_cache(pages, PAGE, l1_pages)
    }

    fn budget(cancel: &AtomicBool) -> Budget<'_> {
        crate::test_file::budget(cancel, PUSH_WAIT)
    }

    fn counts(w: &Warming) -> WarmSnapshot {
        w.warm_progress().snapshot()
    }

    #[test]
    fn a_warm_fills_l1_with_large_reads_and_stops_at_the_end_of_the_file() {
        let w = Warming::default();
        let (_, mem, c) = setup(40, 64);
        let cancel = AtomicBool::new(false);
        w.warm_progress().begin("all").unwrap();
        let done = w.warm_run(&c, 0, 1000, &mem, &mut budget(&cancel), None).unwrap();
        assert_eq!(done, 1000, "the end of the file ends the run");
        let j = counts(&w);
        assert_eq!((j.read_pages, j.l1_pages), (40, 40));
        assert_eq!(j.disk_reads, 1, "one read for 40 pages of 512 bytes: {j:?}");
        let mut buf = vec![0u8; PAGE];
        assert_eq!(c.read(17, &mut buf, &mem).unwrap().1, Source::L1);
        assert_eq!(buf[0], 17);
        assert_eq!(c.stats().disk_reads.get(), 0);
    }

    #[test]
    fn a_warm_never_evicts_and_skips_what_l1_has() {
        let w = Warming::default();
        let (_, mem, c) = setup(64, 8);
        let mut buf = vec![0u8; PAGE];
        c.read(3, &mut buf, &mem).unwrap(); // a hot page, in L1 before the warm
        let cancel = AtomicBool::new(false);
        w.warm_progress().begin("all").unwrap();
        w.warm_run(&c, 0, 64, &mem, &mut budget(&cancel), None).unwrap();
        let j = counts(&w);
        assert!(c.stats_snapshot().l1.pages <= 8);
        assert_eq!(c.read(3, &mut buf, &mem).unwrap().1, Source::L1, "the hot page stayed: {j:?}");
        let l1 = j.l1_pages;
        assert!((1..=7).contains(&l1), "free room filled, nothing more: {j:?}");
        assert_eq!(j.skipped_pages, 1, "page 3 was in L1: {j:?}");
        assert_eq!(j.dropped_pages, 63 - l1, "no grid: the rest had nowhere to go: {j:?}");
    }

    #[test]
    fn a_write_during_the_read_wins() {
        let w = Warming::default();
        let (_, mem, c) = setup(8, 64);
        // The database writes page 5 (the file first, then the cache) while warming's read is in flight.
        mem.write_during_the_first_read(&c, 5, 0xEE);
        // The warm's versions were captured before the hook ran: the read sees 0xEE, yet it is the
        // older capture that decides, so warming's copy is dropped and the write's stays.
        let cancel = AtomicBool::new(false);
        w.warm_progress().begin("all").unwrap();
        w.warm_run(&c, 0, 8, &mem, &mut budget(&cancel), None).unwrap();
        let j = counts(&w);
        assert_eq!(j.skipped_pages, 1, "page 5 raced a write: {j:?}");
        assert_eq!(j.l1_pages, 7, "{j:?}");
        let mut buf = vec![0u8; PAGE];
        assert_eq!(c.read(5, &mut buf, &mem).unwrap().1, Source::L1);
        assert_eq!(buf[0], 0xEE);
    }

    #[test]
    fn a_budget_bounds_a_piece_and_cancel_stops_it() {
        let w = Warming::default();
        let (_, mem, c) = setup(4096, 8192);
        let cancel = AtomicBool::new(false);
        w.warm_progress().begin("all").unwrap();
        let mut b = Budget {
            bytes: 1,
            deadline: Instant::now() + Duration::from_secs(60),
            cancel: &cancel,
            push_wait: PUSH_WAIT,
        };
        let done = w.warm_run(&c, 0, 4096, &mem, &mut b, None).unwrap();
        assert_eq!(done, (WARM_READ_BYTES / PAGE) as u64, "one read, then the byte budget is spent");
        cancel.store(true, Ordering::Relaxed);
        assert_eq!(w.warm_run(&c, done, 4096 - done, &mem, &mut budget(&cancel), None).unwrap(), 0);
        let busy = w.warm_progress().begin("again").unwrap_err();
        assert_eq!(busy, WarmBusy { target: "all".into() }, "one warm at a time");
        assert_eq!(busy.to_string(), "a warm of all is running (PRAGMA waffle_stats shows its progress)");
        w.warm_progress().finish(Finish::Cancelled);
        assert_eq!(counts(&w).state, "cancelled");
        w.warm_progress().begin("again").unwrap();
    }

    /// A cache of `l1_pages` with a push queue of 64 pages and a grid whose only node refuses connections.
    fn cache_with_a_dead_grid(l1_pages: u64) -> PageCache {
        let port = waffle_nodes::closed_port();
        let spec = crate::grid::NodeSpec { host: "127.0.0.1".into(), port, weight: 1 };
        PageCache::new(crate::cache::CacheOptions {
            cache_id: 7,
            saved: None,
            page_bytes: PAGE,
            local_bytes: l1_pages * PAGE as u64,
            push_queue_bytes: 64 * PAGE as u64,
            // No trial (grid::cost): every queued page goes to the node and fails there.
            grid: Some(Arc::new(crate::grid::Grid::new(
                vec![spec],
                crate::grid::GridOptions { cost_backoff: false, ..Default::default() },
            ))),
            seal_key: None,
            page_check: None,
            codec: crate::codec::Codec::Off,
        })
    }

    #[test]
    fn a_warm_reports_what_the_grid_stored_not_what_it_queued() {
        let w = Warming::default();
        let c = cache_with_a_dead_grid(4);
        let mem = crate::backing::MemoryFile(Arc::new(Mutex::new((0..40u8).flat_map(|i| [i; PAGE]).collect())));
        let cancel = AtomicBool::new(false);
        w.warm_progress().begin("all").unwrap();
        w.warm_run(&c, 0, 40, &mem, &mut budget(&cancel), None).unwrap();
        w.warm_finish(&c, Finish::Done, SETTLE_WAIT);
        let j = counts(&w);
        assert_eq!(j.state, "done");
        assert_eq!((j.l1_pages, j.queued_pages), (4, 36), "{j:?}");
        assert_eq!(j.pushed_pages, 0, "a dead node stored nothing: {j:?}");
        assert_eq!(j.not_stored_pages, 36, "{j:?}");
        let n = &j.not_stored;
        assert_eq!(n.lost + n.node_down, 36, "a refused connection, then down: {j:?}");
        assert_eq!(j.unsettled_pages, 0, "settled before done: {j:?}");
        let s = c.stats_snapshot();
        assert_eq!(s.l2_push_failures, 36, "{s:?}");
        assert_eq!(s.l2_push_not_stored.node_down, n.node_down);
        // The next warm counts from 0.
        w.warm_progress().begin("again").unwrap();
        assert_eq!(counts(&w).not_stored_pages, 0);
    }

    #[test]
    fn a_visitor_sees_every_page_even_those_l1_has() {
        let w = Warming::default();
        let (_, mem, c) = setup(10, 64);
        let mut buf = vec![0u8; PAGE];
        c.read(2, &mut buf, &mem).unwrap();
        let cancel = AtomicBool::new(false);
        w.warm_progress().begin("t").unwrap();
        let mut seen = Vec::new();
        let mut visit = |page: u64, bytes: &[u8]| {
            seen.push((page, bytes[0]));
            page != 4 // a gap page the walk reads through but does not want
        };
        w.warm_run(&c, 1, 4, &mem, &mut budget(&cancel), Some(&mut visit)).unwrap();
        assert_eq!(seen, vec![(1, 1), (2, 2), (3, 3), (4, 4)]);
        let j = counts(&w);
        assert_eq!((j.l1_pages, j.skipped_pages), (2, 1), "{j:?}");
        assert_eq!(c.stats_snapshot().l1.pages, 3, "page 2 read before, pages 1 and 3 warmed");
    }
}
