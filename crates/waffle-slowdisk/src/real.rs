//! The functions the hooks stand in front of: the next definitions after
//! this library (`dlsym(RTLD_NEXT)`: libc's, or those of a shim loaded
//! after this one), looked up on first use and kept. A missing one fails
//! the call with ENOSYS.

use std::sync::atomic::{AtomicUsize, Ordering};

use libc::{c_char, c_int, c_void, iovec, mode_t, off64_t, off_t, size_t, ssize_t};

/// The next definition of `name` (NUL-terminated), cached in `slot`; 0 if none.
fn next(slot: &AtomicUsize, name: &'static [u8]) -> usize {
    let cached = slot.load(Ordering::Relaxed);
    if cached != 0 {
        return cached;
    }
    // SAFETY: name is NUL-terminated; RTLD_NEXT is a valid pseudo-handle.
    let found = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr().cast()) } as usize;
    slot.store(found, Ordering::Relaxed);
    found
}

macro_rules! next_fn {
    ($($name:ident = $sym:literal: fn($($arg:ident: $t:ty),*) -> $ret:ty;)*) => {$(
        /// The next definition of the C function of the same name.
        ///
        /// # Safety
        /// That C function's contract.
        pub unsafe fn $name($($arg: $t),*) -> $ret {
            static SLOT: AtomicUsize = AtomicUsize::new(0);
            let p = next(&SLOT, concat!($sym, "\0").as_bytes());
            if p == 0 {
                // SAFETY: errno is this thread's.
                unsafe { *libc::__errno_location() = libc::ENOSYS };
                return -1;
            }
            // SAFETY: p is the symbol of that name: a function of this C signature.
            let f: unsafe extern "C" fn($($t),*) -> $ret = unsafe { std::mem::transmute(p) };
            // SAFETY: the caller keeps the contract.
            unsafe { f($($arg),*) }
        }
    )*};
}

next_fn! {
    open = "open": fn(path: *const c_char, flags: c_int, mode: mode_t) -> c_int;
    open64 = "open64": fn(path: *const c_char, flags: c_int, mode: mode_t) -> c_int;
    openat = "openat": fn(dirfd: c_int, path: *const c_char, flags: c_int, mode: mode_t) -> c_int;
    openat64 = "openat64": fn(dirfd: c_int, path: *const c_char, flags: c_int, mode: mode_t) -> c_int;
    open_2 = "__open_2": fn(path: *const c_char, flags: c_int) -> c_int;
    open64_2 = "__open64_2": fn(path: *const c_char, flags: c_int) -> c_int;
    openat_2 = "__openat_2": fn(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int;
    openat64_2 = "__openat64_2": fn(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int;
    dup = "dup": fn(old: c_int) -> c_int;
    dup2 = "dup2": fn(old: c_int, new: c_int) -> c_int;
    dup3 = "dup3": fn(old: c_int, new: c_int, flags: c_int) -> c_int;
    read = "read": fn(fd: c_int, buf: *mut c_void, count: size_t) -> ssize_t;
    pread = "pread": fn(fd: c_int, buf: *mut c_void, count: size_t, offset: off_t) -> ssize_t;
    pread64 = "pread64": fn(fd: c_int, buf: *mut c_void, count: size_t, offset: off64_t) -> ssize_t;
    preadv = "preadv": fn(fd: c_int, iov: *const iovec, count: c_int, offset: off_t) -> ssize_t;
    preadv64 = "preadv64": fn(fd: c_int, iov: *const iovec, count: c_int, offset: off64_t) -> ssize_t;
}
