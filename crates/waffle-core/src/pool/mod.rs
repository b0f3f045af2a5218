//! L1: the local pool. A concurrent page cache with a byte budget and S3-FIFO
//! eviction; every entry it evicts is handed back to the caller (to be pushed
//! to the grid), so nothing leaves the pool silently except through
//! `remove`, `remove_from`, `clear`, or being replaced by a newer version.
//!
//! # Layout
//!
//! The pool is `2^k` shards (`k` <= 6), each a `Mutex` over an independent
//! S3-FIFO cache (`s3fifo.rs`) with its own slice of the budget; a page's
//! shard is picked by a Fibonacci (multiply-shift) hash of its number, so
//! runs of sequential pages spread evenly. There is no global lock: `get`,
//! `insert`, `remove` and `contains` lock one shard; `len` and `used_bytes`
//! sum per-shard atomics that each shard publishes while it holds its lock;
//! the whole-pool operations (`remove_from`, `clear`, `drain`) lock the
//! shards one after the other, so they are not atomic snapshots.
//!
//! Shard count: `clamp(capacity_bytes / 4 MiB, 1, 64)` rounded down to a
//! power of two. 4 MiB is 64 pages of 64 KiB, enough for the small queue
//! (10%) to hold a few pages and for the hash's imbalance between shards to
//! stay small; 64 shards are plenty for the core counts we target. The budget
//! is split evenly (remainder to the first shards), so the shard budgets sum
//! to exactly `capacity_bytes`.
//!
//! Each shard: a slab of entries with a free list, two intrusive FIFO lists
//! (small, main) through the slab by `u32` index, a map page -> slot, and a
//! ghost ring of evicted keys (`ghost.rs`). All operations are O(1)
//! amortized except `remove_from`, `clear` and `drain`, which are O(entries).
//! Nothing allocates per operation beyond the caller's `Box`: the slab, the
//! map and the ghost ring only grow to their peak size and are reused.
//!
//! # Accounting
//!
//! `capacity_bytes` and `used_bytes` count payload bytes only (the sum of the
//! cached entries' lengths); per-entry overhead is NOT counted. Per cached
//! entry it is: a 48 B slab slot; a map entry (17 B at a load factor between
//! 7/16 and 7/8, so 20-40 B); about 0.9 ghost keys (16-32 B ring slot plus a
//! 20-40 B map entry each); and the allocator's header on the caller's Box.
//! In all roughly 100-170 B per entry: ~0.2% at 64 KiB pages, ~3-4% at
//! 4 KiB pages. The slab, maps and ring never shrink (not even on `clear`):
//! they stay at the peak the budget allowed, which is what bounds them.
//!
//! An entry longer than its shard's budget, or of zero length, is not cached
//! and comes straight back as evicted (a zero-length entry would cost no
//! budget, so caching it would make the entry count unbounded). Capacity 0
//! therefore caches nothing.
//!
//! # Semantics worth knowing
//!
//! - Replacing an entry counts as an access (bumps its frequency) and keeps
//!   its queue position; the old bytes are dropped, not reported. If the new
//!   size needs room, other entries (or, rarely, the entry itself, with its
//!   new bytes) are evicted.
//! - If a panic ever poisons a shard's lock (a bug), the next user of that
//!   shard resets it to empty instead of propagating the panic: the cache
//!   may lose data, never fail the database.

mod entry;
mod ghost;
mod hash;
mod s3fifo;
#[cfg(test)]
mod tests;

use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

pub use entry::{Ahead, Evicted};
use s3fifo::S3Fifo;

/// Smallest budget worth a shard of its own.
const SHARD_MIN_BYTES: u64 = 4 << 20;
const MAX_SHARD_BITS: u32 = 6;

pub struct Pool {
    shards: Box<[Shard]>,
    shard_bits: u32,
    capacity_bytes: u64,
}

/// Aligned to keep neighbouring shards' locks and counters off one cache line.
#[repr(align(128))]
struct Shard {
    cache: Mutex<S3Fifo>,
    /// Copies of the cache's counters, stored under the lock, read without it.
    len: AtomicUsize,
    used_bytes: AtomicU64,
}

