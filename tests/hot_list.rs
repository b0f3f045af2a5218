//! The hot list (waffle_core::warming, waffle-sqlite's hot_reload.rs): a
//! clean close writes the pages the cache held, hottest first; the next open
//! reloads them into L1 in the background, from the grid where the list is
//! trusted, else from the disk. A list from another file, another identity,
//! a crash or a corrupted file is never trusted, and no reload ever serves a
//! page another process changed.
//!
//! Rows are one 4 KiB leaf page each (warm_restart's rows); the hot rows are
//! read over and over before the close, so S3-FIFO keeps them in its main
//! queue and the list names them first.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use rusqlite::{params, Connection};
use waffle_core::stats::StatsSnapshot;
use waffle_core::warming::hot_list::{self, Trust};
use waffle_testkit::artefact;
use waffle_testkit::db::{cache_id, create_blob_table, drop_pager_cache, open_plain, open_waffle, snapshot};
use waffle_testkit::nodes::{start_node, Node};
use waffle_testkit::process::spawn_until_ready;
use waffle_testkit::raw_client::{key, mg};
use waffle_testkit::slow_disk;
use waffle_testkit::temp_dir::TempDir;
use waffle_testkit::wait::wait_for;
use waffle_testkit::warm_restart::{after_child_commit, check_rows, value};

/// As many rows as `commit-then-hang` expects before its commit.
const ROWS: i64 = 200;
/// Rows read again and again before the close (the hot set).
const HOT_ROWS: i64 = 60;
/// L1: 128 pages of 4 KiB, less than the table (about 205 pages), more than the hot set.
const L1: &str = "512KiB";

struct Closed {
    _node: Node,
    addr: String,
    _dir: TempDir,
    db: PathBuf,
    first_id: u64,
}

fn params<'a>(addr: &'a str, hot_list: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![("waffle_grid", addr), ("waffle_local", L1), ("waffle_hot_list", hot_list)]
}

/// Reads rows `ids` in a scattered order (consecutive pages would be a scan,
/// which the cache reads ahead and never counts as hot), SQLite's own cache
/// dropped first, and checks their bytes.
fn read_rows(conn: &Connection, ids: std::ops::RangeInclusive<i64>, generation: impl Fn(i64) -> u64) {
    drop_pager_cache(conn);
    let mut stmt = conn.prepare("SELECT v FROM t WHERE id = ?").unwrap();
    let (first, count) = (*ids.start(), ids.end() - ids.start() + 1);
    // 37 is prime to every count used here: each id once.
    for id in (0..count).map(|i| first + (i * 37) % count) {
        let v: Vec<u8> = stmt.query_row([id], |r| r.get(0)).unwrap();
        assert!(v == value(id, generation(id)), "row {id} has wrong bytes");
    }
}

/// A database of ROWS rows on a node of its own, the first HOT_ROWS read
/// five times after a pass over all of them, closed cleanly.
fn closed(name: &str) -> Closed {
    let node = start_node(64);
    let addr = node.addr();
    let dir = TempDir::new(name);
    let db = dir.join("h.db");
    let conn = open_waffle(&db, &params(&addr, "on"));
    create_blob_table(&conn, 10, 1..=ROWS, |id| value(id, 1));
    check_rows(&conn, |id| value(id, 1), ROWS);
    for _ in 0..5 {
        read_rows(&conn, 1..=HOT_ROWS, |_| 1);
    }
    let first_id = cache_id(&conn);
    drop(conn);
    Closed { _node: node, addr, _dir: dir, db, first_id }
}

/// The stats once the open's reload has ended (or at once when there is none).
fn after_reload(conn: &Connection) -> StatsSnapshot {
    let mut s = StatsSnapshot::default();
    wait_for(Duration::from_secs(30), "the hot list reload to end", || {
        s = snapshot(conn);
        !matches!(s.warming().hot_list.state.as_str(), "pending" | "running")
    });
    s
}

fn why(s: &StatsSnapshot) -> String {
    s.warming().hot_list.why.clone().unwrap_or_default()
}

/// `on` (a connection of the reload's own, grid then disk) and `grid` (the
/// default: the grid only, no connection, no lock) alike.
#[test]
fn a_clean_close_then_reopen_fills_l1_from_the_grid_before_the_workload_reads() {
    for mode in ["on", "grid"] {
        clean_close_then_reopen(mode);
    }
}

