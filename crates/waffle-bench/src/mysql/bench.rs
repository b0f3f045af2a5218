//! `waffle bench mysql`: the real sysbench (`oltp_read_only`, `oltp_read_write`)
//! against a real MariaDB, stock and under `libwaffle_preload.so`, side by side
//! on the same data (docs/benchmarks.md's rules).
//!
//! Configurations, for a local memory budget B and data of about 4 B:
//!
//! | name | InnoDB buffer pool | Waffle L1 | grid (memcached) |
//! |---|---|---|---|
//! | `stock` | B | - | - |
//! | `waffle` | small (B/8, at least 6 MiB) | B - small | B, over `--nodes` nodes |
//! | `waffle@S` | S | B - S | B, over `--nodes` nodes |
//!
//! `waffle+flash`, `waffle@S+flash`: the same, each node with a flash tier behind its RAM
//! (memcached's extstore as `waffle nodes --ssd` starts it, `bench::flash`), 4 B in all, or
//! `+flash=SIZE` in all; its files in `--dir`/flash on this machine's disk (never EMULATED).
//!
//! `waffle@S` configurations compare splits of the budget side by side in one run (issue 20: a
//! small buffer pool leaves dirty pages little room; `BP wr/tx`, InnoDB's page writes per
//! transaction, shows what that costs).
//! | `stock-2x` | 2 B | - | - |
//! | `stock@S` | S | - | - (the waffle@S split's buffer pool alone: what the smaller pool costs, without the preload) |
//!
//! Each configuration starts from a copy of one prepared datadir (made once,
//! kept in `--dir` while its parameters match), runs each workload for a
//! warm-up and then a measured period, and reports tps, p95 latency, the
//! buffer pool's hit ratio and, under Waffle, where the buffer pool's misses
//! were answered (L1, grid, disk) from the preload's stats file.
//!
//! `--rounds N` runs the configurations N times, interleaved (stock, waffle,
//! stock-2x, stock, waffle, ...), each on a fresh copy and a fresh server; the
//! table shows, per workload and configuration, the median round's figures,
//! the spread (min..max) of tps over the rounds and the ratio of the medians,
//! and the JSON every round (`runs`) beside the medians (`results`).
//!
//! EMULATED hardware is outside the server and the preload: `--device` runs
//! every server on `libwaffle_slowdisk.so` (its datadir a slow disk, stock
//! servers included, the preload's own reads included), `--link` puts a TCP
//! proxy in front of each memcached node (`bench::emulation`).
//!
//! Nothing is installed here: a missing mariadbd or sysbench is an error that
//! says how to install them. Servers listen on 127.0.0.1 only, with their own
//! socket and port, and are always stopped.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Args;
use serde_json::{json, Value};
use waffle_core::stats::StatsSnapshot;
use waffle_emulation::{slow_disk, DeviceProfile, LinkProfile};
use waffle_nodes::Node;
use waffle_testkit::mariadb::{self as server, Preload, Server, ServerOptions, SlowDisk, SysbenchResult, Tools};

use crate::args::{check_rounds, median_round, size, GridTimeout, Rounds};
use crate::bench::result::FlashTraffic;
use crate::bench::{emulation, flash, report};
use crate::mysql::waffle_delta::WaffleDelta;

/// Bytes a sysbench row takes in InnoDB, with its secondary index (measured on MariaDB 10.11).
pub const ROW_BYTES: u64 = 460;

