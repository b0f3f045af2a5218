//! The databases this process has open through `waffle`, one cache each.
//!
//! Every connection to one database file in this process shares one
//! [`PageCache`] (a write through one connection must be seen by the others),
//! keyed by the file's device and inode. The first open joins the sidecar
//! (other processes may have the database open too: each has its own cache
//! and notices the others' commits through [`Coherence`]); the last close
//! pushes L1 to the grid and, if no other process has the database open,
//! saves the versions for a warm restart.
//!
//! A forked child starts with an empty registry: the parent's caches are
//! forgotten at the fork (waffle_core::fork), never closed by the child, and the child's
//! opens make caches of their own.

use std::any::Any;
use std::collections::HashMap;
use std::fs::Metadata;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use waffle_core::config::HotListMode;
use waffle_core::grid::{Grid, NodeSpec};
use waffle_core::sidecar::{DbIdentity, Sidecar};
use waffle_core::warming::hot_list::{self, HotList, Trust};
use waffle_core::warming::reload::ReloadFrom;
use waffle_core::warming::Warming;
use waffle_core::{CacheOptions, Config, PageCache};

use crate::coherence::{Coherence, FileSig};
use crate::open_db::{key_of, Key, OpenDb, Warmers};

struct Entry {
    db: Arc<OpenDb>,
    refs: usize,
    /// Of `refs`, the connections of warm threads (warm.rs): when only they
    /// are left, the database is closing and the warm is told to stop.
    warmers: usize,
}

/// The process's open databases. Held only for map operations: never across
/// the sidecar's lock wait, name resolution, a closing database's flush or a
/// log line (a fork waits for it: [`hold_for_fork`]).
static OPEN: Mutex<Option<HashMap<Key, Entry>>> = Mutex::new(None);
/// One gate per database file: serializes that file's open and close (a
/// reopen waits for the close to save the sidecar), and nothing else. The map's
/// lock is held to find a gate, never while one is held.
static GATES: Mutex<Option<HashMap<Key, Arc<Mutex<()>>>>> = Mutex::new(None);

/// The adapter's locks (gates, then open databases, then the stats writers' list), held across
/// a fork by waffle_core::fork: in the child they are free. Another thread may hold one at the
/// fork (an open or a close beside it, a warm thread's last close); none is held across anything
/// that could wait on the forking thread.
fn hold_for_fork() -> Box<dyn Any> {
    let gates = GATES.lock().unwrap_or_else(|e| e.into_inner());
    let open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
    let writers = crate::stats_file::hold_for_fork();
    Box::new((gates, open, writers))
}

/// Forgets the parent's caches in a forked child (waffle_core::fork calls it once the child
/// runs, on its only thread, with the maps' locks free): the maps are taken out and leaked, so
/// that no close, flush or sidecar save of the parent's runs here; only the child's copies of
/// the sidecars' locked descriptors are closed.
fn forget_parents() {
    let taken = match OPEN.try_lock() {
        Ok(mut open) => open.take(),
        Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner().take(),
        // Not after a fork through the handlers; `join` leaves what is left of the parent's.
        Err(std::sync::TryLockError::WouldBlock) => None,
    };
    if let Some(open) = taken {
        for e in open.values() {
            if let Some(sidecar) = &e.db.sidecar {
                // SAFETY: a forked child, and the parent's sidecar, leaked below with its map.
                unsafe { sidecar.close_copy_in_child() };
            }
        }
        std::mem::forget(open);
    }
    if let Ok(mut gates) = GATES.try_lock() {
        std::mem::forget(gates.take());
    }
}

/// Has waffle_core::fork hold the maps across every fork from now on and call
/// [`forget_parents`] in every forked child (idempotent).
pub fn watch_forks() {
    waffle_core::fork::watch(waffle_core::fork::Adapter { hold: hold_for_fork, in_child: forget_parents });
}

fn gate(key: Key) -> Arc<Mutex<()>> {
    let mut gates = GATES.lock().unwrap_or_else(|e| e.into_inner());
    Arc::clone(gates.get_or_insert_with(HashMap::new).entry(key).or_default())
}

