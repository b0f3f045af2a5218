//! The hot list `.<database>-waffle-hot`, beside the sidecar: the pages a
//! cache held at a clean close, hottest first, so that the next open loads
//! them back in the background (InnoDB's buffer_pool_dump_at_shutdown and
//! buffer_pool_load_at_startup).
//!
//! Written (temp file, rename; not synced: a hint, checked whole when read;
//! made and opened as the sidecar is: no symlink followed, another user's ignored)
//! only by the clean close that saves the sidecar, the last process out, while it holds the sidecar's lock
//! exclusively; never by a crash. A crash leaves the list of the clean close
//! before it, which the next (cold) open may use for page numbers only.
//!
//! The list is a hint, never a source of bytes: a page it names is read from
//! the grid only at the version the restored table names (the envelope
//! checks cache identity, page and version), else from the disk, and every
//! page is installed only if no write changed its version since it was
//! captured (the stripe lock, as for every read below L1). A wrong list costs
//! reads, never a stale page. Trust only decides whether the grid is asked:
//!
//! - trusted: intact, names this file (device, inode) as the clean close left
//!   it (size, mtime), this open is warm (the sidecar accepted) under the same
//!   cache identity and page size. L1's free room is filled hottest first
//!   from the grid, else from the disk; the pages past L1's room stay where
//!   they are (the grid).
//! - page numbers only: intact and this file, but the open is cold (a crash
//!   before it, another process has the database open) or the identity
//!   differs. L1's free room is filled from the disk.
//! - ignored: missing, unreadable, corrupt, another format, another file.
//!
//! Layout (little-endian):
//!
//! ```text
//!  0 magic "WFHL" | 4 format u32 | 8 cache_id u64 | 16 page_bytes u64
//! 24 db dev u64 | 32 db ino u64 | 40 db size u64 | 48 db mtime ns i64
//! 56 l1_count u64 | 64 count u64 | 72 pages count*u64, hottest first
//!    (the first l1_count were in L1, the rest in the grid) | crc32c u32 over all before
//! ```

use crate::stats::Counter;
use std::fs::Metadata;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::backing::{Backing, PageId};
use crate::cache::PageCache;
use crate::side_file::{install, open_beside, write_temp, Beside};
use crate::sidecar::{DbIdentity, Sidecar};
use crate::versions::{split, MAX_PAGES, MAX_SEGMENTS};
use crate::warm::{Budget, Finish, Placed, WARM_READ_BYTES};

const MAGIC: [u8; 4] = *b"WFHL";
const FORMAT: u32 = 1;
const FIXED_BYTES: usize = 72;
/// Most pages one list names (32 MiB of file; 16 GiB of 4 KiB pages).
pub const MAX_LISTED: usize = 1 << 22;
/// Pages of the list one step of the reload takes: captured, asked of the
/// grid, the rest read from the disk in page order.
const CHUNK_PAGES: usize = 256;
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

/// One hot list: what a clean close held.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HotList {
    pub cache_id: u64,
    pub page_bytes: u64,
    pub ident: DbIdentity,
    /// How many of the first `pages` were in L1 (the rest: the grid).
    pub l1_pages: u64,
    /// Hottest first.
    pub pages: Vec<u64>,
}

/// How far the next open may trust a list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Trust {
    /// From the grid where its copies are valid, else the disk.
    Trusted,
    /// Page numbers only, from the disk; why not trusted.
    PagesOnly(String),
    /// Not used at all; why.
    Ignored(String),
}

/// `.<name>-waffle-hot` beside the database (and its sidecar).
pub fn path_for(db: &Path) -> PathBuf {
    let mut name = Sidecar::path_for(db).file_name().expect("the sidecar has a name").to_owned();
    name.push("-hot");
    db.with_file_name(name)
}

/// Writes the list for the database at `db_path` (`db`: its metadata) by a
/// rename of a temporary file made as SQLite makes its journals (sidecar.rs,
/// "Files beside the database"): a reader sees the old list or the new one
/// (or, after a crash of the machine, one its checks refuse); a symlink at
/// the list's name is replaced, never followed.
pub fn write(db_path: &Path, db: &Metadata, list: &HotList) -> io::Result<()> {
    let path = path_for(db_path);
    // Not synced: the list is a hint, checked whole when read (length, crc32c), and a sync
    // would add a disk flush to every close (the sidecar's is enough). A machine crash after
    // the rename may leave it short: then it is ignored.
    let (_file, tmp) = write_temp(&path, &Beside::like(db), &encode(list), false)?;
    install(&tmp, &path)
}

