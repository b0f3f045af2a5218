//! The hot list's reload: the pages a list names, hottest first, into L1's
//! free room only (never evicting what the workload read), from the grid at
//! the restored versions where the list is trusted, else the disk
//! (hot_list.rs says how far a list is trusted; the adapter says from where).
//!
//! The list is a hint, never a source of bytes: every page is installed only
//! if no write changed its version since it was captured before the read
//! (the stripe lock, as for every read below L1). At most L1's free room is
//! taken per step, so a step read in page order never fills L1 with colder
//! pages before hotter ones. The reload stops when the list ends, when L1 has
//! less than a page free, or after `NO_ROOM_STREAK` (256) listed pages in a row
//! found their shard full.

use std::io;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::hot_list::{HotList, Trust};
use super::run::{Budget, Finish};
use super::warm::WARM_READ_BYTES;
use crate::backing::{Backing, PageId};
use crate::cache::{PageCache, Placed};
use crate::stats::{Counter, HotListSnapshot};
use crate::versions::split;

/// Pages of the list one step of the reload takes: captured, asked of the
/// grid, the rest read from the disk in page order. The budget is looked at
/// between steps, so a step is what a piece (a read transaction, which this
/// process's writers wait for: at most 2 s) may run past its time: a list of
/// scattered pages is one disk read a page, and 256 of them on a 10K RPM disk
/// took 1.3 to 2.6 s, past the writers' wait (session 19: a writer without a
/// busy timeout met SQLITE_BUSY). 32 such reads: about 0.3 s.
const CHUNK_PAGES: usize = 32;
/// Keys in one pipelined grid request.
const GRID_BATCH: usize = 128;
/// A disk read spans gaps of at most this many unlisted pages rather than split.
const MERGE_GAP_PAGES: u64 = 8;
/// Listed pages in a row that found their L1 shard full: L1 is full, the reload stops.
const NO_ROOM_STREAK: u64 = 256;

/// Where a reload reads the pages of a list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReloadFrom {
    /// The grid at the restored versions (a trusted list), the disk for what it lacks.
    GridThenDisk,
    /// The grid only: what it lacks stays where it is (no read needs a lock of the adapter's).
    GridOnly,
    /// The disk only (page numbers only).
    DiskOnly,
}

#[derive(Default)]
struct State {
    /// "off", "none", "pending", "running", "done", "cancelled", "failed".
    state: &'static str,
    trusted: bool,
    why: Option<String>,
    started: Option<Instant>,
    elapsed: Duration,
    error: Option<String>,
}

/// The reload's progress, shown in the stats under "hot_list".
#[derive(Default)]
pub struct HotListProgress {
    state: Mutex<State>,
    listed: Counter,
    l1_listed: Counter,
    from_grid: Counter,
    from_disk: Counter,
    skipped: Counter,
    no_room: Counter,
    no_room_streak: Counter,
    grid_requests: Counter,
    disk_reads: Counter,
}

impl HotListProgress {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The reload is off (`waffle_hot_list=off`).
    pub fn off(&self) {
        self.lock().state = "off";
    }

    /// What this open found: a list to reload (pending) or none, and why.
    pub fn planned(&self, list: Option<&HotList>, trust: &Trust) {
        let mut s = self.lock();
        let (state, trusted, why) = match (list, trust) {
            (Some(_), Trust::Trusted) => ("pending", true, None),
            (Some(_), Trust::PagesOnly(why)) => ("pending", false, Some(why.clone())),
            (_, Trust::Ignored(why) | Trust::PagesOnly(why)) => ("none", false, Some(why.clone())),
            (None, Trust::Trusted) => ("none", false, None),
        };
        *s = State { state, trusted, why, ..State::default() };
        if let Some(l) = list {
            self.listed.set(l.pages.len() as u64);
            self.l1_listed.set(l.l1_pages);
        }
    }

    /// A list of page numbers only (the MariaDB preload's, every start being
    /// cold): `listed` pages to reload from the disk (0: none), and why not more.
    pub fn pages_only(&self, listed: u64, why: String) {
        let mut s = self.lock();
        *s = State { state: if listed > 0 { "pending" } else { "none" }, why: Some(why), ..State::default() };
        self.listed.set(listed);
    }

