//! EMULATED slow disks for benchmarks, outside the product:
//! `libwaffle_slowdisk.so`, an LD_PRELOAD shim that makes reads of regular
//! files under a directory wait for a device profile of
//! `waffle_emulation::device` (a queue of servers, random and sequential
//! prices per 4 KiB), whatever program reads them: the benchmark's own
//! process (SQLite through libwaffle.so), or mariadbd with or without
//! libwaffle_preload.so in front of it.
//!
//! ```text
//!  WAFFLE_SLOWDISK=hdd-10k:/data  (read once, at load: devices.rs)
//!
//!  open*(path), dup*(fd) ──real──> fd ── under /data? ──> fds.rs: fd -> (device, inode)
//!  pread/pread64/preadv/preadv64/read(fd) ── fd in the table (inode checked)?
//!        no  ──> the real call, nothing else
//!        yes ──> the page cache answers it whole (RWF_NOWAIT; not for O_DIRECT)? that is all
//!                else: book the device's queue, the real call, sleep until the device is done
//! ```
//!
//! The page cache stands in front of an emulated device as in front of a
//! real one: what the kernel holds (a WAL just written, SQLite's header
//! reads) costs no disk time; what a database reads around it (O_DIRECT,
//! or read then dropped, as libwaffle.so's `waffle_direct_io` does) does.
//!
//! Everything else passes straight through: writes, other files, sockets.
//! The real functions are the next definitions (`dlsym(RTLD_NEXT)`, real.rs),
//! so the shim stacks behind another preload: with
//! `LD_PRELOAD="libwaffle_preload.so libwaffle_slowdisk.so"` the preload's own
//! reads of a tablespace reach the shim, as they would reach a slow disk.
//!
//! No re-entry guard is needed: the hooks' own work calls only functions
//! the shim does not define (fstat, lseek, readlink, clock and sleep).
//!
//! A host may ask what the shim does ([`waffle_slowdisk_dir`],
//! [`waffle_slowdisk_reads`]): the benchmarks check that the emulation they
//! label EMULATED is in force, and count the reads it slowed.

mod devices;
mod fds;
mod hooks;
mod page_cache;
mod real;

use std::ffi::{c_char, CStr};
use std::sync::atomic::Ordering;

/// Loads the setting when the library is loaded, so a bad one stops the
/// program at once rather than at its first read.
#[used]
#[link_section = ".init_array"]
static LOAD_AT_START: extern "C" fn() = load_at_start;

extern "C" fn load_at_start() {
    devices::get();
}

/// The device named `name` (a profile's name), if this process emulates it.
///
/// # Safety
/// `name` is null or NUL-terminated.
unsafe fn device_named(name: *const c_char) -> Option<&'static devices::Device> {
    if name.is_null() {
        return None;
    }
    // SAFETY: not null, so NUL-terminated (the caller's promise).
    let name = unsafe { CStr::from_ptr(name) }.to_str().ok()?;
    devices::get().by_name(name)
}

/// The directory (canonical, NUL-terminated, static) whose files the device
/// `name` slows in this process; null if it emulates no such device.
///
/// # Safety
/// `name` is null or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn waffle_slowdisk_dir(name: *const c_char) -> *const c_char {
    // SAFETY: the caller's promise, passed on.
    unsafe { device_named(name) }.map_or(std::ptr::null(), |d| d.dir.as_ptr())
}

/// Reads the device `name` has slowed so far in this process; -1 if it
/// emulates no such device.
///
/// # Safety
/// `name` is null or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn waffle_slowdisk_reads(name: *const c_char) -> i64 {
    // SAFETY: the caller's promise, passed on.
    unsafe { device_named(name) }.map_or(-1, |d| d.reads.load(Ordering::Relaxed) as i64)
}
