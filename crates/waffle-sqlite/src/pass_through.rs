//! Our `sqlite3_file`: the header this VFS keeps in front of the real file's
//! bytes (the layout of SQLite's ext/misc/cksumvfs.c), and the methods that pass
//! each call straight to the real file behind it. Every file that is not a
//! cached main database (journals, temp files) uses these methods alone; the
//! main database's and the WAL's methods (file.rs, lock.rs) call them for the real I/O.

use std::os::raw::{c_int, c_void};

use crate::ffi::*;
use crate::open_db::{OpenDb, Pending};

#[repr(C)]
pub struct WaffleFile {
    pub base: sqlite3_file,
    /// The cache of the main database; null for pass-through files.
    pub db: *const OpenDb,
    /// The page a sequential reader would read next, and how many pages in a
    /// row this handle has read in order. One connection uses a handle at a
    /// time, so no lock is needed.
    pub seq_next: u64,
    pub seq_run: u32,
    /// The read-ahead window of this handle while it reads sequentially.
    pub read_ahead: waffle_core::ReadAhead,
    /// The lock level SQLite holds through this handle (what it asked for and got).
    pub lock_level: c_int,
    /// Region 0 of the WAL's shared memory as mapped for this handle; null when unmapped.
    pub shm0: *const u8,
    /// For a WAL file of a cached database: its write counter (`OpenDb::wal_writes`); null otherwise.
    pub wal_writes: *const std::sync::atomic::AtomicU64,
    /// The main file of a warm thread's connection (warm.rs; registry counts it apart).
    pub warmer: bool,
    /// SQLite's own descriptor of a cached main database file (descriptor.rs); -1 otherwise.
    pub fd: std::os::raw::c_int,
    /// A main database file whose cache waits for SQLite to say whose it is
    /// (opener.rs): Box::into_raw, taken once; null otherwise.
    pub pending: *mut Pending,
    /// The cache refused this file (opener.rs said why): its I/O fails.
    pub refused: bool,
}

/// Where the real file starts: right after our header, 8-byte aligned.
pub const REAL_OFFSET: usize = std::mem::size_of::<WaffleFile>().next_multiple_of(8);

/// # Safety
/// `f` points to a file allocated with szOsFile = REAL_OFFSET + the real VFS's szOsFile.
pub unsafe fn real(f: *mut sqlite3_file) -> *mut sqlite3_file {
    // SAFETY: REAL_OFFSET is inside the szOsFile bytes at f (the caller's promise).
    unsafe { (f as *mut u8).add(REAL_OFFSET) as *mut sqlite3_file }
}

/// # Safety
/// `r` is a real file the base VFS opened and has not closed (its pMethods is set).
unsafe fn methods(r: *mut sqlite3_file) -> &'static sqlite3_io_methods {
    // SAFETY: an open real file's pMethods points to the base VFS's method table (static in SQLite's VFSes).
    unsafe { &*(*r).pMethods }
}

/// The database of a cached main file (its header's `db`); None for a pass-through file.
///
/// # Safety
/// `f` is ours (see "the main database file" in file.rs); the reference is not kept past the callback.
pub unsafe fn db<'a>(f: *mut sqlite3_file) -> Option<&'a OpenDb> {
    // SAFETY: f is ours (the caller's promise).
    let p = unsafe { (*(f as *mut WaffleFile)).db };
    // SAFETY: a non-null db is xOpen's Arc::into_raw, alive until main_close takes it back.
    let db = (!p.is_null()).then(|| unsafe { &*p })?;
    // A connection its parent opened, used in a forked child: the parent's cache is not the
    // child's, and plain SQLite's I/O is what the child gets (waffle_core::fork).
    db.is_ours().then_some(db)
}

pub static PASS_METHODS: sqlite3_io_methods = sqlite3_io_methods {
    iVersion: 3,
    xClose: Some(pass_close),
    xRead: Some(pass_read),
    xWrite: Some(pass_write),
    xTruncate: Some(pass_truncate),
    xSync: Some(pass_sync),
    xFileSize: Some(pass_file_size),
    xLock: Some(pass_lock),
    xUnlock: Some(pass_unlock),
    xCheckReservedLock: Some(pass_check_reserved_lock),
    xFileControl: Some(pass_file_control),
    xSectorSize: Some(pass_sector_size),
    xDeviceCharacteristics: Some(pass_device_characteristics),
    xShmMap: Some(pass_shm_map),
    xShmLock: Some(pass_shm_lock),
    xShmBarrier: Some(pass_shm_barrier),
    xShmUnmap: Some(pass_shm_unmap),
    xFetch: Some(pass_fetch),
    xUnfetch: Some(pass_unfetch),
};

// ---- the methods ----
//
// Each is called (by SQLite, or by a method of file.rs with its own arguments)
// with a file that is ours and whose real file the base VFS opened (we install
// methods only after that open succeeded): real(f) is that file and methods(r)
// its base VFS's table. The other arguments are SQLite's, passed on unchanged,
// so the base VFS's method gets the contract SQLite gave ours. This is the
// "pass-through" each SAFETY comment below refers to.

