//! The process-wide cache and what it knows about the server's tablespaces.
//!
//! One [`PageCache`] serves every tablespace file, so one L1 budget covers
//! them all. Each open tablespace file (by device and inode) gets a segment:
//! its page `i` is the cache's page `versions::join(segment, i)`. Every
//! descriptor of the file maps to the segment (see `fds`), reference counted;
//! when the last one closes, the segment's pages are dropped from every tier
//! (their versions bumped) and the segment number is free for another file.
//! So a file deleted and another created on the same inode never meet.
//!
//! Started at the first tracked open (no thread or socket before): the cache
//! with a fresh random identity (so no grid copy of an earlier server run is
//! ever asked for), its pusher thread, and a thread that writes the stats
//! file every second.
//!
//! Settings: the `WAFFLE_*` environment over the configuration file
//! `WAFFLE_CONFIG` names (waffle_core::config_file), read once at the start;
//! a refused file keeps the preload off (the server runs without it).
//! The off switch (`waffle-off` beside the stats file) is off_switch.rs.
//!
//! The stats file and the hot list are made as SQLite makes its journals
//! ([`beside_data`], waffle_core::side_file): ibdata1's mode (0660 as
//! mariadbd makes it), as root the datadir's owner, a random temporary name
//! created O_EXCL|O_NOFOLLOW, synced, renamed. A symlink or another user's
//! file at the name, or a directory it cannot write, means that file is not
//! written (one warning in the server's log), never a write elsewhere.

use std::collections::HashMap;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

use serde_json::{json, Map, Value};
use waffle_core::backing::{with_bounce, Backing, PageId, DIRECT_ALIGN};
use waffle_core::config_file::{Check, ConfigFile, Setting};
use waffle_core::grid::Grid;
use waffle_core::side_file::{self, Beside};
use waffle_core::stats::Counter;
use waffle_core::versions::{join, MAX_PAGES, MAX_SEGMENTS};
use waffle_core::warming::Warming;
use waffle_core::{CacheOptions, Config, PageCache, Source};

use crate::filter::Filter;
use crate::innodb::{self, Mismatch};
use crate::off_switch::{OffSwitch, Pass};
use crate::{fds, guard, log, real, state};

/// Page size when neither `WAFFLE_PAGE_SIZE`, the first tablespace nor the command line says.
pub const DEFAULT_PAGE_BYTES: u64 = 16384;
/// How often the stats file is rewritten, unless `WAFFLE_STATS_INTERVAL_MS` says.
pub const DEFAULT_STATS_INTERVAL_MS: u64 = 1000;
/// The stats interval's bounds (`WAFFLE_STATS_INTERVAL_MS`).
const STATS_INTERVAL_MS: std::ops::RangeInclusive<u64> = 10..=3_600_000;
/// Distinct tablespace names with their own counters; later ones share "(other)".
const MAX_NAMES: usize = 10_000;
const NO_SPACE: u64 = u64::MAX;

/// Counters of one tablespace name (kept across its files and segments).
#[derive(Default)]
pub struct NameStats {
    pub cached: AtomicBool,
    /// The segment its file had when last opened (its pages' high bits in the cache).
    pub segment: AtomicU64,
    pub opens: Counter,
    pub l1_hits: Counter,
    pub push_queue_hits: Counter,
    pub l2_hits: Counter,
    pub disk_reads: Counter,
    pub short_reads: Counter,
    pub page_writes: Counter,
    pub invalidations: Counter,
    pub innodb_rejects: Counter,
}

/// What the hot path needs about a segment; one per segment number, reused.
struct SegInfo {
    stats: AtomicPtr<NameStats>,
    /// The tablespace id its pages carry, once a consistent page was seen.
    space_id: AtomicU64,
}

struct Slot {
    refs: u32,
    file: (u64, u64),
    cached: bool,
    /// The tablespace's name (as the stats file and the hot list name it).
    name: String,
    /// The server's readable descriptors of the file: a warm or the hot
    /// list's reload reads through one of them ([`Runtime::lend`]).
    fds: Vec<i32>,
}

/// A cached tablespace file held for a warm or a reload (its segment cannot
/// be reused meanwhile); give it back with [`Runtime::unpin`].
pub struct Pinned {
    pub segment: u32,
    pub name: String,
}

#[derive(Default)]
struct Segments {
    by_file: HashMap<(u64, u64), u32>,
    slots: Vec<Option<Slot>>,
    free: Vec<u32>,
    /// Server descriptors lent for a read right now (once per loan): their close waits.
    lent: Vec<i32>,
}

/// A server descriptor of a tablespace file, lent for one read of a warm or
/// a reload: the server's close of it waits until the loan is dropped.
pub struct Loan<'a> {
    rt: &'a Runtime,
    pub fd: i32,
    /// The file's size when lent.
    pub file_bytes: u64,
    /// A read through a loan fills the cache: not while the switch is off.
    _pass: Pass<'a>,
}

impl Drop for Loan<'_> {
    fn drop(&mut self) {
        let mut segs = self.rt.segs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = segs.lent.iter().position(|&fd| fd == self.fd) {
            segs.lent.swap_remove(i);
        }
        drop(segs);
        self.rt.returned.notify_all();
    }
}

/// The preload's own counters (the cache's are in `PageCache::stats_json`).
#[derive(Default)]
pub struct Counters {
    pub tracked_opens: Counter,
    pub segments_dropped: Counter,
    /// Whole-page reads served through the cache.
    pub page_reads: Counter,
    /// Reads of tracked files that were not one whole aligned page (pass through).
    pub passthrough_reads: Counter,
    /// Reads the cache could not answer (its backing read failed): asked again of the server's fd.
    pub fallback_reads: Counter,
    pub page_writes: Counter,
    /// Pages made invalid by writes of several pages at once (the doublewrite buffer).
    pub multi_page_writes: Counter,
    /// Pages made invalid by writes that were not whole aligned pages, or failed.
    pub partial_writes: Counter,
    /// Of those, pages of writes that failed or wrote less than asked (the server got an error: a fault).
    pub failed_writes: Counter,
    /// write()/writev()/pwritev() on a tablespace: the whole file is dropped from the cache.
    pub unpositioned_writes: Counter,
    pub truncations: Counter,
    pub hole_punches: Counter,
    /// Reads of a warm or a reload skipped: the server had closed every descriptor of the file.
    pub closed_file_skips: Counter,
    /// Grid copies refused by the InnoDB page check, by reason (`innodb::Mismatch`).
    pub innodb_rejects: [Counter; 4],
}

