//! The driver's side of the fork move: a worker forks, and its child opens the database anew
//! (SQLite's rule: a connection is not carried across a fork), reads, maybe writes, closes.
//!
//! Its rows must be the model's committed rows and its write must change what the model says
//! (then it commits, as a shell's does); both runs record the rows and changes, so the control
//! (a plain child) must agree too. Through waffle the child's cache must be its own: its cache
//! id none of the caches its parent has open (a child that joined them would give out the
//! parent's version names without the parent's threads), and verify mode counts no mismatch.

use super::driver::{changes_of, Record, Run};
use super::model::{rows_text, ConnId};
use super::protocol::WriteOp;

/// The model's name for a fork's child (it commits outside any worker's transaction).
const CHILD: ConnId = (usize::MAX, 1);

impl Run<'_> {
    pub(super) fn fork(&mut self, w: usize, k: usize, write: Option<&WriteOp>) -> Result<Record, String> {
        let waffle = self.waffle && self.schedule.waffle[w][k];
        let op = write.map(|o| o.to_string()).unwrap_or_default();
        let command = format!("fork {k} {} {op}", if waffle { "waffle" } else { "plain" });
        let answer = self.bounded(w, &command)?;
        self.check_stderr(w)?;
        self.tally.forks += 1;
        if !answer.is_ok() {
            // Busy or locked beside another connection's lock: SQLite's outcome, in both runs.
            let stage = answer.payload.split(':').next().unwrap_or_default().to_string();
            return Ok(Record { class: answer.class, compared: stage, detail: answer.payload });
        }
        let (read, rest) = answer.payload.rsplit_once(" changes=").ok_or("a fork answer without changes=")?;
        let field = |name: &str| {
            rest.split_whitespace().find_map(|f| f.strip_prefix(name).map(str::to_string)).unwrap_or_default()
        };
        let (changes, cache, mismatches, parents) = (
            rest.split_whitespace().next().unwrap_or_default(),
            field("cache="),
            field("mismatches="),
            field("parents="),
        );
        self.check_rows(&rows_text(self.model.committed(), None), read).map_err(|e| format!("the child: {e}"))?;
        if let Some(op) = write {
            self.model.wrote(CHILD, std::slice::from_ref(op), &changes_of(changes)?)?;
        }
        if waffle {
            if parents.split(',').any(|p| p == cache) {
                return Err(format!("the child's open joined its parent's cache {cache} (parents: {parents})"));
            }
            if mismatches != "0" {
                return Err(format!("verify mode in the child: {mismatches} mismatches"));
            }
            self.count_open(&cache);
        }
        Ok(Record { class: answer.class, compared: format!("{read} changes={changes}"), detail: String::new() })
    }
}