#[derive(Args, Clone, Debug)]
pub struct MysqlArgs {
    /// The local memory budget B: the stock buffer pool; under Waffle, buffer pool + L1.
    #[arg(long, default_value = "32MiB", value_parser = size)]
    pub budget: u64,
    /// Data size (sysbench tables, on disk). Default: 4 x the budget.
    #[arg(long, value_parser = size)]
    pub data: Option<u64>,
    /// sysbench tables.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub tables: u32,
    /// sysbench threads.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub threads: u32,
    /// Warm the waffle configuration's sbtest tablespaces (waffle warm --mysql) before its first workload;
    /// the report says how long it took and what it filled.
    #[arg(long)]
    pub warm: bool,
    /// Seconds of each workload before measuring.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(0..=3600))]
    pub warmup: u64,
    /// Measured seconds of each workload.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=86400))]
    pub duration: u64,
    /// sysbench workloads, run in this order in every configuration.
    #[arg(long, value_delimiter = ',', default_value = "oltp_read_only,oltp_read_write")]
    pub workloads: Vec<String>,
    /// Configurations, in order: stock, waffle, waffle@SIZE (its buffer pool SIZE, L1 the rest of B), stock@SIZE
    /// (stock with a buffer pool of SIZE), stock-2x; waffle[@SIZE]+flash[=SIZE]: the grid's nodes with flash
    /// (4 x B in all by default) on this machine's disk.
    #[arg(long, value_delimiter = ',', default_value = "stock,waffle,stock-2x")]
    pub configs: Vec<String>,
    /// memcached nodes of the waffle configuration (together they hold B).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=16))]
    pub nodes: u32,
    /// InnoDB buffer pool of the waffle configuration. Default: B/8, at least 6 MiB.
    #[arg(long, value_parser = size)]
    pub waffle_pool: Option<u64>,
    #[command(flatten)]
    pub timeout: GridTimeout,
    #[command(flatten)]
    pub rounds: Rounds,
    /// EMULATED link to the grid: loopback (real), 10gbe, 1gbe, 100mb, dolphin.
    #[arg(long, default_value = "loopback")]
    pub link: String,
    /// EMULATED disk under every configuration: real (this machine's disk), hdd-10k, ssd-2009, nvme, cloud-block.
    /// Every server then runs on libwaffle_slowdisk.so: reads of its datadir's files wait for the device (writes
    /// are not emulated).
    #[arg(long, default_value = "real")]
    pub device: String,
    /// sysbench's key distribution: uniform (seed 003), special, gaussian, pareto.
    #[arg(long, default_value = "uniform")]
    pub rand_type: String,
    /// Where the prepared datadir and the runs go.
    #[arg(long, default_value = "waffle-bench/mysql")]
    pub dir: PathBuf,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// libwaffle_preload.so (default: next to this program, or target/release).
    #[arg(long)]
    pub preload: Option<PathBuf>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Kind {
    Stock,
    /// Under the preload, with this buffer pool (bytes) and L1 the rest of the budget; the name
    /// the table and the JSON show (`waffle`, or `waffle@16MiB`).
    Waffle {
        buffer_pool_bytes: u64,
        name: String,
        /// `+flash`: the grid's flash in all (0: none).
        flash_bytes: u64,
    },
    Stock2x,
    /// Stock with this buffer pool (bytes) under the budget: what a waffle@S split costs InnoDB
    /// by its smaller pool alone, without the preload (issue 33 item 3).
    StockAt {
        buffer_pool_bytes: u64,
        name: String,
    },
}

impl Kind {
    /// `default_pool_bytes`: the buffer pool of a bare `waffle` (`--waffle-pool`, or B/8).
    fn parse(s: &str, budget: u64, default_pool_bytes: u64) -> Result<Kind, String> {
        let (base, flash_bytes) = match s.trim().split_once("+flash") {
            None => (s.trim(), 0),
            Some((base, "")) => (base, budget * 4),
            Some((base, amount)) => {
                let bytes = amount.strip_prefix('=').map(size).unwrap_or(Err("takes =SIZE".into()));
                (base, bytes.map_err(|e| format!("--configs: '{}': +flash{amount}: {e}", s.trim()))?)
            }
        };
        if flash_bytes > 0 && !(base == "waffle" || base.starts_with("waffle@")) {
            return Err(format!("--configs: '{}': only a waffle configuration's grid has flash", s.trim()));
        }
        let kind = match base {
            "stock" => Kind::Stock,
            "waffle" => Kind::Waffle { buffer_pool_bytes: default_pool_bytes, name: "waffle".into(), flash_bytes },
            "stock-2x" => Kind::Stock2x,
            other => match (other.strip_prefix("waffle@"), other.strip_prefix("stock@")) {
                (Some(pool), _) => {
                    let bytes = size(pool).map_err(|e| format!("--configs: '{other}': {e}"))?;
                    Kind::Waffle { buffer_pool_bytes: bytes, name: other.to_string(), flash_bytes }
                }
                (_, Some(pool)) => {
                    let bytes = size(pool).map_err(|e| format!("--configs: '{other}': {e}"))?;
                    Kind::StockAt { buffer_pool_bytes: bytes, name: other.to_string() }
                }
                _ => {
                    return Err(format!(
                        "unknown configuration '{other}' (stock, waffle, waffle@SIZE, stock@SIZE, stock-2x)"
                    ))
                }
            },
        };
        let kind = match kind {
            // Named as given: `waffle+flash` beside `waffle` in the table.
            Kind::Waffle { buffer_pool_bytes, flash_bytes, .. } if flash_bytes > 0 => {
                Kind::Waffle { buffer_pool_bytes, name: s.trim().to_string(), flash_bytes }
            }
            k => k,
        };
        if let Kind::StockAt { buffer_pool_bytes, name } = &kind {
            if *buffer_pool_bytes < server::MIN_BUFFER_POOL || *buffer_pool_bytes > budget {
                return Err(format!(
                    "configuration '{name}': its buffer pool ({} MiB) must be at least {} MiB and at most the budget ({} MiB)",
                    buffer_pool_bytes >> 20,
                    server::MIN_BUFFER_POOL >> 20,
                    budget >> 20
                ));
            }
        }
        if let Kind::Waffle { buffer_pool_bytes, name, .. } = &kind {
            if *buffer_pool_bytes < server::MIN_BUFFER_POOL || *buffer_pool_bytes >= budget {
                return Err(format!(
                    "configuration '{name}': its buffer pool ({} MiB) must be at least {} MiB and smaller than the budget ({} MiB)",
                    buffer_pool_bytes >> 20,
                    server::MIN_BUFFER_POOL >> 20,
                    budget >> 20
                ));
            }
        }
        Ok(kind)
    }
    fn name(&self) -> &str {
        match self {
            Kind::Stock => "stock",
            Kind::Waffle { name, .. } | Kind::StockAt { name, .. } => name,
            Kind::Stock2x => "stock-2x",
        }
    }

    /// The server's buffer pool under budget B.
    fn buffer_pool(&self, budget: u64) -> u64 {
        match self {
            Kind::Stock => budget,
            Kind::Stock2x => budget * 2,
            Kind::Waffle { buffer_pool_bytes, .. } | Kind::StockAt { buffer_pool_bytes, .. } => *buffer_pool_bytes,
        }
    }
    /// The grid's flash in all of a `+flash` configuration (0: none).
    fn flash_bytes(&self) -> u64 {
        match self {
            Kind::Waffle { flash_bytes, .. } => *flash_bytes,
            _ => 0,
        }
    }