impl Shard {
    fn lock(&self) -> MutexGuard<'_, S3Fifo> {
        match self.cache.lock() {
            Ok(guard) => guard,
            Err(poisoned) => {
                let mut guard = poisoned.into_inner();
                *guard = S3Fifo::new(guard.budget_bytes());
                self.cache.clear_poison();
                self.publish(&guard);
                guard
            }
        }
    }

    fn publish(&self, cache: &S3Fifo) {
        self.len.store(cache.len(), Ordering::Relaxed);
        self.used_bytes.store(cache.used_bytes(), Ordering::Relaxed);
    }

    /// Runs a mutating operation under the lock and publishes the counters.
    fn update<R>(&self, op: impl FnOnce(&mut S3Fifo) -> R) -> R {
        let mut cache = self.lock();
        let result = op(&mut cache);
        self.publish(&cache);
        result
    }
}

/// log2 of the shard count for a pool of `capacity_bytes`.
fn shard_bits_for(capacity_bytes: u64) -> u32 {
    let wanted = (capacity_bytes / SHARD_MIN_BYTES).max(1);
    wanted.ilog2().min(MAX_SHARD_BITS)
}

impl Pool {
    /// A pool caching at most `capacity_bytes` of entry payload (overhead not
    /// counted; see the module doc). 0 caches nothing.
    pub fn new(capacity_bytes: u64) -> Pool {
        let shard_bits = shard_bits_for(capacity_bytes);
        let count = 1u64 << shard_bits;
        let (base, remainder) = (capacity_bytes / count, capacity_bytes % count);
        let shards = (0..count)
            .map(|i| Shard {
                cache: Mutex::new(S3Fifo::new(base + u64::from(i < remainder))),
                len: AtomicUsize::new(0),
                used_bytes: AtomicU64::new(0),
            })
            .collect();
        Pool { shards, shard_bits, capacity_bytes }
    }

    fn shard(&self, page: u64) -> &Shard {
        &self.shards[hash::shard_of(page, self.shard_bits)]
    }

    /// On a hit copies the entry into `out`, bumps its frequency and returns
    /// its version. An entry whose length differs from `out.len()` is a miss.
    pub fn get(&self, page: u64, out: &mut [u8]) -> Option<u64> {
        // Counters do not change on a get: no publish.
        self.shard(page).lock().get(page, out)
    }

    /// As [`Pool::get`], and whether this is the first read of a page read
    /// ahead ([`Pool::insert_ahead`]): where it came from.
    pub fn get_used(&self, page: u64, out: &mut [u8]) -> Option<(u64, Option<Ahead>)> {
        self.shard(page).lock().get_used(page, out)
    }

    /// Inserts or replaces the entry for `page`. Entries evicted to make room
    /// are appended to `evicted`; a replaced entry is dropped, not reported.
    /// An entry that cannot be cached (longer than its shard's budget, or
    /// empty) is appended to `evicted` itself, and any older copy dropped.
    pub fn insert(&self, page: u64, version: u64, bytes: Box<[u8]>, evicted: &mut Vec<Evicted>) {
        self.shard(page).update(|cache| cache.insert(page, version, bytes, false, evicted));
    }

    /// Copies the entry into `out` like [`Pool::get`] but counts no access (a
    /// scan passing by does not make a page hot). Returns the version,
    /// whether the entry is still an unread scan entry, and, on the first
    /// read of a page read ahead, where it came from.
    pub fn peek(&self, page: u64, out: &mut [u8]) -> Option<(u64, bool, Option<Ahead>)> {
        self.shard(page).lock().peek(page, out)
    }

    /// As [`Pool::insert`], for a page a sequential scan brought in: if it is
    /// evicted before anyone reads it, it comes back with `scan` set, and it
    /// leaves no ghost entry behind. A read clears the mark.
    pub fn insert_scan(&self, page: u64, version: u64, bytes: Box<[u8]>, evicted: &mut Vec<Evicted>) {
        self.insert_ahead(page, version, bytes, None, evicted);
    }

