//! `waffle bench` and `waffle bench sweep`: the seeds' experiments on SQLite
//! through the `waffle` VFS.
//!
//! - [`workload`]: the trait; [`oltp`] (sysbench read-only), [`tpcc`]
//!   (TPC-C-like, NOTPM), [`scan`] (full-table aggregates).
//! - [`dataset`]: build once, reuse while the parameters match.
//! - [`configs`]: `local`, `grid[:N][@LINK]`, `all-local`, `stock`, and the memory budget.
//! - [`runner`]: one configuration: nodes, connections, warm-up, measurement;
//!   [`connection`]: opening one for a configuration, its counters; [`phase`]:
//!   the workload driven on every connection for a while; [`restart`]: a
//!   `+restart`'s close, reopen and run; [`run_options`]: what they all run with.
//! - [`emulation`]: EMULATED devices and links, outside the product (the slow-disk
//!   shim under this process, link proxies in front of the nodes); [`flash`]: a
//!   `+flash` grid's nodes with their extstore files, and what the flash served;
//!   [`uncached`]: a database on an EMULATED device kept out of the page cache.
//! - [`result`]: what a configuration measured, filled by the runner;
//!   [`report`]: the table, ratios, JSON rendered from it; [`chart`]: PNGs.
//!
//! Every configuration of one invocation runs on the same data, one after the
//! other, after the same warm-up. Emulated devices and links say EMULATED.

pub mod chart;
pub mod configs;
pub mod connection;
pub mod dataset;
pub mod emulation;
pub mod flash;
pub mod oltp;
pub mod phase;
pub mod point;
pub mod report;
pub mod restart;
pub mod result;
pub mod run_options;
pub mod runner;
pub mod scan;
pub mod tpcc;
pub mod uncached;
pub mod wire;
pub mod workload;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};
use waffle_emulation::{DeviceProfile, LinkProfile};

use configs::{Amount, ConfigSpec, Kind, Plan};
use report::Output;
use result::ConfigResult;
use run_options::RunOptions;
use workload::Workload;

pub const WORKLOADS: [&str; 5] = ["oltp-read-only", "tpcc", "scan", "point", "short"];

#[derive(Clone, Debug)]
pub struct BenchOptions {
    pub workload: String,
    pub configs: Vec<String>,
    /// Database size for oltp-read-only and scan.
    pub data_bytes: u64,
    /// The local memory budget B: bytes or a percentage of the database file.
    pub memory: Amount,
    /// SQLite's page caches (all connections together): bytes or a percentage of B.
    pub sqlite_cache: Amount,
    /// memcached memory of a grid configuration: bytes or a percentage of B (default 100%: L2 = B).
    pub grid_memory: Amount,
    /// None: the workload's default (16; scan 1).
    pub threads: Option<usize>,
    pub warmup_s: f64,
    pub duration_s: f64,
    /// `+restart`: seconds the workload runs after the restart.
    pub restart_s: f64,
    pub page_bytes: u32,
    pub dist: oltp::Dist,
    pub warehouses: u64,
    pub items: u64,
    pub customers: u64,
    /// Default emulated device of the waffle configurations (None: this machine's disk).
    pub device: Option<String>,
    /// Default emulated link of the grid configurations (None: loopback).
    pub link: Option<LinkProfile>,
    pub timeout_ms: u64,
    pub dir: PathBuf,
    pub output: Output,
    pub seed: u64,
    /// Each configuration runs this many times, interleaved (local, grid, ..., local, grid, ...);
    /// the median round is reported. Evens out a shared machine's changing load.
    pub rounds: usize,
    /// tpcc: write transactions queue on a process-wide mutex before BEGIN IMMEDIATE.
    pub writer_gate: bool,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            workload: "oltp-read-only".into(),
            configs: vec!["local".into(), "grid".into(), "all-local".into()],
            data_bytes: 256 << 20,
            memory: Amount::Percent(25.0),
            sqlite_cache: Amount::Percent(5.0),
            grid_memory: Amount::Percent(100.0),
            threads: None,
            warmup_s: 10.0,
            duration_s: 30.0,
            restart_s: restart::DEFAULT_SECONDS,
            page_bytes: 4096,
            dist: oltp::Dist::Uniform,
            warehouses: 2,
            items: tpcc::SPEC_ITEMS,
            customers: tpcc::SPEC_CUSTOMERS,
            device: None,
            link: None,
            timeout_ms: 50,
            dir: PathBuf::from("waffle-bench"),
            output: Output::default(),
            seed: 1,
            rounds: 1,
            writer_gate: true,
        }
    }
}

