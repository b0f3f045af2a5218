//! A SQLite connection of waffle's own (the warm thread's: warm.rs), opened
//! with the routines the VFS was registered with, so the extension drives
//! the host's SQLite as the host's own code would.

use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_int, c_void};
use std::path::Path;

use crate::api::{self, Sql};
use crate::ffi::SQLITE_OK;

const SQLITE_ROW: c_int = 100;
const SQLITE_DONE: c_int = 101;
const SQLITE_OPEN_READONLY: c_int = 0x0000_0001;
const SQLITE_OPEN_READWRITE: c_int = 0x0000_0002;
/// SQLite copies a bound value (SQLITE_TRANSIENT).
const SQLITE_TRANSIENT: isize = -1;
/// Rows one query may return (sqlite_schema lookups: a schema has far fewer).
const MAX_ROWS: usize = 100_000;

/// A failed call: SQLite's result code and message.
#[derive(Clone, Debug)]
pub struct SqlError {
    pub code: c_int,
    pub message: String,
}

impl SqlError {
    /// Another connection holds a lock this one needs (SQLITE_BUSY, SQLITE_LOCKED).
    pub fn is_busy(&self) -> bool {
        matches!(self.code & 0xff, 5 | 6)
    }
}

impl std::fmt::Display for SqlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for SqlError {}

/// One open connection; used by one thread at a time, closed on drop.
pub struct Conn {
    db: *mut c_void,
    sql: Sql,
}

// SAFETY: a connection moves to the thread that uses it and is used by that thread alone;
// SQLite connections may change threads when SQLite is thread-safe (checked in `open`).
unsafe impl Send for Conn {}

impl Conn {
    /// Opens `path` through the VFS named `vfs`, creating nothing: read-write
    /// (a WAL read transaction may need to write the wal-index), or read-only
    /// when `read_only` (a file this process may not write).
    pub fn open(path: &Path, vfs: &CStr, read_only: bool) -> Result<Conn, SqlError> {
        let sql = api::installed().sql;
        let refuse = |message: &str| SqlError { code: crate::ffi::SQLITE_ERROR, message: message.into() };
        // SAFETY: sqlite3_threadsafe takes nothing.
        if unsafe { (sql.threadsafe)() } == 0 {
            return Err(refuse("this SQLite is built without thread support (SQLITE_THREADSAFE=0)"));
        }
        let name = CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| refuse("a path with a NUL byte"))?;
        let mut db = std::ptr::null_mut();
        let flags = if read_only { SQLITE_OPEN_READONLY } else { SQLITE_OPEN_READWRITE };
        // SAFETY: NUL-terminated name and VFS name; db receives the handle (set even on failure, or null).
        let rc = unsafe { (sql.open_v2)(name.as_ptr(), &mut db, flags, vfs.as_ptr()) };
        let conn = Conn { db, sql };
        if rc != SQLITE_OK {
            return Err(SqlError { code: rc, message: format!("cannot open {}: {}", path.display(), conn.errmsg()) });
        }
        Ok(conn)
    }

    /// How long a statement waits for a lock another connection holds.
    pub fn busy_timeout(&self, ms: c_int) {
        // SAFETY: an open connection.
        unsafe { (self.sql.busy_timeout)(self.db, ms) };
    }

    fn errmsg(&self) -> String {
        if self.db.is_null() {
            return "out of memory".into();
        }
        // SAFETY: an open (or failed-open, not yet closed) connection; the message is NUL-terminated.
        unsafe { CStr::from_ptr((self.sql.errmsg)(self.db)) }.to_string_lossy().into_owned()
    }

    /// Runs one statement to its end, binding `params` as text to ?1, ?2, ...
    /// and handing each row to `row` (which reads its columns).
    pub fn query(&self, statement: &str, params: &[&str], mut row: impl FnMut(&Row<'_>)) -> Result<(), SqlError> {
        let fail = |code: c_int, what: &str| SqlError { code, message: format!("{statement}: {what}") };
        let text = CString::new(statement).map_err(|_| fail(crate::ffi::SQLITE_ERROR, "a NUL byte"))?;
        let mut stmt = std::ptr::null_mut();
        // SAFETY: an open connection, NUL-terminated text (-1: up to the NUL), stmt receives the statement.
        let rc = unsafe { (self.sql.prepare_v2)(self.db, text.as_ptr(), -1, &mut stmt, std::ptr::null_mut()) };
        if rc != SQLITE_OK || stmt.is_null() {
            return Err(fail(rc, &self.errmsg()));
        }
        let stmt = Stmt { stmt, sql: self.sql };
        for (i, p) in params.iter().enumerate() {
            // SAFETY: a prepared statement; SQLite copies the bytes (TRANSIENT), of the length given.
            let rc = unsafe {
                (self.sql.bind_text)(
                    stmt.stmt,
                    i as c_int + 1,
                    p.as_ptr() as *const c_char,
                    p.len() as c_int,
                    SQLITE_TRANSIENT,
                )
            };
            if rc != SQLITE_OK {
                return Err(fail(rc, &format!("binding ?{}: {}", i + 1, self.errmsg())));
            }
        }
        for _ in 0..MAX_ROWS {
            // SAFETY: a prepared statement of this connection.
            match unsafe { (self.sql.step)(stmt.stmt) } {
                SQLITE_ROW => row(&Row { stmt: &stmt }),
                SQLITE_DONE => return Ok(()),
                rc => return Err(fail(rc, &self.errmsg())),
            }
        }
        Err(fail(crate::ffi::SQLITE_ERROR, &format!("more than {MAX_ROWS} rows")))
    }

    /// Runs one statement, ignoring its rows.
    pub fn exec(&self, statement: &str) -> Result<(), SqlError> {
        self.query(statement, &[], |_| {})
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        if !self.db.is_null() {
            // SAFETY: our connection, closed once; its statements were finalized (Stmt's drop).
            unsafe { (self.sql.close)(self.db) };
        }
    }
}

struct Stmt {
    stmt: *mut c_void,
    sql: Sql,
}

impl Drop for Stmt {
    fn drop(&mut self) {
        // SAFETY: a prepared statement, finalized once.
        unsafe { (self.sql.finalize)(self.stmt) };
    }
}

/// The current row of a running statement.
pub struct Row<'a> {
    stmt: &'a Stmt,
}

impl Row<'_> {
    pub fn int64(&self, col: c_int) -> i64 {
        // SAFETY: a statement that has a row.
        unsafe { (self.stmt.sql.column_int64)(self.stmt.stmt, col) }
    }

    pub fn text(&self, col: c_int) -> String {
        // SAFETY: a statement that has a row; the text is NUL-terminated (or null for NULL), valid until the next step.
        let p = unsafe { (self.stmt.sql.column_text)(self.stmt.stmt, col) };
        if p.is_null() {
            return String::new();
        }
        // SAFETY: as above.
        unsafe { CStr::from_ptr(p as *const c_char) }.to_string_lossy().into_owned()
    }
}
