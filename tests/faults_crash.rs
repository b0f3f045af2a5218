//! The database process SIGKILLed while it writes, in rollback-journal and
//! WAL modes, round after round on the same database.
//!
//! A child process (waffle-testkit's `crash-writer`) opens the
//! database through `waffle` (tiny L1, two memcached nodes) and commits one
//! transaction after another (inserts of 1 to 6 rows up to three pages long,
//! deletes of older rows, a counter), appending each transaction's number to
//! a report file right after its COMMIT returns. The parent kills it at a
//! random moment (a few commits in), then reopens the database through
//! `waffle` and checks:
//!
//! - `PRAGMA integrity_check` is ok;
//! - every reported transaction is there, and the database is exactly the
//!   state after some transaction M >= the last reported one (M is at most
//!   one more: the one whose report the kill cut off); nothing half-done;
//! - the reopen is cold: a cache id never used before, not one grid hit in a
//!   scan of every page, and the child's grid copies (still on the nodes)
//!   not even fetched: nothing written to the grid before the crash is served.
//!
//! The parent then closes cleanly, and the next child's open is warm (it
//! takes over the parent's cache id and copies). At the end a clean close
//! and reopen is shown warm: same cache id, pages served from the grid.
//! (`warm_restart.rs` covers one crash after a commit and one inside a
//! transaction in DELETE mode; this is the repeated, random-moment, both-modes
//! version.)
//!
//!     cargo test --release -p waffle-e2e --test faults_crash

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use rusqlite::Connection;
use waffle_testkit::artefact;
use waffle_testkit::crash_workload::{expected, mix, params_for, transaction};
use waffle_testkit::db::{cache_id, cache_stats, open_waffle, try_open_waffle};
use waffle_testkit::nodes::start_node;
use waffle_testkit::process::spawn_until_ready;
use waffle_testkit::raw_client::{key, node_stat, RawClient};
use waffle_testkit::soak::{soak_rounds, soak_seed};
use waffle_testkit::temp_dir::TempDir;
use waffle_testkit::{pattern, wait_for};

fn rounds() -> u64 {
    soak_rounds(16, 3)
}

fn reported(report: &Path) -> Vec<u64> {
    std::fs::read_to_string(report).unwrap().lines().map(|l| l.parse().expect("a transaction number")).collect()
}

/// Starts a child committing from `first`, kills it after `commits` more
/// reports and `extra_ms` more; returns the child's cache id.
fn crash_child(db: &Path, grid: &str, report: &Path, first: u64, commits: usize, extra_ms: u64) -> u64 {
    let before = reported(report).len();
    let mut cmd = Command::new(artefact("crash-writer"));
    cmd.arg(db).arg(grid).arg(report).arg(first.to_string());
    let (mut child, ready) = spawn_until_ready(&mut cmd, Duration::from_secs(20));
    let id = u64::from_str_radix(ready.split_whitespace().next().unwrap(), 16).unwrap();
    let what = format!("the child to report {commits} more commits");
    wait_for(Duration::from_secs(30), &what, || {
        // A child that died is not going to report anything: say so now, not in 30 s.
        assert!(child.0.try_wait().unwrap().is_none(), "the child exited before it was killed");
        reported(report).len() >= before + commits
    });
    // Not a wait for a condition: a random moment to kill at, after the commits counted above.
    std::thread::sleep(Duration::from_millis(extra_ms));
    child.0.kill().expect("SIGKILL the child");
    let status = child.0.wait().unwrap();
    assert!(!status.success(), "the child was killed, not finished: {status}");
    id
}

/// Keys of cache `id` for pages 0..pages present on any node (peeked).
fn present(addrs: &[String], id: u64, pages: u64) -> HashSet<u64> {
    let mut clients: Vec<RawClient> = addrs.iter().map(|a| RawClient::connect(a)).collect();
    (0..pages).filter(|&p| clients.iter_mut().any(|c| c.peek(&key(id, p)).is_some())).collect()
}

