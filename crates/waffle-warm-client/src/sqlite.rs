//! A warm on a SQLite connection through the `waffle` VFS: `PRAGMA
//! waffle_warm` starts it (the connection's cache runs it in the
//! background), and the `"warm"` object of `PRAGMA waffle_stats` is followed
//! to its end.

use std::time::Instant;

use rusqlite::Connection;
use serde_json::Value;

use crate::follow::{Follow, Show, POLL};
use crate::warmed::Warmed;

/// Warms `table` (a table with its indexes, or an index; None: the whole
/// database) through `conn` and waits for the end, telling `show` how far it is.
pub fn warm(conn: &Connection, table: Option<&str>, show: Show<'_>) -> Result<Warmed, String> {
    let sql = match table {
        Some(t) => format!("PRAGMA waffle_warm='{}'", t.replace('\'', "''")),
        None => "PRAGMA waffle_warm".into(),
    };
    let t0 = Instant::now();
    let said: String = conn.query_row(&sql, [], |r| r.get(0)).map_err(|e| e.to_string())?;
    let what = said.trim_start_matches("started: ");
    let mut follow = Follow::new();
    loop {
        let w = stats(conn)?["warm"].clone();
        if let Some(warmed) = follow.step(&w, what, show, t0.elapsed().as_secs_f64())? {
            return Ok(warmed);
        }
        std::thread::sleep(POLL);
    }
}

/// `PRAGMA waffle_stats` on `conn`, as JSON.
pub fn stats(conn: &Connection) -> Result<Value, String> {
    let text: String =
        conn.query_row("PRAGMA waffle_stats", [], |r| r.get(0)).map_err(|e| format!("PRAGMA waffle_stats: {e}"))?;
    serde_json::from_str(&text).map_err(|e| format!("PRAGMA waffle_stats is not JSON: {e}"))
}
