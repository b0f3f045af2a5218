//! The preload never costs mariadbd its file locks. InnoDB holds a POSIX
//! (fcntl) lock on ibdata1 and its tablespaces (os_file_lock), and the kernel
//! drops every POSIX lock a process holds on a file when the process closes
//! any descriptor of it: a descriptor the preload opened and closed on its
//! own (the hot list's reload, a warm) would release the server's locks.
//! Checked in /proc/<pid>/fdinfo (`posix_locks`): after the hot list's reload at a restart, and
//! after a warm, mariadbd still holds the locks it held before (the control:
//! the same server before any reload or warm holds them).

#[path = "mysql_support.rs"]
mod mysql_support;

use std::path::Path;
use std::time::Duration;

use mysql_support::*;
use waffle_testkit::posix_locks::posix_locks;
use waffle_testkit::wait::wait_for;

const ROWS: u64 = 2000;

/// The database files (of `files`, relative to `data`) that `pid` holds a POSIX lock on
/// (fdinfo, read whole per descriptor: /proc/locks can skip a held lock, `posix_locks`).
fn locked_files(pid: u32, data: &Path, files: &[&str]) -> Vec<String> {
    files.iter().filter(|f| !posix_locks(pid, &data.join(f)).is_empty()).map(|f| f.to_string()).collect()
}

/// Lines of the hot list that name tablespace `name`.
fn listed(list: &Path, name: &str) -> usize {
    let text = std::fs::read_to_string(list).unwrap_or_default();
    text.lines().filter(|l| l.split_once('\t').is_some_and(|(_, n)| n == name)).count()
}

const FILES: [&str; 2] = ["ibdata1", "w/t.ibd"];

fn hot_list_options(grid: &str) -> ServerOptions {
    let mut o = waffle_options(grid, "16MiB", &[("WAFFLE_HOT_LIST_INTERVAL_MS", "300")]);
    o.extra_args.extend(
        ["--innodb-buffer-pool-dump-at-shutdown=0", "--innodb-buffer-pool-load-at-startup=0"].map(String::from),
    );
    o
}

/// The files `s` holds locks on once it has read w.t: the control, before any reload or warm.
fn locks_before(s: &Server, data: &Path) -> Vec<String> {
    assert_eq!(s.sql("SELECT id FROM w.t WHERE id = 7").unwrap().trim(), "7");
    let pid = s.pid().unwrap();
    let held = locked_files(pid, data, &FILES);
    assert!(
        held.contains(&"ibdata1".to_string()),
        "control: mariadbd (pid {pid}) locks ibdata1: {held:?}\n{}",
        proc_locks()
    );
    held
}

fn proc_locks() -> String {
    std::fs::read_to_string("/proc/locks").unwrap_or_default()
}

#[test]
fn the_hot_list_reload_at_a_restart_keeps_the_servers_locks() {
    let OneServer { turn: _turn, dir: _dir, node, data } = one_server("mysql-locks-reload", 64);
    let s = start(&data, hot_list_options(&node.addr()));
    create_padded_table(&s, ROWS, "i");
    for _ in 0..3 {
        s.sql("SELECT SUM(LENGTH(pad)) FROM w.t").unwrap();
    }
    // No list at this start: nothing was reloaded, the control.
    let held = locks_before(&s, &data);
    let list = s.stats_path().with_file_name("waffle-hot.list");
    wait_for(Duration::from_secs(20), "the hot list to name w/t and ibdata1", || {
        listed(&list, "w/t") > 50 && listed(&list, "ibdata1") > 0
    });
    s.shutdown().unwrap();

    let s = start(&data, hot_list_options(&node.addr()));
    // The point query opens w/t (InnoDB opens tablespaces on first use); its reload follows ibdata1's.
    assert_eq!(s.sql("SELECT v FROM w.t WHERE id = 7").unwrap().trim(), "7");
    // Done: every listed tablespace was opened, read and let go.
    let after = stats_after(&s, "the reload", |v| v["hot_list"]["state"] == "done");
    assert!(stat(&after, "hot_list.from_disk_pages") >= 50, "{}", after["hot_list"]);
    let now = locked_files(s.pid().unwrap(), &data, &FILES);
    assert_eq!(now, held, "after the hot list's reload ({}) mariadbd's locks:\n{}", after["hot_list"], proc_locks());
    s.shutdown().unwrap();
}

#[test]
fn a_warm_keeps_the_servers_locks() {
    let OneServer { turn: _turn, dir: _dir, node, data } = one_server("mysql-locks-warm", 64);
    let s = start(&data, waffle_options(&node.addr(), "1MiB", &[]));
    create_padded_table(&s, ROWS, "0");
    let held = locks_before(&s, &data);
    let names = ["w/t".to_string(), "ibdata1".to_string()];
    let w = waffle_warm_client::mysql::warm(&data, &names, None).unwrap_or_else(|e| panic!("the warm: {e}"));
    assert!(w.planned_pages > 100, "{w:?}");
    let now = locked_files(s.pid().unwrap(), &data, &FILES);
    assert_eq!(now, held, "after a warm ({w:?}) mariadbd's locks:\n{}", proc_locks());
    let end = s.wait_stats(Duration::from_secs(5), |_| true).unwrap();
    assert_eq!(stat(&end, "preload.closed_file_skips"), 0, "nothing was closed meanwhile: {end}");
    s.check_tables(&["w.t"]).unwrap();
    s.shutdown().unwrap();
}
