//! `waffle stats --format prometheus`: stats files in Prometheus' text
//! exposition format (0.0.4), for node_exporter's textfile collector.
//!
//! Counters end in `_total` and are the cache's own (they only grow while it
//! is open: graph them with `rate()`); gauges are levels (memory, working
//! set, node health) and ratios since the cache opened. Every sample carries
//! `file`, the stats file it came from, so several databases can share one
//! `.prom` file: each metric family's lines stay together, with one HELP and
//! one TYPE line, whatever the number of files.

use std::fmt::Write as _;

use serde_json::Value;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Counter,
    Gauge,
}

struct Family {
    name: String,
    help: &'static str,
    kind: Kind,
    samples: Vec<(Vec<(&'static str, String)>, f64)>,
}

/// Metric families in the order first added, each with its samples.
#[derive(Default)]
pub struct Exposition {
    families: Vec<Family>,
}

/// The cache's counters: (JSON key, help). The metric is `waffle_<key>_total`.
const COUNTERS: &[(&str, &str)] = &[
    ("l1_hits", "Page reads answered by L1, the local pool."),
    ("l1_misses", "Page reads L1 did not have."),
    ("push_queue_hits", "L1 misses answered from the push queue (evicted, not yet pushed)."),
    ("l2_hits", "Page reads answered by the grid."),
    ("l2_misses", "Grid lookups of pushed pages the grid no longer had (memcached evicted or lost them)."),
    ("l2_skipped", "Grid lookups not sent: the page's node was down."),
    ("l2_presence_skips", "Grid lookups not sent: the page was never pushed at its version, or taken back."),
    ("l2_aged_skips", "Grid lookups not sent: the page was pushed longer ago than the grid keeps pages."),
    ("l2_cost_skips", "Grid lookups not sent: the node costs more than the disk read it would save."),
    ("l2_push_cost_skips", "Evicted pages not pushed: the node costs more than it saves."),
    ("l2_pushes", "Evicted pages stored in the grid."),
    ("l2_push_drops", "Evicted pages dropped: the push queue was full."),
    ("l2_push_failures", "Evicted pages the grid refused or lost to a fault."),
    ("l2_push_bytes", "Bytes stored in the grid."),
    ("l2_fetch_bytes", "Bytes fetched from the grid."),
    ("disk_reads", "Single-page reads of the database file."),
    ("disk_short_reads", "Reads past the end of the database file."),
    ("disk_writes", "Whole pages the database wrote."),
    ("partial_writes", "Writes of part of a page (the page is dropped from the tiers)."),
    ("truncates", "Truncations of the database file."),
    ("read_ahead_windows", "Read-ahead windows of sequential scans."),
    ("read_ahead_hits", "Page reads answered by a read-ahead window."),
    ("read_ahead_pages_l2", "Pages read-ahead windows brought from the grid."),
    ("read_ahead_pages_disk", "Pages read-ahead windows brought from the disk."),
    ("scan_drops", "Read-ahead pages evicted unread (dropped, not pushed)."),
    ("resets", "Whole-cache invalidations (the page size changed)."),
    ("foreign_changes", "Commits by writers that bypass this cache."),
    ("foreign_resets", "Foreign changes that invalidated every cached page."),
    ("foreign_pages_invalidated", "Pages named as changed by another writer."),
    ("foreign_copies_dropped", "Cached copies dropped because another writer changed them."),
    ("l1_stale_drops", "L1 copies found at a version the file has left, dropped unserved."),
];

/// The cache's levels: (JSON path, metric, help).
const GAUGES: &[(&str, &str, &str)] = &[
    ("page_bytes", "waffle_page_bytes", "Page size in use."),
    ("l1.capacity_bytes", "waffle_l1_capacity_bytes", "L1's budget."),
    ("l1.used_bytes", "waffle_l1_used_bytes", "Bytes L1 holds."),
    ("l1.pages", "waffle_l1_pages", "Pages L1 holds."),
    ("push_queue_bytes", "waffle_push_queue_bytes", "Evicted bytes waiting to be pushed."),
    ("versions_tracked", "waffle_versions_tracked", "Pages whose version the cache tracks."),
    ("l2_presence_pages", "waffle_l2_presence_pages", "Pages the cache believes the grid holds."),
    ("l2_reach_pushes", "waffle_l2_reach_pushes", "How many pushes back the grid is seen to keep pages (0: unknown)."),
    ("working_set.held_bytes", "waffle_held_bytes", "L1's budget plus the memory of the grid's nodes that are up."),
    ("working_set.grid_bytes", "waffle_grid_memory_bytes", "Memory of the grid's nodes that are up (memcached -m)."),
];

const NODE_COUNTERS: &[(&str, &str)] = &[
    ("requests", "Round trips sent to the node."),
    ("failures", "Round trips that ended in a fault."),
    ("timeouts", "Round trips that ended at their deadline."),
    ("marked_down", "Times the node went from up to down."),
    ("presence_misses", "Misses of pages the cache had pushed to the node."),
    ("stale_connections", "Pooled connections the node had closed, found when used."),
];

const COST_STATES: [&str; 3] = ["measuring", "on", "backed_off"];

fn at<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(v, |v, k| v.get(k))
}

fn num(v: &Value, path: &str) -> Option<f64> {
    at(v, path).and_then(Value::as_f64)
}

impl Exposition {
    fn add(&mut self, name: &str, kind: Kind, help: &'static str, labels: Vec<(&'static str, String)>, value: f64) {
        let i = match self.families.iter().position(|f| f.name == name) {
            Some(i) => i,
            None => {
                self.families.push(Family { name: name.to_string(), help, kind, samples: Vec::new() });
                self.families.len() - 1
            }
        };
        self.families[i].samples.push((labels, value));
    }

