//! An in-memory database file for tests that drive `PageCache` directly: the
//! test writes it first, as the database would, then tells the cache. And the
//! cache those tests build over one node.

use std::io;
use std::sync::{Arc, Mutex};

use waffle_core::backing::{Backing, PageId};
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

/// The "file": a vector shared between the test and the cache's reads.
pub struct MemFile(pub Arc<Mutex<Vec<u8>>>);

impl Backing for MemFile {
    fn read_pages(&self, first: PageId, page_bytes: usize, buf: &mut [u8]) -> io::Result<usize> {
        let f = self.0.lock().unwrap();
        let at = (first.byte_offset(page_bytes) as usize).min(f.len());
        let n = buf.len().min(f.len() - at);
        buf[..n].copy_from_slice(&f[at..at + n]);
        Ok(n)
    }
    fn is_direct(&self) -> bool {
        false
    }
}
