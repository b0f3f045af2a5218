//! The steps the driver runs itself, outside the workers: `sqlite3` shell processes (plain, or
//! with `libwaffle.so` in the waffle run), a file renamed over the database (VACUUM INTO, a
//! backup), and the grid's nodes flushed or restarted.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;

use super::driver::{changes_of, Record, Run, L1};
use super::model::{rows_text, ConnId};
use super::protocol::{rows_sql, WriteOp, BUSY_TIMEOUT_MS};
use super::schedule::Step;
use crate::artefact;
use crate::db::{open_plain, waffle_uri};
use crate::descriptors::{descriptors_on, file_id, FileId};
use crate::writers::{shell, ShellOpen, ShellRun};

/// The model's name for the shells (never inside a transaction between steps).
const SHELL: ConnId = (usize::MAX, 0);
const STATS_MARKER: &str = "stats-follow";
/// How long the driver waits for a worker's open to reach the database file (its descriptor
/// open) before the path is renamed over: far more than an open takes, even beside load.
const OPEN_REACHED_MS: u64 = 20_000;

fn ok() -> Record {
    Record::of("ok")
}

impl Run<'_> {
    /// Runs `sql` in a shell with the explorer's busy timeout: with `libwaffle.so` in the waffle run when
    /// `waffle`, then its verify counters.
    fn shell(&mut self, waffle: bool, sql: &str) -> Result<ShellRun, String> {
        self.tally.shells += 1;
        let through_waffle = self.waffle && waffle;
        let open = if through_waffle {
            let mut params = vec![("waffle_grid", self.args.grid.as_str()), ("waffle_local", L1)];
            if self.args.verify {
                params.push(("waffle_verify", "on"));
            }
            ShellOpen::Waffle { so: artefact("libwaffle.so"), uri: waffle_uri(&self.db, &params) }
        } else {
            ShellOpen::Plain
        };
        let stats =
            if through_waffle { format!("SELECT '{STATS_MARKER}';\nPRAGMA waffle_stats;\n") } else { String::new() };
        let run = shell(&self.db, &open, BUSY_TIMEOUT_MS, &format!("PRAGMA cache_size = 8;\n{sql}{stats}"));
        if let Some(line) = run.stderr.lines().find(|l| l.contains("waffle verify:")) {
            return Err(format!("the shell logged: {line}"));
        }
        if through_waffle && run.success {
            self.shell_verify(&run)?;
        }
        Ok(run)
    }

    fn shell_verify(&mut self, run: &ShellRun) -> Result<(), String> {
        let text = run.after(STATS_MARKER).join("\n");
        let stats: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| format!("shell waffle_stats ({e}): {text}"))?;
        let count = |name: &str| stats.get(name).map(|v| format!("{name}={v}"));
        let payload = [count("verify_mismatches"), count("verify_checked")].into_iter().flatten().collect::<Vec<_>>();
        self.check_verify(&payload.join(" ").replace("verify_", ""))
    }

    /// The outcome class of a shell run: `ok`, `busy`, or `err:shell` with its message.
    fn shell_class(run: &ShellRun) -> String {
        match (run.success, run.busy()) {
            (true, _) => "ok".into(),
            (false, true) => "busy".into(),
            (false, false) => format!("err:shell {}", run.stderr.lines().next().unwrap_or_default()),
        }
    }

    pub(super) fn shell_write(&mut self, ops: &[WriteOp], waffle: bool) -> Result<Record, String> {
        let mut sql = String::from("BEGIN IMMEDIATE;\n");
        for op in ops {
            sql.push_str(&format!("{};\nSELECT 'c', changes();\n", op.sql()));
        }
        sql.push_str("COMMIT;\n");
        let run = self.shell(waffle, &sql)?;
        let class = Self::shell_class(&run);
        if class == "busy" {
            self.tally.busy += 1;
        }
        if !run.success {
            return Ok(Record { class, detail: run.stderr.trim().to_string(), ..Record::default() });
        }
        let changes: Vec<&str> = run.stdout.lines().filter_map(|l| l.strip_prefix("c|")).collect();
        let changes = changes_of(&changes.join(","))?;
        self.model.wrote(SHELL, ops, &changes)?;
        Ok(Record { class, compared: format!("{changes:?}"), ..Record::default() })
    }

    pub(super) fn shell_read(&mut self, waffle: bool) -> Result<Record, String> {
        let run = self.shell(waffle, &format!("{};\n", rows_sql("")))?;
        let class = Self::shell_class(&run);
        if run.success {
            let rows: Vec<&str> = run.stdout.lines().take_while(|l| *l != STATS_MARKER).collect();
            let expected = rows_text(self.model.committed(), None);
            self.check_rows(&expected, &rows.join(";")).map_err(|e| format!("shell: {e}"))?;
        }
        Ok(Record::of(&class))
    }

    pub(super) fn shell_checkpoint(&mut self, mode: &str) -> Result<Record, String> {
        self.tally.checkpoints += 1;
        let run = self.shell(false, &format!("PRAGMA wal_checkpoint({mode});\n"))?;
        Ok(Record { class: Self::shell_class(&run), compared: run.stdout.trim().to_string(), ..Record::default() })
    }

    /// With every connection closed: the database opened plainly (a hot journal or WAL is
    /// recovered, then checkpointed away by the close), `make` writes the new file, which is
    /// renamed over the database.
    fn replace_db(
        &mut self,
        make: impl FnOnce(&rusqlite::Connection, &str) -> Result<(), String>,
    ) -> Result<Record, String> {
        if !self.all_closed() {
            return Ok(Record::of("skipped"));
        }
        let tmp = self.dir.join("replacement.db");
        make(&self.quiesce()?, tmp.to_str().unwrap())?;
        std::fs::rename(&tmp, &self.db).map_err(|e| format!("rename over the database: {e}"))?;
        self.tally.renames += 1;
        Ok(ok())
    }

    /// The database opened plainly: a hot journal or WAL left by a kill is recovered on the first
    /// read, and the close (the last connection) checkpoints the WAL away.
    fn quiesce(&self) -> Result<rusqlite::Connection, String> {
        let conn = open_plain(&self.db);
        conn.query_row("SELECT count(*) FROM t", [], |r| r.get::<_, i64>(0)).map_err(|e| format!("recover: {e}"))?;
        Ok(conn)
    }

    /// A backup renamed over the database while slot k of worker w opens it: the open is held
    /// in waffle's sidecar lock (an exclusive flock taken here) for the rename, then released.
    /// SQLite opened the file the path named before the rename, so a read must see its rows;
    /// then the slot is closed, and the path names the backup.
    pub(super) fn rename_during_open(&mut self, w: usize, k: usize, file: u8) -> Result<Record, String> {
        let backup = self.backup_path(file);
        if !self.all_closed() || !self.model.has_backup(&backup) {
            return Ok(Record::of("skipped"));
        }
        let tmp = self.dir.join("replacement.db");
        drop(self.quiesce()?);
        std::fs::copy(&backup, &tmp).map_err(|e| format!("copy: {e}"))?;
        let expected = rows_text(self.model.committed(), None);
        let sidecar = hold_sidecar(&self.db)?;
        let file = file_id(&self.db).map_err(|e| format!("stat {}: {e}", self.db.display()))?;
        let pid = self.workers[w].pid();
        let before = descriptors_on(pid, file).len();
        let open = self.command(&Step::Open { w, k, hot_list: "off" });
        self.workers[w].send(&open)?;
        // The open has the file once its descriptor is there (waffle's then waits in the sidecar's
        // lock held above); a sleep instead was too short beside load, and the open read the
        // backup renamed over it (seed 0x190000, step 193, a run beside a suite and a soak).
        wait_for_descriptor(pid, file, before)?;
        std::fs::rename(&tmp, &self.db).map_err(|e| format!("rename over the database: {e}"))?;
        self.model.restored(&backup);
        self.tally.renames += 1;
        drop(sidecar);
        let opened = self.workers[w].answer(&open)?;
        if !opened.is_ok() {
            return Ok(Record { class: format!("open {}", opened.class), detail: opened.payload, ..Record::default() });
        }
        self.open[w][k] = true;
        self.count_open(&opened.payload);
        let read = self.workers[w].request(&format!("read {k}"))?;
        if read.is_ok() {
            self.check_rows(&expected, &read.payload).map_err(|e| format!("opened before the rename: {e}"))?;
        }
        let closed = self.conn_step(&Step::Close { w, k })?;
        let class = format!("{}/{}/{}", opened.class, read.class, closed.class);
        Ok(Record { class, compared: read.payload, detail: closed.detail })
    }

    pub(super) fn vacuum_into_rename(&mut self) -> Result<Record, String> {
        self.replace_db(|conn, tmp| {
            let _ = std::fs::remove_file(tmp);
            conn.execute_batch(&format!("VACUUM INTO '{tmp}'")).map_err(|e| format!("VACUUM INTO: {e}"))
        })
    }

    pub(super) fn rename_backup(&mut self, file: u8) -> Result<Record, String> {
        let path = self.backup_path(file);
        if !self.model.has_backup(&path) {
            return Ok(Record::of("skipped"));
        }
        let record = self.replace_db(|_, tmp| std::fs::copy(&path, tmp).map(drop).map_err(|e| format!("copy: {e}")))?;
        if record.class == "ok" {
            self.model.restored(&path);
        }
        Ok(record)
    }

    /// `flush_all` on node `n` (the control has no nodes: nothing to do).
    pub(super) fn node_flush(&mut self, n: usize) -> Result<Record, String> {
        if let Some(node) = self.nodes.get(n) {
            flush_all(&node.addr())?;
            self.tally.node_flushes += 1;
        }
        Ok(ok())
    }

    pub(super) fn node_restart(&mut self, n: usize) -> Result<Record, String> {
        if let Some(node) = self.nodes.get_mut(n) {
            node.restart().map_err(|e| format!("restart node {n}: {e}"))?;
            self.tally.node_restarts += 1;
        }
        Ok(ok())
    }
}

