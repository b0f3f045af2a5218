//! Never stale across tiers: grid nodes with flash (memcached's extstore).
//!
//! memcached serves a value from its flash file as it serves one from RAM: a
//! hit, whatever the bytes are, as long as their CRC holds. An old copy that
//! comes back from flash (a node that missed an update, or old bytes written
//! over new ones in the file: a replay passes memcached's CRC) must be refused
//! by its version; damaged bytes must be a miss. Every test runs in verify mode
//! (each page served is compared with the file) and has a control that the
//! copies really were in the flash file: their envelopes found in it, and
//! memcached's `get_extstore` moving while the pages were read.
//!
//! The nodes write every item to flash at once (`ext_item_age=0`) through the
//! smallest write buffer (2 MiB, about 490 pages of 4 KiB; a value waits in it,
//! in memory, until the buffer fills), so the tables are a few write buffers large.

use std::collections::{BTreeMap, HashMap};
use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{params, Connection};
use waffle_core::stats::CacheSnapshot;
use waffle_testkit::db::{cache_id, cache_stats, create_blob_table, drop_pager_cache, flush, open_waffle};
use waffle_testkit::nodes::Node;
use waffle_testkit::pattern;
use waffle_testkit::raw_client::{envelope_identity, key, ms, node_stat, RawClient};
use waffle_testkit::temp_dir::TempDir;
use waffle_testkit::wait::wait_for;

const ROW: usize = 3000; // one row per 4 KiB leaf page
const ROWS: i64 = 1500;
const PAGE_BYTES: u64 = 4096;
const NODE_MIB: u32 = 16;
const FLASH_MIB: u32 = 64;
/// memcached's item header and CAS before the key (1.6, 64-bit).
const ITEM_HEADER_BYTES: usize = 56;
const WAIT: Duration = Duration::from_secs(20);

/// A node whose items all go to `dir/flash` at once.
fn flash_node(dir: &TempDir) -> (Node, PathBuf) {
    flash_node_with(dir, "ext_item_age=0,")
}

/// A node with `dir/flash` and the settings of [`flash_node`] but `ext_item_age` (`age`: that
/// setting and its comma, or nothing: memcached then writes to flash only when RAM runs short).
fn flash_node_with(dir: &TempDir, age: &str) -> (Node, PathBuf) {
    let file = dir.join("flash");
    let opts = format!(
        "ext_page_size=2,ext_wbuf_size=2,ext_threads=2,ext_item_size=512,{age}ext_path={}:{FLASH_MIB}m",
        file.display()
    );
    let node = Node::start_with_args(NODE_MIB, &["-o".into(), opts])
        .unwrap_or_else(|e| panic!("cannot start memcached with extstore ({e}); memcached 1.6 is needed"));
    (node, file)
}

fn open(path: &Path, node: &Node) -> Connection {
    let addr = node.addr();
    open_waffle(
        path,
        &[("waffle_grid", &addr), ("waffle_local", "16KiB"), ("waffle_verify", "on"), ("waffle_compress", "off")],
    )
}

fn value(generation: u64, id: i64) -> Vec<u8> {
    pattern((generation << 32) + id as u64, ROW)
}

/// Rewrites every row to `generation`'s bytes in one transaction and pushes what L1 evicts.
fn rewrite(conn: &Connection, generation: u64) {
    let tx = conn.unchecked_transaction().unwrap();
    for id in 1..=ROWS {
        tx.execute("UPDATE t SET v = ? WHERE id = ?", params![value(generation, id), id]).unwrap();
    }
    tx.commit().unwrap();
    flush(conn);
}

/// Reads every row (past SQLite's cache) and checks it holds `generation`'s bytes.
fn check(conn: &Connection, generation: u64, when: &str) {
    drop_pager_cache(conn);
    let mut stmt = conn.prepare("SELECT id, v FROM t ORDER BY id").unwrap();
    let rows: BTreeMap<i64, Vec<u8>> =
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap().collect::<Result<_, _>>().unwrap();
    assert_eq!(rows.len() as i64, ROWS, "{when}: row count");
    for (id, v) in rows {
        assert!(v == value(generation, id), "{when}: row {id} is not generation {generation}");
    }
}