pub struct Runtime {
    pub cache: PageCache,
    /// The warm's and the hot list reload's progress (the layer above the cache).
    pub warming: Warming,
    pub page_bytes: u64,
    pub page_bytes_from: &'static str,
    pub config: Config,
    pub filter: Filter,
    pub counters: Counters,
    pub stats_path: PathBuf,
    /// `WAFFLE_STATS_MODE`; None: ibdata1's mode, as the hot list's.
    stats_mode: Option<u32>,
    pub datadir: PathBuf,
    /// The configuration file read at the start, if `WAFFLE_CONFIG` named one.
    pub config_file: Option<PathBuf>,
    /// `waffle-off` beside the stats file: off, the cache is not used (off_switch.rs).
    pub switch: OffSwitch,
    segs: Mutex<Segments>,
    /// Signalled when a [`Loan`] ends (a close of the lent descriptor waits for it).
    returned: Condvar,
    seg_info: Box<[AtomicPtr<SegInfo>]>,
    names: Mutex<HashMap<String, &'static NameStats>>,
    buffered_warned: AtomicBool,
}

static RUNTIME: OnceLock<Option<Runtime>> = OnceLock::new();

/// The runtime, if it was started.
#[inline]
pub fn get() -> Option<&'static Runtime> {
    RUNTIME.get().and_then(Option::as_ref)
}

/// The preload's own keys a configuration file may carry, beside the core's parameters.
const OWN_SETTINGS: [Setting; 7] = [
    Setting { env: "WAFFLE_TABLES", check: Check::Value(not_blank) },
    Setting { env: "WAFFLE_STATS_FILE", check: Check::Value(not_blank) },
    Setting { env: "WAFFLE_STATS_MODE", check: Check::Value(check_stats_mode) },
    Setting { env: "WAFFLE_STATS_INTERVAL_MS", check: Check::Value(check_stats_interval) },
    Setting { env: "WAFFLE_PAGE_SIZE", check: Check::Value(check_page_size) },
    Setting {
        env: "WAFFLE_PRELOAD_ACTIVE",
        check: Check::EnvironmentOnly(
            "whether a process is the server is decided at its first call, before any file is read",
        ),
    },
    Setting {
        env: "WAFFLE_HOT_LIST_INTERVAL_MS",
        check: Check::EnvironmentOnly("the hot list reads it from the environment only"),
    },
];

fn not_blank(v: &str) -> Result<(), String> {
    if v.trim().is_empty() {
        return Err("empty (leave the line out for the default)".into());
    }
    Ok(())
}

fn check_stats_interval(v: &str) -> Result<(), String> {
    match v.trim().parse::<u64>() {
        Ok(ms) if STATS_INTERVAL_MS.contains(&ms) => Ok(()),
        _ => Err(format!("expected milliseconds from {} to {}", STATS_INTERVAL_MS.start(), STATS_INTERVAL_MS.end())),
    }
}

/// `WAFFLE_STATS_MODE`: the stats file's permission bits instead of ibdata1's
/// (0644: readable by LOAD_FILE(), which reads only files every user may
/// read, and by an exporter outside the server's group).
fn parse_stats_mode(v: &str) -> Result<u32, String> {
    let m = u32::from_str_radix(v.trim(), 8).map_err(|_| "expected octal permission bits such as 0640".to_string())?;
    if m & !0o666 != 0 || m & 0o002 != 0 || m & 0o600 != 0o600 {
        return Err("expected the owner's read and write, no execute, no write for others: \
                    0600, 0640, 0644, 0660 or 0664"
            .into());
    }
    Ok(m)
}

fn check_stats_mode(v: &str) -> Result<(), String> {
    parse_stats_mode(v).map(drop)
}

/// The stats file's mode if `WAFFLE_STATS_MODE` sets one; Err names the setting and the value.
fn stats_mode() -> Result<Option<u32>, String> {
    let named =
        |v: String| parse_stats_mode(&v).map_err(|why| format!("bad value for WAFFLE_STATS_MODE: '{v}': {why}"));
    env("WAFFLE_STATS_MODE").map(named).transpose()
}

fn check_page_size(v: &str) -> Result<(), String> {
    parse_page_size(v).map(drop).ok_or_else(|| "expected 4k, 8k, 16k, 32k or 64k".into())
}

static CONFIG_FILE: OnceLock<Result<Option<ConfigFile>, String>> = OnceLock::new();

/// The configuration file `WAFFLE_CONFIG` names, read and checked once; Err: why it is refused.
fn config_file() -> Result<Option<&'static ConfigFile>, &'static str> {
    let loaded = CONFIG_FILE
        .get_or_init(|| ConfigFile::from_env(|k| std::env::var(k).ok(), &OWN_SETTINGS).map_err(|e| e.to_string()));
    loaded.as_ref().map(Option::as_ref).map_err(String::as_str)
}

/// A setting of the preload's own: the environment's, else the configuration file's (blank: unset).
fn env(name: &str) -> Option<String> {
    let file = || config_file().ok().flatten()?.get(name).map(str::to_string);
    std::env::var(name).ok().or_else(file).filter(|v| !v.trim().is_empty())
}

/// The core's configuration: the environment over the configuration file.
fn core_config() -> Result<(Config, Option<PathBuf>), String> {
    let env = |k: &str| std::env::var(k).ok();
    match config_file()? {
        Some(f) => Ok((f.config(env).map_err(|e| e.to_string())?, Some(f.path().to_path_buf()))),
        None => Ok((Config::from_lookup(|_| None).map_err(|e| e.to_string())?, None)),
    }
}

/// The stats file: `$WAFFLE_STATS_FILE`, else `waffle-stats.json` in the
/// server's working directory (its datadir: mariadbd changes into it first).
pub fn stats_path() -> PathBuf {
    match env("WAFFLE_STATS_FILE") {
        Some(p) => PathBuf::from(p),
        None => std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")).join("waffle-stats.json"),
    }
}

/// The server's command line, as arguments.
fn cmdline() -> Vec<String> {
    std::fs::read("/proc/self/cmdline")
        .map(|b| {
            b.split(|&c| c == 0).filter(|a| !a.is_empty()).map(|a| String::from_utf8_lossy(a).into_owned()).collect()
        })
        .unwrap_or_default()
}

/// The value of `--name=value` on the command line, `-` and `_` alike.
fn option(args: &[String], name: &str) -> Option<String> {
    let want = name.replace('_', "-");
    args.iter().rev().find_map(|a| {
        let (k, v) = a.strip_prefix("--")?.split_once('=')?;
        (k.replace('_', "-") == want).then(|| v.to_string())
    })
}

fn parse_page_size(v: &str) -> Option<u64> {
    let v = v.trim().to_ascii_lowercase();
    let n = match v.strip_suffix('k') {
        Some(k) => k.parse::<u64>().ok()? * 1024,
        None => v.parse().ok()?,
    };
    (n.is_power_of_two() && (4096..=65536).contains(&n)).then_some(n)
}

