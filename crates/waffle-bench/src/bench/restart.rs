//! `+restart` (issue 13 target d): after the measured run, every connection
//! closes cleanly (the last close pushes L1 to the grid and saves the sidecar
//! and the hot list), as many reopen on the same nodes, and the workload runs
//! again at once, counted second by second. The first seconds against the
//! measured run's steady state say how warm the restart stayed; `+nohot`
//! (`waffle_hot_list=off`) is the control, whose L1 fills on demand.

use std::path::Path;
use std::time::Instant;

use rusqlite::Connection;
use serde::Serialize;
use serde_json::Value;

use super::configs::Plan;
use super::runner::{open_conn, phase, waffle_stats, RunOptions};
use super::workload::Workload;

/// What a restart measured.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Restart {
    /// The clean close of every connection (the last one pushes L1 and writes the files).
    pub close_ms: u64,
    /// Reopening every connection.
    pub open_ms: u64,
    pub seconds: f64,
    /// Transactions per second over the restart's run, and over the measured run before it.
    pub tps: f64,
    pub steady_tps: f64,
    /// `tps / steady_tps` (target d: at least 0.8 over the first 30 s).
    pub ratio: f64,
    /// Transactions in each whole second of the restart's run.
    pub per_second: Vec<u64>,
    /// The first second whose count reached 90% of the steady state (None: none did).
    pub seconds_to_90pct: Option<usize>,
    /// The cache's `hot_list` stats at the end of the restart's run.
    pub hot_list: Value,
    /// Where the restart's page reads were answered (counters over its run).
    pub l1_hits: u64,
    pub l2_pages: u64,
    pub disk_pages: u64,
}

impl Restart {
    pub fn summary(&self) -> String {
        let h = &self.hot_list;
        format!(
            "restart: closed in {} ms, reopened in {} ms; {:.0} s after it {:.0} tx/s = {:.2}x steady ({:.0} tx/s); \
             90% of steady {}; reads L1 {} | grid {} | disk {}; hot list {} ({}), {} pages from the grid, {} from disk in {} ms",
            self.close_ms,
            self.open_ms,
            self.seconds,
            self.tps,
            self.ratio,
            self.steady_tps,
            self.seconds_to_90pct.map_or("never reached".into(), |s| format!("from second {}", s + 1)),
            self.l1_hits,
            self.l2_pages,
            self.disk_pages,
            h["state"].as_str().unwrap_or("?"),
            if h["trusted"].as_bool() == Some(true) { "trusted".to_string() } else { h["why"].as_str().unwrap_or("-").to_string() },
            h["from_grid_pages"],
            h["from_disk_pages"],
            h["elapsed_ms"],
        )
    }
}

/// Closes `conns`, reopens as many and runs the workload for `opts.restart`.
pub fn measure(
    workload: &dyn Workload,
    path: &Path,
    plan: &Plan,
    opts: &RunOptions,
    grid: &[String],
    conns: Vec<Connection>,
    steady_tps: f64,
) -> Result<Restart, String> {
    let err = |what: &str, e: rusqlite::Error| format!("{}: restart: {what}: {e}", plan.name);
    let threads = conns.len();
    let t = Instant::now();
    drop(conns);
    let close_ms = t.elapsed().as_millis() as u64;
    let t = Instant::now();
    let mut conns: Vec<Connection> = (0..threads)
        .map(|_| open_conn(path, plan, opts, grid).and_then(|c| workload.prepare(&c).map(|()| c)))
        .collect::<Result<_, _>>()
        .map_err(|e| err("open", e))?;
    let open_ms = t.elapsed().as_millis() as u64;
    let before = waffle_stats(&conns[0], false).map_err(|e| err("stats", e))?;
    eprintln!("waffle bench: {}: restarted; measuring {:.0} s", plan.name, opts.restart.as_secs_f64());
    let mut per_second = Vec::new();
    let (tally, _, seconds) = phase(workload, &mut conns, opts.restart, opts.seed ^ 0x7e57a7, Some(&mut per_second));
    let after = waffle_stats(&conns[0], false).map_err(|e| err("stats", e))?;
    let d = |k: &str| after[k].as_u64().unwrap_or(0).saturating_sub(before[k].as_u64().unwrap_or(0));
    let tps = tally.done as f64 / seconds.max(f64::MIN_POSITIVE);
    Ok(Restart {
        close_ms,
        open_ms,
        seconds,
        tps,
        steady_tps,
        ratio: if steady_tps > 0.0 { tps / steady_tps } else { 0.0 },
        seconds_to_90pct: per_second.iter().position(|&n| n as f64 >= 0.9 * steady_tps),
        per_second,
        hot_list: after["hot_list"].clone(),
        l1_hits: d("l1_hits") + d("push_queue_hits") + d("read_ahead_hits"),
        l2_pages: d("l2_hits") + d("read_ahead_pages_l2"),
        disk_pages: d("disk_reads") + d("read_ahead_pages_disk"),
    })
}

/// How long the restart's run lasts when `--restart-duration` is not given.
pub const DEFAULT_SECONDS: f64 = 30.0;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_names_the_ratio_and_the_hot_list() {
        let r = Restart {
            close_ms: 120,
            seconds: 30.0,
            tps: 900.0,
            steady_tps: 1000.0,
            ratio: 0.9,
            per_second: vec![500, 950],
            seconds_to_90pct: Some(1),
            hot_list: serde_json::json!({"state": "done", "trusted": true, "from_grid_pages": 10, "from_disk_pages": 2, "elapsed_ms": 40}),
            ..Restart::default()
        };
        let s = r.summary();
        assert!(s.contains("0.90x steady") && s.contains("from second 2") && s.contains("done (trusted)"), "{s}");
        assert!(s.contains("10 pages from the grid, 2 from disk in 40 ms"), "{s}");
    }
}