/// Verify mode compared pages and found no difference; no copy was refused but as stale.
fn assert_verified(s: &CacheSnapshot) {
    assert!(s.verify_checked > 0, "verify mode checked nothing: is it on? {s:?}");
    assert_eq!(s.verify_mismatches, 0, "a page served differed from the file: {s:?}");
    let k = &s.l2_rejects;
    for (kind, n) in [("length", k.length), ("format", k.format), ("database", k.database), ("page", k.page)] {
        assert_eq!(n, 0, "unexpected {kind} reject: {s:?}");
    }
}

/// Old copies the node served were refused as stale (each is then deleted, so counted once);
/// nearly all were asked for. Not all: a page can be served by L1, or skipped by the presence
/// guess (presence.rs), and verify mode has checked that no old copy was served.
fn assert_refused(refused: u64, put_back: usize, s: &CacheSnapshot) {
    assert!(refused <= put_back as u64, "{refused} refusals of {put_back} old copies: {s:?}");
    assert!(refused * 10 >= put_back as u64 * 9, "only {refused} of {put_back} old copies were asked for: {s:?}");
}

/// Where each envelope of `cache` lies in the flash file: (page, version) -> value offsets.
fn envelopes_in(file: &Path, cache: u64) -> HashMap<(u64, u64), Vec<usize>> {
    let data = std::fs::read(file).unwrap_or_else(|e| panic!("read {}: {e}", file.display()));
    envelopes_in_data(&data, cache)
}

fn envelopes_in_data(data: &[u8], cache: u64) -> HashMap<(u64, u64), Vec<usize>> {
    let mut out: HashMap<(u64, u64), Vec<usize>> = HashMap::new();
    let header = waffle_core::envelope::HEADER_BYTES;
    for at in memchr_all(data, b"WAFL") {
        if at + header <= data.len() {
            let (c, page, version) = envelope_identity(&data[at..at + header]);
            if c == cache {
                out.entry((page, version)).or_default().push(at);
            }
        }
    }
    out
}

fn memchr_all<'a>(data: &'a [u8], needle: &'a [u8]) -> impl Iterator<Item = usize> + 'a {
    data.windows(needle.len()).enumerate().filter(move |(_, w)| *w == needle).map(|(i, _)| i)
}

/// The grid's copy of every page of the database, as the node holds it now.
fn grid_copies(addr: &str, db: &Path, cache: u64) -> BTreeMap<u64, Vec<u8>> {
    let pages = std::fs::metadata(db).unwrap().len() / PAGE_BYTES;
    let mut raw = RawClient::connect(addr);
    (0..pages).filter_map(|p| raw.peek(&key(cache, p)).map(|v| (p, v))).collect()
}

/// The node's `stats` counters of this many names, for deltas.
fn counters(addr: &str, names: &[&str]) -> Vec<u64> {
    names.iter().map(|n| node_stat(addr, n)).collect()
}

/// Creates the table through `conn`, reads it back once (every page goes
/// through L1 and is pushed), and waits until at least `min_in_file` of the
/// grid's copies are in the flash file.
fn fill(conn: &Connection, file: &Path, min_in_file: usize) -> u64 {
    create_blob_table(conn, 10, 1..=ROWS, |id| value(0, id));
    flush(conn);
    check(conn, 0, "the first read");
    flush(conn);
    let cache = cache_id(conn);
    wait_for(WAIT, "the grid's copies to reach the flash file", || envelopes_in(file, cache).len() >= min_in_file);
    cache
}

