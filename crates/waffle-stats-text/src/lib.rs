//! waffle-stats-text: the counters of a stats file for people, what `waffle stats FILE` prints
//! (the command itself is the CLI's, crates/waffle-cli/src/stats) and what
//! `waffle bench mysql` shows after its waffle configuration.
//!
//! Reads the [`StatsSnapshot`] of the preload's `waffle-stats.json`, of a
//! SQLite database's stats file or of `PRAGMA waffle_stats` (the same
//! counters) and prints where reads were answered, the grid's health, writes, latencies,
//! the working set, the nodes, and (for the preload) one line per tablespace.

use std::fmt::Write as _;

use serde::Serialize;
use waffle_core::stats::{health, CacheSnapshot, PreloadSection, StatsSnapshot};

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

/// `, grid a,b` from the preload's `grid` or SQLite's `config.grid`; empty without one.
fn grid_text(s: &StatsSnapshot) -> String {
    let grid = match (&s.preload, &s.sqlite) {
        (Some(p), _) => p.grid.clone(),
        (None, Some(q)) => q.config.grid.join(","),
        (None, None) => String::new(),
    };
    if grid.is_empty() {
        grid
    } else {
        format!(", grid {grid}")
    }
}

/// `, datadir D` (the preload) or `, database F` (SQLite).
fn place(s: &StatsSnapshot) -> String {
    match (&s.preload, &s.sqlite) {
        (Some(p), _) => format!(", datadir {}", p.datadir),
        (None, Some(q)) => format!(", database {}", q.file),
        (None, None) => String::new(),
    }
}

/// A counter for people: its figure, and what it means.
struct Event {
    n: u64,
    what: String,
}

fn event(n: u64, what: impl Into<String>) -> Event {
    Event { n, what: what.into() }
}

/// The nonzero counts of a group of counters (`l2_faults`, ...) by their JSON
/// names, in the JSON's order.
fn nonzero<T: Serialize>(counts: &T) -> Vec<(String, u64)> {
    let v = serde_json::to_value(counts).unwrap_or_default();
    let m = v.as_object().into_iter().flatten();
    m.filter_map(|(name, n)| Some((name.clone(), n.as_u64()?))).filter(|(_, n)| *n > 0).collect()
}

/// `a 1, b 2` of the nonzero counts of a group.
fn parts<T: Serialize>(counts: &T) -> String {
    nonzero(counts).into_iter().map(|(name, n)| format!("{name} {n}")).collect::<Vec<_>>().join(", ")
}

/// What happened that a DBA may wonder about, in two groups: what the cache
/// does by design (nothing is lost: the disk has every page), and faults
/// worth a look (each cost a disk read, never a wrong page). Zero counts
/// are left out; a group with none says so.
fn events(o: &mut String, c: &CacheSnapshot, p: Option<&PreloadSection>) {
    let groups = [
        ("expected", "the cache at work; nothing is lost: the disk has every page", expected_events(c, p)),
        ("faults", "worth a look; each cost a disk read or a push, none served a wrong page", fault_events(c, p)),
    ];
    for (group, meaning, rows) in groups {
        let rows: Vec<Event> = rows.into_iter().filter(|e| e.n > 0).collect();
        if rows.is_empty() {
            let _ = writeln!(o, "{group:<8} none");
            continue;
        }
        let _ = writeln!(o, "{group:<8} ({meaning})");
        for e in rows {
            let _ = writeln!(o, "         {:>9}  {}", e.n, e.what);
        }
    }
}

/// `l2_push_not_stored` for people: "1300 not sent (the node was down), 6 refused by the node (...)".
fn not_stored_words(c: &CacheSnapshot) -> String {
    let words = |why: &str| match why {
        "node_down" => "not sent (the node was down or unreachable)",
        "refused" => "refused by the node (memcached out of memory, or too large)",
        "lost" => "lost on the way (a timeout or a reset)",
        _ => "not sent (no grid any more, or not sealable)",
    };
    let rows = nonzero(&c.l2_push_not_stored);
    rows.into_iter().map(|(why, n)| format!("{n} {}", words(&why))).collect::<Vec<_>>().join(", ")
}

