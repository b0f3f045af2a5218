//! `PRAGMA waffle_warm` (the whole database) and `PRAGMA waffle_warm='name'`
//! (a table with its indexes, or one index): a background thread reads the
//! pages in large sequential reads and places them in L1's free room and past
//! it in the grid (waffle_core::warming::warm). The PRAGMA returns once the names are
//! looked up; progress shows in `PRAGMA waffle_stats` under "warm".
//!
//! Locking. The thread reads the file behind SQLite's back, so it reads only
//! inside a read transaction of a connection of its own to the same file,
//! opened through this VFS (it joins the database's cache; the registry
//! counts it apart). The version captured before each read makes a write by
//! this process's waffle connections safe (it bumps the version: the warm's
//! copy is dropped). What it cannot see is a writer that bypasses the cache:
//! in rollback mode such a writer may spill uncommitted pages into the file
//! and later roll them back from a hot journal, and nothing (no version, no
//! change counter) tells the cache. A read transaction shuts that out: while
//! it holds SHARED, no writer may write the database file (that needs
//! EXCLUSIVE), a hot journal was rolled back before SHARED was granted, and
//! taking it ran the coherence check for other writers (lock.rs, main_lock).
//! In WAL mode the read mark keeps checkpoints from writing pages past this
//! snapshot, and a checkpoint's pages are forgotten at the next read mark of
//! any connection here (coherence.rs), as for SQLite's own reads. So each
//! piece of work is `BEGIN; PRAGMA page_count` (the shared lock or read mark,
//! and the database's size), at most PIECE_BYTES or PIECE_TIME of reads,
//! then `COMMIT` to let writers in, and again. A rollback-mode writer of
//! this process waits for the running piece in the VFS (`PieceGate`, job.rs, so its
//! own busy timeout may be none); one of another process waits in its busy
//! handler for at most one piece.
//!
//! A name warms its b-trees: a table name warms the table and every index of
//! it (`tbl_name` matches), an index name that index. Each tree is walked
//! level by level: the pages of one level are sorted and read in contiguous
//! runs with large reads, and each page read names the next level (child
//! pages, overflow chains: btree.rs).
//!
//! Closing: when the last connection of the database's users closes, the warm
//! is told to stop and the close waits for it (at most STOP_WAIT); the warm
//! thread's own close is then the last one and closes the cache.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::os::raw::c_int;
use std::os::unix::io::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use waffle_core::backing::{Backing, PageId};
use waffle_core::warming::run::{Budget, Finish};
use waffle_core::warming::warm::SETTLE_WAIT;

use crate::btree::{self, Header};
use crate::connection::{Conn, SqlError};
use crate::ffi::{SQLITE_ERROR, SQLITE_OK};
use crate::job::{Piece, PieceGate, LOCK_RETRY};
use crate::open_db::{OpenDb, Warmers};
use crate::vfs_name::VFS_NAME;