    /// The list cannot be used after all (found under the first lock).
    pub fn refuse(&self, why: String) {
        let mut s = self.lock();
        s.state = "none";
        s.trusted = false;
        s.why = Some(why);
    }

    /// The reload goes on from the disk only (the page size differs: nothing to reload; the
    /// file changed: the grid has nothing valid).
    pub fn distrust(&self, why: String) {
        let mut s = self.lock();
        s.trusted = false;
        s.why = Some(why);
    }

    pub fn begin(&self) {
        let mut s = self.lock();
        s.state = "running";
        s.started = Some(Instant::now());
    }

    pub fn finish(&self, how: Finish) {
        let mut s = self.lock();
        s.elapsed = s.started.map_or(Duration::ZERO, |t| t.elapsed());
        (s.state, s.error) = match how {
            Finish::Done => ("done", None),
            Finish::Cancelled => ("cancelled", None),
            Finish::Failed(e) => ("failed", Some(e)),
        };
    }

    pub fn is_pending(&self) -> bool {
        self.lock().state == "pending"
    }

    /// `hot_list` of the stats JSON.
    pub fn snapshot(&self) -> HotListSnapshot {
        let s = self.lock();
        let elapsed = if s.state == "running" { s.started.map_or(Duration::ZERO, |t| t.elapsed()) } else { s.elapsed };
        let get = Counter::get;
        HotListSnapshot {
            state: if s.state.is_empty() { "none" } else { s.state }.to_string(),
            trusted: s.trusted,
            why: s.why.clone(),
            listed_pages: get(&self.listed),
            l1_listed_pages: get(&self.l1_listed),
            from_grid_pages: get(&self.from_grid),
            from_disk_pages: get(&self.from_disk),
            skipped_pages: get(&self.skipped),
            no_room_pages: get(&self.no_room),
            grid_requests: get(&self.grid_requests),
            disk_reads: get(&self.disk_reads),
            elapsed_ms: elapsed.as_millis() as u64,
            error: s.error.clone(),
        }
    }

    /// Counts a placed page (a streak of pages without room means L1 is full).
    fn count(&self, placed: Placed, from_grid: bool) {
        match placed {
            Placed::L1 => {
                if from_grid { &self.from_grid } else { &self.from_disk }.incr();
                self.no_room_streak.set(0);
            }
            Placed::NoRoom => {
                self.no_room.add(1);
                self.no_room_streak.add(1);
            }
            Placed::Held | Placed::Raced | Placed::Queued => self.skipped.add(1),
        }
    }
}

/// Reloads `pages` (a hot list, hottest first) from `*at` on into `cache`'s
/// L1 free room, never evicting, until the list ends, L1 is full or `budget`
/// is spent, counting in `p`; returns true when the reload is over. `from`:
/// the grid (at the versions restored with a trusted list) and/or the disk.
/// `in_file` says whether a page exists (the file's size now). For disk
/// reads the adapter holds off foreign writers meanwhile, as for a warm.
#[allow(clippy::too_many_arguments)] // each is one thing the adapter decides
pub(super) fn run(
    cache: &PageCache,
    p: &HotListProgress,
    pages: &[u64],
    at: &mut usize,
    from: ReloadFrom,
    in_file: &dyn Fn(u64) -> bool,
    file: &dyn Backing,
    budget: &mut Budget<'_>,
) -> io::Result<bool> {
    let page_bytes = cache.page_bytes();
    if page_bytes == 0 {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "the page size is not known yet"));
    }
    while !budget.spent() {
        if cache.is_fused() {
            return Err(io::Error::other("the cache turned itself off (see \"fused\")"));
        }
        let full = cache.l1_free_bytes() < page_bytes as u64 || p.no_room_streak.get() >= NO_ROOM_STREAK;
        if *at >= pages.len() || full {
            p.skipped.add((pages.len() - (*at).min(pages.len())) as u64);
            *at = pages.len();
            return Ok(true);
        }
        // No more than L1's free room at once: a chunk is read in page order, so
        // hotter pages of a later chunk would find L1 filled by colder ones.
        let room = (cache.l1_free_bytes() / page_bytes as u64).max(1) as usize;
        let chunk = &pages[*at..(*at + CHUNK_PAGES.min(room)).min(pages.len())];
        *at += chunk.len();
        reload_chunk(cache, p, chunk, from, in_file, file, budget)?;
    }
    Ok(false)
}

