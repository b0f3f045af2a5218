//! A warm of a MariaDB/MySQL server under libwaffle_preload.so: a request
//! written beside its stats file (the control file, read by the preload's
//! stats thread: waffle-preload's warm.rs), then the stats file's `"warm"`
//! object followed until it names this request done.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::follow::{Follow, Show, POLL};
use crate::warmed::{skipped_targets_words, Warmed};

/// The preload's control file, beside its stats file (waffle-preload's warm.rs).
const REQUEST_FILE: &str = "waffle-warm.request";
/// How long the preload may take to pick a request up (its stats thread ticks every second).
const PICKUP: Duration = Duration::from_secs(15);

/// Asks the preload of the server whose stats file is `dir/waffle-stats.json`
/// (or `dir` itself, a stats file) to warm `tablespaces` (names as its stats
/// file shows them, or patterns like `shop/*`; none: every cached one), and
/// follows the progress in the stats file, telling `show` how far it is. An
/// error when the warm stored nothing it read, or read nothing because InnoDB
/// has opened none of the tablespaces it names (it opens a table at its first use).
pub fn warm(dir: &Path, tablespaces: &[String], show: Show<'_>) -> Result<Warmed, String> {
    warm_within(dir, tablespaces, show, PICKUP)
}

/// [`warm`], with `pickup` for [`PICKUP`] (the tests' requests nobody takes need not wait 15 s).
fn warm_within(dir: &Path, tablespaces: &[String], show: Show<'_>, pickup: Duration) -> Result<Warmed, String> {
    let stats_path = if dir.is_dir() { dir.join("waffle-stats.json") } else { dir.to_path_buf() };
    // A server just started writes its first stats after one interval.
    let t0 = Instant::now();
    while !stats_path.is_file() && t0.elapsed() < pickup {
        std::thread::sleep(POLL);
    }
    if !stats_path.is_file() {
        return Err(format!(
            "{}: no stats file (is the server running under libwaffle_preload.so? WAFFLE_STATS_FILE?)",
            stats_path.display()
        ));
    }
    let request = stats_path.with_file_name(REQUEST_FILE);
    let id = format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos())
    );
    write_request(&request, &id, tablespaces)?;
    let warmed = follow(&stats_path, &request, &id, show, pickup)?;
    if warmed.read_pages == 0 && warmed.skipped_pages == 0 && warmed.skipped_targets_count > 0 {
        return Err(format!(
            "nothing warmed: {}. Warm again once InnoDB has opened them (a statement that uses the table opens it, e.g. SELECT 1 FROM db.t LIMIT 1)",
            skipped_targets_words(&warmed.skipped_targets, warmed.skipped_targets_count)
        ));
    }
    if warmed.l1_pages + warmed.pushed_pages == 0 && warmed.unstored_pages() > 0 {
        return Err(format!("nothing stored: {}", warmed.summary()));
    }
    Ok(warmed)
}

/// The request: `id=ID`, then a tablespace or pattern a line.
fn write_request(request: &Path, id: &str, tablespaces: &[String]) -> Result<(), String> {
    let mut text = format!("id={id}\n");
    for t in tablespaces {
        if t.contains(['\n', '\r']) {
            return Err(format!("'{t}': a tablespace name is one line"));
        }
        text.push_str(t);
        text.push('\n');
    }
    // Written whole, then renamed: the preload never reads half a request.
    let tmp = request.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, text).map_err(|e| format!("{}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, request).map_err(|e| format!("{}: {e}", request.display()))
}

/// Follows the stats file until its warm is request `id`'s and done; an
/// error when the preload does not take the request within `pickup`.
fn follow(stats_path: &Path, request: &Path, id: &str, show: Show<'_>, pickup: Duration) -> Result<Warmed, String> {
    // The command's time starts with the request, before the server takes it.
    let t0 = Instant::now();
    let ours = format!("request {id}:");
    let mut follow = Follow::new();
    loop {
        std::thread::sleep(POLL * 2);
        // The stats file is replaced whole (renamed over): a read sees one version.
        let w = std::fs::read_to_string(stats_path)
            .ok()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .map(|s| s["warm"].clone())
            .unwrap_or(Value::Null);
        let target = w["target"].as_str().unwrap_or_default();
        if !target.starts_with(&ours) {
            if t0.elapsed() > pickup {
                // Still there: never taken. Withdrawn, so that a server started later does not run it.
                let taken = !request.exists();
                let _ = std::fs::remove_file(request);
                return Err(if taken {
                    "the preload took the request but did not start it (a warm already running? see the server's error log)".into()
                } else {
                    "the preload did not take the request (is the server running under it?)".into()
                });
            }
            continue;
        }
        if let Some(warmed) = follow.step(&w, target, show, t0.elapsed().as_secs_f64())? {
            return Ok(warmed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Long enough for the taker thread below to run on a loaded machine; not the 15 s a real server gets.
    const TEST_PICKUP: Duration = Duration::from_secs(3);

    /// A directory with a stats file whose warm is nobody's request (no preload reads the control file).
    fn server_dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("waffle-warm-client-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("waffle-stats.json"), r#"{"warm": {"state": "idle"}}"#).unwrap();
        dir
    }

    #[test]
    fn a_request_nobody_takes_is_said_so_and_withdrawn() {
        let dir = server_dir("untaken");
        let e = warm_within(&dir, &["shop/*".to_string()], None, TEST_PICKUP).unwrap_err();
        let left = dir.join(REQUEST_FILE).exists();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(e.contains("did not take the request"), "{e}");
        assert!(!left, "the request is withdrawn");
    }

    #[test]
    fn a_request_taken_and_not_started_is_said_so() {
        let dir = server_dir("taken");
        let request = dir.join(REQUEST_FILE);
        // The preload's part: it takes the request (reads and removes the file) and starts nothing.
        let taker = std::thread::spawn({
            let request = request.clone();
            move || {
                while std::fs::remove_file(&request).is_err() {
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        });
        let e = warm_within(&dir, &[], None, TEST_PICKUP).unwrap_err();
        taker.join().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(e.contains("took the request but did not start it"), "{e}");
    }
}