    /// The buffer pool of a waffle configuration.
    fn waffle_pool(&self) -> Option<u64> {
        match self {
            Kind::Waffle { buffer_pool_bytes, .. } => Some(*buffer_pool_bytes),
            _ => None,
        }
    }
}

/// One measured run.
#[derive(Clone, Debug)]
pub struct RunResult {
    /// The round (1..=N) of `--rounds N` this run belongs to.
    pub round: usize,
    pub config: String,
    pub workload: String,
    pub sysbench: SysbenchResult,
    /// The server's InnoDB buffer pool.
    pub buffer_pool_bytes: u64,
    /// InnoDB: page requests and the ones its buffer pool missed, during the measured period.
    pub bp_requests: u64,
    pub bp_misses: u64,
    /// InnoDB: pages its buffer pool wrote to the tablespaces, during the measured period (a small
    /// pool writes a page each time it must make room for a dirty one).
    pub bp_flushed: u64,
    /// Waffle: where the buffer pool's misses were answered, during the measured period.
    pub waffle: Option<WaffleDelta>,
    /// `--warm`: the warm before this configuration's first workload.
    pub warm: Option<waffle_warm_client::Warmed>,
    /// `+flash`: what the grid's flash did during the measured period.
    pub flash: Option<FlashTraffic>,
}

impl RunResult {
    fn bp_hit(&self) -> Option<f64> {
        (self.bp_requests > 0).then(|| 1.0 - self.bp_misses as f64 / self.bp_requests as f64)
    }

    /// InnoDB's page writes per transaction.
    fn bp_writes_per_txn(&self) -> Option<f64> {
        (self.sysbench.transactions > 0).then(|| self.bp_flushed as f64 / self.sysbench.transactions as f64)
    }
}

/// InnoDB's buffer pool counters (they only grow): page requests, misses, pages flushed.
#[derive(Clone, Copy, Debug, Default)]
struct InnoDbCounters {
    requests: u64,
    misses: u64,
    flushed: u64,
}

fn innodb_status(s: &Server) -> Result<InnoDbCounters, String> {
    let out = s.sql(
        "SHOW GLOBAL STATUS WHERE Variable_name IN \
         ('Innodb_buffer_pool_read_requests','Innodb_buffer_pool_reads','Innodb_buffer_pool_pages_flushed')",
    )?;
    let mut c = InnoDbCounters::default();
    for line in out.lines() {
        let mut it = line.split('\t');
        match (it.next(), it.next().and_then(|v| v.trim().parse::<u64>().ok())) {
            (Some("Innodb_buffer_pool_read_requests"), Some(v)) => c.requests = v,
            (Some("Innodb_buffer_pool_reads"), Some(v)) => c.misses = v,
            (Some("Innodb_buffer_pool_pages_flushed"), Some(v)) => c.flushed = v,
            _ => {}
        }
    }
    Ok(c)
}

/// The stats file as written after `after` (it is rewritten every 200 ms here), with its cache's section.
fn fresh_stats(s: &Server, after: Instant) -> Option<StatsSnapshot> {
    let since = after.elapsed().as_millis() as u64;
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).ok()?.as_millis() as u64;
    let t = now_ms.saturating_sub(since);
    let written_since = |s: &StatsSnapshot| s.cache.is_some() && s.stamp.updated_unix_ms.is_some_and(|u| u > t);
    let v = s.wait_stats(Duration::from_secs(5), |v| StatsSnapshot::from_json(v).is_ok_and(|s| written_since(&s)))?;
    StatsSnapshot::from_json(&v).ok()
}

struct Dataset {
    template: PathBuf,
    table_size: u64,
}

/// The prepared datadir: made once (install, sysbench prepare on a stock
/// server, clean shutdown) and reused while tables and rows match.
fn dataset(tools: &Tools, a: &MysqlArgs, data_bytes: u64) -> Result<Dataset, String> {
    let table_size = (data_bytes / a.tables as u64 / ROW_BYTES).max(1000);
    let template = a.dir.join(format!("template-{}x{}", a.tables, table_size));
    let marker = template.join("waffle-dataset-ready");
    if marker.is_file() {
        eprintln!("waffle bench mysql: reusing the prepared data in {}", template.display());
        return Ok(Dataset { template, table_size });
    }
    let _ = std::fs::remove_dir_all(&template);
    eprintln!(
        "waffle bench mysql: preparing {} tables x {} rows (about {} MiB) in {} ...",
        a.tables,
        table_size,
        (a.tables as u64 * table_size * ROW_BYTES) >> 20,
        template.display()
    );
    server::install_datadir(tools, &template, &[])?;
    let s = Server::start(tools, &template, ServerOptions::stock(256 << 20))?;
    s.sql("CREATE DATABASE IF NOT EXISTS sbtest")?;
    let mut args = server::sysbench_args(&s, a.tables, table_size);
    args.push(format!("--threads={}", a.tables.min(4)));
    args.extend(["oltp_read_write".to_string(), "prepare".to_string()]);
    server::sysbench(tools, &args, Duration::from_secs(3600))?;
    s.shutdown()?;
    std::fs::write(&marker, b"").map_err(|e| e.to_string())?;
    Ok(Dataset { template, table_size })
}

/// One workload under one configuration over the rounds: which run is the median round's, and the spread.
#[derive(Clone, Debug)]
pub struct Summary {
    pub workload: String,
    pub config: String,
    /// Index in the runs of the median round (by tps; of an even count, the upper middle one).
    pub median: usize,
    /// tps of every round, in order.
    pub tps_rounds: Vec<f64>,
    pub tps_min: f64,
    pub tps_max: f64,
    /// The median's tps over stock's median's (same workload).
    pub ratio_to_stock: Option<f64>,
    /// Each round's tps over stock's tps in the same round.
    pub ratio_to_stock_rounds: Vec<f64>,
}

