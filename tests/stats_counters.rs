//! `PRAGMA waffle_stats` counts what the workload did.
//!
//! Besides "this counter moved", every snapshot is checked for the identities
//! the read path implies (each page read ends in exactly one place):
//!
//!   reads       = l1_hits + read_ahead_hits + l1_misses
//!   l1_misses   = read_ahead_windows + push_queue_hits + l2_presence_skips
//!                 + l2_aged_skips + l2_cost_skips + grid attempts
//!                                                            (with a grid)
//!   grid attempts = l2_hits + l2_misses + l2_skipped + l2_rejects_total + faults
//!               = latency.l2.count
//!   disk_reads  = l2_presence_skips + l2_aged_skips + l2_cost_skips
//!                 + grid attempts - l2_hits
//!                                                            (with a grid)
//!   (a presence skip: the cache never pushed the page at its version, or took
//!   it back since, so the grid is not asked; an aged skip: it was pushed
//!   longer ago than the grid is seen to keep pages; a cost skip: the page's
//!   node costs more than the disk read it would save, grid::cost)
//!               = l1_misses - read_ahead_windows          (without)
//!   (a sequential reader's miss starts a read-ahead window, counted apart)
//!   latency.l1.count = l1_hits, latency.disk.count = disk_reads
//!   disk_reads  = the sum of disk_reasons (each demand disk read has one
//!                 reason); aged_out = l2_aged_skips, evicted >= l2_misses
//!                 (a miss is the grid losing a pushed page)

use rusqlite::{params, Connection};
use waffle_core::stats::CacheSnapshot;
use waffle_testkit::db::{cache_stats, drop_pager_cache, flush, open_waffle, snapshot};
use waffle_testkit::nodes::start_node;
use waffle_testkit::pattern;
use waffle_testkit::temp_dir::TempDir;

const ROW: usize = 3000; // one row per 4 KiB leaf page

fn check_identities(s: &CacheSnapshot, with_grid: bool) {
    let attempts = s.l2_hits + s.l2_misses + s.l2_skipped + s.l2_rejects_total + s.l2_faults.total();
    let r = &s.l2_rejects;
    let rejects =
        r.length + r.format + r.checksum + r.database + r.page + r.size + r.version + r.seal + r.content + r.codec;
    assert_eq!(rejects, s.l2_rejects_total, "l2_rejects_total is not the sum of its kinds: {s:?}");
    assert_eq!(s.latency.l1.count, s.l1_hits, "one L1 latency per L1 hit: {s:?}");
    assert_eq!(s.latency.disk.count, s.disk_reads, "one disk latency per disk read: {s:?}");
    assert_eq!(s.latency.l2.count, attempts, "one grid latency per grid attempt: {s:?}");
    assert_eq!(s.disk_reasons.total(), s.disk_reads, "one reason per disk read: {s:?}");
    assert_eq!(s.disk_reasons.aged_out, s.l2_aged_skips, "{s:?}");
    assert!(s.disk_reasons.evicted >= s.l2_misses, "{s:?}");
    if with_grid {
        assert_eq!(
            s.l1_misses,
            s.read_ahead_windows
                + s.push_queue_hits
                + s.l2_presence_skips
                + s.l2_aged_skips
                + s.l2_cost_skips
                + attempts,
            "each L1 miss goes to the queue, skips the grid, or asks it: {s:?}"
        );
        assert_eq!(
            s.disk_reads,
            s.l2_presence_skips + s.l2_aged_skips + s.l2_cost_skips + attempts - s.l2_hits,
            "each skip and each grid non-hit reads the disk: {s:?}"
        );
    } else {
        assert_eq!(
            s.disk_reads,
            s.l1_misses - s.read_ahead_windows,
            "without a grid each L1 miss that is not a window reads the disk: {s:?}"
        );
    }
}

fn fill(conn: &Connection, from: i64, to: i64) {
    let tx = conn.unchecked_transaction().unwrap();
    for id in from..=to {
        tx.execute("INSERT INTO t VALUES (?, ?)", params![id, pattern(id as u64, ROW)]).unwrap();
    }
    tx.commit().unwrap();
}

fn read_row(conn: &Connection, id: i64) {
    drop_pager_cache(conn);
    let v: Vec<u8> = conn.query_row("SELECT v FROM t WHERE id = ?", [id], |r| r.get(0)).unwrap();
    assert!(v == pattern(id as u64, ROW), "row {id}");
}

fn read_all(conn: &Connection, rows: i64) {
    drop_pager_cache(conn);
    let mut stmt = conn.prepare("SELECT id, v FROM t ORDER BY id").unwrap();
    let mut count = 0;
    for row in stmt.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, Vec<u8>>(1)?))).unwrap() {
        let (id, v) = row.unwrap();
        assert!(v == pattern(id as u64, ROW), "row {id}");
        count += 1;
    }
    assert_eq!(count, rows);
}