/// Why a background reader (a warm, a hot list's reload) ends before its
/// last page; its text is what the stats and the PRAGMA show.
#[derive(Debug, thiserror::Error)]
pub(crate) enum JobError {
    /// Told to stop (a close, `stop_and_wait`): a cancel, not a failure.
    #[error("stopped")]
    Stopped,
    /// The job panicked (caught).
    #[error("internal error")]
    Internal,
    #[error("the connection did not join the database's cache")]
    NotJoined,
    #[error(transparent)]
    Sql(#[from] SqlError),
    #[error("no read lock for {wait:?}: {source}")]
    NoReadLock { wait: Duration, source: SqlError },
    #[error(transparent)]
    Read(#[from] std::io::Error),
    #[error("the page size is not known yet")]
    PageSizeUnknown,
    #[error("page 1 is not a database header this cache reads")]
    NotAHeader,
    #[error("no table or index named '{name}' in this database")]
    NoSuchTree { name: String },
}

/// Most bytes read in one read transaction.
pub(crate) const PIECE_BYTES: u64 = 4 << 20;
/// Longest one read transaction reads.
pub(crate) const PIECE_TIME: Duration = Duration::from_millis(100);
/// How long one page waits for room in the push queue: the read transaction
/// is held meanwhile, and writers wait for it (a page that waits longer is dropped).
pub(crate) const PUSH_WAIT: Duration = Duration::from_secs(1);
/// A walk reads through gaps of at most this many pages between its pages
/// (trees built side by side interleave in the file) rather than split a read.
const MERGE_GAP_PAGES: u64 = 16;
/// A warm that cannot get a read lock for this long gives up.
const LOCK_WAIT: Duration = Duration::from_secs(30);
/// How long the PRAGMA waits for the warm to look its names up.
const LOOKUP_WAIT: Duration = Duration::from_secs(2);

thread_local! {
    /// Set by a warm thread around its sqlite3_open_v2: the database its connection joins.
    static JOINING: RefCell<Option<Arc<OpenDb>>> = const { RefCell::new(None) };
    /// SQLite's descriptor of the file the joining connection opened (vfs.rs sets it).
    static JOINED_FD: std::cell::Cell<Option<RawFd>> = const { std::cell::Cell::new(None) };
}

/// The joining connection opened the database as SQLite's descriptor `fd` (vfs.rs).
pub fn joined_fd(fd: Option<RawFd>) {
    JOINED_FD.with(|j| j.set(fd));
}

/// Whether this thread is a warm thread opening its connection (vfs.rs).
pub fn joining() -> bool {
    JOINING.with(|j| j.borrow().is_some())
}

/// The reference the warm thread's connection takes over (vfs.rs).
pub fn take_joining() -> Option<Arc<OpenDb>> {
    JOINING.with(|j| j.borrow_mut().take())
}

enum Target {
    All,
    Named(String),
}

/// Answers `PRAGMA waffle_warm[='name']`: starts the warm, waits (at most
/// LOOKUP_WAIT) for its plan, and says what it warms.
pub fn start(db: &OpenDb, value: Option<&str>, warmers: Warmers) -> (c_int, Option<String>) {
    let (target, label) = match value.map(str::trim) {
        None => (Target::All, "the whole database".to_string()),
        Some("") => return (SQLITE_ERROR, Some("PRAGMA waffle_warm takes a table or index name, or no value".into())),
        Some(name) => (Target::Named(name.to_string()), format!("'{name}'")),
    };
    if db.cache.is_fused() {
        return (SQLITE_ERROR, Some("PRAGMA waffle_warm: the cache is off for this database (see \"fused\")".into()));
    }
    // The job is busy with the hot list's reload (hot_reload.rs): an explicit warm replaces it.
    let began = db.warm.begin()
        || (!db.warming.warm_progress().is_running() && {
            db.warm.stop_and_wait();
            db.warm.begin()
        });
    if !began {
        let running = db.warming.warm_progress().snapshot();
        return (
            SQLITE_ERROR,
            Some(format!(
                "PRAGMA waffle_warm refused: a warm of {} is running; PRAGMA waffle_stats shows its progress",
                serde_json::Value::from(running.target)
            )),
        );
    }
    if let Err(e) = db.warming.warm_progress().begin(&label) {
        db.warm.end();
        return (SQLITE_ERROR, Some(format!("PRAGMA waffle_warm refused: {e}")));
    }
    let give_up = |why: String| {
        db.warming.warm_progress().finish(Finish::Failed(why.clone()));
        db.warm.end();
        (SQLITE_ERROR, Some(format!("PRAGMA waffle_warm: {why}")))
    };
    let Some(ticket) = (warmers.reserve)(db) else {
        return give_up("the database is not open".into());
    };
    let (tx, rx) = mpsc::channel();
    let handed = Arc::clone(&ticket);
    let spawned =
        std::thread::Builder::new().name("waffle-warm".into()).spawn(move || thread_main(handed, target, tx, warmers));
    if let Err(e) = spawned {
        (warmers.release)(ticket);
        return give_up(format!("cannot start the warm thread: {e}"));
    }
    drop(ticket);
    match rx.recv_timeout(LOOKUP_WAIT) {
        Ok(Ok(plan)) => (SQLITE_OK, Some(format!("started: {plan}"))),
        Ok(Err(e)) => (SQLITE_ERROR, Some(format!("PRAGMA waffle_warm: {e}"))),
        Err(RecvTimeoutError::Timeout) => (
            SQLITE_OK,
            Some(format!(
                "started: {label}, waiting for a read lock (a writer holds the database); PRAGMA waffle_stats shows the warm"
            )),
        ),
        Err(RecvTimeoutError::Disconnected) => (SQLITE_ERROR, Some("PRAGMA waffle_warm: the warm ended at once".into())),
    }
}

/// The warm thread: opens its connection (joining `db`), warms, and closes it.
fn thread_main(db: Arc<OpenDb>, target: Target, reply: Sender<Result<String, JobError>>, warmers: Warmers) {
    let job = Arc::clone(&db.warm);
    let mut reply = Some(reply);
    let mut failed = None;
    on_own_connection(
        db,
        false,
        warmers,
        |db, conn, fd| run(db, conn, fd, target, &mut reply),
        |db, outcome| {
            let finish = finish_of(&outcome, &job.stop);
            if let Finish::Failed(_) = &finish {
                failed = outcome.err();
            }
            // A warm that is done reports what the grid stored: it waits for its pushes first.
            db.warming.warm_finish(&db.cache, finish, SETTLE_WAIT);
        },
    );
    job.end();
    // Told last: a PRAGMA that failed leaves no warm running behind it (the next one is not refused).
    if let (Some(r), Some(e)) = (reply.take(), failed) {
        let _ = r.send(Err(e));
    }
}

/// Opens a connection of this thread's own that joins `db` (a warmer, see
/// open_db.rs's Warmers: `db` is a reference `warmers` reserved), runs `body` with it, hands the outcome to
/// `finish` while `db` is still open, and closes the connection: that close
/// may be the database's last, which closes the cache.
/// One piece's budget (the warm's and the hot-list reload's): PIECE_BYTES of reads or
/// PIECE_TIME, whichever comes first, or until `stop`.
pub(crate) fn piece_budget(stop: &AtomicBool) -> Budget<'_> {
    Budget { bytes: PIECE_BYTES, deadline: Instant::now() + PIECE_TIME, cancel: stop, push_wait: PUSH_WAIT }
}

/// How a background reader's run ended: an error after `stop` was asked for is a cancel.
pub(crate) fn finish_of(outcome: &Result<(), JobError>, stop: &AtomicBool) -> Finish {
    match outcome {
        Ok(()) => Finish::Done,
        Err(_) if stop.load(Ordering::Acquire) => Finish::Cancelled,
        Err(e) => Finish::Failed(e.to_string()),
    }
}

pub(crate) fn on_own_connection(
    db: Arc<OpenDb>,
    read_only: bool,
    warmers: Warmers,
    body: impl FnOnce(&OpenDb, &Conn, RawFd) -> Result<(), JobError>,
    finish: impl FnOnce(&OpenDb, Result<(), JobError>),
) {
    JOINING.with(|j| *j.borrow_mut() = Some(Arc::clone(&db)));
    // A file this process may not write: a read-only connection. Asked with access(2), never by
    // opening the file: closing a descriptor of it would drop every POSIX lock SQLite holds on it.
    let read_only = read_only || !writable(&db.path);
    JOINED_FD.with(|j| j.set(None));
    let conn = Conn::open(&db.path, VFS_NAME, read_only);
    // Still here: SQLite never reached our xOpen for the main file.
    let unused = take_joining();
    let fd = JOINED_FD.with(|j| j.take());
    let outcome = match (&conn, &unused, fd) {
        (Ok(conn), None, Some(fd)) => std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(&db, conn, fd)))
            .unwrap_or(Err(JobError::Internal)),
        (Ok(_), _, _) => Err(JobError::NotJoined),
        (Err(e), _, _) => Err(JobError::Sql(e.clone())),
    };
    finish(&db, outcome);
    // No Arc of ours may outlive the connection's close: it may be the last one, which closes the cache.
    drop(db);
    drop(conn);
    if let Some(ticket) = unused {
        (warmers.release)(ticket);
    }
}

