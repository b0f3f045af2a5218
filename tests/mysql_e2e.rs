//! MariaDB under `libwaffle_preload.so`, end to end: a 6 MiB buffer pool, a
//! 1 MiB L1 and two memcached nodes, so nearly every page InnoDB reads or
//! writes goes through the cache and the grid.
//!
//! 1. A deterministic single-client write workload (seeded: inserts,
//!    updates, deletes, off-page blobs, transactions with rollbacks, instant
//!    ALTER, OPTIMIZE (a table rebuilt into a new file), DROP, TRUNCATE, a new
//!    index) prints exactly what it prints on a stock server, CHECKSUM TABLE
//!    included.
//! 2. Then the real sysbench oltp_read_write, 4 threads, on top: it ends
//!    without errors and CHECK TABLE is OK everywhere.
//! 3. The grid was used (l2_hits, l2_pushes > 0), no grid copy failed the
//!    InnoDB page check, no read fell back, and the server logged no error.

#[path = "mysql_support.rs"]
mod mysql_support;

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use mysql_support::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const SEED: u64 = 0x5E_ED0F_3A7E;
const ROWS: u32 = 12_000;
const OPS: u32 = 4_000;

fn text(r: &mut SmallRng, len: std::ops::Range<usize>) -> String {
    let len = r.gen_range(len);
    const A: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 ";
    (0..len).map(|_| A[r.gen_range(0..A.len())] as char).collect()
}

fn row(r: &mut SmallRng, id: u32) -> String {
    let c = match r.gen_range(0..10) {
        0..=5 => "NULL".to_string(),
        6..=8 => format!("'{}'", text(r, 100..3000)),
        // Off-page: longer than fits in a 16 KiB page's half.
        _ => format!("REPEAT('{}', {})", text(r, 40..41), r.gen_range(200..500)),
    };
    format!("({id},{},'{}',{c})", r.gen_range(0..100_000), text(r, 20..250))
}

/// The workload as one SQL script (deterministic for a seed; one client runs it in order).
fn workload(seed: u64) -> String {
    let mut r = SmallRng::seed_from_u64(seed);
    let mut s = String::new();
    s.push_str("CREATE DATABASE w;\nUSE w;\n");
    s.push_str("CREATE TABLE t (id INT PRIMARY KEY, a INT NOT NULL, b VARCHAR(255) NOT NULL, c MEDIUMTEXT, KEY ka (a)) ENGINE=InnoDB;\n");
    s.push_str("CREATE TABLE u (id INT AUTO_INCREMENT PRIMARY KEY, t_id INT NOT NULL, v BIGINT NOT NULL, KEY kt (t_id)) ENGINE=InnoDB;\n");
    s.push_str("CREATE TABLE gone (id INT PRIMARY KEY, pad VARCHAR(255) NOT NULL) ENGINE=InnoDB;\n");
    for chunk in (1..=ROWS).collect::<Vec<_>>().chunks(200) {
        let rows: Vec<String> = chunk.iter().map(|&id| row(&mut r, id)).collect();
        let _ = writeln!(s, "INSERT INTO t VALUES {};", rows.join(","));
    }
    for _ in 0..20 {
        let rows: Vec<String> =
            (0..1000).map(|_| format!("({},{})", r.gen_range(1..=ROWS), r.gen_range(0..1_000_000))).collect();
        let _ = writeln!(s, "INSERT INTO u (t_id, v) VALUES {};", rows.join(","));
    }
    for chunk in (1..=3000).collect::<Vec<u32>>().chunks(500) {
        let rows: Vec<String> = chunk.iter().map(|id| format!("({id},'{}')", text(&mut r, 200..201))).collect();
        let _ = writeln!(s, "INSERT INTO gone VALUES {};", rows.join(","));
    }
    let mut next_id = ROWS + 1;
    let mut op = 0;
    while op < OPS {
        let in_txn = r.gen_bool(0.3);
        if in_txn {
            s.push_str("BEGIN;\n");
        }
        for _ in 0..r.gen_range(1..8) {
            op += 1;
            match op {
                1000 => s.push_str("ALTER TABLE t ADD COLUMN d INT NOT NULL DEFAULT 7;\n"),
                2000 => s.push_str("OPTIMIZE TABLE t;\n"),
                2500 => s.push_str("DROP TABLE gone;\nCREATE TABLE gone2 (id INT PRIMARY KEY, pad VARCHAR(255) NOT NULL) ENGINE=InnoDB;\nINSERT INTO gone2 SELECT id, b FROM t WHERE id % 5 = 0;\n"),
                3000 => s.push_str("ALTER TABLE u ADD INDEX kv (v);\n"),
                3500 => s.push_str("TRUNCATE TABLE gone2;\nINSERT INTO gone2 SELECT id, LEFT(b, 100) FROM t WHERE id % 7 = 0;\n"),
                _ => {}
            }
            if in_txn && matches!(op, 1000 | 2000 | 2500 | 3000 | 3500) {
                continue; // DDL commits the transaction; keep going
            }
            let id = r.gen_range(1..next_id);
            match r.gen_range(0..100) {
                0..=34 => {
                    let _ = writeln!(
                        s,
                        "UPDATE t SET a={}, b='{}' WHERE id={id};",
                        r.gen_range(0..100_000),
                        text(&mut r, 10..250)
                    );
                }
                35..=44 => {
                    let _ = writeln!(
                        s,
                        "UPDATE t SET c=REPEAT('{}', {}) WHERE id={id};",
                        text(&mut r, 10..11),
                        r.gen_range(0..2000)
                    );
                }
                45..=54 => {
                    let _ = writeln!(s, "DELETE FROM t WHERE id BETWEEN {id} AND {};", id + r.gen_range(0..20));
                }
                55..=69 => {
                    let v = row(&mut r, next_id);
                    next_id += 1;
                    let _ = writeln!(s, "INSERT INTO t (id, a, b, c) VALUES {v} ON DUPLICATE KEY UPDATE a=a+1;");
                }
                70..=84 => {
                    let _ = writeln!(
                        s,
                        "INSERT INTO u (t_id, v) VALUES ({id},{}),({},{});",
                        r.gen_range(0..1_000_000),
                        r.gen_range(1..next_id),
                        r.gen_range(0..1000)
                    );
                }
                85..=94 => {
                    let _ = writeln!(
                        s,
                        "UPDATE u SET v=v+{} WHERE t_id BETWEEN {id} AND {};",
                        r.gen_range(1..100),
                        id + 50
                    );
                }
                _ => {
                    let _ = writeln!(s, "DELETE FROM u WHERE t_id % 97 = {} ORDER BY id LIMIT 50;", r.gen_range(0..97));
                }
            }
        }
        if in_txn {
            s.push_str(if r.gen_bool(0.2) { "ROLLBACK;\n" } else { "COMMIT;\n" });
        }
    }
    s.push_str("SELECT COUNT(*), SUM(a), SUM(LENGTH(c)), SUM(d) FROM t;\nSELECT COUNT(*), SUM(v) FROM u;\n");
    s.push_str("CHECKSUM TABLE w.t, w.u, w.gone2 EXTENDED;\n");
    s
}

