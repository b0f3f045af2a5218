//! Differential test: one seeded random workload runs on a plain database
//! (SQLite's default VFS) and on one opened through `waffle` with a tiny L1
//! (16 KiB) and an 8-page SQLite cache over three memcached nodes, so nearly
//! every page read goes below L1 (push queue, grid, disk). Every statement's
//! result (rows, row counts, errors) must be identical, both databases must
//! pass `PRAGMA integrity_check`, and their final dumps and files must be equal.
//!
//! Proves invariant 1 (no tier returns bytes that differ from the file) under
//! inserts, updates, deletes, overflow pages, VACUUM (truncation), schema
//! changes, rollbacks (journal playback and spilled pages) and WAL
//! checkpoints, for journal_mode DELETE and WAL at 4 KiB and 16 KiB pages.

mod support;

use std::time::Instant;

use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};
use rusqlite::types::Value;
use rusqlite::Connection;
use support::*;

const OPS: usize = 2500;

#[test]
fn delete_journal_4k() {
    run("delete", 4096, 0xD1_4096);
}

#[test]
fn delete_journal_16k() {
    run("delete", 16384, 0xD1_16384);
}

#[test]
fn wal_4k() {
    run("wal", 4096, 0x3A1_4096);
}

#[test]
fn wal_16k() {
    run("wal", 16384, 0x3A1_16384);
}

/// One statement of the workload.
#[derive(Debug, Clone)]
enum Op {
    Exec(String, Vec<Value>),
    Query(String, Vec<Value>),
}

/// What a statement did, compared between the two databases.
#[derive(Debug, PartialEq)]
enum Outcome {
    Changed(usize),
    Rows(Vec<Vec<Value>>),
    Error(String),
}

