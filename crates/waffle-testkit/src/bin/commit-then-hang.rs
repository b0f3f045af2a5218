//! `commit-then-hang <db> <grid> committed|in_transaction|again`: opens `db` (the 200 rows of
//! generation 1 of `warm_restart.rs`) through `waffle` on `grid`, commits a change (rows 1..=50
//! rewritten, 201..=300 added, generation 2), checks every row and pushes L1 to the grid. With
//! `in_transaction` it then also rewrites rows 100..=250 (generation 3) in a transaction it never
//! commits, its pages spilled into the file. With `again` (on what a `committed` child left) the
//! commit rewrites rows 51..=100 instead (generation 4). With `reads` it commits nothing: it reads
//! every row (generation 1) and pushes L1. Then prints `ready <cache id> <pid>` and waits to be
//! SIGKILLed by the test.

use std::path::PathBuf;
use std::time::Duration;

use rusqlite::params;
use waffle_testkit::db::{cache_id, flush, open_waffle};
use waffle_testkit::warm_restart::{after_child_commit, after_second_child_commit, check_rows, params_for, value};

fn main() {
    let [db, grid, mode] =
        waffle_testkit::child_args("commit-then-hang", ["db", "grid", "committed|in_transaction|again|reads"]);
    let (in_transaction, again) = match mode.as_str() {
        "committed" => (false, false),
        "in_transaction" => (true, false),
        "again" => (false, true),
        "reads" => (false, false),
        other => panic!("mode {other:?}: committed, in_transaction, again or reads"),
    };
    let conn = open_waffle(&PathBuf::from(db), &params_for(&grid));
    conn.execute_batch("PRAGMA cache_size = 10").unwrap();
    if mode == "reads" {
        check_rows(&conn, |id| value(id, 1), 200);
        flush(&conn);
        println!("ready {:016x} {}", cache_id(&conn), std::process::id());
        // Not a wait for a condition: the test kills this process as soon as it reads the line above.
        std::thread::sleep(Duration::from_secs(60));
        panic!("the crash test did not kill this child");
    }
    let tx = conn.unchecked_transaction().unwrap();
    if again {
        for id in 51..=100i64 {
            tx.execute("UPDATE t SET v = ? WHERE id = ?", params![value(id, 4), id]).unwrap();
        }
    } else {
        for id in 1..=50i64 {
            tx.execute("UPDATE t SET v = ? WHERE id = ?", params![value(id, 2), id]).unwrap();
        }
        for id in 201..=300i64 {
            tx.execute("INSERT INTO t VALUES (?, ?)", params![id, value(id, 2)]).unwrap();
        }
    }
    tx.commit().unwrap();
    let generation = if again { after_second_child_commit } else { after_child_commit };
    check_rows(&conn, |id| value(id, generation(id)), 300);
    flush(&conn);
    if in_transaction {
        // 150 one-page rows through a 10-page SQLite cache: dirty pages spill
        // into the database file before the commit that never comes.
        conn.execute_batch("BEGIN").unwrap();
        for id in 100..=250i64 {
            conn.execute("UPDATE t SET v = ? WHERE id = ?", params![value(id, 3), id]).unwrap();
        }
        flush(&conn);
    }
    println!("ready {:016x} {}", cache_id(&conn), std::process::id());
    // Not a wait for a condition: the test kills this process as soon as it reads the line above.
    std::thread::sleep(Duration::from_secs(60));
    panic!("the crash test did not kill this child");
}
