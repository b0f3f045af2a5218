//! The interposed functions. Each one calls the real function (before or
//! instead of the cache, see below) and does its own work only when
//!
//! - this thread is not already inside the library (the re-entry guard),
//! - the process is the server and still caches (`state::active`),
//! - the descriptor is a tracked tablespace (`fds`).
//!
//! Everything else is one atomic load or two and the real call. errno is
//! the real call's (or the caller's, when the cache answered). A panic in
//! the library never unwinds into C: it is caught and the call passes through.
//!
//! Order: opens, closes, dups, writes, truncations call the real function
//! first and then update the cache (a write is on the file before any tier
//! holds its bytes). A whole-page read asks the cache, which asks the grid
//! and then the file; any failure there reads the file directly.
//!
//! `open`, `openat` and `fcntl` are variadic in C. They are defined here
//! with their optional argument as a plain one, which the x86-64 and AArch64
//! Linux calling conventions pass exactly like the variadic call does.
//!
//! Safety: each hook is called with its C function's arguments and contract,
//! and hands them unchanged to the real function (`real`, same contract); its
//! own work reads the caller's buffers only as that contract allows. "The
//! caller's arguments" in a SAFETY comment below means this.

use std::ffi::CStr;
use std::panic::{catch_unwind, AssertUnwindSafe};

use libc::{c_char, c_int, c_uint, c_void, iovec, mode_t, off64_t, off_t, size_t, ssize_t};

use crate::errno::Saved;
use crate::guard::{self, Guard};
use crate::{fds, innodb, log, real, runtime, state, ticker};

/// Runs the library's own work for a hook: guarded, errno kept, panics caught.
#[inline]
fn work<T>(f: impl FnOnce() -> T) -> Option<T> {
    let _errno = Saved::now();
    let _g = Guard::enter();
    catch_unwind(AssertUnwindSafe(f)).ok()
}

/// Runs an update of the cache after a write, truncation or close. If it
/// panics, the tiers may hold bytes the files no longer have: the cache trips
/// its fuse (pass-through from then on).
fn update(rt: &runtime::Runtime, what: &str, f: impl FnOnce()) {
    if work(f).is_none() {
        work(|| rt.cache().trip(&format!("internal error updating the cache after {what}")));
    }
}

/// The slot of `fd` if hooks should act on it (see the module docs).
#[inline]
fn tracked(fd: c_int) -> u32 {
    if guard::inside() || state::get() != state::ACTIVE {
        return 0;
    }
    fds::get(fd)
}

// ---------------------------------------------------------------- opens

/// # Safety
/// `path` is null or NUL-terminated when `fd` >= 0 (the path a successful open took).
unsafe fn opened(fd: c_int, path: *const c_char, flags: c_int) {
    if fd < 0 || path.is_null() || guard::inside() {
        return;
    }
    // SAFETY: fd >= 0 and path is not null, so NUL-terminated (the caller's promise).
    let bytes = unsafe { CStr::from_ptr(path) }.to_bytes();
    if !innodb::is_tablespace_path(bytes) || !state::active() {
        return;
    }
    work(|| {
        if let Some(rt) = ticker::get_or_start(fd) {
            if state::get() == state::ACTIVE {
                rt.track_open(fd, &String::from_utf8_lossy(bytes), flags);
            }
        }
    });
}

#[no_mangle]
pub unsafe extern "C" fn open(path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    // SAFETY: the caller's arguments, passed on.
    let fd = unsafe { real::open(path, flags, mode) };
    // SAFETY: path is the caller's: a NUL-terminated string (or the open failed).
    unsafe { opened(fd, path, flags) };
    fd
}

#[no_mangle]
pub unsafe extern "C" fn open64(path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    // SAFETY: the caller's arguments, passed on.
    let fd = unsafe { real::open64(path, flags, mode) };
    // SAFETY: path is the caller's: a NUL-terminated string (or the open failed).
    unsafe { opened(fd, path, flags) };
    fd
}

