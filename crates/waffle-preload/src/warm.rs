//! Warming tablespaces on request (`waffle warm --mysql`): a control file.
//!
//! The request is a file, `waffle-warm.request`, beside the stats file
//! (`WAFFLE_STATS_FILE`, default `<datadir>/waffle-stats.json`): a first line
//! `id=TOKEN`, then the tablespaces to warm, one name (or `WAFFLE_TABLES`
//! pattern: `shop/*`, `*`) a line, as the stats file names them. The stats
//! thread looks for it at every tick, takes it (deletes it) and starts the
//! warm; progress shows in the stats file under "warm", whose target names the
//! request's id. A file rather than a signal: a signal carries no names,
//! mariadbd installs its own handlers (a preload's handler would fight
//! them), and the stats thread that writes the progress already ticks.
//!
//! Each tablespace that is open and cached is held (its segment cannot be
//! reused while the warm reads) and read in large reads (waffle_core::warming::warm)
//! through the server's own descriptors, lent for one read at a time
//! (`Runtime::lend`): never a descriptor of the warm's own, whose close would
//! drop every POSIX lock the server holds on the file. Nothing else is needed for
//! safety: every server write of a tablespace page passes the hooks, which
//! bump the page's version after the write reached the file, and a warmed
//! page is installed only if its version did not move since before the read.
//!
//! Tablespaces InnoDB has not opened (it opens a table at its first use, so
//! right after a start most are closed) are not read: the warm would need a
//! descriptor of its own, and the cache a segment for a file no hook watches.
//! They are named in the report (`skipped_targets`, found in the datadir),
//! so a warm right after a start says what it left, and one that matches
//! only such tablespaces warms nothing and says why, instead of failing.
//! A warm that is done waits for the grid to store what it queued
//! (`PageCache::warm_finish`) before it says so.

use std::collections::HashSet;
use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use waffle_core::side_file;
use waffle_core::versions::join;
use waffle_core::warming::run::{Budget, Finish};
use waffle_core::warming::warm::{PUSH_WAIT, SETTLE_WAIT};

use crate::beside::beside_data;
use crate::filter::Filter;
use crate::runtime::Runtime;
use crate::segments::Pinned;
use crate::{guard, innodb, log, state};

pub const REQUEST_FILE: &str = "waffle-warm.request";
/// Reads between looks at whether the preload is still on.
const PIECE_TIME: Duration = Duration::from_millis(100);
/// Names one request may carry.
const MAX_NAMES: usize = 1000;
/// The request file's bound: MAX_NAMES names of a few hundred bytes.
const MAX_REQUEST_BYTES: u64 = 512 * 1024;
/// Directory entries looked at to find the tablespaces InnoDB has not opened.
const MAX_SCANNED: usize = 200_000;
/// Why a matching tablespace on disk was not read.
pub const NOT_OPENED: &str = "InnoDB has not opened it yet (it opens a table at its first use)";
/// Why an open one was not read after all.
const CLOSED: &str = "the server closed it while the warm ran";

/// Takes the request at `path`, if there is one to take: read as the core
/// reads files beside a database (waffle_core::side_file: never through a
/// symlink, never a FIFO or a hard link, at most MAX_REQUEST_BYTES), written
/// by this user, root (an administrator's `waffle warm`) or the datadir's
/// owner, and removed if it is still the file at the path. One that is
/// anything else is left alone and said once in the server's log; one of
/// ours that is garbage (too long, not text) is removed and said once.
fn take_request(path: &Path, datadir: &Path) -> Option<String> {
    let owner = beside_data(datadir).uid;
    let trust = |m: &fs::Metadata| {
        side_file::check_plain(m)?;
        if ![side_file::euid(), 0, owner].contains(&m.uid()) {
            return Err(io::Error::other("owned by another user"));
        }
        Ok(())
    };
    let file = match side_file::open_if(path, &trust) {
        Ok(None) => return None,
        Ok(Some(file)) => file,
        Err(e) => {
            log::warn_once(&format!("ignoring the warm request {}: {e}; left alone", path.display()));
            return None;
        }
    };
    let read = side_file::read_bounded(&file, MAX_REQUEST_BYTES);
    if side_file::is_at(&file, path).unwrap_or(false) {
        let _ = fs::remove_file(path);
    }
    let why = match read {
        Ok(bytes) => match String::from_utf8(bytes) {
            Ok(text) => return Some(text),
            Err(_) => "not text".to_string(),
        },
        Err(e) => e.to_string(),
    };
    log::warn_once(&format!("ignoring the warm request {}: {why}; removed", path.display()));
    None
}