#[test]
fn old_copies_on_flash_are_refused_after_a_rewrite() {
    let dir = TempDir::new("flash-rewrite");
    let (node, file) = flash_node(&dir);
    let addr = node.addr();
    let db = dir.join("f.db");
    let conn = open(&db, &node);
    let cache = fill(&conn, &file, 600);
    let old = grid_copies(&addr, &db, cache);
    assert!(old.len() as i64 >= ROWS / 2, "the grid holds only {} pages", old.len());

    // Rewrite while the old copies sit on flash: each push replaces its key, the old bytes stay
    // in the file until extstore reclaims their page.
    rewrite(&conn, 1);
    let before = cache_stats(&conn);
    let ext_before = node_stat(&addr, "get_extstore");
    check(&conn, 1, "after the rewrite");
    flush(&conn);
    let after = cache_stats(&conn);
    assert_verified(&after);
    assert!(after.l2_hits > before.l2_hits, "the grid served nothing after the rewrite: {after:?}");
    assert!(node_stat(&addr, "get_extstore") > ext_before, "no read came from extstore after the rewrite");

    // A node that missed the updates: it holds every old copy again, and they go to flash.
    let current = grid_copies(&addr, &db, cache);
    let stale: Vec<u64> = current
        .iter()
        .filter(|(p, v)| old.get(p).is_some_and(|o| envelope_identity(o).2 != envelope_identity(v).2))
        .map(|(p, _)| *p)
        .collect();
    assert!(stale.len() as i64 >= ROWS / 2, "only {} pages have an older copy to put back", stale.len());
    let written = node_stat(&addr, "extstore_objects_written");
    for p in &stale {
        ms(&addr, &key(cache, *p), &old[p]);
    }
    wait_for(WAIT, "the old copies put back to go to flash", || {
        node_stat(&addr, "extstore_objects_written") >= written + stale.len() as u64
    });

    let before = cache_stats(&conn);
    let [ext_before]: [u64; 1] = counters(&addr, &["get_extstore"]).try_into().unwrap();
    check(&conn, 1, "with the old copies back on flash");
    let after = cache_stats(&conn);
    let refused = after.l2_rejects.version - before.l2_rejects.version;
    assert_verified(&after);
    assert_refused(refused, stale.len(), &after);
    assert!(node_stat(&addr, "get_extstore") >= ext_before + refused, "the old copies did not come from extstore");
    eprintln!("{} old copies put back on flash, {refused} served and refused as stale", stale.len());

    // PRAGMA waffle_stats shows the node's flash tier (asked at most every 10 s).
    wait_for(WAIT, "PRAGMA waffle_stats to show the node's flash hits", || {
        cache_stats(&conn).nodes[0].flash.as_ref().is_some_and(|f| f.node_flash_hits > 0 && f.items > 0)
    });
    let flash = cache_stats(&conn).nodes[0].flash.clone().unwrap();
    assert_eq!(flash.bytes, u64::from(FLASH_MIB) << 20, "{flash:?}");
    assert!(flash.node_flash_hits >= refused, "the stats count fewer flash hits than refusals: {flash:?}");
}

#[test]
fn a_node_restarted_with_its_flash_file_serves_no_old_copy() {
    let dir = TempDir::new("flash-restart");
    let (mut node, file) = flash_node(&dir);
    let addr = node.addr();
    let db = dir.join("r.db");
    let conn = open(&db, &node);
    let cache = fill(&conn, &file, 600);
    let on_flash_before = envelopes_in(&file, cache).len();

    node.kill();
    // Rewritten while the node is away: its flash file keeps generation 0.
    rewrite(&conn, 1);
    node.restart().expect("restart memcached with the same flash file");
    // memcached 1.6.18 (without -e) keeps its flash index in RAM only: it starts with none.
    assert!(on_flash_before >= 600, "control: the old copies were in the flash file before the kill");
    assert_eq!(node_stat(&addr, "curr_items"), 0, "the restarted node has items from its flash file");
    eprintln!(
        "restart: {on_flash_before} copies in the flash file before, {} after ({} bytes)",
        envelopes_in(&file, cache).len(),
        std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0)
    );

    wait_for(WAIT, "the restarted node to come back up", || {
        let up = cache_stats(&conn).nodes[0].up;
        if !up {
            check(&conn, 1, "while the node comes back");
        }
        up
    });
    check(&conn, 1, "after the restart");
    flush(&conn);
    wait_for(WAIT, "the new copies to go to flash", || node_stat(&addr, "extstore_objects_used") >= 1000);
    let before = cache_stats(&conn);
    let ext_before = node_stat(&addr, "get_extstore");
    check(&conn, 1, "after the restart, from flash");
    let after = cache_stats(&conn);
    assert_verified(&after);
    assert_eq!(after.l2_rejects.version, before.l2_rejects.version, "the restarted node served an old copy");
    assert!(after.l2_hits > before.l2_hits, "the restarted node serves nothing: {after:?}");
    assert!(node_stat(&addr, "get_extstore") > ext_before, "no read came from extstore after the restart");
}

