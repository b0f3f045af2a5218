//! One shard of the pool: S3-FIFO (Yang et al., SOSP'23) over a byte budget.
//!
//! - New entries go to the head of the small FIFO, unless the ghost remembers
//!   the page, in which case they go to the head of main.
//! - A hit bumps a 2-bit frequency (saturating at 3). Nothing moves on a hit.
//! - To make room: while the small queue would exceed 10% of the budget with
//!   the incoming entry (or main is empty), look at its tail: if it was
//!   accessed since insertion it moves to main keeping its frequency (as in
//!   the paper's Algorithm 1: the hits it earned in small still count in
//!   main), else it is evicted and its key goes to the ghost. Otherwise look at main's tail: if its frequency is > 0 it
//!   is decremented and the entry reinserted at main's head (lazy promotion,
//!   a 2-bit CLOCK), else it is evicted.
//!
//! A one-pass scan therefore only ever churns the small queue: its entries
//! are never hit, so they leave through the ghost without touching main.
//!
//! Data structures: entries live in a slab (`Vec<Slot>` with a free list);
//! the two FIFOs are intrusive doubly linked lists threaded through the slab
//! by `u32` index, so moving an entry between queues, reinserting it, or
//! removing it from the middle (`remove`, replace, truncate) is O(1) without
//! allocating; a map page -> slot index finds entries. The ghost is a ring of
//! keys (see `ghost.rs`). Eviction work per insert is O(1) amortized: every
//! main reinsertion spends one of at most 3 frequency units that hits paid
//! for, and every small->main move happens once per stay in the pool.

use std::mem;

use super::entry::{Ahead, Evicted};
use super::ghost::Ghost;
use super::hash::PageMap;

const NIL: u32 = u32::MAX;
const MAX_FREQ: u8 = 3;
/// The small queue's share of the budget, in tenths.
const SMALL_TENTHS: u64 = 1;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Queue {
    Free,
    Small,
    Main,
}

struct Slot {
    page: u64,
    version: u64,
    /// Empty (no allocation) while the slot is free.
    bytes: Box<[u8]>,
    /// Toward the head (newer). Unused while free.
    prev: u32,
    /// Toward the tail (older); the free list's link while free.
    next: u32,
    freq: u8,
    queue: Queue,
    /// Inserted by a sequential scan and not read since (see `Evicted::scan`).
    scan: bool,
    /// Read ahead of the reader by a window and not read yet (by anyone):
    /// where it came from. Cleared by the first `get` or `peek`.
    ahead: Option<Ahead>,
}

/// A FIFO threaded through the slab: new entries at `head`, eviction at `tail`.
struct List {
    head: u32,
    tail: u32,
    len: usize,
    bytes: u64,
}

impl List {
    const EMPTY: List = List { head: NIL, tail: NIL, len: 0, bytes: 0 };
}

pub(super) struct S3Fifo {
    budget_bytes: u64,
    /// Evict from the small queue while it holds at least this much.
    small_target_bytes: u64,
    used_bytes: u64,
    index: PageMap<u32>,
    slots: Vec<Slot>,
    free_head: u32,
    small: List,
    main: List,
    ghost: Ghost,
    /// Debug builds walk the whole structure once every `len` mutations,
    /// which keeps the check O(1) amortized.
    mutations_since_check: usize,
    /// Entries read ahead and not read yet, by source ([`Ahead`] as index).
    ahead_held: [u64; 2],
    /// Entries read ahead that left (evicted, removed, replaced, cleared) unread, by source.
    ahead_dropped: [u64; 2],
}

impl S3Fifo {
    pub(super) fn new(budget_bytes: u64) -> S3Fifo {
        let small_target_bytes = budget_bytes / 10 * SMALL_TENTHS;
        S3Fifo {
            budget_bytes,
            small_target_bytes,
            used_bytes: 0,
            index: PageMap::default(),
            slots: Vec::new(),
            free_head: NIL,
            small: List::EMPTY,
            main: List::EMPTY,
            ghost: Ghost::new(budget_bytes - small_target_bytes),
            mutations_since_check: 0,
            ahead_held: [0; 2],
            ahead_dropped: [0; 2],
        }
    }

