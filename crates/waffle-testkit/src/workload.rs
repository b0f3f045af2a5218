//! The differential workload: one seeded random stream of SQL statements run
//! on a plain database (SQLite's default VFS) and on one through `waffle`,
//! every statement's outcome compared (rows, row counts, errors).
//!
//! [`Workload`] generates the statements (it never looks at results, so both
//! databases get exactly the same ones); [`Differential`] holds the two
//! connections and runs, compares, checks integrity and dumps. Used by
//! `differential.rs` (the matrix of journal modes and page sizes) and by the
//! `faults_*.rs` tests (the same check while a fault is injected).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};
use rusqlite::types::Value;
use rusqlite::Connection;
use waffle_core::stats::CacheSnapshot;

use crate::db::{cache_stats, drop_pager_cache, open_plain, open_waffle, stats};
use crate::soak::soak_seed;
use crate::temp_dir::TempDir;

/// One statement of the workload.
#[derive(Debug, Clone)]
pub enum Op {
    Exec(String, Vec<Value>),
    Query(String, Vec<Value>),
}

/// What a statement did, compared between the two databases.
#[derive(Debug, PartialEq)]
pub enum Outcome {
    Changed(usize),
    Rows(Vec<Vec<Value>>),
    Error(String),
}

pub fn apply(conn: &Connection, op: &Op) -> Outcome {
    match op {
        Op::Exec(sql, params) => match conn.execute(sql, rusqlite::params_from_iter(params.iter())) {
            Ok(n) => Outcome::Changed(n),
            Err(e) => Outcome::Error(e.to_string()),
        },
        Op::Query(sql, params) => match query(conn, sql, params) {
            Ok(rows) => Outcome::Rows(rows),
            Err(e) => Outcome::Error(e.to_string()),
        },
    }
}

pub fn query(conn: &Connection, sql: &str, params: &[Value]) -> rusqlite::Result<Vec<Vec<Value>>> {
    let mut stmt = conn.prepare(sql)?;
    let cols = stmt.column_count();
    let mut rows = stmt.query(rusqlite::params_from_iter(params.iter()))?;
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        out.push((0..cols).map(|i| row.get::<_, Value>(i)).collect::<rusqlite::Result<Vec<_>>>()?);
    }
    Ok(out)
}

/// The workload generator. It never looks at results, so both databases get
/// exactly the same statements.
pub struct Workload {
    rng: SmallRng,
    page_size: usize,
    next_id: i64,
    extra_columns: usize,
    t2_exists: bool,
    in_txn: bool,
}

impl Workload {
    pub fn new(seed: u64, page_size: usize) -> Workload {
        Workload {
            rng: SmallRng::seed_from_u64(seed),
            page_size,
            next_id: 1,
            extra_columns: 0,
            t2_exists: false,
            in_txn: false,
        }
    }

    /// The caller committed the open transaction: the next statements start outside one.
    pub fn committed(&mut self) {
        self.in_txn = false;
    }

    /// Whether the last statement left a transaction open.
    pub fn in_txn(&self) -> bool {
        self.in_txn
    }

    fn id(&mut self) -> i64 {
        self.rng.gen_range(1..self.next_id.max(2))
    }

    fn blob(&mut self) -> Value {
        let len = if self.rng.gen_bool(0.2) {
            // Spans overflow pages: more than a page, up to three.
            self.rng.gen_range(self.page_size + 1..=3 * self.page_size)
        } else {
            self.rng.gen_range(0..400)
        };
        let mut b = vec![0u8; len];
        self.rng.fill_bytes(&mut b);
        Value::Blob(b)
    }

    fn text(&mut self) -> Value {
        let len = self.rng.gen_range(0..120);
        Value::Text((0..len).map(|_| self.rng.gen_range(b'a'..=b'z') as char).collect())
    }

    fn int(&mut self, max: i64) -> Value {
        Value::Integer(self.rng.gen_range(0..max))
    }

