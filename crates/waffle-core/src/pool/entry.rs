//! What leaves the pool and what a read-ahead page is: the types the pool's
//! shards (`s3fifo.rs`) and its front (`mod.rs`) share, below both.

use std::fmt;

/// An entry leaving the pool by eviction (or `drain`), to be pushed down a tier.
pub struct Evicted {
    pub page: u64,
    pub version: u64,
    pub bytes: Box<[u8]>,
    /// Inserted by a sequential scan (`Pool::insert_scan`) and never read
    /// since: its bytes are still on disk (or in the grid), and pushing them
    /// would only displace pages someone reads again.
    pub scan: bool,
}

/// Where a page a read-ahead window brought in ahead of its reader came from
/// (an index into per-source counters).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Ahead {
    Disk = 0,
    Grid = 1,
}

impl fmt::Debug for Evicted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Evicted")
            .field("page", &self.page)
            .field("version", &self.version)
            .field("len", &self.bytes.len())
            .field("scan", &self.scan)
            .finish()
    }
}
