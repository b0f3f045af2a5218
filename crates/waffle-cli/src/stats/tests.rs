//! Tests of `waffle stats`: the metrics checked line by line against the
//! OpenMetrics text format, the figures of a known stats file, a missing
//! source beside a healthy one, the formats and the atomic output.

use std::collections::{HashMap, HashSet};

use serde_json::{json, Value};

use super::prometheus::render as prom;
use super::sources::Source;
use super::*;
use waffle_testkit::process::exited_pid;

fn valid_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// `name{k="v",...}`: the name and the labels, unescaped; None if malformed.
fn parse_series(s: &str) -> Option<(String, Vec<(String, String)>)> {
    let Some(open) = s.find('{') else {
        return valid_name(s).then(|| (s.to_string(), Vec::new()));
    };
    let name = &s[..open];
    let mut rest = s[open + 1..].strip_suffix('}')?;
    let mut labels = Vec::new();
    while !rest.is_empty() {
        let eq = rest.find("=\"")?;
        let key = &rest[..eq];
        if !valid_name(key) || key.contains(':') {
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
    valid_name(name).then(|| (name.to_string(), labels))
}

/// The family a sample of `name` belongs to, given the family types seen.
fn family_of(name: &str, types: &HashMap<String, String>) -> String {
    for (suffix, kind) in
        [("_total", "counter"), ("_bucket", "histogram"), ("_sum", "histogram"), ("_count", "histogram")]
    {
        if let Some(base) = name.strip_suffix(suffix) {
            if types.get(base).map(String::as_str) == Some(kind) {
                return base.to_string();
            }
        }
    }
    name.to_string()
}

/// Checks `text` line by line as the OpenMetrics text format requires (what
/// Prometheus parses); returns the samples by series as written.
fn check_exposition(text: &str) -> HashMap<String, f64> {
    assert!(text.ends_with("# EOF\n"), "the exposition ends with # EOF");
    let mut types: HashMap<String, String> = HashMap::new();
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
    for line in text.lines().take_while(|l| *l != "# EOF") {
        assert!(!line.is_empty(), "no empty lines");
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, doc) = rest.split_once(' ').expect("HELP has a name and a text");
            assert!(valid_name(name) && !doc.contains('\\'), "{line}");
            enter(name, &mut current);
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE has a name and a type");
            assert!(["counter", "gauge", "histogram"].contains(&kind), "{line}");
            assert!(!name.ends_with("_total"), "a counter family is named without _total: {line}");
            assert!(types.insert(name.to_string(), kind.to_string()).is_none(), "one TYPE per family: {line}");
            enter(name, &mut current);
        } else {
            assert!(!line.starts_with('#'), "only HELP and TYPE comments: {line}");
            let (series, value) = line.rsplit_once(' ').expect("a sample is a series and a value");
            let (name, labels) = parse_series(series).unwrap_or_else(|| panic!("malformed series: {line}"));
            let mut keys = HashSet::new();
            assert!(labels.iter().all(|(k, _)| keys.insert(k.clone())), "a label twice: {line}");
            let family = family_of(&name, &types);
            let kind = types.get(&family).unwrap_or_else(|| panic!("sample before its TYPE: {line}"));
            let value: f64 = value.parse().unwrap_or_else(|_| panic!("bad value: {line}"));
            let suffix = name.strip_prefix(family.as_str()).unwrap_or("?");
            match kind.as_str() {
                "counter" => assert!(suffix == "_total" && value >= 0.0, "a counter's sample is its _total: {line}"),
                "histogram" => assert!(
                    suffix == "_sum" || suffix == "_count" || (suffix == "_bucket" && keys.contains("le")),
                    "{line}"
                ),
                _ => assert_eq!(suffix, "", "{line}"),
            }
            enter(&family, &mut current);
            assert!(samples.insert(series.to_string(), value).is_none(), "a series twice: {line}");
        }
    }
    samples
}