    pub fn next_op(&mut self) -> Op {
        use Op::*;
        let roll = self.rng.gen_range(0..1000);
        match roll {
            // inserts
            0..=239 => {
                let id = self.next_id;
                self.next_id += 1;
                let (k, s, b) = (self.int(1000), self.text(), self.blob());
                Exec("INSERT INTO t1(id, k, s, b) VALUES (?, ?, ?, ?)".into(), vec![Value::Integer(id), k, s, b])
            }
            // updates
            240..=319 => {
                let (lo, k, s) = (self.id(), self.int(1000), self.text());
                let hi = lo + self.rng.gen_range(0..20);
                Exec("UPDATE t1 SET k = ?, s = ? WHERE id BETWEEN ? AND ?".into(), vec![k, s, lo.into(), hi.into()])
            }
            320..=379 => {
                let (id, b) = (self.id(), self.blob());
                Exec("UPDATE t1 SET b = ? WHERE id = ?".into(), vec![b, id.into()])
            }
            380..=394 if self.extra_columns > 0 => {
                let c = self.rng.gen_range(1..=self.extra_columns);
                let (v, m) = (self.text(), self.int(7));
                Exec(format!("UPDATE t1 SET c{c} = ? WHERE id % 7 = ?"), vec![v, m])
            }
            // deletes
            395..=434 => {
                let lo = self.id();
                let hi = lo + self.rng.gen_range(0..8);
                Exec("DELETE FROM t1 WHERE id BETWEEN ? AND ?".into(), vec![lo.into(), hi.into()])
            }
            435..=444 => {
                let m = self.int(97);
                Exec("DELETE FROM t1 WHERE k % 97 = ?".into(), vec![m])
            }
            // point selects
            445..=574 => {
                let id = self.id();
                Query("SELECT * FROM t1 WHERE id = ?".into(), vec![id.into()])
            }
            575..=624 => {
                let k = self.int(1000);
                Query("SELECT id, k, s, length(b), hex(substr(b, -16)) FROM t1 WHERE k = ? ORDER BY id".into(), vec![k])
            }
            // range selects
            625..=709 => {
                let lo = self.id();
                let hi = lo + self.rng.gen_range(0..40);
                Query("SELECT * FROM t1 WHERE id BETWEEN ? AND ? ORDER BY id".into(), vec![lo.into(), hi.into()])
            }
            710..=744 => Query(
                "SELECT count(*), sum(k), sum(length(b)), max(id), total(length(s)), \
                 sum(unicode(substr(b, length(b) / 2, 1))) FROM t1"
                    .into(),
                vec![],
            ),
            745..=764 => {
                let lo = self.int(1000);
                Query(
                    "SELECT k, count(*), sum(length(b)) FROM t1 WHERE k >= ? GROUP BY k ORDER BY k LIMIT 30".into(),
                    vec![lo],
                )
            }
            // a second table
            765..=809 if self.t2_exists => {
                let lo = self.id();
                let hi = lo + self.rng.gen_range(0..30);
                let pad = self.blob();
                Exec(
                    "INSERT INTO t2(a, c, pad) SELECT s, k, ? FROM t1 WHERE id BETWEEN ? AND ?".into(),
                    vec![pad, lo.into(), hi.into()],
                )
            }
            810..=834 if self.t2_exists => {
                let off = self.int(200);
                Query("SELECT rowid, a, c, length(pad) FROM t2 ORDER BY rowid LIMIT 50 OFFSET ?".into(), vec![off])
            }
            835..=844 if self.t2_exists => {
                let c = self.int(1000);
                Exec("DELETE FROM t2 WHERE c < ?".into(), vec![c])
            }
            // schema changes
            845..=879 => {
                let sql = match self.rng.gen_range(0..7) {
                    0 => "CREATE INDEX IF NOT EXISTS t1_k ON t1(k)".to_string(),
                    1 => "DROP INDEX IF EXISTS t1_k".to_string(),
                    2 => "CREATE INDEX IF NOT EXISTS t1_s ON t1(s, k)".to_string(),
                    3 => "DROP INDEX IF EXISTS t1_s".to_string(),
                    4 if self.extra_columns < 5 => {
                        self.extra_columns += 1;
                        format!(
                            "ALTER TABLE t1 ADD COLUMN c{} TEXT DEFAULT 'x{}'",
                            self.extra_columns, self.extra_columns
                        )
                    }
                    5 => {
                        self.t2_exists = false;
                        "DROP TABLE IF EXISTS t2".to_string()
                    }
                    _ => {
                        self.t2_exists = true;
                        "CREATE TABLE IF NOT EXISTS t2(a TEXT, c INTEGER, pad BLOB)".to_string()
                    }
                };
                Exec(sql, vec![])
            }
            // VACUUM (outside a transaction: it would fail inside one, identically)
            880..=889 if !self.in_txn => Exec("VACUUM".into(), vec![]),
            // transactions
            890..=949 if !self.in_txn => {
                self.in_txn = true;
                Exec("BEGIN".into(), vec![])
            }
            890..=969 if self.in_txn => {
                self.in_txn = false;
                if self.rng.gen_bool(0.4) {
                    Exec("ROLLBACK".into(), vec![])
                } else {
                    Exec("COMMIT".into(), vec![])
                }
            }
            // everything else: another insert of a big row (overflow chains)
            _ => {
                let id = self.next_id;
                self.next_id += 1;
                let k = self.int(1000);
                let len = self.rng.gen_range(self.page_size..4 * self.page_size);
                let mut b = vec![0u8; len];
                self.rng.fill_bytes(&mut b);
                Exec(
                    "INSERT INTO t1(id, k, s, b) VALUES (?, ?, 'big', ?)".into(),
                    vec![Value::Integer(id), k, Value::Blob(b)],
                )
            }
        }
    }
}

