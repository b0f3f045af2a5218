//! The `waffle` VFS: a pass-through over the default VFS that sizes its files
//! for our header plus the real file, and attaches the main database file to
//! its cache on open.

use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_void};
use std::path::Path;
use std::sync::Arc;

use waffle_core::{Config, ConfigError};

use crate::api::Api;
use crate::descriptor;
use crate::ffi::*;
use crate::file::{self, MAIN_METHODS};
use crate::open_db::{key_of, Pending};
use crate::pass_through::{self, WaffleFile, PASS_METHODS, REAL_OFFSET};
use crate::registry;
use crate::vfs_name::VFS_NAME;

/// URI parameters looked at, at most (SQLite's URIs hold a handful).
const MAX_URI_PARAMS: c_int = 1024;

/// An open refused, in the log: each distinct refusal is said (the key is the
/// line), the same one repeated only as often as the limiter lets it.
fn refused(line: &str) {
    waffle_core::error!(key: line, "{line}");
}

/// Registers the `waffle` VFS (not as the default) over SQLite's default VFS.
/// Registering twice is harmless.
pub fn register(api: Api) -> c_int {
    let api = crate::api::install(api);
    crate::host_log::install(&api);
    // SAFETY: the api functions are SQLite's own; names are NUL-terminated.
    unsafe {
        if !(api.vfs_find)(VFS_NAME.as_ptr()).is_null() {
            return SQLITE_OK;
        }
        let base = (api.vfs_find)(std::ptr::null());
        if base.is_null() {
            return SQLITE_ERROR;
        }
        let vfs = Box::leak(Box::new(sqlite3_vfs {
            iVersion: (*base).iVersion.min(3),
            szOsFile: (REAL_OFFSET as c_int) + (*base).szOsFile,
            mxPathname: (*base).mxPathname,
            pNext: std::ptr::null_mut(),
            zName: VFS_NAME.as_ptr(),
            pAppData: base as *mut c_void,
            xOpen: Some(x_open),
            xDelete: Some(x_delete),
            xAccess: Some(x_access),
            xFullPathname: Some(x_full_pathname),
            xDlOpen: Some(x_dl_open),
            xDlError: Some(x_dl_error),
            xDlSym: Some(x_dl_sym),
            xDlClose: Some(x_dl_close),
            xRandomness: Some(x_randomness),
            xSleep: Some(x_sleep),
            xCurrentTime: Some(x_current_time),
            xGetLastError: Some(x_get_last_error),
            xCurrentTimeInt64: Some(x_current_time_int64),
            xSetSystemCall: Some(x_set_system_call),
            xGetSystemCall: Some(x_get_system_call),
            xNextSystemCall: Some(x_next_system_call),
        }));
        (api.vfs_register)(vfs, 0)
    }
}

/// The VFS this one passes through to.
///
/// # Safety
/// `vfs` is the `waffle` VFS (`register` leaks it: it lives for the process).
unsafe fn base(vfs: *mut sqlite3_vfs) -> *mut sqlite3_vfs {
    // SAFETY: vfs is ours (the caller's promise); pAppData holds the base VFS.
    unsafe { (*vfs).pAppData as *mut sqlite3_vfs }
}

/// The cache settings of a main database: its URI parameters, else the
/// environment; and the `waffle_*` parameters its URI names (an ATTACH's are
/// ignored, and said: opener.rs).
///
/// # Safety
/// `name` is the (non-null) filename SQLite passed to xOpen for a main database.
unsafe fn config_for(name: *const c_char) -> Result<(Config, Vec<String>), ConfigError> {
    let api = crate::api::installed();
    let mut named = Vec::new();
    if let Some(uri_key) = api.uri_key {
        // A misspelt waffle_* parameter, one in upper case or one given twice is refused, not ignored.
        let mut keys = Vec::new();
        for i in 0..MAX_URI_PARAMS {
            // SAFETY: name is xOpen's filename, the kind sqlite3_uri_key takes; any index is allowed.
            let k = unsafe { uri_key(name, i) };
            if k.is_null() {
                break;
            }
            // SAFETY: a non-null key is a NUL-terminated string inside name's URI block.
            keys.push(unsafe { CStr::from_ptr(k) }.to_string_lossy().into_owned());
        }
        named = waffle_core::config::check_names(keys.iter().map(String::as_str))?;
    }
    let config = Config::from_lookup(|param| {
        let key = std::ffi::CString::new(param).ok()?;
        // SAFETY: name is xOpen's filename, as sqlite3_uri_parameter wants; key is NUL-terminated.
        let v = unsafe { (api.uri_parameter)(name, key.as_ptr()) };
        // SAFETY: a non-null value is a NUL-terminated string inside name's URI block.
        (!v.is_null()).then(|| unsafe { CStr::from_ptr(v) }.to_string_lossy().into_owned())
    })?;
    Ok((config, named))
}

