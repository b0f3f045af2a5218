//! The process-wide cache and the server's page reads and writes through it.
//!
//! One [`PageCache`] serves every tablespace file, so one L1 budget covers
//! them all; each open file is a segment of it (segments.rs). The hooks call
//! the runtime: an open or a dup maps the descriptor to its file's segment,
//! a whole-page read goes through the cache (a miss reads through the
//! server's own descriptor, server_fd.rs), a write reaches the file first,
//! then the cache; anything else drops the pages it touches.
//!
//! Started at the first tracked open (no thread or socket before): the cache
//! with a fresh random identity (so no grid copy of an earlier server run is
//! ever asked for), its pusher thread, and the InnoDB check of grid copies
//! (innodb_check.rs). Settings are read once at the start (settings.rs); a
//! refused configuration file keeps the preload off (the server runs without
//! it). The off switch (`waffle-off` beside the stats file) is off_switch.rs.
//!
//! One-way: the runtime uses the segment table, the backings, the settings
//! and the check; it never calls the warm, the hot list, the stats file or
//! the ticker (ticker.rs drives those, above it).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use waffle_core::stats::Counter;
use waffle_core::versions::{join, MAX_PAGES, MAX_SEGMENTS};
use waffle_core::warming::Warming;
use waffle_core::{CacheOptions, Config, PageCache, Source};

use crate::filter::Filter;
use crate::innodb;
use crate::innodb_check::{InnodbCheck, Rejects};
use crate::off_switch::OffSwitch;
use crate::segments::{Loan, Opened, Pinned, SegInfo, Segments, NO_SPACE};
use crate::server_fd::{LentFiles, ServerFd};
use crate::settings::{self, make_grid};
use crate::{fds, log, state};

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
    pub innodb_rejects: Arc<Rejects>,
}

pub struct Runtime {
    cache: PageCache,
    /// The warm's and the hot list reload's progress (the layer above the cache).
    warming: Warming,
    page_bytes: u64,
    page_bytes_from: &'static str,
    config: Config,
    filter: Filter,
    counters: Counters,
    stats_path: PathBuf,
    /// `WAFFLE_STATS_MODE`; None: ibdata1's mode, as the hot list's.
    stats_mode: Option<u32>,
    datadir: PathBuf,
    /// The configuration file read at the start, if `WAFFLE_CONFIG` named one.
    config_file: Option<PathBuf>,
    /// `waffle-off` beside the stats file: off, the cache is not used (off_switch.rs).
    switch: OffSwitch,
    segs: Segments,
    buffered_warned: AtomicBool,
}

static RUNTIME: OnceLock<Option<Runtime>> = OnceLock::new();

/// The runtime, if it was started.
#[inline]
pub fn get() -> Option<&'static Runtime> {
    RUNTIME.get().and_then(Option::as_ref)
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
                None
            }
        })
        .as_ref()
}

