//! The driver's side of the opener's moves (issue 31): an ATTACH from SQL whose URI carries
//! `waffle_*` parameters, and an open that meets the database already open in its process with
//! other settings. Both must read the model's rows; neither may create or replace a file the
//! model does not know (the scratch directory is listed after each), and a statement returns
//! within `STATEMENT_BOUND`.
//!
//! Where waffle refuses by design, both runs record `refused`: an ATTACH naming a key file that
//! is a FIFO (checked in xOpen, before SQLite says the open is an ATTACH; the control attaches
//! a file that cannot be opened instead, so that its connection too goes through a failed
//! ATTACH, which resets its schemas), and an open asking for weaker settings (another
//! grid, a seal key, verify on over off) while another waffle connection of its process has the
//! database open. Anything else refused, or a weaker open joined, fails the step.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::driver::{changes_of, Record, Run};
use super::model::{apply, rows_text};
use super::protocol::Answer;
use super::schedule::{AttachParam, AttachTarget, OtherSettings, Step};
use super::scratch::{DATABASES, FIFO, KEY, NEW_STATS, OTHER_DB, VICTIM, VICTIM_BYTES};

/// How long an ATTACH or an open (with its read and close) may take: a FIFO or a device named
/// as a key file must not block it. A block is for ever; the bound only has to be beyond what a
/// loaded machine's scheduling adds (a soak at nice 10 beside a CI-like run and a benchmark once
/// took 19 s for a plain ATTACH in the control, seed 9200022; alone the schedule runs in 18 s).
const STATEMENT_BOUND: Duration = Duration::from_secs(60);
fn path_text(p: PathBuf) -> String {
    p.to_str().expect("temp paths are UTF-8").to_string()
}

fn code(answer: &Answer) -> Option<i32> {
    answer.class.strip_prefix("err:").and_then(|c| c.parse().ok())
}

fn stage(answer: &Answer) -> &str {
    answer.payload.split(':').next().unwrap_or_default()
}

