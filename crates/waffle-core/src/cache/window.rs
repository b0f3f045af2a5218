//! A sequential scan's read: a miss reads a window of the following pages
//! at once, from the grid in one request and the disk in runs.

use std::io;
use std::sync::atomic::Ordering;
use std::time::Instant;

use crate::backing::{Backing, PageId};
use crate::envelope::{self, Identity};
use crate::grid::{Fetch, Grid};
use crate::pool::Ahead;
use crate::presence::Verdict;
use crate::stats::Tier;
use crate::verify::How;
use crate::versions::{MAX_PAGES, SEGMENT_BITS};

use super::disk_ahead::DiskAdmit;
use super::read_ahead::{ReadAhead, READ_AHEAD_MAX_PAGES};
use super::{PageCache, Source};

/// A window is at most this fraction of L1, so a scan cannot evict its own window before reading it.
const READ_AHEAD_L1_DIVISOR: u64 = 16;
/// After a window found nothing in the grid, this many windows skip the grid (then one asks again).
const READ_AHEAD_GRID_BACKOFF: u32 = 8;

impl PageCache {
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
    /// Read-ahead from the disk only where it pays ([`DiskAhead`](super::DiskAhead)): off, a
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
        let max = (self.pool.capacity_bytes() / buf.len() as u64 / READ_AHEAD_L1_DIVISOR).min(READ_AHEAD_MAX_PAGES);
        if max < 2 {
            return self.read_tiers(page, buf, file, false);
        }
        let t0 = Instant::now();
        self.working_set.note(page, t0);
        if let Some(source) = self.peek_l1(page, buf, t0) {
            ra.read_hit(page);
            return Ok((buf.len(), source));
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
        ra.set_skipped(skip);
        let mut w = self.open_window(page, end, buf.len());
        self.stats.read_ahead_windows.incr();
        if let Some(grid) = self.grid.get() {
            self.window_from_grid(&grid, &mut w);
        }
        self.window_from_disk(&mut w, skip, file)?;
        match self.install_window(w, buf) {
            Some(source) => Ok((buf.len(), source)),
            // Past the end of the file (or a short read): the ordinary path answers.
            None => self.read_tiers(page, buf, file, false),
        }
    }

    /// L1's copy of `page` at the version the file holds, read into `buf`
    /// without making it hotter: where it came from; None when L1 has none
    /// (a copy at another version is dropped).
    fn peek_l1(&self, page: u64, buf: &mut [u8], t0: Instant) -> Option<Source> {
        let version = self.versions.current(page);
        let scan = match self.pool.peek(page, buf) {
            Some((installed, scan, ahead)) if installed == version => {
                self.count_used(ahead);
                scan
            }
            Some((_, _, ahead)) => {
                self.count_used(ahead); // as in read_tiers
                self.drop_stale_l1(page);
                return None;
            }
            None => return None,
        };
        if scan {
            self.stats.read_ahead_hits.incr();
            return Some(Source::ReadAhead);
        }
        self.stats.l1_hits.incr();
        self.stats.record(Tier::L1, t0.elapsed());
        Some(Source::L1)
    }

    /// The window `page..end`: its pages to read, their versions captured now.
    fn open_window(&self, page: u64, end: u64, page_bytes: usize) -> Window {
        // Pages the pusher holds are left to their demand read, which takes them from it: the
        // grid may still hold an older copy until their store lands (presence marks them first).
        let wanted: Vec<u64> =
            (page..end).filter(|&p| p == page || !(self.pool.contains(p) || self.pusher.holds(p))).collect();
        let versions: Vec<u64> = wanted.iter().map(|&p| self.versions.current(p)).collect();
        let (got, from_grid) = (vec![None; wanted.len()], vec![false; wanted.len()]);
        Window { page, wanted, versions, got, from_grid, page_bytes }
    }

