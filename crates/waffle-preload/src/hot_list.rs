//! The hot list of a server under the preload: `waffle-hot.list` beside the
//! stats file, the tablespace pages the cache held, hottest first, preloaded
//! from the disk into L1's free room at the next server start.
//!
//! Unlike SQLite's (waffle_core::warming::hot_list), this list is page numbers only,
//! always: every server start is cold (a new cache identity, so no grid copy
//! of an earlier run is ever asked for), and the cache names a page by a
//! segment that means nothing to the next run, so the list names the
//! tablespace (as the stats file does) and the page in its file.
//!
//! When: the stats thread writes it every `WAFFLE_HOT_LIST_INTERVAL_MS`
//! (default 30 s), not at shutdown: InnoDB closes its tablespace files
//! before the process exits, and closing one drops its pages from the cache,
//! so at exit there is nothing left to list. A tablespace that is not open at
//! a write keeps its entries of the list before (while its file exists), so a
//! write during shutdown, or while a table is closed, loses nothing; the
//! list after a crash is the last one written. Nothing is written while the
//! reload of a start runs (L1 would list what the reload put there).
//! Written and read as the stats file ([`crate::beside::beside_data`]): a
//! list that is a symlink, another user's, a hard link, longer than any
//! list or garbage is ignored (one warning; a cold start), never followed.
//!
//! Reload: a thread of its own, for at most RELOAD_WINDOW after the first
//! tick: each second it holds the listed tablespaces InnoDB has open (pinned,
//! as a warm does), reads their listed pages through the server's own
//! descriptors (lent for each read, as a warm's: never one of its own, whose
//! close would drop InnoDB's POSIX lock on the file), hottest first, into
//! L1's free room (waffle_core's `hot_reload`, untrusted: the disk only), and
//! lets them go. Tablespaces InnoDB has not opened wait until it does. No
//! lock is needed, for the warm's reason
//! (warm.rs): every server write passes the hooks, which bump the page's
//! version, and a page is installed only if its version did not move since
//! before the read.
//!
//! Format (text, one entry a line, hottest first):
//!
//! ```text
//! waffle-hot-list 1 page_bytes=16384
//! 412\tshop/orders
//! 3\tibdata1
//! crc32c=0a1b2c3d            (over every byte before this line)
//! ```

use std::collections::{HashMap, HashSet};
use std::io;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use waffle_core::config::HotListMode;
use waffle_core::side_file;
use waffle_core::versions::{join, split, MAX_PAGES};
use waffle_core::warming::hot_list::MAX_LISTED;
use waffle_core::warming::reload::ReloadFrom;
use waffle_core::warming::run::{Budget, Finish};
use waffle_core::warming::warm::PUSH_WAIT;

use crate::beside::{beside_data, write_beside_data};
use crate::runtime::Runtime;
use crate::segments::Pinned;
use crate::{guard, log, state};

pub const LIST_FILE: &str = "waffle-hot.list";
const MAGIC: &str = "waffle-hot-list 1";
/// How often the list is written, unless `WAFFLE_HOT_LIST_INTERVAL_MS` says.
pub const DEFAULT_WRITE_EVERY_MS: u64 = 30_000;
/// How long after the start tablespaces that open late are still reloaded.
const RELOAD_WINDOW: Duration = Duration::from_secs(600);
/// How often the reload looks for listed tablespaces InnoDB opened since.
const LOOK_EVERY: Duration = Duration::from_secs(1);
/// Reads between looks at whether the preload is still on.
const PIECE_TIME: Duration = Duration::from_millis(100);
/// The list file's bound: a name of at most 255 bytes and a page number per line.
const MAX_FILE_BYTES: u64 = (MAX_LISTED as u64) * 280 + 4096;