fn known_stats() -> Value {
    serde_json::from_str(
        r#"{
        "format": "waffle-stats", "format_version": 1,
        "adapter": "mariadb-preload", "state": "active", "cache_id": "00ff", "datadir": "/var/lib/mysql",
        "updated_unix_ms": 1700000000500, "final": false, "started_unix_ms": 1699999000250, "page_bytes": 16384, "fused": null,
        "l1_hits": 600, "l1_misses": 400, "read_ahead_hits": 0, "push_queue_hits": 0,
        "l2_hits": 300, "l2_misses": 50, "disk_reads": 100,
        "read_ahead_windows": 0, "read_ahead_pages_l2": 0, "read_ahead_pages_disk": 0,
        "l2_rejects": {"version": 2, "seal": 0}, "l2_rejects_total": 2,
        "l2_faults": {"timeout": 1, "io": 0},
        "l1": {"capacity_bytes": 1073741824, "used_bytes": 536870912, "pages": 32768},
        "latency": {"l1": {"count": 600, "p50_us": 2, "p95_us": 4, "p99_us": 9, "max_us": 40, "sum_us": 1500,
                           "buckets": [[2, 350], [5, 590], [10, 595], [50, 600]]}},
        "working_set": {"pages_1m": 1000, "pages_5m": 117965, "pages_15m": 200000,
                        "bytes_1m": 16384000, "bytes_5m": 1932738560, "bytes_15m": 3276800000,
                        "held_bytes": 966367641, "grid_bytes": 429496729, "advice": "..."},
        "nodes": [{"addr": "10.0.0.2:11211", "up": true, "requests": 500, "failures": 1, "timeouts": 1,
                   "marked_down": 0, "presence_misses": 50, "stale_connections": 0, "memory_bytes": 429496729,
                   "cost": {"state": "backed_off", "lookup_us": 250.0, "hit_ratio": 0.85, "disk_us": 100.0,
                            "saved_us": 85.0, "declined_lookups": 7, "declined_pushes": 3, "reason": "r"},
                   "flash": {"bytes": 67108864, "items": 8835, "node_ram_hits": 1752, "node_flash_hits": 6449,
                             "node_flash_misses": 3, "node_flash_bad_crc": 1, "recent_flash_share": 0.75,
                             "tier_latency": {"ram_hits": 120, "flash_hits": 380, "ram_median_us": 45,
                                              "flash_median_us": 210}}},
                  {"addr": "10.0.0.3:11211", "up": false, "requests": 3}],
        "preload": {"page_reads": 8},
        "tablespaces": {"shop/\"odd\"\\name": {"l1_hits": 5, "l2_hits": 1, "disk_reads": 2, "page_writes": 4}}
    }"#,
    )
    .expect("valid JSON")
}

/// `v` as the live writer wrote it: stamped with this (running) process, written now, at an
/// interval of an hour (stale after 5 hours: however slow the machine, these tests judge it running).
fn live(mut v: Value) -> Value {
    let me = waffle_core::stats::health::own();
    v["format_version"] = json!(2);
    v["pid"] = json!(std::process::id());
    v["pid_start_ticks"] = json!(me.start_ticks);
    v["pid_namespace"] = json!(me.pid_namespace);
    v["boot_id"] = json!(me.boot_id);
    v["interval_ms"] = json!(3_600_000);
    v["updated_unix_ms"] = json!(waffle_core::stats::health::now_unix_ms());
    v
}

/// A source read from `v`, written by this process now unless `v` says otherwise after [`live`].
fn source(name: &str, v: Value) -> Source {
    judged(name, live(v))
}

/// A source read from `v` as it is.
fn judged(name: &str, v: Value) -> Source {
    Source { name: name.into(), label: name.into(), stats: Ok(sources::Stats::from_json(v).expect("a stats object")) }
}

