//! The worker's side of the opener's moves (issue 31): an ATTACH from SQL with its read, write
//! and DETACH; an open with settings other than the run's on a connection of its own; a read
//! whose busy handler holds it (the `stall`/`go` pair) while another process recovers the
//! wal-index and the driver's shell checkpoints; a fork whose child opens the database anew.
//!
//! Commands: `attach SLOT ro|rw waffle|plain URI [OP]`, `try_open SLOT waffle|plain PARAMS`
//! (`k=v&k=v`, or `-`), `stall SLOT` (answers `waiting` once the read's busy handler is first
//! called, or the read's own answer if it never waits), `go SLOT` (the read's answer),
//! `fork SLOT waffle|plain [OP]` (on the main thread: the child's answer).

use std::io::Read;
use std::os::fd::FromRawFd;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags};

use super::protocol::{rows_sql, rows_sql_in, Answer, WriteOp, BUSY_TIMEOUT_MS};
use super::worker_sql::{error_answer, in_txn, rows, Setup, Slot};
use crate::db::{try_open_waffle, waffle_uri};

/// How long a stalled read waits for the driver's `go` before it gives up (busy).
const STALL_MAX: Duration = Duration::from_secs(20);
/// How long a forked child may take to answer before it is killed (the driver's bound is 60 s).
const CHILD_MAX: Duration = Duration::from_secs(50);

/// Calls of the stalled read's busy handler, and the driver's word to retry (one stall at a
/// time per worker: the handler is a plain fn).
static GATE_CALLS: AtomicU32 = AtomicU32::new(0);
static GATE_GO: AtomicBool = AtomicBool::new(false);

fn closed() -> Answer {
    Answer { class: "err:closed".into(), in_txn: false, payload: String::new() }
}

/// An error answer whose payload says at which statement (`attach`, `read`, ...): the driver
/// compares the stage too.
fn failed_at(stage: &str, c: Option<&Connection>, e: &rusqlite::Error) -> Answer {
    let mut a = error_answer(c, e);
    a.payload = format!("{stage}: {}", a.payload);
    a
}

fn timed(c: rusqlite::Result<Connection>) -> rusqlite::Result<Connection> {
    let c = c?;
    c.busy_timeout(Duration::from_millis(BUSY_TIMEOUT_MS.into()))?;
    Ok(c)
}

/// The run's settings for a waffle connection of the worker's own, then `extra` over them.
fn waffle_params<'a>(setup: &'a Setup, extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut p = vec![
        ("waffle_grid", setup.grid.as_str()),
        ("waffle_local", setup.local.as_str()),
        ("waffle_hot_list", "off"),
        ("waffle_verify", if setup.verify { "on" } else { "off" }),
    ];
    for (k, v) in extra {
        p.retain(|(name, _)| name != k);
        p.push((k, v));
    }
    p
}

fn open_read_only(setup: &Setup, waffle: bool) -> rusqlite::Result<Connection> {
    crate::db::register();
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let c = if waffle {
        Connection::open_with_flags(waffle_uri(&setup.db, &waffle_params(setup, &[("mode", "ro")])), flags)
    } else {
        Connection::open_with_flags(&setup.db, flags)
    };
    timed(c)
}

/// ATTACH `uri` AS a on the slot's connection (`rw`) or a read-only one of its own, every row
/// of `a.t`, the write `op` on `a.t`, DETACH. Payload: `rows changes=N` (`-`: no write).
pub(super) fn attach(setup: &Setup, conn: Option<&Connection>, words: &[String]) -> Answer {
    let arg = |i: usize| words.get(i).map(String::as_str).unwrap_or("");
    let (read_only, waffle, uri) = (arg(2) == "ro", arg(3) == "waffle", arg(4));
    let op = WriteOp::parse(arg(5));
    let own = if read_only {
        match open_read_only(setup, waffle) {
            Ok(c) => Some(c),
            Err(e) => return failed_at("open", None, &e),
        }
    } else {
        None
    };
    let Some(c) = own.as_ref().or(conn) else { return closed() };
    if !c.is_autocommit() {
        // SQLite attaches inside a transaction, but its DETACH then fails ("database a is
        // locked") and the name stays attached: the explorer attaches outside one only.
        let payload = "attach: inside a transaction (not tried)".to_string();
        return Answer { class: "err:in-txn".into(), in_txn: true, payload };
    }
    if let Err(e) = c.execute_batch(&format!("ATTACH '{uri}' AS a")) {
        return failed_at("attach", Some(c), &e);
    }
    let body = || -> Result<String, (&'static str, rusqlite::Error)> {
        let read = rows(c, &rows_sql_in("a.t", "")).map_err(|e| ("read", e))?;
        let changes = match &op {
            Some(op) => c.execute(&op.sql_in("a.t"), []).map_err(|e| ("write", e))?.to_string(),
            None => "-".into(),
        };
        Ok(format!("{read} changes={changes}"))
    };
    let result = body();
    let detached = c.execute_batch("DETACH a");
    let answer = match (result, detached) {
        (Ok(payload), Ok(())) => Answer::ok(in_txn(Some(c)), payload),
        (Err((stage, e)), _) => failed_at(stage, Some(c), &e),
        (Ok(_), Err(e)) => failed_at("detach", Some(c), &e),
    };
    if let Some(c) = own {
        if let Err((_, e)) = c.close() {
            return failed_at("close", None, &e);
        }
    }
    answer
}