struct State {
    write_every: Duration,
    /// The list as last written or loaded: (tablespace, page), hottest first.
    last: Vec<(String, u64)>,
    /// Loaded at the start and not reloaded yet: tablespace -> (rank, page).
    pending: HashMap<String, Vec<(u32, u64)>>,
    last_write: Instant,
    started: Instant,
    reloading: bool,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

fn encode(page_bytes: u64, entries: &[(String, u64)]) -> String {
    let mut s = format!("{MAGIC} page_bytes={page_bytes}\n");
    for (name, page) in entries {
        s.push_str(&format!("{page}\t{name}\n"));
    }
    let crc = crc32c::crc32c(s.as_bytes());
    s.push_str(&format!("crc32c={crc:08x}\n"));
    s
}

/// (tablespace name, page in its file), hottest first.
type Entries = Vec<(String, u64)>;

/// The page size and the entries of a list.
fn decode(text: &str) -> Result<(u64, Entries), &'static str> {
    let body_end = text.trim_end_matches('\n').rfind('\n').ok_or("too short")? + 1;
    let (body, last) = text.split_at(body_end);
    let crc = last.trim_end().strip_prefix("crc32c=").ok_or("no checksum line")?;
    if u32::from_str_radix(crc, 16).ok() != Some(crc32c::crc32c(body.as_bytes())) || last.len() != 16 {
        return Err("checksum mismatch");
    }
    let mut lines = body.lines();
    let head = lines.next().ok_or("too short")?;
    let page_bytes: u64 = head
        .strip_prefix(MAGIC)
        .and_then(|r| r.trim().strip_prefix("page_bytes="))
        .and_then(|v| v.parse().ok())
        .ok_or("not a hot list of this format")?;
    let mut entries = Vec::new();
    for line in lines {
        let (page, name) = line.split_once('\t').ok_or("a line without a tab")?;
        let page: u64 = page.parse().map_err(|_| "a page number that is not one")?;
        if page >= MAX_PAGES || name.is_empty() || entries.len() >= MAX_LISTED {
            return Err("an entry out of bounds");
        }
        entries.push((name.to_string(), page));
    }
    Ok((page_bytes, entries))
}

fn list_path(rt: &Runtime) -> std::path::PathBuf {
    rt.stats_path().with_file_name(LIST_FILE)
}

/// The list at `path` (beside the data of `datadir`), decoded; None if there
/// is none. Read as the core reads a hot list (waffle_core::side_file): never
/// through a symlink, never a FIFO, another user's or a hard link, at most
/// MAX_FILE_BYTES.
fn read_list(path: &Path, datadir: &Path) -> std::io::Result<Option<Result<(u64, Entries), &'static str>>> {
    let Some(bytes) = side_file::read_beside(path, &beside_data(datadir), MAX_FILE_BYTES)? else { return Ok(None) };
    Ok(Some(String::from_utf8(bytes).map_err(|_| "not text").and_then(|text| decode(&text))))
}

/// Says `why` once in the server's log; returns it (for the stats).
fn warned(why: String) -> String {
    log::warn_once(&why);
    why
}

fn lock() -> std::sync::MutexGuard<'static, Option<State>> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// The stats thread's tick: loads the list once, starts its reload, writes the list when due.
pub fn tick(rt: &'static Runtime) {
    let mut guard = lock();
    let st = guard.get_or_insert_with(|| load(rt));
    if !(rt.config().hot_list != Some(HotListMode::Off)) {
        return;
    }
    if !st.pending.is_empty() && !st.reloading {
        st.reloading = true;
        let spawned = std::thread::Builder::new().name("waffle-hot-list".into()).spawn(move || {
            guard::enter_forever();
            let how = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| reload(rt))) {
                Ok(Ok(())) => Finish::Done,
                Ok(Err(ReloadError::Stopped)) => Finish::Cancelled,
                Ok(Err(e)) => Finish::Failed(e.to_string()),
                Err(_) => Finish::Failed("internal error".into()),
            };
            rt.warming().hot_list_progress().finish(how);
            if let Some(st) = lock().as_mut() {
                st.pending.clear();
                st.reloading = false;
                st.last_write = Instant::now(); // a full interval before L1 is listed again
            }
        });
        if let Err(e) = spawned {
            rt.warming().hot_list_progress().finish(Finish::Failed(format!("cannot start the reload thread: {e}")));
            st.pending.clear();
            st.reloading = false;
        }
        return;
    }
    if !st.reloading && st.last_write.elapsed() >= st.write_every {
        st.last_write = Instant::now();
        let entries = listed(rt, &st.last);
        let path = list_path(rt);
        match write_beside_data(&path, rt.datadir(), encode(rt.page_bytes(), &entries).as_bytes()) {
            Ok(()) => st.last = entries,
            Err(e) => log::warn_once(&format!("cannot write the hot list {}: {e}; not written", path.display())),
        }
    }
}

fn load(rt: &Runtime) -> State {
    let write_every = std::env::var("WAFFLE_HOT_LIST_INTERVAL_MS")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|&ms| (10..=86_400_000).contains(&ms))
        .unwrap_or(DEFAULT_WRITE_EVERY_MS);
    let now = Instant::now();
    let mut st = State {
        write_every: Duration::from_millis(write_every),
        last: Vec::new(),
        pending: HashMap::new(),
        last_write: now,
        started: now,
        reloading: false,
    };
    let progress = rt.warming().hot_list_progress();
    if !(rt.config().hot_list != Some(HotListMode::Off)) {
        progress.off();
        return st;
    }
    let path = list_path(rt);
    let why = match read_list(&path, rt.datadir()) {
        Ok(None) => "no hot list".to_string(),
        Err(e) => warned(format!("cannot use the hot list {}: {e}; starting without it", path.display())),
        Ok(Some(Err(why))) => warned(format!("{} is not a valid hot list: {why}; starting without it", path.display())),
        Ok(Some(Ok((page_bytes, _)))) if page_bytes != rt.page_bytes() => {
            format!("the list's pages are {page_bytes} bytes, the server's {}", rt.page_bytes())
        }
        Ok(Some(Ok((_, entries)))) => {
            for (rank, (name, page)) in entries.iter().enumerate() {
                st.pending.entry(name.clone()).or_default().push((rank as u32, *page));
            }
            progress
                .pages_only(entries.len() as u64, "a server start is cold: page numbers only, from the disk".into());
            st.last = entries;
            return st;
        }
    };
    progress.pages_only(0, why);
    st
}

