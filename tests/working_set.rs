//! `PRAGMA waffle_stats`'s `working_set`: the distinct pages a database
//! touched, estimated (HyperLogLog), against a count known exactly.
//!
//! The table holds one 3000-byte row per 4 KiB leaf page, built with plain
//! SQLite, so the pages a read touches are known: a full read touches every
//! page of the file (`PRAGMA page_count`: page 1, the table's interior pages
//! and its leaves); point reads of K rows touch K leaves plus page 1 and some
//! of the interior pages. The estimate must be within 5% of that, must not
//! move when the same pages are read again, and must see the grid's memory.

use rusqlite::Connection;
use serde_json::Value;
use waffle_testkit::db::{create_blob_table, n, open_plain, open_waffle, stats};
use waffle_testkit::nodes::start_node;
use waffle_testkit::pattern;
use waffle_testkit::temp_dir::TempDir;

const ROWS: i64 = 8000; // 8000 leaves: past the sketch's 4096 registers, in its hardest range
const ROW_BYTES: usize = 3000;

/// A database of ROWS one-page rows; its page count.
fn build(path: &std::path::Path) -> u64 {
    let plain = open_plain(path);
    create_blob_table(&plain, 2000, 0..ROWS, |id| pattern(id as u64, ROW_BYTES));
    plain.query_row("PRAGMA page_count", [], |r| r.get(0)).unwrap()
}

fn within(estimate: u64, low: u64, high: u64, pct: f64) -> bool {
    estimate as f64 >= low as f64 * (1.0 - pct / 100.0) && estimate as f64 <= high as f64 * (1.0 + pct / 100.0)
}

fn read_rows(conn: &Connection, ids: impl IntoIterator<Item = i64>) {
    let mut stmt = conn.prepare("SELECT length(v) FROM t WHERE id = ?1").unwrap();
    for id in ids {
        let len: i64 = stmt.query_row([id], |r| r.get(0)).unwrap();
        assert_eq!(len, ROW_BYTES as i64);
    }
}

#[test]
fn a_full_read_counts_every_page_of_the_file_once() {
    let dir = TempDir::new("ws-full");
    let path = dir.join("w.db");
    let pages = build(&path);
    assert!(pages > ROWS as u64, "one leaf per row, and interior pages: {pages}");
    let conn = open_waffle(&path, &[("waffle_local", "64MiB")]);
    conn.execute_batch("PRAGMA cache_size = 10").unwrap();
    let s0 = stats(&conn);
    assert!(n(&s0, "working_set.pages_15m") <= 3, "only the open's reads so far: {s0}");

    let total: i64 = conn.query_row("SELECT sum(length(v)) FROM t", [], |r| r.get(0)).unwrap();
    assert_eq!(total, ROWS * ROW_BYTES as i64);
    let s1 = stats(&conn);
    let ws = &s1["working_set"];
    let est = n(&s1, "working_set.pages_1m");
    eprintln!("{pages} pages in the file, estimated {est}: {ws}");
    assert!(within(est, pages, pages, 5.0), "pages_1m {est} is not within 5% of the file's {pages} pages: {ws}");
    assert_eq!(n(&s1, "working_set.pages_5m"), est, "one minute of reads: every window the same: {ws}");
    assert_eq!(n(&s1, "working_set.pages_15m"), est, "{ws}");
    assert_eq!(n(&s1, "working_set.bytes_1m"), est * 4096, "{ws}");

    // Every page again, and point reads of some: the same pages, the same estimate
    // (a sketch's registers keep a maximum; nothing new can raise one).
    conn.execute_batch("PRAGMA shrink_memory").unwrap();
    let again: i64 = conn.query_row("SELECT sum(length(v)) FROM t", [], |r| r.get(0)).unwrap();
    assert_eq!(again, total);
    read_rows(&conn, (0..ROWS).step_by(7));
    let s2 = stats(&conn);
    // From L1: as demand hits, or as hits on the pages the first pass's
    // read-ahead left there (a scan's re-read counts those as read_ahead_hits).
    let from_l1 = |s: &Value| n(s, "l1_hits") + n(s, "read_ahead_hits");
    assert!(from_l1(&s2) > from_l1(&s1) + 1000, "the second pass read L1: {s2}");
    if n(&s2, "working_set.pages_1m") != est {
        // A minute boundary passed between the two reads: the 1-minute window
        // then holds the second pass alone, which is the same set of pages.
        assert!(within(n(&s2, "working_set.pages_1m"), pages, pages, 5.0), "{s2}");
    }
    assert_eq!(n(&s2, "working_set.pages_15m"), est, "pages read again counted again: {}", s2["working_set"]);

    // No grid: L1 alone holds, and the advice says whether that is enough.
    assert_eq!(n(&s2, "working_set.held_bytes"), 64 << 20, "{}", s2["working_set"]);
    assert_eq!(s2["working_set"]["grid_bytes"], Value::Null);
    let advice = s2["working_set"]["advice"].as_str().unwrap();
    assert!(advice.starts_with("the last 5 minutes touched 3"), "about 31 MiB: {advice}");
    assert!(advice.ends_with("L1 holds 64.0 MiB (no grid): enough"), "{advice}");
}