fn reload_chunk(
    cache: &PageCache,
    p: &HotListProgress,
    chunk: &[u64],
    from: ReloadFrom,
    in_file: &dyn Fn(u64) -> bool,
    file: &dyn Backing,
    budget: &mut Budget<'_>,
) -> io::Result<()> {
    // Versions captured before any read: None where L1 or the push queue has the page.
    let mut want: Vec<(u64, u64)> = Vec::with_capacity(chunk.len());
    for &page in chunk {
        match cache.capture_version(page).filter(|_| in_file(page)) {
            Some(version) => want.push((page, version)),
            None => p.skipped.add(1),
        }
    }
    let from_disk =
        if from != ReloadFrom::DiskOnly && cache.grid().is_some() { from_grid(cache, p, &want, budget) } else { want };
    if from == ReloadFrom::GridOnly {
        p.skipped.add(from_disk.len() as u64);
        return Ok(());
    }
    read_from_disk(cache, p, from_disk, file, budget)
}

/// Places the pages of `want` (page, version captured) the grid holds;
/// returns the others, for the disk.
fn from_grid(cache: &PageCache, p: &HotListProgress, want: &[(u64, u64)], budget: &mut Budget<'_>) -> Vec<(u64, u64)> {
    let page_bytes = cache.page_bytes() as u64;
    let mut from_disk = Vec::new();
    for batch in want.chunks(GRID_BATCH) {
        p.grid_requests.add(1);
        for (&(page, version), got) in batch.iter().zip(cache.fetch_held(batch)) {
            match got {
                Some(bytes) => {
                    budget.bytes = budget.bytes.saturating_sub(page_bytes);
                    let placed = cache.place_if_room(page, version, bytes).unwrap_or(Placed::NoRoom);
                    p.count(placed, true);
                }
                None => from_disk.push((page, version)),
            }
        }
    }
    from_disk
}

/// Reads the pages of `from_disk` (page, version captured) in page order,
/// one read per run (small gaps read through), and places them.
fn read_from_disk(
    cache: &PageCache,
    p: &HotListProgress,
    mut from_disk: Vec<(u64, u64)>,
    file: &dyn Backing,
    budget: &mut Budget<'_>,
) -> io::Result<()> {
    let page_bytes = cache.page_bytes();
    from_disk.sort_unstable();
    let max_run = (WARM_READ_BYTES / page_bytes).max(1) as u64;
    let mut i = 0;
    while i < from_disk.len() {
        let first = from_disk[i].0;
        let mut j = i + 1;
        while j < from_disk.len() {
            let (prev, next) = (from_disk[j - 1].0, from_disk[j].0);
            if split(next).0 != split(first).0 || next - prev > MERGE_GAP_PAGES + 1 || next - first >= max_run {
                break;
            }
            j += 1;
        }
        let span = (from_disk[j - 1].0 - first + 1) as usize;
        let mut buf = vec![0u8; span * page_bytes];
        let got = file.read_pages(PageId::of(first), page_bytes, &mut buf)?;
        p.disk_reads.add(1);
        budget.bytes = budget.bytes.saturating_sub(got as u64);
        let whole = (got / page_bytes) as u64;
        for &(page, version) in &from_disk[i..j] {
            let k = (page - first) as usize;
            if (k as u64) >= whole {
                p.skipped.add(1); // past the end of the file
                continue;
            }
            let bytes = Box::from(&buf[k * page_bytes..(k + 1) * page_bytes]);
            let placed = cache.place_if_room(page, version, bytes).unwrap_or(Placed::NoRoom);
            p.count(placed, false);
        }
        i = j;
    }
    Ok(())
}

