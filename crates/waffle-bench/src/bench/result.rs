//! What a benchmark measured: one [`ConfigResult`] per configuration, and
//! the parts it is made of (latency, where reads were answered, grid traffic,
//! memory, the working set, a `+restart`'s run). The runner fills them, the
//! report renders them; this file uses no other file of the bench (only the
//! types of what a warm did, from waffle-warm-client).

use std::collections::BTreeMap;

use serde::Serialize;
use waffle_core::grid::NodeStatus;
use waffle_core::stats::{CacheSnapshot, HotListSnapshot};

#[derive(Clone, Debug, Default, Serialize)]
pub struct Latency {
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub mean_ms: f64,
}

impl Latency {
    pub fn from_histogram(h: &hdrhistogram::Histogram<u64>) -> Latency {
        let ms = |us: u64| us as f64 / 1000.0;
        if h.is_empty() {
            return Latency::default();
        }
        Latency {
            p50_ms: ms(h.value_at_quantile(0.50)),
            p95_ms: ms(h.value_at_quantile(0.95)),
            p99_ms: ms(h.value_at_quantile(0.99)),
            max_ms: ms(h.max()),
            mean_ms: h.mean() / 1000.0,
        }
    }
}

/// Where the page reads that reached the VFS (SQLite cache misses) were
/// answered, as fractions of them.
///
/// With read-ahead (sequential reads), a miss that fetches a window is
/// answered from the grid or the disk together with the pages after it; such
/// a read is counted in `read_ahead` and shared between `l2` and `disk` in
/// the proportion of the window pages each supplied.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Hits {
    pub vfs_reads: u64,
    /// L1 hits, the push queue and read-ahead pages found in L1 included.
    pub l1: f64,
    pub l2: f64,
    pub disk: f64,
    /// l1 + l2: what stayed off the disk.
    pub l1_l2: f64,
    /// Reads that started a read-ahead window (part of l2 and disk above).
    pub read_ahead: f64,
    /// Pages read from the disk in all, read-ahead included (I/O volume).
    pub disk_pages: u64,
    /// Pages windows read ahead of their reader, from the disk and from the
    /// grid, and of those the ones a read used (the rest: dropped unread, or
    /// still in L1 at the end).
    pub ahead_pages_disk: u64,
    pub ahead_used_disk: u64,
    pub ahead_pages_l2: u64,
    pub ahead_used_l2: u64,
    /// Demand disk reads in the measured run (read-ahead windows apart), and
    /// why each happened (`disk_reasons` of `PRAGMA waffle_stats`, see
    /// `waffle_core::presence::DiskReason`): they sum to `disk_reads`.
    pub disk_reads: u64,
    pub disk_reasons: BTreeMap<String, u64>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct GridTraffic {
    pub pushes: u64,
    pub push_drops: u64,
    pub pushed_bytes: u64,
    pub fetched_bytes: u64,
    /// Latency of a grid fetch (hit or miss) and of a disk read in the measured run, microseconds.
    pub l2_p50_us: u64,
    pub l2_p99_us: u64,
    pub disk_p50_us: u64,
    pub disk_p99_us: u64,
    pub rejects: u64,
    pub faults: u64,
    /// memcached's own view after the run, summed over nodes.
    pub memcached_items: u64,
    pub memcached_bytes: u64,
    pub memcached_limit_bytes: u64,
    pub memcached_evictions: u64,
    /// Pages the cache believed the grid held at the end (its presence set):
    /// against `memcached_items`, what memcached evicted that the cache still counts on.
    pub presence_pages: u64,
    /// Lookups not sent: the page was never pushed or was taken back (presence set) ...
    pub presence_skips: u64,
    /// ... or it was pushed longer ago than the grid is seen to keep pages (its reach) ...
    pub aged_skips: u64,
    /// ... or its node cost more than the disk read it would save (cost back-off).
    pub cost_skips: u64,
    /// The grid's reach at the end: how many pushes back it is seen to keep pages (0: no eviction seen).
    pub reach_pushes: u64,
    /// Evicted pages not pushed because their node was backed off.
    pub push_cost_skips: u64,
    /// Each node's status at the end of the run: health, counters, and its
    /// cost decision (`cost.state`, `cost.lookup_us`, `cost.saved_us`, `cost.reason`).
    pub nodes: Vec<NodeStatus>,
    /// A `+flash` grid's flash tier over the measured run (None: no flash).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flash: Option<FlashTraffic>,
}

/// What a `+flash` grid's flash tier did over the measured run: memcached's own counters
/// (extstore's), every node summed, their change from before the run to after it. The nodes
/// are the configuration's own, so the counts are this run's.
#[derive(Clone, Debug, Default, Serialize)]
pub struct FlashTraffic {
    /// The flash files' size in all (`extstore_limit_maxbytes`).
    pub file_bytes: u64,
    /// Values on flash at the end (`extstore_objects_used`).
    pub items: u64,
    /// The nodes' hits served from RAM (`get_hits - get_extstore`) and from flash
    /// (`get_extstore - miss_from_extstore`; a value still in a write buffer counts here too).
    pub ram_hits: u64,
    pub flash_hits: u64,
    /// Flash reads that found nothing usable (`miss_from_extstore`).
    pub flash_misses: u64,
    /// Bytes extstore wrote to the files (`extstore_bytes_written`).
    pub bytes_written: u64,
    /// Of the flash files' bytes, the share in the kernel's page cache at the end (memcached
    /// reads them without O_DIRECT: a flash read of a cached byte is a memory copy). None: unknown.
    pub page_cache_share: Option<f64>,
}