/// Page 0's first 4 KiB through `fd` (O_DIRECT or not: an aligned buffer).
fn read_head(fd: i32) -> Option<Vec<u8>> {
    let layout = std::alloc::Layout::from_size_align(DIRECT_ALIGN, DIRECT_ALIGN).ok()?;
    // SAFETY: non-zero size; freed below.
    let p = unsafe { std::alloc::alloc_zeroed(layout) };
    if p.is_null() {
        return None;
    }
    // SAFETY: p holds DIRECT_ALIGN bytes.
    let n = unsafe { real::pread64(fd, p as *mut libc::c_void, DIRECT_ALIGN, 0) };
    // SAFETY: the kernel wrote all DIRECT_ALIGN bytes of p (n says so).
    let out = (n == DIRECT_ALIGN as isize).then(|| unsafe { std::slice::from_raw_parts(p, DIRECT_ALIGN) }.to_vec());
    // SAFETY: p was allocated above with this layout and is not used after.
    unsafe { std::alloc::dealloc(p, layout) };
    out
}

fn page_size(first_fd: i32, args: &[String]) -> Result<(u64, &'static str), String> {
    if let Some(v) = env("WAFFLE_PAGE_SIZE") {
        return parse_page_size(&v)
            .map(|n| (n, "WAFFLE_PAGE_SIZE"))
            .ok_or_else(|| format!("bad value for WAFFLE_PAGE_SIZE: '{v}': expected 4k, 8k, 16k, 32k or 64k"));
    }
    if let Some(n) = read_head(first_fd).and_then(|h| innodb::page_bytes_from_page0(&h)) {
        return Ok((n as u64, "the first tablespace's page 0"));
    }
    if let Some(n) = option(args, "innodb-page-size").and_then(|v| parse_page_size(&v)) {
        return Ok((n, "--innodb-page-size"));
    }
    Ok((DEFAULT_PAGE_BYTES, "the default"))
}

/// The grid `config` names (None: L1 only).
fn make_grid(config: &Config) -> Option<Arc<Grid>> {
    if config.grid.is_empty() {
        return None;
    }
    Some(Arc::new(Grid::new(config.grid.clone(), config.grid_options())))
}

/// Starts the runtime at the first tracked open (`first_fd`). None if it could not start (the preload is then off).
pub fn get_or_start(first_fd: i32) -> Option<&'static Runtime> {
    RUNTIME
        .get_or_init(|| match Runtime::start(first_fd) {
            Ok(rt) => Some(rt),
            Err(e) => {
                let msg = format!("cannot start ({e}); the server runs without Waffle");
                log::error(&msg);
                state::disable(msg);
                write_disabled_stats();
                None
            }
        })
        .as_ref()
}

impl Runtime {
    fn start(first_fd: i32) -> Result<Runtime, String> {
        log::install();
        let (config, config_file) = core_config()?;
        let stats_mode = stats_mode()?;
        if let Some(level) = config.log {
            waffle_core::log::set_level(level);
        }
        let args = cmdline();
        let (page_bytes, page_bytes_from) = page_size(first_fd, &args)?;
        let filter = env("WAFFLE_TABLES").map(|s| Filter::parse(&s)).unwrap_or_else(Filter::all);
        let grid = make_grid(&config);
        let cache_id = waffle_core::random_cache_id();
        let cache = PageCache::new(CacheOptions {
            cache_id,
            saved: None,
            page_bytes: page_bytes as usize,
            local_bytes: config.local_bytes,
            push_queue_bytes: config.push_queue_bytes,
            grid,
            seal_key: config.seal_key.clone(),
            codec: config.compress,
            page_check: Some(Box::new(InnodbCheck)),
        });
        let datadir = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
        if config.verify {
            // Every page served from a tier is compared with the server's file (verify.rs in the core).
            cache.enable_verify(format!("the tablespaces in {}", datadir.display()), config.verify_log.clone());
        }
        let stats_path = stats_path();
        let rt = Runtime {
            cache,
            warming: Warming::default(),
            page_bytes,
            page_bytes_from,
            filter,
            counters: Counters::default(),
            switch: OffSwitch::new(&stats_path),
            stats_path,
            stats_mode,
            config_file,
            datadir,
            segs: Mutex::new(Segments::default()),
            returned: Condvar::new(),
            seg_info: (0..MAX_SEGMENTS).map(|_| AtomicPtr::new(std::ptr::null_mut())).collect(),
            names: Mutex::new(HashMap::new()),
            buffered_warned: AtomicBool::new(false),
            config,
        };
        let grid_text = if rt.config.grid.is_empty() {
            "none (L1 only)".to_string()
        } else {
            rt.config.grid.iter().map(node_text).collect::<Vec<_>>().join(",")
        };
        log::note(&format!(
            "caching InnoDB tablespace pages of {}: page {} KiB (from {}), L1 {} MiB, grid {}, tables {}, cache id {:016x} (new every server start), stats in {}, settings from {}, off while {} exists",
            rt.datadir.display(),
            page_bytes / 1024,
            page_bytes_from,
            rt.config.local_bytes >> 20,
            grid_text,
            if rt.filter.is_all() {
                "all".to_string()
            } else if rt.filter.patterns() == ["-"] {
                "none (WAFFLE_TABLES=-)".to_string()
            } else {
                rt.filter.patterns().join(",")
            },
            cache_id,
            rt.stats_path.display(),
            rt.config_file.as_ref().map_or("the environment".into(), |p| format!("the environment and {}", p.display())),
            rt.switch.control_file().display()
        ));
        if let Some(v) = option(&args, "innodb-use-native-aio") {
            if !matches!(v.to_ascii_lowercase().as_str(), "0" | "off" | "false") {
                log::note(
                    "--innodb-use-native-aio is on: if InnoDB sets up io_uring or libaio, Waffle turns itself off",
                );
            }
        }
        // Off from the start if the control file is there: before any read.
        rt.switch.start(&rt.cache);
        start_stats_thread();
        // SAFETY: registering a plain extern "C" function.
        unsafe {
            libc::atexit(at_exit);
        }
        Ok(rt)
    }

    /// The InnoDB check of a grid copy (see [`InnodbCheck`]).
    fn accepts_grid_copy(&self, page: u64, bytes: &[u8]) -> bool {
        let (segment, index) = waffle_core::versions::split(page);
        if self.seg_info.get(segment).is_none_or(|p| p.load(Ordering::Acquire).is_null()) {
            return false; // no such tablespace open: nothing to vouch for it
        }
        let info = self.seg(segment as u32);
        let space = info.space_id.load(Ordering::Acquire);
        let space = (space != NO_SPACE).then_some(space as u32);
        match innodb::check_page(bytes, index as u32, space) {
            Ok(()) => true,
            Err(why) => {
                // Second line of defence: the envelope matched, the InnoDB page does not.
                self.counters.innodb_rejects[why.index()].incr();
                info.stats().innodb_rejects.incr();
                log::rate_limited_error(&format!(
                    "a grid copy of page {index} of segment {segment} is not a consistent InnoDB page ({}); read from disk instead",
                    why.name()
                ));
                false
            }
        }
    }

