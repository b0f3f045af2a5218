//! What a benchmark reports: one result per configuration, ratios against
//! `local`, `all-local` and `stock`, a table on stdout and the same as JSON;
//! and what every report has (`waffle bench`, `bench sweep`, `probe`): the
//! EMULATED notes, the invocation, and [`Output`], its JSON file and charts.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::{json, Value};
use waffle_core::presence::DiskReason;
use waffle_emulation::{DeviceProfile, LinkProfile};

#[derive(Clone, Debug, Default, Serialize)]
pub struct Latency {
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub mean_ms: f64,
}

impl Latency {
    pub fn from_histogram(h: &hdrhistogram::Histogram<u64>) -> Latency {
        let ms = |us: u64| us as f64 / 1000.0;
        if h.is_empty() {
            return Latency::default();
        }
        Latency {
            p50_ms: ms(h.value_at_quantile(0.50)),
            p95_ms: ms(h.value_at_quantile(0.95)),
            p99_ms: ms(h.value_at_quantile(0.99)),
            max_ms: ms(h.max()),
            mean_ms: h.mean() / 1000.0,
        }
    }
}

/// Where the page reads that reached the VFS (SQLite cache misses) were
/// answered, as fractions of them.
///
/// With read-ahead (sequential reads), a miss that fetches a window is
/// answered from the grid or the disk together with the pages after it; such
/// a read is counted in `read_ahead` and shared between `l2` and `disk` in
/// the proportion of the window pages each supplied.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Hits {
    pub vfs_reads: u64,
    /// L1 hits, the push queue and read-ahead pages found in L1 included.
    pub l1: f64,
    pub l2: f64,
    pub disk: f64,
    /// l1 + l2: what stayed off the disk.
    pub l1_l2: f64,
    /// Reads that started a read-ahead window (part of l2 and disk above).
    pub read_ahead: f64,
    /// Pages read from the disk in all, read-ahead included (I/O volume).
    pub disk_pages: u64,
    /// Pages windows read ahead of their reader, from the disk and from the
    /// grid, and of those the ones a read used (the rest: dropped unread, or
    /// still in L1 at the end).
    pub ahead_pages_disk: u64,
    pub ahead_used_disk: u64,
    pub ahead_pages_l2: u64,
    pub ahead_used_l2: u64,
    /// Demand disk reads in the measured run (read-ahead windows apart), and
    /// why each happened (`disk_reasons` of `PRAGMA waffle_stats`, see
    /// `waffle_core::presence::DiskReason`): they sum to `disk_reads`.
    pub disk_reads: u64,
    pub disk_reasons: BTreeMap<String, u64>,
}

impl Hits {
    /// One line: why the demand reads went to the disk, as percentages of
    /// them (the reasons that occurred, in `DiskReason` order), and the pages
    /// read-ahead brought from the disk apart.
    pub fn disk_reasons_line(&self) -> String {
        let reasons: Vec<String> = DiskReason::ALL
            .iter()
            .filter_map(|r| {
                let n = self.disk_reasons.get(r.name()).copied().unwrap_or(0);
                (n > 0).then(|| format!("{} {:.1}%", r.name(), 100.0 * n as f64 / self.disk_reads as f64))
            })
            .collect();
        let reasons = if reasons.is_empty() { String::new() } else { format!(": {}", reasons.join(", ")) };
        format!(
            "{} disk reads{reasons}; read-ahead apart: {} pages from the disk",
            self.disk_reads, self.ahead_pages_disk
        )
    }
}