    /// Adds the figures of one stats JSON object (`PRAGMA waffle_stats` or the preload's file), labelled `file`.
    pub fn add_stats(&mut self, v: &Value, file: &str) {
        let base = || vec![("file", file.to_string())];
        let with = |k: &'static str, val: &str| {
            let mut l = base();
            l.push((k, val.to_string()));
            l
        };
        let mut info = base();
        info.push(("adapter", v.get("adapter").and_then(Value::as_str).unwrap_or("sqlite").into()));
        info.push(("state", v.get("state").and_then(Value::as_str).unwrap_or("active").into()));
        info.push(("cache_id", v.get("cache_id").and_then(Value::as_str).unwrap_or("").into()));
        let database = v.get("file").or_else(|| v.get("datadir")).and_then(Value::as_str).unwrap_or("");
        info.push(("database", database.into()));
        self.add(
            "waffle_info",
            Kind::Gauge,
            "The stats file's adapter, state and cache identity (always 1).",
            info,
            1.0,
        );
        if let Some(ms) = num(v, "updated_unix_ms") {
            self.add(
                "waffle_stats_updated_timestamp_seconds",
                Kind::Gauge,
                "When the preload last wrote its stats file.",
                base(),
                ms / 1000.0,
            );
        }
        if v.get("l1_hits").is_none() {
            return; // turned off before the cache started
        }
        self.add(
            "waffle_fused",
            Kind::Gauge,
            "1 when an internal error turned the cache off (every read goes to the file).",
            base(),
            if v.get("fused").is_some_and(|f| !f.is_null()) { 1.0 } else { 0.0 },
        );
        for &(key, help) in COUNTERS {
            if let Some(n) = num(v, key) {
                self.add(&format!("waffle_{key}_total"), Kind::Counter, help, base(), n);
            }
        }
        for (obj, metric, label, help) in [
            (
                "l2_rejects",
                "waffle_l2_rejects_total",
                "reason",
                "Grid values refused (envelope or page check), by reason.",
            ),
            ("l2_faults", "waffle_l2_faults_total", "kind", "Grid requests that failed, by kind."),
        ] {
            for (k, n) in v.get(obj).and_then(Value::as_object).into_iter().flatten() {
                if let Some(n) = n.as_f64() {
                    self.add(metric, Kind::Counter, help, with(label, k), n);
                }
            }
        }
        for &(path, metric, help) in GAUGES {
            if let Some(n) = num(v, path) {
                self.add(metric, Kind::Gauge, help, base(), n);
            }
        }
        self.add_ratios(v, file);
        for tier in ["l1", "l2", "disk"] {
            for (key, quantile) in [("p50_us", "0.5"), ("p95_us", "0.95"), ("p99_us", "0.99"), ("max_us", "1")] {
                if let Some(us) = num(v, &format!("latency.{tier}.{key}")) {
                    let mut l = with("tier", tier);
                    l.push(("quantile", quantile.into()));
                    self.add(
                        "waffle_read_latency_seconds",
                        Kind::Gauge,
                        "Latency of a page read by the tier that answered it, since the last reset (quantile 1: the maximum).",
                        l,
                        us / 1e6,
                    );
                }
            }
        }
        for window in ["1m", "5m", "15m"] {
            for (unit, help) in [
                ("pages", "Distinct pages read or written over the window (HyperLogLog estimate, 1.6% error)."),
                ("bytes", "Distinct pages read or written over the window, in bytes."),
            ] {
                if let Some(n) = num(v, &format!("working_set.{unit}_{window}")) {
                    self.add(&format!("waffle_working_set_{unit}"), Kind::Gauge, help, with("window", window), n);
                }
            }
        }
        for node in v.get("nodes").and_then(Value::as_array).into_iter().flatten() {
            self.add_node(node, file);
        }
        self.add_tablespaces(v, file);
    }

    /// Where page reads were answered, as shares of them (since the cache opened).
    fn add_ratios(&mut self, v: &Value, file: &str) {
        let n = |k: &str| num(v, k).unwrap_or(0.0);
        let reads = n("l1_hits") + n("read_ahead_hits") + n("l1_misses");
        // A read that started a read-ahead window is shared between grid and disk
        // as the window's pages were (the bench's `Hits` does the same).
        let (ra_l2, ra_disk, windows) = (n("read_ahead_pages_l2"), n("read_ahead_pages_disk"), n("read_ahead_windows"));
        let l2_share = if ra_l2 + ra_disk > 0.0 { ra_l2 / (ra_l2 + ra_disk) } else { 0.0 };
        if reads > 0.0 {
            for (tier, answered) in [
                ("l1", n("l1_hits") + n("read_ahead_hits") + n("push_queue_hits")),
                ("l2", n("l2_hits") + windows * l2_share),
                ("disk", n("disk_reads") + windows * (1.0 - l2_share)),
            ] {
                self.add(
                    "waffle_hit_ratio",
                    Kind::Gauge,
                    "Share of page reads answered by each tier since the cache opened (l1 includes the push queue).",
                    vec![("file", file.to_string()), ("tier", tier.to_string())],
                    answered / reads,
                );
            }
        }
        let asked = n("l2_hits") + n("l2_misses");
        if asked > 0.0 {
            self.add(
                "waffle_l2_lookup_hit_ratio",
                Kind::Gauge,
                "Share of grid lookups that found their page, since the cache opened.",
                vec![("file", file.to_string())],
                n("l2_hits") / asked,
            );
        }
    }

    fn add_node(&mut self, node: &Value, file: &str) {
        let addr = node.get("addr").and_then(Value::as_str).unwrap_or("?");
        let labels = || vec![("file", file.to_string()), ("node", addr.to_string())];
        let up = node.get("up").and_then(Value::as_bool).unwrap_or(false);
        self.add(
            "waffle_node_up",
            Kind::Gauge,
            "1 while the grid node is up, 0 while it is backed off.",
            labels(),
            f64::from(u8::from(up)),
        );
        for &(key, help) in NODE_COUNTERS {
            if let Some(n) = num(node, key) {
                self.add(&format!("waffle_node_{key}_total"), Kind::Counter, help, labels(), n);
            }
        }
        if let Some(n) = num(node, "memory_bytes") {
            self.add(
                "waffle_node_memory_bytes",
                Kind::Gauge,
                "The node's memory (memcached limit_maxbytes).",
                labels(),
                n,
            );
        }
        let Some(cost) = node.get("cost") else { return };
        if let Some(state) = cost.get("state").and_then(Value::as_str) {
            for s in COST_STATES {
                let mut l = labels();
                l.push(("state", s.to_string()));
                self.add(
                    "waffle_node_cost_state",
                    Kind::Gauge,
                    "1 for the node's cost state: measuring, on (asking pays), backed_off (it costs more than it saves).",
                    l,
                    f64::from(u8::from(state == s)),
                );
            }
        }
        for (key, metric, help) in [
            ("lookup_us", "waffle_node_lookup_seconds", "Moving average of a lookup's round trip to the node."),
            (
                "saved_us",
                "waffle_node_lookup_saves_seconds",
                "Moving average of the disk time a lookup saves (hit ratio x disk read).",
            ),
        ] {
            if let Some(us) = num(cost, key) {
                self.add(metric, Kind::Gauge, help, labels(), us / 1e6);
            }
        }
        if let Some(r) = num(cost, "hit_ratio") {
            self.add(
                "waffle_node_lookup_hit_ratio",
                Kind::Gauge,
                "Moving average of the node's lookup hit ratio.",
                labels(),
                r,
            );
        }
        for (key, help) in [
            ("declined_lookups", "Lookups not sent to the node because it was backed off."),
            ("declined_pushes", "Pushes not sent to the node because it was backed off."),
        ] {
            if let Some(n) = num(cost, key) {
                self.add(&format!("waffle_node_{key}_total"), Kind::Counter, help, labels(), n);
            }
        }
    }

    /// The preload's per-tablespace reads and writes.
    fn add_tablespaces(&mut self, v: &Value, file: &str) {
        for (name, s) in v.get("tablespaces").and_then(Value::as_object).into_iter().flatten() {
            let labels = || vec![("file", file.to_string()), ("tablespace", name.clone())];
            for (key, tier) in
                [("l1_hits", "l1"), ("push_queue_hits", "push_queue"), ("l2_hits", "l2"), ("disk_reads", "disk")]
            {
                if let Some(n) = num(s, key) {
                    let mut l = labels();
                    l.push(("tier", tier.into()));
                    self.add(
                        "waffle_tablespace_page_reads_total",
                        Kind::Counter,
                        "Page reads of a tablespace, by the tier that answered them.",
                        l,
                        n,
                    );
                }
            }
            if let Some(n) = num(s, "page_writes") {
                self.add(
                    "waffle_tablespace_page_writes_total",
                    Kind::Counter,
                    "Pages written to a tablespace.",
                    labels(),
                    n,
                );
            }
        }
    }

    /// The exposition: per family `# HELP`, `# TYPE`, then its samples; ends with a line feed.
    pub fn render(&self) -> String {
        let mut o = String::new();
        for f in self.families.iter().filter(|f| !f.samples.is_empty()) {
            let kind = match f.kind {
                Kind::Counter => "counter",
                Kind::Gauge => "gauge",
            };
            let _ = writeln!(o, "# HELP {} {}", f.name, f.help.replace('\\', "\\\\").replace('\n', "\\n"));
            let _ = writeln!(o, "# TYPE {} {kind}", f.name);
            for (labels, value) in &f.samples {
                o.push_str(&f.name);
                if !labels.is_empty() {
                    o.push('{');
                    for (i, (k, v)) in labels.iter().enumerate() {
                        let sep = if i > 0 { "," } else { "" };
                        let _ = write!(o, "{sep}{k}=\"{}\"", escape_label(v));
                    }
                    o.push('}');
                }
                let _ = writeln!(o, " {}", number(*value));
            }
        }
        o
    }
}

