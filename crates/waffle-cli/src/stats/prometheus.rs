//! `waffle stats --format prometheus|openmetrics` and `--listen`: stats files
//! as metrics, in the OpenMetrics text format that `prometheus-client` writes
//! (`super::classic` turns it into the classic text format 0.0.4 for
//! `--format prometheus` and the scrapers that do not ask for OpenMetrics).
//!
//! Every sample carries `source`, the stats file it came from (its canonical
//! path: one series whatever spelling named it), so several databases share
//! one exposition. `waffle_up{source}` is 1 while the file's writer runs and
//! keeps it current, 0 otherwise (a missing file, a crashed or stopped writer,
//! a stale file; `waffle_state` says which): the other sources are exported
//! all the same. Labels stay the same across restarts: what changes at each
//! start is a value (`waffle_start_time_seconds`) or the one info series
//! `waffle_cache_info`. Counters are the cache's own
//! (they only grow while it is open: graph them with `rate()`); gauges are
//! levels (memory, working set, node health) and ratios since the cache
//! opened. Read latency is a histogram with cumulative buckets, so
//! `histogram_quantile(0.99, rate(waffle_read_latency_seconds_bucket[5m]))`
//! is the last five minutes' p99 (the JSON's percentiles are since the open).

use std::fmt;
use std::path::Path;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use serde::Serialize;
use waffle_core::grid::memory::FlashStatus;
use waffle_core::grid::{CostStatus, NodeStatus};
use waffle_core::stats::health::State;
use waffle_core::stats::{CacheSnapshot, PreloadSection, StatsSnapshot, TierLatency};

use super::sources::{canonical, Source};

/// The content type of what [`render`] writes (the HTTP endpoint's).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The cache's counters: (JSON key, help, the field). The metric is `waffle_<key>` (`_total` on its samples).
type Field = fn(&CacheSnapshot) -> u64;
const COUNTERS: &[(&str, &str, Field)] = &[
    ("l1_hits", "Page reads answered by L1, the local pool.", |c| c.l1_hits),
    ("l1_misses", "Page reads L1 did not have.", |c| c.l1_misses),
    ("push_queue_hits", "L1 misses answered from the push queue (evicted, not yet pushed).", |c| c.push_queue_hits),
    ("l2_hits", "Page reads answered by the grid.", |c| c.l2_hits),
    ("l2_misses", "Grid lookups of pushed pages the grid no longer had (memcached evicted or lost them).", |c| {
        c.l2_misses
    }),
    ("l2_skipped", "Grid lookups not sent: the page's node was down.", |c| c.l2_skipped),
    ("l2_presence_skips", "Grid lookups not sent: the page was never pushed at its version, or taken back.", |c| {
        c.l2_presence_skips
    }),
    ("l2_aged_skips", "Grid lookups not sent: the page was pushed longer ago than the grid keeps pages.", |c| {
        c.l2_aged_skips
    }),
    ("l2_cost_skips", "Grid lookups not sent: the node costs more than the disk read it would save.", |c| {
        c.l2_cost_skips
    }),
    ("l2_push_cost_skips", "Evicted pages not pushed: the node costs more than it saves.", |c| c.l2_push_cost_skips),
    ("l2_pushes", "Evicted pages stored in the grid.", |c| c.l2_pushes),
    ("l2_push_drops", "Evicted pages dropped: the push queue was full.", |c| c.l2_push_drops),
    ("l2_push_failures", "Evicted pages the grid refused or lost to a fault.", |c| c.l2_push_failures),
    ("l2_rejects_stale", "Grid copies refused as older than their page (rewritten after the push): expected.", |c| {
        c.l2_rejects_stale
    }),
    ("l2_rejects_bad", "Grid copies refused as damaged, foreign or forged: a fault.", |c| c.l2_rejects_bad),
    ("l2_push_bytes", "Bytes stored in the grid.", |c| c.l2_push_bytes),
    ("l2_fetch_bytes", "Bytes fetched from the grid.", |c| c.l2_fetch_bytes),
    ("disk_reads", "Single-page reads of the database file.", |c| c.disk_reads),
    ("disk_short_reads", "Reads past the end of the database file.", |c| c.disk_short_reads),
    ("disk_writes", "Whole pages the database wrote.", |c| c.disk_writes),
    ("partial_writes", "Writes of part of a page (the page is dropped from the tiers).", |c| c.partial_writes),
    ("truncates", "Truncations of the database file.", |c| c.truncates),
    ("read_ahead_windows", "Read-ahead windows of sequential scans.", |c| c.read_ahead_windows),
    ("read_ahead_hits", "Page reads answered by a read-ahead window.", |c| c.read_ahead_hits),
    ("read_ahead_pages_l2", "Pages read-ahead windows brought from the grid.", |c| c.read_ahead_pages_l2),
    ("read_ahead_pages_disk", "Pages read-ahead windows brought from the disk.", |c| c.read_ahead_pages_disk),
    ("scan_drops", "Read-ahead pages evicted unread (dropped, not pushed).", |c| c.scan_drops),
    ("resets", "Whole-cache invalidations (the page size changed).", |c| c.resets),
    ("foreign_changes", "Commits by writers that bypass this cache.", |c| c.foreign_changes),
    ("foreign_resets", "Foreign changes that invalidated every cached page.", |c| c.foreign_resets),
    ("foreign_pages_invalidated", "Pages named as changed by another writer.", |c| c.foreign_pages_invalidated),
    ("foreign_copies_dropped", "Cached copies dropped because another writer changed them.", |c| {
        c.foreign_copies_dropped
    }),
    ("l1_stale_drops", "L1 copies found at a version the file has left, dropped unserved.", |c| c.l1_stale_drops),
];

