//! `preload-file-io <dir>`: does to `<dir>/db/t1.ibd` what a server could, under the
//! `LD_PRELOAD=libwaffle_preload.so` and WAFFLE_* environment `mysql_preload.rs` gives it:
//! whole-page pwrite64/pread64 of InnoDB-consistent pages, rewrites, a partial write, a page that
//! is not an InnoDB page, a dup and the close of the original, ftruncate and regrowth, a plain
//! write() at the file position, a fork whose child reads, a read through another name; then a
//! tablespace WAFFLE_TABLES leaves out. Every read must return what the file holds (a model, and
//! the same inode read under a name the preload ignores); prints `child ok` at the end.

use std::io::{Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use waffle_testkit::innodb_page::{page, PS};
use waffle_testkit::wait_for;

const PAGES: u32 = 64;

fn main() {
    let [dir] = waffle_testkit::child_args("preload-file-io", ["dir"]);
    run(Path::new(&dir));
    println!("child ok");
}

fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
}

/// Waits until the preload has sent what it evicted so far to the grid, so that the next pass
/// reads those pages from there: until its stats file (`WAFFLE_STATS_FILE`, rewritten every
/// `WAFFLE_STATS_INTERVAL_MS`) shows an empty push queue in a snapshot taken after this call.
/// Inert (no `WAFFLE_PRELOAD_ACTIVE`) the preload caches nothing and writes no stats file.
fn wait_for_pushes() {
    if std::env::var_os("WAFFLE_PRELOAD_ACTIVE").is_none() {
        return;
    }
    let path = std::env::var_os("WAFFLE_STATS_FILE").expect("WAFFLE_STATS_FILE is set with WAFFLE_PRELOAD_ACTIVE");
    let since = unix_ms();
    let mut first_stamp = None;
    wait_for(Duration::from_secs(10), "the preload's stats file to show its push queue empty", || {
        let Some(v) = std::fs::read(&path).ok().and_then(|b| serde_json::from_slice::<Value>(&b).ok()) else {
            return false;
        };
        let stamp = v["updated_unix_ms"].as_u64().unwrap_or(0);
        if stamp <= since {
            return false;
        }
        // A file is stamped after its counters were read: only a write after the first one
        // stamped past `since` surely counts everything queued before this call.
        match first_stamp {
            None => {
                first_stamp = Some(stamp);
                false
            }
            Some(first) => stamp > first && v["push_queue_bytes"] == 0,
        }
    });
}

fn read_page(f: &std::fs::File, i: u32) -> Vec<u8> {
    let mut b = vec![0u8; PS];
    f.read_exact_at(&mut b, i as u64 * PS as u64).unwrap_or_else(|e| panic!("read page {i}: {e}"));
    b
}

fn check_all(f: &std::fs::File, model: &[Vec<u8>], what: &str) {
    for (i, want) in model.iter().enumerate() {
        assert!(read_page(f, i as u32) == *want, "{what}: page {i} differs from what was written");
    }
}

fn run(dir: &Path) {
    let db = dir.join("db");
    std::fs::create_dir_all(&db).unwrap();
    let path = db.join("t1.ibd");
    let f = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).unwrap();
    let mut model: Vec<Vec<u8>> = (0..PAGES).map(|i| page(i, 0)).collect();
    for (i, p) in model.iter().enumerate() {
        f.write_all_at(p, (i * PS) as u64).unwrap();
    }
    // L1 holds 4 pages: the rest go to the grid; read everything twice.
    wait_for_pushes();
    check_all(&f, &model, "first pass");
    wait_for_pushes();
    check_all(&f, &model, "second pass");

    // A rewrite and a partial write.
    model[5] = page(5, 1);
    f.write_all_at(&model[5], 5 * PS as u64).unwrap();
    f.write_all_at(b"partial", 7 * PS as u64 + 100).unwrap();
    model[7][100..107].copy_from_slice(b"partial");
    check_all(&f, &model, "after a rewrite and a partial write");

    // A page whose bytes are not a consistent InnoDB page (right number and
    // space, wrong checksum): its grid copy fails the InnoDB check, the file answers.
    model[9] = page(9, 4);
    model[9][PS / 2] ^= 0xFF;
    f.write_all_at(&model[9], 9 * PS as u64).unwrap();
    for _ in 0..3 {
        check_all(&f, &model, "with a non-InnoDB page");
        wait_for_pushes();
    }

    // A dup (Rust's try_clone is fcntl F_DUPFD_CLOEXEC), then the original closed.
    let g = f.try_clone().unwrap();
    drop(f);
    check_all(&g, &model, "through the dup");

    // ftruncate to 10 pages, then the file grows again.
    g.set_len(10 * PS as u64).unwrap();
    model.truncate(10);
    let mut b = vec![0u8; PS];
    assert_eq!(g.read_at(&mut b, 12 * PS as u64).unwrap(), 0, "page 12 is gone");
    for i in 10..16 {
        let p = page(i, 2);
        g.write_all_at(&p, i as u64 * PS as u64).unwrap();
        model.push(p);
    }
    check_all(&g, &model, "after truncation and regrowth");

    // write() at the file position: the preload cannot tell which pages, so the whole file leaves the cache.
    let mut h = &g;
    h.seek(SeekFrom::Start(3 * PS as u64)).unwrap();
    model[3] = page(3, 3);
    h.write_all(&model[3]).unwrap();
    check_all(&g, &model, "after write()");

    // A fork: the child must not use the parent's cache (threads, locks, sockets); it reads the file.
    let want = model[2].clone();
    // SAFETY: the child only reads, compares and _exits.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let mut b = vec![0u8; PS];
        let ok = g.read_exact_at(&mut b, 2 * PS as u64).is_ok() && b == want;
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "the forked child read wrong bytes ({status})");

    // The same inode under a name the preload ignores: the file holds exactly the model.
    let raw = db.join("t1.raw");
    std::fs::hard_link(&path, &raw).unwrap();
    let bytes = std::fs::read(&raw).unwrap();
    assert_eq!(bytes.len(), model.len() * PS);
    for (i, p) in model.iter().enumerate() {
        assert!(bytes[i * PS..(i + 1) * PS] == p[..], "the file's page {i} is not the model's");
    }
    check_all(&g, &model, "at the end");
    drop(g);

    // A tablespace WAFFLE_TABLES leaves out: tracked, never cached.
    let skip = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(db.join("skip.ibd"))
        .unwrap();
    let other: Vec<Vec<u8>> = (0..8).map(|i| page(i, 7)).collect();
    for (i, p) in other.iter().enumerate() {
        skip.write_all_at(p, (i * PS) as u64).unwrap();
    }
    check_all(&skip, &other, "a tablespace left out");
    check_all(&skip, &other, "a tablespace left out, again");
}