#[test]
fn output_parses_and_has_the_figures() {
    let text = prom(&[source("/var/lib/mysql/waffle-stats.json", known_stats())]);
    let s = check_exposition(&text);
    let f = r#"source="/var/lib/mysql/waffle-stats.json""#;
    let get = |series: &str| *s.get(series).unwrap_or_else(|| panic!("no {series} in\n{text}"));
    assert_eq!(get(&format!("waffle_up{{{f}}}")), 1.0);
    assert_eq!(get(&format!("waffle_l1_hits_total{{{f}}}")), 600.0);
    assert_eq!(get(&format!("waffle_l2_hits_total{{{f}}}")), 300.0);
    assert_eq!(get(&format!("waffle_disk_reads_total{{{f}}}")), 100.0);
    assert_eq!(get(&format!("waffle_l2_rejects_total{{{f},reason=\"version\"}}")), 2.0);
    assert_eq!(get(&format!("waffle_l2_faults_total{{{f},kind=\"timeout\"}}")), 1.0);
    assert_eq!(get(&format!("waffle_hit_ratio{{{f},tier=\"l1\"}}")), 0.6);
    assert_eq!(get(&format!("waffle_hit_ratio{{{f},tier=\"disk\"}}")), 0.1);
    assert!((get(&format!("waffle_l2_lookup_hit_ratio{{{f}}}")) - 300.0 / 350.0).abs() < 1e-12);
    assert_eq!(get(&format!("waffle_working_set_bytes{{{f},window=\"5m\"}}")), 1932738560.0);
    assert_eq!(get(&format!("waffle_held_bytes{{{f}}}")), 966367641.0);
    assert_eq!(get(&format!("waffle_l1_capacity_bytes{{{f}}}")), (1u64 << 30) as f64);
    assert!(get(&format!("waffle_stats_updated_timestamp_seconds{{{f}}}")) > 1_700_000_000.5);
    assert_eq!(get(&format!("waffle_start_time_seconds{{{f}}}")), 1_699_999_000.25);
    assert_eq!(get(&format!("waffle_state{{{f},state=\"running\"}}")), 1.0);
    assert_eq!(get(&format!("waffle_state{{{f},state=\"crashed\"}}")), 0.0);
    assert_eq!(get(&format!("waffle_stats_final{{{f}}}")), 0.0);
    assert_eq!(get(&format!("waffle_fused{{{f}}}")), 0.0);
    let n2 = r#"node="10.0.0.2:11211""#;
    assert_eq!(get(&format!("waffle_node_up{{{f},{n2}}}")), 1.0);
    assert_eq!(get(&format!("waffle_node_up{{{f},node=\"10.0.0.3:11211\"}}")), 0.0);
    assert_eq!(get(&format!("waffle_node_requests_total{{{f},{n2}}}")), 500.0);
    assert_eq!(get(&format!("waffle_node_cost_state{{{f},{n2},state=\"backed_off\"}}")), 1.0);
    assert_eq!(get(&format!("waffle_node_cost_state{{{f},{n2},state=\"on\"}}")), 0.0);
    assert_eq!(get(&format!("waffle_node_lookup_seconds{{{f},{n2}}}")), 250e-6);
    assert_eq!(get(&format!("waffle_node_declined_lookups_total{{{f},{n2}}}")), 7.0);
    // A label value with a quote and a backslash, escaped.
    let ts = r#"tablespace="shop/\"odd\"\\name""#;
    assert_eq!(get(&format!("waffle_tablespace_page_reads_total{{{f},{ts},tier=\"l2\"}}")), 1.0);
    assert_eq!(get(&format!("waffle_tablespace_page_writes_total{{{f},{ts}}}")), 4.0);
    assert_eq!(get(&format!("waffle_info{{{f},adapter=\"mariadb-preload\",database=\"/var/lib/mysql\"}}")), 1.0);
    assert_eq!(get(&format!("waffle_cache_info{{{f},cache_id=\"00ff\"}}")), 1.0);
    assert!(text.contains("# TYPE waffle_l1_hits counter\n"), "{text}");
    assert!(text.contains("# TYPE waffle_read_latency_seconds histogram\n"), "{text}");
}

