//! How much memory a node has: memcached's `limit_maxbytes` (its `-m`).
//!
//! Asked with the text protocol's `stats` on a connection of its own (the
//! pooled ones speak the meta protocol, and this must not count as a request
//! or mark the node down), only when the stats are read and at most every
//! [`REFRESH`] per node, never on a read or a push. While one caller asks,
//! the others get the last figure. A node that does not answer keeps the
//! last figure it gave (memory does not change without a restart).
//! The figure sizes the working-set advice; nothing else depends on it.
//!
//! The same reply tells a node's flash tier (memcached's extstore), if it has
//! one: [`FlashStatus`]. memcached's `mg` has no flag that says a value came
//! from flash (protocol.txt, 1.6.18): the counters here are memcached's own,
//! over all its clients; which tier served this client's own hits, and what
//! they took, comes from a sample of the node's log (tier_sample.rs), taken
//! at the same asks.

use std::collections::HashMap;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::text_reply::read_reply;
use super::tier_sample::{TierLatency, TierSampler};

/// A node is asked again after this long.
pub const REFRESH: Duration = Duration::from_secs(10);
/// After an ask that got no answer, the next read asks again after this long:
/// one ask lost to a stall of a loaded host leaves the figure unknown for a
/// second, not for REFRESH (a short-lived process may never have learnt it).
const RETRY: Duration = Duration::from_secs(1);
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
    /// When the next read may ask (None: never asked).
    next_ask_at: Option<Instant>,
    limit_bytes: Option<u64>,
    flash: Option<FlashStatus>,
}

/// A node's flash tier (extstore) from its `stats`: node-wide counters, every client's
/// requests together, as of the last ask (at most [`REFRESH`] old).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct FlashStatus {
    /// The flash file's size (`extstore_limit_maxbytes`).
    pub bytes: u64,
    /// Values on flash now (`extstore_objects_used`); each keeps its header in RAM.
    pub items: u64,
    /// Hits served from RAM: `get_hits - get_extstore` (memcached counts a flash read as a hit
    /// before it knows whether the read succeeds).
    pub node_ram_hits: u64,
    /// Hits served from flash: `get_extstore - miss_from_extstore`. A value still in
    /// extstore's write buffer counts here too: memcached does not tell them apart.
    pub node_flash_hits: u64,
    /// Flash reads that found nothing usable (`miss_from_extstore`): the file was cut or its
    /// page reused.
    pub node_flash_misses: u64,
    /// Of those, values whose CRC failed (`badcrc_from_extstore`): a damaged flash file.
    pub node_flash_bad_crc: u64,
    /// Of the node's hits between the last two asks, the share served from flash (None until
    /// two asks with hits between them).
    pub recent_flash_share: Option<f64>,
    /// This client's own hits in the last sample that ended (the window after an ask), by the
    /// tier the node's log says served them, with their median round trips (None until a sample
    /// ended; see tier_sample.rs).
    pub tier_latency: Option<TierLatency>,
}

impl FlashStatus {
    /// The flash figures of a `stats` reply (None: the node has no extstore), with the recent
    /// share against the `last` figures.
    fn of(stats: &HashMap<&str, u64>, last: Option<&FlashStatus>) -> Option<FlashStatus> {
        let get = |name| stats.get(name).copied().unwrap_or(0);
        let bytes = *stats.get("extstore_limit_maxbytes")?;
        let flash_reads = get("get_extstore");
        let mut f = FlashStatus {
            bytes,
            items: get("extstore_objects_used"),
            node_ram_hits: get("get_hits").saturating_sub(flash_reads),
            node_flash_hits: flash_reads.saturating_sub(get("miss_from_extstore")),
            node_flash_misses: get("miss_from_extstore"),
            node_flash_bad_crc: get("badcrc_from_extstore"),
            recent_flash_share: None,
            tier_latency: None,
        };
        f.recent_flash_share = last.and_then(|l| f.share_since(l));
        Some(f)
    }

    fn share_since(&self, last: &FlashStatus) -> Option<f64> {
        let flash = self.node_flash_hits.checked_sub(last.node_flash_hits)?;
        let ram = self.node_ram_hits.checked_sub(last.node_ram_hits)?; // None: the node restarted
        (flash + ram > 0).then(|| flash as f64 / (flash + ram) as f64)
    }
}

#[derive(Default)]
pub struct NodeMemory {
    state: Mutex<State>,
    /// Which tier served this client's hits: sampled at the asks of a node with flash.
    tiers: TierSampler,
}

impl NodeMemory {
    /// The last figure known, without asking.
    pub fn known(&self) -> Option<u64> {
        self.lock().limit_bytes
    }

    /// The node's flash tier as last asked (None: no extstore, or not asked yet).
    pub fn flash(&self) -> Option<FlashStatus> {
        self.lock().flash.clone()
    }

    /// A hit of this client on the node, for the tier sample under way (if any).
    pub fn note_hit(&self, key: &[u8], took: Duration) {
        self.tiers.note_hit(key, took);
    }

