//! The interposed functions. Opens call the real function and then note
//! whether the new descriptor is a regular file under a device's directory;
//! reads on such a descriptor book the device, call the real function and
//! wait until the device would be done (a read costs the longer of the real
//! one and the device's, as the in-product emulation did). Everything else
//! is the real call after one atomic load.
//!
//! `open` and `openat` are variadic in C; their mode is taken as a plain
//! argument, which the x86-64 and AArch64 Linux conventions pass alike.
//!
//! Safety: every hook has its C function's contract and hands its arguments
//! unchanged to the real function (real.rs), which has the same contract.

use std::time::Instant;

use libc::{c_char, c_int, c_void, iovec, mode_t, off64_t, off_t, size_t, ssize_t};

use crate::devices::{self, Device};
use crate::{fds, page_cache, real};

/// Offsets below 2^48 (256 TiB); the file's inode above, so reads of two
/// files are never taken for one sequential run.
const OFFSET_BITS: u32 = 48;

// ---------------------------------------------------------------- opens

/// Notes where the descriptor a successful open returned reads from.
fn opened(fd: c_int) -> c_int {
    if fd >= 0 && !devices::get().is_empty() {
        classify(fd);
    }
    fd
}

fn classify(fd: c_int) {
    let device = inode(fd).filter(|st| st.1).and_then(|(ino, _)| Some((devices::get().holding(&path_of(fd)?)?, ino)));
    match device {
        Some((d, ino)) => fds::set(fd, d, ino),
        None => fds::clear(fd),
    }
}

/// `fd`'s inode and whether it is a regular file.
fn inode(fd: c_int) -> Option<(u64, bool)> {
    // SAFETY: an all-zero stat is a valid out buffer for fstat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes only into st.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return None;
    }
    Some((st.st_ino, st.st_mode & libc::S_IFMT == libc::S_IFREG))
}

/// The canonical path of `fd`'s file (the kernel's, from /proc/self/fd).
fn path_of(fd: c_int) -> Option<Vec<u8>> {
    let link = std::ffi::CString::new(format!("/proc/self/fd/{fd}")).ok()?;
    let mut buf = vec![0u8; libc::PATH_MAX as usize];
    // SAFETY: link is NUL-terminated; readlink writes at most buf.len() bytes into buf.
    let n = unsafe { libc::readlink(link.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    // A path as long as the buffer may have been cut: not trusted.
    let n = usize::try_from(n).ok().filter(|&n| n < buf.len())?;
    buf.truncate(n);
    Some(buf)
}

/// # Safety
/// open(2)'s contract.
#[no_mangle]
pub unsafe extern "C" fn open(path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    // SAFETY: the caller's arguments.
    opened(unsafe { real::open(path, flags, mode) })
}

/// # Safety
/// open64's contract.
#[no_mangle]
pub unsafe extern "C" fn open64(path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    // SAFETY: the caller's arguments.
    opened(unsafe { real::open64(path, flags, mode) })
}

/// # Safety
/// openat(2)'s contract.
#[no_mangle]
pub unsafe extern "C" fn openat(dirfd: c_int, path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    // SAFETY: the caller's arguments.
    opened(unsafe { real::openat(dirfd, path, flags, mode) })
}

/// # Safety
/// openat64's contract.
#[no_mangle]
pub unsafe extern "C" fn openat64(dirfd: c_int, path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    // SAFETY: the caller's arguments.
    opened(unsafe { real::openat64(dirfd, path, flags, mode) })
}

/// # Safety
/// __open_2's contract (a fortified open without a mode).
#[no_mangle]
pub unsafe extern "C" fn __open_2(path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: the caller's arguments.
    opened(unsafe { real::open_2(path, flags) })
}

/// # Safety
/// __open64_2's contract.
#[no_mangle]
pub unsafe extern "C" fn __open64_2(path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: the caller's arguments.
    opened(unsafe { real::open64_2(path, flags) })
}

/// # Safety
/// __openat_2's contract.
#[no_mangle]
pub unsafe extern "C" fn __openat_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: the caller's arguments.
    opened(unsafe { real::openat_2(dirfd, path, flags) })
}

/// # Safety
/// __openat64_2's contract.
#[no_mangle]
pub unsafe extern "C" fn __openat64_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: the caller's arguments.
    opened(unsafe { real::openat64_2(dirfd, path, flags) })
}

// ---------------------------------------------------------------- dups

/// A successful dup of `old` onto `new` reads from where `old` does (dd's
/// `fd_reopen`: open, then dup2 onto its standard input).
fn duplicated(old: c_int, new: c_int) -> c_int {
    if new >= 0 && old != new {
        match fds::get(old).and_then(|(device, kept)| Some((device, kept, inode(new)?.0))) {
            Some((device, kept, ino)) if fds::same_inode(kept, ino) => fds::set(new, device, ino),
            _ => fds::clear(new),
        }
    }
    new
}

/// # Safety
/// dup(2)'s contract.
#[no_mangle]
pub unsafe extern "C" fn dup(old: c_int) -> c_int {
    // SAFETY: the caller's arguments.
    duplicated(old, unsafe { real::dup(old) })
}

/// # Safety
/// dup2(2)'s contract.
#[no_mangle]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    // SAFETY: the caller's arguments.
    duplicated(old, unsafe { real::dup2(old, new) })
}

/// # Safety
/// dup3(2)'s contract.
#[no_mangle]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    // SAFETY: the caller's arguments.
    duplicated(old, unsafe { real::dup3(old, new, flags) })
}

// ---------------------------------------------------------------- reads