fn clean_close_then_reopen(mode: &str) {
    let Closed { _node, addr, _dir, db, first_id } = closed(&format!("hot-warm-{mode}"));
    let (list, trust) = hot_list::load(&db, &std::fs::metadata(&db).unwrap(), Some((first_id, 4096)));
    let list = list.expect("the clean close wrote a hot list");
    assert_eq!(trust, Trust::Trusted);
    assert!(list.l1_pages >= 100 && list.pages.len() as u64 >= list.l1_pages, "{} listed", list.pages.len());

    let conn = open_waffle(&db, &params(&addr, mode));
    assert_eq!(cache_id(&conn), first_id, "warm");
    let s = after_reload(&conn);
    let h = &s.warming().hot_list;
    assert_eq!((h.state.as_str(), h.trusted), ("done", true), "{h:?}");
    assert!(s.warming().hot_list.from_grid_pages >= 100, "L1's room came from the grid: {h:?}");
    assert!(s.warming().hot_list.from_disk_pages <= 5, "hardly any disk: {h:?}");
    assert!(s.cache().l1.pages >= 110, "L1 refilled: {s:?}");
    assert_eq!(s.cache().l2_rejects_total, 0, "{s:?}");
    // The workload's hot rows are L1 hits (a page or two, such as the header's, may not be).
    let below_l1 = |s: &StatsSnapshot| {
        s.cache().l2_hits + s.cache().read_ahead_pages_l2 + s.cache().disk_reads + s.cache().read_ahead_pages_disk
    };
    let (below, l1) = (below_l1(&s), s.cache().l1_hits);
    read_rows(&conn, 1..=HOT_ROWS, |_| 1);
    let s = snapshot(&conn);
    assert!(below_l1(&s) - below <= 2, "hot rows below L1: {s:?}");
    assert!(s.cache().l1_hits - l1 >= HOT_ROWS as u64 - 2, "{s:?}");
    check_rows(&conn, |id| value(id, 1), ROWS);
}

/// The control: the same restart with the reload off leaves L1 empty and
/// the hot rows come from the grid on demand.
#[test]
fn with_the_reload_off_nothing_is_loaded_and_the_hot_rows_come_from_the_grid() {
    let Closed { _node, addr, _dir, db, first_id } = closed("hot-off");
    assert!(hot_list::path_for(&db).exists());
    let conn = open_waffle(&db, &params(&addr, "off"));
    assert_eq!(cache_id(&conn), first_id, "warm");
    let s = after_reload(&conn);
    assert_eq!(s.warming().hot_list.state, "off", "{s:?}");
    assert_eq!(s.warming().hot_list.from_grid_pages + s.warming().hot_list.from_disk_pages, 0, "{s:?}");
    let from_grid = |s: &StatsSnapshot| s.cache().l2_hits + s.cache().read_ahead_pages_l2;
    let before = from_grid(&s);
    read_rows(&conn, 1..=HOT_ROWS, |_| 1);
    let s = snapshot(&conn);
    assert!(from_grid(&s) - before >= HOT_ROWS as u64 - 5, "the hot rows from the grid, on demand: {s:?}");
}

/// Starts `commit-then-hang` on the database (warm), waits for its commit, SIGKILLs it.
fn crash_child(db: &Path, grid: &str) -> u64 {
    let mut cmd = Command::new(artefact("commit-then-hang"));
    cmd.arg(db).arg(grid).arg("committed");
    let (mut child, ready) = spawn_until_ready(&mut cmd, Duration::from_secs(15));
    let id = u64::from_str_radix(ready.split_whitespace().next().unwrap(), 16).unwrap();
    child.0.kill().expect("SIGKILL the child");
    assert!(!child.0.wait().unwrap().success());
    id
}

