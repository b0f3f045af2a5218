//! The backing file: the only source of truth, read with O_DIRECT.
//!
//! Pages are read past the kernel's page cache (as InnoDB does with
//! innodb_flush_method=O_DIRECT) so that the local memory a benchmark gives
//! Waffle is really all the local memory the pages use. O_DIRECT needs aligned
//! buffers and offsets: reads go through an aligned bounce buffer, one per
//! thread kept between reads ([`with_bounce`]). Where the
//! filesystem refuses O_DIRECT (tmpfs), reads fall back to buffered I/O after
//! one warning. Writes never come here: the database writes through its own
//! file handle, first, always.
//!
//! Storage sits behind the [`Backing`] trait so that tests can inject faults.
//! A read names its pages by [`PageId`] (file segment and page index), never
//! by a packed number multiplied into a byte offset, and the adapter passes
//! the backing at every read: the MariaDB preload reads through the very
//! descriptor the server is reading with, and nothing about that descriptor
//! is kept between calls.

use std::alloc::{self, Layout};
use std::cell::Cell;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::versions;

/// Alignment O_DIRECT needs on Linux for the buffer, offset and length (logical block size; 4096 covers all).
pub const DIRECT_ALIGN: usize = 4096;

/// A page's place in the files behind one cache: page `index` of file
/// `segment`. SQLite has one file (segment 0); the MariaDB preload gives each
/// open tablespace file a segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PageId {
    pub segment: u32,
    pub index: u32,
}

impl PageId {
    pub fn new(segment: u32, index: u32) -> PageId {
        PageId { segment, index }
    }

    /// The page behind one of the cache's page numbers (`versions::join`).
    pub fn of(page: u64) -> PageId {
        let (segment, index) = versions::split(page);
        assert!(
            (segment as u64) < versions::MAX_SEGMENTS && (index as u64) < versions::MAX_PAGES,
            "page number {page:#x} names no page"
        );
        PageId { segment: segment as u32, index: index as u32 }
    }

    /// The cache's number for this page.
    pub fn number(self) -> u64 {
        versions::join(self.segment as u64, self.index as u64)
    }

    /// Where the page starts in its own file. Cannot overflow: an index is
    /// 32 bits and a page at most 64 KiB, so the offset stays below 2^48.
    pub fn byte_offset(self, page_bytes: usize) -> u64 {
        debug_assert!(page_bytes <= MAX_PAGE_BYTES, "page of {page_bytes} bytes");
        self.index as u64 * page_bytes as u64
    }
}

/// The largest page either database uses (SQLite and InnoDB: 64 KiB).
pub const MAX_PAGE_BYTES: usize = 65536;

pub trait Backing: Send + Sync {
    /// Reads whole pages of `page_bytes` from `first` on, as many as `buf`
    /// holds (`buf.len()` is a multiple of `page_bytes`), all from `first`'s
    /// file. Returns the bytes read: fewer than `buf.len()` only at end of file.
    fn read_pages(&self, first: PageId, page_bytes: usize, buf: &mut [u8]) -> io::Result<usize>;
    /// Whether reads bypass the kernel page cache.
    fn is_direct(&self) -> bool;
}

/// A file held in memory and shared with whoever writes it: tests write it
/// first, as the database would, then tell the cache. The one in-memory
/// backing of the core's unit tests and the test kit.
pub struct MemoryFile(pub Arc<Mutex<Vec<u8>>>);

impl Backing for MemoryFile {
    fn read_pages(&self, first: PageId, page_bytes: usize, buf: &mut [u8]) -> io::Result<usize> {
        let f = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let at = usize::try_from(first.byte_offset(page_bytes)).unwrap_or(usize::MAX).min(f.len());
        let n = buf.len().min(f.len() - at);
        buf[..n].copy_from_slice(&f[at..at + n]);
        Ok(n)
    }
    fn is_direct(&self) -> bool {
        false
    }
}

