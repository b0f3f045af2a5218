//! What `waffle stats` and its metrics say of a real writer (issue 32 items 2
//! and 5): a process holding a SQLite database open through waffle with a
//! stats file is `running`; SIGKILLed, its file says `crashed` and
//! `waffle_up 0`; closed cleanly, `stopped`; opened again (a new cache, a new
//! start time), the same series but `waffle_cache_info`'s.
//!
//! The writer is this test binary run again as a child (`holds_a_database_open`,
//! which does nothing unless [`CHILD`] is set): it links waffle and rusqlite,
//! as an application does.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use waffle_testkit::wait::wait_for;

/// Set in the child: the database and the stats file, a line feed between.
const CHILD: &str = "WAFFLE_STATS_STATE_CHILD";
const DEADLINE: Duration = Duration::from_secs(60);

/// The child's side: opens the database, says `ready`, closes it at a `close` line
/// (then says `closed`), and returns at the end of its input.
#[test]
fn holds_a_database_open() {
    let Ok(spec) = std::env::var(CHILD) else { return };
    let (db, stats) = spec.split_once('\n').expect("database\\nstats file");
    waffle::register().expect("register the waffle VFS");
    let uri = format!("file:{db}?vfs=waffle&waffle_stats_file={stats}&waffle_hot_list=off");
    let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE
        | rusqlite::OpenFlags::SQLITE_OPEN_CREATE
        | rusqlite::OpenFlags::SQLITE_OPEN_URI;
    let mut conn = Some(rusqlite::Connection::open_with_flags(uri, flags).expect("open through waffle"));
    let c = conn.as_ref().unwrap();
    c.execute_batch("CREATE TABLE IF NOT EXISTS t(k INTEGER PRIMARY KEY); INSERT INTO t VALUES (NULL);").unwrap();
    println!("ready {}", std::process::id());
    for line in std::io::stdin().lock().lines() {
        if line.unwrap().trim() == "close" {
            drop(conn.take());
            println!("closed");
        }
    }
}

