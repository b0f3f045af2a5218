//! A database's stats file: `waffle_stats_file=PATH` (URI) or
//! `WAFFLE_STATS_FILE` (environment) names a file rewritten every second with
//! the JSON of `PRAGMA waffle_stats` and the fields every stats file has
//! (adapter `sqlite`, pid, `updated_unix_ms`, `final`): what `waffle stats`
//! reads, as it reads the MariaDB preload's.
//!
//! One thread per database that has one, started by the open that creates its
//! cache and stopped (then a last write, `"final": true`) by the close of its
//! last connection; it holds no reference that keeps the database open. Each
//! write goes through waffle_core::stats_file: a temporary file created
//! O_EXCL|O_NOFOLLOW beside PATH with the database file's mode and, as root,
//! its owner, synced and renamed; a symlink or another user's file at PATH is
//! left alone. A write that fails is one warning (again only after one has
//! succeeded), never a refused open: the file is for monitoring.
//!
//! Two databases of one process never share a file: the second is told so and
//! writes none (the environment names one file for every database; give each
//! its own with the URI parameter).

use std::ffi::CStr;
use std::fs::Metadata;
use std::os::raw::c_char;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use waffle_core::side_file::Beside;
use waffle_core::stats_file::{self, INTERVAL_MS, STATS_FILE};

use crate::open_db::OpenDb;

/// The stats file the opener named (URI parameter, else the environment), if any, made absolute.
///
/// # Safety
/// `name` is the (non-null) filename SQLite passed to xOpen for a main database.
pub unsafe fn path_of(name: *const c_char) -> Option<PathBuf> {
    let api = crate::api::installed();
    let key = std::ffi::CString::new(STATS_FILE.name).ok()?;
    // SAFETY: name is xOpen's filename, as sqlite3_uri_parameter wants; key is NUL-terminated.
    let v = unsafe { (api.uri_parameter)(name, key.as_ptr()) };
    let value = if v.is_null() {
        std::env::var(STATS_FILE.env).ok()?
    } else {
        // SAFETY: a non-null value is a NUL-terminated string inside name's URI block.
        unsafe { CStr::from_ptr(v) }.to_string_lossy().into_owned()
    };
    let value = value.trim();
    // A relative name is the working directory's at the open (the thread may write long after a chdir).
    (!value.is_empty()).then(|| std::path::absolute(value).unwrap_or_else(|_| PathBuf::from(value)))
}

/// The stats file the environment names (an ATTACH's: its URI is SQL's, not the opener's).
pub fn env_path() -> Option<PathBuf> {
    let value = std::env::var(STATS_FILE.env).ok()?;
    let value = value.trim();
    (!value.is_empty()).then(|| std::path::absolute(value).unwrap_or_else(|_| PathBuf::from(value)))
}

/// Tells the thread to stop, and wakes it.
#[derive(Default)]
struct Stop {
    stopped: Mutex<bool>,
    wake: Condvar,
}

impl Stop {
    /// Waits `d` unless stopped meanwhile; true if stopped.
    fn wait(&self, d: Duration) -> bool {
        let deadline = Instant::now() + d;
        let mut stopped = self.stopped.lock().unwrap_or_else(|e| e.into_inner());
        while !*stopped {
            let Some(left) = deadline.checked_duration_since(Instant::now()) else { return false };
            stopped = self.wake.wait_timeout(stopped, left).unwrap_or_else(|e| e.into_inner()).0;
        }
        true
    }

    fn stop(&self) {
        *self.stopped.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.wake.notify_all();
    }
}

/// Where and how one database's file is written, shared by its thread and its last close.
struct Target {
    path: PathBuf,
    like: Beside,
    /// A failed write was said, and no write has succeeded since.
    warned: AtomicBool,
    /// When the database's cache started (the first open that named the file).
    started_unix_ms: u64,
}

impl Target {
    fn write(&self, db: &OpenDb, final_write: bool) {
        let written = self.write_quietly(db, final_write);
        self.say(written);
    }

    /// Writes the file; what went wrong is for [`Target::say`] (once no lock is held).
    fn write_quietly(&self, db: &OpenDb, final_write: bool) -> std::io::Result<()> {
        let mut stats = crate::stats_map::stats_snapshot(db);
        stats.stamp = stats_file::stamp("sqlite", final_write); // `stopped` when final
        stats.stamp.state.get_or_insert_with(|| stats_file::RUNNING.to_string());
        stats.stamp.started_unix_ms = Some(self.started_unix_ms);
        stats_file::write(&self.path, &self.like, &stats)
    }

