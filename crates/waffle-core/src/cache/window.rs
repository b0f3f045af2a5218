//! A sequential scan's read: a miss reads a window of the following pages
//! at once, from the grid in one request and the disk in runs.

use std::io;
use std::sync::atomic::Ordering;
use std::time::Instant;

use crate::backing::{Backing, PageId};
use crate::envelope::{self, Identity};
use crate::grid::Fetch;
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
        ra.set_skipped(skip);
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
}