    fn seg(&self, segment: u32) -> &SegInfo {
        let p = self.seg_info[segment as usize].load(Ordering::Acquire);
        debug_assert!(!p.is_null());
        // SAFETY: SegInfos are leaked, never freed; set before any slot names the segment.
        unsafe { &*p }
    }

    fn name_stats(&self, name: &str) -> &'static NameStats {
        let mut names = self.names.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = names.get(name) {
            return s;
        }
        let key = if names.len() >= MAX_NAMES { "(other)" } else { name };
        names.entry(key.to_string()).or_insert_with(|| Box::leak(Box::default()))
    }

    /// `fd` was just opened on the tablespace at `path`.
    pub fn track_open(&self, fd: i32, path: &str, flags: i32) {
        // SAFETY: fstat into a zeroed struct.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat writes into st, which we own.
        if unsafe { libc::fstat(fd, &mut st) } != 0 || st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return;
        }
        let file = (st.st_dev, st.st_ino);
        // The name from the descriptor's absolute path (a path relative to
        // some dirfd may lack the database directory), else from the path given.
        let full = std::fs::read_link(format!("/proc/self/fd/{fd}")).ok().map(|p| p.to_string_lossy().into_owned());
        let full = full.filter(|f| f.rsplit('/').next() == path.rsplit('/').next());
        let name = match &full {
            Some(f) => innodb::tablespace_name(f),
            None => innodb::tablespace_name(path),
        };
        self.counters.tracked_opens.incr();
        if flags & libc::O_DIRECT == 0
            && flags & libc::O_ACCMODE == libc::O_RDWR
            && !self.buffered_warned.swap(true, Ordering::Relaxed)
        {
            log::note(&format!(
                "{path} is open without O_DIRECT (innodb_flush_method): the kernel's page cache holds its pages too"
            ));
        }
        let mut segs = self.segs.lock().unwrap_or_else(|p| p.into_inner());
        let (segment, cached) = match segs.by_file.get(&file).copied() {
            Some(segment) => {
                let slot = segs.slots[segment as usize].as_mut().expect("a mapped segment has a slot");
                slot.refs += 1;
                slot.fds.extend(readable(fd, flags));
                let cached = slot.cached;
                if cached && flags & libc::O_TRUNC != 0 {
                    self.cache.truncated(join(segment as u64, 0));
                }
                (segment, cached)
            }
            None => {
                let segment = match segs.free.pop() {
                    Some(s) => s,
                    None if (segs.slots.len() as u64) < MAX_SEGMENTS => {
                        segs.slots.push(None);
                        (segs.slots.len() - 1) as u32
                    }
                    None => {
                        drop(segs);
                        self.turn_off(format!("more than {MAX_SEGMENTS} tablespace files open at once"));
                        return;
                    }
                };
                let cached = self.filter.matches(&name);
                let stats = self.name_stats(&name);
                stats.cached.store(cached, Ordering::Relaxed);
                stats.segment.store(segment as u64, Ordering::Relaxed);
                let info = &self.seg_info[segment as usize];
                let p = info.load(Ordering::Acquire);
                let info = if p.is_null() {
                    let fresh: &'static SegInfo = Box::leak(Box::new(SegInfo {
                        stats: AtomicPtr::new(std::ptr::null_mut()),
                        space_id: AtomicU64::new(NO_SPACE),
                    }));
                    info.store(fresh as *const SegInfo as *mut SegInfo, Ordering::Release);
                    fresh
                } else {
                    // SAFETY: leaked, never freed.
                    unsafe { &*p }
                };
                info.stats.store(stats as *const NameStats as *mut NameStats, Ordering::Release);
                info.space_id.store(NO_SPACE, Ordering::Release);
                let fds = readable(fd, flags).into_iter().collect();
                segs.slots[segment as usize] = Some(Slot { refs: 1, file, cached, name: name.clone(), fds });
                segs.by_file.insert(file, segment);
                (segment, cached)
            }
        };
        self.seg(segment).stats().opens.incr();
        if !fds::set(fd, fds::encode(segment, cached)) {
            drop(segs);
            self.turn_off(format!(
                "descriptor {fd} of {path} is beyond the {} descriptors the preload tracks",
                fds::MAX_FD
            ));
        }
    }

    /// Another descriptor `fd` (`dup` of `old`) of the file `slot` names.
    pub fn share(&self, old: i32, fd: i32, slot: u32) {
        let mut segs = self.segs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = segs.slots.get_mut(fds::segment(slot) as usize).and_then(Option::as_mut) {
            s.refs += 1;
            if s.fds.contains(&old) {
                s.fds.push(fd);
            }
        }
        drop(segs);
        if !fds::set(fd, slot) {
            self.turn_off(format!("descriptor {fd} is beyond the {} descriptors the preload tracks", fds::MAX_FD));
        }
    }

    /// Holds every open, cached tablespace file whose name `which` matches
    /// (one reference each, as a descriptor would): a warm reads them.
    pub fn pin_cached(&self, which: &Filter) -> Vec<Pinned> {
        self.pin_where(|name| which.matches(name))
    }

    /// As [`Runtime::pin_cached`], for the tablespaces named in `names` (the hot list's reload).
    pub fn pin_names(&self, names: &std::collections::HashSet<String>) -> Vec<Pinned> {
        self.pin_where(|name| names.contains(name))
    }

    /// The open, cached tablespaces by segment (the hot list names pages by tablespace).
    pub fn cached_names(&self) -> HashMap<u32, String> {
        let segs = self.segs.lock().unwrap_or_else(|p| p.into_inner());
        let named = segs.slots.iter().enumerate();
        named.filter_map(|(i, s)| s.as_ref().filter(|s| s.cached).map(|s| (i as u32, s.name.clone()))).collect()
    }

    fn pin_where(&self, pick: impl Fn(&str) -> bool) -> Vec<Pinned> {
        let mut segs = self.segs.lock().unwrap_or_else(|p| p.into_inner());
        let mut pinned = Vec::new();
        for (segment, slot) in segs.slots.iter_mut().enumerate() {
            if let Some(s) = slot.as_mut().filter(|s| s.cached && pick(&s.name)) {
                s.refs += 1;
                pinned.push(Pinned { segment: segment as u32, name: s.name.clone() });
            }
        }
        pinned
    }

    /// Gives back a reference [`Runtime::pin_cached`] took.
    pub fn unpin(&self, p: Pinned) {
        self.release(fds::encode(p.segment, true));
    }

    /// The server is about to close `fd` (or dup2 over it), a descriptor of
    /// the file `slot` names: it is lent no more, and a loan of it in
    /// progress ends first (one read), so no read goes through a closed or
    /// reused descriptor number.
    pub fn forget(&self, slot: u32, fd: i32) {
        let mut segs = self.segs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = segs.slots.get_mut(fds::segment(slot) as usize).and_then(Option::as_mut) {
            s.fds.retain(|&f| f != fd);
        }
        drop(self.returned.wait_while(segs, |s| s.lent.contains(&fd)).unwrap_or_else(|p| p.into_inner()));
    }

    /// `fd`, forgotten for a dup2 over it that failed, is lendable again.
    pub fn remember(&self, slot: u32, fd: i32) {
        let mut segs = self.segs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = segs.slots.get_mut(fds::segment(slot) as usize).and_then(Option::as_mut) {
            s.fds.push(fd);
        }
    }

    /// One of the server's descriptors of `segment`'s file, lent for one
    /// read: a warm and the hot list's reload read through it, never through
    /// a descriptor of their own (closing that would drop every POSIX lock
    /// the server holds on the file: InnoDB locks ibdata1 so). None: the
    /// server has no descriptor of the file open now.
    pub fn lend(&self, segment: u32) -> Option<Loan<'_>> {
        if state::get() != state::ACTIVE {
            return None; // the close hook no longer waits for loans
        }
        let pass = self.switch.enter()?;
        let mut segs = self.segs.lock().unwrap_or_else(|p| p.into_inner());
        let slot = segs.slots.get(segment as usize)?.as_ref()?;
        let (fd, file) = (*slot.fds.last()?, slot.file);
        segs.lent.push(fd);
        drop(segs);
        let mut loan = Loan { rt: self, fd, file_bytes: 0, _pass: pass };
        // SAFETY: fstat into a zeroed struct we own; the loan keeps fd open.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let ok = unsafe { libc::fstat(fd, &mut st) } == 0 && (st.st_dev, st.st_ino) == file;
        loan.file_bytes = st.st_size.max(0) as u64;
        // Another file: a descriptor number closed and reused behind the hooks' back (close_range).
        ok.then_some(loan)
    }

    /// A descriptor of the file `slot` names was closed.
    pub fn release(&self, slot: u32) {
        let segment = fds::segment(slot);
        let mut segs = self.segs.lock().unwrap_or_else(|p| p.into_inner());
        let Some(s) = segs.slots.get_mut(segment as usize).and_then(Option::as_mut) else {
            return;
        };
        s.refs -= 1;
        if s.refs > 0 {
            return;
        }
        let s = segs.slots[segment as usize].take().expect("checked above");
        segs.by_file.remove(&s.file);
        if s.cached {
            // Every page of the file leaves every tier (versions bumped), so
            // the segment number can serve another file.
            self.cache.truncated(join(segment as u64, 0));
        }
        segs.free.push(segment);
        self.counters.segments_dropped.incr();
    }

    /// Serves a whole-page read of a cached tablespace. None: the caller
    /// reads the file itself (the cache must never fail the server).
    pub fn read_page(&self, slot: u32, fd: i32, offset: u64, buf: &mut [u8]) -> Option<isize> {
        let Some(_pass) = self.switch.enter() else {
            self.switch.reads_passed.incr();
            return None; // switched off: the file
        };
        let segment = fds::segment(slot);
        let index = offset / self.page_bytes;
        if index >= MAX_PAGES {
            return None;
        }
        let page = join(segment as u64, index);
        let info = self.seg(segment);
        let stats = info.stats();
        // The cache reads a miss through the server's own descriptor, named for this call only.
        let file = ServerFd { segment, fd };
        let (n, source) = self.cache.read(page, buf, &file).ok().or_else(|| {
            self.counters.fallback_reads.incr();
            None
        })?;
        self.counters.page_reads.incr();
        if n < buf.len() {
            stats.short_reads.incr();
            return Some(n as isize);
        }
        match source {
            Source::L1 => stats.l1_hits.incr(),
            Source::PushQueue => stats.push_queue_hits.incr(),
            // Checked as an InnoDB page before it reached L1 (InnodbCheck).
            Source::L2 | Source::ReadAhead => stats.l2_hits.incr(),
            Source::Disk => {
                stats.disk_reads.incr();
                self.learn_space(info, buf, index);
            }
        }
        Some(n as isize)
    }

    fn learn_space(&self, info: &SegInfo, page: &[u8], index: u64) {
        if info.space_id.load(Ordering::Relaxed) == NO_SPACE
            && page.iter().any(|&b| b != 0)
            && innodb::check_page(page, index as u32, None).is_ok()
        {
            info.space_id.store(innodb::space_id(page) as u64, Ordering::Release);
        }
    }

    /// The server wrote `requested` bytes of `buf` at `offset`; the write returned `result`.
    pub fn wrote(&self, slot: u32, offset: i64, buf: &[u8], requested: usize, result: isize) {
        let Some(_pass) = self.switch.enter() else {
            // Switched off: the cache is reset before it is used again.
            self.switch.writes_passed.incr();
            return;
        };
        let segment = fds::segment(slot);
        let ps = self.page_bytes;
        let info = self.seg(segment);
        if offset >= 0 && result == requested as isize && requested as u64 == ps && (offset as u64).is_multiple_of(ps) {
            let index = offset as u64 / ps;
            if index < MAX_PAGES {
                self.cache.wrote(join(segment as u64, index), buf);
                self.counters.page_writes.incr();
                info.stats().page_writes.incr();
                self.learn_space(info, buf, index);
                return;
            }
        }
        let n = self.invalidate_range(segment, offset, requested as u64);
        let whole = offset >= 0
            && (offset as u64).is_multiple_of(ps)
            && (requested as u64).is_multiple_of(ps)
            && result == requested as isize;
        if whole {
            // Several pages at once: the doublewrite buffer, read back only by
            // crash recovery, in one large read that passes through.
            self.counters.multi_page_writes.add(n);
        } else {
            self.counters.partial_writes.add(n);
            if result != requested as isize {
                self.counters.failed_writes.add(n);
            }
        }
    }

    /// Drops the pages `[offset, offset + len)` overlaps from every tier. Returns how many.
    pub fn invalidate_range(&self, segment: u32, offset: i64, len: u64) -> u64 {
        if len == 0 {
            return 0;
        }
        let ps = self.page_bytes;
        let first = offset.max(0) as u64 / ps;
        let last = (offset.max(0) as u64).saturating_add(len - 1) / ps;
        let stats = self.seg(segment).stats();
        let mut n = 0;
        for index in first..=last.min(MAX_PAGES - 1) {
            self.cache.invalidate(join(segment as u64, index));
            n += 1;
        }
        stats.invalidations.add(n);
        n
    }

    /// A write at an unknown position (write/writev/pwritev2 at -1): the whole file leaves the cache.
    pub fn invalidate_all(&self, segment: u32) {
        self.counters.unpositioned_writes.incr();
        self.cache.truncated(join(segment as u64, 0));
    }

    pub fn truncated(&self, segment: u32, len: i64) {
        self.counters.truncations.incr();
        let first = len.max(0) as u64 / self.page_bytes;
        if first < MAX_PAGES {
            self.cache.truncated(join(segment as u64, first));
        }
    }

    pub fn fallocated(&self, segment: u32, mode: i32, offset: i64, len: i64) {
        const PUNCH_HOLE: i32 = 0x02;
        const COLLAPSE_RANGE: i32 = 0x08;
        const ZERO_RANGE: i32 = 0x10;
        const INSERT_RANGE: i32 = 0x20;
        if mode & (COLLAPSE_RANGE | INSERT_RANGE) != 0 {
            // Data after offset moved: everything from there is another page now.
            self.truncated(segment, offset);
        } else if mode & (PUNCH_HOLE | ZERO_RANGE) != 0 {
            self.counters.hole_punches.incr();
            self.invalidate_range(segment, offset, len.max(0) as u64);
        }
        // Mode 0 / KEEP_SIZE only allocates: the bytes that exist stay as they are.
    }

    /// Turns the preload off for good (pass-through) and frees L1.
    pub fn turn_off(&self, why: String) {
        if state::disable(why.clone()) {
            log::error(&format!("{why}; Waffle is OFF for this server run: everything passes through"));
            self.cache.reset();
        }
    }

    /// The stats file's contents: the cache's counters (as `PRAGMA waffle_stats`)
    /// and the preload's, with a table per tablespace.
    pub fn stats_json(&self, final_write: bool) -> Value {
        let mut m = self.cache.stats_json();
        self.warming.add_to_stats(&mut m);
        header(&mut m, final_write);
        if self.switch.is_off() && state::get() == state::ACTIVE {
            m.insert("state".into(), json!("off"));
        }
        m.insert("switch".into(), self.switch.json());
        m.insert("config_file".into(), json!(self.config_file.as_ref().map(|p| p.display().to_string())));
        m.insert("page_bytes".into(), json!(self.page_bytes));
        m.insert("page_bytes_from".into(), json!(self.page_bytes_from));
        m.insert("datadir".into(), json!(self.datadir.display().to_string()));
        m.insert("grid".into(), json!(self.config.grid.iter().map(node_text).collect::<Vec<_>>().join(",")));
        m.insert(
            "tables".into(),
            json!(if self.filter.is_all() { vec!["*".to_string()] } else { self.filter.patterns().to_vec() }),
        );
        let c = &self.counters;
        let mut rejects = Map::new();
        for why in Mismatch::ALL {
            rejects.insert(why.name().into(), json!(c.innodb_rejects[why.index()].get()));
        }
        let open = self.segs.lock().map(|s| s.by_file.len()).unwrap_or(0);
        m.insert(
            "preload".into(),
            json!({
                "tracked_opens": c.tracked_opens.get(),
                "tablespaces_open": open,
                "segments_dropped": c.segments_dropped.get(),
                "page_reads": c.page_reads.get(),
                "passthrough_reads": c.passthrough_reads.get(),
                "fallback_reads": c.fallback_reads.get(),
                "page_writes": c.page_writes.get(),
                "multi_page_writes": c.multi_page_writes.get(),
                "partial_writes": c.partial_writes.get(),
                "failed_writes": c.failed_writes.get(),
                "unpositioned_writes": c.unpositioned_writes.get(),
                "truncations": c.truncations.get(),
                "hole_punches": c.hole_punches.get(),
                "closed_file_skips": c.closed_file_skips.get(),
                "innodb_rejects": Value::Object(rejects),
            }),
        );
        let names = self.names.lock().unwrap_or_else(|p| p.into_inner());
        let mut spaces = Map::new();
        let mut sorted: Vec<_> = names.iter().collect();
        sorted.sort_by(|a, b| a.0.cmp(b.0));
        for (name, s) in sorted {
            let (l1, pq, l2, disk) = (s.l1_hits.get(), s.push_queue_hits.get(), s.l2_hits.get(), s.disk_reads.get());
            let reads = l1 + pq + l2 + disk + s.short_reads.get();
            let ratio = |n: u64, d: u64| {
                if d == 0 {
                    Value::Null
                } else {
                    json!((n as f64 / d as f64 * 1e4).round() / 1e4)
                }
            };
            spaces.insert(
                name.clone(),
                json!({
                    "cached": s.cached.load(Ordering::Relaxed),
                    "segment": s.segment.load(Ordering::Relaxed),
                    "opens": s.opens.get(),
                    "reads": reads,
                    "l1_hits": l1,
                    "push_queue_hits": pq,
                    "l2_hits": l2,
                    "disk_reads": disk,
                    "page_writes": s.page_writes.get(),
                    "invalidations": s.invalidations.get(),
                    "innodb_rejects": s.innodb_rejects.get(),
                    "hit_ratio": ratio(l1 + pq + l2, reads),
                    "l2_hit_ratio": ratio(l2, l2 + disk),
                }),
            );
        }
        m.insert("tablespaces".into(), Value::Object(spaces));
        Value::Object(m)
    }
}

