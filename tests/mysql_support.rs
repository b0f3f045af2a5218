//! Helpers of the MySQL/MariaDB tests (`tests/mysql_*.rs`, each includes this
//! file with `#[path = "mysql_support.rs"] mod mysql_support;`).
//!
//! Servers are `waffle_testkit::mariadb::Server`s: a throwaway datadir (a
//! copy of one template made once per MariaDB version under the target dir),
//! their own socket and loopback port, killed when dropped. Nothing is
//! skipped: a missing MariaDB, sysbench, memcached or preload library fails
//! with what to install or build.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use serde_json::Value;
use waffle_core::stats::{CacheSnapshot, PreloadSection, StatsSnapshot, TablespaceSnapshot};
pub use waffle_nodes::Node;
pub use waffle_testkit::mariadb::{self as server, Preload, Server, ServerOptions, Tools};

/// The test servers' InnoDB buffer pool: the smallest MariaDB takes, so pages really go through the cache.
pub const POOL: u64 = 6 << 20;
/// A small redo log: checkpoints come often, so InnoDB writes pages (through the preload) often.
pub const SERVER_ARGS: [&str; 3] =
    ["--innodb-log-file-size=16M", "--innodb-flush-log-at-trx-commit=2", "--skip-log-bin"];

pub fn server_args() -> Vec<String> {
    SERVER_ARGS.iter().map(|s| s.to_string()).collect()
}

pub use waffle_testkit::temp_dir::TempDir;

pub fn tools() -> &'static Tools {
    static T: OnceLock<Tools> = OnceLock::new();
    T.get_or_init(|| {
        let t = Tools::find().unwrap_or_else(|e| panic!("{e}"));
        t.sysbench().unwrap_or_else(|e| panic!("{e}"));
        t
    })
}

/// One MariaDB test at a time in a test binary (2 cores; and predictable run times).
pub fn serial() -> MutexGuard<'static, ()> {
    static M: Mutex<()> = Mutex::new(());
    M.lock().unwrap_or_else(|p| p.into_inner())
}

/// What a one-server test starts from: the turn (serial), a temp dir, a node of `node_mib`,
/// and a fresh data directory `db` in that dir.
pub struct OneServer {
    pub turn: MutexGuard<'static, ()>,
    pub dir: TempDir,
    pub node: Node,
    pub data: PathBuf,
}

pub fn one_server(name: &str, node_mib: u32) -> OneServer {
    let turn = serial();
    let dir = TempDir::new(name);
    let node = start_node(node_mib);
    let data = fresh_datadir(&dir, "db");
    OneServer { turn, dir, node, data }
}

fn mariadb_version() -> String {
    let out = std::process::Command::new(&tools().mariadbd).arg("--version").output().expect("mariadbd --version");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .find(|w| w.contains("MariaDB") || w.chars().next().is_some_and(|c| c.is_ascii_digit()))
        .unwrap_or("unknown")
        .replace('/', "_")
}

/// A freshly installed datadir to copy from: made once per MariaDB version
/// under the target dir (installing takes seconds; copying is faster).
pub fn template() -> &'static Path {
    static T: OnceLock<PathBuf> = OnceLock::new();
    T.get_or_init(|| {
        let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        let dir = base.join(format!("waffle-mysql-template-{}", mariadb_version()));
        if dir.join("ready").is_file() {
            return dir;
        }
        let tmp = base.join(format!("waffle-mysql-template-tmp-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        server::install_datadir(tools(), &tmp, &server_args()).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(tmp.join("ready"), b"").unwrap();
        if std::fs::rename(&tmp, &dir).is_err() {
            // Another test binary made it meanwhile.
            let _ = std::fs::remove_dir_all(&tmp);
        }
        assert!(dir.join("ready").is_file(), "template datadir {} missing", dir.display());
        dir
    })
}

/// A copy of the template at `dir/name`.
pub fn fresh_datadir(dir: &TempDir, name: &str) -> PathBuf {
    let to = dir.join(name);
    server::copy_datadir(template(), &to).unwrap_or_else(|e| panic!("{e}"));
    let _ = std::fs::remove_file(to.join("ready"));
    to
}

/// `libwaffle_preload.so`: `$WAFFLE_PRELOAD_SO`, or the one built for the
/// profile these tests run under, not older than its sources (waffle-testkit's
/// `artefact`; fails and says how to build it).
pub fn preload_so() -> PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| waffle_testkit::artefact("libwaffle_preload.so")).clone()
}

pub fn start_node(mib: u32) -> Node {
    Node::start(mib).unwrap_or_else(|e| panic!("cannot start memcached ({e}): apt-get install memcached"))
}

pub fn grid_of(nodes: &[&Node]) -> String {
    nodes.iter().map(|n| n.addr()).collect::<Vec<_>>().join(",")
}

