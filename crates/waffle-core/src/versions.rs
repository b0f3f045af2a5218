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
//! only as far as the pages the database actually touches.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;

/// Table bound: SQLite's page numbers are 32-bit; a larger page number is a bug upstream.
pub const MAX_PAGES: u64 = 1 << 32;

pub struct Versions {
    table: RwLock<Vec<AtomicU64>>,
    floor: AtomicU64,
    next: AtomicU64,
}

/// What a clean close saves and a warm open restores.
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
        Versions { table: RwLock::new(Vec::new()), floor: AtomicU64::new(0), next: AtomicU64::new(1) }
    }

    pub fn restore(saved: SavedVersions) -> Versions {
        assert!(saved.next > saved.floor, "saved versions: next {} must exceed floor {}", saved.next, saved.floor);
        assert!(saved.table.iter().all(|&v| v < saved.next), "saved versions: a page is at or above next");
        Versions {
            table: RwLock::new(saved.table.into_iter().map(AtomicU64::new).collect()),
            floor: AtomicU64::new(saved.floor),
            next: AtomicU64::new(saved.next),
        }
    }

    pub fn save(&self) -> SavedVersions {
        let table = self.table.read().unwrap();
        SavedVersions {
            floor: self.floor.load(Ordering::Acquire),
            next: self.next.load(Ordering::Acquire),
            table: table.iter().map(|v| v.load(Ordering::Acquire)).collect(),
        }
    }

    /// The version the backing file holds for `page`.
    pub fn current(&self, page: u64) -> u64 {
        let floor = self.floor.load(Ordering::Acquire);
        let table = self.table.read().unwrap();
        let v = table.get(page as usize).map_or(0, |v| v.load(Ordering::Acquire));
        v.max(floor)
    }

    /// Records that `page` exists (was read), so a later truncation covers it.
    pub fn touch(&self, page: u64) {
        if (page as usize) >= self.table.read().unwrap().len() {
            self.grow(page);
        }
    }

    /// The page was rewritten: give it a fresh version and return it.
    pub fn bump(&self, page: u64) -> u64 {
        let v = self.next.fetch_add(1, Ordering::AcqRel);
        {
            let table = self.table.read().unwrap();
            if let Some(slot) = table.get(page as usize) {
                slot.store(v, Ordering::Release);
                return v;
            }
        }
        self.grow(page);
        self.table.read().unwrap()[page as usize].store(v, Ordering::Release);
        v
    }

    /// The file was cut to `first_page` pages: every page from there on gets a
    /// fresh version, so no copy of the old contents is trusted if it grows again.
    pub fn bump_from(&self, first_page: u64) {
        let v = self.next.fetch_add(1, Ordering::AcqRel);
        let table = self.table.read().unwrap();
        for slot in table.iter().skip(first_page as usize) {
            slot.store(v, Ordering::Release);
        }
    }

    /// Every page gets a version newer than any handed out so far.
    pub fn reset(&self) {
        let v = self.next.fetch_add(1, Ordering::AcqRel);
        self.floor.store(v, Ordering::Release);
    }

    pub fn pages_tracked(&self) -> usize {
        self.table.read().unwrap().len()
    }

    fn grow(&self, page: u64) {
        assert!(page < MAX_PAGES, "page number {page} beyond the version table's bound");
        let mut table = self.table.write().unwrap();
        let want = (page as usize + 1).max(table.len() * 5 / 4);
        let want = want.min(MAX_PAGES as usize);
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
