//! The backing file: the only source of truth, read with O_DIRECT.
//!
//! Pages are read past the kernel's page cache (as InnoDB does with
//! innodb_flush_method=O_DIRECT) so that the local memory a benchmark gives
//! Waffle is really all the local memory the pages use. O_DIRECT needs aligned
//! buffers and offsets: reads go through an aligned bounce buffer. Where the
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
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

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
        let mut bounce = AlignedBuf::new(span);
        let mut got = 0;
        // Bounded: each pass either advances or ends (EOF / error).
        while got < span {
            match f.read_at(&mut bounce.as_mut()[got..], start + got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        let useful = got.saturating_sub(lead).min(buf.len());
        buf[..useful].copy_from_slice(&bounce.as_mut()[lead..lead + useful]);
        Ok(useful)
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
                            eprintln!("waffle: O_DIRECT read refused ({e}); reading through the page cache instead");
                        }
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        self.read_buffered(buf, offset)
    }
}

/// A heap buffer aligned for O_DIRECT.
struct AlignedBuf {
    ptr: *mut u8,
    layout: Layout,
}

impl AlignedBuf {
    fn new(len: usize) -> AlignedBuf {
        assert!(len > 0 && len.is_multiple_of(DIRECT_ALIGN));
        let layout = Layout::from_size_align(len, DIRECT_ALIGN).expect("valid layout");
        // SAFETY: layout has non-zero size.
        let ptr = unsafe { alloc::alloc(layout) };
        if ptr.is_null() {
            alloc::handle_alloc_error(layout);
        }
        AlignedBuf { ptr, layout }
    }

    fn as_mut(&mut self) -> &mut [u8] {
        // SAFETY: ptr is a live allocation of layout.size() bytes owned by self.
        // Uninitialised bytes are only read after the kernel wrote them (got counts them).
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
