//! Runs one schedule, waffle or control (every connection plain, no grid), one step at a time:
//! sends each step to its worker or runs it itself (outside.rs), checks every answer against the
//! model, and records each step's outcome for the comparison with the other run.

use std::collections::HashSet;
use std::path::PathBuf;

use super::model::{first_difference, rows_text, ConnId, Model, Rows};
use super::procs::{worker_program, WorkerArgs, WorkerProc};
use super::protocol::{rows_sql, Answer, WriteOp, CREATE_SQL};
use super::schedule::{Schedule, Step, INITIAL_PAD_BYTES, INITIAL_ROWS, NODES};
use super::tally::Tally;
use crate::db::open_plain;
use crate::nodes::{grid_of, start_node, Node};
use crate::temp_dir::TempDir;

/// L1 of every waffle connection: a few pages, so most come from the grid.
pub const L1: &str = "64KiB";
/// A line a worker or shell writes on stderr when verify mode found a wrong page.
const VERIFY_LOG_PREFIX: &str = "waffle verify:";

/// What one step did, as compared between the waffle run and the control.
#[derive(Clone, Debug, Default)]
pub struct Record {
    /// `ok`, `err:<extended code>`, `skipped`, ...
    pub class: String,
    /// Rows read, rows changed, a checkpoint's result: what must be equal too.
    pub compared: String,
    /// An error's message: shown, not compared.
    pub detail: String,
}

impl Record {
    pub fn of(class: &str) -> Record {
        Record { class: class.into(), ..Record::default() }
    }

    /// The same outcome as `other`'s (messages aside).
    pub fn same(&self, other: &Record) -> bool {
        (&self.class, &self.compared) == (&other.class, &other.compared)
    }
}

pub struct Outcome {
    pub trace: Vec<Record>,
    pub tally: Tally,
    /// The step it failed at (None: at the end) and why.
    pub failure: Option<(Option<usize>, String)>,
}

pub struct Run<'a> {
    pub(super) schedule: &'a Schedule,
    pub(super) waffle: bool,
    pub(super) dir: TempDir,
    pub(super) db: PathBuf,
    pub(super) nodes: Vec<Node>,
    pub(super) args: WorkerArgs,
    pub(super) workers: Vec<WorkerProc>,
    /// Per worker, per slot: open now (from the answers).
    pub(super) open: Vec<Vec<bool>>,
    pub(super) model: Model,
    pub(super) tally: Tally,
    pub(super) cache_ids: HashSet<String>,
    /// The rows of the scratch directory's other database (written only through ATTACHes).
    pub(super) other_rows: Rows,
}

/// Runs `schedule` through waffle (`waffle`: with verify mode if `verify`) or as the control.
pub fn run(schedule: &Schedule, waffle: bool, verify: bool) -> Outcome {
    let mut trace = Vec::new();
    let mut run = match Run::new(schedule, waffle, verify) {
        Ok(run) => run,
        Err(e) => return Outcome { trace, tally: Tally::default(), failure: Some((None, e)) },
    };
    for (i, step) in schedule.steps.iter().enumerate() {
        match run.step(step) {
            Ok(record) => trace.push(record),
            Err(e) => return Outcome { trace, tally: run.tally.clone(), failure: Some((Some(i), e)) },
        }
        run.tally.steps += 1;
    }
    let failure = run.finish().err().map(|e| (None, e));
    run.tally.schedules = 1;
    Outcome { trace, tally: run.tally.clone(), failure }
}

