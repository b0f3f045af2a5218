//! The model of committed rows: what every read must return. It follows the outcomes the driver
//! observes (a write that failed is not applied), so the same model serves the waffle run and
//! its control; what it adds is that every read equals the rows committed before it (or the
//! snapshot its transaction holds), with nothing lost and nothing resurrected.

use std::collections::{BTreeMap, HashMap};

use super::protocol::{pad_of, row_text, WriteOp};

/// id -> (v, pad length).
pub type Rows = BTreeMap<i64, (String, u32)>;

/// A connection: (worker, slot), or the driver's own (`sqlite3` shells, renames).
pub type ConnId = (usize, usize);

/// An open transaction of one connection.
#[derive(Default)]
struct View {
    /// The rows as of its snapshot plus its own writes, and the commit count it was taken at;
    /// None until its first read or write (SQLite takes the snapshot then, not at BEGIN).
    snapshot: Option<(Rows, u64)>,
    /// A write succeeded in it: it holds the write lock, taken on a snapshot that was current.
    dirty: bool,
    /// A write in it changed a row: its COMMIT writes the file (one that changed none writes
    /// nothing, and no other snapshot goes stale by it).
    changed: bool,
}

#[derive(Default)]
pub struct Model {
    committed: Rows,
    /// Commits so far that changed a row (a write that changed none writes no page: SQLite's
    /// pager commits nothing, and a snapshot taken before it is still the latest).
    commits: u64,
    views: HashMap<ConnId, View>,
    /// Backup files by path, and the rows they hold.
    backups: HashMap<String, Rows>,
}

impl Model {
    pub fn new(rows: Rows) -> Model {
        Model { committed: rows, ..Model::default() }
    }

    pub fn committed(&self) -> &Rows {
        &self.committed
    }

    /// The rows `conn` sees now, without taking a snapshot: a statement that fails (SQLITE_BUSY)
    /// in a transaction that had none leaves none (SQLite releases the read it began).
    pub fn peek(&self, conn: ConnId) -> &Rows {
        match self.views.get(&conn).and_then(|v| v.snapshot.as_ref()) {
            Some((rows, _)) => rows,
            None => &self.committed,
        }
    }

    /// The rows `conn` sees now: its snapshot (taken now if its transaction has none yet), or the
    /// latest commit outside a transaction. Called once a statement that reads has succeeded.
    pub fn visible(&mut self, conn: ConnId) -> &Rows {
        match self.views.get_mut(&conn) {
            Some(view) => &view.snapshot.get_or_insert_with(|| (self.committed.clone(), self.commits)).0,
            None => &self.committed,
        }
    }

    /// Applies the statements of a write that succeeded and checks the rows each changed. In a
    /// transaction they go to its view; outside one they commit.
    pub fn wrote(&mut self, conn: ConnId, ops: &[WriteOp], changes: &[usize]) -> Result<(), String> {
        let in_txn = self.views.contains_key(&conn);
        let mut rows = if in_txn { self.visible(conn).clone() } else { self.committed.clone() };
        let expected: Vec<usize> = ops.iter().map(|op| apply(&mut rows, op)).collect();
        if expected != changes {
            return Err(format!("rows changed per statement: expected {expected:?}, got {changes:?}"));
        }
        let changed = changes.iter().any(|&n| n > 0);
        match self.views.get_mut(&conn) {
            Some(view) => {
                view.snapshot.as_mut().expect("taken by visible()").0 = rows;
                view.dirty = true;
                view.changed |= changed;
            }
            None if changed => self.commit_rows(rows),
            None => {}
        }
        Ok(())
    }

    /// After a step on `conn`: whether a transaction is open now, and whether the step was a
    /// COMMIT that succeeded. A transaction that ended otherwise is discarded.
    pub fn txn_state(&mut self, conn: ConnId, in_txn: bool, committed: bool) -> Result<(), String> {
        match (self.views.contains_key(&conn), in_txn) {
            (false, true) => {
                self.views.insert(conn, View::default());
            }
            (true, false) => {
                let view = self.views.remove(&conn).unwrap();
                if committed && view.dirty {
                    let (rows, at) = view.snapshot.unwrap();
                    if at != self.commits {
                        return Err(format!(
                            "a write transaction on a stale snapshot committed (snapshot after commit {at}, now {})",
                            self.commits
                        ));
                    }
                    if view.changed {
                        self.commit_rows(rows);
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Every open transaction of worker `w` is gone (the process was killed or restarted).
    pub fn forget_worker(&mut self, w: usize) {
        self.views.retain(|(worker, _), _| *worker != w);
    }

    /// A backup into `path` ended: the rows it holds, or None (failed: the file is gone).
    pub fn backed_up(&mut self, path: &str, rows: Option<Rows>) {
        match rows {
            Some(rows) => self.backups.insert(path.to_string(), rows),
            None => self.backups.remove(path),
        };
    }

    /// The database now holds the backup at `path` (a restore, or a copy renamed over it).
    pub fn restored(&mut self, path: &str) {
        let rows = self.backups.get(path).unwrap_or_else(|| panic!("no backup {path} in the model")).clone();
        self.commit_rows(rows);
    }

    pub fn has_backup(&self, path: &str) -> bool {
        self.backups.contains_key(path)
    }

    fn commit_rows(&mut self, rows: Rows) {
        self.committed = rows;
        self.commits += 1;
    }
}

/// Applies one statement; returns the rows it changes.
pub(super) fn apply(rows: &mut Rows, op: &WriteOp) -> usize {
    match op {
        WriteOp::Insert { id, v, pad_len } => {
            assert!(rows.insert(*id, (v.clone(), *pad_len)).is_none(), "the schedule reused id {id}");
            1
        }
        WriteOp::Update { id, v, pad_len } => match rows.get_mut(id) {
            Some(row) => {
                *row = (v.clone(), *pad_len);
                1
            }
            None => 0,
        },
        WriteOp::Delete { id } => usize::from(rows.remove(id).is_some()),
        WriteOp::DeleteRange { lo, hi } => {
            let ids: Vec<i64> = rows.range(*lo..=*hi).map(|(id, _)| *id).collect();
            ids.iter().for_each(|id| drop(rows.remove(id)));
            ids.len()
        }
    }
}

/// The rows as every reader prints them (`ids`: only these).
pub fn rows_text(rows: &Rows, ids: Option<&[i64]>) -> Vec<String> {
    rows.iter()
        .filter(|(id, _)| ids.is_none_or(|ids| ids.contains(id)))
        .map(|(id, (v, len))| row_text(*id, v, &pad_of(v, *len)))
        .collect()
}

/// The first difference between expected and read rows (both in id order), or None.
pub fn first_difference(expected: &[String], got: &[String]) -> Option<String> {
    let id = |r: &String| r.split('|').next().and_then(|s| s.parse::<i64>().ok()).unwrap_or(i64::MAX);
    let (mut e, mut g) = (expected.iter().peekable(), got.iter().peekable());
    loop {
        let what = match (e.peek(), g.peek()) {
            (None, None) => return None,
            (Some(x), Some(y)) if x == y => {
                e.next();
                g.next();
                continue;
            }
            (Some(x), Some(y)) if id(x) == id(y) => format!("expected {x}, read {y}"),
            (Some(x), Some(y)) if id(x) < id(y) => format!("expected {x}, not read (lost)"),
            (Some(x), None) => format!("expected {x}, not read (lost)"),
            (_, Some(y)) => format!("read {y}, not expected (resurrected or never committed)"),
        };
        return Some(format!("{} rows expected, {} read; first difference: {what}", expected.len(), got.len()));
    }
}