impl FlashTraffic {
    /// The share of the nodes' hits that came from flash (None: no hits).
    pub fn flash_share(&self) -> Option<f64> {
        let hits = self.ram_hits + self.flash_hits;
        (hits > 0).then(|| self.flash_hits as f64 / hits as f64)
    }
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Memory {
    pub budget_bytes: u64,
    pub sqlite_cache_bytes: u64,
    pub sqlite_cache_per_connection_kib: u64,
    pub l1_bytes: u64,
    pub l2_bytes: u64,
    /// The grid's flash (extstore files) in all, behind `l2_bytes` of RAM; 0: none.
    pub flash_bytes: u64,
    pub nodes: usize,
}

/// The cache's working-set estimate at the end of a run, against what the
/// bench knows: the warm-up's first pass reads every page of the tables and
/// indexes it scans, so while the run (warm-up included) is shorter than 15
/// minutes the 15-minute window must hold about that many distinct pages.
#[derive(Clone, Debug, Default, Serialize)]
pub struct WorkingSet {
    pub pages_1m: u64,
    pub pages_5m: u64,
    pub pages_15m: u64,
    /// Pages the warm-up pass read: every page of the file at the end of the
    /// run, or of the tables and indexes it reads (`Workload::prewarmed`) and page 1.
    pub known_pages: u64,
    /// pages_15m / known_pages; None when the run took longer than the window.
    pub ratio_15m: Option<f64>,
    pub advice: String,
}

impl WorkingSet {
    /// From `PRAGMA waffle_stats` (`after`), the pages known read and whether the whole run fits the 15-minute window.
    pub fn from_stats(after: &CacheSnapshot, known_pages: u64, run_within_15m: bool) -> WorkingSet {
        let ws = &after.working_set;
        let ratio_15m = (run_within_15m && known_pages > 0).then(|| ws.pages_15m as f64 / known_pages as f64);
        WorkingSet {
            pages_1m: ws.pages_1m,
            pages_5m: ws.pages_5m,
            pages_15m: ws.pages_15m,
            known_pages,
            ratio_15m,
            advice: ws.advice.clone(),
        }
    }
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct ConfigResult {
    pub name: String,
    pub vfs: String,
    pub device: String,
    pub link: String,
    pub emulated: bool,
    /// Reads libwaffle_slowdisk.so slowed over the measured run (None: no EMULATED device).
    pub emulated_reads: Option<u64>,
    pub memory: Memory,
    pub unit: String,
    pub throughput: f64,
    pub transactions: u64,
    pub seconds: f64,
    pub latency: Latency,
    pub per_kind: Vec<(String, u64)>,
    pub retries: u64,
    pub rollbacks: u64,
    pub errors: u64,
    /// Of the page requests SQLite's own caches saw, the fraction they answered.
    pub sqlite_cache_hit_ratio: Option<f64>,
    pub hits: Option<Hits>,
    pub grid: Option<GridTraffic>,
    /// The cache's working-set estimate against the file (waffle configurations).
    pub working_set: Option<WorkingSet>,
    /// `+warm`: how long `PRAGMA waffle_warm` took and what it filled.
    pub warm: Option<waffle_warm_client::Warmed>,
    /// `+restart`: the clean close and reopen after the measured run.
    pub restart: Option<Restart>,
    /// Every counter of `PRAGMA waffle_stats` over the measured run (after minus before).
    pub counters: serde_json::Map<String, serde_json::Value>,
    pub ratio_to_local: Option<f64>,
    pub ratio_to_all_local: Option<f64>,
    pub ratio_to_stock: Option<f64>,
    /// With `--rounds N`: every round's throughput, in order (the result shown is the median round's).
    pub rounds: Vec<f64>,
    /// CPU of this process and of the memcached nodes over the measured run, per transaction, microseconds.
    pub cpu_us_per_txn: f64,
    /// Grid configurations: a bare multi-get of the run's pages right after it, and the run's CPU per L2 hit.
    pub wire: Option<super::wire::Wire>,
}

/// What a restart measured.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Restart {
    /// The clean close of every connection (the last one pushes L1 and writes the files).
    pub close_ms: u64,
    /// Reopening every connection.
    pub open_ms: u64,
    pub seconds: f64,
    /// Transactions per second over the restart's run, and over the measured run before it.
    pub tps: f64,
    pub steady_tps: f64,
    /// `tps / steady_tps` (target d: at least 0.8 over the first 30 s).
    pub ratio: f64,
    /// Transactions in each whole second of the restart's run.
    pub per_second: Vec<u64>,
    /// The first second whose count reached 90% of the steady state (None: none did).
    pub seconds_to_90pct: Option<usize>,
    /// The cache's `hot_list` stats at the end of the restart's run.
    pub hot_list: HotListSnapshot,
    /// Where the restart's page reads were answered (counters over its run).
    pub l1_hits: u64,
    pub l2_pages: u64,
    pub disk_pages: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_working_set_is_compared_with_the_file_while_the_run_fits_the_window() {
        let mut after = CacheSnapshot::default();
        after.working_set.pages_1m = 10;
        after.working_set.pages_15m = 99;
        after.working_set.advice = "a".into();
        let ws = WorkingSet::from_stats(&after, 100, true);
        assert_eq!((ws.pages_1m, ws.pages_15m, ws.known_pages, ws.ratio_15m), (10, 99, 100, Some(0.99)));
        assert_eq!(WorkingSet::from_stats(&after, 100, false).ratio_15m, None, "the warm-up left the window");
        assert_eq!(WorkingSet::from_stats(&after, 0, true).ratio_15m, None, "no pages known");
    }
}