/// The cache's levels: (metric, help, the field; None: not known).
type Level = fn(&CacheSnapshot) -> Option<u64>;
const GAUGES: &[(&str, &str, Level)] = &[
    ("waffle_page_bytes", "Page size in use.", |c| Some(c.page_bytes)),
    ("waffle_l1_capacity_bytes", "L1's budget.", |c| Some(c.l1.capacity_bytes)),
    ("waffle_l1_used_bytes", "Bytes L1 holds.", |c| Some(c.l1.used_bytes)),
    ("waffle_l1_pages", "Pages L1 holds.", |c| Some(c.l1.pages)),
    ("waffle_push_queue_bytes", "Evicted bytes waiting to be pushed.", |c| Some(c.push_queue_bytes)),
    ("waffle_versions_tracked", "Pages whose version the cache tracks.", |c| Some(c.versions_tracked)),
    ("waffle_l2_presence_pages", "Pages the cache believes the grid holds.", |c| Some(c.l2_presence_pages)),
    ("waffle_l2_reach_pushes", "How many pushes back the grid is seen to keep pages (0: unknown).", |c| {
        Some(c.l2_reach_pushes)
    }),
    ("waffle_held_bytes", "L1's budget plus the memory of the grid's nodes that are up.", |c| {
        Some(c.working_set.held_bytes)
    }),
    ("waffle_grid_memory_bytes", "Memory of the grid's nodes that are up (memcached -m).", |c| {
        c.working_set.grid_bytes
    }),
];

/// A node's counters: (JSON key, help, the field). The metric is `waffle_node_<key>`.
type NodeField = fn(&NodeStatus) -> u64;
const NODE_COUNTERS: &[(&str, &str, NodeField)] = &[
    ("requests", "Round trips sent to the node.", |n| n.requests),
    ("failures", "Round trips that ended in a fault.", |n| n.failures),
    ("timeouts", "Round trips that ended at their deadline.", |n| n.timeouts),
    ("marked_down", "Times the node went from up to down.", |n| n.marked_down),
    ("presence_misses", "Misses of pages the cache had pushed to the node.", |n| n.presence_misses),
    ("stale_connections", "Pooled connections the node had closed, found when used.", |n| n.stale_connections),
    ("idle_probes", "mn sent because the node had seen no request for a while (its health stays known).", |n| {
        n.idle_probes
    }),
];

const COST_STATES: [&str; 3] = ["measuring", "on", "backed_off"];

const UP_HELP: &str = "1 while the stats file's writer runs and keeps it current (waffle_state running, off or \
     disabled); 0 if it stopped, crashed, is stale, or the file could not be read (missing, unreadable, not a stats file).";
const STATE_HELP: &str = "1 for the writer's state, 0 for the others: running, off (the operator's switch), disabled \
     (Waffle turned itself off), stopped (clean end), crashed (its process died without a last write), stale (not \
     rewritten for 5 of its intervals).";

/// Up/down is the node's health (faults), not its cost: a node backed off for cost still answers.
pub const NODE_UP_HELP: &str = "1 while the grid node is up, 0 while it is down (faults marked it down until its next \
     probe, or its address did not resolve); a node backed off for cost is up (see waffle_node_cost_state).";

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