pub unsafe extern "C" fn pass_close(f: *mut sqlite3_file) -> c_int {
    // SAFETY: pass-through (see above).
    unsafe {
        let r = real(f);
        if (*r).pMethods.is_null() {
            return SQLITE_OK;
        }
        let rc = methods(r).xClose.map_or(SQLITE_OK, |x| x(r));
        (*r).pMethods = std::ptr::null();
        rc
    }
}

/// One method that calls the real file's method of the same name with the same
/// arguments, or returns the default when the base VFS leaves it out.
macro_rules! pass_through {
    ($($name:ident: $method:ident($($arg:ident: $ty:ty),*) or $default:expr;)*) => {$(
        pub unsafe extern "C" fn $name(f: *mut sqlite3_file $(, $arg: $ty)*) -> c_int {
            // SAFETY: pass-through (see above).
            unsafe {
                let r = real(f);
                methods(r).$method.map_or($default, |x| x(r $(, $arg)*))
            }
        }
    )*};
}

pass_through! {
    pass_read: xRead(buf: *mut c_void, amt: c_int, off: i64) or SQLITE_IOERR;
    pass_write: xWrite(buf: *const c_void, amt: c_int, off: i64) or SQLITE_IOERR;
    pass_truncate: xTruncate(size: i64) or SQLITE_IOERR;
    pass_sync: xSync(flags: c_int) or SQLITE_IOERR;
    pass_file_size: xFileSize(size: *mut i64) or SQLITE_IOERR;
    pass_lock: xLock(level: c_int) or SQLITE_IOERR;
    pass_unlock: xUnlock(level: c_int) or SQLITE_IOERR;
    pass_check_reserved_lock: xCheckReservedLock(out: *mut c_int) or SQLITE_IOERR;
    pass_file_control: xFileControl(op: c_int, arg: *mut c_void) or SQLITE_NOTFOUND;
    pass_sector_size: xSectorSize() or 4096;
    pass_device_characteristics: xDeviceCharacteristics() or 0;
}

pub unsafe extern "C" fn pass_shm_map(
    f: *mut sqlite3_file,
    pg: c_int,
    sz: c_int,
    extend: c_int,
    pp: *mut *mut c_void,
) -> c_int {
    // SAFETY: pass-through (see above).
    unsafe {
        let r = real(f);
        let m = methods(r);
        if m.iVersion < 2 {
            return SQLITE_IOERR;
        }
        m.xShmMap.map_or(SQLITE_IOERR, |x| x(r, pg, sz, extend, pp))
    }
}

pub unsafe extern "C" fn pass_shm_lock(f: *mut sqlite3_file, offset: c_int, n: c_int, flags: c_int) -> c_int {
    // SAFETY: pass-through (see above).
    unsafe {
        let r = real(f);
        let m = methods(r);
        if m.iVersion < 2 {
            return SQLITE_IOERR;
        }
        m.xShmLock.map_or(SQLITE_IOERR, |x| x(r, offset, n, flags))
    }
}

pub unsafe extern "C" fn pass_shm_barrier(f: *mut sqlite3_file) {
    // SAFETY: pass-through (see above).
    unsafe {
        let r = real(f);
        let m = methods(r);
        if m.iVersion >= 2 {
            if let Some(x) = m.xShmBarrier {
                x(r)
            }
        }
    }
}

pub unsafe extern "C" fn pass_shm_unmap(f: *mut sqlite3_file, delete: c_int) -> c_int {
    // SAFETY: pass-through (see above).
    unsafe {
        let r = real(f);
        let m = methods(r);
        if m.iVersion < 2 {
            return SQLITE_OK;
        }
        m.xShmUnmap.map_or(SQLITE_OK, |x| x(r, delete))
    }
}

pub unsafe extern "C" fn pass_fetch(f: *mut sqlite3_file, off: i64, amt: c_int, pp: *mut *mut c_void) -> c_int {
    // SAFETY: pass-through (see above).
    unsafe {
        let r = real(f);
        let m = methods(r);
        if m.iVersion < 3 {
            *pp = std::ptr::null_mut();
            return SQLITE_OK;
        }
        m.xFetch.map_or_else(
            || {
                *pp = std::ptr::null_mut();
                SQLITE_OK
            },
            |x| x(r, off, amt, pp),
        )
    }
}

pub unsafe extern "C" fn pass_unfetch(f: *mut sqlite3_file, off: i64, p: *mut c_void) -> c_int {
    // SAFETY: pass-through (see above).
    unsafe {
        let r = real(f);
        let m = methods(r);
        if m.iVersion < 3 {
            return SQLITE_OK;
        }
        m.xUnfetch.map_or(SQLITE_OK, |x| x(r, off, p))
    }
}
