//! Page versions: which version of each page the backing file holds.
//!
//! A version is a 64-bit *name* for one content of one page, and a name is
//! never given to two contents. Every write through the cache gives the page a
//! fresh name, so a grid copy made before the write (a node that was
//! unreachable, a node that came back) names other bytes and is rejected.
//!
//! Names are not counted from a number a restart restores: each open of a
//! database (cold or warm) draws a random 64-bit key, and the n-th name of
//! that open is a bijective mix of `key ^ n`. Two timelines that start from
//! one saved state (a filesystem or VM snapshot rolled back, a volume cloned
//! onto two hosts that share a grid) therefore hand out unrelated names: the
//! chance that they give one page the same name is 2^-64 per pair of writes.
//! A counter restored from the sidecar would give both timelines the same
//! next names for different bytes. Names are compared for equality only.
//!
//! Pages never written since the cache began (or since the last reset) have
//! the `default` name. A reset (another writer changed the file in ways that
//! cannot be named) gives every page one fresh name: no copy made before is
//! served again.
//!
//! Memory: one u64 per page read or written, in chunks ([`PageTable`]): 2 MiB
//! per GiB of database read at 4 KiB pages, 512 KiB per GiB at 16 KiB pages.
//! A page far beyond the others (a header claiming 2^30 pages, a sparse file's
//! end) costs its chunk, not a slot for every page below it. A cache serving
//! several files (InnoDB tablespaces) keeps one table per file: the high bits
//! of a page number name its segment.
//!
//! Pages without a slot have the default name; every page read (touched) or
//! written has a slot, so a truncation or a reset covers it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};

use crate::page_table::PageTable;

/// Pages per segment: a page number is `(segment << SEGMENT_BITS) | index`.
/// One database file is one segment (SQLite uses segment 0 only); the MySQL
/// preload gives each tablespace file its own.
pub const SEGMENT_BITS: u32 = 40;
/// Table bound within a segment: SQLite's and InnoDB's page numbers are 32-bit.
pub const MAX_PAGES: u64 = 1 << 32;
/// Segments at most (tablespace files one cache serves).
pub const MAX_SEGMENTS: u64 = 1 << 16;
/// The name of a page no cache incarnation has named yet (a cold start: every
/// copy in the grid is under another cache identity's keys).
const COLD_DEFAULT: u64 = 0;
/// How many more pages without a slot than with one a saved table may copy
/// (at the default): 8 MiB of table. A sparser table stops before its gap.
const SAVE_GAP_SLACK_PAGES: usize = 1 << 20;

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
    segments: RwLock<Vec<PageTable<AtomicU64>>>,
    /// The name of every page without a slot of its own.
    default: AtomicU64,
    /// This open's random key, and how many names it has handed out.
    key: u64,
    issued: AtomicU64,
    /// Run once before the first page gets a new name (`before_first_change`).
    first_change: Mutex<Option<FirstChange>>,
    first_change_pending: AtomicBool,
}

/// What must happen before a restored table's first change (a warm open's sidecar marked dirty).
pub type FirstChange = Box<dyn FnOnce() + Send>;

/// What a clean close saves and a warm open restores (segment 0: SQLite).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SavedVersions {
    /// The name of every page beyond the table.
    pub default: u64,
    pub table: Vec<u64>,
}

impl Default for Versions {
    fn default() -> Self {
        Self::new()
    }
}

