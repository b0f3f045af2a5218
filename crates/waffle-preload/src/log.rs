//! Lines in the server's error log (its stderr), in the server's own form:
//! `2025-11-25 20:45:01 0 [Warning] waffle: message`, so they sort and filter
//! with InnoDB's. The time is local, as the server's; the thread field is 0,
//! as the server writes it for lines of its background threads (a
//! connection's id would be a lie: Waffle's lines are no connection's).
//!
//! Every line of the preload and of the core goes through waffle-core's log
//! (one level, `WAFFLE_LOG`, default warn: nothing in a healthy run; a rate
//! limiter per message): this module is its sink, set at the first line or
//! the runtime's start. `[Note]` lines (the start, the settings, a warm) are
//! the info level: `WAFFLE_LOG=info` shows them.

use std::io::Write;
use std::sync::{Mutex, Once};

use waffle_core::log::{Level, Sink};

use crate::guard;

struct ErrorLog;

/// The server's name for a level.
fn label(level: Level) -> &'static str {
    match level {
        Level::Error => "ERROR",
        Level::Warn => "Warning",
        Level::Info | Level::Debug => "Note",
    }
}

/// One line as the server writes its own: `YYYY-MM-DD HH:MM:SS 0 [Level] waffle: msg`
/// (the hour padded with a space, as MariaDB's `%2d`).
pub fn format_line(tm: &libc::tm, level: Level, msg: &str) -> String {
    format!(
        "{:04}-{:02}-{:02} {:2}:{:02}:{:02} 0 [{}] waffle: {msg}",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec,
        label(level)
    )
}

fn local_now() -> libc::tm {
    // SAFETY: time(NULL) and localtime_r into a zeroed tm of our own.
    unsafe {
        let t = libc::time(std::ptr::null_mut());
        let mut tm: libc::tm = std::mem::zeroed();
        libc::localtime_r(&t, &mut tm);
        tm
    }
}

impl Sink for ErrorLog {
    fn write(&self, level: Level, msg: &str) {
        let _g = guard::Guard::enter();
        let mut line = format_line(&local_now(), level, msg);
        line.push('\n');
        // One write: lines of several threads do not interleave.
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }
}

/// Makes this module waffle-core's log sink (once; every function here calls it).
pub fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| waffle_core::log::set_sink(Box::new(ErrorLog)));
}

/// `[Note]`: the info level (shown with `WAFFLE_LOG=info`).
pub fn note(msg: &str) {
    install();
    waffle_core::info!(key: msg, "{msg}");
}

/// `[ERROR]`: each distinct message, as often as the limiter lets it.
pub fn error(msg: &str) {
    install();
    waffle_core::error!(key: msg, "{msg}");
}

/// `[ERROR]` for a fault that repeats on every read: one key for every such
/// line, whatever its figures (a flood is one count).
pub fn rate_limited_error(msg: &str) {
    install();
    waffle_core::error!(key: "preload repeated fault", "{msg}");
}

/// Distinct warnings [`warn_once`] remembers; past them, it says nothing new.
const MAX_WARNINGS: usize = 256;

/// A warning said once per process: a condition met at every tick (a
/// directory it cannot write, a symlink at a file's name) says so once.
pub fn warn_once(msg: &str) {
    install();
    static SAID: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let mut said = SAID.lock().unwrap_or_else(|e| e.into_inner());
    if said.len() >= MAX_WARNINGS || said.iter().any(|m| m == msg) {
        return;
    }
    said.push(msg.to_string());
    drop(said);
    waffle_core::warn!(key: msg, "{msg}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_in_the_servers_form() {
        // SAFETY: a zeroed tm is a valid one.
        let mut tm: libc::tm = unsafe { std::mem::zeroed() };
        (tm.tm_year, tm.tm_mon, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec) = (125, 10, 5, 9, 4, 3);
        assert_eq!(
            format_line(&tm, Level::Warn, "grid node a:1 is down (io)"),
            "2025-11-05  9:04:03 0 [Warning] waffle: grid node a:1 is down (io)"
        );
        tm.tm_hour = 21;
        assert_eq!(format_line(&tm, Level::Error, "x"), "2025-11-05 21:04:03 0 [ERROR] waffle: x");
        assert_eq!(format_line(&tm, Level::Info, "y"), "2025-11-05 21:04:03 0 [Note] waffle: y");
        assert_eq!(format_line(&tm, Level::Debug, "z"), "2025-11-05 21:04:03 0 [Note] waffle: z");
    }
}
