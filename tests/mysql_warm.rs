//! `waffle warm --mysql`: a tablespace of a server under the preload warms on
//! request (the control file beside the stats file), while the server writes
//! it. Checked: the whole file was read in large reads, past the 1 MiB L1 its
//! pages went to the grid without a drop, the data is what the writes made it
//! (CHECK TABLE, the sum of what they wrote), no grid copy failed the InnoDB
//! page check; a request that names nothing cached fails and says so.
//! After a restart (InnoDB opens a table at its first use): a warm of tables
//! not opened yet warms nothing and names them (it failed before with "no
//! open, cached tablespace matches"), one of a table opened and one not warms
//! the first and names the second; the time a warm reports is the time the
//! command took (it said the server's reading time: "0.0 s" for 1.2 s).

#[path = "mysql_support.rs"]
mod mysql_support;

use std::time::Instant;

use mysql_support::*;

const ROWS: u64 = 3000;

#[test]
fn a_tablespace_warms_on_request_while_the_server_writes_it() {
    let OneServer { turn: _turn, dir: _dir, node, data } = one_server("mysql-warm", 64);
    // The warm's accounting is under test, not the default 5 ms deadline: beside load a push
    // that misses it is "lost" (not stored), as designed (CI-like run 1 of session 17).
    let s = start(&data, waffle_options(&node.addr(), "1MiB", &[("WAFFLE_TIMEOUT_MS", "2000")]));
    create_padded_table(&s, ROWS, "0");
    let ibd = data.join("w").join("t.ibd");
    let before = stats_after(&s, "the stats file", |v| v["state"] == "running");

    let warmed = std::thread::scope(|scope| {
        let writer = scope.spawn(|| {
            for round in 1..=5u64 {
                s.sql(&format!("UPDATE w.t SET v = id * {round}")).unwrap();
            }
        });
        let warmed = waffle_warm_client::mysql::warm(&data, &["w/t".to_string()], None);
        writer.join().unwrap();
        warmed
    });
    let w = warmed.unwrap_or_else(|e| panic!("the warm: {e}\nlog:\n{}", s.log()));
    let pages = std::fs::metadata(&ibd).unwrap().len() / 16384;
    // The file may grow while the warm runs: planned is its size when the warm began.
    assert!(w.planned_pages > 100 && w.planned_pages <= pages, "{w:?}, the file has {pages} pages");
    assert_eq!(w.l1_pages + w.queued_pages + w.skipped_pages + w.dropped_pages, w.planned_pages, "{w:?}");
    assert_eq!(w.dropped_pages, 0, "{w:?}");
    // Done means settled: the grid stored what the warm queued, unless the writes took some back.
    assert_eq!(w.not_stored_pages, 0, "{w:?}");
    assert_eq!(w.pushed_pages + w.unsettled_pages, w.queued_pages, "{w:?}");
    assert!(w.l1_pages <= 64, "1 MiB of L1 holds 64 pages of 16 KiB: {w:?}");
    assert!(w.pushed_pages > w.planned_pages / 2, "past L1 the pages went to the grid: {w:?}");
    assert!(w.disk_reads * 8 <= w.planned_pages, "large reads: {w:?}");
    let after =
        stats_after(&s, "the pushes", |v| stat(v, "l2_pushes") >= stat(&before, "l2_pushes") + w.pushed_pages / 2);

    let sum: u64 = s.sql("SELECT SUM(v) FROM w.t").unwrap().trim().parse().unwrap();
    assert_eq!(sum, 5 * ROWS * (ROWS + 1) / 2, "every row holds the last write");
    s.check_tables(&["w.t"]).unwrap();
    // No copy the warm placed was refused. Version rejects are the one kind a
    // loaded machine may add: a push that failed (node timed out) left the page
    // marked while an older copy of it, written since, stayed on the node; the
    // version check refuses it, as designed (tests/faults_nodes.rs).
    let version_rejects = stat(&after, "l2_rejects.version");
    assert_eq!(sum_rejects(&after) - version_rejects, 0, "{after}");
    if version_rejects > 0 {
        assert!(stat(&after, "l2_push_failures") > 0, "version rejects without a failed push: {after}");
    }
    assert_eq!(stat(&after, "preload.fallback_reads"), 0, "{after}");

    let e = waffle_warm_client::mysql::warm(&data, &["nope/*".to_string()], None).unwrap_err();
    assert!(e.contains("no cached tablespace matches nope/*"), "{e}");
    assert!(log_errors(&s, &[]).is_empty(), "{}", s.log());
    s.shutdown().unwrap();
}

