//! An optional configuration file: `WAFFLE_CONFIG=/etc/waffle/waffle.conf`.
//!
//! ```text
//! # comments and blank lines are ignored
//! ; so are these
//! WAFFLE_GRID  = 10.0.0.2:11211,10.0.0.3:11211
//! waffle_local = 640MiB          # a comment after a value, as in MariaDB's option files
//! WAFFLE_TABLES = "shop/#sql*"   # quoted: the # is the value's
//! ```
//!
//! One `KEY = VALUE` a line. A key is a `WAFFLE_*` variable or its URI
//! parameter (`waffle_local`), either case; a value may be quoted ("..." or
//! '...'). Comments follow MariaDB's option files (mysys `remove_end_comment`):
//! a line starting with `#` or `;` is one, and `#` outside quotes starts one
//! anywhere on a line; `;` after a value is the value's (MariaDB's rule too),
//! and a value refused with one in it says so. The environment wins over the
//! file: a variable set in the process's environment is used, whatever the
//! file says ([`ConfigFile::lookup`]).
//!
//! The whole file is checked when it is read, by the same parser as the
//! environment (crate::config), each line on its own: a line that is not
//! `KEY = VALUE`, an unknown key, a key set twice, a key that stays in the
//! environment (the sealing key itself) or a bad value refuses the file, and
//! the error names the file, the line, the key and the value. Refusing is the
//! adapter's business (the preload does not start; the server runs without
//! Waffle and says why).
//!
//! The file is the operator's: a symlink to it is followed (configuration
//! management links files), but only a regular file is read (opened
//! non-blocking: a FIFO never hangs the server's start), at most
//! [`MAX_FILE_BYTES`], and never one every user may write (anyone could point
//! the cache at a grid of theirs).

use std::fmt;
use std::fs::OpenOptions;
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::config::{self, Config, ConfigError, ValueError, PARAMS};
use crate::side_file;

/// The environment variable naming the file.
pub const CONFIG_ENV: &str = "WAFFLE_CONFIG";
/// A configuration is a few dozen lines; anything much larger is not one.
pub const MAX_FILE_BYTES: u64 = 64 * 1024;