    pub(super) fn budget_bytes(&self) -> u64 {
        self.budget_bytes
    }

    pub(super) fn used_bytes(&self) -> u64 {
        self.used_bytes
    }

    pub(super) fn len(&self) -> usize {
        self.index.len()
    }

    pub(super) fn contains(&self, page: u64) -> bool {
        self.index.contains_key(&page)
    }

    pub(super) fn get(&mut self, page: u64, out: &mut [u8]) -> Option<u64> {
        self.get_used(page, out).map(|(version, _)| version)
    }

    /// As `get`, and says whether this read is the first of a read-ahead
    /// page (where it came from), clearing that mark.
    pub(super) fn get_used(&mut self, page: u64, out: &mut [u8]) -> Option<(u64, Option<Ahead>)> {
        let idx = *self.index.get(&page)?;
        let slot = &mut self.slots[idx as usize];
        if slot.bytes.len() != out.len() {
            return None;
        }
        out.copy_from_slice(&slot.bytes);
        slot.freq = (slot.freq + 1).min(MAX_FREQ);
        slot.scan = false;
        let ahead = slot.ahead.take();
        let version = slot.version;
        if let Some(a) = ahead {
            self.ahead_held[a as usize] -= 1;
        }
        Some((version, ahead))
    }

    /// Copies the entry without counting an access: (version, still marked
    /// scan, first read of a read-ahead page: where it came from). The
    /// read-ahead mark is cleared; the scan mark stays.
    pub(super) fn peek(&mut self, page: u64, out: &mut [u8]) -> Option<(u64, bool, Option<Ahead>)> {
        let idx = *self.index.get(&page)?;
        let slot = &mut self.slots[idx as usize];
        if slot.bytes.len() != out.len() {
            return None;
        }
        out.copy_from_slice(&slot.bytes);
        let ahead = slot.ahead.take();
        let (version, scan) = (slot.version, slot.scan);
        if let Some(a) = ahead {
            self.ahead_held[a as usize] -= 1;
        }
        Some((version, scan, ahead))
    }

    /// (read-ahead entries held unread, read-ahead entries that left unread), by source.
    pub(super) fn ahead_counts(&self) -> ([u64; 2], [u64; 2]) {
        (self.ahead_held, self.ahead_dropped)
    }

    /// A read-ahead entry leaves unread.
    fn ahead_left(&mut self, ahead: Option<Ahead>) {
        if let Some(a) = ahead {
            self.ahead_held[a as usize] -= 1;
            self.ahead_dropped[a as usize] += 1;
        }
    }

    pub(super) fn insert(&mut self, page: u64, version: u64, bytes: Box<[u8]>, scan: bool, evicted: &mut Vec<Evicted>) {
        self.insert_ahead(page, version, bytes, scan, None, evicted);
    }

