//! A sequential scan's windows: how they ramp, stop, and what becomes of their pages.

use super::*;

#[test]
fn a_long_scan_ramps_up_to_full_windows() {
    let (_f, m, c) = scan_file(3000, 1024); // windows up to 32 pages (1/16 of L1)
    let (mut ra, mut buf, mut biggest) = (ReadAhead::new(), vec![0u8; 512], 0);
    let mut sizes = Vec::new();
    for page in 0..3000u64 {
        c.read_sequential(page, &mut buf, &m, &mut ra).unwrap();
        assert_eq!(buf[0], page as u8);
        if ra.last_window() != *sizes.last().unwrap_or(&0) || ra.start() == page {
            sizes.push(ra.last_window());
        }
        biggest = biggest.max(ra.last_window());
    }
    assert_eq!(&sizes[..5], &[4, 8, 16, 32, 32], "the window doubles while it is used");
    assert_eq!(biggest, READ_AHEAD_MAX_PAGES);
    let j = assert_ahead_adds_up(&c);
    assert!(j.read_ahead_windows <= 3000 / 32 + 5, "{j:?}");
    assert!(j.read_ahead_pages_disk >= 2990, "the scan read (almost) every page through windows: {j:?}");
    assert_eq!(j.disk_reads, 0, "{j:?}");
    // Every page read ahead was used but the last window's tail (the file ends there).
    assert!(j.ahead_used_disk + 32 >= j.ahead_pages_disk, "{j:?}");
    assert!(j.ahead_used_disk * 100 >= j.ahead_pages_disk * 98, "{j:?}");
}

/// Range queries: two or three adjacent pages, then a jump elsewhere. The
/// window never grows past the first, and most of what it reads is used.
#[test]
fn short_ranges_keep_the_first_small_window() {
    let (_f, m, c) = scan_file(3000, 1024);
    let (mut ra, mut buf) = (ReadAhead::new(), vec![0u8; 512]);
    let mut expect_used = 0;
    for r in 0..150u64 {
        let start = (r * 37 % 150) * 19; // every range somewhere else, more than a gap away
        let len = if r % 3 == 2 { 2 } else { 3 };
        for page in start..start + len {
            c.read_sequential(page, &mut buf, &m, &mut ra).unwrap();
            assert_eq!(buf[0], page as u8);
            assert!(ra.last_window() <= READ_AHEAD_FIRST_PAGES, "range {r}: a window of {}", ra.last_window());
        }
        expect_used += len - 1;
    }
    let j = assert_ahead_adds_up(&c);
    assert_eq!(j.read_ahead_windows, 150, "one window per range: {j:?}");
    assert_eq!(j.ahead_pages_disk, 150 * (READ_AHEAD_FIRST_PAGES - 1), "{j:?}");
    assert_eq!(j.ahead_used_disk, expect_used, "{j:?}");
    assert!(j.ahead_used_disk * 2 > j.ahead_pages_disk, "more than half the pages read ahead were used: {j:?}");
}

/// A reader that moves forward but skips past each window stops reading
/// ahead; reading the next page again starts a small window.
#[test]
fn a_window_nobody_reads_stops_read_ahead() {
    let (_f, m, c) = scan_file(600, 1024);
    let (mut ra, mut buf) = (ReadAhead::new(), vec![0u8; 512]);
    for page in (0..300u64).step_by(6) {
        c.read_sequential(page, &mut buf, &m, &mut ra).unwrap();
        assert_eq!(buf[0], page as u8);
    }
    let j = assert_ahead_adds_up(&c);
    assert_eq!((j.read_ahead_windows, j.ahead_pages_disk), (1, 3), "only the first window: {j:?}");
    assert_eq!(ra.last_window(), 1, "stopped");
    for page in 400..440u64 {
        c.read_sequential(page, &mut buf, &m, &mut ra).unwrap();
    }
    assert_eq!(ra.last_window(), 32, "a new run ramps again (4, 8, 16 over its first 28 pages, then 32)");
}

/// Pages read ahead that leave L1 unread (evicted, rewritten, reset) are
/// counted unused; the counts add up at every step.
#[test]
fn pages_read_ahead_are_used_unused_or_still_held() {
    let (_f, m, c) = scan_file(2000, 512); // windows up to 32: a scan of 2000 pages evicts
    let (mut ra, mut buf) = (ReadAhead::new(), vec![0u8; 512]);
    for page in (0..2000u64).filter(|p| p % 10 != 9) {
        c.read_sequential(page, &mut buf, &m, &mut ra).unwrap();
    }
    let j = assert_ahead_adds_up(&c);
    assert!(j.ahead_unused_disk > 0 && j.ahead_in_l1_disk > 0 && j.ahead_used_disk > 0, "{j:?}");
    // An ordinary read uses a page read ahead; a write replaces one unread
    // (pages the scan skipped).
    let held: Vec<u64> = (1900..2000).filter(|&p| p % 10 == 9 && c.pool.contains(p)).collect();
    let before = (j.ahead_used_disk, j.ahead_unused_disk);
    c.read(held[held.len() - 1], &mut buf, &m).unwrap();
    c.wrote(held[held.len() - 2], &[7u8; 512]);
    let j = assert_ahead_adds_up(&c);
    assert_eq!((j.ahead_used_disk, j.ahead_unused_disk), (before.0 + 1, before.1 + 1), "{j:?}");
    c.reset();
    let j = assert_ahead_adds_up(&c);
    assert_eq!(j.ahead_in_l1_disk, 0, "{j:?}");
}
