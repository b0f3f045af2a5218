//! Page versions: which version of each page the backing file holds.
//!
//! Every write through the cache gives the page a new version drawn from one
//! counter that only grows, so a grid copy made before the write (a node that
//! was unreachable, a node that came back) names an older version and is
//! rejected. Pages never written since the cache incarnation began are at the
//! `floor`; a reset raises the floor above every version handed out so far.
//!
//! Memory: one u64 per page of the largest file size seen, so 2 MiB per GiB of
//! database at 4 KiB pages, 512 KiB per GiB at 16 KiB pages. The table grows
//! only as far as the pages the database actually touches. A cache serving
//! several files (InnoDB tablespaces) keeps one table per file: the high bits
//! of a page number name its segment.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;

/// Pages per segment: a page number is `(segment << SEGMENT_BITS) | index`.
/// One database file is one segment (SQLite uses segment 0 only); the MySQL
/// preload gives each tablespace file its own.
pub const SEGMENT_BITS: u32 = 40;
/// Table bound within a segment: SQLite's and InnoDB's page numbers are 32-bit.
pub const MAX_PAGES: u64 = 1 << 32;
/// Segments at most (tablespace files one cache serves).
pub const MAX_SEGMENTS: u64 = 1 << 16;

/// The segment and the index within it of a page number.
pub fn split(page: u64) -> (usize, usize) {
    ((page >> SEGMENT_BITS) as usize, (page & ((1 << SEGMENT_BITS) - 1)) as usize)
}

/// The page number of `index` in `segment`.
pub fn join(segment: u64, index: u64) -> u64 {
    assert!(segment < MAX_SEGMENTS && index < MAX_PAGES, "page {index} of segment {segment} out of range");
    (segment << SEGMENT_BITS) | index
}

pub struct Versions {
    segments: RwLock<Vec<Vec<AtomicU64>>>,
    floor: AtomicU64,
    next: AtomicU64,
}

/// What a clean close saves and a warm open restores (segment 0: SQLite).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SavedVersions {
    pub floor: u64,
    pub next: u64,
    pub table: Vec<u64>,
}

impl Default for Versions {
    fn default() -> Self {
        Self::new()
    }
}

impl Versions {
    /// A fresh incarnation: every page at version 0.
    pub fn new() -> Versions {
        Versions { segments: RwLock::new(Vec::new()), floor: AtomicU64::new(0), next: AtomicU64::new(1) }
    }

    pub fn restore(saved: SavedVersions) -> Versions {
        assert!(saved.next > saved.floor, "saved versions: next {} must exceed floor {}", saved.next, saved.floor);
        assert!(saved.table.iter().all(|&v| v < saved.next), "saved versions: a page is at or above next");
        Versions {
            segments: RwLock::new(vec![saved.table.into_iter().map(AtomicU64::new).collect()]),
            floor: AtomicU64::new(saved.floor),
            next: AtomicU64::new(saved.next),
        }
    }

    /// Segment 0 (the only one a SQLite database uses) and the counters.
    pub fn save(&self) -> SavedVersions {
        let segments = self.segments.read().unwrap();
        SavedVersions {
            floor: self.floor.load(Ordering::Acquire),
            next: self.next.load(Ordering::Acquire),
            table: segments.first().map(|t| t.iter().map(|v| v.load(Ordering::Acquire)).collect()).unwrap_or_default(),
        }
    }

    /// The version the backing file holds for `page`.
    pub fn current(&self, page: u64) -> u64 {
        let floor = self.floor.load(Ordering::Acquire);
        let (seg, idx) = split(page);
        let segments = self.segments.read().unwrap();
        let v = segments.get(seg).and_then(|t| t.get(idx)).map_or(0, |v| v.load(Ordering::Acquire));
        v.max(floor)
    }

    /// Records that `page` exists (was read), so a later truncation covers it.
    pub fn touch(&self, page: u64) {
        let (seg, idx) = split(page);
        let covered = self.segments.read().unwrap().get(seg).is_some_and(|t| idx < t.len());
        if !covered {
            self.grow(page);
        }
    }