/// The device `fd` reads from and its file's inode, if it is slowed and
/// still the file it was opened on (else its entry is dropped).
#[inline]
fn slowed(fd: c_int) -> Option<(&'static Device, u64)> {
    let (device, kept) = fds::get(fd)?;
    match inode(fd) {
        Some((ino, _)) if fds::same_inode(kept, ino) => Some((devices::get().at(device)?, ino)),
        _ => {
            fds::clear(fd);
            None
        }
    }
}

/// Runs `read` (a read of `len` bytes at `offset` of the file `ino`) as the
/// device would: booked first, then the real call, then the wait for the
/// device. A failed read is not waited for.
fn on_device(device: &Device, ino: u64, offset: i64, len: usize, read: impl FnOnce() -> ssize_t) -> ssize_t {
    let low = (1u64 << OFFSET_BITS) - 1;
    let position = (ino.wrapping_mul(0x9E37_79B9_7F4A_7C15) & !low) | (offset as u64 & low);
    let done = device.device.book(position, len);
    let n = read();
    if n >= 0 {
        device.reads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let now = Instant::now();
        if done > now {
            std::thread::sleep(done - now);
        }
    }
    n
}

/// The caller's iovec array; None for a count the kernel would refuse.
///
/// # Safety
/// `iov` points to `count` iovecs when `count` is in 1..=UIO_MAXIOV.
unsafe fn iovecs<'a>(iov: *const iovec, count: c_int) -> Option<&'a [iovec]> {
    if iov.is_null() || !(1..=libc::UIO_MAXIOV).contains(&count) {
        return None;
    }
    // SAFETY: the caller's promise.
    Some(unsafe { std::slice::from_raw_parts(iov, count as usize) })
}

/// A read of `fd` (`iov`, at `offset`; -1 for read(2) at the file position)
/// on a slowed descriptor: the page cache's answer if it has one, else
/// `read` on the device.
///
/// # Safety
/// `iov` describes the caller's buffers for this read.
unsafe fn slow_read(fd: c_int, iov: &[iovec], offset: i64, read: impl FnOnce() -> ssize_t) -> ssize_t {
    let Some((device, ino)) = slowed(fd) else { return read() };
    // SAFETY: the caller's buffers.
    if let Some(n) = unsafe { page_cache::answer(fd, device, iov, offset, offset < 0) } {
        return n;
    }
    // SAFETY: lseek only reports where the descriptor is.
    let at = if offset < 0 { unsafe { libc::lseek(fd, 0, libc::SEEK_CUR) }.max(0) } else { offset };
    on_device(device, ino, at, iov.iter().map(|v| v.iov_len).sum(), read)
}

/// One iovec over a caller's buffer.
fn one(buf: *mut c_void, count: size_t) -> [iovec; 1] {
    [iovec { iov_base: buf, iov_len: count }]
}

/// # Safety
/// read(2)'s contract.
#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, count: size_t) -> ssize_t {
    if fds::get(fd).is_none() {
        // SAFETY: the caller's arguments.
        return unsafe { real::read(fd, buf, count) };
    }
    // SAFETY: the caller's arguments.
    unsafe { slow_read(fd, &one(buf, count), -1, || real::read(fd, buf, count)) }
}

/// # Safety
/// pread(2)'s contract.
#[no_mangle]
pub unsafe extern "C" fn pread(fd: c_int, buf: *mut c_void, count: size_t, offset: off_t) -> ssize_t {
    if fds::get(fd).is_none() || offset < 0 {
        // SAFETY: the caller's arguments.
        return unsafe { real::pread(fd, buf, count, offset) };
    }
    // SAFETY: the caller's arguments.
    unsafe { slow_read(fd, &one(buf, count), offset, || real::pread(fd, buf, count, offset)) }
}

/// # Safety
/// pread64's contract.
#[no_mangle]
pub unsafe extern "C" fn pread64(fd: c_int, buf: *mut c_void, count: size_t, offset: off64_t) -> ssize_t {
    if fds::get(fd).is_none() || offset < 0 {
        // SAFETY: the caller's arguments.
        return unsafe { real::pread64(fd, buf, count, offset) };
    }
    // SAFETY: the caller's arguments.
    unsafe { slow_read(fd, &one(buf, count), offset, || real::pread64(fd, buf, count, offset)) }
}

/// # Safety
/// preadv(2)'s contract.
#[no_mangle]
pub unsafe extern "C" fn preadv(fd: c_int, iov: *const iovec, count: c_int, offset: off_t) -> ssize_t {
    // SAFETY: the caller's arguments.
    match unsafe { iovecs(iov, count) }.filter(|_| fds::get(fd).is_some() && offset >= 0) {
        // SAFETY: the caller's arguments.
        Some(v) => unsafe { slow_read(fd, v, offset, || real::preadv(fd, iov, count, offset)) },
        // SAFETY: the caller's arguments.
        None => unsafe { real::preadv(fd, iov, count, offset) },
    }
}

/// # Safety
/// preadv64's contract.
#[no_mangle]
pub unsafe extern "C" fn preadv64(fd: c_int, iov: *const iovec, count: c_int, offset: off64_t) -> ssize_t {
    // SAFETY: the caller's arguments.
    match unsafe { iovecs(iov, count) }.filter(|_| fds::get(fd).is_some() && offset >= 0) {
        // SAFETY: the caller's arguments.
        Some(v) => unsafe { slow_read(fd, v, offset, || real::preadv64(fd, iov, count, offset)) },
        // SAFETY: the caller's arguments.
        None => unsafe { real::preadv64(fd, iov, count, offset) },
    }
}
