//! A crash under the preload: MariaDB SIGKILLed in the middle of sysbench
//! oltp_read_write (4 threads; a 6 MiB buffer pool, 1 MiB L1, two nodes that
//! keep every page pushed before the crash), restarted under the preload.
//!
//! - InnoDB recovers; CHECK TABLE is OK.
//! - The restarted server has a new cache identity (a fresh random id at
//!   every start), so the old copies, still in memcached, are never asked
//!   for: no `database` reject, and every grid hit afterwards is a page
//!   pushed after the restart.
//! - Nothing stale was served: the tables' checksums under the preload equal
//!   the checksums the same datadir gives a stock server afterwards.

#[path = "mysql_support.rs"]
mod mysql_support;

use std::time::{Duration, Instant};

use mysql_support::*;

#[test]
fn sigkill_during_read_write_recovers_and_serves_nothing_from_before() {
    let _serial = serial();
    let t0 = Instant::now();
    let dir = TempDir::new("crash");
    let a = start_node(64);
    let b = start_node(64);
    let grid = grid_of(&[&a, &b]);
    let data = fresh_datadir(&dir, "db");
    let opts = waffle_options(&grid, "1MiB", &[("WAFFLE_TIMEOUT_MS", "200")]);

    let mut s = start(&data, opts.clone());
    sysbench_prepare(&s, 2, 20_000);
    let args =
        sysbench_args(&s, 2, 20_000, &["--threads=4", "--time=60", "--report-interval=0", "oltp_read_write", "run"]);
    let mut bench = server::sysbench_spawn(tools(), &args).unwrap();
    let before =
        stats_after(&s, "under load", |v| cache_of(v).l2_hits > 200 && preload_of(v).preload.page_writes > 200);
    let old_id = before["cache_id"].as_str().unwrap().to_string();
    // The crash must come in the middle of writes: the preload has written pages since `before`
    // (the stats file is rewritten every second or so) and pushed some to the grid.
    stats_after(&s, "page writes going on", |v| {
        preload_of(v).preload.page_writes > preload_of(&before).preload.page_writes && cache_of(v).l2_pushes > 0
    });
    s.kill(); // SIGKILL: a crash in the middle of writes
    let _ = server::wait_output(&mut bench, Duration::from_secs(30)); // sysbench fails: its server is gone
    assert!(cache_of(&before).l2_pushes > 0);
    drop(s);

    let s = start(&data, opts);
    let v = stats_after(&s, "after the restart", |v| v["cache_id"].as_str().is_some_and(|id| id != old_id));
    let new_id = v["cache_id"].as_str().unwrap().to_string();
    assert_ne!(new_id, old_id, "a restart after a crash must not reuse the cache identity");
    let log = s.log();
    let recovery: Vec<&str> = log.lines().filter(|l| l.contains("recover") || l.contains("Recover")).collect();
    eprintln!("recovery lines:\n{}", recovery.join("\n"));
    assert!(log.contains("Starting crash recovery"), "InnoDB did not recover from a crash:\n{log}");
    let tables = sbtest_tables(2);
    s.check_tables(&refs(&tables)).unwrap();

    // Read everything again, through the grid, in the new incarnation.
    let ro = sysbench_args(&s, 2, 20_000, &["--threads=4", "--time=4", "--report-interval=0", "oltp_read_only", "run"]);
    let r = server::sysbench(tools(), &ro, Duration::from_secs(60)).unwrap();
    assert!(r.transactions > 0 && r.errors == 0, "{}", r.output);
    let under_preload = s.checksums(&refs(&tables)).unwrap();
    let v = stats_after(&s, "after reading", |v| cache_of(v).l2_hits > 0);
    assert_eq!(cache_of(&v).l2_rejects.database, 0, "an old incarnation's copy was even asked for: {v}");
    assert_eq!(preload_of(&v).preload.innodb_rejects.total(), 0, "{v}");
    let errors = log_errors(&s, &[]);
    assert!(errors.is_empty(), "the server logged errors: {errors:#?}");
    s.shutdown().unwrap();

    // The same datadir, stock: the same data.
    let stock = start(&data, stock_options(POOL));
    let plain = stock.checksums(&refs(&tables)).unwrap();
    assert_eq!(under_preload, plain, "checksums under the preload differ from the file's own");
    stock.check_tables(&refs(&tables)).unwrap();
    stock.shutdown().unwrap();
    eprintln!("total {:.1} s", t0.elapsed().as_secs_f64());
}
