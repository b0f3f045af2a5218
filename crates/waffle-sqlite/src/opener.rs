//! Whose settings a main database file is cached with: its opener's.
//!
//! xOpen cannot tell the connection's main database from a file that SQL
//! ATTACHes (same flags, and the ATTACH inherits this VFS and hands us its
//! URI). SQLite says which it was right after: `sqlite3BtreeOpen` sends
//! `SQLITE_FCNTL_PDB` once the pager has opened the file and read its header,
//! and at that moment `sqlite3_file_control(db, "main", FILE_POINTER)` is
//! this very file for the main open (`aDb[0].pBt` is already the new btree),
//! the main database's file for an ATTACH. So xOpen (vfs.rs) reads and checks
//! the URI (a bad value still refuses the open) and leaves a [`Pending`];
//! [`resolve`] attaches the cache then (file.rs calls it):
//! - the main open: its URI's settings, else the environment's;
//! - an ATTACH: the main database's settings if it is a file of ours, else
//!   the environment's; its URI's `waffle_*` parameters are ignored (said once
//!   at warn: SQL is not the opener), and it writes a stats file only where
//!   the environment names one.
//!
//! A host that never sends the hint (none we know of) resolves at the
//! file's first lock or page I/O, as the main open: nothing regresses, and
//! an ATTACH there still cannot replace a file or block (waffle-core's rules
//! for the key and stats files), but may choose its grid.

use std::os::raw::{c_int, c_void};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use waffle_core::Config;

use crate::descriptor::{self, DescriptorError};
use crate::ffi::*;
use crate::open_db::{OpenDb, Pending};
use crate::pass_through::WaffleFile;
use crate::registry;

/// `SQLITE_FCNTL_FILE_POINTER`: the `sqlite3_file*` of a schema of a connection.
const SQLITE_FCNTL_FILE_POINTER: c_int = 7;

/// Who opened a pending file.
pub enum Opener {
    /// The connection's opener (its main database).
    Main,
    /// SQL (an ATTACH): the main database's settings, if it is a file of ours with a cache.
    Attach { main: Option<Config> },
}

/// Whether the file SQLite hands `SQLITE_FCNTL_PDB` is the main database of
/// its connection; Some(main file) if not, None if it is or SQLite cannot say
/// (a host built with API armour answers MISUSE during the main open: the main).
///
/// # Safety
/// `arg` is SQLITE_FCNTL_PDB's argument (a `sqlite3**`, the connection
/// opening `f`), on that connection's thread inside sqlite3BtreeOpen.
pub unsafe fn main_file_of(f: *mut sqlite3_file, arg: *mut c_void) -> Option<*mut sqlite3_file> {
    if arg.is_null() {
        return None;
    }
    // SAFETY: with SQLITE_FCNTL_PDB, arg points to the btree's connection pointer.
    let db = unsafe { *(arg as *mut *mut c_void) };
    if db.is_null() {
        return None;
    }
    let mut main: *mut sqlite3_file = std::ptr::null_mut();
    let api = crate::api::installed();
    // SAFETY: db is the connection whose btree is being opened, on its thread (its mutex is
    // recursive); FILE_POINTER writes one sqlite3_file* to the pointer handed.
    let rc = unsafe {
        (api.file_control)(db, c"main".as_ptr(), SQLITE_FCNTL_FILE_POINTER, &mut main as *mut _ as *mut c_void)
    };
    (rc == SQLITE_OK && !main.is_null() && main != f).then_some(main)
}