impl Run<'_> {
    fn param_query(&self, param: AttachParam) -> String {
        let node = |n: usize| self.nodes.get(n).map(|n| n.addr()).unwrap_or_else(|| "127.0.0.1:9".into());
        match param {
            AttachParam::None => String::new(),
            AttachParam::Grid(n) => format!("?waffle_grid={}", node(n)),
            AttachParam::StatsOverDb => format!("?waffle_stats_file={}", path_text(self.db.clone())),
            AttachParam::StatsOverVictim => format!("?waffle_stats_file={}", path_text(self.dir.join(VICTIM))),
            AttachParam::StatsNew => format!("?waffle_stats_file={}", path_text(self.dir.join(NEW_STATS))),
            AttachParam::KeyFifo => format!("?waffle_key_file={}", path_text(self.dir.join(FIFO))),
            AttachParam::KeyRegular => format!("?waffle_key_file={}", path_text(self.dir.join(KEY))),
        }
    }

    /// A command to worker `w`, timed: Err if it took longer than STATEMENT_BOUND.
    pub(super) fn bounded(&mut self, w: usize, command: &str) -> Result<Answer, String> {
        let started = Instant::now();
        let answer = self.workers[w].request(command)?;
        let took = started.elapsed();
        if took > STATEMENT_BOUND {
            return Err(format!("{command:?} took {took:?} (bound {STATEMENT_BOUND:?}): {answer:?}"));
        }
        Ok(answer)
    }

    pub(super) fn attach(&mut self, step: &Step) -> Result<Record, String> {
        let Step::Attach { w, k, read_only, target, param, write } = step else { unreachable!() };
        let (w, k) = (*w, *k);
        // Waffle refuses this one by design; the control's write is dropped too, so both models agree.
        let by_design = self.schedule.waffle[w][k] && *param == AttachParam::KeyFifo;
        let waffle_conn = self.waffle && self.schedule.waffle[w][k];
        let file = match target {
            AttachTarget::Same => self.db.clone(),
            AttachTarget::Other => self.dir.join(OTHER_DB),
        };
        let op = write.as_ref().filter(|_| !by_design && !read_only);
        // Where waffle refuses by design, the ATTACH fails on the slot's connection, and a failed
        // ATTACH resets the connection's schemas: its next statement reads the main database
        // again, and notices what changed under it (a WAL-mode backup restored over the file:
        // an unqualified checkpoint then answered "0|0|0" under waffle and "0|-1|-1" in a control
        // whose ATTACH had succeeded; seed 9300186, step 156). So the control's ATTACH fails too,
        // on a file that cannot be opened: both connections have the same history.
        let fails_here = by_design && !self.waffle;
        let file = if fails_here { self.dir.join("no-such-directory").join(OTHER_DB) } else { file };
        let command = format!(
            "attach {k} {} {} file:{}{} {}",
            if *read_only { "ro" } else { "rw" },
            if waffle_conn { "waffle" } else { "plain" },
            path_text(file),
            self.param_query(*param),
            op.map(|o| o.to_string()).unwrap_or_default()
        );
        let answer = self.bounded(w, &command)?;
        self.check_stderr(w)?;
        self.tally.attaches += 1;
        let ok = answer.is_ok();
        let record = if by_design {
            // Both runs' ATTACH fails to open (14): waffle's in xOpen, the control's on a missing
            // file. Not tried at all (inside a transaction, the slot closed): the same answer in both.
            if ok {
                let which = if self.waffle {
                    "an ATTACH naming a FIFO as its key file"
                } else {
                    "the control's ATTACH of a missing file"
                };
                return Err(format!("{which} did not fail to open: {answer:?}"));
            }
            if stage(&answer) == "attach" && code(&answer).map(|c| c & 0xff) == Some(14) {
                self.tally.refusals += u64::from(self.waffle);
                Record::of("refused")
            } else {
                Record { class: answer.class.clone(), compared: stage(&answer).into(), detail: answer.payload.clone() }
            }
        } else if ok {
            Record { class: answer.class.clone(), compared: answer.payload.clone(), ..Record::default() }
        } else {
            Record { class: answer.class.clone(), compared: stage(&answer).into(), detail: answer.payload.clone() }
        };
        if ok {
            let (read, changes) = answer.payload.rsplit_once(" changes=").ok_or("an attach answer without changes=")?;
            let expected = match target {
                AttachTarget::Same => self.model.committed().clone(),
                AttachTarget::Other => self.other_rows.clone(),
            };
            self.check_rows(&rows_text(&expected, None), read)
                .map_err(|e| format!("through the attached name: {e}"))?;
            if let Some(op) = op {
                let n = changes_of(changes)?;
                match target {
                    AttachTarget::Same => self.model.wrote((w, k), std::slice::from_ref(op), &n)?,
                    AttachTarget::Other => {
                        let expected = apply(&mut self.other_rows, op);
                        if n != [expected] {
                            return Err(format!("{OTHER_DB}: rows changed: expected {expected}, got {n:?}"));
                        }
                    }
                }
            }
        }
        self.check_scratch()?;
        Ok(record)
    }

    /// An open with other settings on a connection of its own in worker w, a read, a close.
    pub(super) fn open_other(&mut self, w: usize, k: usize, other: OtherSettings) -> Result<Record, String> {
        let node = |n: usize| self.nodes.get(n).map(|n| n.addr()).unwrap_or_default();
        let (params, weaker) = match other {
            OtherSettings::GridOne(n) => (format!("waffle_grid={}", node(n)), true),
            OtherSettings::NoGrid => ("waffle_grid=".into(), true),
            OtherSettings::Key => (format!("waffle_key_file={}", path_text(self.dir.join(KEY))), true),
            OtherSettings::VerifyFlipped => {
                // The waffle run's verify mode, in the control too (whose workers run without it).
                let verify = self.schedule.verify;
                (format!("waffle_verify={}", if verify { "off" } else { "on" }), !verify)
            }
            OtherSettings::Harmless => ("waffle_local=1MiB&waffle_hot_list=on".into(), false),
        };
        let shared = (0..self.open[w].len()).any(|j| self.open[w][j] && self.schedule.waffle[w][j]);
        let expect_refused = weaker && shared;
        let command =
            if self.waffle { format!("try_open {k} waffle {params}") } else { format!("try_open {k} plain -") };
        let answer = self.bounded(w, &command)?;
        self.check_stderr(w)?;
        self.tally.other_opens += 1;
        let refused = code(&answer).map(|c| c & 0xff) == Some(14);
        if self.waffle && refused != expect_refused {
            return Err(if refused {
                format!("an open with {other:?} was refused ({}): no waffle connection of the process has the database open with settings it would weaken", answer.payload)
            } else {
                format!("an open with {other:?} (weaker) was not refused beside another waffle connection of its process: {answer:?}")
            });
        }
        if answer.is_ok() {
            self.check_rows(&rows_text(self.model.committed(), None), &answer.payload)?;
        }
        self.check_scratch()?;
        // The control reads past the open waffle refuses: a lock held elsewhere may answer
        // that read busy (5) or locked (6), SQLite's own outcome, not the open's.
        let control_read = answer.is_ok() || matches!(code(&answer).map(|c| c & 0xff), Some(5 | 6));
        if expect_refused && (refused || (!self.waffle && control_read)) {
            self.tally.refusals += u64::from(self.waffle);
            return Ok(Record::of("refused"));
        }
        let compared = if answer.is_ok() { answer.payload.clone() } else { stage(&answer).to_string() };
        let detail = if answer.is_ok() { String::new() } else { answer.payload };
        Ok(Record { class: answer.class, compared, detail })
    }

    /// Every file of the scratch directory is one the model knows (the databases with SQLite's
    /// and Waffle's files beside them, the victim, the FIFO, the key); the databases still start
    /// with SQLite's header, the victim holds its bytes, the FIFO is one.
    pub(super) fn check_scratch(&self) -> Result<(), String> {
        let entries = std::fs::read_dir(self.dir.path()).map_err(|e| format!("list the scratch dir: {e}"))?;
        for entry in entries {
            let name = entry.map_err(|e| e.to_string())?.file_name().to_string_lossy().into_owned();
            if !known_file(&name) {
                return Err(format!("a file the model does not know appeared in the scratch dir: {name}"));
            }
        }
        for db in [self.db.clone(), self.dir.join(OTHER_DB)] {
            let mut head = [0u8; 16];
            let read =
                std::fs::File::open(&db).and_then(|f| std::os::unix::fs::FileExt::read_exact_at(&f, &mut head, 0));
            if read.is_err() || &head != b"SQLite format 3\0" {
                return Err(format!("{} no longer starts with SQLite's header: {head:?} {read:?}", db.display()));
            }
        }
        if std::fs::read(self.dir.join(VICTIM)).ok().as_deref() != Some(VICTIM_BYTES) {
            return Err(format!("{VICTIM} was replaced"));
        }
        let fifo = std::fs::symlink_metadata(self.dir.join(FIFO)).map_err(|e| format!("{FIFO}: {e}"))?;
        if !std::os::unix::fs::FileTypeExt::is_fifo(&fifo.file_type()) {
            return Err(format!("{FIFO} is no longer a FIFO"));
        }
        Ok(())
    }
}

fn known_file(name: &str) -> bool {
    let beside = |db: &str| {
        name == db || ["-wal", "-shm", "-journal"].iter().any(|s| name == format!("{db}{s}"))
            // The sidecar and the hot list (and their temporary files while saved).
            || name.starts_with(&format!(".{db}-waffle"))
    };
    DATABASES.iter().any(|db| beside(db)) || [VICTIM, FIFO, KEY].contains(&name)
}