unsafe extern "C" fn x_open(
    vfs: *mut sqlite3_vfs,
    name: *const c_char,
    f: *mut sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    // A panic must not unwind into SQLite: it becomes a refused open (the
    // real file, if it was opened, is closed again).
    // SAFETY: xOpen's own arguments, handed on (see `open`).
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unsafe { open(vfs, name, f, flags, out_flags) }))
        .unwrap_or_else(|_| {
            // SAFETY: name is null or xOpen's NUL-terminated filename.
            refused(&format!("cannot open {}: internal error", unsafe { name_text(name) }));
            // SAFETY: f is SQLite's szOsFile bytes, whose real file `open` set to closed (null
            // methods) before anything that can panic, so close_real closes it only if it opened.
            unsafe {
                close_real(pass_through::real(f));
                (*(f as *mut WaffleFile)).base.pMethods = std::ptr::null();
            }
            SQLITE_CANTOPEN
        })
}

/// # Safety
/// `name` is null or a NUL-terminated string.
unsafe fn name_text(name: *const c_char) -> String {
    if name.is_null() {
        "(temporary file)".into()
    } else {
        // SAFETY: not null, so NUL-terminated (the caller's promise).
        unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned()
    }
}

/// xOpen's work.
///
/// # Safety
/// xOpen's contract: `vfs` is ours, `f` is szOsFile (REAL_OFFSET + the base
/// VFS's) writable bytes, 8-byte aligned, for this file; `name` is null or the
/// NUL-terminated filename (with its URI parameters after it); `out_flags` is
/// what the base VFS's xOpen takes.
unsafe fn open(
    vfs: *mut sqlite3_vfs,
    name: *const c_char,
    f: *mut sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    let wf = f as *mut WaffleFile;
    // SAFETY: f is the bytes SQLite gave this file, ours to fill: WaffleFile's fields are plain
    // pointers and integers, written without reading what was there.
    unsafe {
        (*wf).base.pMethods = std::ptr::null();
        (*wf).db = std::ptr::null();
        (*wf).seq_next = u64::MAX;
        (*wf).seq_run = 0;
        (*wf).read_ahead = waffle_core::ReadAhead::new();
        (*wf).lock_level = 0;
        (*wf).shm0 = std::ptr::null();
        (*wf).wal_writes = std::ptr::null();
        (*wf).warmer = false;
        (*wf).fd = -1;
        (*wf).pending = std::ptr::null_mut();
        (*wf).refused = false;
    }
    // SAFETY: f has szOsFile = REAL_OFFSET + the base VFS's szOsFile bytes (register sized it so).
    let real = unsafe { pass_through::real(f) };
    // SAFETY: real is inside f; a null pMethods marks it not (yet) open, for close_real.
    unsafe { (*real).pMethods = std::ptr::null() };
    let is_main = flags & SQLITE_OPEN_MAIN_DB != 0 && !name.is_null();
    // A warm thread's connection joins the database it warms, whatever its URI says.
    let warming = is_main && crate::warm::joining();
    let config = if is_main && !warming {
        // SAFETY: name is xOpen's filename for a main database, not null.
        match unsafe { config_for(name) } {
            Ok(c) => Some(c),
            Err(e) => {
                // SAFETY: name is not null, so NUL-terminated.
                refused(&format!("cannot open {}: {e}", unsafe { CStr::from_ptr(name) }.to_string_lossy()));
                return SQLITE_CANTOPEN;
            }
        }
    } else {
        None
    };
    // SAFETY: vfs is ours.
    let b = unsafe { base(vfs) };
    // SAFETY: the base VFS opens its own file in real's szOsFile bytes, with SQLite's arguments.
    let rc = unsafe { (*b).xOpen.map_or(SQLITE_CANTOPEN, |x| x(b, name, real, flags, out_flags)) };
    if rc != SQLITE_OK {
        // SAFETY: real is the base VFS's file (open or, with null methods, not).
        unsafe { close_real(real) };
        return rc;
    }
    #[cfg(test)]
    crate::test_faults::maybe_panic(&crate::test_faults::PANIC_IN_OPEN, "xOpen after the base open");
    // SQLite's own descriptor of a main database: what the cache reads and names it by.
    let fd = if is_main && (warming || config.is_some()) {
        // SAFETY: real was just opened by the base VFS b.
        match unsafe { descriptor::of(real, b) } {
            Ok(found) => Some(found),
            Err(why) => {
                // SAFETY: a main database's name is not null.
                let path = unsafe { CStr::from_ptr(name) }.to_string_lossy();
                let line = format!("{path} opens without the cache: {why}");
                waffle_core::warn!(key: line, "{line}");
                None
            }
        }
    } else {
        None
    };
    if warming {
        if let Some(db) = crate::warm::take_joining() {
            // The warm's connection must have opened the very file it warms (not one renamed over it).
            let fd = fd.map(|(fd, _)| fd);
            let same = fd.and_then(|fd| descriptor::metadata(fd).ok()).is_some_and(|m| key_of(&m) == db.key);
            if !same {
                registry::detach(db, true);
                // SAFETY: real is the base VFS's file, open.
                unsafe { close_real(real) };
                return SQLITE_CANTOPEN;
            }
            crate::warm::joined_fd(fd);
            let drops =
                descriptor::drops_page_cache(&db.config, db.len_seen.load(std::sync::atomic::Ordering::Relaxed));
            if let (Some(fd), true) = (fd, drops) {
                descriptor::no_read_ahead(fd);
            }
            // SAFETY: f is ours to fill; main_close gives the Arc back (to registry::detach as a warmer).
            unsafe {
                (*wf).db = Arc::into_raw(db);
                (*wf).warmer = true;
                (*wf).fd = fd.unwrap_or(-1);
                (*wf).base.pMethods = &MAIN_METHODS;
            }
            return SQLITE_OK;
        }
    }
    let config = config.filter(|_| fd.is_some());
    let Some(config) = config else {
        // SAFETY: f is ours to fill (as above).
        unsafe { (*wf).base.pMethods = &PASS_METHODS };
        if flags & SQLITE_OPEN_WAL != 0 && !name.is_null() {
            // A WAL of a database this process caches: its writes are counted (coherence.rs).
            // SAFETY: name is not null, so NUL-terminated.
            let wal_name = unsafe { CStr::from_ptr(name) };
            if let Some(writes) = registry::wal_writes_of(Path::new(&*wal_name.to_string_lossy())) {
                // SAFETY: f is ours to fill; wal_close gives the Arc back.
                unsafe {
                    (*wf).wal_writes = Arc::into_raw(writes);
                    (*wf).base.pMethods = &file::WAL_METHODS;
                }
            }
        }
        return SQLITE_OK;
    };
    // SAFETY: a main database's name is not null (is_main), so NUL-terminated.
    let path_text = unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned();
    let (fd, len) = fd.expect("config is kept only with a descriptor");
    // SAFETY: name is xOpen's filename for a main database; out_flags is null or what the base VFS set.
    let read_only = unsafe { opened_read_only(name, flags, out_flags) };
    // SAFETY: as above.
    let stats_uri = unsafe { crate::stats_file::path_of(name) };
    let (config, uri_params) = config;
    // Before the pager reads the header: a read before the advice defeats it (descriptor.rs).
    // An ATTACH's settings are its main database's, known at the attach: corrected there.
    let no_read_ahead = descriptor::drops_page_cache(&config, len);
    if no_read_ahead {
        descriptor::no_read_ahead(fd);
    }
    // Whose file this is, SQLite says next (opener.rs): the cache is attached then.
    let pending = Pending { config, uri_params, stats_uri, path: path_text.into(), read_only, fd, no_read_ahead };
    // SAFETY: f is ours to fill; the pending state is taken by opener::resolve or main_close.
    unsafe {
        (*wf).pending = Box::into_raw(Box::new(pending));
        (*wf).base.pMethods = &MAIN_METHODS;
    }
    SQLITE_OK
}