impl<'a> Run<'a> {
    fn new(schedule: &'a Schedule, waffle: bool, verify: bool) -> Result<Run<'a>, String> {
        let dir = TempDir::new(if waffle { "explore" } else { "explore-control" });
        let db = dir.join("e.db");
        let rows = create_db(&db, schedule.wal)?;
        let other_rows = super::scratch::make_scratch(&dir)?;
        let nodes: Vec<Node> = if waffle { (0..NODES).map(|_| start_node(64)).collect() } else { Vec::new() };
        let args =
            WorkerArgs { program: worker_program(), db: db.clone(), grid: grid_of(&nodes), local: L1.into(), verify };
        let open = schedule.waffle.iter().map(|ks| vec![false; ks.len()]).collect();
        let mut run = Run {
            schedule,
            waffle,
            dir,
            db,
            nodes,
            args,
            workers: Vec::new(),
            open,
            model: Model::new(rows),
            tally: Tally::default(),
            cache_ids: HashSet::new(),
            other_rows,
        };
        for _ in 0..schedule.waffle.len() {
            let worker = run.spawn_worker()?;
            run.workers.push(worker);
        }
        Ok(run)
    }

    fn spawn_worker(&mut self) -> Result<WorkerProc, String> {
        self.tally.processes += 1;
        WorkerProc::spawn(&self.args)
    }

    fn step(&mut self, step: &Step) -> Result<Record, String> {
        match step {
            Step::Kill { w } => self.kill(*w),
            Step::ShellWrite { ops, waffle } => self.shell_write(ops, *waffle),
            Step::ShellRead { waffle } => self.shell_read(*waffle),
            Step::ShellCheckpoint { mode } => self.shell_checkpoint(mode),
            Step::VacuumIntoRename => self.vacuum_into_rename(),
            Step::RenameBackup { file } => self.rename_backup(*file),
            Step::RenameDuringOpen { w, k, file } => self.rename_during_open(*w, *k, *file),
            Step::NodeFlush { n } => self.node_flush(*n),
            Step::NodeRestart { n } => self.node_restart(*n),
            Step::Attach { .. } => self.attach(step),
            Step::OpenOther { w, k, other } => self.open_other(*w, *k, *other),
            Step::StallRecovery { .. } => self.stall_recovery(step),
            Step::Fork { w, k, write } => self.fork(*w, *k, write.as_ref()),
            Step::Reopen { w, k, hot_list } => {
                let closed = self.conn_step(&Step::Close { w: *w, k: *k })?;
                let opened = self.conn_step(&Step::Open { w: *w, k: *k, hot_list })?;
                Ok(Record {
                    class: format!("{}/{}", closed.class, opened.class),
                    detail: opened.detail,
                    ..Record::default()
                })
            }
            _ => self.conn_step(step),
        }
    }

    /// A step on one connection of a worker.
    pub(super) fn conn_step(&mut self, step: &Step) -> Result<Record, String> {
        let (w, k) = step.conn().expect("a connection step");
        let conn: ConnId = (w, k);
        let before = self.before(conn, step);
        let command = self.command(step);
        let answer = self.workers[w].request(&command)?;
        self.check_stderr(w)?;
        if is_busy(&answer.class) {
            self.tally.busy += 1;
        }
        let compared = self.after(conn, step, &answer, before)?;
        let commit = matches!(step, Step::Commit { .. }) && answer.is_ok();
        self.model.txn_state(conn, answer.in_txn, commit)?;
        let detail = if answer.is_ok() { String::new() } else { answer.payload };
        Ok(Record { class: answer.class, compared, detail })
    }

    /// What the model says before a step reads: the rows it must see. The snapshot of a
    /// transaction is taken only once a read succeeded (`after`).
    fn before(&mut self, conn: ConnId, step: &Step) -> Option<Rows> {
        match step {
            Step::Read { .. } | Step::Get { .. } | Step::Backup { .. } | Step::Check { .. } => {
                Some(self.model.peek(conn).clone())
            }
            _ => None,
        }
    }

    pub(super) fn command(&self, step: &Step) -> String {
        let (w, k) = step.conn().unwrap();
        let waffle = self.waffle && self.schedule.waffle[w][k];
        match step {
            Step::Open { hot_list, .. } => format!("open {k} {} {hot_list}", if waffle { "waffle" } else { "plain" }),
            Step::Close { .. } => format!("close {k}"),
            Step::Begin { immediate, .. } => format!("begin {k} {}", if *immediate { "immediate" } else { "deferred" }),
            Step::Write { ops, .. } => format!("write {k} {}", ops_tokens(ops)),
            Step::Commit { .. } => format!("commit {k}"),
            Step::Rollback { .. } => format!("rollback {k}"),
            Step::Read { .. } => format!("read {k}"),
            Step::Get { ids, .. } => {
                format!("get {k} {}", ids.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(","))
            }
            Step::Checkpoint { mode, .. } => format!("checkpoint {k} {mode}"),
            Step::Vacuum { .. } => format!("vacuum {k}"),
            Step::Journal { mode, .. } => format!("journal {k} {mode}"),
            Step::Check { .. } => format!("check {k}"),
            Step::Backup { file, .. } => format!("backup {k} {}", self.backup_path(*file)),
            Step::Restore { file, .. } => format!("restore {k} {}", self.backup_path(*file)),
            other => panic!("not a connection step: {other:?}"),
        }
    }

    pub(super) fn backup_path(&self, file: u8) -> String {
        self.dir.join(&format!("backup-{file}.db")).to_str().expect("temp paths are UTF-8").to_string()
    }

    /// Checks an answer against the model and applies what it did; returns what the control
    /// must have answered too.
    fn after(&mut self, conn: ConnId, step: &Step, answer: &Answer, rows: Option<Rows>) -> Result<String, String> {
        let ok = answer.is_ok();
        // A backup reads in a read transaction of its own when the connection's has none, and
        // ends it (sqlite3_backup_step): it takes no snapshot for the connection's transaction.
        if ok && rows.is_some() && !matches!(step, Step::Backup { .. }) {
            self.model.visible(conn);
        }
        match step {
            Step::Open { .. } if ok => {
                self.open[conn.0][conn.1] = true;
                self.count_open(&answer.payload);
            }
            Step::Close { .. } if ok => {
                self.open[conn.0][conn.1] = false;
                self.check_verify(&answer.payload)?;
            }
            Step::Read { .. } | Step::Get { .. } if ok => {
                let ids = if let Step::Get { ids, .. } = step { Some(ids.as_slice()) } else { None };
                self.check_rows(&rows_text(&rows.unwrap(), ids), &answer.payload)?;
                return Ok(answer.payload.clone());
            }
            Step::Write { ops, .. } if ok => {
                self.model.wrote(conn, ops, &changes_of(&answer.payload)?)?;
                return Ok(answer.payload.clone());
            }
            Step::Check { .. } if ok && answer.payload != "ok" => {
                return Err(format!("integrity_check: {}", answer.payload));
            }
            Step::Backup { file, .. } => {
                self.tally.backups += u64::from(ok);
                let path = self.backup_path(*file);
                if !ok {
                    // No answer is not "no file": a worker killed after its copy
                    // finished leaves a whole backup the model would not know of.
                    let _ = std::fs::remove_file(&path);
                }
                self.model.backed_up(&path, rows.filter(|_| ok));
            }
            Step::Restore { file, .. } if ok => {
                self.tally.restores += 1;
                let path = self.backup_path(*file);
                if !self.model.has_backup(&path) {
                    return Err(format!("restored {path}, which no backup made"));
                }
                self.model.restored(&path);
            }
            Step::Checkpoint { .. } => self.tally.checkpoints += 1,
            _ => {}
        }
        Ok(match step {
            Step::Checkpoint { .. } | Step::Journal { .. } | Step::Check { .. } => answer.payload.clone(),
            _ => String::new(),
        })
    }

    /// A waffle open answers with its cache id: one seen before is a warm open.
    pub(super) fn count_open(&mut self, cache_id: &str) {
        if cache_id == "-" {
            return;
        }
        if self.cache_ids.insert(cache_id.to_string()) {
            self.tally.opens_cold += 1;
        } else {
            self.tally.opens_warm += 1;
        }
    }

    /// A close's `mismatches=N checked=M`: N must be 0.
    pub(super) fn check_verify(&mut self, payload: &str) -> Result<(), String> {
        for word in payload.split_whitespace() {
            let (name, value) = word.split_once('=').unwrap_or((word, ""));
            let n: u64 = value.parse().unwrap_or(0);
            match name {
                "mismatches" if n > 0 => return Err(format!("verify mode: {payload}")),
                "checked" => self.tally.verify_checked += n,
                _ => {}
            }
        }
        Ok(())
    }

    pub(super) fn check_rows(&self, expected: &[String], payload: &str) -> Result<(), String> {
        let got: Vec<String> = payload.split(';').filter(|r| !r.is_empty()).map(String::from).collect();
        match first_difference(expected, &got) {
            None => Ok(()),
            Some(diff) => Err(format!("read differs from the model: {diff}")),
        }
    }

    pub(super) fn check_stderr(&mut self, w: usize) -> Result<(), String> {
        let new = self.workers[w].new_stderr();
        match new.lines().find(|l| l.contains(VERIFY_LOG_PREFIX)) {
            Some(line) => {
                if std::env::var_os("WAFFLE_TRACE").is_some() {
                    eprintln!("worker {w}'s stderr:\n{new}");
                }
                Err(format!("worker {w} logged: {line}"))
            }
            None => Ok(()),
        }
    }

    /// kill -9 of worker `w`, and a new process in its place.
    fn kill(&mut self, w: usize) -> Result<Record, String> {
        self.check_stderr(w)?;
        self.workers[w].kill();
        self.tally.kills += 1;
        self.workers[w] = self.spawn_worker()?;
        self.open[w].iter_mut().for_each(|o| *o = false);
        self.model.forget_worker(w);
        Ok(Record::of("ok"))
    }

    pub(super) fn all_closed(&self) -> bool {
        self.open.iter().flatten().all(|o| !o)
    }

    /// Closes every connection (verify counters checked), stops the workers, and checks the file:
    /// integrity_check ok and every row the model's.
    fn finish(&mut self) -> Result<(), String> {
        for w in 0..self.workers.len() {
            for k in 0..self.open[w].len() {
                if self.open[w][k] {
                    let r = self.conn_step(&Step::Close { w, k })?;
                    if r.class != "ok" {
                        return Err(format!("final close of w{w}.{k}: {}", r.class));
                    }
                }
            }
        }
        for worker in self.workers.drain(..) {
            worker.quit()?;
        }
        let conn = open_plain(&self.db);
        let check: String = conn
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .map_err(|e| format!("final integrity_check: {e}"))?;
        if check != "ok" {
            return Err(format!("final integrity_check: {check}"));
        }
        let got = crate::workload::query(&conn, &rows_sql(""), &[]).map_err(|e| format!("final read: {e}"))?;
        let got: Vec<String> = got.iter().map(|r| r.iter().map(value_text).collect::<Vec<_>>().join("|")).collect();
        let expected = rows_text(self.model.committed(), None);
        if let Some(diff) = first_difference(&expected, &got) {
            return Err(format!("the final file differs from the model: {diff}"));
        }
        self.check_scratch()?;
        let other = open_plain(&self.dir.join(super::scratch::OTHER_DB));
        let got = crate::workload::query(&other, &rows_sql(""), &[]).map_err(|e| format!("final read: {e}"))?;
        let got: Vec<String> = got.iter().map(|r| r.iter().map(value_text).collect::<Vec<_>>().join("|")).collect();
        match first_difference(&rows_text(&self.other_rows, None), &got) {
            None => Ok(()),
            Some(diff) => Err(format!("the final other database differs from the model: {diff}")),
        }
    }
}

/// SQLITE_BUSY and SQLITE_LOCKED, with their extended codes.
fn is_busy(class: &str) -> bool {
    let code = class.strip_prefix("err:").and_then(|c| c.parse::<i32>().ok());
    matches!(code.map(|c| c & 0xff), Some(5 | 6)) || class == "busy"
}

pub(super) fn ops_tokens(ops: &[WriteOp]) -> String {
    ops.iter().map(|o| o.to_string()).collect::<Vec<_>>().join(" ")
}

pub(super) fn changes_of(payload: &str) -> Result<Vec<usize>, String> {
    payload
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().map_err(|_| format!("changes {payload:?}")))
        .collect()
}