/// A connection joins the open database with this key, if there is one.
/// Err: it asks for settings the open one would weaken (another grid, a seal
/// key, verify; Config::refuses_to_join): the open is refused, not joined.
fn join(key: Key, path: &Path, config: &Config) -> Result<Option<Arc<OpenDb>>, String> {
    let (joined, kept) = {
        let mut open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
        let open = open.get_or_insert_with(HashMap::new);
        if open.get(&key).is_some_and(|e| !e.db.is_ours()) {
            // The parent's, left by a fork the handler could not clean up after: never joined, never closed.
            std::mem::forget(open.remove(&key));
        }
        let Some(e) = open.get_mut(&key) else { return Ok(None) };
        if let Some(why) = config.refuses_to_join(&e.db.config) {
            return Err(format!(
                "{} is already open in this process with other settings; {why} (open it with the same settings, or close the other first)",
                path.display()
            ));
        }
        e.refs += 1;
        (Arc::clone(&e.db), e.db.config != *config)
    };
    // Said outside the map's lock, which is never held across a log line (waffle_core::fork).
    if kept {
        waffle_core::warn!(
            key: format!("settings of {}", path.display()),
            "{} is already open in this process; keeping its first settings ({:?})",
            path.display(),
            joined.config
        );
    }
    Ok(Some(joined))
}

/// The WAL write counter of the database whose WAL file is `wal` (`<db>-wal`),
/// if this process has it open through waffle.
pub fn wal_writes_of(wal: &Path) -> Option<Arc<AtomicU64>> {
    let main = wal.to_str()?.strip_suffix("-wal")?;
    let key = key_of(&std::fs::metadata(main).ok()?);
    let open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
    open.as_ref()?.get(&key).filter(|e| e.db.is_ours()).map(|e| Arc::clone(&e.db.wal_writes))
}

/// What a job is handed to count its connection as a warmer (open_db.rs).
pub const WARMERS: Warmers = Warmers { reserve: reserve_warmer, release: release_warmer };

/// A reference for a warm thread's connection to `db` (counted as a warmer),
/// taken while a connection of the caller holds the database open. None if
/// `db` is not open (it always is when a PRAGMA asks).
fn reserve_warmer(db: &OpenDb) -> Option<Arc<OpenDb>> {
    let mut open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
    let e = open.get_or_insert_with(HashMap::new).values_mut().find(|e| std::ptr::eq(&*e.db, db))?;
    e.refs += 1;
    e.warmers += 1;
    Some(Arc::clone(&e.db))
}

/// Joins (or creates) the cache of the database file SQLite has just opened
/// at `path` as descriptor `fd` (`meta`: its fstat). `read_only`: SQLite
/// opened it read-only (nothing is written beside it). Err: refused (see [`join`]).
pub fn attach(path: &Path, meta: &Metadata, config: Config, read_only: bool) -> Result<Arc<OpenDb>, String> {
    watch_forks();
    let key = key_of(meta);
    if let Some(db) = join(key, path, &config)? {
        return Ok(db);
    }
    let gate = gate(key);
    let _opening = gate.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(db) = join(key, path, &config)? {
        return Ok(db); // opened by another thread while we waited
    }
    let db = Arc::new(open_db(path, meta, config, read_only));
    OPEN.lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(HashMap::new)
        .insert(key, Entry { db: Arc::clone(&db), refs: 1, warmers: 0 });
    let hot = db.hot.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some((list, from)) = hot {
        crate::hot_reload::start(&db, list, from, WARMERS);
    }
    Ok(db)
}