/// Issue 34: a node's flash tier, per node; a node without flash has none of its series.
#[test]
fn a_nodes_flash_tier_is_exported_per_node_and_only_for_a_node_with_flash() {
    let text = prom(&[source("f", known_stats())]);
    let s = check_exposition(&text);
    let n2 = r#"source="f",node="10.0.0.2:11211""#;
    let get = |series: String| *s.get(&series).unwrap_or_else(|| panic!("no {series} in\n{text}"));
    assert_eq!(get(format!("waffle_node_flash_bytes{{{n2}}}")), 67108864.0);
    assert_eq!(get(format!("waffle_node_flash_items{{{n2}}}")), 8835.0);
    assert_eq!(get(format!("waffle_node_ram_hits_total{{{n2}}}")), 1752.0);
    assert_eq!(get(format!("waffle_node_flash_hits_total{{{n2}}}")), 6449.0);
    assert_eq!(get(format!("waffle_node_flash_misses_total{{{n2}}}")), 3.0);
    assert_eq!(get(format!("waffle_node_flash_bad_crc_total{{{n2}}}")), 1.0);
    assert_eq!(get(format!("waffle_node_recent_flash_share{{{n2}}}")), 0.75);
    assert!(text.contains("# TYPE waffle_node_flash_hits counter\n"), "{text}");
    assert_eq!(get(format!("waffle_node_sampled_hits{{{n2},tier=\"ram\"}}")), 120.0);
    assert_eq!(get(format!("waffle_node_sampled_hits{{{n2},tier=\"flash\"}}")), 380.0);
    assert_eq!(get(format!("waffle_node_sampled_hit_median_seconds{{{n2},tier=\"ram\"}}")), 45e-6);
    assert_eq!(get(format!("waffle_node_sampled_hit_median_seconds{{{n2},tier=\"flash\"}}")), 210e-6);
    let flash_series: Vec<&String> =
        s.keys().filter(|k| k.contains("flash") || k.contains("ram_hits") || k.contains("sampled")).collect();
    assert_eq!(flash_series.len(), 11, "the first node's 11, none of the second's: {flash_series:?}");
    // The classic format has them too, each counter's family named as its samples.
    let classic = render(&[source("f", known_stats())], Format::Prometheus);
    assert!(classic.contains("# TYPE waffle_node_flash_hits_total counter\n"), "{classic}");
    assert!(classic.contains(&format!("\nwaffle_node_flash_hits_total{{{n2}}} 6449\n")), "{classic}");
}

#[test]
fn read_latency_is_a_histogram_with_cumulative_buckets_not_quantiles_since_start() {
    let text = prom(&[source("f", known_stats())]);
    let s = check_exposition(&text);
    let l = r#"source="f",tier="l1""#;
    let bucket = |le: &str| s[&format!("waffle_read_latency_seconds_bucket{{le=\"{le}\",{l}}}")];
    assert_eq!(s[&format!("waffle_read_latency_seconds_count{{{l}}}")], 600.0);
    assert_eq!(s[&format!("waffle_read_latency_seconds_sum{{{l}}}")], 0.0015);
    let buckets = s.keys().filter(|k| k.starts_with("waffle_read_latency_seconds_bucket{")).count();
    assert_eq!(buckets, 5, "the file's 4 and +Inf: {text}");
    assert_eq!(
        (bucket("0.000002"), bucket("0.000005"), bucket("0.00001"), bucket("0.00005")),
        (350.0, 590.0, 595.0, 600.0)
    );
    assert_eq!(bucket("+Inf"), 600.0, "{text}");
    assert!(!text.contains("quantile"), "no since-start quantiles:\n{text}");
}

#[test]
fn a_missing_source_is_up_0_and_the_others_are_all_there() {
    let missing = Source {
        name: "/srv/b/waffle-stats.json".into(),
        label: "/srv/b/waffle-stats.json".into(),
        stats: Err("cannot read it".into()),
    };
    let text = prom(&[source("/srv/a/waffle-stats.json", known_stats()), missing]);
    let s = check_exposition(&text);
    assert_eq!(s["waffle_up{source=\"/srv/a/waffle-stats.json\"}"], 1.0);
    assert_eq!(s["waffle_up{source=\"/srv/b/waffle-stats.json\"}"], 0.0);
    assert_eq!(s["waffle_l1_hits_total{source=\"/srv/a/waffle-stats.json\"}"], 600.0);
    assert!(!s.keys().any(|k| k.contains("/srv/b") && !k.starts_with("waffle_up")), "{text}");
}

