//! `PageCache`, the hub of every read and write, against a model file, with
//! several threads at once and real memcached nodes (no SQLite above it).
//!
//! Each worker thread owns the pages `p % WORKERS == w` and does, in a seeded
//! random order: reads (one page, or a sequential read that pulls a window of
//! other workers' pages into L1 as well), whole-page writes (the file first,
//! then `wrote`, as the adapters do), partial writes (`invalidate`), and
//! writes by "another writer" that the cache only hears of afterwards
//! (`foreign_pages`). Meanwhile a conductor thread moves the grid between two
//! real nodes, an in-process fake node and none (`set_grid`), starts new
//! epochs (`foreign_reset`), waits for the pusher, and pauses the pusher at
//! chosen points: the fake node holds every `ms` before or after it stores the
//! value, so a batch stays in flight (its pages neither in the queue nor
//! answered for) while the workers read and rewrite those pages. Every read must equal the model file at that moment (a
//! worker's pages change only by its own hand, so "that moment" is defined);
//! at the end every page reads as the file holds it. A last phase cuts and
//! regrows the file (`truncated`) and checks the tail reads as the file.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use waffle_core::grid::{Grid, GridOptions, NodeSpec};
use waffle_core::{CacheOptions, PageCache};
use waffle_testkit::fake_node::{FakeNode, SetPause};
use waffle_testkit::mem_file::{patterned, set_page, MemFile};
use waffle_testkit::nodes::start_node;
use waffle_testkit::pattern;

const PAGE: usize = 512;
const PAGES: u64 = 192;
const WORKERS: u64 = 3;
const OPS_PER_WORKER: u64 = 20_000;
const SEED: u64 = 0xCAC4E;
/// Conductor moves the workers wait for (bounded by MAX_RUN).
const MIN_MOVES: u64 = 30;
const MAX_RUN: Duration = Duration::from_secs(20);

fn grid(addr: &str) -> Arc<Grid> {
    let opts = GridOptions { timeout_ms: 1000, cost_backoff: false, ..GridOptions::default() };
    Arc::new(Grid::new(NodeSpec::parse_list(addr).unwrap(), opts))
}

fn page_of(file: &Mutex<Vec<u8>>, p: u64) -> Vec<u8> {
    file.lock().unwrap()[p as usize * PAGE..][..PAGE].to_vec()
}

