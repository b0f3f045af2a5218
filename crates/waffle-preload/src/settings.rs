//! The preload's settings: the `WAFFLE_*` environment over the configuration
//! file `WAFFLE_CONFIG` names (waffle_core::config_file), read once at the
//! start (a refused file keeps the preload off), and what the server's
//! command line and first tablespace say (the page size).

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use waffle_core::backing::DIRECT_ALIGN;
#[cfg(test)]
use waffle_core::config_file::FileReason;
use waffle_core::config_file::{Check, CheckError, ConfigFile, FileError, Setting};
use waffle_core::grid::Grid;
use waffle_core::{Config, ConfigError};

use crate::{innodb, real};

/// Page size when neither `WAFFLE_PAGE_SIZE`, the first tablespace nor the command line says.
pub const DEFAULT_PAGE_BYTES: u64 = 16384;
/// How often the stats file is rewritten, unless `WAFFLE_STATS_INTERVAL_MS` says.
pub const DEFAULT_STATS_INTERVAL_MS: u64 = 1000;
/// The stats interval's bounds (`WAFFLE_STATS_INTERVAL_MS`).
pub const STATS_INTERVAL_MS: std::ops::RangeInclusive<u64> = 10..=3_600_000;

/// The preload's own keys a configuration file may carry, beside the core's parameters.
const OWN_SETTINGS: [Setting; 7] = [
    Setting { env: "WAFFLE_TABLES", check: Check::Value(not_blank) },
    Setting { env: "WAFFLE_STATS_FILE", check: Check::Value(not_blank) },
    Setting { env: "WAFFLE_STATS_MODE", check: Check::Value(check_stats_mode) },
    Setting { env: "WAFFLE_STATS_INTERVAL_MS", check: Check::Value(check_stats_interval) },
    Setting { env: "WAFFLE_PAGE_SIZE", check: Check::Value(check_page_size) },
    Setting {
        env: "WAFFLE_PRELOAD_ACTIVE",
        check: Check::EnvironmentOnly(
            "whether a process is the server is decided at its first call, before any file is read",
        ),
    },
    Setting {
        env: "WAFFLE_HOT_LIST_INTERVAL_MS",
        check: Check::EnvironmentOnly("the hot list reads it from the environment only"),
    },
];

/// Why the preload does not start: its configuration is refused.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error(transparent)]
    File(#[from] &'static FileError),
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A setting of the preload's own, as the environment or the file gives it.
    #[error("bad value for {name}: '{value}': {reason}")]
    BadValue { name: &'static str, value: String, reason: BadSetting },
}

/// Why a value of one of the preload's own settings is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BadSetting {
    #[error("empty (leave the line out for the default)")]
    Blank,
    #[error("expected milliseconds from {} to {}", STATS_INTERVAL_MS.start(), STATS_INTERVAL_MS.end())]
    NotAnInterval,
    #[error("expected octal permission bits such as 0640")]
    NotOctal,
    #[error("expected the owner's read and write, no execute, no write for others: 0600, 0640, 0644, 0660 or 0664")]
    BadMode,
    #[error("expected 4k, 8k, 16k, 32k or 64k")]
    NotAPageSize,
}

fn not_blank(v: &str) -> Result<(), CheckError> {
    if v.trim().is_empty() {
        return Err(BadSetting::Blank.into());
    }
    Ok(())
}

fn check_stats_interval(v: &str) -> Result<(), CheckError> {
    match v.trim().parse::<u64>() {
        Ok(ms) if STATS_INTERVAL_MS.contains(&ms) => Ok(()),
        _ => Err(BadSetting::NotAnInterval.into()),
    }
}

/// `WAFFLE_STATS_MODE`: the stats file's permission bits instead of ibdata1's
/// (0644: readable by LOAD_FILE(), which reads only files every user may
/// read, and by an exporter outside the server's group).
fn parse_stats_mode(v: &str) -> Result<u32, BadSetting> {
    let m = u32::from_str_radix(v.trim(), 8).map_err(|_| BadSetting::NotOctal)?;
    if m & !0o666 != 0 || m & 0o002 != 0 || m & 0o600 != 0o600 {
        return Err(BadSetting::BadMode);
    }
    Ok(m)
}

fn check_stats_mode(v: &str) -> Result<(), CheckError> {
    Ok(parse_stats_mode(v).map(drop)?)
}

/// The stats file's mode if `WAFFLE_STATS_MODE` sets one; Err names the setting and the value.
pub fn stats_mode() -> Result<Option<u32>, SettingsError> {
    let named = |v: String| {
        parse_stats_mode(&v).map_err(|reason| SettingsError::BadValue { name: "WAFFLE_STATS_MODE", value: v, reason })
    };
    env("WAFFLE_STATS_MODE").map(named).transpose()
}

