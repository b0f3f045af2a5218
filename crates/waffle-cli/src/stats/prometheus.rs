//! `waffle stats --format prometheus` and `--listen`: stats files as metrics,
//! in the OpenMetrics text format that `prometheus-client` writes (Prometheus
//! reads it; so does node_exporter's textfile collector, counters untyped).
//!
//! Every sample carries `source`, the stats file it came from, so several
//! databases share one exposition. `waffle_up{source}` is 1 for a file read
//! and 0 for one that could not be (a stopped server's missing file): the
//! other sources are exported all the same. Counters are the cache's own
//! (they only grow while it is open: graph them with `rate()`); gauges are
//! levels (memory, working set, node health) and ratios since the cache
//! opened. Read latency is a histogram with cumulative buckets, so
//! `histogram_quantile(0.99, rate(waffle_read_latency_seconds_bucket[5m]))`
//! is the last five minutes' p99 (the JSON's percentiles are since the open).

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use serde_json::Value;

use super::sources::Source;

/// The content type of what [`render`] writes (the HTTP endpoint's).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The cache's counters: (JSON key, help). The metric is `waffle_<key>` (`_total` on its samples).
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
    ("l2_rejects_stale", "Grid copies refused as older than their page (rewritten after the push): expected."),
    ("l2_rejects_bad", "Grid copies refused as damaged, foreign or forged: a fault."),
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
    ("idle_probes", "mn sent because the node had seen no request for a while (its health stays known)."),
];

const COST_STATES: [&str; 3] = ["measuring", "on", "backed_off"];

/// A label value as the text format wants it: `\`, `"` and line feeds escaped
/// (prometheus-client 0.22 writes label values as given).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Escaped(String);

impl EncodeLabelValue for Escaped {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> fmt::Result {
        use fmt::Write as _;
        for c in self.0.chars() {
            match c {
                '\\' => encoder.write_str("\\\\")?,
                '"' => encoder.write_str("\\\"")?,
                '\n' => encoder.write_str("\\n")?,
                c => encoder.write_char(c)?,
            }
        }
        Ok(())
    }
}

type Labels = Vec<(&'static str, Escaped)>;

#[derive(Debug)]
enum Sample {
    Counter(u64),
    Gauge(f64),
    /// Sum, count, and per-bucket (not cumulative) counts by upper bound, `f64::MAX` for +Inf.
    Histogram(f64, u64, Vec<(f64, u64)>),
}

#[derive(Debug)]
struct Family {
    name: String,
    help: &'static str,
    kind: MetricType,
    samples: Vec<(Labels, Sample)>,
}

/// The metric families of some stats files, in the order first added, each
/// with its samples: what one scrape shows.
#[derive(Debug, Default)]
pub struct Exposition {
    families: Vec<Family>,
}

fn at<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(v, |v, k| v.get(k))
}

fn num(v: &Value, path: &str) -> Option<f64> {
    at(v, path).and_then(Value::as_f64)
}

fn label(k: &'static str, v: &str) -> (&'static str, Escaped) {
    (k, Escaped(v.to_string()))
}

impl Exposition {
    fn add(&mut self, name: &str, kind: MetricType, help: &'static str, labels: Labels, sample: Sample) {
        let i = match self.families.iter().position(|f| f.name == name) {
            Some(i) => i,
            None => {
                self.families.push(Family { name: name.to_string(), help, kind, samples: Vec::new() });
                self.families.len() - 1
            }
        };
        self.families[i].samples.push((labels, sample));
    }

    fn gauge(&mut self, name: &str, help: &'static str, labels: Labels, value: f64) {
        self.add(name, MetricType::Gauge, help, labels, Sample::Gauge(value));
    }

    fn counter(&mut self, name: &str, help: &'static str, labels: Labels, value: &Value) {
        if let Some(n) = value.as_u64() {
            self.add(name, MetricType::Counter, help, labels, Sample::Counter(n));
        }
    }

    /// Adds one source: `waffle_up` and, if it was read, its figures.
    pub fn add_source(&mut self, s: &Source) {
        let up = f64::from(u8::from(s.stats.is_ok()));
        self.gauge(
            "waffle_up",
            "1 if the stats file was read, 0 if it could not be (missing, unreadable, not a stats file).",
            vec![label("source", &s.name)],
            up,
        );
        if let Ok(v) = &s.stats {
            self.add_stats(v, &s.name);
        }
    }

