//! `PRAGMA waffle_warm`: warming a table (with its indexes) or the whole
//! database in the background, against real memcached and real SQLite.
//!
//! Checked: a warmed table's pages are exactly the pages SQLite counts for it
//! (dbstat) and, past a tiny L1, reach the grid, whose copies then answer its
//! reads; a whole-database warm into a big L1 leaves a full scan nothing to
//! read from disk; writers during warms (a waffle connection of this process,
//! a plain connection that bypasses the cache, and rolled-back transactions
//! that spill uncommitted pages into the file) never lead to a stale or
//! uncommitted read; closing during a warm returns promptly and a second warm
//! is refused while one runs (on an EMULATED slow disk, libwaffle_slowdisk.so,
//! so that the warm is still running); an unknown name is an error naming it.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rusqlite::{params, Connection};
use waffle_core::stats::{CacheSnapshot, WarmSnapshot};
use waffle_testkit::db::{cache_stats, drop_pager_cache, flush, open_plain, open_waffle, snapshot};
use waffle_testkit::nodes::{grid_of, start_node};
use waffle_testkit::slow_disk;
use waffle_testkit::temp_dir::TempDir;
use waffle_testkit::wait::wait_for;

/// Starts a warm; returns the PRAGMA's one row.
fn warm(conn: &Connection, name: Option<&str>) -> rusqlite::Result<String> {
    let sql = match name {
        Some(name) => format!("PRAGMA waffle_warm='{name}'"),
        None => "PRAGMA waffle_warm".to_string(),
    };
    conn.query_row(&sql, [], |r| r.get(0))
}

/// Waits for the running warm to end; returns the stats' "warm" object.
fn warm_done(conn: &Connection) -> WarmSnapshot {
    let mut last = WarmSnapshot::default();
    wait_for(Duration::from_secs(120), "the warm to end", || {
        last = warm_stats(conn);
        last.state != "running"
    });
    last
}

/// The stats' "warm" object now.
fn warm_stats(conn: &Connection) -> WarmSnapshot {
    snapshot(conn).warming().warm.clone()
}

fn count(conn: &Connection, sql: &str) -> u64 {
    conn.query_row(sql, [], |r| r.get::<_, i64>(0)).unwrap() as u64
}

/// `t(id, k, v)` with an index on k, rows of `row_bytes` (every 50th row 12 KiB: overflow
/// chains), and `u(x)` that no table warm touches.
fn load(conn: &Connection, rows: i64, row_bytes: usize) {
    conn.execute_batch(
        "CREATE TABLE t(id INTEGER PRIMARY KEY, k TEXT, v BLOB); CREATE INDEX t_k ON t(k); CREATE TABLE u(x BLOB);",
    )
    .unwrap();
    let tx = conn.unchecked_transaction().unwrap();
    for id in 0..rows {
        let len = if id % 50 == 0 { 12_000 } else { row_bytes };
        tx.execute("INSERT INTO t VALUES (?1, ?2, ?3)", params![id, format!("key-{id:06}"), value(id, "init", len)])
            .unwrap();
        tx.execute("INSERT INTO u VALUES (?1)", [vec![7u8; row_bytes / 2]]).unwrap();
    }
    tx.commit().unwrap();
}

/// A row value that names its row and writer: "id:who;" repeated to `len` bytes.
fn value(id: i64, who: &str, len: usize) -> Vec<u8> {
    format!("{id}:{who};").into_bytes().into_iter().cycle().take(len).collect()
}

