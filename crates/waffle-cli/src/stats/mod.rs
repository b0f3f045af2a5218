//! `waffle stats`: the stats files of running caches (the MariaDB preload's
//! `waffle-stats.json`, a SQLite database's `waffle_stats_file`, or a saved
//! row of `PRAGMA waffle_stats`) for people, as JSON, or as Prometheus
//! metrics: printed, written to a file for node_exporter's textfile
//! collector, or served over HTTP (`--listen`).
//!
//! A file that cannot be read is named on stderr and the others are shown all
//! the same (in Prometheus' format, it is `waffle_up{source} 0`); the exit
//! status is then 1. The text for people is waffle-bench's (`waffle bench
//! mysql` prints it too).
//!
//! - [`sources`]: reading the files;
//! - [`prometheus`]: the metrics (OpenMetrics);
//! - [`classic`]: the same in Prometheus' classic text format 0.0.4;
//! - [`listen`]: the HTTP endpoint.

mod classic;
mod listen;
mod prometheus;
mod sources;

use std::fs::OpenOptions;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use sources::Source;

/// How `waffle stats` prints.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// A summary for people.
    Text,
    /// The JSON itself, pretty-printed, plus `health`: the state a reader sees now (running, off,
    /// disabled, stopped, crashed, stale) and why.
    Json,
    /// Prometheus metrics in the classic text format 0.0.4 (what `promtool check metrics` and
    /// node_exporter's textfile collector read), every source labelled, with `waffle_up`.
    Prometheus,
    /// The same metrics in the OpenMetrics text format.
    Openmetrics,
}

/// `waffle stats FILE... [--format text|json|prometheus] [--output FILE | --listen ADDR]`.
#[derive(clap::Args, Clone, Debug)]
#[command(after_help = "Exit status: 0 when every file was read; 1 when one could not be (the others \
                        are printed all the same, and in Prometheus' format it is waffle_up 0) or on any \
                        other error; 2 for bad arguments. With --listen, it runs until stopped.")]
pub struct StatsArgs {
    /// Stats files: the preload writes `<datadir>/waffle-stats.json` (or `$WAFFLE_STATS_FILE`) every
    /// second; a SQLite database opened with `waffle_stats_file=PATH` (or `$WAFFLE_STATS_FILE`) writes PATH.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// How to print them (default text). --listen serves prometheus or openmetrics, as the scraper's
    /// Accept header asks.
    #[arg(long, value_enum)]
    pub format: Option<Format>,
    /// The same as `--format json`.
    #[arg(long, conflicts_with = "format")]
    pub json: bool,
    /// Write to this file instead of stdout, atomically (a temporary file beside it, then renamed over
    /// it): e.g. node_exporter's `--collector.textfile.directory`/waffle.prom.
    #[arg(long, conflicts_with = "listen")]
    pub output: Option<PathBuf>,
    /// Serve Prometheus metrics over HTTP at ADDR (e.g. 127.0.0.1:9477; port 0: a free one, printed),
    /// path /metrics, reading the files again at every scrape.
    #[arg(long, value_name = "ADDR", conflicts_with = "json")]
    pub listen: Option<String>,
}

/// Runs `waffle stats`; Err when a file could not be read (after printing the others) or on any other error.
pub fn run(a: &StatsArgs) -> Result<(), String> {
    let paths = &a.files;
    let format = if a.json { Format::Json } else { a.format.unwrap_or(Format::Text) };
    if let Some(addr) = &a.listen {
        if a.format.is_some_and(|f| !matches!(f, Format::Prometheus | Format::Openmetrics)) {
            return Err(format!("--listen {addr} serves Prometheus metrics only (not --format {format:?})"));
        }
        return listen::serve(addr, paths);
    }
    let all = sources::read_all(paths);
    let text = render(&all, format);
    match &a.output {
        None => print!("{text}"),
        Some(path) => write_atomically(path, &text).map_err(|e| format!("--output {}: {e}", path.display()))?,
    }
    unreadable(&all)
}

/// What `waffle stats` prints for `all` in `format` (the files it could read; all of them in Prometheus' format).
fn render(all: &[Source], format: Format) -> String {
    let read = || all.iter().filter_map(|s| s.stats.as_ref().ok().map(|v| (s.name.as_str(), v)));
    match format {
        Format::Prometheus => classic::from_openmetrics(&prometheus::render(all)),
        Format::Openmetrics => prometheus::render(all),
        Format::Json => {
            read().map(|(_, v)| serde_json::to_string_pretty(&judged_json(v)).unwrap_or_default() + "\n").collect()
        }
        Format::Text => {
            read().map(|(name, v)| waffle_stats_text::render(&v.snapshot, name)).collect::<Vec<_>>().join("\n")
        }
    }
}

/// The file's JSON as written, plus `health`: the state a reader sees now (the file's own `state`
/// is what its writer last said, and a writer that died says nothing more).
fn judged_json(v: &sources::Stats) -> serde_json::Value {
    let mut json = v.json.clone();
    if let Some(m) = json.as_object_mut() {
        let health = serde_json::json!({"state": v.health.state.name(), "why": v.health.why});
        m.insert("health".to_string(), health);
    }
    json
}

/// Names each file that could not be read on stderr; Err if there was one.
fn unreadable(all: &[Source]) -> Result<(), String> {
    let bad: Vec<&String> = all.iter().filter_map(|s| s.stats.as_ref().err()).collect();
    for e in &bad {
        eprintln!("waffle stats: {e}");
    }
    match bad.len() {
        0 => Ok(()),
        n => Err(format!("{n} of {} stats files could not be read (the others were shown)", all.len())),
    }
}

/// Writes `text` to `path` through a temporary file in the same directory, renamed over it: a reader (the
/// textfile collector) sees the old file or the new one, never half of one. The temporary name is new
/// (O_EXCL: a symlink planted there is refused, not followed) and does not end in `.prom` (the collector
/// reads only those).
fn write_atomically(path: &Path, text: &str) -> std::io::Result<()> {
    let name = path.file_name().ok_or_else(|| std::io::Error::other("names no file"))?;
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let tmp = path.with_file_name(format!(".{}.{}.{nanos:09}.tmp", name.to_string_lossy(), std::process::id()));
    let mut file = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
    let done =
        file.write_all(text.as_bytes()).and_then(|()| file.sync_data()).and_then(|()| std::fs::rename(&tmp, path));
    done.inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp); // ours: created above
    })
}

#[cfg(test)]
mod tests;