/// Under `grid` (the default) a list that is not trusted is not used at all.
#[test]
fn under_grid_a_list_after_a_crash_is_not_used() {
    let Closed { _node, addr, _dir, db, first_id } = closed("hot-crash-grid");
    assert_eq!(crash_child(&db, &addr), first_id);
    let conn = open_waffle(&db, &params(&addr, "grid"));
    let s = after_reload(&conn);
    assert_eq!(s.warming().hot_list.state, "none", "{s:?}");
    assert!(why(&s).contains("waffle_hot_list=on would read"), "{s:?}");
    assert_eq!(s.warming().hot_list.from_grid_pages + s.warming().hot_list.from_disk_pages, 0, "{s:?}");
    check_rows(&conn, |id| value(id, after_child_commit(id)), 300);
}

#[test]
fn after_a_crash_the_list_only_names_pages_to_read_from_disk() {
    let Closed { _node, addr, _dir, db, first_id } = closed("hot-crash");
    let child_id = crash_child(&db, &addr);
    assert_eq!(child_id, first_id, "the child's open was warm");
    let old_keys: Vec<String> = (0..310).map(|p| key(child_id, p)).filter(|k| mg(&addr, k).is_some()).collect();
    assert!(old_keys.len() > 50, "copies from before the crash are in the grid: {}", old_keys.len());

    let conn = open_waffle(&db, &params(&addr, "on"));
    assert_ne!(cache_id(&conn), child_id, "cold after the crash");
    let s = after_reload(&conn);
    let h = &s.warming().hot_list;
    assert_eq!((h.state.as_str(), h.trusted), ("done", false), "{h:?}");
    assert!(why(&s).contains("cold open"), "{h:?}");
    assert_eq!((s.warming().hot_list.from_grid_pages, s.warming().hot_list.grid_requests), (0, 0), "{h:?}");
    assert!(s.warming().hot_list.from_disk_pages >= 100, "the listed pages, from the disk: {h:?}");
    assert_eq!(s.cache().l2_hits + s.cache().l2_rejects_total, 0, "{s:?}");
    // The child's commit is there (rows 1..=50 and 201..=300 rewritten), whatever L1 was preloaded with.
    let disk = |s: &StatsSnapshot| s.cache().disk_reads + s.cache().read_ahead_pages_disk;
    let before = disk(&s);
    read_rows(&conn, 1..=HOT_ROWS, after_child_commit);
    assert!(disk(&snapshot(&conn)) - before <= 2, "the hot rows were preloaded");
    check_rows(&conn, |id| value(id, after_child_commit(id)), 300);
    let r: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
    assert_eq!(r, "ok");
    let untouched = old_keys.iter().filter(|k| mg(&addr, k).is_some()).count();
    assert_eq!(untouched, old_keys.len(), "no copy from before the crash was even asked for");
}

#[test]
fn a_list_copied_from_another_database_file_is_ignored() {
    let a = closed("hot-other-a");
    let b = closed("hot-other-b");
    std::fs::copy(hot_list::path_for(&a.db), hot_list::path_for(&b.db)).unwrap();
    ignored_and_says_why(&b.db, &b.addr, b.first_id, "another database file");
}

#[test]
fn a_corrupted_list_is_ignored_and_says_why() {
    let Closed { _node, addr, _dir, db, first_id } = closed("hot-corrupt");
    let path = hot_list::path_for(&db);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[100] ^= 0x10; // a page number
    std::fs::write(&path, &bytes).unwrap();
    ignored_and_says_why(&db, &addr, first_id, "checksum mismatch");
}

/// Opens `db` warm (its own sidecar, cache id `first_id`) with the reload on: the list is not
/// used, the stats say `why`, nothing is reloaded, and every row reads right.
fn ignored_and_says_why(db: &Path, addr: &str, first_id: u64, why_: &str) {
    let conn = open_waffle(db, &params(addr, "on"));
    assert_eq!(cache_id(&conn), first_id, "the sidecar is the database's own: warm");
    let s = after_reload(&conn);
    assert_eq!(s.warming().hot_list.state, "none", "{s:?}");
    assert!(why(&s).contains(why_), "{s:?}");
    assert_eq!(s.warming().hot_list.from_grid_pages + s.warming().hot_list.from_disk_pages, 0, "{s:?}");
    check_rows(&conn, |id| value(id, 1), ROWS);
}