/// Options of a server under the preload: a tiny buffer pool, `local` of L1, the grid.
pub fn waffle_options(grid: &str, local: &str, extra_env: &[(&str, &str)]) -> ServerOptions {
    let mut env = vec![
        ("WAFFLE_GRID".to_string(), grid.to_string()),
        ("WAFFLE_LOCAL".to_string(), local.to_string()),
        ("WAFFLE_STATS_INTERVAL_MS".to_string(), "200".to_string()),
        // The grid path is what these servers test: asked always, however fast the disk.
        ("WAFFLE_GRID_BACKOFF".to_string(), "off".to_string()),
    ];
    for (k, v) in extra_env {
        env.retain(|(e, _)| e != k);
        env.push((k.to_string(), v.to_string()));
    }
    let mut o = ServerOptions::waffle(POOL, Preload { library: preload_so(), env });
    o.extra_args = server_args();
    o
}

pub fn stock_options(pool: u64) -> ServerOptions {
    let mut o = ServerOptions::stock(pool);
    o.extra_args = server_args();
    o
}

pub fn start(datadir: &Path, options: ServerOptions) -> Server {
    Server::start(tools(), datadir, options).unwrap_or_else(|e| panic!("{e}"))
}

/// Creates `w.t` (id, v, a 1500-byte pad: about two rows a 16 KiB page) with rows 1..=`rows`,
/// `v` set by the SQL expression `v` of `i` (the row's id).
pub fn create_padded_table(s: &Server, rows: u64, v: &str) {
    let script = format!(
        "SET SESSION max_recursive_iterations = 100000;
         CREATE DATABASE w;
         CREATE TABLE w.t (id INT PRIMARY KEY, v BIGINT NOT NULL, pad VARCHAR(2000) NOT NULL) ENGINE=InnoDB;
         INSERT INTO w.t WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < {rows})
           SELECT i, {v}, REPEAT(CHAR(65 + i % 26), 1500) FROM c;"
    );
    s.sql_script(&script, Duration::from_secs(120)).unwrap();
}

/// The stats file as the typed snapshot (prefer its fields to string keys).
/// Not yet written (null) or not a stats object: an empty one, so counters
/// read 0 as `stat` says for an absent key.
pub fn snapshot_of(v: &Value) -> StatsSnapshot {
    StatsSnapshot::from_json(v).unwrap_or_default()
}

/// The cache's counters and levels of the stats file (zeros without a cache yet).
pub fn cache_of(v: &Value) -> CacheSnapshot {
    snapshot_of(v).cache.unwrap_or_default()
}

/// The preload's section of the stats file: its counters, switch, tablespaces (empty without one yet).
pub fn preload_of(v: &Value) -> PreloadSection {
    snapshot_of(v).preload.unwrap_or_default()
}

/// One tablespace's row of the stats file (zeros while it has none).
pub fn tablespace_of(v: &Value, name: &str) -> TablespaceSnapshot {
    preload_of(v).tablespaces.remove(name).unwrap_or_default()
}

/// A counter of the stats JSON (`a.b` for nested ones); 0 if absent (where a test reads the JSON itself).
pub fn stat(v: &Value, key: &str) -> u64 {
    let mut cur = v;
    for part in key.split('.') {
        cur = &cur[part];
    }
    cur.as_u64().unwrap_or(0)
}

pub fn sum(v: &Value, key: &str) -> u64 {
    let mut cur = v;
    for part in key.split('.') {
        cur = &cur[part];
    }
    cur.as_object().map_or(0, |m| m.values().filter_map(Value::as_u64).sum())
}

/// The stats file, once it shows at least `min_reads` page reads (bounded wait).
pub fn stats_after(s: &Server, what: &str, cond: impl FnMut(&Value) -> bool) -> Value {
    s.wait_stats(Duration::from_secs(20), cond).unwrap_or_else(|| {
        panic!(
            "{what}: the stats file {} never got there; last: {:?}\nlog:\n{}",
            s.stats_path().display(),
            s.stats(),
            s.log()
        )
    })
}

/// The server's error log lines that are errors, other than the ones a test expects.
pub fn log_errors(s: &Server, allowed: &[&str]) -> Vec<String> {
    s.log()
        .lines()
        .filter(|l| l.contains("[ERROR]"))
        .filter(|l| !allowed.iter().any(|a| l.contains(a)))
        .map(str::to_string)
        .collect()
}

/// sysbench's arguments for `sbtest` on `s`.
pub fn sysbench_args(s: &Server, tables: u32, rows: u64, rest: &[&str]) -> Vec<String> {
    let mut a = server::sysbench_args(s, tables, rows);
    a.extend(rest.iter().map(|x| x.to_string()));
    a
}

pub fn sysbench_prepare(s: &Server, tables: u32, rows: u64) {
    s.sql("CREATE DATABASE IF NOT EXISTS sbtest").unwrap();
    let args = sysbench_args(s, tables, rows, &["--threads=2", "oltp_read_write", "prepare"]);
    server::sysbench(tools(), &args, Duration::from_secs(300)).unwrap_or_else(|e| panic!("{e}"));
}

pub fn sbtest_tables(n: u32) -> Vec<String> {
    (1..=n).map(|i| format!("sbtest.sbtest{i}")).collect()
}

pub fn refs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}
