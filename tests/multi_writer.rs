//! Multi-writer differential test: a database held open through `waffle` while
//! other writers commit to it without going through this connection's cache.
//!
//! A is this process's connection through `waffle` (16 KiB L1, 8-page SQLite
//! cache, three real memcached nodes), so its pages really come from L1, the
//! grid or the disk. Between and during A's transactions, a seeded random
//! schedule of rounds lets others commit to the same file:
//!
//! - P: a second connection in this process on SQLite's default VFS;
//! - S: Debian's `sqlite3` shell in another process, on the plain file;
//! - W: the `sqlite3` shell with `libwaffle.so` loaded, the database opened
//!   through `waffle` on the same grid: a second caching process, a new one
//!   for each transaction;
//! - X: Python apsw with `libwaffle.so` loaded, through `waffle` on the same
//!   grid, open for the whole run (its caches live through everyone else's
//!   commits); after every round its digest of the table must match too;
//! - in WAL mode, `PRAGMA wal_checkpoint` (PASSIVE, FULL, RESTART, TRUNCATE)
//!   from P, S, W, X or A, which rewrites the database file itself;
//! - now and then a VACUUM (every page rewritten, the file resized).
//!
//! Transactions insert, update (some read-modify-write: `n = n + k`) and
//! delete rows whose values range from a few bytes to three pages (overflow
//! chains), plus bulk inserts and range deletes that split and merge b-tree
//! pages, with an index on `n`. A also reads inside a transaction
//! (BEGIN; SELECT; ...; SELECT; COMMIT) while another writer commits: in
//! rollback mode the writer must get SQLITE_BUSY, in WAL mode it commits and
//! A's snapshot must not move until its COMMIT.
//!
//! A model (a BTreeMap of every committed row) says what the database holds.
//! A writer's transaction either commits (and every statement changed exactly
//! the rows the model says) or fails with SQLITE_BUSY and is not applied.
//! After every round A's reads (the whole table, count, point lookups, a range
//! through the index, every 25 rounds `PRAGMA integrity_check`) must equal the
//! model; S, W and X read the table after their commit, which must equal it too.
//! At the end the file, read by a fresh default-VFS connection, must equal the
//! model and pass `integrity_check`.
//!
//! Matrix: DELETE/WAL x 4 KiB/16 KiB pages, each with a control run where A is
//! opened on the default VFS and W and X open the plain file (no `waffle`
//! anywhere, the same seed and schedule): the control runs show that the test
//! itself is fair. In the `waffle` runs the grid must have been used by A
//! (l2_pushes, l2_hits), A and X must have noticed the other writers
//! (`foreign_changes`), and a refused open of W or X fails the run (at the
//! end, so that the first wrong result is still reported).
//!
//! Replay: `WAFFLE_MW_SEED=<seed> cargo test --release -p waffle-e2e --test multi_writer <name>`
//! (the seed is printed in every failure); `WAFFLE_MW_ROUNDS` changes the rounds.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};
use rusqlite::types::Value;
use rusqlite::{Connection, ErrorCode};
use serde_json::{json, Value as Json};
use waffle_core::stats::{CacheSnapshot, StatsSnapshot};
use waffle_testkit::db::{cache_stats, open_plain, open_waffle, waffle_uri};
use waffle_testkit::nodes::{grid_of, start_node, Node};
use waffle_testkit::soak::{soak_rounds, soak_seed};
use waffle_testkit::temp_dir::TempDir;
use waffle_testkit::workload::query;
use waffle_testkit::writers::{from_peer, shell, sql_literal, to_peer, Peer, ShellOpen, ShellRun};
use waffle_testkit::{artefact, test_cases};

/// Rounds per configuration (the 8 tests of this file take about 40 s on 2
/// cores at 600; `WAFFLE_MW_ROUNDS` overrides, `scripts/soak` scales it).
const ROUNDS: u64 = 600;
const SEED_ENV: &str = "WAFFLE_MW_SEED";
const ROUNDS_ENV: &str = "WAFFLE_MW_ROUNDS";
/// A's L1 and W's L1: tiny, so most reads go below L1.
const A_L1: &str = "16KiB";
const W_L1: &str = "64KiB";
const SQLITE_CACHE_PAGES: u32 = 8;
/// The busy timeout of every writer, in ms.
const BUSY_MS: u32 = 5000;
/// The busy timeout of a writer that must fail because A holds a read
/// transaction (rollback mode): it waits this long, then gives up.
const SHORT_BUSY_MS: u32 = 50;
const INTEGRITY_EVERY: u64 = 25;
/// The table is kept between these sizes (rows) by biasing inserts and deletes.
const FEW_ROWS: usize = 60;
const MANY_ROWS: usize = 220;

// One test per configuration, named for it: journal mode, page size, `waffle` or the control
// (no `waffle` anywhere, same seed and schedule), seed.
test_cases! { run;
    delete_4k_waffle: "delete", 4096, true, 0x11D_4096;
    delete_4k_control: "delete", 4096, false, 0x11D_4096;
    delete_16k_waffle: "delete", 16384, true, 0x11D_16384;
    delete_16k_control: "delete", 16384, false, 0x11D_16384;
    wal_4k_waffle: "wal", 4096, true, 0x11A1_4096;
    wal_4k_control: "wal", 4096, false, 0x11A1_4096;
    wal_16k_waffle: "wal", 16384, true, 0x11A1_16384;
    wal_16k_control: "wal", 16384, false, 0x11A1_16384;
}

// ---------------------------------------------------------------- the model

#[derive(Clone, Debug, PartialEq)]
struct Row {
    n: i64,
    v: Value,
}

type Model = BTreeMap<i64, Row>;

/// One statement of a writer's transaction.
#[derive(Clone, Debug)]
enum Op {
    Insert {
        id: i64,
        n: i64,
        v: Value,
    },
    SetV {
        id: i64,
        v: Value,
    },
    /// Read-modify-write: `n = n + k` over a range of ids.
    AddN {
        lo: i64,
        hi: i64,
        k: i64,
    },
    Delete {
        lo: i64,
        hi: i64,
    },
}

impl Op {
    /// Applies the statement to the model; returns the rows it changes.
    fn apply(&self, m: &mut Model) -> usize {
        match self {
            Op::Insert { id, n, v } => {
                assert!(m.insert(*id, Row { n: *n, v: v.clone() }).is_none(), "the generator reused id {id}");
                1
            }
            Op::SetV { id, v } => match m.get_mut(id) {
                Some(r) => {
                    r.v = v.clone();
                    1
                }
                None => 0,
            },
            Op::AddN { lo, hi, k } => {
                let mut c = 0;
                for (_, r) in m.range_mut(*lo..=*hi) {
                    r.n += k;
                    c += 1;
                }
                c
            }
            Op::Delete { lo, hi } => {
                let ids: Vec<i64> = m.range(*lo..=*hi).map(|(id, _)| *id).collect();
                for id in &ids {
                    m.remove(id);
                }
                ids.len()
            }
        }
    }

