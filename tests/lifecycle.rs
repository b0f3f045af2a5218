//! The edges of a connection's life (issue 19, cases 1-3): what a waffle
//! connection's open and close do to the other connections of the database.
//!
//! 1. A waffle connection's close keeps the POSIX locks other connections of
//!    the process hold on the database (their fdinfo), rollback and WAL modes.
//! 2. A WAL-mode close while another process has the database open (and
//!    checkpointed under our SHARED lock) leaves the next open cold: it reads
//!    the other process's commit, and a write through waffle keeps it.
//!    A close that checkpointed as the last user stays warm.
//! 3. The path renamed over while a waffle connection opens: the cache reads
//!    the file SQLite opened, not the one the path names by then.
//! 4. Leaving WAL mode while waffle's own background reader (a warm) runs
//!    succeeds as it does with nobody else connected: the reader holds no lock
//!    of the database between its pieces (on an EMULATED slow disk, so that the
//!    warm is still running).
//!
//! Each runs beside its control without waffle (or with a plain connection in
//! waffle's place), which must give the same answers.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rusqlite::Connection;
use waffle_testkit::db::{cache_id, open_plain, open_waffle};
use waffle_testkit::descriptors::{descriptors_on, file_id};
use waffle_testkit::nodes::{grid_of, start_node};
use waffle_testkit::posix_locks::posix_locks;
use waffle_testkit::slow_disk;
use waffle_testkit::temp_dir::TempDir;
use waffle_testkit::wait::wait_for;
use waffle_testkit::writers::sqlite3_shell;

const ROWS: i64 = 200;

/// A table of ROWS rows `v = '{prefix}-{id}'` padded over many pages.
fn create(path: &Path, wal: bool, prefix: &str) {
    let c = open_plain(path);
    if wal {
        c.query_row("PRAGMA journal_mode=WAL", [], |r| r.get::<_, String>(0)).unwrap();
    }
    c.execute_batch("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT, pad BLOB)").unwrap();
    c.execute(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
         INSERT INTO t SELECT i, ?2 || '-' || i, zeroblob(300) FROM n",
        rusqlite::params![ROWS, prefix],
    )
    .unwrap();
}

/// How many rows have `v = '{prefix}-{id}'`.
fn rows_with(c: &Connection, prefix: &str) -> i64 {
    c.query_row("SELECT count(*) FROM t WHERE v = ?1 || '-' || id", [prefix], |r| r.get(0)).unwrap()
}

/// POSIX locks this process holds on the file (fdinfo: /proc/locks can skip a held lock, `posix_locks`).
fn my_posix_locks(path: &Path) -> usize {
    posix_locks(std::process::id(), path).len()
}

fn grid_params(grid: &str) -> Vec<(&str, &str)> {
    vec![("waffle_grid", grid), ("waffle_local", "64KiB"), ("waffle_hot_list", "off")]
}

/// Case 1: a plain connection holds a read transaction (and, in WAL mode, its
/// lifelong SHARED lock); another connection opens, reads everything and closes.
#[test]
fn a_close_keeps_the_locks_other_connections_hold() {
    for wal in [false, true] {
        for through_waffle in [false, true] {
            let dir = TempDir::new("lifecycle-locks");
            let path = dir.join("x.db");
            create(&path, wal, "v");
            let plain = open_plain(&path);
            plain.execute_batch("BEGIN").unwrap();
            assert_eq!(rows_with(&plain, "v"), ROWS);
            let held = my_posix_locks(&path);
            assert!(held > 0, "the plain read transaction holds a lock (wal {wal})");
            {
                let other = if through_waffle { open_waffle(&path, &[]) } else { open_plain(&path) };
                assert_eq!(rows_with(&other, "v"), ROWS);
            } // closed here
            let after = my_posix_locks(&path);
            assert_eq!(
                after, held,
                "wal {wal}, waffle {through_waffle}: the other connection's close dropped the plain one's locks"
            );
            assert_eq!(rows_with(&plain, "v"), ROWS);
            plain.execute_batch("COMMIT").unwrap();
        }
    }
}

/// The plain `sqlite3` shell, kept open: commands on stdin, a marker line answered on stdout.
struct Shell {
    child: std::process::Child,
    out: BufReader<std::process::ChildStdout>,
}