    /// A failed write is one warning, again only after one has succeeded.
    fn say(&self, written: std::io::Result<()>) {
        match written {
            Ok(()) => self.warned.store(false, Ordering::Relaxed),
            Err(e) if !self.warned.swap(true, Ordering::Relaxed) => waffle_core::warn!(
                key: format!("stats file {}", self.path.display()),
                "{} '{}': cannot write it: {e}; it is not updated (the database works on)",
                STATS_FILE.name,
                self.path.display()
            ),
            Err(_) => {}
        }
    }
}

/// A database's writer: its thread, and what it writes.
struct Writer {
    db: Weak<OpenDb>,
    target: Arc<Target>,
    stop: Arc<Stop>,
    thread: JoinHandle<()>,
    /// The process that started the thread (after a fork, the child has no such thread).
    pid: u32,
}

/// Every database of this process that writes a stats file (a few at most: a Vec). Held
/// across a fork ([`hold_for_fork`]), so never across a log line: the host's log callback may
/// wait for the forking thread (Python's GIL).
static WRITERS: Mutex<Vec<Writer>> = Mutex::new(Vec::new());

/// The writers' lock, for waffle_core::fork through the registry (after its maps: an open or
/// a close takes this one last). Its holders are opens and closes, a warm thread's last close
/// among them; none waits on anything but the disk while holding it.
pub fn hold_for_fork() -> Box<dyn std::any::Any> {
    Box::new(WRITERS.lock().unwrap_or_else(|e| e.into_inner()))
}

fn is(w: &Writer, db: &OpenDb) -> bool {
    std::ptr::eq(w.db.as_ptr(), db)
}

/// Starts writing `db`'s stats file at `path` (the database file's `meta`:
/// the mode and owner it gets), unless it already has a writer (a later
/// connection) or another database of this process writes that file.
pub fn start(db: &Arc<OpenDb>, path: Option<PathBuf>, meta: &Metadata) {
    let Some(path) = path else { return };
    // What to say is said once the list's lock is released.
    let say = listed(db, path, meta);
    say();
}

/// Finds or starts `db`'s writer under the list's lock; returns what to say after it.
fn listed(db: &Arc<OpenDb>, path: PathBuf, meta: &Metadata) -> Box<dyn FnOnce()> {
    let mut writers = WRITERS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(w) = writers.iter().find(|w| is(w, db) || w.target.path == path) {
        let (db_path, kept) = (db.path.clone(), w.target.path.clone());
        if !is(w, db) {
            let owner = w.db.upgrade().map_or_else(|| "another database".into(), |o| o.path.display().to_string());
            return Box::new(move || refuse_shared(&path, &db_path, &owner));
        } else if kept != path {
            return Box::new(move || {
                waffle_core::warn!(
                    "{} is already open in this process with {} '{}'; keeping it (not '{}')",
                    db_path.display(),
                    STATS_FILE.name,
                    kept.display(),
                    path.display()
                )
            });
        }
        return Box::new(|| {});
    }
    let started_unix_ms = waffle_core::stats::health::now_unix_ms();
    let target = Arc::new(Target { path, like: Beside::like(meta), warned: AtomicBool::new(false), started_unix_ms });
    let written = target.write_quietly(db, false); // there as soon as the open returns
    let stop = Arc::new(Stop::default());
    let (weak, t, s) = (Arc::downgrade(db), Arc::clone(&target), Arc::clone(&stop));
    match std::thread::Builder::new().name("waffle-stats".into()).spawn(move || run(&weak, &t, &s)) {
        Ok(thread) => {
            let pid = std::process::id();
            writers.push(Writer { db: Arc::downgrade(db), target: Arc::clone(&target), stop, thread, pid });
            Box::new(move || target.say(written))
        }
        Err(e) => Box::new(move || {
            target.say(written);
            waffle_core::warn!("{} '{}': cannot start its thread ({e})", STATS_FILE.name, target.path.display())
        }),
    }
}

fn refuse_shared(path: &Path, db_path: &Path, owner: &str) {
    waffle_core::warn!(
        key: format!("stats file {}", path.display()),
        "{} '{}' is written for {owner}; {} writes none (name one per database with the URI parameter)",
        STATS_FILE.name,
        path.display(),
        db_path.display()
    );
}

/// The thread: a write every [`INTERVAL_MS`] until stopped or the database is gone.
fn run(db: &Weak<OpenDb>, target: &Target, stop: &Stop) {
    while !stop.wait(Duration::from_millis(INTERVAL_MS)) {
        let Some(db) = db.upgrade() else { return };
        // A panic would end the thread and nothing else: the next close still finds it.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| target.write(&db, false)));
    }
}

