//! `PRAGMA waffle_*` on a database opened through the shim.
//!
//! SQLite hands every PRAGMA to the main file's xFileControl first; the ones
//! named here are answered by the cache, all others go on to SQLite.
//!
//! Only as statements: SQLite's table-valued `pragma_<name>` functions
//! (`SELECT * FROM pragma_waffle_stats`) exist for its built-in pragmas alone
//! and never reach a VFS, so there is no `pragma_waffle_stats` table. A
//! program that wants the counters outside its own connection reads the stats
//! file (`waffle_stats_file`, stats_file.rs): the same JSON, every second.

use std::os::raw::c_int;
use std::time::Duration;

use waffle_core::grid::NodeSpec;

use crate::ffi::{SQLITE_ERROR, SQLITE_OK};
use crate::open_db::OpenDb;
use crate::registry;
use crate::stats_map::{grid_nodes, stats_snapshot};

/// How long `PRAGMA waffle_flush` waits for the push queue to empty.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(10);

/// Answers a pragma: Some((rc, text)) if it is ours; text becomes the one-row
/// result (or the error message when rc is not SQLITE_OK).
pub fn handle(db: &OpenDb, name: &str, value: Option<&str>) -> Option<(c_int, Option<String>)> {
    match name {
        "waffle_stats" => Some(match value {
            None => (SQLITE_OK, Some(stats(db))),
            // Counters only grow; the latency histograms can start over (after a warm-up).
            Some(v) if v.eq_ignore_ascii_case("reset") => {
                db.cache.stats().reset_latency();
                (SQLITE_OK, Some(stats(db)))
            }
            Some(v) => (SQLITE_ERROR, Some(format!("PRAGMA waffle_stats takes no value or 'reset' (got '{v}')"))),
        }),
        "waffle_grid" => Some(match value {
            None => (SQLITE_OK, Some(current_grid(db))),
            // Any SQL can reach a PRAGMA: moving the grid (where evicted pages go,
            // who may answer reads) is the opener's decision, off by default.
            Some(list) if !db.config.grid_change => (
                SQLITE_ERROR,
                Some(format!(
                    "PRAGMA waffle_grid='{list}' refused: changing the grid while open is off \
                     (the opener allows it with waffle_grid_change=on or WAFFLE_GRID_CHANGE=on)"
                )),
            ),
            Some(list) => match NodeSpec::parse_list(list) {
                Ok(nodes) => {
                    let grid = (!nodes.is_empty()).then(|| registry::grid_for(&db.config, nodes));
                    db.cache.set_grid(grid);
                    (SQLITE_OK, Some(current_grid(db)))
                }
                Err(reason) => (SQLITE_ERROR, Some(format!("bad value for waffle_grid: '{list}': {reason}"))),
            },
        }),
        "waffle_flush" => Some(read_only(name, value).unwrap_or_else(|| {
            // Waits for evicted pages to reach the grid (tests and tools).
            let done = db.cache.flush_pushes(FLUSH_TIMEOUT);
            (SQLITE_OK, Some(if done { "ok" } else { "timeout" }.to_string()))
        })),
        // Starts a background warm of the database or of one table or index (warm.rs).
        "waffle_warm" => Some(crate::warm::start(db, value, registry::WARMERS)),
        _ => None,
    }
}

fn current_grid(db: &OpenDb) -> String {
    grid_nodes(db).join(",")
}

fn read_only(name: &str, value: Option<&str>) -> Option<(c_int, Option<String>)> {
    value.map(|v| (SQLITE_ERROR, Some(format!("PRAGMA {name} takes no value (got '{v}')"))))
}

/// One JSON object: the cache's counters, latencies, nodes and settings.
pub fn stats(db: &OpenDb) -> String {
    stats_snapshot(db).to_json().to_string()
}
