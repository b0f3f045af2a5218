//! Other writers of a tablespace under the MariaDB preload (docs/design.md,
//! "Other writers of a tablespace"). One memcached node per test, shared by
//! every server run of the test; a 1 MiB L1 and a 6 MiB buffer pool, so the
//! 13 MiB table `w.t` (20,000 rows, `b = 'row-<id>'`) really goes through the
//! grid. Each case has a control showing that wrong bytes were there to be
//! served: grid values (found by their bytes with direct `mg` requests) that
//! hold rows the files no longer hold.
//!
//! - A restore: run 1 writes the table, the datadir is copied aside; run 2
//!   rewrites every row (`upd-<id>`), its pages pushed; the copy is put back
//!   (offline); run 3 reads run 1's data: CHECKSUM TABLE equal to run 1's, no
//!   `upd-` row, CHECK TABLE OK. Control: run 2's values holding `upd-` rows
//!   are in the node; afterwards every key of runs 1 and 2 is still there
//!   (the preload's fetch expires what it fetches: none was even asked for).
//! - `innochecksum --no-check --write` after an offline edit of one row's
//!   bytes in `t.ibd` (10.11's `--write` takes no algorithm: it rewrites the
//!   checksums in the file's own format): the next run reads the edited row.
//!   Control: the earlier run's copy of that page, with the old row, is in
//!   the node before and after.
//! - Within one run: FLUSH TABLES ... FOR EXPORT, the file copied aside by
//!   another program, every row rewritten (pushed), DISCARD TABLESPACE, the
//!   copy put back, IMPORT TABLESPACE: the table is the exported one.
//!   Control: the discarded file's copies, holding rewritten rows, are on the
//!   node right before the DISCARD; the imported file reuses the segment
//!   number, and they are never served (the drop cleared their presence bits;
//!   one asked for would be refused by `version`).
//! - Two servers on copies of one datadir (same tablespace ids, same page
//!   numbers, very likely the same segment numbers), at the same time on one
//!   node, each rewriting other rows: each reads exactly its own writes, and
//!   its CHECKSUM TABLE equals what a stock server reads from its files.
//!   Control: both servers' pages in the node at once, both served from it.
//!
//! Tried by hand: a preload built with one fixed cache id, with this file's
//! "new id" assertions turned off, fails the restore and the innochecksum
//! cases on stale pages (the next run's InnoDB says `w.t` "doesn't exist in
//! engine") and the two-server case (168 rows of the other server).

#[path = "mysql_support.rs"]
mod mysql_support;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use mysql_support::*;
use serde_json::Value;
use waffle_testkit::raw_client::page_of;

const ROWS: u64 = 20_000;
/// The row whose bytes the controls look for in grid values.
const MARK: u32 = 777;

// ---------------------------------------------------------------- SQL

fn create_table(s: &Server) {
    let q = format!(
        "CREATE DATABASE w; USE w; \
         CREATE TABLE t (id INT PRIMARY KEY, v INT NOT NULL, b CHAR(200) NOT NULL) ENGINE=InnoDB; \
         INSERT INTO t SELECT seq, seq, CONCAT('row-', seq) FROM seq_1_to_{ROWS};"
    );
    s.sql(&q).unwrap_or_else(|e| panic!("{e}\nlog:\n{}", s.log()));
}

fn one(s: &Server, q: &str) -> String {
    s.sql(q).unwrap_or_else(|e| panic!("{q}: {e}")).trim().to_string()
}

fn marked_row(s: &Server) -> String {
    one(s, &format!("SELECT b FROM w.t WHERE id = {MARK}"))
}

fn checksum(s: &Server) -> String {
    s.checksums(&["w.t"]).unwrap_or_else(|e| panic!("{e}")).remove(0)
}

/// The cache id of the run now on `s` (its pid in the stats file), which must be none of `before`.
fn new_id(s: &Server, before: &[&str]) -> String {
    let pid = s.pid().expect("running");
    let v = stats_after(s, "this run's stats", |v| {
        let s = snapshot_of(v);
        s.stamp.pid == Some(pid) && s.cache.is_some_and(|c| !c.cache_id.is_empty())
    });
    let id = cache_of(&v).cache_id;
    assert!(!before.contains(&id.as_str()), "a server start reused the cache identity {id} of an earlier run");
    id
}

