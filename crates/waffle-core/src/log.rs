//! Waffle's log: one level for the process, one sink set by the adapter, a
//! rate limiter per message.
//!
//! Waffle is a library inside someone else's process, so it speaks only when
//! something is wrong (default level `warn`: a healthy run prints nothing) and
//! through the host's own log where the host has one:
//!
//! * the level comes from `WAFFLE_LOG` (`error`, `warn`, `info`, `debug`; read
//!   at the first line), and from `waffle_log=` / `WAFFLE_LOG` at each open
//!   through [`crate::Config`] ([`set_level`]): the log is the process's, so
//!   the last open that names a level sets it for everything;
//! * the sink is set by the adapter when it registers ([`set_sink`]): SQLite
//!   hands lines to `sqlite3_log()` (and stderr), the MariaDB preload writes
//!   the server's error-log format; without one, lines go to stderr as
//!   `waffle: [warning: ]message`;
//! * every line has a key (its call site, or a key given, e.g. one per grid
//!   node): per key at most [`BURST`] lines per [`WINDOW`]; what is held back
//!   is counted and said once the window is over, with the last message held
//!   back ([`Limiter`]). Debug lines (tracing, asked for) are not limited.
//!
//! Levels by meaning: `error`, a fault that costs the user something (an open
//! refused, a write that could not be saved); `warn`, a state change worth an
//! operator's attention (a node down, up again), said once per change;
//! `info`, the system working as designed (a cost back-off decision, the
//! preload's start); `debug`, tracing.

use std::collections::HashMap;
use std::fmt;
use std::io::Write;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

/// The environment variable that sets the level.
pub const LEVEL_ENV: &str = "WAFFLE_LOG";

/// How much is said: each level includes the ones before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    Error = 1,
    Warn = 2,
    Info = 3,
    Debug = 4,
}

/// A `waffle_log` value that names no level.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("expected error, warn, info or debug")]
pub struct LevelError;

impl Level {
    pub const DEFAULT: Level = Level::Warn;

