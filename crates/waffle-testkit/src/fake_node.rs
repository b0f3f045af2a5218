//! An in-process fake memcached that speaks enough of the meta protocol for
//! the grid client (`ms` with `q`/`T`, `mg` with `v`/`T-1`/`k`/`O`/`q`, `md` with `q`/`O`,
//! `mn`), stores values in a map, and injects faults a real server cannot be
//! made to produce: `SERVER_ERROR`, a connection closed mid-value, a value
//! truncated or of the wrong length, a corrupted or foreign value, garbage,
//! silence. Real memcached tests come first; this is for what they cannot do.
//!
//! A fault is injected on every `every`-th command of its kind (`mg` or `ms`),
//! counted in [`FakeNode::injected`]. One thread per connection; everything
//! stops when the `FakeNode` is dropped.

use std::collections::HashMap;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What an `mg` that hits is answered with, when a fault is due.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GetFault {
    /// `SERVER_ERROR out of memory` instead of the value.
    ServerError,
    /// The connection is closed without an answer.
    CloseBeforeReply,
    /// `VA <n>` and half the value, then the connection is closed.
    CloseMidValue,
    /// `VA <n>` and half the value, then nothing more (the deadline ends it).
    TruncatedValue,
    /// `VA <n - 7>` and then all `n` bytes: the terminator is not where announced.
    WrongLength,
    /// A well-formed reply whose value is the first half of the stored one.
    ShortValue,
    /// The stored value with one byte of its payload (or checksum) flipped: the middle byte,
    /// or the first after the envelope's header when the value is short.
    CorruptByte,
    /// Another stored item's value (another page's envelope).
    OtherKey,
    /// A line that is no meta reply.
    Garbage,
    /// No answer at all (a hung server; the deadline ends it).
    Hang,
}

impl GetFault {
    pub const ALL: [GetFault; 10] = [
        GetFault::ServerError,
        GetFault::CloseBeforeReply,
        GetFault::CloseMidValue,
        GetFault::TruncatedValue,
        GetFault::WrongLength,
        GetFault::ShortValue,
        GetFault::CorruptByte,
        GetFault::OtherKey,
        GetFault::Garbage,
        GetFault::Hang,
    ];
}

/// What an `ms` is answered with, when a fault is due.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SetFault {
    /// `SERVER_ERROR out of memory storing object`, the item not stored.
    ServerError,
    /// `NS`, the item not stored.
    NotStored,
    /// The connection is closed (the rest of the pipeline is lost).
    Close,
}

/// Where an `ms` waits while sets are paused: the client's batch is then in
/// flight, before or after the node took the value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetPause {
    BeforeStore,
    AfterStore,
}

/// The longest a paused `ms` waits (a test that forgets to resume still ends).
const PAUSE_MAX: Duration = Duration::from_secs(5);

#[derive(Default)]
struct Plan {
    get: Option<(GetFault, u64)>,
    set: Option<(SetFault, u64)>,
}

#[derive(Default)]
struct Shared {
    items: Mutex<HashMap<Vec<u8>, Vec<u8>>>,
    plan: Mutex<Plan>,
    injected_get: Mutex<HashMap<GetFault, u64>>,
    injected_set: Mutex<HashMap<SetFault, u64>>,
    gets: AtomicU64,
    get_hits: AtomicU64,
    sets: AtomicU64,
    stop: AtomicBool,
    conns: Mutex<Vec<TcpStream>>,
    pause: Mutex<Option<SetPause>>,
    resumed: Condvar,
    paused_sets: AtomicU64,
    /// Every `mg` waits this long before it is answered (a loaded or distant node), µs.
    get_delay_us: AtomicU64,
}

pub struct FakeNode {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl FakeNode {
    /// Listens on a free loopback port; serves until dropped.
    pub fn start() -> FakeNode {
        let listener = TcpListener::bind(("127.0.0.1", 0)).expect("bind a loopback port for the fake node");
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared::default());
        let s = Arc::clone(&shared);
        let accept = std::thread::Builder::new()
            .name("fake-node-accept".into())
            .spawn(move || {
                for stream in listener.incoming() {
                    if s.stop.load(Ordering::Acquire) {
                        break;
                    }
                    let Ok(stream) = stream else { continue };
                    let _ = stream.set_nodelay(true);
                    if let Ok(clone) = stream.try_clone() {
                        s.conns.lock().unwrap().push(clone);
                    }
                    let s2 = Arc::clone(&s);
                    let _ = std::thread::Builder::new().name("fake-node-conn".into()).spawn(move || {
                        let _ = serve(stream, &s2);
                    });
                }
            })
            .unwrap();
        FakeNode { addr, shared, accept: Some(accept) }
    }

