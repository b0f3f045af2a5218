//! The few SQLite routines the shim calls, from wherever SQLite lives.
//!
//! A loadable extension must call the host's SQLite through the
//! `sqlite3_api_routines` table handed to its entry point (the host may have
//! SQLite compiled in, as Python's apsw and many shells do). A Rust program
//! that links SQLite itself uses the linked symbols instead (feature `linked`).
//! The table the VFS was registered with is kept here for the callbacks, with
//! the one string helper they need.

use std::os::raw::{c_char, c_int, c_void};
use std::sync::OnceLock;

use crate::ffi::sqlite3_vfs;

type VfsFind = unsafe extern "C" fn(*const c_char) -> *mut sqlite3_vfs;
type VfsRegister = unsafe extern "C" fn(*mut sqlite3_vfs, c_int) -> c_int;
type UriParameter = unsafe extern "C" fn(*const c_char, *const c_char) -> *const c_char;
type Malloc = unsafe extern "C" fn(c_int) -> *mut c_void;
type UriKey = unsafe extern "C" fn(*const c_char, c_int) -> *const c_char;
type LibversionNumber = unsafe extern "C" fn() -> c_int;
// A connection of our own (warm.rs runs its reads inside read transactions of one).
type OpenV2 = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, *const c_char) -> c_int;
type Close = unsafe extern "C" fn(*mut c_void) -> c_int;
type PrepareV2 = unsafe extern "C" fn(*mut c_void, *const c_char, c_int, *mut *mut c_void, *mut *const c_char) -> c_int;
type Step = unsafe extern "C" fn(*mut c_void) -> c_int;
type Finalize = unsafe extern "C" fn(*mut c_void) -> c_int;
type BindText = unsafe extern "C" fn(*mut c_void, c_int, *const c_char, c_int, isize) -> c_int;
type ColumnInt64 = unsafe extern "C" fn(*mut c_void, c_int) -> i64;
type ColumnText = unsafe extern "C" fn(*mut c_void, c_int) -> *const u8;
type Errmsg = unsafe extern "C" fn(*mut c_void) -> *const c_char;
type BusyTimeout = unsafe extern "C" fn(*mut c_void, c_int) -> c_int;
type Threadsafe = unsafe extern "C" fn() -> c_int;
/// `sqlite3_file_control(db, schema, op, arg)`: which file is a connection's main (opener.rs).
pub type FileControl = unsafe extern "C" fn(*mut c_void, *const c_char, c_int, *mut c_void) -> c_int;
/// `sqlite3_log(code, format, ...)`: the host's log (SQLITE_CONFIG_LOG), a no-op without one.
pub type Log = unsafe extern "C" fn(c_int, *const c_char, ...);

/// The routines a connection of our own needs (all in every SQLite since 3.7.7).
#[derive(Clone, Copy)]
pub struct Sql {
    pub open_v2: OpenV2,
    pub close: Close,
    pub prepare_v2: PrepareV2,
    pub step: Step,
    pub finalize: Finalize,
    pub bind_text: BindText,
    pub column_int64: ColumnInt64,
    pub column_text: ColumnText,
    pub errmsg: Errmsg,
    pub busy_timeout: BusyTimeout,
    pub threadsafe: Threadsafe,
}

#[derive(Clone, Copy)]
pub struct Api {
    pub vfs_find: VfsFind,
    pub vfs_register: VfsRegister,
    pub uri_parameter: UriParameter,
    pub malloc: Malloc,
    /// The N-th URI parameter's name (SQLite >= 3.31; None before).
    pub uri_key: Option<UriKey>,
    /// sqlite3_log (every SQLite since 3.6.23; the table has it since 3.7.7).
    pub log: Option<Log>,
    /// sqlite3_file_control (every SQLite since 3.7.7, as the table).
    pub file_control: FileControl,
    pub sql: Sql,
}

