//! `waffle stats FILE`: the counters of a stats file for people.
//!
//! Reads the preload's `waffle-stats.json` (or the JSON of SQLite's
//! `PRAGMA waffle_stats`, which has the same counters) and prints where reads
//! were answered, the grid's health, writes, latencies, the working set, the
//! nodes, and (for the preload) one line per tablespace. `--format json`
//! prints the JSON itself, `--format prometheus` the figures for Prometheus
//! (`super::prometheus`), optionally written atomically to a `.prom` file.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::Value;

fn u(v: &Value, k: &str) -> u64 {
    v.get(k).and_then(Value::as_u64).unwrap_or(0)
}

fn pct(n: u64, d: u64) -> String {
    if d == 0 {
        "-".into()
    } else {
        format!("{:.1}%", n as f64 * 100.0 / d as f64)
    }
}

fn bytes(n: u64) -> String {
    if n >= 1 << 30 {
        format!("{:.1} GiB", n as f64 / (1u64 << 30) as f64)
    } else if n >= 1 << 20 {
        format!("{:.1} MiB", n as f64 / (1u64 << 20) as f64)
    } else if n >= 1 << 10 {
        format!("{:.1} KiB", n as f64 / 1024.0)
    } else {
        format!("{n} B")
    }
}

fn sum_object(v: &Value, k: &str) -> u64 {
    v.get(k).and_then(Value::as_object).map_or(0, |m| m.values().filter_map(Value::as_u64).sum())
}

