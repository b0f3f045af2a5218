//! The runtime off switch: a file, `waffle-off` beside the stats file
//! (`/var/lib/mysql/waffle-off` by default). Present: Waffle is off; removed:
//! on again, cold. The stats thread looks at every tick (each second). A file
//! rather than a signal: mariadbd owns its signals, and a file survives the
//! restart (a server started while it exists starts off).
//!
//! Off, the hooks still follow every open, close and dup (so it can come back
//! on), but a tablespace page read goes to the file and a write goes to the
//! file only: neither touches L1 or the grid. Turning off drops L1, the push
//! queue and the grid client (its connections and prober thread end: no
//! request reaches a node while off); turning on makes a new grid client and
//! starts cold: every page gets a version no copy made before has
//! (`PageCache::reset`), so nothing cached before the switch is served, and
//! the grid's old copies are never asked for.
//!
//! Why that is enough: writes made while off do not reach the cache, so a copy
//! from before them must not survive into the next on. Every read or write
//! that uses the cache holds a [`Pass`], taken when the switch is on; turning
//! off waits until no pass is held, then drops everything. From then until
//! the switch is on again no pass is given, so nothing enters the cache; the
//! reset at turn-on happens before the first new pass. A warm or reload reads
//! through a lent descriptor whose loan holds a pass; its install afterwards
//! is checked against the version it captured before the read, which the
//! reset at turn-off or turn-on moved.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use waffle_core::grid::Grid;
use waffle_core::stats::{Counter, SwitchSnapshot};
use waffle_core::PageCache;

use crate::log;

/// The control file's name, beside the stats file.
pub const CONTROL_FILE: &str = "waffle-off";
/// A turn-off waiting longer than this for reads in flight says so (once).
const SLOW_DRAIN: Duration = Duration::from_secs(10);

pub struct OffSwitch {
    control: PathBuf,
    off: AtomicBool,
    /// Reads and writes inside the cache (each holds a [`Pass`]).
    inside: AtomicU64,
    /// When it last changed (unix ms; 0: never).
    since_ms: AtomicU64,
    turned_off: Counter,
    turned_on: Counter,
    /// Page reads and writes that went to the file only while off.
    pub reads_passed: Counter,
    pub writes_passed: Counter,
}

/// Leave to use the cache, held for one read or write (see the module docs).
pub struct Pass<'a>(&'a OffSwitch);

impl Drop for Pass<'_> {
    fn drop(&mut self) {
        self.0.inside.fetch_sub(1, Ordering::SeqCst);
    }
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

impl OffSwitch {
    /// The switch of a server whose stats file is `stats_path`, on.
    pub fn new(stats_path: &Path) -> OffSwitch {
        OffSwitch {
            control: stats_path.with_file_name(CONTROL_FILE),
            off: AtomicBool::new(false),
            inside: AtomicU64::new(0),
            since_ms: AtomicU64::new(0),
            turned_off: Counter::default(),
            turned_on: Counter::default(),
            reads_passed: Counter::default(),
            writes_passed: Counter::default(),
        }
    }

    pub fn control_file(&self) -> &Path {
        &self.control
    }

    pub fn is_off(&self) -> bool {
        self.off.load(Ordering::SeqCst)
    }

