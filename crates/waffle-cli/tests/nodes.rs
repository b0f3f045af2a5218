//! `waffle nodes` as operators run it: with stdin closed (a service, `&`,
//! nohup) it runs until SIGINT, SIGTERM or SIGHUP and then stops its memcached
//! children; a node that dies stops the others and fails the command; a
//! SIGKILL of the command leaves no node behind; `--print-flags` prints a
//! command that binds an address and drops root, which a real memcached runs.
//! Sizes and page sizes are refused naming the flag and the value.
//!
//! Every memcached here listens on 127.0.0.1; every process is stopped, and
//! every wait is bounded.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(10);

fn waffle() -> Command {
    Command::new(env!("CARGO_BIN_EXE_waffle"))
}

/// `waffle nodes ...` running, with its memcached children, all killed when dropped.
struct Running {
    child: Child,
    grid: Vec<SocketAddr>,
    memcached: Vec<u32>,
    stderr: mpsc::Receiver<String>,
}

impl Running {
    fn start(args: &[&str]) -> Running {
        let mut child = waffle()
            .arg("nodes")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run waffle nodes");
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut err = child.stderr.take().unwrap();
        let (tx, lines) = mpsc::channel();
        thread::spawn(move || stdout.lines().map_while(Result::ok).for_each(|l| drop(tx.send(l))));
        let (tx, stderr) = mpsc::channel();
        thread::spawn(move || {
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            let _ = tx.send(s);
        });
        let mut running = Running { child, grid: Vec::new(), memcached: Vec::new(), stderr };
        let line = loop {
            let line = lines.recv_timeout(WAIT).expect("waffle nodes printed no WAFFLE_GRID line");
            if let Some(list) = line.strip_prefix("WAFFLE_GRID=") {
                break list.to_string();
            }
        };
        running.grid = line.split(',').map(|a| a.parse().expect("an address")).collect();
        running.memcached = children(running.child.id());
        let exited = running.child.try_wait().unwrap();
        assert_eq!(
            running.memcached.len(),
            running.grid.len(),
            "one memcached per node (waffle nodes exited: {exited:?})"
        );
        running
    }

    fn signal(&self, name: &str) {
        signal(self.child.id(), name);
    }

    /// Waits for the command's end: its success and its stderr.
    fn wait(&mut self) -> (bool, String) {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                let err = self.stderr.recv_timeout(WAIT).unwrap_or_default();
                return (status.success(), err);
            }
            assert!(Instant::now() < deadline, "waffle nodes did not exit");
            thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        for &pid in &self.memcached {
            if alive(pid) && cmdline(pid).contains("memcached") {
                signal(pid, "KILL");
            }
        }
    }
}

fn signal(pid: u32, name: &str) {
    let ok = Command::new("kill").args(["-s", name, &pid.to_string()]).status().expect("run kill").success();
    assert!(ok, "kill -s {name} {pid}");
}

/// The processes whose parent is `pid`.
fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        if stat(p).and_then(|s| s.split_whitespace().nth(1)?.parse::<u32>().ok()) == Some(pid) {
            out.push(p);
        }
    }
    out
}

/// /proc/PID/stat after the command name: "STATE PPID ...".
fn stat(pid: u32) -> Option<String> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(s.rsplit_once(')')?.1.trim().to_string())
}

fn cmdline(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline")).map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default()
}

/// Running (a zombie nobody reaps is dead: an orphan's new parent may never reap it here).
fn alive(pid: u32) -> bool {
    stat(pid).is_some_and(|s| !s.starts_with('Z') && !s.starts_with('X'))
}

fn answers(addr: SocketAddr) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_millis(500)) else { return false };
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut reply = [0u8; 4];
    s.write_all(b"mn\r\n").is_ok() && s.read_exact(&mut reply).is_ok() && &reply == b"MN\r\n"
}

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn with_stdin_closed_it_runs_until_a_signal_then_stops_its_nodes() {
    for sig in ["TERM", "INT", "HUP"] {
        let mut nodes = Running::start(&["--count", "2", "--memory", "8MiB"]);
        thread::sleep(Duration::from_millis(800));
        assert!(nodes.child.try_wait().unwrap().is_none(), "waffle nodes exited on its own (stdin is closed)");
        assert!(nodes.grid.iter().all(|&a| answers(a)), "every node answers");
        nodes.signal(sig);
        let (ok, err) = nodes.wait();
        assert!(ok, "SIG{sig}: a clean stop: {err}");
        assert!(err.contains("stopped"), "SIG{sig}: {err}");
        for (&addr, &pid) in nodes.grid.iter().zip(&nodes.memcached) {
            assert!(!alive(pid), "SIG{sig}: memcached {pid} ({addr}) outlived waffle nodes");
            assert!(!answers(addr), "SIG{sig}: {addr} still answers");
        }
    }
}