/// The report for one stats JSON object.
pub fn render(v: &Value, source: &str) -> String {
    let mut o = String::new();
    let adapter = v.get("adapter").and_then(Value::as_str).unwrap_or("sqlite");
    let state = v.get("state").and_then(Value::as_str).unwrap_or("active");
    let mut head = format!("{source}: {adapter}");
    if let Some(pid) = v.get("pid").and_then(Value::as_u64) {
        let _ = write!(head, ", pid {pid}");
    }
    let _ = write!(head, ", {state}");
    if let Some(ms) = v.get("updated_unix_ms").and_then(Value::as_u64) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(ms);
        let _ = write!(head, ", written {:.1} s ago", now.saturating_sub(ms) as f64 / 1000.0);
    }
    if v.get("final").and_then(Value::as_bool) == Some(true) {
        head.push_str(" (final: the server exited)");
    }
    let _ = writeln!(o, "{head}");
    if let Some(r) = v.get("disabled_reason").and_then(Value::as_str) {
        let _ = writeln!(o, "OFF: {r}");
    }
    if v.get("l1_hits").is_none() {
        return o; // turned off before the cache started: nothing else to show
    }
    if let Some(id) = v.get("cache_id").and_then(Value::as_str) {
        let grid = v.get("grid").and_then(Value::as_str).unwrap_or("");
        let _ = writeln!(
            o,
            "cache id {id}, page {} bytes{}{}",
            u(v, "page_bytes"),
            if grid.is_empty() { String::new() } else { format!(", grid {grid}") },
            v.get("datadir").and_then(Value::as_str).map(|d| format!(", datadir {d}")).unwrap_or_default()
        );
    }
    let (l1, pq, l2, disk) = (u(v, "l1_hits"), u(v, "push_queue_hits"), u(v, "l2_hits"), u(v, "disk_reads"));
    let reads = l1 + u(v, "l1_misses");
    let _ = writeln!(
        o,
        "reads    {reads} pages: L1 {} | push queue {} | grid {} | disk {}",
        pct(l1, reads),
        pct(pq, reads),
        pct(l2, reads),
        pct(disk, reads)
    );
    let asked = l2 + u(v, "l2_misses");
    let _ = writeln!(
        o,
        "grid     hits {l2}, misses {}, hit ratio {}; skipped (node down) {}; rejects {}; faults {}",
        u(v, "l2_misses"),
        pct(l2, asked),
        u(v, "l2_skipped"),
        u(v, "l2_rejects_total"),
        sum_object(v, "l2_faults")
    );
    let _ = writeln!(
        o,
        "pushes   {} ({}), dropped {}, failed {}; fetched {}",
        u(v, "l2_pushes"),
        bytes(u(v, "l2_push_bytes")),
        u(v, "l2_push_drops"),
        u(v, "l2_push_failures"),
        bytes(u(v, "l2_fetch_bytes"))
    );
    let _ = writeln!(
        o,
        "writes   {} pages; partial (dropped) {}; truncations {}",
        u(v, "disk_writes"),
        u(v, "partial_writes"),
        u(v, "truncates")
    );
    if let Some(l1v) = v.get("l1") {
        let _ = writeln!(
            o,
            "L1       {} of {} ({} pages); push queue {}",
            bytes(u(l1v, "used_bytes")),
            bytes(u(l1v, "capacity_bytes")),
            u(l1v, "pages"),
            bytes(u(v, "push_queue_bytes"))
        );
    }
    if let Some(ws) = v.get("working_set") {
        let _ = writeln!(
            o,
            "touched  1m {} | 5m {} | 15m {} (working set: {} | {} | {} pages); L1 + grid hold {}",
            bytes(u(ws, "bytes_1m")),
            bytes(u(ws, "bytes_5m")),
            bytes(u(ws, "bytes_15m")),
            u(ws, "pages_1m"),
            u(ws, "pages_5m"),
            u(ws, "pages_15m"),
            bytes(u(ws, "held_bytes"))
        );
        if let Some(advice) = ws.get("advice").and_then(Value::as_str) {
            let _ = writeln!(o, "advice   {advice}");
        }
    }
    if let Some(lat) = v.get("latency").and_then(Value::as_object) {
        let mut line = "latency  p50/p95/p99 us:".to_string();
        for (tier, label) in [("l1", "L1"), ("l2", "grid"), ("disk", "disk")] {
            if let Some(t) = lat.get(tier) {
                let _ = write!(line, "  {label} {}/{}/{}", u(t, "p50_us"), u(t, "p95_us"), u(t, "p99_us"));
            }
        }
        let _ = writeln!(o, "{line}");
    }
    if let Some(nodes) = v.get("nodes").and_then(Value::as_array) {
        for n in nodes {
            let _ = writeln!(
                o,
                "node     {} {}: {} requests, {} failures, {} timeouts, marked down {}x{}",
                n.get("addr").and_then(Value::as_str).unwrap_or("?"),
                if n.get("up").and_then(Value::as_bool).unwrap_or(false) { "up" } else { "DOWN" },
                u(n, "requests"),
                u(n, "failures"),
                u(n, "timeouts"),
                u(n, "marked_down"),
                n.get("memory_bytes")
                    .and_then(Value::as_u64)
                    .map(|m| format!("; memory {}", bytes(m)))
                    .unwrap_or_default()
            );
            if let Some(reason) = n.get("cost").and_then(|c| c.get("reason")).and_then(Value::as_str) {
                let _ = writeln!(o, "         cost: {reason}");
            }
        }
    }
    if let Some(p) = v.get("preload") {
        let _ = writeln!(
            o,
            "preload  page reads {}, pass-through reads {}, page writes {}, dropped by multi-page writes {}, by partial writes {}, InnoDB-check rejects {}",
            u(p, "page_reads"),
            u(p, "passthrough_reads"),
            u(p, "page_writes"),
            u(p, "multi_page_writes"),
            u(p, "partial_writes"),
            sum_object(p, "innodb_rejects")
        );
    }
    if let Some(spaces) = v.get("tablespaces").and_then(Value::as_object) {
        let mut rows: Vec<(&String, &Value)> = spaces.iter().collect();
        rows.sort_by_key(|(_, s)| std::cmp::Reverse(u(s, "reads")));
        let _ = writeln!(
            o,
            "\n{:<32} {:>10} {:>7} {:>7} {:>7} {:>7} {:>9}",
            "tablespace", "reads", "hit", "L1", "grid", "disk", "writes"
        );
        for (name, s) in rows {
            let r = u(s, "reads");
            let cached = s.get("cached").and_then(Value::as_bool).unwrap_or(true);
            let _ = writeln!(
                o,
                "{:<32} {:>10} {:>7} {:>7} {:>7} {:>7} {:>9}{}",
                name,
                r,
                pct(u(s, "l1_hits") + u(s, "push_queue_hits") + u(s, "l2_hits"), r),
                pct(u(s, "l1_hits") + u(s, "push_queue_hits"), r),
                pct(u(s, "l2_hits"), r),
                pct(u(s, "disk_reads"), r),
                u(s, "page_writes"),
                if cached { "" } else { "  (not cached: WAFFLE_TABLES)" }
            );
        }
    }
    o
}

/// How `waffle stats` prints.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// A summary for people.
    Text,
    /// The JSON itself, pretty-printed.
    Json,
    /// Prometheus' text exposition format (for node_exporter's textfile collector).
    Prometheus,
}

/// `waffle stats FILE... [--format text|json|prometheus] [--output FILE]`.
#[derive(clap::Args, Clone, Debug)]
pub struct StatsArgs {
    /// Stats files: the preload writes `<datadir>/waffle-stats.json` (or `$WAFFLE_STATS_FILE`) every second;
    /// SQLite's is the row of `PRAGMA waffle_stats`, saved to a file.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
    /// The same as `--format json`.
    #[arg(long, conflicts_with = "format")]
    pub json: bool,
    /// Write to this file instead of stdout, atomically (a temporary file beside it, then renamed over
    /// it): e.g. node_exporter's `--collector.textfile.directory`/waffle.prom.
    #[arg(long)]
    pub output: Option<PathBuf>,
}

pub fn run_args(a: &StatsArgs) -> Result<(), String> {
    let format = if a.json { Format::Json } else { a.format };
    let text = run(&a.files, format)?;
    match &a.output {
        None => {
            print!("{text}");
            Ok(())
        }
        Some(path) => write_atomically(path, &text),
    }
}

