//! SQLite's own descriptor of the database file, and reads through it.
//!
//! Waffle opens no descriptor of its own on a database file. The kernel drops
//! every POSIX lock a process holds on a file when the process closes any
//! descriptor of it (sqlite.org/howtocorrupt.html, 2.2); SQLite's unix VFS
//! protects itself by parking its descriptors until the inode's last lock
//! goes, a rule only code inside that VFS can follow (it alone sees the
//! inode's lock counts, under its own mutex). A descriptor waffle never opens
//! is one it never closes. So every read of the file goes through the
//! descriptor SQLite opened for the connection that asks, with pread (it does
//! not move SQLite's offset), and fstat names the file: the very file SQLite
//! locks and reads, whatever its path names by now (a rename over it while
//! the connection opened).
//!
//! The descriptor is found in the unix VFS's file object (`unixFile` in
//! os_unix.c: methods, VFS, inode info, then the int descriptor; the same
//! since SQLite 3.7) and checked before use: the base VFS is a unix one, the
//! object names it as its VFS, the descriptor is a regular file, and its size
//! is the size SQLite reports. Anything else: the connection runs uncached.
//!
//! `waffle_direct_io=on`: the kernel's page cache must not keep what waffle
//! read (the local memory given to waffle is all the memory its pages use),
//! so the descriptor gets POSIX_FADV_RANDOM (no kernel read-ahead) and each
//! read is followed by POSIX_FADV_DONTNEED of its range: the effect of an
//! O_DIRECT read without a descriptor of waffle's own. `auto` (the default,
//! [`drops_page_cache`]) does so only for a file larger than a quarter of the
//! machine's memory: a smaller one the kernel keeps cached at little cost, and
//! dropping it turns each L1 miss from a memory copy into a disk read.

use std::ffi::CStr;
use std::fs::{File, Metadata};
use std::io;
use std::mem::ManuallyDrop;
use std::os::raw::c_int;
use std::os::unix::fs::{FileExt, FileTypeExt};
use std::os::unix::io::{FromRawFd, RawFd};

use waffle_core::backing::{Backing, PageId};

use crate::ffi::{sqlite3_file, sqlite3_vfs, SQLITE_OK};

/// Times the descriptor's size is compared with SQLite's before it is refused.
const SIZE_TRIES: usize = 3;

/// The first fields of os_unix.c's `unixFile`.
#[repr(C)]
struct UnixFileHead {
    methods: *const std::os::raw::c_void,
    vfs: *const sqlite3_vfs,
    inode: *const std::os::raw::c_void,
    fd: c_int,
}

