//! `waffle`: the demo, local grid nodes, benchmarks, the latency probe, warming and stats. This file
//! parses the command line. Operator commands are this crate's own: `waffle warm` ([`warm`], over
//! waffle-warm-client), `waffle stats` ([`stats`]), `waffle nodes` (over waffle-nodes). The
//! benchmarks (`demo`, `bench`, `probe`) are waffle-bench's; their flags are parsed here.

mod node_flags;
mod stats;
mod warm;

use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use clap::{Args, Parser, Subcommand};
use node_flags::{node_flash, node_memory, node_page_size};
use waffle_bench::args::{codec, device, link, local, size, Codec, GridTimeout, PageSize, Rounds};
use waffle_bench::bench::configs::Amount;
use waffle_bench::bench::oltp::Dist;
use waffle_bench::bench::report::Output;
use waffle_bench::bench::{self, BenchOptions, SweepOptions};
use waffle_bench::capacity::{self, CapacityOptions};
use waffle_bench::demo::{self, DemoOptions};
use waffle_bench::mysql;
use waffle_bench::probe::{self, ProbeOptions};
use waffle_emulation::LinkProfile;

#[derive(Parser)]
#[command(name = "waffle", version, about = "Waffle: a remote buffer cache for databases on a memcached grid")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start two local memcached nodes and compare a read workload with the grid off and on.
    Demo {
        /// Database size, e.g. 64MiB.
        #[arg(long, default_value = "64MiB", value_parser = size)]
        data: u64,
        /// Waffle's local pool (L1), e.g. 8MiB (at least 4KiB).
        #[arg(long, default_value = "8MiB", value_parser = local)]
        local: u64,
        /// SQLite's own page cache per connection, in KiB.
        #[arg(long, default_value_t = 256)]
        sqlite_cache_kib: u64,
        /// Reader threads (one connection each).
        #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=64))]
        threads: u64,
        /// Measured seconds per configuration.
        #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=3600))]
        seconds: u64,
        #[command(flatten)]
        page: PageSize,
        #[command(flatten)]
        timeout: GridTimeout,
        /// Backing devices to run on, comma-separated: real (this machine's disk)
        /// and EMULATED profiles hdd-10k, ssd-2009, nvme, cloud-block (docs/benchmarks.md).
        #[arg(long, default_value = "real,hdd-10k", value_delimiter = ',', value_parser = device)]
        devices: Vec<String>,
        /// Where the database goes (reused while its parameters match).
        #[arg(long, default_value = "waffle-demo")]
        dir: PathBuf,
    },
    /// Reproduce the seeds' experiments: a workload under several configurations, one after the other
    /// on the same data (docs/benchmarks.md). `waffle bench sweep` varies the memory budget.
    Bench(Box<BenchCmd>),
    /// Latency against concurrency: 16 KiB random O_DIRECT disk reads, bare memcached gets, waffle grid hits.
    Probe(ProbeArgs),
    /// Print stats files (the MySQL/MariaDB preload's waffle-stats.json, a SQLite database's
    /// waffle_stats_file) for people, as JSON, or as Prometheus metrics (`--format prometheus`,
    /// or served over HTTP with `--listen ADDR`).
    Stats(stats::StatsArgs),
    /// Warm a database ahead of its readers: read it (or the named tables and indexes) in large
    /// sequential reads into L1 and past L1 into the grid, with a progress bar (PRAGMA waffle_warm).
    Warm(warm::WarmArgs),
    /// Run local memcached nodes on free loopback ports until interrupted (SIGINT, SIGTERM),
    /// then stop them; or print the memcached command for a node of your own (--print-flags).
    Nodes(NodesArgs),
}

