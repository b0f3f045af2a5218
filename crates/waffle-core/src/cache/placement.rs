//! Pages read beside the read path, ahead of demand (what warming uses).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::envelope::{self, Identity};
use crate::grid::Fetch;
use crate::pool::Evicted;
use crate::presence::Verdict;
use crate::pusher::PushTally;
use crate::verify::How;

use super::PageCache;

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
