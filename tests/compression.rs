//! Compression of grid values (`waffle_compress`): every codec gives the plain
//! database's results; the grid really holds compressed envelopes; a value
//! whose compressed payload was tampered with is refused and the page read
//! from disk; and a cache reads back whatever form another setting wrote.
//!
//! Control: `waffle_compress=off` runs the same workload and stores every
//! page raw, so the counters and the value sizes below can tell the two apart.

use waffle_testkit::db::{blob_total, cache_id, cache_stats, create_blob_table, drop_pager_cache, flush, open_waffle};
use waffle_testkit::nodes::{grid_of, start_node};
use waffle_testkit::raw_client::{key, mg, ms};
use waffle_testkit::temp_dir::TempDir;
use waffle_testkit::workload::Differential;

use waffle_core::envelope::{self, FLAG_LZ4, FLAG_SEALED, FLAG_ZSTD, HEADER_BYTES};

/// Rows that compress like real ones: repeated structure, some variety.
fn row(id: i64) -> Vec<u8> {
    format!("customer {id:08} | district {:02} | balance {:>12} | note: regular order, ship by air |", id % 10, id * 37)
        .repeat(6)
        .into_bytes()
}

#[test]
fn every_codec_gives_the_plain_databases_results() {
    let nodes = [start_node(64), start_node(64)];
    let grid = grid_of(&nodes);
    for (codec, seed) in [("off", 0xC0_0001), ("lz4", 0xC0_0002), ("zstd", 0xC0_0003), ("zstd:-3", 0xC0_0004)] {
        let params = [
            ("waffle_grid", grid.as_str()),
            ("waffle_local", "16KiB"),
            ("waffle_timeout_ms", "1000"),
            ("waffle_compress", codec),
        ];
        let mut d = Differential::open(&format!("compress-{codec}"), "wal", 4096, seed, &params);
        d.run(1500);
        d.check();
        let s = cache_stats(&d.cached);
        let report = d.finish();
        eprintln!("{codec}: {}", report.line());
        assert!(s.l2_hits > 50, "{codec}: the grid must serve reads for this to test anything: {s:?}");
        assert_eq!(s.l2_rejects_total, 0, "{codec}: {s:?}");
        let (compressed, decompressed) = (s.compression.pages_compressed, s.compression.pages_decompressed);
        if codec == "off" {
            assert_eq!(compressed + s.compression.pages_raw, 0, "off compresses nothing: {s:?}");
            assert_eq!(decompressed, 0, "{s:?}");
        } else {
            assert!(compressed > 50, "{codec}: pages should compress: {s:?}");
            assert!(decompressed > 50, "{codec}: grid hits should be decompressed: {s:?}");
            assert!(
                s.compression.bytes_after < s.compression.bytes_before,
                "{codec}: compression must save bytes: {s:?}"
            );
        }
    }
}

/// Writes rows, reads them once through a tiny L1 so every page is pushed,
/// and returns the connection, the database path and the cache id.
fn pushed(dir: &TempDir, grid: &str, codec: &str) -> (rusqlite::Connection, std::path::PathBuf, u64) {
    let db = dir.join("c.db");
    let conn = open_waffle(&db, &[("waffle_grid", grid), ("waffle_local", "16KiB"), ("waffle_compress", codec)]);
    create_blob_table(&conn, 10, 1..=300, row);
    let _ = blob_total(&conn);
    flush(&conn);
    let id = cache_id(&conn);
    (conn, db, id)
}

#[test]
fn the_grid_holds_compressed_envelopes_and_the_control_raw_ones() {
    let node = start_node(64);
    let mut sizes = Vec::new();
    for codec in ["off", "lz4", "zstd"] {
        let dir = TempDir::new(&format!("compress-sizes-{codec}"));
        let (conn, _, id) = pushed(&dir, &node.addr(), codec);
        let pages: u64 = conn.query_row("PRAGMA page_count", [], |r| r.get(0)).unwrap();
        let values: Vec<Vec<u8>> = (0..pages).filter_map(|p| mg(&node.addr(), &key(id, p))).collect();
        assert!(values.len() > 20, "{codec}: too few pages pushed ({})", values.len());
        let flags: Vec<u8> = values.iter().map(|v| v[5]).collect();
        let want = match codec {
            "off" => 0,
            "lz4" => FLAG_LZ4,
            _ => FLAG_ZSTD,
        };
        let with_flag = flags.iter().filter(|&&f| f == want).count();
        assert!(with_flag * 10 >= values.len() * 9, "{codec}: flags {flags:?}");
        let total: usize = values.iter().map(Vec::len).sum();
        sizes.push((codec, total / values.len()));
        drop(conn);
    }
    eprintln!("mean value bytes per page: {sizes:?}");
    let (off, lz4, zstd) = (sizes[0].1, sizes[1].1, sizes[2].1);
    assert!(off > 4096, "raw values hold a whole page and the envelope: {off}");
    assert!(lz4 * 2 < off && zstd * 2 < off, "compressed values should be less than half: {sizes:?}");
}