    /// As [`Pool::insert_scan`]; `ahead` names where a page read ahead of its
    /// reader came from, so that its first read (or its leaving unread) is
    /// counted ([`Pool::ahead_counts`]).
    pub fn insert_ahead(
        &self,
        page: u64,
        version: u64,
        bytes: Box<[u8]>,
        ahead: Option<Ahead>,
        evicted: &mut Vec<Evicted>,
    ) {
        self.shard(page).update(|cache| cache.insert_ahead(page, version, bytes, true, ahead, evicted));
    }

    /// Pages read ahead, by source ([`Ahead`] as index): (held in the pool
    /// unread, left it unread: evicted, removed, replaced or cleared).
    /// Locks the shards one after the other.
    pub fn ahead_counts(&self) -> ([u64; 2], [u64; 2]) {
        let (mut held, mut dropped) = ([0; 2], [0; 2]);
        for shard in self.shards.iter() {
            let (h, d) = shard.lock().ahead_counts();
            for a in 0..2 {
                held[a] += h[a];
                dropped[a] += d[a];
            }
        }
        (held, dropped)
    }

    /// Inserts `page` only if its shard has room for it without evicting
    /// anything (warming fills free space, never pushes hot pages out).
    /// Gives the bytes back when there is no room or the page is cached.
    pub fn insert_if_room(&self, page: u64, version: u64, bytes: Box<[u8]>) -> Result<(), Box<[u8]>> {
        self.shard(page).update(|cache| {
            if bytes.is_empty()
                || cache.contains(page)
                || cache.used_bytes() + bytes.len() as u64 > cache.budget_bytes()
            {
                return Err(bytes);
            }
            let mut evicted = Vec::new();
            cache.insert(page, version, bytes, false, &mut evicted);
            debug_assert!(evicted.is_empty(), "an insert with room evicted");
            Ok(())
        })
    }

    /// Drops the entry if present (no eviction report).
    pub fn remove(&self, page: u64) -> bool {
        self.shard(page).update(|cache| cache.remove(page))
    }

    /// Drops every entry with `page >= first_page` (truncate); returns how many.
    pub fn remove_from(&self, first_page: u64) -> usize {
        self.remove_range(first_page..u64::MAX)
    }

    /// Drops every entry whose page is in `pages` (one file's tail when
    /// several files share the pool); returns how many.
    pub fn remove_range(&self, pages: std::ops::Range<u64>) -> usize {
        self.shards.iter().map(|shard| shard.update(|cache| cache.remove_range(pages.clone()))).sum()
    }

    /// Drops everything, including the eviction history.
    pub fn clear(&self) {
        for shard in self.shards.iter() {
            shard.update(S3Fifo::clear);
        }
    }

    /// Moves every entry into `evicted` (clean close: push L1 to the grid).
    /// Within a shard, main-queue entries come before small-queue ones.
    pub fn drain(&self, evicted: &mut Vec<Evicted>) {
        for shard in self.shards.iter() {
            shard.update(|cache| cache.drain(evicted));
        }
    }

    /// At most `max` cached pages, hottest first (S3-FIFO's own signals: main
    /// before small, frequency, then age; unread scan pages left out), the
    /// shards merged by rank. Locks the shards one after the other.
    pub fn hot_pages(&self, max: usize) -> Vec<u64> {
        let mut ranked = Vec::with_capacity(self.len().min(max));
        for shard in self.shards.iter() {
            shard.lock().hot_order(&mut ranked);
        }
        ranked.sort_unstable();
        ranked.into_iter().take(max).map(|(_, page)| page).collect()
    }

    /// Whether `page` is cached. Does not count as an access.
    pub fn contains(&self, page: u64) -> bool {
        self.shard(page).lock().contains(page)
    }

    pub fn len(&self) -> usize {
        self.shards.iter().map(|shard| shard.len.load(Ordering::Relaxed)).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Payload bytes cached (overhead not counted).
    pub fn used_bytes(&self) -> u64 {
        self.shards.iter().map(|shard| shard.used_bytes.load(Ordering::Relaxed)).sum()
    }

    pub fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }
}

impl fmt::Debug for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pool")
            .field("shards", &self.shards.len())
            .field("len", &self.len())
            .field("used_bytes", &self.used_bytes())
            .field("capacity_bytes", &self.capacity_bytes)
            .finish()
    }
}
