//! Local memcached nodes for the demo and the tests.
//!
//! A [`Node`] is a real `memcached` process listening on a free loopback port.
//! It is started, waited for (bounded), and always stopped: dropping a `Node`
//! kills and reaps the process, so a panicking test leaves nothing behind.
//! Faults are injected with signals: [`Node::pause`] (SIGSTOP, a hung node),
//! [`Node::resume`] (SIGCONT), [`Node::kill`] (SIGKILL) and [`Node::restart`]
//! (a new, empty process on the same port).
//!
//! [`Node::start_for_pages`] starts it with slab classes that fit pages of one
//! size ([`slabs::SlabPlan`]); [`Node::start`] keeps memcached's defaults.
//! [`group::Group`] is `waffle nodes`: nodes watched until asked to stop, tied
//! to their starter so that not even a SIGKILL leaves them running;
//! [`command`] is the memcached command line printed for an operator's own node;
//! [`flash`] the extstore settings of a node with flash (`--ssd`); [`ports`]
//! loopback ports a test holds, for an unreachable node or a stand-in's.

pub mod command;
pub mod flash;
pub mod group;
pub mod ports;
pub mod slabs;

pub use ports::closed_port;

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// How long a node may take to accept connections after it is started (a soak's explorer at
/// autogroup nice 10 beside a CI-like run once saw a restarted memcached not answer in 5 s,
/// seed 9000013 step 0; a start is not what any test checks, and one that fails says so).
const START_TIMEOUT_MS: u64 = 20_000;
/// Attempts at finding a port that is free and stays free until memcached binds it.
const START_ATTEMPTS: u32 = 8;
/// `waffle nodes --memory`: memcached hands memory to a slab class 1 MiB at a time and a
/// page's plan spreads over at least [`slabs::MIN_CLASSES`] classes; below this a node holds
/// next to nothing (and memcached itself refuses under 2 MiB).
pub const MIN_MEMORY_MIB: u32 = 8;
/// The most memory of one node `waffle nodes` starts or prints flags for.
pub const MAX_MEMORY_MIB: u32 = 64 << 10;

/// A node's memory as memcached's `-m` takes it: a whole number of MiB, from
/// [`MIN_MEMORY_MIB`] to [`MAX_MEMORY_MIB`] (the error is the reason; the caller names the flag).
pub fn memory_mib(bytes: u64) -> Result<u32, String> {
    if !bytes.is_multiple_of(1 << 20) {
        return Err(format!("{bytes} bytes is no whole number of MiB (memcached's -m counts MiB)"));
    }
    let mib = bytes >> 20;
    if !(u64::from(MIN_MEMORY_MIB)..=u64::from(MAX_MEMORY_MIB)).contains(&mib) {
        return Err(format!("{mib} MiB: a node has from {MIN_MEMORY_MIB} MiB to {} GiB", MAX_MEMORY_MIB >> 10));
    }
    Ok(mib as u32)
}

/// Where the `memcached` binary is: `$WAFFLE_MEMCACHED`, else the first one on `PATH`,
/// else Debian's `/usr/bin/memcached`.
pub fn memcached_binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("WAFFLE_MEMCACHED") {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        let candidate = dir.join("memcached");
        if candidate.is_file() {
            return Some(candidate);
        }
    }
    let debian = PathBuf::from("/usr/bin/memcached");
    debian.is_file().then_some(debian)
}

/// A memcached process on 127.0.0.1, stopped when dropped.
pub struct Node {
    child: Option<Child>,
    port: u16,
    memory_mib: u32,
    /// Slab flags (empty: memcached's defaults); a restart keeps them.
    slab_args: Vec<String>,
    /// Killed by the kernel when the starting thread ends ([`Node::start_tied`]); a restart keeps it.
    tied: bool,
}

impl Node {
    /// Starts memcached with `memory_mib` MiB of item memory on a free loopback port.
    pub fn start(memory_mib: u32) -> io::Result<Node> {
        Node::start_with(memory_mib, None)
    }

