//! More than 1100 tablespaces open at once under the MariaDB preload: the
//! pages of the last ones, whose segment numbers are past 1023, are read from
//! the disk through the cache and then served from L1 and from the grid.
//!
//! The defect this catches: the preload packed a page as `segment << 40 |
//! index` and the backing read multiplied that number by the page size, which
//! wraps past segment 1023 at 16 KiB pages. Every cache miss of those files
//! then failed inside the cache (the server read the file itself), so nothing
//! of them was ever cached. Now the backing is asked for (segment, index).
//!
//! A stock server creates 1050 one-row tables `m.s0001..` and 100 tables
//! `m.b001..b100` of 600 rows (about 8 pages each, 13 MiB in all, twice the
//! 6 MiB buffer pool); a server under the preload (10 MiB L1, more than the
//! buffer pool so that a backward scan finds pages in L1 that InnoDB let go; one node, a fresh
//! cache id: nothing cached yet) opens every small table first, so the big
//! ones get the highest segments, then scans the big ones forward, backward
//! and forward again. Each scan's sums equal the stock server's.

#[path = "mysql_support.rs"]
mod mysql_support;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use mysql_support::*;
use serde_json::Value;
use waffle_core::stats::TablespaceSnapshot;

const SMALL: u32 = 1050;
const BIG: u32 = 100;
const BIG_ROWS: u32 = 600;
/// The first segment whose byte offset wrapped at 16 KiB pages (2^64 / 2^40 / 2^14).
const WRAPPED_FROM: u64 = 1024;
/// Rows of `f.pad`, a table the preload does not cache (`WAFFLE_TABLES=m/*`): about 11 MiB,
/// past the 6 MiB buffer pool, so that scanning it empties the pool without touching L1.
const PAD_ROWS: u32 = 50_000;
/// Enough descriptors and cache slots for every table to stay open; and a buffer pool that is
/// one LRU list. By default (`innodb_old_blocks_time` 1000 ms) a page touched again a second
/// after it came in moves to the young sublist, where a scan's new pages never push it out:
/// how many of the five tables' pages stayed in the pool then depended on how fast the machine
/// ran the passes, and in slow runs the five read again never asked the preload.
const OPEN_ARGS: [&str; 4] =
    ["--innodb-open-files=4000", "--table-open-cache=4000", "--open-files-limit=10000", "--innodb-old-blocks-time=0"];

fn small(i: u32) -> String {
    format!("s{i:04}")
}

fn big(i: u32) -> String {
    format!("b{i:03}")
}

fn create_tables(s: &Server) {
    let mut script = String::from("CREATE DATABASE m; USE m;\n");
    for i in 1..=SMALL {
        script.push_str(&format!("CREATE TABLE {} (id INT PRIMARY KEY) ENGINE=InnoDB; ", small(i)));
        script.push_str(&format!("INSERT INTO {} VALUES ({i});\n", small(i)));
    }
    for i in 1..=BIG {
        script.push_str(&format!(
            "CREATE TABLE {t} (id INT PRIMARY KEY, c CHAR(200) NOT NULL) ENGINE=InnoDB; \
             INSERT INTO {t} SELECT seq, CONCAT('{t}-', seq) FROM seq_1_to_{BIG_ROWS};\n",
            t = big(i)
        ));
    }
    script.push_str(&format!(
        "CREATE DATABASE f; CREATE TABLE f.pad (id INT PRIMARY KEY, c CHAR(200) NOT NULL) ENGINE=InnoDB; \
         INSERT INTO f.pad SELECT seq, 'pad' FROM seq_1_to_{PAD_ROWS};\n"
    ));
    s.sql_script(&script, Duration::from_secs(600)).unwrap_or_else(|e| panic!("creating the tables: {e}"));
}

