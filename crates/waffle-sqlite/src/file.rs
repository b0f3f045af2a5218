//! The methods of a cached main database file and of its WAL (the header
//! they work on and the plain pass-through methods are in pass_through.rs).
//!
//! The main database file goes through the cache: whole-page reads are served
//! by [`PageCache`](waffle_core::PageCache), writes reach the real file first
//! and then update the cache. Locks and the WAL's shared-memory locks pass
//! through, and tell [`Coherence`](crate::coherence) when a read transaction
//! starts, so that what other writers changed is forgotten before a page of
//! it is served. Every other file (journals, WAL, temp files) and every other
//! method passes straight through.

use std::os::raw::{c_char, c_int, c_void};
use std::os::unix::io::RawFd;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use waffle_core::backing::Backing;

use crate::coherence::{FileSig, Forget, Frames};
use crate::descriptor;
use crate::ffi::*;
use crate::open_db::OpenDb;
use crate::pass_through::*;
use crate::registry;
use crate::wal_index;

/// Consecutive page reads (after the first) that make a handle a sequential scanner.
const SEQUENTIAL_AFTER_PAGES: u32 = 3;
/// A forward step of at most this many pages still counts as sequential: a
/// b-tree scan skips the interior pages between its leaves (SQLite holds them).
const SEQUENTIAL_GAP_PAGES: u64 = 8;

/// # Safety
/// `f` is ours (see "the main database file" below); the reference is not kept past the callback.
unsafe fn db<'a>(f: *mut sqlite3_file) -> Option<&'a OpenDb> {
    // SAFETY: f is ours (the caller's promise).
    let p = unsafe { (*(f as *mut WaffleFile)).db };
    // SAFETY: a non-null db is xOpen's Arc::into_raw, alive until main_close takes it back.
    (!p.is_null()).then(|| unsafe { &*p })
}

/// Turns the database's cache off for good (pass-through), saying why once.
fn trip(db: &OpenDb, why: &str) {
    let _ = catch_unwind(AssertUnwindSafe(|| db.cache.trip(&format!("{} ({})", why, db.path.display()))));
}

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
    xLock: Some(main_lock),
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
        trip(db, &format!("internal error updating the cache after a write at offset {offset}"));
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
            trip(db, &format!("internal error updating the cache after a truncation to {size} bytes"));
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
    if op == SQLITE_FCNTL_PRAGMA {
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

// ---- other writers (see coherence.rs) ----

impl Forget for waffle_core::PageCache {
    fn forget_pages(&self, pages: &[u64]) {
        self.foreign_pages(pages);
    }
    fn forget_all(&self) {
        self.foreign_reset();
    }
    fn forget_from(&self, len: u64) {
        if let Some(first_gone) = len.checked_div(self.page_bytes() as u64) {
            self.foreign_truncate(first_gone);
        }
    }
    fn page_bytes(&self) -> usize {
        waffle_core::PageCache::page_bytes(self)
    }
}

/// The `-wal` file of an open database, for the page numbers of its frames,
/// and SQLite's descriptor of the database file, for its length.
struct WalFrames<'a>(&'a OpenDb, RawFd);

impl Frames for WalFrames<'_> {
    fn pages(&self, salt: [u8; 8], page_bytes: u32, first: u32, last: u32) -> Option<Vec<u32>> {
        wal_index::frame_pages(&self.0.wal_path, salt, page_bytes, first, last)
    }
    fn db_len(&self) -> Option<u64> {
        descriptor::metadata(self.1).ok().map(|m| m.len())
    }
}

/// Runs a coherence step under the database's coherence lock. A panic inside
/// means the cache cannot vouch for what it holds: it forgets everything.
fn coherent(db: &OpenDb, step: impl FnOnce(&mut crate::coherence::Coherence)) {
    let ok = catch_unwind(AssertUnwindSafe(|| {
        let mut c = db.coherence.lock().unwrap_or_else(|e| e.into_inner());
        step(&mut c);
    }));
    if ok.is_err() {
        trip(db, "internal error while checking for other writers");
    }
}

/// The database file as a cheap check sees it: header bytes 24..40, size, times, inode.
fn file_sig(db: &OpenDb, fd: RawFd) -> Option<FileSig> {
    use std::os::unix::fs::MetadataExt;
    // pread on SQLite's descriptor, not through its VFS: SQLite's I/O (and its
    // tests' counted I/O errors) sees exactly the reads it makes itself.
    let mut header = [0u8; 16];
    let n = descriptor::read_at(fd, &mut header, 24).ok()?;
    header[n..].fill(0);
    let m = descriptor::metadata(fd).ok()?;
    db.len_seen.store(m.len(), std::sync::atomic::Ordering::Release);
    Some(FileSig {
        header,
        size: m.size(),
        mtime_ns: m.mtime() * 1_000_000_000 + m.mtime_nsec(),
        ctime_ns: m.ctime() * 1_000_000_000 + m.ctime_nsec(),
        ino: m.ino(),
        dev: m.dev(),
    })
}