fn sum_rejects(v: &serde_json::Value) -> u64 {
    sum(v, "preload.innodb_rejects") + stat(v, "l2_rejects_total")
}

#[test]
fn after_a_restart_the_warm_names_what_innodb_has_not_opened_and_its_time_is_true() {
    let OneServer { turn: _turn, dir: _dir, node, data } = one_server("mysql-warm-restart", 64);
    let s = start(&data, waffle_options(&node.addr(), "4MiB", &[]));
    create_padded_table(&s, ROWS, "0");
    s.sql("CREATE TABLE w.u (id INT PRIMARY KEY) ENGINE=InnoDB; INSERT INTO w.u VALUES (1), (2)").unwrap();
    // Nothing left for InnoDB to do on them after the restart (purge, statistics), which would open them.
    s.sql("ANALYZE TABLE w.t, w.u; SET GLOBAL innodb_fast_shutdown = 0").unwrap();
    s.shutdown().unwrap();
    // The production tick (1 s): a request waits up to that long before the server takes it. No
    // buffer pool load at startup: it would open the tablespaces of the pages it loads.
    // A 2 s deadline: the test counts what the warm stored, and at the default 5 ms a loaded
    // machine lost a 64-page pipeline to it (rightly counted "lost", not stored).
    let env = [("WAFFLE_STATS_INTERVAL_MS", "1000"), ("WAFFLE_TIMEOUT_MS", "2000")];
    let mut options = waffle_options(&node.addr(), "4MiB", &env);
    options.extra_args.push("--innodb-buffer-pool-load-at-startup=0".into());
    let s = start(&data, options);
    stats_after(&s, "the new server's stats", |v| v["pid"].as_u64() == s.pid().map(u64::from));

    // Nothing of w is open yet: nothing warmed, and the error names both tables and why.
    let e = waffle_warm_client::mysql::warm(&data, &["w/*".to_string()], None).unwrap_err();
    assert!(e.starts_with("nothing warmed: 2 not warmed: w/t, w/u (InnoDB has not opened it yet"), "{e}");
    assert!(e.contains("SELECT 1 FROM db.t LIMIT 1"), "says how to open them: {e}");

    // w.t opened (a statement used it), w.u not: the first is warmed, the second named.
    s.sql("SELECT 1 FROM w.t LIMIT 1").unwrap();
    let (stalls, t0) = (waffle_testkit::stall::StallMeter::start(), Instant::now());
    let w = waffle_warm_client::mysql::warm(&data, &["w/*".to_string()], None).unwrap();
    let wall = t0.elapsed().as_secs_f64();
    // What the machine added to the command's own steps (a starved process), measured.
    let stall = stalls.stop().as_secs_f64();
    assert!(w.read_pages > 100, "w/t was read: {w:?}");
    assert_eq!(w.skipped_targets, [("w/u".to_string(), waffle_preload_not_opened())], "{w:?}");
    assert!(w.summary().contains("1 not warmed: w/u (InnoDB has not opened it yet"), "{}", w.summary());
    // The time it reports is the command's, from the request: not the server's reading alone.
    assert!(
        w.seconds <= wall && wall - w.seconds < 0.15 + 4.0 * stall,
        "reported {:.3} s, took {wall:.3} s (stalls up to {stall:.3} s): {w:?}",
        w.seconds
    );
    assert!(w.warm_seconds <= w.seconds, "{w:?}");
    assert!(w.l1_pages + w.pushed_pages > 0 && w.unstored_pages() == 0, "{w:?}");
    assert!(log_errors(&s, &[]).is_empty(), "{}", s.log());
    s.shutdown().unwrap();
}

/// The reason the preload gives for a tablespace InnoDB has not opened (waffle-preload's warm.rs).
fn waffle_preload_not_opened() -> String {
    "InnoDB has not opened it yet (it opens a table at its first use)".to_string()
}