    fn sql(&self) -> (&'static str, Vec<Value>) {
        match self {
            Op::Insert { id, n, v } => {
                ("INSERT INTO t(id, n, v) VALUES (?1, ?2, ?3)", vec![(*id).into(), (*n).into(), v.clone()])
            }
            Op::SetV { id, v } => ("UPDATE t SET v = ?1 WHERE id = ?2", vec![v.clone(), (*id).into()]),
            Op::AddN { lo, hi, k } => {
                ("UPDATE t SET n = n + ?1 WHERE id BETWEEN ?2 AND ?3", vec![(*k).into(), (*lo).into(), (*hi).into()])
            }
            Op::Delete { lo, hi } => ("DELETE FROM t WHERE id BETWEEN ?1 AND ?2", vec![(*lo).into(), (*hi).into()]),
        }
    }

    /// The statement with its values as literals (for the shell).
    fn literal(&self) -> String {
        match self {
            Op::Insert { id, n, v } => format!("INSERT INTO t(id, n, v) VALUES ({id}, {n}, {})", sql_literal(v)),
            Op::SetV { id, v } => format!("UPDATE t SET v = {} WHERE id = {id}", sql_literal(v)),
            Op::AddN { lo, hi, k } => format!("UPDATE t SET n = n + ({k}) WHERE id BETWEEN {lo} AND {hi}"),
            Op::Delete { lo, hi } => format!("DELETE FROM t WHERE id BETWEEN {lo} AND {hi}"),
        }
    }

    fn describe(&self) -> String {
        match self {
            Op::Insert { id, n, v } => format!("insert {id} n={n} {}", short_value(v)),
            Op::SetV { id, v } => format!("set {id} v={}", short_value(v)),
            Op::AddN { lo, hi, k } => format!("n+={k} {lo}..={hi}"),
            Op::Delete { lo, hi } => format!("delete {lo}..={hi}"),
        }
    }
}

fn describe_ops(ops: &[Op]) -> String {
    if ops.len() > 6 {
        let inserts = ops.iter().filter(|o| matches!(o, Op::Insert { .. })).count();
        format!(
            "[{} statements ({inserts} inserts): {}, ..., {}]",
            ops.len(),
            ops[0].describe(),
            ops[ops.len() - 1].describe()
        )
    } else {
        format!("[{}]", ops.iter().map(Op::describe).collect::<Vec<_>>().join("; "))
    }
}

fn short_value(v: &Value) -> String {
    match v {
        Value::Text(t) if t.len() <= 12 => format!("{t:?}"),
        Value::Text(t) => format!("text({}) {:?}..", t.len(), &t[..8]),
        Value::Blob(b) => format!("blob({}) {}..", b.len(), hex(&b[..b.len().min(6)])),
        other => format!("{other:?}"),
    }
}

fn short_row(r: Option<&Row>) -> String {
    match r {
        None => "no row".into(),
        Some(r) => format!("n={} v={}", r.n, short_value(&r.v)),
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02X}")).collect()
}

/// How the shell prints a row (`SELECT 'row', id, n, typeof(v), length(v),
/// hex(substr(v, 1, 16)), hex(substr(v, -16))`): the tail makes SQLite walk
/// the whole overflow chain.
fn shell_row(id: i64, r: &Row) -> String {
    let (ty, bytes): (&str, &[u8]) = match &r.v {
        Value::Text(t) => ("text", t.as_bytes()),
        Value::Blob(b) => ("blob", b),
        other => panic!("the model holds only text and blobs, not {other:?}"),
    };
    let head = &bytes[..bytes.len().min(16)];
    let tail = &bytes[bytes.len().saturating_sub(16)..];
    format!("row|{id}|{}|{ty}|{}|{}|{}", r.n, bytes.len(), hex(head), hex(tail))
}

/// The first difference between the model and rows read (id order), or None.
fn first_difference(model: &Model, got: &[(i64, Row)]) -> Option<String> {
    let mut m = model.iter().peekable();
    let mut g = got.iter().peekable();
    loop {
        match (m.peek(), g.peek()) {
            (None, None) => return None,
            (Some((mid, mrow)), Some((gid, grow))) if *mid == gid => {
                if *mrow != grow {
                    return Some(format!(
                        "{} rows (model {}); id {mid}: expected {}, got {}",
                        got.len(),
                        model.len(),
                        short_row(Some(mrow)),
                        short_row(Some(grow))
                    ));
                }
                m.next();
                g.next();
            }
            (mm, gg) => {
                let missing = match (mm, gg) {
                    (Some((mid, _)), Some((gid, _))) => **mid < *gid,
                    (Some(_), None) => true,
                    _ => false,
                };
                return Some(if missing {
                    let (mid, mrow) = mm.unwrap();
                    format!(
                        "{} rows (model {}); id {mid}: expected {}, got no row",
                        got.len(),
                        model.len(),
                        short_row(Some(mrow))
                    )
                } else {
                    let (gid, grow) = gg.unwrap();
                    format!(
                        "{} rows (model {}); id {gid}: expected no row, got {}",
                        got.len(),
                        model.len(),
                        short_row(Some(grow))
                    )
                });
            }
        }
    }
}

fn row_of(n: Value, v: Value) -> Row {
    match n {
        Value::Integer(n) => Row { n, v },
        other => panic!("n is always an integer, got {other:?}"),
    }
}

/// The rows of `SELECT id, n, v FROM t ORDER BY id` as (id, row).
fn table_of(rows: Vec<Vec<Value>>) -> Vec<(i64, Row)> {
    rows.into_iter()
        .map(|r| {
            let mut it = r.into_iter();
            let id = match it.next() {
                Some(Value::Integer(i)) => i,
                other => panic!("id {other:?}"),
            };
            (id, row_of(it.next().unwrap(), it.next().unwrap()))
        })
        .collect()
}

fn read_all(conn: &Connection) -> rusqlite::Result<Vec<(i64, Row)>> {
    query(conn, "SELECT id, n, v FROM t ORDER BY id", &[]).map(table_of)
}

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(e.sqlite_error_code(), Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked))
}

