//! `PRAGMA waffle_grid='host:port,...'` changes the grid while the database is
//! open. With ketama, adding one node to N keeps about N/(N+1) of the cached
//! pages on the node they are looked for on. Only when the opener allowed it
//! (`waffle_grid_change=on`): any SQL can reach a PRAGMA.

use std::time::Duration;

use waffle_core::grid::{Grid, GridOptions, NodeSpec};
use waffle_testkit::db::{
    blob_total, cache_id, cache_stats, create_blob_table, drop_pager_cache, flush, open_waffle, snapshot,
};
use waffle_testkit::nodes::{grid_of, start_node};
use waffle_testkit::pattern;
use waffle_testkit::raw_client::{key, mg, node_stat};
use waffle_testkit::temp_dir::TempDir;

#[test]
fn adding_a_node_keeps_about_n_over_n_plus_one_reachable() {
    let nodes: Vec<_> = (0..4).map(|_| start_node(32)).collect();
    let three = grid_of(&nodes[..3]);
    let four = grid_of(&nodes);
    let dir = TempDir::new("grid-change");
    let db = dir.join("g.db");
    let conn = open_waffle(&db, &[("waffle_grid", &three), ("waffle_local", "8KiB"), ("waffle_grid_change", "on")]);
    create_blob_table(&conn, 4, 0..3000, |id| pattern(id as u64, 400));
    let want = blob_total(&conn);
    flush(&conn);

    // Where every cached page is now (raw mg changes nothing).
    let id = cache_id(&conn);
    let pages: u64 = conn.query_row("PRAGMA page_count", [], |r| r.get(0)).unwrap();
    let mut cached = Vec::new();
    for p in 0..pages {
        let on: Vec<usize> = (0..3).filter(|&i| mg(&nodes[i].addr(), &key(id, p)).is_some()).collect();
        assert!(on.len() <= 1, "page {p} on several nodes: {on:?}");
        if let Some(&i) = on.first() {
            cached.push((p, i));
        }
    }
    assert!(cached.len() > 200, "too few pages cached to measure: {}", cached.len());

    let now: String = conn.query_row(&format!("PRAGMA waffle_grid='{four}'"), [], |r| r.get(0)).unwrap();
    assert_eq!(now, four);
    let config = snapshot(&conn).sqlite.expect("the SQLite section").config;
    assert_eq!(config.grid.len(), 4, "{config:?}");

    // Which of them the new ring still looks for where they are.
    let ring = Grid::new(NodeSpec::parse_list(&four).unwrap(), GridOptions::default());
    let reachable = cached.iter().filter(|(p, i)| ring.node_index(key(id, *p).as_bytes()) == Some(*i)).count();
    let fraction = reachable as f64 / cached.len() as f64;
    assert!(
        (0.62..=0.88).contains(&fraction),
        "{reachable} of {} reachable: {fraction:.3}, expected about 3/4",
        cached.len()
    );

    // And the reads find them: every reachable page is a grid hit on a full scan.
    let before = cache_stats(&conn);
    drop_pager_cache(&conn);
    assert_eq!(blob_total(&conn), want);
    let after = cache_stats(&conn);
    let hits = after.l2_hits - before.l2_hits;
    assert!(hits as f64 >= 0.9 * reachable as f64, "{hits} grid hits for {reachable} reachable pages: {after:?}");
    assert_eq!(after.l2_rejects_total, 0, "{after:?}");
    // The scan skips the pages that moved (not pushed to the new node yet), so what reaches the
    // new node first is the pusher's: L1's evictions of the scan, sent by its own thread, which a
    // loaded machine runs late (a CI-like run read 0 requests with 334 pages still queued).
    let mut now = after;
    let asked = waffle_testkit::wait_until(Duration::from_secs(10), || {
        now = cache_stats(&conn);
        now.nodes[3].requests > 0
    });
    assert!(asked, "the new node was asked within 10 s: {now:?}");

    // No grid at all: still correct, and the grid counters stop.
    let none: String = conn.query_row("PRAGMA waffle_grid=''", [], |r| r.get(0)).unwrap();
    assert_eq!(none, "");
    let before = cache_stats(&conn);
    drop_pager_cache(&conn);
    assert_eq!(blob_total(&conn), want);
    let after = cache_stats(&conn);
    assert_eq!(after.l2_hits, before.l2_hits);
    assert_eq!(after.l2_misses, before.l2_misses);
    assert!(after.disk_reads > before.disk_reads);

    // A bad list is an error naming the value, and the grid stays as it was.
    let err = conn.query_row("PRAGMA waffle_grid='127.0.0.1'", [], |r| r.get::<_, String>(0)).unwrap_err();
    assert!(err.to_string().contains("127.0.0.1"), "{err}");
    assert_eq!(conn.query_row("PRAGMA integrity_check", [], |r| r.get::<_, String>(0)).unwrap(), "ok");
}

#[test]
fn sql_cannot_move_the_grid_unless_the_opener_allowed_it() {
    let node = start_node(16);
    let attacker = start_node(16);
    let dir = TempDir::new("grid-change-off");
    let db = dir.join("g.db");
    let conn = open_waffle(&db, &[("waffle_grid", &node.addr()), ("waffle_local", "8KiB")]);
    conn.execute_batch("PRAGMA cache_size=4; CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB);").unwrap();
    let err = conn
        .query_row(&format!("PRAGMA waffle_grid='{}'", attacker.addr()), [], |r| r.get::<_, String>(0))
        .unwrap_err()
        .to_string();
    assert!(err.contains("refused") && err.contains("waffle_grid_change=on"), "a clear SQL error: {err}");
    let now: String = conn.query_row("PRAGMA waffle_grid", [], |r| r.get(0)).unwrap();
    assert_eq!(now, node.addr(), "the grid did not move");

    // Pages evicted from now on go to the opener's node only, never to the one SQL named.
    let tx = conn.unchecked_transaction().unwrap();
    for i in 0..500 {
        tx.execute("INSERT INTO t VALUES (?1, ?2)", rusqlite::params![i, pattern(i as u64, 400)]).unwrap();
    }
    tx.commit().unwrap();
    flush(&conn);
    let s = cache_stats(&conn);
    assert!(s.l2_pushes > 0, "{s:?}");
    assert_eq!(node_stat(&attacker.addr(), "total_items"), 0, "nothing reached the node the SQL named");
    assert!(node_stat(&node.addr(), "total_items") > 0);

    // A connection opened read-only on the same database is no different.
    let ro = open_waffle(&db, &[("waffle_grid", &node.addr()), ("mode", "ro")]);
    let err = ro.query_row("PRAGMA waffle_grid=''", [], |r| r.get::<_, String>(0)).unwrap_err().to_string();
    assert!(err.contains("refused"), "{err}");
}