#[derive(Args)]
struct NodesArgs {
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=16))]
    count: u64,
    /// Memory per node, whole MiB from 8MiB to 64GiB, e.g. 64MiB (memcached's -m).
    #[arg(long = "memory", value_name = "SIZE", default_value = "64MiB", value_parser = node_memory)]
    memory_mib: u32,
    /// Start memcached with slab classes for this database page size (README, "memcached for Waffle"):
    /// a power of two from 512 to 64KiB; 0: memcached's defaults.
    #[arg(long, default_value = "4096", value_parser = node_page_size)]
    page_size: u32,
    /// Give each node a flash tier (memcached's extstore) in this file, of this size per node
    /// (whole MiB, at least 64MiB), e.g. /srv/flash/waffle:100GiB; with --count above 1, node N
    /// uses PATH.N. docs/flash-tier.md says how to size RAM against it.
    #[arg(long, value_name = "PATH:SIZE", value_parser = node_flash)]
    ssd: Option<waffle_nodes::flash::Flash>,
    /// Print the memcached command for --page-size and --memory (for your own nodes) and exit.
    #[arg(long)]
    print_flags: bool,
    /// With --print-flags: the address memcached listens on, a private one (never every interface).
    #[arg(long, default_value = "127.0.0.1", requires = "print_flags", value_parser = waffle_nodes::command::listen_addr)]
    listen: IpAddr,
    /// With --print-flags: the port memcached listens on.
    #[arg(long, default_value_t = waffle_nodes::command::DEFAULT_PORT, requires = "print_flags")]
    port: u16,
}

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
struct BenchCmd {
    #[command(subcommand)]
    sub: Option<BenchSub>,
    #[command(flatten)]
    args: BenchArgs,
}

#[derive(Subcommand)]
enum BenchSub {
    /// Throughput against the local memory budget (% of the data) for local and grid: seed 003's figure.
    Sweep(SweepArgs),
    /// Redraw a `waffle bench` chart from its --json report (no benchmark is run).
    Replot {
        /// The report written by `waffle bench --json`.
        #[arg(long)]
        json: PathBuf,
        /// Where the PNG goes.
        #[arg(long)]
        charts: PathBuf,
    },
    /// MariaDB stock and under libwaffle_preload.so: the real sysbench, side by side (docs/benchmarks.md).
    Mysql(mysql::bench::MysqlArgs),
    /// Pages held per MiB of memcached for each codec and slab setting, and each codec's speed,
    /// on a workload's dataset (default tpcc).
    Capacity(CapacityArgs),
}

#[derive(Args)]
struct CapacityArgs {
    #[command(flatten)]
    args: BenchArgs,
    /// Codecs to compare, as waffle_compress spells them.
    #[arg(long, value_delimiter = ',', default_value = "off,lz4,zstd:-3,zstd:1,zstd:3", value_parser = codec)]
    codecs: Vec<Codec>,
    /// memcached memory of each fill, whole MiB from 8MiB to 64GiB.
    #[arg(long = "node-memory", value_name = "SIZE", default_value = "64MiB", value_parser = node_memory)]
    node_memory_mib: u32,
    /// memcached flag sets to compare, separated by ';': defaults, waffle (the plan for the
    /// page size), or flags as given.
    #[arg(long, value_delimiter = ';', default_value = "defaults;waffle")]
    slabs: Vec<String>,
    /// Pages of the dataset used, spread over the file.
    #[arg(long, default_value_t = 50_000, value_parser = clap::value_parser!(u64).range(100..=10_000_000))]
    pages: u64,
}