    /// `error`, `warn` (or `warning`), `info`, `debug`, any case.
    pub fn parse(s: &str) -> Result<Level, LevelError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "error" => Ok(Level::Error),
            "warn" | "warning" => Ok(Level::Warn),
            "info" => Ok(Level::Info),
            "debug" => Ok(Level::Debug),
            _ => Err(LevelError),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Level::Error => "error",
            Level::Warn => "warn",
            Level::Info => "info",
            Level::Debug => "debug",
        }
    }

    fn from_u8(v: u8) -> Option<Level> {
        match v {
            1 => Some(Level::Error),
            2 => Some(Level::Warn),
            3 => Some(Level::Info),
            4 => Some(Level::Debug),
            _ => None,
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where lines go. Called outside every lock of this module, from any thread.
pub trait Sink: Send + Sync {
    /// One line, without the `waffle:` prefix or a newline.
    fn write(&self, level: Level, msg: &str);
}

/// Lines on stderr, `YYYY-MM-DD HH:MM:SS waffle: message` for errors and
/// `... waffle: LEVEL: message` for the others, the time local: stderr has no
/// time of its own (a journal adds one, a redirected file does not), and a
/// line to compare with the host's log needs one. The host's own log
/// (`sqlite3_log`) gets the line without it: it carries its own.
pub struct Stderr;

impl Stderr {
    /// The line [`Stderr`] writes at `tm` (without the newline).
    pub fn stamped(tm: &libc::tm, level: Level, msg: &str) -> String {
        format!(
            "{:04}-{:02}-{:02} {:02}:{:02}:{:02} {}",
            tm.tm_year + 1900,
            tm.tm_mon + 1,
            tm.tm_mday,
            tm.tm_hour,
            tm.tm_min,
            tm.tm_sec,
            Stderr::format(level, msg)
        )
    }

    /// The text [`Stderr`] writes for a line (without the newline).
    pub fn format(level: Level, msg: &str) -> String {
        match level {
            Level::Error => format!("waffle: {msg}"),
            Level::Warn => format!("waffle: warning: {msg}"),
            other => format!("waffle: {other}: {msg}"),
        }
    }
}

/// The local time now, broken down.
pub fn local_now() -> libc::tm {
    // SAFETY: time(NULL), and localtime_r into a zeroed tm of our own.
    unsafe {
        let t = libc::time(std::ptr::null_mut());
        let mut tm: libc::tm = std::mem::zeroed();
        libc::localtime_r(&t, &mut tm);
        tm
    }
}

/// The text after the time of a line [`Stderr`] wrote (`waffle: ...`); None for a line that is not one.
pub fn unstamped(line: &str) -> Option<&str> {
    let rest = line.get(20..)?;
    let stamp = line.as_bytes();
    let shape = stamp[..19].iter().enumerate().all(|(i, b)| match i {
        4 | 7 => *b == b'-',
        10 => *b == b' ',
        13 | 16 => *b == b':',
        _ => b.is_ascii_digit(),
    });
    (shape && stamp[19] == b' ' && rest.starts_with("waffle:")).then_some(rest)
}

impl Sink for Stderr {
    fn write(&self, level: Level, msg: &str) {
        let mut line = Stderr::stamped(&local_now(), level, msg);
        line.push('\n');
        // One write: lines of several threads do not interleave.
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }
}

/// 0: not read from the environment yet.
static LEVEL: AtomicU8 = AtomicU8::new(0);
static SINK: RwLock<Option<&'static dyn Sink>> = RwLock::new(None);
/// Held only to admit or flush lines, never while one is written (fork.rs takes it around a fork).
static LIMITER: Mutex<Option<Limiter>> = Mutex::new(None);

/// The limiter's lock, held across a fork (crate::fork).
pub(crate) struct ForkHold(#[allow(dead_code)] std::sync::MutexGuard<'static, Option<Limiter>>);

pub(crate) fn hold_for_fork() -> ForkHold {
    ForkHold(LIMITER.lock().unwrap_or_else(|e| e.into_inner()))
}

/// The level now: the last [`set_level`], else `WAFFLE_LOG`, else warn
/// (a bad `WAFFLE_LOG` is refused by the next open, naming it).
pub fn level() -> Level {
    if let Some(l) = Level::from_u8(LEVEL.load(Ordering::Relaxed)) {
        return l;
    }
    let l = std::env::var(LEVEL_ENV).ok().and_then(|v| Level::parse(&v).ok()).unwrap_or(Level::DEFAULT);
    // A set_level meanwhile wins.
    let _ = LEVEL.compare_exchange(0, l as u8, Ordering::Relaxed, Ordering::Relaxed);
    Level::from_u8(LEVEL.load(Ordering::Relaxed)).unwrap_or(l)
}

pub fn set_level(level: Level) {
    LEVEL.store(level as u8, Ordering::Relaxed);
}

/// Whether a line of `level` would be written (check before costly formatting).
pub fn enabled(level: Level) -> bool {
    level <= self::level()
}

/// Sets where lines go for the rest of the process (the adapter, once, at
/// registration; a later call replaces it). The sink lives as long as the
/// process: it is leaked, as the library may be called until exit.
pub fn set_sink(sink: Box<dyn Sink>) {
    let sink: &'static dyn Sink = Box::leak(sink);
    *SINK.write().unwrap_or_else(|e| e.into_inner()) = Some(sink);
}

/// One line of `level` under `key` (see the macros [`crate::error!`] and the others).
pub fn emit(level: Level, key: &str, args: fmt::Arguments<'_>) {
    if !enabled(level) {
        return;
    }
    let msg = fmt::format(args);
    if level == Level::Debug {
        // Tracing is asked for by name and wants every line: not limited.
        write(level, &msg);
        return;
    }
    let lines = {
        let mut limiter = LIMITER.lock().unwrap_or_else(|e| e.into_inner());
        limiter.get_or_insert_with(Limiter::new).admit(key, level, &msg, Instant::now())
    };
    for (level, line) in lines {
        write(level, &line);
    }
}

/// Says now what the limiter held back under keys whose window is over. A
/// summary otherwise waits for the next line of any key, which may never come
/// (a node flapped, then settled): the grid's prober thread calls this every
/// tick, so it comes at most a tick after its window.
pub fn flush_held() {
    let lines = {
        let mut limiter = LIMITER.lock().unwrap_or_else(|e| e.into_inner());
        match limiter.as_mut() {
            Some(l) => l.flush(Instant::now(), None),
            None => return,
        }
    };
    for (level, line) in lines {
        if enabled(level) {
            write(level, &line);
        }
    }
}

/// Writes one line to the sink as it is: no level check, no limiter (a trace
/// asked for by name, `WAFFLE_TRACE=coherence`).
pub fn write(level: Level, msg: &str) {
    match *SINK.read().unwrap_or_else(|e| e.into_inner()) {
        Some(s) => s.write(level, msg),
        None => Stderr.write(level, msg),
    }
}

/// Lines per key per window before the limiter holds lines back.
pub const BURST: u32 = 3;
/// The limiter's window.
pub const WINDOW: Duration = Duration::from_secs(60);
/// Keys remembered; past them, new keys share one.
const MAX_KEYS: usize = 512;

#[derive(Debug)]
struct KeyState {
    window_start: Instant,
    said: u32,
    held: u64,
    held_level: Level,
    last_held: String,
}

/// Per key: at most [`BURST`] lines per [`WINDOW`]. A line held back is
/// counted; once its window is over, the next line of any key says how many
/// were held back and the last of them (so a node that flapped and settled
/// ends with its last state), or the key's next line carries the count.
#[derive(Debug)]
pub struct Limiter {
    keys: HashMap<String, KeyState>,
    burst: u32,
    window: Duration,
}

impl Default for Limiter {
    fn default() -> Self {
        Limiter::new()
    }
}

impl Limiter {
    pub fn new() -> Limiter {
        Limiter::with(BURST, WINDOW)
    }

    pub fn with(burst: u32, window: Duration) -> Limiter {
        Limiter { keys: HashMap::new(), burst: burst.max(1), window }
    }

    /// The lines to write now for `msg` under `key` at `now`: none (held
    /// back), the line, or summaries of what was held back and the line.
    pub fn admit(&mut self, key: &str, level: Level, msg: &str, now: Instant) -> Vec<(Level, String)> {
        let mut out = self.flush(now, Some(key));
        let key = if self.keys.len() >= MAX_KEYS && !self.keys.contains_key(key) { "(other)" } else { key };
        let window = self.window;
        let st = self.keys.entry(key.to_string()).or_insert_with(|| KeyState {
            window_start: now,
            said: 0,
            held: 0,
            held_level: level,
            last_held: String::new(),
        });
        if now.saturating_duration_since(st.window_start) >= window {
            st.window_start = now;
            st.said = 0;
        }
        if st.said < self.burst {
            st.said += 1;
            if st.held > 0 {
                out.push((level, format!("{msg} ({} like it not logged in the last {})", st.held, ago(window))));
                st.held = 0;
            } else {
                out.push((level, msg.to_string()));
            }
        } else {
            st.held += 1;
            st.held_level = st.held_level.min(level);
            st.last_held = msg.to_string();
        }
        out
    }

    /// Summaries of the keys (but `skip`) whose window is over with lines held back.
    pub fn flush(&mut self, now: Instant, skip: Option<&str>) -> Vec<(Level, String)> {
        let mut out = Vec::new();
        let window = self.window;
        self.keys.retain(|key, st| {
            let over = now.saturating_duration_since(st.window_start) >= window;
            if !over || Some(key.as_str()) == skip {
                return true;
            }
            if st.held > 0 {
                let n = st.held;
                let lines = if n == 1 { "line" } else { "lines" };
                out.push((
                    st.held_level,
                    format!("{n} {lines} like this not logged in the last {}; the last: {}", ago(window), st.last_held),
                ));
            }
            // A key quiet for a whole window is forgotten (its next line starts afresh).
            false
        });
        out
    }

    /// Lines held back under `key` now (tests).
    pub fn held(&self, key: &str) -> u64 {
        self.keys.get(key).map_or(0, |s| s.held)
    }
}

fn ago(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 60 && s.is_multiple_of(60) {
        format!("{} min", s / 60)
    } else if s > 0 {
        format!("{s} s")
    } else {
        format!("{} ms", d.as_millis())
    }
}

/// `error!("...", args)` or `error!(key: k, "...", args)`: a fault that costs the user something.
#[macro_export]
macro_rules! error {
    (key: $key:expr, $($arg:tt)+) => { $crate::log::emit($crate::log::Level::Error, &$key, format_args!($($arg)+)) };
    ($($arg:tt)+) => { $crate::log::emit($crate::log::Level::Error, concat!(file!(), ":", line!()), format_args!($($arg)+)) };
}

/// `warn!(...)`: a state change worth an operator's attention, said once per change.
#[macro_export]
macro_rules! warn {
    (key: $key:expr, $($arg:tt)+) => { $crate::log::emit($crate::log::Level::Warn, &$key, format_args!($($arg)+)) };
    ($($arg:tt)+) => { $crate::log::emit($crate::log::Level::Warn, concat!(file!(), ":", line!()), format_args!($($arg)+)) };
}

/// `info!(...)`: the system working as designed.
#[macro_export]
macro_rules! info {
    (key: $key:expr, $($arg:tt)+) => { $crate::log::emit($crate::log::Level::Info, &$key, format_args!($($arg)+)) };
    ($($arg:tt)+) => { $crate::log::emit($crate::log::Level::Info, concat!(file!(), ":", line!()), format_args!($($arg)+)) };
}

/// `debug!(...)`: tracing.
#[macro_export]
macro_rules! debug {
    (key: $key:expr, $($arg:tt)+) => { $crate::log::emit($crate::log::Level::Debug, &$key, format_args!($($arg)+)) };
    ($($arg:tt)+) => { $crate::log::emit($crate::log::Level::Debug, concat!(file!(), ":", line!()), format_args!($($arg)+)) };
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn levels_parse_in_any_case_and_refuse_the_rest() {
        assert_eq!(LevelError.to_string(), "expected error, warn, info or debug");
        assert_eq!(Level::parse("error"), Ok(Level::Error));
        assert_eq!(Level::parse(" WARN "), Ok(Level::Warn));
        assert_eq!(Level::parse("Warning"), Ok(Level::Warn));
        assert_eq!(Level::parse("info"), Ok(Level::Info));
        assert_eq!(Level::parse("DEBUG"), Ok(Level::Debug));
        for bad in ["", "verbose", "3", "trace", "warn,info"] {
            assert_eq!(Level::parse(bad), Err(LevelError), "{bad:?} accepted");
        }
        assert!(Level::Error < Level::Warn && Level::Warn < Level::Info && Level::Info < Level::Debug);
        assert_eq!(Level::DEFAULT, Level::Warn);
    }

    #[test]
    fn stderr_lines_name_their_level() {
        assert_eq!(Stderr::format(Level::Error, "cannot open x"), "waffle: cannot open x");
        assert_eq!(Stderr::format(Level::Warn, "node down"), "waffle: warning: node down");
        assert_eq!(Stderr::format(Level::Info, "backed off"), "waffle: info: backed off");
        // Issue 32 item 12: a stderr line carries its time, as the host's log lines do.
        // SAFETY: a zeroed tm is a valid one (all fields integers or a null pointer).
        let mut tm: libc::tm = unsafe { std::mem::zeroed() };
        (tm.tm_year, tm.tm_mon, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec) = (126, 10, 25, 7, 5, 9);
        let line = Stderr::stamped(&tm, Level::Warn, "node down");
        assert_eq!(line, "2026-11-25 07:05:09 waffle: warning: node down");
        assert_eq!(unstamped(&line), Some("waffle: warning: node down"));
        let now = Stderr::stamped(&local_now(), Level::Error, "x");
        assert_eq!(unstamped(&now), Some("waffle: x"), "{now}");
        assert_eq!(unstamped("waffle: x"), None);
        assert_eq!(Stderr::format(Level::Debug, "trace"), "waffle: debug: trace");
    }

    fn texts(lines: Vec<(Level, String)>) -> Vec<String> {
        lines.into_iter().map(|(_, l)| l).collect()
    }

    #[test]
    fn a_burst_per_key_then_held_back_then_counted() {
        let mut l = Limiter::with(3, 60 * S);
        let t0 = Instant::now();
        let mut written = 0;
        for i in 0..100 {
            written += l.admit("node a", Level::Warn, &format!("a {i}"), t0 + i * S / 10).len();
        }
        assert_eq!(written, 3, "three lines of a key per window");
        assert_eq!(l.held("node a"), 97);
        // Another key has its own budget.
        assert_eq!(texts(l.admit("node b", Level::Warn, "b", t0 + 20 * S)), vec!["b"]);
        // After the window, the key's next line carries the count.
        let next = texts(l.admit("node a", Level::Warn, "a again", t0 + 61 * S));
        assert_eq!(next, vec!["a again (97 like it not logged in the last 1 min)"]);
        assert_eq!(l.held("node a"), 0);
    }

    #[test]
    fn a_key_that_goes_quiet_is_summed_up_by_the_next_line_of_any_key() {
        let mut l = Limiter::with(2, 60 * S);
        let t0 = Instant::now();
        for (i, state) in ["down", "up", "down", "up", "down", "up"].iter().enumerate() {
            l.admit("node a", Level::Warn, &format!("node a is {state}"), t0 + i as u32 * S);
        }
        assert_eq!(l.held("node a"), 4);
        // Within the window: nothing about node a yet.
        assert_eq!(texts(l.admit("other", Level::Error, "x", t0 + 30 * S)), vec!["x"]);
        // After it: the summary, with the last state, then the line.
        let lines = l.admit("other", Level::Error, "y", t0 + 61 * S);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert_eq!(lines[0].0, Level::Warn);
        assert_eq!(lines[0].1, "4 lines like this not logged in the last 1 min; the last: node a is up");
        assert_eq!(lines[1].1, "y");
        assert_eq!(l.held("node a"), 0);
        // Said once: nothing more later.
        assert_eq!(texts(l.admit("other", Level::Error, "z", t0 + 200 * S)), vec!["z"]);
    }

    #[test]
    fn the_held_level_is_the_most_severe_held() {
        let mut l = Limiter::with(1, 10 * S);
        let t0 = Instant::now();
        l.admit("k", Level::Info, "1", t0);
        l.admit("k", Level::Info, "2", t0);
        l.admit("k", Level::Error, "3", t0);
        l.admit("k", Level::Info, "4", t0);
        let lines = l.flush(t0 + 10 * S, None);
        assert_eq!(
            lines,
            vec![(Level::Error, "3 lines like this not logged in the last 10 s; the last: 4".to_string())]
        );
    }

    #[test]
    fn keys_are_bounded() {
        let mut l = Limiter::with(1, 60 * S);
        let t0 = Instant::now();
        for i in 0..MAX_KEYS + 100 {
            l.admit(&format!("k{i}"), Level::Warn, "m", t0);
        }
        assert!(l.keys.len() <= MAX_KEYS + 1);
        assert_eq!(l.held("(other)"), 99, "the keys past the bound share one budget");
    }
}
