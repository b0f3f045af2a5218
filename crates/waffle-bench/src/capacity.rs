//! `waffle bench capacity`: how many pages a MiB of memcached holds, for each
//! codec and each set of slab flags, and what each codec costs.
//!
//! 1. Codecs: every page of the dataset (up to `--pages`) compressed and
//!    decompressed with each codec on one thread: pages per byte stored,
//!    pages kept raw, and MB/s both ways. This chooses the default codec.
//! 2. Capacity: for each codec and slab setting (memcached's defaults, and
//!    Waffle's plan for the page size), a fresh memcached of `--node-memory`
//!    is filled through the grid client with the dataset's pages in their
//!    envelopes, in a shuffled order (a workload evicts pages of every table
//!    mixed), under ever new cache ids, until it has evicted as much as it
//!    holds; then `curr_items / MiB` is the pages it holds per MiB.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde_json::{json, Value};
use waffle_core::codec::{Codec, Stored};
use waffle_core::envelope::{self, Identity};
use waffle_core::grid::{Grid, GridOptions, NodeSpec};
use waffle_nodes::slabs::SlabPlan;
use waffle_nodes::Node;

use crate::bench::{self, dataset, BenchOptions};

pub struct CapacityOptions {
    /// The dataset (workload, its size and page size, where it lives).
    pub bench: BenchOptions,
    pub codecs: Vec<Codec>,
    pub node_mib: u32,
    /// At most this many pages of the dataset are read (spread over the whole file).
    pub max_pages: usize,
    /// memcached flag sets to compare: `defaults`, `waffle` (the plan for the
    /// page size), or flags as given (`-f 1.08 -o slab_chunk_max=2048`).
    pub slabs: Vec<String>,
}

/// Bound on the fill: a node gets at most this many times its memory in values.
const FILL_ROUNDS_MAX: u64 = 8;

pub fn run(o: &CapacityOptions) -> Result<Value, String> {
    let workload = bench::make_workload(&o.bench)?;
    let ds = dataset::ensure(&o.bench.dir, workload.as_ref(), o.bench.page_bytes)?;
    let page_bytes = o.bench.page_bytes as usize;
    let pages = read_pages(&ds.path, page_bytes, o.max_pages)?;
    println!(
        "waffle bench capacity: {} pages of {} ({}, {:.1} MiB), memcached {} MiB per run",
        pages.len(),
        page_bytes,
        ds.tag,
        ds.bytes as f64 / (1 << 20) as f64,
        o.node_mib
    );

    println!("\ncodec        page bytes per stored byte  pages raw  compress MB/s  decompress MB/s");
    let mut codec_rows = Vec::new();
    for &codec in &o.codecs {
        let row = measure_codec(codec, &pages);
        println!(
            "{:<12} {:>27.2} {:>9.1}% {:>14.0} {:>16.0}",
            codec.to_string(),
            row["ratio"].as_f64().unwrap_or(0.0),
            row["raw_percent"].as_f64().unwrap_or(0.0),
            row["compress_mb_s"].as_f64().unwrap_or(0.0),
            row["decompress_mb_s"].as_f64().unwrap_or(0.0),
        );
        codec_rows.push(row);
    }

    let plan = SlabPlan::for_node(page_bytes as u32, false, o.node_mib);
    println!("\nslab plan for {page_bytes}-byte pages: {}", plan.describe());
    let slab_sets: Vec<(String, Vec<String>)> = o
        .slabs
        .iter()
        .map(|s| match s.as_str() {
            "defaults" => (s.clone(), Vec::new()),
            "waffle" => (s.clone(), plan.args()),
            flags => (s.clone(), flags.split_whitespace().map(String::from).collect()),
        })
        .collect();
    println!("\ncodec        pages held  pages/MiB  bytes/page  vs first  slabs");
    let mut fills = Vec::new();
    let mut baseline = None;
    for &codec in &o.codecs {
        for (slabs, args) in &slab_sets {
            let held = fill(codec, args, o.node_mib, &pages)?;
            let per_mib = held as f64 / f64::from(o.node_mib);
            let base = *baseline.get_or_insert(per_mib);
            println!(
                "{:<12} {:>10} {:>10.1} {:>11.0} {:>8.2}x  {}",
                codec.to_string(),
                held,
                per_mib,
                f64::from(o.node_mib) * (1u64 << 20) as f64 / held.max(1) as f64,
                per_mib / base,
                slabs
            );
            fills.push(json!({
                "codec": codec.to_string(),
                "slabs": slabs,
                "memcached_flags": args.join(" "),
                "pages_held": held,
                "pages_per_mib": per_mib,
                "vs_first": per_mib / base,
            }));
        }
    }
    let mut report = json!({
        "kind": "capacity",
        "dataset": ds.tag,
        "dataset_bytes": ds.bytes,
        "page_bytes": page_bytes,
        "pages_sampled": pages.len(),
        "node_mib": o.node_mib,
        "slab_plan": plan.describe(),
        "codecs": codec_rows,
        "fills": fills,
    });
    o.bench.output.write(&mut report, |_, _| Err("waffle bench capacity draws no chart".into()))?;
    Ok(report)
}

