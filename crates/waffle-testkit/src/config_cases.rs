//! The configuration cases of `faults_config.rs`: bad values (refused, naming the parameter and
//! value), edge values (open and work), unreachable nodes (a warning). `open-config-cases` opens
//! each and reports on stderr; the test reads that report against [`cases`].

use std::path::Path;

use rusqlite::Connection;

use crate::db::{drop_pager_cache, register, uri_flags};

#[derive(Clone, Copy, Debug)]
pub enum Want {
    /// The open fails; stderr names this parameter and value.
    Refused(&'static str, &'static str),
    /// The open works and so does a small workload.
    Opens,
    /// The open works; stderr has a warning containing this text; grid reads are misses.
    Warns(&'static str),
}

pub struct Case {
    /// URI parameters as given (encoded for the URI here).
    pub uri: Vec<(&'static str, String)>,
    /// Environment variables set for this open only.
    pub env: Vec<(&'static str, String)>,
    pub want: Want,
}

fn uri(params: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
    params.iter().map(|(k, v)| (*k, v.to_string())).collect()
}

/// Every case, in the order the child opens them. Writes the key files the key cases name into
/// `key_dir`; `closed_port` is a loopback port nobody listens on.
pub fn cases(key_dir: &Path, closed_port: u16) -> Vec<Case> {
    use Want::*;
    let mut c = Vec::new();
    let bad = |param: &'static str, values: &[&'static str], c: &mut Vec<Case>| {
        for v in values {
            c.push(Case { uri: uri(&[(param, v)]), env: vec![], want: Refused(param, v) });
        }
    };
    bad(
        "waffle_local",
        &[
            "lots",
            "",
            " ",
            "-1",
            "1.5GiB",
            "2TiB",
            "99999999999999999999",
            "12XB",
            "0x10",
            "1 MiB MiB",
            "MiB",
            // Nonsense budgets, and decimal units (never read as binary).
            "0",
            "1",
            "4095",
            "64MB",
            " 3 mb ",
        ],
        &mut c,
    );
    bad(
        "waffle_grid",
        &[
            "127.0.0.1",
            "127.0.0.1:99999",
            "127.0.0.1:0",
            "127.0.0.1:-1",
            ":11211",
            "localhost:",
            "a:1,,b:2",
            "a:1,",
            ",a:1",
            "h:1:0",
            "h:1:-2",
            "h:1:x",
            "h:1:2:3",
            "[::1",
            "[::1]",
            "::1:11211",
            "a b:1",
            "h:11211x",
        ],
        &mut c,
    );
    bad("waffle_timeout_ms", &["0", "fast", "60001", "-5", "1.5", "", "99999999999999999999999", "5ms"], &mut c);
    bad("waffle_push_queue", &["1.5MiB", "lots", "-1", "2TiB", "", "16 XiB", "1", "16MB"], &mut c);
    bad("waffle_direct_io", &["maybe", "2", "", "onn", "of"], &mut c);
    bad("waffle_hot_list", &["sometimes", "disk", "", "gird"], &mut c);
    let missing = key_dir.join("no-such.key");
    let short_key = key_dir.join("short.key");
    std::fs::write(&short_key, "00112233").unwrap();
    for path in [missing, short_key] {
        let v: &'static str = Box::leak(path.to_str().unwrap().to_string().into_boxed_str());
        c.push(Case { uri: uri(&[("waffle_key_file", v)]), env: vec![], want: Refused("waffle_key_file", v) });
    }
    bad("waffle_grid_change", &["sometimes", "", "2"], &mut c);
    bad("waffle_grid_backoff", &["later", "2"], &mut c);
    bad("waffle_compress", &["gzip", "", "zstd:99", "zstd:fast", "lz4:1"], &mut c);
    // A misspelt parameter of ours is refused (and the known ones named), not ignored.
    for name in ["waffle_locl", "waffle_compres", "WAFFLE_GRIDS"] {
        c.push(Case { uri: uri(&[(name, "1GiB")]), env: vec![], want: Refused("URI parameter", name) });
    }
    // One of ours in upper case (never read: SQLite's keys are case-sensitive), or twice (the first
    // only read), is refused too (issue 32 item 11).
    for name in ["WAFFLE_LOCAL", "Waffle_Grid"] {
        c.push(Case { uri: uri(&[(name, "2MiB")]), env: vec![], want: Refused("URI parameter", name) });
    }
    c.push(Case {
        uri: uri(&[("waffle_local", "2MiB"), ("waffle_local", "3MiB")]),
        env: vec![],
        want: Refused("URI parameter", "waffle_local"),
    });
    // So are the benchmarks' emulation parameters, gone from the product (issue 22).
    for name in ["waffle_device", "waffle_link"] {
        c.push(Case { uri: uri(&[(name, "real")]), env: vec![], want: Refused("URI parameter", name) });
    }
    // The environment is read when the URI does not say; its errors name the variable that was set.
    for (var, v) in [
        ("WAFFLE_LOCAL", "lots"),
        ("WAFFLE_LOCAL", "1"),
        ("WAFFLE_TIMEOUT_MS", "0"),
        ("WAFFLE_GRID", "nohost"),
        ("WAFFLE_PUSH_QUEUE", "big"),
        ("WAFFLE_DIRECT_IO", "perhaps"),
        ("WAFFLE_COMPRESS", "gzip"),
    ] {
        c.push(Case { uri: vec![], env: vec![(var, v.to_string())], want: Refused(var, v) });
    }
    // ... and the URI wins over it.
    c.push(Case { uri: uri(&[("waffle_local", "1MiB")]), env: vec![("WAFFLE_LOCAL", "lots".into())], want: Opens });
    // Values at the edges open and work.
    for (param, v) in [
        ("waffle_local", "4KiB"),
        ("waffle_local", "4096"),
        ("waffle_local", "1TiB"),
        ("waffle_local", " 3 mib "),
        ("waffle_local", "64M"),
        ("waffle_timeout_ms", "1"),
        ("waffle_timeout_ms", "60000"),
        ("waffle_push_queue", "0"),
        ("waffle_push_queue", "4KiB"),
        ("waffle_direct_io", "off"),
        ("waffle_direct_io", "ON"),
        // Every word the switch's message states (issue 32 item 11).
        ("waffle_direct_io", "yes"),
        ("waffle_direct_io", "TRUE"),
        ("waffle_direct_io", "0"),
        ("waffle_verify", "no"),
        ("waffle_hot_list", "off"),
        ("waffle_grid", ""),
        ("waffle_grid", "  "),
        ("waffle_grid_change", "on"),
        ("waffle_compress", "off"),
        ("waffle_compress", "ZSTD:-7"),
        ("waffle_compress", " lz4 "),
    ] {
        c.push(Case { uri: uri(&[(param, v)]), env: vec![], want: Opens });
    }
    // Unreachable nodes: a warning and misses, not an error.
    let closed = format!("127.0.0.1:{closed_port}");
    let tiny = ("waffle_local", "16KiB".to_string()); // so that pages leave L1 and the grid is asked
                                                      // The cost back-off off: on trial (docs/design.md, "The trial") a node is sent one page key in
                                                      // 64, and these cases' few evictions may reach it too rarely to count misses before the close.
    let all_sent = ("waffle_grid_backoff", "off".to_string());
    c.push(Case {
        uri: vec![("waffle_grid", closed.clone()), tiny.clone(), all_sent.clone()],
        env: vec![],
        want: Warns("is down"),
    });
    c.push(Case {
        uri: vec![("waffle_grid", "no-such-host.invalid:11211".into()), tiny, all_sent],
        env: vec![],
        want: Warns("cannot be resolved"),
    });
    c
}

/// Percent-encodes a URI parameter value (SQLite decodes it).
fn encode(v: &str) -> String {
    v.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b':' | b',' | b'/' | b'[' | b']' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

pub fn open(db: &Path, case: &Case) -> rusqlite::Result<Connection> {
    register();
    let mut u = format!("file:{}?vfs=waffle", db.to_str().unwrap());
    for (k, v) in &case.uri {
        u.push_str(&format!("&{k}={}", encode(v)));
    }
    Connection::open_with_flags(u, uri_flags())
}

/// A small workload whose results are known.
pub fn work(conn: &Connection) -> Result<(), String> {
    conn.execute_batch(
        "PRAGMA cache_size = 5; CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB);
         WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 300)
         INSERT INTO t SELECT i, randomblob(900) FROM s;
         UPDATE t SET v = zeroblob(900 + id % 7);",
    )
    .map_err(|e| e.to_string())?;
    drop_pager_cache(conn);
    let (count, total): (i64, i64) = conn
        .query_row("SELECT count(*), sum(length(v)) FROM t", [], |r| Ok((r.get(0)?, r.get(1)?)))
        .map_err(|e| e.to_string())?;
    let want_total: i64 = (1..=300).map(|id| 900 + id % 7).sum();
    if (count, total) != (300, want_total) {
        return Err(format!("wrong results: {count} rows, {total} bytes"));
    }
    let ok: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0)).map_err(|e| e.to_string())?;
    if ok != "ok" {
        return Err(format!("integrity_check: {ok}"));
    }
    Ok(())
}
