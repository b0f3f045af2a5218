//! Configuration: parameters by name, each with an environment default.
//!
//! An adapter hands in a lookup (for SQLite: the URI parameter, else the
//! environment variable). A bad value is an error ([`ConfigError::BadValue`])
//! that names the parameter and the value, with the parser's own error as the
//! reason ([`ValueError`]); an unreachable grid node is not a configuration error (it is a
//! warning at run time and a miss).

use std::path::Path;
use std::sync::Arc;

use crate::codec::{self, Codec, CodecError};
use crate::grid::{NodeSpec, SpecError};
use crate::log::LevelError;
use crate::seal::{SealError, SealKey};

/// One parameter: its URI name and its environment variable.
pub struct Param {
    pub name: &'static str,
    pub env: &'static str,
    pub help: &'static str,
}

pub const GRID: Param =
    Param { name: "waffle_grid", env: "WAFFLE_GRID", help: "grid nodes, host:port[:weight],... (empty: L1 only)" };
pub const LOCAL: Param =
    Param { name: "waffle_local", env: "WAFFLE_LOCAL", help: "L1 budget, e.g. 256MiB, at least 4KiB (default 256MiB)" };
pub const TIMEOUT_MS: Param = Param {
    name: "waffle_timeout_ms",
    env: "WAFFLE_TIMEOUT_MS",
    help: "deadline of one grid request in ms (default 5)",
};
pub const PUSH_QUEUE: Param = Param {
    name: "waffle_push_queue",
    env: "WAFFLE_PUSH_QUEUE",
    help: "bound of pages waiting to be pushed, e.g. 16MiB; 0 pushes nothing (default 16MiB)",
};
pub const DIRECT_IO: Param = Param {
    name: "waffle_direct_io",
    env: "WAFFLE_DIRECT_IO",
    help: "keep what waffle reads out of the kernel's page cache: auto|on|off (default auto: on for a file larger than a quarter of the machine's memory)",
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

/// `waffle_stats_file`: where the SQLite adapter writes a database's stats file
/// (crate::stats_file; the MariaDB preload reads `WAFFLE_STATS_FILE` itself, with its own default).
pub const STATS_FILE: Param = Param {
    name: "waffle_stats_file",
    env: "WAFFLE_STATS_FILE",
    help: "rewrite this JSON file every second with the counters of PRAGMA waffle_stats (for waffle stats and monitoring; default: none)",
};

/// The smallest L1 (`waffle_local`): one page of SQLite's default size. Less
/// holds no page of most databases, and is a typo (`waffle_local=256` for 256MiB).
pub const MIN_LOCAL_BYTES: u64 = 4 << 10;
/// The smallest push queue but 0 (which pushes nothing): one page of SQLite's default size.
pub const MIN_PUSH_QUEUE_BYTES: u64 = 4 << 10;
/// The largest size any parameter or flag takes.
pub const MAX_SIZE_BYTES: u64 = 1 << 40;
/// Page sizes: SQLite's (512 B to 64 KiB) and InnoDB's (4 KiB to 64 KiB; 1 KiB
/// to 16 KiB compressed) are the powers of two in this range.
pub const MIN_PAGE_BYTES: u32 = 512;
pub const MAX_PAGE_BYTES: u32 = 64 << 10;

/// Verify mode's differences are also appended to this file (environment
/// only: the test scripts collect every process's differences in one place).
pub const VERIFY_LOG_ENV: &str = "WAFFLE_VERIFY_LOG";

/// The key itself, as 64 hex digits: environment only (a URI is too easily logged).
pub const KEY_ENV: &str = "WAFFLE_KEY";

/// Every parameter, for documentation and `waffle --help`.
pub const PARAMS: [&Param; 13] = [
    &GRID,
    &LOCAL,
    &TIMEOUT_MS,
    &PUSH_QUEUE,
    &DIRECT_IO,
    &KEY_FILE,
    &GRID_CHANGE,
    &GRID_BACKOFF,
    &COMPRESS,
    &HOT_LIST,
    &VERIFY,
    &LOG,
    &STATS_FILE,
];

/// Refuses a parameter that looks like ours (`waffle_` prefix) but is not one:
/// a misspelt `waffle_locl=1GiB` would otherwise run with defaults unnoticed,
/// and so would `WAFFLE_LOCAL=2MiB` (SQLite's URI keys are case-sensitive: the
/// value would never be read).
pub fn check_name(name: &str) -> Result<(), ConfigError> {
    let lower = name.to_ascii_lowercase();
    if !lower.starts_with("waffle_") || PARAMS.iter().any(|p| p.name == name) {
        return Ok(());
    }
    match PARAMS.iter().find(|p| p.name == lower) {
        Some(p) => Err(ConfigError::WrongCase { name: name.to_string(), want: p.name, env: p.env }),
        None => Err(ConfigError::UnknownParam { name: name.to_string() }),
    }
}

/// Checks a URI's parameter names in order (each through [`check_name`]):
/// one of ours given twice is refused, since only the first would be read.
/// Returns ours, as given.
pub fn check_names<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<Vec<String>, ConfigError> {
    let mut ours: Vec<String> = Vec::new();
    for name in names {
        check_name(name)?;
        if name.to_ascii_lowercase().starts_with("waffle_") {
            if ours.iter().any(|n| n == name) {
                return Err(ConfigError::Repeated { name: name.to_string() });
            }
            ours.push(name.to_string());
        }
    }
    Ok(ours)
}

/// The parameters' names, for the message naming an unknown one.
fn known_names() -> String {
    PARAMS.iter().map(|p| p.name).collect::<Vec<_>>().join(", ")
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
    /// `waffle_direct_io=auto` (the default): `direct_io` is decided by the
    /// file's size against the machine's memory, not by the switch.
    pub direct_io_auto: bool,
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
            direct_io_auto: true,
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
    pub fn parse(s: &str) -> Result<HotListMode, ValueError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "grid" => Ok(HotListMode::Grid),
            other => match parse_switch(other) {
                Ok(true) => Ok(HotListMode::On),
                Ok(false) => Ok(HotListMode::Off),
                Err(_) => Err(ValueError::NotAHotListMode),
            },
        }
    }
}

