//! The JSON of one database's counters, latencies, nodes and settings: what
//! `PRAGMA waffle_stats` answers (pragma.rs) and the stats file writes every
//! second (stats_file.rs). A leaf: it reads an `OpenDb` and nothing else.

use serde_json::{json, Map, Value};

use crate::open_db::OpenDb;

/// What `PRAGMA waffle_stats` says (pragma.rs), as a map (the stats file,
/// stats_file.rs, adds its own fields).
pub fn stats_map(db: &OpenDb) -> Map<String, Value> {
    let mut m = db.cache.stats_json();
    db.warming.add_to_stats(&mut m);
    m.insert("file".into(), json!(db.path.display().to_string()));
    m.insert(
        "config".into(),
        json!({
            "grid": grid_nodes(db),
            "sealed": db.config.seal_key.is_some(),
            "local_bytes": db.config.local_bytes,
            "timeout_ms": db.config.timeout_ms,
            "push_queue_bytes": db.config.push_queue_bytes,
            "direct_io": db.config.direct_io,
            "grid_change": db.config.grid_change,
            "grid_backoff": db.config.grid_backoff,
        }),
    );
    m
}

/// The nodes of the grid in use (empty: L1 only).
pub fn grid_nodes(db: &OpenDb) -> Vec<String> {
    db.cache.grid().map(|g| g.node_status().into_iter().map(|n| n.addr).collect()).unwrap_or_default()
}