    /// Adds the figures of one stats JSON object (`PRAGMA waffle_stats` or a stats file), labelled `source`.
    pub fn add_stats(&mut self, v: &Value, source: &str) {
        let base = || vec![label("source", source)];
        let with = |k: &'static str, val: &str| {
            let mut l = base();
            l.push(label(k, val));
            l
        };
        self.add_info(v, source);
        if v.get("l1_hits").is_none() {
            return; // turned off before the cache started
        }
        let fused = f64::from(u8::from(v.get("fused").is_some_and(|f| !f.is_null())));
        self.gauge(
            "waffle_fused",
            "1 when an internal error turned the cache off (every read goes to the file).",
            base(),
            fused,
        );
        for &(key, help) in COUNTERS {
            if let Some(n) = v.get(key) {
                self.counter(&format!("waffle_{key}"), help, base(), n);
            }
        }
        for (obj, metric, name, help) in [
            ("l2_rejects", "waffle_l2_rejects", "reason", "Grid values refused (envelope or page check), by reason."),
            ("l2_faults", "waffle_l2_faults", "kind", "Grid requests that failed, by kind."),
            (
                "l2_push_not_stored",
                "waffle_l2_push_not_stored",
                "reason",
                "Evicted pages the grid did not store, by why (node_down: not sent; refused; lost: a fault; other).",
            ),
        ] {
            for (k, n) in v.get(obj).and_then(Value::as_object).into_iter().flatten() {
                self.counter(metric, help, with(name, k), n);
            }
        }
        for &(path, metric, help) in GAUGES {
            if let Some(n) = num(v, path) {
                self.gauge(metric, help, base(), n);
            }
        }
        self.add_ratios(v, source);
        self.add_latency(v, source);
        for window in ["1m", "5m", "15m"] {
            for (unit, help) in [
                ("pages", "Distinct pages read or written over the window (HyperLogLog estimate, 1.6% error)."),
                ("bytes", "Distinct pages read or written over the window, in bytes."),
            ] {
                if let Some(n) = num(v, &format!("working_set.{unit}_{window}")) {
                    self.gauge(&format!("waffle_working_set_{unit}"), help, with("window", window), n);
                }
            }
        }
        for node in v.get("nodes").and_then(Value::as_array).into_iter().flatten() {
            self.add_node(node, source);
        }
        self.add_tablespaces(v, source);
    }

    /// Who wrote the file and when: `waffle_info`, the write's time, whether it was the last.
    fn add_info(&mut self, v: &Value, source: &str) {
        let text = |k: &str, default: &str| v.get(k).and_then(Value::as_str).unwrap_or(default).to_string();
        let database = v.get("file").or_else(|| v.get("datadir")).and_then(Value::as_str).unwrap_or("");
        let info = vec![
            label("source", source),
            label("adapter", &text("adapter", "sqlite")),
            label("state", &text("state", "active")),
            label("cache_id", &text("cache_id", "")),
            label("database", database),
        ];
        self.gauge(
            "waffle_info",
            "The stats file's adapter, state, cache identity and database (always 1).",
            info,
            1.0,
        );
        if let Some(ms) = num(v, "updated_unix_ms") {
            let help = "When the stats file was last written.";
            self.gauge("waffle_stats_updated_timestamp_seconds", help, vec![label("source", source)], ms / 1000.0);
        }
        if let Some(last) = v.get("final").and_then(Value::as_bool) {
            let help = "1 if the stats file is its cache's last (the server exited, the database closed).";
            self.gauge("waffle_stats_final", help, vec![label("source", source)], f64::from(u8::from(last)));
        }
    }

    /// Where page reads were answered, as shares of them (since the cache opened).
    fn add_ratios(&mut self, v: &Value, source: &str) {
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
                self.gauge(
                    "waffle_hit_ratio",
                    "Share of page reads answered by each tier since the cache opened (l1 includes the push queue).",
                    vec![label("source", source), label("tier", tier)],
                    answered / reads,
                );
            }
        }
        let asked = n("l2_hits") + n("l2_misses");
        if asked > 0.0 {
            self.gauge(
                "waffle_l2_lookup_hit_ratio",
                "Share of grid lookups that found their page, since the cache opened.",
                vec![label("source", source)],
                n("l2_hits") / asked,
            );
        }
    }

    /// `latency.<tier>`'s buckets as a histogram (a file without them, from an older waffle: none).
    fn add_latency(&mut self, v: &Value, source: &str) {
        for tier in ["l1", "l2", "disk"] {
            let Some(t) = v.get("latency").and_then(|l| l.get(tier)) else { continue };
            let Some(h) = histogram(t) else { continue };
            self.add(
                "waffle_read_latency_seconds",
                MetricType::Histogram,
                "Latency of a page read by the tier that answered it (rate the buckets for a recent window).",
                vec![label("source", source), label("tier", tier)],
                h,
            );
        }
    }

    fn add_node(&mut self, node: &Value, source: &str) {
        let addr = node.get("addr").and_then(Value::as_str).unwrap_or("?");
        let labels = || vec![label("source", source), label("node", addr)];
        let up = node.get("up").and_then(Value::as_bool).unwrap_or(false);
        self.gauge(
            "waffle_node_up",
            "1 while the grid node is up, 0 while it is backed off.",
            labels(),
            f64::from(u8::from(up)),
        );
        for &(key, help) in NODE_COUNTERS {
            if let Some(n) = node.get(key) {
                self.counter(&format!("waffle_node_{key}"), help, labels(), n);
            }
        }
        if let Some(n) = num(node, "memory_bytes") {
            self.gauge("waffle_node_memory_bytes", "The node's memory (memcached limit_maxbytes).", labels(), n);
        }
        if let Some(cost) = node.get("cost") {
            self.add_node_cost(cost, labels);
        }
    }

    fn add_node_cost(&mut self, cost: &Value, labels: impl Fn() -> Labels) {
        if let Some(state) = cost.get("state").and_then(Value::as_str) {
            for s in COST_STATES {
                let mut l = labels();
                l.push(label("state", s));
                self.gauge(
                    "waffle_node_cost_state",
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
                self.gauge(metric, help, labels(), us / 1e6);
            }
        }
        if let Some(r) = num(cost, "hit_ratio") {
            self.gauge("waffle_node_lookup_hit_ratio", "Moving average of the node's lookup hit ratio.", labels(), r);
        }
        for (key, help) in [
            ("declined_lookups", "Lookups not sent to the node because it was backed off."),
            ("declined_pushes", "Pushes not sent to the node because it was backed off."),
        ] {
            if let Some(n) = cost.get(key) {
                self.counter(&format!("waffle_node_{key}"), help, labels(), n);
            }
        }
    }

    /// The preload's per-tablespace reads and writes.
    fn add_tablespaces(&mut self, v: &Value, source: &str) {
        for (name, s) in v.get("tablespaces").and_then(Value::as_object).into_iter().flatten() {
            let labels = || vec![label("source", source), label("tablespace", name)];
            for (key, tier) in
                [("l1_hits", "l1"), ("push_queue_hits", "push_queue"), ("l2_hits", "l2"), ("disk_reads", "disk")]
            {
                if let Some(n) = s.get(key) {
                    let mut l = labels();
                    l.push(label("tier", tier));
                    let help = "Page reads of a tablespace, by the tier that answered them.";
                    self.counter("waffle_tablespace_page_reads", help, l, n);
                }
            }
            if let Some(n) = s.get("page_writes") {
                self.counter("waffle_tablespace_page_writes", "Pages written to a tablespace.", labels(), n);
            }
        }
    }

    /// The exposition, as prometheus-client writes it (ends with `# EOF`).
    pub fn render(self) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(self));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("writing to a String cannot fail");
        text
    }
}

