//! The preload refuses what it cannot see: a server with native AIO
//! (io_uring or libaio, MariaDB's default) would read and write pages
//! without pread64/pwrite64. The preload says so in the error log, turns
//! itself off before the first tablespace is opened (its stats file says
//! `disabled` and why, rewritten on its interval, and `stopped` at the
//! server's exit), and the server works as if it were not there.

#[path = "mysql_support.rs"]
mod mysql_support;

use mysql_support::*;

#[test]
fn native_aio_is_refused_loudly_and_everything_passes_through() {
    let OneServer { turn: _turn, dir: _dir, node, data } = one_server("aio", 16);
    let mut opts = waffle_options(&node.addr(), "1MiB", &[]);
    opts.native_aio = true;
    let s = start(&data, opts);
    s.sql("CREATE DATABASE d; CREATE TABLE d.t (id INT PRIMARY KEY, v VARCHAR(100)) ENGINE=InnoDB; INSERT INTO d.t VALUES (1,'a'),(2,'b');")
        .unwrap();
    assert_eq!(s.sql("SELECT GROUP_CONCAT(v ORDER BY id) FROM d.t").unwrap().trim(), "a,b");
    let log = s.log();
    let refusal =
        log.lines().find(|l| l.contains("[ERROR] waffle:")).unwrap_or_else(|| panic!("no refusal in the log:\n{log}"));
    assert!(refusal.contains("native asynchronous I/O") && refusal.contains("--innodb-use-native-aio=0"), "{refusal}");
    assert!(!log.contains("waffle: caching InnoDB"), "the cache must not start:\n{log}");
    let v = s.wait_stats(std::time::Duration::from_secs(10), |_| true).expect("a stats file saying why");
    assert_eq!(v["state"], "disabled", "{v}");
    assert!(v["disabled_reason"].as_str().unwrap().contains("native asynchronous I/O"), "{v}");
    assert!(v.get("l1_hits").is_none(), "no cache was started: {v}");
    // Rewritten on its interval all the same (issue 32 item 2: written once, it read as stale).
    let first = v["updated_unix_ms"].as_u64().unwrap();
    let again = s.wait_stats(std::time::Duration::from_secs(60), |v| v["updated_unix_ms"].as_u64() > Some(first));
    assert_eq!(again.expect("the disabled stats file rewritten")["state"], "disabled");
    s.check_tables(&["d.t"]).unwrap();
    let path = s.stats_path();
    s.shutdown().unwrap();
    let last: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    assert_eq!((last["state"].as_str(), last["final"].as_bool()), (Some("stopped"), Some(true)), "{last}");
}