/// Opens the cache of one database: sidecar, grid (no registry lock held).
fn open_db(path: &Path, meta: &Metadata, config: Config, read_only: bool) -> OpenDb {
    let _ = read_only;
    let (sidecar, warm) = Sidecar::acquire(path, meta, read_only);
    let sidecar_warm = warm.is_some();
    let grid = (!config.grid.is_empty()).then(|| grid_for(&config, config.grid.clone()));
    // A warm start is trusted only with the file signature it was saved with;
    // the first lock compares it with the file (Coherence::on_shared).
    let warm = warm.and_then(|w| FileSig::from_bytes(&w.extra).map(|sig| (w, sig)));
    let (cache_id, page_bytes, saved, sig) = match warm {
        Some((w, sig)) => (w.cache_id, w.page_bytes as usize, Some(w.saved), Some(sig)),
        None => (waffle_core::random_cache_id(), 0, None, None),
    };
    let saved_id = saved.is_some().then_some(cache_id);
    let cache = PageCache::new(CacheOptions {
        cache_id,
        saved,
        page_bytes,
        local_bytes: config.local_bytes,
        push_queue_bytes: config.push_queue_bytes,
        grid,
        seal_key: config.seal_key.clone(),
        codec: config.compress,
        page_check: None,
    });
    if let Some(sidecar) = sidecar.as_ref().filter(|_| sidecar_warm) {
        mark_dirty_on_first_change(&cache, sidecar, saved_id.is_some(), path);
    }
    // The last clean close's hot list: reloaded in the background once registered (attach).
    let warming = Warming::default();
    let progress = warming.hot_list_progress();
    // `grid` unless told (docs/design.md, "Hot list": why not `on` by default).
    let mode = config.hot_list.unwrap_or(HotListMode::Grid);
    let hot = if mode == HotListMode::Off {
        progress.off();
        None
    } else {
        let (list, trust) = hot_list::load(path, meta, saved_id.map(|id| (id, page_bytes as u64)));
        progress.planned(list.as_ref(), &trust);
        let from = match (&trust, mode) {
            (Trust::Trusted, HotListMode::On) => Some(ReloadFrom::GridThenDisk),
            (Trust::Trusted, _) => Some(ReloadFrom::GridOnly),
            (Trust::PagesOnly(_), HotListMode::On) => Some(ReloadFrom::DiskOnly),
            (Trust::PagesOnly(why), _) => {
                progress.refuse(format!("{why}; waffle_hot_list=on would read its pages from the disk"));
                None
            }
            (Trust::Ignored(_), _) => None,
        };
        list.filter(|l| !l.pages.is_empty()).zip(from)
    };
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    if config.verify {
        cache.enable_verify(path.display().to_string(), config.verify_log.clone());
    }
    if waffle_core::log::enabled(waffle_core::log::Level::Info) {
        let grid = config.grid.iter().map(|n| n.label()).collect::<Vec<_>>().join(",");
        let line = format!(
            "opened {} ({}): L1 {} KiB, grid {}, deadline {} ms",
            path.display(),
            if saved_id.is_some() { "warm" } else { "cold" },
            config.local_bytes >> 10,
            if grid.is_empty() { "none" } else { &grid },
            config.timeout_ms
        );
        waffle_core::info!(key: line, "{line}");
    }
    OpenDb {
        cache,
        warming,
        key: key_of(meta),
        len_seen: AtomicU64::new(meta.len()),
        path: path.to_path_buf(),
        config,
        coherence: Mutex::new(Coherence::new(sig)),
        wal_path: PathBuf::from(wal),
        wal_writes: Arc::new(AtomicU64::new(0)),
        shm: Mutex::default(),
        header_seen: Mutex::new(None),
        warm: Arc::default(),
        hot: Mutex::new(hot),
        sidecar,
        generation: waffle_core::fork::generation(),
    }
}

/// A grid client for `nodes` with the database's request settings.
pub fn grid_for(config: &Config, nodes: Vec<NodeSpec>) -> Arc<Grid> {
    Arc::new(Grid::new(nodes, config.grid_options()))
}

/// A warm thread's connection leaves the cache (see [`detach`]).
fn release_warmer(db: Arc<OpenDb>) {
    detach(db, true);
}

