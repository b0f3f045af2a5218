//! A benchmark's connections: how one opens for a configuration (the
//! `waffle` VFS with the plan's settings, or stock SQLite) and what its
//! counters say (`PRAGMA waffle_stats`, SQLite's own cache hits and misses).
//! Used by the runner and the restart; uses only the plan ([`super::configs`]).

use std::path::Path;

use rusqlite::{Connection, OpenFlags};
use serde_json::Value;
use waffle_core::stats::StatsSnapshot;

use super::configs::Plan;

/// A connection of `plan` to the database at `path`: through the `waffle` VFS
/// on `grid` with the plan's settings, or stock SQLite; its page cache sized.
pub(super) fn open_conn(path: &Path, plan: &Plan, timeout_ms: u64, grid: &[String]) -> rusqlite::Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_URI | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = if plan.waffle {
        waffle::register().map_err(|rc| rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(rc), None))?;
        let uri = format!(
            "file:{}?vfs=waffle&waffle_grid={}&waffle_local={}&waffle_timeout_ms={}&waffle_hot_list={}",
            path.display(),
            grid.join(","),
            plan.l1_bytes,
            timeout_ms.max(1),
            if plan.hot_list { "on" } else { "off" },
        );
        let uri = match plan.codec {
            Some(c) => format!("{uri}&waffle_compress={c}"),
            None => uri,
        };
        let uri = if plan.verify { format!("{uri}&waffle_verify=on") } else { uri };
        let uri = format!("{uri}&waffle_direct_io={}", if plan.direct_io_auto { "auto" } else { "on" });
        Connection::open_with_flags(uri, flags)?
    } else {
        Connection::open_with_flags(path, flags)?
    };
    conn.pragma_update(None, "cache_size", -(plan.sqlite_cache_per_conn_kib as i64))?;
    conn.set_prepared_statement_cache_capacity(32);
    Ok(conn)
}

/// `PRAGMA waffle_stats` on `conn` (Null if not JSON); `reset`: and its counters reset.
pub(super) fn waffle_stats(conn: &Connection, reset: bool) -> rusqlite::Result<StatsSnapshot> {
    let sql = if reset { "PRAGMA waffle_stats=reset" } else { "PRAGMA waffle_stats" };
    let text: String = conn.query_row(sql, [], |r| r.get(0))?;
    let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    Ok(StatsSnapshot::from_json(&v).unwrap_or_default())
}

/// SQLite's own page cache hits and misses on `conn` since the last call (which resets them).
pub(super) fn sqlite_cache_counts(conn: &Connection) -> (u64, u64) {
    let mut out = [0u64; 2];
    for (i, op) in
        [rusqlite::ffi::SQLITE_DBSTATUS_CACHE_HIT, rusqlite::ffi::SQLITE_DBSTATUS_CACHE_MISS].into_iter().enumerate()
    {
        let (mut cur, mut hi) = (0, 0);
        // SAFETY: the handle is a live connection owned by this thread; the out pointers are valid.
        let rc = unsafe { rusqlite::ffi::sqlite3_db_status(conn.handle(), op, &mut cur, &mut hi, 1) };
        if rc == rusqlite::ffi::SQLITE_OK {
            out[i] = cur.max(0) as u64;
        }
    }
    (out[0], out[1])
}
