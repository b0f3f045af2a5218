//! Read-ahead from the disk turned off and on by what runs cost, on a simulated clock.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::*;
use crate::backing::{Backing, PageId};
use crate::grid::Clock;
use crate::stats::DiskAheadSnapshot;

/// A clock the test moves: here the backing moves it by what a read costs.
struct TestClock(Mutex<Instant>);

impl Clock for TestClock {
    fn now(&self) -> Instant {
        *self.0.lock().unwrap()
    }
}

/// A file whose reads cost simulated time: a single page `random_us`, a
/// run `page_us` per page (changeable while the test runs).
struct CostedFile {
    file: Mem,
    clock: Arc<TestClock>,
    random_us: u64,
    page_us: AtomicU64,
}

impl Backing for CostedFile {
    fn read_pages(&self, first: PageId, page_bytes: usize, buf: &mut [u8]) -> io::Result<usize> {
        let pages = (buf.len() / page_bytes) as u64;
        let us = if pages == 1 { self.random_us } else { pages * self.page_us.load(Ordering::Relaxed) };
        *self.clock.0.lock().unwrap() += Duration::from_micros(us);
        self.file.read_pages(first, page_bytes, buf)
    }
    fn is_direct(&self) -> bool {
        false
    }
}

/// A cache (L1 of 1024 pages: windows up to 32) over `pages` pages whose
/// reads cost as [`CostedFile`] says, on a clock the file moves.
fn costed(pages: usize, random_us: u64, page_us: u64) -> (CostedFile, PageCache) {
    let (_f, m, mut c) = scan_file(pages, 1024);
    let clock = Arc::new(TestClock(Mutex::new(Instant::now())));
    c.clock = Arc::clone(&clock) as Arc<dyn Clock + Send + Sync>;
    (CostedFile { file: m, clock, random_us, page_us: AtomicU64::new(page_us) }, c)
}

/// A scan of `pages` from `from` (checking every page's bytes), with a
/// random single-page read elsewhere (pages 5000 and up) every 4 pages.
fn scan_with_random_reads(c: &PageCache, f: &CostedFile, ra: &mut ReadAhead, from: u64, pages: u64) {
    let mut buf = vec![0u8; 512];
    for page in from..from + pages {
        let (n, _) = c.read_sequential(page, &mut buf, f, ra).unwrap();
        assert_eq!((n, buf[0], buf[511]), (512, page as u8, page as u8), "page {page}");
        if page.is_multiple_of(4) {
            let other = 5000 + (page * 7919) % 5000;
            c.read(other, &mut buf, f).unwrap();
            assert_eq!(buf[0], other as u8);
        }
    }
}

fn read_ahead_disk(c: &PageCache) -> DiskAheadSnapshot {
    c.stats_snapshot().read_ahead_disk
}

/// Runs that cost per page what a random read costs: after the first
/// measuring window read-ahead from the disk is off, the scan goes on
/// with demand reads (every page right, the counts adding up), one window
/// in 16 still reads ahead; when runs get cheap, the probes see it and
/// read-ahead from the disk comes back.
#[test]
fn runs_that_cost_a_random_read_per_page_turn_disk_read_ahead_off_and_probes_go_on() {
    let (f, c) = costed(10_000, 10_000, 10_000);
    let mut ra = ReadAhead::new();
    // 12.5 ms of simulated time per scanned page: 800 pages per window.
    scan_with_random_reads(&c, &f, &mut ra, 0, 400);
    let j = read_ahead_disk(&c);
    assert_eq!((j.state.as_str(), j.on), ("measuring", true), "{j:?}");
    let before_off = c.stats.ahead_pages_disk.get();
    assert!(before_off > 350, "on: the scan read ahead: {before_off}");

    scan_with_random_reads(&c, &f, &mut ra, 400, 1600);
    let j = read_ahead_disk(&c);
    assert_eq!((j.state.as_str(), j.on, j.changes), ("off", false, 1), "{j:?}");
    assert_eq!((j.random_us, j.seq_page_us), (10_000.0, 10_000.0), "{j:?}");
    assert!(j.used_ratio > 0.9, "a scan uses what it reads ahead: {j:?}");
    let (skips, probes) = (j.skipped_windows, j.probes);
    assert!(skips >= 15 && probes >= 1, "{j:?}");
    assert_eq!(skips / DISK_AHEAD_PROBE_EVERY, probes, "one window in 16 probes: {j:?}");
    // Off, the windows ramped on (the reader read every page): the probes read full windows.
    assert_eq!(ra.last_window(), READ_AHEAD_MAX_PAGES);
    let aj = assert_ahead_adds_up(&c);
    let ahead = c.stats.ahead_pages_disk.get() - before_off;
    assert!(ahead < 1600 / 2, "most of the scan off was demand reads: {ahead} pages read ahead: {aj:?}");
    assert!(aj.disk_reads > 1000, "{aj:?}");
    disk_reasons(&c);

    // Runs get cheap (a twentieth of a random read per page): the probes measure it, on again.
    f.page_us.store(500, Ordering::Relaxed);
    scan_with_random_reads(&c, &f, &mut ra, 2000, 2500);
    let j = read_ahead_disk(&c);
    assert_eq!((j.state.as_str(), j.changes), ("on", 2), "{j:?}");
    // (The window that turned it on may have measured probes of both costs.)
    assert!(j.seq_page_us <= j.random_us * 0.64, "{j:?}");
    assert_ahead_adds_up(&c);
    disk_reasons(&c);
}

/// Runs that cost a twentieth of a random read per page keep read-ahead
/// from the disk on: judged, never skipped, never probed.
#[test]
fn cheap_runs_keep_disk_read_ahead_on() {
    let (f, c) = costed(10_000, 10_000, 500);
    let mut ra = ReadAhead::new();
    // 3 ms of simulated time per scanned page: 5000 pages are 1.5 windows.
    scan_with_random_reads(&c, &f, &mut ra, 0, 5000);
    let j = read_ahead_disk(&c);
    assert_eq!((j.state.as_str(), j.on, j.changes), ("on", true, 0), "{j:?}");
    assert_eq!((j.skipped_windows, j.probes), (0, 0), "{j:?}");
    assert_eq!((j.random_us, j.seq_page_us), (10_000.0, 500.0), "{j:?}");
    let aj = assert_ahead_adds_up(&c);
    assert!(aj.ahead_pages_disk >= 4800, "every page but the windows' first: {aj:?}");
    assert!(aj.ahead_used_disk >= 4800, "{aj:?}");
}