#[no_mangle]
pub unsafe extern "C" fn openat(dirfd: c_int, path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    // SAFETY: the caller's arguments, passed on.
    let fd = unsafe { real::openat(dirfd, path, flags, mode) };
    // SAFETY: path is the caller's: a NUL-terminated string (or the open failed).
    unsafe { opened(fd, path, flags) };
    fd
}

#[no_mangle]
pub unsafe extern "C" fn openat64(dirfd: c_int, path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    // SAFETY: the caller's arguments, passed on.
    let fd = unsafe { real::openat64(dirfd, path, flags, mode) };
    // SAFETY: path is the caller's: a NUL-terminated string (or the open failed).
    unsafe { opened(fd, path, flags) };
    fd
}

#[no_mangle]
pub unsafe extern "C" fn __open_2(path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: the caller's arguments, passed on.
    let fd = unsafe { real::open_2(path, flags) };
    // SAFETY: path is the caller's: a NUL-terminated string (or the open failed).
    unsafe { opened(fd, path, flags) };
    fd
}

#[no_mangle]
pub unsafe extern "C" fn __open64_2(path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: the caller's arguments, passed on.
    let fd = unsafe { real::open64_2(path, flags) };
    // SAFETY: path is the caller's: a NUL-terminated string (or the open failed).
    unsafe { opened(fd, path, flags) };
    fd
}

#[no_mangle]
pub unsafe extern "C" fn __openat_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: the caller's arguments, passed on.
    let fd = unsafe { real::openat_2(dirfd, path, flags) };
    // SAFETY: path is the caller's: a NUL-terminated string (or the open failed).
    unsafe { opened(fd, path, flags) };
    fd
}

#[no_mangle]
pub unsafe extern "C" fn __openat64_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: the caller's arguments, passed on.
    let fd = unsafe { real::openat64_2(dirfd, path, flags) };
    // SAFETY: path is the caller's: a NUL-terminated string (or the open failed).
    unsafe { opened(fd, path, flags) };
    fd
}

#[no_mangle]
pub unsafe extern "C" fn creat(path: *const c_char, mode: mode_t) -> c_int {
    // SAFETY: the caller's arguments, passed on.
    let fd = unsafe { real::creat(path, mode) };
    // SAFETY: path is the caller's: a NUL-terminated string (or the open failed).
    unsafe { opened(fd, path, libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC) };
    fd
}

#[no_mangle]
pub unsafe extern "C" fn creat64(path: *const c_char, mode: mode_t) -> c_int {
    // SAFETY: the caller's arguments, passed on.
    let fd = unsafe { real::creat64(path, mode) };
    // SAFETY: path is the caller's: a NUL-terminated string (or the open failed).
    unsafe { opened(fd, path, libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC) };
    fd
}

// ---------------------------------------------------------------- closes and dups

#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    if guard::inside() || state::get() != state::ACTIVE {
        // SAFETY: the caller's argument, passed on.
        return unsafe { real::close(fd) };
    }
    // Untrack and release before the real close: once closed, the descriptor
    // number can be reused at once, and if this was the file's last link (InnoDB
    // deletes a tablespace, then closes it) so can its inode; a file opened in
    // between must not join this file's segment and find its pages. Linux frees
    // the descriptor even when close fails, so releasing first loses nothing.
    let slot = fds::take(fd);
    if slot != 0 {
        if let Some(rt) = runtime::get() {
            // Nothing of the preload's is closed here: the server's descriptor
            // is lent no more (a read through it ends first), then released.
            update(rt, "a close", || {
                rt.forget(slot, fd);
                rt.release(slot)
            });
        }
    }
    // SAFETY: the caller's argument, passed on.
    unsafe { real::close(fd) }
}

