//! Tunables of the grid client.

/// How the grid client talks to its nodes. Every field has a bound; see
/// [`GridOptions::default`] for the defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GridOptions {
    /// Deadline of one request (a round trip on a pooled connection: write and
    /// read). A grid fetch must be much faster than the disk read it saves, so
    /// the default is short: 5 ms. A large request (a pipelined store) gets
    /// 10 µs more per KB it writes (a 100 MB/s link), so its size alone never
    /// makes a node look hung.
    pub timeout_ms: u64,
    /// Deadline of a request that must first open a connection (connect, write
    /// and read): `max(timeout_ms, connect_timeout_ms)`. A connect costs a few
    /// round trips more than a request and is rare (pooled connections are
    /// reused), so it gets more room. Default 50 ms.
    pub connect_timeout_ms: u64,
    /// Idle connections kept per node. More requests at once than this open
    /// extra connections, closed after use. Default 16. 0 = no pooling.
    pub max_connections_per_node: usize,
    /// First backoff after a node fails: it is skipped that long, then one probe
    /// request is let through. Default 100 ms.
    pub backoff_min_ms: u64,
    /// Cap of the backoff, doubled after each failed probe. Default 5000 ms.
    pub backoff_max_ms: u64,
    /// TTL of stored items in seconds, 0 = no expiry (memcached's LRU evicts). Default 0.
    pub ttl_s: u32,
    /// Back off a node whose lookups cost more than the disk reads they save
    /// (grid::cost): only a sample of lookups and pushes go to it. Default on;
    /// off still measures and shows the costs, and asks every node always.
    pub cost_backoff: bool,
    /// The window of figures each back-off decision rests on, and its first
    /// dwell (grid::cost::WINDOW, 10 s). Shorter only for tests that run in
    /// real time; at least 1 ms.
    pub cost_window_ms: u64,
    /// A node that has seen no request for this long gets one `mn` (then
    /// again each time this long passes), so the health of a node nobody
    /// asks stays known ([`super::Grid::new`] starts one thread per grid for
    /// it). 0: never. Default 3000 ms.
    pub idle_probe_ms: u64,
}

impl Default for GridOptions {
    fn default() -> Self {
        GridOptions {
            timeout_ms: 5,
            connect_timeout_ms: 50,
            max_connections_per_node: 16,
            backoff_min_ms: 100,
            backoff_max_ms: 5000,
            ttl_s: 0,
            cost_backoff: true,
            cost_window_ms: super::cost::WINDOW.as_millis() as u64,
            idle_probe_ms: 3000,
        }
    }
}

impl GridOptions {
    /// The options with every value made usable: deadlines and backoff at
    /// least 1 ms, the backoff cap at least the first backoff.
    pub(crate) fn normalized(&self) -> GridOptions {
        let backoff_min_ms = self.backoff_min_ms.max(1);
        GridOptions {
            timeout_ms: self.timeout_ms.max(1),
            connect_timeout_ms: self.connect_timeout_ms.max(1),
            max_connections_per_node: self.max_connections_per_node,
            backoff_min_ms,
            backoff_max_ms: self.backoff_max_ms.max(backoff_min_ms),
            ttl_s: self.ttl_s,
            cost_backoff: self.cost_backoff,
            cost_window_ms: self.cost_window_ms.max(1),
            idle_probe_ms: self.idle_probe_ms,
        }
    }
}
