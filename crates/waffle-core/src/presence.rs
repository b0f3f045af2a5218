//! Which pages the grid may hold, and how long ago they were pushed.
//!
//! Each page has a push stamp: 0 when the grid cannot hold an acceptable copy,
//! else the number of pushes this cache had made when it sent the page. It is
//! set when the pusher sends the page and cleared when a read takes it back,
//! when its version moves on (a write, an invalidation, another writer) or when
//! its file is cut.
//!
//! A lookup for a page without a stamp goes straight to the disk: the grid
//! cannot have a copy this cache would accept. A stamp is only a "maybe":
//! memcached may have evicted the item, a node may have restarted empty (both
//! counted as presence misses). Every mistake here costs time, never
//! correctness: the envelope and version checks of a grid copy are unchanged,
//! and a skipped lookup only sends a read to the file, which is always right.
//!
//! The age of a stamp (pushes since) says more: a grid of plain memcached
//! nodes evicts in push order (a fetched item is deleted, never bumped), so a
//! page pushed longer ago than the grid's *reach* is most likely gone. The
//! reach is learnt from the lookups themselves ([`Presence::learn`]): a hit at
//! age `a` shows the grid keeps at least `a` pushes (the reach rises to `a`);
//! a miss at age `a`, the fourth in a row, shows it does not keep `a`, and the
//! reach drops to 3/4 of `a` if it was above (a multiplicative step, so that
//! even lookups made oldest first, each just younger than the last miss, soon
//! get ahead of the evictions). Single misses among hits are not evictions
//! but keys that moved (a node added) or one node that lost its items: they
//! leave the reach alone. Until the first miss the reach is unknown and every stamped
//! page is asked for. Pages older than the reach
//! (with a margin) are [`Verdict::Aged`]: the cache asks for one in
//! [`AGED_SAMPLE_EVERY`] of them, so a grid that grows is noticed.
//!
//! A warm restart (saved versions) stamps every page the saved table covers
//! at age 0: the grid may hold any of them.
//!
//! Memory: 4 bytes per page pushed, in chunks ([`PageTable`]) as the version
//! table (1 MiB per GiB of database at 4 KiB pages, half of it): a far page
//! costs its chunk, not a stamp for every page below it.
//!
//! Why the grid cannot hold a page is kept too, one byte per page that left
//! L1 ([`Fate`], chunked the same way: 256 KiB per GiB at 4 KiB pages), so
//! that every demand read of the disk is given exactly one [`DiskReason`].

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::RwLock;

use crate::page_table::PageTable;
use crate::versions::{join, split, MAX_PAGES, MAX_SEGMENTS};

/// One lookup in this many of an aged page goes to the grid anyway.
pub const AGED_SAMPLE_EVERY: u64 = 16;
/// A page is aged when older than the reach by more than a quarter.
const AGED_MARGIN_DIVISOR: u32 = 4;
/// A miss at age `a` sets the reach to at most a × 3/4.
const MISS_STEP_NUM: u64 = 3;
const MISS_STEP_DEN: u64 = 4;
/// Misses in a row before one lowers the reach.
const MISS_STREAK: u32 = 4;

/// What the presence set says of a page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Never pushed at its current version, or taken back since.
    Absent,
    /// Pushed `age` pushes ago, within the grid's reach (or the reach is not known yet).
    Held { age: u32 },
    /// Pushed `age` pushes ago, longer than the grid is seen to keep pages.
    Aged { age: u32 },
}

