//! Unit tests of the pool's public behaviour (policy details are tested in
//! `s3fifo.rs`, the randomized model in `tests/pool_model.rs`).

use std::collections::{HashMap, HashSet};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::*;

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;

fn entry(len: u64, fill: u8) -> Box<[u8]> {
    vec![fill; len as usize].into_boxed_slice()
}

fn shard_budgets(pool: &Pool) -> Vec<u64> {
    pool.shards.iter().map(|s| s.lock().budget_bytes()).collect()
}

fn validate(pool: &Pool) {
    for shard in pool.shards.iter() {
        shard.lock().validate();
    }
}

#[test]
fn pool_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Pool>();
}

#[test]
fn shard_count_follows_capacity_and_budgets_sum_to_capacity() {
    for (capacity, shards) in [
        (0, 1),
        (1, 1),
        (4 * MIB - 1, 1),
        (8 * MIB - 1, 1),
        (8 * MIB, 2),
        (12 * MIB, 2),
        (16 * MIB, 4),
        (256 * MIB + 7, 64),
        (64 << 30, 64),
    ] {
        let pool = Pool::new(capacity);
        let budgets = shard_budgets(&pool);
        assert_eq!(budgets.len(), shards, "capacity {capacity}");
        assert_eq!(budgets.iter().sum::<u64>(), capacity);
        assert!(budgets.iter().max().unwrap() - budgets.iter().min().unwrap() <= 1);
        assert_eq!(pool.capacity_bytes(), capacity);
    }
}

#[test]
fn get_returns_what_was_inserted() {
    let pool = Pool::new(MIB);
    let mut ev = Vec::new();
    pool.insert(3, 42, entry(100, 7), &mut ev);
    let mut out = [0u8; 100];
    assert_eq!(pool.get(3, &mut out), Some(42));
    assert!(out.iter().all(|&b| b == 7));
    assert_eq!(pool.get(4, &mut out), None);
    assert!(ev.is_empty());
}

#[test]
fn get_with_a_different_length_is_a_miss_and_copies_nothing() {
    let pool = Pool::new(MIB);
    let mut ev = Vec::new();
    pool.insert(3, 1, entry(100, 7), &mut ev);
    let mut out = [9u8; 99];
    assert_eq!(pool.get(3, &mut out), None);
    assert!(out.iter().all(|&b| b == 9));
    assert!(pool.contains(3));
}

#[test]
fn replace_keeps_one_entry_and_does_not_report_the_old_one() {
    let pool = Pool::new(MIB);
    let mut ev = Vec::new();
    pool.insert(5, 1, entry(100, 1), &mut ev);
    pool.insert(5, 2, entry(200, 2), &mut ev);
    assert!(ev.is_empty());
    assert_eq!((pool.len(), pool.used_bytes()), (1, 200));
    let mut out = [0u8; 200];
    assert_eq!(pool.get(5, &mut out), Some(2));
    assert!(out.iter().all(|&b| b == 2));
    validate(&pool);
}

#[test]
fn remove_drops_without_report() {
    let pool = Pool::new(MIB);
    let mut ev = Vec::new();
    pool.insert(1, 1, entry(10, 0), &mut ev);
    assert!(pool.remove(1));
    assert!(!pool.remove(1));
    assert!(!pool.contains(1));
    assert_eq!((pool.len(), pool.used_bytes()), (0, 0));
    assert!(ev.is_empty());
}

#[test]
fn remove_from_drops_the_tail_of_the_file_across_shards() {
    let pool = Pool::new(64 * MIB); // 16 shards
    let mut ev = Vec::new();
    for page in 0..1000 {
        pool.insert(page, 1, entry(KIB, 0), &mut ev);
    }
    assert!(ev.is_empty());
    assert_eq!(pool.remove_from(600), 400);
    assert_eq!((pool.len(), pool.used_bytes()), (600, 600 * KIB));
    assert!((0..600).all(|p| pool.contains(p)));
    assert!(!(600..1000).any(|p| pool.contains(p)));
    assert_eq!(pool.remove_from(600), 0);
    validate(&pool);
}

#[test]
fn clear_drops_everything() {
    let pool = Pool::new(16 * MIB);
    let mut ev = Vec::new();
    for page in 0..100 {
        pool.insert(page, 1, entry(KIB, 0), &mut ev);
    }
    pool.clear();
    assert!(pool.is_empty());
    assert_eq!(pool.used_bytes(), 0);
    assert!(!(0..100).any(|p| pool.contains(p)));
    assert!(ev.is_empty());
    validate(&pool);
}

