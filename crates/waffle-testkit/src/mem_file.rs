//! An in-memory database file for tests that drive `PageCache` directly: the
//! test writes it first, as the database would, then tells the cache. And the
//! cache those tests build over one node.

use std::sync::{Arc, Mutex};

use waffle_core::grid::{Grid, GridOptions, NodeSpec};
use waffle_core::{CacheOptions, PageCache, PageCheck};

/// A cache of `page_bytes` pages over the node at `addr` (1 s deadlines), `local_pages` of L1,
/// a 1 MiB push queue, no key, no cost back-off (a memory file is always cheaper than
/// the grid); the grid is returned too, for direct requests.
pub fn cache_on(
    addr: &str,
    cache_id: u64,
    page_bytes: usize,
    local_pages: u64,
    page_check: Option<Box<dyn PageCheck>>,
) -> (Arc<Grid>, PageCache) {
    let opts = GridOptions { timeout_ms: 1000, cost_backoff: false, ..GridOptions::default() };
    let grid = Arc::new(Grid::new(NodeSpec::parse_list(addr).expect("a node address"), opts));
    let cache = PageCache::new(CacheOptions {
        cache_id,
        saved: None,
        page_bytes,
        local_bytes: local_pages * page_bytes as u64,
        push_queue_bytes: 1 << 20,
        grid: Some(Arc::clone(&grid)),
        seal_key: None,
        page_check,
        codec: waffle_core::codec::DEFAULT,
    });
    (grid, cache)
}

/// The "file": a vector shared between the test and the cache's reads (the core's own).
pub use waffle_core::backing::MemoryFile as MemFile;

/// A file of `pages` pages of `page_bytes`, page p holding `pattern(p, page_bytes)`.
pub fn patterned(pages: u64, page_bytes: usize) -> Arc<Mutex<Vec<u8>>> {
    Arc::new(Mutex::new((0..pages).flat_map(|p| crate::pattern(p, page_bytes)).collect()))
}

/// Writes page `p` of `file` (its size: `bytes.len()`), as the database would before telling the cache.
pub fn set_page(file: &Mutex<Vec<u8>>, p: u64, bytes: &[u8]) {
    file.lock().unwrap()[p as usize * bytes.len()..][..bytes.len()].copy_from_slice(bytes);
}
