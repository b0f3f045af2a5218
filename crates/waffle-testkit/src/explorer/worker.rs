//! The worker side (`explorer-worker`): a process holding a few connection slots to one database,
//! each slot owned by a thread of its own, running the driver's commands one at a time.
//!
//! Commands, one a line: `<verb> <slot> [args]`, verbs `open SLOT waffle|plain HOT_LIST`,
//! `close`, `begin SLOT deferred|immediate`, `commit`, `rollback`, `write SLOT OP...`, `read`,
//! `get SLOT ID,ID,...`, `checkpoint SLOT MODE`, `vacuum`, `journal SLOT MODE`, `check`,
//! `backup SLOT PATH`, `restore SLOT PATH`, and the opener's moves (worker_moves.rs: `attach`,
//! `try_open`, `stall`, `go`, `fork`); `quit` closes everything and exits. Every
//! connection has the explorer's busy timeout (BUSY_TIMEOUT_MS), so an outcome depends only on the order of steps.

use std::io::{BufRead, Write};
use std::sync::mpsc;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use super::protocol::{rows_sql, Answer, WriteOp, BUSY_TIMEOUT_MS, SLOTS};
use super::worker_moves;
pub use super::worker_sql::Setup;
use super::worker_sql::{error_answer, in_txn, rows, Slot};
use crate::db::{stats, try_open_waffle};

/// SQLite's own cache per connection, in pages: small, so reads reach the VFS.
const SQLITE_CACHE_PAGES: u32 = 8;

/// Runs the worker until `quit` or the end of stdin.
pub fn serve(setup: Setup) {
    let slots: Vec<_> = (0..SLOTS).map(|_| spawn_slot(setup.clone())).collect();
    // Each slot's cache id while it is open through waffle (its open's answer): a fork's child
    // must not be in one of these caches.
    let mut cache_ids: Vec<Option<String>> = vec![None; SLOTS];
    println!("ready {}", std::process::id());
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let words: Vec<String> = line.split_whitespace().map(String::from).collect();
        if words.first().map(String::as_str) == Some("quit") {
            break;
        }
        let slot = words.get(1).and_then(|s| s.parse::<usize>().ok()).filter(|k| *k < SLOTS);
        let answer = match slot {
            Some(k) if words[0] == "stall" => worker_moves::stall(&slots[k], words),
            Some(k) if words[0] == "go" => worker_moves::go(&slots[k]),
            Some(_) if words[0] == "fork" => {
                let op = words.get(3).and_then(|t| WriteOp::parse(t));
                let mut answer = worker_moves::forked(&setup, words.get(2).map(String::as_str) == Some("waffle"), op);
                if answer.is_ok() {
                    let mut open: Vec<&str> = cache_ids.iter().flatten().map(String::as_str).collect();
                    open.dedup();
                    answer.payload.push_str(&format!(" parents={}", open.join(",")));
                }
                answer
            }
            Some(k) => {
                let verb = words[0].clone();
                let answer = ask_slot(&slots[k], words);
                match verb.as_str() {
                    "open" if answer.is_ok() && answer.payload != "-" => cache_ids[k] = Some(answer.payload.clone()),
                    "close" => cache_ids[k] = None, // closed, or dropped after a failed close
                    _ => {}
                }
                answer
            }
            None => Answer { class: "err:protocol".into(), in_txn: false, payload: line.clone() },
        };
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{}", answer.line());
        let _ = out.flush();
    }
    for (tx, _) in &slots {
        let _ = tx.send(vec!["quit".into()]);
    }
}

fn spawn_slot(setup: Setup) -> Slot {
    let (tx, rx) = mpsc::channel::<Vec<String>>();
    let (atx, arx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut conn: Option<Connection> = None;
        for words in rx {
            if words[0] == "quit" {
                break;
            }
            let _ = atx.send(run(&setup, &mut conn, &words));
        }
        // Closed on this thread: the connection lives and dies on its own thread.
        drop(conn);
    });
    (tx, arx)
}

fn ask_slot(slot: &Slot, words: Vec<String>) -> Answer {
    slot.0.send(words).expect("slot thread alive");
    slot.1.recv().expect("slot thread answers")
}

