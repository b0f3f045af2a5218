//! The adapters' parts of the stats JSON, as plain data. The adapters fill
//! them (crates/waffle-sqlite/src/stats_map.rs, crates/waffle-preload/src/stats_file.rs);
//! their schema lives here so that a consumer (`waffle stats`, the bench)
//! depends on the core alone to read either adapter's output.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// What every stats file says besides the figures (`stats_file::stamp`), and
/// the preload's header. None in `PRAGMA waffle_stats`, and left out.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Stamp {
    /// `waffle-stats` in every stats file (stats_file::FORMAT): what tells a
    /// stats file from any other JSON (a reader refuses one without it, a
    /// writer replaces no file that lacks it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub format_version: Option<u32>,
    /// sqlite or mariadb-preload.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub adapter: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updated_unix_ms: Option<u64>,
    /// The cache's last write (the server exited, the database closed).
    #[serde(rename = "final", skip_serializing_if = "Option::is_none")]
    pub final_write: Option<bool>,
    /// What the writer says it is: running, off (the preload's switch), disabled (with
    /// `disabled_reason`) or stopped (its last write); format_version 1 said active and closed.
    /// A reader shows `stats::health::judge`'s state, which also knows crashed and stale.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// The preload: why it turned itself off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disabled_reason: Option<String>,
    /// The writer's process start time (`/proc/PID/stat` field 22, clock ticks after boot): a
    /// reader tells its process from a later one that got the same pid (format_version 2).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid_start_ticks: Option<u64>,
    /// The writer's PID namespace (`/proc/self/ns/pid`'s link): a reader in another cannot check the pid.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid_namespace: Option<String>,
    /// The kernel's boot id when written: a file of an earlier boot has no live writer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
    /// How often the writer rewrites the file: a reader calls it stale after a few of these.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interval_ms: Option<u64>,
    /// When this cache started (its counters start at 0 then): Prometheus' `waffle_start_time_seconds`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_unix_ms: Option<u64>,
}

/// The SQLite adapter's part: the database file and its settings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SqliteSection {
    pub file: String,
    #[serde(default)]
    pub config: SqliteConfig,
}

/// `config` of a SQLite database.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SqliteConfig {
    /// The nodes of the grid in use (empty: L1 only).
    pub grid: Vec<String>,
    pub sealed: bool,
    pub local_bytes: u64,
    pub timeout_ms: u64,
    pub push_queue_bytes: u64,
    pub direct_io: bool,
    pub grid_change: bool,
    pub grid_backoff: bool,
}

/// The MariaDB preload's part: its settings, counters and a table per tablespace.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PreloadSection {
    pub preload: PreloadCounters,
    #[serde(default)]
    pub switch: SwitchSnapshot,
    #[serde(default)]
    pub config_file: Option<String>,
    /// Where the page size came from.
    #[serde(default)]
    pub page_bytes_from: String,
    #[serde(default)]
    pub datadir: String,
    /// The grid's nodes, comma-separated.
    #[serde(default)]
    pub grid: String,
    /// WAFFLE_TABLES' patterns (`*`: all).
    #[serde(default)]
    pub tables: Vec<String>,
    /// By tablespace name (`db/table`).
    #[serde(default)]
    pub tablespaces: BTreeMap<String, TablespaceSnapshot>,
}

/// `switch`: the preload's off switch (its control file).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SwitchSnapshot {
    /// on or off.
    pub state: String,
    pub control_file: String,
    pub since_unix_ms: u64,
    pub turned_off: u64,
    pub turned_on: u64,
    pub reads_passed: u64,
    pub writes_passed: u64,
}

/// `preload`: what the preload saw of the server's I/O.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PreloadCounters {
    pub tracked_opens: u64,
    pub tablespaces_open: u64,
    pub segments_dropped: u64,
    pub page_reads: u64,
    pub passthrough_reads: u64,
    pub fallback_reads: u64,
    pub page_writes: u64,
    pub multi_page_writes: u64,
    pub partial_writes: u64,
    pub failed_writes: u64,
    pub unpositioned_writes: u64,
    pub truncations: u64,
    pub hole_punches: u64,
    pub closed_file_skips: u64,
    pub innodb_rejects: InnodbRejects,
}

/// Grid copies InnoDB's page check refused, by what did not match.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct InnodbRejects {
    pub page_number: u64,
    pub space_id: u64,
    pub checksum: u64,
    pub lsn: u64,
}

impl InnodbRejects {
    pub fn total(&self) -> u64 {
        self.page_number + self.space_id + self.checksum + self.lsn
    }
}

/// One tablespace's reads and writes.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TablespaceSnapshot {
    /// False: not cached (WAFFLE_TABLES).
    pub cached: bool,
    pub segment: u64,
    pub opens: u64,
    pub reads: u64,
    pub l1_hits: u64,
    pub push_queue_hits: u64,
    pub l2_hits: u64,
    pub disk_reads: u64,
    pub page_writes: u64,
    pub invalidations: u64,
    pub innodb_rejects: u64,
    /// Shares of `reads` (to 4 decimals; None: no read).
    pub hit_ratio: Option<f64>,
    pub l2_hit_ratio: Option<f64>,
}
