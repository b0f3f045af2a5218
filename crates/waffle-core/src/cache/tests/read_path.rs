//! Reads through the tiers: the fuse, the working set, verify mode, stale L1 entries.

use std::panic::AssertUnwindSafe;

use super::*;
use crate::verify::Served;

/// A write path that panics (here: a poisoned stripe lock, as a panic
/// elsewhere under it leaves) cannot update L1, which still holds the old
/// bytes at the version the file is believed to hold. Tripping the fuse
/// sends every later read to the file.
#[test]
fn a_write_path_panic_trips_the_fuse_and_reads_go_to_the_file() {
    let (file, m, c, mut buf) = four_pages_of_ones();
    c.read(2, &mut buf, &m).unwrap();
    assert_eq!(c.read(2, &mut buf, &m).unwrap().1, Source::L1);
    // Poison page 2's stripe.
    let _ = std::panic::catch_unwind(AssertUnwindSafe(|| {
        let _g = c.stripe(2);
        panic!("poison");
    }));
    file.lock().unwrap()[1024..1536].fill(2); // the database writes the file first
    let wrote = std::panic::catch_unwind(AssertUnwindSafe(|| c.wrote(2, &[2u8; 512])));
    assert!(wrote.is_err(), "the write path panicked");
    c.read(2, &mut buf, &m).unwrap();
    assert_eq!(buf[0], 1, "the defect: without the fuse, L1 serves the old bytes");
    c.trip("test: a write path panicked");
    assert!(c.is_fused());
    let (n, source) = c.read(2, &mut buf, &m).unwrap();
    assert_eq!((n, source, buf[0]), (512, Source::Disk, 2), "after the fuse, the file");
    assert_eq!(c.stats_snapshot().fused.as_deref(), Some("test: a write path panicked"));
    c.wrote(3, &[3u8; 512]); // ignored: nothing is cached any more
    assert_eq!(c.pool.len(), 0);
}

/// A warm open's first-change hook (its sidecar marked dirty) runs at the
/// trip: the writes after it change no version, so none would run it.
#[test]
fn a_trip_runs_the_first_change_hook_once() {
    let (_file, _m, c, _buf) = four_pages_of_ones();
    let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = Arc::clone(&runs);
    c.before_first_change(Box::new(move || {
        seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }));
    c.trip("test: the hook at the trip");
    c.wrote(1, &[5u8; 512]);
    c.reset();
    assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 1);
}

#[test]
fn reads_and_writes_count_in_the_working_set_once_per_page() {
    let (_file, m, c, mut buf) = four_pages_of_ones();
    for _ in 0..3 {
        for page in 0..3 {
            c.read(page, &mut buf, &m).unwrap(); // L1 hits after the first round
        }
    }
    c.wrote(3, &[3u8; 512]);
    let ws = c.stats_snapshot().working_set;
    assert_eq!((ws.pages_1m, ws.bytes_15m), (4, 4 * 512), "{ws:?}");
    assert_eq!(ws.held_bytes, 64 * 512, "L1 only: {ws:?}");
}

/// Verify mode: a file changed behind the cache's back (no path told it)
/// is what verify mode exists to see. Off, L1's stale copy is served (the
/// control); on, the file's bytes are, the difference is counted by tier,
/// and the next read finds the file's bytes cached.
#[test]
fn verify_mode_serves_the_file_when_a_tier_differs() {
    let (file, m, c, mut buf) = four_pages_of_ones();
    c.read(2, &mut buf, &m).unwrap();
    file.lock().unwrap()[1024..1536].fill(7);
    assert_eq!((c.read(2, &mut buf, &m).unwrap().1, buf[0]), (Source::L1, 1), "off: the stale copy");
    c.enable_verify("test.db".into(), None);
    let (n, source) = c.read(2, &mut buf, &m).unwrap();
    assert_eq!((n, source, buf[0]), (512, Source::Disk, 7), "on: the file's bytes");
    assert_eq!(c.stats.verify_mismatches[Served::L1 as usize].get(), 1);
    c.read(2, &mut buf, &m).unwrap();
    c.read(2, &mut buf, &m).unwrap();
    assert_eq!((buf[0], c.stats.verify_mismatches_total()), (7, 1), "re-read from the file, then served equal");
    let j = c.stats_snapshot();
    assert_eq!(j.verify_checked, 2, "{j:?}");
    assert_eq!(j.verify_mismatches_by_tier.l1, 1, "{j:?}");
}

#[test]
fn an_l1_entry_at_a_version_the_file_has_left_is_never_served() {
    let (file, m, c, mut buf) = four_pages_of_ones();
    c.read(1, &mut buf, &m).unwrap();
    // A path that bumps the version without removing the L1 entry.
    c.versions.bump(1);
    file.lock().unwrap()[512..1024].fill(9);
    let (_, source) = c.read(1, &mut buf, &m).unwrap();
    assert_eq!((source, buf[0]), (Source::Disk, 9));
    assert_eq!(c.stats.l1_stale_drops.get(), 1);
}