/// Waits (`OPEN_REACHED_MS` at most) until process `pid` has more descriptors on `file` than
/// `before`.
fn wait_for_descriptor(pid: u32, file: FileId, before: usize) -> Result<(), String> {
    let deadline = std::time::Instant::now() + Duration::from_millis(OPEN_REACHED_MS);
    while descriptors_on(pid, file).len() <= before {
        if std::time::Instant::now() >= deadline {
            return Err(format!("the worker's open did not reach the database file in {OPEN_REACHED_MS} ms"));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

/// waffle's sidecar of `db`, flocked exclusively: a waffle open waits for it.
fn hold_sidecar(db: &std::path::Path) -> Result<std::fs::File, String> {
    use std::os::unix::io::AsRawFd;
    let path = waffle_core::sidecar::Sidecar::path_for(db);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| format!("open {}: {e}", path.display()))?;
    // SAFETY: flock on a descriptor this function owns; released when the file is dropped.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(format!("flock {}: {}", path.display(), std::io::Error::last_os_error()));
    }
    Ok(file)
}

fn flush_all(addr: &str) -> Result<(), String> {
    let mut s = TcpStream::connect(addr).map_err(|e| format!("connect {addr}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(5))).map_err(|e| e.to_string())?;
    s.write_all(b"flush_all\r\n").map_err(|e| e.to_string())?;
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).map_err(|e| format!("flush_all on {addr}: {e}"))?;
    if line.trim() != "OK" {
        return Err(format!("flush_all on {addr}: {line:?}"));
    }
    Ok(())
}
