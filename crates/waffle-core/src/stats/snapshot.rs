//! One stats JSON object as a type: `PRAGMA waffle_stats`, a SQLite stats
//! file or the preload's. Producers build it and serialize it; consumers
//! (`waffle stats`, the Prometheus metrics, the bench, tests) deserialize it
//! and read fields, so a renamed counter fails to build, not at run time.
//!
//! The sections are flattened: their fields sit side by side in one object.
//! A section is None when the object lacks it (the PRAGMA has no stamp, a
//! SQLite file no preload section, a preload that turned off before its
//! cache started only its stamp). Each section is recognised by a field it
//! always has (`l1_hits`, `warm`, `file`, `preload`); one that does not read
//! (a field of the wrong type) is None too, as serde's flattened options are.

use serde::{Deserialize, Serialize};

use super::adapter_snapshot::{PreloadSection, SqliteSection, Stamp};
use super::cache_snapshot::CacheSnapshot;
use super::warming_snapshot::WarmingSnapshot;

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct StatsSnapshot {
    #[serde(flatten)]
    pub stamp: Stamp,
    #[serde(flatten)]
    pub cache: Option<CacheSnapshot>,
    #[serde(flatten)]
    pub warming: Option<WarmingSnapshot>,
    #[serde(flatten)]
    pub sqlite: Option<SqliteSection>,
    #[serde(flatten)]
    pub preload: Option<PreloadSection>,
}

impl StatsSnapshot {
    /// Reads a stats JSON object (Err: it is not one).
    pub fn from_json(v: &serde_json::Value) -> Result<StatsSnapshot, serde_json::Error> {
        StatsSnapshot::deserialize(v)
    }

    /// The object as JSON (the published format). Through a `Value`, whose
    /// maps are sorted: the keys come out in the order they always had.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("a stats snapshot serializes")
    }

    /// The cache's section; panics without one (tests and tools that know a cache ran).
    pub fn cache(&self) -> &CacheSnapshot {
        self.cache.as_ref().expect("the stats have a cache section (l1_hits and the rest)")
    }

    /// The warming's section; panics without one (tests and tools that know an adapter wrote it).
    pub fn warming(&self) -> &WarmingSnapshot {
        self.warming.as_ref().expect("the stats have a warming section (warm, hot_list)")
    }
}
