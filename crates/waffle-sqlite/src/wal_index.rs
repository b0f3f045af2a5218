//! Reading SQLite's WAL state the way SQLite's own readers do: the wal-index
//! header and checkpoint record in the `-shm` mapping, and the page numbers
//! of WAL frames in the `-wal` file (sqlite.org/walformat.html, src/wal.c).
//!
//! ```text
//!  -shm region 0 (native byte order):
//!    0 WalIndexHdr copy 1 (48 bytes)   48 WalIndexHdr copy 2   96 nBackfill u32   100 aReadMark[5] ...
//!  WalIndexHdr:
//!    0 iVersion  4 unused  8 iChange  12 isInit u8  13 bigEndCksum u8  14 szPage u16
//!   16 mxFrame  20 nPage  24 aFrameCksum[2]  32 aSalt[2]  40 aCksum[2]
//!  -wal file: 32-byte header, then frames of (24-byte header + page):
//!    frame header: 0 pgno (big-endian)  4 commit size  8 salt (the 8 bytes of aSalt)  16 checksum
//! ```
//!
//! A writer updates header copy 2, then copy 1; a reader that reads copy 1,
//! then copy 2, and finds them equal has a header that was whole (SQLite's
//! walIndexTryHdr does the same). Nothing here writes.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{fence, AtomicU32, Ordering};
use std::time::{Duration, Instant};

const HDR_WORDS: usize = 12;
const HDR_BYTES: usize = HDR_WORDS * 4;
const N_BACKFILL_OFFSET: usize = 2 * HDR_BYTES;
/// How long a torn header is read again before giving up: a writer updates it in a few
/// instructions, unless descheduled between the two copies. A bound in time, not in tries:
/// 1,000 tries with a yield between took seconds beside busy processes (a yield gives the
/// core away for a time slice), and an uninitialised header, which no retry mends, was
/// retried as often (SQLite's `superlock` tests: 67,000 yields, 16 s under load, 0.2 s idle).
const TORN_WAIT: Duration = Duration::from_millis(2);
const WAL_HEADER_BYTES: u64 = 32;
const FRAME_HEADER_BYTES: u64 = 24;
/// Most frames one catch-up reads page numbers from; past this, forgetting everything is cheaper.
pub const MAX_FRAMES_NAMED: u32 = 100_000;

/// What the wal-index says now, read whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WalView {
    /// The WAL generation: new salts at every restart of the WAL.
    pub salt: [u8; 8],
    /// Frames in the WAL (committed).
    pub mx_frame: u32,
    /// Frames copied back into the database file.
    pub backfilled: u32,
    pub page_bytes: u32,
}

/// One read of the wal-index header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum HeaderRead {
    Whole(WalView),
    /// Both copies equal and not initialised (a new `-shm`, or one zeroed before
    /// recovery): stays so until a connection runs recovery, which no retry waits for.
    Uninitialised,
    /// A writer was in the middle: worth reading again.
    Torn,
}

/// Reads the wal-index header and nBackfill from `shm0`, the mapping of the
/// `-shm` file's first region. None when no whole, initialised header could
/// be read (the caller must then trust nothing it cached): at once for an
/// uninitialised one, after [`TORN_WAIT`] for one that stays torn.
///
/// # Safety
/// `shm0` points to at least 136 readable, 4-byte aligned bytes that other
/// processes may be writing (SQLite's region 0 is 32 KiB).
pub unsafe fn read_view(shm0: *const u8) -> Option<WalView> {
    let mut deadline = None;
    loop {
        // SAFETY: the caller's promise, passed on.
        match unsafe { read_once(shm0) } {
            HeaderRead::Whole(view) => return Some(view),
            HeaderRead::Uninitialised => return None,
            HeaderRead::Torn => {}
        }
        let until = *deadline.get_or_insert_with(|| Instant::now() + TORN_WAIT);
        if Instant::now() >= until {
            return None;
        }
        std::thread::yield_now();
    }
}