#[test]
fn every_read_equals_the_model_file_under_concurrent_writes_grid_changes_and_epochs() {
    let nodes = [start_node(16), start_node(16)];
    let fake = Arc::new(FakeNode::start());
    let grids = [grid(&nodes[0].addr()), grid(&nodes[1].addr()), grid(&fake.addr())];
    let file = patterned(PAGES, PAGE);
    let cache = Arc::new(PageCache::new(CacheOptions {
        cache_id: 0x30de1,
        saved: None,
        page_bytes: PAGE,
        local_bytes: 64 * PAGE as u64, // a read-ahead window is 1/16 of L1: 4 pages
        push_queue_bytes: 16 * PAGE as u64,
        grid: Some(Arc::clone(&grids[0])),
        seal_key: None,
        page_check: None,
        codec: waffle_core::codec::DEFAULT,
    }));

    let done = Arc::new(AtomicBool::new(false));
    // The conductor's moves so far: workers go on past OPS_PER_WORKER until it
    // made enough of them (the presence set makes the workers fast).
    let moved = Arc::new(AtomicU64::new(0));
    let conductor = {
        let (cache, done, grids, fake) = (Arc::clone(&cache), Arc::clone(&done), grids.clone(), Arc::clone(&fake));
        let moved = Arc::clone(&moved);
        std::thread::spawn(move || {
            let mut rng = SmallRng::seed_from_u64(SEED ^ 0xC0);
            let mut moves = 0u64;
            while !done.load(Ordering::Acquire) {
                match rng.gen_range(0..12) {
                    0..=5 => cache.set_grid(Some(Arc::clone(&grids[rng.gen_range(0..3)]))),
                    6 => cache.set_grid(None),
                    7 => cache.foreign_reset(),
                    8 | 9 => {
                        // The pusher held mid-batch on the fake node (part of the scenario: the
                        // pause lasts while the workers run, well inside the grid's 1 s timeout).
                        cache.set_grid(Some(Arc::clone(&grids[2])));
                        let at = if rng.gen_bool(0.5) { SetPause::BeforeStore } else { SetPause::AfterStore };
                        fake.pause_sets(Some(at));
                        std::thread::sleep(Duration::from_millis(rng.gen_range(1..30)));
                        fake.pause_sets(None);
                    }
                    _ => {
                        cache.flush_pushes(Duration::from_secs(5));
                    }
                }
                moves += 1;
                moved.store(moves, Ordering::Release);
                std::thread::yield_now();
            }
            moves
        })
    };

    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let (cache, file, moved, fake) =
                (Arc::clone(&cache), Arc::clone(&file), Arc::clone(&moved), Arc::clone(&fake));
            std::thread::spawn(move || {
                let mut rng = SmallRng::seed_from_u64(SEED + w);
                let mine: Vec<u64> = (0..PAGES).filter(|p| p % WORKERS == w).collect();
                let mut buf = vec![0u8; PAGE];
                let disk = MemFile(Arc::clone(&file));
                let mut generation = 0u64;
                let mut ra = waffle_core::ReadAhead::new();
                let started = Instant::now();
                for op in 0.. {
                    let conducted = moved.load(Ordering::Acquire) >= MIN_MOVES && fake.paused_sets() > 0;
                    if op >= OPS_PER_WORKER && (conducted || started.elapsed() > MAX_RUN) {
                        break;
                    }
                    let p = mine[rng.gen_range(0..mine.len())];
                    match rng.gen_range(0..20) {
                        0..=9 => {
                            cache.read(p, &mut buf, &disk).unwrap();
                            assert!(buf == page_of(&file, p), "worker {w} op {op}: page {p} read wrong");
                        }
                        10..=12 => {
                            cache.read_sequential(p, &mut buf, &disk, &mut ra).unwrap();
                            assert!(buf == page_of(&file, p), "worker {w} op {op}: page {p} read ahead wrong");
                        }
                        13..=16 => {
                            generation += 1;
                            let bytes = pattern((generation << 20) | (w << 16) | p, PAGE);
                            set_page(&file, p, &bytes); // the file first
                            cache.wrote(p, &bytes);
                        }
                        17 => {
                            let mut bytes = page_of(&file, p);
                            bytes[7] ^= 0x5A;
                            set_page(&file, p, &bytes);
                            cache.invalidate(p);
                        }
                        _ => {
                            // Another writer changes the page; the cache hears of it before the next read.
                            generation += 1;
                            set_page(&file, p, &pattern((generation << 20) | (9 << 16) | p, PAGE));
                            cache.foreign_pages(&[p]);
                        }
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("a worker found a read that differs from the model");
    }
    done.store(true, Ordering::Release);
    let moves = conductor.join().unwrap();
    assert!(moves >= MIN_MOVES, "the conductor moved the grid while the workers ran ({moves} moves)");
    assert!(fake.paused_sets() > 0, "the pusher was held mid-batch at least once");
    let (gets, hits) = fake.gets();
    eprintln!(
        "fake node: {gets} gets, {hits} hits, {} sets held at a pause; {moves} conductor moves",
        fake.paused_sets()
    );

    cache.set_grid(Some(Arc::clone(&grids[0])));
    let mut buf = vec![0u8; PAGE];
    let disk = MemFile(Arc::clone(&file));
    for p in 0..PAGES {
        cache.read(p, &mut buf, &disk).unwrap();
        assert!(buf == page_of(&file, p), "after the run: page {p}");
    }
    let s = cache.stats_snapshot();
    assert!(s.l2_hits > 0 && s.l2_pushes > 0, "the grid took part: {s:?}");
    assert!(s.read_ahead_windows > 0, "windows were read: {s:?}");

    // The file is cut and grows again: the old tail's copies (L1, queue, grid) are never served.
    cache.flush_pushes(Duration::from_secs(5));
    let cut = PAGES / 2;
    file.lock().unwrap().truncate(cut as usize * PAGE);
    cache.truncated(cut);
    for p in cut..PAGES {
        file.lock().unwrap().extend_from_slice(&pattern(0xF00 + p, PAGE));
    }
    for p in 0..PAGES {
        cache.read(p, &mut buf, &disk).unwrap();
        assert!(buf == page_of(&file, p), "after the cut and regrowth: page {p}");
    }
}
