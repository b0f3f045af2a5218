//! `waffle warm DB [TABLE...]` and the bench's `+warm` configurations: start
//! `PRAGMA waffle_warm` on a connection through the `waffle` VFS and follow
//! its progress in `PRAGMA waffle_stats` ("warm") until it ends.
//! `waffle warm --mysql DIR [TABLESPACE...]`: the same for a server under the
//! preload, through its control file and stats file ([`run_mysql`]).

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
    pub seconds: f64,
    pub planned_pages: u64,
    pub l1_pages: u64,
    pub pushed_pages: u64,
    pub skipped_pages: u64,
    pub dropped_pages: u64,
    pub read_bytes: u64,
    pub disk_reads: u64,
}

impl Warmed {
    fn from_json(w: &Value, seconds: f64) -> Warmed {
        let g = |k: &str| w[k].as_u64().unwrap_or(0);
        Warmed {
            target: w["target"].as_str().unwrap_or_default().to_string(),
            seconds,
            planned_pages: g("planned_pages"),
            l1_pages: g("l1_pages"),
            pushed_pages: g("pushed_pages"),
            skipped_pages: g("skipped_pages"),
            dropped_pages: g("dropped_pages"),
            read_bytes: g("read_bytes"),
            disk_reads: g("disk_reads"),
        }
    }

    /// One line: how long, and what it filled.
    pub fn summary(&self) -> String {
        format!(
            "warmed {} in {:.1} s: {} pages read ({:.1} MiB in {} reads), {} to L1, {} to the grid, {} already there{}",
            self.target,
            self.seconds,
            self.planned_pages,
            self.read_bytes as f64 / (1 << 20) as f64,
            self.disk_reads,
            self.l1_pages,
            self.pushed_pages,
            self.skipped_pages,
            if self.dropped_pages > 0 { format!(", {} found no room", self.dropped_pages) } else { String::new() }
        )
    }
}

fn warm_stats(conn: &Connection) -> Result<Value, String> {
    let text: String =
        conn.query_row("PRAGMA waffle_stats", [], |r| r.get(0)).map_err(|e| format!("PRAGMA waffle_stats: {e}"))?;
    let s: Value = serde_json::from_str(&text).map_err(|e| format!("PRAGMA waffle_stats is not JSON: {e}"))?;
    Ok(s["warm"].clone())
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
    /// `waffle_local` (None: WAFFLE_LOCAL or the default).
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

/// Opens `o.db` through waffle and warms each of `o.tables` (or the whole
/// database) in turn; the close at the end pushes L1 to the grid.
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
    if let Some(l) = &o.local {
        params.push(format!("waffle_local={l}"));
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
    // The close pushes what L1 holds to the grid (bounded) and saves the versions for the next open.
    let flushed: String = conn.query_row("PRAGMA waffle_flush", [], |r| r.get(0)).map_err(|e| e.to_string())?;
    if flushed != "ok" {
        eprintln!("waffle warm: the push queue did not empty in time");
    }
    drop(conn);
    Ok(out)
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
/// follows the progress in the stats file (a bar if `progress`).
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
    result
}

fn follow_mysql(stats_path: &Path, request: &Path, id: &str, bar: Option<&ProgressBar>) -> Result<Warmed, String> {
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
        let elapsed_s = w["elapsed_ms"].as_u64().unwrap_or(0) as f64 / 1000.0;
        if let Some(warmed) = progress.step(&w, bar, elapsed_s)? {
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
        let done = g("l1_pages") + g("pushed_pages") + g("skipped_pages") + g("dropped_pages");
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