/// The stats file, written after this call began.
fn fresh_stats(s: &Server) -> Value {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    stats_after(s, "a stats write", |v| snapshot_of(v).stamp.updated_unix_ms.is_some_and(|u| u > now))
}

/// The stats file a run wrote when it exited.
fn final_stats(data: &Path, id: &str) -> Value {
    let p = data.join("waffle-stats.json");
    let v: Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
    assert_eq!(v["cache_id"], id, "{}: {v}", p.display());
    assert_eq!(v["final"], true, "the last stats write was not the one at exit: {v}");
    v
}

fn assert_nothing_foreign_asked_for(v: &Value) {
    assert_eq!(cache_of(v).l2_rejects.database, 0, "a copy of another cache identity was fetched: {v}");
    assert_eq!(preload_of(v).preload.innodb_rejects.total(), 0, "a grid copy failed the InnoDB page check: {v}");
    assert_eq!(preload_of(v).preload.fallback_reads, 0, "{v}");
    assert_eq!(v["state"], "running", "{v}");
}

// ---------------------------------------------------------------- the node, directly

/// One connection to a memcached node: the controls' view of the grid.
struct Mc {
    w: TcpStream,
    r: BufReader<TcpStream>,
}

impl Mc {
    fn connect(node: &Node) -> Mc {
        let w = TcpStream::connect(node.socket_addr()).expect("connect to the node");
        w.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let r = BufReader::new(w.try_clone().unwrap());
        Mc { w, r }
    }

    fn line(&mut self) -> String {
        let mut l = String::new();
        self.r.read_line(&mut l).expect("memcached answers");
        l.trim_end().to_string()
    }

