//! For the core's unit tests of background readers (warming/): an
//! in-memory file whose reads can run a hook first (a write landing while the
//! reader's read is in flight), and a cache over it with no grid.

use std::io;
use std::sync::{Arc, Mutex, OnceLock};

use crate::backing::{Backing, MemoryFile, PageId};
use crate::cache::{CacheOptions, PageCache};
use crate::warming::run::Budget;

pub struct HookedFile {
    file: MemoryFile,
    during_read: OnceLock<Box<dyn Fn() + Send + Sync>>,
}

impl HookedFile {
    /// The database writes `page` (all `byte`: the file first, then the cache) while the first
    /// read of this file is in flight.
    pub fn write_during_the_first_read(&self, cache: &Arc<PageCache>, page: u64, byte: u8) {
        let (cache, file) = (Arc::clone(cache), Arc::clone(&self.file.0));
        let page_bytes = cache.page_bytes();
        let _ = self.during_read.set(Box::new(move || {
            if cache.stats().disk_writes.get() == 0 {
                let at = page as usize * page_bytes;
                file.lock().unwrap()[at..at + page_bytes].fill(byte);
                cache.wrote(page, &vec![byte; page_bytes]);
            }
        }));
    }
}

impl Backing for HookedFile {
    fn read_pages(&self, first: PageId, page_bytes: usize, buf: &mut [u8]) -> io::Result<usize> {
        if let Some(hook) = self.during_read.get() {
            hook();
        }
        self.file.read_pages(first, page_bytes, buf)
    }
    fn is_direct(&self) -> bool {
        false
    }
}

/// A budget that ends only when `cancel` is set (or after a minute), waiting up to `push_wait`
/// for the push queue's room.
pub fn budget(cancel: &std::sync::atomic::AtomicBool, push_wait: std::time::Duration) -> Budget<'_> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    Budget { bytes: u64::MAX, deadline, cancel, push_wait }
}

/// A file of `pages` pages of `page_bytes`, page i filled with i, and a cache (id 7, no grid,
/// no push queue) whose L1 holds `l1_pages`.
pub fn numbered_file_and_cache(
    pages: usize,
    page_bytes: usize,
    l1_pages: u64,
) -> (Arc<Mutex<Vec<u8>>>, HookedFile, Arc<PageCache>) {
    let bytes: Vec<u8> = (0..pages).flat_map(|i| vec![i as u8; page_bytes]).collect();
    let bytes = Arc::new(Mutex::new(bytes));
    let file = HookedFile { file: MemoryFile(Arc::clone(&bytes)), during_read: OnceLock::new() };
    let cache = PageCache::new(CacheOptions {
        cache_id: 7,
        saved: None,
        page_bytes,
        local_bytes: l1_pages * page_bytes as u64,
        push_queue_bytes: 0,
        grid: None,
        seal_key: None,
        page_check: None,
        codec: crate::codec::DEFAULT,
    });
    (bytes, file, Arc::new(cache))
}