/// Another process (plain SQLite, no waffle) rewrites every row between the
/// clean close and the reopen, the grid still holding every page at the
/// version the sidecar and the list name. First as it happens (the file's
/// mtime moves: the sidecar refuses the warm start), then with the mtime put
/// back (the sidecar and the list both accept it; only the first lock's file
/// signature sees the change). Neither reopen may serve an old row.
#[test]
fn another_process_writing_between_close_and_reopen_never_leads_to_a_stale_read() {
    for (mode, restore_mtime) in [("on", false), ("on", true), ("grid", false), ("grid", true)] {
        let Closed { _node, addr, _dir, db, first_id } = closed("hot-foreign");
        let held: Vec<String> = (0..310).map(|p| key(first_id, p)).filter(|k| mg(&addr, k).is_some()).collect();
        assert!(held.len() > 150, "the grid holds the old pages: {}", held.len());
        let mtime = std::fs::metadata(&db).unwrap().modified().unwrap();
        let plain = open_plain(&db);
        let tx = plain.unchecked_transaction().unwrap();
        for id in 1..=ROWS {
            tx.execute("UPDATE t SET v = ? WHERE id = ?", params![value(id, 2), id]).unwrap();
        }
        tx.commit().unwrap();
        drop(plain);
        if restore_mtime {
            std::fs::File::options().write(true).open(&db).unwrap().set_modified(mtime).unwrap();
        }

        let conn = open_waffle(&db, &params(&addr, mode));
        let s = after_reload(&conn);
        let h = &s.warming().hot_list;
        if mode == "grid" {
            // No lock under `grid`: the reload may fetch the old copies before the first lock
            // finds the change; that lock's reset drops them (and refuses any fetched after).
            assert_eq!(s.warming().hot_list.from_disk_pages, 0, "{h:?}");
            if restore_mtime {
                // The control: the old copies really were loaded into L1 before any lock.
                assert!(s.warming().hot_list.from_grid_pages > 50, "{h:?}");
            }
            read_rows(&conn, 1..=HOT_ROWS, |_| 2);
            check_rows(&conn, |id| value(id, 2), ROWS);
            let s = snapshot(&conn);
            if restore_mtime {
                assert!(s.cache().foreign_resets >= 1, "the first lock saw the change: {s:?}");
            }
            assert_eq!(s.cache().l2_hits + s.cache().l2_rejects_total, 0, "nothing old from the grid: {s:?}");
            continue;
        }
        if restore_mtime {
            assert_eq!(cache_id(&conn), first_id, "the sidecar accepted the file: a warm open");
            assert!(s.cache().foreign_resets >= 1, "the first lock saw the change: {s:?}");
            assert!(why(&s).contains("file changed"), "{h:?}");
        } else {
            assert_ne!(cache_id(&conn), first_id, "the sidecar refused the changed file: cold");
            assert!(why(&s).contains("cold open"), "{h:?}");
        }
        assert!(!h.trusted, "{h:?}");
        assert_eq!(s.warming().hot_list.from_grid_pages, 0, "{mode}: {h:?}");
        assert!(s.warming().hot_list.from_disk_pages >= 100, "the listed pages, from the disk: {h:?}");
        read_rows(&conn, 1..=HOT_ROWS, |_| 2);
        check_rows(&conn, |id| value(id, 2), ROWS);
        let s = snapshot(&conn);
        // Nothing old served: every row is the new one, and verify mode (on in CI) compared each
        // page a tier served with the file. The grid may serve copies pushed after the reset
        // (the reload's own evictions), and a page marked as pushed whose store has not landed
        // may meet its old copy there and refuse it (presence marks before the store).
        assert_eq!(s.cache().verify_mismatches, 0, "nothing old served: {s:?}");
        let r: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
        assert_eq!(r, "ok");
    }
}

