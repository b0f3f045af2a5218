//! Opening databases, plainly or through `waffle`, and reading its stats: used by the child programs
//! and by every end-to-end test.

use std::path::Path;
use std::sync::Once;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};
use serde_json::Value;
use waffle_core::stats::{CacheSnapshot, StatsSnapshot};

/// Registers the `waffle` VFS with the SQLite rusqlite links (once per process).
pub fn register() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| waffle::register().expect("waffle::register() failed"));
}

/// `file:{path}?vfs=waffle&k=v&...`
pub fn waffle_uri(path: &Path, params: &[(&str, &str)]) -> String {
    let p = path.to_str().expect("temp paths are UTF-8");
    assert!(!p.contains(['?', '#', '%']), "path {p} needs URI escaping; pick another temp dir");
    let mut uri = format!("file:{p}?vfs=waffle");
    for (k, v) in params {
        uri.push_str(&format!("&{k}={v}"));
    }
    uri
}

pub fn uri_flags() -> OpenFlags {
    OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_URI
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
}

/// Opens `path` through `waffle` with the given URI parameters. Parameters
/// not given are pinned here (no grid, direct I/O on) so that a WAFFLE_*
/// variable in the environment cannot change what a test measures. The cost
/// back-off is pinned off: on a fast temp disk it would keep most requests
/// from the grid path these tests exercise (the tests of the back-off itself
/// turn it on). The hot list is pinned `on` (SQLite's default is `grid`): the end-to-end tests
/// run with its fullest reload (grid, then disk through a connection of its own).
pub fn open_waffle(path: &Path, params: &[(&str, &str)]) -> Connection {
    try_open_waffle(path, params).unwrap_or_else(|e| panic!("open {} through waffle: {e}", path.display()))
}

pub fn try_open_waffle(path: &Path, params: &[(&str, &str)]) -> rusqlite::Result<Connection> {
    register();
    let mut all: Vec<(&str, &str)> = params.to_vec();
    let pinned = [
        ("waffle_grid", ""),
        ("waffle_local", "256MiB"),
        ("waffle_timeout_ms", "1000"),
        ("waffle_grid_backoff", "off"),
        ("waffle_hot_list", "on"),
    ];
    for (k, v) in pinned {
        if !all.iter().any(|(name, _)| *name == k) {
            all.push((k, v));
        }
    }
    let conn = Connection::open_with_flags(waffle_uri(path, &all), uri_flags())?;
    conn.busy_timeout(Duration::from_secs(10))?;
    Ok(conn)
}

/// A plain database: SQLite's default VFS, nothing of ours in the way.
pub fn open_plain(path: &Path) -> Connection {
    let conn = Connection::open(path).unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    conn.busy_timeout(Duration::from_secs(10)).unwrap();
    conn
}

/// `PRAGMA cache_size = {cache_pages}` (SQLite's own cache kept small, so reads reach the VFS) and
/// a table `t(id INTEGER PRIMARY KEY, v BLOB)` holding `value(id)` for every id of `ids`, written
/// in one transaction.
pub fn create_blob_table(
    conn: &Connection,
    cache_pages: u32,
    ids: impl IntoIterator<Item = i64>,
    value: impl Fn(i64) -> Vec<u8>,
) {
    conn.execute_batch(&format!("PRAGMA cache_size = {cache_pages}; CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB);"))
        .expect("create table t");
    let tx = conn.unchecked_transaction().expect("begin");
    for id in ids {
        tx.execute("INSERT INTO t VALUES (?1, ?2)", rusqlite::params![id, value(id)]).expect("insert into t");
    }
    tx.commit().expect("commit");
}

/// The bytes held in the blobs of [`create_blob_table`]'s table (`sum(length(v))`): reading them
/// reads every page of the table.
pub fn blob_total(conn: &Connection) -> i64 {
    conn.query_row("SELECT sum(length(v)) FROM t", [], |r| r.get(0)).expect("SELECT sum(length(v)) FROM t")
}

/// `PRAGMA waffle_stats` as JSON.
pub fn stats(conn: &Connection) -> Value {
    let text: String = conn
        .query_row("PRAGMA waffle_stats", [], |r| r.get(0))
        .expect("PRAGMA waffle_stats returns one row (is this database open through waffle?)");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("PRAGMA waffle_stats is not JSON ({e}): {text}"))
}

/// `PRAGMA waffle_stats` as the typed snapshot (prefer it to string keys: a renamed field fails to build).
pub fn snapshot(conn: &Connection) -> StatsSnapshot {
    let v = stats(conn);
    StatsSnapshot::from_json(&v).unwrap_or_else(|e| panic!("PRAGMA waffle_stats is not a stats snapshot ({e}): {v}"))
}

/// The cache's counters and levels of `PRAGMA waffle_stats`.
pub fn cache_stats(conn: &Connection) -> CacheSnapshot {
    snapshot(conn).cache().clone()
}

/// A counter by JSON path, e.g. `n(&s, "l2_rejects.version")` (where a test checks the JSON itself).
pub fn n(stats: &Value, path: &str) -> u64 {
    let mut v = stats;
    for part in path.split('.') {
        v = v.get(part).unwrap_or_else(|| panic!("waffle_stats has no {path}: {stats}"));
    }
    v.as_u64().unwrap_or_else(|| panic!("waffle_stats {path} is not a count: {v}"))
}

/// The cache identity of an open database (16 hex digits).
pub fn cache_id(conn: &Connection) -> u64 {
    let s = stats(conn);
    let text = s["cache_id"].as_str().unwrap_or_else(|| panic!("no cache_id in {s}"));
    u64::from_str_radix(text, 16).unwrap_or_else(|e| panic!("cache_id {text}: {e}"))
}

/// `PRAGMA waffle_flush`: waits until every evicted page was pushed.
pub fn flush(conn: &Connection) {
    let r: String = conn.query_row("PRAGMA waffle_flush", [], |r| r.get(0)).expect("PRAGMA waffle_flush");
    assert_eq!(r, "ok", "PRAGMA waffle_flush did not finish");
}

/// Frees this connection's own page cache (SQLite's pager), so the next
/// statement reads its pages through the VFS again.
pub fn drop_pager_cache(conn: &Connection) {
    conn.execute_batch("PRAGMA shrink_memory").expect("PRAGMA shrink_memory");
}
