//! The loadable extension `libwaffle.so` in hosts we did not build: Debian's
//! `sqlite3` shell (3.40) and Python's apsw (/usr/bin/python3). Also several
//! processes sharing one database and the error for a bad URI value, as a
//! user sees them (stderr of the host process).
//!
//! The .so is the one built for the profile this test runs under (next to
//! this test binary, or in its `deps/` where `cargo test` builds it; see
//! waffle-testkit's `artefact`), not older than the sources. None there, or
//! only a stale one: the test fails and says how to build it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;
use waffle_core::stats::StatsSnapshot;
use waffle_testkit::artefact;
use waffle_testkit::db::{cache_stats, open_waffle, waffle_uri};
use waffle_testkit::nodes::{start_node, Node};
use waffle_testkit::process::{run_with_input, spawn_until_ready, KillOnDrop};
use waffle_testkit::temp_dir::TempDir;
use waffle_testkit::writers::{python_with_apsw, sqlite3_shell, APSW_PRELUDE, CHILD_TIMEOUT};

// ---------------------------------------------------------------- finding things

/// The extension to load: `WAFFLE_SO`, or the one built for this profile, not older than the
/// sources (waffle-testkit's `artefact`).
fn libwaffle() -> PathBuf {
    let path = artefact("libwaffle.so");
    eprintln!("using {}", path.display());
    path
}

// ---------------------------------------------------------------- running children

/// Runs `cmd` with `input` on stdin; kills it if it takes longer than CHILD_TIMEOUT.
fn run(cmd: &mut Command, input: &str) -> Output {
    run_with_input(cmd, input, CHILD_TIMEOUT)
}

/// Runs `sql` in the `sqlite3` shell on `uri`, with the extension `so` loaded and `.bail on`;
/// fails the test if the shell does. Returns stdout's lines and stderr.
fn shell_on(so: &Path, uri: &str, sql: &str) -> (Vec<String>, String) {
    let script = format!(".bail on\n.load {}\n.open '{uri}'\n{sql}", so.display());
    let out = run(Command::new(sqlite3_shell()).arg(":memory:"), &script);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "sqlite3 failed: {}\nstdout: {stdout}\nstderr: {stderr}", out.status);
    (stdout.lines().map(str::to_owned).collect(), stderr)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A Python process holding `uri` open (with the extension `so` loaded) until it is dropped.
fn py_holder(so: &Path, uri: &str) -> KillOnDrop {
    let script = format!(
        "{APSW_PRELUDE}\nc = apsw.Connection(uri, flags=flags)\nc.cursor().execute('CREATE TABLE IF NOT EXISTS held(x)')\n\
         import signal\nprint('ready holding', flush=True)\nsignal.pause()\n"
    );
    let mut cmd = Command::new(python_with_apsw());
    cmd.arg("-c").arg(script).arg(so).arg(uri);
    spawn_until_ready(&mut cmd, CHILD_TIMEOUT).0
}

/// What a host test starts from: the extension, a node, and the `waffle` URI (64 KiB L1 over
/// that node) of a new database in a temp dir of its own. The cost back-off is off: these
/// tests are about each host loading the extension and caching through the grid; whether a
/// node pays against this machine's disk is grid_cost.rs's (with it on, a fresh database whose
/// reads the page cache answers in a microsecond had its pushes declined by the node's trial,
/// and the shell's test pushed nothing: session 16's run 5).
struct Host {
    so: PathBuf,
    node: Node,
    db: PathBuf,
    uri: String,
    _dir: TempDir,
}

fn host(name: &str, file: &str) -> Host {
    let so = libwaffle();
    let node = start_node(32);
    let dir = TempDir::new(name);
    let db = dir.join(file);
    let params = [
        ("waffle_grid", node.addr()),
        ("waffle_local", "64KiB".into()),
        ("waffle_timeout_ms", "1000".into()),
        ("waffle_grid_backoff", "off".into()),
    ];
    let uri = waffle_uri(&db, &params.iter().map(|(k, v)| (*k, v.as_str())).collect::<Vec<_>>());
    Host { so, node, db, uri, _dir: dir }
}