/// One transaction on a rusqlite connection: the rows each statement changed,
/// or the error (after which the transaction is rolled back: not applied).
fn txn_rusqlite(conn: &Connection, begin: &str, ops: &[Op]) -> rusqlite::Result<Vec<usize>> {
    conn.execute_batch(begin)?;
    let r = (|| {
        let mut changes = Vec::with_capacity(ops.len());
        for op in ops {
            let (sql, params) = op.sql();
            changes.push(conn.execute(sql, rusqlite::params_from_iter(params.iter()))?);
        }
        conn.execute_batch("COMMIT")?;
        Ok(changes)
    })();
    if r.is_err() {
        let _ = conn.execute_batch("ROLLBACK");
    }
    r
}

// ---------------------------------------------------------------- writers

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Who {
    A,
    P,
    S,
    W,
    X,
}

/// What a writer's transaction did.
enum Outcome {
    /// Committed; the rows each statement changed.
    Committed(Vec<usize>),
    /// SQLITE_BUSY: rolled back, not applied.
    Busy(String),
    /// A second `waffle` process refused (the database is "already open through waffle").
    Refused(String),
    Failed(String),
}

struct Done {
    outcome: Outcome,
    /// The table as the shell read it after its commit (`row|...` lines).
    rows: Option<Vec<String>>,
    /// The table as X read it after its commit.
    table: Option<Vec<(i64, Row)>>,
    /// `PRAGMA waffle_stats` of W, after its commit.
    stats: Option<Json>,
    /// A failure after the commit (the shell's own read afterwards).
    after_commit_error: Option<String>,
}

impl Done {
    fn of(outcome: Outcome) -> Done {
        Done { outcome, rows: None, table: None, stats: None, after_commit_error: None }
    }
}

const SHELL_ROWS: &str =
    "SELECT 'row', id, n, typeof(v), length(v), hex(substr(v, 1, 16)), hex(substr(v, -16)) FROM t ORDER BY id;\n";

fn shell_prelude() -> String {
    // The first SELECT fails (and .bail ends the shell) if the open did not
    // give us the database (a refused .open leaves the shell on :memory:).
    format!("PRAGMA synchronous = OFF;\nPRAGMA cache_size = {SQLITE_CACHE_PAGES};\nSELECT 'open', count(*) FROM t;\n")
}

// ---------------------------------------------------------------- one configuration

struct Run {
    tag: String,
    replay: String,
    waffle: bool,
    wal: bool,
    page_size: usize,
    path: PathBuf,
    a: Connection,
    p: Connection,
    w_open: ShellOpen,
    /// The long-lived peer; None if its open was refused (`x_refused` says why).
    x: Option<Peer>,
    x_refused: Option<String>,
    rng: SmallRng,
    model: Model,
    next_id: i64,
    round: u64,
    history: Vec<String>,
    /// Failures that do not stop the run (so the first wrong result is still
    /// found): a second `waffle` process refused. They fail it at the end.
    problems: Vec<String>,
    refusals: u64,
    tally: BTreeMap<String, u64>,
    w_stats: Option<Json>,
}

