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
//!
//! The name may come from SQL (an ATTACH's URI, before the adapter knows it
//! is one) or a mistake: a write never replaces a file that is not a stats
//! file. Every file starts with [`MARKER`] (`"format": "waffle-stats"` and
//! its version first); an existing file is replaced only if it starts so,
//! is empty, or is a stats file of a Waffle from before the marker.

use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::side_file::{self, Beside};
use crate::stats::{health, Stamp, StatsSnapshot};

/// Defined with the other parameters (config.rs); named here too, where it is used.
pub use crate::config::STATS_FILE;

/// The `format` of every stats file, and its version (`format_version`). Version 2 (issue 32
/// item 2): `state` is running, off, disabled or stopped (1 said active, and closed or active
/// with `final`), and the stamp has the writer's process identity and interval.
pub const FORMAT: &str = "waffle-stats";
pub const FORMAT_VERSION: u32 = 2;
/// The versions this waffle reads.
pub const READS_VERSIONS: std::ops::RangeInclusive<u32> = 1..=FORMAT_VERSION;
/// How every stats file starts (what [`write`] checks before it replaces one).
pub const MARKER: &str = "{\n  \"format\": \"waffle-stats\",";
/// A stats file of a Waffle from before the marker is recognised up to this size.
const MAX_LEGACY_BYTES: u64 = 64 << 20;

/// Why a JSON object read as a stats file is not one: None if it has the marker of a version this waffle reads.
pub fn not_a_stats_file(v: &serde_json::Value) -> Option<String> {
    let (first, last) = (READS_VERSIONS.start(), READS_VERSIONS.end());
    match (v.get("format").and_then(|f| f.as_str()), v.get("format_version").and_then(|f| f.as_u64())) {
        (Some(FORMAT), Some(n)) if u32::try_from(n).is_ok_and(|n| READS_VERSIONS.contains(&n)) => None,
        (Some(FORMAT), Some(n)) if n > u64::from(*last) => Some(format!(
            "its format_version is {n}, newer than this waffle reads ({first} to {last}): read it with the waffle \
             of the library that wrote it, or upgrade this one"
        )),
        (Some(FORMAT), n) => Some(format!(
            "its format_version is {}; this waffle reads {first} to {last}",
            n.map_or_else(|| "missing".to_string(), |n| n.to_string())
        )),
        _ => Some(format!(
            "it has no \"format\": \"{FORMAT}\" (not written by Waffle, or by a Waffle older than the marker)"
        )),
    }
}

/// How often an adapter rewrites its stats file.
pub const INTERVAL_MS: u64 = 1000;

/// The states a writer says (`state`); a reader adds crashed and stale (stats::health).
pub const RUNNING: &str = "running";
pub const STOPPED: &str = "stopped";

/// What every stats file says besides the counters: which adapter wrote it,
/// its process (pid, start time, PID namespace, boot: a reader tells a dead
/// writer from a live one), when (`updated_unix_ms`), how often
/// (`interval_ms`, [`INTERVAL_MS`] unless the adapter says), and whether it
/// is the last write of this cache (`final`: the server exited, the
/// database closed; `state` is then `stopped`). The adapter adds its
/// `state` otherwise, and `started_unix_ms`.
pub fn stamp(adapter: &str, final_write: bool) -> Stamp {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    let me = health::own();
    Stamp {
        pid_start_ticks: me.start_ticks,
        pid_namespace: me.pid_namespace,
        boot_id: me.boot_id,
        interval_ms: Some(INTERVAL_MS),
        state: final_write.then(|| STOPPED.to_string()),
        adapter: Some(adapter.to_string()),
        pid: Some(std::process::id()),
        updated_unix_ms: Some(now.as_millis() as u64),
        final_write: Some(final_write),
        format: Some(FORMAT.to_string()),
        format_version: Some(FORMAT_VERSION),
        ..Stamp::default()
    }
}

/// Replaces the stats file at `path` with `stats` (pretty JSON and a line
/// feed), made like `like` (the database's mode and, as root, owner); the
/// marker comes first, whatever the stamp says. Err, and nothing written, if
/// `path` names a file that is not a stats file (see the module's comment).
pub fn write(path: &Path, like: &Beside, stats: &StatsSnapshot) -> io::Result<()> {
    let mut v = stats.to_json();
    if let Some(m) = v.as_object_mut() {
        m.remove("format");
        m.remove("format_version");
    }
    let rest = serde_json::to_string_pretty(&v).map_err(io::Error::other)?;
    let rest = rest.strip_prefix('{').ok_or_else(|| io::Error::other("the stats are not a JSON object"))?;
    let text = if rest == "}" {
        format!("{MARKER}\n  \"format_version\": {FORMAT_VERSION}\n}}\n")
    } else {
        format!("{MARKER}\n  \"format_version\": {FORMAT_VERSION},{rest}\n")
    };
    check_replaceable(path)?;
    side_file::replace_beside(path, like, text.as_bytes())
}

