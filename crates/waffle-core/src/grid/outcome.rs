//! What the grid answers: results of fetches and stores, and per-node status.

use serde::{Deserialize, Serialize};

use super::cost::CostStatus;

/// The result of fetching one key. Everything but `Hit` means "read the disk".
/// `V` is what became of the value: its bytes, or what a caller's closure
/// made of them while they were still in the connection's buffer ([`super::Grid::take_with`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fetch<V = Vec<u8>> {
    Hit(V),
    Miss,
    /// The key's node is down (in backoff), or the grid has no node: nothing was asked.
    Skipped,
    Fault(FaultKind),
}

impl<V> Fetch<V> {
    pub fn is_hit(&self) -> bool {
        matches!(self, Fetch::Hit(_))
    }
}

/// Why a request failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultKind {
    /// The deadline passed (connect, write or read). The node is marked down.
    Timeout,
    /// Connection refused, reset or closed. The node is marked down.
    Io,
    /// A reply we could not parse or did not expect, or a key we refuse to send.
    /// After a bad reply the node is marked down (the stream can no longer be trusted).
    Protocol,
    /// The node answered `SERVER_ERROR`/`CLIENT_ERROR`/`ERROR`: it is alive, not marked down.
    ServerError,
}

impl FaultKind {
    pub fn name(&self) -> &'static str {
        match self {
            FaultKind::Timeout => "timeout",
            FaultKind::Io => "io",
            FaultKind::Protocol => "protocol",
            FaultKind::ServerError => "server_error",
        }
    }

    /// Whether this fault says the node is unusable (as opposed to "it refused this item").
    pub(crate) fn marks_node_down(&self) -> bool {
        !matches!(self, FaultKind::ServerError)
    }
}

/// What became of one item of a store ([`super::Grid::store_each`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ItemFate {
    /// Acknowledged by its node (no failure line before `MN`).
    Stored,
    /// Not sent: its node was down (in backoff) or could not be reached
    /// (the connection refused, or it failed while the request was written),
    /// or the grid has no node.
    NodeDown,
    /// Sent, and the node said it did not store it (`NS`, `SERVER_ERROR`:
    /// out of memory, too large), or not sent because it was invalid (a bad
    /// key, a value over the limit). memcached's quiet replies do not say
    /// which item of a pipeline failed: with several failures in one node's
    /// pipeline, which items get this fate is a guess; how many is exact.
    Refused,
    /// Sent, and lost to a fault (a missed deadline, a reset, a broken
    /// reply): the node may hold it or not, so it is counted not stored.
    Lost,
}

impl ItemFate {
    /// The fates in index order ([`ItemFate::index`]), for counters kept per fate.
    pub const ALL: [ItemFate; 4] = [ItemFate::Stored, ItemFate::NodeDown, ItemFate::Refused, ItemFate::Lost];

    pub fn index(self) -> usize {
        self as usize
    }

    /// The JSON name of the not-stored fates (`l2_push_not_stored`).
    pub fn name(self) -> &'static str {
        match self {
            ItemFate::Stored => "stored",
            ItemFate::NodeDown => "node_down",
            ItemFate::Refused => "refused",
            ItemFate::Lost => "lost",
        }
    }
}

/// The result of [`super::Grid::store_many`]: every item is counted exactly once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreReport {
    /// Acknowledged by the node (no failure line before `MN`).
    pub stored: usize,
    /// Refused by the node (`NS`, `SERVER_ERROR`...), lost to a fault, or invalid (bad key, too large).
    pub failed: usize,
    /// Not sent: the node was down (or the grid has no node).
    pub skipped: usize,
}

impl StoreReport {
    /// The counts of `fates`.
    pub fn of(fates: &[ItemFate]) -> StoreReport {
        let mut r = StoreReport::default();
        for f in fates {
            match f {
                ItemFate::Stored => r.stored += 1,
                ItemFate::NodeDown => r.skipped += 1,
                ItemFate::Refused | ItemFate::Lost => r.failed += 1,
            }
        }
        r
    }
}

/// A node's health and counters, for stats and tools (fields a stats file
/// lacks read as their defaults).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeStatus {
    /// "host:port" as configured.
    pub addr: String,
    /// False while the node is down: faults marked it down until its next probe (health.rs), or its
    /// address could not be resolved. A node backed off for cost ([`CostStatus`]) is up.
    pub up: bool,
    /// Round trips sent for the cache (a pipelined batch is one; idle probes apart).
    pub requests: u64,
    /// Of those, round trips that ended in a fault of any kind (timeouts included).
    pub failures: u64,
    /// Round trips that ended at their deadline.
    pub timeouts: u64,
    /// Times the node went from up to down.
    pub marked_down: u64,
    /// Misses of pages the cache had pushed (it evicted them, or restarted
    /// empty): more than a few say the node's memory is too small or it was lost.
    pub presence_misses: u64,
    /// Pooled connections the node had closed, found when used (a restart):
    /// each cost one request (a miss), not a mark down.
    pub stale_connections: u64,
    /// `mn` sent because the node had seen no request for a while (nobody
    /// asks it): how its health stays known. Not in `requests`/`failures`.
    pub idle_probes: u64,
    /// Whether asking it pays, with the figures the decision rests on.
    pub cost: CostStatus,
    /// Its memcached's memory (`limit_maxbytes`) as last asked; None: not known (yet).
    pub memory_bytes: Option<u64>,
    /// Its flash tier (extstore) as last asked, node-wide; None: no flash, or not known (yet).
    /// Absent from the JSON then, so a grid without flash keeps its published keys.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flash: Option<super::memory::FlashStatus>,
}
