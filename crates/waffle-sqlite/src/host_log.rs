//! Waffle's log under SQLite: the host's own log, `sqlite3_log()`, and stderr.
//!
//! Every line waffle logs (at or above `WAFFLE_LOG` / `waffle_log`, default
//! warn) goes to `sqlite3_log()` with a code by level (`SQLITE_ERROR`,
//! `SQLITE_WARNING`, `SQLITE_NOTICE`) and the text `waffle: message`: a host
//! that set `SQLITE_CONFIG_LOG` (rusqlite's `trace::config_log`, apsw's
//! `config(SQLITE_CONFIG_LOG, ...)`) gets them in its own log; without one
//! SQLite drops them. Whether a host set one cannot be asked, so the same
//! lines also go to stderr, unless `WAFFLE_LOG_STDERR=0` (for a host that
//! logs through SQLite and wants nothing on its stderr). At the default level
//! a healthy run writes nothing to either.

use std::ffi::CString;
use std::os::raw::c_int;

use waffle_core::log::{Level, Sink, Stderr};

use crate::api::{Api, Log};

/// `WAFFLE_LOG_STDERR=0` (or `off`): the host's log only.
pub const STDERR_ENV: &str = "WAFFLE_LOG_STDERR";

const SQLITE_ERROR: c_int = 1;
const SQLITE_NOTICE: c_int = 27;
const SQLITE_WARNING: c_int = 28;

struct HostLog {
    log: Option<Log>,
    stderr: bool,
}

/// The code `sqlite3_log` gets for a line of `level`.
pub fn code(level: Level) -> c_int {
    match level {
        Level::Error => SQLITE_ERROR,
        Level::Warn => SQLITE_WARNING,
        Level::Info | Level::Debug => SQLITE_NOTICE,
    }
}

/// Whether lines also go to stderr, from the value of `WAFFLE_LOG_STDERR`.
pub fn stderr_wanted(value: Option<&str>) -> bool {
    !matches!(value.map(|v| v.trim().to_ascii_lowercase()).as_deref(), Some("0" | "off" | "no" | "false"))
}

impl Sink for HostLog {
    fn write(&self, level: Level, msg: &str) {
        if let Some(log) = self.log {
            // A NUL inside would cut the line short: shown as a space.
            let text = CString::new(format!("waffle: {msg}").replace('\0', " ")).unwrap_or_default();
            // SAFETY: sqlite3_log with a "%s" format and one NUL-terminated string; SQLite
            // copies it into a buffer of its own before calling the host's callback.
            unsafe { log(code(level), c"%s".as_ptr(), text.as_ptr()) };
        }
        if self.stderr {
            Stderr.write(level, msg);
        }
    }
}

/// Sends waffle's log to `api`'s SQLite (at registration).
pub fn install(api: &Api) {
    let stderr = stderr_wanted(std::env::var(STDERR_ENV).ok().as_deref());
    waffle_core::log::set_sink(Box::new(HostLog { log: api.log, stderr }));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stderr_unless_turned_off() {
        for on in [None, Some("1"), Some("on"), Some("")] {
            assert!(stderr_wanted(on), "{on:?}");
        }
        for off in ["0", "off", "OFF", " no ", "false"] {
            assert!(!stderr_wanted(Some(off)), "{off:?}");
        }
    }

    #[test]
    fn codes_by_level() {
        assert_eq!(code(Level::Error), SQLITE_ERROR);
        assert_eq!(code(Level::Warn), SQLITE_WARNING);
        assert_eq!(code(Level::Info), SQLITE_NOTICE);
        assert_eq!(code(Level::Debug), SQLITE_NOTICE);
    }
}
