//! Target `open_uri`: real `sqlite3_open_v2` through the linked `waffle` VFS, then ATTACHes, with
//! URIs built from the input (issue 31 item 4): parameter names from Waffle's `waffle_*` set and
//! SQLite's own (mode, immutable, cache, vfs, nolock, psow), values naming files inside and
//! outside a scratch directory (the databases, a FIFO, /dev/zero, symlinks, a file not
//! Waffle's) or raw bytes.
//!
//! After each input (every connection closed): nothing outside the scratch directory changed
//! (the listing of its parent, a sentinel file beside it, a directory beside it), the databases
//! and the file that is not Waffle's hold their bytes, the FIFO is still one, and the input took
//! less than `INPUT_BOUND` (libFuzzer's -timeout catches a call that never returns). Files the
//! input made inside the scratch directory (raw file names are put there) are removed, so inputs do not depend on each other; none of them is a stats file unless the
//! main open's URI named one (an ATTACH's `waffle_stats_file` is ignored).
//!
//! Not in `src/lib.rs`: that file is replayed on stable by waffle-core, which links no SQLite.

#![no_main]

use std::ffi::CString;
use std::os::raw::c_int;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use libsqlite3_sys as ffi;

/// One input (an open, up to three ATTACHes, their reads, the close) may take this long.
const INPUT_BOUND: Duration = Duration::from_secs(8);
const NOT_OURS: &[u8] = br#"{"name":"not waffle's"}"#;
const SENTINEL: &[u8] = b"outside the scratch directory: never changed\n";

struct World {
    base: PathBuf,
    scratch: PathBuf,
    /// Files of the scratch directory at the start, and the bytes of those that must stay.
    initial: Vec<String>,
    kept: Vec<(PathBuf, Vec<u8>)>,
    base_listing: Vec<String>,
    outside_listing: Vec<String>,
}

fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("list {}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn make_db(path: &Path, rows: usize) {
    let c = CString::new(path.to_str().unwrap()).unwrap();
    let mut db = std::ptr::null_mut();
    // SAFETY: a NUL-terminated path and an out-pointer; the handle is closed below.
    unsafe {
        assert_eq!(ffi::sqlite3_open(c.as_ptr(), &mut db), ffi::SQLITE_OK);
        let mut sql = String::from("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT);BEGIN;");
        for i in 0..rows {
            sql.push_str(&format!("INSERT INTO t VALUES({i}, printf('%.300c', 'x'));"));
        }
        sql.push_str("COMMIT;");
        let s = CString::new(sql).unwrap();
        assert_eq!(ffi::sqlite3_exec(db, s.as_ptr(), None, std::ptr::null_mut(), std::ptr::null_mut()), 0);
        ffi::sqlite3_close(db);
    }
}

fn world() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| {
        waffle::register().expect("register the waffle VFS");
        let base = std::env::temp_dir().join(format!("waffle-fuzz-open-uri-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let (scratch, outside) = (base.join("scratch"), base.join("outside"));
        std::fs::create_dir_all(&scratch).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(base.join("sentinel"), SENTINEL).unwrap();
        std::fs::write(outside.join("kept.txt"), SENTINEL).unwrap();
        make_db(&scratch.join("main.db"), 60);
        make_db(&scratch.join("other.db"), 20);
        std::fs::write(scratch.join("notes.json"), NOT_OURS).unwrap();
        std::fs::write(scratch.join("key.bin"), "5a".repeat(32)).unwrap();
        let fifo = CString::new(scratch.join("key.fifo").to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        std::os::unix::fs::symlink(scratch.join("main.db"), scratch.join("link-main.db")).unwrap();
        std::os::unix::fs::symlink(base.join("sentinel"), scratch.join("link-out")).unwrap();
        let kept = ["main.db", "other.db", "notes.json", "key.bin"]
            .iter()
            .map(|n| (scratch.join(n), std::fs::read(scratch.join(n)).unwrap()))
            .chain([(base.join("sentinel"), SENTINEL.to_vec()), (outside.join("kept.txt"), SENTINEL.to_vec())])
            .collect();
        World {
            initial: listing(&scratch),
            base_listing: listing(&base),
            outside_listing: listing(&outside),
            base,
            scratch,
            kept,
        }
    })
}

/// Reads choices from the input; past its end every choice is 0.
struct Choices<'a>(&'a [u8]);

