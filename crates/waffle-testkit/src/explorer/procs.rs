//! The driver's side of a worker process: spawn it, send a command, wait (bounded) for its
//! answer, keep what it writes on stderr, kill -9 it.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{ChildStdin, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use super::protocol::Answer;
use crate::process::KillOnDrop;

/// How long one answer may take (a checked build's VACUUM of a small table takes well under it):
/// a worker that takes longer is hung, and the schedule fails. Beyond a starved soak's stalls
/// (settings.rs, STATEMENT_BOUND).
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(60);

/// What every worker of a run is started with.
#[derive(Clone)]
pub struct WorkerArgs {
    pub program: PathBuf,
    pub db: PathBuf,
    pub grid: String,
    pub local: String,
    pub verify: bool,
}

pub struct WorkerProc {
    child: KillOnDrop,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
    stderr: Arc<Mutex<String>>,
    /// How much of stderr was already looked at.
    stderr_seen: usize,
}

impl WorkerProc {
    pub fn spawn(args: &WorkerArgs) -> Result<WorkerProc, String> {
        let mut child = Command::new(&args.program)
            .arg(&args.db)
            .arg(&args.grid)
            .arg(&args.local)
            .arg(if args.verify { "on" } else { "off" })
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("spawn {}: {e}", args.program.display()))?;
        let stdin = child.stdin.take().unwrap();
        let lines = line_channel(child.stdout.take().unwrap());
        let stderr = crate::process::collect_stderr(child.stderr.take().unwrap());
        let worker = WorkerProc { child: KillOnDrop(child), stdin, lines, stderr, stderr_seen: 0 };
        match worker.lines.recv_timeout(ANSWER_TIMEOUT) {
            Ok(line) if line.starts_with("ready ") => Ok(worker),
            other => Err(format!("worker not ready: {other:?}; stderr: {}", worker.stderr_text())),
        }
    }

    /// Sends one command and waits for its answer; a worker that does not answer in time is
    /// killed and the step fails.
    pub fn request(&mut self, command: &str) -> Result<Answer, String> {
        self.send(command)?;
        self.answer(command)
    }

    /// Sends a command without waiting: the driver does something while it runs.
    pub fn send(&mut self, command: &str) -> Result<(), String> {
        let sent = self.stdin.write_all(format!("{command}\n").as_bytes()).and_then(|_| self.stdin.flush());
        sent.map_err(|e| format!("worker gone ({e}); stderr: {}", self.stderr_text()))
    }

    /// The answer to the command sent last.
    pub fn answer(&mut self, command: &str) -> Result<Answer, String> {
        match self.lines.recv_timeout(ANSWER_TIMEOUT) {
            Ok(line) => Answer::parse(&line).ok_or_else(|| format!("not an answer: {line:?}")),
            Err(e) => {
                self.kill();
                Err(format!(
                    "no answer to {command:?} in {ANSWER_TIMEOUT:?} ({e}): hung, killed; stderr: {}",
                    self.stderr_text()
                ))
            }
        }
    }

    /// Lines of stderr not looked at before.
    pub fn new_stderr(&mut self) -> String {
        let text = self.stderr_text();
        let new = text.get(self.stderr_seen..).unwrap_or_default().to_string();
        self.stderr_seen = text.len();
        new
    }

    pub fn stderr_text(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    pub fn pid(&self) -> u32 {
        self.child.0.id()
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        let _ = self.child.0.kill();
        let _ = self.child.0.wait();
    }

    /// `quit`, then a bounded wait for a clean exit.
    pub fn quit(mut self) -> Result<(), String> {
        let _ = self.stdin.write_all(b"quit\n").and_then(|_| self.stdin.flush());
        for _ in 0..ANSWER_TIMEOUT.as_millis() / 10 {
            if let Some(status) = self.child.0.try_wait().map_err(|e| e.to_string())? {
                return if status.success() { Ok(()) } else { Err(format!("worker exited with {status}")) };
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Err(format!("worker did not exit in {ANSWER_TIMEOUT:?} after quit; stderr: {}", self.stderr_text()))
    }
}

fn line_channel(out: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// The worker program: next to the other child programs of the profile in use.
pub fn worker_program() -> PathBuf {
    crate::artefact("explorer-worker")
}