/// Whether SQLite opened the database read-only: `mode=ro`, a file it could
/// only open for reading, or `immutable=1` (which the pager applies after
/// xOpen, so only the URI says it). Nothing is then written beside it.
///
/// # Safety
/// `name` is xOpen's (non-null) filename for a main database; `out_flags` is null or xOpen's out-flags.
unsafe fn opened_read_only(name: *const c_char, flags: c_int, out_flags: *const c_int) -> bool {
    // SAFETY: out_flags is null or set by the base VFS's xOpen (the caller's promise).
    let out = if out_flags.is_null() { 0 } else { unsafe { *out_flags } };
    let api = crate::api::installed();
    // SAFETY: name is xOpen's filename, as sqlite3_uri_parameter wants; the key is NUL-terminated.
    let v = unsafe { (api.uri_parameter)(name, c"immutable".as_ptr()) };
    let immutable = !v.is_null() && {
        // SAFETY: a non-null value is a NUL-terminated string inside name's URI block.
        let text = unsafe { CStr::from_ptr(v) }.to_string_lossy().to_ascii_lowercase();
        matches!(text.trim(), "1" | "true" | "yes" | "on")
    };
    (flags | out) & SQLITE_OPEN_READONLY != 0 || immutable
}

/// Closes the real file if it is open (non-null methods) and marks it closed.
///
/// # Safety
/// `real` is the real-file part of a file of ours: opened by the base VFS, or with null methods.
unsafe fn close_real(real: *mut sqlite3_file) {
    // SAFETY: the caller's promise; non-null methods are the base VFS's, for the file it opened.
    unsafe {
        if !(*real).pMethods.is_null() {
            if let Some(x) = (*(*real).pMethods).xClose {
                x(real);
            }
            (*real).pMethods = std::ptr::null();
        }
    }
}