impl Choices<'_> {
    fn byte(&mut self) -> u8 {
        let (b, rest) = self.0.split_first().map(|(b, r)| (*b, r)).unwrap_or((0, &[]));
        self.0 = rest;
        b
    }
    fn pick<'b>(&mut self, items: &[&'b str]) -> &'b str {
        items[self.byte() as usize % items.len()]
    }
    /// Up to 12 raw bytes, percent-encoded (so any byte reaches SQLite's URI decoding), `/`
    /// made `_` (a raw file name stays directly inside the scratch dir).
    fn raw(&mut self) -> String {
        let n = self.byte() % 13;
        (0..n).map(|_| format!("%{:02X}", self.byte())).collect::<String>().replace("%2F", "_")
    }
}

const NAMES: [&str; 19] = [
    "waffle_grid",
    "waffle_local",
    "waffle_timeout_ms",
    "waffle_push_queue",
    "waffle_direct_io",
    "waffle_key_file",
    "waffle_grid_change",
    "waffle_grid_backoff",
    "waffle_compress",
    "waffle_hot_list",
    "waffle_verify",
    "waffle_stats_file",
    "mode",
    "immutable",
    "cache",
    "vfs",
    "nolock",
    "psow",
    "waffle_log",
];

/// A value for parameter `name`; `attach`: the URI is SQL's (a file outside the scratch dir may
/// be named: the parameter must be ignored), else the opener's (files inside it, and the
/// sentinel beside it, which a stats file must not replace: it has no marker).
fn value(c: &mut Choices, w: &World, name: &str, attach: bool) -> String {
    let s = |p: &str| w.scratch.join(p).to_str().unwrap().to_string();
    let b = |p: &str| w.base.join(p).to_str().unwrap().to_string();
    let is_path = matches!(name, "waffle_key_file" | "waffle_stats_file");
    match c.byte() % 4 {
        // A file name of raw bytes inside the scratch dir (libFuzzer's own relative paths need
        // the working directory left alone).
        0 if is_path => return format!("{}/{}", s(""), c.raw()).replace("//", "/"),
        0 => return c.raw(),
        1 => return String::new(),
        _ => {}
    }
    let files = |c: &mut Choices| {
        let mut v = vec![s("main.db"), s("other.db"), s("key.fifo"), s("key.bin"), s("notes.json"), s("link-main.db")];
        v.extend([s("link-out"), s("stats.json"), s("new-dir/x.json"), b("sentinel"), "/dev/zero".into()]);
        if attach {
            v.extend([b("outside/new-stats.json"), b("new-stats.json"), b("outside/kept.txt")]);
        }
        let i = c.byte() as usize % v.len();
        v.swap_remove(i)
    };
    match name {
        "waffle_key_file" | "waffle_stats_file" => files(c),
        "waffle_grid" => {
            c.pick(&["127.0.0.1:1", "127.0.0.1:1:3,127.0.0.1:2", "localhost:1", "::1", ":", "127.0.0.1:99999"]).into()
        }
        "waffle_local" | "waffle_push_queue" => {
            c.pick(&["4KiB", "1MiB", "0", "1", "18446744073709551615", "64KiB"]).into()
        }
        "waffle_timeout_ms" => c.pick(&["0", "1", "50", "4294967296", "-1"]).into(),
        "mode" => c.pick(&["ro", "rw", "rwc", "memory", "x"]).into(),
        "vfs" => c.pick(&["waffle", "unix", "unix-none", "unix-dotfile", "nope"]).into(),
        "cache" => c.pick(&["shared", "private", "x"]).into(),
        "waffle_hot_list" => c.pick(&["on", "off", "grid", "x"]).into(),
        "waffle_log" => c.pick(&["error", "off", "debug", "x"]).into(),
        _ => c.pick(&["0", "1", "on", "off", "true", "yes", "lz4", "zstd", "x"]).into(),
    }
}

fn uri(c: &mut Choices, w: &World, attach: bool) -> String {
    let s = |p: &str| w.scratch.join(p).to_str().unwrap().to_string();
    let files = [s("main.db"), s("other.db"), s("link-main.db"), s("new.db"), "/dev/zero".into(), s("notes.json")];
    let mut u = format!("file:{}", files[c.byte() as usize % files.len()]);
    for i in 0..c.byte() % 6 {
        let name = c.pick(&NAMES);
        let v = value(c, w, name, attach);
        u.push(if i == 0 { '?' } else { '&' });
        u.push_str(&format!("{name}={v}"));
    }
    u
}