    /// The grid is asked, in one round trip, for the window's pages it may
    /// hold (pushed at their version, within its reach) on nodes that are on
    /// (a backed-off node's round trip costs more than the disk read it
    /// saves: grid::cost); the disk reads only the rest. A window it had
    /// nothing for makes the next ones skip it.
    fn window_from_grid(&self, grid: &Grid, w: &mut Window) {
        let held = |p: u64| matches!(self.presence.verdict(p), Verdict::Held { .. });
        let on = |p: u64| grid.admits_read_ahead(envelope::GridKey::new(self.cache_id, p).as_bytes());
        let asked: Vec<usize> = (0..w.wanted.len()).filter(|&i| held(w.wanted[i]) && on(w.wanted[i])).collect();
        if asked.is_empty() {
            self.stats.read_ahead_presence_skips.incr();
            return;
        }
        if self.read_ahead_grid_skip.load(Ordering::Relaxed) != 0 {
            self.read_ahead_grid_skip.fetch_sub(1, Ordering::Relaxed);
            return;
        }
        let keys: Vec<String> = asked.iter().map(|&i| envelope::key(self.cache_id, w.wanted[i])).collect();
        let key_refs: Vec<&[u8]> = keys.iter().map(|k| k.as_bytes()).collect();
        let fetched = grid.get_many(&key_refs);
        self.stats.read_ahead_grid_requests.incr();
        let mut found = 0;
        for (&i, f) in asked.iter().zip(fetched) {
            let Fetch::Hit(value) = f else { continue };
            self.stats.l2_fetch_bytes.add(value.len() as u64);
            let expect = Identity { cache_id: self.cache_id, page: w.wanted[i], version: w.versions[i] };
            let mut bytes = vec![0u8; w.page_bytes].into_boxed_slice();
            match self.open_value(&value, expect, &mut bytes).and_then(|()| self.check_page(w.wanted[i], &bytes)) {
                Ok(()) => {
                    w.got[i] = Some(bytes);
                    w.from_grid[i] = true;
                    found += 1;
                }
                Err(reject) => self.stats.reject(reject),
            }
        }
        self.stats.read_ahead_pages_l2.add(found);
        if found == 0 {
            self.read_ahead_grid_skip.store(READ_AHEAD_GRID_BACKOFF, Ordering::Relaxed);
        }
    }

    /// What the grid lacked, from the disk: one read per contiguous run
    /// (`skip`: the missed page alone), each run timed for [`DiskAhead`](super::DiskAhead).
    fn window_from_disk(&self, w: &mut Window, skip: bool, file: &dyn Backing) -> io::Result<()> {
        let mut i = 0;
        while i < w.wanted.len() {
            if w.got[i].is_some() {
                i += 1;
                continue;
            }
            if skip && w.wanted[i] != w.page {
                break;
            }
            let mut j = i + 1;
            while !skip && j < w.wanted.len() && w.got[j].is_none() && w.wanted[j] == w.wanted[j - 1] + 1 {
                j += 1;
            }
            let mut run = vec![0u8; (j - i) * w.page_bytes];
            let t = self.clock.now();
            let n = file.read_pages(PageId::of(w.wanted[i]), w.page_bytes, &mut run)?;
            let took = self.clock.now().saturating_duration_since(t);
            self.stats.read_ahead_disk_reads.incr();
            let whole = n / w.page_bytes;
            if whole == j - i {
                self.disk_ahead.note_run(took, whole as u64);
            }
            self.stats.read_ahead_pages_disk.add(whole as u64);
            for (k, chunk) in run.chunks_exact(w.page_bytes).take(whole).enumerate() {
                self.versions.touch(w.wanted[i + k]);
                w.got[i + k] = Some(Box::from(chunk));
            }
            if whole < j - i {
                break; // end of file: nothing after this run exists
            }
            i = j;
        }
        Ok(())
    }

    /// Puts what the window read into L1 (a page whose version moved since
    /// is dropped) and the missed page into `buf`: where it came from, or
    /// None when the window did not bring it.
    fn install_window(&self, w: Window, buf: &mut [u8]) -> Option<Source> {
        let mut evicted = Vec::new();
        let mut served = None;
        for (k, bytes) in w.got.into_iter().enumerate() {
            let Some(bytes) = bytes else { continue };
            let (page, version) = (w.wanted[k], w.versions[k]);
            let source = if w.from_grid[k] { Ahead::Grid } else { Ahead::Disk };
            if page == w.page {
                buf.copy_from_slice(&bytes);
                served = Some(if w.from_grid[k] { Source::L2 } else { Source::Disk });
            }
            // The missed page is served now: only the pages after it are read ahead.
            let ahead = (page != w.page).then_some(source);
            let _g = self.stripe(page);
            if self.versions.current(page) == version {
                self.pool.insert_ahead(page, version, bytes, ahead, &mut evicted);
                self.verifier.entered(page, version, How::ReadAhead);
                match ahead {
                    Some(Ahead::Disk) => self.stats.ahead_pages_disk.incr(),
                    Some(Ahead::Grid) => self.stats.ahead_pages_l2.incr(),
                    None => {}
                }
            }
        }
        self.settle(evicted);
        served
    }
}

/// A window being read: its pages (the missed one first), their versions
/// captured before any read, and what each source brought.
struct Window {
    /// The missed page: served now, the others are read ahead.
    page: u64,
    wanted: Vec<u64>,
    versions: Vec<u64>,
    got: Vec<Option<Box<[u8]>>>,
    from_grid: Vec<bool>,
    page_bytes: usize,
}