/// The most bytes a list can have.
const MAX_LIST_BYTES: u64 = (FIXED_BYTES + MAX_LISTED * 8 + 4) as u64;

/// Reads the list of the database at `db_path` (`db`: the metadata of the
/// descriptor it was opened with) and says how far this open may trust it.
/// `warm`: the cache identity and page size a warm open restored (None: a cold open).
pub fn load(db_path: &Path, db: &Metadata, warm: Option<(u64, u64)>) -> (Option<HotList>, Trust) {
    let path = path_for(db_path);
    let mut bytes = Vec::new();
    let read = open_beside(&path, &Beside::like(db)).and_then(|f| match f {
        Some(f) => f.take(MAX_LIST_BYTES + 1).read_to_end(&mut bytes).map(|_| true),
        None => Ok(false),
    });
    match read {
        Ok(true) if bytes.len() as u64 > MAX_LIST_BYTES => {
            return (None, Trust::Ignored(format!("{} is longer than any hot list", path.display())))
        }
        Ok(true) => {}
        Ok(false) => return (None, Trust::Ignored("no hot list".into())),
        Err(e) => return (None, Trust::Ignored(format!("cannot use {}: {e}", path.display()))),
    }
    let list = match decode(&bytes) {
        Ok(list) => list,
        Err(why) => return (None, Trust::Ignored(format!("{} is not a valid hot list: {why}", path.display()))),
    };
    let now = DbIdentity::from_metadata(db);
    if (now.dev, now.ino) != (list.ident.dev, list.ident.ino) {
        return (None, Trust::Ignored("written for another database file (device or inode differ)".into()));
    }
    let trust = match warm {
        None => Trust::PagesOnly("a cold open (the last close was not clean, or another process has it open)".into()),
        Some((id, _)) if id != list.cache_id => Trust::PagesOnly("written under another cache identity".into()),
        Some((_, page_bytes)) if page_bytes != list.page_bytes => Trust::PagesOnly("another page size".into()),
        Some(_) if now != list.ident => Trust::PagesOnly("the file changed since the list was written".into()),
        Some(_) => Trust::Trusted,
    };
    (Some(list), trust)
}