/// # Safety
/// As [`read_view`].
unsafe fn read_once(shm0: *const u8) -> HeaderRead {
    let word = |i: usize| -> u32 {
        // SAFETY: in bounds of region 0 and aligned (the caller's promise); atomic
        // loads because other processes write the same memory.
        unsafe { (*(shm0.add(i * 4) as *const AtomicU32)).load(Ordering::Relaxed) }
    };
    let mut first = [0u32; HDR_WORDS];
    let mut second = [0u32; HDR_WORDS];
    for (i, w) in first.iter_mut().enumerate() {
        *w = word(i);
    }
    fence(Ordering::Acquire);
    for (i, w) in second.iter_mut().enumerate() {
        *w = word(HDR_WORDS + i);
    }
    fence(Ordering::Acquire);
    // Read after the header: a restart writes the header (new salt, mxFrame 0)
    // before it sets nBackfill to 0, so an nBackfill above mxFrame is a torn view.
    let backfilled = word(N_BACKFILL_OFFSET / 4);
    let is_init = first[3].to_ne_bytes()[0];
    if first != second {
        return HeaderRead::Torn;
    }
    if is_init != 1 {
        return HeaderRead::Uninitialised;
    }
    if backfilled > first[4] {
        return HeaderRead::Torn;
    }
    let sz = u32::from(u16::from_ne_bytes([first[3].to_ne_bytes()[2], first[3].to_ne_bytes()[3]]));
    let mut salt = [0u8; 8];
    salt[..4].copy_from_slice(&first[8].to_ne_bytes());
    salt[4..].copy_from_slice(&first[9].to_ne_bytes());
    HeaderRead::Whole(WalView {
        salt,
        mx_frame: first[4],
        backfilled,
        // SQLite stores 65536 as 1 (src/wal.c: szPage decoding).
        page_bytes: (sz & 0xfe00) + ((sz & 0x0001) << 16),
    })
}

/// The `-wal` file's header as SQLite's recovery reads it (walIndexRecover).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WalHeader {
    /// The checkpoint sequence number (bytes 12..16): the writing connection's
    /// count of WAL restarts, 0 in a WAL its connections found empty.
    pub ckpt_seq: u32,
    /// The generation's salts (bytes 16..24), byte for byte as the wal-index holds them.
    pub salt: [u8; 8],
}

const WAL_MAGIC: u32 = 0x377f_0682;
const WAL_VERSION: u32 = 3_007_000;

/// The header of the WAL file `wal`. None when there is none that SQLite's
/// recovery would use (no file, too short, or a bad magic, version, page
/// size or checksum).
pub fn wal_header(wal: &Path) -> Option<WalHeader> {
    let mut h = [0u8; WAL_HEADER_BYTES as usize];
    File::open(wal).ok()?.read_exact_at(&mut h, 0).ok()?;
    let be = |i: usize| u32::from_be_bytes(h[i..i + 4].try_into().expect("4 bytes"));
    let page_bytes = be(8);
    if be(0) & !1 != WAL_MAGIC || be(4) != WAL_VERSION || !(512..=65536).contains(&page_bytes) {
        return None;
    }
    if !page_bytes.is_power_of_two() || wal_checksum(&h[..24], be(0) & 1 == 1) != [be(24), be(28)] {
        return None;
    }
    Some(WalHeader { ckpt_seq: be(12), salt: h[16..24].try_into().expect("8 bytes") })
}

/// SQLite's WAL checksum (walChecksumBytes) of `data` from zero: 32-bit words,
/// big-endian when the magic's low bit says so, else little-endian.
fn wal_checksum(data: &[u8], big_endian: bool) -> [u32; 2] {
    let (mut s1, mut s2) = (0u32, 0u32);
    for pair in data.chunks_exact(8) {
        let word = |b: &[u8]| {
            let b: [u8; 4] = b.try_into().expect("4 bytes");
            if big_endian {
                u32::from_be_bytes(b)
            } else {
                u32::from_le_bytes(b)
            }
        };
        s1 = s1.wrapping_add(word(&pair[..4])).wrapping_add(s2);
        s2 = s2.wrapping_add(word(&pair[4..])).wrapping_add(s1);
    }
    [s1, s2]
}

