//! One grid node: its address, its idle connections, its health and counters.
//!
//! A request goes through [`Node::begin`] (admission, a connection, the
//! request written) and ends with [`Exchange::finish`] or [`Exchange::fail`],
//! which keep the counters and the health state right and decide whether the
//! connection goes back to the pool.
//!
//! Health decisions (down since when, probe when) take the time from the
//! node's [`Clock`]; request deadlines from `Instant::now()`, as the socket
//! waits in real time.
//!
//! A node nobody asks (L1 holds the working set, or every page it would
//! hold is backed off) would keep whatever health it had when it was last
//! asked: "up" hours after it was killed. [`Node::probe_if_idle`] sends such
//! a node one `mn` when it has seen no request for a while (the grid's
//! prober thread calls it, `grid::client`), under the same rules as a
//! request: a refused connection marks it down at once, a hung one after
//! [`MISSES_TO_DOWN`] missed probes, and a down one that answers is up again.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::clock::{Clock, SystemClock};
use super::connection::{self, Cause, Connection};
use super::cost::NodeCost;
use super::disk_cost::DiskCost;
use super::health::{Admission, Health, Strike, MISSES_TO_DOWN};
use super::memory::NodeMemory;
use super::options::GridOptions;
use super::outcome::{FaultKind, NodeStatus};
use super::protocol::Reply;
use super::spec::NodeSpec;

/// The slowest link a grid is expected on, in bytes per millisecond (100 MB/s,
/// below gigabit Ethernet). A request's deadline grows by its size at this
/// rate, so a large pipelined store is not mistaken for a hung node.
const MIN_TRANSFER_BYTES_PER_MS: u64 = 100_000;

#[derive(Default)]
struct Counters {
    /// Round trips the cache asked for (idle probes apart).
    requests: AtomicU64,
    failures: AtomicU64,
    timeouts: AtomicU64,
    marked_down: AtomicU64,
    presence_misses: AtomicU64,
    stale_connections: AtomicU64,
    /// `mn` sent because the node had seen no request for a while.
    idle_probes: AtomicU64,
}

pub struct Node<C: Clock = SystemClock> {
    label: String,
    /// None: the host did not resolve; the node stays down.
    addr: Option<SocketAddr>,
    idle: Mutex<Vec<Connection>>,
    max_idle: usize,
    timeout: Duration,
    connect_timeout: Duration,
    health: Health,
    counters: Counters,
    /// Whether asking this node pays (its lookups against the disk's reads).
    cost: NodeCost,
    /// Its memcached's memory, asked for the stats.
    memory: NodeMemory,
    clock: C,
    /// The clock's time at creation: `last_request_ms` counts from it.
    born: Instant,
    /// When the last request (or idle probe) began, in ms since `born`.
    last_request_ms: AtomicU64,
}

/// A request in flight on one node.
pub struct Exchange<'n, C: Clock = SystemClock> {
    node: &'n Node<C>,
    admission: Admission,
    pub conn: Connection,
    pub deadline: Instant,
    /// Taken from the pool without a peek (see [`Connection::skips_peek`]).
    trusted_pooled: bool,
    /// A request of the cache's (counted in `requests`, `failures`), not an idle probe.
    counted: bool,
}

impl<C: Clock> Node<C> {
    /// Resolves the address now (once); never connects.
    pub fn new(spec: &NodeSpec, opts: &GridOptions, clock: C) -> Node<C> {
        let label = spec.label();
        let addr = match (spec.host.as_str(), spec.port).to_socket_addrs() {
            Ok(mut addrs) => {
                let first = addrs.next();
                if first.is_none() {
                    crate::warn!(key: format!("grid node {label}"), "grid node {label} has no address: it stays down");
                }
                first
            }
            Err(e) => {
                crate::warn!(key: format!("grid node {label}"), "grid node {label} cannot be resolved: {e}; it stays down");
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
                timeout,
            ),
            counters: Counters::default(),
            cost: NodeCost::new(opts.cost_backoff, Duration::from_millis(opts.cost_window_ms)),
            memory: NodeMemory::default(),
            born: clock.now(),
            last_request_ms: AtomicU64::new(0),
            clock,
        }
    }