// ---------------------------------------------------------------- the tests

#[test]
fn the_sqlite3_shell_loads_the_extension_and_caches_through_the_grid() {
    let Host { so, node, db, uri, _dir } = host("ext-shell", "shell.db");
    let sql = "PRAGMA cache_size = 10;\n\
         CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT);\n\
         WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 200)\n\
           INSERT INTO t SELECT i, printf('%.3000c', char(65 + i % 26)) FROM c;\n\
         PRAGMA waffle_flush;\n\
         SELECT count(*), sum(length(v)), sum(unicode(v)) FROM t;\n\
         PRAGMA waffle_stats;\n";
    let (lines, stderr) = shell_on(&so, &uri, sql);
    assert_eq!(lines.len(), 3, "expected flush, totals, stats; got:\n{lines:?}\nstderr: {stderr}");
    assert_eq!(lines[0], "ok", "PRAGMA waffle_flush");
    let letters: u64 = (1..=200u64).map(|i| 65 + i % 26).sum();
    assert_eq!(lines[1], format!("200|600000|{letters}"), "the rows read back through waffle");
    let s: Value =
        serde_json::from_str(&lines[2]).unwrap_or_else(|e| panic!("waffle_stats is not JSON ({e}): {}", lines[2]));
    let s = typed(&s);
    let (config, c) = (&s.sqlite.as_ref().expect("the SQLite section").config, s.cache());
    assert_eq!((config.grid[0].as_str(), config.local_bytes), (node.addr().as_str(), 64 << 10), "{s:?}");
    assert!(c.disk_writes >= 200, "{s:?}");
    assert!(c.l2_pushes > 0, "the shell's database pushed nothing to the grid: {s:?}");
    assert!(c.l2_hits > 0, "the shell's reads never hit the grid: {s:?}");
    assert!(stderr.trim().is_empty(), "unexpected stderr: {stderr}");

    // The file alone, through plain SQLite, has everything (the disk is the truth).
    let out = run(Command::new(sqlite3_shell()).arg(&db), "PRAGMA integrity_check;\nSELECT count(*) FROM t;\n");
    assert_eq!(text(&out.stdout), "ok\n200\n", "plain sqlite3 on the file: {}", text(&out.stderr));
}

/// `PRAGMA waffle_warm` in a host whose SQLite the extension reaches only through the routines
/// table: the warm thread's own connection (open, BEGIN, the schema lookup) goes through it too.
#[test]
fn the_sqlite3_shell_warms_a_table_through_the_extension() {
    let Host { so, uri, _dir, node: _node, .. } = host("ext-warm", "warm.db");
    let sql = "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT);\n\
         CREATE TABLE u(x);\n\
         WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 300)\n\
           INSERT INTO t SELECT i, printf('%.3000c', char(65 + i % 26)) FROM c;\n\
         PRAGMA waffle_warm='t';\n\
         .system sleep 2\n\
         PRAGMA waffle_stats;\n";
    let (lines, stderr) = shell_on(&so, &uri, sql);
    assert_eq!(lines.len(), 2, "expected the warm's row and the stats; got:\n{lines:?}\nstderr: {stderr}");
    assert!(lines[0].starts_with("started: table t and 0 indexes"), "{}", lines[0]);
    let s: Value = serde_json::from_str(&lines[1]).unwrap_or_else(|e| panic!("not JSON ({e}): {}", lines[1]));
    let w = typed(&s).warming().warm.clone();
    assert_eq!(w.state, "done", "{s}");
    // 300 rows of 3000 bytes: one 4 KiB leaf each, and the interior pages above them.
    assert!((300..320).contains(&w.planned_pages), "{w:?}");
    assert!(stderr.trim().is_empty(), "unexpected stderr: {stderr}");
}

