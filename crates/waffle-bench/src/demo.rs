//! `waffle demo`: the whole idea in one run.
//!
//! Starts two memcached nodes on free loopback ports, builds a database
//! several times larger than the L1 it then uses, and runs the same random
//! point-read workload twice: grid off (L1 only, the rest from disk) and grid
//! on (L1, then the grid, filled first by a warm, then disk). Prints throughput, where reads were
//! answered, and the speedup; stops the nodes it started.
//!
//! On this machine's own disk the grid and the disk cost about the same, and
//! one run of each configuration measured the machine's load more than the
//! cache (0.53x to 2.13x in three demos beside a test suite): there the pair
//! runs [`REAL_DISK_ROUNDS`] times, off and on alternating, and the speedup is
//! the median of the rounds' ratios, printed with each of them. An emulated
//! disk's ratio is tens of times: one round says it.
//!
//! An EMULATED device (`--devices`) is libwaffle_slowdisk.so under this
//! process, the database seen through the device's directory
//! (`bench::emulation`); the library opens it as it would any file.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use waffle_core::stats::CacheSnapshot;
use waffle_nodes::Node;

use crate::bench::emulation;
use crate::dataset::{self, Spec};
use crate::open::{self, Settings};

/// Rounds of grid off, grid on, on this machine's disk.
pub const REAL_DISK_ROUNDS: usize = 3;

#[derive(Clone, Debug)]
pub struct DemoOptions {
    pub dir: PathBuf,
    pub data_bytes: u64,
    pub local_bytes: u64,
    pub sqlite_cache_kib: u64,
    pub threads: usize,
    pub seconds: u64,
    pub page_bytes: u32,
    pub timeout_ms: u64,
    /// Devices to run on, in order: "real" (this machine's disk) or an emulated profile name.
    pub devices: Vec<String>,
}

/// One configuration's measurements.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub device: String,
    /// 1, 2, ...: the round on its device.
    pub round: usize,
    pub name: &'static str,
    pub queries: u64,
    pub seconds: f64,
    pub l1_hits: u64,
    pub l2_hits: u64,
    pub disk_reads: u64,
    pub page_reads: u64,
    pub errors: u64,
    /// Median latency of a grid fetch and of a disk read during the measured run, microseconds.
    pub grid_p50_us: u64,
    pub disk_p50_us: u64,
}

impl Outcome {
    pub fn qps(&self) -> f64 {
        self.queries as f64 / self.seconds.max(1e-9)
    }
    fn pct(&self, n: u64) -> f64 {
        100.0 * n as f64 / self.page_reads.max(1) as f64
    }
}

pub fn run(opts: &DemoOptions) -> Result<Vec<Outcome>, String> {
    std::fs::create_dir_all(&opts.dir).map_err(|e| format!("cannot create {}: {e}", opts.dir.display()))?;
    let mut emulated = Vec::new();
    for d in &opts.devices {
        match waffle_emulation::DeviceProfile::by_name(d)? {
            Some(p) if !emulated.contains(&p) => emulated.push(p),
            _ => {}
        }
    }
    emulation::ensure_slow_disks(&opts.dir, &emulated)?;
    let path = opts.dir.join("demo.db");
    let spec = Spec::for_size(opts.data_bytes, opts.page_bytes);
    let file_bytes = dataset::ensure(&path, &spec).map_err(|e| format!("building {}: {e}", path.display()))?;

    // Each node gets as much as the whole file: memcached's per-item overhead and slab rounding are large.
    let node_mib = (file_bytes >> 20).max(16) as u32;
    let nodes = [Node::start_for_pages(node_mib, opts.page_bytes), Node::start_for_pages(node_mib, opts.page_bytes)];
    let nodes: Vec<Node> =
        nodes.into_iter().collect::<Result<_, _>>().map_err(|e| format!("starting memcached: {e}"))?;
    let grid: Vec<String> = nodes.iter().map(Node::addr).collect();

    println!(
        "waffle demo: {:.0} MiB database ({} rows), L1 {} MiB + SQLite cache {} KiB per connection, {} threads, {} s per configuration",
        file_bytes as f64 / (1 << 20) as f64,
        spec.rows,
        opts.local_bytes >> 20,
        opts.sqlite_cache_kib,
        opts.threads,
        opts.seconds
    );
    println!(
        "disks: {} (what the cache reads bypasses the page cache, waffle_direct_io=on; emulated profiles add service time on top of this machine's disk, by libwaffle_slowdisk.so; docs/benchmarks.md); the grid on is filled first by PRAGMA waffle_warm, and asked where it pays (the cost back-off, on as shipped)",
        opts.devices.iter().map(|d| device_label(d)).collect::<Vec<_>>().join(", ")
    );
    println!("grid: {} memcached nodes of {node_mib} MiB on loopback: {}", nodes.len(), grid.join(", "));

    let mut outcomes = Vec::new();
    // The database on each disk, every link made before any configuration runs (a new link is a new ctime).
    let paths = opts
        .devices
        .iter()
        .map(|d| if d == "real" { Ok(path.clone()) } else { emulation::on_device(&path, d, false) })
        .collect::<Result<Vec<_>, String>>()?;
    // It reopens warm from one disk to the next: the cache's state follows it from path to path.
    let mut last = path.clone();
    for (device, on) in opts.devices.iter().zip(paths) {
        emulation::carry_cache_state(&last, &on)?;
        last = on.clone();
        let rounds = if device == "real" { REAL_DISK_ROUNDS } else { 1 };
        for round in 1..=rounds {
            for (name, grid) in [("grid off", Vec::new()), ("grid on", grid.clone())] {
                let settings = Settings { grid, local_bytes: opts.local_bytes, timeout_ms: opts.timeout_ms };
                let mut o = measure(name, &on, &settings, spec.rows, opts, device != "real")?;
                o.device = device_label(device);
                o.round = round;
                outcomes.push(o);
            }
        }
    }
    drop(nodes);
    print_table(&outcomes);
    Ok(outcomes)
}