    /// As `insert`, for a page a read-ahead window brought from `ahead`
    /// (None: not read ahead of its reader).
    pub(super) fn insert_ahead(
        &mut self,
        page: u64,
        version: u64,
        bytes: Box<[u8]>,
        scan: bool,
        ahead: Option<Ahead>,
        evicted: &mut Vec<Evicted>,
    ) {
        let size = bytes.len() as u64;
        if size == 0 || size > self.budget_bytes {
            // Not cacheable (see the pool's doc). The old copy is stale now.
            self.remove(page);
            if let Some(a) = ahead {
                self.ahead_dropped[a as usize] += 1; // read ahead and gone at once
            }
            evicted.push(Evicted { page, version, bytes, scan });
            return;
        }
        if let Some(&idx) = self.index.get(&page) {
            // Replace in place: the write counts as an access, and the entry
            // keeps its queue position. Swap before evicting so that, should
            // the entry itself be chosen, the new bytes are what is reported.
            let slot = &mut self.slots[idx as usize];
            let old_size = slot.bytes.len() as u64;
            slot.version = version;
            slot.bytes = bytes;
            slot.freq = (slot.freq + 1).min(MAX_FREQ);
            slot.scan = false;
            let replaced = std::mem::replace(&mut slot.ahead, ahead);
            let list = match slot.queue {
                Queue::Small => &mut self.small,
                Queue::Main => &mut self.main,
                Queue::Free => unreachable!("indexed slot is free"),
            };
            list.bytes = list.bytes - old_size + size;
            self.used_bytes = self.used_bytes - old_size + size;
            self.ahead_left(replaced);
            if let Some(a) = ahead {
                self.ahead_held[a as usize] += 1;
            }
            self.make_room(0, evicted);
        } else {
            self.make_room(size, evicted);
            let queue = if self.ghost.take(page) { Queue::Main } else { Queue::Small };
            let idx = self.alloc(Slot {
                page,
                version,
                bytes,
                prev: NIL,
                next: NIL,
                freq: 0,
                queue,
                // A ghost hit is a re-reference, whoever brought the page back.
                scan: scan && queue == Queue::Small,
                ahead,
            });
            if let Some(a) = ahead {
                self.ahead_held[a as usize] += 1;
            }
            self.link_head(idx);
            self.index.insert(page, idx);
            self.used_bytes += size;
        }
        self.after_mutation();
    }

    pub(super) fn remove(&mut self, page: u64) -> bool {
        let Some(&idx) = self.index.get(&page) else {
            return false;
        };
        drop(self.detach(idx));
        self.after_mutation();
        true
    }

    /// Drops every entry with `page >= first_page`; returns how many.
    pub(super) fn remove_range(&mut self, pages: std::ops::Range<u64>) -> usize {
        let mut removed = 0;
        // Detaching only touches the visited slot and the free list head, so
        // walking the slab by index stays valid.
        for idx in 0..self.slots.len() as u32 {
            let slot = &self.slots[idx as usize];
            if slot.queue != Queue::Free && pages.contains(&slot.page) {
                drop(self.detach(idx));
                removed += 1;
            }
        }
        self.ghost.forget_range(pages);
        self.after_mutation();
        removed
    }

    pub(super) fn clear(&mut self) {
        for a in 0..2 {
            self.ahead_dropped[a] += std::mem::take(&mut self.ahead_held[a]);
        }
        self.index.clear();
        self.slots.clear();
        self.free_head = NIL;
        self.small = List::EMPTY;
        self.main = List::EMPTY;
        self.used_bytes = 0;
        self.ghost.clear();
        self.after_mutation();
    }

    /// Moves every entry into `evicted`: main first (the entries most worth
    /// keeping elsewhere), then small.
    pub(super) fn drain(&mut self, evicted: &mut Vec<Evicted>) {
        evicted.reserve(self.len());
        for head in [self.main.head, self.small.head] {
            let mut idx = head;
            while idx != NIL {
                let slot = &mut self.slots[idx as usize];
                idx = slot.next;
                let bytes = mem::take(&mut slot.bytes);
                evicted.push(Evicted { page: slot.page, version: slot.version, bytes, scan: slot.scan });
            }
        }
        self.clear();
    }

    /// Every entry but unread scan pages, hottest first, with its rank:
    /// main before small (main holds what was read again), then higher
    /// frequency first, then nearer the head (newer) first. The rank is
    /// `(queue, 3 - freq, position as a fraction of the queue in 2^-16)`, so
    /// shards of different sizes merge into one order (hot_list.rs).
    pub(super) fn hot_order(&self, out: &mut Vec<(u32, u64)>) {
        for (queue_rank, list) in [(0u32, &self.main), (1, &self.small)] {
            let (mut idx, mut at) = (list.head, 0u64);
            while idx != NIL {
                let slot = &self.slots[idx as usize];
                if !slot.scan {
                    let position = (at << 16) / list.len.max(1) as u64;
                    let rank = (queue_rank << 20) | (u32::from(MAX_FREQ - slot.freq) << 17) | position as u32;
                    out.push((rank, slot.page));
                }
                at += 1;
                idx = slot.next;
            }
        }
    }

