//! A process stalled inside WAL recovery (issue 31 item 2, as tests/warm_wal_trust.rs): slot k
//! reopens (warm when its last close vouched) and reads while a helper process holds the
//! wal-index's checkpoint and recovery locks with the header marked unbuilt, so the read waits
//! in its busy handler (held there by the worker's gate). The helper lets go; a `sqlite3` shell
//! rebuilds the index, writes and checkpoints (RESTART or TRUNCATE); then the read retries and
//! must return the shell's rows.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use super::driver::{Record, Run};
use super::model::rows_text;
use super::protocol::BUSY_TIMEOUT_MS;
use super::schedule::Step;
use crate::db::open_plain;
use crate::process::KillOnDrop;

const HELPER_WAIT: Duration = Duration::from_secs(10);

/// Byte 120 of the wal-index starts its locks: 121 is the checkpoint lock, 122 the recovery
/// lock, both held exclusively while SQLite rebuilds the index (walIndexRecover); isInit (byte
/// 12 of each 48-byte header copy) 0 says the index must be rebuilt before anyone reads.
const HOLD_RECOVERY_PY: &str = r#"
import fcntl, mmap, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR)
deadline = time.time() + 5
while True:
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 2, 121, os.SEEK_SET)
        break
    except OSError:
        if time.time() > deadline:
            print("busy", flush=True)
            sys.exit(0)
        time.sleep(0.005)
m = mmap.mmap(fd, 136)
m[12] = 0
m[48 + 12] = 0
print("held", flush=True)
sys.stdin.readline()
"#;

/// The helper process inside a recovery, until `end`.
struct Holder {
    child: KillOnDrop,
}

impl Holder {
    /// Some(holder) once it holds the locks; None if another process held them for 5 s.
    fn hold(shm: &Path) -> Result<Option<Holder>, String> {
        let mut child = Command::new("python3")
            .arg("-c")
            .arg(HOLD_RECOVERY_PY)
            .arg(shm)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("spawn python3 (the recovery holder): {e}"))?;
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let child = KillOnDrop(child);
        match rx.recv_timeout(HELPER_WAIT).map(|l| l.trim().to_string()) {
            Ok(l) if l == "held" => Ok(Some(Holder { child })),
            Ok(l) if l == "busy" => Ok(None),
            other => Err(format!("the recovery holder: {other:?}")),
        }
    }

    /// The holder exits (its locks go with it); waits for it, bounded.
    fn end(mut self) -> Result<(), String> {
        let mut stdin = self.child.0.stdin.take().unwrap();
        let _ = stdin.write_all(b"end\n");
        drop(stdin);
        let deadline = std::time::Instant::now() + HELPER_WAIT;
        while std::time::Instant::now() < deadline {
            if let Some(status) = self.child.0.try_wait().map_err(|e| e.to_string())? {
                return if status.success() { Ok(()) } else { Err(format!("the recovery holder failed: {status}")) };
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Err("the recovery holder did not exit".into())
    }
}

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
        let Some(holder) = Holder::hold(&shm_of(&self.db))? else {
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