#[test]
fn python_apsw_loads_the_extension_and_caches_through_the_grid() {
    let Host { so, node, uri, _dir, .. } = host("ext-apsw", "apsw.db");
    let script = format!(
        r#"{APSW_PRELUDE}
c = apsw.Connection(uri, flags=flags)
cur = c.cursor()
cur.execute("PRAGMA cache_size = 10")
cur.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB)")
cur.execute("BEGIN")
for i in range(1, 201):
    cur.execute("INSERT INTO t VALUES (?, ?)", (i, bytes([i % 251]) * 3000))
cur.execute("COMMIT")
flushed = list(cur.execute("PRAGMA waffle_flush"))[0][0]
cur.execute("PRAGMA shrink_memory")
rows = 0
for (i, v) in list(cur.execute("SELECT id, v FROM t ORDER BY id")):
    assert v == bytes([i % 251]) * 3000, i
    rows += 1
stats = json.loads(list(cur.execute("PRAGMA waffle_stats"))[0][0])
vfs = [v for v in apsw.vfsnames()]
c.close()
print(json.dumps({{"flushed": flushed, "rows": rows, "stats": stats, "vfs": vfs}}))
"#
    );
    let out = run(Command::new(python_with_apsw()).arg("-c").arg(script).arg(&so).arg(&uri), "");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "python failed: {}\nstdout: {stdout}\nstderr: {stderr}", out.status);
    let r: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"));
    assert_eq!(r["flushed"], "ok");
    assert_eq!(r["rows"], 200);
    assert!(r["vfs"].as_array().unwrap().iter().any(|v| v == "waffle"), "waffle is not a registered VFS: {r}");
    let s = typed(&r["stats"]);
    let (config, c) = (&s.sqlite.as_ref().expect("the SQLite section").config, s.cache());
    assert_eq!(config.grid[0], node.addr(), "{s:?}");
    assert!(c.l2_pushes > 0, "apsw's database pushed nothing to the grid: {s:?}");
    assert!(c.l2_hits > 0, "apsw's reads never hit the grid: {s:?}");
    assert!(c.disk_writes >= 200, "{s:?}");
}

#[test]
fn several_processes_share_the_database_and_see_each_others_commits() {
    let so = libwaffle();
    let dir = TempDir::new("ext-shared");
    let node = start_node(16);
    let grid = node.addr();
    let params = [("waffle_grid", grid.as_str()), ("waffle_local", "64KiB")];

    // Python (the extension) holds it open; this process (waffle linked in) writes;
    // the sqlite3 shell (the extension) reads that and writes; we read the shell's rows.
    let db = dir.join("shared.db");
    let uri = waffle_uri(&db, &params);
    let holder = py_holder(&so, &uri);
    let conn = open_waffle(&db, &params);
    conn.execute_batch(
        "CREATE TABLE t(id INTEGER PRIMARY KEY, v);
         WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x<300)
         INSERT INTO t SELECT x, randomblob(200) FROM c;",
    )
    .unwrap();
    let count = |c: &rusqlite::Connection| {
        c.query_row("SELECT count(*), sum(id) FROM t", [], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?))).unwrap()
    };
    assert_eq!(count(&conn), (300, 45150));
    let ours = cache_stats(&conn);

    let out = run(
        Command::new(sqlite3_shell()).arg(":memory:"),
        &format!(
            ".load {}\n.open '{uri}'\nSELECT count(*) FROM t;\nDELETE FROM t WHERE id % 3 = 0;\nINSERT INTO t VALUES(1000, 'shell');\nPRAGMA waffle_stats;\n",
            so.display()
        ),
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines.first().copied(),
        Some("300"),
        "the shell, a second waffle process, reads our commit; stderr: {stderr}"
    );
    assert!(!stderr.contains("waffle: cannot open"), "a second waffle process is not refused: {stderr}");
    let theirs: Value = serde_json::from_str(lines.get(1).copied().unwrap_or_default())
        .unwrap_or_else(|e| panic!("the shell's stats ({e}): {stdout} {stderr}"));
    assert_ne!(typed(&theirs).cache().cache_id, ours.cache_id, "each process keeps its own identity in the grid");

    // The shell's commit is foreign to this process's cache: seen, not served stale.
    assert_eq!(count(&conn), (201, 45150 - (3..=300).step_by(3).sum::<i64>() + 1000));
    let after = cache_stats(&conn);
    assert!(after.foreign_changes > ours.foreign_changes, "{after:?}");
    drop(conn);
    drop(holder);
    let plain = rusqlite::Connection::open(&db).unwrap();
    assert_eq!(plain.query_row("PRAGMA integrity_check", [], |r| r.get::<_, String>(0)).unwrap(), "ok");
}