/// The median round of each workload and configuration, in the order workload, then configuration.
pub fn summarize(runs: &[RunResult]) -> Vec<Summary> {
    let mut keys: Vec<(&str, &str)> = Vec::new();
    for r in runs {
        if !keys.contains(&(r.workload.as_str(), r.config.as_str())) {
            keys.push((r.workload.as_str(), r.config.as_str()));
        }
    }
    let workloads: Vec<&str> = keys.iter().fold(Vec::new(), |mut v, k| {
        if !v.contains(&k.0) {
            v.push(k.0);
        }
        v
    });
    let of = |w: &str, c: &str| -> Vec<usize> {
        (0..runs.len()).filter(|&i| runs[i].workload == w && runs[i].config == c).collect()
    };
    let mut out: Vec<Summary> = Vec::new();
    for w in workloads {
        for &(_, c) in keys.iter().filter(|k| k.0 == w) {
            let idx = of(w, c);
            let tps: Vec<f64> = idx.iter().map(|&i| runs[i].sysbench.tps).collect();
            let Some((mid, lo, hi)) = median_round(&tps) else { continue };
            let stock = of(w, "stock");
            let ratio_to_stock_rounds = idx
                .iter()
                .filter_map(|&i| {
                    let s = stock.iter().find(|&&j| runs[j].round == runs[i].round)?;
                    let s = runs[*s].sysbench.tps;
                    (s > 0.0).then(|| runs[i].sysbench.tps / s)
                })
                .collect();
            out.push(Summary {
                workload: w.to_string(),
                config: c.to_string(),
                median: idx[mid],
                tps_rounds: tps,
                tps_min: lo,
                tps_max: hi,
                ratio_to_stock: None,
                ratio_to_stock_rounds,
            });
        }
    }
    let medians: Vec<(String, String, f64)> =
        out.iter().map(|s| (s.workload.clone(), s.config.clone(), runs[s.median].sysbench.tps)).collect();
    for s in &mut out {
        let stock = medians.iter().find(|m| m.0 == s.workload && m.1 == "stock").map(|m| m.2);
        s.ratio_to_stock = stock.filter(|&t| t > 0.0).map(|t| runs[s.median].sysbench.tps / t);
    }
    out
}

/// Runs the benchmark; prints the table and returns every run (every round's).
pub fn run(a: &MysqlArgs) -> Result<Vec<RunResult>, String> {
    let rounds = check_rounds(a.rounds.rounds as usize)?;
    let tools = Tools::find()?;
    tools.sysbench()?;
    let budget = a.budget.max(server::MIN_BUFFER_POOL);
    let small = a.waffle_pool.unwrap_or((budget / 8).max(server::MIN_BUFFER_POOL)).max(server::MIN_BUFFER_POOL);
    let kinds: Vec<Kind> = a.configs.iter().map(|c| Kind::parse(c, budget, small)).collect::<Result<_, _>>()?;
    if kinds.is_empty() || a.workloads.is_empty() {
        return Err("--configs and --workloads must not be empty".into());
    }
    for w in &a.workloads {
        if !matches!(w.as_str(), "oltp_read_only" | "oltp_read_write" | "oltp_point_select" | "oltp_write_only") {
            return Err(format!(
                "unknown workload '{w}' (oltp_read_only, oltp_read_write, oltp_point_select, oltp_write_only)"
            ));
        }
    }
    let libs = Libraries::find(a, &kinds)?;
    let data_bytes = a.data.unwrap_or(budget * 4);
    std::fs::create_dir_all(&a.dir).map_err(|e| format!("cannot create {}: {e}", a.dir.display()))?;
    let a_dir = a.dir.canonicalize().map_err(|e| e.to_string())?;
    let a = MysqlArgs { dir: a_dir, ..a.clone() };
    let ds = dataset(&tools, &a, data_bytes)?;
    let mut results = Vec::new();
    for round in 1..=rounds {
        for kind in &kinds {
            if rounds > 1 {
                eprintln!("waffle bench mysql: round {round} of {rounds}");
            }
            let mut runs = run_config(&tools, &a, &ds, kind, budget, &libs)?;
            runs.iter_mut().for_each(|r| r.round = round);
            results.extend(runs);
        }
    }
    let summary = summarize(&results);
    print!("{}", table(&results, &summary, budget, data_bytes, &a, ds.table_size, small));
    if let Some(path) = &a.json {
        let v = to_json(&results, &summary, &a, budget, data_bytes, ds.table_size, small);
        report::write_json(path, &v)?;
        eprintln!("waffle bench mysql: results in {}", path.display());
    }
    Ok(results)
}

/// The nodes, what the server is given (their addresses or proxies), and their flash files.
type StartedGrid = (Vec<Node>, Option<emulation::Grid>, Vec<PathBuf>);

/// The waffle configuration's memcached nodes (together B), and what the
/// server is given: their addresses, or proxies on the EMULATED link.
/// With `flash_bytes`, each node has its share of it (at least extstore's smallest file) in
/// `--dir`/flash; the files are returned for removal once the nodes are stopped.
fn start_grid(a: &MysqlArgs, budget: u64, link: Option<LinkProfile>, flash_bytes: u64) -> Result<StartedGrid, String> {
    let per_node_mib = ((budget >> 20) / a.nodes as u64).max(1) as u32;
    let flash_mib = match flash_bytes {
        0 => 0,
        b => ((b >> 20) / a.nodes as u64).max(u64::from(waffle_nodes::flash::MIN_FLASH_MIB)) as u32,
    };
    // InnoDB's default 16 KiB pages.
    let (nodes, files) = flash::start(a.nodes as usize, per_node_mib, flash_mib, 16384, &a.dir.join("flash"))
        .map_err(|e| format!("cannot start memcached: {e} (apt-get install memcached)"))?;
    let grid = emulation::Grid::behind(&nodes.iter().map(Node::addr).collect::<Vec<_>>(), link)?;
    Ok((nodes, Some(grid), files))
}

