//! The stats file: the cache's counters (as `PRAGMA waffle_stats`) and the
//! preload's, with a table per tablespace, written beside the data as
//! [`crate::beside`] says (by the ticker every interval, at exit, and once
//! when the preload turns off before its cache started).

use std::path::PathBuf;
use std::sync::atomic::Ordering;

use waffle_core::stats::{InnodbRejects, PreloadCounters, PreloadSection, Stamp, StatsSnapshot, TablespaceSnapshot};

use crate::beside::beside_data;
use crate::innodb::Mismatch;
use crate::runtime::{self, Runtime};
use crate::segments::NameStats;
use crate::settings::{self, node_text};
use crate::{guard, log, state};

/// The stats file's contents: the cache's counters (as `PRAGMA waffle_stats`)
/// and the preload's, with a table per tablespace.
pub fn json(rt: &Runtime, final_write: bool) -> StatsSnapshot {
    let mut stamp = header(final_write);
    if !final_write && rt.switch().is_off() && state::get() == state::ACTIVE {
        stamp.state = Some("off".into());
    }
    // Warming first: a job it shows ended has its effects in the counters read after it.
    let warming = rt.warming().snapshot();
    let mut cache = rt.cache().stats_snapshot();
    cache.page_bytes = rt.page_bytes();
    StatsSnapshot {
        stamp,
        cache: Some(cache),
        warming: Some(warming),
        sqlite: None,
        preload: Some(PreloadSection {
            preload: counters(rt),
            switch: rt.switch().snapshot(),
            config_file: rt.config_file().map(|p| p.display().to_string()),
            page_bytes_from: rt.page_bytes_from().to_string(),
            datadir: rt.datadir().display().to_string(),
            grid: rt.config().grid.iter().map(node_text).collect::<Vec<_>>().join(","),
            tables: if rt.filter().is_all() { vec!["*".to_string()] } else { rt.filter().patterns().to_vec() },
            tablespaces: rt.segments().names().into_iter().map(|(name, s)| (name, tablespace(s))).collect(),
        }),
    }
}

/// `preload`: what the preload saw of the server's I/O.
fn counters(rt: &Runtime) -> PreloadCounters {
    let c = rt.counters();
    PreloadCounters {
        tracked_opens: c.tracked_opens.get(),
        tablespaces_open: rt.segments().open_files() as u64,
        segments_dropped: c.segments_dropped.get(),
        page_reads: c.page_reads.get(),
        passthrough_reads: c.passthrough_reads.get(),
        fallback_reads: c.fallback_reads.get(),
        page_writes: c.page_writes.get(),
        multi_page_writes: c.multi_page_writes.get(),
        partial_writes: c.partial_writes.get(),
        failed_writes: c.failed_writes.get(),
        unpositioned_writes: c.unpositioned_writes.get(),
        truncations: c.truncations.get(),
        hole_punches: c.hole_punches.get(),
        closed_file_skips: c.closed_file_skips.get(),
        innodb_rejects: innodb_rejects(|why| c.innodb_rejects.get(why).get()),
    }
}

/// `preload.innodb_rejects`, by what did not match.
fn innodb_rejects(count: impl Fn(Mismatch) -> u64) -> InnodbRejects {
    InnodbRejects {
        page_number: count(Mismatch::PageNumber),
        space_id: count(Mismatch::SpaceId),
        checksum: count(Mismatch::Checksum),
        lsn: count(Mismatch::Lsn),
    }
}

/// One row of `tablespaces`.
fn tablespace(s: &NameStats) -> TablespaceSnapshot {
    let (l1, pq, l2, disk) = (s.l1_hits.get(), s.push_queue_hits.get(), s.l2_hits.get(), s.disk_reads.get());
    let reads = l1 + pq + l2 + disk + s.short_reads.get();
    let ratio = |n: u64, d: u64| (d > 0).then(|| (n as f64 / d as f64 * 1e4).round() / 1e4);
    TablespaceSnapshot {
        cached: s.cached.load(Ordering::Relaxed),
        segment: s.segment.load(Ordering::Relaxed),
        opens: s.opens.get(),
        reads,
        l1_hits: l1,
        push_queue_hits: pq,
        l2_hits: l2,
        disk_reads: disk,
        page_writes: s.page_writes.get(),
        invalidations: s.invalidations.get(),
        innodb_rejects: s.innodb_rejects.get(),
        hit_ratio: ratio(l1 + pq + l2, reads),
        l2_hit_ratio: ratio(l2, l2 + disk),
    }
}

fn header(final_write: bool) -> Stamp {
    let mut stamp = waffle_core::stats_file::stamp("mariadb-preload", final_write); // `stopped` when final
    let now = match state::get() {
        state::ACTIVE => waffle_core::stats_file::RUNNING,
        other => state::name(other),
    };
    stamp.state.get_or_insert_with(|| now.to_string());
    stamp.disabled_reason = state::reason();
    stamp.interval_ms = Some(settings::stats_interval_ms());
    stamp.started_unix_ms = STARTED_UNIX_MS.get().copied();
    stamp
}

/// When the preload started its cache (or found it could not): `started_unix_ms`.
static STARTED_UNIX_MS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();

/// Notes the start (the first tracked open); later calls change nothing.
pub fn mark_started() {
    STARTED_UNIX_MS.get_or_init(waffle_core::stats::health::now_unix_ms);
}

/// Writes the stats file now (the stats thread, exit, and when turning off).
pub fn write_stats(final_write: bool) {
    if state::get() == state::FORKED {
        return;
    }
    let _g = guard::Guard::enter();
    // One write at a time, none after the last: the ticker runs on during exit(), and its write
    // renamed after the at-exit one would leave a non-final file of a stopped server (a reader
    // would call it crashed).
    static LAST_WRITTEN: std::sync::Mutex<bool> = std::sync::Mutex::new(false);
    let mut last_written = LAST_WRITTEN.lock().unwrap_or_else(|p| p.into_inner());
    if *last_written {
        return;
    }
    *last_written = final_write;
    let (v, path, datadir, mode) = match runtime::get() {
        Some(rt) => (json(rt, final_write), rt.stats_path().to_path_buf(), rt.datadir().to_path_buf(), rt.stats_mode()),
        None => {
            let stats = StatsSnapshot { stamp: header(final_write), ..StatsSnapshot::default() };
            let datadir = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
            (stats, settings::stats_path(), datadir, settings::stats_mode().ok().flatten())
        }
    };
    let mut like = beside_data(&datadir);
    like.mode = mode.unwrap_or(like.mode);
    if let Err(e) = waffle_core::stats_file::write(&path, &like, &v) {
        log::warn_once(&format!("cannot write the stats file {}: {e}; the stats file is not updated", path.display()));
    }
}

pub extern "C" fn at_exit() {
    let _ = std::panic::catch_unwind(|| write_stats(true));
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    /// The JSON names of `innodb_rejects` are the mismatches' names: a kind added without its field fails here.
    #[test]
    fn innodb_rejects_are_named_as_the_mismatches() {
        let v = serde_json::to_value(innodb_rejects(|why| why as u64 + 1)).unwrap();
        let want: serde_json::Map<String, Value> =
            Mismatch::ALL.iter().map(|&m| (m.name().to_string(), Value::from(m as u64 + 1))).collect();
        assert_eq!(v, Value::Object(want));
    }
}