/// The cache at work: counted so the figures add up, not a sign of trouble.
fn expected_events(c: &CacheSnapshot, p: Option<&PreloadSection>) -> Vec<Event> {
    let mut rows = vec![event(
        c.l2_rejects_stale,
        "stale grid copies refused: the page was rewritten after its copy was pushed (read from disk)",
    )];
    match p.map(|p| &p.preload) {
        Some(p) => {
            let (doublewrite, partial) = (p.multi_page_writes, p.partial_writes);
            rows.push(event(
                doublewrite,
                "pages of InnoDB's doublewrite buffer dropped from the cache: written several at once, read only by crash recovery; not lost writes",
            ));
            // Failed writes are faults (below); the rest of the partial ones are the server's to make.
            rows.push(event(
                partial.saturating_sub(p.failed_writes),
                "pages dropped from the cache after a write of part of a page (the file has the write)",
            ));
            let other = c.partial_writes.saturating_sub(doublewrite + partial);
            rows.push(event(other, "pages dropped from the cache after hole punches and vectored writes"));
        }
        None => rows.push(event(
            c.partial_writes,
            "pages dropped from the cache after a write of part of a page (the file has the write)",
        )),
    }
    rows.push(event(c.truncates, "truncations: the pages past the new end left the cache"));
    rows.push(event(
        c.l2_push_cost_skips,
        "evicted pages not pushed: their node is backed off (asking it costs more than the disk read it saves)",
    ));
    rows
}

/// Faults: each one cost a disk read (or a push), none served a wrong page.
fn fault_events(c: &CacheSnapshot, p: Option<&PreloadSection>) -> Vec<Event> {
    let mut rows = vec![
        event(c.l2_push_failures, format!("evicted pages the grid did not store: {}", not_stored_words(c))),
        event(c.l2_push_drops, "evicted pages dropped: the push queue was full (the grid fell behind the evictions)"),
        event(
            c.l2_rejects_bad,
            format!("grid copies refused as damaged, foreign or forged (by reason: {})", parts(&c.l2_rejects)),
        ),
        event(c.l2_faults.total(), format!("grid requests that failed ({})", parts(&c.l2_faults))),
    ];
    if let Some(p) = p.map(|p| &p.preload) {
        rows.push(event(
            p.innodb_rejects.total(),
            format!("grid copies refused by InnoDB's page check ({})", parts(&p.innodb_rejects)),
        ));
        rows.push(event(p.fallback_reads, "page reads the cache could not answer (the server read them itself)"));
        rows.push(event(
            p.failed_writes,
            "pages of the server's writes that failed or wrote less than asked (dropped from the cache; see the server's log)",
        ));
    }
    rows.push(event(c.verify_mismatches, "verify mode: pages that differed from the file (the file's were served)"));
    rows
}

/// The first line: who wrote the stats, the state a reader sees (stats::health: running,
/// stopped, crashed, stale...) and why, and when it was written.
fn head(s: &StatsSnapshot, source: &str) -> String {
    let st = &s.stamp;
    let adapter = st.adapter.as_deref().unwrap_or("sqlite");
    let mut head = format!("{source}: {adapter}");
    if let Some(pid) = st.pid {
        let _ = write!(head, ", pid {pid}");
    }
    if st.pid.is_none() && st.updated_unix_ms.is_none() {
        // `PRAGMA waffle_stats` (no stamp): asked of a live connection, nothing to judge.
        let _ = write!(head, ", {}", st.state.as_deref().unwrap_or("running"));
        return head;
    }
    let h = health::judge_now(st);
    let _ = write!(head, ", {} ({})", h.state.name(), h.why);
    if let Some(ms) = st.updated_unix_ms {
        let ago_ms = health::now_unix_ms().saturating_sub(ms);
        let _ = write!(head, ", written {:.1} s ago", ago_ms as f64 / 1000.0);
    }
    head
}

/// The report for one stats snapshot.
pub fn render(s: &StatsSnapshot, source: &str) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "{}", head(s, source));
    if let Some(r) = &s.stamp.disabled_reason {
        let _ = writeln!(o, "OFF: {r}");
    }
    let Some(c) = &s.cache else {
        return o; // turned off before the cache started: nothing else to show
    };
    if !c.cache_id.is_empty() {
        let _ = writeln!(o, "cache id {}, page {} bytes{}{}", c.cache_id, c.page_bytes, grid_text(s), place(s));
    }
    reads(&mut o, c);
    events(&mut o, c, s.preload.as_ref());
    levels(&mut o, c);
    nodes(&mut o, c);
    if let Some(p) = &s.preload {
        preload(&mut o, p);
    }
    o
}