/// The libraries the servers run under, and the EMULATED hardware.
struct Libraries {
    /// libwaffle_preload.so, when a configuration caches.
    preload: Option<PathBuf>,
    /// libwaffle_slowdisk.so and the device, with `--device`.
    slow_disk: Option<(PathBuf, DeviceProfile)>,
    /// The grid's link, with `--link`.
    link: Option<LinkProfile>,
}

impl Libraries {
    fn find(a: &MysqlArgs, kinds: &[Kind]) -> Result<Libraries, String> {
        let link = LinkProfile::by_name(a.link.trim())?;
        let device = DeviceProfile::by_name(a.device.trim())?;
        let preload = match (kinds.iter().any(|k| k.waffle_pool().is_some()), &a.preload) {
            (false, _) => None,
            (true, Some(p)) => Some(p.clone()),
            (true, None) => {
                Some(emulation::find_library("libwaffle_preload.so", "WAFFLE_PRELOAD_SO", "waffle-preload")?)
            }
        };
        let slow_disk = match device {
            Some(d) => Some((emulation::find_library(slow_disk::LIBRARY, "WAFFLE_SLOWDISK_SO", "waffle-slowdisk")?, d)),
            None => None,
        };
        Ok(Libraries { preload, slow_disk, link })
    }

    /// `options` on the EMULATED device, if any: reads of `datadir`'s files wait for it.
    fn on_device(&self, options: ServerOptions, datadir: &Path) -> Result<ServerOptions, String> {
        let Some((library, device)) = &self.slow_disk else { return Ok(options) };
        let dir = datadir.canonicalize().map_err(|e| format!("{}: {e}", datadir.display()))?;
        let setting = slow_disk::format(&[slow_disk::SlowDisk { profile: *device, dir }])?;
        Ok(options.on_slow_disk(SlowDisk { library: library.clone(), setting }))
    }
}

/// The EMULATED lines of the report (none without `--device` or `--link`), and how.
fn emulation_notes(a: &MysqlArgs) -> Vec<String> {
    let device = DeviceProfile::by_name(a.device.trim()).ok().flatten();
    let link = LinkProfile::by_name(a.link.trim()).ok().flatten();
    let mut notes = report::emulation_notes(device.as_slice(), link.as_slice());
    if !notes.is_empty() {
        notes.push(
            "EMULATED outside the server and the preload: devices by libwaffle_slowdisk.so under every mariadbd \
             (its datadir), links by a TCP proxy in front of each memcached node"
                .into(),
        );
    }
    notes
}

/// Whether the server `s` has `library` loaded (its memory map names it):
/// a run labelled EMULATED must not run on the real disk.
fn check_loaded(s: &Server, library: &Path) -> Result<(), String> {
    let pid = s.pid().ok_or("the server is not running")?;
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).map_err(|e| format!("mariadbd's maps: {e}"))?;
    let name = library.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    if maps.lines().any(|l| l.ends_with(name)) {
        Ok(())
    } else {
        Err(format!("mariadbd runs without {name}: its EMULATED disk is not in force"))
    }
}