/// The signature to record when this process lets go of its last lock: the
/// file's, but with the header as the cache last saw page 1 (as SQLite's pager
/// keeps the header it last read or wrote, not what is on disk at unlock), so
/// a header changed behind a held lock (exclusive mode) is still noticed.
fn recorded_sig(db: &OpenDb, fd: RawFd) -> Option<FileSig> {
    let mut sig = file_sig(db, fd)?;
    if let Some(seen) = *db.header_seen.lock().unwrap_or_else(|e| e.into_inner()) {
        sig.header = seen;
    }
    Some(sig)
}

/// Page 1 passed through the cache: remember its header bytes 24..40.
fn saw_page_one(db: &OpenDb, page: &[u8]) {
    if page.len() >= 40 {
        let mut h = [0u8; 16];
        h.copy_from_slice(&page[24..40]);
        *db.header_seen.lock().unwrap_or_else(|e| e.into_inner()) = Some(h);
    }
}

/// The wal-index as this handle's mapping shows it (None: not mapped or not whole).
///
/// # Safety
/// `f` is ours.
unsafe fn wal_view(f: *mut sqlite3_file) -> Option<wal_index::WalView> {
    // SAFETY: f is ours.
    let shm0 = unsafe { (*(f as *mut WaffleFile)).shm0 };
    // SAFETY: region 0 as SQLite mapped it for this handle (32 KiB, page aligned; main_shm_map
    // keeps it only when at least the 136 bytes read_view reads), cleared when unmapped.
    (!shm0.is_null()).then(|| unsafe { wal_index::read_view(shm0) }).flatten()
}

unsafe extern "C" fn main_lock(f: *mut sqlite3_file, level: c_int) -> c_int {
    let wf = f as *mut WaffleFile;
    // SAFETY: f is ours.
    if unsafe { level == SQLITE_LOCK_EXCLUSIVE && (*wf).lock_level == SQLITE_LOCK_SHARED && !(*wf).warmer } {
        // SHARED straight to EXCLUSIVE: SQLite wants the file alone (leaving WAL mode, a last
        // close's checkpoint, locking_mode=EXCLUSIVE, a hot journal's rollback) and asks once,
        // without the busy handler. In WAL mode a connection keeps SHARED for as long as it is
        // open, so a warm's or reload's connection, open between its pieces, would refuse what
        // plain SQLite, alone on the file, grants: the job gives way first (it stops, its
        // connection closed; a warm's state says cancelled). Explorer seed 45782153.
        // SAFETY: f is ours.
        if let Some(db) = unsafe { db(f) } {
            db.warm.stop_and_wait();
        }
    }
    // A writer of this process first lets a warm's or reload's read transaction end (warm.rs,
    // PieceGate): it never meets one as SQLITE_BUSY. The warm's own connections never write.
    // SAFETY: f is ours.
    let gate =
        unsafe { (level >= SQLITE_LOCK_PENDING && !(*wf).warmer).then(|| db(f)).flatten() }.map(|db| &db.warm.gate);
    if let Some(g) = gate {
        g.writer_enter();
    }
    // SAFETY: f is ours.
    let rc = unsafe { pass_lock(f, level) };
    if let Some(g) = gate {
        g.writer_leave();
    }
    // SAFETY: f is ours.
    if rc == SQLITE_OK && level > unsafe { (*wf).lock_level } {
        // SAFETY: f is ours.
        let from = unsafe { std::mem::replace(&mut (*wf).lock_level, level) };
        // SAFETY: f is ours.
        let (db, fd) = unsafe { (db(f), (*wf).fd) };
        if let (Some(db), true) = (db, from < SQLITE_LOCK_SHARED && level >= SQLITE_LOCK_SHARED) {
            // Before SQLite reads a page of this transaction.
            coherent(db, |c| c.on_shared(&db.cache, || file_sig(db, fd)));
            // SAFETY: f is ours.
            if unsafe { (*wf).shm0.is_null() } {
                catch_up_before_mapping(db, fd);
            }
        }
        if let (Some(db), true) = (db, level == SQLITE_LOCK_EXCLUSIVE) {
            // SAFETY: f is ours.
            let view = unsafe { wal_view(f) };
            // WAL mode (the wal-index is mapped): nobody else has the database open from here on.
            // SAFETY: f is ours.
            if unsafe { (*wf).shm0.is_null() } {
                return rc;
            }
            coherent(db, |c| c.on_exclusive(&db.cache, view, &WalFrames(db, fd)));
        }
    }
    rc
}