impl Shell {
    fn open(path: &Path) -> Shell {
        let mut child = Command::new(sqlite3_shell())
            .arg(path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("sqlite3 shell");
        let out = BufReader::new(child.stdout.take().unwrap());
        Shell { child, out }
    }

    /// Runs `sql`, then waits (bounded) for the shell to print `marker`.
    fn run(&mut self, sql: &str, marker: &str) {
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, ".timeout 10000\n{sql}\nSELECT '{marker}';").unwrap();
        stdin.flush().unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut line = String::new();
        while Instant::now() < deadline {
            line.clear();
            if self.out.read_line(&mut line).unwrap() == 0 {
                panic!("the shell ended before printing {marker}");
            }
            if line.trim() == marker {
                return;
            }
        }
        panic!("the shell did not print {marker} in time");
    }

    /// Closes stdin: the shell closes the database (last out: checkpoint, WAL deleted) and exits.
    fn close(mut self) {
        drop(self.child.stdin.take());
        let status = self.child.wait().unwrap();
        assert!(status.success(), "sqlite3 exited {status}");
    }
}

/// Case 2: A reads every row and idles; B (another process, plain) updates
/// every row and checkpoints (PASSIVE) under A's SHARED lock; A closes while
/// B is open; B closes last. A's next open must read B's rows, and a write
/// through it must not bring old rows back.
#[test]
fn a_wal_close_beside_another_process_leaves_the_next_open_cold() {
    let node = start_node(64);
    let grid = grid_of([&node]);
    for through_waffle in [false, true] {
        let dir = TempDir::new("lifecycle-wal-warm");
        let path = dir.join("x.db");
        create(&path, true, "old");
        let open = || if through_waffle { open_waffle(&path, &grid_params(&grid)) } else { open_plain(&path) };
        let a = open();
        assert_eq!(rows_with(&a, "old"), ROWS);
        let mut b = Shell::open(&path);
        b.run("UPDATE t SET v = 'new-' || id; PRAGMA wal_checkpoint(PASSIVE);", "updated");
        drop(a);
        b.close();
        let a = open();
        assert_eq!(rows_with(&a, "new"), ROWS, "waffle {through_waffle}: the reopen reads B's commit");
        a.execute("UPDATE t SET v = 'a' WHERE id = 1", []).unwrap();
        drop(a);
        let check = open_plain(&path);
        assert_eq!(rows_with(&check, "new"), ROWS - 1, "waffle {through_waffle}: B's commit kept");
        let ok: String = check.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
        assert_eq!(ok, "ok");
    }
}

/// The other side of case 2: a WAL-mode close that is the database's last
/// (it checkpoints and deletes the WAL under EXCLUSIVE) can vouch for its
/// cache, so the next open is warm (same cache identity) and reads right.
#[test]
fn a_wal_close_that_checkpoints_last_stays_warm() {
    let node = start_node(64);
    let grid = grid_of([&node]);
    let dir = TempDir::new("lifecycle-wal-last");
    let path = dir.join("x.db");
    create(&path, true, "old");
    let a = open_waffle(&path, &grid_params(&grid));
    a.execute("UPDATE t SET v = 'new-' || id", []).unwrap();
    let id = cache_id(&a);
    drop(a);
    assert!(!dir.join("x.db-wal").exists(), "the last close removed the WAL");
    let a = open_waffle(&path, &grid_params(&grid));
    assert_eq!(cache_id(&a), id, "warm: the close vouched for its cache");
    assert_eq!(rows_with(&a, "new"), ROWS);
}

