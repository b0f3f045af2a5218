//! Lines in the server's error log (its stderr), prefixed `waffle:` so they
//! are easy to find among InnoDB's.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::guard;

fn line(level: &str, msg: &str) {
    let _g = guard::Guard::enter();
    eprintln!("[{level}] waffle: {msg}");
}

pub fn note(msg: &str) {
    line("Note", msg);
}

pub fn error(msg: &str) {
    line("ERROR", msg);
}

/// At most one such line per second (a fault that repeats on every read must not flood the log).
pub fn rate_limited_error(msg: &str) {
    static LAST_S: AtomicU64 = AtomicU64::new(0);
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    if LAST_S.swap(now, Ordering::Relaxed) != now {
        error(msg);
    }
}

/// Distinct warnings [`warn_once`] remembers; past them, it says nothing new.
const MAX_WARNINGS: usize = 256;

/// A warning said once per process: a condition met at every tick (a
/// directory it cannot write, a symlink at a file's name) says so once.
pub fn warn_once(msg: &str) {
    static SAID: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let mut said = SAID.lock().unwrap_or_else(|e| e.into_inner());
    if said.len() >= MAX_WARNINGS || said.iter().any(|m| m == msg) {
        return;
    }
    said.push(msg.to_string());
    drop(said);
    line("Warning", msg);
}
