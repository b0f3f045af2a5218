//! Which tier of a node served this client's hits, and what each tier's hits took.
//!
//! memcached's `mg` reply does not say whether a value came from flash, but
//! its log stream does: `watch fetchers` writes one line per fetch, every
//! client's (`… type=item_get key=K status=found clsid=C cfd=F size=S`), and
//! a value kept on flash is a small header item in RAM whose slab class's
//! chunk (`stats slabs`) is smaller than the value it stands for. Measured on
//! 1.6.18: a 4,000-byte value logs `clsid=18 size=4000` from RAM and
//! `clsid=1 size=4000` from flash.
//!
//! A sample per node with flash, taken only when its stats are asked
//! (memory.rs: at most every 10 s, never on a read or a push): the ask opens
//! a watcher; the hits this client then notes, at most [`SAMPLE_HITS`] within
//! [`WINDOW`], keep their key's fingerprint and round trip; then the intake
//! stops and the watcher's write side is shut, so memcached closes it: the
//! node logs its fetches for at most a WINDOW per ask. The next ask reads what
//! the watcher got, joins it with the hits by key and keeps each tier's count
//! and median: [`TierLatency`].
//!
//! The log is the grid's network speaking: read up to [`MAX_LOG_BYTES`] within
//! the ask's deadline, parsed leniently, and used only to label this client's
//! own hits. A line it cannot read labels nothing.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// Hits kept per sample: enough for a median per tier, little to hold.
pub const SAMPLE_HITS: usize = 512;
/// How long a watcher takes hits after it opened.
pub const WINDOW: Duration = Duration::from_secs(1);
/// What one sample reads of the log at most (lines are about 110 bytes: some 9,500 fetches).
const MAX_LOG_BYTES: usize = 1 << 20;
/// A watcher that sends nothing this long has sent what the sample needs (its lines were
/// written within a second of the hits, long before the ask that reads them).
const SILENCE: Duration = Duration::from_millis(10);
/// memcached's `stats slabs` reply is a few KiB per class in use; more is not memcached.
const MAX_SLABS_BYTES: usize = 256 << 10;

/// This client's hits on a node in its last sample, by the tier that served them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TierLatency {
    /// Hits the node's log shows served from RAM.
    pub ram_hits: u64,
    /// Hits the node's log shows served from flash (extstore's write buffer included).
    pub flash_hits: u64,
    /// The median round trip of the RAM hits, link and the envelope's opening included.
    pub ram_median_us: Option<u64>,
    /// The same for the flash hits.
    pub flash_median_us: Option<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Served {
    Ram,
    Flash,
}

#[derive(Default)]
pub struct TierSampler {
    /// True while a watcher takes hits: the read path's only cost otherwise is this load.
    listening: AtomicBool,
    state: Mutex<Sampling>,
}

#[derive(Default)]
struct Sampling {
    watch: Option<Watch>,
    /// (fingerprint of the key, round trip in µs) of the hits noted since the watcher opened.
    hits: Vec<(u64, u64)>,
}

struct Watch {
    stream: TcpStream,
    opened_at: Instant,
    /// Each slab class's chunk size, when the watcher opened (classes do not change size).
    chunk_bytes: HashMap<u32, u64>,
}

impl TierSampler {
    /// A hit on `key` that took `took`: kept while a watcher takes hits.
    pub fn note_hit(&self, key: &[u8], took: Duration) {
        if !self.listening.load(Ordering::Relaxed) {
            return;
        }
        let mut s = self.lock();
        if s.hits.len() < SAMPLE_HITS {
            let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
            s.hits.push((fingerprint(key), us));
        }
        let full = s.hits.len() >= SAMPLE_HITS;
        self.end_intake_if(&mut s, full);
    }

    /// Stops the intake once the window is over, hits or not (the prober's tick calls it, so an
    /// idle client's watcher does not keep the node logging).
    pub fn end_if_overdue(&self) {
        if self.listening.load(Ordering::Relaxed) {
            let mut s = self.lock();
            self.end_intake_if(&mut s, false);
        }
    }