/// A label value as the format quotes it: `\`, `"` and line feeds escaped.
fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// A sample value: integers without a fraction, NaN and infinities as Prometheus spells them.
fn number(x: f64) -> String {
    if x.is_nan() {
        "NaN".into()
    } else if x.is_infinite() {
        if x > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else if x.fract() == 0.0 && x.abs() < 9e15 {
        format!("{}", x as i64)
    } else {
        format!("{x}")
    }
}

/// The exposition of several stats files: (label, JSON) pairs.
pub fn render(files: &[(String, Value)]) -> String {
    let mut e = Exposition::default();
    for (file, v) in files {
        e.add_stats(v, file);
    }
    e.render()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::{HashMap, HashSet};

    fn valid_name(s: &str, colon: bool) -> bool {
        let mut chars = s.chars();
        chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || (colon && c == ':'))
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || (colon && c == ':'))
    }

    fn parse_value(s: &str) -> Option<f64> {
        match s {
            "NaN" => Some(f64::NAN),
            "+Inf" => Some(f64::INFINITY),
            "-Inf" => Some(f64::NEG_INFINITY),
            _ => s.parse().ok(),
        }
    }

    /// `name{k="v",...}`: the name and the labels, unescaped; None if malformed.
    fn parse_series(s: &str) -> Option<(String, Vec<(String, String)>)> {
        let Some(open) = s.find('{') else {
            return valid_name(s, true).then(|| (s.to_string(), Vec::new()));
        };
        let name = &s[..open];
        let body = s[open + 1..].strip_suffix('}')?;
        let mut labels = Vec::new();
        let mut rest = body;
        while !rest.is_empty() {
            let eq = rest.find("=\"")?;
            let key = &rest[..eq];
            if !valid_name(key, false) {
                return None;
            }
            let mut value = String::new();
            let mut chars = rest[eq + 2..].char_indices();
            let end = loop {
                match chars.next()? {
                    (i, '"') => break eq + 2 + i + 1,
                    (_, '\\') => match chars.next()?.1 {
                        '\\' => value.push('\\'),
                        '"' => value.push('"'),
                        'n' => value.push('\n'),
                        _ => return None,
                    },
                    (_, '\n') => return None,
                    (_, c) => value.push(c),
                }
            };
            labels.push((key.to_string(), value));
            rest = &rest[end..];
            rest = rest.strip_prefix(',').unwrap_or(rest);
        }
        valid_name(name, true).then(|| (name.to_string(), labels))
    }

    /// Checks `text` line by line as the 0.0.4 text format requires; returns
    /// the samples by series (`name{k="v",...}` as written) with their values.
    fn check_exposition(text: &str) -> HashMap<String, f64> {
        assert!(text.ends_with('\n'), "the last line ends with a line feed");
        let mut types: HashMap<String, String> = HashMap::new();
        let mut helps: HashSet<String> = HashSet::new();
        let mut done: HashSet<String> = HashSet::new(); // families whose lines are over
        let mut current: Option<String> = None;
        let mut samples = HashMap::new();
        let mut enter = |family: &str, current: &mut Option<String>| {
            if current.as_deref() != Some(family) {
                assert!(!done.contains(family), "the lines of {family} are not together");
                if let Some(c) = current.take() {
                    done.insert(c);
                }
                *current = Some(family.to_string());
            }
        };
        for line in text.lines() {
            assert!(!line.is_empty(), "no empty lines are written");
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let (name, doc) = rest.split_once(' ').expect("HELP has a name and a docstring");
                assert!(valid_name(name, true), "{line}");
                let mut it = doc.chars();
                while let Some(c) = it.next() {
                    if c == '\\' {
                        assert!(matches!(it.next(), Some('\\' | 'n')), "bad escape in {line}");
                    }
                }
                assert!(helps.insert(name.to_string()), "one HELP per metric: {line}");
                enter(name, &mut current);
            } else if let Some(rest) = line.strip_prefix("# TYPE ") {
                let words: Vec<&str> = rest.split(' ').collect();
                assert_eq!(words.len(), 2, "{line}");
                assert!(valid_name(words[0], true), "{line}");
                assert!(["counter", "gauge", "histogram", "summary", "untyped"].contains(&words[1]), "{line}");
                assert!(
                    !samples.keys().any(|s: &String| s.split('{').next() == Some(words[0])),
                    "TYPE after samples: {line}"
                );
                assert!(
                    types.insert(words[0].to_string(), words[1].to_string()).is_none(),
                    "one TYPE per metric: {line}"
                );
                enter(words[0], &mut current);
            } else {
                assert!(!line.starts_with('#'), "only HELP and TYPE comments are written: {line}");
                let (series, value) = line.rsplit_once(' ').expect("a sample is a series and a value");
                let (name, labels) = parse_series(series).unwrap_or_else(|| panic!("malformed series: {line}"));
                let mut keys = HashSet::new();
                assert!(labels.iter().all(|(k, _)| keys.insert(k.clone())), "a label twice: {line}");
                let value = parse_value(value).unwrap_or_else(|| panic!("bad value: {line}"));
                let kind = types.get(&name).unwrap_or_else(|| panic!("sample before its TYPE: {line}"));
                if kind == "counter" {
                    assert!(name.ends_with("_total"), "counters end in _total: {line}");
                    assert!(value >= 0.0, "{line}");
                }
                enter(&name, &mut current);
                assert!(samples.insert(series.to_string(), value).is_none(), "a series twice: {line}");
            }
        }
        samples
    }

    fn known_stats() -> Value {
        serde_json::from_str(
            r#"{
            "adapter": "mariadb-preload", "state": "active", "cache_id": "00ff", "datadir": "/var/lib/mysql",
            "updated_unix_ms": 1700000000500, "page_bytes": 16384, "fused": null,
            "l1_hits": 600, "l1_misses": 400, "read_ahead_hits": 0, "push_queue_hits": 0,
            "l2_hits": 300, "l2_misses": 50, "disk_reads": 100,
            "read_ahead_windows": 0, "read_ahead_pages_l2": 0, "read_ahead_pages_disk": 0,
            "l2_rejects": {"version": 2, "seal": 0}, "l2_rejects_total": 2,
            "l2_faults": {"timeout": 1, "io": 0},
            "l1": {"capacity_bytes": 1073741824, "used_bytes": 536870912, "pages": 32768},
            "latency": {"l1": {"count": 600, "p50_us": 2, "p95_us": 4, "p99_us": 9, "max_us": 40}},
            "working_set": {"pages_1m": 1000, "pages_5m": 117965, "pages_15m": 200000,
                            "bytes_1m": 16384000, "bytes_5m": 1932738560, "bytes_15m": 3276800000,
                            "held_bytes": 966367641, "grid_bytes": 429496729, "advice": "..."},
            "nodes": [{"addr": "10.0.0.2:11211", "up": true, "requests": 500, "failures": 1, "timeouts": 1,
                       "marked_down": 0, "presence_misses": 50, "stale_connections": 0, "memory_bytes": 429496729,
                       "cost": {"state": "backed_off", "lookup_us": 250.0, "hit_ratio": 0.85, "disk_us": 100.0,
                                "saved_us": 85.0, "declined_lookups": 7, "declined_pushes": 3, "reason": "r"}},
                      {"addr": "10.0.0.3:11211", "up": false, "requests": 3}],
            "tablespaces": {"shop/\"odd\"\\name": {"l1_hits": 5, "l2_hits": 1, "disk_reads": 2, "page_writes": 4}}
        }"#,
        )
        .expect("valid JSON")
    }

    #[test]
    fn output_parses_and_has_the_figures() {
        let text = render(&[("/var/lib/mysql/waffle-stats.json".into(), known_stats())]);
        let s = check_exposition(&text);
        let f = r#"file="/var/lib/mysql/waffle-stats.json""#;
        let get = |series: &str| *s.get(series).unwrap_or_else(|| panic!("no {series} in\n{text}"));
        assert_eq!(get(&format!("waffle_l1_hits_total{{{f}}}")), 600.0);
        assert_eq!(get(&format!("waffle_l2_hits_total{{{f}}}")), 300.0);
        assert_eq!(get(&format!("waffle_disk_reads_total{{{f}}}")), 100.0);
        assert_eq!(get(&format!("waffle_l2_rejects_total{{{f},reason=\"version\"}}")), 2.0);
        assert_eq!(get(&format!("waffle_l2_faults_total{{{f},kind=\"timeout\"}}")), 1.0);
        assert_eq!(get(&format!("waffle_hit_ratio{{{f},tier=\"l1\"}}")), 0.6);
        assert_eq!(get(&format!("waffle_hit_ratio{{{f},tier=\"l2\"}}")), 0.3);
        assert_eq!(get(&format!("waffle_hit_ratio{{{f},tier=\"disk\"}}")), 0.1);
        assert!((get(&format!("waffle_l2_lookup_hit_ratio{{{f}}}")) - 300.0 / 350.0).abs() < 1e-12);
        assert_eq!(get(&format!("waffle_working_set_bytes{{{f},window=\"5m\"}}")), 1932738560.0);
        assert_eq!(get(&format!("waffle_working_set_pages{{{f},window=\"15m\"}}")), 200000.0);
        assert_eq!(get(&format!("waffle_held_bytes{{{f}}}")), 966367641.0);
        assert_eq!(get(&format!("waffle_l1_capacity_bytes{{{f}}}")), (1u64 << 30) as f64);
        assert_eq!(get(&format!("waffle_read_latency_seconds{{{f},tier=\"l1\",quantile=\"0.99\"}}")), 9e-6);
        assert_eq!(get(&format!("waffle_stats_updated_timestamp_seconds{{{f}}}")), 1_700_000_000.5);
        assert_eq!(get(&format!("waffle_fused{{{f}}}")), 0.0);
        let n2 = r#"node="10.0.0.2:11211""#;
        assert_eq!(get(&format!("waffle_node_up{{{f},{n2}}}")), 1.0);
        assert_eq!(get(&format!("waffle_node_up{{{f},node=\"10.0.0.3:11211\"}}")), 0.0);
        assert_eq!(get(&format!("waffle_node_requests_total{{{f},{n2}}}")), 500.0);
        assert_eq!(get(&format!("waffle_node_memory_bytes{{{f},{n2}}}")), 429496729.0);
        assert_eq!(get(&format!("waffle_node_cost_state{{{f},{n2},state=\"backed_off\"}}")), 1.0);
        assert_eq!(get(&format!("waffle_node_cost_state{{{f},{n2},state=\"on\"}}")), 0.0);
        assert_eq!(get(&format!("waffle_node_lookup_seconds{{{f},{n2}}}")), 250e-6);
        assert_eq!(get(&format!("waffle_node_declined_lookups_total{{{f},{n2}}}")), 7.0);
        // The label value with a quote and a backslash, escaped.
        let ts = r#"tablespace="shop/\"odd\"\\name""#;
        assert_eq!(get(&format!("waffle_tablespace_page_reads_total{{{f},{ts},tier=\"l2\"}}")), 1.0);
        assert_eq!(get(&format!("waffle_tablespace_page_writes_total{{{f},{ts}}}")), 4.0);
        let info = format!(
            "waffle_info{{{f},adapter=\"mariadb-preload\",state=\"active\",cache_id=\"00ff\",database=\"/var/lib/mysql\"}}"
        );
        assert_eq!(get(&info), 1.0);
        assert!(text.contains("# TYPE waffle_l1_hits_total counter\n"), "{text}");
        assert!(text.contains("# TYPE waffle_working_set_bytes gauge\n"), "{text}");
    }

    #[test]
    fn two_files_share_each_family() {
        let mut sqlite = known_stats();
        sqlite["adapter"] = json!("sqlite");
        let text = render(&[("a.json".into(), known_stats()), ("b\nc.json".into(), sqlite)]);
        let s = check_exposition(&text);
        assert_eq!(s["waffle_l1_hits_total{file=\"a.json\"}"], 600.0);
        assert_eq!(s["waffle_l1_hits_total{file=\"b\\nc.json\"}"], 600.0, "a line feed in a label is escaped");
        assert_eq!(text.matches("# TYPE waffle_l1_hits_total ").count(), 1);
    }

    #[test]
    fn a_preload_that_turned_off_has_only_its_info() {
        let v = json!({"adapter": "mariadb-preload", "state": "disabled", "disabled_reason": "native AIO"});
        let text = render(&[("f".into(), v)]);
        let s = check_exposition(&text);
        assert_eq!(s.len(), 1, "{text}");
        assert!(text.contains("state=\"disabled\""), "{text}");
    }

    #[test]
    fn the_checker_refuses_what_the_format_forbids() {
        for bad in [
            "waffle_x_total 1\n",                                   // no TYPE
            "# TYPE waffle_x counter\nwaffle_x 1\n",                // counter without _total
            "# TYPE waffle_x gauge\nwaffle_x{a=\"b\\q\"} 1\n",      // bad escape
            "# TYPE waffle_x gauge\nwaffle_x{a=\"1\",a=\"2\"} 1\n", // label twice
            "# TYPE waffle_x gauge\n# TYPE waffle_y gauge\nwaffle_x 1\nwaffle_y 1\nwaffle_x{a=\"1\"} 1\n", // apart
            "# TYPE waffle_x gauge\nwaffle_x one\n",                // bad value
            "# TYPE waffle_x gauge\nwaffle_x 1",                    // no final line feed
        ] {
            let r = std::panic::catch_unwind(|| check_exposition(bad));
            assert!(r.is_err(), "accepted:\n{bad}");
        }
    }

    #[test]
    fn numbers_are_spelt_as_prometheus_reads_them() {
        assert_eq!(number(3.0), "3");
        assert_eq!(number(0.25), "0.25");
        assert_eq!(number(f64::NAN), "NaN");
        assert_eq!(number(f64::NEG_INFINITY), "-Inf");
        assert_eq!(number(1e300).parse::<f64>(), Ok(1e300));
    }
}