pub fn setup(conn: &Connection, journal: &str, page_size: usize) {
    conn.execute_batch(&format!("PRAGMA page_size = {page_size}")).unwrap();
    let mode: String = conn.query_row(&format!("PRAGMA journal_mode = {journal}"), [], |r| r.get(0)).unwrap();
    assert_eq!(mode, journal, "journal_mode");
    conn.execute_batch(
        "PRAGMA cache_size = 8;
         PRAGMA synchronous = OFF;
         PRAGMA secure_delete = ON;
         CREATE TABLE t1(id INTEGER PRIMARY KEY, k INTEGER, s TEXT, b BLOB);",
    )
    .unwrap();
    let ps: i64 = conn.query_row("PRAGMA page_size", [], |r| r.get(0)).unwrap();
    assert_eq!(ps as usize, page_size);
}

/// Every table's rows and the schema, in a fixed order.
pub fn dump(conn: &Connection) -> Vec<(String, Vec<Vec<Value>>)> {
    let schema = query(conn, "SELECT type, name, tbl_name, sql FROM sqlite_schema ORDER BY type, name", &[]).unwrap();
    let mut out = vec![("sqlite_schema".to_string(), schema.clone())];
    for row in &schema {
        if let (Value::Text(t), Value::Text(name)) = (&row[0], &row[1]) {
            if t == "table" {
                let rows = query(conn, &format!("SELECT rowid, * FROM \"{name}\" ORDER BY rowid"), &[]).unwrap();
                out.push((name.clone(), rows));
            }
        }
    }
    out
}

pub fn integrity(conn: &Connection) -> Vec<Vec<Value>> {
    query(conn, "PRAGMA integrity_check", &[]).unwrap()
}

pub fn describe(op: &Op) -> String {
    let (sql, params) = match op {
        Op::Exec(s, p) | Op::Query(s, p) => (s, p),
    };
    let params: Vec<String> = params
        .iter()
        .map(|v| match v {
            Value::Blob(b) => format!("blob({})", b.len()),
            Value::Text(t) if t.len() > 20 => format!("text({})", t.len()),
            other => format!("{other:?}"),
        })
        .collect();
    format!("{sql} {params:?}")
}

pub fn short(o: &Outcome) -> String {
    let s = format!("{o:?}");
    if s.len() > 600 {
        format!("{}... ({} chars)", &s[..600], s.len())
    } else {
        s
    }
}

// ---------------------------------------------------------------- the harness

/// How long one statement took on the plain database and through `waffle`.
#[derive(Clone, Copy, Debug)]
pub struct Took {
    pub plain: Duration,
    pub waffle: Duration,
}

impl Took {
    /// The time `waffle` added: what the cache cost this statement, with the
    /// statement's own work (and most of a loaded machine's stalls, which hit
    /// both sides alike) taken out.
    pub fn added(&self) -> Duration {
        self.waffle.saturating_sub(self.plain)
    }
}