pub fn make_workload(o: &BenchOptions) -> Result<Box<dyn Workload>, String> {
    let rows = oltp::OltpReadOnly::rows_for(o.data_bytes, o.page_bytes);
    match o.workload.as_str() {
        "oltp-read-only" | "oltp" => Ok(Box::new(oltp::OltpReadOnly::new(rows, o.dist.clone()))),
        "tpcc" => {
            let mut t = tpcc::Tpcc::new(o.warehouses, o.items, o.customers);
            t.writer_gate = o.writer_gate;
            Ok(Box::new(t))
        }
        "scan" => Ok(Box::new(scan::Scan::new(rows))),
        "point" => Ok(Box::new(point::Point::new(rows, o.dist.clone(), false))),
        "short" => Ok(Box::new(point::Point::new(rows, o.dist.clone(), true))),
        w => Err(format!("unknown workload '{w}' (use {})", WORKLOADS.join(", "))),
    }
}

fn threads_for(o: &BenchOptions, w: &dyn Workload) -> usize {
    o.threads.unwrap_or(if w.name() == "scan" { 1 } else { 16 }).max(1)
}

/// What the runner needs of the options for one configuration at the memory budget `budget_bytes`.
fn run_options(o: &BenchOptions, threads: usize, budget_bytes: u64, seed: u64) -> RunOptions {
    RunOptions {
        threads,
        warmup: Duration::from_secs_f64(o.warmup_s),
        duration: Duration::from_secs_f64(o.duration_s),
        restart: Duration::from_secs_f64(o.restart_s),
        timeout_ms: o.timeout_ms,
        budget_bytes,
        seed,
        page_bytes: o.page_bytes,
    }
}

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1 << 20) as f64)
}

/// The EMULATED lines of a run's plans, and how the emulation is done (outside the product).
fn emulation_notes(plans: &[Plan]) -> Vec<String> {
    let mut devices: Vec<DeviceProfile> =
        plans.iter().filter_map(|p| DeviceProfile::by_name(p.device.as_deref()?).ok().flatten()).collect();
    devices.dedup();
    let mut links: Vec<LinkProfile> = plans.iter().filter_map(|p| p.link).collect();
    links.dedup();
    let mut notes = report::emulation_notes(&devices, &links);
    if !notes.is_empty() {
        notes.push(format!(
            "EMULATED outside the product: devices by libwaffle_slowdisk.so under this process (the database \
                 file in the device's directory, dropped from the kernel's page cache every {} ms while a \
                 configuration runs), links by a TCP proxy in front of each memcached node",
            uncached::INTERVAL_MS
        ));
    }
    notes
}

/// The EMULATED devices `specs` run on, `default` for those that name none (stock has none).
fn devices_of(specs: &[ConfigSpec], default: &Option<String>) -> Result<Vec<DeviceProfile>, String> {
    let mut out: Vec<DeviceProfile> = Vec::new();
    for spec in specs.iter().filter(|s| s.kind != Kind::Stock) {
        let name = spec.device.clone().unwrap_or_else(|| default.clone());
        if let Some(p) = DeviceProfile::by_name(name.as_deref().unwrap_or("real"))? {
            if !out.contains(&p) {
                out.push(p);
            }
        }
    }
    Ok(out)
}

