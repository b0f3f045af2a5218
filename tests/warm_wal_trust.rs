//! Issue 31, item 2: a warm WAL open's trust is decided where the first read
//! transaction's snapshot is fixed (the read mark), not at the first lock.
//!
//! The interleaving that served 400 of 400 rows old: a WAL database is closed
//! cleanly (sidecar, hot list, L1 pushed to the grid); a plain-SQLite process
//! W has it open; the warm reader R takes its first SHARED lock (the file is
//! as the close left it: the warm check passes), then finds the wal-index in
//! need of a rebuild while another process holds the recovery lock, and waits
//! in its busy handler (SQLITE_BUSY_RECOVERY). Meanwhile W rebuilds the
//! wal-index, rewrites every row, checkpoints the whole WAL into the file and
//! restarts it. R's read mark then sees a generation whose frames name none
//! of the pages the checkpoint wrote. Every test here runs that sequence
//! with verify mode on (each page a tier serves is compared with the file):
//! the rows must be the new ones and `verify_mismatches` 0.
//!
//! The cold variant (issue 31): a cold open finds no `-wal` file at its first
//! SHARED lock, so SQLite reads page 1 from the file (into L1) before it opens
//! the WAL and meets the recovery; W then changes page 1 (a new table, the
//! file grown) and copies the whole generation back. The first lock is the
//! anchor the first read mark checks (coherence.rs, `on_first_lock_anchor`).
//!
//! R runs on a thread of this process with a busy handler of the test's (it
//! says when it is first called and retries once told to); the recovery is
//! held by a small Python program (fcntl on the `-shm` file's lock bytes as
//! SQLite's walIndexRecover holds them, the header's isInit cleared as a
//! crashed writer or a fresh `-shm` leaves it); W is an apsw process
//! (waffle-testkit's `Peer`).

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rusqlite::Connection;
use serde_json::json;
use waffle_core::stats::StatsSnapshot;
use waffle_testkit::db::{cache_id, create_blob_table, open_plain, open_waffle, snapshot};
use waffle_testkit::nodes::{start_node, Node};
use waffle_testkit::temp_dir::TempDir;
use waffle_testkit::wait::{wait_for, wait_until};
use waffle_testkit::wal_recovery::{Hold, RecoveryHolder};
use waffle_testkit::warm_restart::{check_rows, value};
use waffle_testkit::writers::{to_peer, Peer};

/// Rows, one 4 KiB leaf page each.
const ROWS: i64 = 400;
/// How long any one step may take before the test fails.
const STEP: Duration = Duration::from_secs(30);
/// The adapter's test hook (read only in builds with debug assertions): the
/// file signature's mtime and ctime read as 0, so no decision can rest on them.
const BLIND_TIMES: &str = "WAFFLE_TEST_BLIND_FILE_TIMES";

/// What W does once R waits in its busy handler.
#[derive(Clone, Copy, Debug)]
enum Then {
    /// Every row rewritten, then `PRAGMA wal_checkpoint(TRUNCATE)`: all copied
    /// back, a new generation without a frame, an empty WAL file.
    Truncate,
    /// Every row rewritten, `PRAGMA wal_checkpoint(RESTART)`, then row 1
    /// rewritten again: all copied back, a new generation with frames.
    RestartThenWrite,
}

impl Then {
    /// The generation of row `id`'s bytes once W is done.
    fn generation(self, id: i64) -> u64 {
        match self {
            Then::RestartThenWrite if id == 1 => 3,
            _ => 2,
        }
    }
}

