//! The ghost FIFO of S3-FIFO: page numbers (no data) of entries recently
//! evicted from the small queue, so that a page coming back soon after goes
//! straight to the main queue.
//!
//! Bounded by bytes, not by count: each key remembers the size of the entry
//! it stood for, and the keys together stand for at most `budget_bytes` (the
//! main queue's share of the shard), i.e. about as many keys as main holds
//! entries, whatever the entry size.
//!
//! Layout: a ring (`VecDeque`) of `(page, bytes)` in eviction order, plus a
//! map page -> sequence number of that page's newest ring slot. A key is
//! removed from the map when it is hit ([`Ghost::take`]); its ring slot stays
//! until it reaches the front, where it is recognised as stale because the
//! map no longer names its sequence number. Every operation is O(1)
//! amortized and allocates only when the ring or map grows past its previous
//! peak.

use std::collections::VecDeque;

use super::hash::PageMap;

pub(super) struct Ghost {
    /// Oldest at the front. Includes stale slots (taken, or superseded by a
    /// newer slot for the same page); they still count toward `bytes`.
    ring: VecDeque<(u64, u64)>,
    /// page -> sequence number of its live ring slot.
    seq_of: PageMap<u64>,
    /// Sequence number of `ring[0]`.
    front_seq: u64,
    bytes: u64,
    budget_bytes: u64,
}

impl Ghost {
    pub(super) fn new(budget_bytes: u64) -> Ghost {
        Ghost { ring: VecDeque::new(), seq_of: PageMap::default(), front_seq: 0, bytes: 0, budget_bytes }
    }

    /// Remembers that `page`, an entry of `bytes`, was just evicted.
    pub(super) fn push(&mut self, page: u64, bytes: u64) {
        if bytes > self.budget_bytes {
            return; // could never fit; also makes a zero budget remember nothing
        }
        while self.bytes + bytes > self.budget_bytes {
            self.pop_oldest();
        }
        let seq = self.front_seq + self.ring.len() as u64;
        self.ring.push_back((page, bytes));
        self.bytes += bytes;
        self.seq_of.insert(page, seq);
    }

    fn pop_oldest(&mut self) {
        let (page, bytes) = self.ring.pop_front().expect("ghost bytes > 0 with empty ring");
        let seq = self.front_seq;
        self.front_seq += 1;
        self.bytes -= bytes;
        // Only forget the page if this slot is its newest one.
        if self.seq_of.get(&page) == Some(&seq) {
            self.seq_of.remove(&page);
        }
    }

    /// Whether `page` is remembered; forgets it (it is about to be resident).
    pub(super) fn take(&mut self, page: u64) -> bool {
        self.seq_of.remove(&page).is_some()
    }

    pub(super) fn contains(&self, page: u64) -> bool {
        self.seq_of.contains_key(&page)
    }

    /// Forgets every page `>= first_page` (their history is void after a
    /// truncate). O(ghost size); truncates are rare.
    /// Forgets pages in `pages` (a truncated file's tail).
    pub(super) fn forget_range(&mut self, pages: std::ops::Range<u64>) {
        self.seq_of.retain(|page, _| !pages.contains(page));
    }

    pub(super) fn clear(&mut self) {
        self.ring.clear();
        self.seq_of.clear();
        self.front_seq = 0;
        self.bytes = 0;
    }

    /// Number of pages remembered (live keys).
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.seq_of.len()
    }

    /// O(n) structural check, for tests and debug builds.
    pub(super) fn validate(&self) {
        assert!(self.bytes <= self.budget_bytes, "ghost over budget");
        let ring_bytes: u64 = self.ring.iter().map(|&(_, b)| b).sum();
        assert_eq!(ring_bytes, self.bytes, "ghost byte count drifted");
        assert!(self.seq_of.len() <= self.ring.len());
        let end_seq = self.front_seq + self.ring.len() as u64;
        for (&page, &seq) in &self.seq_of {
            assert!(seq >= self.front_seq && seq < end_seq, "ghost key outside ring");
            assert_eq!(self.ring[(seq - self.front_seq) as usize].0, page, "ghost slot mismatch");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_until_pushed_out_by_bytes() {
        let mut g = Ghost::new(100);
        g.push(1, 40);
        g.push(2, 40);
        assert!(g.contains(1) && g.contains(2));
        g.push(3, 40); // 120 > 100: page 1 goes
        assert!(!g.contains(1) && g.contains(2) && g.contains(3));
        g.validate();
    }

    #[test]
    fn take_forgets_and_stale_slot_is_skipped() {
        let mut g = Ghost::new(100);
        g.push(1, 50);
        assert!(g.take(1));
        assert!(!g.take(1));
        g.push(1, 50); // newer slot for the same page
        g.push(2, 50); // pops the stale slot of page 1; the newer one stays
        assert!(g.contains(1) && g.contains(2));
        g.validate();
        g.push(3, 50); // now the newer slot of page 1 goes
        assert!(!g.contains(1));
        g.validate();
    }

    #[test]
    fn never_exceeds_budget_and_ring_stays_bounded() {
        let mut g = Ghost::new(1000);
        for page in 0..100_000u64 {
            g.push(page % 300, 1 + page % 17);
            if page % 3 == 0 {
                g.take(page % 300);
            }
        }
        g.validate();
        assert!(g.ring.len() <= 1000, "ring {} slots", g.ring.len());
    }

    #[test]
    fn zero_budget_and_oversize_remember_nothing() {
        let mut g = Ghost::new(0);
        g.push(1, 1);
        assert_eq!(g.len(), 0);
        let mut g = Ghost::new(10);
        g.push(1, 11);
        assert_eq!(g.len(), 0);
        g.validate();
    }

    #[test]
    fn forget_range_and_clear() {
        let mut g = Ghost::new(100);
        for page in 0..10 {
            g.push(page, 1);
        }
        g.forget_range(5..u64::MAX);
        assert!(g.contains(4) && !g.contains(5));
        g.validate();
        g.clear();
        assert_eq!(g.len(), 0);
        g.validate();
    }
}