/// A handle that has not mapped the wal-index yet reads page 1 under SHARED
/// alone (SQLite learns from it whether the database is in WAL mode). In WAL
/// mode SHARED does not stop another process's checkpoint, and other
/// connections of ours holding SHARED prove nothing: catch up with the
/// wal-index through the mapping another handle of ours holds, if any.
fn catch_up_before_mapping(db: &OpenDb, fd: RawFd) {
    let shared = db.shm.lock().unwrap_or_else(|e| e.into_inner());
    if shared.handles == 0 {
        return;
    }
    // SAFETY: region 0 stays mapped while a handle of ours counts in `handles` (held under this lock).
    let view = unsafe { wal_index::read_view(shared.region0 as *const u8) };
    coherent(db, |c| c.on_wal_read(&db.cache, view, &WalFrames(db, fd)));
}

/// Whether the file, as an unlock from `lock_level` leaves it, is one the
/// cache can vouch for at the next open (docs/design.md, "Warm starts"). No
/// WAL may be left (a WAL's frames are not in the file, and any WAL makes
/// SQLite open the database in WAL mode). Rollback mode: yes, SHARED kept
/// every writer out since the last check. WAL mode (header bytes 18..20 are
/// 2): only from EXCLUSIVE after the exclusive lock caught up with the
/// wal-index (nobody else had the database open, so the close's checkpoint
/// and everything before it went through the cache or was caught up).
fn vouches(db: &OpenDb, fd: RawFd, lock_level: c_int) -> bool {
    let no_wal = match std::fs::metadata(&db.wal_path) {
        Ok(m) => m.len() == 0,
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
    };
    let mut versions = [0u8; 2];
    let wal_mode = match descriptor::read_at(fd, &mut versions, 18) {
        Ok(2) => versions != [1, 1],
        _ => true, // unreadable: assume the worst
    };
    let exclusive = lock_level == SQLITE_LOCK_EXCLUSIVE
        && db.coherence.lock().unwrap_or_else(|e| e.into_inner()).exclusive_caught_up();
    no_wal && (!wal_mode || exclusive)
}

unsafe extern "C" fn main_unlock(f: *mut sqlite3_file, level: c_int) -> c_int {
    let wf = f as *mut WaffleFile;
    // SAFETY: f is ours.
    let (held, fd) = unsafe { ((*wf).lock_level, (*wf).fd) };
    // SAFETY: f is ours.
    if let (Some(db), true) = (unsafe { db(f) }, held >= SQLITE_LOCK_SHARED && level < SQLITE_LOCK_SHARED) {
        // While the lock is still held: in rollback mode nobody else has written since our last check.
        let vouch = vouches(db, fd, held);
        coherent(db, |c| c.on_unlock(|| recorded_sig(db, fd), vouch));
    }
    // SAFETY: f is ours.
    if level < unsafe { (*wf).lock_level } {
        // SAFETY: f is ours.
        unsafe { (*wf).lock_level = level };
    }
    // SAFETY: f is ours.
    unsafe { pass_unlock(f, level) }
}

unsafe extern "C" fn main_shm_map(
    f: *mut sqlite3_file,
    pg: c_int,
    sz: c_int,
    extend: c_int,
    pp: *mut *mut c_void,
) -> c_int {
    // SAFETY: f is ours; SQLite's arguments, passed on unchanged.
    let rc = unsafe { pass_shm_map(f, pg, sz, extend, pp) };
    // SAFETY: pp is SQLite's out-pointer, set by the real xShmMap when it succeeded; f is ours.
    unsafe {
        let wf = f as *mut WaffleFile;
        if pg == 0 && (rc == SQLITE_OK || rc & 0xff == SQLITE_READONLY) && !(*pp).is_null() && sz >= 136 {
            if let (Some(db), true) = (db(f), (*wf).shm0.is_null()) {
                let mut shared = db.shm.lock().unwrap_or_else(|e| e.into_inner());
                shared.handles += 1;
                shared.region0 = *pp as usize;
            }
            (*wf).shm0 = *pp as *const u8;
        }
    }
    rc
}

unsafe extern "C" fn main_shm_unmap(f: *mut sqlite3_file, delete: c_int) -> c_int {
    // SAFETY: f is ours.
    let was_mapped = !std::mem::replace(unsafe { &mut (*(f as *mut WaffleFile)).shm0 }, std::ptr::null()).is_null();
    // SAFETY: f is ours.
    if let (Some(db), true) = (unsafe { db(f) }, was_mapped) {
        // Out of the count before the real unmap: nobody reads through this handle's mapping after.
        let mut shared = db.shm.lock().unwrap_or_else(|e| e.into_inner());
        shared.handles -= 1;
        if shared.handles == 0 {
            shared.region0 = 0;
        }
    }
    // SAFETY: f is ours.
    unsafe { pass_shm_unmap(f, delete) }
}