/// Draws `waffle bench`'s bar chart from its JSON report into `dir`; returns the file.
pub fn bench_chart(report: &Value, dir: &Path) -> Result<PathBuf, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let workload = report["workload"].as_str().unwrap_or("bench");
    let unit = report["unit"].as_str().unwrap_or("");
    let configs = report["configs"].as_array().cloned().unwrap_or_default();
    let local = configs
        .iter()
        .find(|c| report::base_name(c["name"].as_str().unwrap_or("")) == "local")
        .and_then(|c| c["throughput"].as_f64())
        .filter(|t| *t > 0.0);
    let bars: Vec<(String, f64, String)> = configs
        .iter()
        .map(|r| {
            let t = r["throughput"].as_f64().unwrap_or(0.0);
            let ratio = r["ratio_to_local"].as_f64().or(local.map(|l| t / l));
            // The disk's share of the reads beside the throughput: where the tiers pay shows there.
            let notes: Vec<String> = [
                ratio.map(|x| format!("{x:.2}x local")),
                r["hits"]["disk"].as_f64().map(|d| format!("disk {:.1}%", 100.0 * d)),
            ]
            .into_iter()
            .flatten()
            .collect();
            let rel = if notes.is_empty() { String::new() } else { format!(" ({})", notes.join("; ")) };
            (r["name"].as_str().unwrap_or("?").to_string(), t, format!("{t:.0}{rel}"))
        })
        .collect();
    let distinct = |key: &str| {
        let mut v: Vec<String> = configs
            .iter()
            .filter(|c| c["vfs"] == "waffle" && (key != "link" || c["link"] != "-"))
            .filter_map(|c| c[key].as_str().map(str::to_string))
            .collect();
        let mut seen = std::collections::HashSet::new();
        v.retain(|d| seen.insert(d.clone()));
        v.join(", ")
    };
    let (disks, links) = (distinct("device"), distinct("link"));
    let emulated = report["emulated"].as_array().is_some_and(|a| !a.is_empty());
    let flash = configs.iter().find_map(|c| c["memory"]["flash_bytes"].as_u64().filter(|b| *b > 0));
    let subtitle = format!(
        "{}\ndata {}, B {}, grid RAM {}{}, {} threads\ndisk: {}{}{}",
        report["description"].as_str().unwrap_or(""),
        mib(report["dataset"]["bytes"].as_u64().unwrap_or(0)),
        mib(report["params"]["budget_bytes"].as_u64().unwrap_or(0)),
        mib(report["params"]["grid_memory_bytes"].as_u64().unwrap_or(0)),
        flash.map_or(String::new(), |b| format!(" (+flash {} on this machine's disk)", mib(b))),
        report["params"]["threads"],
        if disks.is_empty() { "real".into() } else { disks },
        if links.is_empty() { String::new() } else { format!("; link: {links}") },
        if emulated { " - EMULATED: see docs/benchmarks.md" } else { "" }
    );
    let file = dir.join(format!("bench-{workload}.png"));
    chart::bar_chart(&file, &format!("waffle bench {workload}: {unit} by configuration"), &subtitle, unit, &bars)?;
    Ok(file)
}

/// `waffle bench replot`: draws the chart of the `waffle bench` report `json` into `dir` again; returns the file.
pub fn replot(json: &Path, dir: &Path) -> Result<PathBuf, String> {
    let text = std::fs::read_to_string(json).map_err(|e| format!("cannot read {}: {e}", json.display()))?;
    let report: Value = serde_json::from_str(&text).map_err(|e| format!("{} is not JSON: {e}", json.display()))?;
    if report["command"] != "bench" {
        return Err(format!("{} is not a `waffle bench` report", json.display()));
    }
    bench_chart(&report, dir)
}

/// A named check against a target from the benchmark issue.
fn check(name: &str, value: Option<f64>, target: &str, met: impl Fn(f64) -> bool) -> Option<Value> {
    let v = value.filter(|v| v.is_finite())?;
    Some(json!({ "check": name, "value": (v * 1000.0).round() / 1000.0, "target": target, "met": met(v) }))
}

