//! A page whose push to the grid is in flight is still in memory; a read of
//! it must find it there (or find the pushed copy), never go to the grid for
//! an older copy and then to the disk.
//!
//! The pusher's contract (crates/waffle-core/src/pusher.rs): "An L1 miss looks
//! in the queue first and takes the page back if it is there, so a page is
//! never fetched from disk while its bytes sit in memory waiting for the
//! network." This test drives `PageCache` directly (below SQLite, so the
//! sequence is exact) against a real memcached with no fault injected:
//!
//!   write A (v0), evict it, flush: the grid holds A@v0
//!   write A again without reading it (SQLite's own cache had it): A@v1 in L1
//!   evict A@v1 (it goes to the push queue, the pusher takes it at once)
//!   read A
//!
//! The read must come from the push queue (A@v1 not yet taken by the pusher)
//! or the grid (A@v1 already stored). Before commit e8bd100 a read that came
//! while the pusher held A@v1 in its in-flight batch could not see it
//! (`Pusher::take` looked only at the queue): it fetched A@v0 from the grid (a
//! `version` reject, with no fault anywhere) and read the disk, in about 3 of
//! 4 rounds here. This is the regression test for that; the differential
//! suite checks the same through SQLite (no reject without a fault).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use waffle_core::grid::Fetch;
use waffle_core::{PageCheck, Source};
use waffle_testkit::mem_file::{cache_on, MemFile};
use waffle_testkit::nodes::start_node;
use waffle_testkit::pattern;
use waffle_testkit::raw_client::{envelope_identity, ms};

const PAGE: usize = 4096;
const ROUNDS: u64 = 500;
const FILLERS: u64 = 12;

/// A grid of `node` alone (1 s deadline) and a `PageCache` of `PAGE`-byte pages over it: `cache_id`,
/// `local_pages` of L1, a 1 MiB push queue, no sealing, the adapter's `page_check`.

#[test]
fn a_page_being_pushed_is_never_read_from_an_older_grid_copy() {
    let node = start_node(64);
    let (grid, cache) = cache_on(&node.addr(), 0xe2e, PAGE, 2, None);
    let pages = FILLERS + 1 + ROUNDS;
    let file = Arc::new(Mutex::new(vec![0u8; pages as usize * PAGE]));
    let write = |page: u64, bytes: &[u8]| {
        file.lock().unwrap()[page as usize * PAGE..][..PAGE].copy_from_slice(bytes);
        cache.wrote(page, bytes);
    };
    // Made beforehand: between evicting A and reading it, nothing but writes.
    let fillers: Vec<Vec<Vec<u8>>> =
        (0..2u64).map(|set| (1..=FILLERS).map(|f| pattern((set << 32) | f, PAGE)).collect()).collect();
    let evict_all = |set: usize| {
        for (i, bytes) in fillers[set].iter().enumerate() {
            write(1 + i as u64, bytes);
        }
    };

    let mut outcomes: BTreeMap<String, u64> = BTreeMap::new();
    let mut buf = vec![0u8; PAGE];
    let disk = MemFile(Arc::clone(&file));
    for round in 0..ROUNDS {
        let a = FILLERS + 1 + round;
        write(a, &pattern(round << 1, PAGE));
        evict_all(0);
        assert!(cache.flush_pushes(Duration::from_secs(10)));
        let older = match grid.get(waffle_core::envelope::key(0xe2e, a).as_bytes()) {
            Fetch::Hit(v) => envelope_identity(&v).2,
            other => panic!("round {round}: page {a} was evicted and flushed but is not in the grid ({other:?})"),
        };
        let new = pattern((round << 1) | 1, PAGE);
        write(a, &new);
        evict_all(1);
        let (len, source) = cache.read(a, &mut buf, &disk).unwrap();
        assert_eq!(len, PAGE);
        assert!(buf == new, "round {round}: page {a} read back other bytes than written (from {source:?})");
        assert!(cache.flush_pushes(Duration::from_secs(10)));
        let after = match source {
            Source::Disk => match grid.get(waffle_core::envelope::key(0xe2e, a).as_bytes()) {
                Fetch::Hit(v) if envelope_identity(&v).2 > older => {
                    "disk, and then the newer version landed in the grid"
                }
                Fetch::Hit(_) => "disk, the grid still holds the older version",
                _ => "disk, nothing in the grid",
            },
            Source::PushQueue => "push queue",
            Source::L2 => "grid",
            Source::L1 => "L1",
            Source::ReadAhead => unreachable!("cache.read never answers from read-ahead"),
        };
        *outcomes.entry(after.to_string()).or_default() += 1;
    }
    let s = cache.stats_snapshot();
    eprintln!("{ROUNDS} reads of a page just evicted: {outcomes:?}");
    assert_eq!(s.l2_rejects_total, s.l2_rejects.version, "only version rejects are possible here: {s:?}");
    assert_eq!(s.l2_faults.timeout + s.l2_faults.io, 0, "the node must not fail in this test: {s:?}");
    assert_eq!(
        s.disk_reads, 0,
        "{} of {ROUNDS} reads of a page whose newer version was being pushed went to the grid, were served an \
         older copy ({} version rejects), and read the disk; outcomes: {outcomes:?}. Is the batch the pusher \
         is sending still visible to Pusher::take? stats: {s:?}",
        s.disk_reads, s.l2_rejects.version,
    );
}

