//! The explorer of interleavings (issue 19): seeded schedules of steps by several processes, each
//! holding a few connections (waffle and plain, each on a thread of its own) to one database,
//! plus `sqlite3` shells, kill -9s, files renamed over the database, node flushes and restarts;
//! each schedule run twice, through waffle and as a control with every connection plain, one
//! step at a time.
//!
//! Checks: every read equals a model of committed rows (nothing lost, nothing resurrected, row
//! values compared, not only counts); every step's outcome (ok, busy, error code, rows, a
//! checkpoint's result) equals the control's; verify mode (when the build has it) counts no
//! mismatch and logs none; integrity_check and the final file equal the model in both runs.
//!
//! The parts: [`schedule`] (drawn from a seed), [`protocol`] (worker commands and answers, the
//! row format), [`worker`] (the `explorer-worker` child), [`procs`] (the driver's handle on it),
//! [`model`], [`driver`] (one run), `outside` (the driver's own steps), [`tally`].

pub mod driver;
mod forks;
pub mod model;
pub mod moves;
mod outside;
pub mod procs;
pub mod protocol;
mod recovery;
pub mod schedule;
mod scratch;
mod settings;
pub mod tally;
pub mod worker;
mod worker_moves;
mod worker_sql;

use std::sync::OnceLock;

use driver::{Outcome, Record};
use schedule::Schedule;
pub use schedule::{Move, Moves};
use tally::Tally;

pub use protocol::BUSY_TIMEOUT_MS;

/// Steps of a schedule unless `WAFFLE_EXPLORE_STEPS` says otherwise.
pub const DEFAULT_STEPS: usize = 400;

pub fn steps_from_env() -> usize {
    std::env::var("WAFFLE_EXPLORE_STEPS").ok().and_then(|s| s.trim().parse().ok()).unwrap_or(DEFAULT_STEPS)
}

/// The command that replays `seed`.
pub fn replay_command(seed: u64, steps: usize) -> String {
    format!(
        "WAFFLE_EXPLORE_SEED={seed} WAFFLE_EXPLORE_STEPS={steps} \
         cargo test --release -p waffle-e2e --test explorer -- --exact replay --nocapture"
    )
}

/// Whether this build's waffle takes `waffle_verify=on` (an unknown `waffle_` parameter is
/// refused, so it is asked once, on a scratch database).
pub fn verify_supported() -> bool {
    static SUPPORTED: OnceLock<bool> = OnceLock::new();
    *SUPPORTED.get_or_init(|| {
        let dir = crate::temp_dir::TempDir::new("explore-verify-probe");
        crate::db::try_open_waffle(&dir.join("probe.db"), &[("waffle_verify", "on")]).is_ok()
    })
}

/// Runs the schedule of `seed` through waffle and as the control; Err says what differed, with
/// the seed and the command that replays it.
pub fn explore(seed: u64, steps: usize) -> Result<Tally, String> {
    explore_moves(seed, steps, Moves::All)
}

/// As [`explore`] with the moves given: `Moves::Classic` for the seeds found before the opener's
/// moves existed (their schedules unchanged), `Moves::Focus` for a move's own test.
pub fn explore_moves(seed: u64, steps: usize, moves: Moves) -> Result<Tally, String> {
    let mut schedule = Schedule::generate(seed, steps, moves);
    let verify = verify_supported();
    schedule.verify = verify;
    println!("explorer: {}; verify mode {}", schedule.describe(), if verify { "on" } else { "absent in this build" });
    let waffle = driver::run(&schedule, true, verify);
    let control = driver::run(&schedule, false, false);
    match verdict(&schedule, &waffle, &control) {
        None => {
            println!("explorer: seed {seed} ok: {}", waffle.tally);
            Ok(waffle.tally)
        }
        Some(why) => Err(format!(
            "explorer: seed {seed} FAILED: {why}\n  schedule: {}\n  replay: {}",
            schedule.describe(),
            replay_command(seed, steps)
        )),
    }
}

/// The first failure: the waffle run's, a difference from the control, or the control's own (the
/// explorer or its model is wrong then, not waffle).
fn verdict(schedule: &Schedule, waffle: &Outcome, control: &Outcome) -> Option<String> {
    let failed_at = |o: &Outcome| o.failure.as_ref().map(|(at, _)| at.unwrap_or(schedule.steps.len()));
    let differs = first_divergence(&waffle.trace, &control.trace);
    let limit = [failed_at(waffle), failed_at(control), differs].into_iter().flatten().min()?;
    let context = context(schedule, waffle, control, limit);
    if differs == Some(limit) && failed_at(waffle) != Some(limit) {
        let (a, b) = (&waffle.trace[limit], &control.trace[limit]);
        return Some(format!(
            "step {limit} ({}): waffle gave {} {:?} {:?}, the control {} {:?} {:?}\n{context}",
            schedule.steps[limit],
            a.class,
            cut(&a.compared),
            a.detail,
            b.class,
            cut(&b.compared),
            b.detail
        ));
    }
    if let Some((at, why)) = waffle.failure.as_ref().filter(|_| failed_at(waffle) == Some(limit)) {
        let control_note = match failed_at(control) {
            Some(c) if c <= limit => "the control failed there too: suspect the explorer's model",
            _ => "the control passed it",
        };
        return Some(format!("{} in the waffle run: {why} ({control_note})\n{context}", where_(schedule, *at)));
    }
    let (at, why) = control.failure.as_ref().unwrap();
    Some(format!(
        "{} in the CONTROL run (no waffle anywhere): {why}; the explorer or its model is wrong\n{context}",
        where_(schedule, *at)
    ))
}

fn where_(schedule: &Schedule, at: Option<usize>) -> String {
    match at {
        Some(i) => format!("step {i} ({})", schedule.steps[i]),
        None => "at the end".into(),
    }
}

fn first_divergence(a: &[Record], b: &[Record]) -> Option<usize> {
    a.iter().zip(b).position(|(x, y)| !x.same(y))
}

/// The steps before `at` (12, or `WAFFLE_EXPLORE_CONTEXT`), with both runs' outcomes.
fn context(schedule: &Schedule, waffle: &Outcome, control: &Outcome, at: usize) -> String {
    let shown = std::env::var("WAFFLE_EXPLORE_CONTEXT").ok().and_then(|s| s.trim().parse().ok()).unwrap_or(12);
    let from = at.saturating_sub(shown);
    // A short result (a journal mode, a checkpoint's counts) is shown beside the outcome.
    let class = |o: &Outcome, i: usize| {
        o.trace.get(i).map_or("-".to_string(), |r| match r.compared.len() {
            1..=24 if !r.compared.contains('|') => format!("{} {}", r.class, r.compared),
            _ => r.class.clone(),
        })
    };
    let lines: Vec<String> = (from..at.min(schedule.steps.len()))
        .map(|i| {
            format!(
                "    {i:>4} {:<60} waffle {:<16} control {}",
                schedule.steps[i].to_string(),
                class(waffle, i),
                class(control, i)
            )
        })
        .collect();
    format!("  the steps before it:\n{}", lines.join("\n"))
}

fn cut(s: &str) -> String {
    if s.len() > 300 {
        format!("{}... ({} bytes)", &s[..300], s.len())
    } else {
        s.to_string()
    }
}
