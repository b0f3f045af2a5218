//! Opening SQLite connections through the `waffle` VFS, with the settings a
//! shipped library takes (an EMULATED device is where the file is: see
//! `bench::emulation`).

use std::path::Path;

use rusqlite::{Connection, OpenFlags};
use waffle_core::stats::{CacheSnapshot, StatsSnapshot};

/// The cache settings of one configuration.
#[derive(Clone, Debug, Default)]
pub struct Settings {
    /// Grid nodes (host:port); empty = L1 only.
    pub grid: Vec<String>,
    pub local_bytes: u64,
    pub timeout_ms: u64,
}

/// Opens `path` through waffle with `settings`, SQLite's own page cache set to `sqlite_cache_kib`.
///
/// With `waffle_direct_io=on`: the demo is about a database larger than the memory left to it,
/// so what the cache read must not stay in the kernel's page cache either. The library's
/// default (`auto`) keeps a file this small cached on a machine of this size, and then no read
/// after the first reaches the disk, EMULATED or not (the slow-disk shim slows only reads the
/// page cache does not answer).
///
/// The cost back-off as shipped (on): the grid is asked where it pays (a slow disk's node is
/// promising from its first round trips, docs/design.md, "The trial") and costs next to nothing
/// where it does not. The demo fills the grid with a warm first (`demo::measure`).
pub fn open(path: &Path, settings: &Settings, sqlite_cache_kib: u64) -> rusqlite::Result<Connection> {
    waffle::register().map_err(|rc| rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(rc), None))?;
    let uri = format!(
        "file:{}?vfs=waffle&waffle_direct_io=on&waffle_grid={}&waffle_local={}&waffle_timeout_ms={}",
        path.display(),
        settings.grid.join(","),
        settings.local_bytes,
        settings.timeout_ms.max(1),
    );
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_URI | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(uri, flags)?;
    conn.pragma_update(None, "cache_size", -(sqlite_cache_kib as i64))?;
    Ok(conn)
}

/// The cache's part of `PRAGMA waffle_stats`.
pub fn stats(conn: &Connection) -> rusqlite::Result<CacheSnapshot> {
    let text: String = conn.query_row("PRAGMA waffle_stats", [], |r| r.get(0))?;
    let v: serde_json::Value = serde_json::from_str(&text).expect("waffle_stats is JSON");
    Ok(StatsSnapshot::from_json(&v).expect("waffle_stats is a stats snapshot").cache().clone())
}
