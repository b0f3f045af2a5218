//! Talking to a node directly, the way another client of the same memcached would: reading,
//! writing and deleting grid values, memcached's own `stats`, and what a grid key and an
//! envelope name (tests of exclusivity, staleness, sealing and hostile or foreign values).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// The grid key of a page (waffle page index = SQLite page number - 1).
pub fn key(cache_id: u64, page_index: u64) -> String {
    waffle_core::envelope::key(cache_id, page_index)
}

/// `mg <key> v` on a fresh connection: the value, or None on `EN`. Does not
/// change the item (no T flag).
pub fn mg(addr: &str, key: &str) -> Option<Vec<u8>> {
    RawClient::connect(addr).peek(key)
}

/// A connection to one node for writing and peeking at values the way another
/// client of the same memcached would.
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
    let addr: std::net::SocketAddr = addr.parse().unwrap_or_else(|e| panic!("{addr}: {e}"));
    waffle_nodes::stats(addr).unwrap_or_else(|e| panic!("stats of {addr}: {e}"))
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

/// The page an unsealed envelope holds, decompressed if the cache compressed
/// it (its own header names the identity; None: not a whole page of `page_bytes`).
pub fn page_of(v: &[u8], page_bytes: usize) -> Option<Vec<u8>> {
    if v.len() < waffle_core::envelope::HEADER_BYTES {
        return None;
    }
    let (cache_id, page, version) = envelope_identity(v);
    let mut out = vec![0u8; page_bytes];
    let id = waffle_core::envelope::Identity { cache_id, page, version };
    waffle_core::envelope::open_into(v, id, None, &mut out).ok()?;
    Some(out)
}