    /// `127.0.0.1:PORT`, the form a grid list takes.
    pub fn addr(&self) -> String {
        self.addr.to_string()
    }

    /// From now on every `every`-th `mg` that hits gets `fault` (None: no fault).
    pub fn fail_gets(&self, fault: Option<GetFault>, every: u64) {
        self.shared.plan.lock().unwrap().get = fault.map(|f| (f, every.max(1)));
    }

    /// From now on every `every`-th `ms` gets `fault` (None: no fault).
    pub fn fail_sets(&self, fault: Option<SetFault>, every: u64) {
        self.shared.plan.lock().unwrap().set = fault.map(|f| (f, every.max(1)));
    }

    /// How many times `fault` was injected.
    pub fn injected(&self, fault: GetFault) -> u64 {
        self.shared.injected_get.lock().unwrap().get(&fault).copied().unwrap_or(0)
    }

    pub fn injected_set(&self, fault: SetFault) -> u64 {
        self.shared.injected_set.lock().unwrap().get(&fault).copied().unwrap_or(0)
    }

    /// `mg` commands received, and how many found their key.
    pub fn gets(&self) -> (u64, u64) {
        (self.shared.gets.load(Ordering::Relaxed), self.shared.get_hits.load(Ordering::Relaxed))
    }

    /// From now on every `ms` waits at `at` until sets are resumed (None), at most 5 s.
    pub fn pause_sets(&self, at: Option<SetPause>) {
        *self.shared.pause.lock().unwrap() = at;
        self.shared.resumed.notify_all();
    }

    /// How many `ms` commands waited at a pause.
    pub fn paused_sets(&self) -> u64 {
        self.shared.paused_sets.load(Ordering::Relaxed)
    }

    pub fn sets(&self) -> u64 {
        self.shared.sets.load(Ordering::Relaxed)
    }

    /// From now on every `mg` is answered `delay` late (zero: at once): a node
    /// made slow (loaded, or far away) and fast again.
    pub fn delay_gets(&self, delay: Duration) {
        self.shared.get_delay_us.store(delay.as_micros() as u64, Ordering::Relaxed);
    }

    pub fn items(&self) -> usize {
        self.shared.items.lock().unwrap().len()
    }
}

impl Drop for FakeNode {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200)); // wakes accept()
        for c in self.shared.conns.lock().unwrap().drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}

/// Why a connection's thread stopped serving.
enum Stop {
    /// Closed on purpose (a fault) or by the peer.
    Closed,
    /// Answer nothing more; wait for the peer to give up.
    Silent,
}

fn serve(stream: TcpStream, s: &Shared) -> io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_millis(200)))?;
    let mut out = stream.try_clone()?;
    let mut r = BufReader::new(stream);
    let mut line = Vec::new();
    loop {
        match r.read_until(b'\n', &mut line) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                if s.stop.load(Ordering::Acquire) {
                    return Ok(());
                }
                continue; // the bytes of a partial line stay in `line`
            }
            Err(e) => return Err(e),
        }
        if !line.ends_with(b"\n") {
            return Ok(()); // end of stream inside a line
        }
        let line = std::mem::take(&mut line);
        if !line.ends_with(b"\r\n") {
            out.write_all(b"CLIENT_ERROR line not terminated\r\n")?;
            return Ok(());
        }
        let text = &line[..line.len() - 2];
        let words: Vec<&[u8]> = text.split(|&b| b == b' ').filter(|w| !w.is_empty()).collect();
        let mut reply = Vec::new();
        let stop = match words.first().copied() {
            Some(b"ms") => handle_set(&words, &mut r, s, &mut reply)?,
            Some(b"mg") => {
                let delay_us = s.get_delay_us.load(Ordering::Relaxed);
                if delay_us > 0 {
                    std::thread::sleep(Duration::from_micros(delay_us));
                }
                handle_get(&words, s, &mut reply)
            }
            Some(b"md") => {
                // As memcached 1.6: quiet mode hides HD, not NF; both carry the opaque.
                let quiet = words.iter().skip(2).any(|w| *w == b"q");
                let opaque = words.iter().skip(2).find(|w| w.first() == Some(&b'O'));
                let existed = words.get(1).is_some_and(|k| s.items.lock().unwrap().remove(*k).is_some());
                let code: &[u8] = if existed { b"HD" } else { b"NF" };
                if !existed || !quiet {
                    reply.extend_from_slice(code);
                    if let Some(o) = opaque {
                        reply.push(b' ');
                        reply.extend_from_slice(o);
                    }
                    reply.extend_from_slice(b"\r\n");
                }
                None
            }
            Some(b"mn") => {
                reply.extend_from_slice(b"MN\r\n");
                None
            }
            _ => {
                reply.extend_from_slice(b"ERROR\r\n");
                None
            }
        };
        if !reply.is_empty() {
            out.write_all(&reply)?;
        }
        match stop {
            None => {}
            Some(Stop::Closed) => {
                let _ = out.shutdown(Shutdown::Both);
                return Ok(());
            }
            Some(Stop::Silent) => {
                // Swallow whatever comes until the peer closes (or we stop).
                let mut sink = [0u8; 4096];
                loop {
                    match r.read(&mut sink) {
                        Ok(0) => return Ok(()),
                        Ok(_) => {}
                        Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                            if s.stop.load(Ordering::Acquire) {
                                return Ok(());
                            }
                        }
                        Err(e) => return Err(e),
                    }
                }
            }
        }
    }
}