// Positions in `struct sqlite3_api_routines` (sqlite3ext.h). The struct only
// ever grows at the end, so these hold for every SQLite since 3.7.7.
const SLOT_MALLOC: usize = 68;
const SLOT_VFS_FIND: usize = 141;
const SLOT_VFS_REGISTER: usize = 142;
const SLOT_URI_PARAMETER: usize = 189;
const SLOT_LIBVERSION_NUMBER: usize = 67;
const SLOT_URI_KEY: usize = 245;
const SLOT_BIND_TEXT: usize = 10;
const SLOT_BUSY_TIMEOUT: usize = 14;
const SLOT_CLOSE: usize = 16;
const SLOT_COLUMN_INT64: usize = 29;
const SLOT_COLUMN_TEXT: usize = 36;
const SLOT_ERRMSG: usize = 53;
const SLOT_FINALIZE: usize = 57;
const SLOT_STEP: usize = 94;
const SLOT_PREPARE_V2: usize = 116;
const SLOT_OPEN_V2: usize = 135;
const SLOT_THREADSAFE: usize = 144;
const SLOT_LOG: usize = 167;
const SLOT_FILE_CONTROL: usize = 127;
/// sqlite3_uri_key arrived in 3.31.0: older tables end before its slot.
const URI_KEY_SINCE: c_int = 3_031_000;

impl Api {
    /// Reads the routines out of the table SQLite passes to an extension.
    ///
    /// # Safety
    /// `routines` must be the `pApi` argument of an extension entry point.
    pub unsafe fn from_routines(routines: *const c_void) -> Option<Api> {
        if routines.is_null() {
            return None;
        }
        let slots = routines as *const *const c_void;
        let slot = |i: usize| {
            // SAFETY: the table has at least SLOT_URI_PARAMETER+1 pointer slots on SQLite >= 3.7.7.
            let p = unsafe { *slots.add(i) };
            (!p.is_null()).then_some(p)
        };
        // SAFETY: each slot holds the function whose C signature the field declares;
        // the uri_key slot is read only when the host's version says the table has it.
        unsafe {
            let version = std::mem::transmute::<*const c_void, LibversionNumber>(slot(SLOT_LIBVERSION_NUMBER)?)();
            let uri_key = if version >= URI_KEY_SINCE {
                slot(SLOT_URI_KEY).map(|p| std::mem::transmute::<*const c_void, UriKey>(p))
            } else {
                None
            };
            Some(Api {
                vfs_find: std::mem::transmute::<*const c_void, VfsFind>(slot(SLOT_VFS_FIND)?),
                vfs_register: std::mem::transmute::<*const c_void, VfsRegister>(slot(SLOT_VFS_REGISTER)?),
                uri_parameter: std::mem::transmute::<*const c_void, UriParameter>(slot(SLOT_URI_PARAMETER)?),
                malloc: std::mem::transmute::<*const c_void, Malloc>(slot(SLOT_MALLOC)?),
                uri_key,
                log: slot(SLOT_LOG).map(|p| std::mem::transmute::<*const c_void, Log>(p)),
                file_control: std::mem::transmute::<*const c_void, FileControl>(slot(SLOT_FILE_CONTROL)?),
                sql: Sql {
                    open_v2: std::mem::transmute::<*const c_void, OpenV2>(slot(SLOT_OPEN_V2)?),
                    close: std::mem::transmute::<*const c_void, Close>(slot(SLOT_CLOSE)?),
                    prepare_v2: std::mem::transmute::<*const c_void, PrepareV2>(slot(SLOT_PREPARE_V2)?),
                    step: std::mem::transmute::<*const c_void, Step>(slot(SLOT_STEP)?),
                    finalize: std::mem::transmute::<*const c_void, Finalize>(slot(SLOT_FINALIZE)?),
                    bind_text: std::mem::transmute::<*const c_void, BindText>(slot(SLOT_BIND_TEXT)?),
                    column_int64: std::mem::transmute::<*const c_void, ColumnInt64>(slot(SLOT_COLUMN_INT64)?),
                    column_text: std::mem::transmute::<*const c_void, ColumnText>(slot(SLOT_COLUMN_TEXT)?),
                    errmsg: std::mem::transmute::<*const c_void, Errmsg>(slot(SLOT_ERRMSG)?),
                    busy_timeout: std::mem::transmute::<*const c_void, BusyTimeout>(slot(SLOT_BUSY_TIMEOUT)?),
                    threadsafe: std::mem::transmute::<*const c_void, Threadsafe>(slot(SLOT_THREADSAFE)?),
                },
            })
        }
    }