/// The adapter's page check (InnoDB's, for the preload) runs on a grid copy
/// before it reaches L1: a refused copy is never served, never installed, and
/// the read goes to the file. (Before, the preload checked after the cache had
/// put the copy in L1, where a concurrent reader could hit it unchecked.)
#[test]
fn a_grid_copy_the_adapter_refuses_never_reaches_l1() {
    struct RefuseMarked;
    impl PageCheck for RefuseMarked {
        fn accepts(&self, _page: u64, bytes: &[u8]) -> bool {
            bytes[0] != 0xBA
        }
    }
    let node = start_node(16);
    let (_, cache) = cache_on(&node.addr(), 0xc4ec, PAGE, 16, Some(Box::new(RefuseMarked)));
    let file = Arc::new(Mutex::new(vec![0u8; 40 * PAGE]));
    let truth = pattern(7, PAGE);
    file.lock().unwrap()[..PAGE].copy_from_slice(&truth);
    let mut buf = vec![0u8; PAGE];
    let disk = MemFile(Arc::clone(&file));
    // The cache reads page 0 and pushes it (40 pages through a 16-page L1), so
    // it asks the grid for it again.
    for p in 0..40 {
        cache.read(p, &mut buf, &disk).unwrap();
    }
    assert!(cache.flush_pushes(Duration::from_secs(10)));
    // Its copy replaced by one whose envelope is right (this cache, page 0, the
    // version the file holds) but whose bytes the adapter refuses.
    let mut bad = pattern(8, PAGE);
    bad[0] = 0xBA;
    let id = waffle_core::envelope::Identity { cache_id: 0xc4ec, page: 0, version: 0 };
    ms(&node.addr(), &waffle_core::envelope::key(0xc4ec, 0), &waffle_core::envelope::seal(id, &bad));
    let (_, source) = cache.read(0, &mut buf, &disk).unwrap();
    assert_eq!(source, Source::Disk, "the refused copy was not served");
    assert!(buf == truth);
    let s = cache.stats_snapshot();
    assert_eq!(s.l2_rejects.content, 1, "{s:?}");
    assert_eq!(s.l2_hits, 0, "{s:?}");
    let (_, source) = cache.read(0, &mut buf, &disk).unwrap();
    assert_eq!(source, Source::L1);
    assert!(buf == truth, "L1 holds the file's bytes, not the refused copy's");
}