#[test]
fn without_a_grid_only_l1_and_disk_count() {
    let dir = TempDir::new("stats-nogrid");
    let path = dir.join("n.db");
    {
        let conn = open_waffle(&path, &[("waffle_local", "64MiB")]);
        conn.execute_batch("PRAGMA cache_size = 10; CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB);").unwrap();
        let s0 = cache_stats(&conn);
        fill(&conn, 1, 200);
        let s1 = cache_stats(&conn);
        // 200 new leaf pages at least, plus interior pages and page 1.
        let wrote = s1.disk_writes - s0.disk_writes;
        assert!((200..=260).contains(&wrote), "200 one-page rows should write 200..260 pages, wrote {wrote}: {s1:?}");
        assert_eq!(s1.l2_pushes + s1.l2_push_failures + s1.l2_push_drops, 0, "{s1:?}");
        let flushed: String = conn.query_row("PRAGMA waffle_flush", [], |r| r.get(0)).unwrap();
        assert_eq!(flushed, "ok", "PRAGMA waffle_flush without a grid has nothing to wait for");
    }
    // Reopened with the hot list's reload off: L1 starts empty, so the first reads go to the disk.
    let conn = open_waffle(&path, &[("waffle_local", "64MiB"), ("waffle_hot_list", "off")]);
    conn.execute_batch("PRAGMA cache_size = 10").unwrap();
    read_all(&conn, 200);
    let s = cache_stats(&conn);
    let from_disk = s.disk_reads + s.read_ahead_pages_disk;
    assert!(from_disk >= 200, "200 leaf pages were read from the disk: {s:?}");
    // Reading in rowid order is a sequential scan: most pages came in read-ahead windows.
    assert!(s.read_ahead_pages_disk >= 150, "the ordered read was not read ahead: {s:?}");
    assert!(s.read_ahead_disk_reads * 4 <= s.read_ahead_pages_disk, "windows read several pages per call: {s:?}");
    let grid_counts =
        [s.l2_hits, s.l2_misses, s.l2_skipped, s.l2_rejects_total, s.l2_pushes, s.l2_push_failures, s.l2_push_drops];
    assert_eq!(grid_counts, [0; 7], "l2_hits, l2_misses, l2_skipped, l2_rejects_total, l2_pushes, l2_push_failures, l2_push_drops without a grid: {s:?}");
    assert_eq!(s.l2_faults.total(), 0, "{s:?}");
    assert_eq!(s.latency.l2.count, 0, "{s:?}");
    assert_eq!(s.nodes.len(), 0, "no grid, no nodes: {s:?}");
    let config = &snapshot(&conn).sqlite.expect("the SQLite section").config;
    assert_eq!((config.grid.len(), config.local_bytes), (0, 64 << 20), "{config:?}");
    check_identities(&s, false);

    // A hot row, re-read N times with SQLite's own cache dropped each time:
    // every page it touches (page 1, the table's root, the leaf) is an L1 hit.
    read_row(&conn, 7);
    let s0 = cache_stats(&conn);
    const N: u64 = 50;
    for _ in 0..N {
        read_row(&conn, 7);
    }
    let s1 = cache_stats(&conn);
    let hits = s1.l1_hits - s0.l1_hits;
    assert_eq!(hits % N, 0, "each query should touch the same pages: {hits} L1 hits for {N} queries");
    assert_eq!(hits / N, 3, "a point query on a 2-level table touches page 1, the root and one leaf: {hits}/{N}");
    eprintln!("hot row: {hits} L1 hits for {N} queries");
    assert_eq!(s1.l1_misses, s0.l1_misses, "a hot row with a big L1 never misses: {s1:?}");
    assert_eq!(s1.disk_reads, s0.disk_reads, "{s1:?}");
    assert_eq!(s1.latency.l1.count - s0.latency.l1.count, hits, "{s1:?}");
    check_identities(&s1, false);

    // Writes are counted once per page written.
    fill(&conn, 201, 210);
    let s2 = cache_stats(&conn);
    let wrote = s2.disk_writes - s1.disk_writes;
    assert!((10..=14).contains(&wrote), "10 one-page rows should write 10..14 pages, wrote {wrote}: {s2:?}");
    assert_eq!(s2.partial_writes, 0, "SQLite writes whole pages: {s2:?}");

    // The stats pragma takes no value.
    let err = conn.query_row("PRAGMA waffle_stats = 1", [], |r| r.get::<_, String>(0)).unwrap_err().to_string();
    assert!(err.contains("waffle_stats") && err.contains("takes no value"), "{err}");
}