fn writable(path: &std::path::Path) -> bool {
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) else { return false };
    // SAFETY: a NUL-terminated path; access reads it and nothing else.
    unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
}

/// Pages of one b-tree level to read, and what each page is.
#[derive(Default)]
struct Walk {
    /// SQLite page number -> whether it is an overflow page (else a b-tree page).
    kinds: HashMap<u32, bool>,
    next: Vec<(u32, bool)>,
    seen: HashSet<u32>,
}

impl Walk {
    /// The next level as sorted runs of cache pages (SQLite's page n is cache
    /// page n - 1), small gaps included; the visitor skips the gaps' pages.
    fn level(&mut self, page_count: u32) -> Vec<(u64, u64)> {
        self.kinds.clear();
        let mut pages: Vec<u32> = Vec::new();
        for (n, overflow) in std::mem::take(&mut self.next) {
            if n >= 1 && n <= page_count && self.seen.insert(n) {
                self.kinds.insert(n, overflow);
                pages.push(n);
            }
        }
        pages.sort_unstable();
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for n in pages {
            match runs.last_mut() {
                Some((first, count)) if n as u64 - 1 - (*first + *count) <= MERGE_GAP_PAGES => {
                    *count = n as u64 - *first
                }
                _ => runs.push((n as u64 - 1, 1)),
            }
        }
        runs
    }
}