/// How a key an adapter reads beside the core's parameters is checked.
#[derive(Clone, Copy)]
pub enum Check {
    /// The value is refused when this says why (an error of the adapter's own).
    Value(fn(&str) -> Result<(), CheckError>),
    /// Not accepted in a file; the reason says where it goes instead.
    EnvironmentOnly(&'static str),
}

/// Why an adapter refuses a value of one of its keys: its own error, shown as the reason.
pub type CheckError = Box<dyn std::error::Error + Send + Sync>;

/// A key of an adapter's own (`WAFFLE_TABLES` in the preload), by its variable name.
#[derive(Clone, Copy)]
pub struct Setting {
    pub env: &'static str,
    pub check: Check,
}

/// Keys no file may carry, whatever the adapter.
const CORE_ENV_ONLY: [Setting; 2] = [
    Setting {
        env: config::KEY_ENV,
        check: Check::EnvironmentOnly("the key itself stays out of files: name its file with WAFFLE_KEY_FILE"),
    },
    Setting { env: CONFIG_ENV, check: Check::EnvironmentOnly("it names this file; files do not include others") },
];

/// A refused file: which file, line, key and value, and why.
#[derive(Debug)]
pub struct FileError {
    pub path: PathBuf,
    /// 1-based; 0 for the file as a whole (cannot be read, too large...).
    pub line: usize,
    /// The key as written (empty for the whole file or a line without `=`).
    pub key: String,
    pub value: String,
    pub reason: FileReason,
}

/// Why a configuration file is refused: the file as a whole, or one line.
#[derive(Debug, thiserror::Error)]
pub enum FileReason {
    #[error("cannot open it: {0}")]
    Open(#[source] io::Error),
    #[error("cannot stat it: {0}")]
    Stat(#[source] io::Error),
    #[error("not a regular file")]
    NotRegular,
    #[error("every user may write it (mode {mode:o}): anyone could change the grid; chmod o-w it")]
    WorldWritable { mode: u32 },
    #[error(transparent)]
    Read(io::Error),
    #[error("not UTF-8 text")]
    NotUtf8,
    #[error("expected KEY = VALUE")]
    NotKeyValue,
    /// Not a key of the core's nor of the adapter's (`known`: those a file may carry).
    #[error("not a waffle setting (known: {})", known.join(", "))]
    UnknownKey { known: Vec<&'static str> },
    #[error("set twice (first on line {first_line})")]
    SetTwice { first_line: usize },
    /// A key that stays in the environment; `why` says where it goes instead.
    #[error("environment only: {why}")]
    EnvironmentOnly { why: &'static str },
    /// A core parameter's value, refused by the core's parser (boxed: the rarest, and the largest).
    #[error(transparent)]
    BadValue(Box<ValueError>),
    /// A value of one of the adapter's keys, refused by its [`Check::Value`].
    #[error(transparent)]
    Adapter(CheckError),
    /// A refused value with a `;` in it: MariaDB's option files (and this one) take `;` as a comment only
    /// at the start of a line.
    #[error("{0} (';' starts a comment only at the start of a line; after a value, start it with '#')")]
    Semicolon(Box<FileReason>),
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.line, self.key.is_empty()) {
            (0, _) => write!(f, "configuration file {}: {}", self.path.display(), self.reason),
            (n, true) => {
                write!(f, "configuration file {} line {n}: '{}': {}", self.path.display(), self.value, self.reason)
            }
            (n, false) => write!(
                f,
                "configuration file {} line {n}: {} = '{}': {}",
                self.path.display(),
                self.key,
                self.value,
                self.reason
            ),
        }
    }
}

impl std::error::Error for FileError {}

#[derive(Debug)]
struct Entry {
    /// The variable name (`WAFFLE_LOCAL`), whatever the spelling in the file.
    env: String,
    value: String,
    line: usize,
}

/// A configuration file, read and checked.
#[derive(Debug)]
pub struct ConfigFile {
    path: PathBuf,
    entries: Vec<Entry>,
}

impl ConfigFile {
    /// The file `WAFFLE_CONFIG` names in `env`, read and checked; None when unset or empty.
    pub fn from_env(env: impl Fn(&str) -> Option<String>, own: &[Setting]) -> Result<Option<ConfigFile>, FileError> {
        match env(CONFIG_ENV).filter(|p| !p.trim().is_empty()) {
            Some(p) => ConfigFile::load(Path::new(p.trim()), own).map(Some),
            None => Ok(None),
        }
    }

    /// Reads and checks the file at `path` (see the module docs); `own`: the adapter's keys.
    pub fn load(path: &Path, own: &[Setting]) -> Result<ConfigFile, FileError> {
        let whole = |reason: FileReason| FileError {
            path: path.to_path_buf(),
            line: 0,
            key: String::new(),
            value: String::new(),
            reason,
        };
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| whole(FileReason::Open(e)))?;
        let meta = file.metadata().map_err(|e| whole(FileReason::Stat(e)))?;
        if !meta.file_type().is_file() {
            return Err(whole(FileReason::NotRegular));
        }
        if meta.mode() & 0o002 != 0 {
            return Err(whole(FileReason::WorldWritable { mode: meta.mode() & 0o777 }));
        }
        let bytes = side_file::read_bounded(&file, MAX_FILE_BYTES).map_err(|e| whole(FileReason::Read(e)))?;
        let text = String::from_utf8(bytes).map_err(|_| whole(FileReason::NotUtf8))?;
        ConfigFile::parse(path, &text, own)
    }

    /// Checks `text` as the contents of the file at `path`.
    pub fn parse(path: &Path, text: &str, own: &[Setting]) -> Result<ConfigFile, FileError> {
        let mut entries: Vec<Entry> = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let trimmed = raw.trim();
            if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with(';') {
                continue;
            }
            let bad = |key: &str, value: &str, reason: FileReason| FileError {
                path: path.to_path_buf(),
                line,
                key: key.to_string(),
                value: value.to_string(),
                reason,
            };
            let trimmed = strip_comment(trimmed).trim_end();
            let Some((key, value)) = trimmed.split_once('=') else {
                return Err(bad("", trimmed, FileReason::NotKeyValue));
            };
            let (key, value) = (key.trim(), unquote(value.trim()));
            let env = canonical(key).ok_or_else(|| bad(key, value, unknown(own)))?;
            if let Some(first) = entries.iter().find(|e| e.env == env) {
                return Err(bad(key, value, FileReason::SetTwice { first_line: first.line }));
            }
            check(&env, value, own).map_err(|(shown, reason)| {
                let reason = match shown {
                    None if value.contains(';') => FileReason::Semicolon(Box::new(reason)),
                    _ => reason,
                };
                bad(key, shown.unwrap_or(value), reason)
            })?;
            entries.push(Entry { env, value: value.to_string(), line });
        }
        Ok(ConfigFile { path: path.to_path_buf(), entries })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's value of the variable `env` (`WAFFLE_LOCAL`), if it sets one.
    pub fn get(&self, env: &str) -> Option<&str> {
        self.entries.iter().find(|e| e.env == env).map(|e| e.value.as_str())
    }

    /// Where each variable comes from: the environment (`env`) if set there, else this file.
    pub fn lookup<'a>(&'a self, env: impl Fn(&str) -> Option<String> + 'a) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| env(name).or_else(|| self.get(name).map(str::to_string))
    }

