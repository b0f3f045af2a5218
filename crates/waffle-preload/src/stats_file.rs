//! The stats file: the cache's counters (as `PRAGMA waffle_stats`) and the
//! preload's, with a table per tablespace, written beside the data as
//! [`crate::beside`] says (by the ticker every interval, at exit, and once
//! when the preload turns off before its cache started).

use std::path::PathBuf;
use std::sync::atomic::Ordering;

use serde_json::{json, Map, Value};

use crate::beside::beside_data;
use crate::innodb::Mismatch;
use crate::runtime::{self, Runtime};
use crate::settings::{self, node_text};
use crate::{guard, log, state};

/// The stats file's contents: the cache's counters (as `PRAGMA waffle_stats`)
/// and the preload's, with a table per tablespace.
pub fn json(rt: &Runtime, final_write: bool) -> Value {
    let mut m = rt.cache().stats_json();
    rt.warming().add_to_stats(&mut m);
    header(&mut m, final_write);
    if rt.switch().is_off() && state::get() == state::ACTIVE {
        m.insert("state".into(), json!("off"));
    }
    m.insert("switch".into(), rt.switch().json());
    m.insert("config_file".into(), json!(rt.config_file().map(|p| p.display().to_string())));
    m.insert("page_bytes".into(), json!(rt.page_bytes()));
    m.insert("page_bytes_from".into(), json!(rt.page_bytes_from()));
    m.insert("datadir".into(), json!(rt.datadir().display().to_string()));
    m.insert("grid".into(), json!(rt.config().grid.iter().map(node_text).collect::<Vec<_>>().join(",")));
    m.insert(
        "tables".into(),
        json!(if rt.filter().is_all() { vec!["*".to_string()] } else { rt.filter().patterns().to_vec() }),
    );
    let c = rt.counters();
    let mut rejects = Map::new();
    for why in Mismatch::ALL {
        rejects.insert(why.name().into(), json!(c.innodb_rejects.get(why).get()));
    }
    let open = rt.segments().open_files();
    m.insert(
        "preload".into(),
        json!({
            "tracked_opens": c.tracked_opens.get(),
            "tablespaces_open": open,
            "segments_dropped": c.segments_dropped.get(),
            "page_reads": c.page_reads.get(),
            "passthrough_reads": c.passthrough_reads.get(),
            "fallback_reads": c.fallback_reads.get(),
            "page_writes": c.page_writes.get(),
            "multi_page_writes": c.multi_page_writes.get(),
            "partial_writes": c.partial_writes.get(),
            "failed_writes": c.failed_writes.get(),
            "unpositioned_writes": c.unpositioned_writes.get(),
            "truncations": c.truncations.get(),
            "hole_punches": c.hole_punches.get(),
            "closed_file_skips": c.closed_file_skips.get(),
            "innodb_rejects": Value::Object(rejects),
        }),
    );
    let mut spaces = Map::new();
    for (name, s) in rt.segments().names() {
        let (l1, pq, l2, disk) = (s.l1_hits.get(), s.push_queue_hits.get(), s.l2_hits.get(), s.disk_reads.get());
        let reads = l1 + pq + l2 + disk + s.short_reads.get();
        let ratio = |n: u64, d: u64| {
            if d == 0 {
                Value::Null
            } else {
                json!((n as f64 / d as f64 * 1e4).round() / 1e4)
            }
        };
        spaces.insert(
            name,
            json!({
                "cached": s.cached.load(Ordering::Relaxed),
                "segment": s.segment.load(Ordering::Relaxed),
                "opens": s.opens.get(),
                "reads": reads,
                "l1_hits": l1,
                "push_queue_hits": pq,
                "l2_hits": l2,
                "disk_reads": disk,
                "page_writes": s.page_writes.get(),
                "invalidations": s.invalidations.get(),
                "innodb_rejects": s.innodb_rejects.get(),
                "hit_ratio": ratio(l1 + pq + l2, reads),
                "l2_hit_ratio": ratio(l2, l2 + disk),
            }),
        );
    }
    m.insert("tablespaces".into(), Value::Object(spaces));
    Value::Object(m)
}

fn header(m: &mut Map<String, Value>, final_write: bool) {
    waffle_core::stats_file::stamp(m, "mariadb-preload", final_write);
    m.insert("state".into(), json!(state::name(state::get())));
    if let Some(r) = state::reason() {
        m.insert("disabled_reason".into(), json!(r));
    }
}

/// Writes the stats file now (the stats thread, exit, and when turning off).
pub fn write_stats(final_write: bool) {
    if state::get() == state::FORKED {
        return;
    }
    let _g = guard::Guard::enter();
    let (v, path, datadir, mode) = match runtime::get() {
        Some(rt) => (json(rt, final_write), rt.stats_path().to_path_buf(), rt.datadir().to_path_buf(), rt.stats_mode()),
        None => {
            let mut m = Map::new();
            header(&mut m, final_write);
            let datadir = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
            (Value::Object(m), settings::stats_path(), datadir, settings::stats_mode().ok().flatten())
        }
    };
    let mut like = beside_data(&datadir);
    like.mode = mode.unwrap_or(like.mode);
    if let Err(e) = waffle_core::stats_file::write(&path, &like, &v) {
        log::warn_once(&format!("cannot write the stats file {}: {e}; the stats file is not updated", path.display()));
    }
}

/// The stats of a preload that turned off before its cache started.
pub fn write_disabled_stats() {
    write_stats(false);
}

pub extern "C" fn at_exit() {
    let _ = std::panic::catch_unwind(|| write_stats(true));
}