/// What `waffle stats` prints for `files` in `format`.
pub fn run(files: &[PathBuf], format: Format) -> Result<String, String> {
    let mut all = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let v: Value =
            serde_json::from_str(&text).map_err(|e| format!("{} is not a stats file: {e}", path.display()))?;
        all.push((path.display().to_string(), v));
    }
    Ok(match format {
        Format::Prometheus => super::prometheus::render(&all),
        Format::Json => all.iter().map(|(_, v)| serde_json::to_string_pretty(v).unwrap_or_default() + "\n").collect(),
        Format::Text => all.iter().map(|(name, v)| render(v, name)).collect::<Vec<_>>().join("\n"),
    })
}

/// Writes `text` to `path` through a temporary file in the same directory, renamed over
/// it: a reader (the textfile collector) sees the old file or the new one, never half of one.
fn write_atomically(path: &Path, text: &str) -> Result<(), String> {
    let name = path.file_name().ok_or_else(|| format!("{} names no file", path.display()))?;
    // Not ending in .prom: the collector reads only those.
    let tmp = path.with_file_name(format!(".{}.tmp{}", name.to_string_lossy(), std::process::id()));
    std::fs::write(&tmp, text).map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        format!("cannot rename {} to {}: {e}", tmp.display(), path.display())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn renders_preload_stats() {
        let v = json!({
            "adapter": "mariadb-preload", "state": "active", "pid": 7, "cache_id": "00ff", "page_bytes": 16384,
            "l1_hits": 10, "l1_misses": 90, "push_queue_hits": 0, "l2_hits": 80, "l2_misses": 10, "disk_reads": 10,
            "l2_faults": {"timeout": 1}, "l2_rejects_total": 0,
            "l1": {"used_bytes": 1048576, "capacity_bytes": 2097152, "pages": 64},
            "nodes": [{"addr": "127.0.0.1:1", "up": true, "requests": 5}],
            "preload": {"page_reads": 100, "innodb_rejects": {"lsn": 0}},
            "tablespaces": {"sbtest/sbtest1": {"reads": 100, "l1_hits": 10, "l2_hits": 80, "disk_reads": 10, "cached": true},
                            "mysql/user": {"reads": 0, "cached": false}}
        });
        let text = render(&v, "f");
        assert!(text.contains("reads    100 pages: L1 10.0% | push queue 0.0% | grid 80.0% | disk 10.0%"), "{text}");
        assert!(text.contains("hit ratio 88.9%"), "{text}");
        assert!(text.contains("sbtest/sbtest1"), "{text}");
        assert!(text.contains("(not cached: WAFFLE_TABLES)"), "{text}");
        assert!(text.contains("faults 1"), "{text}");
    }

    #[test]
    fn renders_the_working_set_and_its_advice() {
        let v = json!({
            "l1_hits": 1, "l1_misses": 0,
            "working_set": {"bytes_1m": 1 << 20, "bytes_5m": 3u64 << 30, "bytes_15m": 4u64 << 30, "pages_1m": 256,
                            "pages_5m": 786432, "pages_15m": 1048576, "held_bytes": 1u64 << 30, "advice": "buy memory"},
            "nodes": [{"addr": "a:1", "up": true, "memory_bytes": 512 << 20}]
        });
        let text = render(&v, "f");
        assert!(
            text.contains(
                "touched  1m 1.0 MiB | 5m 3.0 GiB | 15m 4.0 GiB (working set: 256 | 786432 | 1048576 pages); L1 + grid hold 1.0 GiB"
            ),
            "{text}"
        );
        assert!(text.contains("advice   buy memory"), "{text}");
        assert!(text.contains("; memory 512.0 MiB"), "{text}");
    }

    #[test]
    fn writes_atomically_and_prints_each_format() {
        let dir = std::env::temp_dir().join(format!("waffle-stats-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let stats = dir.join("s.json");
        std::fs::write(&stats, r#"{"l1_hits": 7, "l1_misses": 3}"#).unwrap();
        let files = vec![stats.clone()];
        let prom = run(&files, Format::Prometheus).unwrap();
        assert!(prom.contains(&format!("waffle_l1_hits_total{{file=\"{}\"}} 7\n", stats.display())), "{prom}");
        assert!(run(&files, Format::Text).unwrap().contains("reads    10 pages"));
        assert_eq!(serde_json::from_str::<Value>(&run(&files, Format::Json).unwrap()).unwrap()["l1_hits"], 7);
        let out = dir.join("waffle.prom");
        write_atomically(&out, &prom).unwrap();
        assert_eq!(std::fs::read_to_string(&out).unwrap(), prom);
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left.len(), 2, "no temporary file is left: {left:?}");
        assert!(run(&[dir.join("missing.json")], Format::Text).unwrap_err().contains("cannot read"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn renders_a_preload_that_turned_off() {
        let v = json!({"adapter": "mariadb-preload", "state": "disabled", "disabled_reason": "native AIO"});
        let text = render(&v, "f");
        assert!(text.contains("OFF: native AIO"), "{text}");
    }
}