fn check_page_size(v: &str) -> Result<(), CheckError> {
    parse_page_size(v).map(drop).ok_or_else(|| BadSetting::NotAPageSize.into())
}

static CONFIG_FILE: OnceLock<Result<Option<ConfigFile>, FileError>> = OnceLock::new();

/// The configuration file `WAFFLE_CONFIG` names, read and checked once; Err: why it is refused.
fn config_file() -> Result<Option<&'static ConfigFile>, &'static FileError> {
    let loaded = CONFIG_FILE.get_or_init(|| ConfigFile::from_env(|k| std::env::var(k).ok(), &OWN_SETTINGS));
    loaded.as_ref().map(Option::as_ref)
}

/// A setting of the preload's own: the environment's, else the configuration file's (blank: unset).
pub fn env(name: &str) -> Option<String> {
    let file = || config_file().ok().flatten()?.get(name).map(str::to_string);
    std::env::var(name).ok().or_else(file).filter(|v| !v.trim().is_empty())
}

/// The core's configuration: the environment over the configuration file.
pub fn core_config() -> Result<(Config, Option<PathBuf>), SettingsError> {
    let env = |k: &str| std::env::var(k).ok();
    match config_file()? {
        Some(f) => Ok((f.config(env)?, Some(f.path().to_path_buf()))),
        None => Ok((Config::from_lookup(|_| None)?, None)),
    }
}

/// How often the stats file is written: `WAFFLE_STATS_INTERVAL_MS` if it is a valid one, else the default.
pub fn stats_interval_ms() -> u64 {
    env("WAFFLE_STATS_INTERVAL_MS")
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|ms| STATS_INTERVAL_MS.contains(ms))
        .unwrap_or(DEFAULT_STATS_INTERVAL_MS)
}

/// The stats file: `$WAFFLE_STATS_FILE`, else `waffle-stats.json` in the
/// server's working directory (its datadir: mariadbd changes into it first).
pub fn stats_path() -> PathBuf {
    match env("WAFFLE_STATS_FILE") {
        Some(p) => PathBuf::from(p),
        None => std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")).join("waffle-stats.json"),
    }
}

/// The server's command line, as arguments.
pub fn cmdline() -> Vec<String> {
    std::fs::read("/proc/self/cmdline")
        .map(|b| {
            b.split(|&c| c == 0).filter(|a| !a.is_empty()).map(|a| String::from_utf8_lossy(a).into_owned()).collect()
        })
        .unwrap_or_default()
}

/// The value of `--name=value` on the command line, `-` and `_` alike.
pub fn option(args: &[String], name: &str) -> Option<String> {
    let want = name.replace('_', "-");
    args.iter().rev().find_map(|a| {
        let (k, v) = a.strip_prefix("--")?.split_once('=')?;
        (k.replace('_', "-") == want).then(|| v.to_string())
    })
}

fn parse_page_size(v: &str) -> Option<u64> {
    let v = v.trim().to_ascii_lowercase();
    let n = match v.strip_suffix('k') {
        Some(k) => k.parse::<u64>().ok()? * 1024,
        None => v.parse().ok()?,
    };
    (n.is_power_of_two() && (4096..=65536).contains(&n)).then_some(n)
}

/// Page 0's first 4 KiB through `fd` (O_DIRECT or not: an aligned buffer).
fn read_head(fd: i32) -> Option<Vec<u8>> {
    let layout = std::alloc::Layout::from_size_align(DIRECT_ALIGN, DIRECT_ALIGN).ok()?;
    // SAFETY: non-zero size; freed below.
    let p = unsafe { std::alloc::alloc_zeroed(layout) };
    if p.is_null() {
        return None;
    }
    // SAFETY: p holds DIRECT_ALIGN bytes.
    let n = unsafe { real::pread64(fd, p as *mut libc::c_void, DIRECT_ALIGN, 0) };
    // SAFETY: the kernel wrote all DIRECT_ALIGN bytes of p (n says so).
    let out = (n == DIRECT_ALIGN as isize).then(|| unsafe { std::slice::from_raw_parts(p, DIRECT_ALIGN) }.to_vec());
    // SAFETY: p was allocated above with this layout and is not used after.
    unsafe { std::alloc::dealloc(p, layout) };
    out
}

pub fn page_size(first_fd: i32, args: &[String]) -> Result<(u64, &'static str), SettingsError> {
    if let Some(v) = env("WAFFLE_PAGE_SIZE") {
        return match parse_page_size(&v) {
            Some(n) => Ok((n, "WAFFLE_PAGE_SIZE")),
            None => {
                Err(SettingsError::BadValue { name: "WAFFLE_PAGE_SIZE", value: v, reason: BadSetting::NotAPageSize })
            }
        };
    }
    if let Some(n) = read_head(first_fd).and_then(|h| innodb::page_bytes_from_page0(&h)) {
        return Ok((n as u64, "the first tablespace's page 0"));
    }
    if let Some(n) = option(args, "innodb-page-size").and_then(|v| parse_page_size(&v)) {
        return Ok((n, "--innodb-page-size"));
    }
    Ok((DEFAULT_PAGE_BYTES, "the default"))
}

