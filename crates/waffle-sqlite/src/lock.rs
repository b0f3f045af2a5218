//! The lock methods of a cached main database file (xLock, xUnlock and the
//! WAL's shared memory: xShmMap, xShmLock, xShmUnmap), and what they tell
//! coherence.rs: before a transaction reads, what other writers changed is
//! forgotten (file signature; wal-index via wal_index.rs). Locks pass through
//! to the real file (pass_through.rs); a writer of this process first lets a
//! background job's read transaction end (job.rs, PieceGate), and a
//! connection that wants the file alone first stops the job.
//!
//! Below file.rs (its method table and close use these), above
//! pass_through.rs, open_db.rs and coherence.rs. "f is ours" in the SAFETY
//! comments means what file.rs says under "the main database file".

use std::os::raw::{c_int, c_void};
use std::os::unix::io::RawFd;
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::coherence::{FileSig, Forget, Frames};
use crate::descriptor;
use crate::ffi::*;
use crate::open_db::OpenDb;
use crate::pass_through::*;
use crate::wal_index;

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

/// The `-wal` file of an open database, for the page numbers of its frames
/// and its header, and SQLite's descriptor of the database file, for its
/// length and signature.
struct WalFrames<'a>(&'a OpenDb, RawFd);

impl Frames for WalFrames<'_> {
    fn pages(&self, salt: [u8; 8], page_bytes: u32, first: u32, last: u32) -> Option<Vec<u32>> {
        wal_index::frame_pages(&self.0.wal_path, salt, page_bytes, first, last)
    }
    fn db_len(&self) -> Option<u64> {
        descriptor::metadata(self.1).ok().map(|m| m.len())
    }
    fn file_sig(&self) -> Option<FileSig> {
        file_sig(self.0, self.1)
    }
    fn wal_header(&self) -> Option<wal_index::WalHeader> {
        wal_index::wal_header(&self.0.wal_path)
    }
}

/// Runs a coherence step under the database's coherence lock. A panic inside
/// means the cache cannot vouch for what it holds: it forgets everything.
pub(crate) fn coherent(db: &OpenDb, step: impl FnOnce(&mut crate::coherence::Coherence)) {
    let ok = catch_unwind(AssertUnwindSafe(|| {
        let mut c = db.coherence.lock().unwrap_or_else(|e| e.into_inner());
        step(&mut c);
    }));
    if ok.is_err() {
        db.trip("internal error while checking for other writers");
    }
}

/// Test hook, compiled into builds with debug assertions only (the `checked`
/// profile the tests run under): `WAFFLE_TEST_BLIND_FILE_TIMES` set makes the
/// signature's mtime and ctime read as 0, so a test can show that no decision
/// rests on them alone (tests/warm_wal_trust.rs).
fn blind_file_times() -> bool {
    static BLIND: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    cfg!(debug_assertions) && *BLIND.get_or_init(|| std::env::var_os("WAFFLE_TEST_BLIND_FILE_TIMES").is_some())
}

/// The database file as a cheap check sees it: header bytes 24..40, size, times, inode.
fn file_sig(db: &OpenDb, fd: RawFd) -> Option<FileSig> {
    file_sig_with(db, fd, None)
}

/// As [`file_sig`], with these header bytes if given (then the file's are not read).
fn file_sig_with(db: &OpenDb, fd: RawFd, header: Option<[u8; 16]>) -> Option<FileSig> {
    use std::os::unix::fs::MetadataExt;
    let header = match header {
        Some(h) => h,
        None => {
            // pread on SQLite's descriptor, not through its VFS: SQLite's I/O (and its
            // tests' counted I/O errors) sees exactly the reads it makes itself.
            let mut h = [0u8; 16];
            let n = descriptor::read_at(fd, &mut h, 24).ok()?;
            h[n..].fill(0);
            h
        }
    };
    let m = descriptor::metadata(fd).ok()?;
    db.len_seen.store(m.len(), std::sync::atomic::Ordering::Release);
    let blind = blind_file_times();
    Some(FileSig {
        header,
        size: m.size(),
        mtime_ns: if blind { 0 } else { m.mtime() * 1_000_000_000 + m.mtime_nsec() },
        ctime_ns: if blind { 0 } else { m.ctime() * 1_000_000_000 + m.ctime_nsec() },
        ino: m.ino(),
        dev: m.dev(),
    })
}