#[test]
fn a_warmed_table_reaches_the_grid_and_its_reads_come_from_l2() {
    let node = start_node(64);
    let dir = TempDir::new("warm-table");
    let path = dir.join("w.db");
    {
        let plain = open_plain(&path);
        load(&plain, 1500, 1500);
    }
    // SQLite's own count of the pages of t and its index (dbstat: overflow pages included).
    let expected = count(&open_plain(&path), "SELECT count(*) FROM dbstat WHERE name IN ('t', 't_k')");
    let u_pages = count(&open_plain(&path), "SELECT count(*) FROM dbstat WHERE name = 'u'");

    let conn = open_waffle(&path, &[("waffle_grid", &grid_of([&node])), ("waffle_local", "64KiB")]);
    conn.execute_batch("PRAGMA cache_size = 8").unwrap();
    let said = warm(&conn, Some("T")).unwrap();
    assert!(said.starts_with("started: table t and 1 index"), "{said}");
    let w = warm_done(&conn);
    flush(&conn);
    assert_eq!(w.state, "done", "{w:?}");
    assert_eq!(w.planned_pages, expected, "the walk found other pages than dbstat counts: {w:?}");
    assert_eq!(w.l1_pages + w.queued_pages + w.skipped_pages + w.dropped_pages, expected, "{w:?}");
    assert_eq!(w.dropped_pages, 0, "warm pages wait for the push queue, never dropped: {w:?}");
    assert!(w.l1_pages <= 16, "64 KiB of L1 holds 16 pages: {w:?}");
    // Done means settled: what it queued, the grid stored (a live node, nobody reading meanwhile).
    assert_eq!((w.pushed_pages, w.not_stored_pages), (w.queued_pages, 0), "{w:?}");
    assert!(w.pushed_pages >= expected * 9 / 10, "past L1 the pages go to the grid: {w:?}");
    assert!(w.disk_reads < expected / 4, "large reads, not page by page: {w:?}");
    let s0 = cache_stats(&conn);
    assert!(s0.l2_pushes >= w.pushed_pages, "the grid stored the warm's pages: {s0:?}");
    assert!(expected + u_pages > s0.l2_pushes, "u was not warmed: {s0:?}");

    // Point reads of t, in random order: the grid answers what L1 lacks, the disk nothing.
    let mut ids: Vec<i64> = (0..1500).step_by(3).collect();
    ids.shuffle(&mut rand::rngs::StdRng::seed_from_u64(13));
    drop_pager_cache(&conn);
    for &id in &ids {
        let v: Vec<u8> = conn.query_row("SELECT v FROM t WHERE id = ?1", [id], |r| r.get(0)).unwrap();
        assert!(v.starts_with(format!("{id}:init;").as_bytes()));
    }
    let s1 = cache_stats(&conn);
    let d = |f: fn(&CacheSnapshot) -> u64| f(&s1) - f(&s0);
    assert_eq!(d(|c| c.disk_reads) + d(|c| c.read_ahead_disk_reads), 0, "t's pages were warmed: {s1:?}");
    assert!(d(|c| c.l2_hits) >= ids.len() as u64 / 2, "the grid answered t's reads: {s1:?}");
    // Control: u was not warmed, so reading it goes to the disk.
    assert!(count(&conn, "SELECT count(*) FROM u WHERE length(x) > 0") > 0);
    let s2 = cache_stats(&conn);
    assert!(s2.disk_reads + s2.read_ahead_disk_reads > s1.disk_reads, "{s2:?}");
}

#[test]
fn warming_the_whole_database_leaves_a_scan_nothing_to_read_from_disk() {
    let dir = TempDir::new("warm-all");
    let path = dir.join("w.db");
    load(&open_plain(&path), 1000, 3000);
    let conn = open_waffle(&path, &[("waffle_local", "64MiB")]);
    conn.execute_batch("PRAGMA cache_size = 8").unwrap();
    let pages = count(&conn, "PRAGMA page_count");
    let said = warm(&conn, None).unwrap();
    assert_eq!(said, format!("started: the whole database, {pages} pages planned"));
    let w = warm_done(&conn);
    assert_eq!(w.state, "done", "{w:?}");
    assert_eq!(w.l1_pages + w.skipped_pages, pages, "{w:?}");
    assert!(w.l1_pages >= pages - 4, "only what the open read was there before: {w:?}");
    assert!(w.disk_reads <= pages * 4096 / (1 << 20) + 2, "1 MiB reads: {w:?}");
    assert!(w.read_bytes >= (pages - 4) * 4096, "{w:?}");

    let s0 = cache_stats(&conn);
    drop_pager_cache(&conn);
    assert!(count(&conn, "SELECT sum(length(v)) FROM t") > 1000 * 3000);
    assert!(count(&conn, "SELECT sum(length(x)) FROM u") > 0);
    assert_eq!(conn.query_row("PRAGMA integrity_check", [], |r| r.get::<_, String>(0)).unwrap(), "ok");
    let s1 = cache_stats(&conn);
    let d = |f: fn(&CacheSnapshot) -> u64| f(&s1) - f(&s0);
    assert_eq!(d(|c| c.disk_reads) + d(|c| c.read_ahead_disk_reads), 0, "a scan after a whole warm: {s1:?}");
    assert!(d(|c| c.l1_hits) > pages / 2, "{s1:?}");
}

