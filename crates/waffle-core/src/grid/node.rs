//! One grid node: its address, its idle connections, its health and counters.
//!
//! A request goes through [`Node::begin`] (admission, a connection, the
//! request written) and ends with [`Exchange::finish`] or [`Exchange::fail`],
//! which keep the counters and the health state right and decide whether the
//! connection goes back to the pool.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::connection::Connection;
use super::health::{Admission, Health};
use super::options::GridOptions;
use super::outcome::{FaultKind, NodeStatus};
use super::spec::NodeSpec;

/// The slowest link a grid is expected on, in bytes per millisecond (100 MB/s,
/// below gigabit Ethernet). A request's deadline grows by its size at this
/// rate, so a large pipelined store is not mistaken for a hung node.
const MIN_TRANSFER_BYTES_PER_MS: u64 = 100_000;

#[derive(Default)]
struct Counters {
    requests: AtomicU64,
    failures: AtomicU64,
    timeouts: AtomicU64,
    marked_down: AtomicU64,
}

pub struct Node {
    label: String,
    /// None: the host did not resolve; the node stays down.
    addr: Option<SocketAddr>,
    idle: Mutex<Vec<Connection>>,
    max_idle: usize,
    timeout: Duration,
    connect_timeout: Duration,
    health: Health,
    counters: Counters,
}

/// A request in flight on one node.
pub struct Exchange<'n> {
    node: &'n Node,
    admission: Admission,
    pub conn: Connection,
    pub deadline: Instant,
}

impl Node {
    /// Resolves the address now (once); never connects.
    pub fn new(spec: &NodeSpec, opts: &GridOptions) -> Node {
        let label = spec.label();
        let addr = match (spec.host.as_str(), spec.port).to_socket_addrs() {
            Ok(mut addrs) => {
                let first = addrs.next();
                if first.is_none() {
                    eprintln!("waffle: grid node {label} has no address: it stays down");
                }
                first
            }
            Err(e) => {
                eprintln!("waffle: grid node {label} cannot be resolved: {e}; it stays down");
                None
            }
        };
        let timeout = Duration::from_millis(opts.timeout_ms);
        let connect_timeout = Duration::from_millis(opts.connect_timeout_ms).max(timeout);
        Node {
            label,
            addr,
            idle: Mutex::new(Vec::new()),
            max_idle: opts.max_connections_per_node,
            timeout,
            connect_timeout,
            // A probe is over by its deadline; twice the longest one is surely lost.
            health: Health::new(
                Duration::from_millis(opts.backoff_min_ms),
                Duration::from_millis(opts.backoff_max_ms),
                connect_timeout * 2 + Duration::from_secs(1),
            ),
            counters: Counters::default(),
        }
    }

    /// Whether a request may go now (Skip: node down, or unresolvable).
    pub fn admit(&self) -> Admission {
        if self.addr.is_none() {
            return Admission::Skip;
        }
        self.health.admit(Instant::now())
    }

    /// Takes an idle connection (or opens one) and writes `request`.
    /// On failure the fault is already counted.
    pub fn begin(&self, admission: Admission, request: &[u8]) -> Result<Exchange<'_>, FaultKind> {
        debug_assert_ne!(admission, Admission::Skip);
        self.counters.requests.fetch_add(1, Ordering::Relaxed);
        // One deadline covers connect (if needed), write and read.
        let budget_start = Instant::now() + transfer_allowance(request.len());
        let (mut conn, deadline) = match self.take_idle() {
            Some(conn) => (conn, budget_start + self.timeout),
            None => {
                let deadline = budget_start + self.connect_timeout;
                let Some(addr) = self.addr else {
                    return Err(self.record_fault(admission, FaultKind::Io));
                };
                match Connection::open(addr, deadline) {
                    Ok(conn) => (conn, deadline),
                    Err(kind) => return Err(self.record_fault(admission, kind)),
                }
            }
        };
        match conn.send(request, deadline) {
            Ok(()) => Ok(Exchange { node: self, admission, conn, deadline }),
            Err(kind) => Err(self.record_fault(admission, kind)),
        }
    }

    pub fn status(&self) -> NodeStatus {
        NodeStatus {
            addr: self.label.clone(),
            up: self.addr.is_some() && self.health.is_up(),
            requests: self.counters.requests.load(Ordering::Relaxed),
            failures: self.counters.failures.load(Ordering::Relaxed),
            timeouts: self.counters.timeouts.load(Ordering::Relaxed),
            marked_down: self.counters.marked_down.load(Ordering::Relaxed),
        }
    }

    /// Idle connections held now (for tests).
    pub fn idle_count(&self) -> usize {
        self.lock_idle().len()
    }

    fn take_idle(&self) -> Option<Connection> {
        let mut idle = self.lock_idle();
        while let Some(conn) = idle.pop() {
            if !conn.is_stale() {
                return Some(conn);
            }
        }
        None
    }

    fn put_idle(&self, mut conn: Connection) {
        conn.trim();
        let mut idle = self.lock_idle();
        if idle.len() < self.max_idle {
            idle.push(conn);
        }
    }

    fn record_fault(&self, admission: Admission, kind: FaultKind) -> FaultKind {
        self.counters.failures.fetch_add(1, Ordering::Relaxed);
        if kind == FaultKind::Timeout {
            self.counters.timeouts.fetch_add(1, Ordering::Relaxed);
        }
        if kind.marks_node_down() {
            if self.health.on_failure(admission, Instant::now()) {
                self.counters.marked_down.fetch_add(1, Ordering::Relaxed);
                // One line per up-to-down change: a down node is retried with backoff, not reported each time.
                eprintln!(
                    "waffle: grid node {} is down ({}); its pages are misses until it answers again",
                    self.label,
                    kind.name()
                );
            }
            // Idle connections to a failed node are as suspect as the one that failed.
            self.lock_idle().clear();
        } else {
            // The node answered: it is alive.
            self.came_up(admission);
        }
        kind
    }

    fn came_up(&self, admission: Admission) {
        if self.health.on_success(admission) {
            eprintln!("waffle: grid node {} is up again", self.label);
        }
    }

    fn lock_idle(&self) -> std::sync::MutexGuard<'_, Vec<Connection>> {
        self.idle.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Extra time for writing `bytes` on a slow link (nothing for a small request).
fn transfer_allowance(bytes: usize) -> Duration {
    Duration::from_micros(bytes as u64 * 1000 / MIN_TRANSFER_BYTES_PER_MS)
}

impl Exchange<'_> {
    /// The node answered completely. The connection is pooled again if
    /// `reusable` and nothing is left unread.
    pub fn finish(self, reusable: bool) {
        self.node.came_up(self.admission);
        if reusable && self.conn.is_idle() {
            self.node.put_idle(self.conn);
        }
    }

    /// The exchange failed: the connection is dropped, the fault counted.
    pub fn fail(self, kind: FaultKind) -> FaultKind {
        self.node.record_fault(self.admission, kind)
    }
}
