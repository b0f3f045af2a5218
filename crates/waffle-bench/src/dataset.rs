//! A benchmark database: one table of fixed-size rows, built once and reused
//! while its parameters match.

use std::io::Write;
use std::path::{Path, PathBuf};

use rand::rngs::SmallRng;
use rand::{RngCore, SeedableRng};
use rusqlite::{params, Connection};

/// Bytes of payload per row: with the key and record overhead, about 16 rows per 4 KiB page.
pub const ROW_PAYLOAD_BYTES: usize = 220;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spec {
    pub rows: u64,
    pub page_bytes: u32,
}

impl Spec {
    /// Rows for about `data_bytes` of table.
    pub fn for_size(data_bytes: u64, page_bytes: u32) -> Spec {
        Spec { rows: data_bytes / (ROW_PAYLOAD_BYTES as u64 + 36), page_bytes }
    }

    fn tag(&self) -> String {
        format!("rows={} page={} payload={}", self.rows, self.page_bytes, ROW_PAYLOAD_BYTES)
    }
}

/// Builds the database at `path` with the default VFS unless one with the same spec is there.
/// Shows progress on stderr. Returns the file's size in bytes.
pub fn ensure(path: &Path, spec: &Spec) -> rusqlite::Result<u64> {
    if let Ok(conn) = Connection::open(path) {
        let tag: Option<String> = conn.query_row("SELECT tag FROM meta", [], |r| r.get(0)).ok();
        if tag.as_deref() == Some(spec.tag().as_str()) {
            return Ok(std::fs::metadata(path).map(|m| m.len()).unwrap_or(0));
        }
    }
    for suffix in ["", "-journal", "-wal", "-shm", "-waffle"] {
        let _ = std::fs::remove_file(with_suffix(path, suffix));
    }
    let mut conn = Connection::open(path)?;
    conn.pragma_update(None, "page_size", spec.page_bytes)?;
    conn.pragma_update(None, "journal_mode", "off")?;
    conn.pragma_update(None, "synchronous", "off")?;
    conn.execute_batch("CREATE TABLE rows(id INTEGER PRIMARY KEY, k INTEGER NOT NULL, payload BLOB NOT NULL);")?;
    let mut rng = SmallRng::seed_from_u64(2008);
    let mut payload = vec![0u8; ROW_PAYLOAD_BYTES];
    let chunk = 10_000u64;
    let mut done = 0u64;
    while done < spec.rows {
        let tx = conn.transaction()?;
        {
            let mut ins = tx.prepare_cached("INSERT INTO rows(id, k, payload) VALUES (?1, ?2, ?3)")?;
            for id in done..(done + chunk).min(spec.rows) {
                rng.fill_bytes(&mut payload);
                ins.execute(params![id as i64, (rng.next_u32() % 1_000_000) as i64, &payload])?;
            }
        }
        tx.commit()?;
        done = (done + chunk).min(spec.rows);
        eprint!("\rwaffle: building {}: {:>3}%", path.display(), done * 100 / spec.rows.max(1));
        let _ = std::io::stderr().flush();
    }
    eprintln!();
    conn.execute_batch("CREATE TABLE meta(tag TEXT); ")?;
    conn.execute("INSERT INTO meta(tag) VALUES (?1)", [spec.tag()])?;
    conn.pragma_update(None, "journal_mode", "delete")?;
    drop(conn);
    Ok(std::fs::metadata(path).map(|m| m.len()).unwrap_or(0))
}

pub fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}