#[test]
fn a_tampered_compressed_payload_is_refused_and_the_page_read_from_disk() {
    let node = start_node(64);
    let dir = TempDir::new("compress-tamper");
    let (conn, _, id) = pushed(&dir, &node.addr(), "lz4");
    let pages: u64 = conn.query_row("PRAGMA page_count", [], |r| r.get(0)).unwrap();
    let want = blob_total(&conn);
    // Every compressed value gets a byte of its payload changed and a crc32c
    // recomputed to match: only the decompressor (or the page's size) can tell.
    let mut tampered = 0;
    for p in 0..pages {
        let k = key(id, p);
        let Some(mut v) = mg(&node.addr(), &k) else { continue };
        if v[5] & (FLAG_LZ4 | FLAG_ZSTD) == 0 || v[5] & FLAG_SEALED != 0 {
            continue;
        }
        let body_end = v.len() - envelope::TRAILER_BYTES;
        // The first byte of an LZ4 block is a token of literal and match lengths.
        v[HEADER_BYTES] ^= 0xF0;
        let crc = crc32c(&v[..body_end]);
        v[body_end..].copy_from_slice(&crc.to_le_bytes());
        ms(&node.addr(), &k, &v);
        tampered += 1;
    }
    assert!(tampered > 20, "too few compressed values to tamper with: {tampered}");
    drop_pager_cache(&conn);
    let before = cache_stats(&conn);
    assert_eq!(blob_total(&conn), want, "every row as written, whatever the grid holds");
    conn.query_row("PRAGMA integrity_check", [], |r| r.get::<_, String>(0)).map(|s| assert_eq!(s, "ok")).unwrap();
    let after = cache_stats(&conn);
    let refused = after.l2_rejects.codec - before.l2_rejects.codec;
    let other = after.l2_rejects_total - before.l2_rejects_total - refused;
    assert!(refused > 0, "a tampered payload must be a codec reject: {after:?}");
    assert_eq!(other, 0, "tampered payloads pass the crc, so only the codec can refuse them: {after:?}");
}

#[test]
fn a_warm_reopen_with_another_codec_reads_what_the_first_wrote() {
    let node = start_node(64);
    let dir = TempDir::new("compress-switch");
    let (conn, db, id) = pushed(&dir, &node.addr(), "zstd");
    let want = blob_total(&conn);
    drop(conn); // a clean close: warm
    let conn =
        open_waffle(&db, &[("waffle_grid", &node.addr()), ("waffle_local", "16KiB"), ("waffle_compress", "off")]);
    assert_eq!(cache_id(&conn), id, "the reopen must be warm for the grid's copies to count");
    assert_eq!(blob_total(&conn), want);
    let s = cache_stats(&conn);
    assert!(s.l2_hits > 20, "zstd pages from the first session should be hits: {s:?}");
    assert!(s.compression.pages_decompressed > 20, "{s:?}");
    assert_eq!(s.l2_rejects_total, 0, "{s:?}");
}

/// CRC-32C, as the envelope's trailer: from the same crate the core uses.
fn crc32c(bytes: &[u8]) -> u32 {
    crc32c::crc32c(bytes)
}

/// Control and case in one: while the node holds the pusher's batch (a fake
/// node pausing its stores, so the wait does not depend on the machine's
/// speed) the queue fills past half; the batches taken from then on go raw
/// (`pages_raw_behind`), none is dropped, and every page reads back.
#[test]
fn a_pusher_that_falls_behind_pushes_raw_instead_of_dropping() {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;
    use waffle_core::grid::{Grid, GridOptions, NodeSpec};
    use waffle_core::{CacheOptions, PageCache};
    use waffle_testkit::fake_node::{FakeNode, SetPause};
    use waffle_testkit::mem_file::MemFile;
    use waffle_testkit::wait::wait_for;

    const PAGE: usize = 4096;
    // A push queue of 1 MiB: 256 pages; half is 128. With the stores held, one batch waits
    // in flight and the next 239 pages wait in the queue.
    const PAGES: u64 = 260;
    let node = FakeNode::start();
    // A deadline past the fake's longest pause: the held batch waits, it does not time out.
    let opts = GridOptions { timeout_ms: 10_000, cost_backoff: false, ..GridOptions::default() };
    let grid = Arc::new(Grid::new(NodeSpec::parse_list(&node.addr()).unwrap(), opts));
    let cache = PageCache::new(CacheOptions {
        cache_id: 0xbe41d,
        saved: None,
        page_bytes: PAGE,
        local_bytes: 4 * PAGE as u64,
        push_queue_bytes: 1 << 20,
        grid: Some(grid),
        seal_key: None,
        page_check: None,
        codec: waffle_core::codec::DEFAULT,
    });
    let page = |p: u64| -> Vec<u8> { row(p as i64).into_iter().cycle().take(PAGE).collect() };
    let file = Arc::new(Mutex::new((0..PAGES).flat_map(page).collect::<Vec<u8>>()));
    let disk = MemFile(Arc::clone(&file));
    let mut buf = vec![0u8; PAGE];

    // A few pages while the node answers: compressed, nothing behind.
    for p in 0..20 {
        cache.read(p, &mut buf, &disk).unwrap();
    }
    assert!(cache.flush_pushes(Duration::from_secs(10)));
    assert!(cache.stats_snapshot().compression.pages_compressed >= 10);
    assert_eq!(cache.stats_snapshot().compression.pages_raw_behind, 0, "the control: the pusher kept up");

    node.pause_sets(Some(SetPause::BeforeStore));
    let held_before = node.paused_sets();
    cache.read(20, &mut buf, &disk).unwrap();
    wait_for(Duration::from_secs(10), "the pusher's batch held at the node", || node.paused_sets() > held_before);
    for p in 21..PAGES {
        cache.read(p, &mut buf, &disk).unwrap();
    }
    node.pause_sets(None);
    assert!(cache.flush_pushes(Duration::from_secs(20)));
    assert!(cache.stats_snapshot().compression.pages_raw_behind > 0, "{:?}", cache.stats_snapshot());
    assert_eq!(cache.stats_snapshot().l2_push_drops, 0, "{:?}", cache.stats_snapshot());
    for p in 0..PAGES {
        cache.read(p, &mut buf, &disk).unwrap();
        assert!(buf == page(p), "page {p}");
    }
    assert_eq!(cache.stats_snapshot().l2_rejects_total, 0);
}