/// Attaches the pending file `f` to its cache with its opener's settings.
/// A refusal (the file is open in this process with settings this one would
/// weaken) is logged and marks the file refused: its I/O fails.
///
/// # Safety
/// `f` is ours (a main database file of this VFS, open), on its connection's thread.
pub unsafe fn resolve(f: *mut sqlite3_file, who: Opener) {
    let wf = f as *mut WaffleFile;
    // SAFETY: f is ours; pending is Box::into_raw from xOpen, taken once here.
    let p = unsafe { std::mem::replace(&mut (*wf).pending, std::ptr::null_mut()) };
    if p.is_null() {
        return;
    }
    // SAFETY: as above.
    let pending = unsafe { Box::from_raw(p) };
    let (fd, advised) = (pending.fd, pending.no_read_ahead);
    let result = std::panic::catch_unwind(AssertUnwindSafe(|| attach(*pending, who)));
    match result {
        Ok(Ok(db)) => {
            // xOpen advised by its own settings; the opener's (an ATTACH's main) decide.
            let drops =
                descriptor::drops_page_cache(&db.config, db.len_seen.load(std::sync::atomic::Ordering::Relaxed));
            match (advised, drops) {
                (false, true) => descriptor::no_read_ahead(fd),
                (true, false) => descriptor::read_ahead_again(fd),
                _ => {}
            }
            // SAFETY: f is ours; main_close gives the Arc back.
            unsafe {
                (*wf).db = Arc::into_raw(db);
                (*wf).fd = fd;
            }
        }
        Ok(Err(line)) => {
            waffle_core::error!(key: line, "{line}");
            // SAFETY: f is ours.
            unsafe { (*wf).refused = true };
        }
        Err(_) => {
            waffle_core::error!("a database opens refused: internal error attaching its cache");
            // SAFETY: f is ours.
            unsafe { (*wf).refused = true };
        }
    }
}

/// The cache of a pending file, with the settings of `who`; Err: the refusal, said.
fn attach(pending: Pending, who: Opener) -> Result<Arc<OpenDb>, String> {
    let path = pending.path.display().to_string();
    let (config, stats) = match who {
        Opener::Main => {
            // The log is the process's: the last open that names a level sets it.
            if let Some(level) = pending.config.log {
                waffle_core::log::set_level(level);
            }
            (pending.config, pending.stats_uri)
        }
        Opener::Attach { main } => {
            if !pending.uri_params.is_empty() {
                let line = format!(
                    "{path} is attached from SQL: its URI's {} {} ignored (settings belong to the opener: \
                     it is cached with the main database's, else the environment's)",
                    pending.uri_params.join(", "),
                    if pending.uri_params.len() == 1 { "is" } else { "are" }
                );
                waffle_core::warn!(key: format!("attach settings {path}"), "{line}");
            }
            let config = match main {
                Some(c) => c,
                None => Config::from_lookup(|_| None).map_err(|e| format!("cannot open {path}: {e}"))?,
            };
            (config, crate::stats_file::env_path())
        }
    };
    let meta =
        descriptor::metadata(pending.fd).map_err(|e| format!("cannot open {path}: {}", DescriptorError::Stat(e)))?;
    let db = registry::attach(&pending.path, &meta, config, pending.read_only)
        .map_err(|why| format!("cannot open {path}: {why}"))?;
    // A panic there is caught here: past the attach, nothing may lose the connection's reference.
    let _ = std::panic::catch_unwind(AssertUnwindSafe(|| crate::stats_file::start(&db, stats, &meta)));
    Ok(db)
}

/// The settings a file of ours caches with, for an ATTACH on its connection:
/// its cache's, or its own pending ones; None if it has neither.
///
/// # Safety
/// `main` is a main database file of this VFS, open (its methods are ours).
pub unsafe fn settings_of(main: *mut sqlite3_file) -> Option<Config> {
    let wf = main as *mut WaffleFile;
    // SAFETY: main is ours: db and pending are null or alive until its close.
    unsafe {
        if !(*wf).db.is_null() {
            Some((*(*wf).db).config.clone())
        } else if !(*wf).pending.is_null() {
            Some((*(*wf).pending).config.clone())
        } else {
            None
        }
    }
}

/// Drops a pending file's state at its close (it never attached).
///
/// # Safety
/// `f` is ours, closing.
pub unsafe fn drop_pending(f: *mut sqlite3_file) {
    // SAFETY: f is ours; pending is Box::into_raw from xOpen, taken once.
    let p = unsafe { std::mem::replace(&mut (*(f as *mut WaffleFile)).pending, std::ptr::null_mut()) };
    if !p.is_null() {
        // SAFETY: as above.
        drop(unsafe { Box::from_raw(p) });
    }
}
