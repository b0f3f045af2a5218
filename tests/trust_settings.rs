//! Settings belong to the opener (issue 31): SQL that ATTACHes a file
//! through the `waffle` VFS cannot choose its settings, a later open of a
//! file already open in the process never runs with weaker settings, and the
//! files a setting names are opened safely (a key file that is a FIFO or a
//! device, a stats file over a file that is not one).
//!
//! Real SQLite (rusqlite, linked) and real memcached nodes; the first case
//! also through Debian's `sqlite3` shell with the built libwaffle.so, as the
//! issue reproduced it. Each has a control without waffle (plain SQLite
//! ignores the parameters and leaves the file intact) where it makes sense.

use std::path::Path;
use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags};
use waffle_testkit::artefact;
use waffle_testkit::db::{open_waffle, register, try_open_waffle, waffle_uri};
use waffle_testkit::nodes::{start_node, Node};
use waffle_testkit::process::run_with_input;
use waffle_testkit::temp_dir::TempDir;
use waffle_testkit::writers::sqlite3_shell;

const SECRET: &str = "waffle-trust-secret-row-";

/// A database of 300 rows whose text is easy to find, made without waffle.
fn make_db(path: &Path) {
    let c = Connection::open(path).unwrap();
    c.execute_batch("PRAGMA journal_mode=DELETE; CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)").unwrap();
    let tx = c.unchecked_transaction().unwrap();
    for i in 0..300 {
        tx.execute(
            "INSERT INTO t VALUES (?1, ?2)",
            rusqlite::params![i, format!("{SECRET}{i:06}-{}", "x".repeat(200))],
        )
        .unwrap();
    }
    tx.commit().unwrap();
}

/// The database opens without waffle, checks whole, and has its 300 rows.
fn assert_intact(path: &Path) {
    let c = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let check: String = c.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap_or_else(|e| {
        panic!("{} is no longer a database: {e}", path.display());
    });
    assert_eq!(check, "ok");
    let n: i64 = c.query_row("SELECT count(*) FROM t", [], |r| r.get(0)).unwrap();
    assert_eq!(n, 300);
}

/// A read-only connection through waffle (no grid, nothing from the environment's stats file).
fn open_read_only(path: &Path) -> Connection {
    register();
    let uri = waffle_uri(path, &[("mode", "ro"), ("waffle_grid", ""), ("waffle_grid_backoff", "off")]);
    Connection::open_with_flags(uri, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI).unwrap()
}

fn count(c: &Connection, table: &str) -> rusqlite::Result<i64> {
    c.query_row(&format!("SELECT count(*) FROM {table} WHERE v LIKE 'waffle-trust%'"), [], |r| r.get(0))
}

/// Items memcached at `node` ever stored.
fn stored(node: &Node) -> u64 {
    node.stat("total_items").unwrap()
}

/// Runs `f` on a thread; panics if it takes longer than `limit` (the thread is left blocked).
fn within<T: Send + 'static>(limit: Duration, what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit).unwrap_or_else(|_| panic!("{what} did not return within {limit:?}"))
}

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: c is a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo {}", path.display());
}

/// The process's peak resident memory in KiB (VmHWM).
fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn an_attach_from_a_read_only_connection_cannot_write_a_stats_file_over_the_database() {
    let dir = TempDir::new("trust-stats-over-db");
    let db = dir.join("main.db");
    make_db(&db);
    let attach = format!("ATTACH 'file:{0}?waffle_stats_file={0}' AS a", db.display());
    // Control: plain SQLite ignores the parameter.
    let plain =
        Connection::open_with_flags(&db, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI).unwrap();
    plain.execute_batch(&attach).unwrap();
    assert_eq!(count(&plain, "a.t").unwrap(), 300);
    drop(plain);
    assert_intact(&db);
    // Through waffle, from a read-only connection.
    let c = open_read_only(&db);
    c.execute_batch(&attach).unwrap();
    assert_eq!(count(&c, "a.t").unwrap(), 300);
    std::thread::sleep(Duration::from_millis(1300)); // a tick of a stats thread, if one ran
    drop(c); // and a last write
    assert_intact(&db);
}