#[derive(Args, Clone)]
struct BenchArgs {
    /// oltp-read-only (sysbench), tpcc (TPC-C-like, NOTPM) or scan (full-table aggregates).
    #[arg(long, default_value = "oltp-read-only")]
    workload: String,
    /// Configurations, in order: local, grid, grid:N, all-local, stock; grid[:N]@LINK for an emulated link,
    /// CONFIG/DEVICE for an emulated device. Default: local,grid,all-local (sweep: local,grid).
    /// CONFIG+restart also measures a clean close and reopen after the run (--restart-duration
    /// seconds against the steady state); +nohot opens with waffle_hot_list=off (the control).
    #[arg(long, value_delimiter = ',')]
    configs: Option<Vec<String>>,
    /// Database size (oltp-read-only, scan), e.g. 256MiB.
    #[arg(long, default_value = "256MiB", value_parser = size)]
    data: u64,
    /// Local memory budget B (SQLite's caches + L1): a size or a percentage of the database file.
    #[arg(long, default_value = "25%", value_parser = Amount::parse)]
    memory: Amount,
    /// SQLite's page caches, all connections together: a size or a percentage of B.
    #[arg(long, default_value = "5%", value_parser = Amount::parse)]
    sqlite_cache: Amount,
    /// memcached memory of the grid configurations (L2), all nodes together: a size or a percentage of B.
    #[arg(long, default_value = "100%", value_parser = Amount::parse)]
    grid_memory: Amount,
    /// Threads, one connection each (default 16, as in the seeds; scan: 1).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=256))]
    threads: Option<u64>,
    /// Seconds of workload after the warm-up pass, per configuration (default 10; sweep 5).
    #[arg(long)]
    warmup: Option<f64>,
    /// Measured seconds per configuration (default 30; sweep 10).
    #[arg(long)]
    duration: Option<f64>,
    /// Seconds of workload measured after a CONFIG+restart's reopen (default 30).
    #[arg(long)]
    restart_duration: Option<f64>,
    #[command(flatten)]
    page: PageSize,
    /// Key distribution of oltp-read-only: uniform, pareto[:h] (sysbench, h=0.2), zipf[:theta].
    #[arg(long, default_value = "uniform", value_parser = Dist::parse)]
    dist: Dist,
    /// TPC-C warehouses.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=1000))]
    warehouses: u64,
    /// TPC-C items (specification: 100000); fewer loads faster.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(100..=100_000))]
    items: u64,
    /// TPC-C customers (and orders) per district (specification: 3000).
    #[arg(long, default_value_t = 3000, value_parser = clap::value_parser!(u64).range(30..=3000))]
    customers: u64,
    /// EMULATED backing device of the waffle configurations: real, hdd-10k, ssd-2009, nvme, cloud-block.
    #[arg(long, default_value = "real", value_parser = device)]
    device: String,
    /// EMULATED link of the grid configurations: loopback (real), 10gbe, 1gbe, 100mb, dolphin.
    #[arg(long, default_value = "loopback", value_parser = link)]
    link: String,
    #[command(flatten)]
    timeout: GridTimeout,
    /// Where datasets go (reused while their parameters match).
    #[arg(long, default_value = "waffle-bench")]
    dir: PathBuf,
    #[command(flatten)]
    output: Output,
    /// Seed of the workload's random choices.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[command(flatten)]
    rounds: Rounds,
    /// Warm every waffle configuration with PRAGMA waffle_warm instead of a pass over every table
    /// and index (as CONFIG+warm does for one); the report says how long it took and what it filled.
    #[arg(long)]
    warm: bool,
    /// tpcc: let write transactions wait in SQLite's busy handler only, without the
    /// process-wide writer mutex they queue on by default.
    #[arg(long)]
    no_writer_gate: bool,
}

#[derive(Args)]
struct SweepArgs {
    #[command(flatten)]
    args: BenchArgs,
    /// Budgets to run, as percentages of the data.
    #[arg(long, value_delimiter = ',', default_value = "10,25,50,75,100,120")]
    points: Vec<f64>,
    /// Devices, one set of lines each (default: --device).
    #[arg(long, value_delimiter = ',', value_parser = device)]
    devices: Option<Vec<String>>,
}

#[derive(Args)]
struct ProbeArgs {
    /// Concurrency levels.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16,32")]
    threads: Vec<usize>,
    /// Seconds per series and concurrency level.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Size of the file read at random.
    #[arg(long, default_value = "256MiB", value_parser = size)]
    file_size: u64,
    /// Bytes per read and per grid value.
    #[arg(long, default_value = "16KiB", value_parser = size)]
    value_size: u64,
    /// EMULATED device in front of the file: real, hdd-10k, ssd-2009, nvme, cloud-block.
    #[arg(long, default_value = "real", value_parser = device)]
    device: String,
    /// EMULATED link in front of the grid: loopback (real), 10gbe, 1gbe, 100mb, dolphin.
    #[arg(long, default_value = "loopback", value_parser = link)]
    link: String,
    /// Where the probe's scratch file goes (removed at the end).
    #[arg(long, default_value = "waffle-bench")]
    dir: PathBuf,
    /// Probe these memcached nodes, host:port,... (default: one the probe starts on loopback).
    /// Its values go under an identity of their own and are deleted at the end.
    #[arg(long)]
    grid: Option<String>,
    #[command(flatten)]
    output: Output,
}