fn run_config(
    tools: &Tools,
    a: &MysqlArgs,
    ds: &Dataset,
    kind: &Kind,
    budget: u64,
    libs: &Libraries,
) -> Result<Vec<RunResult>, String> {
    let datadir = a.dir.join(format!("run-{}", kind.name()));
    let _ = std::fs::remove_dir_all(&datadir);
    server::copy_datadir(&ds.template, &datadir)?;
    let _ = std::fs::remove_file(datadir.join("waffle-dataset-ready"));
    let device = a.device.trim().to_string();
    let emulated = libs.slow_disk.is_some();
    let is_waffle = kind.waffle_pool().is_some();
    let small = kind.waffle_pool().unwrap_or(budget);
    let (nodes, grid, flash_files) =
        if is_waffle { start_grid(a, budget, libs.link, kind.flash_bytes())? } else { (Vec::new(), None, Vec::new()) };
    let node_addrs: Vec<String> = nodes.iter().map(Node::addr).collect();
    let options = match (kind, &grid) {
        (Kind::Stock | Kind::Stock2x | Kind::StockAt { .. }, _) => ServerOptions::stock(kind.buffer_pool(budget)),
        (Kind::Waffle { .. }, grid) => {
            let env = vec![
                ("WAFFLE_GRID".to_string(), grid.as_ref().map(|g| g.addrs.join(",")).unwrap_or_default()),
                ("WAFFLE_LOCAL".to_string(), (budget - small).to_string()),
                ("WAFFLE_TIMEOUT_MS".to_string(), a.timeout.timeout_ms.to_string()),
                // The default, as an operator runs it: at 200 ms the stats writer was 0.4% of
                // mariadbd's samples, a cost of the benchmark's (issue 33 item 3).
                ("WAFFLE_STATS_INTERVAL_MS".to_string(), "1000".to_string()),
            ];
            let library = libs.preload.clone().ok_or("libwaffle_preload.so was not looked for")?;
            ServerOptions::waffle(small, Preload { library, env })
        }
    };
    let options = libs.on_device(options, &datadir)?;
    eprintln!(
        "waffle bench mysql: {}{}: buffer pool {} MiB{}",
        kind.name(),
        if emulated { format!(" (EMULATED {device})") } else { String::new() },
        options.buffer_pool_bytes >> 20,
        if is_waffle {
            format!(", L1 {} MiB, grid {} x {} MiB", (budget - small) >> 20, a.nodes, (budget >> 20) / a.nodes as u64)
        } else {
            String::new()
        }
    );
    let s = Server::start(tools, &datadir, options)?;
    if let Some((library, _)) = &libs.slow_disk {
        check_loaded(&s, library)?;
    }
    let mut warmed = None;
    if is_waffle && a.warm {
        // InnoDB opens a tablespace when a statement first uses its table: the warm reads open ones.
        for t in 1..=a.tables {
            s.sql(&format!("SELECT 1 FROM sbtest.sbtest{t} LIMIT 1"))?;
        }
        let w = waffle_warm_client::mysql::warm(&s.stats_path(), &["sbtest/*".to_string()], None)?;
        eprintln!("waffle bench mysql: waffle: {}", w.summary());
        warmed = Some(w);
    }
    let mut out = Vec::new();
    for w in &a.workloads {
        let mut args = server::sysbench_args(&s, a.tables, ds.table_size);
        args.push(format!("--threads={}", a.threads));
        args.push(format!("--rand-type={}", a.rand_type));
        args.push("--report-interval=0".into());
        if a.warmup > 0 {
            let mut warm = args.clone();
            warm.extend([format!("--time={}", a.warmup), w.clone(), "run".into()]);
            server::sysbench(tools, &warm, Duration::from_secs(a.warmup + 300))?;
        }
        let c0 = innodb_status(&s)?;
        let t0 = Instant::now();
        let before = if is_waffle { fresh_stats(&s, t0) } else { None };
        let flash_before = (!flash_files.is_empty()).then(|| flash::counters(&node_addrs));
        let mut measured = args.clone();
        measured.extend([format!("--time={}", a.duration), w.clone(), "run".into()]);
        let r = server::sysbench(tools, &measured, Duration::from_secs(a.duration + 300))?;
        let t1 = Instant::now();
        let flash = flash_before.map(|b| flash::traffic(&b, &flash::counters(&node_addrs), &flash_files));
        let c1 = innodb_status(&s)?;
        let waffle = match (&before, is_waffle) {
            (Some(b), true) => fresh_stats(&s, t1).map(|after| WaffleDelta::between(b.cache(), after.cache())),
            _ => None,
        };
        eprintln!("waffle bench mysql: {} {}: {:.1} tps, p95 {:.2} ms", kind.name(), w, r.tps, r.latency_p95_ms);
        out.push(RunResult {
            round: 1,
            config: kind.name().into(),
            workload: w.clone(),
            sysbench: r,
            buffer_pool_bytes: kind.buffer_pool(budget),
            bp_requests: c1.requests.saturating_sub(c0.requests),
            bp_misses: c1.misses.saturating_sub(c0.misses),
            bp_flushed: c1.flushed.saturating_sub(c0.flushed),
            waffle,
            warm: warmed.take(),
            flash,
        });
    }
    if is_waffle {
        if let Some(v) = s.stats().and_then(|v| StatsSnapshot::from_json(&v).ok()) {
            eprint!("{}", waffle_stats_text::render(&v, "waffle stats at the end of the waffle configuration"));
        }
    }
    s.shutdown()?;
    drop(grid);
    drop(nodes);
    flash::remove(&flash_files);
    let _ = std::fs::remove_dir_all(&datadir);
    Ok(out)
}

fn pct(x: Option<f64>) -> String {
    x.map_or("-".into(), |v| format!("{:.1}%", v * 100.0))
}