/// Read marks, the write lock, the checkpoint lock and the restart lock (every read mark but
/// the first, taken exclusively) are where WAL readers, checkpointers and
/// restarters of this process begin and end.
/// (Writers, checkpointers and restarters begin after taking a read mark.)
unsafe extern "C" fn main_shm_lock(f: *mut sqlite3_file, ofst: c_int, n: c_int, flags: c_int) -> c_int {
    // SAFETY: f is ours; SQLite's arguments, passed on unchanged.
    let Some(db) = (unsafe { db(f) }) else { return unsafe { pass_shm_lock(f, ofst, n, flags) } };
    // SAFETY: f is ours.
    let fd = unsafe { (*(f as *mut WaffleFile)).fd };
    let exclusive = flags & SQLITE_SHM_EXCLUSIVE != 0;
    let checkpoint = exclusive && ofst == WAL_CKPT_LOCK && n == 1;
    let restart = exclusive && ofst == WAL_READ_LOCK_0 + 1 && n == WAL_NREADER - 1;
    let write = exclusive && ofst == WAL_WRITE_LOCK && n == 1;
    if flags & SQLITE_SHM_UNLOCK != 0 {
        if write {
            let wrote = db.wal_writes.load(std::sync::atomic::Ordering::Acquire);
            // SAFETY: f is ours.
            coherent(db, |c| c.on_write_end(&db.cache, unsafe { wal_view(f) }, wrote, || file_sig(db, fd)));
        } else if checkpoint {
            // SAFETY: f is ours.
            coherent(db, |c| c.on_checkpoint_end(&db.cache, unsafe { wal_view(f) }, || recorded_sig(db, fd)));
        } else if restart {
            // SAFETY: f is ours.
            coherent(db, |c| c.on_restart_end(&db.cache, unsafe { wal_view(f) }));
        }
        // SAFETY: f is ours; SQLite's arguments, passed on unchanged.
        return unsafe { pass_shm_lock(f, ofst, n, flags) };
    }
    // An exclusive WAL lock (writer, checkpoint, recovery, read-mark reset) of this process
    // first lets a warm's or reload's read transaction end, as main_lock does.
    // SAFETY: f is ours.
    let gated = exclusive && flags & SQLITE_SHM_LOCK != 0 && !unsafe { (*(f as *mut WaffleFile)).warmer };
    if gated {
        db.warm.gate.writer_enter();
    }
    // SAFETY: as above.
    let rc = unsafe { pass_shm_lock(f, ofst, n, flags) };
    if gated {
        db.warm.gate.writer_leave();
    }
    if rc != SQLITE_OK || flags & SQLITE_SHM_LOCK == 0 {
        return rc;
    }
    let read_mark =
        flags & SQLITE_SHM_SHARED != 0 && n == 1 && (WAL_READ_LOCK_0..WAL_READ_LOCK_0 + WAL_NREADER).contains(&ofst);
    let frames = WalFrames(db, fd);
    if read_mark {
        // SAFETY: f is ours.
        coherent(db, |c| c.on_wal_read(&db.cache, unsafe { wal_view(f) }, &frames));
    } else if checkpoint {
        // SAFETY: f is ours.
        coherent(db, |c| c.on_checkpoint_begin(&db.cache, unsafe { wal_view(f) }, &frames));
    } else if restart {
        // SAFETY: f is ours.
        coherent(db, |c| c.on_restart_begin(&db.cache, unsafe { wal_view(f) }, &frames));
    } else if write {
        let wrote = db.wal_writes.load(std::sync::atomic::Ordering::Acquire);
        // SAFETY: f is ours.
        coherent(db, |c| c.on_write_begin(&db.cache, unsafe { wal_view(f) }, &frames, wrote));
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

/// mmap is declined so that every read of the database is seen by the cache.
unsafe extern "C" fn no_fetch(_f: *mut sqlite3_file, _off: i64, _amt: c_int, pp: *mut *mut c_void) -> c_int {
    // SAFETY: pp is SQLite's out-pointer for the mapping.
    unsafe { *pp = std::ptr::null_mut() };
    SQLITE_OK
}

unsafe extern "C" fn no_unfetch(_f: *mut sqlite3_file, _off: i64, _p: *mut c_void) -> c_int {
    SQLITE_OK
}
