//! What a benchmark reports, rendered from its results ([`super::result`]):
//! ratios against `local`, `all-local` and `stock`, a table on stdout and the
//! same as JSON; and what every report has (`waffle bench`, `bench sweep`,
//! `probe`): the EMULATED notes, the invocation, and [`Output`], its JSON file
//! and charts. The report renders what the runner measured: it uses the
//! results and nothing that runs a benchmark.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use waffle_core::presence::DiskReason;
use waffle_emulation::{DeviceProfile, LinkProfile};

use super::result::{ConfigResult, FlashTraffic, Hits, Restart};

/// One line: why the demand reads went to the disk, as percentages of
/// them (the reasons that occurred, in `DiskReason` order), and the pages
/// read-ahead brought from the disk apart.
fn disk_reasons_line(h: &Hits) -> String {
    let reasons: Vec<String> = DiskReason::ALL
        .iter()
        .filter_map(|r| {
            let n = h.disk_reasons.get(r.name()).copied().unwrap_or(0);
            (n > 0).then(|| format!("{} {:.1}%", r.name(), 100.0 * n as f64 / h.disk_reads as f64))
        })
        .collect();
    let reasons = if reasons.is_empty() { String::new() } else { format!(": {}", reasons.join(", ")) };
    format!("{} disk reads{reasons}; read-ahead apart: {} pages from the disk", h.disk_reads, h.ahead_pages_disk)
}

/// A `+restart`'s run in one line: the close and reopen, the run against the steady state, the hot list.
pub fn restart_line(r: &Restart) -> String {
    let h = &r.hot_list;
    format!(
        "restart: closed in {} ms, reopened in {} ms; {:.0} s after it {:.0} tx/s = {:.2}x steady ({:.0} tx/s); \
         90% of steady {}; reads L1 {} | grid {} | disk {}; hot list {} ({}), {} pages from the grid, {} from disk in {} ms",
        r.close_ms,
        r.open_ms,
        r.seconds,
        r.tps,
        r.ratio,
        r.steady_tps,
        r.seconds_to_90pct.map_or("never reached".into(), |s| format!("from second {}", s + 1)),
        r.l1_hits,
        r.l2_pages,
        r.disk_pages,
        if h.state.is_empty() { "?" } else { &h.state },
        if h.trusted { "trusted" } else { h.why.as_deref().unwrap_or("-") },
        h.from_grid_pages,
        h.from_disk_pages,
        h.elapsed_ms,
    )
}

/// "used/read (percent)" of pages read ahead from one source.
fn used_of(used: u64, read: u64) -> String {
    if read == 0 {
        return "0/0".into();
    }
    format!("{used}/{read} ({:.0}%)", 100.0 * used as f64 / read as f64)
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

/// The SQLite-alone configuration the ratio to stock is taken to: `stock`,
/// else `plain` (the default VFS with the waffle configurations' page caches).
fn sqlite_base(results: &[ConfigResult]) -> &'static str {
    if results.iter().any(|r| base_name(&r.name) == "stock") {
        "stock"
    } else {
        "plain"
    }
}

/// Fills each result's ratios to the first `local`, `all-local` and `stock`
/// (else `plain`) results (whatever their device: `local/hdd-10k` is a `local`).
pub fn fill_ratios(results: &mut [ConfigResult]) {
    let find = |name: &str| results.iter().find(|r| base_name(&r.name) == name).map(|r| r.throughput);
    let (local, all, stock) = (find("local"), find("all-local"), find(sqlite_base(results)));
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
    let base = sqlite_base(results);
    let notes: Vec<String> = results
        .iter()
        .filter(|r| {
            r.retries > 0
                || r.rounds.len() > 1
                || r.errors > 0
                || r.rollbacks > 0
                || r.ratio_to_stock.is_some() && r.name != base
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
            if let Some(s) = r.ratio_to_stock.filter(|_| r.name != base) {
                parts.push(format!("{s:.2}x {base}"));
            }
            format!("{}: {}", r.name, parts.join(", "))
        })
        .collect();
    for n in notes {
        println!("  {n}");
    }
    for r in results {
        if let Some(h) = &r.hits {
            println!("  {}: {}", r.name, disk_reasons_line(h));
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
            println!("  {}: {}", r.name, restart_line(x));
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
                node.addr,
                if node.cost.reason.is_empty() { "no cost figures" } else { &node.cost.reason }
            );
        }
        if let Some(f) = &g.flash {
            println!("  {}: {}", r.name, flash_line(f));
        }
        if let Some(w) = &r.wire {
            println!("  {}: {}", r.name, wire_line(w));
        }
    }
    for r in results {
        println!("  {}: CPU (this process and memcached) {:.0} us per transaction", r.name, r.cpu_us_per_txn);
    }
}