/// The targets that the configurations of this run can speak to.
pub fn checks(workload: &str, results: &[ConfigResult]) -> Vec<Value> {
    let by = |n: &str| results.iter().find(|r| report::base_name(&r.name) == n);
    let grid =
        results.iter().find(|r| matches!(report::base_name(&r.name), n if n == "grid" || n.starts_with("grid:")));
    let mut out = Vec::new();
    if let (Some(g), Some(a)) = (grid, by("all-local")) {
        out.extend(check(&format!("{} / all-local throughput", g.name), g.ratio_to_all_local, ">= 0.9", |v| v >= 0.9));
        if let (Some(gh), Some(ah)) = (&g.hits, &a.hits) {
            out.extend(check(
                &format!("all-local minus {} L1+L2 hit ratio, points", g.name),
                Some(100.0 * (ah.l1_l2 - gh.l1_l2)),
                "<= 2",
                |v| v <= 2.0,
            ));
        }
    }
    if let (Some(g), Some(_)) = (grid, by("local")) {
        if workload == "scan" {
            let time_ratio = g.ratio_to_local.filter(|r| *r > 0.0).map(|r| 1.0 / r);
            out.extend(check(&format!("{} / local time per scan", g.name), time_ratio, "<= 1.05", |v| v <= 1.05));
        } else {
            // On an EMULATED 10K disk the seeds' gain; on any other device at least
            // no loss (a check that cannot be missed would say nothing).
            let (target, floor) = if g.device.starts_with("hdd-10k") {
                (">= 10 (hdd-10k)", 10.0)
            } else {
                (">= 1.0 (never slower than without the grid)", 1.0)
            };
            out.extend(check(&format!("{} / local throughput", g.name), g.ratio_to_local, target, move |v| v >= floor));
        }
    }
    for r in results {
        if let Some(ws) = &r.working_set {
            out.extend(check(
                &format!("{} working set estimate (15 min) / pages the warm-up read", r.name),
                ws.ratio_15m,
                "0.95..1.05",
                |v| (0.95..=1.05).contains(&v),
            ));
        }
    }
    if let (Some(l), Some(_)) = (by("local"), by("stock")) {
        out.extend(check(
            "local / stock throughput (waffle vs stock SQLite)",
            l.ratio_to_stock,
            ">= 0.9 when the data fits",
            |v| v >= 0.9,
        ));
    }
    out
}

pub fn print_checks(checks: &[Value]) {
    if checks.is_empty() {
        return;
    }
    println!();
    for c in checks {
        println!(
            "  check: {}: {} (target {}): {}",
            c["check"].as_str().unwrap_or(""),
            c["value"],
            c["target"].as_str().unwrap_or(""),
            if c["met"].as_bool() == Some(true) { "met" } else { "MISSED" }
        );
    }
}