/// The signature to record when this process lets go of its last lock: the
/// file's, but with the header as the cache last saw page 1 (as SQLite's pager
/// keeps the header it last read or wrote, not what is on disk at unlock), so
/// a header changed behind a held lock (exclusive mode) is still noticed.
pub(crate) fn recorded_sig(db: &OpenDb, fd: RawFd) -> Option<FileSig> {
    let seen = *db.header_seen.lock().unwrap_or_else(|e| e.into_inner());
    file_sig_with(db, fd, seen)
}

/// Page 1 passed through the cache: remember its header bytes 24..40.
pub(crate) fn saw_page_one(db: &OpenDb, page: &[u8]) {
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

pub(crate) unsafe extern "C" fn main_lock(f: *mut sqlite3_file, level: c_int) -> c_int {
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
    if level > SQLITE_LOCK_SHARED {
        // SAFETY: f is ours.
        if let Some(db) = unsafe { db(f) } {
            coherent(db, |c| c.on_beyond_shared()); // it may write: the span's end reads the file
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
            // Before SQLite reads a page of this transaction (page 1 first, even in WAL mode when
            // it sees no WAL yet): the check, and where the first look is checked from.
            coherent(db, |c| {
                c.on_shared(&db.cache, || file_sig(db, fd));
                c.on_first_lock_anchor(|| wal_index::wal_header(&db.wal_path).map(|h| h.salt));
            });
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
/// and everything before it went through the cache or was caught up), and
/// once the file's times have settled: a later writer's commit and
/// checkpoint may leave the header and size as they were, and the next warm
/// open tells them apart by the times where no WAL content is left to show
/// it (coherence.rs, `Anchor`).
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
    no_wal && (!wal_mode || (exclusive && descriptor::times_settled(fd)))
}

/// Whether the span of held locks now ending ran in rollback mode: no handle
/// of ours has the wal-index mapped, and there is no `-wal` file. A WAL-mode
/// connection keeps its `-wal` file while it has the database open, and only
/// a last closer holding EXCLUSIVE (or a switch out of WAL mode) removes it,
/// which our SHARED lock kept out; a rollback-mode writer needs EXCLUSIVE. So
/// nobody else wrote the file in the span, and our own writes (a switch to
/// WAL mode among them) went through the cache: it is in step at the unlock.
fn rollback_span(db: &OpenDb) -> bool {
    let mapped = db.shm.lock().unwrap_or_else(|e| e.into_inner()).handles > 0;
    !mapped && matches!(std::fs::metadata(&db.wal_path), Err(e) if e.kind() == std::io::ErrorKind::NotFound)
}

pub(crate) unsafe extern "C" fn main_unlock(f: *mut sqlite3_file, level: c_int) -> c_int {
    let wf = f as *mut WaffleFile;
    // SAFETY: f is ours.
    let (held, fd) = unsafe { ((*wf).lock_level, (*wf).fd) };
    // SAFETY: f is ours.
    if let (Some(db), true) = (unsafe { db(f) }, held >= SQLITE_LOCK_SHARED && level < SQLITE_LOCK_SHARED) {
        // While the lock is still held: in rollback mode nobody else has written since our last check.
        // A read span that changed nothing keeps what was recorded, reading nothing (coherence.rs).
        let mut kept = false;
        coherent(db, |c| kept = c.on_unlock_unchanged());
        if !kept {
            let vouch = vouches(db, fd, held);
            let in_step = vouch || rollback_span(db);
            coherent(db, |c| c.on_unlock_in_step(|| recorded_sig(db, fd), vouch, in_step));
        }
    }
    // SAFETY: f is ours.
    if level < unsafe { (*wf).lock_level } {
        // SAFETY: f is ours.
        unsafe { (*wf).lock_level = level };
    }
    // SAFETY: f is ours.
    unsafe { pass_unlock(f, level) }
}

pub(crate) unsafe extern "C" fn main_shm_map(
    f: *mut sqlite3_file,
    pg: c_int,
    sz: c_int,
    extend: c_int,
    pp: *mut *mut c_void,
) -> c_int {
    // SAFETY: f is ours.
    if let Some(db) = unsafe { db(f) } {
        coherent(db, |c| c.on_beyond_shared()); // WAL mode: others checkpoint under our SHARED lock
    }
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

pub(crate) unsafe extern "C" fn main_shm_unmap(f: *mut sqlite3_file, delete: c_int) -> c_int {
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
pub(crate) unsafe extern "C" fn main_shm_lock(f: *mut sqlite3_file, ofst: c_int, n: c_int, flags: c_int) -> c_int {
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
            coherent(db, |c| c.on_write_end(&db.cache, unsafe { wal_view(f) }, wrote, &WalFrames(db, fd)));
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