/// A read-only handle on the database file, O_DIRECT where the filesystem allows.
pub struct DirectFile {
    direct: Option<File>,
    buffered: File,
    direct_failed: AtomicBool,
}

impl DirectFile {
    /// Opens `path` for reading. `want_direct` false skips O_DIRECT altogether.
    /// Returns a warning to show once when O_DIRECT was wanted but refused.
    pub fn open(path: &Path, want_direct: bool) -> io::Result<(DirectFile, Option<String>)> {
        let buffered = File::open(path)?;
        if !want_direct {
            return Ok((DirectFile { direct: None, buffered, direct_failed: AtomicBool::new(false) }, None));
        }
        match OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(path) {
            Ok(f) => Ok((DirectFile { direct: Some(f), buffered, direct_failed: AtomicBool::new(false) }, None)),
            Err(e) => {
                let warning = format!(
                    "waffle: O_DIRECT refused for {} ({e}); reading through the page cache instead",
                    path.display()
                );
                Ok((DirectFile { direct: None, buffered, direct_failed: AtomicBool::new(true) }, Some(warning)))
            }
        }
    }

    fn read_direct(f: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let start = offset & !(DIRECT_ALIGN as u64 - 1);
        let lead = (offset - start) as usize;
        let span = (lead + buf.len()).div_ceil(DIRECT_ALIGN) * DIRECT_ALIGN;
        with_bounce(span, |bounce| {
            let mut got = 0;
            // Bounded: each pass either advances or ends (EOF / error).
            while got < span {
                match f.read_at(&mut bounce[got..], start + got as u64) {
                    Ok(0) => break,
                    Ok(n) => got += n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                }
            }
            let useful = got.saturating_sub(lead).min(buf.len());
            buf[..useful].copy_from_slice(&bounce[lead..lead + useful]);
            Ok(useful)
        })
    }