    /// Whether a request may go now (Skip: node down, or unresolvable).
    pub fn admit(&self) -> Admission {
        if self.addr.is_none() {
            return Admission::Skip;
        }
        self.health.admit(self.clock.now())
    }

    /// Takes an idle connection (or opens one) and writes `request`.
    /// On failure the fault is already counted.
    pub fn begin(&self, admission: Admission, request: &[u8]) -> Result<Exchange<'_, C>, FaultKind> {
        self.begin_as(admission, request, true)
    }

    /// As [`Node::begin`]; `counted`: a request of the cache's, not an idle probe.
    fn begin_as(&self, admission: Admission, request: &[u8], counted: bool) -> Result<Exchange<'_, C>, FaultKind> {
        debug_assert_ne!(admission, Admission::Skip);
        self.note_traffic();
        if counted {
            self.counters.requests.fetch_add(1, Ordering::Relaxed);
        }
        // One deadline covers connect (if needed), write and read; real time, not the clock: the socket waits in it.
        let budget_start = Instant::now() + transfer_allowance(request.len());
        let mut pooled = self.take_idle();
        // Bounded: a second pass only after a pooled connection trusted without
        // a peek failed its write, and that pass takes none from the pool.
        loop {
            let trusted = pooled.as_ref().is_some_and(Connection::skips_peek);
            let (mut conn, deadline) = match pooled.take() {
                Some(conn) => (conn, budget_start + self.timeout),
                None => {
                    let deadline = budget_start + self.connect_timeout;
                    let Some(addr) = self.addr else {
                        return Err(self.record_fault(admission, FaultKind::Io, Strike::Fatal, counted));
                    };
                    match Connection::open(addr, deadline) {
                        Ok(conn) => (conn, deadline),
                        // A failed connection (refused, unreachable, or not within its deadline): down at once.
                        Err(kind) => return Err(self.record_fault(admission, kind, Strike::Fatal, counted)),
                    }
                }
            };
            match conn.send(request, deadline) {
                Ok(()) => {
                    return Ok(Exchange { node: self, admission, conn, deadline, trusted_pooled: trusted, counted })
                }
                // Closed by the node since it was pooled (a restart): dropped, the request goes on a new one.
                Err(FaultKind::Io) if trusted => self.note_stale_connection(counted),
                Err(kind) => return Err(self.record_fault(admission, kind, strike_of(kind), counted)),
            }
        }
    }

    /// A pooled connection the node had closed (found when used, not by a
    /// peek): counted, the pool emptied (its other connections are as old),
    /// the node not marked down (it was the connection, not the node).
    fn note_stale_connection(&self, counted: bool) {
        if counted {
            self.counters.failures.fetch_add(1, Ordering::Relaxed);
        }
        self.counters.stale_connections.fetch_add(1, Ordering::Relaxed);
        self.lock_idle().clear();
    }

    /// A miss of a page the cache had pushed to this node.
    pub fn note_presence_miss(&self) {
        self.counters.presence_misses.fetch_add(1, Ordering::Relaxed);
    }

    /// "host:port" as configured.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// Whether a lookup of `key` goes to this node (see [`NodeCost`]).
    pub fn admits_lookup(&self, key: &[u8]) -> bool {
        self.cost.admits_lookup(key)
    }

    /// Whether a read-ahead window may ask this node (see [`NodeCost`]).
    pub fn admits_read_ahead(&self) -> bool {
        self.cost.admits_read_ahead()
    }

    /// Whether the evicted page of `key` is pushed to this node (see [`NodeCost`]).
    pub fn admits_push(&self, key: &[u8]) -> bool {
        self.cost.admits_push(key)
    }

    /// Whether a warm's page of `key` is pushed to this node (see [`NodeCost::admits_warm_push`]).
    pub fn admits_warm_push(&self, key: &[u8]) -> bool {
        self.cost.admits_warm_push(key)
    }

    /// Whether this node takes only a sample of pages now (see [`NodeCost::samples`]).
    pub fn samples(&self) -> bool {
        self.cost.samples()
    }

    /// A lookup this node answered in `took` (round trip, link included).
    pub fn note_lookup(&self, took: Duration, hit: bool, disk: &DiskCost) {
        let line = self.cost.record_lookup(took, hit, disk, self.clock.now());
        self.say_cost(line);
    }

    /// A hit on `key` that took `took`, for the node's tier sample (memory.rs).
    pub fn note_hit(&self, key: &[u8], took: Duration) {
        self.memory.note_hit(key, took);
    }

    /// Ends the node's tier sample if its window is over: the prober's tick.
    pub fn end_overdue_sample(&self) {
        self.memory.end_overdue_sample();
    }

    /// `pages` stored on this node in one pipelined exchange of `took`.
    pub fn note_push(&self, pages: u64, took: Duration, disk: &DiskCost) {
        let line = self.cost.record_push(pages, took, disk, self.clock.now());
        self.say_cost(line);
    }

    /// One line per cost decision that lasted (grid::cost says when); the
    /// figures are in the stats. Info: a back-off is the cache working as
    /// designed, not a fault (a healthy run may back off a loopback node).
    fn say_cost(&self, line: Option<String>) {
        if let Some(line) = line {
            crate::info!(key: format!("grid node {} cost", self.label), "grid node {}: {line}", self.label);
        }
    }

    /// Its memcached's memory (`limit_maxbytes`), asked if not asked lately
    /// (see [`NodeMemory`]); None while the node is down: it holds nothing we can reach.
    pub fn memory_bytes(&self) -> Option<u64> {
        let up = self.addr.is_some() && self.health.is_up();
        self.memory.refresh(self.addr, up).filter(|_| up)
    }

    pub fn status(&self, disk: &DiskCost) -> NodeStatus {
        NodeStatus {
            addr: self.label.clone(),
            up: self.addr.is_some() && self.health.is_up(),
            requests: self.counters.requests.load(Ordering::Relaxed),
            failures: self.counters.failures.load(Ordering::Relaxed),
            timeouts: self.counters.timeouts.load(Ordering::Relaxed),
            marked_down: self.counters.marked_down.load(Ordering::Relaxed),
            presence_misses: self.counters.presence_misses.load(Ordering::Relaxed),
            stale_connections: self.counters.stale_connections.load(Ordering::Relaxed),
            idle_probes: self.counters.idle_probes.load(Ordering::Relaxed),
            cost: self.cost.status(disk),
            memory_bytes: self.memory.known(),
            flash: self.memory.flash(),
        }
    }

    /// Sends one `mn` if the node has seen no request for `idle` and its
    /// health lets a request go (up, or down with its backoff over: the
    /// probe is its half-open probe). The answer, or the fault, counts as a
    /// request's would for the node's health; it is counted in `idle_probes`,
    /// not in `requests`. True if a probe went.
    pub fn probe_if_idle(&self, idle: Duration) -> bool {
        if self.idle_for() < idle {
            return false;
        }
        let admission = self.admit();
        if admission == Admission::Skip {
            return false;
        }
        self.counters.idle_probes.fetch_add(1, Ordering::Relaxed);
        let Ok(mut exchange) = self.begin_as(admission, b"mn\r\n", false) else {
            return true; // the fault is recorded
        };
        let deadline = exchange.deadline;
        let reply = exchange.conn.next_reply(deadline, |reply| match reply {
            Reply::Noop => Ok(()),
            _ => Err(FaultKind::Protocol),
        });
        match reply.and_then(|r| r) {
            Ok(()) => exchange.finish(true),
            Err(kind) => {
                exchange.fail(kind);
            }
        }
        true
    }

    /// How long since the last request (or probe) began, on the node's clock.
    fn idle_for(&self) -> Duration {
        let since_born = self.clock.now().saturating_duration_since(self.born);
        since_born.saturating_sub(Duration::from_millis(self.last_request_ms.load(Ordering::Relaxed)))
    }

    fn note_traffic(&self) {
        let ms = self.clock.now().saturating_duration_since(self.born).as_millis() as u64;
        self.last_request_ms.fetch_max(ms, Ordering::Relaxed);
    }

    /// Idle connections held now (for tests).
    pub fn idle_count(&self) -> usize {
        self.lock_idle().len()
    }

    fn take_idle(&self) -> Option<Connection> {
        let mut idle = self.lock_idle();
        while let Some(mut conn) = idle.pop() {
            if !conn.is_stale() {
                conn.taken();
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

    fn record_fault(&self, admission: Admission, kind: FaultKind, strike: Strike, counted: bool) -> FaultKind {
        let cause = connection::take_cause();
        if counted {
            self.counters.failures.fetch_add(1, Ordering::Relaxed);
            if kind == FaultKind::Timeout {
                self.counters.timeouts.fetch_add(1, Ordering::Relaxed);
            }
        }
        if kind.marks_node_down() {
            if self.health.on_failure(admission, strike, self.clock.now()) {
                self.counters.marked_down.fetch_add(1, Ordering::Relaxed);
                // One line per up-to-down change: a down node is retried with backoff, not reported each time.
                let why = match strike {
                    Strike::Miss => format!(
                        "no reply within its {} ms deadline {MISSES_TO_DOWN} times in a row: the node or the \
                         network is slow (waffle_timeout_ms)",
                        self.timeout.as_millis()
                    ),
                    Strike::Fatal => fault_words(kind, cause, self.addr.is_none()),
                };
                crate::warn!(
                    key: format!("grid node {}", self.label),
                    "grid node {} is down ({why}); its pages are misses until it answers again",
                    self.label
                );
            } else if strike == Strike::Miss && admission != Admission::Probe && self.health.is_up() {
                crate::debug!(
                    key: format!("grid node {} miss", self.label),
                    "grid node {}: a missed deadline ({} in a row)",
                    self.label,
                    self.health.misses_in_a_row()
                );
            }
            // Idle connections to a failed node are as suspect as the one that
            // failed; a missed deadline on a live node says nothing of them.
            if strike == Strike::Fatal || !self.health.is_up() {
                self.lock_idle().clear();
            }
        } else {
            // The node answered: it is alive.
            self.came_up(admission);
        }
        kind
    }

    fn came_up(&self, admission: Admission) {
        if self.health.on_success(admission) {
            crate::warn!(key: format!("grid node {}", self.label), "grid node {} is up again", self.label);
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

impl<'n, C: Clock> Exchange<'n, C> {
    /// The node the exchange is with.
    pub fn node(&self) -> &'n Node<C> {
        self.node
    }

    /// The node answered completely. The connection is pooled again if
    /// `reusable` and nothing is left unread.
    pub fn finish(self, reusable: bool) {
        self.node.came_up(self.admission);
        if reusable && self.conn.is_idle() {
            self.node.put_idle(self.conn);
        }
    }

    /// The exchange failed: the connection is dropped, the fault counted. A
    /// connection trusted from the pool that the node closed before answering
    /// anything (a restart) says nothing of the node: it is not marked down.
    pub fn fail(self, kind: FaultKind) -> FaultKind {
        if kind == FaultKind::Io && self.trusted_pooled && self.conn.received_bytes() == 0 {
            self.node.note_stale_connection(self.counted);
            return kind;
        }
        self.node.record_fault(self.admission, kind, strike_of(kind), self.counted)
    }
}

/// Why a fault marked a node down, in words an operator can act on (the
/// stats count it by kind: `io`, `timeout`, `protocol`).
fn fault_words(kind: FaultKind, cause: Option<Cause>, unresolved: bool) -> String {
    match (kind, cause) {
        _ if unresolved => "its address could not be resolved (DNS, or /etc/hosts)".into(),
        (FaultKind::Io | FaultKind::Timeout, Some(c)) => c.words(),
        (FaultKind::Timeout, None) => "no answer within its deadline".into(),
        (FaultKind::Protocol, _) => {
            "it answered something that is not memcached's meta protocol (memcached 1.6 or later on that port?)".into()
        }
        (kind, _) => kind.name().into(),
    }
}

/// How a fault on an open connection counts: a missed deadline is a
/// [`Strike::Miss`]; a reset or a broken reply makes the node unusable.
fn strike_of(kind: FaultKind) -> Strike {
    match kind {
        FaultKind::Timeout => Strike::Miss,
        _ => Strike::Fatal,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::sync::Arc;

    /// A clock that moves only when the test says so.
    #[derive(Clone)]
    struct ManualClock(Arc<Mutex<Instant>>);

    impl ManualClock {
        fn advance(&self, by: Duration) {
            *self.0.lock().unwrap() += by;
        }
    }

    impl Clock for ManualClock {
        fn now(&self) -> Instant {
            *self.0.lock().unwrap()
        }
    }

    #[test]
    fn a_down_node_is_skipped_until_its_backoff_has_passed_on_its_clock() {
        // A port nobody listens on: every connect is refused at once, an I/O fault.
        let port = waffle_nodes::closed_port();
        let spec = NodeSpec::parse_list(&format!("127.0.0.1:{port}")).unwrap().remove(0);
        let opts = GridOptions { backoff_min_ms: 100, backoff_max_ms: 400, ..GridOptions::default() }.normalized();
        let clock = ManualClock(Arc::new(Mutex::new(Instant::now())));
        let node = Node::new(&spec, &opts, clock.clone());
        const MS: Duration = Duration::from_millis(1);

        assert_eq!(node.admit(), Admission::Go);
        assert_eq!(node.begin(Admission::Go, b"mn\r\n").err(), Some(FaultKind::Io));
        assert!(!node.status(&DiskCost::default()).up);
        // Skipped for as long as the clock stands still, whatever the real time.
        assert_eq!(node.admit(), Admission::Skip);
        clock.advance(99 * MS);
        assert_eq!(node.admit(), Admission::Skip);
        clock.advance(MS);
        assert_eq!(node.admit(), Admission::Probe);
        assert_eq!(node.admit(), Admission::Skip, "one probe at a time");

        // The probe fails: the backoff doubles, from the failure's time on the clock.
        assert_eq!(node.begin(Admission::Probe, b"mn\r\n").err(), Some(FaultKind::Io));
        clock.advance(199 * MS);
        assert_eq!(node.admit(), Admission::Skip);
        clock.advance(MS);
        assert_eq!(node.admit(), Admission::Probe);

        let status = node.status(&DiskCost::default());
        assert_eq!((status.requests, status.failures, status.marked_down), (2, 2, 1), "skips are no requests");
    }

    #[test]
    fn a_fault_that_marks_a_node_down_is_said_in_words_an_operator_can_act_on() {
        // Issue 32 item 12: "is down (io)" said nothing an operator could act on.
        let port = waffle_nodes::closed_port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let _ = connection::take_cause();
        let refused = Connection::open(addr, Instant::now() + Duration::from_secs(5)).err();
        assert_eq!(refused, Some(FaultKind::Io));
        let cause = connection::take_cause();
        assert_eq!(cause, Some(Cause::Os(libc::ECONNREFUSED)));
        assert_eq!(connection::take_cause(), None, "taken once");
        let words = fault_words(FaultKind::Io, cause, false);
        assert!(words.starts_with("connection refused: nothing listens on that port"), "{words}");
        // A node that closes the connection where a reply was due.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = answering(listener, 0);
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut conn = Connection::open(addr, deadline).unwrap();
        server.join().unwrap();
        let failed = conn.send(b"mn\r\n", deadline).err().or_else(|| conn.next_reply(deadline, |_| ()).err());
        assert_eq!(failed, Some(FaultKind::Io));
        let cause = connection::take_cause();
        assert!(matches!(cause, Some(Cause::Closed | Cause::Os(libc::ECONNRESET | libc::EPIPE))), "{cause:?}");
        let words = fault_words(FaultKind::Io, cause, false);
        assert!(words.contains("memcached restarted"), "{words}");
        for (kind, cause, unresolved, want) in [
            (
                FaultKind::Timeout,
                Some(Cause::NoConnection(Duration::from_millis(50))),
                false,
                "no connection within 50 ms",
            ),
            (FaultKind::Protocol, None, false, "not memcached's meta protocol"),
            (FaultKind::Io, None, true, "could not be resolved"),
            (FaultKind::Io, Some(Cause::Os(libc::EHOSTUNREACH)), false, "no route to the host"),
        ] {
            let words = fault_words(kind, cause, unresolved);
            assert!(words.contains(want) && words != kind.name(), "{words}");
        }
    }

    /// A one-connection stand-in for memcached on `listener`: answers each
    /// `mn` with `MN` until `answers` are given, then closes and stops.
    fn answering(listener: TcpListener, answers: usize) -> std::thread::JoinHandle<()> {
        use std::io::{Read, Write};
        std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let mut buf = [0u8; 64];
            let mut given = 0;
            while given < answers {
                match conn.read(&mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        for _ in 0..buf[..n].windows(4).filter(|w| w == b"mn\r\n").count() {
                            conn.write_all(b"MN\r\n").unwrap();
                            given += 1;
                        }
                    }
                }
            }
        })
    }

    #[test]
    fn a_node_nobody_asks_is_probed_when_idle_and_its_death_is_seen() {
        const MS: Duration = Duration::from_millis(1);
        // Held for the whole test: no parallel test's node takes it while the stand-in is dead.
        let held = waffle_nodes::ports::HeldPort::new();
        let port = held.port();
        let server = answering(held.listen(), 1);
        let spec = NodeSpec::parse_list(&format!("127.0.0.1:{port}")).unwrap().remove(0);
        let opts = GridOptions { timeout_ms: 2000, connect_timeout_ms: 2000, ..GridOptions::default() }.normalized();
        let clock = ManualClock(Arc::new(Mutex::new(Instant::now())));
        let node = Node::new(&spec, &opts, clock.clone());
        let idle = 3000 * MS;
        let status = |n: &Node<ManualClock>| n.status(&DiskCost::default());

        assert!(!node.probe_if_idle(idle), "just created: not idle yet");
        clock.advance(idle);
        assert!(node.probe_if_idle(idle), "idle for 3 s: one mn");
        let s = status(&node);
        assert!(s.up, "it answered");
        assert_eq!((s.idle_probes, s.requests, s.failures), (1, 0, 0), "a probe is no request of the cache's");
        clock.advance(idle - MS);
        assert!(!node.probe_if_idle(idle), "the probe was traffic: not idle again yet");

        // A request of the cache's is traffic too.
        clock.advance(idle);
        node.note_traffic();
        assert!(!node.probe_if_idle(idle));

        // Killed (the stand-in closed its connection and its port): seen down
        // by the probes alone, at the first one that connects afresh.
        server.join().unwrap();
        let mut probes = 0;
        while status(&node).up && probes < 3 {
            clock.advance(idle);
            assert!(node.probe_if_idle(idle));
            probes += 1;
        }
        let s = status(&node);
        assert!(!s.up, "down after {probes} probes: {s:?}");
        assert!(probes <= 2, "a stale pooled connection, then a refused connect: {probes}");
        assert_eq!((s.requests, s.failures, s.marked_down), (0, 0, 1), "{s:?}");

        // Down: no probe before its backoff is over; after it, the half-open
        // probe, which brings it up when it answers again (same port, restarted).
        assert!(!node.probe_if_idle(Duration::ZERO), "within the backoff");
        let server = answering(held.listen(), 1);
        clock.advance(Duration::from_millis(opts.backoff_min_ms));
        assert!(node.probe_if_idle(Duration::ZERO));
        assert!(status(&node).up, "up again without a request");
        server.join().unwrap();
    }
}