/// The waiting reader.
#[derive(Clone, Copy, Debug)]
enum Reader {
    /// Through waffle, warm; `hot_list`: `grid` (the list's pages put in L1
    /// from the grid at open, no lock taken) or `off` (the grid's copies on demand).
    Waffle { hot_list: &'static str },
    /// The control: SQLite alone.
    Plain,
}

fn params(addr: &str, hot_list: &'static str) -> Vec<(&'static str, String)> {
    vec![("waffle_grid", addr.to_string()), ("waffle_hot_list", hot_list.into()), ("waffle_verify", "on".into())]
}

fn open(db: &Path, addr: &str, hot_list: &'static str) -> Connection {
    open_verify(db, addr, hot_list, true)
}

fn open_verify(db: &Path, addr: &str, hot_list: &'static str, verify: bool) -> Connection {
    let mut p = params(addr, hot_list);
    if !verify {
        p.retain(|(k, _)| *k != "waffle_verify");
        p.push(("waffle_verify", "off".into()));
    }
    let p: Vec<(&str, &str)> = p.iter().map(|(k, v)| (*k, v.as_str())).collect();
    open_waffle(db, &p)
}

fn side(db: &Path, suffix: &str) -> PathBuf {
    let mut p = db.as_os_str().to_owned();
    p.push(suffix);
    PathBuf::from(p)
}

struct Closed {
    _node: Node,
    addr: String,
    _dir: TempDir,
    db: PathBuf,
    first_id: u64,
}

/// A WAL database of ROWS rows (generation 1), every row read, closed cleanly
/// as its last user: the WAL checkpointed and removed, L1 pushed to the grid,
/// the sidecar and the hot list saved.
fn closed(name: &str) -> Closed {
    let node = start_node(64);
    let addr = node.addr();
    let dir = TempDir::new(name);
    let db = dir.join("w.db");
    let conn = open(&db, &addr, "grid");
    let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0)).unwrap();
    assert_eq!(mode, "wal");
    create_blob_table(&conn, 10, 1..=ROWS, |id| value(id, 1));
    check_rows(&conn, |id| value(id, 1), ROWS);
    let first_id = cache_id(&conn);
    drop(conn);
    assert!(!side(&db, "-wal").exists(), "the last close removes the WAL (a WAL close vouches only then)");
    Closed { _node: node, addr, _dir: dir, db, first_id }
}

/// The stats once the open's reload has ended.
fn after_reload(conn: &Connection) -> StatsSnapshot {
    let mut s = StatsSnapshot::default();
    wait_for(STEP, "the hot list reload to end", || {
        s = snapshot(conn);
        !matches!(s.warming().hot_list.state.as_str(), "pending" | "running")
    });
    s
}

// ---------------------------------------------------------------- the reader's busy handler

/// Where the reader's busy handler reports and waits.
#[derive(Default)]
struct Gate {
    /// Times the busy handler was called.
    calls: AtomicU32,
    /// The test's word that W is done: retry.
    go: AtomicBool,
}

thread_local! {
    /// The gate of the reader on this thread (a busy handler is a plain fn).
    static GATE: RefCell<Option<Arc<Gate>>> = const { RefCell::new(None) };
}

/// The reader's busy handler: counts the call, then waits (with a deadline)
/// for the test's go; after it, retries as a busy timeout would.
fn gated_busy(attempt: i32) -> bool {
    let Some(gate) = GATE.with(|g| g.borrow().clone()) else { return false };
    if gate.calls.fetch_add(1, Ordering::SeqCst) == 0 {
        return wait_until(STEP, || gate.go.load(Ordering::SeqCst));
    }
    // SQLite's own busy handler backs off between retries too.
    std::thread::sleep(Duration::from_millis(1));
    attempt < 10_000
}

/// R's first read, on a thread of its own whose busy handler waits at the returned gate.
fn read_behind_gate<T: Send + 'static>(
    r: Connection,
    read: impl FnOnce(&Connection) -> T + Send + 'static,
) -> (Arc<Gate>, std::thread::JoinHandle<(Connection, T)>) {
    let gate = Arc::new(Gate::default());
    let reading = {
        let gate = Arc::clone(&gate);
        std::thread::spawn(move || {
            GATE.with(|g| *g.borrow_mut() = Some(gate));
            r.busy_handler(Some(gated_busy)).unwrap();
            let out = read(&r);
            (r, out)
        })
    };
    (gate, reading)
}

// ---------------------------------------------------------------- the process holding the recovery

