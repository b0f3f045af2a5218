//! `point` and `short`: the smallest transactions, where what waffle adds per
//! transaction (locks, coherence checks, system calls) shows most (issue 33).
//!
//! Both run on sysbench's `sbtest` ([`super::oltp::build_sbtest`]). `point`:
//! one `SELECT c FROM sbtest WHERE id = ?` in autocommit (its own read
//! transaction: a rollback-journal database, as an application would have by
//! default). `short`: BEGIN; two point selects; an UPDATE of one row's `k`;
//! COMMIT (a WAL database with `synchronous=NORMAL`, as `tpcc`: a commit
//! syncs nothing, so the disk's flush time, which neither side changes, does
//! not hide what waffle adds).

use indicatif::ProgressBar;
use rand::rngs::SmallRng;
use rusqlite::Connection;

use super::oltp::{build_sbtest, Dist, KeyGen};
use super::workload::{set_busy_handler, transaction, Rate, Tally, Workload};

pub struct Point {
    pub rows: u64,
    /// `short`: a read-write transaction; else one autocommit select.
    pub write: bool,
    keys: KeyGen,
    dist: Dist,
}

impl Point {
    pub fn new(rows: u64, dist: Dist, write: bool) -> Point {
        let rows = rows.max(2);
        Point { rows, write, keys: KeyGen::new(&dist, rows), dist }
    }
}

fn select(conn: &Connection, id: i64) -> rusqlite::Result<()> {
    let mut point = conn.prepare_cached("SELECT c FROM sbtest WHERE id = ?1")?;
    let mut rows = point.query([id])?;
    while let Some(r) = rows.next()? {
        let _: rusqlite::types::ValueRef<'_> = r.get_ref(0)?;
    }
    Ok(())
}

impl Workload for Point {
    fn name(&self) -> &'static str {
        if self.write {
            "short"
        } else {
            "point"
        }
    }

    fn describe(&self) -> String {
        let what = if self.write {
            "BEGIN; 2 point selects; 1 UPDATE; COMMIT (WAL, synchronous=NORMAL)"
        } else {
            "1 point select in autocommit (rollback journal)"
        };
        format!("{what}, {} rows, {} keys", self.rows, self.dist.name())
    }

    fn unit(&self) -> (&'static str, Rate) {
        ("tps", Rate::PerSecond)
    }

    fn tag(&self) -> String {
        format!("sbtest rows={}", self.rows)
    }

    fn file_name(&self) -> String {
        let journal = if self.write { "wal" } else { "delete" };
        format!("sbtest-{}-{journal}.db", self.rows)
    }

    fn writes(&self) -> bool {
        self.write
    }

    fn build(&self, conn: &mut Connection, progress: &ProgressBar) -> rusqlite::Result<()> {
        build_sbtest(conn, self.rows, progress)
    }

    fn prewarm(&self) -> Vec<String> {
        vec!["SELECT sum(length(c)) FROM sbtest".into()]
    }

    fn prewarmed(&self) -> Option<Vec<&'static str>> {
        Some(vec!["sbtest"])
    }

    fn kinds(&self) -> Vec<&'static str> {
        vec![self.name()]
    }

    fn prepare(&self, conn: &Connection) -> rusqlite::Result<()> {
        if self.write {
            conn.pragma_update(None, "synchronous", "NORMAL")?;
        }
        set_busy_handler(conn)
    }

    fn run_one(&self, conn: &Connection, rng: &mut SmallRng, tally: &mut Tally) {
        let keys = &self.keys;
        let done = if self.write {
            transaction(conn, "BEGIN IMMEDIATE", tally, |conn| {
                select(conn, keys.next(rng) as i64)?;
                select(conn, keys.next(rng) as i64)?;
                let mut up = conn.prepare_cached("UPDATE sbtest SET k = k + 1 WHERE id = ?1")?;
                up.execute([keys.next(rng) as i64])?;
                Ok(true)
            })
            .is_some()
        } else {
            match select(conn, keys.next(rng) as i64) {
                Ok(()) => {
                    tally.done += 1;
                    true
                }
                Err(e) => {
                    tally.errors += 1;
                    if tally.errors <= 3 {
                        eprintln!("waffle bench: point select failed: {e}");
                    }
                    false
                }
            }
        };
        if done {
            tally.per_kind.resize(1, 0);
            tally.per_kind[0] += 1;
        }
    }
}