    /// Every key the node holds (`lru_crawler metadump all`), asked again while
    /// the crawler answers BUSY (a crawl of its own is running).
    fn keys(&mut self) -> Vec<String> {
        let timeout = Duration::from_secs(10);
        let deadline = Instant::now() + timeout;
        loop {
            self.w.write_all(b"lru_crawler metadump all\r\n").unwrap();
            let mut keys = Vec::new();
            loop {
                let l = self.line();
                if l == "END" {
                    return keys;
                }
                if l.starts_with("BUSY") {
                    break;
                }
                match l.strip_prefix("key=") {
                    Some(rest) => keys.push(rest.split(' ').next().unwrap_or("").to_string()),
                    None => panic!("metadump: unexpected line {l:?}"),
                }
            }
            assert!(
                Instant::now() < deadline,
                "timed out after {timeout:?} waiting for the node's LRU crawler to be free"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Keys per cache id (`wf<id>.<page>`).
    fn keys_by_id(&mut self) -> BTreeMap<String, usize> {
        let mut m = BTreeMap::new();
        for k in self.keys() {
            if let Some(id) = k.strip_prefix("wf").and_then(|r| r.split('.').next()) {
                *m.entry(id.to_string()).or_insert(0) += 1;
            }
        }
        m
    }

    /// The keys of cache `id`. (Taken before this connection's own `mg`s touch
    /// them: memcached's crawler was seen to skip items just fetched, still there.)
    fn keys_of(&mut self, id: &str) -> Vec<String> {
        let prefix = format!("wf{id}.");
        self.keys().into_iter().filter(|k| k.starts_with(&prefix)).collect()
    }

    /// How many of `keys` the node still holds.
    fn present(&mut self, keys: &[String]) -> usize {
        keys.iter().filter(|k| self.get(k).is_some()).count()
    }

    /// `mg <key> v`: the value, the item left as it is (no expiry, unlike the preload's fetch).
    fn get(&mut self, key: &str) -> Option<Vec<u8>> {
        self.w.write_all(format!("mg {key} v\r\n").as_bytes()).unwrap();
        let l = self.line();
        if l == "EN" {
            return None;
        }
        let n: usize = l
            .strip_prefix("VA ")
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("mg {key}: unexpected reply {l:?}"));
        let mut v = vec![0u8; n + 2];
        self.r.read_exact(&mut v).unwrap();
        v.truncate(n);
        Some(v)
    }

    /// The keys of cache `id` whose pages contain `needle` (unsealed values, decompressed).
    fn holding(&mut self, id: &str, needle: &[u8]) -> Vec<String> {
        let keys = self.keys_of(id);
        keys.into_iter().filter(|k| self.page(k).is_some_and(|p| contains(&p, needle))).collect()
    }

    /// The page under `key`, opened as the cache would (InnoDB's default 16 KiB pages).
    fn page(&mut self, key: &str) -> Option<Vec<u8>> {
        self.get(key).and_then(|v| page_of(&v, 16384))
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

fn ids_of(m: &BTreeMap<String, usize>, id: &str) -> usize {
    m.get(id).copied().unwrap_or(0)
}

// ---------------------------------------------------------------- files

fn innochecksum() -> PathBuf {
    let next_to_client = tools().client.parent().map(|d| d.join("innochecksum"));
    next_to_client.filter(|p| p.is_file()).unwrap_or_else(|| PathBuf::from("innochecksum"))
}

fn run_innochecksum(args: &[&str], file: &Path) -> (bool, String) {
    let out = Command::new(innochecksum())
        .args(args)
        .arg(file)
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap_or_else(|e| panic!("cannot run innochecksum ({e}): it comes with mariadb-server"));
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// Edits the one occurrence of `from` in `file` in place (same inode, as an offline tool would). Returns its page.
fn edit_in_place(file: &Path, from: &[u8], to: &[u8]) -> usize {
    assert_eq!(from.len(), to.len());
    let bytes = std::fs::read(file).unwrap();
    let at: Vec<usize> = bytes.windows(from.len()).enumerate().filter(|(_, w)| *w == from).map(|(i, _)| i).collect();
    assert_eq!(at.len(), 1, "{:?} occurs {} times in {}", String::from_utf8_lossy(from), at.len(), file.display());
    let f = std::fs::OpenOptions::new().write(true).open(file).unwrap();
    f.write_all_at(to, at[0] as u64).unwrap();
    f.sync_all().unwrap();
    at[0] / 16384
}

fn options(node: &Node) -> ServerOptions {
    waffle_options(&node.addr(), "1MiB", &[("WAFFLE_TIMEOUT_MS", "200")])
}

// ---------------------------------------------------------------- the tests

#[test]
fn a_restored_backup_is_read_not_the_grid_copies_of_later_runs() {
    let t0 = Instant::now();
    let OneServer { turn: _turn, dir, node, data } = one_server("restore", 256);
    let opts = options(&node);
    let mut mc = Mc::connect(&node);
    let upd = format!("upd-{MARK} ");

    // Run 1: the table; then a clean stop and a copy of the datadir.
    let s = start(&data, opts.clone());
    let id1 = new_id(&s, &[]);
    create_table(&s);
    let c1 = checksum(&s);
    assert_eq!(marked_row(&s), format!("row-{MARK}"));
    s.shutdown().unwrap();
    let st1 = final_stats(&data, &id1);
    let backup = dir.join("backup");
    server::copy_datadir(&data, &backup).unwrap();
    let keys1 = mc.keys_of(&id1);

    // Run 2: every row rewritten, the table read again; pages pushed.
    let s = start(&data, opts.clone());
    let id2 = new_id(&s, &[&id1]);
    s.sql("UPDATE w.t SET v = v + 1, b = CONCAT('upd-', id)").unwrap();
    assert_eq!(marked_row(&s), upd.trim());
    // Last, a whole scan: a grid hit takes the page out of the grid (into L1),
    // so the page just read must be pushed out of L1 again before the stop.
    let c2 = checksum(&s);
    assert_ne!(c2, c1);
    s.shutdown().unwrap();
    let st2 = final_stats(&data, &id2);

    // Control: run 2 left copies of w/t pages holding rewritten rows in the
    // grid: bytes the restored files do not hold (not necessarily row MARK's
    // page: a page last flushed at shutdown is dropped from L1, not pushed).
    let keys2 = mc.keys_of(&id2);
    let stale = mc.holding(&id2, b"upd-");
    eprintln!(
        "run 1: {} pushes, {} keys left; run 2: {} pushes, {} keys, {} holding 'upd-' rows",
        cache_of(&st1).l2_pushes,
        keys1.len(),
        cache_of(&st2).l2_pushes,
        keys2.len(),
        stale.len()
    );
    assert!(!keys1.is_empty() && cache_of(&st2).l2_pushes > 0 && !keys2.is_empty());
    assert_eq!(mc.present(&keys1), keys1.len(), "run 2 fetched copies of run 1");
    assert!(!stale.is_empty(), "control: no grid copy holds an 'upd-' row: this test could not see a stale page");

    // The restore, offline: the copy put back over the datadir.
    std::fs::remove_dir_all(&data).unwrap();
    server::copy_datadir(&backup, &data).unwrap();

    // Run 3: run 1's data, read cold and then again through the grid.
    let s = start(&data, opts);
    let id3 = new_id(&s, &[&id1, &id2]);
    assert_eq!(checksum(&s), c1, "run 3 does not read the restored table");
    assert_eq!(marked_row(&s), format!("row-{MARK}"));
    assert_eq!(one(&s, "SELECT COUNT(*) FROM w.t WHERE b LIKE 'upd-%'"), "0");
    s.check_tables(&["w.t"]).unwrap();
    assert_eq!(checksum(&s), c1);
    let v = stats_after(&s, "run 3 used the grid", |v| tablespace_of(v, "w/t").l2_hits > 0);
    assert_nothing_foreign_asked_for(&v);
    let errors = log_errors(&s, &[]);
    assert!(errors.is_empty(), "the server logged errors: {errors:#?}");
    // Never asked for: the preload's fetch would have expired them.
    assert_eq!(mc.present(&keys1), keys1.len(), "run 3 fetched copies of run 1");
    assert_eq!(mc.present(&keys2), keys2.len(), "run 3 fetched copies of run 2");
    eprintln!(
        "run 3 ({id3}): l2_hits {} (w/t {}), disk_reads {}, rejects {}",
        cache_of(&v).l2_hits,
        tablespace_of(&v, "w/t").l2_hits,
        cache_of(&v).disk_reads,
        v["l2_rejects"]
    );
    s.shutdown().unwrap();
    eprintln!("total {:.1} s", t0.elapsed().as_secs_f64());
}

#[test]
fn an_offline_innochecksum_write_is_read_by_the_next_run() {
    let t0 = Instant::now();
    let OneServer { turn: _turn, dir: _dir, node, data } = one_server("innochecksum", 256);
    let opts = options(&node);
    let mut mc = Mc::connect(&node);
    let row = format!("row-{MARK} ");
    let edited = format!("ROW-{MARK} ");

    let s = start(&data, opts.clone());
    let id1 = new_id(&s, &[]);
    create_table(&s);
    let c1 = checksum(&s);
    assert_eq!(checksum(&s), c1);
    s.shutdown().unwrap();
    final_stats(&data, &id1);
    let stale = mc.holding(&id1, row.as_bytes());
    assert!(!stale.is_empty(), "control: no grid copy holds {row:?}: this test could not see a stale page");

    // Offline: one row's bytes changed, then innochecksum makes the page's checksum right again.
    let ibd = data.join("w/t.ibd");
    let page = edit_in_place(&ibd, row.as_bytes(), edited.as_bytes());
    let (ok, out) = run_innochecksum(&[], &ibd);
    assert!(!ok, "innochecksum did not notice the edited page {page}: {out}");
    let (ok, out) = run_innochecksum(&["--no-check", "--write"], &ibd);
    assert!(ok, "innochecksum --no-check --write: {out}");
    let (ok, out) = run_innochecksum(&[], &ibd);
    assert!(ok, "innochecksum after --write: {out}");

    let s = start(&data, opts);
    let id2 = new_id(&s, &[&id1]);
    assert_eq!(marked_row(&s), edited.trim(), "the next run does not read the file innochecksum wrote");
    s.check_tables(&["w.t"]).unwrap();
    let c2 = checksum(&s);
    assert_ne!(c2, c1);
    assert_eq!(checksum(&s), c2);
    assert_eq!(marked_row(&s), edited.trim());
    let v = stats_after(&s, "the next run used the grid", |v| tablespace_of(v, "w/t").l2_hits > 0);
    assert_nothing_foreign_asked_for(&v);
    for k in &stale {
        assert!(mc.get(k).is_some(), "the earlier run's copy {k} was fetched");
    }
    let errors = log_errors(&s, &[]);
    assert!(errors.is_empty(), "the server logged errors: {errors:#?}");
    s.shutdown().unwrap();
    eprintln!(
        "edited page {page}; run 2 ({id2}) l2_hits {}; total {:.1} s",
        cache_of(&v).l2_hits,
        t0.elapsed().as_secs_f64()
    );
}

#[test]
fn a_tablespace_imported_while_the_server_runs_replaces_the_cached_one() {
    let t0 = Instant::now();
    let OneServer { turn: _turn, dir, node, data } = one_server("import", 256);
    let aside = dir.join("export");
    std::fs::create_dir_all(&aside).unwrap();
    let mut mc = Mc::connect(&node);
    let upd = "upd-";

    let s = start(&data, options(&node));
    let id = new_id(&s, &[]);
    create_table(&s);
    let c0 = checksum(&s);
    // Another program copies the quiesced file out while the export lock is held.
    let export = format!(
        "FLUSH TABLES w.t FOR EXPORT;\nsystem cp {d}/w/t.ibd {d}/w/t.cfg {a}/\nUNLOCK TABLES;\n",
        d = s.datadir.display(),
        a = aside.display()
    );
    s.sql_script(&export, Duration::from_secs(60)).unwrap();
    assert!(aside.join("t.ibd").is_file() && aside.join("t.cfg").is_file(), "the export did not copy the files");

    s.sql("UPDATE w.t SET v = v + 1, b = CONCAT('upd-', id)").unwrap();
    let c1 = checksum(&s);
    assert_ne!(c1, c0);
    assert_eq!(checksum(&s), c1);
    let before = stats_after(&s, "the rewritten table in the grid", |v| {
        cache_of(v).l2_pushes > 0 && tablespace_of(v, "w/t").l2_hits > 0
    });
    let stale = mc.holding(&id, upd.as_bytes());
    assert!(!stale.is_empty(), "control: no grid copy holds an {upd:?} row: this test could not see a stale page");

    s.sql("ALTER TABLE w.t DISCARD TABLESPACE").unwrap();
    for f in ["t.ibd", "t.cfg"] {
        std::fs::copy(aside.join(f), data.join("w").join(f)).unwrap();
    }
    let discarded = fresh_stats(&s);
    s.sql("ALTER TABLE w.t IMPORT TABLESPACE").unwrap_or_else(|e| panic!("{e}\nlog:\n{}", s.log()));
    let imported = fresh_stats(&s);
    eprintln!(
        "IMPORT: w/t page_writes {} -> {}, invalidations {} -> {}, multi_page_writes {} -> {}, passthrough_reads {} -> {}",
        tablespace_of(&discarded, "w/t").page_writes,
        tablespace_of(&imported, "w/t").page_writes,
        tablespace_of(&discarded, "w/t").invalidations,
        tablespace_of(&imported, "w/t").invalidations,
        preload_of(&discarded).preload.multi_page_writes,
        preload_of(&imported).preload.multi_page_writes,
        preload_of(&discarded).preload.passthrough_reads,
        preload_of(&imported).preload.passthrough_reads,
    );
    assert_eq!(checksum(&s), c0, "the imported table is not the exported one");
    assert_eq!(marked_row(&s), format!("row-{MARK}"));
    assert_eq!(one(&s, "SELECT COUNT(*) FROM w.t WHERE b LIKE 'upd-%'"), "0");
    s.check_tables(&["w.t"]).unwrap();
    assert_eq!(checksum(&s), c0);
    let v = stats_after(&s, "the imported table through the grid", |v| {
        tablespace_of(v, "w/t").l2_hits > tablespace_of(&before, "w/t").l2_hits
    });
    assert_nothing_foreign_asked_for(&v);
    assert!(preload_of(&v).preload.segments_dropped > preload_of(&before).preload.segments_dropped, "{v}");
    let errors = log_errors(&s, &[]);
    assert!(errors.is_empty(), "the server logged errors: {errors:#?}");
    // The imported file took the discarded file's segment number (the last one
    // freed is the first reused). The old file's copies (the control above: on
    // the node, holding rewritten rows, right before the DISCARD) are never
    // served: the segment's drop cleared their presence bits, so they are not
    // asked for, and any that were would be refused by version. What is left
    // of them afterwards depends on timing: the imported file's own pushes
    // overwrite the keys they share.
    let left = stale.iter().filter(|k| mc.page(k).is_some_and(|p| contains(&p, upd.as_bytes()))).count();
    eprintln!(
        "copies of the old file holding {upd:?}: {} before the import, {left} after; version rejects {} -> {}; \
         presence skips {} -> {}; segments dropped {} -> {}; total {:.1} s",
        stale.len(),
        cache_of(&before).l2_rejects.version,
        cache_of(&v).l2_rejects.version,
        cache_of(&before).l2_presence_skips,
        cache_of(&v).l2_presence_skips,
        preload_of(&before).preload.segments_dropped,
        preload_of(&v).preload.segments_dropped,
        t0.elapsed().as_secs_f64()
    );
    s.shutdown().unwrap();
}

#[test]
fn two_servers_on_copies_of_one_datadir_share_a_node_and_read_only_their_own_writes() {
    let _serial = serial();
    let t0 = Instant::now();
    let dir = TempDir::new("two");
    let node = start_node(256);
    let d1 = fresh_datadir(&dir, "one");
    let s = start(&d1, stock_options(POOL));
    create_table(&s);
    s.shutdown().unwrap();
    let d2 = dir.join("two");
    server::copy_datadir(&d1, &d2).unwrap();
    let mut mc = Mc::connect(&node);

    let s1 = start(&d1, options(&node));
    let s2 = start(&d2, options(&node));
    let id1 = new_id(&s1, &[]);
    let id2 = new_id(&s2, &[]);
    assert_ne!(id1, id2);
    const ROUNDS: u32 = 3;
    for r in 0..ROUNDS {
        std::thread::scope(|sc| {
            sc.spawn(|| {
                s1.sql(&format!("UPDATE w.t SET v = v + 1, b = CONCAT('one-{r}-', id) WHERE id % 2 = 0")).unwrap();
                checksum(&s1);
            });
            sc.spawn(|| {
                s2.sql(&format!("UPDATE w.t SET v = v + 10, b = CONCAT('two-{r}-', id) WHERE id % 3 = 0")).unwrap();
                checksum(&s2);
            });
        });
    }
    let shared = mc.keys_by_id();
    assert!(ids_of(&shared, &id1) > 0 && ids_of(&shared, &id2) > 0, "both servers' pages in the node: {shared:?}");

    // Each reads exactly its own writes (whole-table aggregates, then CHECKSUM TABLE).
    let base = ROWS * (ROWS + 1) / 2;
    let last = ROUNDS - 1;
    let model = |s: &Server, add: u64, modulo: u64, own: &str, other: &str| {
        let q = format!(
            "SELECT COUNT(*), SUM(v), SUM(b LIKE '{own}-{last}-%'), SUM(b LIKE '{other}-%'), SUM(b LIKE 'row-%') FROM w.t"
        );
        let changed = ROWS / modulo;
        let want = format!("{ROWS}\t{}\t{changed}\t0\t{}", base + add * ROUNDS as u64 * changed, ROWS - changed);
        assert_eq!(one(s, &q), want, "{own}: {q}");
    };
    model(&s1, 1, 2, "one", "two");
    model(&s2, 10, 3, "two", "one");
    let cs1 = checksum(&s1);
    let cs2 = checksum(&s2);
    assert_ne!(cs1, cs2);
    for (s, name) in [(&s1, "one"), (&s2, "two")] {
        let v = stats_after(s, name, |v| tablespace_of(v, "w/t").l2_hits > 0 && cache_of(v).l2_pushes > 0);
        assert_nothing_foreign_asked_for(&v);
        eprintln!(
            "{name}: l2_hits {} (w/t {}), pushes {}, rejects {}",
            cache_of(&v).l2_hits,
            tablespace_of(&v, "w/t").l2_hits,
            cache_of(&v).l2_pushes,
            v["l2_rejects"]
        );
        let errors = log_errors(s, &[]);
        assert!(errors.is_empty(), "{name} logged errors: {errors:#?}");
    }
    s1.shutdown().unwrap();
    s2.shutdown().unwrap();
    eprintln!("keys in the node while both ran: {shared:?}");

    // What a stock server reads from each datadir.
    for (d, want) in [(&d1, &cs1), (&d2, &cs2)] {
        let s = start(d, stock_options(POOL));
        assert_eq!(&checksum(&s), want, "{}: the files hold something else", d.display());
        s.check_tables(&["w.t"]).unwrap();
        s.shutdown().unwrap();
    }
    eprintln!("total {:.1} s", t0.elapsed().as_secs_f64());
}