/// A `+flash` grid's flash tier over the measured run (bench/flash.rs).
fn flash_line(f: &FlashTraffic) -> String {
    format!(
        "flash {} in all, {} values on it at the end; the nodes' hits in the measured run: {} from flash ({} from RAM, \
         {} from flash), {} flash misses; {} written to flash; {} of the files in the kernel's page cache at the end",
        mib(f.file_bytes),
        f.items,
        f.flash_share().map_or("-".into(), pct),
        f.ram_hits,
        f.flash_hits,
        f.flash_misses,
        mib(f.bytes_written),
        f.page_cache_share.map_or("-".into(), pct),
    )
}

/// The wire's limit beside a grid run (bench/wire.rs).
fn wire_line(w: &super::wire::Wire) -> String {
    let per_hit = match (w.cpu_us_per_l2_hit, w.ratio_to_bare, w.limit_ratio_to_all_local, w.share_of_limit) {
        (Some(c), Some(x), Some(l), Some(s)) => format!(
            "{c:.1} us beyond all-local's ({x:.2}x the bare mg's; target <= 1.5x); the wire's limit here is \
             {l:.3}x all-local, and the run reached {:.0}% of it",
            100.0 * s
        ),
        _ => "no all-local in the round to hold it against".to_string(),
    };
    format!(
        "the wire's limit: a bare mg of its pages ({:.0} B on average, {} threads, {:.1} s, load {:.1}) costs \
         {:.1} us of CPU ({:.1} us memcached's) and {:.1} us of wall per page; the run's CPU per L2 hit: \
         {per_hit}, {:.1} us counting all its CPU",
        w.bare_value_bytes_mean,
        w.threads,
        w.seconds,
        w.load_average,
        w.bare_cpu_us_per_get,
        w.bare_node_cpu_us_per_get,
        w.bare_wall_us_per_get,
        w.cpu_us_per_l2_hit_total
    )
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
    fn the_disk_reasons_line_shows_what_occurred_as_percentages() {
        let reasons = [("cold", 10), ("evicted", 30), ("aged_out", 0)].map(|(k, n)| (k.to_string(), n));
        let h = Hits { disk_reads: 40, disk_reasons: reasons.into(), ahead_pages_disk: 7, ..Default::default() };
        assert_eq!(
            disk_reasons_line(&h),
            "40 disk reads: cold 25.0%, evicted 75.0%; read-ahead apart: 7 pages from the disk"
        );
        assert_eq!(disk_reasons_line(&Hits::default()), "0 disk reads; read-ahead apart: 0 pages from the disk");
    }

    #[test]
    fn the_restart_line_names_the_ratio_and_the_hot_list() {
        let r = Restart {
            close_ms: 120,
            seconds: 30.0,
            tps: 900.0,
            steady_tps: 1000.0,
            ratio: 0.9,
            per_second: vec![500, 950],
            seconds_to_90pct: Some(1),
            hot_list: waffle_core::stats::HotListSnapshot {
                state: "done".into(),
                trusted: true,
                from_grid_pages: 10,
                from_disk_pages: 2,
                elapsed_ms: 40,
                ..Default::default()
            },
            ..Restart::default()
        };
        let s = restart_line(&r);
        assert!(s.contains("0.90x steady") && s.contains("from second 2") && s.contains("done (trusted)"), "{s}");
        assert!(s.contains("10 pages from the grid, 2 from disk in 40 ms"), "{s}");
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