/// `waffle bench`: every configuration once; prints the table, returns the JSON report.
pub fn run(o: &BenchOptions) -> Result<Value, String> {
    let workload = make_workload(o)?;
    let threads = threads_for(o, workload.as_ref());
    let specs: Vec<ConfigSpec> = o.configs.iter().map(|c| ConfigSpec::parse(c)).collect::<Result<_, _>>()?;
    emulation::ensure_slow_disks(&o.dir, &devices_of(&specs, &o.device)?)?;
    let ds = dataset::ensure(&o.dir, workload.as_ref(), o.page_bytes)?;
    let budget = o.memory.of(ds.bytes).max(1 << 20);
    let share = o.sqlite_cache.of(budget);
    let plans: Vec<Plan> = o
        .configs
        .iter()
        .zip(&specs)
        .map(|(name, spec)| {
            Plan::new(name.trim(), spec, budget, share, o.grid_memory.of(budget), threads, o.link, o.device.clone())
        })
        .collect();
    let load_start = report::load_average();
    println!("waffle bench {}: {}", workload.name(), workload.describe());
    println!(
        "data: {} ({}), page size {}; {} threads; warm-up: one pass over the data + {} s; measured {} s per configuration{}",
        mib(ds.bytes),
        ds.path.display(),
        o.page_bytes,
        threads,
        o.warmup_s,
        o.duration_s,
        if o.rounds > 1 { format!("; {} rounds, interleaved, the median shown", o.rounds) } else { String::new() }
    );
    println!(
        "memory budget B = {} ({:.0}% of the data) = SQLite page caches {} (all {threads} connections) + L1 {}; \
         grid: L2 = {} of memcached; all-local: L1 = B - SQLite + L2; stock: SQLite caches = B",
        mib(budget),
        100.0 * budget as f64 / ds.bytes.max(1) as f64,
        mib(share.min(budget / 2)),
        mib(budget - share.min(budget / 2)),
        mib(o.grid_memory.of(budget)),
    );
    let notes = emulation_notes(&plans);
    for n in &notes {
        println!("{n}");
    }
    for p in plans.iter().filter(|p| p.flash_mib_per_node > 0) {
        println!(
            "{}: each of {} node(s) has {} MiB of RAM and {} MiB of flash (memcached's extstore, as `waffle nodes --ssd`), \
             its file in {} on this machine's disk (not EMULATED){}",
            p.name,
            p.nodes,
            p.node_mib,
            p.flash_mib_per_node,
            flash::dir_for(&ds.path).display(),
            if p.flash_uncached { ", kept out of the kernel's page cache" } else { "" }
        );
    }
    println!("host: {} cores, load average {load_start:.2} at start", report::cores());

    let rounds = o.rounds.max(1);
    let mut per_plan: Vec<Vec<ConfigResult>> = vec![Vec::new(); plans.len()];
    for round in 0..rounds {
        for (i, plan) in plans.iter().enumerate() {
            let ropts = run_options(o, threads, budget, o.seed + round as u64);
            if rounds > 1 {
                eprintln!("waffle bench: round {} of {rounds}", round + 1);
            }
            per_plan[i].push(runner::run_config(workload.as_ref(), &ds, plan, &ropts)?);
        }
    }
    wire_against_all_local(&plans, &mut per_plan);
    let results: Vec<ConfigResult> = per_plan
        .into_iter()
        .map(|mut rs| {
            let all: Vec<f64> = rs.iter().map(|r| r.throughput).collect();
            rs.sort_by(|a, b| a.throughput.total_cmp(&b.throughput));
            let mut median = rs.swap_remove(rs.len() / 2);
            median.rounds = all;
            median
        })
        .collect();
    let mut results = results;
    report::fill_ratios(&mut results);
    report::print_table(&results);
    let checks = checks(workload.name(), &results);
    print_checks(&checks);
    let load_end = report::load_average();
    println!("host load average {load_end:.2} at the end (2-minute runs on a shared 2-core machine move by 10-20%)");

    let (unit, _) = workload.unit();
    let report = json!({
        "command": "bench",
        "invocation": report::invocation(),
        "workload": workload.name(),
        "description": workload.describe(),
        "unit": unit,
        "dataset": { "path": ds.path.display().to_string(), "bytes": ds.bytes, "tag": ds.tag, "built_now": ds.built },
        "params": {
            "threads": threads,
            "warmup_s": o.warmup_s,
            "duration_s": o.duration_s,
            "page_bytes": o.page_bytes,
            "budget_bytes": budget,
            "sqlite_cache_bytes": share,
            "grid_memory_bytes": o.grid_memory.of(budget),
            "timeout_ms": o.timeout_ms,
            "distribution": if workload.name() == "oltp-read-only" { json!(o.dist.name()) } else { Value::Null },
            "seed": o.seed,
            "rounds": rounds,
        },
        "emulated": notes,
        "host": { "cores": report::cores(), "load_start": finite_or_null(load_start), "load_end": finite_or_null(load_end) },
        "configs": results,
        "checks": checks,
    });
    let mut report = report;
    o.output.write(&mut report, bench_chart)?;
    Ok(report)
}