impl SegInfo {
    fn stats(&self) -> &'static NameStats {
        // SAFETY: NameStats are leaked; set before the segment is used.
        unsafe { &*self.stats.load(Ordering::Acquire) }
    }
}

fn node_text(n: &waffle_core::grid::NodeSpec) -> String {
    format!("{}:{}", n.host, n.port)
}

fn header(m: &mut Map<String, Value>, final_write: bool) {
    waffle_core::stats_file::stamp(m, "mariadb-preload", final_write);
    m.insert("state".into(), json!(state::name(state::get())));
    if let Some(r) = state::reason() {
        m.insert("disabled_reason".into(), json!(r));
    }
}

/// How the preload makes its files beside the server's data (the stats file
/// and the hot list) and whose an existing one may be, as SQLite makes its
/// journals (waffle_core::side_file): the permission bits of the server's
/// system tablespace `ibdata1` (mariadbd makes its data files 0660: the
/// server's user and group, so a monitoring user reads the stats file as a
/// member of the server's group; without an ibdata1, the datadir's bits
/// without execute) and, when running as root, the datadir's owner and group.
pub(crate) fn beside_data(datadir: &Path) -> Beside {
    let dir = std::fs::metadata(datadir).ok();
    let ibdata = std::fs::symlink_metadata(datadir.join("ibdata1")).ok().filter(|m| m.file_type().is_file());
    let mode = match (&ibdata, &dir) {
        (Some(m), _) => m.mode() & 0o777,
        (None, Some(d)) => d.mode() & 0o666,
        (None, None) => 0o600,
    };
    // SAFETY: getegid cannot fail.
    let (uid, gid) = dir.map_or_else(|| (side_file::euid(), unsafe { libc::getegid() }), |d| (d.uid(), d.gid()));
    Beside { mode, uid, gid }
}

