//! The cache's part of the stats JSON, as plain data: every counter of
//! [`Stats`](super::Stats) under its JSON name, and the levels the cache adds
//! (L1, read-ahead, working set, nodes). [`Stats::snapshot`](super::Stats::snapshot)
//! fills the counters; `PageCache::stats_snapshot` the rest.
//!
//! The field names are the published format (`PRAGMA waffle_stats`, the stats
//! files, `waffle stats`, the Prometheus metrics): renaming one is a change of
//! that format. Nested objects default when missing, so a file from an older
//! waffle still reads.

use serde::{Deserialize, Serialize};

use crate::grid::NodeStatus;

/// The cache's counters and levels (flattened into the stats JSON object).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct CacheSnapshot {
    /// Required: a stats file without it has no cache (the preload turned off before it started).
    pub l1_hits: u64,
    #[serde(default)]
    pub l1_misses: u64,
    #[serde(default)]
    pub l2_hits: u64,
    #[serde(default)]
    pub l2_misses: u64,
    #[serde(default)]
    pub l2_skipped: u64,
    #[serde(default)]
    pub l2_presence_skips: u64,
    #[serde(default)]
    pub l2_cost_skips: u64,
    #[serde(default)]
    pub l2_aged_skips: u64,
    #[serde(default)]
    pub l2_push_cost_skips: u64,
    #[serde(default)]
    pub read_ahead_presence_skips: u64,
    #[serde(default)]
    pub l2_rejects: RejectCounts,
    #[serde(default)]
    pub l2_rejects_total: u64,
    /// Refused as older than the page (rewritten after the push): expected.
    #[serde(default)]
    pub l2_rejects_stale: u64,
    /// The other refusals (damaged, foreign or forged copies): a fault.
    #[serde(default)]
    pub l2_rejects_bad: u64,
    #[serde(default)]
    pub l2_faults: FaultCounts,
    #[serde(default)]
    pub l2_pushes: u64,
    #[serde(default)]
    pub l2_push_drops: u64,
    #[serde(default)]
    pub l2_push_failures: u64,
    #[serde(default)]
    pub l2_push_not_stored: PushNotStored,
    #[serde(default)]
    pub l2_push_bytes: u64,
    #[serde(default)]
    pub l2_fetch_bytes: u64,
    #[serde(default)]
    pub push_queue_hits: u64,
    #[serde(default)]
    pub disk_reads: u64,
    #[serde(default)]
    pub disk_reasons: DiskReasons,
    #[serde(default)]
    pub disk_short_reads: u64,
    #[serde(default)]
    pub disk_writes: u64,
    #[serde(default)]
    pub partial_writes: u64,
    #[serde(default)]
    pub truncates: u64,
    #[serde(default)]
    pub read_ahead_windows: u64,
    #[serde(default)]
    pub read_ahead_grid_requests: u64,
    #[serde(default)]
    pub read_ahead_disk_reads: u64,
    #[serde(default)]
    pub read_ahead_pages_l2: u64,
    #[serde(default)]
    pub read_ahead_pages_disk: u64,
    #[serde(default)]
    pub read_ahead_hits: u64,
    #[serde(default)]
    pub scan_drops: u64,
    #[serde(default)]
    pub resets: u64,
    #[serde(default)]
    pub foreign_changes: u64,
    #[serde(default)]
    pub foreign_resets: u64,
    #[serde(default)]
    pub foreign_pages_invalidated: u64,
    #[serde(default)]
    pub foreign_copies_dropped: u64,
    #[serde(default)]
    pub l1_stale_drops: u64,
    #[serde(default)]
    pub verify_checked: u64,
    /// The sum of `verify_mismatches_by_tier`.
    #[serde(default)]
    pub verify_mismatches: u64,
    #[serde(default)]
    pub verify_mismatches_by_tier: ServedCounts,
    #[serde(default)]
    pub compression: CompressionSnapshot,
    #[serde(default)]
    pub latency: LatencySnapshot,

    // What the cache adds to its counters.
    /// 16 hex digits.
    #[serde(default)]
    pub cache_id: String,
    #[serde(default)]
    pub page_bytes: u64,
    #[serde(default)]
    pub l1: L1Snapshot,
    /// Pages read ahead of their reader, by source: pages = used + unused + in_l1.
    #[serde(default)]
    pub ahead_pages_disk: u64,
    #[serde(default)]
    pub ahead_used_disk: u64,
    #[serde(default)]
    pub ahead_unused_disk: u64,
    #[serde(default)]
    pub ahead_in_l1_disk: u64,
    #[serde(default)]
    pub ahead_pages_l2: u64,
    #[serde(default)]
    pub ahead_used_l2: u64,
    #[serde(default)]
    pub ahead_unused_l2: u64,
    #[serde(default)]
    pub ahead_in_l1_l2: u64,
    #[serde(default)]
    pub read_ahead_disk: DiskAheadSnapshot,
    #[serde(default)]
    pub push_queue_bytes: u64,
    #[serde(default)]
    pub sealed: bool,
    #[serde(default)]
    pub versions_tracked: u64,
    #[serde(default)]
    pub l2_presence_pages: u64,
    #[serde(default)]
    pub l2_reach_pushes: u64,
    /// Why an internal error turned the cache off (None: it did not).
    #[serde(default)]
    pub fused: Option<String>,
    #[serde(default)]
    pub working_set: WorkingSetSnapshot,
    #[serde(default)]
    pub nodes: Vec<NodeStatus>,
}

