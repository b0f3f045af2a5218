//! A read through the tiers: L1, the push queue, the grid, then the disk;
//! the grid's answer checked, and verify mode's check of what a tier served.

use std::io;
use std::time::Instant;

use crate::backing::{Backing, PageId};
use crate::codec::Stored;
use crate::envelope::{self, Identity};
use crate::grid::{Fetch, Grid};
use crate::pool::Ahead;
use crate::presence::{DiskReason, Fate, Verdict};
use crate::stats::Tier;
use crate::verify::{self, How, Served};

use super::{PageCache, Source};

impl PageCache {
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
    /// here is a sample of a random read for [`DiskAhead`](super::DiskAhead) (false for the
    /// pages a window that skipped the disk left to its reader: they continue a run).
    pub(super) fn read_tiers(
        &self,
        page: u64,
        buf: &mut [u8],
        file: &dyn Backing,
        random: bool,
    ) -> io::Result<(usize, Source)> {
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

    /// A read found a page a window read ahead: the first such read uses it.
    pub(super) fn count_used(&self, ahead: Option<Ahead>) {
        match ahead {
            Some(Ahead::Disk) => self.stats.ahead_used_disk.incr(),
            Some(Ahead::Grid) => self.stats.ahead_used_l2.incr(),
            None => {}
        }
    }

    /// Reads the file only (the fuse is tripped).
    pub(super) fn read_through(&self, page: u64, buf: &mut [u8], file: &dyn Backing) -> io::Result<(usize, Source)> {
        let n = file.read_pages(PageId::of(page), buf.len(), buf)?;
        buf[n..].fill(0);
        // The cache turned itself off: every copy it held was given up.
        self.stats.disk_read(DiskReason::Invalidated);
        Ok((n, Source::Disk))
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
    pub(super) fn open_value(&self, value: &[u8], expect: Identity, out: &mut [u8]) -> Result<(), envelope::Reject> {
        let t0 = Instant::now();
        let stored = envelope::open_into(value, expect, self.seal_key.as_deref(), out)?;
        if stored != Stored::Raw {
            self.stats.decompress_ns.add(t0.elapsed().as_nanos() as u64);
            self.stats.decompress_pages.incr();
        }
        Ok(())
    }

    /// The adapter's check of a grid copy whose envelope matched.
    pub(super) fn check_page(&self, page: u64, bytes: &[u8]) -> Result<(), envelope::Reject> {
        match &self.page_check {
            Some(c) if !c.accepts(page, bytes) => Err(envelope::Reject::Content),
            _ => Ok(()),
        }
    }

    pub(super) fn drop_stale_l1(&self, page: u64) {
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
    pub(super) fn verified(
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
}
