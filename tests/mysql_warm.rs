//! `waffle warm --mysql`: a tablespace of a server under the preload warms on
//! request (the control file beside the stats file), while the server writes
//! it. Checked: the whole file was read in large reads, past the 1 MiB L1 its
//! pages went to the grid without a drop, the data is what the writes made it
//! (CHECK TABLE, the sum of what they wrote), no grid copy failed the InnoDB
//! page check; a request that names nothing cached fails and says so.

#[path = "mysql_support.rs"]
mod mysql_support;

use mysql_support::*;

const ROWS: u64 = 3000;

#[test]
fn a_tablespace_warms_on_request_while_the_server_writes_it() {
    let OneServer { turn: _turn, dir: _dir, node, data } = one_server("mysql-warm", 64);
    let s = start(&data, waffle_options(&node.addr(), "1MiB", &[]));
    create_padded_table(&s, ROWS, "0");
    let ibd = data.join("w").join("t.ibd");
    let before = stats_after(&s, "the stats file", |v| v["state"] == "active");

    let warmed = std::thread::scope(|scope| {
        let writer = scope.spawn(|| {
            for round in 1..=5u64 {
                s.sql(&format!("UPDATE w.t SET v = id * {round}")).unwrap();
            }
        });
        let warmed = waffle_bench::warm::run_mysql(&data, &["w/t".to_string()], false);
        writer.join().unwrap();
        warmed
    });
    let w = warmed.unwrap_or_else(|e| panic!("the warm: {e}\nlog:\n{}", s.log()));
    let pages = std::fs::metadata(&ibd).unwrap().len() / 16384;
    // The file may grow while the warm runs: planned is its size when the warm began.
    assert!(w.planned_pages > 100 && w.planned_pages <= pages, "{w:?}, the file has {pages} pages");
    assert_eq!(w.l1_pages + w.pushed_pages + w.skipped_pages + w.dropped_pages, w.planned_pages, "{w:?}");
    assert_eq!(w.dropped_pages, 0, "{w:?}");
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

    let e = waffle_bench::warm::run_mysql(&data, &["nope/*".to_string()], false).unwrap_err();
    assert!(e.contains("no open, cached tablespace matches"), "{e}");
    assert!(log_errors(&s, &[]).is_empty(), "{}", s.log());
    s.shutdown().unwrap();
}

fn sum_rejects(v: &serde_json::Value) -> u64 {
    sum(v, "preload.innodb_rejects") + stat(v, "l2_rejects_total")
}