#[test]
fn a_node_that_dies_stops_the_others_and_fails_the_command() {
    let mut nodes = Running::start(&["--count", "2", "--memory", "8MiB"]);
    signal(nodes.memcached[0], "KILL");
    let (ok, err) = nodes.wait();
    assert!(!ok, "a dead node is an error: {err}");
    assert!(err.contains(&nodes.grid[0].to_string()) && err.contains("exited"), "names the node: {err}");
    assert!(!alive(nodes.memcached[1]), "the other node was stopped");
    assert!(!answers(nodes.grid[1]));
}

#[test]
fn a_sigkill_of_the_command_leaves_no_node_running() {
    let mut nodes = Running::start(&["--count", "2", "--memory", "8MiB"]);
    nodes.child.kill().unwrap();
    nodes.child.wait().unwrap();
    let pids = nodes.memcached.clone();
    wait_until("the nodes die with waffle nodes", || pids.iter().all(|&p| !alive(p)));
    assert!(nodes.grid.iter().all(|&a| !answers(a)));
}

fn print_flags(args: &[&str]) -> (String, String) {
    let out = waffle().args(["nodes", "--print-flags"]).args(args).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{args:?}: {stderr}");
    (stdout.trim().to_string(), stderr.into_owned())
}

#[test]
fn printed_flags_bind_an_address_drop_root_and_start_a_real_memcached() {
    let (line, note) = print_flags(&["--page-size", "16384", "--memory", "64MiB"]);
    let words: Vec<&str> = line.split_whitespace().collect();
    let flag = |f: &str| words.iter().position(|w| *w == f).map(|i| words[i + 1]);
    assert_eq!(flag("-l"), Some("127.0.0.1"), "{line}");
    assert!(matches!(flag("-u"), Some("memcache" | "nobody")), "{line}");
    assert_eq!(flag("-m"), Some("64"), "{line}");
    assert_eq!(flag("-p"), Some("11211"), "{line}");
    assert!(line.contains("slab_chunk_max="), "{line}");
    assert!(note.contains("unauthenticated") && note.contains("private network"), "{note}");
    assert_eq!(note.lines().count(), 1, "one line on exposure: {note}");

    let (other, _) = print_flags(&["--listen", "10.0.0.2", "--port", "11311"]);
    assert!(other.contains("-l 10.0.0.2 -p 11311 "), "{other}");

    // The printed command, on a free loopback port instead of 11211, as whoever runs the tests
    // (as root, memcached refuses to start without -u).
    for _attempt in 0..8 {
        if printed_command_answers(&words[1..]) {
            return;
        }
    }
    panic!("the printed command's memcached never had a port of its own in 8 attempts");
}

/// Runs `args` with a free loopback port for 11211, until it answers (true) or finds the port
/// taken (false): a port found free can be bound by a parallel test's node before this
/// memcached binds it; it then exits, or another process answers there.
fn printed_command_answers(args: &[&str]) -> bool {
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port().to_string();
    let args: Vec<&str> = args.iter().map(|w| if *w == "11211" { port.as_str() } else { w }).collect();
    let memcached = std::env::var("WAFFLE_MEMCACHED").unwrap_or_else(|_| "memcached".into());
    let child = Command::new(memcached).args(&args).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    struct Kill(Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut child = Kill(child);
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut ours = None;
    wait_until("the printed command's memcached answers", || {
        if let Some(status) = child.0.try_wait().unwrap() {
            let mut err = String::new();
            let _ = child.0.stderr.take().unwrap().read_to_string(&mut err);
            assert!(err.contains("Address already in use"), "memcached {args:?} exited ({status}): {err}");
            ours = Some(false);
            return true;
        }
        ours = waffle_nodes::answering_pid(addr).map(|pid| pid == child.0.id());
        ours.is_some()
    });
    ours == Some(true)
}

#[test]
fn sizes_and_page_sizes_are_refused_naming_the_flag_and_the_value() {
    for (args, flag, value) in [
        (&["--memory", "0"][..], "--memory", "0"),
        (&["--memory", "64MB"][..], "--memory", "64MB"),
        (&["--memory", "1536KiB"][..], "--memory", "1536KiB"),
        (&["--memory", "1MiB"][..], "--memory", "1MiB"),
        (&["--page-size", "1000"][..], "--page-size", "1000"),
        (&["--page-size", "16KB"][..], "--page-size", "16KB"),
        (&["--listen", "0.0.0.0"][..], "--listen", "0.0.0.0"),
    ] {
        let out = waffle().args(["nodes", "--print-flags"]).args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} was accepted: {}", String::from_utf8_lossy(&out.stdout));
        assert!(err.contains(flag) && err.contains(&format!("'{value}'")), "{args:?}: {err}");
    }
    // K, M, G are binary, as memcached's -m reads them.
    assert_eq!(print_flags(&["--memory", "64M", "--page-size", "0"]).0, print_flags(&["--page-size", "0"]).0);
    assert!(print_flags(&["--memory", "1G"]).0.contains(" -m 1024 "));
    assert_eq!(print_flags(&["--page-size", "16KiB"]).0, print_flags(&["--page-size", "16384"]).0);
}