/// Ok if `path` is free, or holds a file a stats write may replace.
fn check_replaceable(path: &Path) -> io::Result<()> {
    let m = match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
        Ok(m) => m,
    };
    if !m.file_type().is_file() {
        return Ok(()); // replace_beside refuses it, saying what it is
    }
    let not_ours =
        || io::Error::other("it is not a Waffle stats file (it does not start with the stats-file marker); left alone");
    // O_NONBLOCK|O_NOFOLLOW: swapped for a FIFO or a symlink since the stat, the open neither blocks nor follows.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(not_ours());
    }
    let mut head = Vec::with_capacity(MARKER.len());
    (&file).take(MARKER.len() as u64).read_to_end(&mut head)?;
    if head.is_empty() || head == MARKER.as_bytes() {
        return Ok(());
    }
    // A Waffle from before the marker wrote a JSON object with these fields; an upgrade goes on writing it.
    let mut all = head;
    (&file).take(MAX_LEGACY_BYTES).read_to_end(&mut all)?;
    let legacy = serde_json::from_slice::<serde_json::Value>(&all).ok().is_some_and(|v| {
        matches!(v.get("adapter").and_then(|a| a.as_str()), Some("sqlite" | "mariadb-preload"))
            && v.get("updated_unix_ms").is_some_and(|u| u.is_u64())
            && v.get("pid").is_some_and(|p| p.is_u64())
    });
    if legacy {
        Ok(())
    } else {
        Err(not_ours())
    }
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
        assert!(text.starts_with(MARKER), "{text}");
        assert_eq!(s.format.as_deref(), Some(FORMAT));
        assert_eq!(not_a_stats_file(&serde_json::from_str(&text).unwrap()), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Issue 32 item 2: format 2 changed `state`'s words; a reader takes 1 and 2 and says why not a newer one.
    #[test]
    fn a_reader_takes_the_versions_it_knows_and_names_a_newer_one() {
        let v = |n: u64| serde_json::json!({"format": FORMAT, "format_version": n});
        assert_eq!((not_a_stats_file(&v(1)), not_a_stats_file(&v(2))), (None, None));
        let newer = not_a_stats_file(&v(3)).unwrap();
        assert!(newer.contains("format_version is 3, newer than this waffle reads (1 to 2)"), "{newer}");
        assert!(not_a_stats_file(&v(0)).unwrap().contains("this waffle reads 1 to 2"));
        let s = stamp("sqlite", true);
        assert_eq!((s.state.as_deref(), s.format_version), (Some(STOPPED), Some(2)));
        assert!(s.pid_start_ticks.is_some() && s.interval_ms == Some(INTERVAL_MS), "{s:?}");
    }

    #[test]
    fn a_write_replaces_no_file_but_a_stats_file() {
        let dir = temp_dir("not-ours");
        let like = Beside { mode: 0o600, uid: side_file::euid(), gid: 0 };
        let stats = StatsSnapshot { stamp: stamp("sqlite", false), ..StatsSnapshot::default() };
        let db = dir.join("app.db");
        std::fs::write(&db, b"SQLite format 3\0 and the rest").unwrap();
        let e = write(&db, &like, &stats).unwrap_err();
        assert!(e.to_string().contains("not a Waffle stats file"), "{e}");
        assert_eq!(std::fs::read(&db).unwrap(), b"SQLite format 3\0 and the rest");
        let pkg = dir.join("pkg.json");
        std::fs::write(&pkg, br#"{"name":"x"}"#).unwrap();
        assert!(write(&pkg, &like, &stats).is_err(), "JSON that is not a stats file is left alone");
        assert_eq!(
            not_a_stats_file(&serde_json::json!({"name": "x"})).unwrap(),
            "it has no \"format\": \"waffle-stats\" (not written by Waffle, or by a Waffle older than the marker)"
        );
        // Empty (made by the operator for its mode), a stats file before the marker, and its own: replaced.
        for (name, before) in [
            ("empty.json", String::new()),
            ("legacy.json", r#"{"adapter": "sqlite", "pid": 7, "updated_unix_ms": 1700000000000}"#.to_string()),
        ] {
            let path = dir.join(name);
            std::fs::write(&path, before).unwrap();
            write(&path, &like, &stats).unwrap();
            write(&path, &like, &stats).unwrap();
            assert!(std::fs::read_to_string(&path).unwrap().starts_with(MARKER), "{name}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