fn apply(conn: &Connection, op: &Op) -> Outcome {
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

fn query(conn: &Connection, sql: &str, params: &[Value]) -> rusqlite::Result<Vec<Vec<Value>>> {
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
struct Workload {
    rng: SmallRng,
    page_size: usize,
    next_id: i64,
    extra_columns: usize,
    t2_exists: bool,
    in_txn: bool,
}

impl Workload {
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

    fn next(&mut self) -> Op {
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

fn setup(conn: &Connection, journal: &str, page_size: usize) {
    conn.execute_batch(&format!("PRAGMA page_size = {page_size}")).unwrap();
    let mode: String = conn.query_row(&format!("PRAGMA journal_mode = {journal}"), [], |r| r.get(0)).unwrap();
    assert_eq!(mode, journal, "journal_mode");
    conn.execute_batch(
        "PRAGMA cache_size = 8;
         PRAGMA synchronous = OFF;
         CREATE TABLE t1(id INTEGER PRIMARY KEY, k INTEGER, s TEXT, b BLOB);",
    )
    .unwrap();
    let ps: i64 = conn.query_row("PRAGMA page_size", [], |r| r.get(0)).unwrap();
    assert_eq!(ps as usize, page_size);
}

/// Every table's rows and the schema, in a fixed order.
fn dump(conn: &Connection) -> Vec<(String, Vec<Vec<Value>>)> {
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

fn integrity(conn: &Connection) -> Vec<Vec<Value>> {
    query(conn, "PRAGMA integrity_check", &[]).unwrap()
}

fn run(journal: &str, page_size: usize, seed: u64) {
    let started = Instant::now();
    let nodes = [start_node(64), start_node(64), start_node(64)];
    let grid = grid_of(&nodes.iter().collect::<Vec<_>>());
    let dir = TempDir::new(&format!("diff-{journal}-{page_size}"));
    let plain_path = dir.join("plain.db");
    let waffle_path = dir.join("waffle.db");
    let tag = format!("[{journal} {page_size} seed {seed:#x}]");

    let plain = open_plain(&plain_path);
    let cached =
        open_waffle(&waffle_path, &[("waffle_grid", &grid), ("waffle_local", "16KiB"), ("waffle_timeout_ms", "1000")]);
    setup(&plain, journal, page_size);
    setup(&cached, journal, page_size);

    let mut w = Workload {
        rng: SmallRng::seed_from_u64(seed),
        page_size,
        next_id: 1,
        extra_columns: 0,
        t2_exists: false,
        in_txn: false,
    };
    let mut rows_compared = 0usize;
    for i in 0..OPS {
        let op = w.next();
        let a = apply(&plain, &op);
        let b = apply(&cached, &op);
        if a != b {
            let s = stats(&cached);
            panic!(
                "{tag} op {i} gave different results\nop: {}\nplain:  {}\nwaffle: {}\nstats: {s}",
                describe(&op),
                short(&a),
                short(&b)
            );
        }
        if let Outcome::Rows(r) = &a {
            rows_compared += r.len();
        }
    }
    if w.in_txn {
        for c in [&plain, &cached] {
            c.execute_batch("COMMIT").unwrap();
        }
    }

    let ok = vec![vec![Value::Text("ok".into())]];
    assert_eq!(integrity(&plain), ok, "{tag} plain database integrity");
    assert_eq!(integrity(&cached), ok, "{tag} waffle database integrity");
    let (dump_plain, dump_cached) = (dump(&plain), dump(&cached));
    assert!(
        dump_plain.iter().map(|(_, r)| r.len()).sum::<usize>() > 100,
        "{tag} the workload left too little to compare"
    );
    assert!(dump_plain == dump_cached, "{tag} final dumps differ");

    let s = stats(&cached);
    let ctx = format!("{tag} stats: {s}");
    assert_eq!(n(&s, "page_bytes") as usize, page_size, "{ctx}");
    assert!(n(&s, "l2_pushes") > 0, "the grid was never pushed to: {ctx}");
    assert!(n(&s, "l2_hits") > 0, "the grid never answered a read: {ctx}");
    // Nearly every read went below L1 (tiny L1, tiny SQLite cache).
    assert!(n(&s, "l1_misses") > n(&s, "l1_hits"), "L1 was not the bottleneck it should be here: {ctx}");
    // No fault is injected: every value a node returns is one we stored,
    // intact, and current. A page's newer bytes are always in L1, in the push
    // queue, in the batch being pushed, or already stored over the older copy;
    // a `version` reject means a read went to the grid while the newer version
    // was still in memory (see push_in_flight.rs).
    assert_eq!(n(&s, "l2_rejects_total"), 0, "a grid value was rejected with no fault injected: {ctx}");
    // And with room on the nodes, nothing pushed is lost: a miss is a page
    // that was dropped or failed to push.
    assert!(
        n(&s, "l2_misses") <= n(&s, "l2_push_drops") + n(&s, "l2_push_failures"),
        "pages pushed to the grid were not found again: {ctx}"
    );
    // Every node took part (keys spread by ketama over three nodes).
    let nodes_json = s["nodes"].as_array().expect("nodes");
    assert_eq!(nodes_json.len(), 3, "{ctx}");
    for node in nodes_json {
        assert!(node["requests"].as_u64().unwrap() > 0, "a node was never asked: {ctx}");
    }
    eprintln!(
        "{tag} {OPS} ops, {rows_compared} rows compared; l1_hits {} l1_misses {} push_queue_hits {} l2_hits {} \
         l2_misses {} l2_rejects.version {} l2_pushes {} disk_reads {} disk_writes {} truncates {} faults {} in {:.1}s",
        n(&s, "l1_hits"),
        n(&s, "l1_misses"),
        n(&s, "push_queue_hits"),
        n(&s, "l2_hits"),
        n(&s, "l2_misses"),
        n(&s, "l2_rejects.version"),
        n(&s, "l2_pushes"),
        n(&s, "disk_reads"),
        n(&s, "disk_writes"),
        n(&s, "truncates"),
        s["l2_faults"],
        started.elapsed().as_secs_f64()
    );

    // Closed, both files hold the same bytes: the same statements on the same
    // SQLite, and every page the cache served was the page on disk. In WAL
    // mode the header's change counter (24..28, copied to 92..96) depends on
    // how often SQLite re-read page 1, which is not deterministic even
    // between two plain databases: those 8 bytes are left out there.
    drop(plain);
    drop(cached);
    let mut a = std::fs::read(&plain_path).unwrap();
    let mut b = std::fs::read(&waffle_path).unwrap();
    assert_eq!(a.len(), b.len(), "{tag} file sizes differ");
    if journal == "wal" {
        for f in [&mut a, &mut b] {
            f[24..28].fill(0);
            f[92..96].fill(0);
        }
    }
    if let Some(at) = a.iter().zip(&b).position(|(x, y)| x != y) {
        panic!(
            "{tag} the files differ first at byte {at} (page {})\nplain:  {:?}\nwaffle: {:?}",
            at / page_size + 1,
            &a[at.saturating_sub(8)..(at + 16).min(a.len())],
            &b[at.saturating_sub(8)..(at + 16).min(b.len())]
        );
    }
}

fn describe(op: &Op) -> String {
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

fn short(o: &Outcome) -> String {
    let s = format!("{o:?}");
    if s.len() > 600 {
        format!("{}... ({} chars)", &s[..600], s.len())
    } else {
        s
    }
}