#[test]
fn drain_hands_back_every_entry_once() {
    let pool = Pool::new(16 * MIB);
    let mut ev = Vec::new();
    for page in 0..500 {
        pool.insert(page, page + 1, entry(KIB, page as u8), &mut ev);
    }
    assert!(ev.is_empty());
    pool.drain(&mut ev);
    assert!(pool.is_empty());
    assert_eq!(pool.used_bytes(), 0);
    let mut seen = HashSet::new();
    for e in &ev {
        assert!(seen.insert(e.page), "page {} drained twice", e.page);
        assert_eq!(e.version, e.page + 1);
        assert!(e.bytes.iter().all(|&b| b == e.page as u8));
    }
    assert_eq!(seen.len(), 500);
    validate(&pool);
}

#[test]
fn oversize_entry_comes_straight_back_and_drops_the_old_copy() {
    let pool = Pool::new(MIB); // one shard of 1 MiB
    let mut ev = Vec::new();
    pool.insert(1, 1, entry(10, 0), &mut ev);
    pool.insert(2, 1, entry(10, 0), &mut ev);
    pool.insert(1, 2, entry(MIB + 1, 0), &mut ev);
    assert_eq!(ev.len(), 1);
    assert_eq!((ev[0].page, ev[0].version, ev[0].bytes.len() as u64), (1, 2, MIB + 1));
    assert!(!pool.contains(1), "the stale copy must not survive");
    assert!(pool.contains(2));
    // Exactly the budget fits.
    ev.clear();
    pool.insert(3, 1, entry(MIB, 0), &mut ev);
    assert!(pool.contains(3));
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0].page, 2);
}

#[test]
fn oversize_is_judged_against_the_shard_budget() {
    let pool = Pool::new(16 * MIB); // 4 shards of 4 MiB
    let mut ev = Vec::new();
    pool.insert(1, 1, entry(4 * MIB + 1, 0), &mut ev);
    assert_eq!(ev.len(), 1);
    assert!(pool.is_empty());
}

#[test]
fn zero_capacity_caches_nothing() {
    let pool = Pool::new(0);
    let mut ev = Vec::new();
    for len in [0, 1, 100] {
        pool.insert(1, len, entry(len, 0), &mut ev);
        assert!(pool.is_empty());
    }
    assert_eq!(ev.len(), 3);
    assert_eq!(pool.used_bytes(), 0);
}

#[test]
fn zero_length_entry_is_not_cached() {
    let pool = Pool::new(MIB);
    let mut ev = Vec::new();
    pool.insert(1, 1, entry(10, 0), &mut ev);
    pool.insert(1, 2, entry(0, 0), &mut ev);
    assert_eq!(ev.len(), 1);
    assert_eq!((ev[0].page, ev[0].version), (1, 2));
    assert!(pool.is_empty());
}

#[test]
fn budget_is_never_exceeded() {
    let mut rng = SmallRng::seed_from_u64(1);
    for capacity in [1000, 64 * KIB, 9 * MIB] {
        let pool = Pool::new(capacity);
        let mut ev = Vec::new();
        let max_len = (capacity / 8).min(16 * KIB);
        for _ in 0..5000 {
            let page = rng.gen_range(0..2000);
            pool.insert(page, 0, entry(rng.gen_range(1..=max_len), 0), &mut ev);
            assert!(pool.used_bytes() <= capacity, "{pool:?}");
            if rng.gen_bool(0.3) {
                pool.get(rng.gen_range(0..2000), &mut [0; 64]);
            }
        }
        assert!(!ev.is_empty(), "the test should have forced evictions");
        validate(&pool);
    }
}

#[test]
fn every_insert_is_accounted_for_exactly_once() {
    // Each insert gets a unique version; each version must end up exactly
    // one of: replaced, removed, evicted (reported once), or still cached.
    let mut rng = SmallRng::seed_from_u64(2);
    let pool = Pool::new(32 * KIB);
    let mut current: HashMap<u64, u64> = HashMap::new(); // page -> version
    let (mut replaced, mut removed, mut reported) = (0usize, 0usize, HashSet::new());
    let mut ev = Vec::new();
    let inserts = 20_000u64;
    for version in 0..inserts {
        let page = rng.gen_range(0..300);
        let len = if rng.gen_bool(0.01) { 33 * KIB } else { rng.gen_range(1..=2 * KIB) };
        replaced += usize::from(current.insert(page, version).is_some());
        pool.insert(page, version, entry(len, 0), &mut ev);
        for e in ev.drain(..) {
            assert!(reported.insert(e.version), "version {} reported twice", e.version);
            assert_eq!(current.remove(&e.page), Some(e.version), "stale or phantom eviction");
        }
        if rng.gen_bool(0.05) {
            let page = rng.gen_range(0..300);
            let was = current.remove(&page).is_some();
            assert_eq!(pool.remove(page), was);
            removed += usize::from(was);
        }
    }
    pool.drain(&mut ev);
    let drained = ev.len();
    for e in ev.drain(..) {
        assert_eq!(current.remove(&e.page), Some(e.version));
    }
    assert!(current.is_empty());
    assert_eq!(replaced + removed + reported.len() + drained, inserts as usize);
}