/// Deletes every key of cache `id` for pages 0..pages from every node.
fn forget(addrs: &[String], id: u64, pages: u64) {
    let mut clients: Vec<RawClient> = addrs.iter().map(|a| RawClient::connect(a)).collect();
    for p in 0..pages {
        for c in clients.iter_mut() {
            c.delete(&key(id, p));
        }
    }
}

/// Items memcached evicted so far, on all nodes.
fn evictions(addrs: &[String]) -> u64 {
    addrs.iter().map(|a| node_stat(a, "evictions")).sum()
}

/// Every row (id, n, v) in id order, and the counter.
fn contents(conn: &Connection) -> (Vec<(i64, i64, Vec<u8>)>, u64) {
    let mut stmt = conn.prepare("SELECT id, n, v FROM t ORDER BY id").unwrap();
    let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))).unwrap().map(Result::unwrap).collect();
    let last: i64 = conn.query_row("SELECT last FROM meta", [], |r| r.get(0)).unwrap();
    (rows, last as u64)
}

fn crash_rounds(journal: &str, seed: u64) {
    let _serial = serial();
    let started = Instant::now();
    let nodes = [start_node(64), start_node(64)];
    let addrs: Vec<String> = nodes.iter().map(|n| n.addr()).collect();
    let grid = addrs.join(",");
    let dir = TempDir::new(&format!("crash-{journal}"));
    let db = dir.join("c.db");
    let report: PathBuf = dir.join("committed");
    std::fs::write(&report, "").unwrap();
    let mut ids_used: HashSet<u64> = HashSet::new();

    let mut parent_id = {
        let conn = open_waffle(&db, &params_for(&grid));
        let mode: String = conn.query_row(&format!("PRAGMA journal_mode = {journal}"), [], |r| r.get(0)).unwrap();
        assert_eq!(mode, journal);
        conn.execute_batch(
            "CREATE TABLE t(id INTEGER PRIMARY KEY, n INTEGER, v BLOB); CREATE INDEX t_n ON t(n);
             CREATE TABLE meta(last INTEGER); INSERT INTO meta VALUES (0);",
        )
        .unwrap();
        cache_id(&conn)
    };
    ids_used.insert(parent_id);

    let mut last_committed = 0u64;
    let (mut hot_journals, mut wal_left, mut in_flight_committed, mut hits_after_recovery) = (0, 0, 0, 0);
    let mut warm_after_crash = 0;
    for round in 0..rounds() {
        let r = mix(soak_seed(seed) ^ round);
        let commits = 2 + (r % 8) as usize;
        let extra_ms = (r >> 8) % 25;
        let file_before = std::fs::read(&db).unwrap();
        let child_id = crash_child(&db, &grid, &report, last_committed + 1, commits, extra_ms);
        // A crashed incarnation that gave no page a new version left the sidecar clean (the
        // dirty mark comes before the first new version: docs/design.md, "Sidecar file"). In WAL
        // mode a child killed right after its first commit can be that: its frames are in the
        // WAL, the main file is byte for byte as the clean close left it, its saved versions
        // still name the file's pages, and the next open is rightly warm under the same id.
        // Any change to the main file must make it cold.
        let file_unchanged = std::fs::read(&db).unwrap() == file_before;
        let tag = format!("[{journal} round {round} seed {:#x}]", soak_seed(seed));
        assert_eq!(child_id, parent_id, "{tag} after a clean close the child's open should be warm (same cache id)");
        if dir.join("c.db-journal").exists() {
            hot_journals += 1;
        }
        if std::fs::metadata(dir.join("c.db-wal")).map(|m| m.len() > 0).unwrap_or(false) {
            wal_left += 1;
        }
        let reports = reported(&report);
        let max_reported = *reports.last().expect("some commits were reported");
        assert!(reports.windows(2).all(|w| w[1] == w[0] + 1), "{tag} reports are consecutive: {reports:?}");

        let pages = std::fs::metadata(&db).unwrap().len() / 4096;
        let evictions_before = evictions(&addrs);
        let child_copies = present(&addrs, child_id, pages);

        // The hot list's reload off: its own connection reads page 1 again, a copy this
        // incarnation pushed, which the strict check below would count (tests/hot_list.rs
        // covers the reload after a crash).
        // Verify mode: every page served, from L1 or the grid, is compared with the file.
        let reopen = [params_for(&grid), vec![("waffle_hot_list", "off"), ("waffle_verify", "on")]].concat();
        let conn = open_waffle(&db, &reopen);
        let id = cache_id(&conn);
        let warm = id == child_id;
        if warm {
            assert!(file_unchanged, "{tag} the child changed the main file, and the reopen after its crash was warm");
            warm_after_crash += 1;
        } else {
            assert!(ids_used.insert(id), "{tag} the reopen after a crash must take a cache id never used before");
        }
        let (rows, m) = contents(&conn);
        let s = cache_stats(&conn);
        // The scan reads every page once. A hit can only be a copy this new
        // incarnation pushed itself: pages the hot-journal rollback (or WAL
        // recovery) wrote through the cache, evicted from the tiny L1 and
        // read back. Without such writes there is no hit at all.
        // Cold: a hit can only be a copy this new incarnation pushed itself. Warm: the file's own
        // pages at the saved versions (verify mode compares each with the file).
        if s.disk_writes == 0 && !warm {
            assert_eq!(s.l2_hits, 0, "{tag} a scan right after the crash must not hit the grid: {s:?}");
        }
        assert!(warm || s.l2_hits <= s.l2_pushes, "{tag} {s:?}");
        assert_eq!(s.l2_rejects_total, 0, "{tag} copies from before the crash are not even asked for: {s:?}");
        assert_eq!(s.verify_mismatches, 0, "{tag} a page served differed from the file: {s:?}");
        hits_after_recovery += s.l2_hits;
        assert!(m >= max_reported, "{tag} transaction {max_reported} was reported committed, the database ends at {m}");
        assert!(m <= max_reported + 1, "{tag} the database is at {m}, but only {max_reported} were reported");
        in_flight_committed += (m > max_reported) as usize;
        let want = expected(m);
        assert_eq!(rows.len(), want.len(), "{tag} row count after transaction {m}");
        for (got, want) in rows.iter().zip(&want) {
            assert!(got == want, "{tag} row {} differs from the state after transaction {m}", want.0);
        }
        let ok: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
        assert_eq!(ok, "ok", "{tag}");
        let still = present(&addrs, child_id, pages);
        let evicted_meanwhile = evictions(&addrs) > evictions_before;
        assert!(
            warm || child_copies.is_subset(&still) || evicted_meanwhile,
            "{tag} a copy made before the crash was fetched"
        );
        // Housekeeping: the old incarnation's copies go, so that a long soak
        // does not fill the nodes (and make memcached evict what we watch).
        forget(&addrs, child_id, pages);
        eprintln!(
            "{tag} killed after {} commits (+{extra_ms} ms); reopened {} at transaction {m} (last reported \
             {max_reported}), {} rows ok, {} pre-crash copies left untouched",
            reports.len() - last_committed as usize,
            if warm { "warm (the file unchanged)" } else { "cold" },
            rows.len(),
            child_copies.len()
        );
        // Writes by the parent: the database goes on from where the crash left it.
        transaction(&conn, m + 1);
        last_committed = m + 1;
        std::fs::write(&report, (1..=last_committed).map(|i| format!("{i}\n")).collect::<String>()).unwrap();
        parent_id = id;
        drop(conn); // clean close: the next child's open is warm
    }

    // A clean close and reopen: warm, the pages come from the grid.
    let conn = open_waffle(&db, &params_for(&grid));
    assert_eq!(cache_id(&conn), parent_id, "[{journal}] a clean close followed by a reopen must be warm");
    conn.execute_batch("PRAGMA cache_size = 10").unwrap();
    let (rows, m) = contents(&conn);
    assert_eq!(m, last_committed);
    assert!(rows == expected(m), "[{journal}] the warm reopen reads the right rows");
    let s = cache_stats(&conn);
    let pages = std::fs::metadata(&db).unwrap().len() / 4096;
    assert!(s.l2_hits * 2 > pages, "[{journal}] a warm reopen should read most pages from the grid: {s:?}");
    assert_eq!(s.l2_rejects_total, 0, "[{journal}] {s:?}");
    eprintln!(
        "[{journal}] {} crash rounds, {hot_journals} hot journals rolled back, {wal_left} WALs recovered, \
         {in_flight_committed} kills landed after COMMIT and before the report, {hits_after_recovery} grid hits on copies \
         pushed after a recovery, {warm_after_crash} reopens warm after a crash that left the file unchanged; warm \
         reopen: l2_hits {} of {pages} pages; {:.1}s",
        rounds(),
        s.l2_hits,
        started.elapsed().as_secs_f64()
    );
}

