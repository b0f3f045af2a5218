//! [`Warmed`]: what one warm did, read from its `"warm"` stats object (the
//! same fields from `PRAGMA waffle_stats` and from the preload's stats file),
//! and the words that say it: what it stored where, what it did not and why.
//! This file uses no other file of the crate.

use serde::Serialize;
use serde_json::Value;

/// What one warm did (the stats' "warm" object, the figures a report shows).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Warmed {
    pub target: String,
    /// How long the command waited for it: from the request to the report.
    pub seconds: f64,
    /// How long the warm itself ran (its reads, and waiting for the grid to store what it queued).
    pub warm_seconds: f64,
    pub planned_pages: u64,
    /// Pages read from the disk to be placed.
    pub read_pages: u64,
    pub l1_pages: u64,
    /// Handed to the push queue; of them, `pushed_pages` were stored by the grid.
    pub queued_pages: u64,
    /// Stored in the grid (acknowledged by a node).
    pub pushed_pages: u64,
    /// Queued and not stored, with why (`node_down`, `refused`, `lost`, `backed_off`, `dropped`, `other`).
    pub not_stored_pages: u64,
    pub not_stored: Vec<(String, u64)>,
    /// Queued and neither stored nor refused: taken back by a read, replaced by a write, or unconfirmed.
    pub unsettled_pages: u64,
    pub skipped_pages: u64,
    /// No room in L1 and no grid, or no room in the push queue in time.
    pub dropped_pages: u64,
    pub read_bytes: u64,
    pub disk_reads: u64,
    /// Parts of the target not warmed, with why (MariaDB: tablespaces InnoDB has not opened).
    pub skipped_targets: Vec<(String, String)>,
    pub skipped_targets_count: u64,
}

impl Warmed {
    /// From a warm's `"warm"` stats object; `seconds` is how long the asker waited for it.
    pub(crate) fn from_json(w: &Value, seconds: f64) -> Warmed {
        let g = |k: &str| w[k].as_u64().unwrap_or(0);
        let not_stored = w["not_stored"].as_object().map(|m| {
            m.iter().filter_map(|(why, n)| Some((why.clone(), n.as_u64()?))).filter(|(_, n)| *n > 0).collect()
        });
        let skipped_targets = w["skipped_targets"].as_array().map(|a| {
            a.iter()
                .map(|t| (t["name"].as_str().unwrap_or("?").to_string(), t["why"].as_str().unwrap_or("?").to_string()))
                .collect()
        });
        Warmed {
            target: w["target"].as_str().unwrap_or_default().to_string(),
            seconds,
            warm_seconds: g("elapsed_ms") as f64 / 1000.0,
            planned_pages: g("planned_pages"),
            read_pages: g("read_pages"),
            l1_pages: g("l1_pages"),
            queued_pages: g("queued_pages"),
            pushed_pages: g("pushed_pages"),
            not_stored_pages: g("not_stored_pages"),
            not_stored: not_stored.unwrap_or_default(),
            unsettled_pages: g("unsettled_pages"),
            skipped_pages: g("skipped_pages"),
            dropped_pages: g("dropped_pages"),
            read_bytes: g("read_bytes"),
            disk_reads: g("disk_reads"),
            skipped_targets: skipped_targets.unwrap_or_default(),
            skipped_targets_count: g("skipped_targets_count"),
        }
    }

    /// Pages it meant to store and did not: dropped for lack of room, or not stored by the grid.
    pub fn unstored_pages(&self) -> u64 {
        self.dropped_pages + self.not_stored_pages
    }

    /// Why pages were not stored, for people: "6932 not sent: the node was down or unreachable, ...".
    pub fn unstored_words(&self) -> String {
        let mut why: Vec<String> =
            self.not_stored.iter().map(|(w, n)| format!("{n} {}", not_stored_words(w))).collect();
        if self.dropped_pages > 0 {
            why.push(format!("{} found no room (L1 full and no grid, or the push queue full)", self.dropped_pages));
        }
        why.join(", ")
    }

