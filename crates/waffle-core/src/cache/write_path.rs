//! What changes a page under the cache: the database's writes, partial
//! writes, truncations, and other writers' changes; every older copy is given up.

use std::time::Instant;

use crate::presence::Fate;
use crate::verify::How;
use crate::versions;

use super::PageCache;

impl PageCache {
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
    /// copy, a read of it from the disk is [`DiskReason::Invalidated`](crate::presence::DiskReason::Invalidated).
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

    /// Every tier forgets `page` (a new version: no copy made before is served).
    pub(super) fn forget(&self, page: u64) {
        let _g = self.stripe(page);
        self.versions.bump(page);
        self.give_up_copies(page);
    }

    fn discard_queued(&self, page: u64) {
        self.pusher.take(page);
    }
}