    fn end_intake_if(&self, s: &mut Sampling, now: bool) {
        debug_assert!(s.hits.len() <= SAMPLE_HITS);
        let Some(w) = &s.watch else {
            self.listening.store(false, Ordering::Relaxed);
            return;
        };
        if now || w.opened_at.elapsed() >= WINDOW {
            self.listening.store(false, Ordering::Relaxed);
            // memcached reads the end of the stream and drops the watcher; what it sent stays ours to read.
            let _ = w.stream.shutdown(Shutdown::Write);
        }
    }

    /// Ends the sample under way (its figures, None if none was under way) and opens the next
    /// watcher on `addr`; every wait bounded by `deadline`.
    pub fn rotate(&self, addr: SocketAddr, deadline: Instant) -> Option<TierLatency> {
        self.listening.store(false, Ordering::Relaxed);
        let (watch, hits) = {
            let mut s = self.lock();
            (s.watch.take(), std::mem::take(&mut s.hits))
        };
        let figures = watch.map(|mut w| {
            let log = read_available(&mut w.stream, deadline);
            latency_of(&hits, &served_by_key(&log, &w.chunk_bytes))
        });
        if let Some(watch) = open_watch(addr, deadline) {
            let mut s = self.lock();
            s.watch = Some(watch);
            s.hits.clear();
            self.listening.store(true, Ordering::Relaxed);
        }
        figures
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Sampling> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn fingerprint(key: &[u8]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    key.hash(&mut h);
    h.finish()
}

/// A watcher on `addr`: the slab classes' chunk sizes, then `watch fetchers` answered `OK`.
fn open_watch(addr: SocketAddr, deadline: Instant) -> Option<Watch> {
    let left = || deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero());
    let mut stream = TcpStream::connect_timeout(&addr, left()?).ok()?;
    stream.set_write_timeout(Some(left()?)).ok()?;
    stream.write_all(b"stats slabs\r\n").ok()?;
    let slabs =
        super::text_reply::read_reply(&mut stream, MAX_SLABS_BYTES, deadline).filter(|r| r.ends_with(b"END\r\n"))?;
    let chunk_bytes = parse_chunk_sizes(&slabs);
    stream.write_all(b"watch fetchers\r\n").ok()?;
    let ok = read_until(&mut stream, b"\r\n", 64, deadline)?;
    (ok == b"OK\r\n").then(|| Watch { stream, opened_at: Instant::now(), chunk_bytes })
}

/// Bytes up to and including the first `end`, at most `max` of them, before `deadline`.
fn read_until(stream: &mut TcpStream, end: &[u8], max: usize, deadline: Instant) -> Option<Vec<u8>> {
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    // One byte at a time: nothing after `end` may be taken from the stream (the log follows `OK`);
    // only the 4 bytes of `OK\r\n` are read so.
    while got.len() < max {
        let left = deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero())?;
        stream.set_read_timeout(Some(left)).ok()?;
        match stream.read(&mut byte) {
            Ok(1) => got.push(byte[0]),
            _ => return None,
        }
        if got.ends_with(end) {
            return Some(got);
        }
    }
    None
}

/// What the watcher has sent: until memcached closed it (it does within about a second of the
/// end of our stream), [`MAX_LOG_BYTES`], [`SILENCE`] without a byte, or `deadline`.
fn read_available(stream: &mut TcpStream, deadline: Instant) -> Vec<u8> {
    let mut log = Vec::new();
    let mut chunk = [0u8; 16 << 10];
    let _ = stream.shutdown(Shutdown::Write);
    while log.len() < MAX_LOG_BYTES {
        let Some(left) = deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero()) else { break };
        if stream.set_read_timeout(Some(left.min(SILENCE))).is_err() {
            break;
        }
        match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => log.extend_from_slice(&chunk[..n.min(MAX_LOG_BYTES - log.len())]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => break, // silence (or a fault): what came is the sample
        }
    }
    log
}

