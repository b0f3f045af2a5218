//! The cache's stats: the counters it keeps while the database runs, and the
//! one typed snapshot of them that every stats JSON object is.
//!
//! - [`counters`]: the atomics and latency histograms ([`Stats`]), and their snapshot;
//! - [`cache_snapshot`]: the cache's part of the JSON ([`CacheSnapshot`]);
//! - [`warming_snapshot`]: the warming layer's (`warm`, `hot_list`);
//! - [`adapter_snapshot`]: the adapters' (the stats files' stamp, SQLite's
//!   file and config, the preload's counters and tablespaces), filled by them;
//! - [`health`]: what a reader shows of a stats file's writer (running, stopped, crashed, stale...);
//! - [`snapshot`]: the whole object ([`StatsSnapshot`]), what producers
//!   serialize and consumers read by field instead of by string key.

pub mod adapter_snapshot;
pub mod cache_snapshot;
pub mod counters;
pub mod health;
pub mod snapshot;
pub mod warming_snapshot;

pub use adapter_snapshot::{
    InnodbRejects, PreloadCounters, PreloadSection, SqliteConfig, SqliteSection, Stamp, SwitchSnapshot,
    TablespaceSnapshot,
};
pub use cache_snapshot::{
    CacheSnapshot, CompressionSnapshot, DiskAheadSnapshot, DiskReasons, FaultCounts, L1Snapshot, LatencySnapshot,
    PushNotStored, RejectCounts, ServedCounts, TierLatency, WorkingSetSnapshot,
};
pub use counters::{Counter, Stats, Tier, LATENCY_BUCKETS_US};
pub use snapshot::StatsSnapshot;
pub use warming_snapshot::{HotListSnapshot, SkippedTarget, WarmNotStored, WarmSnapshot, WarmingSnapshot};
