//! The wire's limit beside a grid run (issue 33 item 4): right after the
//! measured run, on the same nodes and the same pages, a bare `mg <key> v` per
//! page on a plain blocking socket per thread, at the run's thread count: the
//! CPU (this process and the memcached nodes) and the wall time one page costs
//! with nothing of waffle's around it. The grid configuration's CPU per L2 hit
//! is held against it (`cpu_us_per_l2_hit` / `bare_cpu_us_per_get`).
//!
//! The pages are the ones the nodes hold at the end of the run (memcached's
//! `lru_crawler metadump`), read without deleting them; through the same
//! EMULATED link proxies as the run when there is one.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

/// At most this many keys are read per node (the bare series picks among them at random).
const MAX_KEYS_PER_NODE: usize = 4096;
const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// What a bare multi-get of the run's pages cost, and the run's CPU per grid hit.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Wire {
    pub threads: usize,
    pub seconds: f64,
    pub bare_gets: u64,
    pub bare_value_bytes_mean: f64,
    /// CPU of this process and of the nodes per bare get, microseconds.
    pub bare_cpu_us_per_get: f64,
    /// Of which the nodes' (memcached's) share.
    pub bare_node_cpu_us_per_get: f64,
    /// Wall time per get seen by one thread (its mean round trip), microseconds.
    pub bare_wall_us_per_get: f64,
    /// The measured run: CPU (process and nodes) over its L2 hits, all of it.
    pub cpu_us_per_l2_hit_total: f64,
    /// The measured run's CPU per transaction over all-local's in the same
    /// round, times transactions, over L2 hits: what a grid hit cost beyond
    /// an L1 hit (pushes and disk reads the grid did not save included).
    /// None without an all-local in the round.
    pub cpu_us_per_l2_hit: Option<f64>,
    /// cpu_us_per_l2_hit / bare_cpu_us_per_get (target: <= 1.5).
    pub ratio_to_bare: Option<f64>,
    /// The wire's limit as a share of all-local's throughput: all-local's CPU
    /// per transaction over itself plus the run's L2 hits per transaction at
    /// the bare mg's CPU each (docs/benchmarks.md, "The physical limit").
    pub limit_ratio_to_all_local: Option<f64>,
    /// The run's throughput over all-local's, over that limit: how much of
    /// what this machine's wire allows the grid reached.
    pub share_of_limit: Option<f64>,
    /// The 1-minute load average when the bare series ran.
    pub load_average: f64,
}

/// CPU seconds used so far by this process and by the nodes at `addrs` (memcached's `rusage_*`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Cpu {
    pub process_s: f64,
    pub nodes_s: f64,
}

impl Cpu {
    pub fn now(addrs: &[String]) -> Cpu {
        Cpu { process_s: process_cpu_s(), nodes_s: addrs.iter().map(|a| node_cpu_s(a)).sum() }
    }

    pub fn since(self, before: Cpu) -> Cpu {
        Cpu { process_s: self.process_s - before.process_s, nodes_s: self.nodes_s - before.nodes_s }
    }

    pub fn total_s(self) -> f64 {
        self.process_s + self.nodes_s
    }
}

fn process_cpu_s() -> f64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } != 0 {
        return 0.0;
    }
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    s(u.ru_utime) + s(u.ru_stime)
}

fn node_cpu_s(addr: &str) -> f64 {
    let Some(stats) = addr.parse().ok().and_then(|a| waffle_nodes::stats(a).ok()) else { return 0.0 };
    let f = |k: &str| stats.get(k).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    f("rusage_user") + f("rusage_system")
}

/// The keys node `addr` holds (at most MAX_KEYS_PER_NODE), from `lru_crawler metadump all`.
fn keys_of(addr: &str) -> std::io::Result<Vec<String>> {
    let mut s = BufReader::new(connect(addr)?);
    s.get_mut().write_all(b"lru_crawler metadump all\r\n")?;
    let mut keys = Vec::new();
    let mut line = String::new();
    loop {
        line.clear();
        if s.read_line(&mut line)? == 0 || line.starts_with("END") || line.starts_with("ERROR") {
            break;
        }
        let key = line.split_whitespace().find_map(|f| f.strip_prefix("key="));
        if let Some(k) = key.filter(|_| keys.len() < MAX_KEYS_PER_NODE) {
            keys.push(k.to_string());
        }
    }
    Ok(keys)
}