fn duplicated(old: c_int, new: c_int) {
    if new < 0 {
        return;
    }
    let slot = tracked(old);
    if slot != 0 {
        if let Some(rt) = runtime::get() {
            work(|| rt.share(old, new, slot));
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    // SAFETY: the caller's arguments, passed on.
    let r = unsafe { real::dup(fd) };
    duplicated(fd, r);
    r
}

/// dup2/dup3 close `new` implicitly if it was open.
fn dup_onto(old: c_int, new: c_int, call: impl FnOnce() -> c_int) -> c_int {
    if old == new || guard::inside() || state::get() != state::ACTIVE {
        return call();
    }
    let previous = fds::take(new);
    let rt = runtime::get().filter(|_| previous != 0);
    if let Some(rt) = rt {
        // The call closes `new`: not while a read borrows it.
        work(|| rt.forget(previous, new));
    }
    let r = call();
    if r < 0 {
        if previous != 0 {
            fds::set(new, previous);
        }
        if let Some(rt) = rt {
            work(|| rt.remember(previous, new));
        }
        return r;
    }
    if let Some(rt) = rt {
        update(rt, "a dup2 over a tablespace", || rt.release(previous));
    }
    duplicated(old, new);
    r
}

#[no_mangle]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    // SAFETY: the caller's arguments, passed on.
    dup_onto(old, new, || unsafe { real::dup2(old, new) })
}

#[no_mangle]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    // SAFETY: the caller's arguments, passed on.
    dup_onto(old, new, || unsafe { real::dup3(old, new, flags) })
}

#[no_mangle]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    // SAFETY: the caller's arguments, passed on.
    let r = unsafe { real::fcntl(fd, cmd, arg) };
    if cmd == libc::F_DUPFD || cmd == libc::F_DUPFD_CLOEXEC {
        duplicated(fd, r);
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    // SAFETY: the caller's arguments, passed on.
    let r = unsafe { real::fcntl64(fd, cmd, arg) };
    if cmd == libc::F_DUPFD || cmd == libc::F_DUPFD_CLOEXEC {
        duplicated(fd, r);
    }
    r
}

// ---------------------------------------------------------------- reads

/// A whole-page read of a cached tablespace answered by the cache, or None.
///
/// # Safety
/// `buf` is null or has `count` writable bytes (pread's contract).
#[inline]
unsafe fn cached_read(fd: c_int, buf: *mut c_void, count: size_t, offset: i64) -> Option<ssize_t> {
    let slot = tracked(fd);
    if slot == 0 || buf.is_null() {
        return None;
    }
    let rt = runtime::get()?;
    if !fds::is_cached(slot) {
        return None;
    }
    if count as u64 != rt.page_bytes() || offset < 0 || !(offset as u64).is_multiple_of(rt.page_bytes()) {
        rt.counters().passthrough_reads.incr();
        return None;
    }
    // SAFETY: buf is not null, so count writable bytes that are the caller's, for this call.
    let out = unsafe { std::slice::from_raw_parts_mut(buf as *mut u8, count) };
    work(|| rt.read_page(slot, fd, offset as u64, out)).flatten()
}

