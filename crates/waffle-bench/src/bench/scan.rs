//! `scan`: a full-table aggregate, again and again, over sysbench's table
//! (the same dataset as `oltp-read-only` of the same size). With the data
//! several times larger than L1 every scan reads most pages from below L1:
//! seed 004's weakness ("large aggregate scans 5-6x slower with Waffle").

use indicatif::ProgressBar;
use rand::rngs::SmallRng;
use rusqlite::Connection;

use super::oltp::{build_sbtest, OltpReadOnly};
use super::workload::{transaction, Rate, Tally, Workload};

pub struct Scan {
    /// The table (and its dataset) are oltp-read-only's.
    table: OltpReadOnly,
}

impl Scan {
    pub fn new(rows: u64) -> Scan {
        Scan { table: OltpReadOnly::new(rows, super::oltp::Dist::Uniform) }
    }
}

pub const SCAN_SQL: &str = "SELECT count(*), sum(k), sum(length(c)), sum(length(pad)) FROM sbtest";

impl Workload for Scan {
    fn name(&self) -> &'static str {
        "scan"
    }

    fn describe(&self) -> String {
        format!("full-table aggregate over sysbench's table, {} rows", self.table.rows)
    }

    fn unit(&self) -> (&'static str, Rate) {
        ("scans/min", Rate::PerMinute)
    }

    fn tag(&self) -> String {
        self.table.tag()
    }

    fn file_name(&self) -> String {
        self.table.file_name()
    }

    fn writes(&self) -> bool {
        false
    }

    fn build(&self, conn: &mut Connection, progress: &ProgressBar) -> rusqlite::Result<()> {
        build_sbtest(conn, self.table.rows, progress)
    }

    fn prewarm(&self) -> Vec<String> {
        vec![SCAN_SQL.into()]
    }

    fn prewarmed(&self) -> Option<Vec<&'static str>> {
        Some(vec!["sbtest"]) // not its index: the scan never reads it
    }

    fn kinds(&self) -> Vec<&'static str> {
        vec!["scan"]
    }

    fn run_one(&self, conn: &Connection, _rng: &mut SmallRng, tally: &mut Tally) {
        let done = transaction(conn, "BEGIN", tally, |conn| {
            let mut stmt = conn.prepare_cached(SCAN_SQL)?;
            let n: i64 = stmt.query_row([], |r| r.get(0))?;
            Ok(n >= 0)
        });
        if done.is_some() {
            tally.per_kind.resize(1, 0);
            tally.per_kind[0] += 1;
        }
    }
}