#[test]
fn a_bad_uri_value_fails_the_open_and_names_the_parameter() {
    let so = libwaffle();
    let dir = TempDir::new("ext-baduri");

    let db = dir.join("bad.db");
    let uri = waffle_uri(&db, &[("waffle_local", "lots")]);
    let out = run(Command::new(sqlite3_shell()).arg(":memory:"), &format!(".load {}\n.open '{uri}'\n", so.display()));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("waffle: cannot open") && stderr.contains("waffle_local") && stderr.contains("'lots'"),
        "stderr should name waffle_local and 'lots': {stderr}"
    );
    assert!(stderr.contains("unable to open database"), "the shell's open should fail: {stderr}");
    assert!(!db.exists(), "a refused open must not create the database");

    let db = dir.join("bad2.db");
    let uri = waffle_uri(&db, &[("waffle_timeout_ms", "0")]);
    let script = format!(
        "{APSW_PRELUDE}\ntry:\n    apsw.Connection(uri, flags=flags)\n    print('opened')\nexcept apsw.CantOpenError:\n    print('refused')\n"
    );
    let out = run(Command::new(python_with_apsw()).arg("-c").arg(script).arg(&so).arg(&uri), "");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(stdout.trim(), "refused", "stderr: {stderr}");
    assert!(
        stderr.contains("waffle_timeout_ms") && stderr.contains("'0'"),
        "stderr should name waffle_timeout_ms and '0': {stderr}"
    );
    assert!(!db.exists(), "a refused open must not create the database");
}

/// `PRAGMA waffle_stats` as another process printed it, read as the typed snapshot.
fn typed(v: &Value) -> StatsSnapshot {
    StatsSnapshot::from_json(v).unwrap_or_else(|e| panic!("not a stats snapshot ({e}): {v}"))
}

// ---------------------------------------------------------------- Python's standard sqlite3

/// The distribution's Python, whose `sqlite3` module can load extensions (a pyenv build by
/// default cannot: README.md, "Using it with SQLite").
fn distribution_python() -> PathBuf {
    let p = PathBuf::from("/usr/bin/python3");
    assert!(p.is_file(), "/usr/bin/python3 is missing: apt-get install python3");
    let probe = "import sqlite3; sqlite3.connect(':memory:').enable_load_extension(True)";
    let out = run(Command::new(&p).args(["-c", probe]), "");
    assert!(out.status.success(), "/usr/bin/python3's sqlite3 cannot load extensions: {}", text(&out.stderr));
    p
}

/// README.md's Python snippet: the first ```python block of "Using it with SQLite".
fn readme_python_snippet() -> String {
    let readme = Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md");
    let text = std::fs::read_to_string(&readme).unwrap_or_else(|e| panic!("{}: {e}", readme.display()));
    let section = text.split("\n## Using it with SQLite\n").nth(1).expect("README.md: \"## Using it with SQLite\"");
    let section = section.split("\n## ").next().unwrap();
    let block = section.split("```python\n").nth(1).expect("README.md: a ```python block in \"Using it with SQLite\"");
    block.split("```").next().unwrap().to_string()
}

/// `text` with `from` (which must be there exactly once: the README's snippet has not changed
/// under the test) replaced by `to`.
fn replace_once(text: &str, from: &str, to: &str) -> String {
    assert_eq!(text.matches(from).count(), 1, "README.md's Python snippet should hold {from:?} once:\n{text}");
    text.replace(from, to)
}

/// What the test does with `conn` after the snippet, and the control without Waffle: 200
/// rows of 3000 bytes through a 10-page SQLite cache, read back after `PRAGMA waffle_flush`.
/// Prints one JSON line.
const PY_WORKLOAD: &str = r#"
import json
conn.execute("PRAGMA cache_size = 10")
conn.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB)")
with conn:
    conn.executemany("INSERT INTO t VALUES (?, ?)", ((i, bytes([i % 251]) * 3000) for i in range(1, 201)))