/// Another process inside a wal-index recovery, holding `which` (waffle_testkit::wal_recovery).
fn hold_recovery(shm: &Path, which: Hold) -> RecoveryHolder {
    RecoveryHolder::hold(shm, which, Duration::from_secs(5))
        .expect("start the recovery holder")
        .expect("the recovery holder took the locks (nobody else holds them here)")
}

// ---------------------------------------------------------------- the writer

fn ok(answer: serde_json::Value, what: &str) -> serde_json::Value {
    answer.get("ok").cloned().unwrap_or_else(|| panic!("W: {what}: {answer}"))
}

fn rewrite_rows(w: &mut Peer, generation: u64, ids: impl Iterator<Item = i64>) {
    let stmts: Vec<serde_json::Value> = ids
        .map(|id| {
            let v = to_peer(&rusqlite::types::Value::Blob(value(id, generation)));
            json!(["UPDATE t SET v = ? WHERE id = ?", [v, id]])
        })
        .collect();
    ok(w.request(&json!({"op": "txn", "stmts": stmts, "busy_ms": 10_000})), "rewrite rows");
}

fn checkpoint(w: &mut Peer, mode: &str) {
    let sql = format!("PRAGMA wal_checkpoint({mode})");
    let rows = ok(w.request(&json!({"op": "query", "sql": sql, "busy_ms": 10_000})), &sql);
    assert_eq!(rows[0][0], json!(0), "{sql} was not blocked: {rows}");
}

fn writer_does(w: &mut Peer, then: Then) {
    rewrite_rows(w, 2, 1..=ROWS);
    match then {
        Then::Truncate => checkpoint(w, "TRUNCATE"),
        Then::RestartThenWrite => {
            checkpoint(w, "RESTART");
            rewrite_rows(w, 3, 1..=1);
        }
    }
}

// ---------------------------------------------------------------- the sequence

/// Rows of `conn` not of W's generation (SQLite's cache dropped first).
fn old_rows(conn: &Connection, then: Then) -> Vec<i64> {
    conn.execute_batch("PRAGMA shrink_memory").unwrap();
    let mut stmt = conn.prepare("SELECT id, v FROM t ORDER BY id").unwrap();
    let rows = stmt.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, Vec<u8>>(1)?))).unwrap();
    let rows: Vec<(i64, Vec<u8>)> = rows.map(|r| r.unwrap()).collect();
    assert_eq!(rows.len() as i64, ROWS);
    rows.into_iter().filter(|(id, v)| *v != value(*id, then.generation(*id))).map(|(id, _)| id).collect()
}

fn run(name: &str, reader: Reader, then: Then) {
    let c = closed(name);
    // W: plain SQLite; its open creates an empty WAL and the wal-index.
    let mut w = Peer::spawn(None, &format!("file:{}", c.db.display()));
    assert!(w.open_error.is_none(), "W: {:?}", w.open_error);
    let r = match reader {
        Reader::Waffle { hot_list } => {
            let r = open(&c.db, &c.addr, hot_list);
            assert_eq!(cache_id(&r), c.first_id, "a warm open");
            let s = after_reload(&r);
            if hot_list == "grid" {
                let h = &s.warming().hot_list;
                assert!(h.from_grid_pages >= ROWS as u64 - 5, "the hot list put the old pages in L1: {h:?}");
            }
            r
        }
        Reader::Plain => open_plain(&c.db),
    };
    let recovery = hold_recovery(&side(&c.db, "-shm"), Hold::CheckpointAndRecovery);

    // R's first statement: SHARED on the file (the warm check), then the wal-index
    // needs a rebuild that another process holds: SQLITE_BUSY_RECOVERY, the busy handler.
    let (gate, reading) = read_behind_gate(r, move |r| old_rows(r, then));
    wait_for(STEP, "the reader to wait in its busy handler", || {
        gate.calls.load(Ordering::SeqCst) > 0 || reading.is_finished()
    });
    assert!(!reading.is_finished(), "the reader never waited: {:?}", reading.join().map(|(_, old)| old.len()));

    // The recovery ends; W rebuilds the wal-index, rewrites every row, copies the whole
    // WAL back into the file and restarts it. Then R's retry takes its read mark.
    recovery.end().expect("the recovery holder let go");
    writer_does(&mut w, then);
    gate.go.store(true, Ordering::SeqCst);
    let (r, old) = reading.join().unwrap_or_else(|e| std::panic::resume_unwind(e));

    let stats = matches!(reader, Reader::Waffle { .. }).then(|| snapshot(&r));
    let s = stats.as_ref().map(|s| s.cache());
    assert!(old.is_empty(), "{reader:?} {then:?}: {} of {ROWS} rows old (first {:?}); {s:?}", old.len(), old.first());
    if let Some(s) = s {
        assert_eq!(s.verify_mismatches, 0, "{reader:?} {then:?}: a tier served a page older than the file: {s:?}");
        assert!(s.foreign_resets >= 1, "the read mark could not name the frames: a new epoch: {s:?}");
    }
    // Everything R reads from here on is the file's.
    check_rows(&r, |id| value(id, then.generation(id)), ROWS);
    if let Some(s) = stats.map(|_| snapshot(&r)) {
        assert_eq!(s.cache().verify_mismatches, 0, "{s:?}");
    }
    drop(r);
    w.close();
}

