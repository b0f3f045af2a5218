//! Benchmark datasets: built once with the default VFS, reused while their
//! tag (the workload's parameters and the page size) matches.
//!
//! The pattern of `crate::dataset`, generalised: any workload builds into a
//! temporary file that is renamed into place only when complete (an
//! interrupted build is never mistaken for a dataset), with a progress bar.

use std::path::{Path, PathBuf};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use rusqlite::Connection;

use super::workload::Workload;
use crate::dataset::with_suffix;

pub struct Dataset {
    pub path: PathBuf,
    pub bytes: u64,
    pub tag: String,
    /// Whether this run built it (false: reused).
    pub built: bool,
}

/// The tag a dataset was built with, if `path` is a complete dataset.
pub fn tag_of(path: &Path) -> Option<String> {
    if !path.is_file() {
        return None;
    }
    let conn = Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).ok()?;
    conn.query_row("SELECT tag FROM waffle_bench_meta", [], |r| r.get(0)).ok()
}

/// Files SQLite and waffle keep beside a database.
pub fn remove_companions(path: &Path) {
    for suffix in ["-journal", "-wal", "-shm", "-waffle"] {
        let _ = std::fs::remove_file(with_suffix(path, suffix));
    }
}

/// The dataset of `workload` at `page_bytes` in `dir`, built unless a matching one is there.
pub fn ensure(dir: &Path, workload: &dyn Workload, page_bytes: u32) -> Result<Dataset, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let path = dir.join(workload.file_name());
    let tag = format!("{} page={page_bytes}", workload.tag());
    if tag_of(&path).as_deref() == Some(tag.as_str()) {
        let bytes = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        return Ok(Dataset { path, bytes, tag, built: false });
    }
    let building = with_suffix(&path, ".building");
    let _ = std::fs::remove_file(&building);
    remove_companions(&building);
    let progress = ProgressBar::new(100);
    progress.set_style(
        ProgressStyle::with_template("{msg} [{bar:40}] {percent:>3}% {elapsed} (eta {eta})")
            .expect("valid template")
            .progress_chars("=> "),
    );
    progress.set_message(format!("waffle bench: building {} ({})", path.display(), workload.describe()));
    progress.enable_steady_tick(Duration::from_millis(250));
    let result = (|| -> rusqlite::Result<()> {
        let mut conn = Connection::open(&building)?;
        conn.pragma_update(None, "page_size", page_bytes)?;
        conn.pragma_update(None, "journal_mode", "off")?;
        conn.pragma_update(None, "synchronous", "off")?;
        conn.pragma_update(None, "cache_size", -65536)?;
        workload.build(&mut conn, &progress)?;
        conn.execute_batch("CREATE TABLE waffle_bench_meta(tag TEXT)")?;
        conn.execute("INSERT INTO waffle_bench_meta(tag) VALUES (?1)", [&tag])?;
        let journal = if workload.writes() { "wal" } else { "delete" };
        let _: String = conn.query_row(&format!("PRAGMA journal_mode={journal}"), [], |r| r.get(0))?;
        conn.close().map_err(|(_, e)| e)
    })();
    progress.finish_and_clear();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&building);
        remove_companions(&building);
        return Err(format!("building {}: {e}", path.display()));
    }
    let _ = std::fs::remove_file(&path);
    remove_companions(&path);
    std::fs::rename(&building, &path).map_err(|e| format!("cannot rename {}: {e}", building.display()))?;
    let bytes = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    eprintln!("waffle bench: built {} ({:.1} MiB)", path.display(), bytes as f64 / (1 << 20) as f64);
    Ok(Dataset { path, bytes, tag, built: true })
}

/// A fresh working copy of a dataset for a workload that writes: every
/// configuration starts from the same bytes.
pub fn working_copy(ds: &Dataset) -> Result<PathBuf, String> {
    let work = with_suffix(&ds.path, ".work");
    let _ = std::fs::remove_file(&work);
    remove_companions(&work);
    std::fs::copy(&ds.path, &work)
        .map_err(|e| format!("cannot copy {} to {}: {e}", ds.path.display(), work.display()))?;
    Ok(work)
}