/// Writers during warms, in `journal` mode: a waffle connection of this process (even rows), a
/// plain connection that bypasses the cache (odd rows), and plain transactions that spill
/// uncommitted pages into the file (a 5-page pager cache) and roll back. A reader checks every
/// row it sees names its row and was committed; at the end every row equals the last write.
fn writers_during_warms(journal: &str) {
    let node = start_node(64);
    let dir = TempDir::new("warm-writers");
    let path = dir.join("w.db");
    const ROWS: i64 = 1200;
    const LEN: usize = 1500;
    {
        let plain = open_plain(&path);
        plain.execute_batch(&format!("PRAGMA journal_mode = {journal}")).unwrap();
        load(&plain, ROWS, LEN);
    }
    let params = [("waffle_grid", grid_of([&node])), ("waffle_local", "256KiB".to_string())];
    let params: Vec<(&str, &str)> = params.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let reader = open_waffle(&path, &params);
    reader.execute_batch("PRAGMA cache_size = 8").unwrap();
    let len_of = |id: i64| if id % 50 == 0 { 12_000 } else { LEN };

    let writers_done = std::sync::atomic::AtomicBool::new(false);
    // The writers go on (bounded) until at least three warms have started while they ran.
    let warms_started = std::sync::atomic::AtomicUsize::new(0);
    let more = |i: usize| i < 250 || (i < 5000 && warms_started.load(std::sync::atomic::Ordering::Acquire) < 3);
    let (expected, warms) = std::thread::scope(|s| {
        let waffle_writer = s.spawn(|| {
            let c = open_waffle(&path, &params);
            c.execute_batch("PRAGMA cache_size = 8").unwrap();
            let mut rng = rand::rngs::StdRng::seed_from_u64(1);
            let mut last = HashMap::new();
            for i in (0..).take_while(|&i| more(i)) {
                let id = rng.gen_range(0..ROWS / 2) * 2;
                let who = format!("w{i}");
                c.execute("UPDATE t SET v = ?2 WHERE id = ?1", params![id, value(id, &who, len_of(id))]).unwrap();
                last.insert(id, who);
            }
            last
        });
        let plain_writer = s.spawn(|| {
            let c = open_plain(&path);
            // A pager cache this small spills a big transaction's pages into the file before it ends
            // (without fsyncs: the spills are the point, and the writers' waits stay short).
            c.execute_batch("PRAGMA cache_size = 5; PRAGMA synchronous = OFF").unwrap();
            let mut rng = rand::rngs::StdRng::seed_from_u64(2);
            let mut last = HashMap::new();
            for i in (0..).take_while(|&i| more(i)) {
                if i % 25 == 0 {
                    let tx = c.unchecked_transaction().unwrap();
                    for id in (1..ROWS).step_by(16) {
                        tx.execute(
                            "UPDATE t SET v = ?2 WHERE id = ?1",
                            params![id, value(id, "rolled-back", len_of(id))],
                        )
                        .unwrap();
                    }
                    tx.rollback().unwrap();
                }
                let id = rng.gen_range(0..ROWS / 2) * 2 + 1;
                let who = format!("p{i}");
                c.execute("UPDATE t SET v = ?2 WHERE id = ?1", params![id, value(id, &who, len_of(id))]).unwrap();
                last.insert(id, who);
            }
            last
        });
        let stopper = s.spawn(|| {
            let a = waffle_writer.join().unwrap();
            let b = plain_writer.join().unwrap();
            writers_done.store(true, std::sync::atomic::Ordering::Release);
            (a, b)
        });
        // Warm over and over while the writers run; read rows in between.
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let mut warms = 0;
        while !writers_done.load(std::sync::atomic::Ordering::Acquire) {
            match warm(&reader, if warms % 2 == 0 { None } else { Some("t") }) {
                Ok(_) => {
                    warms += 1;
                    warms_started.store(warms, std::sync::atomic::Ordering::Release);
                }
                Err(e) => assert!(e.to_string().contains("is running"), "{e}"),
            }
            for _ in 0..20 {
                let id = rng.gen_range(0..ROWS);
                let v: Vec<u8> = reader.query_row("SELECT v FROM t WHERE id = ?1", [id], |r| r.get(0)).unwrap();
                let text = String::from_utf8_lossy(&v[..40]).into_owned();
                assert!(text.starts_with(&format!("{id}:")), "row {id} holds another row's bytes: {text}");
                assert!(!text.contains("rolled-back"), "row {id} shows a rolled-back write: {text}");
            }
        }
        let (a, b) = stopper.join().unwrap();
        (a.into_iter().chain(b).collect::<HashMap<_, _>>(), warms)
    });
    warm_done(&reader);
    assert!(warms >= 3, "the writers stopped before three warms ran");
    // Every row as last committed, read through the cache (L1, grid or disk).
    drop_pager_cache(&reader);
    let mut stmt = reader.prepare("SELECT id, v FROM t ORDER BY id").unwrap();
    let rows = stmt.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, Vec<u8>>(1)?))).unwrap();
    let mut seen = 0;
    for row in rows {
        let (id, v) = row.unwrap();
        let who = expected.get(&id).map_or("init", String::as_str);
        assert!(v == value(id, who, len_of(id)), "row {id}: expected {who}'s write, read {:?}", &v[..40]);
        seen += 1;
    }
    assert_eq!(seen, ROWS);
    assert_eq!(reader.query_row("PRAGMA integrity_check", [], |r| r.get::<_, String>(0)).unwrap(), "ok");
    let s = cache_stats(&reader);
    eprintln!("{journal}: {warms} warms; foreign changes {}; warm {:?}", s.foreign_changes, warm_stats(&reader));
    if journal != "wal" {
        // (In WAL mode the plain writer's commits stay in the WAL, which SQLite reads itself.)
        assert!(s.foreign_changes > 0, "the plain writer's commits were seen: {s:?}");
    }
}