/// The stats thread's tick: takes a request, if there is one, and starts its warm.
pub fn poll(rt: &'static Runtime) {
    let path = rt.stats_path().with_file_name(REQUEST_FILE);
    let Some(text) = take_request(&path, rt.datadir()) else { return };
    let mut id = String::from("-");
    let mut names = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()).take(MAX_NAMES) {
        match line.strip_prefix("id=") {
            Some(v) => id = v.to_string(),
            None => names.push(line.to_string()),
        }
    }
    if names.is_empty() {
        names.push("*".into());
    }
    let target = format!("request {id}: {}", names.join(","));
    if let Err(e) = rt.warming().warm_progress().begin(&target) {
        log::note(&format!("warm {target} refused: {e}"));
        return;
    }
    let spawned = std::thread::Builder::new().name("waffle-warm".into()).spawn(move || {
        guard::enter_forever();
        let filter = Filter::parse(&names.join(","));
        let how = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(rt, &filter))) {
            Ok(Ok(())) => Finish::Done,
            Ok(Err(WarmError::Stopped)) => Finish::Cancelled,
            Ok(Err(e)) => Finish::Failed(e.to_string()),
            Err(_) => Finish::Failed("internal error".into()),
        };
        rt.warming().warm_finish(rt.cache(), how, SETTLE_WAIT);
    });
    if let Err(e) = spawned {
        rt.warming().warm_progress().finish(Finish::Failed(format!("cannot start the warm thread: {e}")));
    }
}

/// Why a warm ends before its last page.
#[derive(Debug, thiserror::Error)]
enum WarmError {
    /// Waffle was turned off (the warm is cancelled, not failed).
    #[error("stopped")]
    Stopped,
    #[error("no cached tablespace matches {patterns} (none is open, none is in {})", datadir.display())]
    NothingMatches { patterns: String, datadir: std::path::PathBuf },
    #[error("{name}: {source}")]
    Read { name: String, source: io::Error },
}

fn run(rt: &Runtime, which: &Filter) -> Result<(), WarmError> {
    let pinned = rt.pin_cached(which);
    let held: HashSet<&str> = pinned.iter().map(|p| p.name.as_str()).collect();
    let closed = on_disk(rt.datadir(), |name| rt.filter().matches(name) && which.matches(name) && !held.contains(name));
    for name in &closed {
        rt.warming().warm_progress().skip_target(name, NOT_OPENED);
    }
    if pinned.is_empty() && closed.is_empty() {
        return Err(WarmError::NothingMatches {
            patterns: which.patterns().join(","),
            datadir: rt.datadir().to_path_buf(),
        });
    }
    let result = pinned.iter().try_for_each(|p| warm_one(rt, p));
    for p in pinned {
        rt.unpin(p);
    }
    result
}

fn warm_one(rt: &Runtime, p: &Pinned) -> Result<(), WarmError> {
    let what = |source: io::Error| WarmError::Read { name: p.name.clone(), source };
    let Some(file_bytes) = rt.lend(p.segment).map(|l| l.file_bytes) else {
        rt.counters().closed_file_skips.incr();
        rt.warming().warm_progress().skip_target(&p.name, CLOSED);
        return Ok(());
    };
    let file = rt.lent_files();
    let pages = file_bytes / rt.page_bytes();
    let progress = rt.warming().warm_progress();
    progress.plan(pages);
    let stop = AtomicBool::new(false);
    let first = join(p.segment as u64, 0);
    let mut done = 0;
    while done < pages {
        if !state::active() {
            return Err(WarmError::Stopped);
        }
        let mut budget =
            Budget { bytes: u64::MAX, deadline: Instant::now() + PIECE_TIME, cancel: &stop, push_wait: PUSH_WAIT };
        let n =
            rt.warming().warm_run(rt.cache(), first + done, pages - done, &file, &mut budget, None).map_err(what)?;
        done += n;
    }
    Ok(())
}