/// Where reads were answered, the grid's hits, pushes and writes.
fn reads(o: &mut String, c: &CacheSnapshot) {
    let (l1, pq, l2, disk) = (c.l1_hits, c.push_queue_hits, c.l2_hits, c.disk_reads);
    let reads = l1 + c.l1_misses;
    let _ = writeln!(
        o,
        "reads    {reads} pages: L1 {} | push queue {} | grid {} | disk {}",
        pct(l1, reads),
        pct(pq, reads),
        pct(l2, reads),
        pct(disk, reads)
    );
    let asked = l2 + c.l2_misses;
    let _ = writeln!(
        o,
        "grid     hits {l2}, misses {}, hit ratio {}; not asked while a node was down {}",
        c.l2_misses,
        pct(l2, asked),
        c.l2_skipped,
    );
    let _ = writeln!(
        o,
        "pushes   {} stored ({}); fetched {}",
        c.l2_pushes,
        bytes(c.l2_push_bytes),
        bytes(c.l2_fetch_bytes)
    );
    let _ = writeln!(o, "writes   {} pages", c.disk_writes);
}

/// L1, the working set and its advice, the latencies.
fn levels(o: &mut String, c: &CacheSnapshot) {
    let _ = writeln!(
        o,
        "L1       {} of {} ({} pages); push queue {}",
        bytes(c.l1.used_bytes),
        bytes(c.l1.capacity_bytes),
        c.l1.pages,
        bytes(c.push_queue_bytes)
    );
    let ws = &c.working_set;
    let _ = writeln!(
        o,
        "touched  1m {} | 5m {} | 15m {} (working set: {} | {} | {} pages); L1 + grid hold {}",
        bytes(ws.bytes_1m),
        bytes(ws.bytes_5m),
        bytes(ws.bytes_15m),
        ws.pages_1m,
        ws.pages_5m,
        ws.pages_15m,
        bytes(ws.held_bytes)
    );
    if !ws.advice.is_empty() {
        let _ = writeln!(o, "advice   {}", ws.advice);
    }
    // Since the cache opened (or PRAGMA waffle_stats='reset'); a recent window is Prometheus' (the buckets).
    let mut line = "latency  p50/p95/p99 us since the open:".to_string();
    for (t, label) in [(&c.latency.l1, "L1"), (&c.latency.l2, "grid"), (&c.latency.disk, "disk")] {
        let _ = write!(line, "  {label} {}/{}/{}", t.p50_us, t.p95_us, t.p99_us);
    }
    let _ = writeln!(o, "{line}");
}

fn nodes(o: &mut String, c: &CacheSnapshot) {
    for n in &c.nodes {
        let _ = writeln!(
            o,
            "node     {} {}: {} requests, {} failures, {} timeouts, marked down {}x{}",
            n.addr,
            if n.up { "up" } else { "DOWN" },
            n.requests,
            n.failures,
            n.timeouts,
            n.marked_down,
            n.memory_bytes.map(|m| format!("; memory {}", bytes(m))).unwrap_or_default()
        );
        if let Some(f) = &n.flash {
            // The node's own counters, all its clients together (docs/flash-tier.md): not this cache's.
            let hits = f.node_ram_hits + f.node_flash_hits;
            let _ = writeln!(
                o,
                "         flash {} ({} values on it); the node's hits, all clients: {} from RAM, {} from flash ({}), \
                 {} flash misses ({} bad CRC){}",
                bytes(f.bytes),
                f.items,
                f.node_ram_hits,
                f.node_flash_hits,
                pct(f.node_flash_hits, hits),
                f.node_flash_misses,
                f.node_flash_bad_crc,
                f.recent_flash_share.map(|x| format!("; recently {:.1}% from flash", 100.0 * x)).unwrap_or_default()
            );
            if let Some(t) = &f.tier_latency {
                let median = |m: Option<u64>| m.map(|us| format!(", median {us} us")).unwrap_or_default();
                let _ = writeln!(
                    o,
                    "         this client's hits in the last sample of the node's log: {} from RAM{}, {} from flash{}",
                    t.ram_hits,
                    median(t.ram_median_us),
                    t.flash_hits,
                    median(t.flash_median_us)
                );
            }
        }
        if !n.cost.reason.is_empty() {
            let _ = writeln!(o, "         cost: {}", n.cost.reason);
        }
    }
}

