//! The functions the hooks stand in front of, found lazily with
//! `dlsym(RTLD_NEXT, name)`: the next definition after this library, i.e.
//! libc's (or libaio's, liburing's).
//!
//! A lookup happens on first use and is cached in an atomic; a racing first
//! use looks up twice and stores the same pointer. A symbol that cannot be
//! found makes the call fail with ENOSYS rather than crash.

use std::sync::atomic::{AtomicUsize, Ordering};

use libc::{c_char, c_int, c_uint, c_void, iovec, mode_t, off64_t, off_t, size_t, ssize_t};

use crate::errno;

/// Looks `name` (NUL-terminated) up after this library; 0 if absent.
fn lookup(slot: &AtomicUsize, name: &'static [u8]) -> usize {
    let p = slot.load(Ordering::Acquire);
    if p != 0 {
        return p;
    }
    // SAFETY: name is NUL-terminated; RTLD_NEXT is a valid pseudo-handle.
    let found = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr() as *const c_char) } as usize;
    if found != 0 {
        slot.store(found, Ordering::Release);
    }
    found
}

macro_rules! real {
    ($(fn $name:ident($($arg:ident: $t:ty),*) -> $ret:ty = $sym:literal, on_missing $fail:expr;)*) => {
        $(
            /// The real function (see the module docs).
            ///
            /// # Safety
            /// The same contract as the C function of that name.
            pub unsafe fn $name($($arg: $t),*) -> $ret {
                static SLOT: AtomicUsize = AtomicUsize::new(0);
                let p = lookup(&SLOT, concat!($sym, "\0").as_bytes());
                if p == 0 {
                    errno::set(libc::ENOSYS);
                    return $fail;
                }
                // SAFETY: p is what dlsym found for this symbol: a function with this C signature.
                let f: unsafe extern "C" fn($($t),*) -> $ret = unsafe { std::mem::transmute(p) };
                // SAFETY: the caller keeps the C function's contract (this function's own).
                unsafe { f($($arg),*) }
            }
        )*
    };
}

real! {
    fn open(path: *const c_char, flags: c_int, mode: mode_t) -> c_int = "open", on_missing -1;
    fn open64(path: *const c_char, flags: c_int, mode: mode_t) -> c_int = "open64", on_missing -1;
    fn openat(dirfd: c_int, path: *const c_char, flags: c_int, mode: mode_t) -> c_int = "openat", on_missing -1;
    fn openat64(dirfd: c_int, path: *const c_char, flags: c_int, mode: mode_t) -> c_int = "openat64", on_missing -1;
    fn open_2(path: *const c_char, flags: c_int) -> c_int = "__open_2", on_missing -1;
    fn open64_2(path: *const c_char, flags: c_int) -> c_int = "__open64_2", on_missing -1;
    fn openat_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int = "__openat_2", on_missing -1;
    fn openat64_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int = "__openat64_2", on_missing -1;
    fn creat(path: *const c_char, mode: mode_t) -> c_int = "creat", on_missing -1;
    fn creat64(path: *const c_char, mode: mode_t) -> c_int = "creat64", on_missing -1;
    fn close(fd: c_int) -> c_int = "close", on_missing -1;
    fn dup(fd: c_int) -> c_int = "dup", on_missing -1;
    fn dup2(old: c_int, new: c_int) -> c_int = "dup2", on_missing -1;
    fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int = "dup3", on_missing -1;
    fn fcntl(fd: c_int, cmd: c_int, arg: usize) -> c_int = "fcntl", on_missing -1;
    fn fcntl64(fd: c_int, cmd: c_int, arg: usize) -> c_int = "fcntl64", on_missing -1;
    fn pread(fd: c_int, buf: *mut c_void, count: size_t, offset: off_t) -> ssize_t = "pread", on_missing -1;
    fn pread64(fd: c_int, buf: *mut c_void, count: size_t, offset: off64_t) -> ssize_t = "pread64", on_missing -1;
    fn pwrite(fd: c_int, buf: *const c_void, count: size_t, offset: off_t) -> ssize_t = "pwrite", on_missing -1;
    fn pwrite64(fd: c_int, buf: *const c_void, count: size_t, offset: off64_t) -> ssize_t = "pwrite64", on_missing -1;
    fn pwritev(fd: c_int, iov: *const iovec, cnt: c_int, offset: off_t) -> ssize_t = "pwritev", on_missing -1;
    fn pwritev64(fd: c_int, iov: *const iovec, cnt: c_int, offset: off64_t) -> ssize_t = "pwritev64", on_missing -1;
    fn pwritev2(fd: c_int, iov: *const iovec, cnt: c_int, offset: off_t, flags: c_int) -> ssize_t = "pwritev2", on_missing -1;
    fn pwritev64v2(fd: c_int, iov: *const iovec, cnt: c_int, offset: off64_t, flags: c_int) -> ssize_t = "pwritev64v2", on_missing -1;
    fn write(fd: c_int, buf: *const c_void, count: size_t) -> ssize_t = "write", on_missing -1;
    fn writev(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t = "writev", on_missing -1;
    fn ftruncate(fd: c_int, len: off_t) -> c_int = "ftruncate", on_missing -1;
    fn ftruncate64(fd: c_int, len: off64_t) -> c_int = "ftruncate64", on_missing -1;
    fn fallocate(fd: c_int, mode: c_int, offset: off_t, len: off_t) -> c_int = "fallocate", on_missing -1;
    fn fallocate64(fd: c_int, mode: c_int, offset: off64_t, len: off64_t) -> c_int = "fallocate64", on_missing -1;
    fn io_setup(nr: c_uint, ctx: *mut c_void) -> c_int = "io_setup", on_missing -libc::ENOSYS;
    fn io_uring_queue_init(entries: c_uint, ring: *mut c_void, flags: c_uint) -> c_int = "io_uring_queue_init", on_missing -libc::ENOSYS;
    fn io_uring_queue_init_params(entries: c_uint, ring: *mut c_void, params: *mut c_void) -> c_int = "io_uring_queue_init_params", on_missing -libc::ENOSYS;
}