/// The hot list put the old pages in L1 at open (grid mode: no lock); W's
/// generation is copied back and the WAL truncated while R waits.
#[test]
fn a_warm_reader_waiting_on_recovery_never_serves_the_hot_lists_old_pages() {
    for then in [Then::Truncate, Then::RestartThenWrite] {
        run("wal-trust-hot", Reader::Waffle { hot_list: "grid" }, then);
    }
}

/// No hot list: L1 starts empty and every page R asks for is in the grid
/// under the version the clean close saved.
#[test]
fn a_warm_reader_waiting_on_recovery_never_serves_the_grids_old_copies() {
    for then in [Then::Truncate, Then::RestartThenWrite] {
        run("wal-trust-grid", Reader::Waffle { hot_list: "off" }, then);
    }
}

/// What the rule keeps: a warm WAL open nobody changed, and one where
/// another process has committed frames it has not copied back, keep their
/// L1 (no new epoch, the hot list's pages served, each equal to the file).
#[test]
fn a_warm_wal_open_whose_file_nobody_changed_stays_warm() {
    for frames_of_another in [false, true] {
        let c = closed("wal-trust-kept");
        let mut w = Peer::spawn(None, &format!("file:{}", c.db.display()));
        assert!(w.open_error.is_none(), "W: {:?}", w.open_error);
        if frames_of_another {
            rewrite_rows(&mut w, 2, 1..=10); // in the WAL only: under the auto-checkpoint's 1000 frames
        }
        let r = open(&c.db, &c.addr, "grid");
        assert_eq!(cache_id(&r), c.first_id, "a warm open");
        let s = after_reload(&r);
        assert!(s.warming().hot_list.from_grid_pages >= ROWS as u64 - 5, "{:?}", s.warming().hot_list);
        let generation = |id| if frames_of_another && id <= 10 { 2 } else { 1 };
        check_rows(&r, |id| value(id, generation(id)), ROWS);
        let s = snapshot(&r);
        let s = s.cache();
        assert_eq!((s.foreign_resets, s.verify_mismatches), (0, 0), "{s:?}");
        assert!(s.l1_hits >= ROWS as u64 - 20, "the hot list's pages served from L1: {s:?}");
        drop(r);
        w.close();
    }
}

/// The control: SQLite alone, the same sequence, reads the new rows.
#[test]
fn without_waffle_the_same_sequence_reads_the_new_rows() {
    for then in [Then::Truncate, Then::RestartThenWrite] {
        run("wal-trust-plain", Reader::Plain, then);
    }
}