/// A plain database and a `waffle` one running the same workload, compared
/// statement by statement. Panics (with the statement, both outcomes and the
/// cache's stats) at the first difference. Both files are in a temp dir of
/// its own, removed when it is dropped.
pub struct Differential {
    pub plain: Connection,
    pub cached: Connection,
    pub work: Workload,
    pub tag: String,
    pub page_size: usize,
    pub journal: String,
    pub plain_path: PathBuf,
    pub waffle_path: PathBuf,
    pub tally: Tally,
    /// Holds both files; declared last, so it is removed after they are closed.
    dir: TempDir,
}

/// What a differential run did so far.
#[derive(Clone, Debug, Default)]
pub struct Tally {
    /// Statements run.
    pub ops: usize,
    /// Rows returned by queries and compared.
    pub rows_compared: usize,
    /// Statements that returned an error, identically on both (e.g. none
    /// expected: the workload avoids them). An error from the cache alone is a
    /// difference and fails at once.
    pub errors: usize,
    /// Full checks done (integrity and dumps of both, compared).
    pub checks: usize,
    /// The slowest statement on the `waffle` side, and what it was.
    pub slowest: Duration,
    pub slowest_op: String,
    /// The errors both sides returned, by message, with their counts.
    pub error_kinds: std::collections::BTreeMap<String, usize>,
}

impl Differential {
    /// Opens `plain.db` and `waffle.db` in a new temp dir named after `name`
    /// (the latter through `waffle` with `params`) and creates the workload's
    /// table in `journal` mode. The seed is varied by `WAFFLE_SOAK_SEED` (see
    /// [`soak_seed`]).
    pub fn open(name: &str, journal: &str, page_size: usize, seed: u64, params: &[(&str, &str)]) -> Differential {
        let seed = soak_seed(seed);
        let dir = TempDir::new(name);
        let plain_path = dir.join("plain.db");
        let waffle_path = dir.join("waffle.db");
        let plain = open_plain(&plain_path);
        let cached = open_waffle(&waffle_path, params);
        setup(&plain, journal, page_size);
        setup(&cached, journal, page_size);
        Differential {
            plain,
            cached,
            work: Workload::new(seed, page_size),
            tag: format!("[{journal} {page_size} seed {seed:#x}]"),
            page_size,
            journal: journal.to_string(),
            plain_path,
            waffle_path,
            tally: Tally::default(),
            dir,
        }
    }

    /// [`open`](Self::open) with the cache every differential test uses: a 16 KiB L1 (so nearly
    /// every read goes below it) over `grid`, each request given `timeout_ms`.
    pub fn over_grid(
        name: &str,
        journal: &str,
        page_size: usize,
        seed: u64,
        grid: &str,
        timeout_ms: u32,
    ) -> Differential {
        let timeout_ms = timeout_ms.to_string();
        let params = [("waffle_grid", grid), ("waffle_local", "16KiB"), ("waffle_timeout_ms", timeout_ms.as_str())];
        Differential::open(name, journal, page_size, seed, &params)
    }

    /// Runs `op` on both databases and compares. Returns the time each side took.
    pub fn step(&mut self, op: &Op) -> Took {
        let t0 = Instant::now();
        let a = apply(&self.plain, op);
        let plain = t0.elapsed();
        let t0 = Instant::now();
        let b = apply(&self.cached, op);
        let took = t0.elapsed();
        if took > self.tally.slowest {
            self.tally.slowest = took;
            self.tally.slowest_op = describe(op);
        }
        if a != b {
            let s = stats(&self.cached);
            panic!(
                "{} op {} gave different results\nop: {}\nplain:  {}\nwaffle: {}\nstats: {s}",
                self.tag,
                self.tally.ops,
                describe(op),
                short(&a),
                short(&b)
            );
        }
        match &a {
            Outcome::Rows(r) => self.tally.rows_compared += r.len(),
            Outcome::Error(e) => {
                self.tally.errors += 1;
                *self.tally.error_kinds.entry(e.clone()).or_default() += 1;
            }
            Outcome::Changed(_) => {}
        }
        self.tally.ops += 1;
        Took { plain, waffle: took }
    }

    /// Runs `n` statements of the workload.
    pub fn run(&mut self, n: usize) {
        for _ in 0..n {
            let op = self.work.next_op();
            self.step(&op);
        }
    }