/// `PRAGMA waffle_warm` while the reload runs (here: waits for a read lock,
/// another connection holding the database exclusively): the warm is not
/// refused, it stops the reload and runs instead.
#[test]
fn a_warm_while_the_reload_runs_stops_it_and_runs_instead() {
    let Closed { _node, addr, _dir, db, .. } = closed("hot-then-warm");
    let writer = open_plain(&db);
    writer.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let conn = open_waffle(&db, &params(&addr, "on"));
    wait_for(Duration::from_secs(10), "the reload to start", || snapshot(&conn).warming().hot_list.state == "running");
    let started: String = conn.query_row("PRAGMA waffle_warm", [], |r| r.get(0)).unwrap();
    assert!(started.starts_with("started"), "{started}");
    assert_eq!(snapshot(&conn).warming().hot_list.state, "cancelled", "the warm stopped the reload");
    writer.execute_batch("COMMIT").unwrap();
    let mut s = StatsSnapshot::default();
    wait_for(Duration::from_secs(30), "the warm to end", || {
        s = snapshot(&conn);
        s.warming().warm.state != "running"
    });
    assert_eq!(s.warming().warm.state, "done", "{s:?}");
    assert_eq!(s.warming().hot_list.from_grid_pages + s.warming().hot_list.from_disk_pages, 0, "{s:?}");
    check_rows(&conn, |id| value(id, 1), ROWS);
}

/// A writer of this process whose busy timeout is none (SQLite's default)
/// never meets the reload's read transactions as SQLITE_BUSY: its commit
/// waits in the VFS for the running piece instead. The reload is made slow
/// so that the writes land while it runs: a cold open (so the disk), an
/// EMULATED 10K RPM disk (libwaffle_slowdisk.so, 5 ms a read: the test runs
/// again under it), and 400 hot pages ten pages apart (one read each), an L1
/// that holds them all: about 2 s of reads. (With 100 pages, half a second,
/// a CI run beside two other test binaries once fitted only 2 writes in.)
#[test]
fn a_writer_without_a_busy_timeout_never_sees_busy_from_the_reload() {
    const TEST: &str = "a_writer_without_a_busy_timeout_never_sees_busy_from_the_reload";
    /// The grid's node, the parent's, for the run on the EMULATED disk.
    const NODE: &str = "WAFFLE_TEST_HOT_LIST_NODE";
    let rows = 4000;
    let hot_rows = rows / 10;
    let params = |addr| vec![("waffle_grid", addr), ("waffle_local", "2MiB"), ("waffle_hot_list", "on")];
    let Some(dir) = slow_disk::child_dir() else {
        let node = start_node(64);
        let addr = node.addr();
        let dir = TempDir::new("hot-writer");
        let db = dir.join("w.db");
        let conn = open_waffle(&db, &params(addr.as_str()));
        create_blob_table(&conn, 10, 1..=rows, |id| value(id, 1));
        for _ in 0..5 {
            drop_pager_cache(&conn);
            for id in (0..hot_rows).map(|i| 10 + (i * 37) % hot_rows * 10) {
                let v: Vec<u8> = conn.query_row("SELECT v FROM t WHERE id = ?", [id], |r| r.get(0)).unwrap();
                assert!(v == value(id, 1));
            }
        }
        drop(conn);
        std::fs::remove_file(waffle_core::sidecar::Sidecar::path_for(&db)).unwrap(); // cold: from disk
        slow_disk::run_again(TEST, "hdd-10k", dir.path(), &[(NODE, addr)]);
        return;
    };
    let addr = std::env::var(NODE).expect("the parent's node");
    let db = dir.join("w.db");
    slow_disk::drop_from_page_cache(&db);
    let conn = open_waffle(&db, &params(addr.as_str()));
    conn.busy_timeout(Duration::ZERO).unwrap();
    // The writes' fsyncs are not what is tested: on a slow CI disk they were most of a write's time.
    conn.execute_batch("PRAGMA synchronous = OFF").unwrap();
    let (mut during, mut id) = (0, rows);
    loop {
        let running = snapshot(&conn).warming().hot_list.state == "running";
        id += 1;
        conn.execute("INSERT INTO t VALUES (?, ?)", params![id, value(id, 1)]).unwrap_or_else(|e| {
            panic!("write {id} while the reload {}: {e}", if running { "ran" } else { "was over" })
        });
        if !running {
            break;
        }
        during += 1;
    }
    let s = after_reload(&conn);
    assert!(during >= 3, "only {during} writes landed while the reload ran: {:?}", s.warming().hot_list);
    assert!(s.warming().hot_list.from_disk_pages >= 200, "{:?}", s.warming().hot_list);
    check_rows(&conn, |id| value(id, 1), id);
    assert!(slow_disk::slowed_reads("hdd-10k") >= 200, "the reload's reads waited for the EMULATED disk");
}