/// The file's mtime and ctime read as 0 in the adapter (its test hook, in a
/// child process of this test binary so no other test is blinded): the
/// decision rests on the WAL's content alone (a new generation without a
/// frame; a WAL header whose checkpoint sequence moved), not on timestamps.
#[test]
fn when_timestamps_cannot_tell_the_wal_content_decides() {
    const NAME: &str = "when_timestamps_cannot_tell_the_wal_content_decides";
    if std::env::var_os(BLIND_TIMES).is_some() {
        for then in [Then::Truncate, Then::RestartThenWrite] {
            run("wal-trust-blind", Reader::Waffle { hot_list: "grid" }, then);
        }
        return;
    }
    if !cfg!(debug_assertions) {
        panic!("the hook is compiled only with debug assertions: run under --profile checked");
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", NAME, "--nocapture", "--test-threads=1"])
        .env(BLIND_TIMES, "1")
        .output()
        .expect("run this test binary as a child");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && text.contains("1 passed"), "the blinded run failed:\n{text}");
}

// ---------------------------------------------------------------- cold opens

/// Rows of a second table W creates while the cold reader waits: page 1 changes
/// (the schema, the header's page count) and the file grows by about this many pages.
const GROWN_ROWS: i64 = 200;

/// A cold open of the same database: the sidecar is gone, so nothing of the
/// earlier process is trusted (its grid copies are under another cache id).
fn closed_cold(name: &str) -> Closed {
    let c = closed(name);
    std::fs::remove_file(waffle_core::sidecar::Sidecar::path_for(&c.db)).expect("remove the sidecar");
    c
}

/// What W does while the cold reader waits: page 1 changed (a new table in the
/// schema, the file grown by GROWN_ROWS pages), every row of `t` rewritten,
/// then the whole generation copied back and the WAL restarted.
fn writer_reshapes(w: &mut Peer, then: Then) {
    let mut stmts = vec![json!(["CREATE TABLE u(id INTEGER PRIMARY KEY, v BLOB)", []])];
    for id in 1..=GROWN_ROWS {
        let v = to_peer(&rusqlite::types::Value::Blob(value(id, 2)));
        stmts.push(json!(["INSERT INTO u VALUES (?, ?)", [id, v]]));
    }
    ok(w.request(&json!({"op": "txn", "stmts": stmts, "busy_ms": 10_000})), "create and fill u");
    writer_does(w, then);
}

/// What a reader sees of the database: what rests on page 1 (the schema, the
/// header's page count) and the rows.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    tables: Vec<String>,
    pages: i64,
    grown_rows: Result<i64, String>,
    old_rows: Vec<i64>,
}

impl Seen {
    /// Its first statement takes the reader's first SHARED lock (and waits).
    fn read(conn: &Connection, then: Then) -> Seen {
        let mut stmt = conn.prepare("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name").unwrap();
        let tables = stmt.query_map([], |r| r.get(0)).unwrap().map(|r| r.unwrap()).collect();
        drop(stmt);
        let pages = conn.query_row("PRAGMA page_count", [], |r| r.get(0)).unwrap();
        let grown_rows = conn.query_row("SELECT count(*) FROM u", [], |r| r.get(0)).map_err(|e| e.to_string());
        Seen { tables, pages, grown_rows, old_rows: old_rows(conn, then) }
    }

    /// What the file holds once W is done (SQLite alone reads the same: the control).
    fn expected(db: &Path) -> Seen {
        let bytes = std::fs::metadata(db).unwrap().len();
        Seen {
            tables: vec!["t".into(), "u".into()],
            pages: (bytes / 4096) as i64,
            grown_rows: Ok(GROWN_ROWS),
            old_rows: vec![],
        }
    }
}

