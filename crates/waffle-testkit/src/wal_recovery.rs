//! Another process inside a WAL recovery (issue 31 item 2): a helper process holds the
//! wal-index's lock bytes as SQLite's `walIndexRecover` holds them and marks the index unbuilt,
//! so a reader of the database waits in its busy handler (SQLITE_BUSY_RECOVERY) until
//! [`RecoveryHolder::end`]. Used by tests/warm_wal_trust.rs and the explorer's stall move.
//!
//! The wal-index's lock bytes start at 120 (WALINDEX_LOCK_OFFSET): 120 is the write lock, 121
//! the checkpoint lock, 122 the recovery lock; isInit (byte 12 of each 48-byte header copy) 0
//! says the index must be rebuilt before anyone reads. The holder also holds the DMS byte (128)
//! shared, as every connection with the index mapped does: a reader that opens the `-shm` then
//! finds it in use and does not truncate it. It is a separate process because POSIX locks of
//! this one would be merged with (and dropped by) SQLite's own.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::process::KillOnDrop;

/// Takes the locks (retrying while another process holds them, until argv[4] seconds), prints
/// "held" or "busy", then keeps them until a line arrives on stdin.
const HOLD_RECOVERY_PY: &str = r#"
import fcntl, mmap, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR)
first, n, deadline = int(sys.argv[2]), int(sys.argv[3]), time.time() + float(sys.argv[4])
while True:
    try:
        fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB, 1, 128, os.SEEK_SET)
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, n, first, os.SEEK_SET)
        break
    except OSError:
        fcntl.lockf(fd, fcntl.LOCK_UN, 0, 0, os.SEEK_SET)
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

/// How long the helper may take to start, answer, or exit (python3 on a loaded machine: a
/// soak's explorer at autogroup nice 10 beside a CI-like run heard nothing from it in 15 s,
/// seed 8900003 step 344, whose replay passes; its start is not what is tested).
const HELPER_WAIT: Duration = Duration::from_secs(60);

/// Which of the wal-index's lock bytes the holder holds.
#[derive(Clone, Copy, Debug)]
pub enum Hold {
    /// The checkpoint and recovery locks (121, 122): a reader takes the write lock (120)
    /// itself, tries the rebuild and meets them.
    CheckpointAndRecovery,
    /// The write lock as well (120..=122), as SQLite's recovery holds them (walIndexReadHdr,
    /// then walIndexRecover): a reader never gets the write lock.
    WholeRecovery,
}

/// The helper process inside a recovery, until [`RecoveryHolder::end`] (killed if dropped).
pub struct RecoveryHolder {
    child: KillOnDrop,
}

impl RecoveryHolder {
    /// `Some` once the helper holds `hold`'s bytes of `shm`; `None` if other processes held
    /// them for all of `busy_wait`.
    pub fn hold(shm: &Path, hold: Hold, busy_wait: Duration) -> Result<Option<RecoveryHolder>, String> {
        let (first, n) = match hold {
            Hold::CheckpointAndRecovery => (121, 2),
            Hold::WholeRecovery => (120, 3),
        };
        let mut child = Command::new("python3")
            .arg("-c")
            .arg(HOLD_RECOVERY_PY)
            .arg(shm)
            .args([first.to_string(), n.to_string(), busy_wait.as_secs_f64().to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("spawn python3 (the recovery holder): {e}"))?;
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let child = KillOnDrop(child);
        match rx.recv_timeout(HELPER_WAIT + busy_wait).map(|l| l.trim().to_string()) {
            Ok(l) if l == "held" => Ok(Some(RecoveryHolder { child })),
            Ok(l) if l == "busy" => Ok(None),
            other => Err(format!("the recovery holder of {}: {other:?}", shm.display())),
        }
    }

    /// The helper exits (its locks go with it); waits for it, bounded.
    pub fn end(mut self) -> Result<(), String> {
        let mut stdin = self.child.0.stdin.take().expect("piped stdin");
        let _ = stdin.write_all(b"end\n");
        drop(stdin);
        let deadline = Instant::now() + HELPER_WAIT;
        while Instant::now() < deadline {
            if let Some(status) = self.child.0.try_wait().map_err(|e| e.to_string())? {
                return if status.success() { Ok(()) } else { Err(format!("the recovery holder failed: {status}")) };
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Err("the recovery holder did not exit".into())
    }
}
