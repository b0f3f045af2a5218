//! `waffle stats` as an operator runs it: a stopped server's missing file
//! beside a healthy one, the Prometheus endpoint (`--listen`) scraped over a
//! plain TCP connection, and the stats file a SQLite database writes
//! (`waffle_stats_file`, here through `waffle warm` on a real memcached grid)
//! read back by `waffle stats`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

fn waffle() -> Command {
    Command::new(env!("CARGO_BIN_EXE_waffle"))
}

struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("waffle-cli-stats-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(std::fs::canonicalize(&p).unwrap()) // the `source` label's spelling
    }

    fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A stats file as the preload writes it: the format marker first (a JSON without it is no stats
/// file), stamped by a live writer (this test's process) now, at an interval of an hour (never
/// stale here, however slow the machine).
fn stats_json(l1_hits: u64) -> String {
    let me = waffle_core::stats::health::own();
    serde_json::json!({
        "format": waffle_core::stats_file::FORMAT, "format_version": waffle_core::stats_file::FORMAT_VERSION,
        "adapter": "mariadb-preload", "state": "running", "l1_hits": l1_hits, "l1_misses": 5,
        "pid": std::process::id(), "pid_start_ticks": me.start_ticks, "pid_namespace": me.pid_namespace,
        "boot_id": me.boot_id, "interval_ms": 3_600_000, "updated_unix_ms": waffle_core::stats::health::now_unix_ms(),
    })
    .to_string()
}

fn run(args: &[&Path]) -> Output {
    waffle().args(args).output().expect("run waffle")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The sample `series` (as written) in an exposition.
fn sample(exposition: &str, series: &str) -> Option<f64> {
    exposition.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[test]
fn a_missing_stats_file_is_up_0_and_every_other_file_is_still_exported() {
    let dir = TempDir::new("missing");
    let (good, missing, prom) = (dir.join("good.json"), dir.join("missing.json"), dir.join("waffle.prom"));
    std::fs::write(&good, stats_json(42)).unwrap();
    let out = run(&[Path::new("stats"), Path::new("--format"), Path::new("prometheus"), &good, &missing]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    let up = |p: &Path| sample(&stdout, &format!("waffle_up{{source=\"{}\"}}", p.display()));
    assert_eq!(up(&good), Some(1.0), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert_eq!(up(&missing), Some(0.0), "{stdout}");
    assert_eq!(sample(&stdout, &format!("waffle_l1_hits_total{{source=\"{}\"}}", good.display())), Some(42.0));
    assert!(!stdout.contains("# EOF"), "the classic text format (issue 32 item 4):\n{stdout}");
    assert_eq!(out.status.code(), Some(1), "a file could not be read: exit 1 (documented)");
    assert!(stderr.contains(&format!("cannot read {}", missing.display())), "{stderr}");
    // The same into a file for node_exporter: written whole all the same.
    let out = run(&[
        Path::new("stats"),
        Path::new("--format"),
        Path::new("prometheus"),
        Path::new("--output"),
        &prom,
        &good,
        &missing,
    ]);
    assert_eq!(out.status.code(), Some(1));
    let written = std::fs::read_to_string(&prom).unwrap();
    assert_eq!(sample(&written, &format!("waffle_up{{source=\"{}\"}}", missing.display())), Some(0.0), "{written}");
    assert_eq!(sample(&written, &format!("waffle_l1_hits_total{{source=\"{}\"}}", good.display())), Some(42.0));
    // Text for people: the good file shown, the missing one named.
    let out = run(&[Path::new("stats"), &good, &missing]);
    assert!(text(&out.stdout).contains("reads    47 pages"), "{}", text(&out.stdout));
    assert_eq!(out.status.code(), Some(1));
    // Every file read: exit 0.
    let out = run(&[Path::new("stats"), Path::new("--format"), Path::new("prometheus"), &good]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// `waffle stats --listen 127.0.0.1:0 FILES`, killed when dropped.
struct Endpoint {
    child: Child,
    addr: String,
}

impl Endpoint {
    fn start(files: &[&Path]) -> Endpoint {
        let mut child = waffle()
            .args(["stats", "--listen", "127.0.0.1:0"])
            .args(files)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start waffle stats --listen");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let url = line.trim().rsplit(' ').next().unwrap().to_string();
        let addr = url.strip_prefix("http://").and_then(|u| u.strip_suffix("/metrics")).expect(&line).to_string();
        Endpoint { child, addr }
    }

    /// A plain HTTP/1.0 GET: the status line, the headers and the body.
    fn get(&self, path: &str) -> (String, String, String) {
        self.get_accepting(path, None)
    }

    /// As [`Endpoint::get`], with an `Accept` header if given.
    fn get_accepting(&self, path: &str, accept: Option<&str>) -> (String, String, String) {
        let mut s = TcpStream::connect(&self.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let accept = accept.map_or_else(String::new, |a| format!("Accept: {a}\r\n"));
        write!(s, "GET {path} HTTP/1.0\r\nHost: {}\r\n{accept}\r\n", self.addr).unwrap();
        let mut all = String::new();
        s.read_to_string(&mut all).unwrap();
        let (head, body) = all.split_once("\r\n\r\n").expect("a head and a body");
        let (status, headers) = head.split_once("\r\n").unwrap_or((head, ""));
        (status.to_string(), headers.to_ascii_lowercase(), body.to_string())
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn the_endpoint_serves_metrics_and_reads_the_files_again_at_every_scrape() {
    let dir = TempDir::new("listen");
    let (a, b) = (dir.join("a.json"), dir.join("b.json"));
    std::fs::write(&a, stats_json(1)).unwrap();
    let endpoint = Endpoint::start(&[&a, &b]);
    // Nothing asked: the classic text format (issue 32 item 4); OpenMetrics to a scraper that asks for it.
    let (status, headers, body) = endpoint.get("/metrics");
    assert!(status.starts_with("HTTP/1.") && status.contains(" 200"), "{status}");
    assert!(headers.contains("content-type: text/plain; version=0.0.4"), "{headers}");
    assert!(body.contains("# TYPE waffle_l1_hits_total counter\n") && !body.contains("# EOF"), "{body}");
    let (_, headers, body) = endpoint.get_accepting("/metrics", Some("application/openmetrics-text;version=1.0.0"));
    assert!(headers.contains("content-type: application/openmetrics-text; version=1.0.0"), "{headers}");
    let series = |p: &Path, metric: &str| format!("{metric}{{source=\"{}\"}}", p.display());
    assert_eq!(sample(&body, &series(&a, "waffle_up")), Some(1.0), "{body}");
    assert_eq!(sample(&body, &series(&b, "waffle_up")), Some(0.0), "{body}");
    assert_eq!(sample(&body, &series(&a, "waffle_l1_hits_total")), Some(1.0), "{body}");
    assert!(body.ends_with("# EOF\n"));
    // The server comes back, the other moves on: the next scrape sees both.
    std::fs::write(&a, stats_json(2)).unwrap();
    std::fs::write(&b, stats_json(30)).unwrap();
    let (_, _, body) = endpoint.get("/metrics");
    assert_eq!(sample(&body, &series(&a, "waffle_l1_hits_total")), Some(2.0), "{body}");
    assert_eq!(sample(&body, &series(&b, "waffle_up")), Some(1.0), "{body}");
    assert_eq!(sample(&body, &series(&b, "waffle_l1_hits_total")), Some(30.0), "{body}");
    let (status, _, _) = endpoint.get("/other");
    assert!(status.contains(" 404"), "{status}");
}

#[test]
fn listen_refuses_another_format_and_an_address_it_cannot_bind() {
    let out = waffle().args(["stats", "--listen", "127.0.0.1:0", "--format", "text", "x.json"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("serves Prometheus metrics only"), "{}", text(&out.stderr));
    let out = waffle().args(["stats", "--listen", "no-such-host.invalid:9477", "x.json"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("--listen no-such-host.invalid:9477"), "{}", text(&out.stderr));
}

/// A SQLite database of one empty page of 4 KiB, as SQLite lays it out (this crate links no SQLite).
fn empty_database(path: &Path) {
    let mut page = vec![0u8; 4096];
    page[..16].copy_from_slice(b"SQLite format 3\0");
    page[16..18].copy_from_slice(&4096u16.to_be_bytes()); // page size
    page[18..24].copy_from_slice(&[1, 1, 0, 64, 32, 32]); // versions, reserved bytes, payload fractions
    for (offset, value) in [(24, 1u32), (28, 1), (44, 4), (56, 1), (92, 1), (96, 3_046_000)] {
        // change counter, pages, schema format, UTF-8, version-valid-for, SQLite version
        page[offset..offset + 4].copy_from_slice(&value.to_be_bytes());
    }
    page[100] = 0x0d; // page 1: an empty table leaf (the schema), its cell content at the page's end
    page[105..107].copy_from_slice(&4096u16.to_be_bytes());
    std::fs::write(path, page).unwrap();
}

#[test]
fn a_sqlite_databases_stats_file_is_read_by_waffle_stats() {
    let node = waffle_nodes::Node::start(16).expect("memcached (apt-get install memcached)");
    let dir = TempDir::new("sqlite");
    let (db, stats) = (dir.join("app.db"), dir.join("app-stats.json"));
    empty_database(&db);
    // The environment names the file (the URI parameter waffle_stats_file does the same).
    let out = waffle()
        .args(["warm", "--quiet", "--grid", &node.addr()])
        .arg(&db)
        .env("WAFFLE_STATS_FILE", &stats)
        .output()
        .unwrap();
    assert!(out.status.success(), "waffle warm: {}", text(&out.stderr));
    let written: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    assert_eq!((written["adapter"].as_str(), written["final"].as_bool()), (Some("sqlite"), Some(true)), "{written}");
    let out = run(&[Path::new("stats"), Path::new("--format"), Path::new("prometheus"), &stats]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let body = text(&out.stdout);
    let s = format!("source=\"{}\"", std::fs::canonicalize(&stats).unwrap().display());
    // Closed: stopped, so not up, and its last figures are not exported as current.
    assert_eq!(sample(&body, &format!("waffle_up{{{s}}}")), Some(0.0), "{body}");
    assert_eq!(sample(&body, &format!("waffle_state{{{s},state=\"stopped\"}}")), Some(1.0), "{body}");
    assert_eq!(sample(&body, &format!("waffle_stats_final{{{s}}}")), Some(1.0), "{body}");
    assert!(!body.contains("waffle_node_up{"), "{body}");
    let db = std::fs::canonicalize(&db).unwrap();
    assert!(body.contains(&format!("waffle_info{{{s},adapter=\"sqlite\",database=\"{}\"}}", db.display())), "{body}");
    let out = run(&[Path::new("stats"), &stats]);
    let shown = text(&out.stdout);
    assert!(
        shown.contains(": sqlite, pid ") && shown.contains(", stopped (its last write: the database was closed"),
        "{shown}"
    );
    assert!(shown.contains(&format!("grid {}", node.addr())), "{shown}");
}