/// The tablespaces in `datadir` (`ibdata*` and `undoNNN` in it, `*.ibd` in
/// its database directories) by name, that `pick` keeps, sorted; InnoDB's
/// own temporary files (`#sql*`) left out. Looks at MAX_SCANNED entries at
/// most; reads directories only (a tablespace file is never opened).
fn on_disk(datadir: &Path, pick: impl Fn(&str) -> bool) -> Vec<String> {
    let mut budget = MAX_SCANNED;
    let mut names = Vec::new();
    let visit = |path: &Path, names: &mut Vec<String>| {
        let name = innodb::tablespace_name(&path.to_string_lossy());
        let temporary = name.rsplit('/').next().is_some_and(|n| n.starts_with("#sql"));
        if innodb::is_tablespace_path(path.as_os_str().as_encoded_bytes()) && !temporary && pick(&name) {
            names.push(name);
        }
    };
    for top in entries(datadir, &mut budget) {
        if top.is_dir() {
            for path in entries(&top, &mut budget) {
                if path.extension().is_some_and(|e| e == "ibd") && path.is_file() {
                    visit(&path, &mut names);
                }
            }
        } else if top.extension().is_none_or(|e| e != "ibd") && top.is_file() {
            visit(&top, &mut names);
        }
    }
    names.sort();
    names.dedup();
    names
}

/// The paths in `dir`, at most `budget` (which they spend).
fn entries(dir: &Path, budget: &mut usize) -> Vec<std::path::PathBuf> {
    let Ok(read) = fs::read_dir(dir) else { return Vec::new() };
    let paths: Vec<_> = read.take(*budget).filter_map(|e| e.ok().map(|e| e.path())).collect();
    *budget -= paths.len();
    paths
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::beside::tests::{datadir, fingerprint};

    #[test]
    fn a_warms_error_is_told_by_its_kind_with_the_old_text() {
        let e = WarmError::NothingMatches { patterns: "shop/*".into(), datadir: "/var/lib/mysql".into() };
        assert_eq!(e.to_string(), "no cached tablespace matches shop/* (none is open, none is in /var/lib/mysql)");
        let e = WarmError::Read { name: "shop/orders".into(), source: io::Error::from_raw_os_error(libc::EIO) };
        assert!(e.to_string().starts_with("shop/orders: Input/output error"), "{e}");
        assert_eq!(WarmError::Stopped.to_string(), "stopped");
    }

    #[test]
    fn the_tablespaces_on_disk_are_found_by_name() {
        let dir = datadir("warm-on-disk", Some(0o660));
        for f in ["ibdata1", "undo001", "ib_logfile0", "ibtmp1", "shop/orders.ibd", "shop/items.ibd", "shop/items.frm"]
        {
            let path = dir.join(f);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, b"").unwrap();
        }
        std::fs::write(dir.join("shop/#sql-ib12.ibd"), b"").unwrap();
        std::fs::create_dir_all(dir.join("empty")).unwrap();
        let all = on_disk(&dir, |_| true);
        assert_eq!(all, ["ibdata1", "shop/items", "shop/orders", "undo001"]);
        let shop = Filter::parse("shop/*");
        assert_eq!(on_disk(&dir, |n| shop.matches(n) && n != "shop/items"), ["shop/orders"]);
    }

    #[test]
    fn a_request_is_taken_once_and_a_planted_one_is_left_alone() {
        let dir = datadir("warm-request", Some(0o660));
        let path = dir.join(REQUEST_FILE);
        assert_eq!(take_request(&path, &dir), None);
        std::fs::write(&path, "id=1\nshop/*\n").unwrap();
        assert_eq!(take_request(&path, &dir).as_deref(), Some("id=1\nshop/*\n"));
        assert!(!path.exists(), "taken");
        // A symlink: never followed, left alone.
        let victim = dir.join("victim");
        std::fs::write(&victim, b"id=secret\n").unwrap();
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        assert_eq!(take_request(&path, &dir), None);
        assert!(std::fs::symlink_metadata(&path).unwrap().file_type().is_symlink());
        std::fs::remove_file(&path).unwrap();
        // A hard link to another file: not read (its lines would show in the stats), left alone.
        std::fs::hard_link(&victim, &path).unwrap();
        let before = fingerprint(&victim);
        assert_eq!(take_request(&path, &dir), None);
        assert_eq!(fingerprint(&victim), before);
        std::fs::remove_file(&path).unwrap();
        // Garbage of our own: too long, or not text: removed, nothing warmed.
        std::fs::write(&path, vec![b'x'; MAX_REQUEST_BYTES as usize + 1]).unwrap();
        assert_eq!(take_request(&path, &dir), None);
        assert!(!path.exists(), "an oversized request is removed");
        std::fs::write(&path, b"id=1\n\xff\n").unwrap();
        assert_eq!(take_request(&path, &dir), None);
        assert!(!path.exists(), "garbage is removed");
    }
}