#[test]
fn two_sources_share_each_family_and_a_line_feed_in_a_name_is_escaped() {
    let mut sqlite = known_stats();
    sqlite["adapter"] = json!("sqlite");
    let text = prom(&[source("a.json", known_stats()), source("b\nc.json", sqlite)]);
    let s = check_exposition(&text);
    assert_eq!(s["waffle_l1_hits_total{source=\"a.json\"}"], 600.0);
    assert_eq!(s["waffle_l1_hits_total{source=\"b\\nc.json\"}"], 600.0);
    assert_eq!(text.matches("# TYPE waffle_l1_hits ").count(), 1);
}

#[test]
fn a_preload_that_turned_off_has_only_its_info() {
    let v = json!({"format": "waffle-stats", "format_version": 1,
        "adapter": "mariadb-preload", "state": "disabled", "disabled_reason": "native AIO"});
    let text = prom(&[source("f", v)]);
    let s = check_exposition(&text);
    assert_eq!(s["waffle_up{source=\"f\"}"], 1.0, "its process runs: {text}");
    assert_eq!(s["waffle_state{source=\"f\",state=\"disabled\"}"], 1.0, "{text}");
    assert_eq!(s["waffle_state{source=\"f\",state=\"running\"}"], 0.0, "{text}");
    assert!(!text.contains("waffle_l1_hits"), "no cache, no figures: {text}");
}

/// Issue 32 item 2: a SIGKILLed writer's file kept `waffle_up 1`, `state="active"`.
#[test]
fn a_writer_that_is_not_running_is_down_and_its_last_figures_are_not_exported() {
    let gone = exited_pid();
    let mut crashed = live(known_stats());
    crashed["pid"] = json!(gone);
    let mut stopped = crashed.clone();
    (stopped["final"], stopped["state"]) = (json!(true), json!("stopped"));
    let mut stale = live(known_stats());
    (stale["updated_unix_ms"], stale["interval_ms"]) =
        (json!(waffle_core::stats::health::now_unix_ms() - 60_000), json!(1000));
    for (v, state) in [(crashed, "crashed"), (stopped, "stopped"), (stale, "stale")] {
        let text = prom(&[judged("f", v)]);
        let s = check_exposition(&text);
        assert_eq!(s["waffle_up{source=\"f\"}"], 0.0, "{state}: {text}");
        assert_eq!(s[&format!("waffle_state{{source=\"f\",state=\"{state}\"}}")], 1.0, "{text}");
        let on: Vec<&String> =
            s.iter().filter(|(k, v)| k.starts_with("waffle_state{") && **v == 1.0).map(|e| e.0).collect();
        assert_eq!(on.len(), 1, "one state at a time: {on:?}");
        assert!(!s.keys().any(|k| k.starts_with("waffle_l1_hits") || k.starts_with("waffle_node_up")), "{text}");
        assert!(s.contains_key("waffle_stats_updated_timestamp_seconds{source=\"f\"}"), "{text}");
    }
}

/// Issue 32 item 5: a restart (a new cache identity, a new start time) keeps every series but
/// `waffle_cache_info`'s: the same label sets, other values.
#[test]
fn a_restart_keeps_the_series_identity() {
    let before = known_stats();
    let mut after = known_stats();
    (after["cache_id"], after["started_unix_ms"]) = (json!("beef"), json!(1_700_000_100_000u64));
    let series = |v: Value| -> HashSet<String> {
        let text = prom(&[source("f", v)]);
        check_exposition(&text).into_keys().filter(|k| !k.starts_with("waffle_cache_info{")).collect()
    };
    let (a, b) = (series(before), series(after));
    assert_eq!(a, b);
    assert!(a.iter().any(|k| k.starts_with("waffle_info{")) && !a.iter().any(|k| k.contains("cache_id")), "{a:?}");
}