    /// The core's configuration: the environment (`env`) over this file.
    pub fn config(&self, env: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        Config::from_sources(|_| None, self.lookup(env))
    }
}

/// `WAFFLE_LOCAL` for `waffle_local`, `WAFFLE_LOCAL`, `Waffle_Local`; None if it is no `WAFFLE_` name.
fn canonical(key: &str) -> Option<String> {
    let upper = key.to_ascii_uppercase();
    (upper.starts_with("WAFFLE_") && upper.len() > "WAFFLE_".len() && !upper.contains(char::is_whitespace))
        .then_some(upper)
}

/// The line up to its comment: a `#` outside quotes, as MariaDB's option
/// files read it (mysys `remove_end_comment`: a quote opens until the same
/// quote closes it; inside quotes a backslash escapes the next character).
fn strip_comment(line: &str) -> &str {
    let (mut quote, mut escape) = (None, false);
    for (i, c) in line.char_indices() {
        if (c == '\'' || c == '"') && !escape {
            match quote {
                None => quote = Some(c),
                Some(q) if q == c => quote = None,
                Some(_) => {}
            }
        }
        if quote.is_none() && c == '#' {
            return &line[..i];
        }
        escape = quote.is_some() && c == '\\' && !escape;
    }
    line
}

/// One pair of matching quotes around a value goes.
fn unquote(v: &str) -> &str {
    for q in ['"', '\''] {
        if let Some(inner) = v.strip_prefix(q).and_then(|s| s.strip_suffix(q)) {
            return inner;
        }
    }
    v
}

/// Every key a file may carry, for the message naming an unknown one.
fn known(own: &[Setting]) -> Vec<&'static str> {
    let core = PARAMS.iter().map(|p| p.env).chain([config::VERIFY_LOG_ENV]);
    let own = own.iter().filter(|s| matches!(s.check, Check::Value(_))).map(|s| s.env);
    let mut all: Vec<&'static str> = Vec::new();
    for k in core.chain(own) {
        if !all.contains(&k) {
            all.push(k); // an adapter may check a core parameter again (WAFFLE_STATS_FILE)
        }
    }
    all
}

fn unknown(own: &[Setting]) -> FileReason {
    FileReason::UnknownKey { known: known(own) }
}

