//! How much memory a node has: memcached's `limit_maxbytes` (its `-m`).
//!
//! Asked with the text protocol's `stats` on a connection of its own (the
//! pooled ones speak the meta protocol, and this must not count as a request
//! or mark the node down), only when the stats are read and at most every
//! [`REFRESH`] per node, never on a read or a push. While one caller asks,
//! the others get the last figure. A node that does not answer keeps the
//! last figure it gave (memory does not change without a restart).
//! The figure sizes the working-set advice; nothing else depends on it.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A node is asked again after this long.
pub const REFRESH: Duration = Duration::from_secs(10);
/// Connect, write and read of one ask, in all.
const ASK_DEADLINE: Duration = Duration::from_millis(100);
/// memcached's `stats` reply is about 3 KiB; more is not memcached.
const MAX_REPLY_BYTES: usize = 64 << 10;

/// A grid's memory as far as known: `limit_maxbytes` summed over the nodes
/// that are up and said it (`known_nodes` of its `nodes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GridMemory {
    pub bytes: u64,
    pub nodes: usize,
    pub known_nodes: usize,
}

#[derive(Default)]
struct State {
    asked_at: Option<Instant>,
    limit_bytes: Option<u64>,
}

#[derive(Default)]
pub struct NodeMemory {
    state: Mutex<State>,
}

impl NodeMemory {
    /// The last figure known, without asking.
    pub fn known(&self) -> Option<u64> {
        self.lock().limit_bytes
    }

    /// The node's memory, asked first when the last ask is older than
    /// [`REFRESH`] and the node is up (a down node would only time out).
    pub fn refresh(&self, addr: Option<SocketAddr>, up: bool) -> Option<u64> {
        let addr = match addr {
            Some(a) if up => a,
            _ => return self.known(),
        };
        {
            let mut s = self.lock();
            if s.asked_at.is_some_and(|t| t.elapsed() < REFRESH) {
                return s.limit_bytes;
            }
            s.asked_at = Some(Instant::now()); // this caller asks; others meanwhile get the last figure
        }
        let asked = ask(addr, Instant::now() + ASK_DEADLINE);
        let mut s = self.lock();
        if asked.is_some() {
            s.limit_bytes = asked;
        }
        s.limit_bytes
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// `stats` on a new connection to `addr`, every wait bounded by `deadline`.
fn ask(addr: SocketAddr, deadline: Instant) -> Option<u64> {
    let left = || deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero());
    let mut stream = TcpStream::connect_timeout(&addr, left()?).ok()?;
    stream.set_write_timeout(Some(left()?)).ok()?;
    stream.write_all(b"stats\r\n").ok()?;
    let mut reply = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    // Bounded: each pass reads at least one byte before the deadline, and the reply is capped.
    while reply.len() < MAX_REPLY_BYTES {
        stream.set_read_timeout(Some(left()?)).ok()?;
        let n = stream.read(&mut chunk).ok()?;
        if n == 0 {
            break;
        }
        reply.extend_from_slice(&chunk[..n]);
        if reply.ends_with(b"END\r\n") || reply.ends_with(b"ERROR\r\n") {
            break;
        }
    }
    parse_limit(&reply)
}

/// `limit_maxbytes` from a complete `stats` reply (`STAT <name> <value>` lines, then `END`).
pub fn parse_limit(reply: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(reply).ok()?;
    let mut limit = None;
    for line in text.split("\r\n") {
        if line == "END" {
            return limit;
        }
        let mut words = line.split(' ');
        if let (Some("STAT"), Some("limit_maxbytes"), Some(value), None) =
            (words.next(), words.next(), words.next(), words.next())
        {
            limit = value.parse().ok();
        }
    }
    None // no END: cut short, not a stats reply
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_limit_from_a_whole_reply_only() {
        let reply = b"STAT pid 1\r\nSTAT limit_maxbytes 67108864\r\nSTAT threads 4\r\nEND\r\n";
        assert_eq!(parse_limit(reply), Some(64 << 20));
        assert_eq!(parse_limit(b"STAT limit_maxbytes 67108864\r\n"), None, "no END");
        assert_eq!(parse_limit(b"STAT pid 1\r\nEND\r\n"), None, "no limit");
        assert_eq!(parse_limit(b"ERROR\r\n"), None);
        assert_eq!(parse_limit(b"STAT limit_maxbytes lots\r\nEND\r\n"), None);
    }

    #[test]
    fn a_node_that_is_down_or_absent_is_not_asked() {
        let m = NodeMemory::default();
        // An address nothing listens on would fail; a down node is not even tried.
        let addr: SocketAddr = "127.0.0.1:9".parse().unwrap();
        assert_eq!(m.refresh(Some(addr), false), None);
        assert!(m.lock().asked_at.is_none(), "not asked");
        assert_eq!(m.refresh(None, true), None);
        assert!(m.lock().asked_at.is_none(), "not asked");
    }
}
