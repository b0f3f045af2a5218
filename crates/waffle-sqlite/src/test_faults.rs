//! Panics the unit tests place inside callbacks SQLite calls (compiled in
//! tests only), to prove that each callback turns a panic into an error code
//! instead of unwinding into SQLite: an unwind out of an `extern "C"` function
//! aborts the whole host process.

//!
//! Each fault is the setting thread's own: SQLite calls the callbacks on the
//! thread that made the call, and a process-wide flag also panicked a
//! parallel test's open (session 19: `stats_file`'s test met "a panic in
//! xOpen" meant for this module's).

use std::cell::Cell;
use std::thread::LocalKey;

thread_local! {
    /// `xOpen` panics after the base VFS opened the file (which must be closed again).
    pub static PANIC_IN_OPEN: Cell<bool> = const { Cell::new(false) };
    /// `xFileControl` panics while answering a PRAGMA.
    pub static PANIC_IN_FILE_CONTROL: Cell<bool> = const { Cell::new(false) };
}

pub fn maybe_panic(flag: &'static LocalKey<Cell<bool>>, what: &str) {
    if flag.with(Cell::get) {
        panic!("test: a panic in {what}");
    }
}

#[cfg(feature = "linked")]
mod tests {
    use super::*;
    use libsqlite3_sys as ffi;
    use std::ffi::{CStr, CString};
    use std::ptr;

    /// Opens `uri` through the waffle VFS; the result code and the handle (to close, even on failure).
    fn open(uri: &str) -> (i32, *mut ffi::sqlite3) {
        let uri = CString::new(uri).unwrap();
        let vfs = crate::VFS_NAME;
        let mut db = ptr::null_mut();
        let flags = ffi::SQLITE_OPEN_READWRITE | ffi::SQLITE_OPEN_CREATE | ffi::SQLITE_OPEN_URI;
        // SAFETY: valid C strings and an out pointer; the handle is closed by the caller.
        let rc = unsafe { ffi::sqlite3_open_v2(uri.as_ptr(), &mut db, flags, vfs.as_ptr()) };
        (rc, db)
    }

    fn exec(db: *mut ffi::sqlite3, sql: &str) -> (i32, String) {
        let sql = CString::new(sql).unwrap();
        let mut err = ptr::null_mut();
        // SAFETY: db is open; err is freed with sqlite3_free.
        let rc = unsafe { ffi::sqlite3_exec(db, sql.as_ptr(), None, ptr::null_mut(), &mut err) };
        let text = if err.is_null() {
            String::new()
        } else {
            // SAFETY: err is a NUL-terminated message from sqlite3_malloc.
            let t = unsafe { CStr::from_ptr(err) }.to_string_lossy().into_owned();
            // SAFETY: allocated by SQLite for us to free.
            unsafe { ffi::sqlite3_free(err as *mut std::ffi::c_void) };
            t
        };
        (rc, text)
    }

    fn close(db: *mut ffi::sqlite3) {
        // SAFETY: a handle from sqlite3_open_v2 (null is a no-op), closed once.
        assert_eq!(unsafe { ffi::sqlite3_close(db) }, ffi::SQLITE_OK);
    }

    /// Without the guards this test does not fail: its process aborts.
    #[test]
    fn a_panic_in_xopen_or_in_a_pragma_is_an_error_code_and_the_process_goes_on() {
        crate::register().unwrap();
        let dir = std::env::temp_dir().join(format!("waffle-test-faults-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let uri = format!("file:{}?waffle_local=1MiB", dir.join("t.db").display());

        PANIC_IN_OPEN.with(|f| f.set(true));
        let (rc, db) = open(&uri);
        PANIC_IN_OPEN.with(|f| f.set(false));
        close(db);
        assert_eq!(rc, ffi::SQLITE_CANTOPEN, "a panic in xOpen refuses the open");

        let (rc, db) = open(&uri);
        assert_eq!(rc, ffi::SQLITE_OK, "the next open works");
        assert_eq!(exec(db, "CREATE TABLE t(x); INSERT INTO t VALUES (1);").0, ffi::SQLITE_OK);
        PANIC_IN_FILE_CONTROL.with(|f| f.set(true));
        let (rc, text) = exec(db, "PRAGMA waffle_stats");
        PANIC_IN_FILE_CONTROL.with(|f| f.set(false));
        assert_eq!(rc, ffi::SQLITE_ERROR, "a panic in a PRAGMA is an SQL error: {text}");
        let (rc, text) = exec(db, "PRAGMA waffle_stats; SELECT x FROM t");
        assert_eq!(rc, ffi::SQLITE_OK, "the connection goes on: {text}");
        close(db);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
