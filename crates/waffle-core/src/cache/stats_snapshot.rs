//! The cache's part of the stats (what the stats PRAGMA shows): its
//! counters ([`Stats::snapshot`]) and the levels only the cache knows.

use std::time::Instant;

use serde_json::{Map, Value};

use crate::pool::Ahead;
use crate::stats::{CacheSnapshot, DiskAheadSnapshot, L1Snapshot, Stats};
use crate::working_set;

use super::disk_ahead::DiskAheadView;
use super::PageCache;

impl PageCache {
    /// Everything the stats PRAGMA shows of the cache.
    pub fn stats_snapshot(&self) -> CacheSnapshot {
        let mut s = self.stats.snapshot();
        s.cache_id = format!("{:016x}", self.cache_id);
        s.page_bytes = self.page_bytes() as u64;
        s.l1 = L1Snapshot {
            capacity_bytes: self.pool.capacity_bytes(),
            used_bytes: self.pool.used_bytes(),
            pages: self.pool.len() as u64,
        };
        // Pages read ahead of their reader, by source: read = used + unused + in_l1.
        let (held, dropped) = self.pool.ahead_counts();
        let (disk, grid) = (Ahead::Disk as usize, Ahead::Grid as usize);
        s.ahead_pages_disk = self.stats.ahead_pages_disk.get();
        s.ahead_used_disk = self.stats.ahead_used_disk.get();
        s.ahead_unused_disk = dropped[disk];
        s.ahead_in_l1_disk = held[disk];
        s.ahead_pages_l2 = self.stats.ahead_pages_l2.get();
        s.ahead_used_l2 = self.stats.ahead_used_l2.get();
        s.ahead_unused_l2 = dropped[grid];
        s.ahead_in_l1_l2 = held[grid];
        s.read_ahead_disk = disk_ahead_snapshot(&self.disk_ahead.view(&self.stats), &self.stats);
        s.push_queue_bytes = self.pusher.queued_bytes();
        s.sealed = self.seal_key.is_some();
        s.versions_tracked = self.versions.pages_tracked() as u64;
        s.l2_presence_pages = self.presence.len();
        s.l2_reach_pushes = u64::from(self.presence.reach());
        s.fused = self.fuse_reason.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let pages = self.working_set.estimate(Instant::now());
        let grid_memory = self.grid.get().map(|g| g.memory());
        let held_l1 = self.pool.capacity_bytes();
        s.working_set = working_set::snapshot(pages, self.page_bytes() as u64, held_l1, grid_memory);
        s.nodes = self.grid.get().map(|g| g.node_status()).unwrap_or_default();
        s
    }

    /// [`PageCache::stats_snapshot`] as its JSON object (the published keys).
    pub fn stats_json(&self) -> Map<String, Value> {
        match serde_json::to_value(self.stats_snapshot()) {
            Ok(Value::Object(m)) => m,
            _ => unreachable!("a struct serializes to an object"),
        }
    }
}

/// `read_ahead_disk` of the stats.
fn disk_ahead_snapshot(v: &DiskAheadView, stats: &Stats) -> DiskAheadSnapshot {
    let round = |x: f64| (x * 10.0).round() / 10.0;
    DiskAheadSnapshot {
        on: v.on,
        state: if !v.judged {
            "measuring"
        } else if v.on {
            "on"
        } else {
            "off"
        }
        .to_string(),
        // The last judged window's figures: a random read, a page of a run,
        // the share of pages read ahead that were used, and the most a page
        // of a run may cost for the state to be on after the next window.
        random_us: round(v.random_us),
        seq_page_us: round(v.seq_page_us),
        used_ratio: (v.used_ratio * 1000.0).round() / 1000.0,
        limit_us: round(v.used_ratio * v.random_us / v.margin),
        changes: v.changes,
        skipped_windows: stats.read_ahead_disk_skips.get(),
        probes: stats.read_ahead_disk_probes.get(),
        // The running window's samples so far.
        window_random_reads: v.window_random_reads,
        window_runs: v.window_runs,
    }
}
