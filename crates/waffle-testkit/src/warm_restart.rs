//! The rows of `warm_restart.rs` and `commit-then-hang`: one row per 4 KiB leaf page, its bytes
//! named by (id, generation).

use rusqlite::Connection;

use crate::db::drop_pager_cache;
use crate::pattern;

/// Bytes of a row: one row per 4 KiB leaf page.
pub const ROW: usize = 3000;

pub fn params_for(grid: &str) -> Vec<(&str, &str)> {
    vec![("waffle_grid", grid), ("waffle_local", "16KiB"), ("waffle_timeout_ms", "1000")]
}

pub fn value(id: i64, generation: u64) -> Vec<u8> {
    pattern((generation << 32) | id as u64, ROW)
}

/// The generation of row `id` after `commit-then-hang`'s commit on the 200 rows of generation 1:
/// rows 1..=50 rewritten and 201..=300 added (generation 2), the rest untouched.
pub fn after_child_commit(id: i64) -> u64 {
    if id <= 50 || id > 200 {
        2
    } else {
        1
    }
}

/// The generation of row `id` after `commit-then-hang again` on what its first commit left:
/// rows 51..=100 rewritten (generation 4), the rest as `after_child_commit`.
pub fn after_second_child_commit(id: i64) -> u64 {
    if (51..=100).contains(&id) {
        4
    } else {
        after_child_commit(id)
    }
}

/// Reads every row once (SQLite's cache dropped first) and compares.
pub fn check_rows(conn: &Connection, expect: impl Fn(i64) -> Vec<u8>, count: i64) {
    drop_pager_cache(conn);
    let mut stmt = conn.prepare("SELECT id, v FROM t ORDER BY id").unwrap();
    let mut seen = 0;
    for row in stmt.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, Vec<u8>>(1)?))).unwrap() {
        let (id, v) = row.unwrap();
        seen += 1;
        assert_eq!(id, seen, "rows are 1..={count}");
        assert!(v == expect(id), "row {id} has wrong bytes");
    }
    assert_eq!(seen, count);
}
