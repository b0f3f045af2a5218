//! A database's background job (a warm, warm.rs, or the hot list's reload,
//! hot_reload.rs): at most one at a time, stopped by the database's close or
//! by a connection that wants the file alone, and the gate its read
//! transactions and this process's writers take turns at.
//!
//! A leaf: it knows no other file of this crate (the per-database state,
//! open_db.rs, holds a `Job`; the jobs and the VFS's lock methods use it).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long a closing database waits for its warm to stop.
const STOP_WAIT: Duration = Duration::from_secs(15);

/// The warm thread of one database: at most one at a time.
#[derive(Default)]
pub struct Job {
    pub(crate) stop: AtomicBool,
    running: Mutex<bool>,
    ended: Condvar,
    /// Keeps this process's writers from meeting the job's read transactions (see [`PieceGate`]).
    pub gate: PieceGate,
}

/// The job's read transactions and this process's writers take turns, so a
/// writer of this process (whose busy timeout may be none, SQLite's default)
/// never gets SQLITE_BUSY because of a reader it did not open: a connection
/// that asks for PENDING or EXCLUSIVE first waits (at most WRITER_WAIT) for
/// the running piece to end, and no piece starts while such a writer waits.
/// A piece is marked before its lock is asked for, and one lock attempt is
/// made at a time, so a writer never waits longer than one piece.
#[derive(Default)]
pub struct PieceGate {
    state: Mutex<GateState>,
    changed: Condvar,
}

#[derive(Default)]
struct GateState {
    in_piece: bool,
    writers: u32,
    /// Pieces waiting for the writers to leave: only they need a wake-up
    /// (a notify is a futex call even with nobody waiting; issue 33).
    waiting_pieces: u32,
}

/// How long a writer waits for a piece to end (a piece is about PIECE_TIME).
const WRITER_WAIT: Duration = Duration::from_secs(2);
/// A piece's lock attempt that met a writer waits this long before the next.
pub(crate) const LOCK_RETRY: Duration = Duration::from_millis(10);

impl PieceGate {
    fn lock(&self) -> std::sync::MutexGuard<'_, GateState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Before a piece asks for its read lock: waits while writers of this process wait.
    /// The piece is marked until the returned guard drops.
    pub(crate) fn enter_piece(&self, stop: &AtomicBool) -> Piece<'_> {
        let mut g = self.lock();
        g.waiting_pieces += 1;
        while g.writers > 0 && !stop.load(Ordering::Acquire) {
            g = self.changed.wait_timeout(g, LOCK_RETRY).unwrap_or_else(|e| e.into_inner()).0;
        }
        g.waiting_pieces -= 1;
        g.in_piece = true;
        Piece(self)
    }

    /// The piece's read transaction ended (or its lock was not granted).
    fn leave_piece(&self) {
        self.lock().in_piece = false;
        self.changed.notify_all();
    }

    /// A connection of this process is about to ask for PENDING or EXCLUSIVE.
    pub fn writer_enter(&self) {
        let mut g = self.lock();
        g.writers += 1;
        let deadline = Instant::now() + WRITER_WAIT;
        while g.in_piece {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            g = self.changed.wait_timeout(g, deadline - now).unwrap_or_else(|e| e.into_inner()).0;
        }
    }

    /// That connection's lock call returned.
    pub fn writer_leave(&self) {
        let mut g = self.lock();
        g.writers = g.writers.saturating_sub(1);
        let wake = g.writers == 0 && g.waiting_pieces > 0;
        drop(g);
        if wake {
            self.changed.notify_all();
        }
    }
}

/// A piece's read transaction, marked in the gate until dropped (after its COMMIT).
pub(crate) struct Piece<'a>(&'a PieceGate);

impl Drop for Piece<'_> {
    fn drop(&mut self) {
        self.0.leave_piece();
    }
}

impl Job {
    pub(crate) fn begin(&self) -> bool {
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        if *running {
            return false;
        }
        *running = true;
        self.stop.store(false, Ordering::Release);
        true
    }

    pub(crate) fn end(&self) {
        *self.running.lock().unwrap_or_else(|e| e.into_inner()) = false;
        self.ended.notify_all();
    }

    /// Tells a running warm to stop and waits (at most STOP_WAIT) for its thread to end.
    pub fn stop_and_wait(&self) {
        self.stop.store(true, Ordering::Release);
        let deadline = Instant::now() + STOP_WAIT;
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        while *running {
            let now = Instant::now();
            if now >= deadline {
                waffle_core::warn!("a warm did not stop within {STOP_WAIT:?} of being told to (its database closing, or a connection wanting the file alone)");
                return;
            }
            running = self.ended.wait_timeout(running, deadline - now).unwrap_or_else(|e| e.into_inner()).0;
        }
    }
}