/// The list to write: the cache's pages hottest first (by tablespace name),
/// then the entries of `before` for tablespaces not open now whose file is still there.
fn listed(rt: &Runtime, before: &[(String, u64)]) -> Vec<(String, u64)> {
    let open = rt.cached_names();
    let (pages, _) = rt.cache().hot_pages(MAX_LISTED);
    let mut out: Vec<(String, u64)> = pages
        .into_iter()
        .filter_map(|p| {
            let (segment, index) = split(p);
            open.get(&(segment as u32)).map(|name| (name.clone(), index as u64))
        })
        .filter(|(name, _)| !name.contains(['\n', '\t']) && name.len() <= 255)
        .collect();
    let open_names: HashSet<&String> = open.values().collect();
    let mut exists: HashMap<&str, bool> = HashMap::new();
    for (name, page) in before {
        if out.len() >= MAX_LISTED {
            break;
        }
        if open_names.contains(name) {
            continue;
        }
        let there = *exists
            .entry(name)
            .or_insert_with(|| rt.datadir().join(format!("{name}.ibd")).is_file() || rt.datadir().join(name).is_file());
        if there {
            out.push((name.clone(), *page));
        }
    }
    out.truncate(MAX_LISTED);
    out
}

/// Why a reload ends before the list's end.
#[derive(Debug, thiserror::Error)]
enum ReloadError {
    /// Waffle was turned off (the reload is cancelled, not failed).
    #[error("stopped")]
    Stopped,
    #[error(transparent)]
    Read(#[from] io::Error),
}

/// The reload thread: each LOOK_EVERY, the listed tablespaces InnoDB has open.
fn reload(rt: &Runtime) -> Result<(), ReloadError> {
    rt.warming().hot_list_progress().begin();
    let started = lock().as_ref().map_or_else(Instant::now, |s| s.started);
    loop {
        if !state::active() {
            return Err(ReloadError::Stopped);
        }
        let names: HashSet<String> = lock().as_ref().map(|s| s.pending.keys().cloned().collect()).unwrap_or_default();
        if names.is_empty() || started.elapsed() >= RELOAD_WINDOW {
            return Ok(());
        }
        let pinned = rt.pin_names(&names);
        if pinned.is_empty() {
            std::thread::sleep(LOOK_EVERY);
            continue;
        }
        let mut wanted: Vec<(u32, u64)> = Vec::new();
        {
            let mut g = lock();
            let pending = &mut g.as_mut().expect("loaded before the thread").pending;
            for p in &pinned {
                for (rank, page) in pending.remove(&p.name).unwrap_or_default() {
                    wanted.push((rank, join(p.segment as u64, page)));
                }
            }
        }
        wanted.sort_unstable();
        let result = reload_pinned(rt, &pinned, &wanted);
        for p in pinned {
            rt.unpin(p);
        }
        if result? {
            return Ok(()); // L1 is full
        }
    }
}

/// Reloads `wanted` (rank, cache page) of the `pinned` files; true when L1 is full.
fn reload_pinned(rt: &Runtime, pinned: &[Pinned], wanted: &[(u32, u64)]) -> Result<bool, ReloadError> {
    let files = rt.lent_files();
    // The files' sizes now; one the server closed since the pin is skipped (closed_file_skips).
    let sized = pinned.iter().filter_map(|p| rt.lend(p.segment).map(|l| (p.segment, l.file_bytes / rt.page_bytes())));
    let pages_of: HashMap<u32, u64> = sized.collect();
    rt.counters().closed_file_skips.add((pinned.len() - pages_of.len()) as u64);
    let pages: Vec<u64> = wanted.iter().map(|&(_, p)| p).collect();
    let in_file = |page: u64| {
        let (segment, index) = split(page);
        pages_of.get(&(segment as u32)).is_some_and(|&n| (index as u64) < n)
    };
    let stop = AtomicBool::new(false);
    let mut at = 0;
    loop {
        if !state::active() {
            return Err(ReloadError::Stopped);
        }
        let mut budget =
            Budget { bytes: u64::MAX, deadline: Instant::now() + PIECE_TIME, cancel: &stop, push_wait: PUSH_WAIT };
        let done = rt.warming().hot_reload(
            rt.cache(),
            &pages,
            &mut at,
            ReloadFrom::DiskOnly,
            &in_file,
            &files,
            &mut budget,
        )?;
        if done {
            // Over before the list's end: L1 is full.
            return Ok(at < pages.len() || rt.cache().l1_free_bytes() < rt.page_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::beside::tests::{datadir, fingerprint};
    use crate::beside::write_beside_data;

    #[test]
    fn a_reloads_error_is_a_stop_or_a_read_with_the_old_text() {
        let e = ReloadError::from(io::Error::from_raw_os_error(libc::EIO));
        assert!(matches!(e, ReloadError::Read(_)));
        assert_eq!(e.to_string(), io::Error::from_raw_os_error(libc::EIO).to_string());
        assert_eq!(ReloadError::Stopped.to_string(), "stopped");
    }

    #[test]
    fn a_symlinked_oversized_garbage_or_foreign_list_is_ignored() {
        let dir = datadir("hot-list-read", Some(0o660));
        let path = dir.join(LIST_FILE);
        assert!(matches!(read_list(&path, &dir), Ok(None)), "none");
        write_beside_data(&path, &dir, encode(16384, &entries()).as_bytes()).unwrap();
        assert_eq!(read_list(&path, &dir).unwrap(), Some(Ok((16384, entries()))));
        assert_eq!(std::fs::metadata(&path).map(|m| std::os::unix::fs::MetadataExt::mode(&m) & 0o777).unwrap(), 0o660);
        // Garbage: not text, or not a list.
        std::fs::write(&path, b"\xff\xfe garbage").unwrap();
        assert_eq!(read_list(&path, &dir).unwrap(), Some(Err("not text")));
        std::fs::write(&path, b"waffle-hot-list 1 page_bytes=16384\n1\tx\ncrc32c=00000000\n").unwrap();
        assert_eq!(read_list(&path, &dir).unwrap(), Some(Err("checksum mismatch")));
        // Longer than any list (sparse): refused before it is read.
        std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(MAX_FILE_BYTES + 1).unwrap();
        let t0 = Instant::now();
        let err = read_list(&path, &dir).unwrap_err();
        assert!(err.to_string().contains("longer") && t0.elapsed() < Duration::from_secs(1), "{err}");
        // A symlink to a valid list elsewhere: never followed.
        std::fs::remove_file(&path).unwrap();
        let elsewhere = dir.join("elsewhere");
        std::fs::write(&elsewhere, encode(16384, &entries())).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &path).unwrap();
        let err = read_list(&path, &dir).unwrap_err();
        assert!(err.to_string().contains("symlink"), "{err}");
        // A hard link (one more name of a file elsewhere): refused.
        std::fs::remove_file(&path).unwrap();
        std::fs::hard_link(&elsewhere, &path).unwrap();
        let err = read_list(&path, &dir).unwrap_err();
        assert!(err.to_string().contains("link"), "{err}");
        std::fs::remove_file(&path).unwrap();
        // SAFETY: geteuid cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("not root: cannot give a file to another user; that case is not run");
            return;
        }
        write_beside_data(&path, &dir, encode(16384, &entries()).as_bytes()).unwrap();
        std::os::unix::fs::lchown(&path, Some(4242), Some(4242)).unwrap();
        let err = read_list(&path, &dir).unwrap_err();
        assert!(err.to_string().contains("another user"), "{err}");
        // The list's writer leaves it alone too, and writes nothing through a symlink.
        let before = fingerprint(&path);
        assert!(write_beside_data(&path, &dir, b"x").is_err());
        assert_eq!(fingerprint(&path), before);
    }

    fn entries() -> Vec<(String, u64)> {
        vec![("shop/orders".into(), 412), ("ibdata1".into(), 3), ("shop/orders".into(), 7)]
    }

    #[test]
    fn a_list_round_trips_and_any_damage_is_refused() {
        let text = encode(16384, &entries());
        assert_eq!(decode(&text), Ok((16384, entries())));
        assert_eq!(decode(&encode(4096, &[])), Ok((4096, Vec::new())));
        let bytes = text.as_bytes();
        for len in 0..bytes.len() - 1 {
            assert!(decode(&String::from_utf8_lossy(&bytes[..len])).is_err(), "cut at {len}");
        }
        for i in 0..bytes.len() - 1 {
            let mut b = bytes.to_vec();
            b[i] ^= 0x01;
            assert!(decode(&String::from_utf8_lossy(&b)).is_err(), "byte {i} flipped");
        }
    }
}