/// A read-write connection of its own to the database (`waffle`: the run's settings with `extra`
/// over them), with the explorer's busy timeout.
fn open_own(setup: &Setup, waffle: bool, extra: &[(&str, &str)]) -> rusqlite::Result<Connection> {
    let opened = if waffle {
        try_open_waffle(&setup.db, &waffle_params(setup, extra))
    } else {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_URI | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        Connection::open_with_flags(&setup.db, flags)
    };
    timed(opened)
}

/// An open of the database on a connection of its own (`waffle`: the run's settings with
/// `params` over them), a read of every row, a close. Payload: the rows.
pub(super) fn try_open(setup: &Setup, waffle: bool, params: &str) -> Answer {
    let extra: Vec<(&str, &str)> =
        params.split('&').filter(|p| !p.is_empty() && *p != "-").filter_map(|p| p.split_once('=')).collect();
    let c = match open_own(setup, waffle, &extra) {
        Ok(c) => c,
        Err(e) => return failed_at("open", None, &e),
    };
    let answer = match rows(&c, &rows_sql("")) {
        Ok(payload) => Answer::ok(false, payload),
        Err(e) => failed_at("read", Some(&c), &e),
    };
    match c.close() {
        Err((_, e)) if answer.is_ok() => failed_at("close", None, &e),
        _ => answer,
    }
}