/// Issue 32 item 5: `source` was the path as typed: two spellings of one file were two series.
#[test]
fn two_spellings_of_one_file_are_one_source_labelled_by_its_canonical_path() {
    let dir = std::env::temp_dir().join(format!("waffle-cli-stats-spellings-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    std::os::unix::fs::symlink(&dir, dir.join("link")).unwrap();
    let file = dir.join("s.json");
    std::fs::write(&file, live(known_stats()).to_string()).unwrap();
    let canonical = std::fs::canonicalize(&file).unwrap().display().to_string();
    let spellings = [file.clone(), dir.join("./s.json"), dir.join("sub/../s.json"), dir.join("link/s.json")];
    let all = sources::read_all(&spellings);
    assert_eq!(all.len(), 1, "one file, one source");
    assert_eq!((all[0].label.as_str(), all[0].name.as_str()), (canonical.as_str(), file.to_str().unwrap()));
    let s = check_exposition(&render(&all, Format::Openmetrics));
    assert_eq!(s[&format!("waffle_up{{source=\"{canonical}\"}}")], 1.0);
    // Not written yet: its directory's canonical path and its name, as it will be once written.
    let later = sources::read_all(&[dir.join("link/./later.json")]);
    assert_eq!(later[0].label, std::fs::canonicalize(&dir).unwrap().join("later.json").display().to_string());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_checker_refuses_what_the_format_forbids() {
    for bad in [
        "waffle_x_total 1\n# EOF\n",                                   // no TYPE
        "# TYPE waffle_x counter\nwaffle_x 1\n# EOF\n",                // a counter sample without _total
        "# TYPE waffle_x gauge\nwaffle_x{a=\"b\\q\"} 1\n# EOF\n",      // bad escape
        "# TYPE waffle_x gauge\nwaffle_x{a=\"1\",a=\"2\"} 1\n# EOF\n", // label twice
        "# TYPE waffle_x gauge\n# TYPE waffle_y gauge\nwaffle_x 1\nwaffle_y 1\nwaffle_x{a=\"1\"} 1\n# EOF\n", // apart
        "# TYPE waffle_x gauge\nwaffle_x one\n# EOF\n",                // bad value
        "# TYPE waffle_x gauge\nwaffle_x 1\n",                         // no EOF
    ] {
        let r = std::panic::catch_unwind(|| check_exposition(bad));
        assert!(r.is_err(), "accepted:\n{bad}");
    }
}

#[test]
fn every_format_shows_the_files_read_and_output_is_atomic() {
    let dir = std::env::temp_dir().join(format!("waffle-cli-stats-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("s.json");
    let v = live(json!({"format": "waffle-stats", "l1_hits": 7, "l1_misses": 3}));
    std::fs::write(&good, v.to_string()).unwrap();
    std::fs::write(dir.join("array.json"), "[1]").unwrap();
    // Issue 32: any JSON object is not a healthy stats file.
    std::fs::write(dir.join("pkg.json"), r#"{"name":"x"}"#).unwrap();
    let all =
        sources::read_all(&[good.clone(), dir.join("missing.json"), dir.join("array.json"), dir.join("pkg.json")]);
    assert!(all[1].stats.as_ref().unwrap_err().contains("cannot read"));
    assert!(all[2].stats.as_ref().unwrap_err().contains("not a JSON object"));
    let pkg = all[3].stats.as_ref().unwrap_err();
    assert!(pkg.contains("pkg.json is not a stats file") && pkg.contains("\"format\": \"waffle-stats\""), "{pkg}");
    let up = check_exposition(&render(&all, Format::Openmetrics));
    assert_eq!(up[&format!("waffle_up{{source=\"{}\"}}", dir.join("pkg.json").display())], 0.0);
    assert!(render(&all, Format::Text).contains("reads    10 pages"));
    let json = serde_json::from_str::<Value>(&render(&all, Format::Json)).unwrap();
    assert_eq!((json["l1_hits"].as_u64(), json["health"]["state"].as_str()), (Some(7), Some("running")), "{json}");
    let text = render(&all, Format::Openmetrics);
    assert_eq!(check_exposition(&text)[&format!("waffle_l1_hits_total{{source=\"{}\"}}", good.display())], 7.0);
    assert!(unreadable(&all).unwrap_err().starts_with("3 of 4 stats files"));
    let out = dir.join("waffle.prom");
    write_atomically(&out, &text).unwrap();
    write_atomically(&out, &text).unwrap();
    assert_eq!(std::fs::read_to_string(&out).unwrap(), text);
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 4, "no temporary file is left");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn node_up_is_health_and_a_node_backed_off_for_cost_is_up() {
    // Issue 32 item 3: the HELP said a backed-off node was 0.
    let text = prom(&[source("f", known_stats())]);
    let s = check_exposition(&text);
    let n = r#"source="f",node="10.0.0.2:11211""#;
    assert_eq!(s[&format!("waffle_node_cost_state{{{n},state=\"backed_off\"}}")], 1.0);
    assert_eq!(s[&format!("waffle_node_up{{{n}}}")], 1.0, "backed off for cost, and up");
    let help = text.lines().find(|l| l.starts_with("# HELP waffle_node_up ")).expect("a HELP line");
    assert!(help.contains("backed off for cost is up") && !help.contains("0 while it is backed off"), "{help}");
}

#[test]
fn an_endpoint_beyond_loopback_is_warned_of() {
    // Issue 32 item 6: 0.0.0.0 served every interface without a word.
    for quiet in ["127.0.0.1:9477", "[::1]:9477", "127.0.0.2:1"] {
        assert_eq!(listen::exposure_warning(quiet, quiet.parse().unwrap()), None, "{quiet}");
    }
    let w = listen::exposure_warning("0.0.0.0:9477", "0.0.0.0:9477".parse().unwrap()).unwrap();
    assert!(w.contains("--listen 0.0.0.0:9477 serves every interface") && w.contains("without authentication"), "{w}");
    let w = listen::exposure_warning(":::9477", "[::]:9477".parse().unwrap()).unwrap();
    assert!(w.contains("every interface"), "{w}");
    let w = listen::exposure_warning("10.0.0.5:9477", "10.0.0.5:9477".parse().unwrap()).unwrap();
    assert!(w.contains("serves its network") && w.contains("bind 127.0.0.1"), "{w}");
}

#[test]
fn the_classic_format_names_counter_families_as_their_samples_and_has_no_eof() {
    // Issue 32 item 4: promtool's classic parser found "no help text" for every OpenMetrics counter.
    let v = live(known_stats()); // one stamp for both: written at the same millisecond
    let om = prom(&[judged("f", v.clone())]);
    let text = render(&[judged("f", v)], Format::Prometheus);
    assert!(!text.contains("# EOF") && om.ends_with("# EOF\n"));
    assert!(
        text.contains("# TYPE waffle_l1_hits_total counter\n# ")
            || text.contains("# TYPE waffle_l1_hits_total counter\n")
    );
    assert!(text.contains("# HELP waffle_l1_hits_total Page reads answered by L1"), "{text}");
    assert!(text.contains("\nwaffle_l1_hits_total{source=\"f\"} 600\n"), "{text}");
    assert!(text.contains("# TYPE waffle_read_latency_seconds histogram\n"), "histograms keep their names");
    assert!(text.contains("# TYPE waffle_up gauge\n"), "gauges too");
    // Every sample line is the same in both; only counter families' HELP and TYPE lines differ.
    let samples = |t: &str| t.lines().filter(|l| !l.starts_with('#')).map(str::to_string).collect::<Vec<_>>();
    assert_eq!(samples(&text), samples(&om));
    for line in text.lines().filter(|l| l.starts_with("# TYPE ") && l.ends_with(" counter")) {
        assert!(line.trim_end_matches(" counter").ends_with("_total"), "{line}");
    }
}

#[test]
fn the_endpoint_answers_what_the_scraper_accepts() {
    use classic::wants_openmetrics as om;
    // Prometheus 2.x's own header, and OpenMetrics alone.
    let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,\
                      text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    assert!(om(Some(prometheus)));
    assert!(om(Some("application/openmetrics-text; version=1.0.0")));
    // The classic format when asked for, preferred, or nothing said.
    for classic in [
        None,
        Some(""),
        Some("*/*"),
        Some("text/plain;version=0.0.4"),
        Some("text/plain;version=0.0.4;q=0.9,application/openmetrics-text;q=0.5"),
        Some("application/openmetrics-text;q=0"),
    ] {
        assert!(!om(classic), "{classic:?}");
    }
}
