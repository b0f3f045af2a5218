//! Configuration: parameters by name, each with an environment default.
//!
//! An adapter hands in a lookup (for SQLite: the URI parameter, else the
//! environment variable). A bad value is an error that names the parameter and
//! the value; an unreachable grid node is not a configuration error (it is a
//! warning at run time and a miss).

use std::fmt;

use std::path::Path;
use std::sync::Arc;

use crate::codec::{self, Codec};
use crate::grid::NodeSpec;
use crate::seal::SealKey;

/// One parameter: its URI name and its environment variable.
pub struct Param {
    pub name: &'static str,
    pub env: &'static str,
    pub help: &'static str,
}

pub const GRID: Param =
    Param { name: "waffle_grid", env: "WAFFLE_GRID", help: "grid nodes, host:port[:weight],... (empty: L1 only)" };
pub const LOCAL: Param =
    Param { name: "waffle_local", env: "WAFFLE_LOCAL", help: "L1 budget, e.g. 256MiB (default 256MiB)" };
pub const TIMEOUT_MS: Param = Param {
    name: "waffle_timeout_ms",
    env: "WAFFLE_TIMEOUT_MS",
    help: "deadline of one grid request in ms (default 5)",
};
pub const PUSH_QUEUE: Param = Param {
    name: "waffle_push_queue",
    env: "WAFFLE_PUSH_QUEUE",
    help: "bound of pages waiting to be pushed, in bytes (default 16MiB)",
};
pub const DIRECT_IO: Param = Param {
    name: "waffle_direct_io",
    env: "WAFFLE_DIRECT_IO",
    help: "read the backing file with O_DIRECT: on|off (default on)",
};

pub const DEVICE: Param = Param {
    name: "waffle_device",
    env: "WAFFLE_DEVICE",
    help: "benchmarks only: emulate a slower backing device: real|hdd-10k|ssd-2009|nvme|cloud-block (default real)",
};

pub const LINK: Param = Param {
    name: "waffle_link",
    env: "WAFFLE_LINK",
    help: "benchmarks only: emulate a slower link to the grid: loopback|10gbe|1gbe|100mb|dolphin (default loopback)",
};

pub const KEY_FILE: Param = Param {
    name: "waffle_key_file",
    env: "WAFFLE_KEY_FILE",
    help: "seal grid values with the 32-byte key in this file (raw or 64 hex digits)",
};
pub const GRID_CHANGE: Param = Param {
    name: "waffle_grid_change",
    env: "WAFFLE_GRID_CHANGE",
    help: "allow PRAGMA waffle_grid='...' to change the grid while open: on|off (default off)",
};
pub const GRID_BACKOFF: Param = Param {
    name: "waffle_grid_backoff",
    env: "WAFFLE_GRID_BACKOFF",
    help: "back off a grid node whose lookups cost more than the disk reads they save: on|off (default on)",
};

pub const COMPRESS: Param = Param {
    name: "waffle_compress",
    env: "WAFFLE_COMPRESS",
    help: "compress pages pushed to the grid: off|lz4|zstd|zstd:LEVEL (default zstd, level 1)",
};

pub const HOT_LIST: Param = Param {
    name: "waffle_hot_list",
    env: "WAFFLE_HOT_LIST",
    help: "at a clean close save the pages held, hottest first, and reload them at the next open: on (grid, else disk), grid (what the grid holds of a trusted list), off (default: grid under SQLite, on in the MariaDB preload)",
};

pub const VERIFY: Param = Param {
    name: "waffle_verify",
    env: "WAFFLE_VERIFY",
    help: "check every page served from L1, the push queue or the grid against a read of the file, count and log a difference and serve the file's bytes: on|off (default off; for tests and diagnosis)",
};

pub const LOG: Param = Param {
    name: "waffle_log",
    env: "WAFFLE_LOG",
    help: "what waffle logs: error|warn|info|debug (default warn: nothing in a healthy run); the process's level, set by the last open that names one",
};

/// Verify mode's differences are also appended to this file (environment
/// only: the test scripts collect every process's differences in one place).
pub const VERIFY_LOG_ENV: &str = "WAFFLE_VERIFY_LOG";

/// The key itself, as 64 hex digits: environment only (a URI is too easily logged).
pub const KEY_ENV: &str = "WAFFLE_KEY";

/// Every parameter, for documentation and `waffle --help`.
pub const PARAMS: [&Param; 14] = [
    &GRID,
    &LOCAL,
    &TIMEOUT_MS,
    &PUSH_QUEUE,
    &DIRECT_IO,
    &DEVICE,
    &LINK,
    &KEY_FILE,
    &GRID_CHANGE,
    &GRID_BACKOFF,
    &COMPRESS,
    &HOT_LIST,
    &VERIFY,
    &LOG,
];