impl Runtime {
    fn start(first_fd: i32) -> Result<Runtime, settings::SettingsError> {
        log::install();
        let (config, config_file) = settings::core_config()?;
        let stats_mode = settings::stats_mode()?;
        if let Some(level) = config.log {
            waffle_core::log::set_level(level);
        }
        let args = settings::cmdline();
        let (page_bytes, page_bytes_from) = settings::page_size(first_fd, &args)?;
        let filter = settings::env("WAFFLE_TABLES").map(|s| Filter::parse(&s)).unwrap_or_else(Filter::all);
        let grid = make_grid(&config);
        let cache_id = waffle_core::random_cache_id();
        let (segs, counters) = (Segments::default(), Counters::default());
        let cache = PageCache::new(CacheOptions {
            cache_id,
            saved: None,
            page_bytes: page_bytes as usize,
            local_bytes: config.local_bytes,
            push_queue_bytes: config.push_queue_bytes,
            grid,
            seal_key: config.seal_key.clone(),
            codec: config.compress,
            page_check: Some(Box::new(InnodbCheck::new(segs.infos(), Arc::clone(&counters.innodb_rejects)))),
        });
        let datadir = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
        if config.verify {
            // Every page served from a tier is compared with the server's file (verify.rs in the core).
            cache.enable_verify(format!("the tablespaces in {}", datadir.display()), config.verify_log.clone());
        }
        let stats_path = settings::stats_path();
        let rt = Runtime {
            cache,
            warming: Warming::default(),
            page_bytes,
            page_bytes_from,
            filter,
            counters,
            switch: OffSwitch::new(&stats_path),
            stats_path,
            stats_mode,
            config_file,
            datadir,
            segs,
            buffered_warned: AtomicBool::new(false),
            config,
        };
        let grid_text = if rt.config.grid.is_empty() {
            "none (L1 only)".to_string()
        } else {
            rt.config.grid.iter().map(settings::node_text).collect::<Vec<_>>().join(",")
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
        if let Some(v) = settings::option(&args, "innodb-use-native-aio") {
            if !matches!(v.to_ascii_lowercase().as_str(), "0" | "off" | "false") {
                log::note(
                    "--innodb-use-native-aio is on: if InnoDB sets up io_uring or libaio, Waffle turns itself off",
                );
            }
        }
        // Off from the start if the control file is there: before any read.
        rt.switch.start(&rt.cache);
        Ok(rt)
    }

    pub fn cache(&self) -> &PageCache {
        &self.cache
    }

    /// The warm's and the hot list reload's progress.
    pub fn warming(&self) -> &Warming {
        &self.warming
    }

    pub fn page_bytes(&self) -> u64 {
        self.page_bytes
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Which tablespaces are cached (`WAFFLE_TABLES`).
    pub fn filter(&self) -> &Filter {
        &self.filter
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The stats file; the off switch, the warm request and the hot list sit beside it.
    pub fn stats_path(&self) -> &Path {
        &self.stats_path
    }

    pub fn datadir(&self) -> &Path {
        &self.datadir
    }

    pub fn switch(&self) -> &OffSwitch {
        &self.switch
    }

    /// What the page size was learnt from.
    pub fn page_bytes_from(&self) -> &'static str {
        self.page_bytes_from
    }

    /// `WAFFLE_STATS_MODE`; None: ibdata1's mode.
    pub fn stats_mode(&self) -> Option<u32> {
        self.stats_mode
    }

    /// The configuration file read at the start, if `WAFFLE_CONFIG` named one.
    pub fn config_file(&self) -> Option<&Path> {
        self.config_file.as_deref()
    }

    /// The segment table (the stats file reads its counters).
    pub fn segments(&self) -> &Segments {
        &self.segs
    }

    fn seg(&self, segment: u32) -> &SegInfo {
        self.segs.seg(segment)
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
        let opened = self.segs.open(&self.cache, fd, flags, file, &name, |name| self.filter.matches(name));
        let Opened::Segment { segment, cached } = opened else {
            self.turn_off(format!("more than {MAX_SEGMENTS} tablespace files open at once"));
            return;
        };
        self.seg(segment).stats().opens.incr();
        if !fds::set(fd, fds::encode(segment, cached)) {
            self.turn_off(format!(
                "descriptor {fd} of {path} is beyond the {} descriptors the preload tracks",
                fds::MAX_FD
            ));
        }
    }

    /// Another descriptor `fd` (`dup` of `old`) of the file `slot` names.
    pub fn share(&self, old: i32, fd: i32, slot: u32) {
        self.segs.share(old, fd, slot);
        if !fds::set(fd, slot) {
            self.turn_off(format!("descriptor {fd} is beyond the {} descriptors the preload tracks", fds::MAX_FD));
        }
    }

    /// Holds every open, cached tablespace file whose name `which` matches: a warm reads them.
    pub fn pin_cached(&self, which: &Filter) -> Vec<Pinned> {
        self.segs.pin_cached(which)
    }

    /// As [`Runtime::pin_cached`], for the tablespaces named in `names` (the hot list's reload).
    pub fn pin_names(&self, names: &HashSet<String>) -> Vec<Pinned> {
        self.segs.pin_names(names)
    }

    /// The open, cached tablespaces by segment (the hot list names pages by tablespace).
    pub fn cached_names(&self) -> HashMap<u32, String> {
        self.segs.cached_names()
    }

    /// Gives back a reference [`Runtime::pin_cached`] took.
    pub fn unpin(&self, p: Pinned) {
        self.release(fds::encode(p.segment, true));
    }

    /// The server is about to close `fd` (or dup2 over it): see [`Segments::forget`].
    pub fn forget(&self, slot: u32, fd: i32) {
        self.segs.forget(slot, fd);
    }

    /// `fd`, forgotten for a dup2 over it that failed, is lendable again.
    pub fn remember(&self, slot: u32, fd: i32) {
        self.segs.remember(slot, fd);
    }

    /// One of the server's descriptors of `segment`'s file, lent for one read ([`Segments::lend`]).
    pub fn lend(&self, segment: u32) -> Option<Loan<'_>> {
        self.segs.lend(segment, &self.switch)
    }

    /// The cache's view of the disk for a warm or a reload: the server's descriptors, lent.
    pub fn lent_files(&self) -> LentFiles<'_> {
        LentFiles { segs: &self.segs, switch: &self.switch, closed_file_skips: &self.counters.closed_file_skips }
    }

    /// A descriptor of the file `slot` names was closed.
    pub fn release(&self, slot: u32) {
        if self.segs.release(&self.cache, slot) {
            self.counters.segments_dropped.incr();
        }
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
            // Checked as an InnoDB page before it reached L1 (innodb_check.rs).
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
}
