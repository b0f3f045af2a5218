//! `crash-writer <db> <grid> <report> <first>`: opens `db` through `waffle` on `grid` and commits
//! the crash workload's transactions `first`, `first + 1`, ... until killed, appending each one's
//! number to `report` once its COMMIT has returned. Prints `ready <cache id> <pid>` once open.
//! Run and SIGKILLed at random moments by `faults_crash.rs`.

use std::io::Write;
use std::path::Path;

use waffle_testkit::crash_workload::{params_for, transaction};
use waffle_testkit::db::{cache_id, open_waffle};

fn main() {
    let [db, grid, report, first] = waffle_testkit::child_args("crash-writer", ["db", "grid", "report", "first"]);
    let first: u64 = first.parse().expect("<first> is a transaction number");
    let conn = open_waffle(Path::new(&db), &params_for(&grid));
    // A small SQLite cache: big transactions spill pages into the file before COMMIT.
    conn.execute_batch("PRAGMA cache_size = 10; PRAGMA wal_autocheckpoint = 20;").unwrap();
    let mut report = std::fs::OpenOptions::new().append(true).open(report).unwrap();
    println!("ready {:016x} {}", cache_id(&conn), std::process::id());
    for n in first.. {
        transaction(&conn, n);
        // Reported only once COMMIT has returned: the parent may count on it.
        report.write_all(format!("{n}\n").as_bytes()).unwrap();
    }
}
