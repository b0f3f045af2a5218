//! The presence set (`waffle_core::presence`): the cache asks the grid only
//! for pages it pushed at their current version and has not taken back. Below
//! SQLite (`PageCache` over a memory file, one real memcached): a push, a
//! fetch, a write, an invalidation, a truncation and a node restart each
//! leave the set right, checked against what memcached really holds
//! (`curr_items`) and against the requests the node saw.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use waffle_core::stats::CacheSnapshot;
use waffle_core::{envelope, PageCache, Source};
use waffle_testkit::mem_file::{cache_on, patterned, set_page, MemFile};
use waffle_testkit::nodes::start_node;
use waffle_testkit::pattern;
use waffle_testkit::raw_client::{mg, node_stat};

const PAGE: usize = 4096;
const PAGES: u64 = 32;
const L1_PAGES: u64 = 4;

fn page_of(file: &Mutex<Vec<u8>>, p: u64) -> Vec<u8> {
    file.lock().unwrap()[p as usize * PAGE..][..PAGE].to_vec()
}

fn stats(cache: &PageCache) -> CacheSnapshot {
    cache.stats_snapshot()
}

#[test]
fn the_presence_set_follows_pushes_fetches_writes_truncations_and_a_node_restart() {
    let mut node = start_node(16);
    let (_grid, cache) = cache_on(&node.addr(), 0x9e5, PAGE, L1_PAGES, None);
    let file = patterned(PAGES, PAGE);
    let disk = MemFile(Arc::clone(&file));
    let mut buf = vec![0u8; PAGE];
    // Lookups that asked the grid (node requests also count the pusher's stores).
    let requests = || {
        let s = stats(&cache);
        s.l2_hits + s.l2_misses + s.l2_rejects_total + s.l2_skipped
    };
    let read = |p: u64, buf: &mut Vec<u8>| {
        let (len, source) = cache.read(p, buf, &disk).unwrap();
        assert_eq!(len, PAGE);
        assert!(*buf == page_of(&file, p), "page {p} read other bytes than the file's (from {source:?})");
        source
    };

    // Cold: nothing was pushed, so no read asks the grid.
    for p in 0..PAGES {
        assert_eq!(read(p, &mut buf), Source::Disk);
    }
    let s = stats(&cache);
    assert_eq!(s.l2_presence_skips, PAGES, "{s:?}");
    assert_eq!(s.l2_misses + s.l2_hits, 0, "{s:?}");

    // Pushes: the evicted pages are in the set, and memcached holds exactly those.
    assert!(cache.flush_pushes(Duration::from_secs(10)));
    let s = stats(&cache);
    let pushed = s.l2_presence_pages;
    assert_eq!(pushed, s.l2_pushes, "one mark per pushed page: {s:?}");
    assert!(pushed >= PAGES - L1_PAGES, "{s:?}");
    assert_eq!(node_stat(&node.addr(), "curr_items"), pushed, "memcached holds what the set says");

    // A fetch takes the page back: out of memcached and out of the set (the
    // page it evicts from L1 goes in: the count stays, and still matches memcached's).
    let before = requests();
    assert_eq!(read(0, &mut buf), Source::L2);
    assert_eq!(requests(), before + 1);
    assert!(mg(&node.addr(), &envelope::key(0x9e5, 0)).is_none(), "the fetched item is gone from memcached");
    assert!(cache.flush_pushes(Duration::from_secs(10)));
    assert_eq!(stats(&cache).l2_presence_pages, pushed);
    assert_eq!(node_stat(&node.addr(), "curr_items"), pushed);

    // A write and an invalidation: the grid's copies are of another version, so they are not asked for.
    let new = pattern(1000, PAGE);
    set_page(&file, 1, &new);
    cache.wrote(1, &new);
    let mut partial = page_of(&file, 2);
    partial[9] ^= 0xFF;
    set_page(&file, 2, &partial);
    cache.invalidate(2);
    // Push page 1's new version out of L1 again, then read 2 (never asked) and 1 (its new copy).
    for p in 10..10 + L1_PAGES {
        read(p, &mut buf);
    }
    assert!(cache.flush_pushes(Duration::from_secs(10)));
    let before = requests();
    let skips = stats(&cache).l2_presence_skips;
    assert_eq!(read(2, &mut buf), Source::Disk);
    assert_eq!((requests(), stats(&cache).l2_presence_skips), (before, skips + 1), "page 2 asked nothing");
    assert_eq!(read(1, &mut buf), Source::L2, "page 1's new version was pushed and comes back");
    assert_eq!(stats(&cache).l2_rejects_total, 0);

    // A truncation: the pages past the cut leave the set; regrown, they read from the disk only.
    assert!(cache.flush_pushes(Duration::from_secs(10)));
    let cut = 20;
    file.lock().unwrap().truncate(cut as usize * PAGE);
    cache.truncated(cut);
    for p in cut..PAGES {
        file.lock().unwrap().extend_from_slice(&pattern(5000 + p, PAGE));
    }
    let before = requests();
    for p in cut..PAGES {
        assert_eq!(read(p, &mut buf), Source::Disk, "page {p} after the cut");
    }
    assert_eq!(requests(), before, "no page past the cut was asked for");

    // A node restarted empty: pages the set still holds are asked for and missed, counted per node.
    assert!(cache.flush_pushes(Duration::from_secs(10)));
    let marked: Vec<u64> = (3..cut).filter(|&p| p != 10 && p != 11 && p != 12 && p != 13).collect();
    node.restart().unwrap();
    let mut missed = 0;
    for &p in &marked {
        if read(p, &mut buf) == Source::Disk {
            missed += 1;
        }
    }
    let s = stats(&cache);
    assert!(missed > 0, "{s:?}");
    assert!(s.l2_misses > 0, "pushed pages the node lost are misses (presence misses): {s:?}");
    assert_eq!(s.nodes[0].presence_misses, s.l2_misses, "counted on the node: {s:?}");
    // Each miss took its page out of the set: read again, no page misses (the
    // ones asked for now are those the first pass pushed to the restarted node).
    assert!(cache.flush_pushes(Duration::from_secs(10)));
    let misses = stats(&cache).l2_misses;
    for &p in &marked {
        read(p, &mut buf);
    }
    assert_eq!(stats(&cache).l2_misses, misses, "a missed page was asked for again: {:?}", stats(&cache));
}

