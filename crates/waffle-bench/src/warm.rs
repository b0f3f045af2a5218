//! `waffle warm DB [TABLE...]` and the bench's `+warm` configurations: start
//! `PRAGMA waffle_warm` on a connection through the `waffle` VFS and follow
//! its progress in `PRAGMA waffle_stats` ("warm") until it ends.
//! `waffle warm --mysql DIR [TABLESPACE...]`: the same for a server under the
//! preload, through its control file and stats file ([`run_mysql`]).
//!
//! A report counts what was stored, never what was tried: pages in L1, pages
//! the grid acknowledged (`pushed_pages`; the warm waits for its pushes
//! before it is done), and apart from them what was not stored and why. A
//! warm that stored nothing it meant to store is an error (the command
//! exits non-zero). `waffle warm DB` runs in a process of its own, whose L1
//! is gone when it exits: by default its L1 is one page, so every page goes
//! to the grid while it warms, where it is counted.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use rusqlite::{Connection, OpenFlags};
use serde::Serialize;
use serde_json::Value;

/// How often the progress is read.
const POLL: Duration = Duration::from_millis(100);
/// A warm that shows no progress for this long is given up on (the PRAGMA's own lock wait is 30 s).
const STALL: Duration = Duration::from_secs(120);

/// What one warm did (the stats' "warm" object, the figures a report shows).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Warmed {
    pub target: String,
    /// How long the command waited for it: from the request to the report.
    pub seconds: f64,
    /// How long the warm itself ran (its reads, and waiting for the grid to store what it queued).
    pub warm_seconds: f64,
    pub planned_pages: u64,
    /// Pages read from the disk to be placed.
    pub read_pages: u64,
    pub l1_pages: u64,
    /// Handed to the push queue; of them, `pushed_pages` were stored by the grid.
    pub queued_pages: u64,
    /// Stored in the grid (acknowledged by a node).
    pub pushed_pages: u64,
    /// Queued and not stored, with why (`node_down`, `refused`, `lost`, `backed_off`, `dropped`, `other`).
    pub not_stored_pages: u64,
    pub not_stored: Vec<(String, u64)>,
    /// Queued and neither stored nor refused: taken back by a read, replaced by a write, or unconfirmed.
    pub unsettled_pages: u64,
    pub skipped_pages: u64,
    /// No room in L1 and no grid, or no room in the push queue in time.
    pub dropped_pages: u64,
    pub read_bytes: u64,
    pub disk_reads: u64,
    /// Parts of the target not warmed, with why (MariaDB: tablespaces InnoDB has not opened).
    pub skipped_targets: Vec<(String, String)>,
    pub skipped_targets_count: u64,
}

impl Warmed {
    fn from_json(w: &Value, seconds: f64) -> Warmed {
        let g = |k: &str| w[k].as_u64().unwrap_or(0);
        let not_stored = w["not_stored"].as_object().map(|m| {
            m.iter().filter_map(|(why, n)| Some((why.clone(), n.as_u64()?))).filter(|(_, n)| *n > 0).collect()
        });
        let skipped_targets = w["skipped_targets"].as_array().map(|a| {
            a.iter()
                .map(|t| (t["name"].as_str().unwrap_or("?").to_string(), t["why"].as_str().unwrap_or("?").to_string()))
                .collect()
        });
        Warmed {
            target: w["target"].as_str().unwrap_or_default().to_string(),
            seconds,
            warm_seconds: g("elapsed_ms") as f64 / 1000.0,
            planned_pages: g("planned_pages"),
            read_pages: g("read_pages"),
            l1_pages: g("l1_pages"),
            queued_pages: g("queued_pages"),
            pushed_pages: g("pushed_pages"),
            not_stored_pages: g("not_stored_pages"),
            not_stored: not_stored.unwrap_or_default(),
            unsettled_pages: g("unsettled_pages"),
            skipped_pages: g("skipped_pages"),
            dropped_pages: g("dropped_pages"),
            read_bytes: g("read_bytes"),
            disk_reads: g("disk_reads"),
            skipped_targets: skipped_targets.unwrap_or_default(),
            skipped_targets_count: g("skipped_targets_count"),
        }
    }

