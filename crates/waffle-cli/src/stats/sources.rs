//! The stats files `waffle stats` reads: each is one JSON object, or the
//! reason it could not be read. One bad file never hides the others.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::Value;
use waffle_core::stats::StatsSnapshot;

/// A stats file is never read past this (the preload's with 10,000 tablespaces is a few MiB).
pub const MAX_BYTES: u64 = 64 << 20;

/// One stats file: its name as given, and its stats or why there are none.
pub struct Source {
    pub name: String,
    pub stats: Result<Stats, String>,
}

/// A stats file's JSON as written (`--format json` prints it whole) and read as a snapshot.
#[derive(Debug)]
pub struct Stats {
    pub json: Value,
    pub snapshot: StatsSnapshot,
}

impl Stats {
    /// Err: `json` is not a stats object.
    pub fn from_json(json: Value) -> Result<Stats, String> {
        if !json.is_object() {
            return Err("not a JSON object".into());
        }
        // Any JSON is not a stats file: healthy must mean a Waffle wrote it.
        if let Some(why) = waffle_core::stats_file::not_a_stats_file(&json) {
            return Err(why);
        }
        let snapshot = StatsSnapshot::from_json(&json).map_err(|e| e.to_string())?;
        Ok(Stats { json, snapshot })
    }
}

/// Each path once, in the order given (a path named twice would be two series of the same name).
pub fn distinct(paths: &[PathBuf]) -> Vec<PathBuf> {
    let mut seen = std::collections::HashSet::new();
    paths.iter().filter(|p| seen.insert(p.as_path())).cloned().collect()
}

/// Reads every path now.
pub fn read_all(paths: &[PathBuf]) -> Vec<Source> {
    paths.iter().map(|p| Source { name: p.display().to_string(), stats: read(p) }).collect()
}

/// The stats in the file at `path`.
pub fn read(path: &Path) -> Result<Stats, String> {
    let bytes = read_bounded(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let not_stats = |e: String| format!("{} is not a stats file: {e}", path.display());
    let json = serde_json::from_slice::<Value>(&bytes).map_err(|e| not_stats(e.to_string()))?;
    Stats::from_json(json).map_err(not_stats)
}

fn read_bounded(path: &Path) -> std::io::Result<Vec<u8>> {
    // A FIFO or a device is never opened (an open of a FIFO blocks until a writer comes).
    if !std::fs::metadata(path)?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut bytes = Vec::new();
    std::fs::File::open(path)?.take(MAX_BYTES + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_BYTES {
        return Err(std::io::Error::other(format!("longer than {MAX_BYTES} bytes")));
    }
    Ok(bytes)
}