#[test]
fn writers_during_warms_never_lead_to_a_stale_read_rollback_journal() {
    writers_during_warms("delete");
}

#[test]
fn writers_during_warms_never_lead_to_a_stale_read_wal() {
    writers_during_warms("wal");
}

/// On an EMULATED cloud-block disk (libwaffle_slowdisk.so, 0.67 ms per 4 KiB
/// read even in sequence), so the whole warm takes seconds and is still
/// running when the second warm and the close come.
#[test]
fn closing_during_a_warm_returns_promptly_and_a_second_warm_is_refused() {
    const TEST: &str = "closing_during_a_warm_returns_promptly_and_a_second_warm_is_refused";
    let Some(dir) = slow_disk::child_dir() else {
        let dir = TempDir::new("warm-close");
        load(&open_plain(&dir.join("w.db")), 5000, 3500);
        slow_disk::run_again(TEST, "cloud-block", dir.path(), &[]);
        return;
    };
    let path = dir.join("w.db");
    slow_disk::drop_from_page_cache(&path);
    let conn = open_waffle(&path, &[("waffle_local", "64MiB")]);
    let pages = count(&conn, "PRAGMA page_count");
    assert!(pages > 5000);
    warm(&conn, None).unwrap();
    let refused = warm(&conn, Some("t")).unwrap_err().to_string();
    assert!(refused.contains("refused") && refused.contains("is running"), "{refused}");
    wait_for(Duration::from_secs(20), "the warm to read a first MiB", || warm_stats(&conn).read_pages > 0);
    let w = warm_stats(&conn);
    assert_eq!(w.state, "running", "{w:?}");
    let (stalls, t0) = (waffle_testkit::stall::StallMeter::start(), Instant::now());
    drop(conn);
    let took = t0.elapsed();
    // What a starved process adds to the close's own steps (stop, hot list, sidecar), measured:
    // a close that waited for the warm's seconds of reads exceeds it all the same.
    let stall = stalls.stop();
    assert!(
        took < Duration::from_millis(1500) + 4 * stall,
        "the close waited {took:?} for the warm (stalls up to {stall:?})"
    );
    // The database opens again, with no warm running.
    let again = open_waffle(&path, &[("waffle_local", "64MiB")]);
    assert_eq!(warm_stats(&again).state, "idle");
    assert_eq!(count(&again, "SELECT count(*) FROM t"), 5000);
    assert!(slow_disk::slowed_reads("cloud-block") > 0, "the warm's reads waited for the EMULATED disk");
}

#[test]
fn an_unknown_name_is_an_error_naming_it() {
    let dir = TempDir::new("warm-unknown");
    let path = dir.join("w.db");
    load(&open_plain(&path), 10, 100);
    let conn = open_waffle(&path, &[]);
    let e = warm(&conn, Some("no_such_table")).unwrap_err().to_string();
    assert!(e.contains("'no_such_table'"), "{e}");
    let w = warm_stats(&conn);
    assert_eq!(w.state, "failed", "{w:?}");
    // An index by its own name warms just that index; the failure did not block the next warm.
    let said = warm(&conn, Some("t_k")).unwrap();
    assert!(said.starts_with("started: index t_k"), "{said}");
    assert_eq!(warm_done(&conn).state, "done");
}
