//! Warming and the hot list: reading pages ahead of demand into a database's
//! cache, in the background. A layer above the cache.
//!
//! The rule of this layer: warming uses the cache; the cache knows nothing of
//! warming. The cache names no type of this module, keeps none of its state
//! and reports none of its progress: the adapter holds a [`Warming`] beside
//! each cache and adds it to the cache's stats ([`Warming::snapshot`]).
//!
//! ```text
//!  adapter: PRAGMA waffle_warm, `waffle warm --mysql`, the reload at open
//!     │        (holds a Warming beside its PageCache)
//!     v
//!  warm.rs      runs of pages, 1 MiB reads ──> L1's free room, then the pusher
//!  reload.rs    a hot list's pages, hottest first ──> L1's free room only
//!  hot_list.rs  the list file: made at a clean close, read at the next open
//!  run.rs       a piece's budget, how a run ended
//!     │        the cache's narrow interface: capture_version, place_if_room,
//!     │        place_or_push (with a PushTally), fetch_held, l1_free_bytes,
//!     v        hot_pages, flush_pushes
//!  cache (PageCache)
//! ```
//!
//! Whatever this layer reads, the cache installs a page only if its version
//! did not move between the capture (before the read) and the install (under
//! the page's stripe lock): a write during the read wins.

use std::io;
use std::time::Duration;

use crate::backing::Backing;
use crate::cache::PageCache;
use crate::stats::WarmingSnapshot;

pub mod hot_list;
pub mod reload;
pub mod run;
pub mod warm;

use reload::{HotListProgress, ReloadFrom};
use run::{Budget, Finish};
use warm::{Visit, WarmProgress};

/// The warm's and the hot list reload's progress of one database: what the
/// adapter holds beside the database's [`PageCache`]. Its runs take the
/// cache they work on.
#[derive(Default)]
pub struct Warming {
    warm: WarmProgress,
    hot_list: HotListProgress,
}

impl Warming {
    /// The last (or running) warm's progress.
    pub fn warm_progress(&self) -> &WarmProgress {
        &self.warm
    }

    /// What the hot list's reload did (or does) at this open.
    pub fn hot_list_progress(&self) -> &HotListProgress {
        &self.hot_list
    }

    /// One piece of the running warm: pages `first..first + count` of `file`
    /// into `cache` (see [`warm`]). Returns how many pages of the run are done.
    pub fn warm_run(
        &self,
        cache: &PageCache,
        first: u64,
        count: u64,
        file: &dyn Backing,
        budget: &mut Budget<'_>,
        visit: Option<&mut Visit<'_>>,
    ) -> io::Result<u64> {
        warm::run(cache, &self.warm, first, count, file, budget, visit)
    }

    /// Ends the running warm; one that is done first waits (at most
    /// `settle`) for the grid to store or refuse what it queued.
    pub fn warm_finish(&self, cache: &PageCache, how: Finish, settle: Duration) {
        warm::finish(cache, &self.warm, how, settle)
    }

    /// One piece of the hot list's reload: `pages` from `*at` on into
    /// `cache`'s L1 free room (see [`reload`]). True when the reload is over.
    #[allow(clippy::too_many_arguments)] // each is one thing the adapter decides
    pub fn hot_reload(
        &self,
        cache: &PageCache,
        pages: &[u64],
        at: &mut usize,
        from: ReloadFrom,
        in_file: &dyn Fn(u64) -> bool,
        file: &dyn Backing,
        budget: &mut Budget<'_>,
    ) -> io::Result<bool> {
        reload::run(cache, &self.hot_list, pages, at, from, in_file, file, budget)
    }

    /// "warm" and "hot_list" of a cache's stats (`PRAGMA waffle_stats`, the stats file).
    pub fn snapshot(&self) -> WarmingSnapshot {
        WarmingSnapshot { warm: self.warm.snapshot(), hot_list: self.hot_list.snapshot() }
    }
}
