//! The stats files `waffle stats` reads: each is one JSON object, or the
//! reason it could not be read. One bad file never hides the others.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::Value;
use waffle_core::stats::health::{self, Health};
use waffle_core::stats::StatsSnapshot;

/// A stats file is never read past this (the preload's with 10,000 tablespaces is a few MiB).
pub const MAX_BYTES: u64 = 64 << 20;

/// One stats file: its name as given (for people), its canonical path (the
/// `source` label: one series whatever the spelling), and its stats or why there are none.
pub struct Source {
    pub name: String,
    pub label: String,
    pub stats: Result<Stats, String>,
}

/// A stats file's JSON as written (`--format json` prints it whole), read as a snapshot, and
/// what its writer is now (judged when read: running, stopped, crashed, stale...).
#[derive(Debug)]
pub struct Stats {
    pub json: Value,
    pub snapshot: StatsSnapshot,
    pub health: Health,
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
        let health = health::judge_now(&snapshot.stamp);
        Ok(Stats { json, snapshot, health })
    }
}

/// `path` as one name whatever its spelling (`./a.json`, `dir/../a.json`, a symlinked directory):
/// the canonical path of the file, else of its directory with its name (a file not written yet),
/// else the absolute path.
pub fn canonical(path: &Path) -> PathBuf {
    if let Ok(p) = std::fs::canonicalize(path) {
        return p;
    }
    let in_dir = || {
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        Some(std::fs::canonicalize(dir).ok()?.join(path.file_name()?))
    };
    in_dir().or_else(|| std::path::absolute(path).ok()).unwrap_or_else(|| path.to_path_buf())
}

/// Reads every path now, each file once (two spellings of one file are one source).
pub fn read_all(paths: &[PathBuf]) -> Vec<Source> {
    let mut seen = std::collections::HashSet::new();
    let named = paths.iter().map(|p| (p, canonical(p))).filter(|(_, c)| seen.insert(c.clone()));
    named
        .map(|(p, c)| Source { name: p.display().to_string(), label: c.display().to_string(), stats: read(p) })
        .collect()
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
