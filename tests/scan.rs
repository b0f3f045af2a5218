//! A one-pass scan: read ahead in windows, and flush neither L1's hot pages
//! nor the grid's.
//!
//! L1 is 1 MiB (so read-ahead windows of 16 pages fit); the table is about
//! 8 MiB. A hot set of rows is read repeatedly first, the grid is filled by
//! evictions, then a full scan runs. Checked: the scan's result equals plain
//! SQLite's; it came in read-ahead windows; the scan's pages were dropped, not
//! pushed; the grid still holds what it held; the hot rows are still L1 hits.

use rusqlite::{params, Connection};
use waffle_testkit::db::{cache_id, drop_pager_cache, flush, n, open_plain, open_waffle, stats};
use waffle_testkit::nodes::{grid_of, start_node};
use waffle_testkit::pattern;
use waffle_testkit::raw_client::{key, mg};
use waffle_testkit::temp_dir::TempDir;

const ROWS: i64 = 2000;
const ROW_BYTES: usize = 3500; // about one row per 4 KiB page
const HOT: i64 = 40;

fn load(conn: &Connection) {
    conn.execute_batch("CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB);").unwrap();
    let tx = conn.unchecked_transaction().unwrap();
    for id in 0..ROWS {
        tx.execute("INSERT INTO t VALUES (?1, ?2)", params![id, pattern(id as u64, ROW_BYTES)]).unwrap();
    }
    tx.commit().unwrap();
}

fn scan(conn: &Connection) -> (i64, i64) {
    conn.query_row("SELECT count(*), sum(length(v) + unicode(hex(substr(v, 7, 1)))) FROM t", [], |r| {
        Ok((r.get(0)?, r.get(1)?))
    })
    .unwrap()
}

fn hot_rows(conn: &Connection) {
    for round in 0..4 {
        for id in 0..HOT {
            let step = ROWS / HOT;
            let v: Vec<u8> =
                conn.query_row("SELECT v FROM t WHERE id = ?1", [id * step + round % 2], |r| r.get(0)).unwrap();
            assert_eq!(v.len(), ROW_BYTES);
        }
    }
}

#[test]
fn a_scan_reads_ahead_and_keeps_l1_and_the_grid() {
    let nodes = [start_node(64), start_node(64)];
    let grid = grid_of(&nodes);
    let dir = TempDir::new("scan");
    let plain = open_plain(&dir.join("plain.db"));
    load(&plain);
    let want = scan(&plain);

    let db = dir.join("w.db");
    let conn = open_waffle(&db, &[("waffle_grid", &grid), ("waffle_local", "1MiB")]);
    conn.execute_batch("PRAGMA cache_size = 8").unwrap();
    load(&conn);
    flush(&conn);
    // Random reads (not a scan) fill the grid with what L1 evicts, and make the hot rows hot.
    for _ in 0..2 {
        hot_rows(&conn);
        drop_pager_cache(&conn);
    }
    flush(&conn);
    let id = cache_id(&conn);
    let pages: u64 = conn.query_row("PRAGMA page_count", [], |r| r.get(0)).unwrap();
    let in_grid = |p: u64| nodes.iter().any(|n| mg(&n.addr(), &key(id, p)).is_some());
    let grid_before: Vec<u64> = (0..pages).filter(|&p| in_grid(p)).collect();
    assert!(grid_before.len() > 100, "the grid should hold the pages L1 evicted: {}", grid_before.len());

    // Control: before the scan the hot rows are L1 hits.
    let c0 = stats(&conn);
    drop_pager_cache(&conn);
    hot_rows(&conn);
    let c1 = stats(&conn);
    let c = |k: &str| n(&c1, k) - n(&c0, k);
    eprintln!("before the scan: {} L1 hits of {} reads", c("l1_hits"), c("l1_hits") + c("l1_misses"));

    let s0 = stats(&conn);
    drop_pager_cache(&conn);
    assert_eq!(scan(&conn), want, "the scan's result differs from plain SQLite's");
    flush(&conn);
    let s1 = stats(&conn);
    let d = |k: &str| n(&s1, k) - n(&s0, k);
    assert!(d("read_ahead_windows") > 20, "the scan did not read ahead: {s1}");
    assert!(
        d("read_ahead_pages_l2") + d("read_ahead_pages_disk") >= pages * 8 / 10,
        "most pages came in windows: {s1}"
    );
    // Pages read ahead of the scan, by source: read = used + unused + still in
    // L1; the scan used nearly all of them, the grid's among them (the grid
    // is asked for the window pages it may hold, the disk for the rest).
    for src in ["disk", "l2"] {
        let k = |what: &str| n(&s1, &format!("ahead_{what}_{src}"));
        assert_eq!(k("pages"), k("used") + k("unused") + k("in_l1"), "{src}: {s1}");
    }
    let (ahead, used) = (d("ahead_pages_disk") + d("ahead_pages_l2"), d("ahead_used_disk") + d("ahead_used_l2"));
    assert!(used * 10 >= ahead * 9, "a scan used {used} of the {ahead} pages read ahead: {s1}");
    assert!(d("ahead_used_l2") > 0, "{s1}");
    // Pages the grid had came from the grid, and stayed there (plain mg).
    assert!(d("read_ahead_pages_l2") as usize >= grid_before.len() / 2, "the windows did not use the grid: {s1}");
    let kept = grid_before.iter().filter(|&&p| in_grid(p)).count();
    assert!(kept * 10 >= grid_before.len() * 9, "the scan took pages out of the grid: {kept} of {}", grid_before.len());
    // The scan's own pages were dropped unread, not pushed.
    assert!(d("scan_drops") > 100, "scan pages were not dropped: {s1}");
    // What it did push is what L1 held before (cold pages leaving the small
    // FIFO) and the few pages read before the reader counted as sequential
    // (and the b-tree's interior pages), never the pages of its windows.
    let l1_before = n(&s0, "l1.pages");
    assert!(
        d("l2_pushes") <= l1_before + 64,
        "a one-pass scan pushed {} pages, L1 held {l1_before}: {s1}",
        d("l2_pushes")
    );
    assert!(d("scan_drops") * 10 >= d("read_ahead_hits") * 8, "window pages were pushed, not dropped: {s1}");

    // The hot rows are still in L1: reading them again touches neither grid nor disk.
    let s2 = stats(&conn);
    drop_pager_cache(&conn);
    hot_rows(&conn);
    let s3 = stats(&conn);
    let e = |k: &str| n(&s3, k) - n(&s2, k);
    let reads = e("l1_hits") + e("l1_misses");
    assert!(e("l1_hits") * 10 >= reads * 9, "the scan flushed L1's hot pages: {} hits of {reads}: {s3}", e("l1_hits"));
    assert_eq!(n(&s3, "l2_rejects_total"), 0, "{s3}");
    assert_eq!(conn.query_row("PRAGMA integrity_check", [], |r| r.get::<_, String>(0)).unwrap(), "ok");
}