/// Up to `max_pages` whole pages of the file, evenly spread over it.
fn read_pages(path: &Path, page_bytes: usize, max_pages: usize) -> Result<Vec<Vec<u8>>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let total = bytes.len() / page_bytes;
    let step = total.div_ceil(max_pages.max(1)).max(1);
    Ok((0..total).step_by(step).map(|i| bytes[i * page_bytes..(i + 1) * page_bytes].to_vec()).collect())
}

fn measure_codec(codec: Codec, pages: &[Vec<u8>]) -> Value {
    let mut out = Vec::new();
    let (mut stored_bytes, mut raw_pages) = (0u64, 0u64);
    let mut compressed: Vec<(Stored, Vec<u8>)> = Vec::with_capacity(pages.len());
    let t0 = Instant::now();
    for p in pages {
        let stored = codec.compress(p, &mut out);
        compressed.push((stored, if stored == Stored::Raw { Vec::new() } else { out.clone() }));
    }
    let compress_s = t0.elapsed().as_secs_f64();
    let mut page = vec![0u8; pages.first().map_or(0, Vec::len)];
    let t0 = Instant::now();
    for (i, (stored, bytes)) in compressed.iter().enumerate() {
        if *stored == Stored::Raw {
            raw_pages += 1;
            stored_bytes += pages[i].len() as u64;
        } else {
            assert!(stored.decompress(bytes, &mut page), "{codec} round trip");
            stored_bytes += bytes.len() as u64;
        }
    }
    let decompress_s = t0.elapsed().as_secs_f64();
    let page_total: u64 = pages.iter().map(|p| p.len() as u64).sum();
    let decompressed_bytes = page_total - raw_pages * page.len() as u64;
    json!({
        "codec": codec.to_string(),
        "ratio": page_total as f64 / stored_bytes.max(1) as f64,
        "raw_percent": 100.0 * raw_pages as f64 / pages.len().max(1) as f64,
        "compress_mb_s": if codec == Codec::Off { 0.0 } else { page_total as f64 / 1e6 / compress_s.max(1e-9) },
        "decompress_mb_s": decompressed_bytes as f64 / 1e6 / decompress_s.max(1e-9),
    })
}

/// Fills a fresh node with `pages` in envelopes until it evicted as many as
/// it holds (bounded by FILL_ROUNDS_MAX times its memory); returns the pages it holds.
fn fill(codec: Codec, slab_args: &[String], node_mib: u32, pages: &[Vec<u8>]) -> Result<u64, String> {
    let node = Node::start_with_args(node_mib, slab_args).map_err(|e| format!("starting memcached: {e}"))?;
    let opts = GridOptions { timeout_ms: 2000, cost_backoff: false, ..GridOptions::default() };
    let nodes = NodeSpec::parse_list(&node.addr()).map_err(|e| format!("{}: {e}", node.addr()))?;
    let grid = Arc::new(Grid::new(nodes, opts));
    let mut order: Vec<usize> = (0..pages.len()).collect();
    let mut rng = rand::rngs::SmallRng::seed_from_u64(0x5eed);
    let limit_bytes = u64::from(node_mib) << 20;
    let mut offered_bytes = 0u64;
    let mut round = 0u64;
    loop {
        order.shuffle(&mut rng);
        let cache_id = 0xCA9A_0000_0000_0000 | round;
        for chunk in order.chunks(64) {
            let values: Vec<(String, Vec<u8>)> = chunk
                .iter()
                .map(|&i| {
                    let id = Identity { cache_id, page: i as u64, version: 1 };
                    let (v, _) =
                        envelope::seal_page(id, &pages[i], None, codec).expect("plain envelopes need no nonce");
                    (envelope::key(cache_id, i as u64), v)
                })
                .collect();
            let items: Vec<(&[u8], &[u8])> = values.iter().map(|(k, v)| (k.as_bytes(), v.as_slice())).collect();
            let report = grid.store_many(&items);
            if report.failed + report.skipped > 0 {
                return Err(format!("memcached refused {} stores", report.failed + report.skipped));
            }
            offered_bytes += values.iter().map(|(_, v)| v.len() as u64).sum::<u64>();
        }
        round += 1;
        let stat = |name: &str| node.stat(name).map_err(|e| e.to_string());
        let (evicted, held) = (stat("evictions")?, stat("curr_items")?);
        if (evicted >= held && offered_bytes >= 2 * limit_bytes) || offered_bytes >= FILL_ROUNDS_MAX * limit_bytes {
            return Ok(held);
        }
    }
}
