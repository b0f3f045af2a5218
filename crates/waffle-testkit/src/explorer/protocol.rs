//! The explorer's worker protocol: one command a line on the worker's stdin, one answer a line on
//! its stdout, and the row format every reader (worker, shell, model) prints, so the driver
//! compares strings.

use std::fmt;

use crate::pattern;

/// Busy timeout of every connection and shell. Locks held across steps (an
/// open transaction) make a competitor wait this long and fail the same way
/// in both runs; what waffle adds in the background (the hot list's reload
/// holds read locks for pieces of about 100 ms, as any reader may) is waited
/// out, as an application with a busy timeout would.
pub const BUSY_TIMEOUT_MS: u32 = 400;

/// Connection slots of a worker process.
pub const SLOTS: usize = 3;

/// The table every schedule works on: padded rows, so it spans many pages.
pub const CREATE_SQL: &str = "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT NOT NULL, pad BLOB NOT NULL)";

/// Every reader prints a row as `id|v|length(pad)|hex(last 4 bytes of pad)`, in id order; `filter`
/// is a WHERE clause or empty.
pub fn rows_sql(filter: &str) -> String {
    rows_sql_in("t", filter)
}

/// As [`rows_sql`] on `table` (`a.t`: through an attached name).
pub fn rows_sql_in(table: &str, filter: &str) -> String {
    format!("SELECT id, v, length(pad), hex(substr(pad, -4)) FROM {table} {filter} ORDER BY id")
}

/// The pad of a row: a function of its value, so a row with a stale `v` and a fresh pad (or the
/// reverse) shows.
pub fn pad_of(v: &str, len: u32) -> Vec<u8> {
    pattern(u64::from(crc32c::crc32c(v.as_bytes())) << 16 | u64::from(len), len as usize)
}

/// How every reader prints a row.
pub fn row_text(id: i64, v: &str, pad: &[u8]) -> String {
    let tail: String = pad[pad.len().saturating_sub(4)..].iter().map(|b| format!("{b:02X}")).collect();
    format!("{id}|{v}|{}|{tail}", pad.len())
}

/// One statement of a write. Values are single tokens (letters and digits).
#[derive(Clone, Debug, PartialEq)]
pub enum WriteOp {
    Insert { id: i64, v: String, pad_len: u32 },
    Update { id: i64, v: String, pad_len: u32 },
    Delete { id: i64 },
    DeleteRange { lo: i64, hi: i64 },
}

impl WriteOp {
    /// The statement with literal values (the shell runs it as text; the worker too, as the
    /// values are tokens and pads are functions of them).
    pub fn sql(&self) -> String {
        self.sql_in("t")
    }

    /// The statement on `table` (`a.t`: through an attached name).
    pub fn sql_in(&self, table: &str) -> String {
        let pad = |v: &str, len: u32| pad_of(v, len).iter().map(|b| format!("{b:02X}")).collect::<String>();
        match self {
            WriteOp::Insert { id, v, pad_len } => {
                format!("INSERT INTO {table}(id, v, pad) VALUES ({id}, '{v}', X'{}')", pad(v, *pad_len))
            }
            WriteOp::Update { id, v, pad_len } => {
                format!("UPDATE {table} SET v = '{v}', pad = X'{}' WHERE id = {id}", pad(v, *pad_len))
            }
            WriteOp::Delete { id } => format!("DELETE FROM {table} WHERE id = {id}"),
            WriteOp::DeleteRange { lo, hi } => format!("DELETE FROM {table} WHERE id BETWEEN {lo} AND {hi}"),
        }
    }

    pub fn parse(token: &str) -> Option<WriteOp> {
        let f: Vec<&str> = token.split(':').collect();
        let num = |i: usize| f.get(i)?.parse::<i64>().ok();
        Some(match (f.first()?, f.len()) {
            (&"i", 4) => WriteOp::Insert { id: num(1)?, v: f[2].into(), pad_len: f[3].parse().ok()? },
            (&"u", 4) => WriteOp::Update { id: num(1)?, v: f[2].into(), pad_len: f[3].parse().ok()? },
            (&"d", 2) => WriteOp::Delete { id: num(1)? },
            (&"x", 3) => WriteOp::DeleteRange { lo: num(1)?, hi: num(2)? },
            _ => return None,
        })
    }
}

impl fmt::Display for WriteOp {
    /// The token form, as sent to a worker.
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            WriteOp::Insert { id, v, pad_len } => write!(f, "i:{id}:{v}:{pad_len}"),
            WriteOp::Update { id, v, pad_len } => write!(f, "u:{id}:{v}:{pad_len}"),
            WriteOp::Delete { id } => write!(f, "d:{id}"),
            WriteOp::DeleteRange { lo, hi } => write!(f, "x:{lo}:{hi}"),
        }
    }
}

/// A worker's answer: `ok` or `err:<extended code>`, whether the connection is inside a
/// transaction afterwards, and a payload (rows, changes, a message), tab-separated on one line.
#[derive(Clone, Debug, PartialEq)]
pub struct Answer {
    /// `ok`, `err:<extended result code>`, or a driver-side class (`busy`, `skipped`, ...).
    pub class: String,
    pub in_txn: bool,
    pub payload: String,
}

impl Answer {
    pub fn ok(in_txn: bool, payload: impl Into<String>) -> Answer {
        Answer { class: "ok".into(), in_txn, payload: payload.into() }
    }

    pub fn is_ok(&self) -> bool {
        self.class == "ok"
    }

    pub fn line(&self) -> String {
        let clean = |s: &str| s.replace(['\t', '\n', '\r'], " ");
        format!("{}\t{}\t{}", self.class, u8::from(self.in_txn), clean(&self.payload))
    }

    pub fn parse(line: &str) -> Option<Answer> {
        let mut f = line.splitn(3, '\t');
        let class = f.next()?.to_string();
        let in_txn = f.next()? == "1";
        Some(Answer { class, in_txn, payload: f.next().unwrap_or_default().to_string() })
    }
}