    /// Starts memcached with slab classes planned for pages of `page_bytes` in plain envelopes.
    pub fn start_for_pages(memory_mib: u32, page_bytes: u32) -> io::Result<Node> {
        Node::start_with(memory_mib, Some(&slabs::SlabPlan::for_node(page_bytes, false, memory_mib)))
    }

    /// Starts memcached with `plan`'s slab flags (None: memcached's defaults).
    pub fn start_with(memory_mib: u32, plan: Option<&slabs::SlabPlan>) -> io::Result<Node> {
        Node::start_with_args(memory_mib, &plan.map(slabs::SlabPlan::args).unwrap_or_default())
    }

    /// Starts memcached with these slab flags (benchmarks compare flag sets).
    pub fn start_with_args(memory_mib: u32, slab_args: &[String]) -> io::Result<Node> {
        Node::start_args(memory_mib, slab_args, false)
    }

    /// As [`Node::start_with`], and the process is tied to the calling thread:
    /// the kernel kills it when that thread ends, however it ends (SIGKILL
    /// included, which runs no destructor). For a program whose main thread owns
    /// its nodes (`waffle nodes`); a test thread that hands a node to another
    /// thread must not use it.
    pub fn start_tied(memory_mib: u32, plan: Option<&slabs::SlabPlan>) -> io::Result<Node> {
        Node::start_args(memory_mib, &plan.map(slabs::SlabPlan::args).unwrap_or_default(), true)
    }

    /// As [`Node::start_tied`] with these flags (slab classes, flash: [`flash::Flash::args`]).
    pub fn start_tied_with_args(memory_mib: u32, args: &[String]) -> io::Result<Node> {
        Node::start_args(memory_mib, args, true)
    }

