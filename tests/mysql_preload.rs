//! The preload's mechanics, without MariaDB: this test binary runs itself as
//! a child under `LD_PRELOAD=libwaffle_preload.so` with
//! `WAFFLE_PRELOAD_ACTIVE=1`, a 64 KiB L1 (4 pages) and one memcached node,
//! and does to `db/t1.ibd` what a server could: whole-page pwrite64/pread64
//! (InnoDB-consistent full_crc32 pages), rewrites, a partial write, a page
//! that is not an InnoDB page, a dup (fcntl F_DUPFD_CLOEXEC) and the close of
//! the original, ftruncate and regrowth, a plain write() at the file
//! position, a fork whose child reads, and a read through another name.
//! Every read returns what the file holds (checked against a model and
//! against a read of the same inode under a name the preload ignores).
//!
//! Then the stats file (written at exit) shows each mechanism was exercised:
//! grid hits, the InnoDB page check refusing the non-InnoDB page's grid copy,
//! partial and unpositioned writes, the truncation, the segment dropped at
//! the last close; the tablespace `WAFFLE_TABLES` leaves out was not cached. And a process that is not the server (no
//! `WAFFLE_PRELOAD_ACTIVE`, a shell) is left alone: no stats file at all.

#[path = "mysql_support.rs"]
mod mysql_support;