// ---- pass-through to the base VFS ----
//
// SQLite calls each with the `waffle` VFS (so base(vfs) is the base VFS) and
// with the arguments of that method, passed on unchanged: the base VFS's
// method gets the contract SQLite gave ours. Each SAFETY comment below says
// "pass-through" for this.

unsafe extern "C" fn x_delete(vfs: *mut sqlite3_vfs, name: *const c_char, sync_dir: c_int) -> c_int {
    // SAFETY: pass-through (see above).
    unsafe {
        let b = base(vfs);
        (*b).xDelete.map_or(SQLITE_ERROR, |x| x(b, name, sync_dir))
    }
}

unsafe extern "C" fn x_access(vfs: *mut sqlite3_vfs, name: *const c_char, flags: c_int, out: *mut c_int) -> c_int {
    // SAFETY: pass-through (see above).
    unsafe {
        let b = base(vfs);
        (*b).xAccess.map_or(SQLITE_ERROR, |x| x(b, name, flags, out))
    }
}

unsafe extern "C" fn x_full_pathname(vfs: *mut sqlite3_vfs, name: *const c_char, n: c_int, out: *mut c_char) -> c_int {
    // SAFETY: pass-through (see above).
    unsafe {
        let b = base(vfs);
        (*b).xFullPathname.map_or(SQLITE_ERROR, |x| x(b, name, n, out))
    }
}

