//! Node faults under a running MariaDB: three memcached nodes; during
//! sysbench oltp_read_write (4 threads) one node is killed and another hung
//! (SIGSTOP, then SIGCONT). Zero query errors; CHECK TABLE OK; the preload
//! saw the faults (nodes marked down, timeouts or I/O faults) and kept using
//! the grid; and the data is what a stock server reads from the same files.

#[path = "mysql_support.rs"]
mod mysql_support;

use std::time::{Duration, Instant};

use mysql_support::*;
use serde_json::Value;
use waffle_core::grid::NodeStatus;

/// `node` as the preload's stats show it (empty if they do not list it).
/// `node`'s status in the stats file (zeros while it is not listed).
fn node_in(v: &Value, node: &Node) -> NodeStatus {
    cache_of(v).nodes.into_iter().find(|n| n.addr == node.addr()).unwrap_or_default()
}

#[test]
fn a_killed_node_and_a_hung_node_cause_no_query_error() {
    let _serial = serial();
    let t0 = Instant::now();
    let dir = TempDir::new("faults");
    let mut a = start_node(64);
    let b = start_node(64);
    let c = start_node(64);
    let grid = grid_of(&[&a, &b, &c]);
    let data = fresh_datadir(&dir, "db");
    // The default 5 ms grid deadline: a hung node costs little.
    let s = start(&data, waffle_options(&grid, "1MiB", &[]));
    sysbench_prepare(&s, 2, 20_000);
    let args =
        sysbench_args(&s, 2, 20_000, &["--threads=4", "--time=14", "--report-interval=0", "oltp_read_write", "run"]);
    let mut bench = server::sysbench_spawn(tools(), &args).unwrap();
    // Every node in use: a fault of any of them then costs the preload something.
    stats_after(&s, "under load on every node", |v| {
        cache_of(v).l2_hits > 100 && [&a, &b, &c].iter().all(|n| node_in(v, n).requests > 0)
    });
    a.kill();
    eprintln!("killed node {}", a.addr());
    stats_after(&s, "the killed node marked down", |v| node_in(v, &a).marked_down > 0);
    b.pause();
    eprintln!("paused node {}", b.addr());
    stats_after(&s, "the hung node marked down", |v| node_in(v, &b).marked_down > 0);
    // Part of the scenario, not a wait: the node stays hung through several backoffs (100 ms,
    // doubling), so probes run into it too, before it answers again.
    std::thread::sleep(Duration::from_secs(2));
    b.resume();
    eprintln!("resumed node {}", b.addr());
    let out = server::wait_output(&mut bench, Duration::from_secs(120)).unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let r = server::parse_sysbench(&text);
    assert!(out.status.success(), "sysbench failed: {text}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(r.transactions > 0 && r.errors == 0, "{text}");
    eprintln!(
        "sysbench through the faults: {:.1} tps, p95 {:.2} ms, ignored errors {}",
        r.tps, r.latency_p95_ms, r.ignored_errors
    );

    let tables = sbtest_tables(2);
    s.check_tables(&refs(&tables)).unwrap();
    let before = s.stats().unwrap();
    let v =
        stats_after(&s, "after the run", |v| preload_of(v).preload.page_reads > preload_of(&before).preload.page_reads);
    let faults = cache_of(&v).l2_faults.total() + cache_of(&v).l2_skipped;
    let marked: u64 = cache_of(&v).nodes.iter().map(|n| n.marked_down).sum();
    assert!(faults > 0 && marked >= 2, "the faults were seen (faults+skipped {faults}, marked down {marked}): {v}");
    assert!(cache_of(&v).l2_hits > 0, "{v}");
    assert_eq!(preload_of(&v).preload.innodb_rejects.total(), 0, "{v}");
    let under_preload = s.checksums(&refs(&tables)).unwrap();
    let errors = log_errors(&s, &[]);
    assert!(errors.is_empty(), "the server logged errors: {errors:#?}");
    s.shutdown().unwrap();

    let stock = start(&data, stock_options(POOL));
    assert_eq!(stock.checksums(&refs(&tables)).unwrap(), under_preload, "checksums differ from the files' own");
    stock.shutdown().unwrap();
    eprintln!("total {:.1} s", t0.elapsed().as_secs_f64());
}
