//! `waffle probe`: latency against concurrency, for the two things a page
//! read can wait on below L1.
//!
//! - `disk`: 16 KiB random O_DIRECT reads of a file (`waffle_core::backing::DirectFile`;
//!   with `--device`, each also waits for an EMULATED device: [`EmulatedDevice::book`]).
//! - `mg (bare)`: `mg <key> v` of a stored 16 KiB value on a plain blocking
//!   socket per thread: the floor of a grid fetch.
//! - `grid hit`: the same value through waffle's grid client
//!   (`waffle_core::grid::Grid::get`: pooled connection, deadline, meta
//!   parser) and its envelope check (`envelope::open_into`: identity, version,
//!   crc32c, copy into the page buffer): what an L2 hit costs waffle.
//!
//! With `--link` both grid series cross the same EMULATED link: each a
//! `LinkProxy` (waffle_emulation) of its own in front of every node, as the
//! benchmarks do (loopback nodes only).
//! Seed 000 wanted exactly this graph (disk latency rising with threads, the
//! network's not) and had no tool for it.
//!
//! The grid is one memcached node the probe starts on loopback, or the nodes
//! `--grid` names (real ones): there the probe's values go under a cache
//! identity of their own and are deleted at the end. The file is scratch:
//! written for the run and removed on every way out (an error, a panic, and
//! [`ProbeOptions::stop`], which the CLI sets on SIGINT/SIGTERM).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};
use serde_json::{json, Value};
use waffle_core::backing::{Backing, DirectFile, PageId};
use waffle_core::envelope::{self, Identity};
use waffle_core::grid::{Fetch, Grid, GridOptions, NodeSpec};
use waffle_emulation::{DeviceProfile, EmulatedDevice, Link, LinkProfile, LinkProxy};
use waffle_nodes::Node;

use crate::bench::chart;
use crate::bench::report::{self, Output};

#[derive(Clone, Debug)]
pub struct ProbeOptions {
    pub threads: Vec<usize>,
    pub seconds: f64,
    pub file_bytes: u64,
    pub value_bytes: usize,
    /// Values stored in the grid and fetched at random.
    pub keys: usize,
    pub dir: PathBuf,
    pub device: Option<String>,
    pub link: Option<LinkProfile>,
    pub output: Output,
    /// Grid nodes to probe, `host:port,...`; None: one memcached the probe starts on loopback.
    pub grid: Option<String>,
    /// Set while the probe runs (by the CLI, on SIGINT/SIGTERM): it stops within
    /// [`STOP_CHECK_MS`] and cleans up as on any error.
    pub stop: Arc<AtomicBool>,
}

impl Default for ProbeOptions {
    fn default() -> Self {
        ProbeOptions {
            threads: vec![1, 2, 4, 8, 16, 32],
            seconds: 3.0,
            file_bytes: 256 << 20,
            value_bytes: 16 << 10,
            keys: 256,
            dir: PathBuf::from("waffle-bench"),
            device: None,
            link: None,
            output: Output::default(),
            grid: None,
            stop: Arc::new(AtomicBool::new(false)),
        }
    }
}

/// How often a waiting probe looks at [`ProbeOptions::stop`].
pub const STOP_CHECK_MS: u64 = 50;
/// Deadline of one grid request of the probe, and of connecting and each bare exchange.
const REQUEST_TIMEOUT_MS: u64 = 1000;

#[derive(Clone, Debug, serde::Serialize)]
pub struct Point {
    pub threads: usize,
    pub ops_per_s: f64,
    pub p50_us: f64,
    pub p95_us: f64,
    pub p99_us: f64,
    pub mean_us: f64,
    pub errors: u64,
}

const SERIES: [&str; 3] = ["disk", "mg (bare)", "grid hit"];