/// Checks `value` of the variable `env`: Err((the value to show instead, if
/// it must not be echoed), why).
fn check(env: &str, value: &str, own: &[Setting]) -> Result<(), (Option<&'static str>, FileReason)> {
    if let Some(s) = CORE_ENV_ONLY.iter().chain(own).find(|s| s.env == env) {
        return match s.check {
            // The value may be a secret (the key): never echoed.
            Check::EnvironmentOnly(why) => Err((Some("(hidden)"), FileReason::EnvironmentOnly { why })),
            Check::Value(f) => f(value).map_err(|why| (None, FileReason::Adapter(why))),
        };
    }
    if let Some(p) = PARAMS.iter().find(|p| p.env == env) {
        // The core's parser, on this one value.
        return Config::from_sources(|_| None, |n| (n == p.env).then(|| value.to_string())).map(drop).map_err(
            |e| match e {
                ConfigError::BadValue { reason, .. } => (None, FileReason::BadValue(Box::new(reason))),
                // Names only a URI has (the file's keys are canonical here).
                ConfigError::UnknownParam { .. } | ConfigError::WrongCase { .. } | ConfigError::Repeated { .. } => {
                    (None, unknown(own))
                }
            },
        );
    }
    if env == config::VERIFY_LOG_ENV {
        return Ok(());
    }
    Err((None, unknown(own)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn not_empty(v: &str) -> Result<(), CheckError> {
        if v.trim().is_empty() {
            Err("expected a name".into())
        } else {
            Ok(())
        }
    }

    const OWN: [Setting; 2] = [
        Setting { env: "WAFFLE_TABLES", check: Check::Value(not_empty) },
        Setting { env: "WAFFLE_PRELOAD_ACTIVE", check: Check::EnvironmentOnly("decided before any file is read") },
    ];

    fn parse(text: &str) -> Result<ConfigFile, FileError> {
        ConfigFile::parse(Path::new("/etc/waffle/waffle.conf"), text, &OWN)
    }

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("waffle-config-file-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn keys_in_either_spelling_comments_quotes_and_the_adapters_own() {
        let f = parse(
            "# the grid\n\n  WAFFLE_GRID = 127.0.0.1:11211,127.0.0.1:11212\nwaffle_local=64MiB\n; old style\n\
             Waffle_Timeout_Ms = \"20\"\nWAFFLE_TABLES = 'shop/*, app/orders'\nWAFFLE_VERIFY_LOG = /tmp/v.log\n",
        )
        .unwrap();
        assert_eq!(f.get("WAFFLE_GRID"), Some("127.0.0.1:11211,127.0.0.1:11212"));
        assert_eq!(f.get("WAFFLE_LOCAL"), Some("64MiB"));
        assert_eq!(f.get("WAFFLE_TIMEOUT_MS"), Some("20"));
        assert_eq!(f.get("WAFFLE_TABLES"), Some("shop/*, app/orders"));
        assert_eq!(f.get("WAFFLE_COMPRESS"), None);
        let c = f.config(|_| None).unwrap();
        assert_eq!((c.grid.len(), c.local_bytes, c.timeout_ms), (2, 64 << 20, 20));
        assert_eq!(c.verify_log, Some(PathBuf::from("/tmp/v.log")));
        // An adapter checking a core parameter again: named once among the known keys.
        let again = [Setting { env: "WAFFLE_GRID", check: Check::Value(not_empty) }];
        assert_eq!(known(&again).iter().filter(|k| **k == "WAFFLE_GRID").count(), 1);
    }

    #[test]
    fn the_environment_wins_over_the_file() {
        let f = parse("WAFFLE_LOCAL = 64MiB\nWAFFLE_TIMEOUT_MS = 20\nWAFFLE_TABLES = a/*\n").unwrap();
        let env = |k: &str| match k {
            "WAFFLE_LOCAL" => Some("1MiB".to_string()),
            "WAFFLE_TABLES" => Some("b/*".to_string()),
            _ => None,
        };
        let c = f.config(env).unwrap();
        assert_eq!(c.local_bytes, 1 << 20, "the environment's");
        assert_eq!(c.timeout_ms, 20, "the file's, the environment says nothing");
        assert_eq!(f.lookup(env)("WAFFLE_TABLES").as_deref(), Some("b/*"));
        assert_eq!(f.lookup(|_| None)("WAFFLE_TABLES").as_deref(), Some("a/*"));
        // A bad value in the environment is the parser's usual error.
        let e = f.config(|k| (k == "WAFFLE_LOCAL").then(|| "lots".to_string())).unwrap_err();
        assert!(e.param().eq_ignore_ascii_case("waffle_local") && e.value() == "lots", "{e}");
    }

    #[test]
    fn every_bad_line_names_the_file_the_line_the_key_and_the_value() {
        for (text, line, key, value, why) in [
            ("WAFFLE_LOCAL = 1MiB\nWAFFLE_LOCAL = lots\n", 2, "WAFFLE_LOCAL", "lots", "set twice (first on line 1)"),
            ("\nwaffle_local = lots\n", 2, "waffle_local", "lots", "expected a size"),
            ("WAFFLE_TIMEOUT_MS = 0\n", 1, "WAFFLE_TIMEOUT_MS", "0", "from 1 to 60000"),
            ("WAFFLE_GRID = 127.0.0.1\n", 1, "WAFFLE_GRID", "127.0.0.1", ""),
            ("WAFFLE_COMPRESS = gzip\n", 1, "WAFFLE_COMPRESS", "gzip", ""),
            ("WAFFLE_LOG = loud\n", 1, "WAFFLE_LOG", "loud", "expected error, warn, info or debug"),
            ("WAFFLE_KEY_FILE = /nonexistent/k\n", 1, "WAFFLE_KEY_FILE", "/nonexistent/k", ""),
            ("WAFFLE_LOCL = 1GiB\n", 1, "WAFFLE_LOCL", "1GiB", "not a waffle setting (known: WAFFLE_GRID"),
            ("cache = 1GiB\n", 1, "cache", "1GiB", "not a waffle setting"),
            ("# ok\nWAFFLE_TABLES =\n", 2, "WAFFLE_TABLES", "", "expected a name"),
            ("WAFFLE_PRELOAD_ACTIVE = 1\n", 1, "WAFFLE_PRELOAD_ACTIVE", "(hidden)", "environment only"),
            ("WAFFLE_CONFIG = /etc/other\n", 1, "WAFFLE_CONFIG", "(hidden)", "files do not include"),
        ] {
            let e = parse(text).err().unwrap_or_else(|| panic!("accepted: {text:?}"));
            assert_eq!((e.line, e.key.as_str(), e.value.as_str()), (line, key, value), "{text:?}: {e}");
            let shown = e.to_string();
            assert!(shown.contains("/etc/waffle/waffle.conf") && shown.contains(&format!("line {line}")), "{shown}");
            assert!(shown.contains(key) && shown.contains(&format!("'{value}'")) && shown.contains(why), "{shown}");
        }
        // A line without '=' names the line itself.
        let e = parse("WAFFLE_GRID 127.0.0.1:11211\n").unwrap_err();
        assert_eq!((e.line, e.value.as_str()), (1, "WAFFLE_GRID 127.0.0.1:11211"));
        assert!(e.to_string().contains("expected KEY = VALUE"), "{e}");
        assert!(matches!(e.reason, FileReason::NotKeyValue), "{e:?}");
    }

    #[test]
    fn comments_as_mariadb_option_files_have_them() {
        // Issue 32 item 7: a trailing comment turned Waffle off for the run.
        let f = parse(
            "WAFFLE_LOCAL = 16MiB  # small L1\n; a comment line\n  # another\nWAFFLE_TIMEOUT_MS=20#no space\n\
             WAFFLE_TABLES = 'shop/#sql*' # quoted: the first # is the value's\n\
             WAFFLE_GRID = \"127.0.0.1:11211\"#\n",
        )
        .unwrap();
        assert_eq!(f.get("WAFFLE_LOCAL"), Some("16MiB"));
        assert_eq!(f.get("WAFFLE_TIMEOUT_MS"), Some("20"));
        assert_eq!(f.get("WAFFLE_TABLES"), Some("shop/#sql*"));
        assert_eq!(f.get("WAFFLE_GRID"), Some("127.0.0.1:11211"));
        assert_eq!(strip_comment(r##"a = "x\"#y" # z"##), r##"a = "x\"#y" "##, "an escaped quote stays inside");
        // ';' after a value is the value's in MariaDB too: refused, and the message says what to write instead,
        // never the unit the user wrote.
        let e = parse("WAFFLE_LOCAL = 16MiB ; small L1\n").unwrap_err();
        assert_eq!((e.line, e.value.as_str()), (1, "16MiB ; small L1"));
        let shown = e.to_string();
        assert!(matches!(e.reason, FileReason::Semicolon(_)), "{e:?}");
        assert!(shown.contains("'; small L1' after 16MiB") && shown.contains("start it with '#'"), "{shown}");
        assert!(!shown.contains("use KiB, MiB"), "{shown}");
        let e = parse("WAFFLE_LOCAL 16MiB # no equals sign\n").unwrap_err();
        assert_eq!(e.value, "WAFFLE_LOCAL 16MiB", "the line without its comment");
    }

    #[test]
    fn a_refused_file_is_told_by_its_kind() {
        let kind = |text: &str| parse(text).unwrap_err().reason;
        assert!(matches!(kind("WAFFLE_LOCAL = 1\n"), FileReason::BadValue(v) if matches!(*v, ValueError::Size(_))));
        assert!(matches!(kind("WAFFLE_TABLES =\n"), FileReason::Adapter(_)));
        assert!(matches!(kind("WAFFLE_LOCL = 1\n"), FileReason::UnknownKey { .. }));
        assert!(matches!(kind("WAFFLE_LOCAL = 1MiB\nWAFFLE_LOCAL = 2MiB\n"), FileReason::SetTwice { first_line: 1 }));
        assert!(matches!(kind("WAFFLE_KEY = ab\n"), FileReason::EnvironmentOnly { .. }));
        let missing = std::env::temp_dir().join(format!("waffle-config-file-{}-missing.conf", std::process::id()));
        let e = ConfigFile::load(&missing, &OWN).unwrap_err();
        assert!(matches!(e.reason, FileReason::Open(_)) && e.line == 0, "{e:?}");
        assert!(
            e.to_string().starts_with(&format!("configuration file {}: cannot open it: ", missing.display())),
            "{e}"
        );
    }

    #[test]
    fn the_sealing_key_is_never_echoed() {
        let secret = "ab".repeat(32);
        let e = parse(&format!("WAFFLE_KEY = {secret}\n")).unwrap_err();
        assert!(!e.to_string().contains(&secret) && e.to_string().contains("WAFFLE_KEY_FILE"), "{e}");
    }

    #[test]
    fn only_a_regular_file_nobody_else_may_write_is_read() {
        let d = dir("files");
        let path = d.join("waffle.conf");
        std::fs::write(&path, "WAFFLE_LOCAL = 8MiB\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(ConfigFile::load(&path, &OWN).unwrap().get("WAFFLE_LOCAL"), Some("8MiB"));
        // Named through the environment; unset or empty: no file.
        let env = |k: &str| (k == CONFIG_ENV).then(|| path.display().to_string());
        assert!(ConfigFile::from_env(env, &OWN).unwrap().is_some());
        assert!(ConfigFile::from_env(|_| None, &OWN).unwrap().is_none());
        assert!(ConfigFile::from_env(|_| Some(" ".into()), &OWN).unwrap().is_none());
        // A symlink to it is followed (configuration management links files).
        std::os::unix::fs::symlink(&path, d.join("link.conf")).unwrap();
        assert!(ConfigFile::load(&d.join("link.conf"), &OWN).is_ok());
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        let e = ConfigFile::load(&path, &OWN).err().unwrap().to_string();
        assert!(e.contains("every user may write it") && e.contains(&path.display().to_string()), "{e}");
        let missing = ConfigFile::load(&d.join("missing.conf"), &OWN).err().unwrap().to_string();
        assert!(missing.contains("missing.conf") && missing.contains("cannot open"), "{missing}");
        let e = ConfigFile::load(&d, &OWN).err().unwrap().to_string();
        assert!(e.contains("not a regular file"), "a directory: {e}");
        // A FIFO is opened without blocking and refused.
        let fifo = d.join("fifo.conf");
        let c = std::ffi::CString::new(fifo.display().to_string()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(ConfigFile::load(&fifo, &OWN).err().unwrap().to_string().contains("not a regular file"));
        let big = d.join("big.conf");
        std::fs::write(&big, "#".repeat(MAX_FILE_BYTES as usize + 1)).unwrap();
        assert!(ConfigFile::load(&big, &OWN).is_err(), "larger than any configuration");
        std::fs::write(&big, b"WAFFLE_LOCAL = \xff\n").unwrap();
        assert!(ConfigFile::load(&big, &OWN).err().unwrap().to_string().contains("not UTF-8"));
        let _ = std::fs::remove_dir_all(&d);
    }
}