/// One scan of every big table in `order`: each table's row count and sums, as one line.
fn scan(s: &Server, order: &[u32]) -> Vec<String> {
    let script: String = order
        .iter()
        .map(|&i| format!("SELECT '{t}', COUNT(*), SUM(id), SUM(LENGTH(c)), SUM(CRC32(c)) FROM m.{t};\n", t = big(i)))
        .collect();
    let out = s.sql_script(&script, Duration::from_secs(300)).unwrap_or_else(|e| panic!("scanning: {e}"));
    let mut lines: Vec<String> = out.lines().filter(|l| l.starts_with('b')).map(str::to_string).collect();
    lines.sort();
    assert_eq!(lines.len(), order.len(), "one line per table: {out}");
    lines
}

fn options(extra: ServerOptions) -> ServerOptions {
    let mut o = extra;
    o.extra_args.extend(OPEN_ARGS.iter().map(|a| a.to_string()));
    o
}

#[test]
fn pages_of_tablespaces_past_segment_1023_are_cached_and_served_from_l1_and_the_grid() {
    let _serial = serial();
    let dir = TempDir::new("many");
    let datadir = fresh_datadir(&dir, "d");
    let forward: Vec<u32> = (1..=BIG).collect();
    let backward: Vec<u32> = (1..=BIG).rev().collect();

    let stock = start(&datadir, options(stock_options(POOL)));
    create_tables(&stock);
    let want = scan(&stock, &forward);
    stock.shutdown().unwrap();

    let node = start_node(64);
    let s = start(&datadir, options(waffle_options(&grid_of(&[&node]), "10MiB", &[("WAFFLE_TABLES", "m/*")])));
    let opens: String = (1..=SMALL).map(|i| format!("SELECT COUNT(*) FROM m.{};\n", small(i))).collect();
    s.sql_script(&opens, Duration::from_secs(300)).unwrap_or_else(|e| panic!("opening the small tables: {e}"));
    for (pass, order) in [&forward, &backward, &forward].into_iter().enumerate() {
        assert_eq!(scan(&s, order), want, "pass {pass}: the big tables read other rows than the stock server's");
    }
    let open_now = s.sql("SELECT COUNT(*) FROM information_schema.innodb_sys_tablespaces").unwrap_or_default();
    // The stats file is rewritten every 200 ms: one written after the last scan.
    let scanned_ms = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
    let v = stats_after(&s, "after the scans", |v| v["updated_unix_ms"].as_u64().is_some_and(|t| t > scanned_ms));

    let p = preload_of(&v);
    let open = p.preload.tablespaces_open;
    assert!(open > (SMALL + BIG) as u64, "every table open at once: {open} tablespaces open ({open_now})");
    assert_eq!(p.preload.fallback_reads, 0, "a read the cache could not answer: {:?}", p.preload);
    assert_eq!(p.preload.innodb_rejects.total(), 0, "{:?}", p.preload);

    let of = |t: &str| p.tablespaces.get(&format!("m/{t}")).cloned().unwrap_or_default();
    let high: Vec<String> = (1..=BIG).map(big).filter(|t| of(t).segment >= WRAPPED_FROM).collect();
    // InnoDB may close and reopen some files meanwhile (their segments are then reused, lower numbers).
    assert!(
        high.len() >= 10,
        "at least 10 of the big tables got a segment past {}: {} did ({:?})",
        WRAPPED_FROM - 1,
        high.len(),
        (1..=BIG).map(|i| of(&big(i)).segment).collect::<Vec<_>>()
    );
    // Which tables the passes leave in L1 depends on which got high segments (InnoDB's opens),
    // so five high tables are left in L1 and out of the pool on purpose, then read.
    let five: Vec<u32> = (1..=BIG).filter(|&i| high.contains(&big(i))).take(5).collect();
    let l1_of_five = |of: &dyn Fn(&str) -> TablespaceSnapshot| five.iter().map(|&i| of(&big(i)).l1_hits).sum::<u64>();
    leave_in_l1_only(&s, &five, &want);
    let since_ms = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
    let v =
        stats_after(&s, "before the five are read", |v| v["updated_unix_ms"].as_u64().is_some_and(|t| t > since_ms));
    let p = preload_of(&v);
    let of = |t: &str| p.tablespaces.get(&format!("m/{t}")).cloned().unwrap_or_default();
    let five_before = l1_of_five(&of);
    let rows = scan(&s, &five);
    assert!(rows.iter().all(|r| want.contains(r)), "the five read other rows than the stock server's");
    let since_ms = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
    let v =
        stats_after(&s, "after the targeted scans", |v| v["updated_unix_ms"].as_u64().is_some_and(|t| t > since_ms));
    let p = preload_of(&v);
    let spaces = &v["tablespaces"];
    let of = |t: &str| p.tablespaces.get(&format!("m/{t}")).cloned().unwrap_or_default();
    let total = |count: fn(&TablespaceSnapshot) -> u64| high.iter().map(|t| count(&of(t))).sum::<u64>();
    let (disk, l1, l2) = (total(|s| s.disk_reads), total(|s| s.l1_hits), total(|s| s.l2_hits));
    let five_after = l1_of_five(&of);
    assert!(
        five_after > five_before,
        "the five high tables read again came from L1: {five_before} -> {five_after} L1 hits ({})",
        describe(spaces, &five.iter().map(|&i| big(i)).collect::<Vec<_>>())
    );
    eprintln!("the five high tables read again: L1 hits {five_before} -> {five_after}");
    eprintln!(
        "{} big tables past segment {}: disk reads {disk}, L1 hits {l1}, grid hits {l2}; {open} tablespaces open",
        high.len(),
        WRAPPED_FROM - 1
    );
    assert!(disk > 0, "their misses were read through the cache: {}", describe(spaces, &high));
    assert!(l1 > 0, "some of their pages were served from L1: {}", describe(spaces, &high));
    assert!(l2 > 0, "some of their pages were served from the grid: {}", describe(spaces, &high));

    let tables: Vec<String> = (1..=BIG).map(|i| format!("m.{}", big(i))).collect();
    s.check_tables(&refs(&tables)).unwrap_or_else(|e| panic!("CHECK TABLE: {e}"));
    assert!(log_errors(&s, &[]).is_empty(), "server errors: {:?}", log_errors(&s, &[]));
    s.shutdown().unwrap();
}