    /// Pages it meant to store and did not: dropped for lack of room, or not stored by the grid.
    pub fn unstored_pages(&self) -> u64 {
        self.dropped_pages + self.not_stored_pages
    }

    /// Why pages were not stored, for people: "6932 not sent: the node was down or unreachable, ...".
    pub fn unstored_words(&self) -> String {
        let mut why: Vec<String> =
            self.not_stored.iter().map(|(w, n)| format!("{n} {}", not_stored_words(w))).collect();
        if self.dropped_pages > 0 {
            why.push(format!("{} found no room (L1 full and no grid, or the push queue full)", self.dropped_pages));
        }
        why.join(", ")
    }

    /// One line: how long, what it stored where, what it did not and why.
    pub fn summary(&self) -> String {
        let mut line = format!(
            "warmed {} in {:.1} s: {} pages read ({:.1} MiB in {} reads); stored {} in L1, {} in the grid; {} already there",
            self.target,
            self.seconds,
            self.read_pages,
            self.read_bytes as f64 / (1 << 20) as f64,
            self.disk_reads,
            self.l1_pages,
            self.pushed_pages,
            self.skipped_pages,
        );
        // A server under the preload takes a request at its next tick: the wait is not the warm's.
        if self.warm_seconds > 0.0 && (self.seconds - self.warm_seconds).abs() >= 0.5 {
            line.push_str(&format!(" (the warm itself ran {:.1} s)", self.warm_seconds));
        }
        if self.unstored_pages() > 0 {
            line.push_str(&format!("; NOT stored: {} ({})", self.unstored_pages(), self.unstored_words()));
        }
        if self.unsettled_pages > 0 {
            line.push_str(&format!(
                "; {} queued for the grid and not confirmed (taken back by a read, replaced by a write, or still queued)",
                self.unsettled_pages
            ));
        }
        if self.skipped_targets_count > 0 {
            line.push_str(&format!("; {}", skipped_targets_words(&self.skipped_targets, self.skipped_targets_count)));
        }
        line
    }
}

/// A `not_stored` reason for people.
fn not_stored_words(why: &str) -> &'static str {
    match why {
        "node_down" => "not sent: the node was down or unreachable",
        "refused" => "refused by the node (memcached out of memory, or too large)",
        "lost" => "lost on the way (a missed deadline, a reset)",
        "backed_off" => "not sent: the node is backed off (asking it costs more than the disk read it saves)",
        "dropped" => "pushed out of the full push queue",
        _ => "not sent: no grid any more, or not sealable",
    }
}

/// `n` targets not warmed, the first few named with why.
fn skipped_targets_words(named: &[(String, String)], n: u64) -> String {
    const SHOWN: usize = 8;
    let mut by_why: Vec<(&str, Vec<&str>)> = Vec::new();
    for (name, why) in named.iter().take(SHOWN) {
        match by_why.iter_mut().find(|(w, _)| w == why) {
            Some((_, names)) => names.push(name),
            None => by_why.push((why, vec![name])),
        }
    }
    let listed: Vec<String> = by_why.iter().map(|(why, names)| format!("{} ({why})", names.join(", "))).collect();
    let more = n.saturating_sub(SHOWN.min(named.len()) as u64);
    format!(
        "{n} not warmed: {}{}",
        listed.join("; "),
        if more > 0 { format!(" and {more} more") } else { String::new() }
    )
}

fn warm_stats(conn: &Connection) -> Result<Value, String> {
    Ok(all_stats(conn)?["warm"].clone())
}