unsafe extern "C" fn x_dl_open(vfs: *mut sqlite3_vfs, name: *const c_char) -> *mut c_void {
    // SAFETY: pass-through (see above).
    unsafe {
        let b = base(vfs);
        (*b).xDlOpen.map_or(std::ptr::null_mut(), |x| x(b, name))
    }
}

unsafe extern "C" fn x_dl_error(vfs: *mut sqlite3_vfs, n: c_int, out: *mut c_char) {
    // SAFETY: pass-through (see above).
    unsafe {
        let b = base(vfs);
        if let Some(x) = (*b).xDlError {
            x(b, n, out)
        }
    }
}

unsafe extern "C" fn x_dl_sym(vfs: *mut sqlite3_vfs, h: *mut c_void, sym: *const c_char) -> sqlite3_syscall_ptr {
    // SAFETY: pass-through (see above).
    unsafe {
        let b = base(vfs);
        (*b).xDlSym.and_then(|x| x(b, h, sym))
    }
}

unsafe extern "C" fn x_dl_close(vfs: *mut sqlite3_vfs, h: *mut c_void) {
    // SAFETY: pass-through (see above).
    unsafe {
        let b = base(vfs);
        if let Some(x) = (*b).xDlClose {
            x(b, h)
        }
    }
}

unsafe extern "C" fn x_randomness(vfs: *mut sqlite3_vfs, n: c_int, out: *mut c_char) -> c_int {
    // SAFETY: pass-through (see above).
    unsafe {
        let b = base(vfs);
        (*b).xRandomness.map_or(0, |x| x(b, n, out))
    }
}

unsafe extern "C" fn x_sleep(vfs: *mut sqlite3_vfs, us: c_int) -> c_int {
    // SAFETY: pass-through (see above).
    unsafe {
        let b = base(vfs);
        (*b).xSleep.map_or(0, |x| x(b, us))
    }
}

unsafe extern "C" fn x_current_time(vfs: *mut sqlite3_vfs, out: *mut f64) -> c_int {
    // SAFETY: pass-through (see above).
    unsafe {
        let b = base(vfs);
        (*b).xCurrentTime.map_or(SQLITE_ERROR, |x| x(b, out))
    }
}

unsafe extern "C" fn x_get_last_error(vfs: *mut sqlite3_vfs, n: c_int, out: *mut c_char) -> c_int {
    // SAFETY: pass-through (see above).
    unsafe {
        let b = base(vfs);
        (*b).xGetLastError.map_or(0, |x| x(b, n, out))
    }
}

unsafe extern "C" fn x_current_time_int64(vfs: *mut sqlite3_vfs, out: *mut i64) -> c_int {
    // SAFETY: pass-through (see above).
    unsafe {
        let b = base(vfs);
        if (*b).iVersion < 2 {
            return SQLITE_ERROR;
        }
        (*b).xCurrentTimeInt64.map_or(SQLITE_ERROR, |x| x(b, out))
    }
}

unsafe extern "C" fn x_set_system_call(vfs: *mut sqlite3_vfs, name: *const c_char, p: sqlite3_syscall_ptr) -> c_int {
    // SAFETY: pass-through (see above).
    unsafe {
        let b = base(vfs);
        if (*b).iVersion < 3 {
            return SQLITE_NOTFOUND;
        }
        (*b).xSetSystemCall.map_or(SQLITE_NOTFOUND, |x| x(b, name, p))
    }
}

unsafe extern "C" fn x_get_system_call(vfs: *mut sqlite3_vfs, name: *const c_char) -> sqlite3_syscall_ptr {
    // SAFETY: pass-through (see above).
    unsafe {
        let b = base(vfs);
        if (*b).iVersion < 3 {
            return None;
        }
        (*b).xGetSystemCall.and_then(|x| x(b, name))
    }
}

unsafe extern "C" fn x_next_system_call(vfs: *mut sqlite3_vfs, name: *const c_char) -> *const c_char {
    // SAFETY: pass-through (see above).
    unsafe {
        let b = base(vfs);
        if (*b).iVersion < 3 {
            return std::ptr::null();
        }
        (*b).xNextSystemCall.map_or(std::ptr::null(), |x| x(b, name))
    }
}