#[no_mangle]
pub unsafe extern "C" fn pread(fd: c_int, buf: *mut c_void, count: size_t, offset: off_t) -> ssize_t {
    // SAFETY: the caller's arguments: buf has count writable bytes.
    match unsafe { cached_read(fd, buf, count, offset) } {
        Some(n) => n,
        // SAFETY: the caller's arguments, passed on.
        None => unsafe { real::pread(fd, buf, count, offset) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn pread64(fd: c_int, buf: *mut c_void, count: size_t, offset: off64_t) -> ssize_t {
    // SAFETY: the caller's arguments: buf has count writable bytes.
    match unsafe { cached_read(fd, buf, count, offset) } {
        Some(n) => n,
        // SAFETY: the caller's arguments, passed on.
        None => unsafe { real::pread64(fd, buf, count, offset) },
    }
}

// ---------------------------------------------------------------- writes

/// # Safety
/// `buf` is null or has `count` readable bytes (pwrite's contract).
#[inline]
unsafe fn after_pwrite(fd: c_int, buf: *const c_void, count: size_t, offset: i64, result: ssize_t) {
    let slot = tracked(fd);
    if slot == 0 || !fds::is_cached(slot) {
        return;
    }
    let Some(rt) = runtime::get() else { return };
    update(rt, "a write", || {
        let bytes = if buf.is_null() {
            &[][..]
        } else {
            // SAFETY: not null, so count readable bytes (the caller's promise), unchanged during the call.
            unsafe { std::slice::from_raw_parts(buf as *const u8, count) }
        };
        rt.wrote(slot, offset, bytes, count, result)
    });
}

#[no_mangle]
pub unsafe extern "C" fn pwrite(fd: c_int, buf: *const c_void, count: size_t, offset: off_t) -> ssize_t {
    // SAFETY: the caller's arguments, passed on.
    let r = unsafe { real::pwrite(fd, buf, count, offset) };
    // SAFETY: the caller's arguments: buf has count readable bytes.
    unsafe { after_pwrite(fd, buf, count, offset, r) };
    r
}

#[no_mangle]
pub unsafe extern "C" fn pwrite64(fd: c_int, buf: *const c_void, count: size_t, offset: off64_t) -> ssize_t {
    // SAFETY: the caller's arguments, passed on.
    let r = unsafe { real::pwrite64(fd, buf, count, offset) };
    // SAFETY: the caller's arguments: buf has count readable bytes.
    unsafe { after_pwrite(fd, buf, count, offset, r) };
    r
}

/// A vectored write: the pages it touched leave the cache (InnoDB does not use these).
///
/// # Safety
/// `iov` is null or has `cnt` entries (pwritev's contract).
unsafe fn after_vectored(fd: c_int, iov: *const iovec, cnt: c_int, offset: i64) {
    let slot = tracked(fd);
    if slot == 0 || !fds::is_cached(slot) {
        return;
    }
    let Some(rt) = runtime::get() else { return };
    update(rt, "a vectored write", || {
        let segment = fds::segment(slot);
        if offset < 0 || iov.is_null() || cnt < 0 {
            rt.invalidate_all(segment);
            return;
        }
        // SAFETY: iov is not null and cnt >= 0, so cnt iovecs (the caller's promise).
        let iovs = unsafe { std::slice::from_raw_parts(iov, cnt as usize) };
        let total: u64 = iovs.iter().map(|v| v.iov_len as u64).sum();
        let n = rt.invalidate_range(segment, offset, total);
        rt.counters().partial_writes.add(n);
    });
}

#[no_mangle]
pub unsafe extern "C" fn pwritev(fd: c_int, iov: *const iovec, cnt: c_int, offset: off_t) -> ssize_t {
    // SAFETY: the caller's arguments, passed on.
    let r = unsafe { real::pwritev(fd, iov, cnt, offset) };
    // SAFETY: the caller's arguments: iov has cnt entries.
    unsafe { after_vectored(fd, iov, cnt, offset) };
    r
}

#[no_mangle]
pub unsafe extern "C" fn pwritev64(fd: c_int, iov: *const iovec, cnt: c_int, offset: off64_t) -> ssize_t {
    // SAFETY: the caller's arguments, passed on.
    let r = unsafe { real::pwritev64(fd, iov, cnt, offset) };
    // SAFETY: the caller's arguments: iov has cnt entries.
    unsafe { after_vectored(fd, iov, cnt, offset) };
    r
}

#[no_mangle]
pub unsafe extern "C" fn pwritev2(fd: c_int, iov: *const iovec, cnt: c_int, offset: off_t, flags: c_int) -> ssize_t {
    // SAFETY: the caller's arguments, passed on.
    let r = unsafe { real::pwritev2(fd, iov, cnt, offset, flags) };
    // SAFETY: the caller's arguments: iov has cnt entries.
    unsafe { after_vectored(fd, iov, cnt, offset) };
    r
}

#[no_mangle]
pub unsafe extern "C" fn pwritev64v2(
    fd: c_int,
    iov: *const iovec,
    cnt: c_int,
    offset: off64_t,
    flags: c_int,
) -> ssize_t {
    // SAFETY: the caller's arguments, passed on.
    let r = unsafe { real::pwritev64v2(fd, iov, cnt, offset, flags) };
    // SAFETY: the caller's arguments: iov has cnt entries.
    unsafe { after_vectored(fd, iov, cnt, offset) };
    r
}

/// write()/writev() on a tablespace: the position is the file's, so the whole file leaves the cache.
fn after_unpositioned(fd: c_int) {
    let slot = tracked(fd);
    if slot == 0 || !fds::is_cached(slot) {
        return;
    }
    if let Some(rt) = runtime::get() {
        update(rt, "a write", || rt.invalidate_all(fds::segment(slot)));
    }
}

#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, count: size_t) -> ssize_t {
    // SAFETY: the caller's arguments, passed on.
    let r = unsafe { real::write(fd, buf, count) };
    after_unpositioned(fd);
    r
}

#[no_mangle]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
    // SAFETY: the caller's arguments, passed on.
    let r = unsafe { real::writev(fd, iov, cnt) };
    after_unpositioned(fd);
    r
}

// ---------------------------------------------------------------- size changes

fn after_truncate(fd: c_int, len: i64) {
    let slot = tracked(fd);
    if slot == 0 || !fds::is_cached(slot) {
        return;
    }
    if let Some(rt) = runtime::get() {
        update(rt, "a truncation", || rt.truncated(fds::segment(slot), len));
    }
}

#[no_mangle]
pub unsafe extern "C" fn ftruncate(fd: c_int, len: off_t) -> c_int {
    // SAFETY: the caller's arguments, passed on.
    let r = unsafe { real::ftruncate(fd, len) };
    after_truncate(fd, len);
    r
}

#[no_mangle]
pub unsafe extern "C" fn ftruncate64(fd: c_int, len: off64_t) -> c_int {
    // SAFETY: the caller's arguments, passed on.
    let r = unsafe { real::ftruncate64(fd, len) };
    after_truncate(fd, len);
    r
}

fn after_fallocate(fd: c_int, mode: c_int, offset: i64, len: i64) {
    let slot = tracked(fd);
    if slot == 0 || !fds::is_cached(slot) {
        return;
    }
    if let Some(rt) = runtime::get() {
        work(|| rt.fallocated(fds::segment(slot), mode, offset, len));
    }
}

#[no_mangle]
pub unsafe extern "C" fn fallocate(fd: c_int, mode: c_int, offset: off_t, len: off_t) -> c_int {
    // SAFETY: the caller's arguments, passed on.
    let r = unsafe { real::fallocate(fd, mode, offset, len) };
    after_fallocate(fd, mode, offset, len);
    r
}

#[no_mangle]
pub unsafe extern "C" fn fallocate64(fd: c_int, mode: c_int, offset: off64_t, len: off64_t) -> c_int {
    // SAFETY: the caller's arguments, passed on.
    let r = unsafe { real::fallocate64(fd, mode, offset, len) };
    after_fallocate(fd, mode, offset, len);
    r
}

// ---------------------------------------------------------------- native AIO: refuse

/// InnoDB set up native AIO: its page I/O will not come through these hooks.
fn refuse(what: &str) {
    if guard::inside() || !state::active() {
        return;
    }
    work(|| {
        let why = format!(
            "InnoDB set up native asynchronous I/O ({what}), whose page reads and writes bypass the preload: \
             refusing to cache. Start the server with --innodb-use-native-aio=0 --innodb-flush-method=O_DIRECT to use Waffle"
        );
        match runtime::get() {
            Some(rt) => rt.turn_off(why),
            None => {
                if state::disable(why.clone()) {
                    log::error(&format!("{why}; Waffle is OFF for this server run: everything passes through"));
                    ticker::disabled_before_start();
                }
            }
        }
    });
}

#[no_mangle]
pub unsafe extern "C" fn io_setup(nr: c_uint, ctx: *mut c_void) -> c_int {
    // SAFETY: the caller's arguments, passed on.
    let r = unsafe { real::io_setup(nr, ctx) };
    if r == 0 {
        refuse("libaio io_setup");
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn io_uring_queue_init(entries: c_uint, ring: *mut c_void, flags: c_uint) -> c_int {
    // SAFETY: the caller's arguments, passed on.
    let r = unsafe { real::io_uring_queue_init(entries, ring, flags) };
    if r == 0 {
        refuse("io_uring");
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn io_uring_queue_init_params(entries: c_uint, ring: *mut c_void, params: *mut c_void) -> c_int {
    // SAFETY: the caller's arguments, passed on.
    let r = unsafe { real::io_uring_queue_init_params(entries, ring, params) };
    if r == 0 {
        refuse("io_uring");
    }
    r
}