#[allow(clippy::too_many_arguments)]
fn table(
    runs: &[RunResult],
    summary: &[Summary],
    budget: u64,
    data: u64,
    a: &MysqlArgs,
    table_size: u64,
    small: u64,
) -> String {
    use std::fmt::Write as _;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "\nsysbench on MariaDB: {} tables x {} rows (~{} MiB), {} threads, {}, budget B = {} MiB; waffle: buffer pool {} MiB + L1 {} MiB (waffle@S: S + B - S), grid {} MiB on {} nodes{}",
        a.tables,
        table_size,
        data >> 20,
        a.threads,
        a.rand_type,
        budget >> 20,
        small >> 20,
        (budget - small) >> 20,
        budget >> 20,
        a.nodes,
        if a.link.trim() == "loopback" { String::new() } else { format!(" over an EMULATED {} link", a.link.trim()) }
    );
    if a.device.trim() != "real" {
        let _ = writeln!(
            o,
            "disk: EMULATED {} under every configuration (libwaffle_slowdisk.so under every server: reads of its datadir \
             that the page cache does not answer wait for it, InnoDB's O_DIRECT page reads all do; writes do not)",
            a.device.trim()
        );
    }
    let rounds = a.rounds.rounds.max(1);
    if rounds > 1 {
        let _ = writeln!(
            o,
            "{rounds} rounds, interleaved, each on a fresh server: the median round's figures (by tps), \
             tps min..max of all rounds, vs stock = the ratio of the medians"
        );
    }
    let _ = writeln!(
        o,
        "{:<16} {:<13} {:>8} {:>15} {:>8} {:>8} {:>7} {:>10} {:>8} {:>7} {:>7} {:>10}",
        "workload",
        "config",
        "tps",
        "tps min..max",
        "vs stock",
        "p95 ms",
        "BP hit",
        "BP miss/s",
        "BP wr/tx",
        "L1",
        "grid",
        "disk rd/s"
    );
    for sm in summary {
        let r = &runs[sm.median];
        let ratio = sm.ratio_to_stock.map_or("-".into(), |x| format!("{x:.2}x"));
        let range = format!("{:.1}..{:.1}", sm.tps_min, sm.tps_max);
        let secs = a.duration as f64;
        let (l1, l2, disk) = match &r.waffle {
            Some(w) => {
                let (l1, l2, disk, reads) = w.split();
                let f = |n: u64| {
                    if reads == 0 {
                        "-".to_string()
                    } else {
                        format!("{:.1}%", n as f64 * 100.0 / reads as f64)
                    }
                };
                (f(l1), f(l2), format!("{:.0}", disk as f64 / secs))
            }
            None => ("-".into(), "-".into(), format!("{:.0}", r.bp_misses as f64 / secs)),
        };
        let _ = writeln!(
            o,
            "{:<16} {:<13} {:>8.1} {:>15} {:>8} {:>8.2} {:>7} {:>10.0} {:>8} {:>7} {:>7} {:>10}",
            r.workload,
            r.config,
            r.sysbench.tps,
            range,
            ratio,
            r.sysbench.latency_p95_ms,
            pct(r.bp_hit()),
            r.bp_misses as f64 / secs,
            r.bp_writes_per_txn().map_or("-".into(), |x| format!("{x:.2}")),
            l1,
            l2,
            disk
        );
    }
    if rounds > 1 {
        for sm in summary {
            let tps: Vec<String> = sm.tps_rounds.iter().map(|t| format!("{t:.1}")).collect();
            let vs = match median_round(&sm.ratio_to_stock_rounds) {
                Some((_, lo, hi)) if sm.config != "stock" => format!("; vs stock per round {lo:.2}x..{hi:.2}x"),
                _ => String::new(),
            };
            let _ = writeln!(
                o,
                "rounds: {} {}: tps {} (median: round {}){vs}",
                sm.workload,
                sm.config,
                tps.join(", "),
                runs[sm.median].round
            );
        }
    }
    for r in runs.iter().filter(|r| r.flash.is_some()) {
        let f = r.flash.as_ref().expect("filtered");
        let _ = writeln!(
            o,
            "flash: {} {} round {}: {} MiB, {} values on it; the nodes' hits: {} from RAM, {} from flash ({}), {} \
             flash misses; {:.1} MiB written; {} of the files in the page cache at the end",
            r.workload,
            r.config,
            r.round,
            f.file_bytes >> 20,
            f.items,
            f.ram_hits,
            f.flash_hits,
            pct(f.flash_share()),
            f.flash_misses,
            f.bytes_written as f64 / (1 << 20) as f64,
            pct(f.page_cache_share)
        );
    }
    for r in runs.iter().filter(|r| r.warm.is_some()) {
        let w = r.warm.as_ref().expect("filtered");
        let round = if rounds > 1 { format!(" (round {})", r.round) } else { String::new() };
        let _ = writeln!(o, "waffle{round}: {}", w.summary());
    }
    let _ = writeln!(
        o,
        "BP: InnoDB's buffer pool (hit ratio of page requests; misses per second; pages it wrote per transaction). \
         waffle@S: buffer pool S, L1 B - S. L1, grid: share of the buffer pool's misses \
         Waffle answered from its local pool and from memcached. disk rd/s: page reads that reached the disk per second."
    );
    o
}

fn run_json(r: &RunResult) -> Value {
    json!({
        "round": r.round,
        "config": r.config,
        "workload": r.workload,
        "tps": r.sysbench.tps,
        "qps": r.sysbench.qps,
        "latency_p95_ms": r.sysbench.latency_p95_ms,
        "latency_avg_ms": r.sysbench.latency_avg_ms,
        "transactions": r.sysbench.transactions,
        "ignored_errors": r.sysbench.ignored_errors,
        "buffer_pool_requests": r.bp_requests,
        "buffer_pool_misses": r.bp_misses,
        "buffer_pool_bytes": r.buffer_pool_bytes,
        "buffer_pool_pages_flushed": r.bp_flushed,
        "buffer_pool_writes_per_txn": r.bp_writes_per_txn(),
        "buffer_pool_hit_ratio": r.bp_hit(),
        "waffle": r.waffle,
        "warm": r.warm,
        "flash": r.flash,
    })
}

