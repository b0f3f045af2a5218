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
//! The reload itself is reload.rs's; this file makes, writes and reads the list.
//!
//! Layout (little-endian):
//!
//! ```text
//!  0 magic "WFHL" | 4 format u32 | 8 cache_id u64 | 16 page_bytes u64
//! 24 db dev u64 | 32 db ino u64 | 40 db size u64 | 48 db mtime ns i64
//! 56 l1_count u64 | 64 count u64 | 72 pages count*u64, hottest first
//!    (the first l1_count were in L1, the rest in the grid) | crc32c u32 over all before
//! ```

use std::fs::Metadata;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use crate::cache::PageCache;
use crate::side_file::{install, open_beside, read_beside, write_temp, Beside};
use crate::sidecar::{DbIdentity, Sidecar};
use crate::versions::{split, MAX_PAGES, MAX_SEGMENTS};

const MAGIC: [u8; 4] = *b"WFHL";
const FORMAT: u32 = 1;
const FIXED_BYTES: usize = 72;
/// Most pages one list names (32 MiB of file; 16 GiB of 4 KiB pages).
pub const MAX_LISTED: usize = 1 << 22;

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

/// Writes the list for the database at `db_path` (`db`: its metadata), unless
/// the file there says it already, by a rename of a temporary file made as
/// SQLite makes its journals (sidecar.rs, "Files beside the database"): a
/// reader sees the old list or the new one (or, after a crash of the machine,
/// one its checks refuse); a symlink at the list's name is replaced, never
/// followed.
pub fn write(db_path: &Path, db: &Metadata, list: &HotList) -> io::Result<()> {
    let path = path_for(db_path);
    // Not synced: the list is a hint, checked whole when read (length, crc32c), and a sync
    // would add a disk flush to every close (the sidecar's is enough). A machine crash after
    // the rename may leave it short: then it is ignored.
    let (like, bytes) = (Beside::like(db), encode(list));
    // A close that holds what the last one held writes nothing (no temporary file, no rename).
    if read_beside(&path, &like, bytes.len() as u64).ok().flatten().is_some_and(|now| now == bytes) {
        return Ok(());
    }
    let (_file, tmp) = write_temp(&path, &like, &bytes, false)?;
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

impl HotList {
    /// A clean close's list for the database `ident`: the pages `cache` holds
    /// now, hottest first (call before [`PageCache::close`], which empties
    /// L1). None before the page size is known.
    pub fn of(cache: &PageCache, ident: DbIdentity) -> Option<HotList> {
        let page_bytes = cache.page_bytes() as u64;
        if page_bytes == 0 || cache.is_fused() {
            return None;
        }
        let (pages, l1) = cache.hot_pages(MAX_LISTED);
        Some(HotList { cache_id: cache.cache_id(), page_bytes, ident, l1_pages: l1 as u64, pages })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_file::numbered_file_and_cache;
    use std::time::Duration;

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
    fn a_write_of_the_list_the_file_holds_writes_nothing() {
        let db = temp_db("unchanged");
        let l = HotList { ident: DbIdentity::of(&db).unwrap(), ..list() };
        write(&db, &m(&db), &l).unwrap();
        let first = fingerprint(&path_for(&db));
        std::thread::sleep(Duration::from_millis(20)); // an mtime a write would change
        write(&db, &m(&db), &l).unwrap();
        assert_eq!(fingerprint(&path_for(&db)), first, "the same list: not written, not renamed");
        let hotter = HotList { pages: vec![1, 7, 2, 9, (1 << 40) | 3], ..l.clone() };
        write(&db, &m(&db), &hotter).unwrap();
        assert_eq!(decode(&std::fs::read(path_for(&db)).unwrap()), Ok(hotter), "another order: written");
        // A list cut short on the disk (a machine crash after an unsynced rename) is written again.
        std::fs::OpenOptions::new().write(true).open(path_for(&db)).unwrap().set_len(10).unwrap();
        write(&db, &m(&db), &l).unwrap();
        assert_eq!(decode(&std::fs::read(path_for(&db)).unwrap()), Ok(l));
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

    #[test]
    fn the_list_names_l1_hottest_first_then_nothing_without_a_grid() {
        let (_, mem, c) = numbered_file_and_cache(20, PAGE, 64);
        let mut buf = vec![0u8; PAGE];
        for page in 0..10 {
            c.read(page, &mut buf, &mem).unwrap();
        }
        for _ in 0..3 {
            c.read(4, &mut buf, &mem).unwrap();
        }
        let l = HotList::of(&c, DbIdentity { dev: 1, ino: 2, size: 3, mtime_ns: 4 }).unwrap();
        assert_eq!(l.pages[0], 4, "the most read first: {:?}", l.pages);
        assert_eq!((l.pages.len(), l.l1_pages), (10, 10));
        assert_eq!(decode(&encode(&l)), Ok(l));
    }
}
