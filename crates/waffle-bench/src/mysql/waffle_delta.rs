//! What waffle did during one measured run of `waffle bench mysql`: the
//! difference of two stats snapshots (the stats file before and after), and
//! the levels at the end. Its JSON is the `waffle` of a run in the results.

use serde::Serialize;
use waffle_core::grid::NodeStatus;
use waffle_core::stats::CacheSnapshot;

#[derive(Clone, Debug, Serialize)]
pub struct WaffleDelta {
    pub l1_hits: u64,
    pub l1_misses: u64,
    pub push_queue_hits: u64,
    pub l2_hits: u64,
    pub l2_misses: u64,
    pub disk_reads: u64,
    pub l2_pushes: u64,
    pub l2_rejects_total: u64,
    pub l2_presence_skips: u64,
    pub l2_aged_skips: u64,
    pub l2_cost_skips: u64,
    pub l2_push_cost_skips: u64,
    pub disk_writes: u64,
    /// Since the server started (the stats' percentiles are), at the end.
    pub l2_latency_p95_us: u64,
    pub disk_latency_p95_us: u64,
    /// At the end: what the cache counts on in the grid, and each node's cost decision.
    pub l2_presence_pages: u64,
    pub l2_reach_pushes: u64,
    pub nodes: Vec<NodeStatus>,
}

impl WaffleDelta {
    /// From the cache's stats `before` and `after` the run.
    pub fn between(before: &CacheSnapshot, after: &CacheSnapshot) -> WaffleDelta {
        let d = |f: fn(&CacheSnapshot) -> u64| f(after).saturating_sub(f(before));
        WaffleDelta {
            l1_hits: d(|c| c.l1_hits),
            l1_misses: d(|c| c.l1_misses),
            push_queue_hits: d(|c| c.push_queue_hits),
            l2_hits: d(|c| c.l2_hits),
            l2_misses: d(|c| c.l2_misses),
            disk_reads: d(|c| c.disk_reads),
            l2_pushes: d(|c| c.l2_pushes),
            l2_rejects_total: d(|c| c.l2_rejects_total),
            l2_presence_skips: d(|c| c.l2_presence_skips),
            l2_aged_skips: d(|c| c.l2_aged_skips),
            l2_cost_skips: d(|c| c.l2_cost_skips),
            l2_push_cost_skips: d(|c| c.l2_push_cost_skips),
            disk_writes: d(|c| c.disk_writes),
            l2_latency_p95_us: after.latency.l2.p95_us,
            disk_latency_p95_us: after.latency.disk.p95_us,
            l2_presence_pages: after.l2_presence_pages,
            l2_reach_pushes: after.l2_reach_pushes,
            nodes: after.nodes.clone(),
        }
    }

    /// Reads answered by L1 (with the push queue), the grid and the disk, and all reads.
    pub fn split(&self) -> (u64, u64, u64, u64) {
        (self.l1_hits + self.push_queue_hits, self.l2_hits, self.disk_reads, self.l1_hits + self.l1_misses)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_differences_and_levels_are_the_end() {
        let before = CacheSnapshot { l1_hits: 10, l2_hits: 5, l2_presence_pages: 3, ..CacheSnapshot::default() };
        let mut after = CacheSnapshot { l1_hits: 25, l1_misses: 7, l2_hits: 9, ..CacheSnapshot::default() };
        after.l2_presence_pages = 40;
        after.latency.l2.p95_us = 300;
        let d = WaffleDelta::between(&before, &after);
        assert_eq!((d.l1_hits, d.l1_misses, d.l2_hits, d.l2_presence_pages, d.l2_latency_p95_us), (15, 7, 4, 40, 300));
        assert_eq!(d.split(), (15, 4, 0, 22));
    }
}