fn measure(
    name: &'static str,
    path: &std::path::Path,
    settings: &Settings,
    rows: u64,
    opts: &DemoOptions,
    emulated: bool,
) -> Result<Outcome, String> {
    let err = |e: rusqlite::Error| format!("{name}: {e}");
    // An EMULATED device's reads wait unless the kernel's page cache answers them: whatever the
    // configurations before this one left cached (on the real disk, the same inode) goes first,
    // so that each starts from the device. Before any connection opens: closing a descriptor of
    // the file would drop the POSIX locks SQLite's connections in this process hold.
    if emulated {
        emulation::drop_cached_pages(path)?;
    }
    let conns: Vec<_> = (0..opts.threads)
        .map(|_| open::open(path, settings, opts.sqlite_cache_kib))
        .collect::<Result<_, _>>()
        .map_err(err)?;
    // The grid filled first, as an operator would (`PRAGMA waffle_warm`, what
    // `waffle warm` runs; its pages are not declined by the back-off's trial):
    // the figures are steady state, and a slow disk's reads could not fill it
    // within the warm-up's seconds (hdd-10k: ~300 reads a second, 15,000 pages).
    if !settings.grid.is_empty() {
        let warmed =
            waffle_warm_client::sqlite::warm(&conns[0], None, None).map_err(|e| format!("{name}: warm: {e}"))?;
        println!("{}: {name}: {}", path.display(), warmed.summary());
    }

    // Warm-up: the same random reads for as long as the measurement, so L1
    // (and the grid, when on, from L1's evictions) hold what they can. A scan
    // would not do: its pages are read ahead and dropped, never pushed.
    let (conns, _, _) = run_reads(conns, rows, opts.seconds, 1000);
    let _: String = conns[0].query_row("PRAGMA waffle_stats=reset", [], |r| r.get(0)).map_err(err)?;
    let before = open::stats(&conns[0]).map_err(err)?;

    let (conns, queries, seconds) = run_reads(conns, rows, opts.seconds, 1);
    let after = open::stats(&conns[0]).map_err(err)?;
    drop(conns);

    let d = |f: fn(&CacheSnapshot) -> u64| f(&after) - f(&before);
    let l1 = d(|c| c.l1_hits) + d(|c| c.push_queue_hits);
    let page_reads = d(|c| c.l1_hits) + d(|c| c.l1_misses);
    Ok(Outcome {
        device: String::new(),
        round: 0,
        name,
        queries: queries.0,
        seconds,
        l1_hits: l1,
        l2_hits: d(|c| c.l2_hits),
        disk_reads: d(|c| c.disk_reads),
        page_reads,
        errors: queries.1,
        grid_p50_us: after.latency.l2.p50_us,
        disk_p50_us: after.latency.disk.p50_us,
    })
}

