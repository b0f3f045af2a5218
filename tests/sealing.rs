//! Sealing: with a key, no page plaintext reaches memcached, and a value
//! that was altered, moved or sealed with another key is rejected.
//!
//! Control: the same workload without a key leaves the rows readable in
//! memcached, so the search below is able to find them.

use waffle_testkit::db::{blob_total, cache_id, cache_stats, create_blob_table, drop_pager_cache, flush, open_waffle};
use waffle_testkit::nodes::{start_node, Node};
use waffle_testkit::pattern;
use waffle_testkit::raw_client::{key, mg, ms};
use waffle_testkit::temp_dir::TempDir;

const MARKER: &str = "waffle-secret-row-";

/// Writes rows whose text is easy to find, pushes every page to the grid, and
/// returns every grid value of the database (raw `mg`, which changes nothing).
fn grid_values(params: &[(&str, &str)], node: &Node, dir: &TempDir) -> (u64, Vec<Vec<u8>>) {
    let db = dir.join("sealed.db");
    let conn = open_waffle(&db, params);
    conn.execute_batch("PRAGMA cache_size=4; CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT);").unwrap();
    let tx = conn.unchecked_transaction().unwrap();
    for i in 0..400 {
        tx.execute(
            "INSERT INTO t(id, v) VALUES (?1, ?2)",
            rusqlite::params![i, format!("{MARKER}{i:06}-{}", "x".repeat(80))],
        )
        .unwrap();
    }
    tx.commit().unwrap();
    // Read everything once so the tiny L1 evicts (pushes) nearly every page.
    let _: i64 = conn.query_row("SELECT count(*) FROM t WHERE v LIKE 'waffle%'", [], |r| r.get(0)).unwrap();
    flush(&conn);
    let id = cache_id(&conn);
    let pages: u64 = conn.query_row("PRAGMA page_count", [], |r| r.get(0)).unwrap();
    let values: Vec<Vec<u8>> = (0..pages).filter_map(|p| mg(&node.addr(), &key(id, p))).collect();
    let s = cache_stats(&conn);
    assert_eq!(s.l2_rejects_total, 0, "{s:?}");
    (id, values)
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn with_a_key_no_plaintext_reaches_the_grid() {
    let node = start_node(32);
    let dir = TempDir::new("sealing-wire");
    let key_file = dir.join("waffle.key");
    std::fs::write(&key_file, "5a".repeat(32)).unwrap();
    let grid = node.addr();
    let key_path = key_file.to_str().unwrap().to_string();

    // Control: without a key (and without compression, which would hide
    // the rows by itself) the rows are there in plaintext.
    let plain_dir = TempDir::new("sealing-wire-plain");
    let plain_params = [("waffle_grid", grid.as_str()), ("waffle_local", "8KiB"), ("waffle_compress", "off")];
    let (_, plain) = grid_values(&plain_params, &node, &plain_dir);
    assert!(plain.len() > 5, "the control run pushed too little: {} values", plain.len());
    assert!(plain.iter().any(|v| contains(v, MARKER.as_bytes())), "control: plaintext rows must be visible");

    // Sealed, raw pages (the seal alone hides them) and compressed ones.
    for compress in ["off", "zstd"] {
        let dir = TempDir::new(&format!("sealing-wire-{compress}"));
        let params = [
            ("waffle_grid", grid.as_str()),
            ("waffle_local", "8KiB"),
            ("waffle_key_file", key_path.as_str()),
            ("waffle_compress", compress),
        ];
        let (_, sealed) = grid_values(&params, &node, &dir);
        assert!(sealed.len() > 5, "the sealed run ({compress}) pushed too little: {} values", sealed.len());
        for v in &sealed {
            assert_ne!(v[5] & waffle_core::envelope::FLAG_SEALED, 0, "every value is sealed (flags {:#x})", v[5]);
            assert!(!contains(v, MARKER.as_bytes()), "plaintext row found in a sealed value ({compress})");
            assert!(!contains(v, b"xxxxxxxxxxxxxxxx"), "plaintext filler found in a sealed value ({compress})");
            assert!(!contains(v, b"SQLite format 3"), "page 1's header in plaintext ({compress})");
        }
    }
}

#[test]
fn a_tampered_or_foreign_sealed_value_is_rejected() {
    let node = start_node(32);
    let dir = TempDir::new("sealing-tamper");
    let key_file = dir.join("k");
    std::fs::write(&key_file, [7u8; 32]).unwrap();
    let db = dir.join("t.db");
    let grid = node.addr();
    let params =
        [("waffle_grid", grid.as_str()), ("waffle_local", "8KiB"), ("waffle_key_file", key_file.to_str().unwrap())];
    let conn = open_waffle(&db, &params);
    create_blob_table(&conn, 4, 0..200, |id| pattern(id as u64, 300));
    let want = blob_total(&conn);
    flush(&conn);
    let id = cache_id(&conn);
    let pages: u64 = conn.query_row("PRAGMA page_count", [], |r| r.get(0)).unwrap();
    let cached: Vec<u64> = (0..pages).filter(|&p| mg(&node.addr(), &key(id, p)).is_some()).collect();
    assert!(cached.len() >= 4, "too few pages in the grid: {cached:?}");

    // Flip one ciphertext byte of one value, and swap two others' values.
    let flip = cached[0];
    let mut v = mg(&node.addr(), &key(id, flip)).unwrap();
    let mid = v.len() / 2;
    v[mid] ^= 0x01;
    ms(&node.addr(), &key(id, flip), &v);
    let (a, b) = (cached[1], cached[2]);
    let va = mg(&node.addr(), &key(id, a)).unwrap();
    let vb = mg(&node.addr(), &key(id, b)).unwrap();
    ms(&node.addr(), &key(id, a), &vb);
    ms(&node.addr(), &key(id, b), &va);

    let before = cache_stats(&conn);
    drop_pager_cache(&conn);
    assert_eq!(blob_total(&conn), want, "results must not change");
    let after = cache_stats(&conn);
    let rejected = after.l2_rejects_total - before.l2_rejects_total;
    assert!(rejected >= 1, "the altered values were not even fetched: {after:?}");
    // A flipped byte fails the tag; a moved value names another page.
    let seal = after.l2_rejects.seal - before.l2_rejects.seal;
    let page = after.l2_rejects.page - before.l2_rejects.page;
    assert_eq!(seal + page, rejected, "{after:?}");
    assert_eq!(conn.query_row("PRAGMA integrity_check", [], |r| r.get::<_, String>(0)).unwrap(), "ok");

    // The same values read without the key are refused (sealed, no key), not served.
    drop(conn);
    // No hot-list reload: it would fill L1 with pages the scan then evicts and pushes (plain,
    // under the same names) before reading them back, hits on this session's own copies.
    let no_key = [("waffle_grid", grid.as_str()), ("waffle_local", "8KiB"), ("waffle_hot_list", "off")];
    let conn = open_waffle(&db, &no_key);
    conn.execute_batch("PRAGMA cache_size=4").unwrap();
    assert_eq!(blob_total(&conn), want);
    let s = cache_stats(&conn);
    assert_eq!(s.l2_hits, 0, "a sealed value was served without the key: {s:?}");
    assert!(s.l2_rejects.seal > 0, "the sealed values were asked for and refused: {s:?}");
}