/// Case 3: while a waffle connection opens (held in the sidecar's lock wait,
/// which widens the window), another file is renamed over the path. SQLite
/// opened and reads the first file; so must the cache.
#[test]
fn a_path_renamed_over_during_the_open_reads_the_file_sqlite_opened() {
    for through_waffle in [false, true] {
        let dir = TempDir::new("lifecycle-rename");
        let path = dir.join("x.db");
        let other = dir.join("y.db");
        create(&path, false, "x");
        create(&other, false, "y");
        let side = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(waffle_core::sidecar::Sidecar::path_for(&path))
            .unwrap();
        // SAFETY: flock on a descriptor this test owns.
        assert_eq!(unsafe { libc::flock(side.as_raw_fd(), libc::LOCK_EX) }, 0);
        let (renamed_tx, renamed) = std::sync::mpsc::channel::<()>();
        let x_file = file_id(&path).unwrap();
        let opener = {
            let path = path.clone();
            std::thread::spawn(move || {
                let c = if through_waffle { open_waffle(&path, &[]) } else { open_plain(&path) };
                let opened_at = Instant::now();
                renamed.recv_timeout(Duration::from_secs(10)).expect("the rename");
                (rows_with(&c, "x"), rows_with(&c, "y"), opened_at, c)
            })
        };
        // The rename comes once the open has the file (its descriptor is there; waffle's open then
        // waits in the sidecar's lock held above). A sleep instead was too short when the machine
        // started the opener's thread late (session 19: the open measured 118 ms of a 300 ms sleep).
        wait_for(Duration::from_secs(10), "the open to have the database file", || {
            !descriptors_on(std::process::id(), x_file).is_empty()
        });
        std::fs::rename(&other, &path).unwrap();
        renamed_tx.send(()).unwrap();
        let released_at = Instant::now();
        drop(side); // the waffle open goes on
        let (x, y, opened_at, c) = opener.join().unwrap();
        if through_waffle {
            assert!(opened_at >= released_at, "the open waited in the sidecar's lock until it was released");
        }
        assert_eq!((x, y), (ROWS, 0), "waffle {through_waffle}: the rows of the file SQLite opened");
        drop(c);
    }
}

/// Case 4 (explorer seed 45782153, a soak under load): `PRAGMA journal_mode = DELETE` right
/// after an open whose warm (there: the hot list's reload) was still running got SQLITE_BUSY,
/// where plain SQLite, alone on the file, switches. In WAL mode a connection keeps its SHARED lock
/// on the database file for as long as it is open, and leaving WAL mode takes EXCLUSIVE once,
/// without the busy handler, so the warm's connection refused it between two pieces.
#[test]
fn leaving_wal_mode_while_a_warm_runs_switches_as_without_waffle() {
    const TEST: &str = "leaving_wal_mode_while_a_warm_runs_switches_as_without_waffle";
    let Some(dir) = slow_disk::child_dir() else {
        let dir = TempDir::new("leave-wal-warm");
        for name in ["w.db", "control.db"] {
            let c = open_plain(&dir.join(name));
            c.query_row("PRAGMA journal_mode=WAL", [], |r| r.get::<_, String>(0)).unwrap();
            c.execute_batch("CREATE TABLE t(id INTEGER PRIMARY KEY, pad BLOB)").unwrap();
            c.execute(
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 5000)
                 INSERT INTO t SELECT i, randomblob(3500) FROM n",
                [],
            )
            .unwrap();
        }
        // The control: plain SQLite, alone on the file, leaves WAL mode.
        let control = open_plain(&dir.join("control.db"));
        let mode: String = control.query_row("PRAGMA journal_mode = DELETE", [], |r| r.get(0)).unwrap();
        assert_eq!(mode, "delete");
        slow_disk::run_again(TEST, "cloud-block", dir.path(), &[]);
        return;
    };
    let path = dir.join("w.db");
    slow_disk::drop_from_page_cache(&path);
    let conn = open_waffle(&path, &[("waffle_local", "64MiB")]);
    let started: String = conn.query_row("PRAGMA waffle_warm", [], |r| r.get(0)).unwrap();
    assert!(started.starts_with("started"), "{started}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while waffle_testkit::db::n(&waffle_testkit::db::stats(&conn), "warm.read_pages") == 0 {
        assert!(Instant::now() < deadline, "the warm read nothing in 20 s");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(waffle_testkit::db::stats(&conn)["warm"]["state"], "running");
    let mode: Result<String, _> = conn.query_row("PRAGMA journal_mode = DELETE", [], |r| r.get(0));
    assert_eq!(mode.map_err(|e| e.to_string()), Ok("delete".to_string()), "leaving WAL mode during a warm");
    let rows: i64 = conn.query_row("SELECT count(*) FROM t", [], |r| r.get(0)).unwrap();
    assert_eq!(rows, 5000);
    assert!(slow_disk::slowed_reads("cloud-block") > 0, "the warm's reads waited for the EMULATED disk");
}