/// Warms `table` (None: the whole database) through `conn` and waits for the
/// end, showing progress on `bar` if given.
pub fn warm(conn: &Connection, table: Option<&str>, bar: Option<&ProgressBar>) -> Result<Warmed, String> {
    let sql = match table {
        Some(t) => format!("PRAGMA waffle_warm='{}'", t.replace('\'', "''")),
        None => "PRAGMA waffle_warm".into(),
    };
    let t0 = Instant::now();
    let said: String = conn.query_row(&sql, [], |r| r.get(0)).map_err(|e| e.to_string())?;
    if let Some(bar) = bar {
        bar.set_message(said.trim_start_matches("started: ").to_string());
    }
    let mut progress = Progress::new();
    loop {
        let w = warm_stats(conn)?;
        if let Some(warmed) = progress.step(&w, bar, t0.elapsed().as_secs_f64())? {
            return Ok(warmed);
        }
        std::thread::sleep(POLL);
    }
}

/// `waffle warm`'s options.
pub struct WarmOptions {
    pub db: PathBuf,
    /// Tables or indexes, one warm each; empty: the whole database.
    pub tables: Vec<String>,
    /// `waffle_grid` (None: WAFFLE_GRID or none).
    pub grid: Option<String>,
    /// `waffle_local` (None: one page: the process's L1 is gone when it exits,
    /// so every page goes to the grid while it warms, where it is counted).
    pub local: Option<String>,
    /// Other URI options, `name=value`.
    pub options: Vec<String>,
    pub progress: bool,
}