fn bench_options(a: &BenchArgs, sweep: bool) -> Result<BenchOptions, String> {
    let d = BenchOptions::default();
    let seconds = |v: Option<f64>, default: f64, what: &str| -> Result<f64, String> {
        let v = v.unwrap_or(default);
        if !(0.0..=86_400.0).contains(&v) || (what == "duration" && v <= 0.0) {
            return Err(format!("--{what} {v}: seconds from 0 (warm-up) or more than 0 (duration) to a day"));
        }
        Ok(v)
    };
    let configs =
        a.configs.clone().unwrap_or_else(
            || {
                if sweep {
                    vec!["local".into(), "grid".into()]
                } else {
                    d.configs.clone()
                }
            },
        );
    // --warm: every configuration with a waffle to warm.
    let configs = configs
        .into_iter()
        .map(|c| if a.warm && c.trim() != "stock" && !c.contains("+warm") { format!("{c}+warm") } else { c })
        .collect();
    Ok(BenchOptions {
        workload: a.workload.clone(),
        configs,
        data_bytes: a.data,
        memory: a.memory,
        sqlite_cache: a.sqlite_cache,
        grid_memory: a.grid_memory,
        threads: a.threads.map(|t| t as usize),
        warmup_s: seconds(a.warmup, if sweep { 5.0 } else { 10.0 }, "warmup")?,
        duration_s: seconds(a.duration, if sweep { 10.0 } else { 30.0 }, "duration")?,
        restart_s: seconds(a.restart_duration, waffle_bench::bench::restart::DEFAULT_SECONDS, "duration")?,
        page_bytes: a.page.page_size,
        dist: a.dist.clone(),
        warehouses: a.warehouses,
        items: a.items,
        customers: a.customers,
        device: (a.device != "real").then(|| a.device.clone()),
        link: LinkProfile::by_name(&a.link)?,
        timeout_ms: a.timeout.timeout_ms,
        dir: a.dir.clone(),
        output: a.output.clone(),
        seed: a.seed,
        rounds: a.rounds.rounds as usize,
        writer_gate: !a.no_writer_gate,
    })
}

fn run_bench(cmd: BenchCmd) -> Result<(), String> {
    match cmd.sub {
        None => bench::run(&bench_options(&cmd.args, false)?).map(|_| ()),
        Some(BenchSub::Mysql(m)) => mysql::bench::run(&m).map(|_| ()),
        Some(BenchSub::Capacity(c)) => capacity::run(&CapacityOptions {
            bench: bench_options(&c.args, false)?,
            codecs: c.codecs,
            node_mib: c.node_memory_mib,
            max_pages: c.pages as usize,
            slabs: c.slabs,
        })
        .map(|_| ()),
        Some(BenchSub::Replot { json, charts }) => {
            let file = bench::replot(&json, &charts)?;
            println!("chart: {}", file.display());
            Ok(())
        }
        Some(BenchSub::Sweep(s)) => {
            let bench = bench_options(&s.args, true)?;
            if s.points.is_empty() || s.points.iter().any(|p| !(*p > 0.0 && *p <= 1000.0)) {
                return Err("--points: percentages of the data, above 0 and at most 1000".into());
            }
            let devices = s.devices.clone().unwrap_or_else(|| vec![s.args.device.clone()]);
            let devices = devices.into_iter().map(|d| (d != "real").then_some(d)).collect();
            bench::sweep(&SweepOptions { bench, points: s.points.clone(), devices }).map(|_| ())
        }
    }
}

fn run_probe(a: ProbeArgs) -> Result<(), String> {
    if a.threads.is_empty() || a.threads.iter().any(|&t| !(1..=256).contains(&t)) {
        return Err("--threads: counts from 1 to 256".into());
    }
    if !(a.seconds > 0.0 && a.seconds <= 3600.0) {
        return Err("--seconds: more than 0, at most 3600".into());
    }
    if !(512..=(1 << 20)).contains(&a.value_size) || !a.value_size.is_multiple_of(512) {
        return Err("--value-size: a multiple of 512 from 512 bytes to 1 MiB".into());
    }
    if a.file_size < a.value_size {
        return Err("--file-size must hold at least one value".into());
    }
    probe::run(&ProbeOptions {
        threads: a.threads,
        seconds: a.seconds,
        file_bytes: a.file_size / a.value_size * a.value_size,
        value_bytes: a.value_size as usize,
        keys: 256,
        dir: a.dir,
        device: (a.device != "real").then_some(a.device),
        link: LinkProfile::by_name(&a.link)?,
        output: a.output,
        grid: a.grid,
        stop: stop_on_signals()?,
    })
    .map(|_| ())
}