use std::io::{Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use mysql_support::*;

const CHILD_DIR: &str = "WAFFLE_PRELOAD_TEST_CHILD_DIR";
const PS: usize = 16384;
const PAGES: u32 = 64;
const SPACE: u32 = 5;

/// A full_crc32 InnoDB page (MariaDB 10.5+ format) numbered `index`, contents by `gen`.
fn page(index: u32, gen: u32) -> Vec<u8> {
    let mut p: Vec<u8> = (0..PS)
        .map(|i| ((i as u32).wrapping_mul(31) ^ index.wrapping_mul(7919) ^ gen.wrapping_mul(104729)) as u8)
        .collect();
    let lsn = 1_000_000u64 + index as u64 * 10 + gen as u64;
    p[0..4].fill(0);
    p[4..8].copy_from_slice(&index.to_be_bytes());
    p[16..24].copy_from_slice(&lsn.to_be_bytes());
    p[34..38].copy_from_slice(&SPACE.to_be_bytes());
    p[PS - 8..PS - 4].copy_from_slice(&(lsn as u32).to_be_bytes());
    let crc = crc32c::crc32c(&p[..PS - 4]);
    p[PS - 4..].copy_from_slice(&crc.to_be_bytes());
    p
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

/// The child: runs only when the parent test spawned this binary with CHILD_DIR set.
#[test]
fn child_entry_does_nothing_unless_spawned_by_the_preload_test() {
    let Ok(dir) = std::env::var(CHILD_DIR) else {
        return;
    };
    child(Path::new(&dir));
    println!("child ok");
}

fn child(dir: &Path) {
    let db = dir.join("db");
    std::fs::create_dir_all(&db).unwrap();
    let path = db.join("t1.ibd");
    let f = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).unwrap();
    let mut model: Vec<Vec<u8>> = (0..PAGES).map(|i| page(i, 0)).collect();
    for (i, p) in model.iter().enumerate() {
        f.write_all_at(p, (i * PS) as u64).unwrap();
    }
    // L1 holds 4 pages: the rest were pushed to the grid; read everything twice.
    std::thread::sleep(Duration::from_millis(300));
    check_all(&f, &model, "first pass");
    std::thread::sleep(Duration::from_millis(300));
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
        std::thread::sleep(Duration::from_millis(300));
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

fn run_child(dir: &Path, active: bool, grid: &str) -> String {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = Command::new(exe);
    cmd.args([
        "--exact",
        "child_entry_does_nothing_unless_spawned_by_the_preload_test",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD_DIR, dir)
    .env("LD_PRELOAD", preload_so())
    .env("WAFFLE_GRID", grid)
    .env("WAFFLE_LOCAL", "64KiB")
    .env("WAFFLE_TIMEOUT_MS", "200")
    .env("WAFFLE_STATS_FILE", dir.join("stats.json"))
    .env("WAFFLE_STATS_INTERVAL_MS", "100")
    .env("WAFFLE_TABLES", "db/t*, ibdata*")
    .env_remove("WAFFLE_PRELOAD_ACTIVE")
    .stdin(Stdio::null());
    if active {
        cmd.env("WAFFLE_PRELOAD_ACTIVE", "1");
    }
    let out = server::wait_output(
        &mut cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap(),
        Duration::from_secs(120),
    )
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success() && stdout.contains("child ok"), "child failed ({}):\n{stdout}\n{stderr}", out.status);
    stderr
}

#[test]
fn every_mechanism_keeps_reads_equal_to_the_file() {
    let dir = TempDir::new("preload");
    let node = start_node(16);
    let log = run_child(dir.path(), true, &node.addr());
    assert!(log.contains("waffle: caching InnoDB tablespace pages"), "{log}");
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("stats.json")).expect("the stats file")).unwrap();
    assert_eq!(v["final"], true, "written at exit: {v}");
    assert_eq!(v["state"], "active", "{v}");
    assert_eq!(stat(&v, "page_bytes"), PS as u64);
    assert!(stat(&v, "l2_hits") > 0 && stat(&v, "l2_pushes") > 0, "the grid was used: {v}");
    assert!(stat(&v, "preload.innodb_rejects.checksum") > 0, "the non-InnoDB page's grid copy was refused: {v}");
    assert_eq!(stat(&v, "preload.innodb_rejects.page_number") + stat(&v, "preload.innodb_rejects.space_id"), 0, "{v}");
    assert!(stat(&v, "preload.partial_writes") > 0, "{v}");
    assert!(stat(&v, "preload.unpositioned_writes") > 0, "{v}");
    assert!(stat(&v, "preload.truncations") > 0, "{v}");
    assert!(stat(&v, "preload.segments_dropped") > 0, "the last close dropped the file: {v}");
    assert_eq!(stat(&v, "preload.tablespaces_open"), 0, "{v}");
    let skipped = &v["tablespaces"]["db/skip"];
    assert!(
        skipped["cached"] == false && stat(skipped, "reads") == 0 && stat(skipped, "opens") == 1,
        "WAFFLE_TABLES: {skipped}"
    );
    assert_eq!(v["tables"], serde_json::json!(["db/t*", "ibdata*"]), "{v}");
    assert_eq!(stat(&v, "preload.fallback_reads"), 0, "{v}");
    let t = &v["tablespaces"]["db/t1"];
    assert!(stat(t, "l2_hits") > 0 && stat(t, "reads") > 0 && t["cached"] == true, "{t}");
    // Version rejects are expected (a copy pushed before a partial write or
    // write() is refused by its version), and the InnoDB check's refusals are
    // the core's `content` rejects (checked before L1); nothing else may be.
    assert_eq!(stat(&v, "l2_rejects_total"), stat(&v, "l2_rejects.version") + stat(&v, "l2_rejects.content"), "{v}");
    assert_eq!(stat(&v, "l2_rejects.content"), stat(&v, "preload.innodb_rejects.checksum"), "{v}");
}

#[test]
fn processes_that_are_not_the_server_are_left_alone() {
    let dir = TempDir::new("inert");
    // This binary without WAFFLE_PRELOAD_ACTIVE is not mariadbd: everything passes through.
    let log = run_child(dir.path(), false, "127.0.0.1:1");
    assert!(!log.contains("waffle:"), "{log}");
    assert!(!dir.join("stats.json").exists(), "an inert process wrote stats");
    // A shell and its tools, as the server could start them.
    let out = Command::new("sh")
        .args(["-c", "printf hello > x.ibd && cat x.ibd && cp x.ibd y.ibd && cat y.ibd"])
        .current_dir(dir.path())
        .env("LD_PRELOAD", preload_so())
        .env("WAFFLE_GRID", "127.0.0.1:1")
        .env("WAFFLE_STATS_FILE", dir.join("stats.json"))
        .env_remove("WAFFLE_PRELOAD_ACTIVE")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hellohello");
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!dir.join("stats.json").exists(), "a shell wrote stats");
}
