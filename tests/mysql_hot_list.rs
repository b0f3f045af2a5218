//! The MariaDB preload's hot list (crates/waffle-preload/src/hot_list.rs):
//! the stats thread writes the pages L1 holds by tablespace, a clean
//! shutdown keeps them, and the next server start preloads them from the
//! disk into L1 (never from the grid: every start is a new cache identity).
//! Checked: the list names the table's pages, the restart loads them when
//! InnoDB opens the table, nothing is asked of the grid, the data is right
//! (CHECK TABLE, the sum) and no grid copy or page check failed. And the
//! files beside the data (issue 19 item 4): a symlink planted at the list's
//! name is never followed (one warning, its target untouched, left alone),
//! and the list and the stats file get ibdata1's mode and the datadir's owner.

#[path = "mysql_support.rs"]
mod mysql_support;

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

use mysql_support::*;
use waffle_testkit::wait::wait_for;

const ROWS: u64 = 2000;

/// Lines of the list that name tablespace `name`.
fn listed(list: &Path, name: &str) -> usize {
    let text = std::fs::read_to_string(list).unwrap_or_default();
    text.lines().filter(|l| l.split_once('\t').is_some_and(|(_, n)| n == name)).count()
}

#[test]
fn the_next_server_start_preloads_the_listed_pages_from_disk() {
    let OneServer { turn: _turn, dir, node, data } = one_server("mysql-hot-list", 64);
    // InnoDB's own buffer pool dump and load off: its load would read the same pages at the
    // start (through L1), and this test is about waffle's list.
    let options = || {
        let mut o = waffle_options(&node.addr(), "16MiB", &[("WAFFLE_HOT_LIST_INTERVAL_MS", "300")]);
        o.extra_args.extend(
            ["--innodb-buffer-pool-dump-at-shutdown=0", "--innodb-buffer-pool-load-at-startup=0"].map(String::from),
        );
        o
    };
    // A symlink planted at the list's name, to a file outside the datadir.
    let list = data.join("waffle-hot.list");
    let victim = dir.path().join("victim");
    std::fs::write(&victim, b"the victim's bytes").unwrap();
    let before = (std::fs::read(&victim).unwrap(), std::fs::metadata(&victim).unwrap().mtime_nsec());
    std::os::unix::fs::symlink(&victim, &list).unwrap();
    let s = start(&data, options());
    assert_eq!(list, s.stats_path().with_file_name("waffle-hot.list"));
    create_padded_table(&s, ROWS, "i");
    // Read the table through a 6 MiB buffer pool: its pages pass through L1 (16 MiB: room
    // for them beside what InnoDB reads at start).
    for _ in 0..3 {
        s.sql("SELECT SUM(LENGTH(pad)) FROM w.t").unwrap();
    }
    let refused = "cannot write the hot list";
    wait_for(Duration::from_secs(20), "the list's write to refuse the symlink", || s.log().contains(refused));
    std::thread::sleep(Duration::from_millis(700)); // more ticks: still one warning
    let log = s.log();
    assert_eq!(log.lines().filter(|l| l.contains(refused) && l.contains("a symlink")).count(), 1, "{log}");
    assert!(log.contains("cannot use the hot list") && log.contains("[Warning] waffle:"), "{log}");
    let after = (std::fs::read(&victim).unwrap(), std::fs::metadata(&victim).unwrap().mtime_nsec());
    assert_eq!(after, before, "the symlink's target is never written");
    assert!(std::fs::symlink_metadata(&list).unwrap().file_type().is_symlink(), "and the link is left alone");
    std::fs::remove_file(&list).unwrap();
    wait_for(Duration::from_secs(20), "the hot list to name w/t", || listed(&list, "w/t") > 50);
    s.shutdown().unwrap();
    let kept = listed(&list, "w/t");
    assert!(kept > 50, "the shutdown kept the table's entries: {kept}");
    // Made as SQLite makes its journals: the data files' mode, the datadir's owner.
    let (ibdata, datadir) = (std::fs::metadata(data.join("ibdata1")).unwrap(), std::fs::metadata(&data).unwrap());
    for f in [&list, &data.join("waffle-stats.json")] {
        let m = std::fs::symlink_metadata(f).unwrap();
        assert!(m.file_type().is_file(), "{}", f.display());
        assert_eq!(m.mode() & 0o777, ibdata.mode() & 0o777, "{}: mode {:o}", f.display(), m.mode());
        assert_eq!((m.uid(), m.gid()), (datadir.uid(), datadir.gid()), "{}", f.display());
    }
    let names = std::fs::read_dir(&data).unwrap().filter_map(|e| e.ok()?.file_name().into_string().ok());
    let temps: Vec<String> = names.filter(|n| n.starts_with("waffle-") && n.contains(".tmp")).collect();
    assert!(temps.is_empty(), "no temporary file left: {temps:?}");
    eprintln!("ibdata1, the list and the stats file: mode {:o}", ibdata.mode() & 0o777);

    let s = start(&data, options());
    let before = stats_after(&s, "the stats file", |v| v["state"] == "running");
    assert_eq!(before["hot_list"]["trusted"], false, "{before}");
    // A point query opens the table (InnoDB opens tablespaces on first use); the reload follows.
    assert_eq!(s.sql("SELECT v FROM w.t WHERE id = 7").unwrap().trim(), "7");
    let after = stats_after(&s, "the reload", |v| stat(v, "hot_list.from_disk_pages") >= 50);
    let h = &after["hot_list"];
    assert_eq!((stat(&after, "hot_list.from_grid_pages"), stat(&after, "hot_list.grid_requests")), (0, 0), "{h}");
    assert!(stat(&after, "hot_list.disk_reads") < stat(&after, "hot_list.from_disk_pages"), "runs: {h}");
    assert!(stat(&after, "l1.pages") >= 50, "{after}");
    eprintln!("{kept} pages of w/t listed; at the restart: {h}");

    let total: u64 = s.sql("SELECT SUM(v) FROM w.t").unwrap().trim().parse().unwrap();
    assert_eq!(total, ROWS * (ROWS + 1) / 2);
    s.check_tables(&["w.t"]).unwrap();
    let end = s.wait_stats(Duration::from_secs(5), |_| true).unwrap();
    assert_eq!(sum(&end, "preload.innodb_rejects") + stat(&end, "l2_rejects_total"), 0, "{end}");
    assert_eq!(stat(&end, "preload.fallback_reads"), 0, "{end}");
    assert!(log_errors(&s, &[]).is_empty(), "{}", s.log());
    s.shutdown().unwrap();
}