#[test]
fn killed_while_writing_in_rollback_journal_mode() {
    crash_rounds("delete", 0xC0DE_0001);
}

#[test]
fn killed_while_writing_in_wal_mode() {
    crash_rounds("wal", 0xC0DE_0002);
}

/// A damaged sidecar (`.<db>-waffle`) is never trusted and never fails the
/// open: truncated, emptied, bit-flipped, garbage, or another database's
/// clean sidecar. Each open is cold (a new cache id, no grid hit), the data
/// is right, and a clean close makes the next open warm again.
#[test]
fn a_damaged_sidecar_means_a_cold_start_never_an_error() {
    let _serial = serial();
    let node = start_node(64);
    let grid = node.addr();
    let dir = TempDir::new("sidecar-damage");
    let db = dir.join("s.db");
    let other = dir.join("other.db");
    let side = waffle_core::sidecar::Sidecar::path_for(&db);
    let fill = |path: &Path| {
        let conn = open_waffle(path, &params_for(&grid));
        conn.execute_batch(
            "CREATE TABLE t(id INTEGER PRIMARY KEY, n INTEGER, v BLOB); CREATE TABLE meta(last INTEGER); INSERT INTO meta VALUES (0);",
        )
        .unwrap();
        for n in 1..=20 {
            transaction(&conn, n);
        }
        cache_id(&conn)
    };
    let mut id = fill(&db);
    fill(&other);
    let other_side = std::fs::read(waffle_core::sidecar::Sidecar::path_for(&other)).unwrap();

    type Damage = Box<dyn Fn(&[u8]) -> Vec<u8>>;
    let damages: Vec<(&str, Damage)> = vec![
        ("emptied", Box::new(|_| Vec::new())),
        ("truncated to 50 bytes", Box::new(|b| b[..50].to_vec())),
        ("last byte cut", Box::new(|b| b[..b.len() - 1].to_vec())),
        (
            "a byte flipped in the versions",
            Box::new(|b| {
                let mut b = b.to_vec();
                let at = b.len() - 12;
                b[at] ^= 1;
                b
            }),
        ),
        (
            "the clean flag cleared",
            Box::new(|b| {
                let mut b = b.to_vec();
                b[12] = 0;
                b
            }),
        ),
        ("garbage", Box::new(|b| pattern(9, b.len()))),
        ("another database's clean sidecar", Box::new(move |_| other_side.clone())),
    ];
    for (what, damage) in damages {
        // The sidecar is intact and clean here: the open would be warm.
        let bytes = std::fs::read(&side).unwrap();
        std::fs::write(&side, damage(&bytes)).unwrap();
        // The hot list's reload off, as after a crash above.
        let conn = open_waffle(&db, &[params_for(&grid), vec![("waffle_hot_list", "off")]].concat());
        let new_id = cache_id(&conn);
        assert_ne!(new_id, id, "{what}: a damaged sidecar must not be trusted (same cache id)");
        let (rows, m) = contents(&conn);
        assert_eq!(m, 20);
        assert!(rows == expected(20), "{what}: wrong rows");
        let s = cache_stats(&conn);
        assert_eq!(s.l2_hits, 0, "{what}: no copy from before may be served: {s:?}");
        drop(conn);
        id = new_id;
        // And warm again after this clean close.
        let conn = open_waffle(&db, &params_for(&grid));
        assert_eq!(cache_id(&conn), id, "{what}: the clean close after it should make the next open warm");
        drop(conn);
        eprintln!("sidecar {what}: cold open, right rows, then warm again");
    }
}

