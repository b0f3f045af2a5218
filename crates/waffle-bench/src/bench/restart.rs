//! `+restart` (issue 13 target d): after the measured run, every connection
//! closes cleanly (the last close pushes L1 to the grid and saves the sidecar
//! and the hot list), as many reopen on the same nodes, and the workload runs
//! again at once, counted second by second. The first seconds against the
//! measured run's steady state say how warm the restart stayed; `+nohot`
//! (`waffle_hot_list=off`) is the control, whose L1 fills on demand.
//!
//! The runner calls [`measure`] after its measured run; this file does not
//! know the runner: it opens and drives connections with the same pieces
//! ([`super::connection`], [`super::phase`]) and fills a [`Restart`].

use std::path::Path;
use std::time::Instant;

use rusqlite::Connection;
use waffle_core::stats::CacheSnapshot;

use super::configs::Plan;
use super::connection::{open_conn, waffle_stats};
use super::phase::phase;
use super::result::Restart;
use super::run_options::RunOptions;
use super::workload::Workload;

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
        .map(|_| open_conn(path, plan, opts.timeout_ms, grid).and_then(|c| workload.prepare(&c).map(|()| c)))
        .collect::<Result<_, _>>()
        .map_err(|e| err("open", e))?;
    let open_ms = t.elapsed().as_millis() as u64;
    let before = waffle_stats(&conns[0], false).map_err(|e| err("stats", e))?;
    eprintln!("waffle bench: {}: restarted; measuring {:.0} s", plan.name, opts.restart.as_secs_f64());
    let mut per_second = Vec::new();
    let (tally, _, seconds) = phase(workload, &mut conns, opts.restart, opts.seed ^ 0x7e57a7, Some(&mut per_second));
    let after = waffle_stats(&conns[0], false).map_err(|e| err("stats", e))?;
    let hot_list = after.warming.map(|w| w.hot_list).unwrap_or_default();
    let (before, after) = (before.cache.unwrap_or_default(), after.cache.unwrap_or_default());
    let d = |f: fn(&CacheSnapshot) -> u64| f(&after).saturating_sub(f(&before));
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
        hot_list,
        l1_hits: d(|c| c.l1_hits) + d(|c| c.push_queue_hits) + d(|c| c.read_ahead_hits),
        l2_pages: d(|c| c.l2_hits) + d(|c| c.read_ahead_pages_l2),
        disk_pages: d(|c| c.disk_reads) + d(|c| c.read_ahead_pages_disk),
    })
}

/// How long the restart's run lasts when `--restart-duration` is not given.
pub const DEFAULT_SECONDS: f64 = 30.0;