/// Each grid run's CPU per L2 hit beyond an L1 hit: its CPU per transaction
/// over all-local's of the same round (bench/wire.rs).
fn wire_against_all_local(plans: &[Plan], per_plan: &mut [Vec<ConfigResult>]) {
    let Some(al) = plans.iter().position(|p| p.kind == configs::Kind::AllLocal) else { return };
    let floor: Vec<(f64, f64)> = per_plan[al].iter().map(|r| (r.cpu_us_per_txn, r.throughput)).collect();
    for rs in per_plan.iter_mut() {
        for (r, &(floor, al_tps)) in rs.iter_mut().zip(&floor) {
            let l2_hits = r.counters.get("l2_hits").and_then(Value::as_u64).unwrap_or(0);
            let (txns, per_txn, tps) = (r.transactions, r.cpu_us_per_txn, r.throughput);
            if let Some(w) = r.wire.as_mut().filter(|_| l2_hits > 0 && txns > 0) {
                let per_hit = (per_txn - floor) * txns as f64 / l2_hits as f64;
                w.cpu_us_per_l2_hit = Some(per_hit);
                w.ratio_to_bare = (w.bare_cpu_us_per_get > 0.0).then(|| per_hit / w.bare_cpu_us_per_get);
                let limit = floor / (floor + l2_hits as f64 / txns as f64 * w.bare_cpu_us_per_get);
                w.limit_ratio_to_all_local = Some(limit);
                w.share_of_limit = (al_tps > 0.0).then(|| tps / al_tps / limit);
            }
        }
    }
}

fn finite_or_null(x: f64) -> Value {
    if x.is_finite() {
        json!(x)
    } else {
        Value::Null
    }
}

#[derive(Clone, Debug)]
pub struct SweepOptions {
    pub bench: BenchOptions,
    /// Budgets as percentages of the data.
    pub points: Vec<f64>,
    /// Devices, one set of lines each (None: this machine's disk).
    pub devices: Vec<Option<String>>,
}