/// The busy handler of a stalled read: says it was called, waits for `go`, then retries as a
/// busy timeout would.
fn gated_busy(attempt: i32) -> bool {
    if GATE_CALLS.fetch_add(1, Ordering::SeqCst) == 0 {
        let deadline = Instant::now() + STALL_MAX;
        while !GATE_GO.load(Ordering::SeqCst) {
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        return true;
    }
    std::thread::sleep(Duration::from_millis(1));
    attempt < 5000
}

/// On the slot's thread: every row, with the gated busy handler in place of the busy timeout.
pub(super) fn stalled_read(c: &Connection) -> Answer {
    let read = c.busy_handler(Some(gated_busy)).and_then(|_| rows(c, &rows_sql("")));
    let restored = c.busy_timeout(Duration::from_millis(BUSY_TIMEOUT_MS.into()));
    match read.and_then(|rows| restored.map(|_| rows)) {
        Ok(payload) => Answer::ok(in_txn(Some(c)), payload),
        Err(e) => error_answer(Some(c), &e),
    }
}

/// On the worker's main thread: starts the slot's stalled read and answers once it waits in
/// its busy handler (`waiting`), or with its own answer if it never waits.
pub(super) fn stall(slot: &Slot, words: Vec<String>) -> Answer {
    GATE_CALLS.store(0, Ordering::SeqCst);
    GATE_GO.store(false, Ordering::SeqCst);
    slot.0.send(words).expect("slot thread alive");
    let deadline = Instant::now() + STALL_MAX;
    while Instant::now() < deadline {
        if let Ok(answer) = slot.1.try_recv() {
            return answer;
        }
        if GATE_CALLS.load(Ordering::SeqCst) > 0 {
            return Answer::ok(false, "waiting");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Answer { class: "err:stall-hung".into(), in_txn: false, payload: "the read neither answered nor waited".into() }
}

/// The driver's word: the stalled read retries; its answer.
pub(super) fn go(slot: &Slot) -> Answer {
    GATE_GO.store(true, Ordering::SeqCst);
    match slot.1.recv_timeout(STALL_MAX + Duration::from_secs(5)) {
        Ok(answer) => answer,
        Err(e) => Answer { class: "err:go-hung".into(), in_txn: false, payload: e.to_string() },
    }
}

/// On the worker's main thread, its slots idle (steps run one at a time): forks; the child opens
/// the database anew on a connection of its own (`waffle`: the run's settings), reads every row,
/// runs `op` (autocommit), reads its cache's identity and verify figures, closes and `_exit`s
/// without touching what it inherited. Payload: `ROWS changes=N cache=ID|- mismatches=M`.
pub(super) fn forked(setup: &Setup, waffle: bool, op: Option<WriteOp>) -> Answer {
    let failed = |what: &str| Answer { class: "err:fork".into(), in_txn: false, payload: what.into() };
    let mut fds = [0i32; 2];
    // SAFETY: fds has room for two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return failed("pipe");
    }
    // SAFETY: the child runs on this one thread, uses only the database and the pipe, and ends
    // with _exit (no destructor of the parent's runs there).
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let answer = std::panic::catch_unwind(|| in_child(setup, waffle, op.as_ref()))
            .unwrap_or_else(|_| failed("the child panicked"));
        let line = format!("{}\n", answer.line());
        let mut left = line.as_bytes();
        while !left.is_empty() {
            // SAFETY: the pipe's write end and the unwritten rest of this line's bytes.
            let n = unsafe { libc::write(fds[1], left.as_ptr() as *const libc::c_void, left.len()) };
            if n <= 0 {
                break;
            }
            left = &left[n as usize..];
        }
        // SAFETY: ends the child without running the parent's destructors.
        unsafe { libc::_exit(0) };
    }
    // SAFETY: the write end is the child's now; closing ours lets the read see its end.
    unsafe { libc::close(fds[1]) };
    // SAFETY: the read end, ours alone from here (closed when `pipe` drops).
    let mut pipe = unsafe { std::fs::File::from_raw_fd(fds[0]) };
    if pid < 0 {
        return failed("fork");
    }
    // Read while the child writes (a long answer fills the pipe before the child can end).
    let line = read_to_end_within(&mut pipe, Instant::now() + CHILD_MAX);
    if line.is_none() {
        // SAFETY: our own child, which did not answer in time.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    // SAFETY: our own child, ended (its write end closed at its exit) or killed just above.
    unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
    match line {
        Some(line) => Answer::parse(line.trim_end()).unwrap_or_else(|| failed(&format!("the child answered {line:?}"))),
        None => failed("the child did not answer in time (killed)"),
    }
}

/// Everything `pipe` gives until its writer closes it, or None at `deadline`.
fn read_to_end_within(pipe: &mut std::fs::File, deadline: Instant) -> Option<String> {
    let mut got = Vec::new();
    let mut chunk = [0u8; 64 << 10];
    loop {
        let left_ms = deadline.checked_duration_since(Instant::now())?.as_millis().min(i32::MAX as u128) as i32;
        let mut ready = libc::pollfd { fd: std::os::fd::AsRawFd::as_raw_fd(pipe), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd.
        match unsafe { libc::poll(&mut ready, 1, left_ms) } {
            0 => return None,
            r if r < 0 => continue, // interrupted: poll again with what is left
            _ => {}
        }
        match pipe.read(&mut chunk) {
            Ok(0) => return Some(String::from_utf8_lossy(&got).into_owned()),
            Ok(n) => got.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return Some(String::from_utf8_lossy(&got).into_owned()),
        }
    }
}

/// The child's work (see [`forked`]).
fn in_child(setup: &Setup, waffle: bool, op: Option<&WriteOp>) -> Answer {
    let c = match open_own(setup, waffle, &[]) {
        Ok(c) => c,
        Err(e) => return failed_at("open", None, &e),
    };
    let body = || -> Result<String, (&'static str, rusqlite::Error)> {
        let read = rows(&c, &rows_sql("")).map_err(|e| ("read", e))?;
        let changes = match op {
            Some(op) => c.execute(&op.sql(), []).map_err(|e| ("write", e))?.to_string(),
            None => "-".into(),
        };
        Ok(format!("{read} changes={changes}"))
    };
    let answer = match body() {
        Ok(payload) => {
            let (cache, mismatches) = if waffle {
                let s = crate::db::stats(&c);
                (s["cache_id"].as_str().unwrap_or("?").to_string(), s["verify_mismatches"].as_u64().unwrap_or(0))
            } else {
                ("-".to_string(), 0)
            };
            Answer::ok(false, format!("{payload} cache={cache} mismatches={mismatches}"))
        }
        Err((stage, e)) => failed_at(stage, Some(&c), &e),
    };
    match c.close() {
        Err((_, e)) if answer.is_ok() => failed_at("close", None, &e),
        _ => answer,
    }
}