/// Random point reads on every connection for `seconds`; returns the
/// connections, (queries, errors) and the seconds it took.
fn run_reads(
    conns: Vec<rusqlite::Connection>,
    rows: u64,
    seconds: u64,
    seed: u64,
) -> (Vec<rusqlite::Connection>, (u64, u64), f64) {
    let stop = Arc::new(AtomicBool::new(false));
    let queries = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let workers: Vec<_> = conns
        .into_iter()
        .enumerate()
        .map(|(i, conn)| {
            let (stop, queries, errors) = (Arc::clone(&stop), Arc::clone(&queries), Arc::clone(&errors));
            thread::spawn(move || {
                let mut rng = SmallRng::seed_from_u64(seed * 1000 + i as u64);
                let mut stmt = conn.prepare("SELECT length(payload) FROM rows WHERE id = ?1").expect("prepare");
                while !stop.load(Ordering::Relaxed) {
                    let id = rng.gen_range(0..rows) as i64;
                    match stmt.query_row([id], |r| r.get::<_, i64>(0)) {
                        Ok(_) => queries.fetch_add(1, Ordering::Relaxed),
                        Err(_) => errors.fetch_add(1, Ordering::Relaxed),
                    };
                }
                drop(stmt);
                conn
            })
        })
        .collect();
    thread::sleep(Duration::from_secs(seconds));
    stop.store(true, Ordering::Relaxed);
    let conns: Vec<_> = workers.into_iter().map(|w| w.join().expect("worker")).collect();
    let took = start.elapsed().as_secs_f64();
    (conns, (queries.load(Ordering::Relaxed), errors.load(Ordering::Relaxed)), took)
}

fn device_label(d: &str) -> String {
    if d == "real" {
        "real disk".to_string()
    } else {
        format!("{d} (EMULATED)")
    }
}

fn print_table(outcomes: &[Outcome]) {
    println!();
    println!(
        "{:<20} {:>5} {:<9} {:>10} {:>8} {:>9} {:>9} {:>6} {:>9} {:>9}",
        "disk", "round", "config", "queries/s", "L1 hits", "grid hits", "disk reads", "errors", "grid p50", "disk p50"
    );
    for o in outcomes {
        println!(
            "{:<20} {:>5} {:<9} {:>10.0} {:>7.1}% {:>8.1}% {:>9.1}% {:>6} {:>6} us {:>6} us",
            o.device,
            o.round,
            o.name,
            o.qps(),
            o.pct(o.l1_hits),
            o.pct(o.l2_hits),
            o.pct(o.disk_reads),
            o.errors,
            o.grid_p50_us,
            o.disk_p50_us
        );
    }
    println!();
    for line in speedups(outcomes) {
        println!("{line}");
    }
}

/// One line per device: the median of its rounds' grid-on / grid-off ratios (each round's
/// listed when there are several), and the median fetch and disk read of the median round.
fn speedups(outcomes: &[Outcome]) -> Vec<String> {
    let mut devices: Vec<&str> = outcomes.iter().map(|o| o.device.as_str()).collect();
    devices.dedup();
    let mut lines = Vec::new();
    for device in devices {
        let mut pairs: Vec<(f64, &Outcome, &Outcome)> = outcomes
            .chunks(2)
            .filter_map(|pair| match pair {
                [off, on] if off.device == device => Some((on.qps() / off.qps().max(1e-9), off, on)),
                _ => None,
            })
            .collect();
        let each: Vec<String> = pairs.iter().map(|(r, _, _)| format!("{r:.2}x")).collect();
        pairs.sort_by(|a, b| a.0.total_cmp(&b.0));
        let Some(&(ratio, off, on)) = pairs.get(pairs.len() / 2) else { continue };
        let rounds = if each.len() > 1 {
            format!(", the median of {} rounds: {}", each.len(), each.join(", "))
        } else {
            String::new()
        };
        lines.push(format!(
            "{device}: speedup with the grid {ratio:.2}x{rounds} (median grid fetch {} us, median disk read {} us)",
            on.grid_p50_us, off.disk_p50_us
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(device: &str, round: usize, name: &'static str, queries: u64) -> Outcome {
        Outcome {
            device: device.into(),
            round,
            name,
            queries,
            seconds: 1.0,
            l1_hits: 0,
            l2_hits: 0,
            disk_reads: 0,
            page_reads: 0,
            errors: 0,
            grid_p50_us: round as u64,
            disk_p50_us: 10 * round as u64,
        }
    }

    #[test]
    fn the_speedup_is_the_median_of_the_rounds_ratios() {
        let o = [
            outcome("real disk", 1, "grid off", 100),
            outcome("real disk", 1, "grid on", 60),
            outcome("real disk", 2, "grid off", 100),
            outcome("real disk", 2, "grid on", 210),
            outcome("real disk", 3, "grid off", 100),
            outcome("real disk", 3, "grid on", 95),
            outcome("hdd-10k (EMULATED)", 1, "grid off", 10),
            outcome("hdd-10k (EMULATED)", 1, "grid on", 800),
        ];
        assert_eq!(
            speedups(&o),
            [
                "real disk: speedup with the grid 0.95x, the median of 3 rounds: 0.60x, 2.10x, 0.95x \
                 (median grid fetch 3 us, median disk read 30 us)",
                "hdd-10k (EMULATED): speedup with the grid 80.00x (median grid fetch 1 us, median disk read 10 us)",
            ]
        );
    }
}