    fn start_args(memory_mib: u32, slab_args: &[String], tied: bool) -> io::Result<Node> {
        let slab_args = slab_args.to_vec();
        let mut last_err = None;
        for _ in 0..START_ATTEMPTS {
            let port = free_port()?;
            match spawn(port, memory_mib, &slab_args, tied) {
                Ok(child) => {
                    return Ok(Node { child: Some(child), port, memory_mib, slab_args, tied });
                }
                Err(e) => last_err = Some(e),
            }
        }
        Err(last_err.unwrap_or_else(|| io::Error::other("memcached did not start")))
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:PORT`, the form a grid list takes.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn socket_addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// SIGSTOP: the node keeps its sockets open but answers nothing (a hung node).
    /// Returns once every thread of the process is stopped (the signal is
    /// delivered asynchronously; a request sent too early could still be
    /// answered). Panics if that takes more than a few seconds.
    pub fn pause(&self) {
        self.signal(libc::SIGSTOP);
        let Some(pid) = self.pid() else { return };
        let deadline = Instant::now() + Duration::from_millis(START_TIMEOUT_MS);
        while !all_threads_stopped(pid) {
            assert!(Instant::now() < deadline, "memcached {pid} did not stop after SIGSTOP");
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// SIGCONT: a paused node answers again, with whatever it held before.
    pub fn resume(&self) {
        self.signal(libc::SIGCONT);
    }

    /// SIGKILL, then reap. The port is free again afterwards.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills the process (if alive) and starts a new, empty one on the same port.
    pub fn restart(&mut self) -> io::Result<()> {
        self.kill();
        let deadline = Instant::now() + Duration::from_millis(START_TIMEOUT_MS);
        loop {
            match spawn(self.port, self.memory_mib, &self.slab_args, self.tied) {
                Ok(child) => {
                    self.child = Some(child);
                    return Ok(());
                }
                Err(e) if Instant::now() >= deadline => return Err(e),
                Err(_) => thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// memcached's `stats` (name -> value), on a connection of its own, bounded by `STATS_TIMEOUT_MS`.
    pub fn stats(&self) -> io::Result<HashMap<String, String>> {
        stats(self.socket_addr())
    }

    /// One numeric field of [`Node::stats`], e.g. `curr_items`.
    pub fn stat(&self, name: &str) -> io::Result<u64> {
        let all = self.stats()?;
        all.get(name)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| io::Error::other(format!("memcached at {} has no numeric stat {name}", self.addr())))
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// How the process ended, if it has ended by itself (it is then reaped); None while it runs
    /// (or after [`Node::kill`]).
    pub fn exit_status(&mut self) -> Option<std::process::ExitStatus> {
        let status = self.child.as_mut()?.try_wait().ok()??;
        self.child = None;
        Some(status)
    }

    fn signal(&self, sig: libc::c_int) {
        if let Some(child) = &self.child {
            // SAFETY: kill(2) on our own child's pid; the child is not reaped yet.
            unsafe {
                libc::kill(child.id() as libc::pid_t, sig);
            }
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        // A paused process still dies on SIGKILL.
        self.kill();
    }
}

/// Whether every thread of `pid` is in the stopped state ('T' in /proc/PID/task/*/stat).
fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return false };
    for task in tasks {
        let Ok(task) = task else { return false };
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else { return false };
        // The state letter follows the parenthesized command name.
        let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next());
        if !matches!(state, Some('T' | 't')) {
            return false;
        }
    }
    true
}

/// Bound of one `stats` exchange.
const STATS_TIMEOUT_MS: u64 = 2_000;
/// memcached's `stats` reply is a few KiB; more is not memcached.
const STATS_MAX_BYTES: usize = 256 << 10;

/// memcached's `stats` at `addr` as name -> value.
pub fn stats(addr: SocketAddr) -> io::Result<HashMap<String, String>> {
    let timeout = Duration::from_millis(STATS_TIMEOUT_MS);
    let mut s = TcpStream::connect_timeout(&addr, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    s.write_all(b"stats\r\n")?;
    let mut text = Vec::new();
    let mut buf = [0u8; 8192];
    while !text.ends_with(b"END\r\n") {
        let n = s.read(&mut buf)?;
        if n == 0 || text.len() + n > STATS_MAX_BYTES {
            return Err(io::Error::other(format!("memcached at {addr}: no complete stats reply")));
        }
        text.extend_from_slice(&buf[..n]);
    }
    let mut out = HashMap::new();
    for line in String::from_utf8_lossy(&text).lines() {
        let mut w = line.split_whitespace();
        if let (Some("STAT"), Some(k), Some(v)) = (w.next(), w.next(), w.next()) {
            out.insert(k.to_string(), v.to_string());
        }
    }
    Ok(out)
}

/// The pid of the memcached answering at `addr` (its `stats`, one connection), if one answers:
/// whether the process on a port found free is the one started there, or another's.
pub fn answering_pid(addr: SocketAddr) -> Option<u32> {
    stats(addr).ok()?.get("pid")?.parse().ok()
}

fn free_port() -> io::Result<u16> {
    let listener = TcpListener::bind(("127.0.0.1", 0))?;
    Ok(listener.local_addr()?.port())
}

fn spawn(port: u16, memory_mib: u32, slab_args: &[String], tied: bool) -> io::Result<Child> {
    let bin = memcached_binary().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            "memcached not found (install Debian's memcached package or set WAFFLE_MEMCACHED)",
        )
    })?;
    let mut cmd = Command::new(bin);
    cmd.args(["-l", "127.0.0.1", "-U", "0", "-t", "2", "-c", "1024"])
        .arg("-p")
        .arg(port.to_string())
        .arg("-m")
        .arg(memory_mib.to_string())
        .args(slab_args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: geteuid has no preconditions. memcached refuses to run as root without -u.
    if unsafe { libc::geteuid() } == 0 {
        cmd.args(["-u", "root"]);
    }
    if tied {
        tie_to_this_thread(&mut cmd);
    }
    let mut child = cmd.spawn()?;
    let deadline = Instant::now() + Duration::from_millis(START_TIMEOUT_MS);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    loop {
        if let Some(status) = child.try_wait()? {
            return Err(io::Error::other(format!("memcached on port {port} exited: {status}")));
        }
        // Ready when the process answering on the port is this child: a port
        // found free may have been taken by another test's node in between,
        // and a connect alone would take that node for ours.
        if let Some(pid) = answering_pid(addr) {
            if pid == child.id() {
                return Ok(child);
            }
            let _ = child.kill();
            let _ = child.wait();
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("port {port} is held by another memcached (pid {pid})"),
            ));
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(io::Error::new(io::ErrorKind::TimedOut, format!("memcached on port {port} did not listen")));
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// The child gets SIGKILL when the thread spawning it ends (PR_SET_PDEATHSIG).
fn tie_to_this_thread(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    // SAFETY: between fork and exec only async-signal-safe calls (prctl, getppid, _exit).
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died before the prctl: then nobody would ever kill us.
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_is_whole_mib_within_bounds() {
        assert_eq!(memory_mib(64 << 20), Ok(64));
        assert_eq!(memory_mib(8 << 20), Ok(8));
        assert_eq!(memory_mib(64 << 30), Ok(65536));
        for bad in [0, 1, 1 << 20, 7 << 20, (1 << 20) + 1, 1536 << 10, (64 << 30) + (1 << 20)] {
            assert!(memory_mib(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_exit_is_seen_and_reaped() {
        let mut node = Node::start(8).expect("memcached must be installed");
        assert!(node.exit_status().is_none(), "running");
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(node.pid().unwrap() as libc::pid_t, libc::SIGKILL) };
        let deadline = Instant::now() + Duration::from_secs(5);
        let status = loop {
            if let Some(s) = node.exit_status() {
                break s;
            }
            assert!(Instant::now() < deadline, "no exit seen");
            thread::sleep(Duration::from_millis(10));
        };
        assert!(!status.success());
        assert!(!node.is_running());
    }

    #[test]
    fn a_tied_node_dies_with_its_thread() {
        let (tx, rx) = std::sync::mpsc::channel();
        // The node outlives its Node (forgotten: no destructor runs), not its thread.
        thread::spawn(move || {
            let node = Node::start_tied(8, None).expect("memcached must be installed");
            tx.send((node.pid().unwrap(), node.socket_addr())).unwrap();
            std::mem::forget(node);
        })
        .join()
        .unwrap();
        let (pid, addr) = rx.recv().unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_ok() {
            assert!(Instant::now() < deadline, "memcached {pid} still answers after its thread ended");
            thread::sleep(Duration::from_millis(20));
        }
        // Reap it (it is still our child).
        // SAFETY: waitpid on our own child's pid.
        unsafe { libc::waitpid(pid as libc::pid_t, std::ptr::null_mut(), 0) };
    }

    #[test]
    fn start_answers_and_stop_frees_the_port() {
        let mut node = Node::start(8).expect("memcached must be installed");
        let mut s = TcpStream::connect(node.socket_addr()).unwrap();
        s.write_all(b"mn\r\n").unwrap();
        let mut buf = [0u8; 4];
        s.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"MN\r\n");
        let pid = node.pid().unwrap();
        node.kill();
        // Freed: our process answers no more (a parallel test's node may have the port by now).
        assert_ne!(answering_pid(node.socket_addr()), Some(pid));
    }

    #[test]
    fn a_closed_port_refuses_connections_and_no_memcached_can_take_it() {
        let port = closed_port();
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let e = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused, "{e}");
        let taken = spawn(port, 8, &[], false);
        assert!(taken.is_err(), "memcached started on a reserved port");
        assert!(TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_err(), "still closed");
    }

    #[test]
    fn a_node_is_ready_only_when_the_process_answering_is_its_own() {
        let other = Node::start(8).expect("memcached must be installed");
        // A second memcached on a port another one holds: it cannot bind, and the one
        // that answers there is not taken for it.
        let e = spawn(other.port(), 8, &[], false).unwrap_err();
        assert!(matches!(e.kind(), io::ErrorKind::AddrInUse) || e.to_string().contains("exited"), "{e}");
        let node = Node::start(8).unwrap();
        assert_ne!(node.port(), other.port());
        assert_eq!(answering_pid(node.socket_addr()), node.pid());
    }

    /// The classes memcached prints with `-vv` for these flags (read until it
    /// listens; a reader thread keeps a silent process from hanging the test).
    fn memcached_classes(args: &[String]) -> Vec<u32> {
        let port = free_port().unwrap();
        let mut cmd = Command::new(memcached_binary().expect("memcached must be installed"));
        cmd.args(["-l", "127.0.0.1", "-U", "0", "-m", "8", "-vv", "-p", &port.to_string()]).args(args);
        if unsafe { libc::geteuid() } == 0 {
            cmd.args(["-u", "root"]);
        }
        let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
        let mut err = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = err.read(&mut buf) {
                if tx.send(String::from_utf8_lossy(&buf[..n]).into_owned()).is_err() {
                    break;
                }
            }
        });
        let mut text = String::new();
        let deadline = Instant::now() + Duration::from_secs(5);
        while !text.contains("listening") && Instant::now() < deadline {
            if let Ok(chunk) = rx.recv_timeout(Duration::from_millis(100)) {
                text.push_str(&chunk);
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        let classes: Vec<u32> = text
            .lines()
            .filter_map(|l| l.split("chunk size").nth(1))
            .filter_map(|rest| rest.split_whitespace().next()?.parse().ok())
            .collect();
        assert!(!classes.is_empty(), "memcached {args:?} printed no classes: {text}");
        classes
    }

    #[test]
    fn the_planned_classes_are_the_ones_memcached_makes() {
        assert_eq!(memcached_classes(&[]), slabs::classes(1.25, 48, 512 * 1024), "the defaults");
        for page in [4096, 16384] {
            for sealed in [false, true] {
                let plan = slabs::SlabPlan::for_node(page, sealed, 1024);
                assert_eq!(memcached_classes(&plan.args()), plan.classes(), "{page} {}", plan.describe());
            }
        }
    }

    #[test]
    fn a_raw_page_is_stored_in_the_class_the_plan_predicts() {
        // Item sizes are memcached's: one raw page stored, and the class that
        // holds it is the one `item_bytes` and the plan name.
        let plan = slabs::SlabPlan::for_node(4096, false, 8);
        let node = Node::start_with(8, Some(&plan)).unwrap();
        let mut s = TcpStream::connect(node.socket_addr()).unwrap();
        let key = "wf0123456789abcdef.1234abcd";
        assert_eq!(key.len() as u32, slabs::KEY_BYTES_MAX);
        let value = vec![b'x'; 4096 + 40];
        s.write_all(format!("ms {key} {}\r\n", value.len()).as_bytes()).unwrap();
        s.write_all(&value).unwrap();
        s.write_all(b"\r\nstats slabs\r\n").unwrap();
        let mut text = String::new();
        let mut buf = [0u8; 8192];
        while !text.ends_with("END\r\n") {
            let n = s.read(&mut buf).unwrap();
            assert!(n > 0, "closed: {text}");
            text.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
        let used = text.lines().find(|l| l.contains(":used_chunks 1")).expect("one class holds the item");
        let class: usize = used.split(':').next().unwrap().trim_start_matches("STAT ").parse().unwrap();
        let size_line = format!("STAT {class}:chunk_size ");
        let chunk: u32 = text.lines().find_map(|l| l.strip_prefix(&size_line)).unwrap().trim().parse().unwrap();
        assert_eq!(Some(chunk), slabs::chunk_for(&plan.classes(), plan.raw_item_bytes), "{text}");
        assert!(chunk - plan.raw_item_bytes <= plan.raw_item_bytes / 100);
    }
}