/// `STAT <class>:chunk_size <bytes>` lines of a `stats slabs` reply.
fn parse_chunk_sizes(reply: &[u8]) -> HashMap<u32, u64> {
    let text = String::from_utf8_lossy(reply);
    let mut out = HashMap::new();
    for line in text.split("\r\n") {
        let mut words = line.split(' ');
        if let (Some("STAT"), Some(name), Some(value)) = (words.next(), words.next(), words.next()) {
            if let Some((class, "chunk_size")) = name.split_once(':') {
                if let (Ok(c), Ok(v)) = (class.parse(), value.parse()) {
                    out.insert(c, v);
                }
            }
        }
    }
    out
}

/// The tier of each key found in the log (its first fetch there: a take's `md` follows its `mg`),
/// by fingerprint. A value larger than its item's chunk is not in that item: it is on flash.
fn served_by_key(log: &[u8], chunk_bytes: &HashMap<u32, u64>) -> HashMap<u64, Served> {
    let text = String::from_utf8_lossy(log);
    let mut out = HashMap::new();
    for line in text.split('\n') {
        let field = |name: &str| line.split(' ').find_map(|w| w.trim_end_matches('\r').strip_prefix(name));
        if field("type=") != Some("item_get") || field("status=") != Some("found") {
            continue;
        }
        let (Some(key), Some(class), Some(size)) = (field("key="), field("clsid="), field("size=")) else { continue };
        let (Ok(class), Ok(size)) = (class.parse::<u32>(), size.parse::<u64>()) else { continue };
        let Some(&chunk) = chunk_bytes.get(&class) else { continue };
        let served = if chunk < size { Served::Flash } else { Served::Ram };
        out.entry(fingerprint(key.as_bytes())).or_insert(served);
    }
    out
}

/// Each tier's count and median over the `hits` the log labels.
fn latency_of(hits: &[(u64, u64)], served: &HashMap<u64, Served>) -> TierLatency {
    let (mut ram, mut flash) = (Vec::new(), Vec::new());
    for (key, us) in hits {
        match served.get(key) {
            Some(Served::Ram) => ram.push(*us),
            Some(Served::Flash) => flash.push(*us),
            None => {}
        }
    }
    TierLatency {
        ram_hits: ram.len() as u64,
        flash_hits: flash.len() as u64,
        ram_median_us: median(&mut ram),
        flash_median_us: median(&mut flash),
    }
}

