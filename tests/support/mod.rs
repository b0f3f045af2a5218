//! Shared helpers of the end-to-end tests: temp dirs, memcached nodes, opening
//! databases through `waffle`, reading its stats, talking to a node directly,
//! and finding which page of a database file holds a row.
//!
//! Every helper fails loudly (panics with what is missing and how to get it):
//! an end-to-end test never skips.
#![allow(dead_code)]

pub mod fake_node;
pub mod mem_file;
pub mod workload;
pub mod writers;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use rusqlite::Connection;
pub use waffle_nodes::Node;

// ---------------------------------------------------------------- temp dirs

/// A fresh directory under the system temp dir (on the real disk here),
/// removed when dropped.
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
        let path = std::env::temp_dir().join(format!(
            "waffle-e2e-{name}-{}-{}-{nanos}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()));
        TempDir { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

// ---------------------------------------------------------------- nodes

/// A real memcached on a free loopback port (killed when dropped).
pub fn start_node(memory_mib: u32) -> Node {
    Node::start(memory_mib).unwrap_or_else(|e| {
        panic!(
            "cannot start memcached ({e}). The end-to-end tests need memcached 1.6 \
             (Debian: apt-get install memcached, or set WAFFLE_MEMCACHED=/path/to/memcached)"
        )
    })
}

/// "addr1,addr2,..." for `waffle_grid`.
pub fn grid_of(nodes: &[&Node]) -> String {
    nodes.iter().map(|n| n.addr()).collect::<Vec<_>>().join(",")
}

// ---------------------------------------------------------------- opening databases

// Opening through waffle and reading its stats are shared with the child programs.
#[allow(unused_imports)] // every test file has its own copy of this module and uses some of them
pub use waffle_testkit::db::{
    cache_id, drop_pager_cache, flush, n, open_waffle, register, stats, try_open_waffle, uri_flags, waffle_uri,
};

/// A plain database: SQLite's default VFS, nothing of ours in the way.
pub fn open_plain(path: &Path) -> Connection {
    let conn = Connection::open(path).unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    conn.busy_timeout(Duration::from_secs(10)).unwrap();
    conn
}

// ---------------------------------------------------------------- talking to a node directly

/// The grid key of a page (waffle page index = SQLite page number - 1).
pub fn key(cache_id: u64, page_index: u64) -> String {
    waffle_core::envelope::key(cache_id, page_index)
}

/// `mg <key> v` on a fresh connection: the value, or None on `EN`. Does not
/// change the item (no T flag).
pub fn mg(addr: &str, key: &str) -> Option<Vec<u8>> {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect to memcached at {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(format!("mg {key} v\r\n").as_bytes()).unwrap();
    let mut r = BufReader::new(s);
    let mut line = String::new();
    r.read_line(&mut line).unwrap_or_else(|e| panic!("mg {key} on {addr}: no reply ({e})"));
    if line == "EN\r\n" {
        return None;
    }
    let mut words = line.split_whitespace();
    assert_eq!(words.next(), Some("VA"), "mg {key} on {addr}: unexpected reply {line:?}");
    let len: usize = words.next().and_then(|w| w.parse().ok()).unwrap_or_else(|| panic!("bad VA line {line:?}"));
    let mut data = vec![0u8; len + 2];
    r.read_exact(&mut data).unwrap();
    assert_eq!(&data[len..], b"\r\n");
    data.truncate(len);
    Some(data)
}

/// A connection to one node for writing and peeking at values the way another
/// client of the same memcached would (tests of hostile or foreign values).
pub struct RawClient {
    addr: String,
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl RawClient {
    pub fn connect(addr: &str) -> RawClient {
        let s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect to memcached at {addr}: {e}"));
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.set_nodelay(true).unwrap();
        RawClient { addr: addr.to_string(), writer: s.try_clone().unwrap(), reader: BufReader::new(s) }
    }

    fn line(&mut self, what: &str) -> String {
        let mut line = String::new();
        self.reader.read_line(&mut line).unwrap_or_else(|e| panic!("{what} on {}: no reply ({e})", self.addr));
        line
    }

    /// `ms <key> <len> T0` and the value; panics unless the node says `HD`.
    pub fn set(&mut self, key: &str, value: &[u8]) {
        let mut req = format!("ms {key} {} T0\r\n", value.len()).into_bytes();
        req.extend_from_slice(value);
        req.extend_from_slice(b"\r\n");
        self.writer.write_all(&req).unwrap();
        let line = self.line("ms");
        assert_eq!(line, "HD\r\n", "ms {key} ({} bytes) on {}", value.len(), self.addr);
    }

    /// `mg <key> v`: the value without changing the item (no T flag), None on `EN`.
    pub fn peek(&mut self, key: &str) -> Option<Vec<u8>> {
        self.writer.write_all(format!("mg {key} v\r\n").as_bytes()).unwrap();
        let line = self.line("mg");
        if line == "EN\r\n" {
            return None;
        }
        let mut words = line.split_whitespace();
        assert_eq!(words.next(), Some("VA"), "mg {key} on {}: unexpected reply {line:?}", self.addr);
        let len: usize = words.next().and_then(|w| w.parse().ok()).unwrap_or_else(|| panic!("bad VA line {line:?}"));
        let mut data = vec![0u8; len + 2];
        self.reader.read_exact(&mut data).unwrap();
        assert_eq!(&data[len..], b"\r\n");
        data.truncate(len);
        Some(data)
    }

    /// `md <key>`: true if it was there.
    pub fn delete(&mut self, key: &str) -> bool {
        self.writer.write_all(format!("md {key}\r\n").as_bytes()).unwrap();
        match self.line("md").as_str() {
            "HD\r\n" => true,
            "NF\r\n" => false,
            other => panic!("md {key} on {}: unexpected reply {other:?}", self.addr),
        }
    }

    /// `ms` of `value` under `key` on every node (the key's owner is one of them).
    pub fn set_everywhere(clients: &mut [RawClient], key: &str, value: &[u8]) {
        for c in clients {
            c.set(key, value);
        }
    }
}

/// `ms <key> <len> T0` on a fresh connection (see [`RawClient`]).
pub fn ms(addr: &str, key: &str, value: &[u8]) {
    RawClient::connect(addr).set(key, value);
}

/// memcached's `stats` as name -> value.
pub fn node_stats(addr: &str) -> HashMap<String, String> {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect to memcached at {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"stats\r\n").unwrap();
    let mut out = HashMap::new();
    for line in BufReader::new(s).lines() {
        let line = line.unwrap();
        if line == "END" {
            break;
        }
        let mut w = line.split_whitespace();
        if let (Some("STAT"), Some(k), Some(v)) = (w.next(), w.next(), w.next()) {
            out.insert(k.to_string(), v.to_string());
        }
    }
    out
}

/// One numeric field of memcached's `stats`, e.g. `node_stat(addr, "evictions")`.
pub fn node_stat(addr: &str, name: &str) -> u64 {
    let all = node_stats(addr);
    all.get(name).and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("memcached at {addr} has no stat {name}"))
}

/// The identity an envelope names: (cache_id, page index, version).
pub fn envelope_identity(v: &[u8]) -> (u64, u64, u64) {
    assert!(v.len() >= waffle_core::envelope::HEADER_BYTES, "not an envelope: {} bytes", v.len());
    assert_eq!(&v[0..4], b"WAFL", "not an envelope (magic)");
    let u = |at: usize| u64::from_le_bytes(v[at..at + 8].try_into().unwrap());
    (u(8), u(16), u(24))
}

// ---------------------------------------------------------------- the database file itself

/// Reads the database file and returns, for every row of every table b-tree
/// leaf, its rowid and the SQLite page number (1-based) holding it. Page 1
/// (sqlite_schema) is left out. Only meaningful for a file without free pages
/// (old leaves would be listed too) and rowids unique across tables.
pub fn leaf_pages_by_rowid(db: &Path, page_size: usize) -> HashMap<i64, u64> {
    let bytes = std::fs::read(db).unwrap_or_else(|e| panic!("read {}: {e}", db.display()));
    assert_eq!(bytes.len() % page_size, 0, "{} is not whole pages of {page_size}", db.display());
    let mut out = HashMap::new();
    for (i, page) in bytes.chunks(page_size).enumerate() {
        if i == 0 || page[0] != 0x0d {
            continue; // page 1, or not a table leaf
        }
        let cells = u16::from_be_bytes([page[3], page[4]]) as usize;
        for c in 0..cells {
            let at = 8 + 2 * c;
            let mut off = u16::from_be_bytes([page[at], page[at + 1]]) as usize;
            let (_payload, used) = varint(&page[off..]);
            off += used;
            let (rowid, _) = varint(&page[off..]);
            out.insert(rowid as i64, i as u64 + 1);
        }
    }
    out
}

/// SQLite's big-endian varint: (value, bytes used).
fn varint(b: &[u8]) -> (u64, usize) {
    let mut v: u64 = 0;
    for (i, &byte) in b.iter().enumerate().take(9) {
        if i == 8 {
            return ((v << 8) | byte as u64, 9);
        }
        v = (v << 7) | (byte & 0x7f) as u64;
        if byte & 0x80 == 0 {
            return (v, i + 1);
        }
    }
    panic!("truncated varint")
}

// ---------------------------------------------------------------- soak

/// `WAFFLE_SOAK_SECONDS` (set by `scripts/soak`): 0 in a normal test run.
/// Fault tests scale their rounds with it.
pub fn soak_seconds() -> u64 {
    std::env::var("WAFFLE_SOAK_SECONDS").ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0)
}

/// Rounds of a fault test: `normal` in a test run, about one per `per_round`
/// seconds of `WAFFLE_SOAK_SECONDS` under `scripts/soak` (never fewer).
pub fn soak_rounds(normal: u64, per_round: u64) -> u64 {
    normal.max(soak_seconds() / per_round.max(1))
}

/// A test's seed, varied by `WAFFLE_SOAK_SEED` (set by `scripts/soak`, one
/// per pass; printed in every failure's tag, so a failure is replayed with
/// `WAFFLE_SOAK_SEED=<n> cargo test ...`).
pub fn soak_seed(base: u64) -> u64 {
    let extra: u64 = std::env::var("WAFFLE_SOAK_SEED").ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0);
    base ^ extra.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

// Shared with the child programs: deterministic pseudo-random bytes, waiting for a condition.
#[allow(unused_imports)] // every test file has its own copy of this module and uses some of them
pub use waffle_testkit::{pattern, wait_for, wait_until};

// ---------------------------------------------------------------- child processes

/// A child process killed (and reaped) when dropped, so a failing test leaves none behind.
pub struct KillOnDrop(pub std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Spawns `cmd` (a child program of waffle-testkit) with stdout piped and
/// waits (at most `limit`) for a line containing "ready "; returns the child
/// and the rest of that line.
pub fn spawn_until_ready(cmd: &mut std::process::Command, limit: Duration) -> (KillOnDrop, String) {
    use std::process::Stdio;
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    let mut child = KillOnDrop(child);
    let stdout = child.0.stdout.take().expect("stdout is piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(at) = line.find("ready ") {
                let _ = tx.send(line[at + 6..].to_string());
                break;
            }
        }
    });
    let ready = rx.recv_timeout(limit).expect("the child never got ready");
    (child, ready)
}