/// `results`: per workload and configuration, the median round's run with the spread and the
/// ratio of the medians; `runs`: every round's run, in the order they ran.
#[allow(clippy::too_many_arguments)]
fn to_json(
    runs: &[RunResult],
    summary: &[Summary],
    a: &MysqlArgs,
    budget: u64,
    data: u64,
    table_size: u64,
    small: u64,
) -> Value {
    let results: Vec<Value> = summary
        .iter()
        .map(|sm| {
            let mut v = run_json(&runs[sm.median]);
            if let Some(m) = v.as_object_mut() {
                m.insert("median_round".into(), json!(runs[sm.median].round));
                m.insert("tps_rounds".into(), json!(sm.tps_rounds));
                m.insert("tps_min".into(), json!(sm.tps_min));
                m.insert("tps_max".into(), json!(sm.tps_max));
                m.insert("ratio_to_stock".into(), json!(sm.ratio_to_stock));
                m.insert("ratio_to_stock_rounds".into(), json!(sm.ratio_to_stock_rounds));
            }
            v
        })
        .collect();
    json!({
        "benchmark": "mysql",
        "command": report::invocation(),
        "budget_bytes": budget,
        "data_bytes": data,
        "tables": a.tables,
        "table_size": table_size,
        "threads": a.threads,
        "rand_type": a.rand_type,
        "warmup_s": a.warmup,
        "duration_s": a.duration,
        "waffle_buffer_pool_bytes": small,
        "waffle_local_bytes": budget - small,
        "grid_bytes": budget,
        "nodes": a.nodes,
        "link": a.link,
        "device": a.device,
        "emulated": emulation_notes(a),
        "rounds": a.rounds.rounds.max(1),
        "results": results,
        "runs": runs.iter().map(run_json).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(round: usize, config: &str, workload: &str, tps: f64) -> RunResult {
        RunResult {
            round,
            config: config.into(),
            workload: workload.into(),
            sysbench: SysbenchResult { tps, ..Default::default() },
            buffer_pool_bytes: 0,
            bp_requests: 0,
            bp_misses: 0,
            bp_flushed: 0,
            waffle: None,
            warm: None,
            flash: None,
        }
    }

    #[test]
    fn a_waffle_configuration_may_have_flash_named_as_given() {
        let (budget, default_pool) = (32 << 20, 6 << 20);
        let k = |s: &str| Kind::parse(s, budget, default_pool);
        let f = k("waffle+flash").unwrap();
        assert_eq!((f.name(), f.flash_bytes(), f.waffle_pool()), ("waffle+flash", 128 << 20, Some(6 << 20)));
        let f = k("waffle@16MiB+flash=256MiB").unwrap();
        assert_eq!(
            (f.name(), f.flash_bytes(), f.waffle_pool()),
            ("waffle@16MiB+flash=256MiB", 256 << 20, Some(16 << 20))
        );
        assert_eq!(k("waffle").unwrap().flash_bytes(), 0);
        for bad in ["stock+flash", "stock-2x+flash=1GiB"] {
            assert!(k(bad).unwrap_err().contains("only a waffle configuration"), "{bad}");
        }
        assert!(k("waffle+flash=1GB").unwrap_err().contains("'waffle+flash=1GB'"));
        assert!(k("waffle+flashy").unwrap_err().contains("=SIZE"));
    }

    #[test]
    fn waffle_configurations_name_their_buffer_pool_and_bad_ones_are_refused() {
        let (budget, default_pool) = (32 << 20, 6 << 20);
        let k = |s: &str| Kind::parse(s, budget, default_pool);
        assert_eq!(k("waffle").unwrap().waffle_pool(), Some(6 << 20));
        let split = k("waffle@16MiB").unwrap();
        assert_eq!((split.name(), split.waffle_pool()), ("waffle@16MiB", Some(16 << 20)));
        assert_eq!(k("stock").unwrap().waffle_pool(), None);
        let too_big = k("waffle@32MiB").unwrap_err();
        assert!(too_big.contains("waffle@32MiB") && too_big.contains("smaller than the budget"), "{too_big}");
        let too_small = k("waffle@1MiB").unwrap_err();
        assert!(too_small.contains("at least 6 MiB"), "{too_small}");
        let bad = k("waffle@lots").unwrap_err();
        assert!(bad.contains("--configs") && bad.contains("waffle@lots"), "{bad}");
        assert!(k("wafle").unwrap_err().contains("unknown configuration 'wafle'"));
        let stock_split = k("stock@28MiB").unwrap();
        assert_eq!((stock_split.name(), stock_split.waffle_pool()), ("stock@28MiB", None));
        assert_eq!(stock_split.buffer_pool(budget), 28 << 20);
        assert!(k("stock@64MiB").unwrap_err().contains("at most the budget"));
    }

    #[test]
    fn the_median_round_per_workload_and_configuration_and_the_ratio_of_medians() {
        // Three rounds, interleaved as they run: stock (ro, rw), waffle (ro, rw), ...
        let mut runs = Vec::new();
        for (round, s, w) in [(1, 100.0, 90.0), (2, 120.0, 150.0), (3, 80.0, 100.0)] {
            runs.push(run(round, "stock", "oltp_read_only", s));
            runs.push(run(round, "stock", "oltp_read_write", s / 2.0));
            runs.push(run(round, "waffle", "oltp_read_only", w));
            runs.push(run(round, "waffle", "oltp_read_write", w / 2.0));
        }
        let sm = summarize(&runs);
        let names: Vec<(&str, &str)> = sm.iter().map(|s| (s.workload.as_str(), s.config.as_str())).collect();
        assert_eq!(
            names,
            [
                ("oltp_read_only", "stock"),
                ("oltp_read_only", "waffle"),
                ("oltp_read_write", "stock"),
                ("oltp_read_write", "waffle")
            ]
        );
        let (stock, waffle) = (&sm[0], &sm[1]);
        assert_eq!(runs[stock.median].round, 1);
        assert_eq!(runs[waffle.median].round, 3);
        assert_eq!(stock.tps_rounds, [100.0, 120.0, 80.0]);
        assert_eq!((waffle.tps_min, waffle.tps_max), (90.0, 150.0));
        assert_eq!(stock.ratio_to_stock, Some(1.0));
        assert_eq!(waffle.ratio_to_stock, Some(1.0)); // 100 / 100: medians, not rounds
        assert_eq!(waffle.ratio_to_stock_rounds, [0.9, 1.25, 1.25]);
        assert_eq!(runs[sm[3].median].sysbench.tps, 50.0);
    }

    #[test]
    fn without_stock_there_is_no_ratio() {
        let runs = vec![run(1, "waffle", "oltp_read_only", 10.0), run(2, "waffle", "oltp_read_only", 30.0)];
        let sm = summarize(&runs);
        assert_eq!(sm.len(), 1);
        assert_eq!(sm[0].ratio_to_stock, None);
        assert!(sm[0].ratio_to_stock_rounds.is_empty());
        assert_eq!(runs[sm[0].median].round, 2);
    }
}