    /// The page was rewritten: give it a fresh version and return it.
    pub fn bump(&self, page: u64) -> u64 {
        let v = self.next.fetch_add(1, Ordering::AcqRel);
        let (seg, idx) = split(page);
        {
            let segments = self.segments.read().unwrap();
            if let Some(slot) = segments.get(seg).and_then(|t| t.get(idx)) {
                slot.store(v, Ordering::Release);
                return v;
            }
        }
        self.grow(page);
        self.segments.read().unwrap()[seg][idx].store(v, Ordering::Release);
        v
    }

    /// The file of `first_page`'s segment was cut to `first_page`'s index:
    /// every page of that segment from there on gets a fresh version, so no
    /// copy of the old contents is trusted if it grows again.
    pub fn bump_from(&self, first_page: u64) {
        let v = self.next.fetch_add(1, Ordering::AcqRel);
        let (seg, idx) = split(first_page);
        let segments = self.segments.read().unwrap();
        if let Some(table) = segments.get(seg) {
            for slot in table.iter().skip(idx) {
                slot.store(v, Ordering::Release);
            }
        }
    }

    /// Every page gets a version newer than any handed out so far.
    pub fn reset(&self) {
        let v = self.next.fetch_add(1, Ordering::AcqRel);
        self.floor.store(v, Ordering::Release);
    }

    /// Pages with a slot in the table, over all segments.
    pub fn pages_tracked(&self) -> usize {
        self.segments.read().unwrap().iter().map(Vec::len).sum()
    }

    fn grow(&self, page: u64) {
        let (seg, idx) = split(page);
        assert!((seg as u64) < MAX_SEGMENTS, "segment {seg} beyond the version table's bound");
        assert!((idx as u64) < MAX_PAGES, "page number {idx} beyond the version table's bound");
        let mut segments = self.segments.write().unwrap();
        while segments.len() <= seg {
            segments.push(Vec::new());
        }
        let table = &mut segments[seg];
        let want = (idx + 1).max(table.len() * 5 / 4).min(MAX_PAGES as usize);
        while table.len() < want {
            table.push(AtomicU64::new(0));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bumps_are_fresh_and_never_repeat() {
        let v = Versions::new();
        assert_eq!(v.current(5), 0);
        let a = v.bump(5);
        let b = v.bump(5);
        assert!(b > a && a > 0);
        assert_eq!(v.current(5), b);
        assert_eq!(v.current(4), 0);
    }

    #[test]
    fn truncation_covers_every_page_seen() {
        let v = Versions::new();
        v.touch(9);
        let before: Vec<u64> = (0..10).map(|p| v.current(p)).collect();
        v.bump_from(3);
        for p in 0..3 {
            assert_eq!(v.current(p), before[p as usize]);
        }
        for p in 3..10 {
            assert!(v.current(p) > before[p as usize], "page {p}");
        }
    }

    #[test]
    fn reset_outdates_everything() {
        let v = Versions::new();
        let w = v.bump(2);
        v.reset();
        assert!(v.current(2) > w);
        assert!(v.current(100) > w);
        assert!(v.bump(2) > v.current(100) - 1);
    }

    #[test]
    fn segments_are_independent() {
        let v = Versions::new();
        let a = join(0, 5);
        let b = join(3, 5);
        v.touch(join(3, 9));
        let w = v.bump(b);
        assert_eq!(v.current(a), 0, "segment 0 untouched by segment 3");
        assert_eq!(v.current(b), w);
        v.bump_from(join(3, 2));
        assert!(v.current(b) > w);
        assert_eq!(v.current(a), 0, "a truncation of segment 3 leaves segment 0 alone");
        assert_eq!(split(b), (3, 5));
    }

    #[test]
    fn save_and_restore_round_trip() {
        let v = Versions::new();
        v.bump(1);
        v.bump(7);
        v.reset();
        v.bump(3);
        let saved = v.save();
        let w = Versions::restore(saved.clone());
        assert_eq!(w.save(), saved);
        for p in 0..10 {
            assert_eq!(v.current(p), w.current(p));
        }
        assert!(w.bump(1) >= saved.next);
    }
}