/// Refuses a parameter that looks like ours (`waffle_` prefix) but is not one:
/// a misspelt `waffle_locl=1GiB` would otherwise run with defaults unnoticed.
pub fn check_name(name: &str) -> Result<(), ConfigError> {
    let lower = name.to_ascii_lowercase();
    if !lower.starts_with("waffle_") || PARAMS.iter().any(|p| p.name == lower) {
        return Ok(());
    }
    let known: Vec<&str> = PARAMS.iter().map(|p| p.name).collect();
    Err(ConfigError {
        param: "URI parameter",
        value: name.to_string(),
        reason: format!("not a waffle parameter (known: {})", known.join(", ")),
    })
}

pub const DEFAULT_LOCAL_BYTES: u64 = 256 << 20;
pub const DEFAULT_TIMEOUT_MS: u64 = 5;
pub const DEFAULT_PUSH_QUEUE_BYTES: u64 = 16 << 20;
/// A grid request may wait at most this long; more would stall the database on a sick node.
pub const MAX_TIMEOUT_MS: u64 = 60_000;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    pub grid: Vec<NodeSpec>,
    pub local_bytes: u64,
    pub timeout_ms: u64,
    pub push_queue_bytes: u64,
    pub direct_io: bool,
    /// Benchmarks only: the name of an EMULATED device profile, as given. The
    /// core never interprets it; an adapter resolves it with waffle-emulation.
    pub device: Option<String>,
    /// Benchmarks only: the name of an EMULATED link profile, as given (as `device`).
    pub link: Option<String>,
    /// Seal grid values with this key (waffle_key_file or WAFFLE_KEY); None: plain envelopes.
    pub seal_key: Option<Arc<SealKey>>,
    /// Whether `PRAGMA waffle_grid='...'` may move the grid while open (the opener's choice).
    pub grid_change: bool,
    /// Whether a node that costs more than the disk is backed off (grid::cost);
    /// off asks every node always (tests of the grid path, an operator who knows better).
    pub grid_backoff: bool,
    /// How pages pushed to the grid are compressed (reads accept every form).
    pub compress: Codec,
    /// Whether a clean close writes the hot list and how the next open
    /// reloads it (hot_list.rs); None: the adapter's default (SQLite: grid;
    /// the preload: on).
    pub hot_list: Option<HotListMode>,
    /// `waffle_verify`: every page served from a tier is compared with the file.
    pub verify: bool,
    /// WAFFLE_VERIFY_LOG: where verify mode appends its differences too.
    pub verify_log: Option<std::path::PathBuf>,
    /// `waffle_log`: the process's log level, if this open names one (crate::log).
    pub log: Option<crate::log::Level>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            grid: Vec::new(),
            local_bytes: DEFAULT_LOCAL_BYTES,
            timeout_ms: DEFAULT_TIMEOUT_MS,
            push_queue_bytes: DEFAULT_PUSH_QUEUE_BYTES,
            direct_io: true,
            device: None,
            link: None,
            seal_key: None,
            grid_change: false,
            grid_backoff: true,
            compress: codec::DEFAULT,
            hot_list: None,
            verify: false,
            verify_log: None,
            log: None,
        }
    }
}

/// `waffle_hot_list`: what a clean close's hot list is used for at the next open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HotListMode {
    /// No list written, none reloaded.
    Off,
    /// A trusted list's pages that the grid holds, fetched without a lock or a
    /// connection of the adapter's (SQLite's default).
    Grid,
    /// The grid where trusted, else the disk (inside the adapter's read locks).
    On,
}

impl HotListMode {
    pub fn parse(s: &str) -> Result<HotListMode, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "grid" => Ok(HotListMode::Grid),
            other => match parse_switch(other) {
                Ok(true) => Ok(HotListMode::On),
                Ok(false) => Ok(HotListMode::Off),
                Err(_) => Err("expected on, grid or off".into()),
            },
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    pub param: &'static str,
    pub value: String,
    pub reason: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bad value for {}: '{}': {}", self.param, self.value, self.reason)
    }
}

impl std::error::Error for ConfigError {}

impl ConfigError {
    /// `value` of parameter `p` is refused for `reason` (also for adapters that resolve a value later).
    pub fn bad_value(p: &Param, value: &str, reason: String) -> ConfigError {
        ConfigError { param: p.name, value: value.to_string(), reason }
    }
}

