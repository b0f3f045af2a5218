//! The cache's tests, by subject, and the fixtures they share.

mod disk_ahead;
mod disk_reasons;
mod read_path;
mod window;

use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::*;
use crate::backing::MemoryFile as Mem;
use crate::grid::Grid;
use crate::presence::DiskReason;
use crate::stats::CacheSnapshot;

fn cache() -> PageCache {
    PageCache::new(cache_opts())
}

/// A file of four 512-byte pages of 1s, the cache, and a page buffer.
fn four_pages_of_ones() -> (Arc<Mutex<Vec<u8>>>, Mem, PageCache, Vec<u8>) {
    let file = Arc::new(Mutex::new(vec![1u8; 4 * 512]));
    (Arc::clone(&file), Mem(file), cache(), vec![0u8; 512])
}

/// A file of `pages` 512-byte pages (page i filled with i as u8) and a
/// cache with no grid whose L1 holds `l1_pages`.
fn scan_file(pages: usize, l1_pages: u64) -> (Arc<Mutex<Vec<u8>>>, Mem, PageCache) {
    let file = Arc::new(Mutex::new((0..pages).flat_map(|i| vec![i as u8; 512]).collect::<Vec<u8>>()));
    let c = PageCache::new(CacheOptions { local_bytes: l1_pages * 512, ..cache_opts() });
    (Arc::clone(&file), Mem(file), c)
}

fn cache_opts() -> CacheOptions {
    CacheOptions {
        cache_id: 1,
        saved: None,
        page_bytes: 512,
        local_bytes: 64 * 512,
        push_queue_bytes: 0,
        grid: None,
        seal_key: None,
        page_check: None,
        codec: crate::codec::DEFAULT,
    }
}

/// Pages read ahead by source add up: read = used + unused + still in L1.
fn assert_ahead_adds_up(c: &PageCache) -> CacheSnapshot {
    let j = c.stats_snapshot();
    assert_eq!(j.ahead_pages_disk, j.ahead_used_disk + j.ahead_unused_disk + j.ahead_in_l1_disk, "disk: {j:?}");
    assert_eq!(j.ahead_pages_l2, j.ahead_used_l2 + j.ahead_unused_l2 + j.ahead_in_l1_l2, "l2: {j:?}");
    j
}

/// `disk_reasons` of the stats, checked to sum to `disk_reads` (the JSON's and the counter's).
fn disk_reasons(c: &PageCache) -> Value {
    let j = Value::Object(c.stats_json());
    let reasons = j["disk_reasons"].as_object().expect("disk_reasons");
    assert_eq!(reasons.len(), DiskReason::ALL.len(), "{j}");
    let sum: u64 = reasons.values().map(|v| v.as_u64().unwrap()).sum();
    assert_eq!((sum, sum), (j["disk_reads"].as_u64().unwrap(), c.stats.disk_reads.get()), "{j}");
    j["disk_reasons"].clone()
}

/// A grid whose only node refuses connections (a port nobody listens on).
fn dead_grid() -> Arc<Grid> {
    let port = waffle_nodes::closed_port();
    let spec = crate::grid::NodeSpec { host: "127.0.0.1".into(), port, weight: 1 };
    // No trial (grid::cost): these tests follow every eviction to the node.
    let opts = crate::grid::GridOptions { cost_backoff: false, ..Default::default() };
    Arc::new(Grid::new(vec![spec], opts))
}
