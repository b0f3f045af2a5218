//! L1 and the grid are exclusive: a page fetched from the grid leaves it in
//! the same round trip (`mg <key> v T-1`), and comes back only when L1
//! evicts it again.
//!
//! Checked from outside, with plain `mg <key> v` (which leaves the item as it
//! is) straight to the memcached nodes: the page's key is on exactly one node
//! before the read, SQLite's read of the row is a grid hit, and afterwards the
//! key is gone from every node. Evicting the page again puts it back.

use waffle_testkit::db::{cache_id, cache_stats, create_blob_table, drop_pager_cache, flush, open_waffle};
use waffle_testkit::db_file::leaf_pages_by_rowid;
use waffle_testkit::nodes::{grid_of, start_node};
use waffle_testkit::pattern;
use waffle_testkit::raw_client::{envelope_identity, key, mg, page_of};
use waffle_testkit::temp_dir::TempDir;

const ROW: usize = 3000; // one row per 4 KiB leaf page
const ROWS: i64 = 100;
const X: i64 = 50;

#[test]
fn a_grid_hit_takes_the_page_out_of_the_grid() {
    let nodes = [start_node(32), start_node(32)];
    let dir = TempDir::new("exclusive");
    let path = dir.join("x.db");
    let conn = open_waffle(&path, &[("waffle_grid", &grid_of(&nodes)), ("waffle_local", "16KiB")]);
    create_blob_table(&conn, 10, 1..=ROWS, |id| pattern(id as u64, ROW));

    // Read other rows so that X's page leaves L1, then wait for the pushes.
    let read = |id: i64| -> Vec<u8> {
        drop_pager_cache(&conn);
        conn.query_row("SELECT v FROM t WHERE id = ?", [id], |r| r.get(0)).unwrap()
    };
    for id in 1..=10 {
        assert_eq!(read(id), pattern(id as u64, ROW));
    }
    flush(&conn);

    let id = cache_id(&conn);
    let page = *leaf_pages_by_rowid(&path, 4096).get(&X).expect("row X is on a leaf page");
    let key = key(id, page - 1);
    let holders: Vec<String> = nodes.iter().filter(|n| mg(&n.addr(), &key).is_some()).map(|n| n.addr()).collect();
    assert_eq!(holders.len(), 1, "before the read, {key} (page {page}) should be on exactly one node: {holders:?}");
    let holder = holders[0].clone();
    let copy = mg(&holder, &key).unwrap();
    assert_eq!(envelope_identity(&copy).0, id, "the copy names another cache");
    assert_eq!(envelope_identity(&copy).1, page - 1, "the copy names another page");
    let payload = page_of(&copy, 4096).expect("the copy opens as a page");
    assert_eq!(
        &payload[..],
        &std::fs::read(&path).unwrap()[(page as usize - 1) * 4096..][..4096],
        "the copy is the page on disk"
    );

    let before = cache_stats(&conn);
    assert_eq!(read(X), pattern(X as u64, ROW));
    let after = cache_stats(&conn);
    assert!(after.l2_hits > before.l2_hits, "the read of row {X} was not a grid hit:\n{before:?}\n{after:?}");
    assert_eq!(after.disk_reads, before.disk_reads, "the read of row {X} went to the disk: {after:?}");
    for node in &nodes {
        assert!(mg(&node.addr(), &key).is_none(), "{key} is still on {} after the grid hit", node.addr());
    }

    // Now in L1: read again, no grid request for it.
    let before = cache_stats(&conn);
    assert_eq!(read(X), pattern(X as u64, ROW));
    let after = cache_stats(&conn);
    assert!(after.l1_hits > before.l1_hits, "the page should be in L1 now: {after:?}");
    assert_eq!(after.l2_hits, before.l2_hits, "a page in L1 was fetched from the grid again");

    // Evicted again, it is pushed again: back on its node. (L1 is S3-FIFO and
    // the page was hit in L1: only pages read twice push it out of L1's main queue.)
    for id in 60..=75 {
        for _ in 0..2 {
            assert_eq!(read(id), pattern(id as u64, ROW));
        }
    }
    flush(&conn);
    assert!(mg(&holder, &key).is_some(), "after L1 evicted page {page} again it should be back on {holder}");
    let s = cache_stats(&conn);
    for (kind, n) in s.l2_rejects.of(&["length", "format", "checksum", "database", "page", "size"]) {
        assert_eq!(n, 0, "unexpected {kind} reject: {s:?}");
    }
}