/// Why a demand read went to the disk: one per `disk_reads`, decided from
/// what the cache knew at the miss (`disk_reasons` in `PRAGMA waffle_stats`,
/// summing to `disk_reads`). Pages a read-ahead window brings from the disk
/// are not demand reads: they are counted apart (`read_ahead_pages_disk`,
/// `ahead_*_disk`).
///
/// The grid's answer decides first (the page had a push stamp: it was
/// pushed at its current version and not taken back since); a page without
/// a stamp ([`Verdict::Absent`]) is told by what became of it the last time
/// it left L1 ([`Fate`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiskReason {
    /// The page has not left L1 since the cache opened, the last reset or
    /// new epoch (a page size change, another writer's change that could not
    /// be named) or the truncation that cut it off: this cache never had a
    /// copy of it to keep (a warm restart's guess that it is in the grid is
    /// asked first, and then its answer counts).
    Cold,
    /// It left L1 without being pushed: there is no grid, it was a scan page
    /// read ahead and evicted unread, or its node was backed off (a push
    /// cost skip, `l2_push_cost_skips`).
    NeverPushed,
    /// It left L1 to be pushed and was not: the push queue was full and
    /// dropped it (`l2_push_drops`), the grid was removed before it was
    /// sent, or it could not be sealed. (A store the node refused is counted
    /// in `l2_push_failures` without naming its pages: its stamp stays, and
    /// a read asks and counts `evicted` or `skipped` as the node answers.)
    PushDropped,
    /// Pushed longer ago than the grid is seen to keep pages (its reach):
    /// not asked (`l2_aged_skips`).
    AgedOut,
    /// Pushed and asked, and the grid did not have it (`l2_misses`:
    /// memcached evicted it, or a node lost it in a restart); or pushed and
    /// its stamp gone since without its being cached again (a grid change
    /// moved its key to another node).
    Evicted,
    /// The grid may hold it but did not answer: its node was down
    /// (`l2_skipped`), backed off for its cost (`l2_cost_skips`), or the
    /// request failed (`l2_faults`).
    Skipped,
    /// The grid returned a copy and it was refused (`l2_rejects`: envelope,
    /// version, seal or the adapter's page check).
    Rejected,
    /// The cache made its copies unusable: a partial write of it, another
    /// writer named it as changed, verify mode found a copy differing from
    /// the file, L1 held it at a version the file had left, or the cache
    /// turned itself off (the fuse: every read goes to the file).
    Invalidated,
}

impl DiskReason {
    pub const ALL: [DiskReason; 8] = [
        DiskReason::Cold,
        DiskReason::NeverPushed,
        DiskReason::PushDropped,
        DiskReason::AgedOut,
        DiskReason::Evicted,
        DiskReason::Skipped,
        DiskReason::Rejected,
        DiskReason::Invalidated,
    ];

    /// The key in `disk_reasons`.
    pub fn name(self) -> &'static str {
        match self {
            DiskReason::Cold => "cold",
            DiskReason::NeverPushed => "never_pushed",
            DiskReason::PushDropped => "push_dropped",
            DiskReason::AgedOut => "aged_out",
            DiskReason::Evicted => "evicted",
            DiskReason::Skipped => "skipped",
            DiskReason::Rejected => "rejected",
            DiskReason::Invalidated => "invalidated",
        }
    }
}

/// What became of a page the last time it left L1 (or its copies were given
/// up): one byte per page, read only when a read finds no push stamp.
/// Cleared (to [`Fate::Unknown`]) by a new epoch and by a truncation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Fate {
    /// Nothing recorded: [`DiskReason::Cold`].
    Unknown = 0,
    /// Left L1 without a push: [`DiskReason::NeverPushed`].
    Unpushed = 1,
    /// Queued for a push that did not happen: [`DiskReason::PushDropped`].
    PushDropped = 2,
    /// Sent to the grid (its stamp set): without the stamp, [`DiskReason::Evicted`].
    Pushed = 3,
    /// Its copies made unusable: [`DiskReason::Invalidated`].
    Invalidated = 4,
}

impl Fate {
    fn from_u8(v: u8) -> Fate {
        match v {
            1 => Fate::Unpushed,
            2 => Fate::PushDropped,
            3 => Fate::Pushed,
            4 => Fate::Invalidated,
            _ => Fate::Unknown,
        }
    }

    /// Why a page with this fate and no push stamp is read from the disk.
    pub fn reason(self) -> DiskReason {
        match self {
            Fate::Unknown => DiskReason::Cold,
            Fate::Unpushed => DiskReason::NeverPushed,
            Fate::PushDropped => DiskReason::PushDropped,
            Fate::Pushed => DiskReason::Evicted,
            Fate::Invalidated => DiskReason::Invalidated,
        }
    }
}