impl Run {
    fn name(&self, who: Who) -> &'static str {
        match (who, self.waffle) {
            (Who::A, true) => "A (waffle, this process)",
            (Who::A, false) => "A (default VFS, this process: control)",
            (Who::P, _) => "P (default VFS, this process)",
            (Who::S, _) => "S (sqlite3 shell, plain)",
            (Who::W, true) => "W (sqlite3 shell + libwaffle.so, a second waffle process)",
            (Who::W, false) => "W (sqlite3 shell, plain: control)",
            (Who::X, true) => "X (python apsw + libwaffle.so, a long-lived second waffle process)",
            (Who::X, false) => "X (python apsw, plain: control)",
        }
    }

    fn count(&mut self, what: String) {
        *self.tally.entry(what).or_default() += 1;
    }

    fn note(&mut self, line: String) {
        self.history.push(format!("round {}: {line}", self.round));
    }

    /// A second `waffle` process (W or X) was refused the open: recorded,
    /// the run goes on (to find the first wrong result too), and it fails at
    /// the end.
    fn refused(&mut self, who: Who, what: String, error: String) {
        self.note(format!("{} was refused: {what}", self.name(who)));
        self.refusals += 1;
        self.count(format!("{who:?} refused"));
        if !self.problems.iter().any(|p| p.starts_with(&format!("{who:?} "))) {
            self.problems.push(format!(
                "{who:?} (a second waffle process) was refused (first in round {}): {error}",
                self.round
            ));
        }
    }

    /// A request to X; Err(why) if X's open was refused.
    fn x_request(&mut self, req: Json) -> Result<Json, String> {
        match self.x.as_mut() {
            Some(x) => Ok(x.request(&req)),
            None => Err(self.x_refused.clone().unwrap_or_default()),
        }
    }

    /// A query by X that must succeed (None if X was refused).
    fn x_query(&mut self, sql: &str, busy_ms: u32) -> Option<Vec<Vec<Value>>> {
        let answer = match self.x_request(json!({"op": "query", "sql": sql, "busy_ms": busy_ms})) {
            Ok(a) => a,
            Err(e) => {
                self.refused(Who::X, format!("no {sql}"), e);
                return None;
            }
        };
        match answer.get("ok").and_then(|r| r.as_array()) {
            Some(rows) => Some(
                rows.iter().map(|r| r.as_array().expect("a row is an array").iter().map(from_peer).collect()).collect(),
            ),
            None => self.diverge(format!("{}: {sql} failed: {answer}", self.name(Who::X))),
        }
    }

    // ------------------------------------------------------------ failing

    /// Fails the run: what went wrong, the last rounds, what plain SQLite sees
    /// in the file now, A's stats and how to replay.
    fn diverge(&self, what: String) -> ! {
        let mut msg = format!("{} round {}: {what}\n", self.tag, self.round);
        msg.push_str("last rounds:\n");
        for h in self.history.iter().rev().take(8).rev() {
            msg.push_str(&format!("  {h}\n"));
        }
        msg.push_str(&format!("plain SQLite on the file now: {}\n", self.plain_view()));
        if !self.problems.is_empty() {
            msg.push_str(&format!("also: {}\n", self.problems.join("; ")));
        }
        if self.waffle {
            let s: String = self
                .a
                .query_row("PRAGMA waffle_stats", [], |r| r.get(0))
                .unwrap_or_else(|e| format!("(PRAGMA waffle_stats failed: {e})"));
            msg.push_str(&format!("A's waffle_stats: {s}\n"));
        }
        msg.push_str(&format!("replay: {}", self.replay));
        panic!("{msg}");
    }

    /// A fresh default-VFS connection's view of the file, against the model.
    fn plain_view(&self) -> String {
        let conn = open_plain(&self.path);
        let ic = match query(&conn, "PRAGMA integrity_check", &[]) {
            Ok(rows) => {
                let lines: Vec<String> = rows
                    .iter()
                    .take(3)
                    .map(|r| match &r[0] {
                        Value::Text(t) => t.clone(),
                        other => format!("{other:?}"),
                    })
                    .collect();
                lines.join(" / ")
            }
            Err(e) => format!("failed: {e}"),
        };
        let rows = match read_all(&conn) {
            Ok(got) => match first_difference(&self.model, &got) {
                None => format!("{} rows, equal to the model", got.len()),
                Some(d) => format!("differs from the model: {d}"),
            },
            Err(e) => format!("read failed: {e}"),
        };
        format!("integrity_check {ic}; {rows}")
    }

    // ------------------------------------------------------------ generating

    fn value(&mut self) -> Value {
        let ps = self.page_size;
        match self.rng.gen_range(0..100) {
            0..=54 => {
                let len = self.rng.gen_range(0..120);
                Value::Text((0..len).map(|_| self.rng.gen_range(b'a'..=b'z') as char).collect())
            }
            55..=84 => self.blob(120..ps / 2),
            // Spans overflow pages: more than a page, up to three.
            _ => self.blob(ps + 1..3 * ps + 1),
        }
    }

    fn blob(&mut self, len: std::ops::Range<usize>) -> Value {
        let mut b = vec![0u8; self.rng.gen_range(len)];
        self.rng.fill_bytes(&mut b);
        Value::Blob(b)
    }

    fn new_id(&mut self) -> i64 {
        self.next_id += 1;
        self.next_id
    }

    /// An id that is in the model (mostly) or not.
    fn some_id(&mut self) -> i64 {
        if self.model.is_empty() || self.rng.gen_bool(0.1) {
            return self.rng.gen_range(1..self.next_id + 5);
        }
        let i = self.rng.gen_range(0..self.model.len());
        *self.model.keys().nth(i).unwrap()
    }

    fn op(&mut self) -> Op {
        let len = self.model.len();
        let (w_ins, w_del) = if len < FEW_ROWS {
            (60, 5)
        } else if len > MANY_ROWS {
            (10, 45)
        } else {
            (35, 20)
        };
        let roll = self.rng.gen_range(0..w_ins + w_del + 45);
        if roll < w_ins {
            let (id, n, v) = (self.new_id(), self.rng.gen_range(0..1000), self.value());
            Op::Insert { id, n, v }
        } else if roll < w_ins + w_del {
            let lo = self.some_id();
            let hi = lo + self.rng.gen_range(0..6);
            Op::Delete { lo, hi }
        } else if roll < w_ins + w_del + 25 {
            let (id, v) = (self.some_id(), self.value());
            Op::SetV { id, v }
        } else {
            let lo = self.some_id();
            let hi = lo + self.rng.gen_range(0..10);
            Op::AddN { lo, hi, k: self.rng.gen_range(-50..=50) }
        }
    }

    fn txn(&mut self) -> Vec<Op> {
        if self.rng.gen_bool(0.06) {
            // Bulk: many small rows (page splits), or a wide delete (merges).
            if self.model.len() > MANY_ROWS / 2 && self.rng.gen_bool(0.5) {
                let lo = self.some_id();
                return vec![Op::Delete { lo, hi: lo + self.rng.gen_range(20..60) }];
            }
            return (0..self.rng.gen_range(20..60))
                .map(|_| {
                    let (id, n) = (self.new_id(), self.rng.gen_range(0..1000));
                    let len = self.rng.gen_range(0..60);
                    let v = Value::Text((0..len).map(|_| self.rng.gen_range(b'a'..=b'z') as char).collect());
                    Op::Insert { id, n, v }
                })
                .collect();
        }
        (0..self.rng.gen_range(1..=4)).map(|_| self.op()).collect()
    }

    // ------------------------------------------------------------ running a writer

    /// Runs `ops` as one transaction by `who`, with SQLite's busy handler
    /// waiting at most `busy_ms`.
    fn run_txn(&mut self, who: Who, ops: &[Op], busy_ms: u32) -> Done {
        match who {
            Who::A => {
                let begin = if self.rng.gen_bool(0.5) { "BEGIN IMMEDIATE" } else { "BEGIN" };
                Done::of(match txn_rusqlite(&self.a, begin, ops) {
                    Ok(c) => Outcome::Committed(c),
                    Err(e) if is_busy(&e) => Outcome::Busy(e.to_string()),
                    Err(e) => Outcome::Failed(e.to_string()),
                })
            }
            Who::P => {
                self.p.busy_timeout(Duration::from_millis(busy_ms as u64)).unwrap();
                let r = txn_rusqlite(&self.p, "BEGIN IMMEDIATE", ops);
                self.p.busy_timeout(Duration::from_millis(BUSY_MS as u64)).unwrap();
                Done::of(match r {
                    Ok(c) => Outcome::Committed(c),
                    Err(e) if is_busy(&e) => Outcome::Busy(e.to_string()),
                    Err(e) => Outcome::Failed(e.to_string()),
                })
            }
            Who::S | Who::W => {
                let open = if who == Who::S { ShellOpen::Plain } else { self.w_open.clone() };
                let with_stats = who == Who::W && self.waffle;
                let mut sql = shell_prelude();
                sql.push_str("BEGIN IMMEDIATE;\n");
                for op in ops {
                    sql.push_str(&op.literal());
                    sql.push_str(";\nSELECT 'chg', changes();\n");
                }
                sql.push_str("COMMIT;\nSELECT 'committed';\n");
                sql.push_str(SHELL_ROWS);
                if with_stats {
                    sql.push_str("SELECT 'stats';\nPRAGMA waffle_stats;\n");
                }
                let run = shell(&self.path, &open, busy_ms, &sql);
                self.shell_done(&run, with_stats)
            }
            Who::X => {
                let stmts: Vec<Json> = ops
                    .iter()
                    .map(|op| {
                        let (sql, params) = op.sql();
                        json!([sql, params.iter().map(to_peer).collect::<Vec<_>>()])
                    })
                    .collect();
                let answer = match self.x_request(json!({"op": "txn", "busy_ms": busy_ms, "stmts": stmts})) {
                    Ok(a) => a,
                    Err(e) => return Done::of(Outcome::Refused(e)),
                };
                if let Some(b) = answer.get("busy") {
                    return Done::of(Outcome::Busy(b.to_string()));
                }
                let Some(changes) = answer.get("ok").and_then(|c| c.as_array()) else {
                    return Done::of(Outcome::Failed(answer.to_string()));
                };
                let changes = changes.iter().map(|c| c.as_u64().expect("changes() is a count") as usize).collect();
                // X reads the whole table back.
                let table = self.x_query("SELECT id, n, v FROM t ORDER BY id", BUSY_MS).map(table_of);
                Done { outcome: Outcome::Committed(changes), rows: None, table, stats: None, after_commit_error: None }
            }
        }
    }

    fn shell_done(&self, run: &ShellRun, with_stats: bool) -> Done {
        let lines: Vec<&str> = run.stdout.lines().collect();
        if run.refused_as_owned() {
            return Done::of(Outcome::Refused(run.describe()));
        }
        if !lines.contains(&"committed") {
            return Done::of(if run.busy() { Outcome::Busy(run.describe()) } else { Outcome::Failed(run.describe()) });
        }
        let changes = lines
            .iter()
            .filter_map(|l| l.strip_prefix("chg|"))
            .map(|c| c.parse().unwrap_or_else(|e| panic!("bad changes() line {c:?}: {e}")))
            .collect();
        let rows = lines.iter().filter(|l| l.starts_with("row|")).map(|l| l.to_string()).collect();
        let mut after_commit_error = (!run.success).then(|| run.describe());
        let mut stats = None;
        if with_stats && after_commit_error.is_none() {
            match run.after("stats").first().map(|l| serde_json::from_str::<Json>(l)) {
                Some(Ok(s)) => stats = Some(s),
                other => {
                    after_commit_error = Some(format!(
                        "PRAGMA waffle_stats gave no JSON ({other:?}): is the shell really on waffle? {}",
                        run.describe()
                    ))
                }
            }
        }
        Done { outcome: Outcome::Committed(changes), rows: Some(rows), table: None, stats, after_commit_error }
    }

    /// Checks what a writer's transaction did against the model and applies
    /// it if it committed. `expect_busy`: A holds a read transaction in
    /// rollback mode, so the commit must fail with SQLITE_BUSY.
    fn settle(&mut self, who: Who, ops: &[Op], done: Done, expect_busy: bool) {
        let name = self.name(who);
        let mut next = self.model.clone();
        let expected: Vec<usize> = ops.iter().map(|op| op.apply(&mut next)).collect();
        let what = describe_ops(ops);
        match done.outcome {
            Outcome::Committed(changes) => {
                self.note(format!("{name} committed {what}"));
                if expect_busy {
                    self.diverge(format!(
                        "{name} committed while A held a read transaction (rollback mode: it must get SQLITE_BUSY)"
                    ));
                }
                if changes != expected {
                    self.diverge(format!(
                        "{name}'s statements {what} changed {changes:?} rows; the model says {expected:?}"
                    ));
                }
                self.model = next;
                self.count(format!("{who:?} committed"));
                if let Some(e) = done.after_commit_error {
                    self.diverge(format!("{name} committed, then failed: {e}"));
                }
                if let Some(rows) = done.rows {
                    let want: Vec<String> = self.model.iter().map(|(id, r)| shell_row(*id, r)).collect();
                    if rows != want {
                        let at = rows.iter().zip(&want).position(|(g, w)| g != w).unwrap_or(rows.len().min(want.len()));
                        self.diverge(format!(
                            "{name}'s own read of the table after its commit differs from the model: {} rows \
                             (model {}); first difference at line {at}: expected {:?}, got {:?}",
                            rows.len(),
                            want.len(),
                            want.get(at),
                            rows.get(at)
                        ));
                    }
                }
                if let Some(table) = done.table {
                    if let Some(d) = first_difference(&self.model, &table) {
                        self.diverge(format!(
                            "{name}'s own read of the table after its commit differs from the model: {d}"
                        ));
                    }
                }
                if let Some(s) = done.stats {
                    self.w_stats = Some(s);
                }
            }
            Outcome::Busy(e) => {
                self.note(format!("{name} got SQLITE_BUSY on {what}"));
                if !expect_busy {
                    self.diverge(format!("{name} got SQLITE_BUSY with no other transaction open: {e}"));
                }
                self.count(format!("{who:?} busy (expected)"));
            }
            Outcome::Refused(e) if matches!(who, Who::W | Who::X) && self.waffle => {
                self.refused(who, format!("{what} not applied"), e);
            }
            Outcome::Refused(e) | Outcome::Failed(e) => {
                self.note(format!("{name} failed on {what}"));
                self.diverge(format!("{name}'s transaction {what} failed: {e}"));
            }
        }
    }

    // ------------------------------------------------------------ rounds

    fn txn_round(&mut self, who: Who) {
        let ops = self.txn();
        let done = self.run_txn(who, &ops, BUSY_MS);
        self.settle(who, &ops, done, false);
    }

    /// `PRAGMA wal_checkpoint(mode)` by `who`; returns (busy, log, checkpointed)
    /// or None if a second waffle process was refused.
    fn checkpoint(&mut self, who: Who, mode: &str) -> Option<(i64, i64, i64)> {
        let name = self.name(who);
        let sql = format!("PRAGMA wal_checkpoint({mode})");
        let r = match who {
            Who::A | Who::P => {
                let conn = if who == Who::A { &self.a } else { &self.p };
                match conn.query_row(&sql, [], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))) {
                    Ok(r) => r,
                    Err(e) => self.diverge(format!("{name}: {sql} failed: {e}")),
                }
            }
            Who::X => {
                let rows = self.x_query(&sql, BUSY_MS)?;
                match rows.first().map(|r| r.as_slice()) {
                    Some([Value::Integer(b), Value::Integer(l), Value::Integer(c)]) => (*b, *l, *c),
                    _ => self.diverge(format!("{name}: {sql} gave {rows:?}")),
                }
            }
            Who::S | Who::W => {
                let open = if who == Who::S { ShellOpen::Plain } else { self.w_open.clone() };
                let run = shell(&self.path, &open, BUSY_MS, &format!("{}SELECT 'ckpt';\n{sql};\n", shell_prelude()));
                if who == Who::W && self.waffle && run.refused_as_owned() {
                    self.refused(who, format!("no {sql}"), run.describe());
                    return None;
                }
                let line = run.after("ckpt").first().map(|l| l.to_string());
                let parsed = line.as_deref().and_then(|l| {
                    let v: Vec<i64> = l.split('|').filter_map(|x| x.parse().ok()).collect();
                    (v.len() == 3).then(|| (v[0], v[1], v[2]))
                });
                match (run.success, parsed) {
                    (true, Some(r)) => r,
                    _ => self.diverge(format!("{name}: {sql} failed: {}", run.describe())),
                }
            }
        };
        self.note(format!("{name}: {sql} -> busy {} log {} checkpointed {}", r.0, r.1, r.2));
        self.count(format!("checkpoint {mode} by {who:?}"));
        Some(r)
    }

    fn checkpoint_round(&mut self) {
        let who = [Who::P, Who::P, Who::P, Who::S, Who::S, Who::W, Who::W, Who::X, Who::X, Who::A, Who::A]
            [self.rng.gen_range(0..11)];
        let mode = ["PASSIVE", "FULL", "RESTART", "TRUNCATE"][self.rng.gen_range(0..4)];
        if let Some((busy, _, _)) = self.checkpoint(who, mode) {
            // Nobody else is in a transaction: every mode runs to the end.
            if busy != 0 {
                self.diverge(format!(
                    "{}: PRAGMA wal_checkpoint({mode}) reported busy with no other transaction open",
                    self.name(who)
                ));
            }
        }
    }

    fn vacuum_round(&mut self) {
        let who = [Who::A, Who::P, Who::S, Who::W, Who::X][self.rng.gen_range(0..5)];
        let name = self.name(who);
        match who {
            Who::X => {
                if self.x_query("VACUUM", BUSY_MS).is_none() {
                    return;
                }
            }
            Who::A | Who::P => {
                let conn = if who == Who::A { &self.a } else { &self.p };
                if let Err(e) = conn.execute_batch("VACUUM") {
                    self.diverge(format!("{name}: VACUUM failed: {e}"));
                }
            }
            Who::S | Who::W => {
                let open = if who == Who::S { ShellOpen::Plain } else { self.w_open.clone() };
                let run =
                    shell(&self.path, &open, BUSY_MS, &format!("{}VACUUM;\nSELECT 'vacuumed';\n", shell_prelude()));
                if who == Who::W && self.waffle && run.refused_as_owned() {
                    self.refused(who, "no VACUUM".into(), run.describe());
                    return;
                }
                if !(run.success && run.stdout.lines().any(|l| l == "vacuumed")) {
                    self.diverge(format!("{name}: VACUUM failed: {}", run.describe()));
                }
            }
        }
        self.note(format!("{name}: VACUUM"));
        self.count(format!("VACUUM by {who:?}"));
    }

    /// A reads inside a transaction while `who` commits: in rollback mode the
    /// writer must get SQLITE_BUSY (A holds SHARED); in WAL mode it commits
    /// (and maybe a PASSIVE checkpoint follows) and A's snapshot stays put
    /// until its COMMIT.
    fn read_txn_round(&mut self, who: Who) {
        let before = self.model.clone();
        self.note("A: BEGIN; SELECT the table".into());
        if let Err(e) = self.a.execute_batch("BEGIN") {
            self.diverge(format!("A: BEGIN failed: {e}"));
        }
        self.check_snapshot(&before, "A's first read inside its read transaction");
        let ops = self.txn();
        let busy_ms = if self.wal { BUSY_MS } else { SHORT_BUSY_MS };
        let done = self.run_txn(who, &ops, busy_ms);
        self.settle(who, &ops, done, !self.wal);
        if self.wal && self.rng.gen_bool(0.5) {
            let by = [Who::P, Who::S, Who::W, Who::X][self.rng.gen_range(0..4)];
            // A's snapshot holds the checkpoint back: no busy check here.
            self.checkpoint(by, "PASSIVE");
        }
        self.check_snapshot(&before, "A's second read inside the same read transaction (its snapshot)");
        if let Err(e) = self.a.execute_batch("COMMIT") {
            self.diverge(format!("A: COMMIT of its read transaction failed: {e}"));
        }
        self.note("A: SELECT the table again; COMMIT".into());
        self.count("A read transactions around another writer".into());
    }

    fn check_snapshot(&self, want: &Model, what: &str) {
        match read_all(&self.a) {
            Ok(got) => {
                if let Some(d) = first_difference(want, &got) {
                    self.diverge(format!("{what} differs from the model: {d}"));
                }
            }
            Err(e) => self.diverge(format!("{what} failed: {e}")),
        }
    }

    // ------------------------------------------------------------ the others' reads

    /// After every round: X (which stays open) agrees with the model on a
    /// digest of the table: count, sum(n), sum(length(v)) and a count through
    /// the index.
    fn check_x(&mut self) {
        if self.x.is_none() {
            return;
        }
        let sql = "SELECT count(*), coalesce(sum(n), 0), coalesce(sum(length(v)), 0), \
                   (SELECT count(*) FROM t INDEXED BY t_n WHERE n >= 500) FROM t";
        let Some(got) = self.x_query(sql, BUSY_MS) else { return };
        let len = |v: &Value| match v {
            Value::Text(t) => t.len() as i64,
            Value::Blob(b) => b.len() as i64,
            _ => 0,
        };
        let want = vec![vec![
            Value::Integer(self.model.len() as i64),
            Value::Integer(self.model.values().map(|r| r.n).sum()),
            Value::Integer(self.model.values().map(|r| len(&r.v)).sum()),
            Value::Integer(self.model.values().filter(|r| r.n >= 500).count() as i64),
        ]];
        if got != want {
            let after = self.history.last().cloned().unwrap_or_default();
            self.diverge(format!(
                "{}'s digest of the table (count, sum(n), sum(length(v)), count of n >= 500 through the index) \
                 is {got:?}; the model says {want:?} (after {after})",
                self.name(Who::X)
            ));
        }
    }

    // ------------------------------------------------------------ A's reads

    /// After every round: A's reads equal the model.
    fn check_a(&mut self) {
        let after = self.history.last().cloned().unwrap_or_default();
        let ctx = format!("(after {after})");
        // The whole table.
        match read_all(&self.a) {
            Ok(got) => {
                if let Some(d) = first_difference(&self.model, &got) {
                    self.diverge(format!("A's read of the whole table differs from the model {ctx}: {d}"));
                }
            }
            Err(e) => self.diverge(format!("A's read of the whole table failed {ctx}: {e}")),
        }
        // count(*) (the b-tree's own count, no row decoded).
        match self.a.query_row("SELECT count(*) FROM t", [], |r| r.get::<_, i64>(0)) {
            Ok(c) if c as usize == self.model.len() => {}
            Ok(c) => {
                self.diverge(format!("A: SELECT count(*) gives {c}; the model has {} rows {ctx}", self.model.len()))
            }
            Err(e) => self.diverge(format!("A: SELECT count(*) failed {ctx}: {e}")),
        }
        // Point lookups: three rows (mostly present) and one never inserted.
        let mut ids: Vec<i64> = (0..3).map(|_| self.some_id()).collect();
        ids.push(self.next_id + 1000);
        for id in ids {
            let got = query(&self.a, "SELECT n, v FROM t WHERE id = ?1", &[id.into()]);
            let got = match got {
                Ok(rows) => rows.into_iter().next().map(|r| {
                    let mut it = r.into_iter();
                    row_of(it.next().unwrap(), it.next().unwrap())
                }),
                Err(e) => self.diverge(format!("A: point lookup of id {id} failed {ctx}: {e}")),
            };
            if got.as_ref() != self.model.get(&id) {
                self.diverge(format!(
                    "A: point lookup of id {id}: expected {}, got {} {ctx}",
                    short_row(self.model.get(&id)),
                    short_row(got.as_ref())
                ));
            }
        }
        // A range through the index on n.
        let lo = self.rng.gen_range(-100..1100i64);
        let hi = lo + 150;
        let got = query(
            &self.a,
            "SELECT id, n FROM t INDEXED BY t_n WHERE n BETWEEN ?1 AND ?2 ORDER BY n, id",
            &[lo.into(), hi.into()],
        );
        let mut want: Vec<(i64, i64)> =
            self.model.iter().filter(|(_, r)| (lo..=hi).contains(&r.n)).map(|(id, r)| (r.n, *id)).collect();
        want.sort();
        let want: Vec<Vec<Value>> = want.into_iter().map(|(n, id)| vec![id.into(), n.into()]).collect();
        match got {
            Ok(rows) if rows == want => {}
            Ok(rows) => self.diverge(format!(
                "A: the index range n in {lo}..={hi} gives {} rows; the model {} (first: got {:?}, expected {:?}) {ctx}",
                rows.len(),
                want.len(),
                rows.first(),
                want.first()
            )),
            Err(e) => self.diverge(format!("A: the index range n in {lo}..={hi} failed {ctx}: {e}")),
        }
        if self.round.is_multiple_of(INTEGRITY_EVERY) {
            match query(&self.a, "PRAGMA integrity_check", &[]) {
                Ok(rows) if rows == vec![vec![Value::Text("ok".into())]] => {}
                Ok(rows) => self
                    .diverge(format!("A: PRAGMA integrity_check {ctx}: {:?}", rows.iter().take(3).collect::<Vec<_>>())),
                Err(e) => self.diverge(format!("A: PRAGMA integrity_check failed {ctx}: {e}")),
            }
        }
    }
}