/// The page numbers (1-based, as SQLite counts) written by frames
/// `first..=last` of the WAL generation `salt`. None when a frame is missing
/// or belongs to another generation: the caller cannot name the pages.
pub fn frame_pages(wal: &Path, salt: [u8; 8], page_bytes: u32, first: u32, last: u32) -> Option<Vec<u32>> {
    if first == 0 || last < first || last - first >= MAX_FRAMES_NAMED || page_bytes == 0 {
        return None;
    }
    let file = File::open(wal).ok()?;
    let frame_bytes = FRAME_HEADER_BYTES + u64::from(page_bytes);
    let mut pages = Vec::with_capacity((last - first + 1) as usize);
    let mut head = [0u8; FRAME_HEADER_BYTES as usize];
    for frame in first..=last {
        let at = WAL_HEADER_BYTES + u64::from(frame - 1) * frame_bytes;
        file.read_exact_at(&mut head, at).ok()?;
        if head[8..16] != salt {
            return None;
        }
        let pgno = u32::from_be_bytes(head[0..4].try_into().expect("4 bytes"));
        if pgno == 0 {
            return None;
        }
        pages.push(pgno);
    }
    pages.sort_unstable();
    pages.dedup();
    Some(pages)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A region 0 as a writer leaves it.
    fn region(salt: [u32; 2], mx_frame: u32, backfilled: u32, sz_page: u16) -> Vec<u32> {
        let mut r = vec![0u32; 64];
        let mut hdr = [0u32; HDR_WORDS];
        hdr[0] = 3007000;
        hdr[2] = 7;
        hdr[3] = u32::from_ne_bytes([1, 0, sz_page.to_ne_bytes()[0], sz_page.to_ne_bytes()[1]]);
        hdr[4] = mx_frame;
        hdr[8] = salt[0];
        hdr[9] = salt[1];
        r[..HDR_WORDS].copy_from_slice(&hdr);
        r[HDR_WORDS..2 * HDR_WORDS].copy_from_slice(&hdr);
        r[N_BACKFILL_OFFSET / 4] = backfilled;
        r
    }

    /// Reads a test region (256 aligned bytes, at least the 136 read_view reads).
    fn view_of(r: &[u32]) -> Option<WalView> {
        assert!(r.len() * 4 >= 136);
        // SAFETY: r is a live, u32-aligned buffer of more than 136 bytes.
        unsafe { read_view(r.as_ptr() as *const u8) }
    }

    #[test]
    fn a_whole_header_is_read() {
        let r = region([0x0102_0304, 0x0506_0708], 40, 12, 4096);
        let v = view_of(&r).unwrap();
        assert_eq!((v.mx_frame, v.backfilled, v.page_bytes), (40, 12, 4096));
        let mut salt = [0u8; 8];
        salt[..4].copy_from_slice(&0x0102_0304u32.to_ne_bytes());
        salt[4..].copy_from_slice(&0x0506_0708u32.to_ne_bytes());
        assert_eq!(v.salt, salt);
        let big = region([1, 2], 1, 0, 1);
        assert_eq!(view_of(&big).unwrap().page_bytes, 65536);
    }

    fn read_of(r: &[u32]) -> HeaderRead {
        // SAFETY: as view_of.
        unsafe { read_once(r.as_ptr() as *const u8) }
    }

    /// Only a torn header is worth another read: an uninitialised one is refused at once.
    #[test]
    fn a_read_tells_a_torn_header_from_an_uninitialised_one() {
        let whole = region([1, 2], 40, 12, 4096);
        assert!(matches!(read_of(&whole), HeaderRead::Whole(_)));
        let mut torn = whole.clone();
        torn[HDR_WORDS + 4] = 41;
        assert_eq!(read_of(&torn), HeaderRead::Torn);
        assert_eq!(read_of(&region([1, 2], 0, 12, 4096)), HeaderRead::Torn, "nBackfill above mxFrame");
        assert_eq!(read_of(&vec![0u32; 64]), HeaderRead::Uninitialised, "a new -shm");
        let began = Instant::now();
        assert_eq!(view_of(&torn), None);
        assert!(began.elapsed() >= TORN_WAIT, "a torn header is read again for TORN_WAIT");
    }

    #[test]
    fn torn_or_uninitialised_headers_are_refused() {
        let mut r = region([1, 2], 40, 12, 4096);
        r[HDR_WORDS + 4] = 41; // copy 2 ahead of copy 1: a writer in the middle
        assert_eq!(view_of(&r), None);
        let mut r = region([1, 2], 40, 12, 4096);
        r[3] &= !0xff; // isInit 0 in both copies
        r[HDR_WORDS + 3] &= !0xff;
        assert_eq!(view_of(&r), None);
        let r = region([1, 2], 0, 12, 4096); // restart seen half-way: nBackfill above mxFrame
        assert_eq!(view_of(&r), None);
    }

    fn wal_header_of(path: &Path, bytes: &[u8]) -> Option<WalHeader> {
        std::fs::write(path, bytes).unwrap();
        wal_header(path)
    }

    /// A WAL written by SQLite itself: its header is read as recovery reads it.
    #[test]
    fn the_wal_header_is_read_as_recovery_reads_it() {
        let dir = std::env::temp_dir().join(format!("waffle-walhdr-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let db = dir.join("h.db");
        let wal = dir.join("h.db-wal");
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.execute_batch("PRAGMA journal_mode = WAL; CREATE TABLE t(x); INSERT INTO t VALUES (1);").unwrap();
        let first = wal_header(&wal).expect("SQLite wrote a whole header");
        assert_eq!(first.ckpt_seq, 0, "a WAL created empty starts at 0");
        conn.query_row("PRAGMA wal_checkpoint(RESTART)", [], |_| Ok(())).unwrap();
        conn.execute_batch("INSERT INTO t VALUES (2);").unwrap();
        let second = wal_header(&wal).unwrap();
        let second_bytes = std::fs::read(&wal).unwrap()[..32].to_vec();
        assert_eq!(second.ckpt_seq, 1, "the restart counted");
        assert_ne!(second.salt, first.salt);
        drop(conn);
        let copy = dir.join("copy-wal");
        let mut bytes = second_bytes;
        assert_eq!(wal_header_of(&copy, &bytes), Some(second));
        bytes[13] ^= 1; // the checksum no longer holds
        assert_eq!(wal_header_of(&copy, &bytes), None);
        assert_eq!(wal_header_of(&copy, &bytes[..20]), None, "too short");
        assert_eq!(wal_header(&dir.join("none-wal")), None, "no file");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn frame_pages_reads_one_generation_only() {
        let dir = std::env::temp_dir().join(format!("waffle-walidx-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let wal = dir.join("x.db-wal");
        let page = 512u32;
        let salt = *b"SALTsalt";
        let mut bytes = vec![0u8; 32];
        for (i, pgno) in [5u32, 3, 5, 9].iter().enumerate() {
            let mut h = vec![0u8; 24];
            h[0..4].copy_from_slice(&pgno.to_be_bytes());
            h[8..16].copy_from_slice(if i == 3 { b"OLDsalt!" } else { &salt });
            bytes.extend_from_slice(&h);
            bytes.extend(std::iter::repeat_n(0u8, page as usize));
        }
        std::fs::write(&wal, &bytes).unwrap();
        assert_eq!(frame_pages(&wal, salt, page, 1, 3), Some(vec![3, 5]));
        assert_eq!(frame_pages(&wal, salt, page, 2, 2), Some(vec![3]));
        assert_eq!(frame_pages(&wal, salt, page, 1, 4), None, "frame 4 is another generation's");
        assert_eq!(frame_pages(&wal, salt, page, 1, 9), None, "frames past the end");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
