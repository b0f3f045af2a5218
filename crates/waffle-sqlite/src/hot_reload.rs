//! The hot list's reload at open (waffle_core::warming::reload): a background
//! thread loads the pages the last clean close held into L1's free room,
//! hottest first, from the grid where the list is trusted, else the disk.
//!
//! It follows the warm's rule (warm.rs): every read, grid or disk, happens
//! inside a read transaction of a connection of its own (read-only), in
//! pieces of at most PIECE_BYTES or PIECE_TIME, which this process's writers
//! wait for in the VFS rather than meet as SQLITE_BUSY (job.rs, PieceGate). Taking the first shared lock runs the coherence
//! check: a file another process changed since the clean close resets the
//! cache (a new epoch: versions, presence and L1 start over) before the
//! reload captures a single version, so no grid copy from before the change
//! is asked for (presence says absent) or could be installed (its envelope
//! names the old version). A change after a capture bumps the page's version
//! and the install, which compares it under the page's stripe lock, drops
//! the bytes. The thread shares the warm's job: the database's close stops
//! it, and so does `PRAGMA waffle_warm`, which then runs instead.

use std::os::unix::io::RawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use waffle_core::backing::Backing;
use waffle_core::warming::hot_list::HotList;
use waffle_core::warming::reload::{self, ReloadFrom};
use waffle_core::warming::run::Finish;

use crate::connection::Conn;
use crate::descriptor::NoFile;
use crate::open_db::{OpenDb, Warmers};
use crate::warm::{finish_of, on_own_connection, piece_budget, read_lock, JobError};

/// Starts the reload of `list` for `db` (just opened, registered), unless a
/// warm runs already, from where `from` says.
pub fn start(db: &Arc<OpenDb>, list: HotList, from: ReloadFrom, warmers: Warmers) {
    let progress = db.warming.hot_list_progress();
    if !db.warm.begin() {
        progress.refuse("a warm was running".into());
        return;
    }
    if from == ReloadFrom::GridOnly {
        progress.begin();
        let handed = Arc::clone(db);
        let spawned =
            std::thread::Builder::new().name("waffle-hot-list".into()).spawn(move || grid_thread(handed, list));
        if let Err(e) = spawned {
            progress.finish(Finish::Failed(format!("cannot start the reload thread: {e}")));
            db.warm.end();
        }
        return;
    }
    let trusted = from == ReloadFrom::GridThenDisk;
    let Some(ticket) = (warmers.reserve)(db) else {
        progress.refuse("the database is not open".into());
        db.warm.end();
        return;
    };
    progress.begin();
    let handed = Arc::clone(&ticket);
    let spawned = std::thread::Builder::new()
        .name("waffle-hot-list".into())
        .spawn(move || thread_main(handed, list, trusted, warmers));
    if let Err(e) = spawned {
        progress.finish(Finish::Failed(format!("cannot start the reload thread: {e}")));
        (warmers.release)(ticket);
        db.warm.end();
    }
}

/// The reload of a trusted list from the grid only: no connection, no lock.
/// A copy is installed only at the version the restored table names,
/// captured before the fetch and compared under the page's stripe lock; a
/// file changed since the clean close is found at the first lock of any
/// connection, whose reset gives every page a new version (so a copy
/// installed before is dropped with L1, one fetched after is refused), and
/// pages others change later are forgotten at the lock that follows, as for
/// any page in L1. The database's last close stops it (registry::detach).
fn grid_thread(db: Arc<OpenDb>, list: HotList) {
    let job = Arc::clone(&db.warm);
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| grid_only(&db, &list)))
        .unwrap_or(Err(JobError::Internal));
    db.warming.hot_list_progress().finish(finish_of(&outcome, &job.stop));
    // Gone before the job ends: the last close waits for the job, then takes the database whole.
    drop(db);
    job.end();
}

fn grid_only(db: &OpenDb, list: &HotList) -> Result<(), JobError> {
    let stop = &db.warm.stop;
    let page_bytes = db.cache.page_bytes() as u64;
    if page_bytes != list.page_bytes {
        db.warming
            .hot_list_progress()
            .distrust(format!("the cache's pages are {page_bytes} bytes, the list's {}", list.page_bytes));
        return Ok(());
    }
    let mut at = 0;
    loop {
        if stop.load(Ordering::Acquire) {
            return Err(JobError::Stopped);
        }
        if db.cache.stats().foreign_resets.get() > 0 {
            db.warming
                .hot_list_progress()
                .distrust("the file changed since the clean close (found under the first lock)".into());
            return Ok(());
        }
        // No connection, so no descriptor: the grid only, within the file's length as last seen.
        let file_bytes = db.len_seen.load(Ordering::Acquire);
        let in_file = reload::in_file_of(file_bytes, page_bytes);
        let mut budget = piece_budget(stop);
        let done = db.warming.hot_reload(
            &db.cache,
            &list.pages,
            &mut at,
            ReloadFrom::GridOnly,
            &in_file,
            &NoFile,
            &mut budget,
        );
        if done? {
            return Ok(());
        }
    }
}

fn thread_main(db: Arc<OpenDb>, list: HotList, trusted: bool, warmers: Warmers) {
    let job = Arc::clone(&db.warm);
    // Read-only: the reload never writes, and its close (which may be the database's last)
    // must not checkpoint or delete a WAL that the user's connections would have left alone.
    on_own_connection(
        db,
        true,
        warmers,
        |db, conn, fd| run(db, conn, fd, &list, trusted),
        |db, outcome| db.warming.hot_list_progress().finish(finish_of(&outcome, &job.stop)),
    );
    job.end();
}

fn run(db: &OpenDb, conn: &Conn, fd: RawFd, list: &HotList, mut trusted: bool) -> Result<(), JobError> {
    conn.busy_timeout(0);
    let (stop, gate) = (&db.warm.stop, &db.warm.gate);
    let progress = db.warming.hot_list_progress();
    let mut at = 0;
    loop {
        if stop.load(Ordering::Acquire) {
            return Err(JobError::Stopped);
        }
        let (page_count, marked) = read_lock(conn, stop, gate)?;
        let page_bytes = db.cache.page_bytes() as u64;
        if page_bytes != list.page_bytes {
            conn.exec("COMMIT")?;
            progress.distrust(format!("the database's pages are {page_bytes} bytes, the list's {}", list.page_bytes));
            return Ok(());
        }
        if trusted && db.cache.stats().foreign_resets.get() > 0 {
            // The first lock found the file changed since the clean close: nothing in the grid is valid.
            trusted = false;
            progress.distrust("the file changed since the clean close (found under the first lock)".into());
        }
        let in_file = reload::in_file_of(page_count as u64 * page_bytes, page_bytes);
        let mut budget = piece_budget(stop);
        let piece = db.with_backing(fd, |f: &dyn Backing| {
            let from = if trusted { ReloadFrom::GridThenDisk } else { ReloadFrom::DiskOnly };
            db.warming.hot_reload(&db.cache, &list.pages, &mut at, from, &in_file, f, &mut budget)
        });
        let committed = conn.exec("COMMIT");
        drop(marked);
        committed?;
        if piece? {
            return Ok(());
        }
    }
}
