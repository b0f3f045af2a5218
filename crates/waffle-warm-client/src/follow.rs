//! Following a warm to its end: the `"warm"` stats object is read again and
//! again ([`POLL`]) until it says done, failed, or shows no progress for
//! [`STALL`]; a display (a progress bar, the asker's) is told how far it is
//! at each look. Uses [`crate::warmed`] only.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::warmed::Warmed;

/// How often the progress is read.
pub(crate) const POLL: Duration = Duration::from_millis(100);
/// A warm that shows no progress for this long is given up on (the PRAGMA's own lock wait is 30 s).
const STALL: Duration = Duration::from_secs(120);

/// How far a running warm is, at one look.
pub struct Seen<'a> {
    /// What is warmed, as the warm says it (the PRAGMA's answer, the preload's target).
    pub what: &'a str,
    /// Pages placed or passed over so far: in L1, queued for the grid, already there, dropped.
    pub done_pages: u64,
    /// Pages the warm means to read (0 until it knows).
    pub planned_pages: u64,
}

/// A display of the progress, told at each look; None: nothing is shown.
pub type Show<'a> = Option<&'a dyn Fn(&Seen<'_>)>;

/// One warm followed: when its progress last moved.
pub(crate) struct Follow {
    last_done: u64,
    last_change: Instant,
}

impl Follow {
    pub(crate) fn new() -> Follow {
        Follow { last_done: u64::MAX, last_change: Instant::now() }
    }

    /// One look at `w`, the warm's stats object: Some(result) once it is done
    /// (`elapsed_s` is the time the result reports), its own error if it
    /// ended otherwise, an error after [`STALL`] without progress.
    pub(crate) fn step(
        &mut self,
        w: &Value,
        what: &str,
        show: Show<'_>,
        elapsed_s: f64,
    ) -> Result<Option<Warmed>, String> {
        let g = |k: &str| w[k].as_u64().unwrap_or(0);
        let done = g("l1_pages") + g("queued_pages") + g("skipped_pages") + g("dropped_pages");
        if let Some(show) = show {
            show(&Seen { what, done_pages: done, planned_pages: g("planned_pages") });
        }
        match w["state"].as_str() {
            Some("running") => {}
            Some("done") => return Ok(Some(Warmed::from_json(w, elapsed_s))),
            other => {
                return Err(format!(
                    "the warm ended {}: {}",
                    other.unwrap_or("?"),
                    w["error"].as_str().unwrap_or("no reason given")
                ))
            }
        }
        if done != self.last_done {
            (self.last_done, self.last_change) = (done, Instant::now());
        } else if self.last_change.elapsed() > STALL {
            return Err(format!("the warm made no progress for {STALL:?}"));
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::cell::Cell;

    #[test]
    fn a_running_warm_is_shown_and_a_done_one_is_its_result() {
        let shown = Cell::new((0, 0));
        let show: &dyn Fn(&Seen<'_>) = &|s| shown.set((s.done_pages, s.planned_pages));
        let mut f = Follow::new();
        let running = json!({"state": "running", "planned_pages": 10, "l1_pages": 2, "queued_pages": 3});
        assert!(f.step(&running, "t", Some(show), 0.1).unwrap().is_none());
        assert_eq!(shown.get(), (5, 10));
        let done = json!({"state": "done", "target": "t", "planned_pages": 10, "l1_pages": 4, "queued_pages": 6,
                          "pushed_pages": 6, "elapsed_ms": 1500});
        let w = f.step(&done, "t", None, 2.0).unwrap().expect("done");
        assert_eq!((w.l1_pages, w.pushed_pages, w.seconds, w.warm_seconds), (4, 6, 2.0, 1.5));
    }

    #[test]
    fn a_failed_warm_is_its_own_error() {
        let failed = json!({"state": "failed", "error": "no such table: nope"});
        let e = Follow::new().step(&failed, "nope", None, 0.0).unwrap_err();
        assert_eq!(e, "the warm ended failed: no such table: nope");
    }
}
