//! Runs one configuration: fresh memcached nodes, one connection per thread,
//! the warm-up (a pass over every table and index, then the workload for
//! `--warmup` seconds), then the measured run, and a `+restart`'s after it.
//! The runner drives and fills a [`ConfigResult`]; it opens connections
//! ([`super::connection`]) and drives them ([`super::phase`]) with the pieces
//! the restart uses too, and no file it uses uses the runner.
//!
//! A `+flash` grid's nodes come with their flash files ([`super::flash`]).
//! EMULATED hardware is outside the connections' settings ([`super::emulation`]):
//! a configuration on a device opens the dataset in that device's directory,
//! and one on a link is given proxies in front of its nodes.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::configs::{Kind, Plan};
use super::connection::{open_conn, sqlite_cache_counts, waffle_stats};
use super::dataset::{self, Dataset};
use super::emulation;
use super::flash;
use super::phase::phase;
use super::report::restart_line;
use super::restart;
use super::result::{ConfigResult, GridTraffic, Hits, Latency, Memory, WorkingSet};
use super::run_options::RunOptions;
use super::uncached::KeepUncached;
use super::wire::{self, Cpu};
use super::workload::{Rate, Workload};
use rusqlite::{Connection, OpenFlags};
use serde_json::Value;
use waffle_core::stats::{CacheSnapshot, DiskReasons};
use waffle_nodes::Node;

/// Seconds of the bare multi-get series beside a grid run (at most the run's own).
const WIRE_SECONDS: f64 = 3.0;

pub fn device_label(device: &Option<String>) -> String {
    match device {
        None => "real".into(),
        Some(d) => format!("{d} (EMULATED)"),
    }
}

/// memcached's `stats` of one node, its numeric fields (waffle_nodes::stats, bounded).
pub fn memcached_stats(addr: &str) -> Option<std::collections::HashMap<String, u64>> {
    let all = waffle_nodes::stats(addr.parse().ok()?).ok()?;
    Some(all.into_iter().filter_map(|(k, v)| Some((k, v.parse().ok()?))).collect())
}

/// The pages the warm-up's pass read: the whole file, or the tables and
/// indexes the workload names and page 1 (counted by SQLite's `dbstat` on a
/// connection of its own). 0 when unknown.
fn prewarmed_pages(names: Option<Vec<&'static str>>, path: &Path, page_bytes: u64) -> u64 {
    if page_bytes == 0 {
        return 0;
    }
    let Some(names) = names else {
        return std::fs::metadata(path).map_or(0, |m| m.len()) / page_bytes;
    };
    let count = || -> rusqlite::Result<u64> {
        let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
        let list = names.iter().map(|n| format!("'{n}'")).collect::<Vec<_>>().join(",");
        conn.query_row(&format!("SELECT count(*) FROM dbstat WHERE name IN ({list})"), [], |r| r.get(0))
    };
    count().map_or(0, |n| n + 1)
}

/// `disk_reasons`' change over the run, by reason.
fn reason_deltas(after: &DiskReasons, before: &DiskReasons) -> std::collections::BTreeMap<String, u64> {
    counter_deltas_of(after, before)
}

/// Every count of `after` (a serialized struct's top-level counts) as its change since `before`, by name.
fn counter_deltas_of<T: serde::Serialize>(after: &T, before: &T) -> std::collections::BTreeMap<String, u64> {
    let (a, b) = (serde_json::to_value(after).unwrap_or_default(), serde_json::to_value(before).unwrap_or_default());
    let count = |v: &Value, k: &str| v[k].as_u64().unwrap_or(0);
    let counts = a.as_object().into_iter().flatten().filter(|(_, v)| v.is_u64());
    counts.map(|(k, _)| (k.clone(), count(&a, k).saturating_sub(count(&b, k)))).collect()
}

/// Every counter of the cache's stats (its top-level counts) as its change over the run.
fn counter_deltas(after: &CacheSnapshot, before: &CacheSnapshot) -> serde_json::Map<String, Value> {
    counter_deltas_of(after, before).into_iter().map(|(k, n)| (k, Value::from(n))).collect()
}