/// A refused configuration: the parameter as the user set it (URI name or
/// environment variable), the value, and why.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A parameter's value cannot be used.
    #[error("bad value for {param}: '{value}': {reason}")]
    BadValue { param: &'static str, value: String, reason: ValueError },
    /// A `waffle_` URI parameter that is none of [`PARAMS`] (a misspelling).
    #[error("bad value for URI parameter: '{name}': not a waffle parameter (known: {})", known_names())]
    UnknownParam { name: String },
    /// One of [`PARAMS`] in another case (`WAFFLE_LOCAL` in a URI): SQLite would never hand its value over.
    #[error("bad value for URI parameter: '{name}': URI parameters are lower case: write {want} ({env} is its environment variable)")]
    WrongCase { name: String, want: &'static str, env: &'static str },
    /// One of [`PARAMS`] twice in one URI: SQLite hands over the first only.
    #[error("bad value for URI parameter: '{name}': given more than once; give it once")]
    Repeated { name: String },
}

impl ConfigError {
    /// The parameter the error names (`URI parameter` for an unknown one).
    pub fn param(&self) -> &'static str {
        match self {
            ConfigError::BadValue { param, .. } => param,
            ConfigError::UnknownParam { .. } | ConfigError::WrongCase { .. } | ConfigError::Repeated { .. } => {
                "URI parameter"
            }
        }
    }

    /// The value as given (`(hidden)` for a key), or the unknown parameter's name.
    pub fn value(&self) -> &str {
        match self {
            ConfigError::BadValue { value, .. } => value,
            ConfigError::UnknownParam { name }
            | ConfigError::WrongCase { name, .. }
            | ConfigError::Repeated { name } => name,
        }
    }
}