/// The grid `config` names (None: L1 only).
pub fn make_grid(config: &Config) -> Option<Arc<Grid>> {
    if config.grid.is_empty() {
        return None;
    }
    Some(Arc::new(Grid::new(config.grid.clone(), config.grid_options())))
}

/// A grid node as settings name it: `host:port`.
pub fn node_text(n: &waffle_core::grid::NodeSpec) -> String {
    format!("{}:{}", n.host, n.port)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn the_preloads_own_settings_are_checked_in_a_configuration_file() {
        let parse = |text: &str| ConfigFile::parse(Path::new("/etc/waffle/waffle.conf"), text, &OWN_SETTINGS);
        let good = "WAFFLE_TABLES = shop/*\nWAFFLE_STATS_FILE = /run/w.json\nWAFFLE_STATS_MODE = 0644\n\
                    WAFFLE_STATS_INTERVAL_MS = 500\nWAFFLE_PAGE_SIZE = 16k\nWAFFLE_LOCAL = 64MiB\n";
        let f = parse(good).unwrap();
        assert_eq!((f.get("WAFFLE_STATS_MODE"), f.get("WAFFLE_LOCAL")), (Some("0644"), Some("64MiB")));
        for (line, why) in [
            ("WAFFLE_STATS_MODE = 0666", "no write for others"),
            ("WAFFLE_STATS_MODE = 0755", "no execute"),
            ("WAFFLE_STATS_MODE = 0440", "the owner's read and write"),
            ("WAFFLE_STATS_MODE = rw-r--r--", "octal"),
            ("WAFFLE_STATS_INTERVAL_MS = 5", "from 10 to 3600000"),
            ("WAFFLE_PAGE_SIZE = 3k", "4k, 8k"),
            ("WAFFLE_TABLES = ", "empty"),
            ("WAFFLE_PRELOAD_ACTIVE = 1", "environment only"),
            ("WAFFLE_HOT_LIST_INTERVAL_MS = 1000", "environment only"),
        ] {
            let e = parse(&format!("# x\n{line}\n")).unwrap_err();
            let (key, _) = line.split_once(" = ").unwrap();
            assert!(e.line == 2 && e.key == key && e.to_string().contains(why), "{line}: {e}");
        }
        assert_eq!(parse_stats_mode("640"), Ok(0o640));
    }

    #[test]
    fn a_refused_setting_is_told_by_its_kind_with_the_old_text() {
        assert_eq!(parse_stats_mode("0755"), Err(BadSetting::BadMode));
        let reason = parse_stats_mode("rw").unwrap_err();
        let e = SettingsError::BadValue { name: "WAFFLE_STATS_MODE", value: "rw".into(), reason };
        assert_eq!(e.to_string(), "bad value for WAFFLE_STATS_MODE: 'rw': expected octal permission bits such as 0640");
        let core = Config::from_sources(|_| None, |k| (k == "WAFFLE_LOCAL").then(|| "1".into())).unwrap_err();
        let e = SettingsError::from(core);
        assert!(matches!(e, SettingsError::Config(ConfigError::BadValue { param: "WAFFLE_LOCAL", .. })), "{e:?}");
        assert!(e.to_string().starts_with("bad value for WAFFLE_LOCAL: '1': too small: at least 4KiB"), "{e}");
        let file = ConfigFile::parse(Path::new("/etc/w.conf"), "WAFFLE_LOCL = 1\n", &OWN_SETTINGS).unwrap_err();
        assert!(matches!(file.reason, FileReason::UnknownKey { .. }), "{file:?}");
        let file = Box::leak(Box::new(file));
        let e = SettingsError::from(&*file);
        assert!(matches!(e, SettingsError::File(f) if f.line == 1), "{e:?}");
        assert!(e
            .to_string()
            .starts_with("configuration file /etc/w.conf line 1: WAFFLE_LOCL = '1': not a waffle setting"));
    }

    #[test]
    fn options_and_page_sizes() {
        let args: Vec<String> = ["mariadbd", "--innodb_page_size=8k", "--innodb-use-native-aio=0", "--datadir=/x"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(option(&args, "innodb-page-size").as_deref(), Some("8k"));
        assert_eq!(option(&args, "innodb_use_native_aio").as_deref(), Some("0"));
        assert_eq!(option(&args, "innodb-buffer-pool-size"), None);
        assert_eq!(parse_page_size("8k"), Some(8192));
        assert_eq!(parse_page_size("16384"), Some(16384));
        assert_eq!(parse_page_size("3k"), None);
        assert_eq!(parse_page_size("128k"), None);
    }
}