/// Replaces the file `path` beside the server's data with `bytes` (a
/// temporary file of a random name, made O_EXCL|O_NOFOLLOW as
/// [`beside_data`] says, synced, renamed over it): a reader sees the old
/// file or the new one. A symlink or another user's file at `path` is left
/// alone (an error); a leftover temporary file never is written through.
pub(crate) fn write_beside_data(path: &Path, datadir: &Path, bytes: &[u8]) -> io::Result<()> {
    side_file::replace_beside(path, &beside_data(datadir), bytes)
}

/// Writes the stats file now (the stats thread, exit, and when turning off).
pub fn write_stats(final_write: bool) {
    if state::get() == state::FORKED {
        return;
    }
    let _g = guard::Guard::enter();
    let (v, path, datadir, mode) = match get() {
        Some(rt) => (rt.stats_json(final_write), rt.stats_path.clone(), rt.datadir.clone(), rt.stats_mode),
        None => {
            let mut m = Map::new();
            header(&mut m, final_write);
            let datadir = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
            (Value::Object(m), stats_path(), datadir, stats_mode().ok().flatten())
        }
    };
    let mut like = beside_data(&datadir);
    like.mode = mode.unwrap_or(like.mode);
    if let Err(e) = waffle_core::stats_file::write(&path, &like, &v) {
        log::warn_once(&format!("cannot write the stats file {}: {e}; the stats file is not updated", path.display()));
    }
}