// ---------------------------------------------------------------- the run

fn env_u64(name: &str) -> Option<u64> {
    let s = std::env::var(name).ok()?;
    let s = s.trim();
    let v = match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    };
    Some(v.unwrap_or_else(|e| panic!("{name}={s:?} is not a number: {e}")))
}

fn run(test: &str, journal: &'static str, page_size: usize, waffle: bool, base_seed: u64) {
    let started = Instant::now();
    let seed = env_u64(SEED_ENV).unwrap_or_else(|| soak_seed(base_seed));
    let rounds = env_u64(ROUNDS_ENV).unwrap_or_else(|| soak_rounds(ROUNDS, 1));
    let kind = if waffle { "waffle" } else { "control" };
    let tag = format!("[{journal} {page_size} {kind} seed {seed:#x}]");
    let replay = format!("{SEED_ENV}={seed:#x} cargo test --release -p waffle-e2e --test multi_writer {test}");

    let nodes: Vec<Node> = if waffle { (0..3).map(|_| start_node(32)).collect() } else { Vec::new() };
    let grid = grid_of(&nodes);
    let dir = TempDir::new(&format!("mw-{journal}-{page_size}-{kind}"));
    let path = dir.join("app.db");
    // Checked before anything runs: a missing or stale library is not a test
    // result. Copied, so that a rebuild during the run cannot pull it away.
    let w_open = if waffle {
        let so = dir.join("libwaffle.so");
        std::fs::copy(artefact("libwaffle.so"), &so)
            .unwrap_or_else(|e| panic!("copy libwaffle.so to {}: {e}", so.display()));
        ShellOpen::Waffle {
            so,
            uri: waffle_uri(&path, &[("waffle_grid", &grid), ("waffle_local", W_L1), ("waffle_timeout_ms", "1000")]),
        }
    } else {
        ShellOpen::Plain
    };

    let a = if waffle {
        open_waffle(&path, &[("waffle_grid", &grid), ("waffle_local", A_L1), ("waffle_timeout_ms", "1000")])
    } else {
        open_plain(&path)
    };
    a.busy_timeout(Duration::from_millis(BUSY_MS as u64)).unwrap();
    a.execute_batch(&format!("PRAGMA page_size = {page_size}")).unwrap();
    let mode: String = a.query_row(&format!("PRAGMA journal_mode = {journal}"), [], |r| r.get(0)).unwrap();
    assert_eq!(mode, journal, "{tag} journal_mode");
    a.execute_batch(&format!(
        "PRAGMA cache_size = {SQLITE_CACHE_PAGES};
         PRAGMA synchronous = OFF;
         CREATE TABLE t(id INTEGER PRIMARY KEY, n INTEGER NOT NULL, v);
         CREATE INDEX t_n ON t(n);"
    ))
    .unwrap();
    let ps: i64 = a.query_row("PRAGMA page_size", [], |r| r.get(0)).unwrap();
    assert_eq!(ps as usize, page_size, "{tag} page_size");
    let p = open_plain(&path);
    p.busy_timeout(Duration::from_millis(BUSY_MS as u64)).unwrap();
    p.execute_batch("PRAGMA synchronous = OFF").unwrap();
    let x = match &w_open {
        ShellOpen::Waffle { so, .. } => Peer::spawn(
            Some(so),
            &waffle_uri(&path, &[("waffle_grid", &grid), ("waffle_local", W_L1), ("waffle_timeout_ms", "1000")]),
        ),
        ShellOpen::Plain => Peer::spawn(None, &format!("file:{}", path.display())),
    };
    let (x, x_refused) = match x.open_error.clone() {
        None => (Some(x), None),
        Some(e) if waffle => (None, Some(e)),
        Some(e) => panic!("{tag} the plain apsw peer could not open the database: {e}"),
    };

    let mut r = Run {
        tag: tag.clone(),
        replay,
        waffle,
        wal: journal == "wal",
        page_size,
        path: path.clone(),
        a,
        p,
        w_open,
        x,
        x_refused,
        rng: SmallRng::seed_from_u64(seed),
        model: Model::new(),
        next_id: 0,
        round: 0,
        history: Vec::new(),
        problems: Vec::new(),
        refusals: 0,
        tally: BTreeMap::new(),
        w_stats: None,
    };

    for pragma in [format!("PRAGMA cache_size = {SQLITE_CACHE_PAGES}"), "PRAGMA synchronous = OFF".to_string()] {
        r.x_query(&pragma, BUSY_MS);
    }

    // The smallest form first: A inserts one row, the shell many.
    r.round = 1;
    let id = r.new_id();
    let ops = vec![Op::Insert { id, n: 1, v: Value::Text("a".into()) }];
    let done = r.run_txn(Who::A, &ops, BUSY_MS);
    r.settle(Who::A, &ops, done, false);
    r.check_a();
    r.check_x();
    r.round = 2;
    let ops: Vec<Op> = (0..80)
        .map(|i| {
            let id = r.new_id();
            Op::Insert { id, n: i, v: Value::Text(format!("from S {i}")) }
        })
        .collect();
    let done = r.run_txn(Who::S, &ops, BUSY_MS);
    r.settle(Who::S, &ops, done, false);
    r.check_a();
    r.check_x();

    for round in 3..=rounds {
        r.round = round;
        let roll = r.rng.gen_range(0..100);
        match roll {
            0..=19 => r.txn_round(Who::A),
            20..=34 => r.txn_round(Who::P),
            35..=49 => r.txn_round(Who::S),
            50..=61 => r.txn_round(Who::W),
            62..=71 => r.txn_round(Who::X),
            72..=83 if r.wal => r.checkpoint_round(),
            72..=83 => {
                let who = [Who::P, Who::S, Who::W, Who::X][r.rng.gen_range(0..4)];
                r.txn_round(who)
            }
            84..=97 => {
                let who = [Who::P, Who::S, Who::W, Who::X][r.rng.gen_range(0..4)];
                r.read_txn_round(who)
            }
            _ => r.vacuum_round(),
        }
        r.check_a();
        r.check_x();
    }

    // The end: A's last view, then everyone closed (A last: in WAL mode its
    // close checkpoints), and the file read by a fresh default-VFS connection.
    let a_stats = waffle.then(|| cache_stats(&r.a));
    let x_stats = match (waffle, r.x.is_some()) {
        (true, true) => match r.x_query("PRAGMA waffle_stats", BUSY_MS).as_deref() {
            Some([row]) => match row.as_slice() {
                [Value::Text(t)] => Some(typed(t, &format!("{tag} X's waffle_stats"))),
                other => panic!("{tag} X's PRAGMA waffle_stats gave {other:?}: is X really on waffle?"),
            },
            other => panic!("{tag} X's PRAGMA waffle_stats gave {other:?}: is X really on waffle?"),
        },
        _ => None,
    };
    let Run { a, p, x, model, tally, problems, refusals, w_stats, .. } = r;
    drop(p);
    if let Some(x) = x {
        x.close();
    }
    drop(a);
    let fresh = open_plain(&path);
    let ok = vec![vec![Value::Text("ok".into())]];
    let ic = query(&fresh, "PRAGMA integrity_check", &[]).unwrap();
    assert_eq!(ic, ok, "{tag} the file after every writer closed: integrity_check; replay: {}", replay_of(test, seed));
    let got = read_all(&fresh).unwrap();
    if let Some(d) = first_difference(&model, &got) {
        panic!(
            "{tag} the file after every writer closed differs from the model: {d}; replay: {}",
            replay_of(test, seed)
        );
    }
    drop(fresh);

    if !problems.is_empty() {
        panic!("{tag} {} (refused {refusals} times in all); replay: {}", problems.join("; "), replay_of(test, seed));
    }
    for who in ["A", "P", "S", "W", "X"] {
        assert!(
            tally.get(&format!("{who} committed")).copied().unwrap_or(0) > 0,
            "{tag} writer {who} never committed: the schedule did not exercise it ({tally:?})"
        );
    }

    let mut line = format!(
        "{tag} {rounds} rounds in {:.1}s, {} rows at the end; {tally:?}",
        started.elapsed().as_secs_f64(),
        model.len()
    );
    if let Some(s) = &a_stats {
        let ctx = format!("{tag} A's stats: {s:?}");
        assert!(s.l2_pushes > 0, "the grid was never pushed to: {ctx}");
        assert!(s.l2_hits > 0, "the grid never answered a read: {ctx}");
        assert!(s.foreign_changes > 0, "A never noticed another writer's commit: {ctx}");
        line.push_str(&format!(
            "; A: l1_hits {} l1_misses {} l2_hits {} l2_misses {} l2_pushes {} disk_reads {} foreign_changes {} \
             foreign_resets {} foreign_pages_invalidated {}",
            s.l1_hits,
            s.l1_misses,
            s.l2_hits,
            s.l2_misses,
            s.l2_pushes,
            s.disk_reads,
            s.foreign_changes,
            s.foreign_resets,
            s.foreign_pages_invalidated
        ));
        match &w_stats {
            Some(w) => {
                let w = typed(&w.to_string(), &format!("{tag} W's waffle_stats"));
                line.push_str(&format!(
                    "; W's last run: l2_hits {} l2_pushes {} disk_reads {} foreign_changes {}",
                    w.l2_hits, w.l2_pushes, w.disk_reads, w.foreign_changes
                ))
            }
            None => panic!("{tag} W never reported its waffle_stats"),
        }
        let x = x_stats.as_ref().expect("X is open (a refusal fails above)");
        let ctx = format!("{tag} X's stats: {x:?}");
        assert!(x.foreign_changes > 0, "X never noticed another writer's commit: {ctx}");
        line.push_str(&format!(
            "; X: l1_hits {} l2_hits {} l2_pushes {} disk_reads {} foreign_changes {} foreign_resets {} \
             foreign_pages_invalidated {}",
            x.l1_hits,
            x.l2_hits,
            x.l2_pushes,
            x.disk_reads,
            x.foreign_changes,
            x.foreign_resets,
            x.foreign_pages_invalidated
        ));
    }
    eprintln!("{line}");
}

fn replay_of(test: &str, seed: u64) -> String {
    format!("{SEED_ENV}={seed:#x} cargo test --release -p waffle-e2e --test multi_writer {test}")
}

/// The cache's part of a `PRAGMA waffle_stats` answer (`what` names it in a panic).
fn typed(text: &str, what: &str) -> CacheSnapshot {
    let v: Json = serde_json::from_str(text).unwrap_or_else(|e| panic!("{what} ({e}): {text}"));
    StatsSnapshot::from_json(&v).unwrap_or_else(|e| panic!("{what} ({e}): {text}")).cache().clone()
}