fn run(
    db: &OpenDb,
    conn: &Conn,
    fd: RawFd,
    target: Target,
    reply: &mut Option<Sender<Result<String, JobError>>>,
) -> Result<(), JobError> {
    conn.busy_timeout(0);
    let (stop, gate) = (&db.warm.stop, &db.warm.gate);
    let progress = db.warming.warm_progress();
    // The plan, in a first read transaction.
    let (mut page_count, first) = read_lock(conn, stop, gate)?;
    let planned = plan(db, conn, fd, &target, page_count);
    conn.exec("COMMIT")?;
    drop(first);
    let (header, roots, text) = planned?;
    let mut walk = None;
    let mut runs: Vec<(u64, u64)> = Vec::new();
    match roots {
        None => {
            runs.push((0, page_count as u64));
            progress.plan(page_count as u64);
        }
        Some(roots) => walk = Some(Walk { next: roots.into_iter().map(|r| (r, false)).collect(), ..Walk::default() }),
    }
    if let Some(r) = reply.take() {
        let _ = r.send(Ok(text));
    }
    let mut at = 0;
    loop {
        if stop.load(Ordering::Acquire) {
            return Err(JobError::Stopped);
        }
        let marked;
        (page_count, marked) = read_lock(conn, stop, gate)?;
        let mut budget = piece_budget(stop);
        let piece = piece(db, fd, &mut budget, &mut runs, &mut at, walk.as_mut(), header, page_count);
        let committed = conn.exec("COMMIT");
        drop(marked);
        committed?;
        if piece? {
            return Ok(());
        }
    }
}

/// The pages of the database's size, the b-tree roots a name warms (None: every page), and what the PRAGMA says.
fn plan(
    db: &OpenDb,
    conn: &Conn,
    fd: RawFd,
    target: &Target,
    page_count: u32,
) -> Result<(Header, Option<Vec<u32>>, String), JobError> {
    let page_bytes = db.cache.page_bytes();
    if page_bytes == 0 {
        return Err(JobError::PageSizeUnknown);
    }
    let mut page1 = vec![0u8; page_bytes];
    let n = db.with_backing(fd, |f: &dyn Backing| f.read_pages(PageId::of(0), page_bytes, &mut page1))?;
    let header = match Header::parse(&page1[..n]) {
        Some(h) if h.page_bytes == page_bytes => h,
        _ => return Err(JobError::NotAHeader),
    };
    let name = match target {
        Target::All => return Ok((header, None, format!("the whole database, {page_count} pages planned"))),
        Target::Named(name) => name,
    };
    let mut trees: Vec<(String, String, u32)> = Vec::new();
    conn.query(
        "SELECT type, name, rootpage FROM sqlite_master WHERE type IN ('table', 'index') AND rootpage > 0 \
         AND (name = ?1 COLLATE NOCASE OR tbl_name = ?1 COLLATE NOCASE) ORDER BY type DESC, name",
        &[name],
        |row| trees.push((row.text(0), row.text(1), row.int64(2).clamp(0, u32::MAX as i64) as u32)),
    )?;
    if trees.is_empty() {
        return Err(JobError::NoSuchTree { name: name.clone() });
    }
    let indexes = trees.iter().filter(|(kind, ..)| kind == "index").count();
    let what = match trees.iter().find(|(kind, ..)| kind == "table") {
        Some((_, table, _)) => format!("table {table} and {indexes} index{}", if indexes == 1 { "" } else { "es" }),
        None => format!("index {}", trees[0].1),
    };
    let roots = trees.iter().map(|(.., root)| *root).collect();
    Ok((header, Some(roots), format!("{what}; pages planned as the b-trees are walked")))
}

