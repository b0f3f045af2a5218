//! The stats files `waffle stats` reads: each is one JSON object, or the
//! reason it could not be read. One bad file never hides the others.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// A stats file is never read past this (the preload's with 10,000 tablespaces is a few MiB).
pub const MAX_BYTES: u64 = 64 << 20;

/// One stats file: its name as given, and its JSON or why there is none.
pub struct Source {
    pub name: String,
    pub stats: Result<Value, String>,
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

/// The JSON object in the file at `path`.
pub fn read(path: &Path) -> Result<Value, String> {
    let bytes = read_bounded(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(v) if v.is_object() => Ok(v),
        Ok(_) => Err(format!("{} is not a stats file: not a JSON object", path.display())),
        Err(e) => Err(format!("{} is not a stats file: {e}", path.display())),
    }
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