#[test]
fn point_reads_count_their_pages_and_the_grid_memory_is_asked() {
    let node = start_node(16);
    let dir = TempDir::new("ws-points");
    let path = dir.join("w.db");
    let pages = build(&path);
    let conn = open_waffle(&path, &[("waffle_grid", &node.addr()), ("waffle_local", "1MiB")]);
    conn.execute_batch("PRAGMA cache_size = 10").unwrap();

    // 3000 distinct rows in a scattered order (a stride prime to ROWS), each read twice.
    let ids: Vec<i64> = (0..3000).map(|i| (i * 2003) % ROWS).collect();
    read_rows(&conn, ids.iter().copied());
    read_rows(&conn, ids.iter().rev().copied());
    let s = stats(&conn);
    let ws = &s["working_set"];
    let est = n(&s, "working_set.pages_1m");
    // The leaves of those rows, page 1, and between one and all of the interior pages.
    let (low, high) = (3000 + 1, 3000 + (pages - ROWS as u64));
    eprintln!("{low}..={high} pages touched, estimated {est}: {ws}");
    assert!(within(est, low, high, 5.0), "pages_1m {est} is not within 5% of {low}..={high}: {ws}");
    assert!(n(&s, "l1_misses") > 3000, "the small L1 missed: reads went to the grid and the disk: {s}");

    // The grid's size: memcached's -m, asked by the stats.
    assert_eq!(n(&s, "working_set.grid_bytes"), 16 << 20, "{ws}");
    assert_eq!(n(&s, "working_set.held_bytes"), (1 << 20) + (16 << 20), "{ws}");
    assert_eq!(s["nodes"][0]["memory_bytes"], 16 << 20, "{s}");
    let advice = ws["advice"].as_str().unwrap();
    // About 11.7 MiB touched against 17 MiB held.
    assert!(advice.contains("; L1 + grid hold 17.0 MiB: enough"), "{advice}");

    // The whole file (31 MiB) does not fit: the advice says by how much.
    let _: i64 = conn.query_row("SELECT sum(length(v)) FROM t", [], |r| r.get(0)).unwrap();
    let s = stats(&conn);
    let advice = s["working_set"]["advice"].as_str().unwrap().to_string();
    let more = n(&s, "working_set.bytes_5m") - n(&s, "working_set.held_bytes");
    assert!(advice.contains("L1 + grid hold 17.0 MiB: about 1"), "{advice}");
    assert!(advice.ends_with(&format!("{:.1} MiB more would hold it", more as f64 / (1 << 20) as f64)), "{advice}");
}