/// `l2_rejects`: grid values refused, by reason (`envelope::Reject` names).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RejectCounts {
    pub length: u64,
    pub format: u64,
    pub checksum: u64,
    pub database: u64,
    pub page: u64,
    pub version: u64,
    pub size: u64,
    pub seal: u64,
    pub content: u64,
    pub codec: u64,
}

impl RejectCounts {
    /// The counts of `kinds` (names as in the JSON), in that order; 0 for a name that is none.
    pub fn of(&self, kinds: &[&'static str]) -> Vec<(&'static str, u64)> {
        let v = serde_json::to_value(self).unwrap_or_default();
        kinds.iter().map(|&k| (k, v.get(k).and_then(serde_json::Value::as_u64).unwrap_or(0))).collect()
    }
}

/// `l2_faults`: grid requests that failed, by kind (`grid::FaultKind` names).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FaultCounts {
    pub timeout: u64,
    pub io: u64,
    pub protocol: u64,
    pub server_error: u64,
}

impl FaultCounts {
    pub fn total(&self) -> u64 {
        self.timeout + self.io + self.protocol + self.server_error
    }
}

/// `l2_push_not_stored`: `l2_push_failures` by why (they sum to it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PushNotStored {
    /// Not sent: the node was down.
    pub node_down: u64,
    /// The node did not store them (memcached out of memory, too large).
    pub refused: u64,
    /// A fault on the way.
    pub lost: u64,
    /// No grid any more, or not sealable.
    pub other: u64,
}

/// `disk_reasons`: `disk_reads` by why each happened (`presence::DiskReason` names; they sum to it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DiskReasons {
    pub cold: u64,
    pub never_pushed: u64,
    pub push_dropped: u64,
    pub aged_out: u64,
    pub evicted: u64,
    pub skipped: u64,
    pub rejected: u64,
    pub invalidated: u64,
}

impl DiskReasons {
    pub fn total(&self) -> u64 {
        let r = self;
        r.cold + r.never_pushed + r.push_dropped + r.aged_out + r.evicted + r.skipped + r.rejected + r.invalidated
    }
}

/// `verify_mismatches_by_tier` (`verify::Served` names).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ServedCounts {
    pub l1: u64,
    pub push_queue: u64,
    pub l2: u64,
}

/// `compression`: of pushed pages (codec on) and of grid values opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CompressionSnapshot {
    pub pages_compressed: u64,
    pub pages_raw: u64,
    /// Pushed raw because the push queue was over half full.
    pub pages_raw_behind: u64,
    pub bytes_before: u64,
    pub bytes_after: u64,
    /// Page bytes per payload byte, to 3 decimals (1.0 before any push).
    pub ratio: f64,
    pub compress_us: u64,
    pub pages_decompressed: u64,
    pub decompress_us: u64,
}

/// `latency`: page reads by the tier that answered them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct LatencySnapshot {
    pub l1: TierLatency,
    pub l2: TierLatency,
    pub disk: TierLatency,
}

/// One tier's latencies since the open (or the last reset), microseconds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TierLatency {
    pub count: u64,
    pub p50_us: u64,
    pub p95_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
    pub sum_us: u64,
    /// `[le_us, reads <= le_us]`, cumulative (`LATENCY_BUCKETS_US`); empty from an older waffle.
    pub buckets: Vec<[u64; 2]>,
}

/// `l1`: the local pool.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct L1Snapshot {
    pub capacity_bytes: u64,
    pub used_bytes: u64,
    pub pages: u64,
}

/// `read_ahead_disk`: whether windows read their disk pages ahead, and the
/// figures the decision rests on.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DiskAheadSnapshot {
    pub on: bool,
    /// measuring, on or off.
    pub state: String,
    /// The last judged window's figures: a random read, a page of a run, the
    /// share of pages read ahead that were used, and the most a page of a run
    /// may cost for the state to be on after the next window.
    pub random_us: f64,
    pub seq_page_us: f64,
    pub used_ratio: f64,
    pub limit_us: f64,
    pub changes: u64,
    pub skipped_windows: u64,
    pub probes: u64,
    /// The running window's samples so far.
    pub window_random_reads: u64,
    pub window_runs: u64,
}

/// `working_set`: distinct pages touched over the last 1, 5 and 15 minutes,
/// what L1 and the grid hold, and a line of advice.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct WorkingSetSnapshot {
    pub pages_1m: u64,
    pub pages_5m: u64,
    pub pages_15m: u64,
    pub bytes_1m: u64,
    pub bytes_5m: u64,
    pub bytes_15m: u64,
    pub l1_bytes: u64,
    /// None: no grid.
    pub grid_bytes: Option<u64>,
    pub grid_nodes_known: Option<u64>,
    pub grid_nodes: Option<u64>,
    pub held_bytes: u64,
    pub advice: String,
}