/// Regression: the sidecar's `flock` belongs to the open file description,
/// which a child process shares between its fork and its exec. In a process
/// where one thread spawns children while another closes a database and opens
/// it again, the reopen used to fail with "the database is already open
/// through waffle in process <this very process>". Now the lock is shared by
/// every open and never refuses: an open that cannot get it within 2 s starts
/// cold (the sidecar only decides warm or cold).
#[test]
fn reopen_while_another_thread_spawns_children() {
    let _serial = serial();
    let dir = TempDir::new("sidecar-fork");
    let db = dir.join("f.db");
    drop(open_waffle(&db, &[]));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let spawner = {
        let stop = std::sync::Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut spawned = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = Command::new("true").status();
                spawned += 1;
            }
            spawned
        })
    };
    let mut failures = Vec::new();
    let started = Instant::now();
    let mut opens = 0;
    while started.elapsed() < Duration::from_secs(5) && failures.is_empty() {
        opens += 1;
        match try_open_waffle(&db, &[]) {
            Ok(conn) => drop(conn),
            Err(e) => failures.push(format!("open {opens}: {e}")),
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let spawned = spawner.join().unwrap();
    assert!(
        failures.is_empty(),
        "{} of {opens} reopens failed while {spawned} children were spawned: {failures:?}",
        failures.len()
    );
}

/// The tests of this file run one at a time: the crash tests spawn children,
/// and a child holds a copy of every open sidecar's lock until it execs (see
/// `reopen_while_another_thread_spawns_children`).
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Opening or closing one database never waits for another: an open that
/// waits for its sidecar's lock (here held by this test, as a closing process
/// would hold it for a moment) holds no lock any other database needs.
/// Regression: the registry's one mutex was held across the sidecar wait (up
/// to 2 s), a close's flush (up to 10 s) and node name resolution.
#[test]
fn a_slow_open_does_not_stall_other_databases() {
    let _serial = serial();
    let dir = TempDir::new("registry-stall");
    let slow = dir.join("slow.db");
    let quick = dir.join("quick.db");
    drop(open_waffle(&slow, &[]));
    // Hold slow.db's sidecar exclusively, as a closing process does while it saves.
    let side = std::fs::File::open(waffle_core::sidecar::Sidecar::path_for(&slow)).unwrap();
    // SAFETY: flock on a descriptor we own.
    assert_eq!(unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&side), libc::LOCK_EX) }, 0);
    let waiting = {
        let slow = slow.clone();
        std::thread::spawn(move || drop(open_waffle(&slow, &[])))
    };
    // Until the slow open has reached its wait: it has the sidecar open too.
    let side_path = std::fs::canonicalize(waffle_core::sidecar::Sidecar::path_for(&slow)).unwrap();
    wait_for(Duration::from_secs(10), "the slow open to open its sidecar", || open_fds_to(&side_path) >= 2);
    let conn = open_waffle(&quick, &[]);
    conn.execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (1);").unwrap();
    drop(conn);
    assert!(!waiting.is_finished(), "another database opened and closed while slow.db's open was still waiting");
    drop(side);
    waiting.join().unwrap();
}

/// How many of this process's file descriptors are open on `path` (canonical).
fn open_fds_to(path: &Path) -> usize {
    let fds = std::fs::read_dir("/proc/self/fd").expect("/proc/self/fd");
    fds.flatten().filter(|fd| std::fs::read_link(fd.path()).is_ok_and(|target| target == path)).count()
}