#[derive(Default)]
pub struct Presence {
    /// Per segment, page `i`'s push stamp (0: absent).
    segments: RwLock<Vec<PageTable<AtomicU32>>>,
    /// Pushes so far (wrapping; a stamp never takes the value 0).
    pushes: AtomicU32,
    /// Pages stamped now (kept as stamps come and go: the stats never walk the set).
    stamped: AtomicU64,
    /// How many pushes back the grid is seen to keep pages; 0: not known yet.
    reach: AtomicU32,
    /// The oldest age seen to hit before the reach was known.
    oldest_hit: AtomicU32,
    /// Lookups that missed since the last hit.
    miss_streak: AtomicU32,
    aged_ticket: AtomicU64,
    /// The stamp a warm restart gave the saved pages (0: none): a guess, not a push seen.
    restart_stamp: AtomicU32,
    /// Per segment, page `i`'s [`Fate`] as a byte (grown only when a page leaves L1).
    fates: RwLock<Vec<PageTable<AtomicU8>>>,
}

impl Presence {
    pub fn new() -> Presence {
        Presence::default()
    }

    /// Whether the grid may hold `page` (tests; the cache asks [`Presence::verdict`]).
    #[cfg(test)]
    fn contains(&self, page: u64) -> bool {
        self.stamp(page) != 0
    }

    /// Whether `page` is worth a lookup, and its age.
    pub fn verdict(&self, page: u64) -> Verdict {
        self.verdict_of(self.stamp(page))
    }

    /// The verdict of a page whose stamp is `stamp` (taken under the segments' lock already:
    /// taking it again while a writer waits would deadlock).
    fn verdict_of(&self, stamp: u32) -> Verdict {
        if stamp == 0 {
            return Verdict::Absent;
        }
        let age = self.pushes.load(Ordering::Relaxed).wrapping_sub(stamp);
        let reach = self.reach.load(Ordering::Relaxed);
        if reach != 0 && age > reach.saturating_add(reach / AGED_MARGIN_DIVISOR) {
            Verdict::Aged { age }
        } else {
            Verdict::Held { age }
        }
    }

    /// Whether this cache pushed `page` at its version and the grid is seen to
    /// keep it still ([`Verdict::Held`], not from a warm restart's guess):
    /// warming need not push it again.
    pub fn held_by_push(&self, page: u64) -> bool {
        let stamp = self.stamp(page);
        stamp != self.restart_stamp.load(Ordering::Relaxed) && matches!(self.verdict(page), Verdict::Held { .. })
    }

    /// Whether this lookup of an aged page is one of the sampled ones.
    pub fn sample_aged(&self) -> bool {
        self.aged_ticket.fetch_add(1, Ordering::Relaxed).is_multiple_of(AGED_SAMPLE_EVERY)
    }