/// A latency tier's histogram from its cumulative `buckets` ([le_us, count]), `sum_us` and `count`.
fn histogram(t: &Value) -> Option<Sample> {
    let count = t.get("count")?.as_u64()?;
    let sum_s = t.get("sum_us")?.as_f64()? / 1e6;
    let mut buckets = Vec::new();
    let mut below = 0;
    for b in t.get("buckets")?.as_array()? {
        let (le_us, cumulative) = (b.get(0)?.as_f64()?, b.get(1)?.as_u64()?);
        buckets.push((le_us / 1e6, cumulative.checked_sub(below)?));
        below = cumulative;
    }
    buckets.push((f64::MAX, count.checked_sub(below)?)); // the encoder's +Inf
    Some(Sample::Histogram(sum_s, count, buckets))
}

impl Collector for Exposition {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        for f in self.families.iter().filter(|f| !f.samples.is_empty()) {
            let mut metric = encoder.encode_descriptor(&f.name, f.help, None, f.kind)?;
            for (labels, sample) in &f.samples {
                let mut m = metric.encode_family(labels)?;
                match sample {
                    Sample::Counter(n) => m.encode_counter::<(), _, u64>(n, None)?,
                    Sample::Gauge(x) => m.encode_gauge(x)?,
                    Sample::Histogram(sum, count, buckets) => m.encode_histogram::<()>(*sum, *count, buckets, None)?,
                }
            }
        }
        Ok(())
    }
}

/// The exposition of `sources`, in their order.
pub fn render(sources: &[Source]) -> String {
    let mut e = Exposition::default();
    for s in sources {
        e.add_source(s);
    }
    e.render()
}