fn value_text(v: &rusqlite::types::Value) -> String {
    use rusqlite::types::Value::*;
    match v {
        Integer(i) => i.to_string(),
        Text(t) => t.clone(),
        other => format!("{other:?}"),
    }
}

/// The database every schedule starts from: `INITIAL_ROWS` padded rows in the schedule's
/// journal mode.
fn create_db(db: &std::path::Path, wal: bool) -> Result<Rows, String> {
    let conn = open_plain(db);
    let mode = if wal { "WAL" } else { "DELETE" };
    let setup = format!("PRAGMA page_size = 4096; PRAGMA journal_mode = {mode}; {CREATE_SQL};");
    conn.execute_batch(&setup).map_err(|e| format!("create: {e}"))?;
    let mut rows = Rows::new();
    let tx = conn.unchecked_transaction().map_err(|e| e.to_string())?;
    for id in 1..=INITIAL_ROWS {
        let op = WriteOp::Insert { id, v: format!("init{id}"), pad_len: INITIAL_PAD_BYTES };
        tx.execute(&op.sql(), []).map_err(|e| format!("fill: {e}"))?;
        rows.insert(id, (format!("init{id}"), INITIAL_PAD_BYTES));
    }
    tx.commit().map_err(|e| e.to_string())?;
    Ok(rows)
}
