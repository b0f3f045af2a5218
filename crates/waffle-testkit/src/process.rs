//! Child processes a test starts: killed (and reaped) when dropped, waited for until they say they
//! are ready, or run with input under a time limit; and the arguments of this crate's own child
//! programs.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// A child program's arguments, exactly one per name in `names`; anything else prints a usage line
/// and exits with status 2 (a child is run by its test, which passes them all).
pub fn child_args<const N: usize>(program: &str, names: [&str; N]) -> [String; N] {
    let args: Vec<String> = std::env::args().skip(1).collect();
    args.try_into().unwrap_or_else(|_| {
        let usage: Vec<String> = names.iter().map(|n| format!("<{n}>")).collect();
        eprintln!("usage: {program} {} (run by the end-to-end tests, see tests/README.md)", usage.join(" "));
        std::process::exit(2)
    })
}

/// A child process killed (and reaped) when dropped, so a failing test leaves none behind.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Spawns `cmd` with stdout piped and waits (at most `limit`) for a line containing "ready ";
/// returns the child and the rest of that line. A child that exits first, or is not ready in
/// time, fails the test.
pub fn spawn_until_ready(cmd: &mut Command, limit: Duration) -> (KillOnDrop, String) {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    let mut child = KillOnDrop(child);
    let stdout = child.0.stdout.take().expect("stdout is piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(at) = line.find("ready ") {
                let _ = tx.send(line[at + 6..].to_string());
                break;
            }
        }
    });
    let ready = rx.recv_timeout(limit).unwrap_or_else(|e| panic!("{cmd:?} never got ready ({e})"));
    (child, ready)
}

/// Runs `cmd` with `input` on stdin (written by another thread, so a child
/// that answers while it reads cannot block on a full pipe); kills it and
/// fails if it takes longer than `limit`.
pub fn run_with_input(cmd: &mut Command, input: &str, limit: Duration) -> Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    let mut stdin = child.stdin.take().unwrap();
    let input = input.as_bytes().to_vec();
    let feeder = std::thread::spawn(move || {
        // A child that exits early (.bail on) closes the pipe: not our error.
        let _ = stdin.write_all(&input);
    });
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = match rx.recv_timeout(limit) {
        Ok(out) => out.expect("wait for child"),
        Err(_) => {
            // SAFETY: kill(2) on our own child, which has not been reaped (its waiter is still blocked).
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            panic!("{cmd:?} did not finish in {limit:?}");
        }
    };
    let _ = feeder.join();
    out
}

/// Collects what a child writes on `err` (its stderr) on a thread of its own, until it closes:
/// read it at any time through the returned text.
pub fn collect_stderr(mut err: impl std::io::Read + Send + 'static) -> std::sync::Arc<std::sync::Mutex<String>> {
    let text = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let sink = std::sync::Arc::clone(&text);
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = err.read(&mut buf) {
            if n == 0 {
                break;
            }
            sink.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    text
}

/// The pid of a child that has exited and been reaped: a process that is not running (for a
/// stats file's writer that died). waffle-core's health tests keep a copy (the product does not
/// depend on the tools).
pub fn exited_pid() -> u32 {
    let mut child = Command::new("true").spawn().expect("spawn true");
    let pid = child.id();
    child.wait().expect("reap true");
    pid
}