/// A writer child: killed and reaped when dropped.
struct Writer {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Writer {
    fn start(db: &Path, stats: &Path) -> Writer {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "holds_a_database_open", "--nocapture", "--test-threads=1"])
            .env(CHILD, format!("{}\n{}", db.display(), stats.display()))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the writer");
        let (stdin, stdout) = (child.stdin.take(), BufReader::new(child.stdout.take().unwrap()));
        let mut w = Writer { child, stdin, stdout };
        w.expect_line("ready ");
        w
    }

    /// Reads the child's output up to a line that has `what` (the harness may print
    /// `test holds_a_database_open ... ` before it). A read blocks until the child writes or exits.
    fn expect_line(&mut self, what: &str) {
        let mut line = String::new();
        loop {
            line.clear();
            let n = self.stdout.read_line(&mut line).unwrap();
            assert!(n > 0, "the writer ended before saying {what:?}");
            if line.contains(what) {
                return;
            }
        }
    }

    fn close_database(&mut self) {
        writeln!(self.stdin.as_mut().unwrap(), "close").unwrap();
        self.expect_line("closed");
    }

    /// SIGKILL, and reaped: its pid is gone, not a zombie.
    fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("waffle-cli-stats-state-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(std::fs::canonicalize(&p).unwrap())
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn waffle_stats(args: &[&str], file: &Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_waffle")).arg("stats").args(args).arg(file).output().unwrap();
    assert!(out.status.success(), "waffle stats: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// The samples of `waffle stats --format prometheus FILE`: series -> value.
fn samples(file: &Path) -> Vec<(String, f64)> {
    let text = waffle_stats(&["--format", "prometheus"], file);
    let lines = text.lines().filter(|l| !l.starts_with('#'));
    lines.map(|l| l.rsplit_once(' ').map(|(k, v)| (k.to_string(), v.parse().unwrap())).unwrap()).collect()
}

fn value(all: &[(String, f64)], series: &str) -> Option<f64> {
    all.iter().find(|(k, _)| k == series).map(|(_, v)| *v)
}

/// The state `waffle stats FILE` shows (its first line: `FILE: sqlite, pid N, STATE (why), ...`).
fn state_shown(file: &Path) -> String {
    let text = waffle_stats(&[], file);
    let head = text.lines().next().unwrap_or_default().to_string();
    head.split(", ").nth(2).unwrap_or_default().to_string()
}

#[test]
fn a_sigkilled_writer_is_crashed_and_down() {
    let dir = TempDir::new("killed");
    let (db, stats) = (dir.0.join("app.db"), dir.0.join("stats.json"));
    let writer = Writer::start(&db, &stats);
    // Written by the open itself and every second: running while the child lives (waited for: a
    // reader starved for 5 s on a loaded machine would see it stale, rightly).
    let s = format!("source=\"{}\"", stats.display());
    let up = || value(&samples(&stats), &format!("waffle_up{{{s}}}")) == Some(1.0);
    wait_for(DEADLINE, "the writer seen running", || state_shown(&stats).starts_with("running (") && up());
    writer.kill();
    let shown = waffle_stats(&[], &stats);
    assert!(state_shown(&stats).starts_with("crashed (pid "), "{shown}");
    assert!(shown.contains("is gone, and it left no last write"), "{shown}");
    let all = samples(&stats);
    assert_eq!(value(&all, &format!("waffle_up{{{s}}}")), Some(0.0), "{all:?}");
    assert_eq!(value(&all, &format!("waffle_state{{{s},state=\"crashed\"}}")), Some(1.0), "{all:?}");
    assert_eq!(value(&all, &format!("waffle_state{{{s},state=\"running\"}}")), Some(0.0), "{all:?}");
    assert!(!all.iter().any(|(k, _)| k.starts_with("waffle_l1_hits")), "no last figures as current: {all:?}");
}

/// The series of a stopped writer's file, without `waffle_cache_info` (what changes at a start).
fn lasting_series(all: &[(String, f64)]) -> BTreeSet<String> {
    all.iter().map(|(k, _)| k.clone()).filter(|k| !k.starts_with("waffle_cache_info{")).collect()
}

fn cache_info(all: &[(String, f64)]) -> String {
    all.iter().find(|(k, _)| k.starts_with("waffle_cache_info{")).map(|(k, _)| k.clone()).expect("waffle_cache_info")
}

#[test]
fn a_clean_close_is_stopped_and_a_restart_keeps_every_series_but_the_cache_identity() {
    let dir = TempDir::new("restart");
    let (db, stats) = (dir.0.join("app.db"), dir.0.join("stats.json"));
    let s = format!("source=\"{}\"", stats.display());
    let mut runs = Vec::new();
    for _ in 0..2 {
        let mut writer = Writer::start(&db, &stats);
        writer.close_database();
        // Stopped while its process still runs: the last write says so, whatever the pid.
        let shown = waffle_stats(&[], &stats);
        assert!(state_shown(&stats).starts_with("stopped ("), "{shown}");
        let all = samples(&stats);
        assert_eq!(value(&all, &format!("waffle_up{{{s}}}")), Some(0.0), "{all:?}");
        assert_eq!(value(&all, &format!("waffle_state{{{s},state=\"stopped\"}}")), Some(1.0), "{all:?}");
        assert!(value(&all, &format!("waffle_start_time_seconds{{{s}}}")).is_some(), "{all:?}");
        runs.push(all);
        drop(writer);
    }
    assert_eq!(lasting_series(&runs[0]), lasting_series(&runs[1]), "a restart starts no new series");
    // The identity that a start may change is a value, and one info series of its own.
    let started = |all: &[(String, f64)]| value(all, &format!("waffle_start_time_seconds{{{s}}}")).unwrap();
    assert!(started(&runs[1]) >= started(&runs[0]), "{runs:?}");
    assert!(cache_info(&runs[1]).contains("cache_id=\""), "{runs:?}");
    // Another spelling of the same file is the same source.
    let other = dir.0.join(".").join("stats.json");
    let again = samples(&other);
    assert_eq!(lasting_series(&again), lasting_series(&runs[1]));
}