/// The stats of a preload that turned off before its cache started.
pub fn write_disabled_stats() {
    write_stats(false);
}

fn start_stats_thread() {
    let interval = env("WAFFLE_STATS_INTERVAL_MS")
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|ms| STATS_INTERVAL_MS.contains(ms))
        .unwrap_or(DEFAULT_STATS_INTERVAL_MS);
    let spawned = std::thread::Builder::new().name("waffle-stats".into()).spawn(move || {
        guard::enter_forever();
        loop {
            std::thread::sleep(Duration::from_millis(interval));
            if state::get() == state::FORKED {
                return;
            }
            // The switch first: the stats written next show where it stands.
            if let Some(rt) = get() {
                let new_grid = || make_grid(&rt.config);
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| rt.switch.poll(&rt.cache, &new_grid)));
            }
            let _ = std::panic::catch_unwind(|| write_stats(false));
            // Off: a warm request waits, and the hot list keeps what it listed while on.
            if let Some(rt) = get().filter(|rt| !rt.switch.is_off()) {
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| crate::warm::poll(rt)));
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| crate::hot_list::tick(rt)));
            }
        }
    });
    if let Err(e) = spawned {
        log::error(&format!("cannot start the stats thread ({e}); no stats file"));
    }
}

extern "C" fn at_exit() {
    let _ = std::panic::catch_unwind(|| write_stats(true));
}

/// The cache's view of the disk for one read: pages of the segment's file,
/// read through the descriptor the server is reading with (no descriptor of
/// our own; O_DIRECT when the server's is). Made for each call and never kept:
/// the server's descriptor is only known valid while its read is in progress
/// (or while it is lent: [`LentFiles`]).
/// Reads go straight into the caller's buffer when it is aligned, else
/// through the thread's aligned bounce buffer (`backing::with_bounce`).
struct ServerFd {
    segment: u32,
    fd: i32,
}

impl Backing for ServerFd {
    fn read_pages(&self, first: PageId, page_bytes: usize, buf: &mut [u8]) -> io::Result<usize> {
        if first.segment != self.segment {
            return Err(io::Error::other(format!(
                "page {} of segment {} asked of segment {}'s descriptor",
                first.index, first.segment, self.segment
            )));
        }
        let file_offset = first.byte_offset(page_bytes);
        let aligned = (buf.as_ptr() as usize).is_multiple_of(DIRECT_ALIGN)
            && buf.len().is_multiple_of(DIRECT_ALIGN)
            && file_offset.is_multiple_of(DIRECT_ALIGN as u64);
        if aligned {
            return pread_full(self.fd, buf, file_offset);
        }
        let span = buf.len().div_ceil(DIRECT_ALIGN) * DIRECT_ALIGN;
        // The thread's bounce buffer, kept between reads (no allocation per read).
        with_bounce(span, |bounce| {
            pread_full(self.fd, bounce, file_offset).map(|n| {
                let n = n.min(buf.len());
                buf[..n].copy_from_slice(&bounce[..n]);
                n
            })
        })
    }

    fn is_direct(&self) -> bool {
        true
    }
}

/// The cache's view of the disk for a warm or the hot list's reload: pages
/// of any segment, each read through a server descriptor of its file lent
/// for that read ([`Runtime::lend`]). A file the server closed meanwhile
/// reads as empty: its pages are skipped.
pub struct LentFiles<'a> {
    pub rt: &'a Runtime,
}

impl Backing for LentFiles<'_> {
    fn read_pages(&self, first: PageId, page_bytes: usize, buf: &mut [u8]) -> io::Result<usize> {
        let Some(loan) = self.rt.lend(first.segment) else {
            self.rt.counters.closed_file_skips.incr();
            return Ok(0);
        };
        ServerFd { segment: first.segment, fd: loan.fd }.read_pages(first, page_bytes, buf)
    }

    fn is_direct(&self) -> bool {
        true
    }
}

/// `fd` if the server's open of it with `flags` can be read through (not write-only).
fn readable(fd: i32, flags: i32) -> Option<i32> {
    (flags & libc::O_ACCMODE != libc::O_WRONLY).then_some(fd)
}

fn pread_full(fd: i32, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        // SAFETY: the range is inside buf.
        let n = unsafe {
            real::pread64(
                fd,
                buf[got..].as_mut_ptr() as *mut libc::c_void,
                buf.len() - got,
                (offset + got as u64) as i64,
            )
        };
        match n {
            0 => break,
            n if n > 0 => got += n as usize,
            _ => {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
        }
        if got % DIRECT_ALIGN != 0 {
            break; // a short read at EOF; O_DIRECT could not continue unaligned anyway
        }
    }
    Ok(got)
}

/// Grid copies are checked as InnoDB pages (page number, space id, checksum,
/// LSN) inside the cache, before they reach L1: a concurrent reader never
/// hits an unchecked copy.
struct InnodbCheck;

impl waffle_core::PageCheck for InnodbCheck {
    fn accepts(&self, page: u64, bytes: &[u8]) -> bool {
        // No runtime yet (it is being built): nothing has been read, refuse.
        get().is_some_and(|rt| rt.accepts_grid_copy(page, bytes))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A fresh directory standing for a datadir, with an `ibdata1` of `mode` (None: no ibdata1).
    pub(crate) fn datadir(name: &str, ibdata_mode: Option<u32>) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("waffle-preload-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        if let Some(mode) = ibdata_mode {
            std::fs::write(dir.join("ibdata1"), b"").unwrap();
            std::fs::set_permissions(dir.join("ibdata1"), std::fs::Permissions::from_mode(mode)).unwrap();
        }
        dir
    }