/// Starts a read transaction (`BEGIN; PRAGMA page_count`) and returns the
/// database's size in pages, with the piece marked in `gate` until the
/// returned guard drops (after the COMMIT). One lock attempt at a time (the
/// connection's busy timeout is 0), LOCK_RETRY apart, at most LOCK_WAIT in
/// all; stops early when told to.
pub(crate) fn read_lock<'a>(conn: &Conn, stop: &AtomicBool, gate: &'a PieceGate) -> Result<(u32, Piece<'a>), JobError> {
    let deadline = Instant::now() + LOCK_WAIT;
    conn.exec("BEGIN")?;
    loop {
        let piece = gate.enter_piece(stop);
        let mut pages = 0;
        match conn.query("PRAGMA page_count", &[], |row| pages = row.int64(0).clamp(0, u32::MAX as i64) as u32) {
            Ok(()) => return Ok((pages, piece)),
            Err(e) if e.is_busy() && Instant::now() < deadline && !stop.load(Ordering::Acquire) => {
                drop(piece);
                std::thread::sleep(LOCK_RETRY);
            }
            Err(e) => {
                let _ = conn.exec("ROLLBACK");
                return Err(lock_error(e, stop));
            }
        }
    }
}

fn lock_error(e: SqlError, stop: &AtomicBool) -> JobError {
    if stop.load(Ordering::Acquire) {
        JobError::Stopped
    } else if e.is_busy() {
        JobError::NoReadLock { wait: LOCK_WAIT, source: e }
    } else {
        JobError::Sql(e)
    }
}

/// One read transaction's worth of warming. True when everything is done.
#[allow(clippy::too_many_arguments)]
fn piece(
    db: &OpenDb,
    fd: RawFd,
    budget: &mut Budget<'_>,
    runs: &mut Vec<(u64, u64)>,
    at: &mut usize,
    mut walk: Option<&mut Walk>,
    header: Header,
    page_count: u32,
) -> Result<bool, JobError> {
    let progress = db.warming.warm_progress();
    while !budget.spent() {
        if *at == runs.len() {
            let Some(w) = walk.as_deref_mut() else { return Ok(true) };
            *runs = w.level(page_count);
            *at = 0;
            progress.plan(w.kinds.len() as u64);
            if runs.is_empty() {
                return Ok(true);
            }
        }
        let (first, count) = runs[*at];
        let done = match walk.as_deref_mut() {
            None => {
                db.with_backing(fd, |f: &dyn Backing| db.warming.warm_run(&db.cache, first, count, f, budget, None))
            }
            Some(w) => {
                let Walk { kinds, next, .. } = w;
                let mut visit = |page: u64, bytes: &[u8]| {
                    let n = (page + 1) as u32;
                    match kinds.get(&n) {
                        Some(true) => next.push((btree::overflow_next(bytes), true)),
                        Some(false) => {
                            let links = btree::links(n, bytes, header.usable_bytes);
                            next.extend(links.children.into_iter().map(|c| (c, false)));
                            next.extend(links.overflow.into_iter().map(|c| (c, true)));
                        }
                        None => return false, // a gap: another tree's page
                    }
                    true
                };
                db.with_backing(fd, |f: &dyn Backing| {
                    db.warming.warm_run(&db.cache, first, count, f, budget, Some(&mut visit))
                })
            }
        }?;
        if done >= count {
            *at += 1;
        } else {
            runs[*at] = (first + done, count - done);
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jobs_error_is_a_cancel_once_stopped_and_keeps_its_text() {
        let busy = SqlError { code: 5, message: "database is locked".into() };
        let e = lock_error(busy.clone(), &AtomicBool::new(false));
        assert!(matches!(e, JobError::NoReadLock { ref source, .. } if source.is_busy()), "{e:?}");
        assert_eq!(e.to_string(), format!("no read lock for {LOCK_WAIT:?}: database is locked"));
        assert!(matches!(lock_error(busy, &AtomicBool::new(true)), JobError::Stopped));
        let failed = finish_of(&Err(JobError::NoSuchTree { name: "t".into() }), &AtomicBool::new(false));
        assert!(matches!(failed, Finish::Failed(ref why) if why == "no table or index named 't' in this database"));
        assert!(matches!(finish_of(&Err(JobError::Stopped), &AtomicBool::new(true)), Finish::Cancelled));
        assert!(matches!(finish_of(&Ok(()), &AtomicBool::new(false)), Finish::Done));
    }
}