fn encode(list: &HotList) -> Vec<u8> {
    assert!(list.pages.len() <= MAX_LISTED && list.l1_pages as usize <= list.pages.len(), "hot list out of bounds");
    let mut b = Vec::with_capacity(FIXED_BYTES + list.pages.len() * 8 + 4);
    b.extend_from_slice(&MAGIC);
    b.extend_from_slice(&FORMAT.to_le_bytes());
    for v in [list.cache_id, list.page_bytes, list.ident.dev, list.ident.ino, list.ident.size] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    b.extend_from_slice(&list.ident.mtime_ns.to_le_bytes());
    b.extend_from_slice(&list.l1_pages.to_le_bytes());
    b.extend_from_slice(&(list.pages.len() as u64).to_le_bytes());
    for p in &list.pages {
        b.extend_from_slice(&p.to_le_bytes());
    }
    let crc = crc32c::crc32c(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

fn decode(b: &[u8]) -> Result<HotList, &'static str> {
    if b.len() < FIXED_BYTES + 4 {
        return Err("too short");
    }
    if b[0..4] != MAGIC {
        return Err("wrong magic");
    }
    let (body, crc) = b.split_at(b.len() - 4);
    if crc32c::crc32c(body) != u32::from_le_bytes(crc.try_into().expect("4 bytes")) {
        return Err("checksum mismatch");
    }
    let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
    if u32::from_le_bytes(b[4..8].try_into().expect("4 bytes")) != FORMAT {
        return Err("another format version");
    }
    let (l1_pages, count) = (u64_at(56), u64_at(64));
    if count > MAX_LISTED as u64 || l1_pages > count || body.len() as u64 != FIXED_BYTES as u64 + count * 8 {
        return Err("counts disagree with the length");
    }
    let page_bytes = u64_at(16);
    if !page_bytes.is_power_of_two() || !(512..=65536).contains(&page_bytes) {
        return Err("not a page size");
    }
    let pages: Vec<u64> = (0..count as usize).map(|i| u64_at(FIXED_BYTES + i * 8)).collect();
    if pages.iter().any(|&p| {
        let (seg, idx) = split(p);
        seg as u64 >= MAX_SEGMENTS || idx as u64 >= MAX_PAGES
    }) {
        return Err("a page number out of range");
    }
    let ident = DbIdentity { dev: u64_at(24), ino: u64_at(32), size: u64_at(40), mtime_ns: u64_at(48) as i64 };
    Ok(HotList { cache_id: u64_at(8), page_bytes, ident, l1_pages, pages })
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

    pub fn to_json(&self) -> Value {
        let s = self.lock();
        let elapsed = if s.state == "running" { s.started.map_or(Duration::ZERO, |t| t.elapsed()) } else { s.elapsed };
        let get = Counter::get;
        json!({
            "state": if s.state.is_empty() { "none" } else { s.state },
            "trusted": s.trusted,
            "why": s.why,
            "listed_pages": get(&self.listed),
            "l1_listed_pages": get(&self.l1_listed),
            "from_grid_pages": get(&self.from_grid),
            "from_disk_pages": get(&self.from_disk),
            "skipped_pages": get(&self.skipped),
            "no_room_pages": get(&self.no_room),
            "grid_requests": get(&self.grid_requests),
            "disk_reads": get(&self.disk_reads),
            "elapsed_ms": elapsed.as_millis() as u64,
            "error": s.error,
        })
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

impl PageCache {
    /// A clean close's list: the pages held now, hottest first (call before
    /// [`PageCache::close`], which empties L1). None before the page size is known.
    pub fn hot_list(&self, ident: DbIdentity) -> Option<HotList> {
        let page_bytes = self.page_bytes() as u64;
        if page_bytes == 0 || self.is_fused() {
            return None;
        }
        let (pages, l1) = self.hot_pages(MAX_LISTED);
        Some(HotList { cache_id: self.cache_id(), page_bytes, ident, l1_pages: l1 as u64, pages })
    }

    /// Reloads `pages` (a hot list, hottest first) from `*at` on into L1's
    /// free room, never evicting, until the list ends, L1 is full or
    /// `budget` is spent; returns true when the reload is over. `from`: the
    /// grid (at the versions restored with a trusted list) and/or the disk.
    /// `in_file` says whether a page exists (the file's size now). For disk
    /// reads the adapter holds off foreign writers meanwhile, as for a warm.
    pub fn hot_reload(
        &self,
        pages: &[u64],
        at: &mut usize,
        from: ReloadFrom,
        in_file: &dyn Fn(u64) -> bool,
        file: &dyn Backing,
        budget: &mut Budget<'_>,
    ) -> io::Result<bool> {
        let page_bytes = self.page_bytes();
        if page_bytes == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "the page size is not known yet"));
        }
        let p = &self.hot_list_progress();
        while !budget.spent() {
            if self.is_fused() {
                return Err(io::Error::other("the cache turned itself off (see \"fused\")"));
            }
            let full = self.l1_free_bytes() < page_bytes as u64 || p.no_room_streak.get() >= NO_ROOM_STREAK;
            if *at >= pages.len() || full {
                p.skipped.add((pages.len() - (*at).min(pages.len())) as u64);
                *at = pages.len();
                return Ok(true);
            }
            // No more than L1's free room at once: a chunk is read in page order, so
            // hotter pages of a later chunk would find L1 filled by colder ones.
            let room = (self.l1_free_bytes() / page_bytes as u64).max(1) as usize;
            let chunk = &pages[*at..(*at + CHUNK_PAGES.min(room)).min(pages.len())];
            *at += chunk.len();
            self.reload_chunk(chunk, from, in_file, file, budget)?;
        }
        Ok(false)
    }

    fn reload_chunk(
        &self,
        chunk: &[u64],
        from: ReloadFrom,
        in_file: &dyn Fn(u64) -> bool,
        file: &dyn Backing,
        budget: &mut Budget<'_>,
    ) -> io::Result<()> {
        let p = self.hot_list_progress();
        let page_bytes = self.page_bytes();
        // Versions captured before any read: None where L1 or the push queue has the page.
        let mut want: Vec<(u64, u64)> = Vec::with_capacity(chunk.len());
        for &page in chunk {
            match self.warm_version(page).filter(|_| in_file(page)) {
                Some(version) => want.push((page, version)),
                None => p.skipped.add(1),
            }
        }
        let mut from_disk: Vec<(u64, u64)> = Vec::new();
        if from != ReloadFrom::DiskOnly && self.grid().is_some() {
            for batch in want.chunks(GRID_BATCH) {
                p.grid_requests.add(1);
                for (&(page, version), got) in batch.iter().zip(self.fetch_held(batch)) {
                    match got {
                        Some(bytes) => {
                            budget.bytes = budget.bytes.saturating_sub(page_bytes as u64);
                            let placed = self.warm_place_l1(page, version, bytes).unwrap_or(Placed::NoRoom);
                            p.count(placed, true);
                        }
                        None => from_disk.push((page, version)),
                    }
                }
            }
        } else {
            from_disk = want;
        }
        if from == ReloadFrom::GridOnly {
            p.skipped.add(from_disk.len() as u64);
            return Ok(());
        }
        // The rest from the disk in page order, one read per run (small gaps read through).
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
                let placed = self.warm_place_l1(page, version, bytes).unwrap_or(Placed::NoRoom);
                p.count(placed, false);
            }
            i = j;
        }
        Ok(())
    }
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
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    const PAGE: usize = 512;

    fn list() -> HotList {
        HotList {
            cache_id: 0x1234_5678_9abc_def0,
            page_bytes: 4096,
            ident: DbIdentity { dev: 1, ino: 2, size: 3 * 4096, mtime_ns: -5 },
            l1_pages: 2,
            pages: vec![7, 1, 2, 9, (1 << 40) | 3],
        }
    }

    #[test]
    fn a_list_round_trips() {
        assert_eq!(decode(&encode(&list())), Ok(list()));
        let empty = HotList { pages: Vec::new(), l1_pages: 0, ..list() };
        assert_eq!(decode(&encode(&empty)), Ok(empty));
    }

    #[test]
    fn every_truncation_and_every_bit_flip_is_rejected() {
        let mut b = encode(&list());
        for len in 0..b.len() {
            assert!(decode(&b[..len]).is_err(), "truncated to {len}");
        }
        let mut longer = b.clone();
        longer.push(0);
        assert!(decode(&longer).is_err(), "a byte appended");
        for i in 0..b.len() {
            for bit in 0..8 {
                b[i] ^= 1 << bit;
                assert!(decode(&b).is_err(), "bit {bit} of byte {i}");
                b[i] ^= 1 << bit;
            }
        }
        assert_eq!(decode(&b), Ok(list()));
    }

    #[test]
    fn counts_and_page_numbers_out_of_bounds_are_rejected_even_with_a_right_checksum() {
        let reseal = |mut b: Vec<u8>| {
            let n = b.len() - 4;
            let crc = crc32c::crc32c(&b[..n]);
            b[n..].copy_from_slice(&crc.to_le_bytes());
            b
        };
        let mut b = encode(&list());
        b[56..64].copy_from_slice(&9u64.to_le_bytes()); // more L1 pages than pages
        assert_eq!(decode(&reseal(b)), Err("counts disagree with the length"));
        let mut b = encode(&list());
        b[64..72].copy_from_slice(&(u64::MAX / 8).to_le_bytes());
        assert_eq!(decode(&reseal(b)), Err("counts disagree with the length"));
        let mut b = encode(&list());
        b[72..80].copy_from_slice(&(MAX_PAGES).to_le_bytes());
        assert_eq!(decode(&reseal(b)), Err("a page number out of range"));
        let mut b = encode(&list());
        b[16..24].copy_from_slice(&4095u64.to_le_bytes());
        assert_eq!(decode(&reseal(b)), Err("not a page size"));
        let mut b = encode(&list());
        b[4] = 2;
        assert_eq!(decode(&reseal(b)), Err("another format version"));
    }

    fn temp_db(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("waffle-hot-list-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let db = dir.join("x.db");
        std::fs::write(&db, vec![0u8; 3 * 4096]).unwrap();
        db
    }

    use std::io::Write;

    fn m(db: &Path) -> Metadata {
        std::fs::metadata(db).unwrap()
    }

    /// A file's bytes, inode and mtime: whether anything wrote it.
    fn fingerprint(path: &Path) -> (Vec<u8>, u64, i64, i64) {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path).unwrap();
        (std::fs::read(path).unwrap(), m.ino(), m.mtime(), m.mtime_nsec())
    }

    #[test]
    fn a_symlink_at_the_list_or_at_its_old_temporary_name_is_never_followed() {
        let db = temp_db("symlink");
        let l = HotList { ident: DbIdentity::of(&db).unwrap(), ..list() };
        let victim = db.with_file_name("victim");
        std::fs::write(&victim, b"the victim's bytes").unwrap();
        let before = fingerprint(&victim);
        std::thread::sleep(Duration::from_millis(20)); // an mtime a write would change
                                                       // The name the list was once written through, then the list's own name.
        let mut old_tmp = path_for(&db).into_os_string();
        old_tmp.push(".tmp");
        std::os::unix::fs::symlink(&victim, &old_tmp).unwrap();
        std::os::unix::fs::symlink(&victim, path_for(&db)).unwrap();
        let (got, trust) = load(&db, &m(&db), Some((l.cache_id, 4096)));
        assert!(got.is_none() && matches!(&trust, Trust::Ignored(w) if w.contains("symlink")), "{trust:?}");
        write(&db, &m(&db), &l).unwrap();
        assert_eq!(fingerprint(&victim), before, "the symlinks' target is never written");
        assert!(std::fs::symlink_metadata(path_for(&db)).unwrap().file_type().is_file(), "the link was replaced");
        assert_eq!(load(&db, &m(&db), Some((l.cache_id, 4096))).1, Trust::Trusted);
    }

    #[test]
    fn an_oversized_list_or_another_users_is_ignored() {
        let db = temp_db("oversized");
        let l = HotList { ident: DbIdentity::of(&db).unwrap(), ..list() };
        write(&db, &m(&db), &l).unwrap();
        std::fs::OpenOptions::new().write(true).open(path_for(&db)).unwrap().set_len(1 << 36).unwrap();
        let (got, trust) = load(&db, &m(&db), None);
        assert!(got.is_none() && matches!(&trust, Trust::Ignored(w) if w.contains("longer")), "{trust:?}");
        // SAFETY: geteuid cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("not root: cannot give a file to another user; that case is not run");
            return;
        }
        write(&db, &m(&db), &l).unwrap();
        std::os::unix::fs::lchown(path_for(&db), Some(65534), Some(65534)).unwrap();
        let (got, trust) = load(&db, &m(&db), None);
        assert!(got.is_none() && matches!(&trust, Trust::Ignored(w) if w.contains("another user")), "{trust:?}");
    }

    #[test]
    fn trust_needs_this_file_unchanged_and_a_warm_open_under_the_same_identity() {
        let db = temp_db("trust");
        let ident = DbIdentity::of(&db).unwrap();
        let l = HotList { ident, ..list() };
        assert_eq!(load(&db, &m(&db), None).1, Trust::Ignored("no hot list".into()));
        write(&db, &m(&db), &l).unwrap();
        let warm = Some((l.cache_id, 4096));
        assert_eq!(load(&db, &m(&db), warm), (Some(l.clone()), Trust::Trusted));
        assert!(matches!(load(&db, &m(&db), None).1, Trust::PagesOnly(w) if w.contains("cold")));
        assert!(
            matches!(load(&db, &m(&db), Some((l.cache_id + 1, 4096))).1, Trust::PagesOnly(w) if w.contains("identity"))
        );
        assert!(
            matches!(load(&db, &m(&db), Some((l.cache_id, 8192))).1, Trust::PagesOnly(w) if w.contains("page size"))
        );
        // The file changes (size): the same file, its pages only.
        std::fs::OpenOptions::new().append(true).open(&db).unwrap().write_all(&[0u8; 4096]).unwrap();
        assert!(matches!(load(&db, &m(&db), warm).1, Trust::PagesOnly(w) if w.contains("changed")));
        // Another file under the list's name: ignored whole.
        let other = temp_db("trust-other");
        std::fs::copy(path_for(&db), path_for(&other)).unwrap();
        let (got, trust) = load(&other, &m(&other), warm);
        assert!(
            got.is_none() && matches!(&trust, Trust::Ignored(w) if w.contains("another database file")),
            "{trust:?}"
        );
        // One byte flipped: ignored, and it says why.
        let mut b = std::fs::read(path_for(&db)).unwrap();
        b[80] ^= 4;
        std::fs::write(path_for(&db), &b).unwrap();
        let (got, trust) = load(&db, &m(&db), warm);
        assert!(got.is_none() && matches!(&trust, Trust::Ignored(w) if w.contains("checksum")), "{trust:?}");
    }

    /// A file of `pages` pages, page i filled with i, and a cache whose L1 holds `l1_pages`.
    fn setup(pages: usize, l1_pages: u64) -> (Arc<Mutex<Vec<u8>>>, HookedFile, Arc<PageCache>) {
        numbered_file_and_cache(pages, PAGE, l1_pages)
    }

    fn budget(cancel: &AtomicBool) -> Budget<'_> {
        Budget {
            bytes: u64::MAX,
            deadline: Instant::now() + Duration::from_secs(60),
            cancel,
            push_wait: Duration::ZERO,
        }
    }

    #[test]
    fn a_reload_fills_l1_hottest_first_from_the_disk_and_stops_when_it_is_full() {
        let (file, mem, c) = setup(100, 10);
        let pages: Vec<u64> = (0..40).map(|i| (i * 37) % 100).collect(); // hottest first, scattered
        let cancel = AtomicBool::new(false);
        let mut at = 0;
        let in_file = in_file_of(file.lock().unwrap().len() as u64, PAGE as u64);
        let done = c.hot_reload(&pages, &mut at, ReloadFrom::DiskOnly, &in_file, &mem, &mut budget(&cancel)).unwrap();
        assert!(done && at == pages.len());
        let j = c.hot_list_progress().to_json();
        assert_eq!(j["from_disk_pages"], 10, "L1's room, no more: {j}");
        let mut buf = vec![0u8; PAGE];
        for &page in &pages[..10] {
            assert_eq!(c.read(page, &mut buf, &mem).unwrap().1, Source::L1, "hot page {page}: {j}");
            assert_eq!(buf[0], page as u8);
        }
        assert_eq!(c.stats().disk_reads.get(), 0);
        // Sorted reads with gaps read through: fewer reads than pages.
        assert!(j["disk_reads"].as_u64().unwrap() < 40, "{j}");
    }

    #[test]
    fn a_reload_skips_pages_past_the_end_and_what_l1_holds() {
        let (_, mem, c) = setup(8, 64);
        let mut buf = vec![0u8; PAGE];
        c.read(2, &mut buf, &mem).unwrap();
        let cancel = AtomicBool::new(false);
        let mut at = 0;
        let in_file = in_file_of(8 * PAGE as u64, PAGE as u64);
        c.hot_reload(&[2, 3, 50, 4], &mut at, ReloadFrom::DiskOnly, &in_file, &mem, &mut budget(&cancel)).unwrap();
        let j = c.hot_list_progress().to_json();
        assert_eq!((j["from_disk_pages"].as_u64(), j["skipped_pages"].as_u64()), (Some(2), Some(2)), "{j}");
    }

    #[test]
    fn a_write_during_the_reload_wins() {
        let (_, mem, c) = setup(8, 64);
        mem.write_during_the_first_read(&c, 5, 0xEE);
        let cancel = AtomicBool::new(false);
        let mut at = 0;
        let in_file = in_file_of(8 * PAGE as u64, PAGE as u64);
        c.hot_reload(&[5, 6], &mut at, ReloadFrom::DiskOnly, &in_file, &mem, &mut budget(&cancel)).unwrap();
        let j = c.hot_list_progress().to_json();
        assert_eq!((j["from_disk_pages"].as_u64(), j["skipped_pages"].as_u64()), (Some(1), Some(1)), "{j}");
        let mut buf = vec![0u8; PAGE];
        assert_eq!(c.read(5, &mut buf, &mem).unwrap().1, Source::L1);
        assert_eq!(buf[0], 0xEE, "the write's bytes, not the reload's");
    }

    #[test]
    fn the_list_names_l1_hottest_first_then_nothing_without_a_grid() {
        let (_, mem, c) = setup(20, 64);
        let mut buf = vec![0u8; PAGE];
        for page in 0..10 {
            c.read(page, &mut buf, &mem).unwrap();
        }
        for _ in 0..3 {
            c.read(4, &mut buf, &mem).unwrap();
        }
        let l = c.hot_list(DbIdentity { dev: 1, ino: 2, size: 3, mtime_ns: 4 }).unwrap();
        assert_eq!(l.pages[0], 4, "the most read first: {:?}", l.pages);
        assert_eq!((l.pages.len(), l.l1_pages), (10, 10));
        assert_eq!(decode(&encode(&l)), Ok(l));
    }
}
