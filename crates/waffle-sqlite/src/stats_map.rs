//! The stats of one database (counters, latencies, nodes and settings) as
//! one [`StatsSnapshot`]: what `PRAGMA waffle_stats` answers (pragma.rs) and
//! the stats file writes every second (stats_file.rs). A leaf: it reads an
//! `OpenDb` and nothing else.

use waffle_core::stats::{SqliteConfig, SqliteSection, StatsSnapshot};

use crate::open_db::OpenDb;

/// What `PRAGMA waffle_stats` says (pragma.rs; the stats file, stats_file.rs,
/// adds its stamp).
///
/// The warming is read before the cache: a job it shows ended (the reload, a
/// warm) has everything it did in the counters read after it. The other order
/// tore: a reload that ended between the two reads showed "done, the file
/// changed" beside a cache that had not yet counted the change.
pub fn stats_snapshot(db: &OpenDb) -> StatsSnapshot {
    let warming = db.warming.snapshot();
    StatsSnapshot {
        cache: Some(db.cache.stats_snapshot()),
        warming: Some(warming),
        sqlite: Some(SqliteSection {
            file: db.path.display().to_string(),
            config: SqliteConfig {
                grid: grid_nodes(db),
                sealed: db.config.seal_key.is_some(),
                local_bytes: db.config.local_bytes,
                timeout_ms: db.config.timeout_ms,
                push_queue_bytes: db.config.push_queue_bytes,
                // In effect now (`auto` follows the file's size).
                direct_io: crate::descriptor::drops_page_cache(
                    &db.config,
                    db.len_seen.load(std::sync::atomic::Ordering::Relaxed),
                ),
                grid_change: db.config.grid_change,
                grid_backoff: db.config.grid_backoff,
            },
        }),
        ..StatsSnapshot::default()
    }
}

/// The nodes of the grid in use (empty: L1 only).
pub fn grid_nodes(db: &OpenDb) -> Vec<String> {
    db.cache.grid().map(|g| g.node_status().into_iter().map(|n| n.addr).collect()).unwrap_or_default()
}
