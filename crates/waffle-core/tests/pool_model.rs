//! Model-based randomized tests of the L1 pool.
//!
//! The model is what the pool must hold: a map page -> (version, bytes) that
//! gains an entry on every insert and loses one only on a remove, a truncate,
//! a clear, a drain, or an eviction the pool reported. Since the pool may
//! only lose entries by reporting them, the model knows exactly what is
//! cached, so every `get` is checked both ways: a hit must return the model's
//! bytes and version, and a page the model holds must hit.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use waffle_core::pool::{Evicted, Pool};

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;

/// Bytes that differ for every (page, version, length), so a mix-up of any of
/// the three shows.
fn payload(page: u64, version: u64, len: usize) -> Box<[u8]> {
    let mut state = page.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ version.rotate_left(29) ^ len as u64;
    let mut bytes = vec![0u8; len].into_boxed_slice();
    for chunk in bytes.chunks_mut(8) {
        // xorshift64; `| 1` keeps the state from sticking at zero.
        state |= 1;
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        chunk.copy_from_slice(&state.to_le_bytes()[..chunk.len()]);
    }
    bytes
}

struct Config {
    capacity_bytes: u64,
    /// Largest entry length in ordinary inserts.
    max_entry_bytes: u64,
    /// Pages are drawn from 0..pages (a tenth of them hot).
    pages: u64,
    ops: usize,
    seeds: u64,
}

struct Model {
    entries: HashMap<u64, (u64, Box<[u8]>)>,
    bytes: u64,
}

impl Model {
    fn insert(&mut self, page: u64, version: u64, bytes: Box<[u8]>) {
        self.bytes += bytes.len() as u64;
        if let Some((_, old)) = self.entries.insert(page, (version, bytes)) {
            self.bytes -= old.len() as u64;
        }
    }

    fn remove(&mut self, page: u64) -> Option<(u64, Box<[u8]>)> {
        let removed = self.entries.remove(&page);
        if let Some((_, bytes)) = &removed {
            self.bytes -= bytes.len() as u64;
        }
        removed
    }

    /// An entry the pool handed back must be exactly the model's current
    /// entry for its page: not stale, not reported twice, not made up.
    fn take_evicted(&mut self, e: &Evicted) {
        let Some((version, bytes)) = self.remove(e.page) else {
            panic!("{e:?} reported but not cached (phantom or reported twice)");
        };
        assert_eq!(e.version, version, "evicted a stale version of page {}", e.page);
        assert!(*e.bytes == *bytes, "evicted bytes of page {} differ", e.page);
    }
}

fn pick_page(rng: &mut SmallRng, pages: u64) -> u64 {
    if rng.gen_bool(0.5) {
        rng.gen_range(0..pages.div_ceil(10))
    } else {
        rng.gen_range(0..pages)
    }
}

fn run(config: &Config, seed: u64) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let pool = Pool::new(config.capacity_bytes);
    let mut model = Model { entries: HashMap::new(), bytes: 0 };
    let mut evicted = Vec::new();
    let mut next_version = 0u64;
    let (mut hits, mut evictions) = (0usize, 0usize);
    // Only a one-shard pool has a shard budget equal to its capacity.
    let one_shard = config.capacity_bytes < 8 * MIB;

    for op in 0..config.ops {
        let page = pick_page(&mut rng, config.pages);
        let ctx = format!("seed {seed} op {op} page {page}");
        // Whole-pool operations about 6 times a run, so that the pool also
        // spends long stretches full.
        let whole_pool = rng.gen_range(0..config.ops) < 6;
        match if whole_pool { rng.gen_range(1000..1012) } else { rng.gen_range(0..1000) } {
            0..=449 => {
                let len = match rng.gen_range(0..100) {
                    0 => 0,
                    1 if one_shard => config.capacity_bytes + 1, // oversize
                    2 if one_shard => config.capacity_bytes,     // fills the shard
                    _ => rng.gen_range(1..=config.max_entry_bytes),
                } as usize;
                next_version += 1;
                let bytes = payload(page, next_version, len);
                model.insert(page, next_version, bytes.clone());
                pool.insert(page, next_version, bytes, &mut evicted);
                for e in evicted.drain(..) {
                    evictions += 1;
                    model.take_evicted(&e);
                    assert!(!pool.contains(e.page), "{ctx}: {e:?} reported but still cached");
                }
                assert_eq!(pool.contains(page), model.entries.contains_key(&page), "{ctx}");
            }
            450..=749 => {
                let expected = model.entries.get(&page);
                let len = match expected {
                    Some((_, bytes)) if rng.gen_bool(0.9) => bytes.len(),
                    _ => rng.gen_range(0..=config.max_entry_bytes as usize),
                };
                let mut out = vec![0u8; len];
                match (pool.get(page, &mut out), expected) {
                    (Some(version), Some((want_version, want))) => {
                        hits += 1;
                        assert_eq!(version, *want_version, "{ctx}: wrong version");
                        assert!(out[..] == want[..], "{ctx}: wrong bytes");
                    }
                    (None, Some((_, want))) => {
                        assert_ne!(want.len(), len, "{ctx}: miss on a cached page");
                    }
                    (Some(version), None) => {
                        panic!("{ctx}: hit (version {version}) on an uncached page")
                    }
                    (None, None) => {}
                }
            }
            750..=899 => {
                assert_eq!(pool.remove(page), model.remove(page).is_some(), "{ctx}");
            }
            900..=999 => {
                assert_eq!(pool.contains(page), model.entries.contains_key(&page), "{ctx}");
            }
            1000..=1007 => {
                let first = rng.gen_range(0..config.pages);
                let doomed: Vec<u64> = model.entries.keys().copied().filter(|&p| p >= first).collect();
                for &p in &doomed {
                    model.remove(p);
                }
                assert_eq!(pool.remove_from(first), doomed.len(), "{ctx}: remove_from({first})");
            }
            1008..=1009 => {
                pool.drain(&mut evicted);
                assert_eq!(evicted.len(), model.entries.len(), "{ctx}: drain count");
                for e in evicted.drain(..) {
                    model.take_evicted(&e);
                }
            }
            _ => {
                pool.clear();
                model.entries.clear();
                model.bytes = 0;
            }
        }

        assert_eq!(pool.len(), model.entries.len(), "{ctx}: len");
        assert_eq!(pool.used_bytes(), model.bytes, "{ctx}: used_bytes");
        assert!(pool.used_bytes() <= pool.capacity_bytes(), "{ctx}: over budget");
        if op % 256 == 0 {
            // Same count and every model page cached: the sets are equal.
            for &p in model.entries.keys() {
                assert!(pool.contains(p), "{ctx}: page {p} lost without a report");
            }
        }
    }

    pool.drain(&mut evicted);
    for e in evicted.drain(..) {
        model.take_evicted(&e);
    }
    assert!(model.entries.is_empty(), "seed {seed}: drain missed {} entries", model.entries.len());
    // Guard against a configuration that never exercises the policy.
    assert!(evictions > config.ops / 100, "seed {seed}: only {evictions} evictions");
    assert!(config.capacity_bytes == 0 || hits > config.ops / 100, "seed {seed}: only {hits} hits");
}