/// The probe's file: random data written for this run, removed when dropped,
/// with its directory if the probe made it (and nothing else is in it).
struct Scratch {
    path: PathBuf,
    made_dir: Option<PathBuf>,
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
        if let Some(dir) = &self.made_dir {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

fn interrupted() -> String {
    "interrupted: the probe stopped (its file removed, its nodes stopped)".into()
}

/// Writes the probe file: `bytes` of random data in `dir`, a name of this process's own.
fn probe_file(dir: &Path, bytes: u64, stop: &AtomicBool) -> Result<Scratch, String> {
    let made_dir = (!dir.exists()).then(|| dir.to_path_buf());
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let path = dir.join(format!("probe-{}.dat", std::process::id()));
    let mut f = std::fs::File::options()
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    // From here on the file goes whatever happens.
    let scratch = Scratch { path, made_dir };
    let path = &scratch.path;
    let pb = indicatif::ProgressBar::new(bytes);
    pb.set_style(
        indicatif::ProgressStyle::with_template("waffle probe: writing {msg} [{bar:40}] {bytes}/{total_bytes}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    pb.set_message(path.display().to_string());
    let mut rng = SmallRng::seed_from_u64(7);
    let mut chunk = vec![0u8; 1 << 20];
    let mut done = 0u64;
    while done < bytes {
        if stop.load(Ordering::SeqCst) {
            return Err(interrupted());
        }
        let n = (bytes - done).min(chunk.len() as u64) as usize;
        rng.fill_bytes(&mut chunk[..n]);
        f.write_all(&chunk[..n]).map_err(|e| format!("writing {}: {e}", path.display()))?;
        done += n as u64;
        pb.set_position(done);
    }
    f.sync_all().map_err(|e| format!("syncing {}: {e}", path.display()))?;
    pb.finish_and_clear();
    Ok(scratch)
}

/// Sleeps `seconds`, or less if `stop` is set.
fn sleep_unless(stop: &AtomicBool, seconds: f64) {
    let end = Instant::now() + Duration::from_secs_f64(seconds);
    while !stop.load(Ordering::SeqCst) {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        std::thread::sleep(left.min(Duration::from_millis(STOP_CHECK_MS)));
    }
}

/// Runs `op` on one thread per state for `seconds` (less if `stop` is set);
/// `op(thread state, rng)` returns false on an error.
fn measure<S: Send>(
    states: Vec<S>,
    seconds: f64,
    stop_all: &AtomicBool,
    op: impl Fn(&mut S, &mut SmallRng) -> bool + Sync,
) -> Point {
    let threads = states.len();
    let stop = AtomicBool::new(false);
    let start = Instant::now();
    let results: Vec<(Histogram<u64>, u64)> = std::thread::scope(|s| {
        let handles: Vec<_> = states
            .into_iter()
            .enumerate()
            .map(|(i, mut st)| {
                let (stop, op) = (&stop, &op);
                s.spawn(move || {
                    let mut rng = SmallRng::seed_from_u64(i as u64 + 11);
                    let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("bounds");
                    let mut errors = 0;
                    while !stop.load(Ordering::Relaxed) {
                        let t = Instant::now();
                        if op(&mut st, &mut rng) {
                            h.saturating_record(t.elapsed().as_micros().max(1) as u64);
                        } else {
                            errors += 1;
                        }
                    }
                    (h, errors)
                })
            })
            .collect();
        sleep_unless(stop_all, seconds);
        stop.store(true, Ordering::Relaxed);
        handles.into_iter().map(|h| h.join().expect("probe thread")).collect()
    });
    let elapsed = start.elapsed().as_secs_f64();
    let mut all = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("bounds");
    let mut errors = 0;
    for (h, e) in &results {
        all.add(h).expect("same bounds");
        errors += e;
    }
    Point {
        threads,
        ops_per_s: all.len() as f64 / elapsed,
        p50_us: all.value_at_quantile(0.5) as f64,
        p95_us: all.value_at_quantile(0.95) as f64,
        p99_us: all.value_at_quantile(0.99) as f64,
        mean_us: all.mean(),
        errors,
    }
}

/// One `mg <key> v` on a blocking socket; the value's bytes are read into `buf`.
fn bare_get(stream: &mut BufReader<TcpStream>, key: &[u8], buf: &mut Vec<u8>) -> std::io::Result<bool> {
    let mut req = Vec::with_capacity(key.len() + 8);
    req.extend_from_slice(b"mg ");
    req.extend_from_slice(key);
    req.extend_from_slice(b" v\r\n");
    stream.get_mut().write_all(&req)?;
    let mut line = String::new();
    stream.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    match parts.next() {
        Some("VA") => {
            let n: usize = parts.next().and_then(|s| s.parse().ok()).ok_or_else(|| std::io::Error::other("bad VA"))?;
            buf.resize(n + 2, 0);
            stream.read_exact(buf)?;
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// The grid the probe measures: a node of its own, or the nodes `--grid` names.
struct ProbeGrid {
    /// The node the probe started (stopped when dropped); None for `--grid`.
    own: Option<Node>,
    specs: Vec<NodeSpec>,
    /// Each node's address, in `specs`' order (the bare series connects to them).
    addrs: Vec<SocketAddr>,
    /// The probe's values go under this identity: on a real grid, one of their own.
    cache_id: u64,
}

impl ProbeGrid {
    fn new(grid: Option<&str>) -> Result<ProbeGrid, String> {
        let (own, specs, cache_id) = match grid {
            None => {
                // Tied to this thread: not even a SIGKILL of the probe leaves it running.
                let node = Node::start_tied(64, None).map_err(|e| format!("starting memcached: {e}"))?;
                let specs = NodeSpec::parse_list(&node.addr()).map_err(|e| format!("node list: {e}"))?;
                (Some(node), specs, 0x9_0be_u64)
            }
            Some(list) => {
                let specs = NodeSpec::parse_list(list).map_err(|e| format!("--grid {list}: {e}"))?;
                if specs.is_empty() {
                    return Err(format!("--grid '{list}': no node named"));
                }
                (None, specs, waffle_core::random_cache_id())
            }
        };
        let addrs = specs.iter().map(resolve).collect::<Result<_, _>>()?;
        Ok(ProbeGrid { own, specs, addrs, cache_id })
    }

    fn labels(&self) -> Vec<String> {
        self.specs.iter().map(NodeSpec::label).collect()
    }

    /// The nodes, each behind a `LinkProxy` of one shared `profile` link
    /// (the nodes themselves without one).
    fn behind(&self, profile: Option<LinkProfile>) -> Result<Route, String> {
        let Some(profile) = profile else {
            return Ok(Route { specs: self.specs.clone(), addrs: self.addrs.clone(), _proxies: Vec::new() });
        };
        let link = Arc::new(Link::new(profile));
        let proxies = self
            .addrs
            .iter()
            .map(|&a| LinkProxy::start(a, Arc::clone(&link)).map_err(|e| format!("link proxy for {a}: {e}")))
            .collect::<Result<Vec<_>, _>>()?;
        let addrs: Vec<SocketAddr> = proxies.iter().map(LinkProxy::addr).collect();
        // The node's weight kept: the proxies take the same share of keys.
        let at =
            |(spec, a): (&NodeSpec, &SocketAddr)| NodeSpec { host: a.ip().to_string(), port: a.port(), ..spec.clone() };
        let specs = self.specs.iter().zip(&addrs).map(at).collect();
        Ok(Route { specs, addrs, _proxies: proxies })
    }

    /// "one memcached node of its own" or "2 memcached nodes (a:1, b:2)".
    fn describe(&self) -> String {
        match (&self.own, self.specs.len()) {
            (Some(_), _) => "one memcached node of its own".into(),
            (None, 1) => format!("memcached node {}", self.labels()[0]),
            (None, n) => format!("{n} memcached nodes ({})", self.labels().join(", ")),
        }
    }
}

fn resolve(spec: &NodeSpec) -> Result<SocketAddr, String> {
    (spec.host.as_str(), spec.port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| format!("--grid: {} cannot be resolved", spec.label()))
}

/// Where one series sends its requests: the nodes, or proxies in front of
/// them (in the nodes' order), stopped when dropped.
struct Route {
    specs: Vec<NodeSpec>,
    addrs: Vec<SocketAddr>,
    _proxies: Vec<LinkProxy>,
}

/// One blocking connection per address of `route`, with the probe's deadlines.
fn connect_all(route: &Route) -> Result<Vec<BufReader<TcpStream>>, String> {
    let timeout = Duration::from_millis(REQUEST_TIMEOUT_MS);
    route
        .addrs
        .iter()
        .map(|addr| {
            let s = TcpStream::connect_timeout(addr, timeout).map_err(|e| format!("connecting to {addr}: {e}"))?;
            s.set_nodelay(true).and_then(|_| s.set_read_timeout(Some(timeout))).map_err(|e| e.to_string())?;
            s.set_write_timeout(Some(timeout)).map_err(|e| e.to_string())?;
            Ok(BufReader::with_capacity(64 << 10, s))
        })
        .collect()
}

/// A read of `page` of `file`, then a wait until `device` (if any) would have served it.
fn read_on(device: Option<&EmulatedDevice>, file: &DirectFile, page: PageId, buf: &mut [u8]) -> bool {
    // A byte offset stays below 2^48 (PageId::byte_offset): the file's position on the device.
    let finish = device.map(|d| d.book(page.byte_offset(buf.len()), buf.len()));
    let ok = file.read_pages(page, buf.len(), buf).is_ok();
    if let Some(wait) = finish.and_then(|f| f.checked_duration_since(Instant::now())) {
        std::thread::sleep(wait);
    }
    ok
}

/// The probe's values in the grid: deleted when dropped (a real grid keeps nothing of the probe).
struct StoredValues<'a> {
    grid: &'a Grid,
    keys: &'a [String],
}

impl Drop for StoredValues<'_> {
    fn drop(&mut self) {
        for k in self.keys {
            self.grid.delete(k.as_bytes());
        }
    }
}

/// The probe's values: keys and sealed envelopes of random pages.
struct Values {
    keys: Vec<String>,
    sealed: Vec<Vec<u8>>,
}

impl Values {
    fn new(cache_id: u64, count: usize, value_bytes: usize) -> Values {
        let mut rng = SmallRng::seed_from_u64(5);
        let mut page = vec![0u8; value_bytes];
        let keys = (0..count as u64).map(|p| envelope::key(cache_id, p)).collect();
        let sealed = (0..count as u64)
            .map(|p| {
                rng.fill_bytes(&mut page);
                envelope::seal(Identity { cache_id, page: p, version: 1 }, &page)
            })
            .collect();
        Values { keys, sealed }
    }
}

/// A TTL for the probe's values: the run's length and ten minutes more.
fn ttl_s(o: &ProbeOptions) -> u32 {
    let run_s = o.threads.len() as f64 * SERIES.len() as f64 * o.seconds;
    (run_s.ceil() as u32).saturating_add(600)
}

/// What one run measures with, set up.
struct Setup<'a> {
    o: &'a ProbeOptions,
    file: Arc<DirectFile>,
    device: Option<EmulatedDevice>,
    probe_grid: &'a ProbeGrid,
    grid: &'a Grid,
    /// The bare series' way to the nodes (a link of its own, as the grid's).
    bare: Route,
    keys: &'a [String],
}

impl Setup<'_> {
    /// The three series at `threads` threads: disk, bare mg, grid hit.
    fn point(&self, threads: usize) -> Result<[Point; 3], String> {
        let (o, stop) = (self.o, &*self.o.stop);
        let vb = o.value_bytes;
        let pages = (o.file_bytes / vb as u64).max(1);
        let (f, d) = (&self.file, self.device.as_ref());
        let disk = measure(vec![vec![0u8; vb]; threads], o.seconds, stop, |buf, rng| {
            read_on(d, f, PageId::new(0, rng.gen_range(0..pages) as u32), buf)
        });
        let (keys, grid) = (self.keys, self.grid);
        let streams = (0..threads).map(|_| connect_all(&self.bare).map(|c| (c, Vec::new())));
        let bare = measure(streams.collect::<Result<_, _>>()?, o.seconds, stop, |(conns, buf), rng| {
            let key = keys[rng.gen_range(0..keys.len())].as_bytes();
            let Some(node) = grid.node_index(key) else { return false };
            matches!(bare_get(&mut conns[node], key, buf), Ok(true))
        });
        let cache_id = self.probe_grid.cache_id;
        let hit = measure(vec![vec![0u8; vb]; threads], o.seconds, stop, |out, rng| {
            let p = rng.gen_range(0..keys.len());
            // As the cache reads a hit: the envelope opened in place, into the page buffer.
            let expect = Identity { cache_id, page: p as u64, version: 1 };
            matches!(
                grid.get_with(keys[p].as_bytes(), |v| envelope::open_into(v, expect, None, out)),
                Fetch::Hit(Ok(_))
            )
        });
        if stop.load(Ordering::SeqCst) {
            return Err(interrupted());
        }
        Ok([disk, bare, hit])
    }
}

pub fn run(o: &ProbeOptions) -> Result<Value, String> {
    let device = match &o.device {
        Some(d) => DeviceProfile::by_name(d)?,
        None => None,
    };
    // The nodes first: a bad --grid costs no file.
    let probe_grid = ProbeGrid::new(o.grid.as_deref())?;
    let scratch = probe_file(&o.dir, o.file_bytes, &o.stop)?;
    let path = &scratch.path;
    let (file, warning) = DirectFile::open(path, true).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    if let Some(w) = warning {
        eprintln!("{w}");
    }
    let direct = file.is_direct();
    // The grid's requests and the bare ones each cross a link of their own.
    let (grid_route, bare) = (probe_grid.behind(o.link)?, probe_grid.behind(o.link)?);
    let grid = Grid::new(
        grid_route.specs.clone(),
        GridOptions {
            timeout_ms: REQUEST_TIMEOUT_MS,
            connect_timeout_ms: REQUEST_TIMEOUT_MS,
            // Every fetch is measured: no node skipped for costing more than the disk.
            cost_backoff: false,
            // Should the probe be killed before it deletes them, its values go by themselves.
            ttl_s: ttl_s(o),
            ..GridOptions::default()
        },
    );
    let values = Values::new(probe_grid.cache_id, o.keys, o.value_bytes);
    let items: Vec<(&[u8], &[u8])> =
        values.keys.iter().zip(&values.sealed).map(|(k, v)| (k.as_bytes(), v.as_slice())).collect();
    let _stored = StoredValues { grid: &grid, keys: &values.keys };
    let report = grid.store_many(&items);
    if report.stored != items.len() {
        return Err(format!(
            "could store only {} of {} values in {}",
            report.stored,
            items.len(),
            probe_grid.describe()
        ));
    }
    let setup = Setup {
        o,
        file: Arc::new(file),
        device: device.map(EmulatedDevice::new),
        probe_grid: &probe_grid,
        grid: &grid,
        bare,
        keys: &values.keys,
    };
    let link_label = o.link.map_or("loopback".to_string(), |l| format!("{} (EMULATED)", l.name));
    let device_label = device.map_or("real".to_string(), |p| format!("{} (EMULATED)", p.name));
    println!(
        "waffle probe: {} KiB random reads of a {:.0} MiB file ({}, {}), and {} KiB grid fetches from {} (link {})",
        o.value_bytes >> 10,
        o.file_bytes as f64 / (1 << 20) as f64,
        if direct { "O_DIRECT" } else { "buffered: O_DIRECT refused here" },
        device_label,
        o.value_bytes >> 10,
        probe_grid.describe(),
        link_label
    );
    println!(
        "host: {} cores, load average {:.2} at start; {} s per point",
        report::cores(),
        report::load_average(),
        o.seconds
    );
    let mut results: Vec<(&str, Vec<Point>)> = SERIES.iter().map(|s| (*s, Vec::new())).collect();
    for &n in &o.threads {
        eprintln!("waffle probe: {n} threads");
        for (series, point) in results.iter_mut().zip(setup.point(n)?) {
            series.1.push(point);
        }
    }
    let labels = Labels { device: device_label, link: link_label, grid: probe_grid.describe(), direct };
    let notes = report::emulation_notes(device.as_slice(), o.link.as_slice());
    let mut out = report_json(o, &results, &labels, &notes, &probe_grid.labels());
    print_table(&results, &notes);
    o.output.write(&mut out, |_: &Value, dir: &Path| draw(dir, o, &results, &labels))?;
    Ok(out)
}

/// How the run's parts are named in its table, chart and JSON.
struct Labels {
    device: String,
    link: String,
    grid: String,
    direct: bool,
}

fn print_table(results: &[(&str, Vec<Point>)], notes: &[String]) {
    println!();
    println!(
        "{:>7} | {:>9} {:>9} {:>9} | {:>9} {:>9} {:>9} | {:>9} {:>9} {:>9} | {:>8}",
        "threads", "disk p50", "p99", "ops/s", "mg p50", "p99", "ops/s", "grid p50", "p99", "ops/s", "grid/mg"
    );
    for i in 0..results[0].1.len() {
        let (d, m, g) = (&results[0].1[i], &results[1].1[i], &results[2].1[i]);
        println!(
            "{:>7} | {:>6.0} us {:>6.0} us {:>9.0} | {:>6.0} us {:>6.0} us {:>9.0} | {:>6.0} us {:>6.0} us {:>9.0} | {:>7.2}x",
            d.threads,
            d.p50_us,
            d.p99_us,
            d.ops_per_s,
            m.p50_us,
            m.p99_us,
            m.ops_per_s,
            g.p50_us,
            g.p99_us,
            g.ops_per_s,
            ratio(m, g)
        );
    }
    let errors: u64 = results.iter().flat_map(|s| s.1.iter().map(|p| p.errors)).sum();
    if errors > 0 {
        println!("  {errors} operations failed (not in the latencies)");
    }
    for n in notes {
        println!("{n}");
    }
    println!("host load average {:.2} at the end", report::load_average());
}

/// Grid hit p50 over bare mg p50 (NaN when mg has none).
fn ratio(mg: &Point, hit: &Point) -> f64 {
    if mg.p50_us > 0.0 {
        hit.p50_us / mg.p50_us
    } else {
        f64::NAN
    }
}

fn report_json(
    o: &ProbeOptions,
    results: &[(&str, Vec<Point>)],
    labels: &Labels,
    notes: &[String],
    nodes: &[String],
) -> Value {
    let ratios: Vec<Value> = results[1]
        .1
        .iter()
        .zip(&results[2].1)
        .map(|(m, g)| {
            let r = ratio(m, g);
            json!({ "threads": m.threads, "grid_hit_over_bare_mg_p50": if r.is_finite() { json!(r) } else { Value::Null } })
        })
        .collect();
    json!({
        "command": "probe",
        "invocation": report::invocation(),
        "value_bytes": o.value_bytes,
        "file_bytes": o.file_bytes,
        "o_direct": labels.direct,
        "device": labels.device,
        "link": labels.link,
        "grid": { "nodes": nodes, "own_node": o.grid.is_none(), "described": labels.grid },
        "seconds_per_point": o.seconds,
        "emulated": notes,
        "series": results.iter().map(|(n, p)| json!({ "name": n, "points": p })).collect::<Vec<_>>(),
        "grid_hit_over_bare_mg": ratios,
        "host": { "cores": report::cores(), "load_end": report::load_average() },
    })
}

fn draw(dir: &Path, o: &ProbeOptions, results: &[(&str, Vec<Point>)], labels: &Labels) -> Result<PathBuf, String> {
    let file = dir.join("probe.png");
    let mut series = Vec::new();
    for (i, (name, pts)) in results.iter().enumerate() {
        for (q, dashed) in [("p50", false), ("p99", true)] {
            series.push(chart::Series {
                name: format!("{name} {q}"),
                points: pts
                    .iter()
                    .map(|p| (p.threads as f64, if dashed { p.p99_us } else { p.p50_us }.max(1.0)))
                    .collect(),
                dashed,
                color: i,
            });
        }
    }
    chart::line_chart(
        &file,
        &format!("waffle probe: {} KiB read latency against concurrency", o.value_bytes >> 10),
        &format!(
            "disk: {}, O_DIRECT; grid: {}, link {}\n{} cores, {} s per point",
            labels.device,
            labels.grid,
            labels.link,
            report::cores(),
            o.seconds
        ),
        "threads",
        "latency, us (log)",
        &series,
        true,
        true,
    )?;
    Ok(file)
}