    /// Evicts until `extra` more bytes fit in the budget.
    fn make_room(&mut self, extra: u64, evicted: &mut Vec<Evicted>) {
        debug_assert!(extra <= self.budget_bytes);
        while self.used_bytes + extra > self.budget_bytes {
            let victim = self.evict_one(extra);
            evicted.push(victim);
        }
    }

    /// The S3-FIFO eviction step. Terminates: each pass either evicts, moves
    /// an entry out of small for good, or spends one unit of a main entry's
    /// frequency (at most 3 per entry).
    ///
    /// Small gives up an entry when the incoming one (`incoming` bytes, which
    /// enter small) would take it past its target. Comparing small's bytes
    /// alone with the target lets small hover one entry below a target that
    /// is not a whole number of entries, and then every other eviction comes
    /// out of main: a scan would flush the hot set.
    fn evict_one(&mut self, incoming: u64) -> Evicted {
        debug_assert!(self.len() > 0, "evicting from an empty shard");
        loop {
            let from_small =
                self.small.len > 0 && (self.small.bytes + incoming > self.small_target_bytes || self.main.len == 0);
            if from_small {
                let idx = self.small.tail;
                let slot = &mut self.slots[idx as usize];
                if slot.freq > 0 {
                    self.unlink(idx);
                    self.slots[idx as usize].queue = Queue::Main;
                    self.link_head(idx);
                    continue;
                }
                let victim = self.detach(idx);
                // A scan's pages would only flush the ghost of real re-references.
                if !victim.scan {
                    self.ghost.push(victim.page, victim.bytes.len() as u64);
                }
                return victim;
            }
            let idx = self.main.tail;
            let slot = &mut self.slots[idx as usize];
            if slot.freq > 0 {
                slot.freq -= 1;
                self.unlink(idx);
                self.link_head(idx);
                continue;
            }
            return self.detach(idx);
        }
    }

    /// Unlinks, unindexes and frees a live slot; returns its entry.
    fn detach(&mut self, idx: u32) -> Evicted {
        self.unlink(idx);
        let slot = &mut self.slots[idx as usize];
        let bytes = mem::take(&mut slot.bytes);
        let (page, version, scan, ahead) = (slot.page, slot.version, slot.scan, slot.ahead.take());
        slot.queue = Queue::Free;
        slot.next = self.free_head;
        self.free_head = idx;
        self.index.remove(&page);
        self.used_bytes -= bytes.len() as u64;
        self.ahead_left(ahead);
        Evicted { page, version, bytes, scan }
    }

    fn alloc(&mut self, slot: Slot) -> u32 {
        if self.free_head != NIL {
            let idx = self.free_head;
            self.free_head = self.slots[idx as usize].next;
            self.slots[idx as usize] = slot;
            idx
        } else {
            let idx = u32::try_from(self.slots.len()).ok().filter(|&i| i != NIL);
            let idx = idx.expect("more than 2^32 - 1 entries in one shard");
            self.slots.push(slot);
            idx
        }
    }

    fn list_of(&mut self, queue: Queue) -> &mut List {
        match queue {
            Queue::Small => &mut self.small,
            Queue::Main => &mut self.main,
            Queue::Free => unreachable!("free slots are in no queue"),
        }
    }

    /// Links `idx` at the head of the queue named by its `queue` field.
    fn link_head(&mut self, idx: u32) {
        let (queue, size) = {
            let slot = &self.slots[idx as usize];
            (slot.queue, slot.bytes.len() as u64)
        };
        let list = self.list_of(queue);
        let old_head = list.head;
        list.head = idx;
        if old_head == NIL {
            list.tail = idx;
        }
        list.len += 1;
        list.bytes += size;
        if old_head != NIL {
            self.slots[old_head as usize].prev = idx;
        }
        let slot = &mut self.slots[idx as usize];
        slot.prev = NIL;
        slot.next = old_head;
    }