/// Whether the `n`-th command (1-based) of a kind gets the planned fault.
fn due<F: Copy>(plan: Option<(F, u64)>, n: u64) -> Option<F> {
    plan.and_then(|(f, every)| n.is_multiple_of(every).then_some(f))
}

fn handle_set(
    words: &[&[u8]],
    r: &mut BufReader<TcpStream>,
    s: &Shared,
    reply: &mut Vec<u8>,
) -> io::Result<Option<Stop>> {
    let (Some(key), Some(len)) = (words.get(1), words.get(2)) else {
        reply.extend_from_slice(b"CLIENT_ERROR bad command line format\r\n");
        return Ok(Some(Stop::Closed));
    };
    let Some(len) = std::str::from_utf8(len).ok().and_then(|t| t.parse::<usize>().ok()) else {
        reply.extend_from_slice(b"CLIENT_ERROR bad data chunk\r\n");
        return Ok(Some(Stop::Closed));
    };
    let quiet = words.iter().skip(3).any(|w| *w == b"q");
    let mut data = vec![0u8; len + 2];
    read_exact_patiently(r, &mut data, s)?;
    if &data[len..] != b"\r\n" {
        reply.extend_from_slice(b"CLIENT_ERROR bad data chunk\r\n");
        return Ok(Some(Stop::Closed));
    }
    data.truncate(len);
    wait_while_paused(s, SetPause::BeforeStore);
    let n = s.sets.fetch_add(1, Ordering::Relaxed) + 1;
    let plan = s.plan.lock().unwrap().set;
    if let Some(fault) = due(plan, n) {
        *s.injected_set.lock().unwrap().entry(fault).or_default() += 1;
        match fault {
            SetFault::ServerError => reply.extend_from_slice(b"SERVER_ERROR out of memory storing object\r\n"),
            SetFault::NotStored => reply.extend_from_slice(b"NS\r\n"),
            SetFault::Close => return Ok(Some(Stop::Closed)),
        }
        return Ok(None);
    }
    s.items.lock().unwrap().insert(key.to_vec(), data);
    wait_while_paused(s, SetPause::AfterStore);
    if !quiet {
        reply.extend_from_slice(b"HD\r\n");
    }
    Ok(None)
}

fn wait_while_paused(s: &Shared, at: SetPause) {
    let deadline = Instant::now() + PAUSE_MAX;
    let mut pause = s.pause.lock().unwrap();
    if *pause != Some(at) {
        return;
    }
    s.paused_sets.fetch_add(1, Ordering::Relaxed);
    while *pause == Some(at) && !s.stop.load(Ordering::Acquire) {
        let now = Instant::now();
        if now >= deadline {
            return;
        }
        pause = s.resumed.wait_timeout(pause, deadline - now).unwrap().0;
    }
}

