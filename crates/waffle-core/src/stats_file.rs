//! The stats file: a JSON snapshot of a cache's counters that an adapter
//! rewrites every second, for monitoring that cannot ask the database
//! (`waffle stats`, its Prometheus endpoint, a script). The MariaDB preload
//! writes one per server (`<datadir>/waffle-stats.json` or
//! `$WAFFLE_STATS_FILE`); the SQLite adapter one per database when the opener
//! names it ([`STATS_FILE`]). Both have the shape of `PRAGMA waffle_stats`
//! plus the fields of [`stamp`].
//!
//! A write replaces the file as [`side_file::replace_beside`] does: a
//! temporary file of a random name created O_EXCL|O_NOFOLLOW in the same
//! directory with the database's mode (and, as root, its owner), synced, then
//! renamed over the old one. A reader sees the old file or the new one; a
//! symlink or another user's file at the name is an error and left alone.

use std::io;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Map, Value};

use crate::side_file::{self, Beside};

/// Defined with the other parameters (config.rs); named here too, where it is used.
pub use crate::config::STATS_FILE;

/// How often an adapter rewrites its stats file.
pub const INTERVAL_MS: u64 = 1000;

/// Adds what every stats file says besides the counters: which adapter wrote
/// it, its process, when (`updated_unix_ms`), and whether it is the last
/// write of this cache (`final`: the server exited, the database closed).
pub fn stamp(m: &mut Map<String, Value>, adapter: &str, final_write: bool) {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    m.insert("adapter".into(), json!(adapter));
    m.insert("pid".into(), json!(std::process::id()));
    m.insert("updated_unix_ms".into(), json!(now.as_millis() as u64));
    m.insert("final".into(), json!(final_write));
}

/// Replaces the stats file at `path` with `v` (pretty JSON and a line feed),
/// made like `like` (the database's mode and, as root, owner).
pub fn write(path: &Path, like: &Beside, v: &Value) -> io::Result<()> {
    let text = serde_json::to_string_pretty(v).map_err(io::Error::other)?;
    side_file::replace_beside(path, like, (text + "\n").as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;
    use std::path::PathBuf;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("waffle-stats-file-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_write_is_stamped_json_of_the_mode_asked_and_leaves_no_temporary_file() {
        let dir = temp_dir("write");
        let path = dir.join("stats.json");
        let like = Beside { mode: 0o640, uid: side_file::euid(), gid: 0 };
        let mut m = Map::new();
        m.insert("l1_hits".into(), json!(7));
        stamp(&mut m, "sqlite", false);
        write(&path, &like, &Value::Object(m.clone())).unwrap();
        stamp(&mut m, "sqlite", true);
        write(&path, &like, &Value::Object(m)).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.ends_with("}\n"), "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            (v["l1_hits"].as_u64(), v["adapter"].as_str(), v["final"].as_bool()),
            (Some(7), Some("sqlite"), Some(true))
        );
        assert_eq!(v["pid"], std::process::id());
        assert!(v["updated_unix_ms"].as_u64().unwrap() > 1_600_000_000_000);
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o640);
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1, "no temporary file left");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