/// A `file:` URI for `path` (the characters a URI path cannot hold, escaped).
fn uri_path(path: &Path) -> String {
    let mut out = String::new();
    for c in path.display().to_string().chars() {
        match c {
            '?' | '#' | '%' => out.push_str(&format!("%{:02X}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// L1 of `waffle warm DB` without `--local`: the smallest `waffle_local` takes.
const CLI_LOCAL: &str = "4KiB";

/// Opens `o.db` through waffle and warms each of `o.tables` (or the whole
/// database) in turn; the close at the end pushes L1 to the grid. An error
/// when there is no grid, or when the grid stored none of the pages read.
pub fn run(o: &WarmOptions) -> Result<Vec<Warmed>, String> {
    if !o.db.is_file() {
        return Err(format!("{}: no such database file", o.db.display()));
    }
    waffle::register().map_err(|rc| format!("cannot register the waffle VFS (SQLite error {rc})"))?;
    let mut uri = format!("file:{}?vfs=waffle", uri_path(&o.db));
    let mut params: Vec<String> = Vec::new();
    if let Some(g) = &o.grid {
        params.push(format!("waffle_grid={g}"));
    }
    match &o.local {
        Some(l) => params.push(format!("waffle_local={l}")),
        None if !o.options.iter().any(|p| p.starts_with("waffle_local=")) => {
            params.push(format!("waffle_local={CLI_LOCAL}"))
        }
        None => {}
    }
    params.extend(o.options.iter().cloned());
    for p in &params {
        if !p.contains('=') || p.contains(['&', '#']) {
            return Err(format!("'{p}': a URI option is name=value"));
        }
        uri.push('&');
        uri.push_str(p);
    }
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_URI;
    let conn = Connection::open_with_flags(&uri, flags).map_err(|e| format!("open {uri}: {e}"))?;
    conn.busy_timeout(Duration::from_secs(10)).map_err(|e| e.to_string())?;
    let stats = all_stats(&conn)?;
    if stats["nodes"].as_array().is_none_or(Vec::is_empty) {
        return Err(format!(
            "{}: no grid (--grid or WAFFLE_GRID): what this process warms is gone when it exits",
            o.db.display()
        ));
    }
    let targets: Vec<Option<&str>> =
        if o.tables.is_empty() { vec![None] } else { o.tables.iter().map(|t| Some(t.as_str())).collect() };
    let mut out = Vec::new();
    for target in targets {
        let bar = o.progress.then(pages_bar);
        let warmed = warm(&conn, target, bar.as_ref());
        if let Some(bar) = &bar {
            bar.finish_and_clear();
        }
        let warmed = warmed.map_err(|e| format!("{}: {e}", target.unwrap_or("the whole database")))?;
        println!("{}", warmed.summary());
        out.push(warmed);
    }
    let l1_pages: u64 = out.iter().map(|w| w.l1_pages).sum();
    let nodes_up = all_stats(&conn)?["nodes"].as_array().map_or(0, |n| n.iter().filter(|n| n["up"] == true).count());
    // The close pushes what L1 holds to the grid (bounded) and saves the versions for the next open.
    drop(conn);
    if l1_pages > 0 {
        // Only with --local: the close's pushes are not seen from here.
        println!(
            "{l1_pages} pages kept in this process's L1 {}",
            if nodes_up > 0 { "were pushed to the grid at its close" } else { "were lost: no node of the grid is up" }
        );
    }
    nothing_stored(&out, if nodes_up > 0 { l1_pages } else { 0 })?;
    Ok(out)
}

/// An error when pages were to be stored and the grid stored none of them
/// (`kept`: pages stored elsewhere that count, e.g. pushed at a close).
fn nothing_stored(warmed: &[Warmed], kept: u64) -> Result<(), String> {
    let stored: u64 = warmed.iter().map(|w| w.pushed_pages).sum::<u64>() + kept;
    let meant: u64 = warmed.iter().map(|w| w.pushed_pages + w.unstored_pages()).sum();
    if stored == 0 && meant > 0 {
        let why: Vec<String> = warmed.iter().map(Warmed::unstored_words).filter(|w| !w.is_empty()).collect();
        return Err(format!("the grid stored none of the {meant} pages this warm read: {}", why.join("; ")));
    }
    Ok(())
}

fn all_stats(conn: &Connection) -> Result<Value, String> {
    let text: String =
        conn.query_row("PRAGMA waffle_stats", [], |r| r.get(0)).map_err(|e| format!("PRAGMA waffle_stats: {e}"))?;
    serde_json::from_str(&text).map_err(|e| format!("PRAGMA waffle_stats is not JSON: {e}"))
}

/// A bar of pages warmed out of pages planned (its length set once the plan is known).
fn pages_bar() -> ProgressBar {
    let bar = ProgressBar::new(1);
    let style = ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} pages  {msg}");
    bar.set_style(style.expect("a valid template"));
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// The preload's control file, beside its stats file (waffle-preload's warm.rs).
const MYSQL_REQUEST_FILE: &str = "waffle-warm.request";
/// How long the preload may take to pick a request up (its stats thread ticks every second).
const MYSQL_PICKUP: Duration = Duration::from_secs(15);

/// Asks the preload of the server whose stats file is `dir/waffle-stats.json`
/// (or `dir` itself, a stats file) to warm `tablespaces` (names as its stats
/// file shows them, or patterns like `shop/*`; none: every cached one), and
/// follows the progress in the stats file (a bar if `progress`). An error
/// when the warm stored nothing it read, or read nothing because InnoDB has
/// opened none of the tablespaces it names (it opens a table at its first use).
pub fn run_mysql(dir: &Path, tablespaces: &[String], progress: bool) -> Result<Warmed, String> {
    let stats_path = if dir.is_dir() { dir.join("waffle-stats.json") } else { dir.to_path_buf() };
    // A server just started writes its first stats after one interval.
    let t0 = Instant::now();
    while !stats_path.is_file() && t0.elapsed() < MYSQL_PICKUP {
        std::thread::sleep(POLL);
    }
    if !stats_path.is_file() {
        return Err(format!(
            "{}: no stats file (is the server running under libwaffle_preload.so? WAFFLE_STATS_FILE?)",
            stats_path.display()
        ));
    }
    let request = stats_path.with_file_name(MYSQL_REQUEST_FILE);
    let id = format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos())
    );
    let mut text = format!("id={id}\n");
    for t in tablespaces {
        if t.contains(['\n', '\r']) {
            return Err(format!("'{t}': a tablespace name is one line"));
        }
        text.push_str(t);
        text.push('\n');
    }
    // Written whole, then renamed: the preload never reads half a request.
    let tmp = request.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, text).map_err(|e| format!("{}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, &request).map_err(|e| format!("{}: {e}", request.display()))?;
    let bar = progress.then(pages_bar);
    let result = follow_mysql(&stats_path, &request, &id, bar.as_ref());
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    let warmed = result?;
    if warmed.read_pages == 0 && warmed.skipped_pages == 0 && warmed.skipped_targets_count > 0 {
        return Err(format!(
            "nothing warmed: {}. Warm again once InnoDB has opened them (a statement that uses the table opens it, e.g. SELECT 1 FROM db.t LIMIT 1)",
            skipped_targets_words(&warmed.skipped_targets, warmed.skipped_targets_count)
        ));
    }
    if warmed.l1_pages + warmed.pushed_pages == 0 && warmed.unstored_pages() > 0 {
        return Err(format!("nothing stored: {}", warmed.summary()));
    }
    Ok(warmed)
}

fn follow_mysql(stats_path: &Path, request: &Path, id: &str, bar: Option<&ProgressBar>) -> Result<Warmed, String> {
    // The command's time starts with the request, before the server takes it.
    let t0 = Instant::now();
    let ours = format!("request {id}:");
    let mut progress = Progress::new();
    loop {
        std::thread::sleep(POLL * 2);
        // The stats file is replaced whole (renamed over): a read sees one version.
        let w = std::fs::read_to_string(stats_path)
            .ok()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .map(|s| s["warm"].clone())
            .unwrap_or(Value::Null);
        if !w["target"].as_str().is_some_and(|t| t.starts_with(&ours)) {
            if t0.elapsed() > MYSQL_PICKUP {
                let _ = std::fs::remove_file(request);
                return Err(if request.exists() {
                    "the preload did not take the request (is the server running under it?)".into()
                } else {
                    "the preload took the request but did not start it (a warm already running? see the server's error log)".into()
                });
            }
            continue;
        }
        if let Some(bar) = bar {
            bar.set_message(w["target"].as_str().unwrap_or_default().to_string());
        }
        if let Some(warmed) = progress.step(&w, bar, t0.elapsed().as_secs_f64())? {
            return Ok(warmed);
        }
    }
}

/// Follows a warm's `"warm"` stats object (the PRAGMA's or the preload's
/// stats file): moves the bar, and ends with the result, the warm's own
/// error, or a stall after STALL without progress.
struct Progress {
    last_done: u64,
    last_change: Instant,
}

impl Progress {
    fn new() -> Progress {
        Progress { last_done: u64::MAX, last_change: Instant::now() }
    }

    /// Some(result) once the warm is done; `elapsed_s` is what the result reports.
    fn step(&mut self, w: &Value, bar: Option<&ProgressBar>, elapsed_s: f64) -> Result<Option<Warmed>, String> {
        let g = |k: &str| w[k].as_u64().unwrap_or(0);
        let done = g("l1_pages") + g("queued_pages") + g("skipped_pages") + g("dropped_pages");
        if let Some(bar) = bar {
            bar.set_length(g("planned_pages").max(1));
            bar.set_position(done);
        }
        match w["state"].as_str() {
            Some("running") => {}
            Some("done") => return Ok(Some(Warmed::from_json(w, elapsed_s))),
            other => {
                return Err(format!(
                    "the warm ended {}: {}",
                    other.unwrap_or("?"),
                    w["error"].as_str().unwrap_or("no reason given")
                ))
            }
        }
        if done != self.last_done {
            (self.last_done, self.last_change) = (done, Instant::now());
        } else if self.last_change.elapsed() > STALL {
            return Err(format!("the warm made no progress for {STALL:?}"));
        }
        Ok(None)
    }
}