    /// A lookup of a page pushed `age` pushes ago found it (`hit`) or not: the reach moves.
    pub fn learn(&self, age: u32, hit: bool) {
        let reach = self.reach.load(Ordering::Relaxed);
        if hit {
            self.miss_streak.store(0, Ordering::Relaxed);
            if reach == 0 {
                self.oldest_hit.fetch_max(age, Ordering::Relaxed);
            } else {
                self.reach.fetch_max(age, Ordering::Relaxed);
            }
            return;
        }
        if self.miss_streak.fetch_add(1, Ordering::Relaxed) + 1 < MISS_STREAK {
            return;
        }
        let below = ((age as u64 * MISS_STEP_NUM / MISS_STEP_DEN) as u32).max(1);
        if reach == 0 {
            // The first sign of eviction: the grid keeps at least what it was seen to keep.
            let first = self.oldest_hit.load(Ordering::Relaxed).max(below);
            let _ = self.reach.compare_exchange(0, first, Ordering::Relaxed, Ordering::Relaxed);
        } else if below < reach {
            let _ = self.reach.compare_exchange(reach, below, Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    /// Starts learning the reach over (the grid changed: its nodes keep other pages).
    pub fn forget_reach(&self) {
        self.reach.store(0, Ordering::Relaxed);
        self.oldest_hit.store(0, Ordering::Relaxed);
        self.miss_streak.store(0, Ordering::Relaxed);
    }

    /// The grid's reach in pushes (0: not known yet), for stats.
    pub fn reach(&self) -> u32 {
        self.reach.load(Ordering::Relaxed)
    }

    /// The page was sent to the grid.
    pub fn insert(&self, page: u64) {
        let stamp = self.next_stamp();
        let (seg, idx) = split(page);
        {
            let segments = self.segments.read().unwrap_or_else(|e| e.into_inner());
            if let Some(s) = segments.get(seg).and_then(|s| s.get(idx)) {
                self.count_set(s.swap(stamp, Ordering::AcqRel));
                drop(segments);
                self.set_fate(page, Fate::Pushed);
                return;
            }
        }
        self.grow(seg, idx);
        {
            let segments = self.segments.read().unwrap_or_else(|e| e.into_inner());
            self.count_set(segments[seg].get(idx).expect("grown").swap(stamp, Ordering::AcqRel));
        }
        self.set_fate(page, Fate::Pushed);
    }

    /// A stamp was set over `old`: one more stamped page if it had none.
    fn count_set(&self, old: u32) {
        if old == 0 {
            self.stamped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A stamp was cleared from `old`: one fewer stamped page if it had one.
    fn count_cleared(&self, old: u32) -> bool {
        if old != 0 {
            self.stamped.fetch_sub(1, Ordering::Relaxed);
        }
        old != 0
    }

    /// The grid no longer holds an acceptable copy of `page`. Returns whether it was stamped.
    pub fn remove(&self, page: u64) -> bool {
        let (seg, idx) = split(page);
        let segments = self.segments.read().unwrap_or_else(|e| e.into_inner());
        segments.get(seg).and_then(|s| s.get(idx)).is_some_and(|s| self.count_cleared(s.swap(0, Ordering::AcqRel)))
    }

    /// Clears `page` and every later page of its segment (a truncation): their
    /// stamps, and their fates (a page the file grows back to is a new page).
    pub fn remove_from(&self, page: u64) {
        let (seg, idx) = split(page);
        {
            let segments = self.segments.read().unwrap_or_else(|e| e.into_inner());
            if let Some(stamps) = segments.get(seg) {
                for (_, s) in stamps.iter_from(idx) {
                    self.count_cleared(s.swap(0, Ordering::AcqRel));
                }
            }
        }
        let fates = self.fates.read().unwrap_or_else(|e| e.into_inner());
        if let Some(fates) = fates.get(seg) {
            for (_, f) in fates.iter_from(idx) {
                f.store(Fate::Unknown as u8, Ordering::Relaxed);
            }
        }
    }

    /// Clears every stamp and every fate (a new epoch: no copy in the grid is
    /// acceptable any more, and every page is cold).
    pub fn clear(&self) {
        {
            let segments = self.segments.read().unwrap_or_else(|e| e.into_inner());
            for (_, s) in segments.iter().flat_map(PageTable::iter) {
                self.count_cleared(s.swap(0, Ordering::AcqRel));
            }
        }
        let fates = self.fates.read().unwrap_or_else(|e| e.into_inner());
        for (_, f) in fates.iter().flat_map(PageTable::iter) {
            f.store(Fate::Unknown as u8, Ordering::Relaxed);
        }
    }

    /// Records what became of `page` as it left L1 (or its copies were given up).
    pub fn set_fate(&self, page: u64, fate: Fate) {
        let (seg, idx) = split(page);
        {
            let fates = self.fates.read().unwrap_or_else(|e| e.into_inner());
            if let Some(f) = fates.get(seg).and_then(|f| f.get(idx)) {
                f.store(fate as u8, Ordering::Relaxed);
                return;
            }
        }
        if fate == Fate::Unknown {
            return; // no slot reads as Unknown already
        }
        assert!((seg as u64) < MAX_SEGMENTS && (idx as u64) < MAX_PAGES, "page {idx} of segment {seg} out of range");
        let mut fates = self.fates.write().unwrap_or_else(|e| e.into_inner());
        while fates.len() <= seg {
            fates.push(PageTable::default());
        }
        fates[seg].grow(idx, || AtomicU8::new(0));
        fates[seg].get(idx).expect("grown").store(fate as u8, Ordering::Relaxed);
    }

    /// What became of `page` the last time it left L1.
    pub fn fate(&self, page: u64) -> Fate {
        let (seg, idx) = split(page);
        let fates = self.fates.read().unwrap_or_else(|e| e.into_inner());
        fates.get(seg).and_then(|f| f.get(idx)).map_or(Fate::Unknown, |f| Fate::from_u8(f.load(Ordering::Relaxed)))
    }

    /// Why `page`, read from the disk with no push stamp ([`Verdict::Absent`]), was not in the grid.
    pub fn absent_reason(&self, page: u64) -> DiskReason {
        self.fate(page).reason()
    }

    /// Clears the stamp of every stamped page for which `keep(page)` is false
    /// (a grid change: pages whose key now maps to another node).
    pub fn retain(&self, keep: impl Fn(u64) -> bool) {
        let segments = self.segments.read().unwrap_or_else(|e| e.into_inner());
        for (seg, stamps) in segments.iter().enumerate() {
            for (idx, s) in stamps.iter() {
                if s.load(Ordering::Acquire) != 0 && !keep(join(seg as u64, idx as u64)) {
                    self.count_cleared(s.swap(0, Ordering::AcqRel));
                }
            }
        }
    }

    /// Stamps pages `0..pages` of segment 0 at age 0 (a warm restart: the grid may hold any of them).
    pub fn insert_first(&self, pages: u64) {
        if pages == 0 {
            return;
        }
        let pages = pages.min(MAX_PAGES) as usize;
        self.grow_with(0, |stamps| stamps.grow_to(pages, || AtomicU32::new(0)));
        let stamp = self.next_stamp();
        self.restart_stamp.store(stamp, Ordering::Relaxed);
        let segments = self.segments.read().unwrap_or_else(|e| e.into_inner());
        for (_, s) in segments[0].iter().take_while(|&(idx, _)| idx < pages) {
            if s.compare_exchange(0, stamp, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
                self.count_set(0);
            }
        }
    }

    /// At most `max` pages the grid is seen to hold ([`Verdict::Held`]),
    /// newest push first, leaving out those `skip` names (L1 listed them).
    /// Walks every stamp (a clean close, once).
    pub fn held_newest_first(&self, max: usize, skip: impl Fn(u64) -> bool) -> Vec<u64> {
        let pushes = self.pushes.load(Ordering::Relaxed);
        let mut aged: Vec<(u32, u64)> = Vec::new();
        {
            let segments = self.segments.read().unwrap_or_else(|e| e.into_inner());
            for (seg, stamps) in segments.iter().enumerate() {
                for (idx, s) in stamps.iter() {
                    let stamp = s.load(Ordering::Acquire);
                    if stamp == 0 {
                        continue;
                    }
                    let page = join(seg as u64, idx as u64);
                    if matches!(self.verdict_of(stamp), Verdict::Held { .. }) && !skip(page) {
                        aged.push((pushes.wrapping_sub(stamp), page));
                    }
                }
            }
        }
        aged.sort_unstable();
        aged.into_iter().take(max).map(|(_, page)| page).collect()
    }

    /// Stamped pages (for stats).
    pub fn len(&self) -> u64 {
        self.stamped.load(Ordering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn stamp(&self, page: u64) -> u32 {
        let (seg, idx) = split(page);
        let segments = self.segments.read().unwrap_or_else(|e| e.into_inner());
        segments.get(seg).and_then(|s| s.get(idx)).map_or(0, |s| s.load(Ordering::Acquire))
    }

    /// The next push's stamp: never 0 (0 means absent).
    fn next_stamp(&self) -> u32 {
        // Bounded: at most one retry per wrap of the counter.
        loop {
            let stamp = self.pushes.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
            if stamp != 0 {
                return stamp;
            }
        }
    }

    fn grow(&self, seg: usize, idx: usize) {
        assert!((seg as u64) < MAX_SEGMENTS && (idx as u64) < MAX_PAGES, "page {idx} of segment {seg} out of range");
        self.grow_with(seg, |stamps| stamps.grow(idx, || AtomicU32::new(0)));
    }

    /// Runs `grow` on segment `seg`'s stamps under the write lock (new stamps are 0).
    fn grow_with(&self, seg: usize, grow: impl FnOnce(&mut PageTable<AtomicU32>)) {
        let mut segments = self.segments.write().unwrap_or_else(|e| e.into_inner());
        while segments.len() <= seg {
            segments.push(PageTable::default());
        }
        grow(&mut segments[seg]);
    }

    /// Chunks allocated, over all segments (tests: what far pages cost).
    #[cfg(test)]
    fn chunks_held(&self) -> usize {
        self.segments.read().unwrap_or_else(|e| e.into_inner()).iter().map(PageTable::chunks_held).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::page_table::CHUNK_PAGES;
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

    /// Far pages (the last of segment 0, a sparse file's end in segment 1)
    /// cost their chunks, not 4 bytes for every page below them, and behave
    /// as near ones: counted, listed, cleared by a truncation, a retain, a clear.
    #[test]
    fn far_pages_cost_their_chunks_only() {
        let p = Presence::new();
        let (last, far) = (join(0, MAX_PAGES - 1), join(1, 1 << 30));
        for page in [3, far, last] {
            p.insert(page);
        }
        assert_eq!(p.chunks_held(), 3);
        assert!(p.contains(last) && p.contains(far) && !p.contains(far - 1) && !p.contains(far + 1));
        assert_eq!(p.held_newest_first(10, |_| false), [last, far, 3]);
        p.remove_from(join(0, 1 << 20));
        assert!(!p.contains(last) && p.contains(3) && p.contains(far));
        p.retain(|page| page != far);
        assert_eq!(p.len(), 1);
        p.clear();
        assert!(p.is_empty() && p.chunks_held() == 3);
    }

    /// The model test's operations over pages on both sides of a chunk's end and far ones.
    #[test]
    fn agrees_with_a_model_across_chunks() {
        let p = Presence::new();
        let mut model = BTreeSet::new();
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let pages =
            |i: u64, kind: u64| [i, CHUNK_PAGES as u64 - 8 + i, (1 << 30) + i, MAX_PAGES - 1 - i][kind as usize];
        for step in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let page = join(x % 2, pages((x >> 8) % 16, (x >> 40) % 4));
            match x % 50 {
                0..=24 => drop((p.insert(page), model.insert(page))),
                25..=44 => assert_eq!(p.remove(page), model.remove(&page), "step {step}"),
                45..=48 => {
                    p.remove_from(page);
                    model.retain(|&q| split(q).0 != split(page).0 || q < page);
                }
                _ => assert_eq!(p.contains(page), model.contains(&page), "step {step}"),
            }
        }
        for seg in 0..2 {
            for page in (0..16 * 4).map(|k| join(seg, pages(k / 4, k % 4))) {
                assert_eq!(p.contains(page), model.contains(&page), "page {page}");
            }
        }
        assert_eq!(p.len(), model.len() as u64);
        assert!(p.chunks_held() <= 2 * 4, "{} chunks", p.chunks_held());
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
        p.insert_first(CHUNK_PAGES as u64 + 1);
        assert!(p.contains(CHUNK_PAGES as u64) && !p.contains(CHUNK_PAGES as u64 + 1));
        assert_eq!((p.len(), p.chunks_held()), (CHUNK_PAGES as u64 + 1, 2));
    }

    #[test]
    fn retain_clears_exactly_the_pages_it_refuses_and_counts_them() {
        let p = Presence::new();
        for page in (0..100).chain([join(1, 5), join(1, 6)]) {
            p.insert(page);
        }
        p.retain(|page| match split(page) {
            (0, idx) => idx % 3 != 0,
            (_, idx) => idx != 6,
        });
        for page in 0..100 {
            assert_eq!(p.contains(page), page % 3 != 0, "page {page}");
        }
        assert!(p.contains(join(1, 5)) && !p.contains(join(1, 6)));
        assert_eq!(p.len(), 66 + 1);
    }

    /// A grid that keeps the last 1000 pushes (a FIFO, as memcached evicts
    /// pages that are never read again): the reach is learnt from lookups,
    /// and pages pushed longer ago are aged.
    #[test]
    fn the_reach_follows_what_the_grid_keeps() {
        let p = Presence::new();
        const KEEPS: u32 = 1000;
        for page in 0..5000u64 {
            p.insert(page);
        }
        assert_eq!(p.reach(), 0, "no miss yet: not known");
        assert_eq!(p.verdict(0), Verdict::Held { age: 4999 }, "unknown reach: every stamped page is asked for");
        assert_eq!(p.verdict(9999), Verdict::Absent);
        // Lookups of every age: hits within what the grid keeps, misses beyond.
        let mut x = 12345u64;
        for _ in 0..4000 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let page = (x >> 33) % 5000;
            let age = 4999 - page as u32;
            p.learn(age, age < KEEPS);
        }
        let reach = p.reach();
        // Between 3/4 of what it keeps (after a miss just past it) and what it keeps (after a hit).
        assert!((KEEPS * 3 / 4 - 10..=KEEPS).contains(&reach), "reach {reach} for a grid keeping {KEEPS}");
        assert!(matches!(p.verdict(4999 - 900), Verdict::Held { .. }));
        assert!(matches!(p.verdict(4999 - 2000), Verdict::Aged { age: 2000 }));
        // The grid grows: a sampled old page that hits moves the reach at once.
        p.learn(3000, true);
        assert_eq!(p.reach(), 3000);
        assert!(matches!(p.verdict(4999 - 2000), Verdict::Held { .. }));
        assert_eq!((0..10 * AGED_SAMPLE_EVERY).filter(|_| p.sample_aged()).count() as u64, 10);
    }

    #[test]
    fn held_pages_come_newest_push_first_without_the_skipped_or_aged() {
        let p = Presence::new();
        for page in [7, 3, 9, 1, 4] {
            p.insert(page);
        }
        p.remove(9);
        assert_eq!(p.held_newest_first(10, |page| page == 3), [4, 1, 7]);
        assert_eq!(p.held_newest_first(2, |_| false), [4, 1]);
        for _ in 0..MISS_STREAK {
            p.learn(4, false); // misses at age 4: the reach drops to 3, page 7 (age 4) is aged
        }
        assert!(matches!(p.verdict(7), Verdict::Aged { .. }));
        assert_eq!(p.held_newest_first(10, |_| false), [4, 1, 3]);
    }

    /// Fates: set as pages leave L1, a push marks them pushed, a truncation
    /// clears the pages it cut, a new epoch clears all; a grid change's
    /// `retain` keeps them (the pages were pushed, the grid lost them).
    /// A far page costs its chunk of bytes only.
    #[test]
    fn fates_say_why_an_absent_page_is_not_in_the_grid() {
        let p = Presence::new();
        assert_eq!(p.absent_reason(5), DiskReason::Cold);
        p.set_fate(5, Fate::Unpushed);
        p.set_fate(6, Fate::PushDropped);
        p.insert(7);
        p.set_fate(8, Fate::Invalidated);
        let far = join(1, 1 << 30);
        p.set_fate(far, Fate::Unpushed);
        assert_eq!(p.fates.read().unwrap().iter().map(PageTable::chunks_held).sum::<usize>(), 2);
        let reasons = |p: &Presence| [5, 6, 7, 8, far].map(|page| p.absent_reason(page));
        use DiskReason::*;
        assert_eq!(reasons(&p), [NeverPushed, PushDropped, Evicted, Invalidated, NeverPushed]);
        p.retain(|_| false);
        assert_eq!(reasons(&p), [NeverPushed, PushDropped, Evicted, Invalidated, NeverPushed]);
        p.remove_from(7);
        assert_eq!(reasons(&p), [NeverPushed, PushDropped, Cold, Cold, NeverPushed]);
        p.clear();
        assert_eq!(reasons(&p), [Cold; 5]);
        p.set_fate(1 << 20, Fate::Unknown);
        assert_eq!(p.fate(1 << 20), Fate::Unknown, "an unknown fate takes no slot");
    }

    #[test]
    fn only_a_push_seen_here_counts_as_held_for_warming() {
        let p = Presence::new();
        p.insert_first(10);
        assert!(matches!(p.verdict(3), Verdict::Held { .. }));
        assert!(!p.held_by_push(3), "a warm restart's stamp is a guess");
        p.insert(3);
        assert!(p.held_by_push(3));
        p.remove(3);
        assert!(!p.held_by_push(3));
    }
}
