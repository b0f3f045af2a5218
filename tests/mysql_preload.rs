//! The preload's mechanics, without MariaDB: waffle-testkit's `preload-file-io`
//! runs as a child under `LD_PRELOAD=libwaffle_preload.so` with
//! `WAFFLE_PRELOAD_ACTIVE=1`, a 64 KiB L1 (4 pages) and one memcached node,
//! and does to `db/t1.ibd` what a server could: whole-page pwrite64/pread64
//! (InnoDB-consistent full_crc32 pages), rewrites, a partial write, a page
//! that is not an InnoDB page, a dup (fcntl F_DUPFD_CLOEXEC) and the close of
//! the original, ftruncate and regrowth, a plain write() at the file
//! position, a fork whose child reads, and a read through another name.
//! Every read returns what the file holds (checked against a model and
//! against a read of the same inode under a name the preload ignores).
//!
//! Then the stats file (written at exit) shows each mechanism was exercised:
//! grid hits, the InnoDB page check refusing the non-InnoDB page's grid copy,
//! partial and unpositioned writes, the truncation, the segment dropped at
//! the last close; the tablespace `WAFFLE_TABLES` leaves out was not cached. And a process that is not the server (no
//! `WAFFLE_PRELOAD_ACTIVE`, a shell) is left alone: no stats file at all. A
//! preload that cannot start (a bad setting) keeps rewriting its stats file,
//! `disabled` with the reason, and says `stopped` at exit.

#[path = "mysql_support.rs"]
mod mysql_support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use mysql_support::*;
use waffle_testkit::artefact;
use waffle_testkit::innodb_page::PS;

fn run_child(dir: &Path, active: bool, grid: &str) -> String {
    let mut cmd = Command::new(artefact("preload-file-io"));
    cmd.arg(dir)
        .env("LD_PRELOAD", preload_so())
        .env("WAFFLE_GRID", grid)
        .env("WAFFLE_LOCAL", "64KiB")
        .env("WAFFLE_TIMEOUT_MS", "200")
        // Pinned off, as for the other end-to-end tests: on this fast disk the back-off's trial would keep the grid from being asked.
        .env("WAFFLE_GRID_BACKOFF", "off")
        .env("WAFFLE_STATS_FILE", dir.join("stats.json"))
        .env("WAFFLE_STATS_INTERVAL_MS", "100")
        .env("WAFFLE_TABLES", "db/t*, ibdata*")
        // The start's [Note] is the info level (the default, warn, says nothing in a healthy run).
        .env("WAFFLE_LOG", "info")
        .env_remove("WAFFLE_PRELOAD_ACTIVE")
        .stdin(Stdio::null());
    if active {
        cmd.env("WAFFLE_PRELOAD_ACTIVE", "1");
    }
    let out = server::wait_output(
        &mut cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap(),
        Duration::from_secs(120),
    )
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success() && stdout.contains("child ok"), "child failed ({}):\n{stdout}\n{stderr}", out.status);
    // Its last step on t1.ibd: a second name for it (the child did its work, not only say so).
    assert!(dir.join("db/t1.raw").is_file(), "the child never got to the end of its I/O:\n{stderr}");
    stderr
}

#[test]
fn every_mechanism_keeps_reads_equal_to_the_file() {
    let dir = TempDir::new("preload");
    let node = start_node(16);
    let log = run_child(dir.path(), true, &node.addr());
    assert!(log.contains("waffle: caching InnoDB tablespace pages"), "{log}");
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("stats.json")).expect("the stats file")).unwrap();
    assert_eq!(v["final"], true, "written at exit: {v}");
    assert_eq!(v["state"], "stopped", "a clean exit, as SQLite's last close says (issue 32 item 2): {v}");
    assert_eq!(cache_of(&v).page_bytes, PS as u64);
    assert!(cache_of(&v).l2_hits > 0 && cache_of(&v).l2_pushes > 0, "the grid was used: {v}");
    assert!(preload_of(&v).preload.innodb_rejects.checksum > 0, "the non-InnoDB page's grid copy was refused: {v}");
    assert_eq!(
        preload_of(&v).preload.innodb_rejects.page_number + preload_of(&v).preload.innodb_rejects.space_id,
        0,
        "{v}"
    );
    assert!(preload_of(&v).preload.partial_writes > 0, "{v}");
    assert!(preload_of(&v).preload.unpositioned_writes > 0, "{v}");
    assert!(preload_of(&v).preload.truncations > 0, "{v}");
    assert!(preload_of(&v).preload.segments_dropped > 0, "the last close dropped the file: {v}");
    assert_eq!(preload_of(&v).preload.tablespaces_open, 0, "{v}");
    let skipped = tablespace_of(&v, "db/skip");
    assert!(!skipped.cached && skipped.reads == 0 && skipped.opens == 1, "WAFFLE_TABLES: {skipped:?}");
    assert_eq!(v["tables"], serde_json::json!(["db/t*", "ibdata*"]), "{v}");
    assert_eq!(preload_of(&v).preload.fallback_reads, 0, "{v}");
    let t = tablespace_of(&v, "db/t1");
    assert!(t.l2_hits > 0 && t.reads > 0 && t.cached, "{t:?}");
    // Version rejects are expected (a copy pushed before a partial write or
    // write() is refused by its version), and the InnoDB check's refusals are
    // the core's `content` rejects (checked before L1); nothing else may be.
    assert_eq!(cache_of(&v).l2_rejects_total, cache_of(&v).l2_rejects.version + cache_of(&v).l2_rejects.content, "{v}");
    assert_eq!(cache_of(&v).l2_rejects.content, preload_of(&v).preload.innodb_rejects.checksum, "{v}");
    // The working set is in the stats file too: the child's pages, at the InnoDB page size,
    // against 64 KiB of L1 and the node's 16 MiB.
    let ws = &v["working_set"];
    let pages = cache_of(&v).working_set.pages_15m;
    // At most one page per page read or written (5% for the estimate's error).
    let notes = cache_of(&v).l1_hits + cache_of(&v).l1_misses + cache_of(&v).disk_writes;
    assert!(pages >= 2 && pages <= notes + notes / 20, "{pages} pages from {notes} reads and writes: {ws}");
    assert_eq!(cache_of(&v).working_set.bytes_15m, pages * PS as u64, "{ws}");
    assert_eq!(cache_of(&v).working_set.grid_bytes, Some(16 << 20), "{ws}");
    assert_eq!(cache_of(&v).working_set.held_bytes, (64 << 10) + (16 << 20), "{ws}");
}

