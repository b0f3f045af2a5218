//! The methods of a cached main database file and of its WAL (the header
//! they work on and the plain pass-through methods are in pass_through.rs;
//! the lock methods and what they tell coherence.rs are in lock.rs).
//!
//! The main database file goes through the cache: whole-page reads are served
//! by [`PageCache`](waffle_core::PageCache), writes reach the real file first
//! and then update the cache. Locks and the WAL's shared-memory locks pass
//! through, and tell [`Coherence`](crate::coherence) when a read transaction
//! starts, so that what other writers changed is forgotten before a page of
//! it is served. Every other file (journals, WAL, temp files) and every other
//! method passes straight through.

use std::os::raw::{c_char, c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use waffle_core::backing::Backing;

use crate::ffi::*;
use crate::lock::{
    coherent, main_lock, main_shm_lock, main_shm_map, main_shm_unmap, main_unlock, recorded_sig, saw_page_one,
};
use crate::open_db::OpenDb;
use crate::opener::{self, Opener};
use crate::pass_through::*;
use crate::registry;

/// `SQLITE_FCNTL_PDB`: sqlite3BtreeOpen's hint, the file is open and its connection known (opener.rs).
const SQLITE_FCNTL_PDB: c_int = 30;

/// Consecutive page reads (after the first) that make a handle a sequential scanner.
const SEQUENTIAL_AFTER_PAGES: u32 = 3;
/// A forward step of at most this many pages still counts as sequential: a
/// b-tree scan skips the interior pages between its leaves (SQLite holds them).
const SEQUENTIAL_GAP_PAGES: u64 = 8;

/// Runs a callback body; a panic becomes an I/O error instead of unwinding into C.
fn guard(f: impl FnOnce() -> c_int) -> c_int {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(SQLITE_IOERR)
}

/// A page access: a power-of-two size SQLite uses for pages, at a multiple of it.
fn page_of(amt: c_int, offset: i64) -> Option<u64> {
    let amt = amt as i64;
    let is_page_size = (512..=65536).contains(&amt) && amt & (amt - 1) == 0;
    (is_page_size && offset >= 0 && offset % amt == 0).then(|| (offset / amt) as u64)
}

pub static MAIN_METHODS: sqlite3_io_methods = sqlite3_io_methods {
    iVersion: 3,
    xClose: Some(main_close),
    xRead: Some(main_read),
    xWrite: Some(main_write),
    xTruncate: Some(main_truncate),
    xLock: Some(main_lock_opened),
    xUnlock: Some(main_unlock),
    xFileControl: Some(main_file_control),
    xShmMap: Some(main_shm_map),
    xShmLock: Some(main_shm_lock),
    xShmUnmap: Some(main_shm_unmap),
    xFetch: Some(no_fetch),
    xUnfetch: Some(no_unfetch),
    xDeviceCharacteristics: Some(main_device_characteristics),
    ..PASS_METHODS
};

/// A WAL file of a cached database: passes through, counting writes.
pub static WAL_METHODS: sqlite3_io_methods =
    sqlite3_io_methods { iVersion: 3, xClose: Some(wal_close), xWrite: Some(wal_write), ..PASS_METHODS };

/// Whether the file may do I/O: a file still pending (a host that sent no
/// SQLITE_FCNTL_PDB) is attached now, as the main open; false if the cache
/// refused it (opener.rs said why).
///
/// # Safety
/// `f` is ours (see below).
unsafe fn opened(f: *mut sqlite3_file) -> bool {
    let wf = f as *mut WaffleFile;
    // SAFETY: f is ours.
    unsafe {
        if !(*wf).pending.is_null() {
            opener::resolve(f, Opener::Main);
        }
        !(*wf).refused
    }
}

// ---- the main database file ----
//
// SQLite calls every method with a file this VFS opened (vfs.rs) and has not
// yet closed: `f` points to a live WaffleFile with the real file right after
// it (`real`), and one connection uses a handle at a time, so nothing else
// touches the header during a call. "f is ours" below means this.

unsafe extern "C" fn main_close(f: *mut sqlite3_file) -> c_int {
    let wf = f as *mut WaffleFile;
    // SAFETY: f is ours.
    let fd = unsafe { (*wf).fd };
    // SAFETY: f is ours.
    if unsafe { (*wf).lock_level } >= SQLITE_LOCK_SHARED {
        // Closed while holding a lock (the real close releases it): account for it.
        // SAFETY: f is ours.
        if let Some(db) = unsafe { db(f) } {
            coherent(db, |c| c.on_unlock(|| recorded_sig(db, fd), false));
        }
        // SAFETY: f is ours.
        unsafe { (*wf).lock_level = 0 };
    }
    // SAFETY: f is ours; SQLite closes it once.
    let rc = unsafe { pass_close(f) };
    // SAFETY: f is ours, closing.
    unsafe { opener::drop_pending(f) };
    // SAFETY: f is ours.
    let (p, warmer) = unsafe { (std::mem::replace(&mut (*wf).db, std::ptr::null()), (*wf).warmer) };
    if !p.is_null() {
        // SAFETY: made by Arc::into_raw in xOpen; given back exactly once here.
        let db = unsafe { Arc::from_raw(p) };
        guard(|| {
            registry::detach(db, warmer);
            SQLITE_OK
        });
    }
    rc
}

unsafe extern "C" fn main_read(f: *mut sqlite3_file, buf: *mut c_void, amt: c_int, offset: i64) -> c_int {
    // The header's read at the open (100 bytes, before SQLite says whose file it is) passes through.
    // SAFETY: f is ours.
    if page_of(amt, offset).is_some() && !unsafe { opened(f) } {
        return SQLITE_IOERR_READ;
    }
    // SAFETY: f is ours.
    let (Some(db), Some(page)) = (unsafe { db(f) }, page_of(amt, offset)) else {
        // SAFETY: f is ours; SQLite's buffer, size and offset, passed on unchanged.
        return unsafe { pass_read(f, buf, amt, offset) };
    };
    if db.cache.is_fused() {
        // SAFETY: as above.
        return unsafe { pass_read(f, buf, amt, offset) };
    }
    // SAFETY: SQLite reads into buf's amt bytes (a page size, so positive), which nothing else uses during the call.
    let out = unsafe { std::slice::from_raw_parts_mut(buf as *mut u8, amt as usize) };
    let wf = f as *mut WaffleFile;
    // SAFETY: f is ours.
    let sequential = unsafe {
        let in_order = page >= (*wf).seq_next && page - (*wf).seq_next < SEQUENTIAL_GAP_PAGES;
        (*wf).seq_run = if in_order { (*wf).seq_run.saturating_add(1) } else { 0 };
        (*wf).seq_next = page + 1;
        if !in_order {
            (*wf).read_ahead.reset(); // a new run starts with a small window
        }
        (*wf).seq_run >= SEQUENTIAL_AFTER_PAGES
    };
    let rc = guard(|| {
        // SAFETY: f is ours.
        match db.with_backing(unsafe { (*wf).fd }, |file: &dyn Backing| {
            if sequential {
                // SAFETY: f is ours.
                db.cache.read_sequential(page, out, file, unsafe { &mut (*wf).read_ahead })
            } else {
                db.cache.read(page, out, file)
            }
        }) {
            Ok((n, _)) if n == out.len() => {
                if page == 0 {
                    saw_page_one(db, out);
                }
                SQLITE_OK
            }
            Ok(_) => SQLITE_IOERR_SHORT_READ,
            Err(e) => {
                waffle_core::error!(
                    "backing read of page {page} of {} failed ({e}); asking SQLite's own file",
                    db.path.display()
                );
                SQLITE_IOERR_READ
            }
        }
    });
    if rc == SQLITE_OK || rc == SQLITE_IOERR_SHORT_READ {
        return rc;
    }
    // Our own read path failed: the cache must never fail the database.
    // SAFETY: as above.
    unsafe { pass_read(f, buf, amt, offset) }
}

unsafe extern "C" fn main_write(f: *mut sqlite3_file, buf: *const c_void, amt: c_int, offset: i64) -> c_int {
    // SAFETY: f is ours.
    if !unsafe { opened(f) } {
        return SQLITE_IOERR;
    }
    // The write reaches the file first, always.
    // SAFETY: f is ours; SQLite's buffer, size and offset, passed on unchanged.
    let rc = unsafe { pass_write(f, buf, amt, offset) };
    // SAFETY: f is ours.
    let Some(db) = (unsafe { db(f) }) else { return rc };
    let updated = guard(|| {
        // SAFETY: SQLite writes buf's amt bytes, which it does not change during the call.
        let bytes = unsafe { std::slice::from_raw_parts(buf as *const u8, amt as usize) };
        match page_of(amt, offset) {
            Some(page) if rc == SQLITE_OK => {
                if page == 0 {
                    saw_page_one(db, bytes);
                }
                db.cache.wrote(page, bytes)
            }
            // A failed or partial-page write: whatever the file holds now, the tiers forget it.
            _ => invalidate_range(db, offset, amt as i64),
        }
        SQLITE_OK
    });
    if updated != SQLITE_OK {
        // The file has the write; the tiers may still hold the old bytes.
        db.trip(&format!("internal error updating the cache after a write at offset {offset}"));
    }
    rc
}

fn invalidate_range(db: &OpenDb, offset: i64, len: i64) {
    let page_bytes = db.cache.page_bytes() as i64;
    if page_bytes == 0 || len <= 0 {
        return; // nothing was ever cached by page
    }
    let first = offset.max(0) / page_bytes;
    let last = (offset.max(0) + len - 1) / page_bytes;
    for page in first..=last {
        db.cache.invalidate(page as u64);
    }
}

unsafe extern "C" fn main_truncate(f: *mut sqlite3_file, size: i64) -> c_int {
    // SAFETY: f is ours.
    if !unsafe { opened(f) } {
        return SQLITE_IOERR;
    }
    // SAFETY: f is ours.
    let rc = unsafe { pass_truncate(f, size) };
    // SAFETY: f is ours.
    if let Some(db) = unsafe { db(f) } {
        let updated = guard(|| {
            let page_bytes = db.cache.page_bytes() as i64;
            if page_bytes > 0 {
                // Also the partial last page: its tail is gone from the file.
                db.cache.truncated((size.max(0) / page_bytes) as u64);
            }
            SQLITE_OK
        });
        if updated != SQLITE_OK {
            db.trip(&format!("internal error updating the cache after a truncation to {size} bytes"));
        }
    }
    rc
}

unsafe extern "C" fn main_file_control(f: *mut sqlite3_file, op: c_int, arg: *mut c_void) -> c_int {
    // A panic while answering a PRAGMA is an SQL error, never an unwind into SQLite.
    // SAFETY: xFileControl's own arguments, handed on.
    catch_unwind(AssertUnwindSafe(|| unsafe { file_control(f, op, arg) })).unwrap_or(SQLITE_ERROR)
}

/// # Safety
/// xFileControl's contract: `f` is ours, and `arg` is what SQLite passes with `op`.
unsafe fn file_control(f: *mut sqlite3_file, op: c_int, arg: *mut c_void) -> c_int {
    // SAFETY: f is ours.
    if op == SQLITE_FCNTL_PDB && unsafe { !(*(f as *mut WaffleFile)).pending.is_null() } {
        // SAFETY: f is ours; with this op, arg is the opening connection (a sqlite3**), on its thread.
        let who = match unsafe { opener::main_file_of(f, arg) } {
            None => Opener::Main,
            // SAFETY: main is the connection's main database file, open (SQLite handed it).
            Some(main) if std::ptr::eq(unsafe { (*main).pMethods }, &MAIN_METHODS) => {
                // SAFETY: a file whose methods are ours is a main database file of this VFS, open.
                Opener::Attach { main: unsafe { opener::settings_of(main) } }
            }
            Some(_) => Opener::Attach { main: None },
        };
        // SAFETY: f is ours.
        unsafe { opener::resolve(f, who) };
    }
    if op == SQLITE_FCNTL_PRAGMA {
        // A PRAGMA before any lock, on a host that sent no SQLITE_FCNTL_PDB: the file attaches now.
        // SAFETY: f is ours.
        unsafe { opened(f) };
        #[cfg(test)]
        crate::test_faults::maybe_panic(&crate::test_faults::PANIC_IN_FILE_CONTROL, "xFileControl(PRAGMA)");
        // SAFETY: f is ours.
        if let Some(db) = unsafe { db(f) } {
            let args = arg as *mut *mut c_char;
            // SAFETY: with SQLITE_FCNTL_PRAGMA, arg is a char*[3] whose [1] is the pragma's name (NUL-terminated).
            let name = unsafe { std::ffi::CStr::from_ptr(*args.add(1)) }.to_string_lossy().to_ascii_lowercase();
            // SAFETY: [2] is the pragma's argument (NUL-terminated), or null when it has none.
            let value =
                unsafe { (*args.add(2)).as_ref().map(|p| std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()) };
            if let Some((rc, text)) = crate::pragma::handle(db, &name, value.as_deref()) {
                if let Some(text) = text {
                    // SAFETY: [0] takes the result text, from sqlite3_malloc (SQLite frees it).
                    unsafe { *args = crate::api::sqlite_string(&text) };
                }
                return rc;
            }
        }
    }
    // SAFETY: f is ours; op and arg are SQLite's, passed on unchanged.
    unsafe { pass_file_control(f, op, arg) }
}

// ---- the WAL file of a cached database ----
//
// SQLite calls these with a WAL file this VFS opened: "f is ours" as above.

unsafe extern "C" fn wal_write(f: *mut sqlite3_file, buf: *const c_void, amt: c_int, off: i64) -> c_int {
    // SAFETY: f is ours; SQLite's arguments, passed on unchanged.
    let rc = unsafe { pass_write(f, buf, amt, off) };
    // SAFETY: f is ours.
    let writes = unsafe { (*(f as *mut WaffleFile)).wal_writes };
    if !writes.is_null() {
        // SAFETY: a non-null wal_writes is xOpen's Arc::into_raw, alive until wal_close takes it back.
        unsafe { (*writes).fetch_add(1, std::sync::atomic::Ordering::AcqRel) };
    }
    rc
}

unsafe extern "C" fn wal_close(f: *mut sqlite3_file) -> c_int {
    // SAFETY: f is ours; SQLite closes it once.
    let rc = unsafe { pass_close(f) };
    // SAFETY: f is ours.
    let p = unsafe { std::mem::replace(&mut (*(f as *mut WaffleFile)).wal_writes, std::ptr::null()) };
    if !p.is_null() {
        // SAFETY: made by Arc::into_raw in xOpen; given back exactly once here.
        drop(unsafe { Arc::from_raw(p) });
    }
    rc
}

/// The real file's characteristics but batch-atomic writes: a failed batch
/// (F2FS undoes it in the filesystem) would leave L1 holding pages the file
/// never kept, so SQLite journals as usual instead.
unsafe extern "C" fn main_device_characteristics(f: *mut sqlite3_file) -> c_int {
    // SAFETY: f is ours.
    unsafe { pass_device_characteristics(f) & !SQLITE_IOCAP_BATCH_ATOMIC }
}

/// xLock: a pending file attaches first (see [`opened`]); a refused one cannot be locked,
/// so the statement that wanted it fails ("unable to open database file").
unsafe extern "C" fn main_lock_opened(f: *mut sqlite3_file, level: c_int) -> c_int {
    // SAFETY: f is ours.
    if !unsafe { opened(f) } {
        return SQLITE_CANTOPEN;
    }
    // SAFETY: f is ours; SQLite's level, passed on.
    unsafe { main_lock(f, level) }
}

/// mmap is declined so that every read of the database is seen by the cache.
unsafe extern "C" fn no_fetch(_f: *mut sqlite3_file, _off: i64, _amt: c_int, pp: *mut *mut c_void) -> c_int {
    // SAFETY: pp is SQLite's out-pointer for the mapping.
    unsafe { *pp = std::ptr::null_mut() };
    SQLITE_OK
}

unsafe extern "C" fn no_unfetch(_f: *mut sqlite3_file, _off: i64, _p: *mut c_void) -> c_int {
    SQLITE_OK
}