    /// A pass to use the cache for one read or write; None while off.
    #[inline]
    pub fn enter(&self) -> Option<Pass<'_>> {
        // Counted before the look: a turn-off that stored `off` after this
        // either sees the count and waits, or this sees `off`.
        self.inside.fetch_add(1, Ordering::SeqCst);
        let pass = Pass(self);
        (!self.off.load(Ordering::SeqCst)).then_some(pass)
    }

    /// Whether the control file is there (any kind of entry: nothing is read from it).
    fn asked_off(&self) -> bool {
        std::fs::symlink_metadata(&self.control).is_ok()
    }

    /// At the start: off at once if the control file is there (before any read).
    pub fn start(&self, cache: &PageCache) {
        if self.asked_off() {
            self.turn_off(cache, "from the start");
        }
    }

    /// The stats thread's tick: follows the control file; `new_grid` makes the grid client when turning on.
    pub fn poll(&self, cache: &PageCache, new_grid: &dyn Fn() -> Option<Arc<Grid>>) {
        match (self.asked_off(), self.is_off()) {
            (true, false) => self.turn_off(cache, "now"),
            (false, true) => self.turn_on(cache, new_grid()),
            _ => {}
        }
    }

    fn turn_off(&self, cache: &PageCache, when: &str) {
        self.off.store(true, Ordering::SeqCst);
        self.drain();
        // Dropped with its last holder (the pusher may finish a send first).
        cache.set_grid(None);
        cache.reset();
        self.turned_off.incr();
        self.since_ms.store(now_ms(), Ordering::Relaxed);
        say(&format!(
            "OFF {when} ({} exists): tablespace pages are read from and written to the files only; \
             L1 and the push queue dropped, the grid unused. Remove the file to turn Waffle on again (cold)",
            self.control.display()
        ));
    }

    fn turn_on(&self, cache: &PageCache, grid: Option<Arc<Grid>>) {
        // Cold: no copy made before the switch matches a version from now on.
        cache.reset();
        cache.set_grid(grid);
        self.off.store(false, Ordering::SeqCst);
        self.turned_on.incr();
        self.since_ms.store(now_ms(), Ordering::Relaxed);
        say(&format!(
            "ON again ({} removed): caching from a cold start; nothing cached before the switch is served",
            self.control.display()
        ));
    }

    /// Waits until no read or write that saw the switch on is inside the cache.
    fn drain(&self) {
        let t0 = Instant::now();
        let mut said = false;
        while self.inside.load(Ordering::SeqCst) != 0 {
            if !said && t0.elapsed() > SLOW_DRAIN {
                said = true;
                log::warn_once("turning off waits for a tablespace read or write in flight for over 10 s");
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// The stats file's `"switch"`.
    pub fn snapshot(&self) -> SwitchSnapshot {
        SwitchSnapshot {
            state: if self.is_off() { "off" } else { "on" }.to_string(),
            control_file: self.control.display().to_string(),
            since_unix_ms: self.since_ms.load(Ordering::Relaxed),
            turned_off: self.turned_off.get(),
            turned_on: self.turned_on.get(),
            reads_passed: self.reads_passed.get(),
            writes_passed: self.writes_passed.get(),
        }
    }
}

/// One line in the server's error log, at the default level: the operator asked, and should see it happen.
fn say(msg: &str) {
    log::install();
    waffle_core::warn!(key: msg, "{msg}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use waffle_core::backing::MemoryFile;
    use waffle_core::{CacheOptions, Source};

    const PS: usize = 4096;

    fn cache() -> PageCache {
        PageCache::new(CacheOptions {
            cache_id: 7,
            saved: None,
            page_bytes: PS,
            local_bytes: 64 * PS as u64,
            push_queue_bytes: 0,
            grid: None,
            seal_key: None,
            page_check: None,
            codec: waffle_core::codec::Codec::Off,
        })
    }

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("waffle-off-switch-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn off_nothing_enters_the_cache_and_on_again_nothing_from_before_is_served() {
        let d = dir("cycle");
        let sw = OffSwitch::new(&d.join("waffle-stats.json"));
        assert_eq!(sw.control_file(), d.join(CONTROL_FILE));
        let c = cache();
        let disk = MemoryFile(Arc::new(Mutex::new(vec![1u8; 4 * PS])));
        let mut buf = vec![0u8; PS];
        // On: page 2 is written through the cache and served from L1.
        {
            let _pass = sw.enter().expect("on");
            disk.0.lock().unwrap()[2 * PS..3 * PS].fill(2);
            c.wrote(2, &[2u8; PS]);
        }
        assert_eq!(c.read(2, &mut buf, &disk).unwrap().1, Source::L1);
        sw.poll(&c, &|| None);
        assert!(!sw.is_off(), "no control file: still on");
        std::fs::write(d.join(CONTROL_FILE), b"").unwrap();
        sw.poll(&c, &|| None);
        assert!(sw.is_off() && sw.enter().is_none(), "off: no pass");
        assert_eq!(c.l1_free_bytes(), 64 * PS as u64, "L1 dropped");
        // Off: the server writes the file only (the hooks give no pass).
        disk.0.lock().unwrap()[2 * PS..3 * PS].fill(3);
        std::fs::remove_file(d.join(CONTROL_FILE)).unwrap();
        sw.poll(&c, &|| None);
        let _pass = sw.enter().expect("on again");
        assert_eq!(c.read(2, &mut buf, &disk).unwrap(), (PS, Source::Disk), "cold: from the file");
        assert_eq!(buf, vec![3u8; PS], "the write made while off");
        let j = sw.snapshot();
        assert_eq!((j.state.as_str(), j.turned_off, j.turned_on), ("on", 1, 1));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn turning_off_waits_for_the_reads_and_writes_inside_the_cache() {
        let d = dir("drain");
        let sw = Arc::new(OffSwitch::new(&d.join("waffle-stats.json")));
        let c = Arc::new(cache());
        std::fs::write(d.join(CONTROL_FILE), b"").unwrap();
        let pass = sw.enter().expect("on");
        let (sw2, c2) = (Arc::clone(&sw), Arc::clone(&c));
        let t = std::thread::spawn(move || sw2.poll(&c2, &|| None));
        std::thread::sleep(Duration::from_millis(100));
        assert!(!t.is_finished(), "a write inside the cache holds the turn-off");
        assert!(sw.is_off() && sw.enter().is_none(), "but no new pass is given meanwhile");
        // The write lands in L1 while the turn-off waits...
        c.wrote(5, &[5u8; PS]);
        drop(pass);
        t.join().unwrap();
        // ...and is dropped with the rest.
        assert_eq!(c.l1_free_bytes(), 64 * PS as u64);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_server_started_with_the_control_file_starts_off() {
        let d = dir("start");
        std::os::unix::fs::symlink("/nonexistent", d.join(CONTROL_FILE)).unwrap();
        let sw = OffSwitch::new(&d.join("stats.json"));
        sw.start(&cache());
        assert!(sw.is_off(), "any entry at the name, even a dangling symlink (nothing is read from it)");
        let _ = std::fs::remove_dir_all(&d);
    }
}
