//! Which pages the grid may hold: one bit per page, set when the pusher sends
//! the page and cleared when a read takes it back, when its version moves on
//! (a write, an invalidation, another writer) or when its file is cut.
//!
//! A lookup for a page whose bit is clear goes straight to the disk: the grid
//! cannot have a copy this cache would accept (it never pushed one at the
//! page's current version, or it took it back). A set bit is only a "maybe":
//! memcached may have evicted the item, a node may have restarted empty (both
//! counted as presence misses). Every mistake here costs time, never
//! correctness: the envelope and version checks of a grid copy are unchanged,
//! and a clear bit only sends a read to the file, which is always right.
//!
//! A warm restart (saved versions) sets the bits of every page the saved
//! table covers: the grid may hold any of them.
//!
//! Memory: 1 bit per page up to the largest page a segment touched (32 KiB
//! per GiB of database at 4 KiB pages), grown like the version table.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;

use crate::versions::{split, MAX_PAGES, MAX_SEGMENTS};

#[derive(Default)]
pub struct Presence {
    /// Per segment, bit `i % 64` of word `i / 64` is page `i`.
    segments: RwLock<Vec<Vec<AtomicU64>>>,
}

impl Presence {
    pub fn new() -> Presence {
        Presence::default()
    }

    /// Whether the grid may hold `page`.
    pub fn contains(&self, page: u64) -> bool {
        let (seg, idx) = split(page);
        let segments = self.segments.read().unwrap_or_else(|e| e.into_inner());
        segments.get(seg).and_then(|w| w.get(idx / 64)).is_some_and(|w| w.load(Ordering::Acquire) & bit(idx) != 0)
    }

    /// The page was sent to the grid.
    pub fn insert(&self, page: u64) {
        let (seg, idx) = split(page);
        {
            let segments = self.segments.read().unwrap_or_else(|e| e.into_inner());
            if let Some(w) = segments.get(seg).and_then(|w| w.get(idx / 64)) {
                w.fetch_or(bit(idx), Ordering::AcqRel);
                return;
            }
        }
        self.grow(seg, idx);
        let segments = self.segments.read().unwrap_or_else(|e| e.into_inner());
        segments[seg][idx / 64].fetch_or(bit(idx), Ordering::AcqRel);
    }

    /// The grid no longer holds an acceptable copy of `page`. Returns whether the bit was set.
    pub fn remove(&self, page: u64) -> bool {
        let (seg, idx) = split(page);
        let segments = self.segments.read().unwrap_or_else(|e| e.into_inner());
        segments
            .get(seg)
            .and_then(|w| w.get(idx / 64))
            .is_some_and(|w| w.fetch_and(!bit(idx), Ordering::AcqRel) & bit(idx) != 0)
    }

    /// Clears `page` and every later page of its segment (a truncation).
    pub fn remove_from(&self, page: u64) {
        let (seg, idx) = split(page);
        let segments = self.segments.read().unwrap_or_else(|e| e.into_inner());
        let Some(words) = segments.get(seg) else { return };
        for (i, w) in words.iter().enumerate().skip(idx / 64) {
            let keep = if i == idx / 64 { bit(idx) - 1 } else { 0 };
            w.fetch_and(keep, Ordering::AcqRel);
        }
    }

    /// Clears every bit (a new epoch: no copy in the grid is acceptable any more).
    pub fn clear(&self) {
        let segments = self.segments.read().unwrap_or_else(|e| e.into_inner());
        for w in segments.iter().flatten() {
            w.store(0, Ordering::Release);
        }
    }

    /// Sets the bits of pages `0..pages` of segment 0 (a warm restart: the grid may hold any of them).
    pub fn insert_first(&self, pages: u64) {
        if pages == 0 {
            return;
        }
        let last = (pages.min(MAX_PAGES) - 1) as usize;
        self.grow(0, last);
        let segments = self.segments.read().unwrap_or_else(|e| e.into_inner());
        for (i, w) in segments[0].iter().enumerate().take(last / 64 + 1) {
            let mask = if i == last / 64 { u64::MAX >> (63 - last % 64) } else { u64::MAX };
            w.fetch_or(mask, Ordering::AcqRel);
        }
    }

    /// Pages whose bit is set (for stats; walks the whole set).
    pub fn len(&self) -> u64 {
        let segments = self.segments.read().unwrap_or_else(|e| e.into_inner());
        segments.iter().flatten().map(|w| w.load(Ordering::Relaxed).count_ones() as u64).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn grow(&self, seg: usize, idx: usize) {
        assert!((seg as u64) < MAX_SEGMENTS && (idx as u64) < MAX_PAGES, "page {idx} of segment {seg} out of range");
        let mut segments = self.segments.write().unwrap_or_else(|e| e.into_inner());
        while segments.len() <= seg {
            segments.push(Vec::new());
        }
        let words = &mut segments[seg];
        // Grow by a quarter at least, so a file that grows page by page does not reallocate each time.
        let want = (idx / 64 + 1).max(words.len() * 5 / 4).min(MAX_PAGES as usize / 64);
        while words.len() < want {
            words.push(AtomicU64::new(0));
        }
    }
}

fn bit(idx: usize) -> u64 {
    1 << (idx % 64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::versions::join;
    use std::collections::BTreeSet;

    /// The set against a model: random inserts, removes, truncations and clears over two segments.
    #[test]
    fn agrees_with_a_model() {
        let p = Presence::new();
        let mut model = BTreeSet::new();
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for step in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let page = join(x % 2, (x >> 8) % 700);
            match x % 50 {
                0..=24 => {
                    p.insert(page);
                    model.insert(page);
                }
                25..=44 => assert_eq!(p.remove(page), model.remove(&page), "step {step}"),
                45..=47 => {
                    p.remove_from(page);
                    let (seg, _) = split(page);
                    model.retain(|&q| split(q).0 != seg || q < page);
                }
                48 => {
                    p.clear();
                    model.clear();
                }
                _ => assert_eq!(p.contains(page), model.contains(&page), "step {step}"),
            }
        }
        for seg in 0..2 {
            for i in 0..800 {
                let page = join(seg, i);
                assert_eq!(p.contains(page), model.contains(&page), "page {i} of segment {seg}");
            }
        }
        assert_eq!(p.len(), model.len() as u64);
    }

    #[test]
    fn a_warm_start_covers_exactly_the_saved_pages() {
        let p = Presence::new();
        p.insert_first(130);
        assert!(p.contains(0) && p.contains(129));
        assert!(!p.contains(130) && !p.contains(join(1, 0)));
        assert_eq!(p.len(), 130);
        p.insert_first(64);
        assert_eq!(p.len(), 130);
    }
}