/// SplitMix64's finaliser: a bijection on u64, so distinct inputs give distinct names.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Versions {
    /// A fresh incarnation: every page at the cold default.
    pub fn new() -> Versions {
        Self::with_key(crate::random_u64(), SavedVersions { default: COLD_DEFAULT, table: Vec::new() })
    }

    /// A warm start: the names a clean close saved, and a new random key for
    /// the names this open hands out.
    pub fn restore(saved: SavedVersions) -> Versions {
        Self::with_key(crate::random_u64(), saved)
    }

    /// As [`Versions::restore`] with the key given (tests).
    pub fn with_key(key: u64, saved: SavedVersions) -> Versions {
        Versions {
            segments: RwLock::new(vec![PageTable::from_slots(saved.table.into_iter().map(AtomicU64::new))]),
            default: AtomicU64::new(saved.default),
            key,
            issued: AtomicU64::new(0),
            first_change: Mutex::new(None),
            first_change_pending: AtomicBool::new(false),
        }
    }

    /// Runs `hook` once, before the first page gets a new name ([`Versions::bump`],
    /// [`Versions::bump_from`], [`Versions::reset`]): a change waits for it, in any thread,
    /// and no new name is handed out before it returns. Reads and [`Versions::touch`] never run it.
    pub fn before_first_change(&self, hook: FirstChange) {
        *self.first_change.lock().unwrap_or_else(|e| e.into_inner()) = Some(hook);
        self.first_change_pending.store(true, Ordering::Release);
    }

    /// Runs the first-change hook now if it has not run and no change is
    /// running it (the cache turned off: what it writes from now on changes
    /// no version, so the mark cannot wait for one).
    pub fn first_change_now(&self) {
        if !self.first_change_pending.load(Ordering::Acquire) {
            return;
        }
        if let Ok(mut hook) = self.first_change.try_lock() {
            self.run_first_change(&mut hook);
        }
    }

    fn changing(&self) {
        if !self.first_change_pending.load(Ordering::Acquire) {
            return;
        }
        self.run_first_change(&mut self.first_change.lock().unwrap_or_else(|e| e.into_inner()));
    }

    /// Runs the hook if it is still there (`hook`: its lock, held), then says none is pending.
    fn run_first_change(&self, hook: &mut Option<FirstChange>) {
        if let Some(run) = hook.take() {
            run();
        }
        self.first_change_pending.store(false, Ordering::Release);
    }

    /// Segment 0 (the only one a SQLite database uses), its pages without a
    /// slot at the default. A sparse table is saved up to its gap only
    /// ([`PageTable::dense_len`]), and every page after that gets a fresh
    /// default: the slots left out may name copies the old default would match.
    pub fn save(&self) -> SavedVersions {
        let segments = self.segments.read().unwrap();
        let default = self.default.load(Ordering::Acquire);
        let Some(slots) = segments.first() else { return SavedVersions { default, table: Vec::new() } };
        let (len, cut) = slots.dense_len(SAVE_GAP_SLACK_PAGES);
        let mut table = vec![default; len];
        for (idx, v) in slots.iter().take_while(|&(idx, _)| idx < len) {
            table[idx] = v.load(Ordering::Acquire);
        }
        SavedVersions { default: if cut { self.fresh() } else { default }, table }
    }

    /// A name never handed out before, by this open or (but for a 2^-64
    /// chance) by any other.
    fn fresh(&self) -> u64 {
        loop {
            let n = self.issued.fetch_add(1, Ordering::Relaxed);
            let name = mix(self.key ^ n);
            if name != COLD_DEFAULT {
                return name;
            }
        }
    }

    /// The version the backing file holds for `page`.
    pub fn current(&self, page: u64) -> u64 {
        let (seg, idx) = split(page);
        let segments = self.segments.read().unwrap();
        match segments.get(seg).and_then(|t| t.get(idx)) {
            Some(v) => v.load(Ordering::Acquire),
            None => self.default.load(Ordering::Acquire),
        }
    }

    /// Records that `page` exists (was read), so a later truncation covers it.
    pub fn touch(&self, page: u64) {
        let (seg, idx) = split(page);
        let covered = self.segments.read().unwrap().get(seg).is_some_and(|t| t.get(idx).is_some());
        if !covered {
            self.grow(page);
        }
    }

    /// The page was rewritten: give it a fresh version and return it.
    pub fn bump(&self, page: u64) -> u64 {
        self.changing();
        let v = self.fresh();
        let (seg, idx) = split(page);
        {
            let segments = self.segments.read().unwrap();
            if let Some(slot) = segments.get(seg).and_then(|t| t.get(idx)) {
                slot.store(v, Ordering::Release);
                return v;
            }
        }
        self.grow(page);
        self.segments.read().unwrap()[seg].get(idx).expect("grown").store(v, Ordering::Release);
        v
    }

    /// The file of `first_page`'s segment was cut to `first_page`'s index:
    /// every page of that segment from there on gets a fresh version, so no
    /// copy of the old contents is trusted if it grows again.
    pub fn bump_from(&self, first_page: u64) {
        self.changing();
        let v = self.fresh();
        let (seg, idx) = split(first_page);
        let segments = self.segments.read().unwrap();
        if let Some(table) = segments.get(seg) {
            for (_, slot) in table.iter_from(idx) {
                slot.store(v, Ordering::Release);
            }
        }
    }

    /// Every page gets a version no copy was ever made at.
    pub fn reset(&self) {
        self.changing();
        let v = self.fresh();
        let segments = self.segments.read().unwrap();
        self.default.store(v, Ordering::Release);
        for (_, slot) in segments.iter().flat_map(PageTable::iter) {
            slot.store(v, Ordering::Release);
        }
    }

    /// Pages with a slot in the table, over all segments.
    pub fn pages_tracked(&self) -> usize {
        self.segments.read().unwrap().iter().map(PageTable::slots).sum()
    }

    /// Chunks allocated, over all segments (tests: what far pages cost).
    #[cfg(test)]
    fn chunks_held(&self) -> usize {
        self.segments.read().unwrap().iter().map(PageTable::chunks_held).sum()
    }

    /// New slots take the default name: the page had it until now.
    fn grow(&self, page: u64) {
        let (seg, idx) = split(page);
        assert!((seg as u64) < MAX_SEGMENTS, "segment {seg} beyond the version table's bound");
        assert!((idx as u64) < MAX_PAGES, "page number {idx} beyond the version table's bound");
        let mut segments = self.segments.write().unwrap();
        let default = self.default.load(Ordering::Acquire);
        while segments.len() <= seg {
            segments.push(PageTable::default());
        }
        segments[seg].grow(idx, || AtomicU64::new(default));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::page_table::CHUNK_PAGES;
    use std::collections::HashSet;

    #[test]
    fn the_first_change_hook_runs_once_before_any_new_name_and_never_for_reads() {
        use std::sync::atomic::AtomicUsize;
        use std::sync::Arc;
        for change in 0..3 {
            let v = Arc::new(Versions::restore(SavedVersions { default: 7, table: vec![1, 2, 3] }));
            let runs = Arc::new(AtomicUsize::new(0));
            let (seen, hook_v) = (Arc::clone(&runs), Arc::clone(&v));
            v.before_first_change(Box::new(move || {
                // Every page still has its saved name while the hook runs.
                assert_eq!((hook_v.current(0), hook_v.current(2), hook_v.current(9)), (1, 3, 7));
                std::thread::sleep(std::time::Duration::from_millis(20));
                seen.fetch_add(1, Ordering::SeqCst);
            }));
            v.touch(5);
            assert_eq!((v.current(1), v.current(5)), (2, 7), "reads");
            assert_eq!(runs.load(Ordering::SeqCst), 0, "no change yet");
            // Two threads change at once: the second waits for the hook, which runs once.
            let other = {
                let (v, runs) = (Arc::clone(&v), Arc::clone(&runs));
                std::thread::spawn(move || {
                    v.bump(1);
                    assert_eq!(runs.load(Ordering::SeqCst), 1, "a change went ahead of the hook");
                })
            };
            match change {
                0 => drop(v.bump(0)),
                1 => v.bump_from(1),
                _ => v.reset(),
            }
            assert_eq!(runs.load(Ordering::SeqCst), 1, "change {change}");
            other.join().unwrap();
            v.bump(2);
            assert_eq!(runs.load(Ordering::SeqCst), 1, "once");
        }
    }

    #[test]
    fn bumps_are_fresh_and_never_repeat() {
        let v = Versions::new();
        assert_eq!(v.current(5), COLD_DEFAULT);
        let a = v.bump(5);
        let b = v.bump(5);
        assert!(a != b && a != COLD_DEFAULT && b != COLD_DEFAULT);
        assert_eq!(v.current(5), b);
        assert_eq!(v.current(4), COLD_DEFAULT);
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
            assert_ne!(v.current(p), before[p as usize], "page {p}");
        }
    }

    #[test]
    fn reset_outdates_everything() {
        let v = Versions::new();
        let w = v.bump(2);
        v.touch(7);
        v.reset();
        assert_ne!(v.current(2), w);
        assert_ne!(v.current(7), COLD_DEFAULT);
        assert_ne!(v.current(100), COLD_DEFAULT, "pages beyond the table too");
        assert_eq!(v.current(2), v.current(100));
        let x = v.bump(2);
        assert_ne!(x, v.current(100));
    }

    #[test]
    fn segments_are_independent() {
        let v = Versions::new();
        let a = join(0, 5);
        let b = join(3, 5);
        v.touch(join(3, 9));
        let w = v.bump(b);
        assert_eq!(v.current(a), COLD_DEFAULT, "segment 0 untouched by segment 3");
        assert_eq!(v.current(b), w);
        v.bump_from(join(3, 2));
        assert_ne!(v.current(b), w);
        assert_eq!(v.current(a), COLD_DEFAULT, "a truncation of segment 3 leaves segment 0 alone");
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
        let old: HashSet<u64> = saved.table.iter().copied().chain([saved.default]).collect();
        assert!(!old.contains(&w.bump(1)), "a warm open's names are new");
    }

    /// A snapshot rolled back, or a volume cloned: two opens restore one saved
    /// state and write the same pages. With a restored counter both would have
    /// named page 1's different bytes alike; here no name is shared.
    #[test]
    fn two_timelines_from_one_saved_state_never_share_a_name() {
        let base = Versions::new();
        base.bump(1);
        let saved = base.save();
        let a = Versions::restore(saved.clone());
        let b = Versions::restore(saved);
        let names_a: HashSet<u64> = (0..10_000).map(|i| a.bump(i % 50)).collect();
        let names_b: HashSet<u64> = (0..10_000).map(|i| b.bump(i % 50)).collect();
        assert_eq!(names_a.len(), 10_000);
        assert!(names_a.is_disjoint(&names_b));
    }

    /// A header claiming 2^30 pages, a sparse file's far end: the far pages
    /// cost their chunks, not 8 bytes for every page below them.
    #[test]
    fn far_pages_cost_their_chunks_only() {
        let v = Versions::new();
        v.touch(3);
        let far = (1 << 30) - 60;
        v.touch(far);
        let last = join(0, MAX_PAGES - 1);
        let w = v.bump(last);
        let x = v.bump(join(7, MAX_PAGES - 1));
        assert_eq!(v.chunks_held(), 4);
        assert!(v.pages_tracked() <= 4 * CHUNK_PAGES, "{} slots", v.pages_tracked());
        assert_eq!(
            (v.current(far), v.current(far - 1), v.current(last), v.current(join(7, MAX_PAGES - 1))),
            (0, 0, w, x)
        );
        v.bump_from(10);
        assert!(v.current(far) != 0 && v.current(last) != w, "a truncation covers the far pages");
        assert_eq!(v.current(3), COLD_DEFAULT);
        v.reset();
        assert_eq!(v.current(far), v.current(far - 1), "a reset names them all alike");
        assert_eq!(v.chunks_held(), 4);
    }

    /// A model over pages in several chunks and a far one: once read or
    /// written, a page's name follows every write, truncation and reset, and
    /// survives a save and restore. Unread, it has the default or a
    /// truncation's name (as a page of the old table's grown tail had).
    #[test]
    fn pages_read_or_written_follow_a_model() {
        let v = Versions::new();
        let mut model = std::collections::BTreeMap::new();
        let mut cut_names = vec![COLD_DEFAULT];
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        for step in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let near = [(x >> 8) % 40, CHUNK_PAGES as u64 - 20 + (x >> 8) % 40, (1 << 30) + (x >> 8) % 9];
            let page = near[x as usize % 3];
            match (x >> 20) % 100 {
                0..=44 => {
                    v.touch(page);
                    if let std::collections::btree_map::Entry::Vacant(e) = model.entry(page) {
                        let name = *e.insert(v.current(page));
                        assert!(cut_names.contains(&name), "step {step}: page {page} first read as {name}");
                    }
                }
                45..=89 => drop(model.insert(page, v.bump(page))),
                90..=97 => {
                    v.bump_from(page);
                    let name = mix(v.key ^ (v.issued.load(Ordering::Relaxed) - 1)); // the name it handed out
                    model.range_mut(page..).for_each(|(_, n)| *n = name);
                    cut_names.push(name);
                }
                _ => {
                    v.reset();
                    model.values_mut().for_each(|n| *n = v.current(1 << 31));
                    cut_names = vec![v.current(1 << 31)];
                }
            }
            for (&p, &name) in &model {
                assert_eq!(v.current(p), name, "step {step}: page {p}");
            }
        }
        let w = Versions::restore(v.save());
        assert!(model.iter().all(|(&p, &name)| w.current(p) == name || p >= 1 << 30), "restored as saved");
    }

    #[test]
    fn a_sparse_table_is_saved_up_to_its_gap_and_the_rest_renamed() {
        let v = Versions::new();
        let near = v.bump(2);
        v.touch(5);
        let far = (1 << 30) - 60;
        let far_name = v.bump(far);
        v.touch(far + 1);
        let saved = v.save();
        assert_eq!(saved.table.len(), 6, "not 2^30 entries");
        assert_eq!((saved.table[2], saved.table[5]), (near, COLD_DEFAULT));
        let w = Versions::restore(saved.clone());
        assert_eq!((w.current(2), w.current(5)), (near, COLD_DEFAULT));
        for page in [far, far + 1, 100] {
            assert!(![far_name, COLD_DEFAULT].contains(&w.current(page)), "page {page}: no old name is trusted");
        }
        assert_eq!(Versions::restore(v.save()).save().table, saved.table);
    }

    #[test]
    fn names_within_one_open_are_distinct_even_from_a_fixed_key() {
        let v = Versions::with_key(0, SavedVersions { default: COLD_DEFAULT, table: Vec::new() });
        let names: HashSet<u64> = (0..100_000).map(|_| v.fresh()).collect();
        assert_eq!(names.len(), 100_000);
        assert!(!names.contains(&COLD_DEFAULT));
    }
}