/// The last connection of `db` is closing: stops its thread (waiting for a
/// write in progress) and writes the file a last time (`"final": true`).
/// Called before the close takes the database back (no reference of the
/// thread's may outlive this).
pub fn stop(db: &OpenDb) {
    let found = {
        let mut writers = WRITERS.lock().unwrap_or_else(|e| e.into_inner());
        writers.iter().position(|w| is(w, db)).map(|i| writers.swap_remove(i))
    };
    let Some(w) = found else { return };
    if w.pid != std::process::id() {
        return; // a forked child: the thread is its parent's, and so is the file
    }
    w.stop.stop();
    let _ = w.thread.join();
    w.target.write(db, true);
}

#[cfg(all(test, feature = "linked"))]
mod tests {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    use std::path::{Path, PathBuf};
    use std::time::{Duration, Instant};

    use rusqlite::{Connection, OpenFlags};
    use serde_json::Value;

    /// The tests count this process's stats threads: one at a time.
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("waffle-sqlite-stats-file-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// A database of 200 rows at `path`, made without waffle, of permission bits `mode`.
    fn make_db(path: &Path, mode: u32) {
        let c = Connection::open(path).unwrap();
        c.execute_batch("CREATE TABLE t(k INTEGER PRIMARY KEY, v BLOB)").unwrap();
        for k in 0..200 {
            c.execute("INSERT INTO t VALUES (?1, zeroblob(1000))", [k]).unwrap();
        }
        drop(c);
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    fn open(db: &Path, stats: &Path) -> Connection {
        crate::register().unwrap();
        let uri = format!("file:{}?vfs=waffle&waffle_stats_file={}", db.display(), stats.display());
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_URI;
        Connection::open_with_flags(uri, flags).unwrap()
    }

    fn read_rows(c: &Connection) {
        let n: i64 = c.query_row("SELECT count(*) FROM t WHERE length(v) = 1000", [], |r| r.get(0)).unwrap();
        assert_eq!(n, 200);
    }

    fn stats(path: &Path) -> Value {
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    /// The stats file once it was written after `after_ms` (within 5 s).
    fn written_after(path: &Path, after_ms: u64) -> Value {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let v = stats(path);
            if v["updated_unix_ms"].as_u64().unwrap() > after_ms {
                return v;
            }
            assert!(Instant::now() < deadline, "not rewritten within 5 s: {v}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Threads of this process named `waffle-stats`.
    fn stats_threads() -> usize {
        let tasks = std::fs::read_dir("/proc/self/task").unwrap();
        tasks
            .filter(|t| {
                let comm = t.as_ref().ok().and_then(|t| std::fs::read_to_string(t.path().join("comm")).ok());
                comm.is_some_and(|c| c.trim() == "waffle-stats")
            })
            .count()
    }

    /// [`stats_threads`] once it is `n` (a new thread names itself after it starts), within 2 s.
    fn stats_threads_reach(n: usize) -> usize {
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            let now = stats_threads();
            if now == n || Instant::now() > deadline {
                return now;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// No `*.tmp` of a stats write is left in `dir`, which is then removed.
    fn assert_no_temporary_file_left(dir: &Path) {
        let left: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| {
                let name = e.unwrap().file_name().to_string_lossy().into_owned();
                name.ends_with(".tmp").then_some(name)
            })
            .collect();
        assert!(left.is_empty(), "no temporary file left: {left:?}");
        std::fs::remove_dir_all(dir).unwrap();
    }

    fn fingerprint(path: &Path) -> (Vec<u8>, u64, i64, i64) {
        let m = std::fs::metadata(path).unwrap();
        (std::fs::read(path).unwrap(), m.ino(), m.mtime(), m.mtime_nsec())
    }

    #[test]
    fn the_stats_file_is_rewritten_every_second_with_the_databases_mode_and_a_last_time_at_the_last_close() {
        let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let dir = temp_dir("every-second");
        let (db, path) = (dir.join("app.db"), dir.join("stats.json"));
        make_db(&db, 0o640);
        if waffle_core::side_file::euid() == 0 {
            std::os::unix::fs::chown(&db, Some(65534), Some(65534)).unwrap();
        }
        let threads = stats_threads();
        let (a, b) = (open(&db, &path), open(&db, &path));
        assert_eq!(stats_threads_reach(threads + 1), threads + 1, "one thread per database, not per connection");
        let first = stats(&path); // written by the open itself
        assert_eq!((first["adapter"].as_str(), first["state"].as_str()), (Some("sqlite"), Some("running")));
        assert_eq!(
            (first["final"].as_bool(), first["pid"].as_u64()),
            (Some(false), Some(u64::from(std::process::id())))
        );
        assert_eq!(first["file"].as_str(), Some(db.to_str().unwrap()));
        read_rows(&a);
        let later = written_after(&path, first["updated_unix_ms"].as_u64().unwrap());
        let reads = |v: &Value| v["l1_hits"].as_u64().unwrap() + v["l1_misses"].as_u64().unwrap();
        assert!(reads(&later) > reads(&first), "the counters move: {} then {}", reads(&first), reads(&later));
        assert!(later["latency"]["l1"]["buckets"].is_array(), "{later}");
        let m = std::fs::symlink_metadata(&path).unwrap();
        assert!(m.file_type().is_file());
        assert_eq!(m.mode() & 0o777, 0o640, "the database's mode");
        assert_eq!((m.uid(), m.gid()), (std::fs::metadata(&db).unwrap().uid(), std::fs::metadata(&db).unwrap().gid()));
        drop(a);
        let still = written_after(&path, later["updated_unix_ms"].as_u64().unwrap());
        assert_eq!(still["final"].as_bool(), Some(false), "a connection is left: the thread goes on");
        drop(b);
        let last = stats(&path);
        assert_eq!((last["final"].as_bool(), last["state"].as_str()), (Some(true), Some("stopped")), "{last}");
        assert_eq!(stats_threads_reach(threads), threads, "the thread ended with the last connection");
        let before = fingerprint(&path);
        std::thread::sleep(Duration::from_millis(1300));
        assert_eq!(fingerprint(&path), before, "nothing writes it after the close");
        assert_no_temporary_file_left(&dir);
    }

    #[test]
    fn a_symlink_at_the_stats_file_is_never_followed_and_the_database_works_on() {
        let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let dir = temp_dir("symlink");
        let (db, path, victim) = (dir.join("app.db"), dir.join("stats.json"), dir.join("victim"));
        make_db(&db, 0o600);
        std::fs::write(&victim, b"the victim's bytes").unwrap();
        let before = fingerprint(&victim);
        std::thread::sleep(Duration::from_millis(20)); // an mtime a write would change
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        let c = open(&db, &path);
        read_rows(&c);
        std::thread::sleep(Duration::from_millis(1200)); // a tick of the thread
        drop(c); // and the last write
        assert_eq!(fingerprint(&victim), before, "the symlink's target is never written");
        assert!(std::fs::symlink_metadata(&path).unwrap().file_type().is_symlink(), "and the symlink left alone");
        assert_no_temporary_file_left(&dir);
    }

    #[test]
    fn two_databases_never_share_a_stats_file() {
        let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let dir = temp_dir("shared");
        let (one, two, path) = (dir.join("one.db"), dir.join("two.db"), dir.join("stats.json"));
        make_db(&one, 0o600);
        make_db(&two, 0o600);
        let threads = stats_threads();
        let a = open(&one, &path);
        let b = open(&two, &path);
        assert_eq!(stats_threads_reach(threads + 2), threads + 1, "the second database writes none");
        let first = stats(&path);
        let later = written_after(&path, first["updated_unix_ms"].as_u64().unwrap());
        assert_eq!(later["file"].as_str(), Some(one.to_str().unwrap()));
        drop(b);
        assert_eq!(stats_threads_reach(threads), threads + 1, "closing the other database stops nothing");
        drop(a);
        assert_eq!(stats_threads_reach(threads), threads);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn pragma_waffle_stats_is_no_table_and_the_stats_file_has_its_figures() {
        let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let dir = temp_dir("pragma-table");
        let (db, path) = (dir.join("app.db"), dir.join("stats.json"));
        make_db(&db, 0o600);
        let c = open(&db, &path);
        let row: String = c.query_row("PRAGMA waffle_stats", [], |r| r.get(0)).unwrap();
        let err = c.query_row("SELECT * FROM pragma_waffle_stats", [], |r| r.get::<_, String>(0)).unwrap_err();
        assert!(err.to_string().contains("no such table: pragma_waffle_stats"), "{err}");
        let (pragma, file): (Value, Value) = (serde_json::from_str(&row).unwrap(), stats(&path));
        for k in ["cache_id", "file", "config"] {
            assert_eq!(pragma[k], file[k], "{k}");
        }
        drop(c);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
