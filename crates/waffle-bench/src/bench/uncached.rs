//! A database on an EMULATED device kept out of the kernel's page cache while
//! a configuration runs: what a database larger than the machine's memory
//! would see, on a machine whose memory holds the benchmark's file many times.
//!
//! Why the bench does it, outside the product: the slow-disk shim lets the
//! page cache answer what it holds (as a real disk would), and
//! `waffle_direct_io=on` is meant to leave nothing cached of what waffle read.
//! On this machine (Linux 6.18, ext4) it leaves most of it: after a range scan
//! through waffle with `direct_io=on` (FADV_RANDOM on SQLite's descriptor,
//! FADV_DONTNEED after each read, as strace shows) 4,045 pages of the file were
//! cached for 2,663 read, and a whole 123.5 MiB file after a full scan, so the
//! EMULATED hdd-10k slowed 991 of 420,000 reads of a measured run (issue 34
//! item 4). The cause was the product's: its advice of no read-ahead came
//! after the pager's first read of the header, whose read-ahead window marked
//! a page that kept the kernel reading ahead through any scan (fixed: xOpen
//! advises first, docs/benchmarks.md "Configurations"). The bench still drops
//! the whole file every
//! [`INTERVAL_MS`], for every configuration on a device alike.

use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// How often the file is dropped: at hdd-10k's 2 x 200 reads a second, a read
/// the drop missed is answered from the cache at most this long.
pub const INTERVAL_MS: u64 = 20;

/// Drops a file's pages from the page cache until dropped itself.
pub struct KeepUncached {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl KeepUncached {
    /// Starts dropping `path`'s clean pages (dirty ones stay until written back).
    pub fn start(path: &Path) -> Result<KeepUncached, String> {
        let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("bench-uncached".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    // SAFETY: advice on a descriptor this thread owns; it changes no data.
                    unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
                    std::thread::sleep(Duration::from_millis(INTERVAL_MS));
                }
            })
            .map_err(|e| format!("cannot start the page cache dropper: {e}"))?;
        Ok(KeepUncached { stop, thread: Some(thread) })
    }
}

impl Drop for KeepUncached {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// mincore's count of `path`'s pages in the page cache.
    fn cached(path: &Path) -> usize {
        let file = std::fs::File::open(path).unwrap();
        let len = file.metadata().unwrap().len() as usize;
        // SAFETY: a read-only shared mapping of an open file, unmapped below.
        let map =
            unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_SHARED, file.as_raw_fd(), 0) };
        assert_ne!(map, libc::MAP_FAILED);
        let mut v = vec![0u8; len.div_ceil(4096)];
        // SAFETY: the mapping spans len bytes, v one byte per 4 KiB page of it.
        assert_eq!(unsafe { libc::mincore(map, len, v.as_mut_ptr()) }, 0);
        // SAFETY: the mapping above.
        unsafe { libc::munmap(map, len) };
        v.iter().filter(|&&b| b & 1 == 1).count()
    }

    #[test]
    fn a_file_read_while_kept_uncached_leaves_the_page_cache() {
        let dir = std::env::temp_dir().join(format!("waffle-bench-uncached-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("db");
        std::fs::write(&f, vec![1u8; 4 << 20]).unwrap();
        std::fs::File::open(&f).unwrap().sync_all().unwrap();
        let _ = std::fs::read(&f).unwrap();
        let before = cached(&f);
        let keep = KeepUncached::start(&f).unwrap();
        // Cached again, then dropped within an interval or so: waited for, bounded (the dropping
        // thread may be starved for many intervals).
        let _ = std::fs::read(&f).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let mut during = cached(&f);
        while during > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(INTERVAL_MS));
            during = cached(&f);
        }
        drop(keep);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(before, 1024, "control: a file just read is cached");
        assert_eq!(during, 0);
    }
}
