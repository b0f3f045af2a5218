//! The SQLite adapter: a pass-through VFS named `waffle`.
//!
//! Open a database with `vfs=waffle` (URI `file:app.db?vfs=waffle&waffle_grid=...`)
//! and its main file goes through Waffle's cache; journals, WAL and temp files
//! pass straight through to the default VFS.
//!
//! ```text
//!  SQLite pager ──xRead(page)──> file.rs ──> waffle_core::PageCache ──> L1 / grid / O_DIRECT file
//!               ──xWrite(page)─> file.rs ──> real file (first) ──> PageCache::wrote
//!               ──PRAGMA waffle_stats──> pragma.rs (and every second, with
//!                     waffle_stats_file, to a file: stats_file.rs's thread)
//!               ──PRAGMA waffle_warm──> warm.rs: a thread with its own connection reads
//!                     pages in large reads inside read transactions (btree.rs finds a table's)
//!               ──xLock/xUnlock/xShmLock─> lock.rs ──> coherence.rs: before a
//!                     transaction reads, forget what other writers changed
//!                     (file signature; wal-index via wal_index.rs)
//!  xOpen (vfs.rs) ──> opener.rs (at SQLITE_FCNTL_PDB: the main open's URI, an
//!                     ATTACH the main database's settings) ──> registry.rs: one cache per database file per process;
//!                     other processes may have their own (shared sidecar lock);
//!                     the last clean close's hot list is reloaded by hot_reload.rs
//!                     (a thread as the warm's, L1's free room hottest first)
//!  every other file and method ──> pass_through.rs ──> the default VFS's file
//!  fork() ──> waffle_core::fork (pthread_atfork: the core's locks held across
//!                     it; in the child) ──> registry.rs forgets the parent's
//!                     caches: the child's opens get their own, and a parent's
//!                     connection used in the child passes through
//! ```
//!
//! The files go one way: each names only files listed before it here
//! (`./scripts/check-layout`), so the background jobs are handed what they
//! need (an `Arc<OpenDb>`, and `Warmers` for a connection of their own)
//! rather than calling back into the registry that starts them:
//!
//! ```text
//!  ffi, api, host_log, connection, btree, descriptor, wal_index, coherence, vfs_name
//!  job.rs            a database's background job (one at a time) and its PieceGate
//!  open_db.rs        OpenDb, one open database's state; Warmers (the registry's, handed in)
//!  stats_map.rs      the stats snapshot (pragma.rs, stats_file.rs)
//!  warm.rs, hot_reload.rs, stats_file.rs      the jobs
//!  registry.rs       attach/detach; starts the reload, stops the jobs at the last close
//!  pragma.rs         PRAGMA waffle_* (starts a warm with registry::WARMERS)
//!  pass_through.rs   our file's header and the plain methods
//!  opener.rs         whose settings a main file caches with (main open or ATTACH), at FCNTL_PDB
//!  lock.rs, file.rs  the I/O methods
//!  vfs.rs            the VFS: xOpen attaches, a job's connection joins; lib.rs registers it
//! ```
//!
//! Two ways in, one source:
//! - `libwaffle.so`, a loadable extension (`.load libwaffle`, entry point
//!   [`sqlite3_waffle_init`]) that calls the host's SQLite through the
//!   routines table it is handed;
//! - [`register`] (feature `linked`) for Rust programs that link SQLite.

// Every unsafe block says why it is sound (CI runs clippy with -D warnings).
#![warn(clippy::undocumented_unsafe_blocks)]
// Inside an unsafe fn, every unsafe operation still sits in its own `unsafe {}` block with its SAFETY reason.
#![warn(unsafe_op_in_unsafe_fn)]

use std::os::raw::{c_char, c_int, c_void};

mod api;
mod btree;
mod coherence;
mod connection;
mod descriptor;
mod ffi;
mod file;
mod host_log;
mod hot_reload;
mod job;
mod lock;
mod open_db;
mod opener;
mod pass_through;
mod pragma;
mod registry;
mod stats_file;
mod stats_map;
#[cfg(test)]
mod test_faults;
mod vfs;
mod vfs_name;
mod wal_index;
mod warm;

pub use vfs_name::VFS_NAME;

/// Entry point of the loadable extension: registers the `waffle` VFS and
/// keeps the library loaded for the life of the process.
///
/// # Safety
/// Called by SQLite with the extension's routines table.
#[no_mangle]
pub unsafe extern "C" fn sqlite3_waffle_init(
    _db: *mut c_void,
    _err: *mut *mut c_char,
    routines: *const c_void,
) -> c_int {
    // SAFETY: routines is the pApi SQLite handed this entry point (our own contract).
    let Some(api) = (unsafe { api::Api::from_routines(routines) }) else {
        return ffi::SQLITE_ERROR;
    };
    match vfs::register(api) {
        ffi::SQLITE_OK => ffi::SQLITE_OK_LOAD_PERMANENTLY,
        rc => rc,
    }
}

/// Registers the `waffle` VFS with the SQLite this program links. Idempotent.
#[cfg(feature = "linked")]
pub fn register() -> Result<(), c_int> {
    match vfs::register(api::Api::linked()) {
        ffi::SQLITE_OK => Ok(()),
        rc => Err(rc),
    }
}