/// A copy's item in the flash file: its start and length (header, key, one byte, value,
/// "\r\n"); None if the key is not right before the value (leftovers of an older item).
fn item_at(data: &[u8], value_at: usize, key: &str, value_len: usize) -> Option<(usize, usize)> {
    let key_at = value_at.checked_sub(1 + key.len() + ITEM_HEADER_BYTES)? + ITEM_HEADER_BYTES;
    (&data[key_at..key_at + key.len()] == key.as_bytes())
        .then_some((key_at - ITEM_HEADER_BYTES, ITEM_HEADER_BYTES + key.len() + 1 + value_len + 2))
}

/// A page's current item and an older item of it, both whole in the flash file.
struct Items {
    current_at: usize,
    old_at: usize,
    len: usize,
    value_len: usize,
}

/// For each page of `current` (the grid's copies) with one item of its current version and
/// one of another in `data`: where they start.
fn old_and_current_items(data: &[u8], current: &BTreeMap<u64, Vec<u8>>, cache: u64) -> Vec<Items> {
    let mut found: HashMap<u64, Vec<(u64, usize)>> = HashMap::new();
    for ((page, version), at) in envelopes_in_data(data, cache) {
        found.entry(page).or_default().extend(at.into_iter().map(|a| (version, a)));
    }
    let pick = |p: &u64, v: &Vec<u8>| {
        let (now, k, all) = (envelope_identity(v).2, key(cache, *p), found.get(p)?);
        // One item of the current version only: which of two is live is not known.
        let [(_, at)] = all.iter().filter(|(ver, _)| *ver == now).collect::<Vec<_>>()[..] else { return None };
        let (current_at, len) = item_at(data, *at, &k, v.len())?;
        let old_at = all.iter().filter(|(ver, _)| *ver != now).find_map(|(_, a)| item_at(data, *a, &k, v.len()))?.0;
        Some(Items { current_at, old_at, len, value_len: v.len() })
    };
    current.iter().filter_map(|(p, v)| pick(p, v)).collect()
}