/// The cold sequence: no WAL file at R's first SHARED lock, so SQLite reads
/// page 1 from the database file (through waffle: into L1) to learn the
/// database is in WAL mode, opens the WAL, and finds the wal-index in another
/// process's recovery: SQLITE_BUSY_RECOVERY, the busy handler, SHARED kept,
/// no read mark. W then changes page 1, copies the whole generation back and
/// restarts the WAL; at R's read mark SQLite resets its cache and reads page 1 again.
fn run_cold(name: &str, reader: Reader, hold: Hold, then: Then, verify: bool) {
    let c = closed_cold(name);
    assert!(!side(&c.db, "-wal").exists(), "no WAL: R reads page 1 before it opens one");
    // The -shm of a process inside a recovery: the size of one region, isInit cleared (the holder).
    let shm = side(&c.db, "-shm");
    std::fs::write(&shm, vec![0u8; 32 * 1024]).unwrap();
    let recovery = hold_recovery(&shm, hold);
    let r = match reader {
        Reader::Waffle { hot_list } => {
            let r = open_verify(&c.db, &c.addr, hot_list, verify);
            // A cold open: a new cache id, so no copy an earlier process pushed is named.
            assert_ne!(cache_id(&r), c.first_id, "a cold open");
            r
        }
        Reader::Plain => open_plain(&c.db),
    };

    let (gate, reading) = read_behind_gate(r, move |r| Seen::read(r, then));
    wait_for(STEP, "the reader to wait in its busy handler", || {
        gate.calls.load(Ordering::SeqCst) > 0 || reading.is_finished()
    });
    assert!(!reading.is_finished(), "the reader never waited: {:?}", reading.join().map(|(_, seen)| seen));

    // W opens only now (a WAL-mode open would have left R a WAL file to open before page 1).
    recovery.end().expect("the recovery holder let go");
    let mut w = Peer::spawn(None, &format!("file:{}", c.db.display()));
    assert!(w.open_error.is_none(), "W: {:?}", w.open_error);
    writer_reshapes(&mut w, then);
    gate.go.store(true, Ordering::SeqCst);
    let (r, seen) = reading.join().unwrap_or_else(|e| std::panic::resume_unwind(e));

    let what = format!("{reader:?} {hold:?} {then:?} verify {verify}");
    let stats = matches!(reader, Reader::Waffle { .. }).then(|| snapshot(&r));
    let s = stats.as_ref().map(|s| s.cache());
    if let Some(s) = s {
        assert_eq!(s.verify_mismatches, 0, "{what}: a tier served a page older than the file: {s:?}");
    }
    assert_eq!(seen, Seen::expected(&c.db), "{what}: R read other than the file; {s:?}");
    // Everything R reads from here on is the file's.
    check_rows(&r, |id| value(id, then.generation(id)), ROWS);
    assert_eq!(Seen::read(&r, then), Seen::expected(&c.db), "{what}");
    if let Some(s) = stats.map(|_| snapshot(&r)) {
        assert_eq!(s.cache().verify_mismatches, 0, "{what}: {s:?}");
    }
    drop(r);
    w.close();
}

const HOLDS: [Hold; 2] = [Hold::CheckpointAndRecovery, Hold::WholeRecovery];

/// A cold reader that read page 1 under its first SHARED lock, then waited
/// on another process's recovery while page 1 changed and the whole
/// generation was copied back: with verify mode on, no tier serves the page
/// from before (each served page is compared with the file).
#[test]
fn a_cold_reader_waiting_on_recovery_never_serves_page_one_from_before_the_copy_back() {
    for hold in HOLDS {
        for then in [Then::Truncate, Then::RestartThenWrite] {
            run_cold("wal-trust-cold", Reader::Waffle { hot_list: "off" }, hold, then, true);
        }
    }
}

/// The same with verify mode off (nothing replaces a stale page with the
/// file's): R sees the new table and the grown file, as SQLite alone does.
#[test]
fn a_cold_reader_waiting_on_recovery_reads_the_new_schema_without_verify() {
    for hold in HOLDS {
        for then in [Then::Truncate, Then::RestartThenWrite] {
            run_cold("wal-trust-cold-noverify", Reader::Waffle { hot_list: "off" }, hold, then, false);
        }
    }
}

/// The control: SQLite alone, the same cold sequence, reads the new schema and rows.
#[test]
fn without_waffle_a_cold_reader_reads_the_new_schema() {
    for hold in HOLDS {
        for then in [Then::Truncate, Then::RestartThenWrite] {
            run_cold("wal-trust-cold-plain", Reader::Plain, hold, then, true);
        }
    }
}