/// `waffle bench sweep`: throughput against the memory budget, for each configuration and device.
/// With `--rounds N`, each point runs its configurations N times, interleaved (local, grid, local,
/// grid, ...); the table and the chart show each configuration's median round with the spread
/// (min..max) of all, and the JSON every round.
pub fn sweep(s: &SweepOptions) -> Result<Value, String> {
    let o = &s.bench;
    let rounds = crate::args::check_rounds(o.rounds)?;
    let workload = make_workload(o)?;
    let threads = threads_for(o, workload.as_ref());
    let specs: Vec<ConfigSpec> = o.configs.iter().map(|c| ConfigSpec::parse(c)).collect::<Result<_, _>>()?;
    if specs.iter().any(|c| c.kind == Kind::Stock) {
        return Err("a sweep compares waffle configurations; leave stock out".into());
    }
    let mut devices: Vec<DeviceProfile> = Vec::new();
    for d in &s.devices {
        for p in devices_of(&specs, d)? {
            if !devices.contains(&p) {
                devices.push(p);
            }
        }
    }
    emulation::ensure_slow_disks(&o.dir, &devices)?;
    let ds = dataset::ensure(&o.dir, workload.as_ref(), o.page_bytes)?;
    let (unit, _) = workload.unit();
    println!("waffle bench sweep {}: {}", workload.name(), workload.describe());
    println!(
        "data {}; budgets {:?}% of it; configurations {}; devices {}; {threads} threads, warm-up one pass + {} s, measured {} s{}",
        mib(ds.bytes),
        s.points,
        o.configs.join(","),
        s.devices.iter().map(runner::device_label).collect::<Vec<_>>().join(", "),
        o.warmup_s,
        o.duration_s,
        if rounds > 1 {
            format!("; {rounds} rounds per point, interleaved: the median shown, (min..max) of all rounds")
        } else {
            String::new()
        }
    );
    println!("host: {} cores, load average {:.2} at start", report::cores(), report::load_average());
    let mut rows = Vec::new();
    let mut all_plans = Vec::new();
    // One line per configuration and device: its median points and their spreads (x, min, max).
    type Line = (String, Vec<(f64, f64)>, Vec<(f64, f64, f64)>);
    let mut lines: Vec<Line> = Vec::new();
    for device in &s.devices {
        for &pct in &s.points {
            let budget = Amount::Percent(pct).of(ds.bytes).max(1 << 20);
            let share = o.sqlite_cache.of(budget);
            let plans: Vec<Plan> = o
                .configs
                .iter()
                .zip(&specs)
                .map(|(name, spec)| {
                    Plan::new(
                        name.trim(),
                        spec,
                        budget,
                        share,
                        o.grid_memory.of(budget),
                        threads,
                        o.link,
                        device.clone(),
                    )
                })
                .collect();
            let mut per_plan: Vec<Vec<ConfigResult>> = vec![Vec::new(); plans.len()];
            for round in 0..rounds {
                for (i, plan) in plans.iter().enumerate() {
                    let ropts = run_options(o, threads, budget, o.seed + round as u64);
                    eprintln!(
                        "waffle bench sweep: budget {pct}% ({}), {}{}",
                        mib(budget),
                        runner::device_label(device),
                        if rounds > 1 { format!(", round {} of {rounds}", round + 1) } else { String::new() }
                    );
                    per_plan[i].push(runner::run_config(workload.as_ref(), &ds, plan, &ropts)?);
                }
            }
            // Every round, with its ratios to that round's local (and all-local).
            let mut round_rows = Vec::new();
            for round in 0..rounds {
                let mut these: Vec<ConfigResult> = per_plan.iter().map(|rs| rs[round].clone()).collect();
                report::fill_ratios(&mut these);
                round_rows.push(json!({
                    "round": round + 1,
                    "configs": these.iter().map(|r| json!({
                        "name": r.name,
                        "throughput": r.throughput,
                        "ratio_to_local": r.ratio_to_local,
                        "ratio_to_all_local": r.ratio_to_all_local,
                    })).collect::<Vec<_>>(),
                }));
            }
            let mut results = Vec::new();
            let mut spreads = Vec::new();
            for (plan, rs) in plans.iter().zip(per_plan) {
                let all: Vec<f64> = rs.iter().map(|r| r.throughput).collect();
                let (mid, lo, hi) = crate::args::median_round(&all).ok_or("no round ran")?;
                let mut median = rs.into_iter().nth(mid).ok_or("no round ran")?;
                median.rounds = all;
                let line = format!("{} on {}", median.name, runner::device_label(&plan.device));
                match lines.iter_mut().find(|l| l.0 == line) {
                    Some(l) => {
                        l.1.push((pct, median.throughput));
                        l.2.push((pct, lo, hi));
                    }
                    None => lines.push((line, vec![(pct, median.throughput)], vec![(pct, lo, hi)])),
                }
                spreads.push((mid, lo, hi));
                results.push(median);
            }
            all_plans.extend(plans);
            // Ratios of the medians.
            report::fill_ratios(&mut results);
            let configs: Vec<Value> = results
                .iter()
                .zip(&spreads)
                .map(|(r, &(mid, lo, hi))| {
                    let mut v = serde_json::to_value(r).unwrap_or(Value::Null);
                    if let Some(m) = v.as_object_mut() {
                        m.insert("median_round".into(), json!(mid + 1));
                        m.insert("throughput_min".into(), json!(lo));
                        m.insert("throughput_max".into(), json!(hi));
                    }
                    v
                })
                .collect();
            rows.push(json!({
                "device": runner::device_label(device),
                "budget_pct": pct,
                "budget_bytes": budget,
                "configs": configs,
                "rounds": round_rows,
            }));
        }
    }
    // The table: one row per budget and device, one column per configuration.
    let (col, ratio_col) = if rounds > 1 { (26, 22) } else { (12, 12) };
    println!();
    print!("{:<20} {:>8} {:>10}", "device", "budget", "B");
    for c in &o.configs {
        print!(" {:>col$}", format!("{c} {unit}"));
    }
    println!(" {:>ratio_col$}", "grid/local");
    for row in &rows {
        let cfgs = row["configs"].as_array().cloned().unwrap_or_default();
        print!(
            "{:<20} {:>7}% {:>10}",
            row["device"].as_str().unwrap_or(""),
            row["budget_pct"].as_f64().unwrap_or(0.0),
            mib(row["budget_bytes"].as_u64().unwrap_or(0))
        );
        let f = |c: &Value, k: &str| c[k].as_f64().unwrap_or(0.0);
        for c in &cfgs {
            let cell = if rounds > 1 {
                format!("{:.1} ({:.1}..{:.1})", f(c, "throughput"), f(c, "throughput_min"), f(c, "throughput_max"))
            } else {
                format!("{:.1}", f(c, "throughput"))
            };
            print!(" {cell:>col$}");
        }
        let is_grid = |c: &Value| c["name"].as_str().is_some_and(|n| n.starts_with("grid"));
        let grid_ratio = cfgs.iter().find(|c| is_grid(c)).and_then(|c| c["ratio_to_local"].as_f64());
        // The spread of the per-round ratios (each round's grid over that round's local).
        let per_round: Vec<f64> = row["rounds"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["configs"].as_array()?.iter().find(|c| is_grid(c))?["ratio_to_local"].as_f64())
            .collect();
        let cell = match (grid_ratio, crate::args::median_round(&per_round)) {
            (None, _) => "-".to_string(),
            (Some(r), Some((_, lo, hi))) if rounds > 1 => format!("{r:.2}x ({lo:.2}..{hi:.2})"),
            (Some(r), _) => format!("{r:.2}x"),
        };
        println!(" {cell:>ratio_col$}");
    }
    if rounds > 1 {
        println!(
            "{unit}: the median round of {rounds} (min..max of all rounds); grid/local: the ratio of the medians \
             (min..max of each round's grid over that round's local)"
        );
    }
    let notes = emulation_notes(&all_plans);
    for n in &notes {
        println!("{n}");
    }
    println!("host load average {:.2} at the end", report::load_average());
    let draw = |_: &Value, dir: &Path| {
        let file = dir.join(format!("sweep-{}.png", workload.name()));
        let series: Vec<chart::Series> = lines
            .iter()
            .enumerate()
            .map(|(i, (name, pts, _))| chart::Series {
                name: name.clone(),
                points: pts.clone(),
                dashed: false,
                color: i,
            })
            .collect();
        let spread: Vec<chart::Spread> = if rounds > 1 {
            lines
                .iter()
                .enumerate()
                .flat_map(|(i, l)| l.2.iter().map(move |&(x, lo, hi)| chart::Spread { x, lo, hi, color: i }))
                .collect()
        } else {
            Vec::new()
        };
        let emu = if notes.is_empty() { String::new() } else { "; EMULATED hardware, see docs/benchmarks.md".into() };
        let med = if rounds > 1 { format!("; median of {rounds} rounds, bars: min..max") } else { String::new() };
        chart::line_chart_with_spread(
            &file,
            &format!("waffle bench sweep {}: {unit} against local memory", workload.name()),
            &format!("{}\ndata {}; grid adds L2 = B of memcached{med}{emu}", workload.describe(), mib(ds.bytes)),
            "local memory budget B, % of the data",
            unit,
            &series,
            &spread,
            false,
            false,
        )?;
        Ok(file)
    };
    let mut report = json!({
        "command": "bench sweep",
        "invocation": report::invocation(),
        "workload": workload.name(),
        "description": workload.describe(),
        "unit": unit,
        "dataset": { "path": ds.path.display().to_string(), "bytes": ds.bytes, "tag": ds.tag },
        "params": {
            "threads": threads,
            "warmup_s": o.warmup_s,
            "duration_s": o.duration_s,
            "page_bytes": o.page_bytes,
            "points_pct": s.points,
            "rounds": rounds,
        },
        "emulated": notes,
        "points": rows,
    });
    o.output.write(&mut report, draw)?;
    Ok(report)
}

/// Removes a bench directory's datasets (for tests and tools).
pub fn clean(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir);
}