#[test]
fn a_flash_file_corrupted_or_truncated_under_a_running_node_serves_no_wrong_page() {
    let dir = TempDir::new("flash-corrupt");
    let (node, file) = flash_node(&dir);
    let addr = node.addr();
    let db = dir.join("c.db");
    let conn = open(&db, &node);
    let cache = fill(&conn, &file, 600);
    // The rewrite reads each page (its grid copy deleted) and pushes it once, so each page's
    // current copy is one item; a second read now would push a second and leave a dead one.
    rewrite(&conn, 1);
    let current = grid_copies(&addr, &db, cache);
    let mut data = Vec::new();
    let mut items = Vec::new();
    wait_for(WAIT, "old and current copies of 100 pages in the flash file", || {
        data = std::fs::read(&file).unwrap();
        items = old_and_current_items(&data, &current, cache);
        items.len() >= 100
    });

    // Three current values garbled (their CRC fails: misses), far apart: four misses in a row
    // would make the cache skip pages it pushed long ago (presence.rs), and so never ask for
    // some replayed ones. Every other page: its old item copied over the current one (a replay:
    // its CRC holds, memcached serves it).
    let f = OpenOptions::new().write(true).open(&file).unwrap();
    let far_apart = [1, 2, 3].map(|q| q * items.len() / 4);
    let (garbled, replayed): (Vec<(usize, &Items)>, Vec<_>) =
        items.iter().enumerate().partition(|(i, _)| far_apart.contains(i));
    for (_, it) in &replayed {
        f.write_all_at(&data[it.old_at..it.old_at + it.len], it.current_at as u64).unwrap();
    }
    for (_, it) in &garbled {
        let value = it.current_at + it.len - 2 - it.value_len..it.current_at + it.len - 2;
        let junk: Vec<u8> = data[value.clone()].iter().map(|b| b ^ 0x5a).collect();
        f.write_all_at(&junk, value.start as u64).unwrap();
    }
    f.sync_all().unwrap();

    // The garbled values, asked for by another client: each a miss that memcached counts as a bad
    // CRC (and unlinks). Asked here rather than left to the cache's reads below, which need not
    // ask for every page (one in L1, or skipped by the presence guess): a run under load once
    // saw 2 of the 3 there, while asked here every one of them was bad in every run.
    let names = ["get_extstore", "badcrc_from_extstore", "miss_from_extstore"];
    let g0 = counters(&addr, &names);
    let mut raw = RawClient::connect(&addr);
    for (_, it) in &garbled {
        // The item: header, key, one byte, value, "\r\n" (item_at).
        let k_at = it.current_at + ITEM_HEADER_BYTES;
        let k = std::str::from_utf8(&data[k_at..it.current_at + it.len - 2 - it.value_len - 1]).unwrap();
        assert_eq!(raw.peek(k).map(|v| v.len()), None, "memcached served the garbled value of {k}");
    }
    let g1 = counters(&addr, &names);
    assert_eq!(g1[1] - g0[1], garbled.len() as u64, "memcached did not find the garbled values bad: {g0:?} -> {g1:?}");

    let before = cache_stats(&conn);
    let n0 = counters(&addr, &names);
    check(&conn, 1, "with the flash file corrupted");
    let after = cache_stats(&conn);
    let n1 = counters(&addr, &names);
    assert_verified(&after);
    let refused = after.l2_rejects.version - before.l2_rejects.version;
    assert_refused(refused, replayed.len(), &after);
    assert!(n1[0] - n0[0] >= refused, "the copies did not come from extstore: {n0:?} -> {n1:?}");

    // The file cut to nothing under the node: every flash read is a miss, every page still right.
    rewrite(&conn, 2);
    check(&conn, 2, "the third generation");
    flush(&conn);
    let current = grid_copies(&addr, &db, cache);
    wait_for(WAIT, "100 current copies in the flash file", || {
        let found = envelopes_in(&file, cache);
        current.iter().filter(|(p, v)| found.contains_key(&(**p, envelope_identity(v).2))).count() >= 100
    });
    f.set_len(0).unwrap();
    let before = cache_stats(&conn);
    let n0 = counters(&addr, &names);
    check(&conn, 2, "with the flash file truncated");
    let after = cache_stats(&conn);
    let n1 = counters(&addr, &names);
    assert_verified(&after);
    assert_eq!(after.l2_rejects.version, before.l2_rejects.version, "a truncated file served an old copy");
    assert!(n1[2] > n0[2], "no flash read missed after the truncation: {n0:?} -> {n1:?}");
}

/// Item 2: which tier served this client's own hits, labelled from a sample of the node's log
/// taken at the stats asks (grid/tier_sample.rs), agrees with the node's own counters over the
/// same reads; the watcher that took the sample is gone once its window is over. Here every
/// value is on flash (or in its write buffer, which memcached counts as flash too).
#[test]
fn hits_from_flash_are_sampled_as_flash_hits() {
    let dir = TempDir::new("flash-tiers");
    let (node, file) = flash_node(&dir);
    let conn = open(&dir.join("f.db"), &node);
    fill(&conn, &file, 600);
    let (t, node_ram, node_flash) = first_labelled_sample(&conn, &node.addr());
    assert!(node_flash > 0, "control: the reads came from flash");
    assert!(t.flash_hits > 0 && t.flash_median_us.is_some(), "{t:?}");
    assert_eq!(node_ram, 0, "control: nothing came from RAM");
}