impl Config {
    /// The grid client's options for this configuration.
    pub fn grid_options(&self) -> crate::grid::GridOptions {
        crate::grid::GridOptions {
            timeout_ms: self.timeout_ms,
            cost_backoff: self.grid_backoff,
            ..crate::grid::GridOptions::default()
        }
    }

    /// Reads every parameter through `uri` (by URI name), falling back to the environment.
    pub fn from_lookup(uri: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        Self::from_sources(uri, |name| std::env::var(name).ok())
    }

    /// As [`Config::from_lookup`] with the environment given explicitly (tests).
    pub fn from_sources(
        uri: impl Fn(&str) -> Option<String>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let get = |p: &Param| uri(p.name).or_else(|| env(p.env));
        let mut c = Config::default();
        if let Some(v) = get(&GRID) {
            c.grid = NodeSpec::parse_list(&v).map_err(|reason| err(&GRID, &v, reason))?;
        }
        if let Some(v) = get(&LOCAL) {
            c.local_bytes = parse_size(&v).map_err(|reason| err(&LOCAL, &v, reason))?;
        }
        if let Some(v) = get(&TIMEOUT_MS) {
            c.timeout_ms = parse_count(&v, 1, MAX_TIMEOUT_MS).map_err(|reason| err(&TIMEOUT_MS, &v, reason))?;
        }
        if let Some(v) = get(&PUSH_QUEUE) {
            c.push_queue_bytes = parse_size(&v).map_err(|reason| err(&PUSH_QUEUE, &v, reason))?;
        }
        if let Some(v) = get(&DIRECT_IO) {
            c.direct_io = parse_switch(&v).map_err(|reason| err(&DIRECT_IO, &v, reason))?;
        }
        c.device = get(&DEVICE).map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
        c.link = get(&LINK).map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
        if let Some(v) = get(&GRID_CHANGE) {
            c.grid_change = parse_switch(&v).map_err(|reason| err(&GRID_CHANGE, &v, reason))?;
        }
        if let Some(v) = get(&GRID_BACKOFF) {
            c.grid_backoff = parse_switch(&v).map_err(|reason| err(&GRID_BACKOFF, &v, reason))?;
        }
        if let Some(v) = get(&COMPRESS) {
            c.compress = Codec::parse(&v).map_err(|reason| err(&COMPRESS, &v, reason))?;
        }
        if let Some(v) = get(&HOT_LIST) {
            c.hot_list = Some(HotListMode::parse(&v).map_err(|reason| err(&HOT_LIST, &v, reason))?);
        }
        if let Some(v) = get(&VERIFY) {
            c.verify = parse_switch(&v).map_err(|reason| err(&VERIFY, &v, reason))?;
        }
        if let Some(v) = get(&LOG) {
            c.log = Some(crate::log::Level::parse(&v).map_err(|reason| err(&LOG, &v, reason))?);
        }
        c.verify_log = env(VERIFY_LOG_ENV).filter(|v| !v.trim().is_empty()).map(std::path::PathBuf::from);
        if let Some(v) = get(&KEY_FILE) {
            let key = SealKey::load_file(Path::new(v.trim())).map_err(|reason| err(&KEY_FILE, &v, reason))?;
            c.seal_key = Some(Arc::new(key));
        } else if let Some(v) = env(KEY_ENV) {
            // Never echo a key: the error names the variable, not its value.
            let key = SealKey::from_hex(&v).map_err(|reason| ConfigError {
                param: KEY_ENV,
                value: "(hidden)".into(),
                reason,
            })?;
            c.seal_key = Some(Arc::new(key));
        }
        Ok(c)
    }
}

fn err(p: &Param, value: &str, reason: String) -> ConfigError {
    ConfigError::bad_value(p, value, reason)
}

/// `1234`, `64KiB`, `256MiB`, `2GiB` (also `K`, `M`, `G`, `KB`... as binary units). At most 1 TiB.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    if digits.is_empty() {
        return Err("expected a size such as 65536, 64KiB, 256MiB or 2GiB".into());
    }
    let n: u64 = digits.parse().map_err(|_| "the number is too large".to_string())?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        other => return Err(format!("unknown unit '{other}' (use KiB, MiB or GiB)")),
    };
    let bytes = n.checked_mul(1u64 << shift).ok_or_else(|| "the size is too large".to_string())?;
    if bytes > 1 << 40 {
        return Err("the size is larger than 1TiB".into());
    }
    Ok(bytes)
}