/// Warms a hot set (half the capacity, read 3 times each), runs a one-pass
/// scan of 10x capacity of new pages, and returns the fraction of the hot
/// set still cached.
///
/// Plain FIFO or LRU would keep none of it: every scan page enters at the
/// head/MRU end, so after `capacity` bytes of scan every older page has been
/// pushed out. S3-FIFO's scan pages are never re-accessed, so they only
/// cycle through the small queue and the ghost, and main keeps the hot set.
fn hot_fraction_after_scan(capacity: u64, page_bytes: u64) -> f64 {
    let pool = Pool::new(capacity);
    let mut ev = Vec::new();
    let pages = capacity / page_bytes;
    let hot = 0..pages / 2;
    for page in hot.clone() {
        pool.insert(page, 1, entry(page_bytes, 0), &mut ev);
    }
    let mut out = vec![0u8; page_bytes as usize];
    for _ in 0..3 {
        for page in hot.clone() {
            assert_eq!(pool.get(page, &mut out), Some(1));
        }
    }
    let scan_start = 1 << 32;
    for page in scan_start..scan_start + 10 * pages {
        pool.insert(page, 1, entry(page_bytes, 0), &mut ev);
        assert!(pool.used_bytes() <= capacity);
        ev.clear(); // drop the scan's bytes as we go
    }
    validate(&pool);
    let kept = hot.clone().filter(|&p| pool.contains(p)).count();
    kept as f64 / hot.count() as f64
}

#[test]
fn scan_does_not_flush_the_hot_set_single_shard() {
    let kept = hot_fraction_after_scan(4 * MIB, 4 * KIB);
    assert!(kept >= 0.9, "only {:.1}% of the hot set survived", kept * 100.0);
}

#[test]
fn scan_does_not_flush_the_hot_set_many_shards() {
    let kept = hot_fraction_after_scan(32 * MIB, 64 * KIB);
    assert!(kept >= 0.9, "only {:.1}% of the hot set survived", kept * 100.0);
}

#[test]
fn poisoned_shard_is_reset_not_propagated() {
    let pool = Pool::new(MIB);
    let mut ev = Vec::new();
    pool.insert(1, 1, entry(10, 0), &mut ev);
    std::thread::scope(|s| {
        let poisoner = s.spawn(|| {
            let _guard = pool.shards[0].cache.lock().unwrap();
            panic!("simulated bug while holding the shard lock");
        });
        assert!(poisoner.join().is_err());
    });
    assert!(!pool.contains(1), "a poisoned shard starts over empty");
    assert_eq!(pool.len(), 0);
    pool.insert(2, 1, entry(10, 0), &mut ev);
    assert!(pool.contains(2));
}

#[test]
fn scan_inserts_do_not_flush_the_hot_set() {
    // One shard of 256 pages of 4 KiB: its small target (10%) is not a whole
    // number of pages, the case where small used to hover below its target.
    let pool = Pool::new(256 * 4096);
    let mut ev = Vec::new();
    let mut out = [0u8; 4096];
    for p in 0..80u64 {
        pool.insert(p, 0, entry(4096, 1), &mut ev);
        assert!(pool.get(p, &mut out).is_some());
    }
    // Cold traffic moves the hot pages out of small into main.
    for p in 10_000..10_400u64 {
        pool.insert(p, 0, entry(4096, 1), &mut ev);
    }
    assert_eq!((0..80u64).filter(|&p| pool.contains(p)).count(), 80, "the hot set is in main");
    for p in 1000..3000u64 {
        pool.insert_scan(p, 0, entry(4096, 2), &mut ev);
        assert!(pool.peek(p, &mut out).is_some());
    }
    let kept = (0..80u64).filter(|&p| pool.contains(p)).count();
    assert!(kept >= 76, "a one-pass scan flushed the hot set: {kept} of 80 left");
    assert!(ev.iter().filter(|e| (1000..3000).contains(&e.page)).all(|e| e.scan), "scan pages leave marked");
}