/// The preload's reads and writes, and one line per tablespace.
fn preload(o: &mut String, p: &PreloadSection) {
    let c = &p.preload;
    let _ = writeln!(
        o,
        "preload  page reads {}, pass-through reads {}, page writes {}",
        c.page_reads, c.passthrough_reads, c.page_writes,
    );
    if p.tablespaces.is_empty() {
        return;
    }
    let mut rows: Vec<_> = p.tablespaces.iter().collect();
    rows.sort_by_key(|(_, s)| std::cmp::Reverse(s.reads));
    let _ = writeln!(
        o,
        "\n{:<32} {:>10} {:>7} {:>7} {:>7} {:>7} {:>9}",
        "tablespace", "reads", "hit", "L1", "grid", "disk", "writes"
    );
    for (name, s) in rows {
        let r = s.reads;
        let _ = writeln!(
            o,
            "{:<32} {:>10} {:>7} {:>7} {:>7} {:>7} {:>9}{}",
            name,
            r,
            pct(s.l1_hits + s.push_queue_hits + s.l2_hits, r),
            pct(s.l1_hits + s.push_queue_hits, r),
            pct(s.l2_hits, r),
            pct(s.disk_reads, r),
            s.page_writes,
            if s.cached { "" } else { "  (not cached: WAFFLE_TABLES)" }
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    /// What `waffle stats` prints of a stats JSON object.
    fn render_json(v: &Value, source: &str) -> String {
        render(&StatsSnapshot::from_json(v).unwrap(), source)
    }

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
        let text = render_json(&v, "f");
        assert!(text.contains("reads    100 pages: L1 10.0% | push queue 0.0% | grid 80.0% | disk 10.0%"), "{text}");
        assert!(text.contains("hit ratio 88.9%"), "{text}");
        assert!(text.contains("sbtest/sbtest1"), "{text}");
        assert!(text.contains("(not cached: WAFFLE_TABLES)"), "{text}");
        assert!(text.contains("grid requests that failed (timeout 1)"), "{text}");
    }

    /// Issue 21 item 2: a DBA read "writes ... partial (dropped) 145625" as lost writes, and "rejects
    /// 590", "pushes failed 1306" came with no word on which are expected.
    #[test]
    fn expected_counts_and_faults_are_told_apart_in_words() {
        let v = json!({
            "adapter": "mariadb-preload", "l1_hits": 1, "l1_misses": 0, "disk_writes": 200000,
            "partial_writes": 145625, "truncates": 0,
            "l2_rejects": {"version": 590, "checksum": 0}, "l2_rejects_total": 590, "l2_rejects_stale": 590, "l2_rejects_bad": 0,
            "l2_push_failures": 1306, "l2_push_not_stored": {"node_down": 1300, "refused": 6, "lost": 0, "other": 0},
            "l2_faults": {"timeout": 0, "io": 2},
            "preload": {"multi_page_writes": 145600, "partial_writes": 28, "failed_writes": 3, "innodb_rejects": {"lsn": 0}, "fallback_reads": 0}
        });
        let text = render_json(&v, "f");
        assert!(!text.contains("partial (dropped)") && !text.contains("rejects 590"), "{text}");
        // A group's lines: its first names it, the others are indented.
        let section = |name: &str| -> String {
            let mut lines = text.lines().skip_while(|l| !l.starts_with(&format!("{name:<8} ")));
            let first = lines.next().unwrap_or_else(|| panic!("no {name} group: {text}"));
            let rest = lines.take_while(|l| l.starts_with("         "));
            std::iter::once(first).chain(rest).collect::<Vec<_>>().join("\n")
        };
        let expected = section("expected");
        assert!(expected.contains("145600  pages of InnoDB's doublewrite buffer dropped from the cache"), "{text}");
        assert!(expected.contains("not lost writes"), "{text}");
        assert!(expected.contains("590  stale grid copies refused: the page was rewritten"), "{text}");
        assert!(expected.contains("25  pages dropped from the cache after a write of part of a page"), "{text}");
        let faults = section("faults");
        assert!(
            faults.contains(
                "1306  evicted pages the grid did not store: 1300 not sent (the node was down or unreachable), 6 refused by the node"
            ),
            "{text}"
        );
        assert!(faults.contains("2  grid requests that failed (io 2)"), "{text}");
        assert!(faults.contains("3  pages of the server's writes that failed"), "{text}");
        assert!(!faults.contains("590") && !faults.contains("145600"), "{text}");
    }

    #[test]
    fn a_quiet_run_says_none() {
        let text = render_json(&json!({"l1_hits": 5, "l1_misses": 0}), "f");
        assert!(text.contains("\nexpected none\n") && text.contains("\nfaults   none\n"), "{text}");
    }

    #[test]
    fn renders_the_working_set_and_its_advice() {
        let v = json!({
            "l1_hits": 1, "l1_misses": 0,
            "working_set": {"bytes_1m": 1 << 20, "bytes_5m": 3u64 << 30, "bytes_15m": 4u64 << 30, "pages_1m": 256,
                            "pages_5m": 786432, "pages_15m": 1048576, "held_bytes": 1u64 << 30, "advice": "buy memory"},
            "nodes": [{"addr": "a:1", "up": true, "memory_bytes": 512 << 20}]
        });
        let text = render_json(&v, "f");
        assert!(
            text.contains(
                "touched  1m 1.0 MiB | 5m 3.0 GiB | 15m 4.0 GiB (working set: 256 | 786432 | 1048576 pages); L1 + grid hold 1.0 GiB"
            ),
            "{text}"
        );
        assert!(text.contains("advice   buy memory"), "{text}");
        assert!(text.contains("; memory 512.0 MiB"), "{text}");
    }

    /// Issue 34: a node's flash tier, in `waffle stats` as in `PRAGMA waffle_stats`; a node
    /// without flash says nothing of it.
    #[test]
    fn renders_a_nodes_flash_tier() {
        let v = json!({
            "l1_hits": 1, "l1_misses": 0,
            "nodes": [{"addr": "a:1", "up": true, "memory_bytes": 16 << 20,
                       "flash": {"bytes": 64u64 << 20, "items": 8835, "node_ram_hits": 1752, "node_flash_hits": 6449,
                                 "node_flash_misses": 3, "node_flash_bad_crc": 1, "recent_flash_share": 0.801,
                                 "tier_latency": {"ram_hits": 120, "flash_hits": 380, "ram_median_us": 45,
                                                  "flash_median_us": 210}}},
                      {"addr": "b:2", "up": true}]
        });
        let text = render_json(&v, "f");
        let flash: Vec<&str> = text.lines().filter(|l| l.trim_start().starts_with("flash ")).collect();
        assert_eq!(
            flash,
            ["         flash 64.0 MiB (8835 values on it); the node's hits, all clients: 1752 from RAM, 6449 from flash \
              (78.6%), 3 flash misses (1 bad CRC); recently 80.1% from flash"],
            "{text}"
        );
        let node_a = text.lines().position(|l| l.starts_with("node     a:1")).expect("node a");
        assert!(text.lines().nth(node_a + 1).is_some_and(|l| l.contains("flash 64.0 MiB")), "under its node: {text}");
        assert_eq!(
            text.lines().nth(node_a + 2),
            Some(
                "         this client's hits in the last sample of the node's log: 120 from RAM, median 45 us, \
                 380 from flash, median 210 us"
            ),
            "{text}"
        );
    }

    #[test]
    fn renders_a_sqlite_stats_file() {
        let v = json!({
            "adapter": "sqlite", "state": "closed", "final": true, "pid": 9, "cache_id": "ab", "page_bytes": 4096,
            "file": "/srv/app.db", "config": {"grid": ["127.0.0.1:1", "127.0.0.1:2"]}, "l1_hits": 1, "l1_misses": 1
        });
        let text = render_json(&v, "f");
        assert!(text.starts_with("f: sqlite, pid 9, stopped (its last write: the database was closed"), "{text}");
        assert!(text.contains("page 4096 bytes, grid 127.0.0.1:1,127.0.0.1:2, database /srv/app.db"), "{text}");
    }

    /// Issue 32 item 2: a SIGKILLed writer's file said "active, written 3.7 s ago".
    #[test]
    fn a_writer_that_died_without_a_last_write_is_shown_crashed() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        let now = health::now_unix_ms();
        let v = json!({"adapter": "sqlite", "state": "running", "final": false, "pid": pid,
                       "updated_unix_ms": now, "l1_hits": 1, "l1_misses": 1});
        let text = render_json(&v, "f");
        assert!(text.starts_with(&format!("f: sqlite, pid {pid}, crashed (pid {pid} is gone")), "{text}");
    }

    #[test]
    fn renders_a_preload_that_turned_off() {
        let v = json!({"adapter": "mariadb-preload", "state": "disabled", "disabled_reason": "native AIO"});
        let text = render_json(&v, "f");
        assert!(text.contains("OFF: native AIO"), "{text}");
    }
}
