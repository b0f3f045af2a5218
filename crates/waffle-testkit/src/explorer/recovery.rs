//! A process stalled inside WAL recovery (issue 31 item 2, as tests/warm_wal_trust.rs): slot k
//! reopens (warm when its last close vouched) and reads while a helper process holds the
//! wal-index's checkpoint and recovery locks with the header marked unbuilt, so the read waits
//! in its busy handler (held there by the worker's gate). The helper lets go; a `sqlite3` shell
//! rebuilds the index, writes and checkpoints (RESTART or TRUNCATE); then the read retries and
//! must return the shell's rows.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::driver::{Record, Run};
use super::model::rows_text;
use super::protocol::BUSY_TIMEOUT_MS;
use super::schedule::Step;
use crate::db::open_plain;
use crate::wal_recovery::{Hold, RecoveryHolder};

/// How long another process may hold the recovery's locks before the move is skipped.
const BUSY_WAIT: Duration = Duration::from_secs(5);

fn shm_of(db: &Path) -> PathBuf {
    let mut p = db.as_os_str().to_owned();
    p.push("-shm");
    PathBuf::from(p)
}

impl Run<'_> {
    pub(super) fn stall_recovery(&mut self, step: &Step) -> Result<Record, String> {
        let Step::StallRecovery { w, k, hot_list, ops, mode } = step else { unreachable!() };
        let (w, k) = (*w, *k);
        // A connection of the driver's own keeps the wal-index (the last close removes it); it
        // holds no lock byte of the index this process could drop (the helper is another process).
        let keeper = open_plain(&self.db);
        keeper.busy_timeout(Duration::from_millis(BUSY_TIMEOUT_MS.into())).map_err(|e| e.to_string())?;
        let mode_now: String = match keeper.query_row("PRAGMA journal_mode", [], |r| r.get(0)) {
            Ok(m) => m,
            Err(e) => return Ok(Record { class: "keeper-busy".into(), detail: e.to_string(), ..Record::default() }),
        };
        if mode_now != "wal" || keeper.query_row("SELECT count(*) FROM t", [], |_| Ok(())).is_err() {
            return Ok(Record::of(&format!("skipped {mode_now}")));
        }
        let reopened = self.conn_step(&Step::Close { w, k })?;
        let opened = self.conn_step(&Step::Open { w, k, hot_list })?;
        if opened.class != "ok" {
            return Ok(Record { class: format!("{}/{}", reopened.class, opened.class), ..opened });
        }
        let Some(holder) = RecoveryHolder::hold(&shm_of(&self.db), Hold::CheckpointAndRecovery, BUSY_WAIT)? else {
            return Ok(Record::of("recovery-lock-busy"));
        };
        let first = self.workers[w].request(&format!("stall {k}"))?;
        let stalled = first.is_ok() && first.payload == "waiting";
        let before = rows_text(self.model.committed(), None);
        holder.end()?;
        let write = self.shell_write(ops, false)?;
        let checkpoint = self.shell_checkpoint(mode)?;
        let read = if stalled { self.workers[w].request(&format!("go {k}"))? } else { first };
        self.check_stderr(w)?;
        drop(keeper);
        self.tally.recovery_stalls += u64::from(stalled);
        if read.is_ok() {
            let expected = if stalled { rows_text(self.model.committed(), None) } else { before };
            self.check_rows(&expected, &read.payload).map_err(|e| {
                format!(
                    "a read that waited on another process's recovery ({}): {e}",
                    if stalled { "stalled" } else { "did not stall" }
                )
            })?;
        }
        self.model.txn_state((w, k), read.in_txn, false)?;
        let class = format!("{}/{}/{}/{}", read.class, u8::from(stalled), write.class, checkpoint.class);
        let detail = if read.is_ok() { String::new() } else { read.payload.clone() };
        Ok(Record { class, compared: format!("{} {}", read.payload, checkpoint.compared), detail })
    }
}