/// A flag set by SIGINT, SIGTERM and SIGHUP instead of their default (the
/// process's end without a destructor): the command stops, its nodes and files
/// cleaned up, and returns.
fn stop_on_signals() -> Result<Arc<AtomicBool>, String> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [SIGINT, SIGTERM, SIGHUP] {
        signal_hook::flag::register(sig, Arc::clone(&stop)).map_err(|e| format!("cannot handle signal {sig}: {e}"))?;
    }
    Ok(stop)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo { data, local, sqlite_cache_kib, threads, seconds, page, timeout, devices, dir } => {
            if local >= data {
                Err(format!(
                    "--local ({local} bytes) must be smaller than --data ({data} bytes) for the demo to mean anything"
                ))
            } else {
                demo::run(&DemoOptions {
                    dir,
                    data_bytes: data,
                    local_bytes: local,
                    sqlite_cache_kib,
                    threads: threads as usize,
                    seconds,
                    page_bytes: page.page_size,
                    timeout_ms: timeout.timeout_ms,
                    devices,
                })
                .map(|_| ())
            }
        }
        Command::Bench(cmd) => run_bench(*cmd),
        Command::Probe(args) => run_probe(args),
        Command::Nodes(a) => run_nodes(&a),
        Command::Stats(a) => stats::run(&a),
        Command::Warm(a) => warm::run(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("waffle: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Slab classes for --page-size (0: memcached's); a node with flash starts its classes at the
/// header a value on flash leaves in RAM.
fn node_plan(a: &NodesArgs) -> Option<waffle_nodes::slabs::SlabPlan> {
    use waffle_nodes::slabs::SlabPlan;
    let plan = if a.ssd.is_some() { SlabPlan::for_flash_node } else { SlabPlan::for_node };
    (a.page_size != 0).then(|| plan(a.page_size, false, a.memory_mib))
}

/// Each node's memcached flags: the slab plan, and its own flash file (PATH.N if several).
fn node_args(a: &NodesArgs, plan: Option<&waffle_nodes::slabs::SlabPlan>) -> Vec<Vec<String>> {
    let count = a.count as usize;
    let flash_of = |i: usize| a.ssd.as_ref().map(|f| if count > 1 { f.for_node(i + 1) } else { f.clone() });
    let node = |i| plan.map(|p| p.args()).into_iter().chain(flash_of(i).map(|f| f.args())).flatten().collect();
    (0..count).map(node).collect()
}

fn run_nodes(a: &NodesArgs) -> Result<(), String> {
    use std::io::Write;
    use waffle_nodes::command::{default_user, NodeCommand};
    let plan = node_plan(a);
    if a.print_flags {
        let (listen, port, memory_mib, user) = (a.listen, a.port, a.memory_mib, default_user().into());
        let cmd = NodeCommand { listen, port, memory_mib, user, plan, flash: a.ssd.clone() };
        println!("{}", cmd.line());
        eprintln!("{}", cmd.exposure_note());
        return Ok(());
    }
    if let Some(f) = &a.ssd {
        f.check_here().map_err(|e| format!("invalid value '{}' for '--ssd': {e}", f.describe()))?;
    }
    // Before the nodes: a signal while they start stops them too.
    let stop = stop_on_signals()?;
    let mut group = waffle_nodes::group::Group::start_with_args(a.memory_mib, node_args(a, plan.as_ref()))
        .map_err(|e| format!("starting memcached: {e}"))?;
    println!("WAFFLE_GRID={}", group.grid());
    println!(
        "{} memcached nodes of {} MiB{} running on 127.0.0.1 until interrupted (Ctrl-C, SIGTERM)",
        a.count,
        a.memory_mib,
        a.ssd.as_ref().map(|f| format!(" and {} MiB of flash each", f.size_mib)).unwrap_or_default()
    );
    let _ = std::io::stdout().flush();
    let watched = group.watch(&stop);
    drop(group);
    watched.map_err(|e| format!("{e}; the other nodes are stopped"))?;
    eprintln!("waffle nodes: stopped");
    Ok(())
}