#[test]
fn with_a_grid_pushes_and_hits_count() {
    let node = start_node(32);
    let dir = TempDir::new("stats-grid");
    let path = dir.join("g.db");
    let conn = open_waffle(&path, &[("waffle_grid", &node.addr()), ("waffle_local", "16KiB")]);
    conn.execute_batch("PRAGMA cache_size = 10; CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB);").unwrap();
    let s0 = cache_stats(&conn);
    assert_eq!(s0.l2_pushes, 0, "{s0:?}");
    assert_eq!(s0.nodes[0].addr, node.addr(), "{s0:?}");

    fill(&conn, 1, 100);
    flush(&conn);
    let s1 = cache_stats(&conn);
    let pushes = s1.l2_pushes;
    // 100 leaf pages went through a 4-page L1: nearly all were evicted and pushed.
    assert!(pushes >= 90, "100 pages through a 16 KiB L1 should push at least 90, pushed {pushes}: {s1:?}");
    // Each push carries a page: its payload (compressed or not) in an envelope of 40 bytes.
    let payload_bytes = s1.compression.bytes_after;
    let raw = s1.compression.pages_raw + s1.compression.pages_raw_behind;
    assert_eq!(s1.compression.pages_compressed + raw, pushes, "{s1:?}");
    assert_eq!(s1.l2_push_bytes, payload_bytes + 40 * pushes, "each push carries a page: {s1:?}");
    assert!(s1.compression.bytes_before == pushes * 4096, "{s1:?}");
    assert_eq!(s1.push_queue_bytes, 0, "flushed: nothing waits: {s1:?}");
    assert_eq!(s1.l2_push_failures + s1.l2_push_drops, 0, "{s1:?}");

    read_all(&conn, 100);
    let s2 = cache_stats(&conn);
    let hits = s2.l2_hits - s1.l2_hits;
    assert!(hits >= 90, "re-reading 100 pushed pages should hit the grid at least 90 times, hit {hits}: {s2:?}");
    // Each hit fetched an envelope of at least 40 bytes, and compressed ones were opened.
    assert!(s2.l2_fetch_bytes >= hits * 40, "{s2:?}");
    let decompressed = s2.compression.pages_decompressed - s1.compression.pages_decompressed;
    assert!(decompressed <= hits, "only hits are decompressed: {s2:?}");
    assert!(s2.latency.l2.count > s1.latency.l2.count, "{s2:?}");
    assert!(s2.latency.l2.p50_us > 0 && s2.latency.l2.max_us >= s2.latency.l2.p50_us, "{s2:?}");
    let node_status = &s2.nodes[0];
    assert!(node_status.up, "{s2:?}");
    assert!(node_status.requests >= hits, "each fetch is a request to the node: {s2:?}");
    assert_eq!(node_status.failures, 0, "{s2:?}");
    assert_eq!(s2.l1.capacity_bytes, 16 << 10, "{s2:?}");
    assert!(s2.l1.used_bytes <= 16 << 10, "{s2:?}");
    check_identities(&s2, true);

    // Misses: the node forgets everything (flush_all); re-reading finds nothing there.
    flush(&conn);
    memcached_flush_all(&node.addr());
    read_all(&conn, 100);
    let s3 = cache_stats(&conn);
    // A miss also lowers the grid's reach, so later pages of the pass may be
    // skipped as pushed too long ago (`l2_aged_skips`) rather than asked and missed.
    let misses = s3.l2_misses - s2.l2_misses;
    let aged = s3.l2_aged_skips - s2.l2_aged_skips;
    assert!(misses >= 1, "the flushed node answered misses: {s3:?}");
    assert!(
        misses + aged >= 90,
        "after flush_all at least 90 of 100 pages should miss or be skipped as gone, {misses} + {aged}: {s3:?}"
    );
    assert!(s3.disk_reads - s2.disk_reads >= misses, "each miss reads the disk: {s3:?}");
    // Why: the grid lost them (asked and missed: evicted), or they were skipped as aged out.
    let evicted = s3.disk_reasons.evicted - s2.disk_reasons.evicted;
    let aged_out = s3.disk_reasons.aged_out - s2.disk_reasons.aged_out;
    assert!(evicted >= misses && aged_out == aged, "misses {misses}, aged {aged}: {s3:?}");
    check_identities(&s3, true);
    eprintln!("grid: {pushes} pushes, {hits} hits, {misses} misses after flush_all");
}

fn memcached_flush_all(addr: &str) {
    use std::io::{BufRead, BufReader, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
    s.write_all(b"flush_all\r\n").unwrap();
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).unwrap();
    assert_eq!(line, "OK\r\n", "flush_all on {addr}");
}
