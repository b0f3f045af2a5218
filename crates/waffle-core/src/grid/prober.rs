//! The prober: one thread for the whole process sends an `mn` to each node,
//! of every live grid, that has seen no request for its grid's
//! `idle_probe_ms` (node.rs, `probe_if_idle`): without it a node nobody asks
//! stays "up" after it died. Each tick also ends a node's tier sample whose
//! window is over (tier_sample.rs), so a client that went idle does not keep
//! a node logging its fetches.
//!
//! Why one per process and not one per grid: a grid lives as long as one
//! database is open, and a process that opens and closes databases (a CLI
//! tool, SQLite's own test suite: 14,000 opens in `corruptC`) would start and
//! join a thread at every open for a prober that never sends before the idle
//! time (3 s by default). The first grid starts the thread; it stops once no
//! grid has been enrolled for a whole [`LINGER`], so a loop of opens starts
//! it once and a process whose last database closed is left without it
//! shortly after.
//!
//! The one-way rule: the prober never keeps a grid alive. Between ticks it
//! holds weak references only; during a tick it holds the nodes it probes,
//! at most until the probe's deadline (a grid dropped meanwhile closes its
//! connections when that probe ends).
//!
//! Fork: the state names the process whose thread runs, so a child's first
//! grid starts its own. The state's lock is held to copy the list and to
//! enrol, never across a probe, a wait or a log line: fork.rs takes it
//! around every fork ([`hold_for_fork`]), so the child's copy is free.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use super::node::Node;

/// How long the thread waits, with no grid enrolled, before it stops.
pub const LINGER: Duration = Duration::from_secs(1);

/// A grid's place in the prober's list; dropped with the grid.
pub struct Enrolment {
    id: u64,
}

struct Enrolled {
    id: u64,
    nodes: Weak<Vec<Node>>,
    idle: Duration,
}

struct State {
    /// The process whose thread `running` speaks of: a child after fork has no thread.
    pid: u32,
    running: bool,
    next_id: u64,
    grids: Vec<Enrolled>,
}

static STATE: Mutex<State> = Mutex::new(State { pid: 0, running: false, next_id: 0, grids: Vec::new() });
static WAKE: Condvar = Condvar::new();

fn state() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// The state's lock, held across a fork (crate::fork).
pub(crate) struct ForkHold(#[allow(dead_code)] MutexGuard<'static, State>);

pub(crate) fn hold_for_fork() -> ForkHold {
    ForkHold(state())
}

/// How often the nodes of a grid with this idle time are looked at: a third of it, 10 ms to 1 s.
fn tick_of(idle: Duration) -> Duration {
    (idle / 3).clamp(Duration::from_millis(10), Duration::from_secs(1))
}

/// Enrols `nodes` to be probed when idle for `idle_ms`, starting the thread if none runs.
/// None (nothing is probed) if `idle_ms` is 0, there are no nodes, or the thread cannot start.
pub fn enrol(nodes: &Arc<Vec<Node>>, idle_ms: u64) -> Option<Enrolment> {
    if idle_ms == 0 || nodes.is_empty() {
        return None;
    }
    let mut s = state();
    let pid = std::process::id();
    if s.pid != pid {
        // A forked child: the parent's thread is not here, nor are its grids' probes ours to make.
        *s = State { pid, running: false, next_id: s.next_id, grids: Vec::new() };
    }
    if !s.running {
        let spawned = std::thread::Builder::new().name("waffle-probe".into()).spawn(run);
        if let Err(e) = spawned {
            drop(s);
            crate::warn!("cannot start the grid's prober thread: {e}; idle nodes are not probed");
            return None;
        }
        s.running = true;
    }
    let id = s.next_id;
    s.next_id += 1;
    s.grids.push(Enrolled { id, nodes: Arc::downgrade(nodes), idle: Duration::from_millis(idle_ms) });
    // A shorter tick than the thread waits for now.
    WAKE.notify_all();
    Some(Enrolment { id })
}

impl Drop for Enrolment {
    fn drop(&mut self) {
        let mut s = state();
        s.grids.retain(|g| g.id != self.id);
    }
}

fn run() {
    let mut empty_since: Option<Instant> = None;
    loop {
        let due = {
            let s = state();
            let tick = s.grids.iter().map(|g| tick_of(g.idle)).min().unwrap_or(LINGER);
            let (mut s, _) = WAKE.wait_timeout(s, tick).unwrap_or_else(|e| e.into_inner());
            if s.grids.is_empty() {
                let since = *empty_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= LINGER {
                    s.running = false;
                    return;
                }
                continue;
            }
            empty_since = None;
            s.grids.iter().filter_map(|g| Some((g.nodes.upgrade()?, g.idle))).collect::<Vec<_>>()
        };
        // Outside the lock: a probe waits up to its deadline, and grids come and go meanwhile.
        for (nodes, idle) in &due {
            for node in nodes.iter() {
                node.probe_if_idle(*idle);
                node.end_overdue_sample();
            }
        }
        drop(due);
        // Summaries of lines held back (a node that flapped) need no later line to be said.
        crate::log::flush_held();
    }
}