/// The counts of a group of counters (`l2_rejects`, ...) by their JSON names.
fn named_counts<T: Serialize>(counts: &T) -> Vec<(String, u64)> {
    let v = serde_json::to_value(counts).unwrap_or_default();
    v.as_object().into_iter().flatten().filter_map(|(k, n)| Some((k.clone(), n.as_u64()?))).collect()
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

    fn counter(&mut self, name: &str, help: &'static str, labels: Labels, n: u64) {
        self.add(name, MetricType::Counter, help, labels, Sample::Counter(n));
    }

    /// Adds one source: `waffle_up` (1 only while its writer runs and keeps it current), its
    /// state, identity and stamp if it was read, and its figures while its writer is up (a dead
    /// or stale writer's last figures are no news: exported, they would read as current).
    pub fn add_source(&mut self, s: &Source) {
        let up = s.stats.as_ref().is_ok_and(|v| v.health.state.is_up());
        self.gauge("waffle_up", UP_HELP, vec![label("source", &s.label)], f64::from(u8::from(up)));
        let Ok(v) = &s.stats else { return };
        self.add_state(v.health.state, &s.label);
        self.add_info(&v.snapshot, &s.label);
        if up {
            self.add_stats(&v.snapshot, &s.label);
        }
    }

    /// `waffle_state{state}`: 1 for the state the writer is in, 0 for the others (a fixed set of
    /// series, none of which appears or vanishes when the state changes).
    fn add_state(&mut self, now: State, source: &str) {
        for s in State::ALL {
            let labels = vec![label("source", source), label("state", s.name())];
            self.gauge("waffle_state", STATE_HELP, labels, f64::from(u8::from(s == now)));
        }
    }

    /// Adds the figures of one stats snapshot (`PRAGMA waffle_stats` or a stats file), labelled `source`.
    pub fn add_stats(&mut self, v: &StatsSnapshot, source: &str) {
        let base = || vec![label("source", source)];
        let with = |k: &'static str, val: &str| {
            let mut l = base();
            l.push(label(k, val));
            l
        };
        let Some(c) = &v.cache else {
            return; // turned off before the cache started
        };
        self.gauge(
            "waffle_fused",
            "1 when an internal error turned the cache off (every read goes to the file).",
            base(),
            f64::from(u8::from(c.fused.is_some())),
        );
        for &(key, help, field) in COUNTERS {
            self.counter(&format!("waffle_{key}"), help, base(), field(c));
        }
        for (counts, metric, name, help) in [
            (
                named_counts(&c.l2_rejects),
                "waffle_l2_rejects",
                "reason",
                "Grid values refused (envelope or page check), by reason.",
            ),
            (named_counts(&c.l2_faults), "waffle_l2_faults", "kind", "Grid requests that failed, by kind."),
            (
                named_counts(&c.l2_push_not_stored),
                "waffle_l2_push_not_stored",
                "reason",
                "Evicted pages the grid did not store, by why (node_down: not sent; refused; lost: a fault; other).",
            ),
        ] {
            for (k, n) in counts {
                self.counter(metric, help, with(name, &k), n);
            }
        }
        for &(metric, help, field) in GAUGES {
            if let Some(n) = field(c) {
                self.gauge(metric, help, base(), n as f64);
            }
        }
        self.add_ratios(c, source);
        self.add_latency(c, source);
        let ws = &c.working_set;
        for (window, pages, bytes) in
            [("1m", ws.pages_1m, ws.bytes_1m), ("5m", ws.pages_5m, ws.bytes_5m), ("15m", ws.pages_15m, ws.bytes_15m)]
        {
            for (unit, n, help) in [
                ("pages", pages, "Distinct pages read or written over the window (HyperLogLog estimate, 1.6% error)."),
                ("bytes", bytes, "Distinct pages read or written over the window, in bytes."),
            ] {
                self.gauge(&format!("waffle_working_set_{unit}"), help, with("window", window), n as f64);
            }
        }
        for node in &c.nodes {
            self.add_node(node, source);
        }
        if let Some(p) = &v.preload {
            self.add_tablespaces(p, source);
        }
    }

    /// Who wrote the file and when. The labels of `waffle_info` stay the same across restarts and
    /// state changes (one series per file); what changes at each start is in `waffle_cache_info`
    /// (the cache identity, one series per start) and `waffle_start_time_seconds` (a value).
    fn add_info(&mut self, v: &StatsSnapshot, source: &str) {
        let st = &v.stamp;
        let database = match (&v.sqlite, &v.preload) {
            (Some(q), _) => q.file.as_str(),
            (None, Some(p)) => p.datadir.as_str(),
            (None, None) => "",
        };
        let database =
            if database.is_empty() { String::new() } else { canonical(Path::new(database)).display().to_string() };
        let info = vec![
            label("source", source),
            label("adapter", st.adapter.as_deref().unwrap_or("sqlite")),
            label("database", &database),
        ];
        self.gauge("waffle_info", "The stats file's adapter and database (always 1).", info, 1.0);
        if let Some(id) = v.cache.as_ref().map(|c| c.cache_id.as_str()).filter(|id| !id.is_empty()) {
            let help = "The running cache's identity, new at each start (always 1; join on source).";
            self.gauge("waffle_cache_info", help, vec![label("source", source), label("cache_id", id)], 1.0);
        }
        let source_only = || vec![label("source", source)];
        if let Some(ms) = st.started_unix_ms {
            let help = "When the cache started (its counters start at 0 then).";
            self.gauge("waffle_start_time_seconds", help, source_only(), ms as f64 / 1000.0);
        }
        if let Some(ms) = st.updated_unix_ms {
            let help = "When the stats file was last written.";
            self.gauge("waffle_stats_updated_timestamp_seconds", help, source_only(), ms as f64 / 1000.0);
        }
        if let Some(last) = st.final_write {
            let help = "1 if the stats file is its cache's last (the server exited, the database closed).";
            self.gauge("waffle_stats_final", help, source_only(), f64::from(u8::from(last)));
        }
    }

    /// Where page reads were answered, as shares of them (since the cache opened).
    fn add_ratios(&mut self, c: &CacheSnapshot, source: &str) {
        let n = |x: u64| x as f64;
        let reads = n(c.l1_hits) + n(c.read_ahead_hits) + n(c.l1_misses);
        // A read that started a read-ahead window is shared between grid and disk
        // as the window's pages were (the bench's `Hits` does the same).
        let (ra_l2, ra_disk, windows) = (n(c.read_ahead_pages_l2), n(c.read_ahead_pages_disk), n(c.read_ahead_windows));
        let l2_share = if ra_l2 + ra_disk > 0.0 { ra_l2 / (ra_l2 + ra_disk) } else { 0.0 };
        if reads > 0.0 {
            for (tier, answered) in [
                ("l1", n(c.l1_hits) + n(c.read_ahead_hits) + n(c.push_queue_hits)),
                ("l2", n(c.l2_hits) + windows * l2_share),
                ("disk", n(c.disk_reads) + windows * (1.0 - l2_share)),
            ] {
                self.gauge(
                    "waffle_hit_ratio",
                    "Share of page reads answered by each tier since the cache opened (l1 includes the push queue).",
                    vec![label("source", source), label("tier", tier)],
                    answered / reads,
                );
            }
        }
        let asked = n(c.l2_hits) + n(c.l2_misses);
        if asked > 0.0 {
            self.gauge(
                "waffle_l2_lookup_hit_ratio",
                "Share of grid lookups that found their page, since the cache opened.",
                vec![label("source", source)],
                n(c.l2_hits) / asked,
            );
        }
    }

    /// `latency.<tier>`'s buckets as a histogram (a tier without them, from an older waffle: none).
    fn add_latency(&mut self, c: &CacheSnapshot, source: &str) {
        let l = &c.latency;
        for (tier, t) in [("l1", &l.l1), ("l2", &l.l2), ("disk", &l.disk)] {
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

    fn add_node(&mut self, node: &NodeStatus, source: &str) {
        let labels = || vec![label("source", source), label("node", &node.addr)];
        self.gauge("waffle_node_up", NODE_UP_HELP, labels(), f64::from(u8::from(node.up)));
        for &(key, help, field) in NODE_COUNTERS {
            self.counter(&format!("waffle_node_{key}"), help, labels(), field(node));
        }
        if let Some(n) = node.memory_bytes {
            self.gauge("waffle_node_memory_bytes", "The node's memory (memcached limit_maxbytes).", labels(), n as f64);
        }
        if let Some(f) = &node.flash {
            self.add_node_flash(f, labels);
        }
        self.add_node_cost(&node.cost, labels);
    }

    /// A node's flash tier (memcached's extstore): none for a node without. Its hits are the
    /// node's counters, every client's together, and restart at 0 with the node.
    fn add_node_flash(&mut self, f: &FlashStatus, labels: impl Fn() -> Labels) {
        self.gauge(
            "waffle_node_flash_bytes",
            "The node's flash file (memcached extstore_limit_maxbytes).",
            labels(),
            f.bytes as f64,
        );
        self.gauge(
            "waffle_node_flash_items",
            "Values on the node's flash now (extstore_objects_used).",
            labels(),
            f.items as f64,
        );
        for (key, n, help) in [
            ("ram_hits", f.node_ram_hits, "Hits the node served from RAM, all its clients (get_hits - get_extstore)."),
            (
                "flash_hits",
                f.node_flash_hits,
                "Hits the node served from flash, all its clients (get_extstore - miss_from_extstore).",
            ),
            (
                "flash_misses",
                f.node_flash_misses,
                "Flash reads of the node that found nothing usable (miss_from_extstore).",
            ),
            (
                "flash_bad_crc",
                f.node_flash_bad_crc,
                "Of those, values whose CRC failed: a damaged flash file (badcrc_from_extstore).",
            ),
        ] {
            self.counter(&format!("waffle_node_{key}"), help, labels(), n);
        }
        if let Some(share) = f.recent_flash_share {
            let help = "Of the node's hits between its last two stats asks (about 10 s apart), the share from flash.";
            self.gauge("waffle_node_recent_flash_share", help, labels(), share);
        }
        if let Some(t) = &f.tier_latency {
            for (tier, hits, median) in
                [("ram", t.ram_hits, t.ram_median_us), ("flash", t.flash_hits, t.flash_median_us)]
            {
                let tiered = || {
                    let mut l = labels();
                    l.push(label("tier", tier));
                    l
                };
                let help =
                    "This client's hits on the node in the last sample of its log, by the tier that served them.";
                self.gauge("waffle_node_sampled_hits", help, tiered(), hits as f64);
                if let Some(us) = median {
                    let help = "The median round trip of those hits, by tier, in seconds.";
                    self.gauge("waffle_node_sampled_hit_median_seconds", help, tiered(), us as f64 / 1e6);
                }
            }
        }
    }

    fn add_node_cost(&mut self, cost: &CostStatus, labels: impl Fn() -> Labels) {
        let state = serde_json::to_value(cost.state).unwrap_or_default();
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
        for (us, metric, help) in [
            (cost.lookup_us, "waffle_node_lookup_seconds", "Moving average of a lookup's round trip to the node."),
            (
                cost.saved_us,
                "waffle_node_lookup_saves_seconds",
                "Moving average of the disk time a lookup saves (hit ratio x disk read).",
            ),
        ] {
            self.gauge(metric, help, labels(), us / 1e6);
        }
        self.gauge(
            "waffle_node_lookup_hit_ratio",
            "Moving average of the node's lookup hit ratio.",
            labels(),
            cost.hit_ratio,
        );
        for (key, n, help) in [
            ("declined_lookups", cost.declined_lookups, "Lookups not sent to the node because it was backed off."),
            ("declined_pushes", cost.declined_pushes, "Pushes not sent to the node because it was backed off."),
        ] {
            self.counter(&format!("waffle_node_{key}"), help, labels(), n);
        }
    }

    /// The preload's per-tablespace reads and writes.
    fn add_tablespaces(&mut self, p: &PreloadSection, source: &str) {
        for (name, s) in &p.tablespaces {
            let labels = || vec![label("source", source), label("tablespace", name)];
            for (n, tier) in
                [(s.l1_hits, "l1"), (s.push_queue_hits, "push_queue"), (s.l2_hits, "l2"), (s.disk_reads, "disk")]
            {
                let mut l = labels();
                l.push(label("tier", tier));
                let help = "Page reads of a tablespace, by the tier that answered them.";
                self.counter("waffle_tablespace_page_reads", help, l, n);
            }
            self.counter("waffle_tablespace_page_writes", "Pages written to a tablespace.", labels(), s.page_writes);
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

/// A latency tier's histogram from its cumulative `buckets` ([le_us, count]), `sum_us` and `count`
/// (None without buckets, or with counts that do not add up).
fn histogram(t: &TierLatency) -> Option<Sample> {
    if t.buckets.is_empty() {
        return None;
    }
    let mut buckets = Vec::new();
    let mut below = 0;
    for &[le_us, cumulative] in &t.buckets {
        buckets.push((le_us as f64 / 1e6, cumulative.checked_sub(below)?));
        below = cumulative;
    }
    buckets.push((f64::MAX, t.count.checked_sub(below)?)); // the encoder's +Inf
    Some(Sample::Histogram(t.sum_us as f64 / 1e6, t.count, buckets))
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