/// Leaves the pages of the `five` big tables in L1 and not in InnoDB's pool (panics with what
/// InnoDB kept when it cannot), so that the next read of them is served from L1. The pages of a
/// table InnoDB reads come into L1 (from L1, the grid or the disk), which then holds them (in
/// its small queue at least) until other pages come in. So the five are read once and the pool
/// is emptied by a scan of `f.pad`, which never reaches L1.
fn leave_in_l1_only(s: &Server, five: &[u32], want: &[String]) {
    let empty_the_pool = || {
        s.sql_timeout("SELECT SUM(LENGTH(c)) FROM f.pad", Duration::from_secs(300))
            .unwrap_or_else(|e| panic!("scanning f.pad: {e}"));
    };
    let pages_in_pool = || {
        let names = five.iter().map(|&i| format!("'`m`.`{}`'", big(i))).collect::<Vec<_>>().join(",");
        let q = format!("SELECT COUNT(*) FROM information_schema.innodb_buffer_page WHERE table_name IN ({names})");
        let out = s.sql(&q).unwrap_or_else(|e| panic!("counting the pool's pages: {e}"));
        out.trim().parse::<u64>().unwrap_or_else(|e| panic!("the pool's page count {out:?}: {e}"))
    };
    let check = |rows: Vec<String>| {
        assert!(rows.iter().all(|r| want.contains(r)), "the targeted scans read other rows than the stock server's");
    };
    empty_the_pool();
    check(scan(s, five));
    let read = pages_in_pool();
    empty_the_pool();
    let left = pages_in_pool();
    assert_eq!(left, 0, "a scan of f.pad (11 MiB) left {left} of the five tables' {read} pages in the 6 MiB pool");
}

fn describe(spaces: &Value, tables: &[String]) -> String {
    tables.iter().take(5).map(|t| format!("{t}: {}", spaces[format!("m/{t}")])).collect::<Vec<_>>().join("; ")
}
