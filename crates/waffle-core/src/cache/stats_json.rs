//! The stats JSON of one cache (what the stats PRAGMA shows).

use std::time::Instant;

use serde_json::{json, Map, Value};

use crate::pool::Ahead;
use crate::stats::Stats;
use crate::working_set;

use super::disk_ahead::DiskAheadView;
use super::PageCache;

impl PageCache {
    /// Everything the stats PRAGMA shows.
    pub fn stats_json(&self) -> Map<String, Value> {
        let mut m = self.stats.to_json();
        m.insert("cache_id".into(), json!(format!("{:016x}", self.cache_id)));
        m.insert("page_bytes".into(), json!(self.page_bytes()));
        m.insert(
            "l1".into(),
            json!({
                "capacity_bytes": self.pool.capacity_bytes(),
                "used_bytes": self.pool.used_bytes(),
                "pages": self.pool.len(),
            }),
        );
        // Pages read ahead of their reader, by source: read = used + unused + in_l1.
        let (held, dropped) = self.pool.ahead_counts();
        for (source, read, used, a) in [
            ("disk", &self.stats.ahead_pages_disk, &self.stats.ahead_used_disk, Ahead::Disk),
            ("l2", &self.stats.ahead_pages_l2, &self.stats.ahead_used_l2, Ahead::Grid),
        ] {
            m.insert(format!("ahead_pages_{source}"), json!(read.get()));
            m.insert(format!("ahead_used_{source}"), json!(used.get()));
            m.insert(format!("ahead_unused_{source}"), json!(dropped[a as usize]));
            m.insert(format!("ahead_in_l1_{source}"), json!(held[a as usize]));
        }
        m.insert("read_ahead_disk".into(), disk_ahead_json(&self.disk_ahead.view(&self.stats), &self.stats));
        m.insert("push_queue_bytes".into(), json!(self.pusher.queued_bytes()));
        m.insert("sealed".into(), json!(self.seal_key.is_some()));
        m.insert("versions_tracked".into(), json!(self.versions.pages_tracked()));
        m.insert("l2_presence_pages".into(), json!(self.presence.len()));
        m.insert("l2_reach_pushes".into(), json!(self.presence.reach()));
        m.insert("fused".into(), json!(*self.fuse_reason.lock().unwrap_or_else(|e| e.into_inner())));
        let pages = self.working_set.estimate(Instant::now());
        let grid_memory = self.grid.get().map(|g| g.memory());
        let held_l1 = self.pool.capacity_bytes();
        m.insert("working_set".into(), working_set::to_json(pages, self.page_bytes() as u64, held_l1, grid_memory));
        let nodes = self.grid.get().map(|g| g.node_status()).unwrap_or_default();
        m.insert("nodes".into(), serde_json::to_value(nodes).expect("node status serializes"));
        m
    }
}

/// `read_ahead_disk` of the stats JSON.
fn disk_ahead_json(v: &DiskAheadView, stats: &Stats) -> Value {
    let round = |x: f64| (x * 10.0).round() / 10.0;
    json!({
        "on": v.on,
        "state": if !v.judged { "measuring" } else if v.on { "on" } else { "off" },
        // The last judged window's figures: a random read, a page of a run,
        // the share of pages read ahead that were used, and the most a page
        // of a run may cost for the state to be on after the next window.
        "random_us": round(v.random_us),
        "seq_page_us": round(v.seq_page_us),
        "used_ratio": (v.used_ratio * 1000.0).round() / 1000.0,
        "limit_us": round(v.used_ratio * v.random_us / v.margin),
        "changes": v.changes,
        "skipped_windows": stats.read_ahead_disk_skips.get(),
        "probes": stats.read_ahead_disk_probes.get(),
        // The running window's samples so far.
        "window_random_reads": v.window_random_reads,
        "window_runs": v.window_runs,
    })
}