/// One command on a slot.
fn run(setup: &Setup, conn: &mut Option<Connection>, words: &[String]) -> Answer {
    let arg = |i: usize| words.get(i).map(String::as_str).unwrap_or("");
    if words[0] == "open" {
        return open(setup, conn, arg(2) == "waffle", arg(3));
    }
    if words[0] == "close" {
        return close(conn);
    }
    if words[0] == "attach" {
        return worker_moves::attach(setup, conn.as_ref(), words);
    }
    if words[0] == "try_open" {
        return worker_moves::try_open(setup, arg(2) == "waffle", arg(3));
    }
    let Some(c) = conn.as_ref() else {
        return Answer { class: "err:closed".into(), in_txn: false, payload: String::new() };
    };
    let result = match words[0].as_str() {
        "begin" => {
            c.execute_batch(if arg(2) == "immediate" { "BEGIN IMMEDIATE" } else { "BEGIN" }).map(|_| String::new())
        }
        "commit" => c.execute_batch("COMMIT").map(|_| String::new()),
        "rollback" => c.execute_batch("ROLLBACK").map(|_| String::new()),
        "write" => return write(c, &words[2..]),
        "read" => rows(c, &rows_sql("")),
        "get" => rows(c, &rows_sql(&format!("WHERE id IN ({})", arg(2)))),
        "checkpoint" => rows(c, &format!("PRAGMA wal_checkpoint({})", arg(2))),
        "vacuum" => c.execute_batch("VACUUM").map(|_| String::new()),
        "journal" => journal(c, arg(2)),
        "check" => rows(c, "PRAGMA integrity_check"),
        "backup" => backup_to(c, arg(2)),
        "restore" => restore_from(c, arg(2)),
        "stall" => return worker_moves::stalled_read(c),
        other => return Answer { class: "err:protocol".into(), in_txn: false, payload: other.into() },
    };
    match result {
        Ok(payload) => Answer::ok(in_txn(Some(c)), payload),
        Err(e) => error_answer(Some(c), &e),
    }
}

fn open(setup: &Setup, conn: &mut Option<Connection>, waffle: bool, hot_list: &str) -> Answer {
    if conn.is_some() {
        return Answer { class: "err:already-open".into(), in_txn: in_txn(conn.as_ref()), payload: String::new() };
    }
    let opened = if waffle { open_waffle(setup, hot_list) } else { open_plain(setup) };
    let opened = opened.and_then(|c| {
        c.busy_timeout(Duration::from_millis(BUSY_TIMEOUT_MS.into()))?;
        c.execute_batch(&format!("PRAGMA cache_size = {SQLITE_CACHE_PAGES}"))?;
        Ok(c)
    });
    match opened {
        Ok(c) => {
            let payload = if waffle { stats(&c)["cache_id"].as_str().unwrap_or("?").to_string() } else { "-".into() };
            *conn = Some(c);
            Answer::ok(false, payload)
        }
        Err(e) => error_answer(None, &e),
    }
}

fn open_waffle(setup: &Setup, hot_list: &str) -> rusqlite::Result<Connection> {
    let mut params = vec![
        ("waffle_grid", setup.grid.as_str()),
        ("waffle_local", setup.local.as_str()),
        ("waffle_hot_list", hot_list),
    ];
    if setup.verify {
        params.push(("waffle_verify", "on"));
    }
    try_open_waffle(&setup.db, &params)
}

fn open_plain(setup: &Setup) -> rusqlite::Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    Connection::open_with_flags(&setup.db, flags)
}

/// Closes the slot; a waffle connection first reports its verify counters (`verify_mismatches`
/// and `verify_checked`, or `verify=absent` before verify mode exists).
fn close(conn: &mut Option<Connection>) -> Answer {
    let Some(c) = conn.take() else {
        return Answer { class: "err:closed".into(), in_txn: false, payload: String::new() };
    };
    let payload = verify_counts(&c);
    match c.close() {
        Ok(()) => Answer::ok(false, payload),
        Err((c, e)) => {
            let answer = error_answer(Some(&c), &e);
            drop(c);
            answer
        }
    }
}

/// `mismatches=N checked=M` of a waffle connection, `plain` for a plain one.
fn verify_counts(c: &Connection) -> String {
    let Ok(text) = c.query_row("PRAGMA waffle_stats", [], |r| r.get::<_, String>(0)) else {
        return "plain".into();
    };
    let s: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    match (s.get("verify_mismatches"), s.get("verify_checked")) {
        (Some(m), Some(k)) => format!("mismatches={m} checked={k}"),
        _ => "verify=absent".into(),
    }
}

/// The statements of one write, all or none: outside a transaction in one of their own
/// (BEGIN IMMEDIATE .. COMMIT), inside one under a savepoint. The payload is the rows each
/// statement changed.
fn write(c: &Connection, ops: &[String]) -> Answer {
    let own_txn = c.is_autocommit();
    if !own_txn {
        return write_in_txn(c, ops);
    }
    let run = || -> rusqlite::Result<Vec<usize>> {
        let mut changes = Vec::new();
        for token in ops {
            let op = WriteOp::parse(token).ok_or_else(|| rusqlite::Error::InvalidParameterName(token.clone()))?;
            changes.push(c.execute(&op.sql(), [])?);
        }
        Ok(changes)
    };
    if let Err(e) = c.execute_batch("BEGIN IMMEDIATE") {
        return error_answer(Some(c), &e);
    }
    match run().and_then(|ch| c.execute_batch("COMMIT").map(|_| ch)) {
        Ok(ch) => Answer::ok(in_txn(Some(c)), join(&ch)),
        Err(e) => {
            if !c.is_autocommit() {
                let _ = c.execute_batch("ROLLBACK");
            }
            error_answer(Some(c), &e)
        }
    }
}