fn run_all(config: Config) {
    for seed in 0..config.seeds {
        run(&config, seed);
    }
}

#[test]
fn model_zero_capacity() {
    run_all(Config { capacity_bytes: 0, max_entry_bytes: 64, pages: 32, ops: 500, seeds: 20 });
}

#[test]
fn model_tiny_pool() {
    run_all(Config { capacity_bytes: 1000, max_entry_bytes: 200, pages: 64, ops: 3000, seeds: 100 });
}

#[test]
fn model_small_pool() {
    run_all(Config { capacity_bytes: 64 * KIB, max_entry_bytes: 4 * KIB, pages: 256, ops: 4000, seeds: 40 });
}

#[test]
fn model_two_shards() {
    run_all(Config { capacity_bytes: 9 * MIB, max_entry_bytes: 32 * KIB, pages: 3000, ops: 15_000, seeds: 3 });
}

#[test]
fn model_eight_shards() {
    run_all(Config { capacity_bytes: 33 * MIB, max_entry_bytes: 64 * KIB, pages: 4000, ops: 20_000, seeds: 2 });
}

/// Encodes the page and version into every word, so a hit can be checked
/// without a model shared between threads.
fn stamped(page: u64, version: u64, len: usize) -> Box<[u8]> {
    let word = (page.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ version).to_le_bytes();
    (0..len).map(|i| word[i % 8]).collect()
}

fn is_stamped(bytes: &[u8], page: u64, version: u64) -> bool {
    let word = (page.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ version).to_le_bytes();
    bytes.iter().enumerate().all(|(i, &b)| b == word[i % 8])
}

#[test]
fn threads_never_see_another_pages_bytes() {
    const THREADS: u64 = 4;
    const OPS: usize = 25_000;
    const PAGES: u64 = 16_000;
    const PAGE_BYTES: usize = 4096;
    let capacity = 16 * MIB; // 4 shards of 1024 pages each: a quarter of the pages fit
    let pool = Pool::new(capacity);
    let versions = AtomicU64::new(1);
    let evicted_total = AtomicU64::new(0);

    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (pool, versions, evicted_total) = (&pool, &versions, &evicted_total);
            s.spawn(move || {
                let mut rng = SmallRng::seed_from_u64(1000 + t);
                let mut evicted = Vec::new();
                let mut out = vec![0u8; PAGE_BYTES];
                for _ in 0..OPS {
                    let page = pick_page(&mut rng, PAGES);
                    match rng.gen_range(0..1000) {
                        0..=449 => {
                            if let Some(version) = pool.get(page, &mut out) {
                                assert!(is_stamped(&out, page, version), "page {page} v{version}: foreign bytes");
                            }
                        }
                        450..=899 => {
                            let version = versions.fetch_add(1, Ordering::Relaxed);
                            pool.insert(page, version, stamped(page, version, PAGE_BYTES), &mut evicted);
                            for e in evicted.drain(..) {
                                assert!(is_stamped(&e.bytes, e.page, e.version), "{e:?}: foreign bytes");
                                evicted_total.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        900..=979 => {
                            pool.remove(page);
                        }
                        980..=998 => {
                            pool.contains(page);
                        }
                        _ => {
                            pool.remove_from(rng.gen_range(PAGES * 3 / 4..PAGES));
                        }
                    }
                    assert!(pool.used_bytes() <= capacity);
                }
            });
        }
    });

    assert!(evicted_total.load(Ordering::Relaxed) > 0, "the stress should have forced evictions");
    let (len, used) = (pool.len(), pool.used_bytes());
    assert_eq!(used, len as u64 * PAGE_BYTES as u64);
    let mut drained = Vec::new();
    pool.drain(&mut drained);
    assert_eq!(drained.len(), len);
    for e in &drained {
        assert!(is_stamped(&e.bytes, e.page, e.version), "{e:?}: foreign bytes");
    }
    assert_eq!((pool.len(), pool.used_bytes()), (0, 0));
}