/// "used/read (percent)" of pages read ahead from one source.
fn used_of(used: u64, read: u64) -> String {
    if read == 0 {
        return "0/0".into();
    }
    format!("{used}/{read} ({:.0}%)", 100.0 * used as f64 / read as f64)
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct GridTraffic {
    pub pushes: u64,
    pub push_drops: u64,
    pub pushed_bytes: u64,
    pub fetched_bytes: u64,
    /// Latency of a grid fetch (hit or miss) and of a disk read in the measured run, microseconds.
    pub l2_p50_us: u64,
    pub l2_p99_us: u64,
    pub disk_p50_us: u64,
    pub disk_p99_us: u64,
    pub rejects: u64,
    pub faults: u64,
    /// memcached's own view after the run, summed over nodes.
    pub memcached_items: u64,
    pub memcached_bytes: u64,
    pub memcached_limit_bytes: u64,
    pub memcached_evictions: u64,
    /// Pages the cache believed the grid held at the end (its presence set):
    /// against `memcached_items`, what memcached evicted that the cache still counts on.
    pub presence_pages: u64,
    /// Lookups not sent: the page was never pushed or was taken back (presence set) ...
    pub presence_skips: u64,
    /// ... or it was pushed longer ago than the grid is seen to keep pages (its reach) ...
    pub aged_skips: u64,
    /// ... or its node cost more than the disk read it would save (cost back-off).
    pub cost_skips: u64,
    /// The grid's reach at the end: how many pushes back it is seen to keep pages (0: no eviction seen).
    pub reach_pushes: u64,
    /// Evicted pages not pushed because their node was backed off.
    pub push_cost_skips: u64,
    /// Each node's status at the end of the run: health, counters, and its
    /// cost decision (`cost.state`, `cost.lookup_us`, `cost.saved_us`, `cost.reason`).
    pub nodes: Vec<serde_json::Value>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Memory {
    pub budget_bytes: u64,
    pub sqlite_cache_bytes: u64,
    pub sqlite_cache_per_connection_kib: u64,
    pub l1_bytes: u64,
    pub l2_bytes: u64,
    pub nodes: usize,
}

/// The cache's working-set estimate at the end of a run, against what the
/// bench knows: the warm-up's first pass reads every page of the tables and
/// indexes it scans, so while the run (warm-up included) is shorter than 15
/// minutes the 15-minute window must hold about that many distinct pages.
#[derive(Clone, Debug, Default, Serialize)]
pub struct WorkingSet {
    pub pages_1m: u64,
    pub pages_5m: u64,
    pub pages_15m: u64,
    /// Pages the warm-up pass read: every page of the file at the end of the
    /// run, or of the tables and indexes it reads (`Workload::prewarmed`) and page 1.
    pub known_pages: u64,
    /// pages_15m / known_pages; None when the run took longer than the window.
    pub ratio_15m: Option<f64>,
    pub advice: String,
}

impl WorkingSet {
    /// From `PRAGMA waffle_stats` (`after`), the pages known read and whether the whole run fits the 15-minute window.
    pub fn from_stats(after: &Value, known_pages: u64, run_within_15m: bool) -> Option<WorkingSet> {
        let ws = after.get("working_set")?;
        let n = |k: &str| ws[k].as_u64().unwrap_or(0);
        let ratio_15m = (run_within_15m && known_pages > 0).then(|| n("pages_15m") as f64 / known_pages as f64);
        Some(WorkingSet {
            pages_1m: n("pages_1m"),
            pages_5m: n("pages_5m"),
            pages_15m: n("pages_15m"),
            known_pages,
            ratio_15m,
            advice: ws["advice"].as_str().unwrap_or("").to_string(),
        })
    }
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct ConfigResult {
    pub name: String,
    pub vfs: String,
    pub device: String,
    pub link: String,
    pub emulated: bool,
    /// Reads libwaffle_slowdisk.so slowed over the measured run (None: no EMULATED device).
    pub emulated_reads: Option<u64>,
    pub memory: Memory,
    pub unit: String,
    pub throughput: f64,
    pub transactions: u64,
    pub seconds: f64,
    pub latency: Latency,
    pub per_kind: Vec<(String, u64)>,
    pub retries: u64,
    pub rollbacks: u64,
    pub errors: u64,
    /// Of the page requests SQLite's own caches saw, the fraction they answered.
    pub sqlite_cache_hit_ratio: Option<f64>,
    pub hits: Option<Hits>,
    pub grid: Option<GridTraffic>,
    /// The cache's working-set estimate against the file (waffle configurations).
    pub working_set: Option<WorkingSet>,
    /// `+warm`: how long `PRAGMA waffle_warm` took and what it filled.
    pub warm: Option<waffle_warm_client::Warmed>,
    /// `+restart`: the clean close and reopen after the measured run.
    pub restart: Option<super::restart::Restart>,
    /// Every counter of `PRAGMA waffle_stats` over the measured run (after minus before).
    pub counters: serde_json::Map<String, serde_json::Value>,
    pub ratio_to_local: Option<f64>,
    pub ratio_to_all_local: Option<f64>,
    pub ratio_to_stock: Option<f64>,
    /// With `--rounds N`: every round's throughput, in order (the result shown is the median round's).
    pub rounds: Vec<f64>,
}

/// The host's load while a run went, from /proc/loadavg (1-minute average).
pub fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(f64::NAN)
}

pub fn cores() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

fn finite(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

/// A configuration's kind without its link, device and warming (`grid:2@1gbe/hdd-10k+warm` -> `grid:2`).
pub fn base_name(name: &str) -> &str {
    name.split(['@', '/', '+']).next().unwrap_or(name)
}

/// Fills each result's ratios to the first `local`, `all-local` and `stock`
/// results (whatever their device: `local/hdd-10k` is a `local`).
pub fn fill_ratios(results: &mut [ConfigResult]) {
    let find = |name: &str| results.iter().find(|r| base_name(&r.name) == name).map(|r| r.throughput);
    let (local, all, stock) = (find("local"), find("all-local"), find("stock"));
    for r in results.iter_mut() {
        let ratio = |base: Option<f64>| base.filter(|b| *b > 0.0).and_then(|b| finite(r.throughput / b));
        r.ratio_to_local = ratio(local);
        r.ratio_to_all_local = ratio(all);
        r.ratio_to_stock = ratio(stock);
    }
}

fn pct(x: f64) -> String {
    format!("{:.1}%", 100.0 * x)
}

fn ratio(x: Option<f64>) -> String {
    x.map_or("-".into(), |v| format!("{v:.2}x"))
}

fn mib(b: u64) -> String {
    if b == 0 {
        "-".into()
    } else if b >= 10 << 20 {
        format!("{:.0}M", b as f64 / (1 << 20) as f64)
    } else {
        format!("{:.1}M", b as f64 / (1 << 20) as f64)
    }
}

/// The table on stdout.
pub fn print_table(results: &[ConfigResult]) {
    let unit = results.first().map(|r| r.unit.clone()).unwrap_or_default();
    println!();
    println!(
        "{:<14} {:>6} {:>6} {:>6} {:>10} {:>8} {:>8} {:>8} {:>7} {:>6} {:>6} {:>6} {:>6} {:>8} {:>8} {:>7} {:>7}",
        "config",
        "sqlite",
        "L1",
        "L2",
        unit,
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "SQLite$",
        "L1",
        "L2",
        "disk",
        "L1+L2",
        "grid out",
        "grid in",
        "/local",
        "/all-lc"
    );
    for r in results {
        let h = r.hits.clone().unwrap_or_default();
        let (hl1, hl2, hdisk, hsum) = if r.hits.is_some() {
            (pct(h.l1), pct(h.l2), pct(h.disk), pct(h.l1_l2))
        } else {
            ("-".into(), "-".into(), "-".into(), "-".into())
        };
        let g = r.grid.clone().unwrap_or_default();
        println!(
            "{:<14} {:>6} {:>6} {:>6} {:>10.1} {:>8.2} {:>8.2} {:>8.2} {:>7} {:>6} {:>6} {:>6} {:>6} {:>8} {:>8} {:>7} {:>7}",
            r.name,
            mib(r.memory.sqlite_cache_bytes),
            mib(r.memory.l1_bytes),
            mib(r.memory.l2_bytes),
            r.throughput,
            r.latency.p50_ms,
            r.latency.p95_ms,
            r.latency.p99_ms,
            r.sqlite_cache_hit_ratio.map_or("-".into(), pct),
            hl1,
            hl2,
            hdisk,
            hsum,
            if r.grid.is_some() { mib(g.pushed_bytes) } else { "-".into() },
            if r.grid.is_some() { mib(g.fetched_bytes) } else { "-".into() },
            ratio(r.ratio_to_local),
            ratio(r.ratio_to_all_local),
        );
    }
    let notes: Vec<String> = results
        .iter()
        .filter(|r| {
            r.retries > 0
                || r.rounds.len() > 1
                || r.errors > 0
                || r.rollbacks > 0
                || r.ratio_to_stock.is_some() && r.name != "stock"
                || r.hits.as_ref().is_some_and(|h| h.read_ahead > 0.0)
        })
        .map(|r| {
            let mut parts = Vec::new();
            if r.retries > 0 {
                parts.push(format!("{} busy retries", r.retries));
            }
            if r.rollbacks > 0 {
                parts.push(format!("{} intended rollbacks", r.rollbacks));
            }
            if r.errors > 0 {
                parts.push(format!("{} errors", r.errors));
            }
            if r.rounds.len() > 1 {
                let rs: Vec<String> = r.rounds.iter().map(|t| format!("{t:.1}")).collect();
                parts.push(format!("rounds {} (median shown)", rs.join(", ")));
            }
            if let Some(h) = r.hits.as_ref().filter(|h| h.read_ahead > 0.0) {
                parts.push(format!(
                    "{:.1}% of reads started a read-ahead window; {} pages read from disk; \
                     read ahead used/read: disk {}, grid {}",
                    100.0 * h.read_ahead,
                    h.disk_pages,
                    used_of(h.ahead_used_disk, h.ahead_pages_disk),
                    used_of(h.ahead_used_l2, h.ahead_pages_l2)
                ));
            }
            if let Some(s) = r.ratio_to_stock.filter(|_| r.name != "stock") {
                parts.push(format!("{s:.2}x stock"));
            }
            format!("{}: {}", r.name, parts.join(", "))
        })
        .collect();
    for n in notes {
        println!("  {n}");
    }
    for r in results {
        if let Some(h) = &r.hits {
            println!("  {}: {}", r.name, h.disk_reasons_line());
        }
        if let Some(n) = r.emulated_reads {
            println!(
                "  {}: device {}: {n} reads slowed by libwaffle_slowdisk.so over the measured run",
                r.name, r.device
            );
        }
    }
    for r in results {
        let Some(ws) = &r.working_set else { continue };
        println!(
            "  {}: working set (distinct pages, estimated) 1m {} | 5m {} | 15m {}; the warm-up read {} pages{}; {}",
            r.name,
            ws.pages_1m,
            ws.pages_5m,
            ws.pages_15m,
            ws.known_pages,
            ws.ratio_15m
                .map_or(" (the run outlasted the 15-minute window)".into(), |x| format!(", 15m/warm-up {x:.3}")),
            ws.advice
        );
        if let Some(w) = &r.warm {
            println!("  {}: {}", r.name, w.summary());
        }
        if let Some(x) = &r.restart {
            println!("  {}: {}", r.name, x.summary());
        }
    }
    for r in results.iter().filter(|r| r.grid.is_some()) {
        let g = r.grid.as_ref().expect("filtered");
        println!(
            "  {}: link {}; grid fetch p50 {} us p99 {} us, disk read p50 {} us; memcached holds {} items ({} of {}), {} evictions",
            r.name,
            r.link,
            g.l2_p50_us,
            g.l2_p99_us,
            g.disk_p50_us,
            g.memcached_items,
            mib(g.memcached_bytes),
            mib(g.memcached_limit_bytes),
            g.memcached_evictions
        );
        println!(
            "  {}: the cache counts on {} pages in the grid, reach {} pushes; lookups skipped: {} never pushed or taken back, {} pushed too long ago, {} backed off; pushes backed off: {}",
            r.name, g.presence_pages, g.reach_pushes, g.presence_skips, g.aged_skips, g.cost_skips, g.push_cost_skips
        );
        for node in &g.nodes {
            println!(
                "    node {}: {}",
                node["addr"].as_str().unwrap_or("?"),
                node["cost"]["reason"].as_str().unwrap_or("no cost figures")
            );
        }
    }
}

/// Writes `value` as pretty JSON to `path`.
pub fn write_json(path: &Path, value: &Value) -> Result<(), String> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    let text = serde_json::to_string_pretty(value).expect("serializable");
    std::fs::write(path, text + "\n").map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// Where a report goes besides stdout: `--json FILE`, `--charts DIR`.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct Output {
    /// Also write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write PNG charts into this directory.
    #[arg(long)]
    pub charts: Option<PathBuf>,
}

impl Output {
    /// With `--charts`, draws the report's chart there (`draw(report, dir)` returns its file);
    /// lists the charts drawn under the report's `charts`; with `--json`, writes the report.
    /// Prints each file written.
    pub fn write(
        &self,
        report: &mut Value,
        draw: impl FnOnce(&Value, &Path) -> Result<PathBuf, String>,
    ) -> Result<(), String> {
        let mut charts = Vec::new();
        if let Some(dir) = &self.charts {
            std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
            let file = draw(report, dir)?;
            println!("chart: {}", file.display());
            charts.push(file.display().to_string());
        }
        report["charts"] = json!(charts);
        if let Some(path) = &self.json {
            write_json(path, report)?;
            println!("json: {}", path.display());
        }
        Ok(())
    }
}

/// One line per EMULATED device and link in use: what is emulated, and whose figures (the
/// report's `emulated`; the same lines on stdout).
pub fn emulation_notes(devices: &[DeviceProfile], links: &[LinkProfile]) -> Vec<String> {
    let devices = devices.iter().map(|p| {
        format!(
            "device {} EMULATED: {} server(s), {} us per random read, {} us per sequential 4 KiB ({})",
            p.name, p.servers, p.random_us, p.sequential_us_per_4k, p.source
        )
    });
    let links = links.iter().map(|l| {
        format!(
            "link {} EMULATED: {} us round trip + bytes at {} Mb/s on a shared link ({})",
            l.name,
            l.rtt_us,
            l.bits_per_s / 1_000_000,
            l.source
        )
    });
    devices.chain(links).collect()
}

/// The command line that made a report, quoted where an argument has a space.
pub fn invocation() -> String {
    std::env::args().map(|a| if a.contains(' ') { format!("'{a}'") } else { a }).collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_working_set_is_compared_with_the_file_while_the_run_fits_the_window() {
        let after = json!({"working_set": {"pages_1m": 10, "pages_5m": 90, "pages_15m": 99, "advice": "a"}});
        let ws = WorkingSet::from_stats(&after, 100, true).unwrap();
        assert_eq!((ws.pages_1m, ws.pages_15m, ws.known_pages, ws.ratio_15m), (10, 99, 100, Some(0.99)));
        assert_eq!(WorkingSet::from_stats(&after, 100, false).unwrap().ratio_15m, None, "the warm-up left the window");
        assert!(WorkingSet::from_stats(&json!({}), 100, true).is_none(), "no estimate");
    }

    #[test]
    fn the_disk_reasons_line_shows_what_occurred_as_percentages() {
        let reasons = [("cold", 10), ("evicted", 30), ("aged_out", 0)].map(|(k, n)| (k.to_string(), n));
        let h = Hits { disk_reads: 40, disk_reasons: reasons.into(), ahead_pages_disk: 7, ..Default::default() };
        assert_eq!(
            h.disk_reasons_line(),
            "40 disk reads: cold 25.0%, evicted 75.0%; read-ahead apart: 7 pages from the disk"
        );
        assert_eq!(Hits::default().disk_reasons_line(), "0 disk reads; read-ahead apart: 0 pages from the disk");
    }

    #[test]
    fn ratios_are_finite_or_absent() {
        let mk = |name: &str, t: f64| ConfigResult { name: name.into(), throughput: t, ..Default::default() };
        let mut rs = vec![mk("local", 0.0), mk("grid", 5.0), mk("all-local", 10.0)];
        fill_ratios(&mut rs);
        assert_eq!(rs[1].ratio_to_local, None);
        assert_eq!(rs[1].ratio_to_all_local, Some(0.5));
        assert_eq!(rs[1].ratio_to_stock, None);
        let mut rs = vec![mk("local/hdd-10k", 2.0), mk("grid@1gbe/hdd-10k", 5.0)];
        fill_ratios(&mut rs);
        assert_eq!(rs[1].ratio_to_local, Some(2.5));
    }
}
