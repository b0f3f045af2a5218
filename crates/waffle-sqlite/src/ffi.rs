//! The parts of SQLite's C ABI the shim touches (sqlite3.h, stable since 3.7).
//! Declared here rather than taken from a binding crate so that the loadable
//! extension links no SQLite of its own: it calls the host's through the
//! routines table it is handed.
#![allow(non_camel_case_types, non_snake_case)]

use std::os::raw::{c_char, c_int, c_void};

pub const SQLITE_OK: c_int = 0;
pub const SQLITE_ERROR: c_int = 1;
pub const SQLITE_NOTFOUND: c_int = 12;
pub const SQLITE_CANTOPEN: c_int = 14;
pub const SQLITE_IOERR: c_int = 10;
pub const SQLITE_IOERR_READ: c_int = SQLITE_IOERR | (1 << 8);
pub const SQLITE_IOERR_SHORT_READ: c_int = SQLITE_IOERR | (2 << 8);
pub const SQLITE_OK_LOAD_PERMANENTLY: c_int = 256;

pub const SQLITE_OPEN_READONLY: c_int = 0x0000_0001;
pub const SQLITE_OPEN_MAIN_DB: c_int = 0x0000_0100;
pub const SQLITE_OPEN_WAL: c_int = 0x0008_0000;
pub const SQLITE_IOCAP_BATCH_ATOMIC: c_int = 0x0000_4000;
pub const SQLITE_READONLY: c_int = 8;

/// xLock/xUnlock levels.
pub const SQLITE_LOCK_SHARED: c_int = 1;
pub const SQLITE_LOCK_PENDING: c_int = 3;
pub const SQLITE_LOCK_EXCLUSIVE: c_int = 4;

/// xShmLock flags and the WAL's lock slots (src/wal.c: WAL_CKPT_LOCK, WAL_READ_LOCK(i)).
pub const SQLITE_SHM_UNLOCK: c_int = 1;
pub const SQLITE_SHM_LOCK: c_int = 2;
pub const SQLITE_SHM_SHARED: c_int = 4;
pub const SQLITE_SHM_EXCLUSIVE: c_int = 8;
pub const WAL_WRITE_LOCK: c_int = 0;
pub const WAL_CKPT_LOCK: c_int = 1;
pub const WAL_READ_LOCK_0: c_int = 3;
pub const WAL_NREADER: c_int = 5;
pub const SQLITE_FCNTL_PRAGMA: c_int = 14;

pub type XClose = unsafe extern "C" fn(*mut sqlite3_file) -> c_int;

#[repr(C)]
pub struct sqlite3_file {
    pub pMethods: *const sqlite3_io_methods,
}

#[repr(C)]
pub struct sqlite3_io_methods {
    pub iVersion: c_int,
    pub xClose: Option<XClose>,
    pub xRead: Option<unsafe extern "C" fn(*mut sqlite3_file, *mut c_void, c_int, i64) -> c_int>,
    pub xWrite: Option<unsafe extern "C" fn(*mut sqlite3_file, *const c_void, c_int, i64) -> c_int>,
    pub xTruncate: Option<unsafe extern "C" fn(*mut sqlite3_file, i64) -> c_int>,
    pub xSync: Option<unsafe extern "C" fn(*mut sqlite3_file, c_int) -> c_int>,
    pub xFileSize: Option<unsafe extern "C" fn(*mut sqlite3_file, *mut i64) -> c_int>,
    pub xLock: Option<unsafe extern "C" fn(*mut sqlite3_file, c_int) -> c_int>,
    pub xUnlock: Option<unsafe extern "C" fn(*mut sqlite3_file, c_int) -> c_int>,
    pub xCheckReservedLock: Option<unsafe extern "C" fn(*mut sqlite3_file, *mut c_int) -> c_int>,
    pub xFileControl: Option<unsafe extern "C" fn(*mut sqlite3_file, c_int, *mut c_void) -> c_int>,
    pub xSectorSize: Option<unsafe extern "C" fn(*mut sqlite3_file) -> c_int>,
    pub xDeviceCharacteristics: Option<unsafe extern "C" fn(*mut sqlite3_file) -> c_int>,
    pub xShmMap: Option<unsafe extern "C" fn(*mut sqlite3_file, c_int, c_int, c_int, *mut *mut c_void) -> c_int>,
    pub xShmLock: Option<unsafe extern "C" fn(*mut sqlite3_file, c_int, c_int, c_int) -> c_int>,
    pub xShmBarrier: Option<unsafe extern "C" fn(*mut sqlite3_file)>,
    pub xShmUnmap: Option<unsafe extern "C" fn(*mut sqlite3_file, c_int) -> c_int>,
    pub xFetch: Option<unsafe extern "C" fn(*mut sqlite3_file, i64, c_int, *mut *mut c_void) -> c_int>,
    pub xUnfetch: Option<unsafe extern "C" fn(*mut sqlite3_file, i64, *mut c_void) -> c_int>,
}

pub type sqlite3_syscall_ptr = Option<unsafe extern "C" fn()>;

#[repr(C)]
pub struct sqlite3_vfs {
    pub iVersion: c_int,
    pub szOsFile: c_int,
    pub mxPathname: c_int,
    pub pNext: *mut sqlite3_vfs,
    pub zName: *const c_char,
    pub pAppData: *mut c_void,
    pub xOpen:
        Option<unsafe extern "C" fn(*mut sqlite3_vfs, *const c_char, *mut sqlite3_file, c_int, *mut c_int) -> c_int>,
    pub xDelete: Option<unsafe extern "C" fn(*mut sqlite3_vfs, *const c_char, c_int) -> c_int>,
    pub xAccess: Option<unsafe extern "C" fn(*mut sqlite3_vfs, *const c_char, c_int, *mut c_int) -> c_int>,
    pub xFullPathname: Option<unsafe extern "C" fn(*mut sqlite3_vfs, *const c_char, c_int, *mut c_char) -> c_int>,
    pub xDlOpen: Option<unsafe extern "C" fn(*mut sqlite3_vfs, *const c_char) -> *mut c_void>,
    pub xDlError: Option<unsafe extern "C" fn(*mut sqlite3_vfs, c_int, *mut c_char)>,
    pub xDlSym: Option<unsafe extern "C" fn(*mut sqlite3_vfs, *mut c_void, *const c_char) -> sqlite3_syscall_ptr>,
    pub xDlClose: Option<unsafe extern "C" fn(*mut sqlite3_vfs, *mut c_void)>,
    pub xRandomness: Option<unsafe extern "C" fn(*mut sqlite3_vfs, c_int, *mut c_char) -> c_int>,
    pub xSleep: Option<unsafe extern "C" fn(*mut sqlite3_vfs, c_int) -> c_int>,
    pub xCurrentTime: Option<unsafe extern "C" fn(*mut sqlite3_vfs, *mut f64) -> c_int>,
    pub xGetLastError: Option<unsafe extern "C" fn(*mut sqlite3_vfs, c_int, *mut c_char) -> c_int>,
    pub xCurrentTimeInt64: Option<unsafe extern "C" fn(*mut sqlite3_vfs, *mut i64) -> c_int>,
    pub xSetSystemCall: Option<unsafe extern "C" fn(*mut sqlite3_vfs, *const c_char, sqlite3_syscall_ptr) -> c_int>,
    pub xGetSystemCall: Option<unsafe extern "C" fn(*mut sqlite3_vfs, *const c_char) -> sqlite3_syscall_ptr>,
    pub xNextSystemCall: Option<unsafe extern "C" fn(*mut sqlite3_vfs, *const c_char) -> *const c_char>,
}
