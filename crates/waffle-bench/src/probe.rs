//! `waffle probe`: latency against concurrency, for the two things a page
//! read can wait on below L1.
//!
//! - `disk`: 16 KiB random O_DIRECT reads of a file (`waffle_core::backing::DirectFile`,
//!   behind an EMULATED device profile with `--device`).
//! - `mg (bare)`: `mg <key> v` of a stored 16 KiB value on a plain blocking
//!   socket per thread: the floor of a grid fetch.
//! - `grid hit`: the same value through waffle's grid client
//!   (`waffle_core::grid::Grid::get`: pooled connection, deadline, meta
//!   parser) and its envelope check (`envelope::open_into`: identity, version,
//!   crc32c, copy into the page buffer): what an L2 hit costs waffle.
//!
//! With `--link` both grid series go through the same EMULATED link model.
//! Seed 000 wanted exactly this graph (disk latency rising with threads, the
//! network's not) and had no tool for it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
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
use waffle_emulation::{DeviceProfile, EmulatedDevice, Link, LinkProfile};
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
        }
    }
}

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

/// The probe file: `bytes` of random data, made once.
fn probe_file(dir: &Path, bytes: u64) -> Result<PathBuf, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let path = dir.join(format!("probe-{}.dat", bytes));
    if std::fs::metadata(&path).map(|m| m.len()).ok() == Some(bytes) {
        return Ok(path);
    }
    let tmp = dir.join(format!("probe-{}.dat.building", bytes));
    let pb = indicatif::ProgressBar::new(bytes);
    pb.set_style(
        indicatif::ProgressStyle::with_template("waffle probe: writing {msg} [{bar:40}] {bytes}/{total_bytes}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    pb.set_message(path.display().to_string());
    let mut f = std::fs::File::create(&tmp).map_err(|e| format!("cannot create {}: {e}", tmp.display()))?;
    let mut rng = SmallRng::seed_from_u64(7);
    let mut chunk = vec![0u8; 1 << 20];
    let mut done = 0u64;
    while done < bytes {
        let n = (bytes - done).min(chunk.len() as u64) as usize;
        rng.fill_bytes(&mut chunk[..n]);
        f.write_all(&chunk[..n]).map_err(|e| format!("writing {}: {e}", tmp.display()))?;
        done += n as u64;
        pb.set_position(done);
    }
    f.sync_all().map_err(|e| format!("syncing {}: {e}", tmp.display()))?;
    pb.finish_and_clear();
    std::fs::rename(&tmp, &path).map_err(|e| format!("cannot rename {}: {e}", tmp.display()))?;
    Ok(path)
}

/// Runs `op` on `threads` threads for `seconds`; `op(thread state, rng)` returns false on an error.
fn measure<S: Send>(
    threads: usize,
    seconds: f64,
    mut make: impl FnMut(usize) -> S,
    op: impl Fn(&mut S, &mut SmallRng) -> bool + Sync,
) -> Point {
    let stop = AtomicBool::new(false);
    let states: Vec<S> = (0..threads).map(&mut make).collect();
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
        std::thread::sleep(Duration::from_secs_f64(seconds));
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

pub fn run(o: &ProbeOptions) -> Result<Value, String> {
    let device = match &o.device {
        Some(d) => DeviceProfile::by_name(d)?,
        None => None,
    };
    let path = probe_file(&o.dir, o.file_bytes)?;
    let (file, warning) = DirectFile::open(&path, true).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    if let Some(w) = warning {
        eprintln!("{w}");
    }
    let file = Arc::new(file);
    let emulated = device.map(|p| Arc::new(EmulatedDevice::new(p)));
    let direct = file.is_direct();

    let node = Node::start(64).map_err(|e| format!("starting memcached: {e}"))?;
    let specs = NodeSpec::parse_list(&node.addr()).map_err(|e| format!("node list: {e}"))?;
    let grid = Grid::new(specs.clone(), GridOptions { timeout_ms: 1000, ..GridOptions::default() });
    // The grid's requests and the bare ones each cross a link of their own.
    let grid = Arc::new(match o.link {
        Some(l) => grid.with_link(Arc::new(Link::new(l))),
        None => grid,
    });
    let cache_id = 0x9_0be_u64;
    let mut rng = SmallRng::seed_from_u64(5);
    let mut page = vec![0u8; o.value_bytes];
    let keys: Vec<String> = (0..o.keys as u64).map(|p| envelope::key(cache_id, p)).collect();
    let sealed: Vec<Vec<u8>> = (0..o.keys as u64)
        .map(|p| {
            rng.fill_bytes(&mut page);
            envelope::seal(Identity { cache_id, page: p, version: 1 }, &page)
        })
        .collect();
    let items: Vec<(&[u8], &[u8])> = keys.iter().zip(&sealed).map(|(k, v)| (k.as_bytes(), v.as_slice())).collect();
    let stored = grid.store_many(&items);
    if stored.stored != items.len() {
        return Err(format!("could store only {} of {} values in memcached", stored.stored, items.len()));
    }
    let bare_link = o.link.map(|l| Arc::new(Link::new(l)));
    let link_label = o.link.map_or("loopback".to_string(), |l| format!("{} (EMULATED)", l.name));
    let device_label = device.map_or("real".to_string(), |p| format!("{} (EMULATED)", p.name));

    println!(
        "waffle probe: {} KiB random reads of a {:.0} MiB file ({}, {}), and {} KiB grid fetches from one memcached node (link {})",
        o.value_bytes >> 10,
        o.file_bytes as f64 / (1 << 20) as f64,
        if direct { "O_DIRECT" } else { "buffered: O_DIRECT refused here" },
        device_label,
        o.value_bytes >> 10,
        link_label
    );
    println!(
        "host: {} cores, load average {:.2} at start; {} s per point",
        report::cores(),
        report::load_average(),
        o.seconds
    );

    let pages = (o.file_bytes / o.value_bytes as u64).max(1);
    let mut results: Vec<(&str, Vec<Point>)> = SERIES.iter().map(|s| (*s, Vec::new())).collect();
    for &n in &o.threads {
        eprintln!("waffle probe: {n} threads");
        let vb = o.value_bytes;
        let (f, d) = (Arc::clone(&file), emulated.clone());
        results[0].1.push(measure(
            n,
            o.seconds,
            |_| vec![0u8; vb],
            |buf, rng| {
                let page = PageId::new(0, rng.gen_range(0..pages) as u32);
                match &d {
                    Some(d) => d.read_pages(&*f, page, vb, buf).is_ok(),
                    None => f.read_pages(page, vb, buf).is_ok(),
                }
            },
        ));
        let addr = node.addr();
        let keys_ref = &keys;
        let link = bare_link.clone();
        results[1].1.push(measure(
            n,
            o.seconds,
            |_| {
                let s = TcpStream::connect(&addr).expect("connect to memcached");
                s.set_nodelay(true).expect("nodelay");
                (BufReader::with_capacity(64 << 10, s), Vec::new())
            },
            |(stream, buf), rng| {
                let key = keys_ref[rng.gen_range(0..keys_ref.len())].as_bytes();
                let t = Instant::now();
                let ok = matches!(bare_get(stream, key, buf), Ok(true));
                if let Some(l) = &link {
                    l.complete(t, key.len() + 6, buf.len() + 12);
                }
                ok
            },
        ));
        let g = Arc::clone(&grid);
        results[2].1.push(measure(
            n,
            o.seconds,
            |_| vec![0u8; vb],
            |out, rng| {
                let p = rng.gen_range(0..keys_ref.len());
                // As the cache reads a hit: the envelope opened in place, into the page buffer.
                let expect = Identity { cache_id, page: p as u64, version: 1 };
                matches!(
                    g.get_with(keys_ref[p].as_bytes(), |v| envelope::open_into(v, expect, None, out)),
                    Fetch::Hit(Ok(_))
                )
            },
        ));
    }
    drop(node);

    println!();
    println!(
        "{:>7} | {:>9} {:>9} {:>9} | {:>9} {:>9} {:>9} | {:>9} {:>9} {:>9} | {:>8}",
        "threads", "disk p50", "p99", "ops/s", "mg p50", "p99", "ops/s", "grid p50", "p99", "ops/s", "grid/mg"
    );
    let mut ratios = Vec::new();
    for i in 0..o.threads.len() {
        let (d, m, g) = (&results[0].1[i], &results[1].1[i], &results[2].1[i]);
        let r = if m.p50_us > 0.0 { g.p50_us / m.p50_us } else { f64::NAN };
        ratios.push(json!({ "threads": d.threads, "grid_hit_over_bare_mg_p50": if r.is_finite() { json!(r) } else { Value::Null } }));
        println!(
            "{:>7} | {:>6.0} us {:>6.0} us {:>9.0} | {:>6.0} us {:>6.0} us {:>9.0} | {:>6.0} us {:>6.0} us {:>9.0} | {:>7.2}x",
            d.threads, d.p50_us, d.p99_us, d.ops_per_s, m.p50_us, m.p99_us, m.ops_per_s, g.p50_us, g.p99_us, g.ops_per_s, r
        );
    }
    let errors: u64 = results.iter().flat_map(|s| s.1.iter().map(|p| p.errors)).sum();
    if errors > 0 {
        println!("  {errors} operations failed (not in the latencies)");
    }
    let notes = report::emulation_notes(device.as_slice(), o.link.as_slice());
    for n in &notes {
        println!("{n}");
    }
    println!("host load average {:.2} at the end", report::load_average());

    let draw = |_: &Value, dir: &Path| {
        let file = dir.join("probe.png");
        let mut series = Vec::new();
        for (i, (name, pts)) in results.iter().enumerate() {
            series.push(chart::Series {
                name: format!("{name} p50"),
                points: pts.iter().map(|p| (p.threads as f64, p.p50_us.max(1.0))).collect(),
                dashed: false,
                color: i,
            });
            series.push(chart::Series {
                name: format!("{name} p99"),
                points: pts.iter().map(|p| (p.threads as f64, p.p99_us.max(1.0))).collect(),
                dashed: true,
                color: i,
            });
        }
        chart::line_chart(
            &file,
            &format!("waffle probe: {} KiB read latency against concurrency", o.value_bytes >> 10),
            &format!(
                "disk: {device_label}, O_DIRECT; grid: one memcached node, link {link_label}\n{} cores, {} s per point",
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
    };
    let mut report = json!({
        "command": "probe",
        "invocation": report::invocation(),
        "value_bytes": o.value_bytes,
        "file_bytes": o.file_bytes,
        "o_direct": direct,
        "device": device_label,
        "link": link_label,
        "seconds_per_point": o.seconds,
        "emulated": notes,
        "series": results.iter().map(|(n, p)| json!({ "name": n, "points": p })).collect::<Vec<_>>(),
        "grid_hit_over_bare_mg": ratios,
        "host": { "cores": report::cores(), "load_end": report::load_average() },
    });
    o.output.write(&mut report, draw)?;
    Ok(report)
}