    fn read_buffered(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let mut got = 0;
        while got < buf.len() {
            match self.buffered.read_at(&mut buf[got..], offset + got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(got)
    }
}

impl Backing for DirectFile {
    fn read_pages(&self, first: PageId, page_bytes: usize, buf: &mut [u8]) -> io::Result<usize> {
        // One file: every page is in segment 0.
        if first.segment != 0 {
            return Err(io::Error::other(format!("segment {} of a single-file backing", first.segment)));
        }
        self.read_at(buf, first.byte_offset(page_bytes))
    }

    fn is_direct(&self) -> bool {
        self.direct.is_some() && !self.direct_failed.load(Ordering::Relaxed)
    }
}

impl DirectFile {
    /// Reads up to `buf.len()` bytes at `offset` (any alignment); fewer only at end of file.
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        if let Some(f) = &self.direct {
            if !self.direct_failed.load(Ordering::Relaxed) {
                match Self::read_direct(f, buf, offset) {
                    Ok(n) => return Ok(n),
                    // Some filesystems accept the open and refuse the read.
                    Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                        if !self.direct_failed.swap(true, Ordering::Relaxed) {
                            crate::warn!("O_DIRECT read refused ({e}); reading through the page cache instead");
                        }
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        self.read_buffered(buf, offset)
    }
}

/// The largest bounce buffer a thread keeps between reads; a larger read
/// gets a buffer of its own (64 pages of 16 KiB).
pub const BOUNCE_KEEP_BYTES: usize = 1 << 20;

/// This thread's bounce buffer: `Idle` between reads, `Lent` during one.
enum Bounce {
    Idle(Option<AlignedBuf>),
    Lent,
}

thread_local! {
    // `const` init: no lazy initialiser runs on first use (the MariaDB
    // preload calls this inside the server's threads, from its hooks).
    static BOUNCE: Cell<Bounce> = const { Cell::new(Bounce::Idle(None)) };
}

/// Calls `f` with `len` bytes aligned on [`DIRECT_ALIGN`] (at a multiple of
/// it in memory; the bytes are initialised but hold whatever an earlier read
/// left). The thread's buffer is reused, grown on demand up to
/// [`BOUNCE_KEEP_BYTES`]; a larger `len`, a call from inside `f` (the buffer
/// is lent) or one during the thread's exit get a buffer of their own, freed
/// on return. Never panics; only running out of memory aborts, as any
/// allocation does.
pub fn with_bounce<R>(len: usize, f: impl FnOnce(&mut [u8]) -> R) -> R {
    let size = len.max(1).div_ceil(DIRECT_ALIGN) * DIRECT_ALIGN;
    let kept = if size <= BOUNCE_KEEP_BYTES {
        // Err: the thread is exiting and its slot is gone.
        BOUNCE.try_with(|slot| slot.replace(Bounce::Lent)).ok()
    } else {
        None
    };
    match kept {
        Some(Bounce::Idle(buf)) => {
            let mut buf = match buf {
                Some(buf) if buf.len() >= size => buf,
                _ => AlignedBuf::new(size), // the smaller one is freed
            };
            let result = {
                let _unwinding = Unlend;
                f(&mut buf.as_mut()[..len])
            };
            let _ = BOUNCE.try_with(|slot| slot.set(Bounce::Idle(Some(buf))));
            result
        }
        // Lent (a call from inside `f`; the slot stays lent to the outer call),
        // too large, or the thread is exiting.
        Some(Bounce::Lent) | None => f(&mut AlignedBuf::new(size).as_mut()[..len]),
    }
}

/// Marks the slot idle again when dropped, so that a panic in `f` does not
/// leave it lent for good (the buffer itself is freed by the unwinding).
struct Unlend;

impl Drop for Unlend {
    fn drop(&mut self) {
        let _ = BOUNCE.try_with(|slot| slot.set(Bounce::Idle(None)));
    }
}

/// A zeroed heap buffer aligned for O_DIRECT.
struct AlignedBuf {
    ptr: *mut u8,
    layout: Layout,
}

impl AlignedBuf {
    /// `len` bytes rounded up to a non-zero multiple of DIRECT_ALIGN.
    fn new(len: usize) -> AlignedBuf {
        let len = len.max(1).div_ceil(DIRECT_ALIGN) * DIRECT_ALIGN;
        let layout = match Layout::from_size_align(len, DIRECT_ALIGN) {
            Ok(layout) => layout,
            // Only past isize::MAX bytes, which no allocation could hold anyway.
            Err(_) => alloc::handle_alloc_error(Layout::new::<u8>()),
        };
        // SAFETY: layout has non-zero size. Zeroed: a reused buffer is handed
        // out whole as `&mut [u8]`, which must not cover uninitialised bytes.
        let ptr = unsafe { alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            alloc::handle_alloc_error(layout);
        }
        AlignedBuf { ptr, layout }
    }

    fn len(&self) -> usize {
        self.layout.size()
    }

    fn as_mut(&mut self) -> &mut [u8] {
        // SAFETY: ptr is a live, initialised (zeroed in new) allocation of
        // layout.size() bytes owned by self, borrowed mutably through self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.layout.size()) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in new() with this layout.
        unsafe { alloc::dealloc(self.ptr, self.layout) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn reads_match_the_file_at_any_offset_and_short_at_eof() {
        let dir = std::env::temp_dir().join(format!("waffle-backing-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("data");
        let data: Vec<u8> = (0..3 * 4096 + 100).map(|i| (i % 253) as u8).collect();
        File::create(&path).unwrap().write_all(&data).unwrap();
        for direct in [true, false] {
            let (f, _warning) = DirectFile::open(&path, direct).unwrap();
            for (off, len) in [(0usize, 4096usize), (4096, 4096), (100, 16), (8192, 8192), (12288, 4096)] {
                let mut buf = vec![0u8; len];
                let n = f.read_at(&mut buf, off as u64).unwrap();
                let want = data.len().saturating_sub(off).min(len);
                assert_eq!(n, want, "direct={direct} off={off} len={len}");
                assert_eq!(&buf[..n], &data[off..off + n]);
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_thread_reuses_its_bounce_buffer_and_a_reentrant_call_gets_its_own() {
        // A fresh thread: its slot is empty whatever other tests did.
        std::thread::spawn(|| {
            let addr = |b: &mut [u8]| b.as_mut_ptr() as usize;
            let first = with_bounce(16384, |b| {
                assert_eq!(b.len(), 16384);
                b.fill(7);
                addr(b)
            });
            assert!(first.is_multiple_of(DIRECT_ALIGN));
            assert_eq!(with_bounce(4096, addr), first, "the second call reuses the buffer");
            let (outer, inner) = with_bounce(16384, |b| {
                let inner = with_bounce(16384, |inner| {
                    assert!(inner.iter().all(|&x| x == 0), "a one-off buffer is zeroed");
                    addr(inner)
                });
                (addr(b), inner)
            });
            assert_eq!(outer, first);
            assert_ne!(inner, first, "a re-entrant call gets a buffer of its own");
            assert_eq!(with_bounce(100, |b| (b.len(), addr(b))), (100, first), "still kept after the re-entrant call");
            let big = with_bounce(BOUNCE_KEEP_BYTES + 1, |b| (b.len(), addr(b)));
            assert_eq!(big.0, BOUNCE_KEEP_BYTES + 1);
            assert!(big.1 != first && big.1.is_multiple_of(DIRECT_ALIGN));
            assert_eq!(with_bounce(4096, addr), first, "a one-off large buffer does not replace the kept one");
            let grown = with_bounce(BOUNCE_KEEP_BYTES, |b| (b.len(), addr(b)));
            assert_eq!(grown.0, BOUNCE_KEEP_BYTES);
            assert_eq!(with_bounce(16384, addr), grown.1, "grown on demand, then reused");
            // A panic inside the call does not leave the buffer lent.
            let _ = std::panic::catch_unwind(|| with_bounce(4096, |_| panic!("in f")));
            let after = with_bounce(4096, addr);
            assert_eq!(with_bounce(4096, addr), after, "reused again after a panic");
        })
        .join()
        .unwrap();
    }

    /// The defect this type removed: a page number with the segment in its
    /// high bits, multiplied by the page size, wrapped past segment 1023 at
    /// 16 KiB pages and named another file's page.
    #[test]
    fn a_page_id_keeps_segment_and_offset_apart_for_every_segment() {
        for segment in [0u32, 1, 1023, 1024, 1100, (versions::MAX_SEGMENTS - 1) as u32] {
            for index in [0u32, 7, u32::MAX] {
                let id = PageId::new(segment, index);
                assert_eq!(PageId::of(id.number()), id);
                assert_eq!(id.byte_offset(16384), index as u64 * 16384);
                assert_eq!(id.byte_offset(MAX_PAGE_BYTES), index as u64 * MAX_PAGE_BYTES as u64);
            }
        }
    }

    #[test]
    fn a_single_file_reads_whole_pages_by_index_and_refuses_other_segments() {
        let dir = std::env::temp_dir().join(format!("waffle-backing-pages-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("data");
        let data: Vec<u8> = (0..4 * 4096).map(|i| (i / 4096) as u8 + 1).collect();
        File::create(&path).unwrap().write_all(&data).unwrap();
        let (f, _warning) = DirectFile::open(&path, true).unwrap();
        let mut buf = vec![0u8; 2 * 4096];
        assert_eq!(f.read_pages(PageId::new(0, 2), 4096, &mut buf).unwrap(), 2 * 4096);
        assert!(buf[..4096].iter().all(|&b| b == 3) && buf[4096..].iter().all(|&b| b == 4));
        assert_eq!(f.read_pages(PageId::new(0, 3), 4096, &mut buf).unwrap(), 4096, "short at end of file");
        assert!(f.read_pages(PageId::new(1, 0), 4096, &mut buf).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