    /// A file's bytes, inode and mtime: whether anything wrote it.
    pub(crate) fn fingerprint(path: &Path) -> (Vec<u8>, u64, i64, i64) {
        let m = std::fs::metadata(path).unwrap();
        (std::fs::read(path).unwrap(), m.ino(), m.mtime(), m.mtime_nsec())
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> =
            std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        v.sort();
        v
    }

    #[test]
    fn the_stats_file_gets_the_data_files_mode_and_as_root_the_datadirs_owner() {
        let dir = datadir("stats-mode", Some(0o640));
        let path = dir.join("waffle-stats.json");
        write_beside_data(&path, &dir, b"{}\n").unwrap();
        write_beside_data(&path, &dir, b"{\"a\": 1}\n").unwrap();
        let m = std::fs::symlink_metadata(&path).unwrap();
        assert_eq!(m.mode() & 0o777, 0o640, "ibdata1's mode, past the umask");
        assert_eq!(std::fs::read(&path).unwrap(), b"{\"a\": 1}\n");
        assert_eq!(names(&dir), ["ibdata1", "waffle-stats.json"], "no temporary file left");
        // No ibdata1: the datadir's bits without execute.
        let bare = datadir("stats-mode-bare", None);
        std::fs::set_permissions(&bare, std::fs::Permissions::from_mode(0o750)).unwrap();
        write_beside_data(&bare.join("s.json"), &bare, b"{}").unwrap();
        assert_eq!(std::fs::metadata(bare.join("s.json")).unwrap().mode() & 0o777, 0o640);
        if side_file::euid() != 0 {
            eprintln!("not root: the owner case is not run");
            return;
        }
        std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).unwrap();
        write_beside_data(&path, &dir, b"{}").unwrap();
        let m = std::fs::metadata(&path).unwrap();
        assert_eq!((m.uid(), m.gid()), (65534, 65534), "as root: the datadir's owner");
        write_beside_data(&path, &dir, b"{}").unwrap(); // and replaced again
                                                        // A file of a third user at the name is left alone.
        std::os::unix::fs::chown(&path, Some(4242), Some(4242)).unwrap();
        let err = write_beside_data(&path, &dir, b"{}").unwrap_err();
        assert!(err.to_string().contains("another user"), "{err}");
        assert_eq!(std::fs::metadata(&path).unwrap().uid(), 4242);
    }

    #[test]
    fn a_symlink_at_the_stats_file_or_at_a_predictable_temporary_name_is_never_followed() {
        let dir = datadir("stats-symlink", Some(0o660));
        let victim = dir.join("victim");
        std::fs::write(&victim, b"the victim's bytes").unwrap();
        let before = fingerprint(&victim);
        std::thread::sleep(Duration::from_millis(20)); // an mtime a write would change
        let path = dir.join("waffle-stats.json");
        // The names the stats file was once written through: `<path>.tmp<pid>`.
        for tmp in [format!("waffle-stats.json.tmp{}", std::process::id()), "waffle-stats.json.tmp".into()] {
            std::os::unix::fs::symlink(&victim, dir.join(tmp)).unwrap();
        }
        write_beside_data(&path, &dir, b"{}").unwrap();
        assert_eq!(fingerprint(&victim), before, "a temporary name's symlink is never written through");
        assert!(std::fs::symlink_metadata(&path).unwrap().file_type().is_file());
        // A symlink at the stats file itself: left alone, its target unwritten, an error (one warning).
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        let err = write_beside_data(&path, &dir, b"{}").unwrap_err();
        assert!(err.to_string().contains("symlink"), "{err}");
        assert_eq!(fingerprint(&victim), before, "the stats file's symlink is never written through");
        assert!(std::fs::symlink_metadata(&path).unwrap().file_type().is_symlink(), "and left alone");
        let left: Vec<String> = names(&dir).into_iter().filter(|n| n.ends_with(".tmp")).collect();
        assert!(left.len() <= 1, "no temporary file of ours left: {left:?}"); // the planted ".tmp" link
    }

    #[test]
    fn the_preloads_own_settings_are_checked_in_a_configuration_file() {
        let parse = |text: &str| ConfigFile::parse(Path::new("/etc/waffle/waffle.conf"), text, &OWN_SETTINGS);
        let good = "WAFFLE_TABLES = shop/*\nWAFFLE_STATS_FILE = /run/w.json\nWAFFLE_STATS_MODE = 0644\n\
                    WAFFLE_STATS_INTERVAL_MS = 500\nWAFFLE_PAGE_SIZE = 16k\nWAFFLE_LOCAL = 64MiB\n";
        let f = parse(good).unwrap();
        assert_eq!((f.get("WAFFLE_STATS_MODE"), f.get("WAFFLE_LOCAL")), (Some("0644"), Some("64MiB")));
        for (line, why) in [
            ("WAFFLE_STATS_MODE = 0666", "no write for others"),
            ("WAFFLE_STATS_MODE = 0755", "no execute"),
            ("WAFFLE_STATS_MODE = 0440", "the owner's read and write"),
            ("WAFFLE_STATS_MODE = rw-r--r--", "octal"),
            ("WAFFLE_STATS_INTERVAL_MS = 5", "from 10 to 3600000"),
            ("WAFFLE_PAGE_SIZE = 3k", "4k, 8k"),
            ("WAFFLE_TABLES = ", "empty"),
            ("WAFFLE_PRELOAD_ACTIVE = 1", "environment only"),
            ("WAFFLE_HOT_LIST_INTERVAL_MS = 1000", "environment only"),
        ] {
            let e = parse(&format!("# x\n{line}\n")).unwrap_err();
            let (key, _) = line.split_once(" = ").unwrap();
            assert!(e.line == 2 && e.key == key && e.to_string().contains(why), "{line}: {e}");
        }
        assert_eq!(parse_stats_mode("640"), Ok(0o640));
    }

    #[test]
    fn options_and_page_sizes() {
        let args: Vec<String> = ["mariadbd", "--innodb_page_size=8k", "--innodb-use-native-aio=0", "--datadir=/x"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(option(&args, "innodb-page-size").as_deref(), Some("8k"));
        assert_eq!(option(&args, "innodb_use_native_aio").as_deref(), Some("0"));
        assert_eq!(option(&args, "innodb-buffer-pool-size"), None);
        assert_eq!(parse_page_size("8k"), Some(8192));
        assert_eq!(parse_page_size("16384"), Some(16384));
        assert_eq!(parse_page_size("3k"), None);
        assert_eq!(parse_page_size("128k"), None);
    }
}