/// Runs `sql` on `db`, rows discarded; errors are outcomes, not failures.
fn exec(db: *mut ffi::sqlite3, sql: &str) {
    let Ok(s) = CString::new(sql) else { return };
    // SAFETY: db is an open handle; no callback.
    unsafe { ffi::sqlite3_exec(db, s.as_ptr(), None, std::ptr::null_mut(), std::ptr::null_mut()) };
}

/// Returns whether the main open's URI names a stats file (the opener's choice: it may write
/// one; an ATTACH's never).
fn run(data: &[u8], w: &World) -> bool {
    let mut c = Choices(data);
    let flags = match c.byte() % 3 {
        0 => ffi::SQLITE_OPEN_READONLY,
        1 => ffi::SQLITE_OPEN_READWRITE,
        _ => ffi::SQLITE_OPEN_READWRITE | ffi::SQLITE_OPEN_CREATE,
    } | ffi::SQLITE_OPEN_URI;
    let main_uri = uri(&mut c, w, false);
    let names_stats = main_uri.contains("waffle_stats_file=");
    let main = CString::new(main_uri).unwrap();
    let mut db = std::ptr::null_mut();
    // SAFETY: NUL-terminated strings and an out-pointer; the handle is closed below, open or not.
    let rc: c_int = unsafe { ffi::sqlite3_open_v2(main.as_ptr(), &mut db, flags, c"waffle".as_ptr()) };
    if rc == ffi::SQLITE_OK {
        // SAFETY: db is open.
        unsafe { ffi::sqlite3_busy_timeout(db, 100) };
        exec(db, "SELECT count(*) FROM sqlite_schema; SELECT count(*), sum(length(v)) FROM t");
        for i in 0..c.byte() % 4 {
            let attached = uri(&mut c, w, true).replace('\'', "''");
            exec(db, &format!("ATTACH '{attached}' AS a{i}"));
            exec(db, &format!("SELECT count(*) FROM a{i}.sqlite_schema; SELECT count(*) FROM a{i}.t"));
            if c.byte() % 2 == 0 {
                exec(db, &format!("DETACH a{i}"));
            }
        }
    }
    // SAFETY: db is null or a handle sqlite3_open_v2 returned (closed even when the open failed; sqlite3_exec left no statement).
    unsafe { ffi::sqlite3_close(db) };
    names_stats
}

fn check(w: &World, data: &[u8], main_names_stats: bool) {
    let what = || format!("input {data:?}");
    assert_eq!(listing(&w.base), w.base_listing, "the scratch dir's parent changed: {}", what());
    assert_eq!(listing(&w.base.join("outside")), w.outside_listing, "a directory outside changed: {}", what());
    for (path, bytes) in &w.kept {
        let now = std::fs::read(path).unwrap_or_default();
        assert!(now == *bytes, "{} changed ({} bytes, was {}): {}", path.display(), now.len(), bytes.len(), what());
    }
    let fifo = std::fs::symlink_metadata(w.scratch.join("key.fifo")).unwrap();
    assert!(std::os::unix::fs::FileTypeExt::is_fifo(&fifo.file_type()), "the FIFO was replaced: {}", what());
    for dev in ["/dev/zero", "/dev/null"] {
        let m = std::fs::symlink_metadata(dev).unwrap();
        assert!(std::os::unix::fs::FileTypeExt::is_char_device(&m.file_type()), "{dev} was replaced: {}", what());
    }
    // What the input made inside the scratch dir goes (side files, new.db, stats.json).
    for name in listing(&w.scratch) {
        if !w.initial.contains(&name) {
            let p = w.scratch.join(&name);
            if !main_names_stats {
                let text = std::fs::read(&p).unwrap_or_default();
                let stats = text.windows(14).any(|x| x == b"\"waffle-stats\"");
                assert!(!stats, "a stats file {name:?} no opener named (an ATTACH's?): {}", what());
            }
            let _ = std::fs::remove_file(&p).or_else(|_| std::fs::remove_dir_all(&p));
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let w = world();
    let started = Instant::now();
    let main_names_stats = run(data, w);
    let took = started.elapsed();
    assert!(took < INPUT_BOUND, "the input took {took:?}: {data:?}");
    check(w, data, main_names_stats);
});