#[test]
fn an_attach_writes_no_stats_file_its_uri_names() {
    let dir = TempDir::new("trust-attach-stats");
    let (main, other, stats) = (dir.join("main.db"), dir.join("other.db"), dir.join("other-stats.json"));
    make_db(&main);
    make_db(&other);
    let c = open_waffle(&main, &[]);
    c.execute_batch(&format!("ATTACH 'file:{}?waffle_stats_file={}' AS o", other.display(), stats.display())).unwrap();
    assert_eq!(count(&c, "o.t").unwrap(), 300, "the ATTACH works (its parameter ignored)");
    drop(c);
    assert!(!stats.exists(), "SQL named the stats file: none is written");
    // Control: the opener's own URI parameter writes it.
    let c = open_waffle(&other, &[("waffle_stats_file", stats.to_str().unwrap())]);
    drop(c);
    let text = std::fs::read_to_string(&stats).unwrap();
    assert!(text.starts_with(waffle_core::stats_file::MARKER), "{text}");
}

#[test]
fn a_stats_file_naming_a_file_that_is_not_one_leaves_it_alone() {
    let dir = TempDir::new("trust-stats-not-ours");
    let (db, victim) = (dir.join("app.db"), dir.join("package.json"));
    make_db(&db);
    std::fs::write(&victim, br#"{"name":"x"}"#).unwrap();
    // The opener itself names its database, then a JSON file: neither is replaced.
    for target in [&db, &victim] {
        let c = open_waffle(&db, &[("waffle_stats_file", target.to_str().unwrap())]);
        assert_eq!(count(&c, "t").unwrap(), 300);
        std::thread::sleep(Duration::from_millis(1200));
        drop(c);
    }
    assert_intact(&db);
    assert_eq!(std::fs::read(&victim).unwrap(), br#"{"name":"x"}"#);
}

#[test]
fn a_key_file_that_is_a_fifo_or_a_device_is_refused_promptly_with_bounded_memory() {
    let dir = TempDir::new("trust-key-fifo");
    let (main, other, fifo) = (dir.join("main.db"), dir.join("other.db"), dir.join("key.fifo"));
    make_db(&main);
    make_db(&other);
    mkfifo(&fifo);
    let before_kib = peak_rss_kib();
    for key in [fifo.to_str().unwrap().to_string(), "/dev/zero".to_string()] {
        // The main open: refused at once, with the parameter named.
        let (m, k) = (main.clone(), key.clone());
        let err = within(Duration::from_secs(10), "an open with a FIFO or device key file", move || {
            try_open_waffle(&m, &[("waffle_key_file", &k)]).map(|_| ()).unwrap_err().to_string()
        });
        assert!(err.contains("unable to open"), "{key}: {err}");
        // An ATTACH from SQL: the statement returns promptly (refused: a bad waffle value).
        let (m, o, k) = (main.clone(), other.clone(), key.clone());
        let r = within(Duration::from_secs(10), "an ATTACH with a FIFO or device key file", move || {
            let c = open_waffle(&m, &[]);
            c.execute_batch(&format!("ATTACH 'file:{}?waffle_key_file={k}' AS o", o.display()))
                .map_err(|e| e.to_string())
        });
        assert!(r.is_err(), "{key}: {r:?}");
    }
    let grown_kib = peak_rss_kib().saturating_sub(before_kib);
    assert!(grown_kib < 256 << 10, "the process grew by {grown_kib} KiB reading a key file");
    // Control: a regular key file still seals.
    let key = dir.join("waffle.key");
    std::fs::write(&key, "5a".repeat(32)).unwrap();
    let c = open_waffle(&main, &[("waffle_key_file", key.to_str().unwrap())]);
    assert_eq!(count(&c, "t").unwrap(), 300);
}

#[test]
fn an_attach_first_cannot_make_a_keyed_open_join_its_settings() {
    let (sql_node, b_node) = (start_node(32), start_node(32));
    let dir = TempDir::new("trust-attach-first");
    let (a_main, shared, key) = (dir.join("a.db"), dir.join("shared.db"), dir.join("waffle.key"));
    make_db(&a_main);
    make_db(&shared);
    std::fs::write(&key, "5a".repeat(32)).unwrap();
    // Component A: its SQL attaches shared.db first, naming a node of its choice.
    let a = open_waffle(&a_main, &[]);
    a.execute_batch(&format!("ATTACH 'file:{}?waffle_grid={}' AS s", shared.display(), sql_node.addr())).unwrap();
    assert_eq!(count(&a, "s.t").unwrap(), 300);
    // Component B opens shared.db with its own grid and a key: it must not join A's settings unsealed.
    let b_grid = b_node.addr();
    let key_path = key.to_str().unwrap();
    let params = [("waffle_grid", b_grid.as_str()), ("waffle_key_file", key_path), ("waffle_local", "8KiB")];
    let b = try_open_waffle(&shared, &params);
    let refused = match &b {
        Err(e) => e.to_string(),
        Ok(b) => count(b, "t").map(|n| format!("read {n} rows")).unwrap_or_else(|e| e.to_string()),
    };
    assert!(refused.contains("unable to open"), "the keyed open is refused: {refused}");
    drop(b);
    drop(a); // the last close pushes L1 to the cache's grid
    assert_eq!(stored(&sql_node), 0, "no page reaches the node SQL named");
    assert_eq!(stored(&b_node), 0, "nothing reached B's node unsealed");
    // Control: alone, B's keyed open uses its grid, sealed.
    let b = open_waffle(&shared, &params);
    assert_eq!(count(&b, "t").unwrap(), 300);
    waffle_testkit::db::flush(&b);
    assert!(stored(&b_node) > 0, "B's own open pushes to its grid");
    let id = waffle_testkit::db::cache_id(&b);
    for p in 0..20 {
        if let Some(v) = waffle_testkit::raw_client::mg(&b_grid, &waffle_testkit::raw_client::key(id, p)) {
            assert!(!v.windows(SECRET.len()).any(|w| w == SECRET.as_bytes()), "page {p} in plaintext");
        }
    }
}

#[test]
fn an_attach_with_a_grid_sends_that_node_no_page_and_a_main_open_still_uses_its_uri_grid() {
    let node = start_node(32);
    let dir = TempDir::new("trust-attach-grid");
    let (main, other) = (dir.join("main.db"), dir.join("other.db"));
    make_db(&main);
    make_db(&other);
    let c = open_waffle(&main, &[("waffle_local", "8KiB")]);
    c.execute_batch(&format!("ATTACH 'file:{}?waffle_grid={}&waffle_local=8KiB' AS o", other.display(), node.addr()))
        .unwrap();
    assert_eq!(count(&c, "o.t").unwrap(), 300);
    assert_eq!(count(&c, "t").unwrap(), 300);
    drop(c);
    assert_eq!(stored(&node), 0, "the attached database caches with the main's settings (no grid)");
    // Control: the opener's URI grid is used.
    let c = open_waffle(&other, &[("waffle_grid", &node.addr()), ("waffle_local", "8KiB")]);
    assert_eq!(count(&c, "t").unwrap(), 300);
    drop(c);
    assert!(stored(&node) > 0, "a main open with a URI grid pushes to it");
}

#[test]
fn a_later_open_with_harmless_differences_joins_and_one_asking_for_more_is_refused() {
    let node = start_node(32);
    let dir = TempDir::new("trust-join");
    let db = dir.join("app.db");
    make_db(&db);
    let first = open_waffle(&db, &[("waffle_local", "1MiB"), ("waffle_verify", "off")]);
    let harmless =
        [("waffle_local", "2MiB"), ("waffle_timeout_ms", "50"), ("waffle_hot_list", "off"), ("waffle_verify", "off")];
    let joined = open_waffle(&db, &harmless);
    assert_eq!(count(&joined, "t").unwrap(), 300, "L1, timeout, hot list: the first settings are kept");
    for params in [vec![("waffle_grid", node.addr())], vec![("waffle_verify", "on".to_string())]] {
        let p: Vec<(&str, &str)> = params.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let r = try_open_waffle(&db, &p).and_then(|c| count(&c, "t"));
        assert!(r.as_ref().is_err_and(|e| e.to_string().contains("unable to open")), "{params:?}: {r:?}");
    }
    drop((first, joined));
}

// ---------------------------------------------------------------- Debian's sqlite3 shell

/// Runs `script` in Debian's `sqlite3` with libwaffle.so loaded; returns (status ok, stdout, stderr).
fn shell(script: &str) -> (bool, String, String) {
    let so = artefact("libwaffle.so");
    let script = format!(".load {}\n{script}", so.display());
    let started = Instant::now();
    let out = run_with_input(Command::new(sqlite3_shell()).arg(":memory:"), &script, Duration::from_secs(20));
    assert!(started.elapsed() < Duration::from_secs(15), "the shell took {:?}", started.elapsed());
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

#[test]
fn in_the_sqlite3_shell_an_attach_can_neither_replace_the_database_nor_block_nor_choose_the_settings() {
    let dir = TempDir::new("trust-shell");
    let (db, shared, fifo, key) = (dir.join("main.db"), dir.join("shared.db"), dir.join("key.fifo"), dir.join("k.key"));
    make_db(&db);
    make_db(&shared);
    mkfifo(&fifo);
    std::fs::write(&key, "5a".repeat(32)).unwrap();
    // Control: the shell without waffle.
    let attach = format!("ATTACH 'file:{0}?waffle_stats_file={0}' AS a;\nSELECT count(*) FROM a.t;", db.display());
    let (ok, out, err) = shell(&format!(".open --readonly '{}'\n{attach}\n", db.display()));
    assert!(ok && out.contains("300"), "{out}\n{err}");
    assert_intact(&db);
    // The issue's reproduction: a read-only connection through waffle.
    let (ok, out, err) =
        shell(&format!(".open 'file:{}?vfs=waffle&mode=ro'\n{attach}\n.shell sleep 1.3\n", db.display()));
    assert!(ok && out.contains("300"), "{out}\n{err}");
    assert!(
        err.contains("is attached from SQL: its URI's waffle_stats_file is ignored"),
        "the shell sends FCNTL_PDB: {err}"
    );
    assert_intact(&db);
    // A FIFO key file: the ATTACH returns at once, refused.
    let (_, _, err) = shell(&format!(
        ".open 'file:{}?vfs=waffle'\nATTACH 'file:{}?waffle_key_file={}' AS s;\n",
        db.display(),
        shared.display(),
        fifo.display()
    ));
    assert!(err.contains("the key file must be a regular file (this is a FIFO)"), "{err}");
    // ATTACH first, then a keyed open by another connection of the process: refused, and said.
    let (_, out, err) = shell(&format!(
        ".open 'file:{}?vfs=waffle'\nATTACH 'file:{}' AS s;\nSELECT count(*) FROM s.t;\n.connection 1\n\
         .open 'file:{}?vfs=waffle&waffle_grid=127.0.0.1:1&waffle_key_file={}'\nSELECT count(*) FROM t;\n",
        db.display(),
        shared.display(),
        shared.display(),
        key.display()
    ));
    assert!(out.contains("300"), "{out}\n{err}");
    assert!(
        err.contains(&format!(
            "cannot open {}: {} is already open in this process",
            shared.display(),
            shared.display()
        )) && err.contains("waffle_grid: this open asks for 127.0.0.1:1:1 and the open one has none"),
        "{err}"
    );
    assert!(!err.contains("5a5a"), "no key bytes: {err}");
}
