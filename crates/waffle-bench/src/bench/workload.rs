//! What a benchmark workload is: a dataset it builds once, the scans that warm
//! every cache, and one transaction at a time on a connection.

use indicatif::ProgressBar;
use rand::rngs::SmallRng;
use rusqlite::Connection;

/// What one thread counted while it ran transactions.
#[derive(Clone, Debug, Default)]
pub struct Tally {
    /// Transactions that completed (committed, or a read-only one done).
    pub done: u64,
    /// The unit the throughput counts, if not every transaction (TPC-C: New-Order commits).
    pub counted: u64,
    /// Transactions restarted because the database was busy (SQLite: one writer).
    pub retries: u64,
    /// Intended rollbacks (TPC-C: 1% of New-Order).
    pub rollbacks: u64,
    /// Transactions that failed for another reason.
    pub errors: u64,
    /// Completed transactions per type, in [`Workload::kinds`] order.
    pub per_kind: Vec<u64>,
}

impl Tally {
    pub fn add(&mut self, o: &Tally) {
        self.done += o.done;
        self.counted += o.counted;
        self.retries += o.retries;
        self.rollbacks += o.rollbacks;
        self.errors += o.errors;
        if self.per_kind.len() < o.per_kind.len() {
            self.per_kind.resize(o.per_kind.len(), 0);
        }
        for (a, b) in self.per_kind.iter_mut().zip(&o.per_kind) {
            *a += b;
        }
    }
}

/// How throughput is computed from a tally.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rate {
    /// `done` per second.
    PerSecond,
    /// `counted` per minute (NOTPM).
    CountedPerMinute,
    /// `done` per minute.
    PerMinute,
}

pub trait Workload: Sync {
    /// `oltp-read-only`, `tpcc`, `scan`.
    fn name(&self) -> &'static str;
    /// A one-line description with the parameters, for the output.
    fn describe(&self) -> String;
    /// The throughput unit (`tps`, `NOTPM`, `scans/min`) and how it is computed.
    fn unit(&self) -> (&'static str, Rate);
    /// The dataset's identity: a file with the same tag is reused.
    fn tag(&self) -> String;
    /// The database file's name (in the bench directory).
    fn file_name(&self) -> String;
    /// Whether transactions write (then each configuration runs on a fresh copy of the data).
    fn writes(&self) -> bool;
    /// Creates and fills the tables on an empty database (page size and journal already set).
    fn build(&self, conn: &mut Connection, progress: &ProgressBar) -> rusqlite::Result<()>;
    /// Statements that read every table and index once (the warm-up's first pass).
    fn prewarm(&self) -> Vec<String>;
    /// The tables and indexes [`Workload::prewarm`] reads, if not all of them
    /// (None: every page of the file): what the cache's working-set estimate is checked against.
    fn prewarmed(&self) -> Option<Vec<&'static str>> {
        None
    }
    /// Names of the transaction types, for per-type counts.
    fn kinds(&self) -> Vec<&'static str>;
    /// Sets up a connection for this workload (journal, busy handling).
    fn prepare(&self, _conn: &Connection) -> rusqlite::Result<()> {
        Ok(())
    }
    /// Runs one transaction on `conn`, counting into `tally`.
    fn run_one(&self, conn: &Connection, rng: &mut SmallRng, tally: &mut Tally);
}

/// Whether an error is SQLite saying another connection holds the lock.
pub fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e,
        rusqlite::Error::SqliteFailure(f, _)
            if matches!(f.code, rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

/// Runs `body` as one transaction opened with `begin`, retrying (counted) when
/// the database is busy. `body` returns Ok(true) to commit, Ok(false) to roll
/// back on purpose (counted as done and as a rollback).
pub fn transaction(
    conn: &Connection,
    begin: &str,
    tally: &mut Tally,
    mut body: impl FnMut(&Connection) -> rusqlite::Result<bool>,
) -> Option<bool> {
    const MAX_ATTEMPTS: u32 = 20;
    for _ in 0..MAX_ATTEMPTS {
        let result = conn.execute_batch(begin).and_then(|()| body(conn)).and_then(|commit| {
            conn.execute_batch(if commit { "COMMIT" } else { "ROLLBACK" })?;
            Ok(commit)
        });
        match result {
            Ok(commit) => {
                tally.done += 1;
                if !commit {
                    tally.rollbacks += 1;
                }
                return Some(commit);
            }
            Err(e) => {
                let _ = conn.execute_batch("ROLLBACK");
                if is_busy(&e) {
                    tally.retries += 1;
                    continue;
                }
                tally.errors += 1;
                if tally.errors <= 3 {
                    eprintln!("waffle bench: transaction failed: {e}");
                }
                return None;
            }
        }
    }
    tally.errors += 1;
    None
}

/// SQLite's one-writer lock, waited for in short sleeps (50 us doubling to
/// 1.6 ms; about 10 s in all before the statement gets SQLITE_BUSY and the
/// transaction is retried). SQLite's own busy_timeout sleeps whole
/// milliseconds, far longer than most write transactions here hold the lock.
pub fn set_busy_handler(conn: &Connection) -> rusqlite::Result<()> {
    fn wait(count: i32) -> bool {
        let us = 50u64 << count.clamp(0, 5);
        std::thread::sleep(std::time::Duration::from_micros(us));
        count < 6_500
    }
    conn.busy_handler(Some(wait))
}
