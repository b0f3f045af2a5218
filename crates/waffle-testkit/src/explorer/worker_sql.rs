//! What the worker's slots (worker.rs) and its opener moves (worker_moves.rs) share: the setup
//! of its command line, a slot's channels, answers made of SQLite's results, rows as text.

use std::path::PathBuf;
use std::sync::mpsc;

use rusqlite::Connection;

use super::protocol::Answer;

/// What every waffle open of a worker shares (its command line).
#[derive(Clone)]
pub struct Setup {
    pub db: PathBuf,
    pub grid: String,
    pub local: String,
    pub verify: bool,
}

/// A slot's thread: commands in, answers out.
pub(super) type Slot = (mpsc::Sender<Vec<String>>, mpsc::Receiver<Answer>);

pub(super) fn error_answer(conn: Option<&Connection>, e: &rusqlite::Error) -> Answer {
    let class = match e.sqlite_error() {
        Some(err) => format!("err:{}", err.extended_code),
        None => "err:other".into(),
    };
    Answer { class, in_txn: in_txn(conn), payload: e.to_string() }
}

pub(super) fn in_txn(conn: Option<&Connection>) -> bool {
    conn.is_some_and(|c| !c.is_autocommit())
}

/// Every row of a query, columns joined by `|`, rows by `;`.
pub(super) fn rows(c: &Connection, sql: &str) -> rusqlite::Result<String> {
    let mut stmt = c.prepare(sql)?;
    let cols = stmt.column_count();
    let mut rows = stmt.query([])?;
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        let fields: Vec<String> = (0..cols).map(|i| text_of(row.get_ref(i))).collect::<Vec<_>>();
        out.push(fields.join("|"));
    }
    Ok(out.join(";"))
}

fn text_of(v: rusqlite::Result<rusqlite::types::ValueRef>) -> String {
    use rusqlite::types::ValueRef::*;
    match v {
        Ok(Null) => "NULL".into(),
        Ok(Integer(i)) => i.to_string(),
        Ok(Real(r)) => r.to_string(),
        Ok(Text(t)) => String::from_utf8_lossy(t).into_owned(),
        Ok(Blob(b)) => format!("blob({})", b.len()),
        Err(e) => format!("error({e})"),
    }
}