/// Why one parameter's value is refused (the reason of [`ConfigError::BadValue`]).
#[derive(Debug, thiserror::Error)]
pub enum ValueError {
    #[error(transparent)]
    Size(#[from] SizeError),
    #[error("expected a whole number from {min} to {max}")]
    NotACount { min: u64, max: u64 },
    #[error("expected {}", switch_words())]
    NotASwitch,
    #[error("expected on, grid or off")]
    NotAHotListMode,
    #[error(transparent)]
    Grid(#[from] SpecError),
    #[error(transparent)]
    Codec(#[from] CodecError),
    #[error(transparent)]
    Level(#[from] LevelError),
    #[error(transparent)]
    Key(#[from] SealError),
}

/// A size that breaks the rule of [`parse_size`] or a bound of its parameter.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    #[error("expected a size such as 65536, 64KiB, 256MiB or 2GiB")]
    NotASize,
    #[error("the number is too large")]
    NumberTooLarge,
    /// KB, MB...: `unit` as written, `n` the number before it.
    #[error("{unit} is refused: decimal to some, binary to others; write {n}{}iB (binary) or the number of bytes", unit[..1].to_ascii_uppercase())]
    DecimalUnit { unit: String, n: u64 },
    #[error("unknown unit '{unit}' (use KiB, MiB, GiB or TiB)")]
    UnknownUnit { unit: String },
    /// Something after a size that is whole on its own (`16MiB extra`): `size` as written.
    #[error("'{after}' after {size}: a size is a number and at most one unit, nothing after it")]
    TextAfter { size: String, after: String },
    #[error("the size is too large")]
    Overflow,
    #[error("the size is larger than 1TiB")]
    AboveMax,
    /// Below the parameter's least; `why` says why that is the least.
    #[error("too small: at least {} ({why})", show_size(*min_bytes))]
    TooSmall { min_bytes: u64, why: &'static str },
    #[error("{bytes} bytes is not a page size: a power of two from 512 to 65536 (SQLite: any; InnoDB: 4KiB to 64KiB)")]
    NotAPageSize { bytes: u64 },
}

impl Config {
    /// Why an open asking for `self` must not join a cache of the same file
    /// already running with `open`'s settings: it would run weaker than it
    /// asked (pages to another grid, unsealed or under another key, unchecked).
    /// None: the differences are harmless (L1, timeouts, queue, log, hot list)
    /// and the open one's settings are kept. Never names a key's bytes.
    pub fn refuses_to_join(&self, open: &Config) -> Option<String> {
        let nodes = |c: &Config| {
            let mut v: Vec<String> = c.grid.iter().map(|n| format!("{}:{}", n.label(), n.weight)).collect();
            v.sort();
            v
        };
        let show = |v: Vec<String>| if v.is_empty() { "none".to_string() } else { v.join(",") };
        if nodes(self) != nodes(open) {
            return Some(format!(
                "{}: this open asks for {} and the open one has {}",
                GRID.name,
                show(nodes(self)),
                show(nodes(open))
            ));
        }
        let key = format!("the seal key ({} or {KEY_ENV})", KEY_FILE.name);
        match (&self.seal_key, &open.seal_key) {
            (Some(_), None) => {
                return Some(format!("{key}: this open seals grid values and the open one seals nothing"))
            }
            (Some(a), Some(b)) if a != b => {
                return Some(format!("{key}: this open's key is not the one the open one seals with"))
            }
            _ => {}
        }
        if self.verify && !open.verify {
            return Some(format!("{}: this open asks for on and the open one has off", VERIFY.name));
        }
        None
    }

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
        let mut c = Config::default();
        // A value and the name it was set by (an error names what the user wrote).
        let get = |p: &Param| uri(p.name).map(|v| (v, p.name)).or_else(|| env(p.env).map(|v| (v, p.env)));
        if let Some((v, n)) = get(&GRID) {
            c.grid = NodeSpec::parse_list(&v).map_err(|reason| err(n, &v, reason))?;
        }
        if let Some((v, n)) = get(&LOCAL) {
            c.local_bytes = parse_local(&v).map_err(|reason| err(n, &v, reason))?;
        }
        if let Some((v, n)) = get(&TIMEOUT_MS) {
            c.timeout_ms = parse_count(&v, 1, MAX_TIMEOUT_MS).map_err(|reason| err(n, &v, reason))?;
        }
        if let Some((v, n)) = get(&PUSH_QUEUE) {
            c.push_queue_bytes = parse_push_queue(&v).map_err(|reason| err(n, &v, reason))?;
        }
        if let Some((v, n)) = get(&DIRECT_IO) {
            c.direct_io_auto = v.trim().eq_ignore_ascii_case("auto");
            if !c.direct_io_auto {
                c.direct_io = parse_switch(&v).map_err(|reason| err(n, &v, reason))?;
            }
        }
        if let Some((v, n)) = get(&GRID_CHANGE) {
            c.grid_change = parse_switch(&v).map_err(|reason| err(n, &v, reason))?;
        }
        if let Some((v, n)) = get(&GRID_BACKOFF) {
            c.grid_backoff = parse_switch(&v).map_err(|reason| err(n, &v, reason))?;
        }
        if let Some((v, n)) = get(&COMPRESS) {
            c.compress = Codec::parse(&v).map_err(|reason| err(n, &v, reason))?;
        }
        if let Some((v, n)) = get(&HOT_LIST) {
            c.hot_list = Some(HotListMode::parse(&v).map_err(|reason| err(n, &v, reason))?);
        }
        if let Some((v, n)) = get(&VERIFY) {
            c.verify = parse_switch(&v).map_err(|reason| err(n, &v, reason))?;
        }
        if let Some((v, n)) = get(&LOG) {
            c.log = Some(crate::log::Level::parse(&v).map_err(|reason| err(n, &v, reason))?);
        }
        c.verify_log = env(VERIFY_LOG_ENV).filter(|v| !v.trim().is_empty()).map(std::path::PathBuf::from);
        if let Some((v, n)) = get(&KEY_FILE) {
            let key = SealKey::load_file(Path::new(v.trim())).map_err(|reason| err(n, &v, reason))?;
            c.seal_key = Some(Arc::new(key));
        } else if let Some(v) = env(KEY_ENV) {
            // Never echo a key: the error names the variable, not its value.
            let key = SealKey::from_hex(&v).map_err(|reason| ConfigError::BadValue {
                param: KEY_ENV,
                value: "(hidden)".into(),
                reason: reason.into(),
            })?;
            c.seal_key = Some(Arc::new(key));
        }
        Ok(c)
    }
}

fn err(name: &'static str, value: &str, reason: impl Into<ValueError>) -> ConfigError {
    ConfigError::BadValue { param: name, value: value.to_string(), reason: reason.into() }
}

/// A size, the one rule of every size Waffle reads (parameters, environment,
/// `waffle` flags): a whole number of bytes, or of a binary unit, KiB, MiB,
/// GiB, TiB, also written K, M, G, T as memcached's `-m` and MariaDB's options
/// read them (any case; `B` for bytes). KB, MB, GB and TB are refused, never
/// guessed: decimal to a disk maker, binary to memcached. At most 1 TiB.
/// The error is the reason only: the caller names the parameter and the value.
pub fn parse_size(s: &str) -> Result<u64, SizeError> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    if digits.is_empty() {
        return Err(SizeError::NotASize);
    }
    let n: u64 = digits.parse().map_err(|_| SizeError::NumberTooLarge)?;
    let unit = unit.trim();
    // The unit's word, and what follows it: a known unit with more after it is
    // told as such, not as an unknown unit (whose message would list the unit
    // the user wrote).
    let (word, after) = unit.split_at(unit.find(|c: char| !c.is_ascii_alphabetic()).unwrap_or(unit.len()));
    let shift = match word.to_ascii_lowercase().as_str() {
        "kb" | "mb" | "gb" | "tb" => return Err(SizeError::DecimalUnit { unit: word.to_string(), n }),
        "" | "b" | "k" | "kib" | "m" | "mib" | "g" | "gib" | "t" | "tib" if !after.trim().is_empty() => {
            return Err(SizeError::TextAfter { size: format!("{digits}{word}"), after: after.trim().to_string() })
        }
        "" | "b" => 0,
        "k" | "kib" => 10,
        "m" | "mib" => 20,
        "g" | "gib" => 30,
        "t" | "tib" => 40,
        _ => return Err(SizeError::UnknownUnit { unit: unit.to_string() }),
    };
    let bytes = n.checked_mul(1u64 << shift).ok_or(SizeError::Overflow)?;
    if bytes > MAX_SIZE_BYTES {
        return Err(SizeError::AboveMax);
    }
    Ok(bytes)
}

/// A size of at least `min_bytes` (`what_min` says why, e.g. "one page").
pub fn parse_size_at_least(s: &str, min_bytes: u64, what_min: &'static str) -> Result<u64, SizeError> {
    let n = parse_size(s)?;
    if n < min_bytes {
        return Err(SizeError::TooSmall { min_bytes, why: what_min });
    }
    Ok(n)
}

/// `waffle_local`: a size of at least [`MIN_LOCAL_BYTES`].
pub fn parse_local(s: &str) -> Result<u64, SizeError> {
    parse_size_at_least(s, MIN_LOCAL_BYTES, "one page of SQLite's default size")
}

/// `waffle_push_queue`: 0 (push nothing), or a size of at least [`MIN_PUSH_QUEUE_BYTES`].
pub fn parse_push_queue(s: &str) -> Result<u64, SizeError> {
    match parse_size(s)? {
        0 => Ok(0),
        _ => parse_size_at_least(s, MIN_PUSH_QUEUE_BYTES, "one page of SQLite's default size; 0 pushes nothing"),
    }
}

/// A database page size: a size (the rule of [`parse_size`]: `4096`, `16KiB`)
/// that is a power of two from 512 bytes to 64 KiB, which SQLite and InnoDB use.
pub fn parse_page_size(s: &str) -> Result<u32, SizeError> {
    let n = parse_size(s)?;
    if !(u64::from(MIN_PAGE_BYTES)..=u64::from(MAX_PAGE_BYTES)).contains(&n) || !n.is_power_of_two() {
        return Err(SizeError::NotAPageSize { bytes: n });
    }
    Ok(n as u32)
}

/// `bytes` in the largest binary unit that divides it (`4KiB`, `1536KiB`, `100`).
pub fn show_size(bytes: u64) -> String {
    for (shift, unit) in [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if bytes != 0 && bytes.is_multiple_of(1 << shift) {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    format!("{bytes}")
}

fn parse_count(s: &str, min: u64, max: u64) -> Result<u64, ValueError> {
    let n: u64 = s.trim().parse().map_err(|_| ValueError::NotACount { min, max })?;
    if !(min..=max).contains(&n) {
        return Err(ValueError::NotACount { min, max });
    }
    Ok(n)
}

/// The words of a switch (any case), on's and off's side by side: the one
/// rule that [`parse_switch`] reads and its message states.
const SWITCH_WORDS: [(&str, &str); 4] = [("on", "off"), ("1", "0"), ("yes", "no"), ("true", "false")];

fn switch_words() -> String {
    let pairs: Vec<String> = SWITCH_WORDS[1..].iter().map(|(on, off)| format!("{on}/{off}")).collect();
    format!("on or off (or {})", pairs.join(", "))
}

fn parse_switch(s: &str) -> Result<bool, ValueError> {
    let w = s.trim().to_ascii_lowercase();
    SWITCH_WORDS
        .iter()
        .find_map(|&(on, off)| match w.as_str() {
            x if x == on => Some(true),
            x if x == off => Some(false),
            _ => None,
        })
        .ok_or(ValueError::NotASwitch)
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
    fn sizes_follow_one_rule() {
        assert_eq!(parse_size("65536"), Ok(65536));
        assert_eq!(parse_size("64KiB"), Ok(64 << 10));
        assert_eq!(parse_size("256MiB"), Ok(256 << 20));
        assert_eq!(parse_size("2G"), Ok(2 << 30), "K, M, G: binary, as memcached and MariaDB read them");
        assert_eq!(parse_size(" 3 mib "), Ok(3 << 20));
        assert_eq!(parse_size("512B"), Ok(512));
        assert_eq!(parse_size("1TiB"), Ok(1 << 40));
        for bad in ["", "MiB", "-1", "12XB", "1.5GiB", "99999999999999999999", "2TiB", "0x10", "1 MiB MiB"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn decimal_units_are_refused_not_read_as_binary() {
        for (bad, hint) in [("64MB", "64MiB"), (" 3 mb ", "3MiB"), ("1GB", "1GiB"), ("16kB", "16KiB"), ("1TB", "1TiB")]
        {
            let e = parse_size(bad).unwrap_err();
            assert!(matches!(e, SizeError::DecimalUnit { .. }), "{bad}: {e}");
            let e = e.to_string();
            assert!(e.contains("refused") && e.contains(hint), "{bad}: {e}");
        }
    }

    #[test]
    fn text_after_a_whole_size_is_told_as_such_never_as_its_unit() {
        // Issue 32 item 7: "unknown unit 'MiB  # small L1' (use KiB, MiB, ...)" told the user to write MiB.
        for (bad, size, after) in [
            ("16MiB  # small L1", "16MiB", "# small L1"),
            ("16 MiB ; L1", "16MiB", "; L1"),
            ("1 MiB MiB", "1MiB", "MiB"),
            ("4096 #x", "4096", "#x"),
        ] {
            let e = parse_size(bad).unwrap_err();
            assert_eq!(e, SizeError::TextAfter { size: size.into(), after: after.into() }, "{bad}");
            assert!(!e.to_string().contains("use KiB"), "{e}");
        }
        assert_eq!(parse_size("12XB"), Err(SizeError::UnknownUnit { unit: "XB".into() }));
    }

    #[test]
    fn nonsense_budgets_are_refused() {
        assert_eq!(parse_local("4KiB"), Ok(4096));
        assert_eq!(parse_local("256MiB"), Ok(256 << 20));
        for bad in ["0", "1", "256", "4095"] {
            let e = parse_local(bad).unwrap_err().to_string();
            assert!(e.contains("at least 4KiB"), "{bad}: {e}");
        }
        assert_eq!(parse_push_queue("0"), Ok(0), "0 pushes nothing");
        assert_eq!(parse_push_queue("16MiB"), Ok(16 << 20));
        assert!(parse_push_queue("1").unwrap_err().to_string().contains("at least 4KiB"));
        let e = parse(&[("waffle_local", "1")]).unwrap_err().to_string();
        assert_eq!(e, "bad value for waffle_local: '1': too small: at least 4KiB (one page of SQLite's default size)");
    }

    #[test]
    fn page_sizes_are_powers_of_two_sqlite_and_innodb_use() {
        assert_eq!(parse_page_size("4096"), Ok(4096));
        assert_eq!(parse_page_size("16KiB"), Ok(16384));
        assert_eq!(parse_page_size("512"), Ok(512));
        assert_eq!(parse_page_size("64K"), Ok(65536));
        for bad in ["1000", "0", "256", "128KiB", "16KB", "4097", "x"] {
            assert!(parse_page_size(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_page_size("1000"), Err(SizeError::NotAPageSize { bytes: 1000 }));
        assert!(parse_page_size("1000").unwrap_err().to_string().contains("power of two"));
    }

    #[test]
    fn sizes_are_shown_in_the_largest_unit_that_divides_them() {
        assert_eq!(show_size(4096), "4KiB");
        assert_eq!(show_size(1536 << 10), "1536KiB");
        assert_eq!(show_size(1 << 40), "1TiB");
        assert_eq!(show_size(100), "100");
        assert_eq!(show_size(0), "0");
    }

    #[test]
    fn a_bad_value_from_the_environment_names_the_variable() {
        for (var, value) in
            [("WAFFLE_LOCAL", "1"), ("WAFFLE_LOCAL", "64MB"), ("WAFFLE_TIMEOUT_MS", "0"), ("WAFFLE_GRID", "nohost")]
        {
            let e = Config::from_sources(|_| None, |k| (k == var).then(|| value.to_string())).unwrap_err();
            assert_eq!(e.param(), var);
            assert!(e.to_string().starts_with(&format!("bad value for {var}: '{value}': ")), "{e}");
        }
    }

    #[test]
    fn a_bad_value_is_told_from_an_unknown_parameter_by_its_kind() {
        let e = parse(&[("waffle_local", "abc")]).unwrap_err();
        assert!(
            matches!(
                e,
                ConfigError::BadValue { param: "waffle_local", reason: ValueError::Size(SizeError::NotASize), .. }
            ),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "bad value for waffle_local: 'abc': expected a size such as 65536, 64KiB, 256MiB or 2GiB"
        );
        let e = parse(&[("waffle_grid", "foo")]).unwrap_err();
        assert!(matches!(e, ConfigError::BadValue { reason: ValueError::Grid(SpecError::NoPort { .. }), .. }), "{e:?}");
        let e = parse(&[("waffle_key_file", "/nonexistent/waffle.key")]).unwrap_err();
        assert!(matches!(e, ConfigError::BadValue { reason: ValueError::Key(SealError::Unreadable(_)), .. }), "{e:?}");
        let e = check_name("waffle_pool").unwrap_err();
        assert!(matches!(e, ConfigError::UnknownParam { ref name } if name == "waffle_pool"), "{e:?}");
        assert!(
            e.to_string().starts_with(
                "bad value for URI parameter: 'waffle_pool': not a waffle parameter (known: waffle_grid, "
            ),
            "{e}"
        );
    }

    #[test]
    fn a_later_open_refuses_to_join_only_weaker_settings() {
        let grid = |g: &str| parse(&[("waffle_grid", g)]).unwrap();
        let open = grid("10.0.0.1:11211,10.0.0.2:11211");
        assert_eq!(grid("10.0.0.2:11211,10.0.0.1:11211").refuses_to_join(&open), None, "the same nodes");
        let e = grid("10.0.0.9:11211").refuses_to_join(&open).unwrap();
        assert!(e.starts_with("waffle_grid: this open asks for 10.0.0.9:11211:1 and the open one has 10.0.0."), "{e}");
        let keyed = |k: &str| Config {
            seal_key: Some(Arc::new(SealKey::from_hex(&k.repeat(32)).unwrap())),
            ..Config::default()
        };
        let plain = Config::default();
        assert!(keyed("ab").refuses_to_join(&plain).unwrap().contains("seals nothing"));
        assert!(keyed("ab").refuses_to_join(&keyed("cd")).unwrap().contains("not the one"));
        assert!(!keyed("ab").refuses_to_join(&keyed("cd")).unwrap().contains("ab"), "no key bytes");
        assert_eq!(plain.refuses_to_join(&keyed("ab")), None, "joining a sealed cache is stronger");
        let verify = Config { verify: true, ..Config::default() };
        assert!(verify.refuses_to_join(&plain).unwrap().starts_with("waffle_verify"));
        assert_eq!(plain.refuses_to_join(&verify), None);
        let other = Config {
            local_bytes: 1 << 20,
            timeout_ms: 50,
            push_queue_bytes: 0,
            log: Some(crate::log::Level::Debug),
            hot_list: Some(HotListMode::Off),
            ..Config::default()
        };
        assert_eq!(other.refuses_to_join(&plain), None, "harmless differences keep the first settings");
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
            assert_eq!(e.param(), param);
            assert_eq!(e.value(), value);
            let text = e.to_string();
            assert!(text.contains(param) && text.contains(value), "{text}");
        }
    }

    #[test]
    fn a_bad_key_in_the_environment_is_named_but_not_echoed() {
        let e = Config::from_sources(|_| None, |k| (k == KEY_ENV).then(|| "secret-but-short".to_string())).unwrap_err();
        assert_eq!(e.param(), KEY_ENV);
        assert!(matches!(e, ConfigError::BadValue { reason: ValueError::Key(SealError::NotHex { chars: 16 }), .. }));
        assert!(!e.to_string().contains("secret"), "{e}");
        let hex = "ab".repeat(32);
        let c = Config::from_sources(|_| None, |k| (k == KEY_ENV).then(|| hex.clone())).unwrap();
        assert!(c.seal_key.is_some());
    }

    #[test]
    fn a_misspelt_parameter_is_refused_and_the_known_ones_named() {
        for good in ["waffle_local", "cache", "vfs", "waffle", "mode", "WAFFLE"] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in ["waffle_locl", "waffle_compres", "waffle_"] {
            let e = check_name(bad).unwrap_err();
            let text = e.to_string();
            assert!(text.contains(bad) && text.contains("waffle_local") && text.contains("waffle_grid"), "{text}");
        }
    }

    #[test]
    fn a_parameter_in_upper_case_or_given_twice_is_refused() {
        // Issue 32 item 11: both were ignored silently (the default, or the first value, used).
        for name in ["WAFFLE_LOCAL", "Waffle_Local"] {
            let e = check_name(name).unwrap_err();
            assert_eq!((e.param(), e.value()), ("URI parameter", name));
            assert_eq!(
                e.to_string(),
                format!(
                    "bad value for URI parameter: '{name}': URI parameters are lower case: write waffle_local \
                     (WAFFLE_LOCAL is its environment variable)"
                )
            );
        }
        let e = check_names(["vfs", "waffle_local", "cache", "waffle_local"]).unwrap_err();
        assert_eq!(e.to_string(), "bad value for URI parameter: 'waffle_local': given more than once; give it once");
        let ours = check_names(["vfs", "waffle_local", "waffle_grid", "mode", "mode"]).unwrap();
        assert_eq!(ours, ["waffle_local", "waffle_grid"], "only ours, and SQLite's own may repeat");
    }

    #[test]
    fn a_switch_reads_the_words_its_message_states() {
        let msg = parse(&[("waffle_direct_io", "maybe")]).unwrap_err().to_string();
        assert_eq!(msg, "bad value for waffle_direct_io: 'maybe': expected on or off (or 1/0, yes/no, true/false)");
        for (on, off) in SWITCH_WORDS {
            assert!(msg.contains(on) && msg.contains(off), "{msg}");
            for (w, want) in [(on, true), (off, false), (&*on.to_ascii_uppercase(), true)] {
                assert_eq!(parse(&[("waffle_direct_io", w)]).unwrap().direct_io, want, "{w}");
            }
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
        assert_eq!(e.to_string(), "bad value for WAFFLE_LOG: 'loud': expected error, warn, info or debug");
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