/// Leaves the cache; the last one out closes it cleanly, holding the file's
/// gate (a reopen of this file waits for the sidecar to be saved) but not the
/// registry (other databases open and close meanwhile).
///
/// `warmer`: the connection is a warm thread's (see [`reserve_warmer`]). When
/// the last other connection leaves, the warm is stopped and waited for
/// (bounded): its connection's close is then the last one, on its thread.
pub fn detach(db: Arc<OpenDb>, warmer: bool) {
    if !db.is_ours() {
        // A forked child closing a connection its parent opened: the cache is the parent's (its
        // threads are not here, its sidecar lock is the parent's); nothing of it runs here.
        std::mem::forget(db);
        return;
    }
    let find = |open: &HashMap<Key, Entry>| open.iter().find(|(_, e)| Arc::ptr_eq(&e.db, &db)).map(|(k, _)| *k);
    let key = {
        let mut guard = OPEN.lock().unwrap_or_else(|e| e.into_inner());
        let open = guard.get_or_insert_with(HashMap::new);
        let Some(key) = find(open) else {
            debug_assert!(false, "detach of a database that is not attached");
            return;
        };
        let entry = open.get_mut(&key).expect("found above");
        if entry.refs > 1 {
            entry.refs -= 1;
            entry.warmers -= usize::from(warmer);
            let only_warmers = !warmer && entry.refs == entry.warmers;
            drop(guard);
            if only_warmers {
                // No Arc of ours may outlive this: the warm's close must find itself the last.
                let job = Arc::clone(&db.warm);
                drop(db);
                job.stop_and_wait();
            }
            return;
        }
        key
    };
    let gate = gate(key);
    let _closing = gate.lock().unwrap_or_else(|e| e.into_inner());
    {
        let mut guard = OPEN.lock().unwrap_or_else(|e| e.into_inner());
        let open = guard.get_or_insert_with(HashMap::new);
        let entry = open.get_mut(&key).expect("only detach removes an entry, under this gate");
        entry.refs -= 1;
        entry.warmers -= usize::from(warmer);
        if entry.refs > 0 {
            return; // another connection joined while we waited for the gate
        }
        drop(open.remove(&key));
    }
    // A reload without a connection (hot_reload.rs, grid only) holds the database too: it stops
    // first. Not when a warm thread's own connection closes last: its job is that thread, which
    // ends after this close (and one job runs at a time).
    if !warmer {
        db.warm.stop_and_wait();
    }
    // Its thread holds the database now and then: stopped first, then the file's last write.
    crate::stats_file::stop(&db);
    match Arc::try_unwrap(db) {
        Ok(owned) => close(owned),
        Err(_) => debug_assert!(false, "a database with no connections is still referenced"),
    }
}

fn close(mut db: OpenDb) {
    let cache_id = db.cache.cache_id();
    let fused = db.cache.is_fused();
    let page_bytes = db.cache.page_bytes() as u64;
    let sig = db.coherence.lock().unwrap_or_else(|e| e.into_inner()).sig();
    // The database as the close leaves it: what the hot list and the sidecar record.
    let meta = db_meta(&db);
    // Listed before the close empties L1 into the grid.
    let hot = if db.config.hot_list != Some(HotListMode::Off) {
        meta.as_ref().and_then(|m| HotList::of(&db.cache, DbIdentity::from_metadata(m)))
    } else {
        None
    };
    let (saved, report) = db.cache.close();
    // The cache may lose anything: what a close could not push is worth a note, not a warning.
    if waffle_core::log::enabled(waffle_core::log::Level::Info) {
        waffle_core::info!(
            key: format!("close {}", db.path.display()),
            "closed {}: {} of {} L1 pages pushed to the grid, {} dropped{}",
            db.path.display(),
            report.pushed,
            report.l1_pages,
            report.dropped,
            if report.timed_out { " (the flush ran out of time)" } else { "" }
        );
    }
    let extra = sig.map(|s| s.to_bytes()).unwrap_or_default();
    // The list is written by the close that saves the sidecar (the last one out), before it.
    if let (Some(list), Some(sidecar), Some(meta)) = (hot, db.sidecar.as_mut(), &meta) {
        match sidecar.lock_last_out() {
            Ok(true) => {
                if let Err(e) = hot_list::write(&db.path, meta, &list) {
                    waffle_core::warn!("could not save the hot list of {}: {e}", db.path.display());
                }
            }
            Ok(false) => {}
            Err(e) => waffle_core::warn!("cannot lock the sidecar of {}: {e}", db.path.display()),
        }
    }
    // A cache that turned off saw writes it gave no version (file.rs): its versions name
    // nothing the next open could trust, and its sidecar stays dirty (marked at the trip).
    let sidecar = db.sidecar.take().filter(|_| !fused);
    if let (Some(sidecar), Some(meta)) = (sidecar, &meta) {
        if let Err(e) = sidecar.close_clean(cache_id, page_bytes, &saved, &extra, meta) {
            waffle_core::warn!("could not save {} for a warm restart: {e}", db.path.display());
        }
    }
}