/// Why SQLite's descriptor of a database cannot be used (the database opens without the cache).
#[derive(Debug, thiserror::Error)]
pub enum DescriptorError {
    #[error("the default VFS is {vfs:?}, not a unix one")]
    NotUnix { vfs: std::ffi::CString },
    #[error("the unix VFS's file object is smaller than expected")]
    SmallFileObject,
    #[error("the unix VFS's file object is not laid out as expected")]
    UnexpectedLayout,
    #[error("cannot stat SQLite's descriptor: {0}")]
    Stat(#[source] std::io::Error),
    #[error("SQLite's descriptor is not a regular file")]
    NotAFile,
    #[error("SQLite cannot say the file's size")]
    NoSize,
    #[error("SQLite's descriptor is not the file it reports")]
    NotTheFile,
}

/// The descriptor SQLite's unix VFS opened as `real`, checked, and the file's length (its fstat and
/// SQLite agree on it).
///
/// # Safety
/// `real` is a file `base` opened (its xOpen succeeded), at least
/// `(*base).szOsFile` bytes, not yet closed.
pub unsafe fn of(real: *mut sqlite3_file, base: *const sqlite3_vfs) -> Result<(RawFd, u64), DescriptorError> {
    // SAFETY: base is the live base VFS (the caller's promise); zName is its NUL-terminated name.
    let (name, size) = unsafe { (CStr::from_ptr((*base).zName), (*base).szOsFile) };
    if !name.to_bytes().starts_with(b"unix") {
        return Err(DescriptorError::NotUnix { vfs: name.to_owned() });
    }
    if (size as usize) < std::mem::size_of::<UnixFileHead>() {
        return Err(DescriptorError::SmallFileObject);
    }
    // SAFETY: a unix VFS's open file is a unixFile of szOsFile bytes, which begins with these fields.
    let head = unsafe { &*(real as *const UnixFileHead) };
    if head.vfs != base || head.fd < 0 {
        return Err(DescriptorError::UnexpectedLayout);
    }
    // The sizes agree unless another process is growing the file right now: asked again, a few times.
    for _ in 0..SIZE_TRIES {
        let meta = metadata(head.fd).map_err(DescriptorError::Stat)?;
        if !meta.file_type().is_file() && !meta.file_type().is_block_device() {
            return Err(DescriptorError::NotAFile);
        }
        // SAFETY: real is open (the caller's promise), so its methods are the base VFS's.
        let sqlite_size = unsafe { file_size(real) }.ok_or(DescriptorError::NoSize)?;
        if meta.len() == sqlite_size {
            return Ok((head.fd, sqlite_size));
        }
    }
    Err(DescriptorError::NotTheFile)
}

/// # Safety
/// `real` is an open file of the base VFS.
unsafe fn file_size(real: *mut sqlite3_file) -> Option<u64> {
    let mut size: i64 = 0;
    // SAFETY: the caller's promise; xFileSize writes the size into `size`.
    let rc = unsafe { (*(*real).pMethods).xFileSize.map(|x| x(real, &mut size)) };
    (rc == Some(SQLITE_OK) && size >= 0).then_some(size as u64)
}

/// A borrowed descriptor as a `File` that is never closed.
fn borrowed(fd: RawFd) -> ManuallyDrop<File> {
    // SAFETY: fd is SQLite's open descriptor; ManuallyDrop never closes it.
    ManuallyDrop::new(unsafe { File::from_raw_fd(fd) })
}

/// fstat of SQLite's descriptor.
pub fn metadata(fd: RawFd) -> io::Result<Metadata> {
    borrowed(fd).metadata()
}

/// Bytes at `offset` of the file (short only at its end).
pub fn read_at(fd: RawFd, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let f = borrowed(fd);
    let mut got = 0;
    // Bounded: each pass advances or ends (end of file, error).
    while got < buf.len() {
        match f.read_at(&mut buf[got..], offset + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Waits (at most SETTLE_MAX) until the clock the kernel stamps files with
/// has moved past the file's mtime and ctime, so that any later write carries
/// later ones: kernels before 6.13 stamp from a clock that moves only at a
/// tick (a few milliseconds), and some file systems keep whole seconds. False
/// if it did not (a clock behind the file's times, an unreadable clock).
pub fn times_settled(fd: RawFd) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(m) = metadata(fd) else { return false };
    let ns = |secs: i64, nanos: i64| i128::from(secs) * 1_000_000_000 + i128::from(nanos);
    let mut stamp = ns(m.mtime(), m.mtime_nsec()).max(ns(m.ctime(), m.ctime_nsec()));
    if m.mtime_nsec() == 0 && m.ctime_nsec() == 0 {
        stamp += 999_999_999; // whole seconds: the next write in this second would look the same
    }
    let deadline = std::time::Instant::now() + SETTLE_MAX;
    loop {
        let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: `now` is a timespec the call fills; CLOCK_REALTIME_COARSE is what file times come from.
        if unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut now) } != 0 {
            return false;
        }
        if ns(now.tv_sec, now.tv_nsec) > stamp {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// The longest [`times_settled`] waits: a tick, or a whole-second stamp.
const SETTLE_MAX: std::time::Duration = std::time::Duration::from_millis(1_100);

/// `waffle_direct_io=auto` drops what waffle reads from the page cache only
/// for a file larger than this share of the machine's memory (1/4): the
/// double caching it avoids is then worth a disk read per L1 miss.
const AUTO_MEMORY_SHARE: u64 = 4;

/// Whether reads of a file of `file_bytes` are dropped from the kernel's page
/// cache (`waffle_direct_io`; `auto` asks the size at each read, so a file
/// that grows past the bound starts dropping then).
pub fn drops_page_cache(config: &waffle_core::Config, file_bytes: u64) -> bool {
    if config.direct_io_auto {
        auto_drops(file_bytes, machine_memory_bytes())
    } else {
        config.direct_io
    }
}

/// `auto`'s rule; memory that cannot be read counts as none (drop, as `on`).
fn auto_drops(file_bytes: u64, memory_bytes: Option<u64>) -> bool {
    memory_bytes.is_none_or(|m| file_bytes > m / AUTO_MEMORY_SHARE)
}

/// The memory this process may use: physical memory, or its cgroup's bound if lower.
fn machine_memory_bytes() -> Option<u64> {
    static MEMORY: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *MEMORY.get_or_init(|| {
        // SAFETY: sysconf reads a system constant; no memory is passed.
        let (pages, page_bytes) = unsafe { (libc::sysconf(libc::_SC_PHYS_PAGES), libc::sysconf(libc::_SC_PAGESIZE)) };
        let physical = (pages > 0 && page_bytes > 0).then(|| pages as u64 * page_bytes as u64);
        // cgroup v2 ("max" or a byte count); the page cache counts against it.
        let bound =
            std::fs::read_to_string("/sys/fs/cgroup/memory.max").ok().and_then(|s| s.trim().parse::<u64>().ok());
        match (physical, bound) {
            (Some(p), Some(b)) => Some(p.min(b)),
            (p, b) => p.or(b),
        }
    })
}

/// The file as the cache reads it: SQLite's descriptor of the asking connection.
pub struct SqliteFd {
    pub fd: RawFd,
    /// Drop what was read from the kernel's page cache (`waffle_direct_io`).
    pub drop_cache: bool,
}

impl Backing for SqliteFd {
    fn read_pages(&self, first: PageId, page_bytes: usize, buf: &mut [u8]) -> io::Result<usize> {
        let offset = first.byte_offset(page_bytes);
        let n = read_at(self.fd, buf, offset)?;
        if self.drop_cache && n > 0 {
            // SAFETY: advice on an open descriptor's range; it changes no data.
            unsafe { libc::posix_fadvise(self.fd, offset as i64, n as i64, libc::POSIX_FADV_DONTNEED) };
        }
        Ok(n)
    }

    fn is_direct(&self) -> bool {
        self.drop_cache
    }
}

/// `waffle_direct_io=on`: the kernel reads no more than is asked through this
/// descriptor (POSIX_FADV_RANDOM: no read-ahead into its page cache), so that
/// with POSIX_FADV_DONTNEED after each read nothing waffle read stays cached.
///
/// Given before the descriptor's first read (xOpen, before the pager reads the
/// header): a read made before it starts a read-ahead window whose marked page,
/// read later, starts the next window whatever the advice, and so on through a
/// scan (Linux's async read-ahead does not look at it). One 100-byte header read
/// before the advice left 8,001 of a file's 8,020 pages cached after a scan with
/// every range dropped; given first, 1 (docs/benchmarks.md, "Device profiles").
pub fn no_read_ahead(fd: RawFd) {
    // SAFETY: advice on an open descriptor; it changes no data.
    unsafe { libc::posix_fadvise(fd, 0, 0, libc::POSIX_FADV_RANDOM) };
}

/// The kernel's read-ahead back on the descriptor (an xOpen's early [`no_read_ahead`]
/// that its opener's settings, known later, do not want).
pub fn read_ahead_again(fd: RawFd) {
    // SAFETY: advice on an open descriptor; it changes no data.
    unsafe { libc::posix_fadvise(fd, 0, 0, libc::POSIX_FADV_NORMAL) };
}

/// A backing for work that must not read the file (the hot list's grid-only reload).
pub struct NoFile;

impl Backing for NoFile {
    fn read_pages(&self, _first: PageId, _page_bytes: usize, _buf: &mut [u8]) -> io::Result<usize> {
        Err(io::Error::other("this reader has no file to read"))
    }

    fn is_direct(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// After the wait, a write carries a later mtime, however coarse the kernel's stamps.
    #[test]
    fn once_the_times_settle_a_later_write_carries_later_ones() {
        use std::io::Write;
        use std::os::unix::fs::MetadataExt;
        use std::os::unix::io::AsRawFd;
        let path = std::env::temp_dir().join(format!("waffle-settle-{}", std::process::id()));
        let mut f = File::options().create(true).truncate(true).read(true).write(true).open(&path).unwrap();
        for _ in 0..20 {
            f.write_all(b"x").unwrap();
            let before = f.metadata().unwrap();
            assert!(times_settled(f.as_raw_fd()));
            f.write_all(b"y").unwrap();
            let after = f.metadata().unwrap();
            let at = |m: &Metadata| (m.mtime(), m.mtime_nsec());
            assert!(at(&after) > at(&before), "{:?} then {:?}", at(&before), at(&after));
        }
        let _ = std::fs::remove_file(&path);
    }

    /// Issue 33: the default drops nothing of a file the machine's memory
    /// holds four times over, and everything of a larger one; `on` and `off` are kept.
    #[test]
    fn direct_io_auto_drops_only_a_file_large_for_the_memory() {
        let gib = 1u64 << 30;
        assert!(!auto_drops(8 << 20, Some(8 * gib)));
        assert!(!auto_drops(2 * gib, Some(8 * gib)));
        assert!(auto_drops(2 * gib + 1, Some(8 * gib)));
        assert!(auto_drops(8 << 20, None), "unknown memory: as on");
        let auto = waffle_core::Config::default();
        assert!(auto.direct_io_auto, "auto is the default");
        let small = 4096;
        assert_eq!(drops_page_cache(&auto, small), machine_memory_bytes().is_none());
        assert!(drops_page_cache(&auto, u64::MAX));
        let on = waffle_core::Config { direct_io_auto: false, direct_io: true, ..waffle_core::Config::default() };
        let off = waffle_core::Config { direct_io_auto: false, direct_io: false, ..waffle_core::Config::default() };
        assert!(drops_page_cache(&on, small) && !drops_page_cache(&off, u64::MAX));
    }

    #[test]
    fn a_refused_descriptor_says_why_as_before() {
        let e = DescriptorError::NotUnix { vfs: std::ffi::CString::new("memdb").unwrap() };
        assert_eq!(e.to_string(), "the default VFS is \"memdb\", not a unix one");
        let e = DescriptorError::Stat(std::io::Error::from_raw_os_error(libc::EBADF));
        assert!(e.to_string().starts_with("cannot stat SQLite's descriptor: Bad file descriptor"), "{e}");
    }
}