fn median(v: &mut [u64]) -> Option<u64> {
    v.sort_unstable();
    v.get(v.len() / 2).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SLABS: &[u8] = b"STAT 1:chunk_size 96\r\nSTAT 1:chunks_per_page 10922\r\nSTAT 18:chunk_size 4544\r\n\
                           STAT active_slabs 2\r\nEND\r\n";

    #[test]
    fn chunk_sizes_come_from_stats_slabs() {
        let sizes = parse_chunk_sizes(SLABS);
        assert_eq!(sizes.len(), 2);
        assert_eq!((sizes[&1], sizes[&18]), (96, 4544));
    }

    #[test]
    fn a_value_larger_than_its_items_chunk_was_served_from_flash() {
        // Lines as memcached 1.6.18 writes them (measured), and some it would not.
        let log = b"ts=1.1 gid=2 type=item_get key=wf1.a status=found clsid=18 cfd=24 size=4000\n\
                    ts=1.2 gid=3 type=item_get key=wf1.b status=found clsid=1 cfd=24 size=4000\n\
                    ts=1.3 gid=4 type=item_get key=wf1.b status=found clsid=18 cfd=24 size=4000\n\
                    ts=1.4 gid=5 type=item_get key=wf1.c status=not_found clsid=0 cfd=24 size=0\n\
                    ts=1.5 gid=6 type=item_get key=wf1.d status=found clsid=7 cfd=24 size=4000\n\
                    ts=1.6 gid=7 type=item_store key=wf1.e status=stored cmd=ms ttl=0 clsid=1 cfd=24 size=9\n\
                    garbage\x00\xff key=wf1.f\n\
                    ts=1.7 gid=8 type=item_get key=wf1.g status=found clsid=1 cfd=24 size=40";
        let served = served_by_key(log, &parse_chunk_sizes(SLABS));
        let at = |k: &str| served.get(&fingerprint(k.as_bytes())).copied();
        assert_eq!(at("wf1.a"), Some(Served::Ram));
        assert_eq!(at("wf1.b"), Some(Served::Flash), "the first fetch of a key labels it");
        assert_eq!(at("wf1.c"), None, "a miss labels nothing");
        assert_eq!(at("wf1.d"), None, "a class not in stats slabs labels nothing");
        assert_eq!(at("wf1.e"), None, "a store is not a fetch");
        assert_eq!(at("wf1.f"), None);
        assert_eq!(at("wf1.g"), Some(Served::Ram), "a small value fits its chunk");
        let hits = [(fingerprint(b"wf1.a"), 30), (fingerprint(b"wf1.b"), 400), (fingerprint(b"wf1.c"), 5)];
        let t = latency_of(&hits, &served);
        assert_eq!(t, TierLatency { ram_hits: 1, flash_hits: 1, ram_median_us: Some(30), flash_median_us: Some(400) });
    }

    /// A node that floods the watcher (the grid's network is not trusted): the ask that reads it
    /// is bounded in bytes and time, and what it cannot read labels nothing.
    #[test]
    fn a_flooding_watcher_is_read_within_the_asks_bounds() {
        let node = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = node.local_addr().unwrap();
        std::thread::spawn(move || {
            for conn in node.incoming().take(2) {
                let Ok(mut conn) = conn else { return };
                std::thread::spawn(move || {
                    let mut request = [0u8; 13 + 16]; // "stats slabs\r\n" then "watch fetchers\r\n"
                    if conn.read_exact(&mut request[..13]).is_err() || conn.write_all(SLABS).is_err() {
                        return;
                    }
                    if conn.read_exact(&mut request[13..]).is_err() || conn.write_all(b"OK\r\n").is_err() {
                        return;
                    }
                    let flood = b"ts=1 type=item_get key=wf1.b status=found clsid=1 size=4000 ".repeat(1000);
                    while conn.write_all(&flood).is_ok() {}
                });
            }
        });
        let s = TierSampler::default();
        assert_eq!(s.rotate(addr, Instant::now() + Duration::from_secs(5)), None, "no sample was under way");
        assert!(s.listening.load(Ordering::Relaxed), "the watcher opened");
        s.note_hit(b"wf1.a", Duration::from_micros(7));
        let deadline = Duration::from_millis(300);
        let began = Instant::now();
        let t = s.rotate(addr, Instant::now() + deadline).expect("a sample was under way");
        // An unbounded read of the flood never ends; a starved test thread may wake well after the
        // deadline (hundreds of ms on this 2-core machine under load): a loose bound tells them apart.
        assert!(began.elapsed() < deadline + Duration::from_secs(3), "{:?}", began.elapsed());
        assert_eq!(t, TierLatency::default(), "the flood named no hit of ours");
    }

    #[test]
    fn no_watcher_no_intake() {
        let s = TierSampler::default();
        s.note_hit(b"k", Duration::from_micros(5));
        assert!(s.lock().hits.is_empty());
        s.end_if_overdue();
        // A closed port (held, so no parallel test's node takes it): no watcher opens, and there
        // was no sample to end.
        let closed = std::net::SocketAddr::from(([127, 0, 0, 1], waffle_nodes::closed_port()));
        assert_eq!(s.rotate(closed, Instant::now() + Duration::from_millis(100)), None);
        assert!(!s.listening.load(Ordering::Relaxed));
    }
}
