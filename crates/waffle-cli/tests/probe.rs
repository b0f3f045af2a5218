//! `waffle probe` against real nodes (`--grid`), and its scratch file gone on
//! every way out: success, an error after the file was written, and SIGTERM
//! in the middle of a measurement (its own memcached stopped too).
//!
//! The nodes are real memcached processes on 127.0.0.1 (waffle_nodes), and
//! every wait is bounded.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;
use waffle_nodes::Node;
use waffle_testkit::temp_dir::TempDir;

const WAIT: Duration = Duration::from_secs(20);

fn waffle() -> Command {
    Command::new(env!("CARGO_BIN_EXE_waffle"))
}

/// The names of the files in `dir` (none if it does not exist).
fn files(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut names: Vec<String> = entries.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

const SMALL: [&str; 6] = ["--threads", "1,2", "--seconds", "0.2", "--file-size", "1MiB"];

#[test]
fn probes_real_nodes_named_by_grid_and_leaves_nothing_in_them() {
    let nodes = [Node::start(16).expect("memcached"), Node::start(16).expect("memcached")];
    let grid = format!("{},{}", nodes[0].addr(), nodes[1].addr());
    let dir = TempDir::new("grid");
    let json = dir.path().join("probe.json");
    let work = dir.path().join("work");
    let out = waffle()
        .arg("probe")
        .args(SMALL)
        .args(["--grid", &grid, "--dir", work.to_str().unwrap(), "--json", json.to_str().unwrap()])
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains(&format!("2 memcached nodes ({}, {})", nodes[0].addr(), nodes[1].addr())), "{stdout}");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["grid"]["nodes"], serde_json::json!([nodes[0].addr(), nodes[1].addr()]));
    assert_eq!(v["grid"]["own_node"], false);
    for s in v["series"].as_array().unwrap() {
        for p in s["points"].as_array().unwrap() {
            assert!(p["ops_per_s"].as_f64().is_some_and(|x| x > 0.0), "{s}");
            assert_eq!(p["errors"], 0, "{s}");
        }
    }
    for node in &nodes {
        assert!(node.stat("get_hits").unwrap() > 100, "{} served the probe's fetches", node.addr());
        assert_eq!(node.stat("curr_items").unwrap(), 0, "{} keeps none of the probe's values", node.addr());
    }
    assert!(!work.exists(), "the scratch directory the probe made is gone: {:?}", files(&work));
}

#[test]
fn the_scratch_file_goes_on_success_and_on_an_error() {
    let dir = TempDir::new("paths");
    std::fs::write(dir.path().join("mine.txt"), "not the probe's").unwrap();
    let d = dir.path().to_str().unwrap();
    let out = waffle().arg("probe").args(SMALL).args(["--dir", d]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(files(dir.path()), ["mine.txt"], "after a run: only what was there before");

    // A node nobody listens on: the values cannot be stored, after the file was written.
    let closed = format!("127.0.0.1:{}", waffle_nodes::closed_port());
    let out = waffle().arg("probe").args(SMALL).args(["--dir", d, "--grid", &closed]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("could store only 0"), "{stderr}");
    assert_eq!(files(dir.path()), ["mine.txt"], "after an error: only what was there before");
}

/// The processes whose parent is `pid`, with their command lines.
fn children(pid: u32) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else { continue };
        let ppid = stat.rsplit_once(')').and_then(|(_, r)| r.split_whitespace().nth(1)?.parse::<u32>().ok());
        if ppid == Some(pid) {
            let cmd = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
            out.push((p, String::from_utf8_lossy(&cmd).into_owned()));
        }
    }
    out
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(')').map(|(_, r)| r.trim_start().starts_with(['Z', 'X'])))
        .is_some_and(|dead| !dead)
}

struct Kill(std::process::Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `waffle probe` with its own node, once it measures (the file written, the node running):
/// the process, its stderr lines, and its memcached's pid.
fn measuring(dir: &TempDir) -> (Kill, mpsc::Receiver<String>, u32) {
    let args = ["--threads", "1", "--seconds", "60", "--file-size", "1MiB", "--dir", dir.path().to_str().unwrap()];
    let mut child = waffle()
        .arg("probe")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run waffle probe");
    let err = BufReader::new(child.stderr.take().unwrap());
    let child = Kill(child);
    let (tx, lines) = mpsc::channel();
    thread::spawn(move || err.lines().map_while(Result::ok).for_each(|l| drop(tx.send(l))));
    loop {
        let line = lines.recv_timeout(WAIT).expect("the probe never started measuring");
        if line.contains("1 threads") {
            break;
        }
    }
    let memcached: Vec<u32> =
        children(child.0.id()).into_iter().filter(|(_, cmd)| cmd.contains("memcached")).map(|(p, _)| p).collect();
    assert_eq!(memcached.len(), 1, "the probe's own node");
    assert_eq!(files(dir.path()).len(), 1, "the scratch file: {:?}", files(dir.path()));
    (child, lines, memcached[0])
}

#[test]
fn sigterm_mid_measurement_removes_the_file_and_stops_the_node() {
    let dir = TempDir::new("signal");
    let (mut child, lines, memcached) = measuring(&dir);
    let started = Instant::now();
    assert!(Command::new("kill").args(["-s", "TERM", &child.0.id().to_string()]).status().unwrap().success());
    let status = loop {
        if let Some(s) = child.0.try_wait().unwrap() {
            break s;
        }
        assert!(started.elapsed() < WAIT, "the probe went on after SIGTERM");
        thread::sleep(Duration::from_millis(20));
    };
    // Its last lines, until its stderr closes.
    let rest: Vec<String> = std::iter::from_fn(|| lines.recv_timeout(WAIT).ok()).collect();
    assert!(!status.success(), "interrupted is no success");
    assert!(rest.iter().any(|l| l.contains("interrupted")), "{rest:?}");
    assert!(started.elapsed() < Duration::from_secs(5), "stopped at once, not after the 60 s point");
    assert_eq!(files(dir.path()), Vec::<String>::new(), "the scratch file is gone");
    assert!(!alive(memcached), "the probe's memcached was stopped");
}

#[test]
fn a_sigkill_of_the_probe_leaves_no_node_running() {
    let dir = TempDir::new("sigkill");
    let (mut child, _lines, memcached) = measuring(&dir);
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    let started = Instant::now();
    while alive(memcached) {
        assert!(started.elapsed() < WAIT, "memcached {memcached} outlived the killed probe");
        thread::sleep(Duration::from_millis(20));
    }
}