fn write_in_txn(c: &Connection, ops: &[String]) -> Answer {
    if let Err(e) = c.execute_batch("SAVEPOINT w") {
        return error_answer(Some(c), &e);
    }
    let mut changes = Vec::new();
    for token in ops {
        let Some(op) = WriteOp::parse(token) else {
            return Answer { class: "err:protocol".into(), in_txn: in_txn(Some(c)), payload: token.clone() };
        };
        match c.execute(&op.sql(), []) {
            Ok(n) => changes.push(n),
            Err(e) => {
                // Undoes this write's statements only; an error that ended the transaction left nothing to undo.
                let _ = c.execute_batch("ROLLBACK TO w; RELEASE w");
                return error_answer(Some(c), &e);
            }
        }
    }
    match c.execute_batch("RELEASE w") {
        Ok(()) => Answer::ok(in_txn(Some(c)), join(&changes)),
        Err(e) => error_answer(Some(c), &e),
    }
}

fn join(changes: &[usize]) -> String {
    changes.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(",")
}

/// `PRAGMA journal_mode = MODE`, after a read that brings SQLite's own page cache up to date.
/// SQLite (3.40.1 and 3.46.0 alike) leaves WAL mode without a read transaction: a connection
/// whose cache predates other connections' WAL commits, none of which changed page 1, keeps
/// that cache in rollback mode (the header's change counter and page count are unchanged) and
/// its next write loses those commits, plain connections alike (seed 40059101; the steps in
/// docs/reliability.md). The model cannot follow that, so the explorer does not make it.
fn journal(c: &Connection, mode: &str) -> rusqlite::Result<String> {
    if !c.is_autocommit() {
        // Inside a transaction SQLite refuses to leave WAL mode anyway; no read to add.
        return rows(c, &format!("PRAGMA journal_mode = {mode}"));
    }
    c.query_row("SELECT count(*) FROM sqlite_schema", [], |_| Ok(()))?;
    rows(c, &format!("PRAGMA journal_mode = {mode}"))
}

/// The online backup API from this connection into a new file `path`.
fn backup_to(c: &Connection, path: &str) -> rusqlite::Result<String> {
    let _ = std::fs::remove_file(path);
    let dest = Connection::open(path)?;
    // SAFETY: both handles are open connections owned by this thread for the whole call.
    let copied = unsafe { backup_raw(dest.handle(), c.handle()) }.map_err(|code| sqlite_error(&dest, code));
    if copied.is_err() {
        // A backup cut short is no backup: the driver's model forgets it too.
        drop(dest);
        let _ = std::fs::remove_file(path);
    }
    copied.map(|_| String::new())
}

/// The online backup API from the file `path` into this connection's database (a restore).
fn restore_from(c: &Connection, path: &str) -> rusqlite::Result<String> {
    let src = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    // SAFETY: as in backup_to.
    unsafe { backup_raw(c.handle(), src.handle()) }.map_err(|code| sqlite_error(c, code))?;
    Ok(String::new())
}

fn sqlite_error(c: &Connection, code: i32) -> rusqlite::Error {
    // SAFETY: an open connection's handle.
    let msg = unsafe { std::ffi::CStr::from_ptr(rusqlite::ffi::sqlite3_errmsg(c.handle())) };
    rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), Some(msg.to_string_lossy().into_owned()))
}

/// sqlite3_backup_init/step(-1)/finish: Err(extended code) unless every page was copied.
unsafe fn backup_raw(dest: *mut rusqlite::ffi::sqlite3, src: *mut rusqlite::ffi::sqlite3) -> Result<(), i32> {
    use rusqlite::ffi;
    let main = c"main".as_ptr();
    let b = ffi::sqlite3_backup_init(dest, main, src, main);
    if b.is_null() {
        return Err(ffi::sqlite3_extended_errcode(dest));
    }
    let step = ffi::sqlite3_backup_step(b, -1);
    let finish = ffi::sqlite3_backup_finish(b);
    match (step, finish) {
        (ffi::SQLITE_DONE, ffi::SQLITE_OK) => Ok(()),
        (ffi::SQLITE_DONE, rc) => Err(rc),
        (rc, _) => Err(rc),
    }
}