flushed = conn.execute("PRAGMA waffle_flush").fetchone()
conn.execute("PRAGMA shrink_memory")
rows = [i for (i, v) in conn.execute("SELECT id, v FROM t ORDER BY id") if v == bytes([i % 251]) * 3000]
stats = conn.execute("PRAGMA waffle_stats").fetchone()
conn.close()
print(json.dumps({"flushed": flushed and flushed[0], "rows": len(rows), "stats": stats and json.loads(stats[0])}))
"#;

#[test]
fn python_sqlite3_runs_the_readme_snippet_and_caches_through_the_grid() {
    let Host { so, node, db, _dir, .. } = host("ext-pysqlite3", "app.db");
    let python = distribution_python();
    let snippet = readme_python_snippet();
    let ours = replace_once(&snippet, "\"target/release/libwaffle.so\"", &format!("{:?}", so.display().to_string()));
    let ours = replace_once(&ours, "file:app.db?", &format!("file:{}?", db.display()));
    let ours = replace_once(&ours, "10.0.0.2:11211,10.0.0.3:11211", &node.addr());
    // An L1 of 16 pages: the 200 rows leave it, so reads come from the grid. The back-off off, as
    // in `host`: this disk is the page cache, so the node is on trial and asked for the pages of
    // 1 key in 64 only, and whether any of the 200 falls in that sample turns on the cache's
    // random id (none did in about 1 run in 25: "pushed nothing to the grid").
    let ours =
        replace_once(&ours, "waffle_local=256MiB", "waffle_local=64KiB&waffle_timeout_ms=1000&waffle_grid_backoff=off");
    let out = run(Command::new(&python).arg("-c").arg(format!("{ours}{PY_WORKLOAD}")), "");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "python3 failed: {}\nstdout: {stdout}\nstderr: {stderr}", out.status);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "the snippet's stats line and the workload's: {stdout}\nstderr: {stderr}");
    let first: Value =
        serde_json::from_str(lines[0]).unwrap_or_else(|e| panic!("the snippet printed ({e}): {}", lines[0]));
    assert_eq!(typed(&first).sqlite.as_ref().expect("the SQLite section").config.grid, [node.addr()], "{first}");
    let r: Value = serde_json::from_str(lines[1]).unwrap_or_else(|e| panic!("not JSON ({e}): {}", lines[1]));
    assert_eq!((&r["flushed"], &r["rows"]), (&Value::from("ok"), &Value::from(200)), "{r}");
    let s = typed(&r["stats"]);
    let c = s.cache();
    assert!(c.disk_writes >= 200, "{c:?}");
    assert!(c.l2_pushes > 0, "Python's database pushed nothing to the grid: {c:?}");
    assert!(c.l2_hits > 0, "Python's reads never hit the grid: {c:?}");
    assert!(stderr.trim().is_empty(), "unexpected stderr: {stderr}");

    // The control: the same program without loading the extension. The URI's VFS does not
    // exist, and a plain database answers the same rows with no waffle pragma.
    let plain = db.with_file_name("plain.db");
    let control = format!(
        "import sqlite3\ntry:\n    sqlite3.connect({uri:?}, uri=True)\n    print('opened')\nexcept sqlite3.OperationalError as e:\n    print(e)\n\
         conn = sqlite3.connect({plain:?})\n{PY_WORKLOAD}",
        uri = format!("file:{}?vfs=waffle", plain.display()),
        plain = plain.display().to_string(),
    );
    let out = run(Command::new(&python).arg("-c").arg(control), "");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "python3 failed: {}\nstdout: {stdout}\nstderr: {stderr}", out.status);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.first().copied(), Some("no such vfs: waffle"), "without the extension: {stdout}");
    let r: Value = serde_json::from_str(lines.get(1).copied().unwrap_or_default())
        .unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}\nstderr: {stderr}"));
    assert_eq!(r, serde_json::json!({"flushed": null, "rows": 200, "stats": null}), "plain SQLite");
}