#[test]
fn processes_that_are_not_the_server_are_left_alone() {
    let dir = TempDir::new("inert");
    // This binary without WAFFLE_PRELOAD_ACTIVE is not mariadbd: everything passes through.
    let log = run_child(dir.path(), false, "127.0.0.1:1");
    assert!(!log.contains("waffle:"), "{log}");
    assert!(!dir.join("stats.json").exists(), "an inert process wrote stats");
    // A shell and its tools, as the server could start them.
    let out = Command::new("sh")
        .args(["-c", "printf hello > x.ibd && cat x.ibd && cp x.ibd y.ibd && cat y.ibd"])
        .current_dir(dir.path())
        .env("LD_PRELOAD", preload_so())
        .env("WAFFLE_GRID", "127.0.0.1:1")
        .env("WAFFLE_STATS_FILE", dir.join("stats.json"))
        .env_remove("WAFFLE_PRELOAD_ACTIVE")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hellohello");
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!dir.join("stats.json").exists(), "a shell wrote stats");
}

/// The stats file's stamp as a reader judges it now, and the JSON (None: not there yet).
fn judged(path: &Path) -> Option<(waffle_core::stats::health::State, serde_json::Value)> {
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
    let s = waffle_core::stats::StatsSnapshot::from_json(&v).ok()?;
    Some((waffle_core::stats::health::judge_now(&s.stamp).state, v))
}

/// Issue 32 item 2: a disabled preload wrote its stats file once, so the documented staleness
/// alert fired for it and blamed the wrong cause.
#[test]
fn a_disabled_preload_keeps_rewriting_its_stats_file_and_stops_at_exit() {
    use waffle_core::stats::health::State;
    let dir = TempDir::new("disabled");
    std::fs::create_dir_all(dir.join("db")).unwrap();
    std::fs::write(dir.join("db/t1.ibd"), vec![0u8; PS]).unwrap();
    let stats = dir.join("stats.json");
    // A process that opens a tablespace, with a setting the preload refuses, and waits for its input.
    // Python, not a shell: dash ends with _exit(), which runs no atexit handler (mariadbd's exit does).
    let mut child = Command::new("/usr/bin/python3")
        .args(["-c", "import sys; f = open('db/t1.ibd', 'rb'); sys.stdin.read()"])
        .current_dir(dir.path())
        .env("LD_PRELOAD", preload_so())
        .env("WAFFLE_PRELOAD_ACTIVE", "1")
        .env("WAFFLE_LOCAL", "1")
        .env("WAFFLE_STATS_FILE", &stats)
        .env("WAFFLE_STATS_INTERVAL_MS", "50")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let first = std::cell::Cell::new(0u64);
    // Waited for: a read starved for 5 s after a write (a loaded machine) sees it stale, rightly.
    waffle_testkit::wait_for(Duration::from_secs(60), "a disabled stats file", || {
        let Some((state, v)) = judged(&stats) else { return false };
        first.set(v["updated_unix_ms"].as_u64().unwrap_or(0));
        state == State::Disabled && v["disabled_reason"].as_str().is_some_and(|r| r.contains("WAFFLE_LOCAL"))
    });
    waffle_testkit::wait_for(Duration::from_secs(60), "the disabled stats file rewritten", || {
        judged(&stats).is_some_and(|(state, v)| {
            state == State::Disabled && v["updated_unix_ms"].as_u64().unwrap_or(0) > first.get()
        })
    });
    drop(child.stdin.take()); // the shell's read ends: a clean exit
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (state, v) = judged(&stats).expect("the stats file");
    assert_eq!(
        (state, v["final"].as_bool(), v["state"].as_str()),
        (State::Stopped, Some(true), Some("stopped")),
        "{v}"
    );
    assert!(v["disabled_reason"].as_str().is_some_and(|r| r.contains("WAFFLE_LOCAL")), "{v}");
}