fn parse_count(s: &str, min: u64, max: u64) -> Result<u64, String> {
    let n: u64 = s.trim().parse().map_err(|_| format!("expected a whole number from {min} to {max}"))?;
    if !(min..=max).contains(&n) {
        return Err(format!("expected a whole number from {min} to {max}"));
    }
    Ok(n)
}

fn parse_switch(s: &str) -> Result<bool, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "1" | "on" | "yes" | "true" => Ok(true),
        "0" | "off" | "no" | "false" => Ok(false),
        _ => Err("expected on or off".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn parse(pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let m: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Config::from_sources(|k| m.get(k).cloned(), |_| None)
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("65536"), Ok(65536));
        assert_eq!(parse_size("64KiB"), Ok(64 << 10));
        assert_eq!(parse_size("256MiB"), Ok(256 << 20));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size(" 3 mb "), Ok(3 << 20));
        for bad in ["", "MiB", "-1", "12XB", "1.5GiB", "99999999999999999999", "2TiB"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn defaults_when_nothing_given() {
        assert_eq!(parse(&[]).unwrap(), Config::default());
    }

    #[test]
    fn every_bad_value_names_its_parameter_and_value() {
        for (param, value) in [
            ("waffle_local", "lots"),
            ("waffle_timeout_ms", "0"),
            ("waffle_timeout_ms", "fast"),
            ("waffle_push_queue", "1.5MiB"),
            ("waffle_direct_io", "maybe"),
            ("waffle_key_file", "/nonexistent/waffle.key"),
            ("waffle_grid", "127.0.0.1"),
            ("waffle_grid", "127.0.0.1:99999"),
            ("waffle_grid_change", "sometimes"),
            ("waffle_grid_backoff", "later"),
            ("waffle_log", "verbose"),
            ("waffle_log", ""),
            ("waffle_compress", "gzip"),
            ("waffle_compress", "zstd:99"),
            ("waffle_hot_list", "sometimes"),
        ] {
            let e = parse(&[(param, value)]).unwrap_err();
            assert_eq!(e.param, param);
            assert_eq!(e.value, value);
            let text = e.to_string();
            assert!(text.contains(param) && text.contains(value), "{text}");
        }
    }

    #[test]
    fn a_bad_key_in_the_environment_is_named_but_not_echoed() {
        let e = Config::from_sources(|_| None, |k| (k == KEY_ENV).then(|| "secret-but-short".to_string())).unwrap_err();
        assert_eq!(e.param, KEY_ENV);
        assert!(!e.to_string().contains("secret"), "{e}");
        let hex = "ab".repeat(32);
        let c = Config::from_sources(|_| None, |k| (k == KEY_ENV).then(|| hex.clone())).unwrap();
        assert!(c.seal_key.is_some());
    }

    #[test]
    fn a_misspelt_parameter_is_refused_and_the_known_ones_named() {
        for good in ["waffle_local", "WAFFLE_LOCAL", "cache", "vfs", "waffle", "mode"] {
            assert_eq!(check_name(good), Ok(()), "{good}");
        }
        for bad in ["waffle_locl", "waffle_compres", "waffle_"] {
            let e = check_name(bad).unwrap_err();
            let text = e.to_string();
            assert!(text.contains(bad) && text.contains("waffle_local") && text.contains("waffle_grid"), "{text}");
        }
    }

    #[test]
    fn the_log_level_from_the_uri_or_the_environment() {
        use crate::log::Level;
        assert_eq!(parse(&[]).unwrap().log, None, "not named: the process's level stays");
        assert_eq!(parse(&[("waffle_log", "INFO")]).unwrap().log, Some(Level::Info));
        let env = |k: &str| (k == "WAFFLE_LOG").then(|| "debug".to_string());
        assert_eq!(Config::from_sources(|_| None, env).unwrap().log, Some(Level::Debug));
        let uri = |k: &str| (k == "waffle_log").then(|| "error".to_string());
        assert_eq!(Config::from_sources(uri, env).unwrap().log, Some(Level::Error));
        let e = Config::from_sources(|_| None, |k| (k == "WAFFLE_LOG").then(|| "loud".to_string())).unwrap_err();
        assert_eq!(e.to_string(), "bad value for waffle_log: 'loud': expected error, warn, info or debug");
    }

    #[test]
    fn uri_wins_over_environment() {
        let c = Config::from_sources(
            |k| (k == "waffle_local").then(|| "1MiB".to_string()),
            |k| (k == "WAFFLE_LOCAL" || k == "WAFFLE_TIMEOUT_MS").then(|| "7".to_string()),
        )
        .unwrap();
        assert_eq!(c.local_bytes, 1 << 20);
        assert_eq!(c.timeout_ms, 7);
    }
}