/// Runs one configuration on `ds` and measures it.
pub fn run_config(
    workload: &dyn Workload,
    ds: &Dataset,
    plan: &Plan,
    opts: &RunOptions,
) -> Result<ConfigResult, String> {
    let err = |what: &str, e: rusqlite::Error| format!("{}: {what}: {e}", plan.name);
    let path: PathBuf = match (&plan.device, workload.writes()) {
        (Some(device), writes) => emulation::on_device(&ds.path, device, writes)?,
        (None, true) => dataset::working_copy(ds)?,
        (None, false) => ds.path.clone(),
    };
    // On the real disk too, a waffle configuration that drops what it reads starts with none of
    // the file cached: what the bench's own plain reads left (the dataset's tag, the last
    // configuration's dbstat count) sits in large folios a dropped range only partly covers, and
    // a read-ahead mark among them keeps the kernel reading ahead on waffle's descriptors
    // (docs/benchmarks.md, "Configurations"). Before any connection opens (the drop's own
    // descriptor, closed, would release their locks).
    if plan.device.is_none() && plan.waffle && !plan.direct_io_auto {
        emulation::drop_cached_pages(&path)?;
    }
    // Every configuration starts cold: what an earlier one's clean close saved
    // (a sidecar naming nodes that are gone, a hot list) would preload it.
    let _ = std::fs::remove_file(waffle_core::sidecar::Sidecar::path_for(&path));
    let _ = std::fs::remove_file(waffle_core::warming::hot_list::path_for(&path));
    let (nodes, flash_files) = flash::start_nodes(plan, opts.page_bytes, &flash::dir_for(&ds.path))?;
    let node_addrs: Vec<String> = nodes.iter().map(Node::addr).collect();
    let proxied = emulation::Grid::behind(&node_addrs, plan.link)?;
    let grid = &proxied.addrs;

    let mut conns: Vec<Connection> = (0..opts.threads)
        .map(|_| open_conn(&path, plan, opts.timeout_ms, grid).and_then(|c| workload.prepare(&c).map(|()| c)))
        .collect::<Result<_, _>>()
        .map_err(|e| err("open", e))?;

    // Until the measured run's figures are taken: see uncached.rs.
    let keep_uncached = match &plan.device {
        Some(_) if plan.waffle && !plan.direct_io_auto => Some(KeepUncached::start(&path)?),
        _ => None,
    };
    let flash_uncached: Vec<KeepUncached> = if plan.flash_uncached {
        flash_files.iter().map(|f| KeepUncached::start(f)).collect::<Result<_, _>>()?
    } else {
        Vec::new()
    };
    let started = Instant::now();
    let mut warmed = None;
    if plan.warm {
        eprintln!(
            "waffle bench: {}: warming up (PRAGMA waffle_warm, then {:.0} s of the workload)",
            plan.name,
            opts.warmup.as_secs_f64()
        );
        let w =
            waffle_warm_client::sqlite::warm(&conns[0], None, None).map_err(|e| format!("{}: warm: {e}", plan.name))?;
        eprintln!("waffle bench: {}: {}", plan.name, w.summary());
        warmed = Some(w);
    } else {
        eprintln!(
            "waffle bench: {}: warming up (a pass over every table and index, then {:.0} s of the workload)",
            plan.name,
            opts.warmup.as_secs_f64()
        );
        for sql in workload.prewarm() {
            conns[0].query_row(&sql, [], |_| Ok(())).map_err(|e| err(&sql, e))?;
        }
    }
    if !opts.warmup.is_zero() {
        let (t, _, _) = phase(workload, &mut conns, opts.warmup, opts.seed ^ 0x5eed, None);
        if t.done == 0 && t.errors > 0 {
            return Err(format!("{}: every transaction of the warm-up failed", plan.name));
        }
    }

    let cache_stats = |c: &Connection, reset: bool| -> Result<CacheSnapshot, String> {
        let s = waffle_stats(c, reset).map_err(|e| err("stats", e))?;
        Ok(s.cache.unwrap_or_default())
    };
    // Without waffle: no stats (zeros, and no counters in the result).
    let before = if plan.waffle { cache_stats(&conns[0], true)? } else { CacheSnapshot::default() };
    conns.iter().for_each(|c| {
        sqlite_cache_counts(c);
    });
    eprintln!("waffle bench: {}: measuring {:.0} s", plan.name, opts.duration.as_secs_f64());
    let slowed = || plan.device.as_deref().and_then(emulation::slowed_reads);
    let slowed_before = slowed();
    let cpu_before = Cpu::now(&node_addrs);
    let has_flash = !flash_files.is_empty();
    let flash_before = has_flash.then(|| flash::counters(&node_addrs));
    let (tally, hist, seconds) = phase(workload, &mut conns, opts.duration, opts.seed, None);
    let cpu = Cpu::now(&node_addrs).since(cpu_before);
    let flash_traffic = flash_before.map(|b| flash::traffic(&b, &flash::counters(&node_addrs), &flash_files));
    drop(keep_uncached);
    drop(flash_uncached);
    let emulated_reads = slowed().zip(slowed_before).map(|(after, before)| after.saturating_sub(before));
    let (mut sq_hit, mut sq_miss) = (0u64, 0u64);
    for c in &conns {
        let (h, m) = sqlite_cache_counts(c);
        sq_hit += h;
        sq_miss += m;
    }
    let after = if plan.waffle { cache_stats(&conns[0], false)? } else { CacheSnapshot::default() };
    let within_15m = started.elapsed() < Duration::from_secs(15 * 60);
    // The pages the warm-up pass touched are known; PRAGMA waffle_warm (a
    // `+warm` configuration) reads pages without touching them (only reads by
    // the database count in the working set), so there is nothing to compare.
    // Counted on the dataset itself when it is the same bytes: dbstat's reads need no emulated device.
    let count_on = if workload.writes() { &path } else { &ds.path };
    let known_pages =
        if plan.waffle && !plan.warm { prewarmed_pages(workload.prewarmed(), count_on, after.page_bytes) } else { 0 };

    let mc: Vec<_> = node_addrs.iter().filter_map(|a| memcached_stats(a)).collect();
    // The same nodes and pages in the same minute, before the close pushes L1.
    let l2_hits = after.l2_hits.saturating_sub(before.l2_hits);
    let wire = (matches!(plan.kind, Kind::Grid { .. }) && l2_hits > 0)
        .then(|| wire_beside(grid, &node_addrs, opts, cpu, l2_hits))
        .flatten();
    let restart = if plan.restart {
        let steady_tps = tally.done as f64 / seconds;
        let r = restart::measure(workload, &path, plan, opts, grid, conns, steady_tps)?;
        eprintln!("waffle bench: {}: {}", plan.name, restart_line(&r));
        Some(r)
    } else {
        drop(conns); // a clean close: pushes what it can of L1 (bounded), saves versions
        None
    };
    drop(proxied);
    drop(nodes);
    flash::remove(&flash_files);

    let (unit, rate) = workload.unit();
    let throughput = match rate {
        Rate::PerSecond => tally.done as f64 / seconds,
        Rate::PerMinute => tally.done as f64 * 60.0 / seconds,
        Rate::CountedPerMinute => tally.counted as f64 * 60.0 / seconds,
    };
    let sqlite_cache = (sq_hit + sq_miss > 0).then(|| sq_hit as f64 / (sq_hit + sq_miss) as f64);
    let d = |f: fn(&CacheSnapshot) -> u64| f(&after).saturating_sub(f(&before));
    let hits = plan.waffle.then(|| {
        let reads = d(|c| c.l1_hits) + d(|c| c.l1_misses) + d(|c| c.read_ahead_hits);
        let l1 = d(|c| c.l1_hits) + d(|c| c.push_queue_hits) + d(|c| c.read_ahead_hits);
        let f = |n: f64| if reads == 0 { 0.0 } else { n / reads as f64 };
        let (ra_l2, ra_disk) = (d(|c| c.read_ahead_pages_l2) as f64, d(|c| c.read_ahead_pages_disk) as f64);
        let windows = d(|c| c.read_ahead_windows) as f64;
        let l2_share = if ra_l2 + ra_disk > 0.0 { ra_l2 / (ra_l2 + ra_disk) } else { 0.0 };
        let l2 = d(|c| c.l2_hits) as f64 + windows * l2_share;
        let disk = d(|c| c.disk_reads) as f64 + windows * (1.0 - l2_share);
        Hits {
            vfs_reads: reads,
            l1: f(l1 as f64),
            l2: f(l2),
            disk: f(disk),
            l1_l2: f(l1 as f64 + l2),
            read_ahead: f(windows),
            disk_pages: d(|c| c.disk_reads) + d(|c| c.read_ahead_pages_disk),
            ahead_pages_disk: d(|c| c.ahead_pages_disk),
            ahead_used_disk: d(|c| c.ahead_used_disk),
            ahead_pages_l2: d(|c| c.ahead_pages_l2),
            ahead_used_l2: d(|c| c.ahead_used_l2),
            disk_reads: d(|c| c.disk_reads),
            disk_reasons: reason_deltas(&after.disk_reasons, &before.disk_reasons),
        }
    });
    let grid_traffic = matches!(plan.kind, Kind::Grid { .. }).then(|| {
        let sum = |k: &str| mc.iter().map(|m| m.get(k).copied().unwrap_or(0)).sum::<u64>();
        let lat = &after.latency;
        GridTraffic {
            pushes: d(|c| c.l2_pushes),
            push_drops: d(|c| c.l2_push_drops),
            pushed_bytes: d(|c| c.l2_push_bytes),
            fetched_bytes: d(|c| c.l2_fetch_bytes),
            l2_p50_us: lat.l2.p50_us,
            l2_p99_us: lat.l2.p99_us,
            disk_p50_us: lat.disk.p50_us,
            disk_p99_us: lat.disk.p99_us,
            rejects: d(|c| c.l2_rejects_total),
            faults: d(|c| c.l2_faults.total()),
            memcached_items: sum("curr_items"),
            memcached_bytes: sum("bytes"),
            memcached_limit_bytes: sum("limit_maxbytes"),
            memcached_evictions: sum("evictions"),
            presence_pages: after.l2_presence_pages,
            presence_skips: d(|c| c.l2_presence_skips),
            aged_skips: d(|c| c.l2_aged_skips),
            cost_skips: d(|c| c.l2_cost_skips),
            reach_pushes: after.l2_reach_pushes,
            push_cost_skips: d(|c| c.l2_push_cost_skips),
            nodes: after.nodes.clone(),
            flash: flash_traffic,
        }
    });
    let kinds = workload.kinds();
    Ok(ConfigResult {
        name: plan.name.clone(),
        vfs: if plan.waffle { "waffle".into() } else { "default (stock SQLite)".into() },
        device: if plan.waffle { device_label(&plan.device) } else { "real (kernel page cache)".into() },
        link: plan.link_label(),
        emulated: plan.device.is_some() || plan.link.is_some(),
        emulated_reads,
        memory: Memory {
            budget_bytes: opts.budget_bytes,
            sqlite_cache_bytes: plan.sqlite_cache_bytes,
            sqlite_cache_per_connection_kib: plan.sqlite_cache_per_conn_kib,
            l1_bytes: plan.l1_bytes,
            l2_bytes: plan.l2_bytes,
            flash_bytes: u64::from(plan.flash_mib_per_node) * plan.nodes as u64 * (1 << 20),
            nodes: plan.nodes,
        },
        unit: unit.into(),
        throughput,
        transactions: tally.done,
        seconds,
        latency: Latency::from_histogram(&hist),
        per_kind: kinds
            .iter()
            .enumerate()
            .map(|(i, k)| (k.to_string(), tally.per_kind.get(i).copied().unwrap_or(0)))
            .collect(),
        retries: tally.retries,
        rollbacks: tally.rollbacks,
        errors: tally.errors,
        sqlite_cache_hit_ratio: sqlite_cache,
        counters: if plan.waffle { counter_deltas(&after, &before) } else { serde_json::Map::new() },
        hits,
        grid: grid_traffic,
        working_set: plan.waffle.then(|| WorkingSet::from_stats(&after, known_pages, within_15m)),
        warm: warmed,
        restart,
        ratio_to_local: None,
        ratio_to_all_local: None,
        ratio_to_stock: None,
        rounds: vec![throughput],
        cpu_us_per_txn: cpu.total_s() * 1e6 / tally.done.max(1) as f64,
        wire,
    })
}

/// The bare series beside a grid run (bench/wire.rs); None, with a line on
/// stderr, if it could not run (the run's figures stand without it).
fn wire_beside(grid: &[String], nodes: &[String], opts: &RunOptions, run_cpu: Cpu, l2_hits: u64) -> Option<wire::Wire> {
    let seconds = opts.duration.as_secs_f64().min(WIRE_SECONDS);
    match wire::bare_series(grid, nodes, opts.threads, seconds) {
        Ok(mut w) => {
            w.cpu_us_per_l2_hit_total = run_cpu.total_s() * 1e6 / l2_hits as f64;
            w.load_average = super::report::load_average();
            Some(w)
        }
        Err(e) => {
            eprintln!("waffle bench: {e}");
            None
        }
    }
}