    /// Runs statements until `done()` holds (checked after each) or `limit`
    /// passes; returns whether `done()` held.
    pub fn run_until(&mut self, limit: Duration, mut done: impl FnMut(&mut Differential) -> bool) -> bool {
        let end = Instant::now() + limit;
        loop {
            let op = self.work.next_op();
            self.step(&op);
            if done(self) {
                return true;
            }
            if Instant::now() >= end {
                return false;
            }
        }
    }

    /// Runs statements for `d`; returns how long each took on either side.
    pub fn run_for(&mut self, d: Duration) -> Vec<Took> {
        let end = Instant::now() + d;
        let mut took = Vec::new();
        while Instant::now() < end {
            let op = self.work.next_op();
            took.push(self.step(&op));
        }
        took
    }

    /// Commits an open transaction on both (the workload then carries on
    /// outside one: its next BEGIN starts a new one).
    pub fn commit(&mut self) {
        if self.work.in_txn {
            self.step(&Op::Exec("COMMIT".into(), vec![]));
            self.work.committed();
        }
    }

    /// Both databases pass `PRAGMA integrity_check` and hold the same rows
    /// (every page of the `waffle` one is read: SQLite's own cache is dropped
    /// first). Commits an open transaction first. SQLite's cache is dropped on
    /// both sides alike: the two SQLites stay in the same state, so that what
    /// they write (down to the bytes of unused pages, which can depend on what
    /// their caches held) is the same for the files' final comparison.
    pub fn check(&mut self) {
        self.commit();
        let ok = vec![vec![Value::Text("ok".into())]];
        self.drop_pager_caches();
        assert_eq!(integrity(&self.plain), ok, "{} plain database integrity", self.tag);
        let got = integrity(&self.cached);
        assert_eq!(got, ok, "{} waffle database integrity; stats: {}", self.tag, stats(&self.cached));
        self.drop_pager_caches();
        let (dump_plain, dump_cached) = (dump(&self.plain), dump(&self.cached));
        assert!(dump_plain == dump_cached, "{} dumps differ; stats: {}", self.tag, stats(&self.cached));
        self.tally.checks += 1;
    }

    fn drop_pager_caches(&self) {
        drop_pager_cache(&self.plain);
        drop_pager_cache(&self.cached);
    }

    /// A final [`check`](Self::check), then both closed and their files
    /// compared byte for byte (in WAL mode without the header's change
    /// counters, which depend on how often SQLite re-read page 1).
    pub fn finish(mut self) -> FinalReport {
        self.check();
        let s = cache_stats(&self.cached);
        let report = FinalReport { tag: self.tag.clone(), tally: self.tally.clone(), stats: s };
        let Differential { plain, cached, plain_path, waffle_path, journal, page_size, tag, dir, .. } = self;
        drop(plain);
        drop(cached);
        assert_same_files(&plain_path, &waffle_path, &journal, page_size, &tag);
        drop(dir);
        report
    }
}

/// Closed, both files hold the same bytes wherever SQLite can read them (free pages' bytes
/// apart, which two plain databases in one process need not share: [`crate::same_files`]).
pub use crate::same_files::assert_same_files;

/// What a finished differential run did.
pub struct FinalReport {
    pub tag: String,
    pub tally: Tally,
    /// The `waffle` database's stats just before it was closed.
    pub stats: CacheSnapshot,
}

impl FinalReport {
    /// One line for the test's output (and docs/reliability.md).
    pub fn line(&self) -> String {
        let (s, t) = (&self.stats, &self.tally);
        format!(
            "{} {} ops, {} rows compared, {} full checks, wrong results 0, errors only from the cache 0 \
             (SQL errors both sides returned alike: {} {:?}); \
             l2_hits {} l2_misses {} l2_skipped {} rejects {} faults {} push_failures {} slowest op {:?} ({})",
            self.tag,
            t.ops,
            t.rows_compared,
            t.checks,
            t.errors,
            t.error_kinds,
            s.l2_hits,
            s.l2_misses,
            s.l2_skipped,
            serde_json::json!(s.l2_rejects),
            serde_json::json!(s.l2_faults),
            s.l2_push_failures,
            t.slowest,
            t.slowest_op.chars().take(80).collect::<String>()
        )
    }
}
