//! The warming layer's part of the stats JSON (`warm`, `hot_list`), as plain
//! data: what `warming::Warming::snapshot` reports beside each cache.

use serde::{Deserialize, Serialize};

/// `warm` and `hot_list` (flattened into the stats JSON object).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct WarmingSnapshot {
    pub warm: WarmSnapshot,
    #[serde(default)]
    pub hot_list: HotListSnapshot,
}

/// `warm`: the last (or running) warm's progress.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct WarmSnapshot {
    /// idle, running, done, cancelled or failed.
    pub state: String,
    pub target: String,
    pub planned_pages: u64,
    pub read_pages: u64,
    pub l1_pages: u64,
    pub queued_pages: u64,
    pub pushed_pages: u64,
    /// The sum of `not_stored`.
    pub not_stored_pages: u64,
    pub not_stored: WarmNotStored,
    /// Queued, and neither stored nor refused (in the queue, on the way, or taken back).
    pub unsettled_pages: u64,
    pub skipped_pages: u64,
    pub dropped_pages: u64,
    pub read_bytes: u64,
    pub disk_reads: u64,
    pub elapsed_ms: u64,
    pub skipped_targets: Vec<SkippedTarget>,
    pub skipped_targets_count: u64,
    pub error: Option<String>,
}

/// `warm.not_stored`: the warm's queued pages the grid did not store, by why.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct WarmNotStored {
    pub node_down: u64,
    pub refused: u64,
    pub lost: u64,
    /// Not sent: the node is backed off (it costs more than it saves).
    pub backed_off: u64,
    /// Pushed out of the full queue before it was sent.
    pub dropped: u64,
    /// No grid any more, or not sealable.
    pub other: u64,
}

impl WarmNotStored {
    pub fn total(&self) -> u64 {
        self.node_down + self.refused + self.lost + self.backed_off + self.dropped + self.other
    }
}

/// A part of a warm's target not warmed, and why.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkippedTarget {
    pub name: String,
    pub why: String,
}

/// `hot_list`: the reload of the last close's hot pages.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct HotListSnapshot {
    /// none, pending, running, done, cancelled or failed.
    pub state: String,
    pub trusted: bool,
    pub why: Option<String>,
    pub listed_pages: u64,
    pub l1_listed_pages: u64,
    pub from_grid_pages: u64,
    pub from_disk_pages: u64,
    pub skipped_pages: u64,
    pub no_room_pages: u64,
    pub grid_requests: u64,
    pub disk_reads: u64,
    pub elapsed_ms: u64,
    pub error: Option<String>,
}