    /// The SQLite this program links (libsqlite3-sys).
    #[cfg(feature = "linked")]
    pub fn linked() -> Api {
        use libsqlite3_sys as _;
        extern "C" {
            fn sqlite3_vfs_find(name: *const c_char) -> *mut sqlite3_vfs;
            fn sqlite3_vfs_register(vfs: *mut sqlite3_vfs, make_default: c_int) -> c_int;
            fn sqlite3_uri_parameter(filename: *const c_char, param: *const c_char) -> *const c_char;
            fn sqlite3_malloc(n: c_int) -> *mut c_void;
            fn sqlite3_uri_key(filename: *const c_char, n: c_int) -> *const c_char;
            fn sqlite3_open_v2(name: *const c_char, db: *mut *mut c_void, flags: c_int, vfs: *const c_char) -> c_int;
            fn sqlite3_close(db: *mut c_void) -> c_int;
            fn sqlite3_prepare_v2(
                db: *mut c_void,
                sql: *const c_char,
                n: c_int,
                stmt: *mut *mut c_void,
                tail: *mut *const c_char,
            ) -> c_int;
            fn sqlite3_step(stmt: *mut c_void) -> c_int;
            fn sqlite3_finalize(stmt: *mut c_void) -> c_int;
            fn sqlite3_bind_text(stmt: *mut c_void, i: c_int, text: *const c_char, n: c_int, free: isize) -> c_int;
            fn sqlite3_column_int64(stmt: *mut c_void, i: c_int) -> i64;
            fn sqlite3_column_text(stmt: *mut c_void, i: c_int) -> *const u8;
            fn sqlite3_errmsg(db: *mut c_void) -> *const c_char;
            fn sqlite3_busy_timeout(db: *mut c_void, ms: c_int) -> c_int;
            fn sqlite3_threadsafe() -> c_int;
            fn sqlite3_log(code: c_int, format: *const c_char, ...);
            fn sqlite3_file_control(db: *mut c_void, schema: *const c_char, op: c_int, arg: *mut c_void) -> c_int;
        }
        Api {
            vfs_find: sqlite3_vfs_find,
            vfs_register: sqlite3_vfs_register,
            uri_parameter: sqlite3_uri_parameter,
            malloc: sqlite3_malloc,
            uri_key: Some(sqlite3_uri_key),
            log: Some(sqlite3_log),
            file_control: sqlite3_file_control,
            sql: Sql {
                open_v2: sqlite3_open_v2,
                close: sqlite3_close,
                prepare_v2: sqlite3_prepare_v2,
                step: sqlite3_step,
                finalize: sqlite3_finalize,
                bind_text: sqlite3_bind_text,
                column_int64: sqlite3_column_int64,
                column_text: sqlite3_column_text,
                errmsg: sqlite3_errmsg,
                busy_timeout: sqlite3_busy_timeout,
                threadsafe: sqlite3_threadsafe,
            },
        }
    }
}

static API: OnceLock<Api> = OnceLock::new();

/// Keeps `api` for the callbacks (the first one registered wins: registering twice is harmless).
pub fn install(api: Api) -> Api {
    *API.get_or_init(|| api)
}

/// The routines the VFS was registered with. Callbacks only run after registration.
pub fn installed() -> &'static Api {
    API.get().expect("the waffle VFS is registered before SQLite calls into it")
}

/// A copy of `text` in memory from sqlite3_malloc, for SQLite to free.
pub fn sqlite_string(text: &str) -> *mut c_char {
    let api = installed();
    let n = text.len() + 1;
    // SAFETY: sqlite3_malloc returns n writable bytes or null.
    unsafe {
        let p = (api.malloc)(n as c_int) as *mut u8;
        if !p.is_null() {
            std::ptr::copy_nonoverlapping(text.as_ptr(), p, text.len());
            *p.add(text.len()) = 0;
        }
        p as *mut c_char
    }
}