/// A warm open's sidecar says dirty from the cache's first change of a version on (a write, a
/// truncation, another writer's change, an epoch; docs/design.md, "Sidecar file"): an open that
/// only reads serves and pushes the copies the saved versions name, and pays no sync. One this
/// adapter did not open warm (`used` false: no file signature in it) is marked now.
fn mark_dirty_on_first_change(cache: &PageCache, sidecar: &Sidecar, used: bool, path: &Path) {
    let label = path.display().to_string();
    let mark = match sidecar.dirty_mark() {
        Ok(mark) => mark,
        Err(e) => {
            waffle_core::warn!("cannot mark the sidecar of {label} dirty: {e}; a crash may leave it clean");
            return;
        }
    };
    let run = move || {
        if let Err(e) = mark.mark() {
            waffle_core::warn!("cannot mark the sidecar of {label} dirty: {e}; a crash may leave it clean");
        }
    };
    if used {
        cache.before_first_change(Box::new(run));
    } else {
        run();
    }
}

/// The database file as the close leaves it, if the path still names it (else nothing is saved).
fn db_meta(db: &OpenDb) -> Option<Metadata> {
    std::fs::metadata(&db.path).ok().filter(|m| key_of(m) == db.key)
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    use super::*;

    /// Another thread holds the locks `take` takes (as an open or a close does, for microseconds)
    /// while this one forks: the fork waits for them, and the child takes them again and answers
    /// `child_ok`. Without the adapter's part of the prepare handler the child's copies stay held
    /// by a thread it does not have, and its first open would wait forever (here: killed at the
    /// deadline, failed). The same loop as waffle_core::fork's tests (no test code is shared
    /// between the two crates' unit tests).
    fn fork_while_held(name: &str, take: fn() -> Box<dyn Any>, child_ok: fn() -> bool) {
        watch_forks();
        let (holding_tx, holding_rx) = mpsc::channel();
        let holder = std::thread::spawn(move || {
            let held = take();
            holding_tx.send(()).expect("the test waits");
            std::thread::sleep(Duration::from_millis(300));
            drop(held);
        });
        holding_rx.recv().expect("the holder took the locks");
        // SAFETY: the child only takes locks and leaves with _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed: {}", std::io::Error::last_os_error());
        if pid == 0 {
            drop(take());
            let ok = child_ok();
            // SAFETY: leaves the forked child without running the parent's atexit handlers.
            unsafe { libc::_exit(if ok { 0 } else { 2 }) };
        }
        holder.join().expect("the holder thread");
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut status = 0;
        // SAFETY: our own child, waited for without blocking.
        while unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } != pid {
            if Instant::now() >= deadline {
                // SAFETY: our own child, killed and reaped.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                    libc::waitpid(pid, &mut status, 0);
                }
                panic!("the forked child still waits on the {name} after 10 s");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "the child found the {name} wrong: {status:#x}"
        );
    }

    fn maps() -> Box<dyn Any> {
        let gates = GATES.lock().unwrap_or_else(|e| e.into_inner());
        let open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
        Box::new((gates, open))
    }

    #[test]
    fn a_fork_waits_for_the_maps_and_the_child_finds_them_free_and_empty() {
        OPEN.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert_with(HashMap::new);
        fn forgotten() -> bool {
            OPEN.lock().is_ok_and(|o| o.is_none()) && GATES.lock().is_ok_and(|g| g.is_none())
        }
        fork_while_held("registry's maps", maps, forgotten);
    }

    /// A warm thread's last close takes the stats writers' list (stats_file::stop) beside the
    /// host's threads: a child's first open with a stats file would wait on its copy.
    #[test]
    fn a_fork_waits_for_the_stats_writers_list_and_the_child_gets_it() {
        fork_while_held("stats writers' list", crate::stats_file::hold_for_fork, || true);
    }
}