/// Whether `page`'s file still holds it when the database file is `file_bytes` long (segment 0).
pub fn in_file_of(file_bytes: u64, page_bytes: u64) -> impl Fn(u64) -> bool {
    move |page| {
        let (seg, idx) = split(page);
        seg == 0 && (idx as u64 + 1) * page_bytes <= file_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::Source;
    use crate::test_file::{numbered_file_and_cache, HookedFile};
    use crate::warming::Warming;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    const PAGE: usize = 512;

    /// A file of `pages` pages, page i filled with i, and a cache whose L1 holds `l1_pages`.
    fn setup(pages: usize, l1_pages: u64) -> (Arc<Mutex<Vec<u8>>>, HookedFile, Arc<PageCache>) {
        numbered_file_and_cache(pages, PAGE, l1_pages)
    }

    fn budget(cancel: &AtomicBool) -> Budget<'_> {
        crate::test_file::budget(cancel, Duration::ZERO)
    }

    #[test]
    fn a_reload_fills_l1_hottest_first_from_the_disk_and_stops_when_it_is_full() {
        let w = Warming::default();
        let (file, mem, c) = setup(100, 10);
        let pages: Vec<u64> = (0..40).map(|i| (i * 37) % 100).collect(); // hottest first, scattered
        let cancel = AtomicBool::new(false);
        let mut at = 0;
        let in_file = in_file_of(file.lock().unwrap().len() as u64, PAGE as u64);
        let done =
            w.hot_reload(&c, &pages, &mut at, ReloadFrom::DiskOnly, &in_file, &mem, &mut budget(&cancel)).unwrap();
        assert!(done && at == pages.len());
        let j = w.hot_list_progress().snapshot();
        assert_eq!(j.from_disk_pages, 10, "L1's room, no more: {j:?}");
        let mut buf = vec![0u8; PAGE];
        for &page in &pages[..10] {
            assert_eq!(c.read(page, &mut buf, &mem).unwrap().1, Source::L1, "hot page {page}: {j:?}");
            assert_eq!(buf[0], page as u8);
        }
        assert_eq!(c.stats().disk_reads.get(), 0);
        // Sorted reads with gaps read through: fewer reads than pages.
        assert!(j.disk_reads < 40, "{j:?}");
    }

    #[test]
    fn a_reload_skips_pages_past_the_end_and_what_l1_holds() {
        let w = Warming::default();
        let (_, mem, c) = setup(8, 64);
        let mut buf = vec![0u8; PAGE];
        c.read(2, &mut buf, &mem).unwrap();
        let cancel = AtomicBool::new(false);
        let mut at = 0;
        let in_file = in_file_of(8 * PAGE as u64, PAGE as u64);
        w.hot_reload(&c, &[2, 3, 50, 4], &mut at, ReloadFrom::DiskOnly, &in_file, &mem, &mut budget(&cancel)).unwrap();
        let j = w.hot_list_progress().snapshot();
        assert_eq!((j.from_disk_pages, j.skipped_pages), (2, 2), "{j:?}");
    }

    #[test]
    fn a_write_during_the_reload_wins() {
        let w = Warming::default();
        let (_, mem, c) = setup(8, 64);
        mem.write_during_the_first_read(&c, 5, 0xEE);
        let cancel = AtomicBool::new(false);
        let mut at = 0;
        let in_file = in_file_of(8 * PAGE as u64, PAGE as u64);
        w.hot_reload(&c, &[5, 6], &mut at, ReloadFrom::DiskOnly, &in_file, &mem, &mut budget(&cancel)).unwrap();
        let j = w.hot_list_progress().snapshot();
        assert_eq!((j.from_disk_pages, j.skipped_pages), (1, 1), "{j:?}");
        let mut buf = vec![0u8; PAGE];
        assert_eq!(c.read(5, &mut buf, &mem).unwrap().1, Source::L1);
        assert_eq!(buf[0], 0xEE, "the write's bytes, not the reload's");
    }
}
