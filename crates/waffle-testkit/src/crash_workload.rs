//! The numbered transactions `crash-writer` commits until `faults_crash.rs` kills it, and the
//! state the database must hold after any prefix of them.

use rusqlite::{params, Connection};

use crate::pattern;

/// The URI parameters of every open of the crash database: a tiny L1, so pages go to the grid.
pub fn params_for(grid: &str) -> Vec<(&str, &str)> {
    vec![("waffle_grid", grid), ("waffle_local", "16KiB"), ("waffle_timeout_ms", "1000")]
}

pub fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Rows inserted by transaction `n`.
fn rows_of(n: u64) -> u64 {
    1 + mix(n) % 6
}

/// The value of row `j` of transaction `n`: up to three 4 KiB pages.
fn value(n: u64, j: u64) -> Vec<u8> {
    let len = 100 + (mix(n << 8 | j) % (3 * 4096)) as usize;
    pattern(n << 8 | j, len)
}

/// Transaction `n`: its rows, the odd rows of transaction `n - 3` deleted, the counter.
pub fn transaction(conn: &Connection, n: u64) {
    let tx = conn.unchecked_transaction().unwrap();
    for j in 0..rows_of(n) {
        tx.execute("INSERT INTO t(id, n, v) VALUES (?, ?, ?)", params![(n * 100 + j) as i64, n as i64, value(n, j)])
            .unwrap();
    }
    if n > 3 {
        tx.execute("DELETE FROM t WHERE n = ? AND id % 2 = 1", [(n - 3) as i64]).unwrap();
    }
    tx.execute("UPDATE meta SET last = ?", [n as i64]).unwrap();
    tx.commit().unwrap();
}

/// The rows (id, n, v) the database holds after transactions 1..=m, by id.
pub fn expected(m: u64) -> Vec<(i64, i64, Vec<u8>)> {
    let mut rows = Vec::new();
    for n in 1..=m {
        for j in 0..rows_of(n) {
            let deleted = j % 2 == 1 && n + 3 <= m;
            if !deleted {
                rows.push(((n * 100 + j) as i64, n as i64, value(n, j)));
            }
        }
    }
    rows
}