/// The grid's reach: a 4 MiB memcached (about 900 pages) under 4000 pushed
/// pages. Read again oldest first (each read pushes a page too, so none of
/// the first pass's is left by the time it is reached), the evicted pages are
/// soon skipped without a round trip (`l2_aged_skips`), and few lookups
/// miss. Read newest first, the pages memcached still holds are asked for
/// and found. Every read equals the file. The control is the cold pass: no
/// miss seen yet, so the reach is unknown and nothing is skipped for age.
#[test]
fn pages_pushed_longer_ago_than_the_grid_keeps_are_not_asked_for() {
    const MANY: u64 = 4000;
    let node = start_node(4);
    let (_grid, cache) = cache_on(&node.addr(), 0x4eac, PAGE, L1_PAGES, None);
    let file = patterned(MANY, PAGE);
    let disk = MemFile(Arc::clone(&file));
    let mut buf = vec![0u8; PAGE];
    let mut pass = |label: &str, order: &mut dyn Iterator<Item = u64>| {
        for (i, p) in order.enumerate() {
            cache.read(p, &mut buf, &disk).unwrap();
            assert!(buf == page_of(&file, p), "{label}: page {p} read other bytes than the file's");
            if i % 64 == 0 {
                assert!(cache.flush_pushes(Duration::from_secs(10)));
            }
        }
        assert!(cache.flush_pushes(Duration::from_secs(10)));
        let s = stats(&cache);
        let counts = [s.l2_hits, s.l2_misses, s.l2_aged_skips];
        eprintln!("{label}: hits, misses, aged skips so far {counts:?}; reach {}", s.l2_reach_pushes);
        counts
    };
    let cold = pass("cold", &mut (0..MANY));
    assert_eq!(cold, [0, 0, 0], "nothing pushed before the first pass");
    assert_eq!(stats(&cache).l2_reach_pushes, 0, "no miss seen yet: the reach is unknown");
    let held = node_stat(&node.addr(), "curr_items");
    assert!(held < MANY / 2, "memcached evicted most of the pages: it holds {held}");

    let [_, misses, aged] = pass("oldest first", &mut (0..MANY));
    assert!(aged > MANY / 2, "most evicted pages were skipped, not asked for: {:?}", stats(&cache));
    assert!(misses < aged / 4, "few lookups missed: {:?}", stats(&cache));

    let [hits, misses_after, _] = pass("newest first", &mut (0..MANY).rev());
    assert!(hits > held / 4, "the pages memcached still held were asked for and found: {:?}", stats(&cache));
    assert!(misses_after - misses < hits, "{:?}", stats(&cache));
}