/// The same with a node whose flash is idle: the data fits its RAM, and memcached writes a value
/// to flash only when RAM runs short (no `ext_item_age`). Every hit is labelled RAM.
#[test]
fn hits_from_ram_on_a_node_with_flash_are_sampled_as_ram_hits() {
    let dir = TempDir::new("flash-tiers-ram");
    let (node, _) = flash_node_with(&dir, "");
    let conn = open(&dir.join("f.db"), &node);
    create_blob_table(&conn, 10, 1..=ROWS, |id| value(0, id));
    flush(&conn);
    let (t, node_ram, node_flash) = first_labelled_sample(&conn, &node.addr());
    assert_eq!(node_flash, 0, "control: nothing came from flash");
    assert!(node_ram > 0, "control: the reads came from RAM");
    assert!(t.ram_hits > 0 && t.ram_median_us.is_some(), "{t:?}");
}

/// Reads the table through the grid, once per stats ask, until a sample labels a hit: that
/// sample, and the node's RAM and flash hits over its read. Each round checks that the labels
/// agree with the node's counters, and that memcached dropped the watcher after the window.
fn first_labelled_sample(conn: &Connection, addr: &str) -> (waffle_core::grid::tier_sample::TierLatency, u64, u64) {
    use waffle_core::grid::memory::REFRESH;
    let names = ["get_hits", "get_extstore", "miss_from_extstore"];
    // An ask of the node's stats (at most every REFRESH, retried a second after one that got no
    // answer) opens a watcher; each later ask ends the sample under way and opens the next.
    let ask_until_a_watcher_opens = |what: &str| {
        let mut seen = None;
        wait_for(WAIT, what, || {
            seen = cache_stats(conn).nodes[0].flash.clone().expect("the node has flash").tier_latency;
            node_stat(addr, "log_watchers") == 1
        });
        seen
    };
    ask_until_a_watcher_opens("an ask of the node's stats to open a watcher");
    // A sample covers the hits of its window only; a host that stalls through one window gives
    // none, so a few are taken.
    for round in 0..3 {
        let asked_at = std::time::Instant::now();
        let sent_before = node_stat(addr, "log_watcher_sent");
        let before = counters(addr, &names);
        check(conn, round, "a read through the grid");
        let after = counters(addr, &names);
        let delta = |i: usize| after[i] - before[i];
        let (node_flash, node_ram) = (delta(1) - delta(2), delta(0) - delta(1));
        // The node logs to the watcher on its logger thread, after the read returned: waited for.
        // A read that came after the sample's window (a stalled host) reaches no watcher; that
        // round's sample then labels nothing and the next round reads again.
        let logged =
            waffle_testkit::wait_until(Duration::from_secs(5), || node_stat(addr, "log_watcher_sent") > sent_before);
        if !logged {
            eprintln!("round {round}: no log reached a watcher (the read came after the sample's window)");
        }
        // And stops: memcached drops the watcher once the sample's intake ended.
        wait_for(WAIT, "memcached to drop the sample's watcher", || node_stat(addr, "log_watchers") == 0);
        rewrite(conn, round + 1);
        std::thread::sleep(REFRESH.saturating_sub(asked_at.elapsed()));
        let t = ask_until_a_watcher_opens("the next ask to end the sample").expect("the ask ended a sample");
        eprintln!(
            "round {round}: sampled {t:?}; the node's hits in the read: {node_ram} from RAM, {node_flash} from flash"
        );
        assert!(t.flash_hits <= node_flash, "more hits labelled flash than the node served from flash: {t:?}");
        assert!(t.ram_hits <= node_ram, "more hits labelled RAM than the node served from RAM: {t:?}");
        assert_eq!(t.ram_median_us.is_some(), t.ram_hits > 0, "{t:?}");
        assert_eq!(t.flash_median_us.is_some(), t.flash_hits > 0, "{t:?}");
        if t.ram_hits + t.flash_hits > 0 {
            return (t, node_ram, node_flash);
        }
    }
    panic!("three samples labelled no hit");
}