    /// One line: how long, what it stored where, what it did not and why.
    pub fn summary(&self) -> String {
        let mut line = format!(
            "warmed {} in {:.1} s: {} pages read ({:.1} MiB in {} reads); stored {} in L1, {} in the grid; {} already there",
            self.target,
            self.seconds,
            self.read_pages,
            self.read_bytes as f64 / (1 << 20) as f64,
            self.disk_reads,
            self.l1_pages,
            self.pushed_pages,
            self.skipped_pages,
        );
        // A server under the preload takes a request at its next tick: the wait is not the warm's.
        if self.warm_seconds > 0.0 && (self.seconds - self.warm_seconds).abs() >= 0.5 {
            line.push_str(&format!(" (the warm itself ran {:.1} s)", self.warm_seconds));
        }
        if self.unstored_pages() > 0 {
            line.push_str(&format!("; NOT stored: {} ({})", self.unstored_pages(), self.unstored_words()));
        }
        if self.unsettled_pages > 0 {
            line.push_str(&format!(
                "; {} queued for the grid and not confirmed (taken back by a read, replaced by a write, or still queued)",
                self.unsettled_pages
            ));
        }
        if self.skipped_targets_count > 0 {
            line.push_str(&format!("; {}", skipped_targets_words(&self.skipped_targets, self.skipped_targets_count)));
        }
        line
    }
}

/// A `not_stored` reason for people.
fn not_stored_words(why: &str) -> &'static str {
    match why {
        "node_down" => "not sent: the node was down or unreachable",
        "refused" => "refused by the node (memcached out of memory, or too large)",
        "lost" => "lost on the way (a missed deadline, a reset)",
        "backed_off" => "not sent: the node is backed off (asking it costs more than the disk read it saves)",
        "dropped" => "pushed out of the full push queue",
        _ => "not sent: no grid any more, or not sealable",
    }
}

/// `n` targets not warmed, the first few named with why.
pub(crate) fn skipped_targets_words(named: &[(String, String)], n: u64) -> String {
    const SHOWN: usize = 8;
    let mut by_why: Vec<(&str, Vec<&str>)> = Vec::new();
    for (name, why) in named.iter().take(SHOWN) {
        match by_why.iter_mut().find(|(w, _)| w == why) {
            Some((_, names)) => names.push(name),
            None => by_why.push((why, vec![name])),
        }
    }
    let listed: Vec<String> = by_why.iter().map(|(why, names)| format!("{} ({why})", names.join(", "))).collect();
    let more = n.saturating_sub(SHOWN.min(named.len()) as u64);
    format!(
        "{n} not warmed: {}{}",
        listed.join("; "),
        if more > 0 { format!(" and {more} more") } else { String::new() }
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_summary_says_what_was_not_stored_and_why() {
        let w = Warmed::from_json(
            &json!({"target": "t", "read_pages": 100, "l1_pages": 1, "queued_pages": 99, "pushed_pages": 90,
                    "not_stored_pages": 7, "not_stored": {"node_down": 7, "refused": 0}, "dropped_pages": 2,
                    "unsettled_pages": 2}),
            1.0,
        );
        assert_eq!(w.unstored_pages(), 9);
        let s = w.summary();
        assert!(s.contains("stored 1 in L1, 90 in the grid"), "{s}");
        assert!(s.contains("NOT stored: 9 (7 not sent: the node was down or unreachable, 2 found no room"), "{s}");
        assert!(s.contains("2 queued for the grid and not confirmed"), "{s}");
        assert!(!s.contains("refused"), "a reason with no pages is left out: {s}");
    }

    #[test]
    fn targets_not_warmed_are_named_with_why_the_first_few() {
        let named: Vec<(String, String)> = (0..10).map(|i| (format!("d/t{i}"), "not opened".to_string())).collect();
        let s = skipped_targets_words(&named, 12);
        assert!(s.starts_with("12 not warmed: d/t0, d/t1"), "{s}");
        assert!(s.contains("d/t7 (not opened) and 4 more"), "{s}");
    }
}