fn connect(addr: &str) -> std::io::Result<TcpStream> {
    let s = TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(IO_TIMEOUT))?;
    s.set_write_timeout(Some(IO_TIMEOUT))?;
    Ok(s)
}

/// One `mg <key> v`; the value's length, None on a miss.
fn bare_get(s: &mut BufReader<TcpStream>, key: &str, buf: &mut Vec<u8>) -> std::io::Result<Option<usize>> {
    s.get_mut().write_all(format!("mg {key} v\r\n").as_bytes())?;
    let mut line = String::new();
    s.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    if parts.next() != Some("VA") {
        return Ok(None);
    }
    let n: usize = parts.next().and_then(|v| v.parse().ok()).ok_or_else(|| std::io::Error::other("bad VA"))?;
    buf.resize(n + 2, 0);
    s.read_exact(buf)?;
    Ok(Some(n))
}

/// Bare gets of the pages the nodes at `addrs` hold, `threads` threads for
/// `seconds`; `cpu_addrs`: the nodes themselves (whose CPU is counted).
pub fn bare_series(addrs: &[String], cpu_addrs: &[String], threads: usize, seconds: f64) -> Result<Wire, String> {
    let keys: Vec<(usize, String)> = addrs
        .iter()
        .enumerate()
        .map(|(i, a)| keys_of(a).map(|ks| ks.into_iter().map(move |k| (i, k))))
        .collect::<std::io::Result<Vec<_>>>()
        .map_err(|e| format!("wire: listing the nodes' keys: {e}"))?
        .into_iter()
        .flatten()
        .collect();
    if keys.is_empty() {
        return Err("wire: the nodes hold no page".into());
    }
    let (gets, bytes, stop) = (AtomicU64::new(0), AtomicU64::new(0), AtomicBool::new(false));
    let before = Cpu::now(cpu_addrs);
    let t0 = Instant::now();
    std::thread::scope(|s| -> Result<(), String> {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (keys, gets, bytes, stop) = (&keys, &gets, &bytes, &stop);
                s.spawn(move || -> std::io::Result<()> {
                    let mut conns: Vec<_> =
                        addrs.iter().map(|a| connect(a).map(BufReader::new)).collect::<std::io::Result<_>>()?;
                    let (mut rng, mut buf) = (SmallRng::seed_from_u64(t as u64 + 7), Vec::new());
                    while !stop.load(Ordering::Relaxed) {
                        let (node, key) = &keys[rng.gen_range(0..keys.len())];
                        if let Some(n) = bare_get(&mut conns[*node], key, &mut buf)? {
                            gets.fetch_add(1, Ordering::Relaxed);
                            bytes.fetch_add(n as u64, Ordering::Relaxed);
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        std::thread::sleep(Duration::from_secs_f64(seconds));
        stop.store(true, Ordering::Relaxed);
        for h in handles {
            h.join().map_err(|_| "wire: a thread panicked".to_string())?.map_err(|e| format!("wire: {e}"))?;
        }
        Ok(())
    })?;
    let elapsed = t0.elapsed().as_secs_f64();
    let cpu = Cpu::now(cpu_addrs).since(before);
    let n = gets.load(Ordering::Relaxed).max(1) as f64;
    Ok(Wire {
        threads,
        seconds: elapsed,
        bare_gets: gets.load(Ordering::Relaxed),
        bare_value_bytes_mean: bytes.load(Ordering::Relaxed) as f64 / n,
        bare_cpu_us_per_get: cpu.total_s() * 1e6 / n,
        bare_node_cpu_us_per_get: cpu.nodes_s * 1e6 / n,
        bare_wall_us_per_get: elapsed * threads as f64 * 1e6 / n,
        ..Wire::default()
    })
}
