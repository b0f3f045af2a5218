//! The stats file: a JSON snapshot of a cache's counters that an adapter
//! rewrites every second, for monitoring that cannot ask the database
//! (`waffle stats`, its Prometheus endpoint, a script). The MariaDB preload
//! writes one per server (`<datadir>/waffle-stats.json` or
//! `$WAFFLE_STATS_FILE`); the SQLite adapter one per database when the opener
//! names it ([`STATS_FILE`]). Both have the shape of `PRAGMA waffle_stats`
//! plus the fields of [`stamp`]: one [`StatsSnapshot`].
//!
//! A write replaces the file as [`side_file::replace_beside`] does: a
//! temporary file of a random name created O_EXCL|O_NOFOLLOW in the same
//! directory with the database's mode (and, as root, its owner), synced, then
//! renamed over the old one. A reader sees the old file or the new one; a
//! symlink or another user's file at the name is an error and left alone.

use std::io;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::side_file::{self, Beside};
use crate::stats::{Stamp, StatsSnapshot};

/// Defined with the other parameters (config.rs); named here too, where it is used.
pub use crate::config::STATS_FILE;

/// How often an adapter rewrites its stats file.
pub const INTERVAL_MS: u64 = 1000;

/// What every stats file says besides the counters: which adapter wrote it,
/// its process, when (`updated_unix_ms`), and whether it is the last write of
/// this cache (`final`: the server exited, the database closed). The adapter
/// adds its `state`.
pub fn stamp(adapter: &str, final_write: bool) -> Stamp {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    Stamp {
        adapter: Some(adapter.to_string()),
        pid: Some(std::process::id()),
        updated_unix_ms: Some(now.as_millis() as u64),
        final_write: Some(final_write),
        ..Stamp::default()
    }
}

/// Replaces the stats file at `path` with `stats` (pretty JSON and a line
/// feed), made like `like` (the database's mode and, as root, owner).
pub fn write(path: &Path, like: &Beside, stats: &StatsSnapshot) -> io::Result<()> {
    let text = serde_json::to_string_pretty(&stats.to_json()).map_err(io::Error::other)?;
    side_file::replace_beside(path, like, (text + "\n").as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::CacheSnapshot;
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
        let cache = CacheSnapshot { l1_hits: 7, ..CacheSnapshot::default() };
        let mut stats = StatsSnapshot { stamp: stamp("sqlite", false), cache: Some(cache), ..StatsSnapshot::default() };
        write(&path, &like, &stats).unwrap();
        stats.stamp = stamp("sqlite", true);
        write(&path, &like, &stats).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.ends_with("}\n"), "{text}");
        let v = StatsSnapshot::from_json(&serde_json::from_str(&text).unwrap()).unwrap();
        assert_eq!(v.cache().l1_hits, 7);
        let s = v.stamp;
        assert_eq!(
            (s.adapter.as_deref(), s.final_write, s.pid),
            (Some("sqlite"), Some(true), Some(std::process::id()))
        );
        assert!(s.updated_unix_ms.unwrap() > 1_600_000_000_000);
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o640);
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1, "no temporary file left");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