/// `read_exact` through the read timeout (which only exists to notice `stop`).
fn read_exact_patiently(r: &mut BufReader<TcpStream>, buf: &mut [u8], s: &Shared) -> io::Result<()> {
    let mut at = 0;
    while at < buf.len() {
        match r.read(&mut buf[at..]) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => at += n,
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                if s.stop.load(Ordering::Acquire) {
                    return Err(e);
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn handle_get(words: &[&[u8]], s: &Shared, reply: &mut Vec<u8>) -> Option<Stop> {
    let Some(key) = words.get(1) else {
        reply.extend_from_slice(b"CLIENT_ERROR bad command line format\r\n");
        return Some(Stop::Closed);
    };
    let flags = &words[2..];
    let (mut want_value, mut expire, mut quiet, mut want_key, mut opaque) = (false, false, false, false, None);
    for f in flags {
        match f.first() {
            Some(b'v') => want_value = true,
            Some(b'q') => quiet = true,
            Some(b'k') => want_key = true,
            Some(b'O') => opaque = Some(&f[1..]),
            Some(b'T') => expire = f[1..].starts_with(b"-"),
            _ => {}
        }
    }
    s.gets.fetch_add(1, Ordering::Relaxed);
    let (value, other) = {
        let mut items = s.items.lock().unwrap();
        // T-1: the item is left expired, i.e. gone for the next request.
        let value = if expire { items.remove(*key) } else { items.get(*key).cloned() };
        let other = items.iter().find(|(k, _)| k.as_slice() != *key).map(|(_, v)| v.clone());
        (value, other)
    };
    let Some(mut value) = value else {
        if !quiet {
            reply.extend_from_slice(b"EN\r\n");
        }
        return None;
    };
    let n = s.get_hits.fetch_add(1, Ordering::Relaxed) + 1;
    let mut ret_flags = Vec::new();
    if want_key {
        ret_flags.extend_from_slice(b" k");
        ret_flags.extend_from_slice(key);
    }
    if let Some(o) = opaque {
        ret_flags.extend_from_slice(b" O");
        ret_flags.extend_from_slice(o);
    }
    let plan = s.plan.lock().unwrap().get;
    let fault = due(plan, n);
    // OtherKey needs another item; without one the fault is not injected.
    let fault = fault.filter(|f| *f != GetFault::OtherKey || other.is_some());
    if let Some(f) = fault {
        *s.injected_get.lock().unwrap().entry(f).or_default() += 1;
    }
    let header = |len: usize, reply: &mut Vec<u8>| {
        reply.extend_from_slice(format!("VA {len}").as_bytes());
        reply.extend_from_slice(&ret_flags);
        reply.extend_from_slice(b"\r\n");
    };
    match fault {
        None => {}
        Some(GetFault::ServerError) => {
            reply.extend_from_slice(b"SERVER_ERROR out of memory\r\n");
            return None;
        }
        Some(GetFault::CloseBeforeReply) => return Some(Stop::Closed),
        Some(GetFault::CloseMidValue) => {
            header(value.len(), reply);
            reply.extend_from_slice(&value[..value.len() / 2]);
            return Some(Stop::Closed);
        }
        Some(GetFault::TruncatedValue) => {
            header(value.len(), reply);
            reply.extend_from_slice(&value[..value.len() / 2]);
            reply.extend_from_slice(b"\r\n");
            return Some(Stop::Silent);
        }
        Some(GetFault::WrongLength) => {
            header(value.len().saturating_sub(7), reply);
            reply.extend_from_slice(&value);
            reply.extend_from_slice(b"\r\n");
            return None;
        }
        Some(GetFault::ShortValue) => value.truncate(value.len() / 2),
        Some(GetFault::CorruptByte) => {
            // Not a header byte: the length field (bytes 32..36) is read before the checksum,
            // to find the trailer, so a flip there is a `length` reject by design. A short value
            // (a compressed, nearly empty page: 64..71 bytes) has it as its middle byte.
            if let Some(last) = value.len().checked_sub(1) {
                let at = (value.len() / 2).max(waffle_core::envelope::HEADER_BYTES).min(last);
                value[at] ^= 0x40;
            }
        }
        Some(GetFault::OtherKey) => value = other.expect("filtered above"),
        Some(GetFault::Garbage) => {
            reply.extend_from_slice(b"VALUE wf 0 4096\r\n");
            return None;
        }
        Some(GetFault::Hang) => return Some(Stop::Silent),
    }
    if want_value {
        header(value.len(), reply);
        reply.extend_from_slice(&value);
        reply.extend_from_slice(b"\r\n");
    } else {
        reply.extend_from_slice(b"HD");
        reply.extend_from_slice(&ret_flags);
        reply.extend_from_slice(b"\r\n");
    }
    None
}