    /// Ends a tier sample whose window is over (a client that stopped reading ends it too).
    pub fn end_overdue_sample(&self) {
        self.tiers.end_if_overdue();
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
            if s.next_ask_at.is_some_and(|t| Instant::now() < t) {
                return s.limit_bytes;
            }
            s.next_ask_at = Some(Instant::now() + REFRESH); // this caller asks; others meanwhile get the last figure
        }
        let asked = ask(addr, Instant::now() + ASK_DEADLINE);
        // Only a node with flash is sampled: without it every hit is from RAM.
        let has_flash = asked.as_ref().is_some_and(|r| r.contains_key("extstore_limit_maxbytes"));
        let tiers = has_flash.then(|| self.tiers.rotate(addr, Instant::now() + ASK_DEADLINE)).flatten();
        let mut s = self.lock();
        match asked {
            Some(reply) => {
                s.limit_bytes = reply.get("limit_maxbytes").copied();
                let last_tiers = s.flash.as_ref().and_then(|f| f.tier_latency.clone());
                s.flash = FlashStatus::of(&reply, s.flash.as_ref());
                if let Some(f) = &mut s.flash {
                    // No sample ended at this ask (the last watcher did not open): the last one stands.
                    f.tier_latency = tiers.or(last_tiers);
                }
            }
            None => s.next_ask_at = Some(Instant::now() + RETRY),
        }
        s.limit_bytes
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// `stats` on a new connection to `addr`, every wait bounded by `deadline`: its numeric figures.
fn ask(addr: SocketAddr, deadline: Instant) -> Option<HashMap<&'static str, u64>> {
    let left = || deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero());
    let mut stream = TcpStream::connect_timeout(&addr, left()?).ok()?;
    stream.set_write_timeout(Some(left()?)).ok()?;
    stream.write_all(b"stats\r\n").ok()?;
    let reply = read_reply(&mut stream, MAX_REPLY_BYTES, deadline)?;
    parse_limit(&reply)?;
    Some(parse_figures(&reply))
}

/// The figures of a `stats` reply this module reads, by name.
fn parse_figures(reply: &[u8]) -> HashMap<&'static str, u64> {
    const NAMES: [&str; 7] = [
        "limit_maxbytes",
        "get_hits",
        "get_extstore",
        "miss_from_extstore",
        "badcrc_from_extstore",
        "extstore_objects_used",
        "extstore_limit_maxbytes",
    ];
    let text = String::from_utf8_lossy(reply);
    let mut out = HashMap::new();
    for line in text.split("\r\n") {
        let mut words = line.split(' ');
        if let (Some("STAT"), Some(name), Some(value)) = (words.next(), words.next(), words.next()) {
            if let (Some(known), Ok(v)) = (NAMES.iter().find(|n| **n == name), value.parse()) {
                out.insert(*known, v);
            }
        }
    }
    out
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
    use std::io::Read;

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
    fn flash_figures_come_from_extstore_counters_and_their_deltas() {
        let reply = |hits: u64, ext: u64, miss: u64| {
            format!(
                "STAT get_hits {hits}\r\nSTAT get_extstore {ext}\r\nSTAT miss_from_extstore {miss}\r\n\
                 STAT badcrc_from_extstore 1\r\nSTAT extstore_objects_used 7\r\n\
                 STAT extstore_limit_maxbytes 67108864\r\nSTAT limit_maxbytes 8388608\r\nEND\r\n"
            )
        };
        let first = FlashStatus::of(&parse_figures(reply(100, 30, 2).as_bytes()), None).unwrap();
        assert_eq!((first.node_ram_hits, first.node_flash_hits, first.node_flash_misses), (70, 28, 2));
        assert_eq!((first.bytes, first.items, first.node_flash_bad_crc), (64 << 20, 7, 1));
        assert_eq!(first.recent_flash_share, None);
        let next = FlashStatus::of(&parse_figures(reply(200, 60, 2).as_bytes()), Some(&first)).unwrap();
        assert_eq!(next.recent_flash_share, Some(0.3), "30 of 100 hits since");
        let restarted = FlashStatus::of(&parse_figures(reply(10, 0, 0).as_bytes()), Some(&next)).unwrap();
        assert_eq!(restarted.recent_flash_share, None, "counters went back: no delta");
        let no_flash = b"STAT get_hits 5\r\nSTAT limit_maxbytes 8388608\r\nEND\r\n";
        assert_eq!(FlashStatus::of(&parse_figures(no_flash), None), None);
    }

    #[test]
    fn a_node_that_is_down_or_absent_is_not_asked() {
        let m = NodeMemory::default();
        // An address nothing listens on would fail; a down node is not even tried.
        let addr: SocketAddr = "127.0.0.1:9".parse().unwrap();
        assert_eq!(m.refresh(Some(addr), false), None);
        assert!(m.lock().next_ask_at.is_none(), "not asked");
        assert_eq!(m.refresh(None, true), None);
        assert!(m.lock().next_ask_at.is_none(), "not asked");
    }

    #[test]
    fn an_ask_without_an_answer_is_tried_again_after_a_second_not_after_refresh() {
        // A listener that never answers: the ask times out (ASK_DEADLINE).
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let m = NodeMemory::default();
        let before = Instant::now();
        assert_eq!(m.refresh(Some(silent.local_addr().unwrap()), true), None);
        let next = m.lock().next_ask_at.expect("asked");
        assert!(next <= Instant::now() + RETRY && next >= before + RETRY, "retried after RETRY");
        // An answering node: its figure, then REFRESH before the next ask.
        let answering = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = answering.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut conn, _) = answering.accept().unwrap();
            let mut request = [0u8; 7];
            conn.read_exact(&mut request).unwrap();
            conn.write_all(b"STAT limit_maxbytes 16777216\r\nEND\r\n").unwrap();
        });
        m.lock().next_ask_at = None;
        let asked_at = Instant::now();
        let got = m.refresh(Some(addr), true);
        server.join().unwrap();
        if got.is_some() {
            assert_eq!(got, Some(16 << 20));
            assert!(m.lock().next_ask_at.unwrap() >= asked_at + REFRESH, "a figure holds for REFRESH");
        } // else: this host stalled past ASK_DEADLINE; the retry above is what that case checks
    }
}
