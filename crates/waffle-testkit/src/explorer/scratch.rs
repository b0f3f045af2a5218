//! The scratch directory's files beside the database, made before a run: another database (an
//! ATTACH's target), a JSON file that is not Waffle's, a FIFO and a regular key file (values of
//! an ATTACH's or an open's `waffle_*` parameters).

use super::model::{apply, Rows};
use super::protocol::{WriteOp, CREATE_SQL};
use super::schedule::OTHER_ROWS;
use crate::db::open_plain;

pub const OTHER_DB: &str = "other.db";
/// A JSON file that is not Waffle's (a stats file must never replace it).
pub(super) const VICTIM: &str = "notes.json";
pub(super) const VICTIM_BYTES: &[u8] = br#"{"name":"not waffle's"}"#;
pub(super) const FIFO: &str = "key.fifo";
pub(super) const KEY: &str = "waffle.key";
/// A stats file an ATTACH names that nothing may create.
pub(super) const NEW_STATS: &str = "attach-stats.json";
/// Databases of the scratch directory (each may have SQLite's and Waffle's files beside it).
pub(super) const DATABASES: [&str; 5] = ["e.db", OTHER_DB, "backup-0.db", "backup-1.db", "replacement.db"];

/// The scratch directory's other files: the other database (its rows), the victim, a FIFO and a
/// regular key file.
pub(super) fn make_scratch(dir: &crate::temp_dir::TempDir) -> Result<Rows, String> {
    let other = dir.join(OTHER_DB);
    let conn = open_plain(&other);
    conn.execute_batch(&format!("PRAGMA page_size = 4096; PRAGMA journal_mode = DELETE; {CREATE_SQL};"))
        .map_err(|e| format!("create {OTHER_DB}: {e}"))?;
    let mut rows = Rows::new();
    for id in 1..=OTHER_ROWS {
        let op = WriteOp::Insert { id, v: format!("other{id}"), pad_len: 300 };
        conn.execute(&op.sql(), []).map_err(|e| format!("fill {OTHER_DB}: {e}"))?;
        apply(&mut rows, &op);
    }
    std::fs::write(dir.join(VICTIM), VICTIM_BYTES).map_err(|e| e.to_string())?;
    std::fs::write(dir.join(KEY), "5a".repeat(32)).map_err(|e| e.to_string())?;
    let fifo = std::ffi::CString::new(dir.join(FIFO).to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path.
    if unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) } != 0 {
        return Err(format!("mkfifo: {}", std::io::Error::last_os_error()));
    }
    Ok(rows)
}