fn run_workload(s: &Server, script: &str) -> String {
    let t = Instant::now();
    let out =
        s.sql_script(script, Duration::from_secs(600)).unwrap_or_else(|e| panic!("workload: {e}\nlog:\n{}", s.log()));
    eprintln!("workload on {}: {:.1} s", s.datadir.display(), t.elapsed().as_secs_f64());
    out
}

#[test]
fn deterministic_workload_matches_stock_then_sysbench_read_write_is_clean() {
    let _serial = serial();
    let t0 = Instant::now();
    let dir = TempDir::new("e2e");
    let script = workload(SEED);

    // The reference: a stock server with the same buffer pool.
    let stock_dir = fresh_datadir(&dir, "stock");
    let stock = start(&stock_dir, stock_options(POOL));
    let expected = run_workload(&stock, &script);
    stock.shutdown().unwrap();
    assert!(expected.contains("w.gone2"), "the workload ends with CHECKSUM TABLE: {expected}");

    let a = start_node(64);
    let b = start_node(64);
    let grid = grid_of(&[&a, &b]);
    let data = fresh_datadir(&dir, "waffle");
    let s = start(&data, waffle_options(&grid, "1MiB", &[("WAFFLE_TIMEOUT_MS", "200")]));
    let got = run_workload(&s, &script);
    assert_eq!(got, expected, "the same workload printed something else under the preload");
    s.check_tables(&["w.t", "w.u", "w.gone2"]).unwrap();
    let after_workload =
        stats_after(&s, "after the workload", |v| cache_of(v).l2_hits > 0 && cache_of(v).l2_pushes > 0);
    eprintln!(
        "after the workload: l1_hits {} l2_hits {} disk_reads {} pushes {} page_writes {}",
        cache_of(&after_workload).l1_hits,
        cache_of(&after_workload).l2_hits,
        cache_of(&after_workload).disk_reads,
        cache_of(&after_workload).l2_pushes,
        preload_of(&after_workload).preload.page_writes
    );
    assert!(
        preload_of(&after_workload).preload.segments_dropped > 0,
        "OPTIMIZE/DROP/TRUNCATE closed tablespaces: {after_workload}"
    );

    // The real sysbench, several threads, on top. The stats are taken before
    // it: the file must come to show its reads (it is written every second;
    // taken after, it may already show everything and never grow again).
    let before = s.stats().unwrap();
    sysbench_prepare(&s, 2, 20_000);
    let args =
        sysbench_args(&s, 2, 20_000, &["--threads=4", "--time=10", "--report-interval=0", "oltp_read_write", "run"]);
    let r =
        server::sysbench(tools(), &args, Duration::from_secs(120)).unwrap_or_else(|e| panic!("{e}\nlog:\n{}", s.log()));
    eprintln!(
        "sysbench oltp_read_write under the preload: {:.1} tps, p95 {:.2} ms, ignored errors {}",
        r.tps, r.latency_p95_ms, r.ignored_errors
    );
    assert!(r.transactions > 0 && r.errors == 0, "{}", r.output);
    let mut tables = sbtest_tables(2);
    tables.extend(["w.t", "w.u", "w.gone2"].map(String::from));
    s.check_tables(&refs(&tables)).unwrap();

    let v = stats_after(&s, "after sysbench", |v| {
        cache_of(v).l2_hits > cache_of(&before).l2_hits
            && preload_of(v).preload.page_reads > preload_of(&before).preload.page_reads
    });
    let sb = tablespace_of(&v, "sbtest/sbtest1");
    assert!(sb.l2_hits > 0 && sb.page_writes > 0, "sbtest1 went through the grid: {sb:?}");
    assert_eq!(preload_of(&v).preload.innodb_rejects.total(), 0, "a grid copy failed the InnoDB page check: {v}");
    assert_eq!(preload_of(&v).preload.fallback_reads, 0, "{v}");
    assert_eq!(cache_of(&v).l2_rejects.database, 0, "{v}");
    assert_eq!(v["state"], "running", "{v}");
    let errors = log_errors(&s, &[]);
    assert!(errors.is_empty(), "the server logged errors: {errors:#?}");
    s.shutdown().unwrap();
    eprintln!("total {:.1} s", t0.elapsed().as_secs_f64());
}
