//! One open database's state in this process (`OpenDb`): its cache, its
//! warming progress, what it knows of other writers, and its background job.
//!
//! A leaf below everything that works on a database: it holds data and
//! names no file above it. The registry (registry.rs) creates and closes an
//! `OpenDb`; the jobs (warm.rs, hot_reload.rs, stats_file.rs) are handed an
//! `Arc<OpenDb>` and, for a connection of their own, [`Warmers`]; the VFS's
//! methods (file.rs, lock.rs) reach it through their file's header.

use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;
use std::os::unix::io::RawFd;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use waffle_core::backing::Backing;
use waffle_core::sidecar::Sidecar;
use waffle_core::warming::hot_list::HotList;
use waffle_core::warming::reload::ReloadFrom;
use waffle_core::warming::Warming;
use waffle_core::{Config, PageCache};

use crate::coherence::Coherence;
use crate::descriptor::SqliteFd;
use crate::job::Job;

pub struct OpenDb {
    pub cache: PageCache,
    /// The warm's and the hot list reload's progress (the layer above the cache).
    pub warming: Warming,
    /// The database file's device and inode, from SQLite's own descriptor
    /// (descriptor.rs): waffle holds no descriptor of its own on it.
    pub key: Key,
    /// The file's length as last seen under a lock (for work without a connection).
    pub len_seen: AtomicU64,
    pub path: PathBuf,
    pub config: Config,
    /// What the cache knows of other writers (file signature, WAL position).
    pub coherence: Mutex<Coherence>,
    /// The database's WAL file (`<db>-wal`), read for the page numbers of checkpointed frames.
    pub wal_path: PathBuf,
    /// Writes to the WAL file by this process's waffle connections: a new WAL
    /// generation that appears while one of them holds the write lock is its
    /// own only if it wrote frames meanwhile.
    pub wal_writes: Arc<AtomicU64>,
    /// Region 0 of the wal-index as this process maps it (the unix VFS maps it
    /// once per process and database, for every connection): read by a handle
    /// of ours that has not mapped it yet (lock.rs, `main_lock`).
    pub shm: Mutex<SharedRegion>,
    /// Bytes 24..40 of page 1 as the cache last saw them (read or written
    /// through it): what SQLite's pager compares at its next SHARED lock.
    pub header_seen: Mutex<Option<[u8; 16]>>,
    /// The background warm of this database (`PRAGMA waffle_warm`), if one
    /// runs, or the hot list's reload (hot_reload.rs).
    pub warm: Arc<Job>,
    /// The hot list this open found, until its reload starts, and where it
    /// reloads from (the registry's: set at open, taken once registered).
    pub(crate) hot: Mutex<Option<(HotList, ReloadFrom)>>,
    /// None: a read-only open, or a sidecar that cannot be used (a cold open,
    /// nothing saved). The registry's: acquired at open, saved at the last close.
    pub(crate) sidecar: Option<Sidecar>,
    /// The fork generation it was opened in (waffle_core::fork): in a forked child, the parent's.
    pub generation: u64,
}

impl OpenDb {
    /// Whether this process opened it: false in a forked child for its parent's caches, which the
    /// child's connections pass by (pass_through.rs's `db`) and never close (registry.rs).
    pub fn is_ours(&self) -> bool {
        self.generation == waffle_core::fork::generation()
    }

    /// Calls `read` with what the cache reads from: the file through SQLite's
    /// descriptor `fd` of the asking connection.
    pub fn with_backing<R>(&self, fd: RawFd, read: impl FnOnce(&dyn Backing) -> R) -> R {
        let drop_cache = crate::descriptor::drops_page_cache(&self.config, self.len_seen.load(Ordering::Relaxed));
        read(&SqliteFd { fd, drop_cache })
    }

    /// Turns the database's cache off for good (pass-through), saying why once.
    pub fn trip(&self, why: &str) {
        let _ = catch_unwind(AssertUnwindSafe(|| self.cache.trip(&format!("{} ({})", why, self.path.display()))));
    }
}

/// A main database file SQLite has opened whose cache is not attached yet:
/// what its xOpen read, kept until SQLite says whose file it is (opener.rs).
pub struct Pending {
    /// Its URI's settings (and the environment's): the opener's if this is the main open.
    pub config: Config,
    /// Its URI's `waffle_*` parameter names, said if an ATTACH named any.
    pub uri_params: Vec<String>,
    /// The stats file its URI (else the environment) names; an ATTACH's is the environment's.
    pub stats_uri: Option<PathBuf>,
    pub path: PathBuf,
    pub read_only: bool,
    /// SQLite's own descriptor of the file (descriptor.rs).
    pub fd: RawFd,
    /// Whether xOpen advised no read-ahead on it (`config` drops the page cache).
    pub no_read_ahead: bool,
}

/// The wal-index mapping while handles of ours hold it: the address stays
/// valid while `handles` > 0 (the VFS unmaps only after the last one lets go,
/// and a handle leaves the count before it lets go, under this lock).
#[derive(Default)]
pub struct SharedRegion {
    pub handles: usize,
    pub region0: usize,
}

/// A database file's device and inode.
pub type Key = (u64, u64);

pub fn key_of(m: &Metadata) -> Key {
    (m.dev(), m.ino())
}

/// How a job's connection is counted among the database's connections (as a
/// warmer, which a closing database stops): the registry's functions, handed
/// to a job when it starts, so that the job calls no file above it.
#[derive(Clone, Copy)]
pub struct Warmers {
    /// A reference for a job's connection to an open database (counted as a
    /// warmer), taken while a connection of the caller holds it open; None
    /// if it is not open.
    pub reserve: fn(&OpenDb) -> Option<Arc<OpenDb>>,
    /// Gives back a reference `reserve` took (a warmer's detach: it may close the database).
    pub release: fn(Arc<OpenDb>),
}
