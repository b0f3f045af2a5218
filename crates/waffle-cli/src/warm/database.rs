//! `waffle warm DB [TABLE...]`: a SQLite database opened through the `waffle`
//! VFS in this process, warmed table by table (or whole), its summaries
//! printed. This process's L1 is gone when it exits: by default it is one
//! page, so every page goes to the grid while it warms, where it is counted;
//! without a grid the command is refused, and a warm that stored nothing it
//! meant to store is an error (the command exits non-zero).

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};
use waffle_warm_client::{sqlite, Seen, Warmed};

use super::bar::Bar;

/// `waffle warm`'s options for a database.
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

/// L1 of `waffle warm DB` without `--local`: the smallest `waffle_local` takes.
const CLI_LOCAL: &str = "4KiB";

/// Opens `o.db` through waffle and warms each of `o.tables` (or the whole
/// database) in turn; the close at the end pushes L1 to the grid. An error
/// when there is no grid, or when the grid stored none of the pages read.
pub fn run(o: &WarmOptions) -> Result<Vec<Warmed>, String> {
    if !o.db.is_file() {
        return Err(format!("{}: no such database file", o.db.display()));
    }
    let conn = open(o)?;
    if sqlite::stats(&conn)?["nodes"].as_array().is_none_or(Vec::is_empty) {
        return Err(format!(
            "{}: no grid (--grid or WAFFLE_GRID): what this process warms is gone when it exits",
            o.db.display()
        ));
    }
    let targets: Vec<Option<&str>> =
        if o.tables.is_empty() { vec![None] } else { o.tables.iter().map(|t| Some(t.as_str())).collect() };
    let mut out = Vec::new();
    for target in targets {
        let bar = Bar::default();
        let show: &dyn Fn(&Seen<'_>) = &|s| bar.seen(s);
        let warmed = sqlite::warm(&conn, target, o.progress.then_some(show));
        bar.finish();
        let warmed = warmed.map_err(|e| format!("{}: {e}", target.unwrap_or("the whole database")))?;
        println!("{}", warmed.summary());
        out.push(warmed);
    }
    let l1_pages: u64 = out.iter().map(|w| w.l1_pages).sum();
    let nodes_up =
        sqlite::stats(&conn)?["nodes"].as_array().map_or(0, |n| n.iter().filter(|n| n["up"] == true).count());
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

/// The database through the `waffle` VFS with `o`'s URI options.
fn open(o: &WarmOptions) -> Result<Connection, String> {
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
    Ok(conn)
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