    /// Unlinks `idx` from its queue; leaves its `queue` field as it was.
    fn unlink(&mut self, idx: u32) {
        let (queue, prev, next, size) = {
            let slot = &self.slots[idx as usize];
            (slot.queue, slot.prev, slot.next, slot.bytes.len() as u64)
        };
        if prev != NIL {
            self.slots[prev as usize].next = next;
        }
        if next != NIL {
            self.slots[next as usize].prev = prev;
        }
        let list = self.list_of(queue);
        if prev == NIL {
            list.head = next;
        }
        if next == NIL {
            list.tail = prev;
        }
        list.len -= 1;
        list.bytes -= size;
    }

    fn after_mutation(&mut self) {
        debug_assert!(self.used_bytes <= self.budget_bytes, "shard over budget");
        debug_assert_eq!(self.used_bytes, self.small.bytes + self.main.bytes);
        debug_assert_eq!(self.index.len(), self.small.len + self.main.len);
        if cfg!(debug_assertions) {
            self.mutations_since_check += 1;
            if self.mutations_since_check >= self.len().max(64) {
                self.mutations_since_check = 0;
                self.validate();
            }
        }
    }

    /// O(n) structural check: both lists well formed and agreeing with the
    /// index, byte counts exact (used == sum of entry sizes), free list
    /// complete, no resident page in the ghost.
    pub(super) fn validate(&self) {
        let mut live = 0;
        let mut live_bytes = 0;
        let mut ahead = [0u64; 2];
        for slot in self.slots.iter().filter(|s| s.queue != Queue::Free) {
            if let Some(a) = slot.ahead {
                ahead[a as usize] += 1;
            }
        }
        assert_eq!(ahead, self.ahead_held, "read-ahead entries held drifted");
        for (queue, list) in [(Queue::Small, &self.small), (Queue::Main, &self.main)] {
            let (mut n, mut bytes, mut prev, mut idx) = (0, 0, NIL, list.head);
            while idx != NIL {
                let slot = &self.slots[idx as usize];
                assert_eq!(slot.queue, queue, "slot in the wrong list");
                assert_eq!(slot.prev, prev, "broken back link");
                assert!(slot.freq <= MAX_FREQ);
                assert!(!slot.bytes.is_empty(), "empty entry cached");
                assert_eq!(self.index.get(&slot.page), Some(&idx), "index disagrees with list");
                assert!(!self.ghost.contains(slot.page), "resident page in ghost");
                n += 1;
                bytes += slot.bytes.len() as u64;
                prev = idx;
                idx = slot.next;
                assert!(n <= self.slots.len(), "cycle in list");
            }
            assert_eq!(list.tail, prev, "wrong tail");
            assert_eq!(list.len, n, "list length drifted");
            assert_eq!(list.bytes, bytes, "list bytes drifted");
            live += n;
            live_bytes += bytes;
        }
        assert_eq!(self.index.len(), live, "index holds entries in no list");
        assert_eq!(self.used_bytes, live_bytes, "used_bytes != sum of entry sizes");
        assert!(self.used_bytes <= self.budget_bytes, "shard over budget");
        let (mut free, mut idx) = (0, self.free_head);
        while idx != NIL {
            let slot = &self.slots[idx as usize];
            assert_eq!(slot.queue, Queue::Free);
            assert!(slot.bytes.is_empty(), "free slot holds bytes");
            free += 1;
            idx = slot.next;
            assert!(free <= self.slots.len(), "cycle in free list");
        }
        assert_eq!(live + free, self.slots.len(), "leaked slots");
        self.ghost.validate();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(len: usize, fill: u8) -> Box<[u8]> {
        vec![fill; len].into_boxed_slice()
    }

    fn queue_of(s: &S3Fifo, page: u64) -> Queue {
        s.slots[s.index[&page] as usize].queue
    }

    fn pages(evicted: &[Evicted]) -> Vec<u64> {
        evicted.iter().map(|e| e.page).collect()
    }

    #[test]
    fn new_entries_go_to_small_and_unaccessed_ones_leave_through_the_ghost() {
        let mut s = S3Fifo::new(1000); // small target 100
        let mut ev = Vec::new();
        for page in 0..10 {
            s.insert(page, 0, entry(100, 0), false, &mut ev);
            assert_eq!(queue_of(&s, page), Queue::Small);
        }
        assert!(ev.is_empty());
        s.insert(10, 0, entry(100, 0), false, &mut ev);
        assert_eq!(pages(&ev), [0], "oldest small entry goes first");
        assert!(s.ghost.contains(0));
        s.validate();
    }

    #[test]
    fn an_unread_scan_entry_leaves_marked_and_without_a_ghost() {
        let mut s = S3Fifo::new(1000);
        let mut ev = Vec::new();
        for page in 0..10 {
            s.insert(page, 0, entry(100, 0), true, &mut ev);
        }
        assert_eq!(s.get(1, &mut [0; 100]), Some(0), "a read clears the scan mark of page 1");
        s.insert(10, 0, entry(100, 0), false, &mut ev);
        s.insert(11, 0, entry(100, 0), false, &mut ev);
        assert_eq!(pages(&ev), [0, 2], "page 1 was read: it moved to main");
        assert!(ev.iter().all(|e| e.scan), "unread scan entries come back marked");
        assert!(!s.ghost.contains(0) && !s.ghost.contains(2), "and leave no ghost");
        // Not marked: a normal entry, and a scan entry once read.
        let mut all = Vec::new();
        s.drain(&mut all);
        assert!(all.iter().any(|e| e.page == 1 && !e.scan));
        assert!(all.iter().any(|e| e.page == 10 && !e.scan));
        s.validate();
    }

    #[test]
    fn accessed_small_entry_moves_to_main_keeping_its_frequency() {
        let mut s = S3Fifo::new(1000);
        let mut ev = Vec::new();
        for page in 0..10 {
            s.insert(page, 0, entry(100, 0), false, &mut ev);
        }
        assert_eq!(s.get(0, &mut [0; 100]), Some(0));
        s.insert(10, 0, entry(100, 0), false, &mut ev);
        assert_eq!(pages(&ev), [1]);
        assert_eq!(queue_of(&s, 0), Queue::Main);
        assert_eq!(s.slots[s.index[&0] as usize].freq, 1);
        s.validate();
    }

    #[test]
    fn ghost_hit_goes_straight_to_main() {
        let mut s = S3Fifo::new(1000);
        let mut ev = Vec::new();
        for page in 0..11 {
            s.insert(page, 0, entry(100, 0), false, &mut ev);
        }
        assert_eq!(pages(&ev), [0]);
        ev.clear();
        s.insert(0, 1, entry(100, 0), false, &mut ev);
        assert_eq!(queue_of(&s, 0), Queue::Main);
        assert!(!s.ghost.contains(0));
        s.validate();
    }

    #[test]
    fn main_reinserts_entries_with_frequency_left() {
        let mut s = S3Fifo::new(1000);
        let mut ev = Vec::new();
        // Pages 0..9 go through small to main (each read once).
        for page in 0..9 {
            s.insert(page, 0, entry(100, 0), false, &mut ev);
            s.get(page, &mut [0; 100]);
        }
        for page in 100..200 {
            s.insert(page, 0, entry(100, 0), false, &mut ev);
        }
        assert!((0..9).all(|p| s.contains(p)), "accessed pages were kept");
        assert!((0..9).all(|p| queue_of(&s, p) == Queue::Main));
        // Main is full of freq-0 entries; page 1 earns a second chance.
        s.get(1, &mut [0; 100]);
        // Accessed small entries move into main and force main evictions.
        ev.clear();
        for page in 300..302 {
            s.insert(page, 0, entry(100, 0), false, &mut ev);
            s.get(page, &mut [0; 100]);
        }
        s.insert(400, 0, entry(100, 0), false, &mut ev);
        s.insert(401, 0, entry(100, 0), false, &mut ev);
        assert!(s.contains(1), "page 1 had frequency left and was reinserted");
        assert!(pages(&ev).contains(&0), "page 0 (freq 0, oldest in main) went: {:?}", pages(&ev));
        s.validate();
    }

    #[test]
    fn hot_order_puts_main_before_small_frequent_before_rare_and_leaves_scans_out() {
        let mut s = S3Fifo::new(1000);
        let mut ev = Vec::new();
        for page in 0..10 {
            s.insert(page, 0, entry(100, 0), page == 9, &mut ev);
        }
        s.get(0, &mut [0; 100]);
        s.insert(10, 0, entry(100, 0), false, &mut ev); // page 0 (read) moves to main, page 1 goes
        for _ in 0..3 {
            s.get(5, &mut [0; 100]);
        }
        let mut order = Vec::new();
        s.hot_order(&mut order);
        order.sort_unstable();
        let pages: Vec<u64> = order.iter().map(|&(_, p)| p).collect();
        assert_eq!(pages[0], 0, "main first: {pages:?}");
        assert_eq!(pages[1], 5, "then the most read of small: {pages:?}");
        assert_eq!(pages[2], 10, "then small, newest first: {pages:?}");
        assert!(!pages.contains(&9), "an unread scan page is not hot: {pages:?}");
        assert!(!pages.contains(&1), "evicted: {pages:?}");
        assert_eq!(pages.len(), 9);
    }

    #[test]
    fn slot_is_48_bytes_as_documented() {
        assert_eq!(mem::size_of::<Slot>(), 48);
    }

    #[test]
    fn frequency_saturates_at_three() {
        let mut s = S3Fifo::new(1000);
        let mut ev = Vec::new();
        s.insert(7, 0, entry(10, 0), false, &mut ev);
        for _ in 0..10 {
            s.get(7, &mut [0; 10]);
        }
        assert_eq!(s.slots[s.index[&7] as usize].freq, MAX_FREQ);
    }

    #[test]
    fn replace_in_place_keeps_queue_and_accounts_new_size() {
        let mut s = S3Fifo::new(1000);
        let mut ev = Vec::new();
        s.insert(1, 1, entry(100, 1), false, &mut ev);
        s.insert(1, 2, entry(300, 2), false, &mut ev);
        assert!(ev.is_empty());
        assert_eq!((s.len(), s.used_bytes()), (1, 300));
        let mut out = [0; 300];
        assert_eq!(s.get(1, &mut out), Some(2));
        assert!(out.iter().all(|&b| b == 2));
        s.validate();
    }

    #[test]
    fn growing_replace_evicts_others_to_fit() {
        let mut s = S3Fifo::new(1000);
        let mut ev = Vec::new();
        for page in 0..10 {
            s.insert(page, 0, entry(100, 0), false, &mut ev);
        }
        s.insert(5, 1, entry(400, 0), false, &mut ev);
        assert_eq!(ev.len(), 3);
        assert!(s.used_bytes() <= 1000);
        assert!(!pages(&ev).contains(&5) || !s.contains(5));
        s.validate();
    }

    #[test]
    fn entry_filling_the_whole_budget_evicts_everything_else() {
        let mut s = S3Fifo::new(1000);
        let mut ev = Vec::new();
        for page in 0..10 {
            s.insert(page, 0, entry(100, 0), false, &mut ev);
            s.get(page, &mut [0; 100]);
        }
        s.insert(99, 0, entry(1000, 0), false, &mut ev);
        assert_eq!(ev.len(), 10);
        assert_eq!((s.len(), s.used_bytes()), (1, 1000));
        s.validate();
    }

    #[test]
    fn remove_range_walks_the_slab_and_forgets_ghosts() {
        let mut s = S3Fifo::new(1000);
        let mut ev = Vec::new();
        for page in 0..20 {
            s.insert(page, 0, entry(100, 0), false, &mut ev);
        }
        assert_eq!(s.remove_range(15..u64::MAX), 5);
        assert!((0..15).all(|p| s.contains(p) == ev.iter().all(|e| e.page != p)));
        assert!(!(15..20).any(|p| s.contains(p)));
        s.validate();
        // Slots freed by the truncate are reused.
        let slots = s.slots.len();
        for page in 15..20 {
            s.insert(page, 0, entry(10, 0), false, &mut ev);
        }
        assert_eq!(s.slots.len(), slots);
        s.validate();
    }
}
