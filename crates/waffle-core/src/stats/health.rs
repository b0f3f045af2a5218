//! What a stats file's reader shows: the truth about its writer, not only
//! what the writer last said (issue 32 item 2). A writer says `running`,
//! `off`, `disabled` or `stopped` (its last write); only a reader can see
//! that it died without a last write (`crashed`: its pid is gone, or another
//! process has it now) or stopped writing while it lives (`stale`). Both
//! adapters, `waffle stats` and its Prometheus metrics use this one judgement.

use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use super::adapter_snapshot::Stamp;

/// A writer that missed this many of its own intervals is stale...
pub const STALE_INTERVALS: u64 = 5;
/// ...but never sooner than this (a loaded machine delays a 10 ms writer by more than 50 ms).
pub const STALE_FLOOR_MS: u64 = 5000;
/// The interval of a file that does not say (format_version 1): both adapters' default.
const DEFAULT_INTERVAL_MS: u64 = 1000;

/// The states a reader shows, one vocabulary for both adapters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Its process lives and rewrites the file; the cache works.
    Running,
    /// The preload's off switch (the operator's): the process lives, the cache is off.
    Off,
    /// Waffle turned itself off in a live process (`disabled_reason` says why).
    Disabled,
    /// The last write of a clean end: the database closed, the server exited.
    Stopped,
    /// No last write, and its process is gone (or its pid is another process's now).
    Crashed,
    /// Its process lives (or cannot be checked from here) but has not rewritten the file lately.
    Stale,
}

impl State {
    pub const ALL: [State; 6] =
        [State::Running, State::Off, State::Disabled, State::Stopped, State::Crashed, State::Stale];

    pub fn name(self) -> &'static str {
        match self {
            State::Running => "running",
            State::Off => "off",
            State::Disabled => "disabled",
            State::Stopped => "stopped",
            State::Crashed => "crashed",
            State::Stale => "stale",
        }
    }

    /// Whether the writer's process runs and keeps the file current (Prometheus' `waffle_up`).
    pub fn is_up(self) -> bool {
        matches!(self, State::Running | State::Off | State::Disabled)
    }
}

/// A reader's judgement of one stats file: its state and why, in words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Health {
    pub state: State,
    pub why: String,
}

fn health(state: State, why: impl Into<String>) -> Health {
    Health { state, why: why.into() }
}

/// How long a writer of `interval_ms` may go without a write before it is stale.
pub fn stale_after_ms(interval_ms: Option<u64>) -> u64 {
    (interval_ms.unwrap_or(DEFAULT_INTERVAL_MS) * STALE_INTERVALS).max(STALE_FLOOR_MS)
}

/// Judges the writer of `stamp` now.
pub fn judge_now(stamp: &Stamp) -> Health {
    judge(stamp, now_unix_ms())
}

pub fn now_unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// Judges the writer of `stamp` at `now_ms`: its last write first (a clean
/// end is stopped, whatever became of the process), then its process, then
/// how long ago it wrote, then what it said.
pub fn judge(stamp: &Stamp, now_ms: u64) -> Health {
    let said = stamp.state.as_deref().unwrap_or("running");
    if stamp.final_write == Some(true) || matches!(said, "stopped" | "closed") {
        return health(State::Stopped, "its last write: the database was closed or the server exited");
    }
    let unchecked = match process(stamp) {
        Process::Gone(why) => return health(State::Crashed, format!("{why}, and it left no last write")),
        Process::Alive => None,
        Process::Unknown(why) => Some(why),
    };
    let Some(written_ms) = stamp.updated_unix_ms else {
        return health(State::Stale, "it does not say when it was written");
    };
    let age_ms = now_ms.saturating_sub(written_ms);
    let limit_ms = stale_after_ms(stamp.interval_ms);
    if age_ms > limit_ms {
        let process = unchecked.map_or_else(|| "its process lives".to_string(), |why| format!("({why})"));
        let why = format!(
            "not rewritten for {:.1} s, more than {:.1} s ({STALE_INTERVALS} of its {} ms intervals); {process}",
            age_ms as f64 / 1000.0,
            limit_ms as f64 / 1000.0,
            stamp.interval_ms.unwrap_or(DEFAULT_INTERVAL_MS)
        );
        return health(State::Stale, why);
    }
    let checked = unchecked.map_or_else(String::new, |why| format!(" ({why}; judged by its age)"));
    match said {
        "running" | "active" => health(State::Running, format!("rewritten on time{checked}")),
        "off" => health(State::Off, format!("turned off by its control file{checked}")),
        "disabled" => {
            let reason = stamp.disabled_reason.as_deref().unwrap_or("no reason given");
            health(State::Disabled, format!("{reason}{checked}"))
        }
        other => health(State::Disabled, format!("it says state '{other}', which this waffle does not know")),
    }
}

/// What the reader can see of the writer's process.
enum Process {
    Alive,
    Gone(String),
    Unknown(String),
}

fn process(stamp: &Stamp) -> Process {
    let Some(pid) = stamp.pid else {
        return Process::Unknown("it names no pid".into());
    };
    let me = own();
    if let (Some(theirs), Some(mine)) = (&stamp.boot_id, &me.boot_id) {
        if theirs != mine {
            return Process::Gone(format!("pid {pid} ran before this machine last booted"));
        }
    }
    if let (Some(theirs), Some(mine)) = (&stamp.pid_namespace, &me.pid_namespace) {
        if theirs != mine {
            return Process::Unknown(format!(
                "pid {pid} is in another PID namespace ({theirs}), not checked from here"
            ));
        }
    }
    match read_stat(&format!("/proc/{pid}/stat")) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Process::Gone(format!("pid {pid} is gone")),
        Err(e) => Process::Unknown(format!("pid {pid} cannot be checked: {e}")),
        Ok(stat) if matches!(stat.state, 'Z' | 'X') => Process::Gone(format!("pid {pid} has exited")),
        Ok(stat) => match stamp.pid_start_ticks {
            Some(start) if Some(start) != stat.start_ticks => {
                Process::Gone(format!("pid {pid} is gone (another process has its pid now)"))
            }
            _ => Process::Alive,
        },
    }
}

/// This process's identity, as a writer stamps it and a reader compares it.
#[derive(Clone, Debug, Default)]
pub struct Identity {
    pub start_ticks: Option<u64>,
    pub pid_namespace: Option<String>,
    pub boot_id: Option<String>,
}

/// This process's [`Identity`] (read once: none of it changes while it runs, a fork aside:
/// a forked child's start time differs, so it reads its own).
pub fn own() -> Identity {
    static OWN: OnceLock<(u32, Identity)> = OnceLock::new();
    let (pid, id) = OWN.get_or_init(|| (std::process::id(), read_own()));
    if *pid == std::process::id() {
        id.clone()
    } else {
        read_own()
    }
}

fn read_own() -> Identity {
    Identity {
        start_ticks: read_stat("/proc/self/stat").ok().and_then(|s| s.start_ticks),
        pid_namespace: std::fs::read_link("/proc/self/ns/pid").ok().map(|l| l.display().to_string()),
        boot_id: std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok().map(|b| b.trim().to_string()),
    }
}

struct Stat {
    state: char,
    start_ticks: Option<u64>,
}

/// A `/proc/PID/stat`'s state (field 3) and start time (field 22). The
/// command (field 2) may hold spaces and parentheses: the fields after it
/// start after its last `)`.
fn read_stat(path: &str) -> std::io::Result<Stat> {
    let text = std::fs::read_to_string(path)?;
    let after = text.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    Ok(Stat {
        state: fields.first().and_then(|s| s.chars().next()).unwrap_or('?'),
        start_ticks: fields.get(22 - 3).and_then(|t| t.parse().ok()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stamp of this (live) process, written at `updated_ms`.
    fn mine(updated_ms: u64) -> Stamp {
        let me = own();
        Stamp {
            pid: Some(std::process::id()),
            pid_start_ticks: me.start_ticks,
            pid_namespace: me.pid_namespace,
            boot_id: me.boot_id,
            updated_unix_ms: Some(updated_ms),
            interval_ms: Some(1000),
            state: Some("running".into()),
            final_write: Some(false),
            ..Stamp::default()
        }
    }

    /// The pid of a child that has exited and been reaped (waffle-testkit's
    /// `process::exited_pid`, which this product crate does not depend on).
    fn dead_pid() -> u32 {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        pid
    }

    #[test]
    fn this_process_has_a_start_time() {
        assert!(own().start_ticks.is_some_and(|t| t > 0), "{:?}", own());
    }

    #[test]
    fn a_live_writer_on_time_runs_and_late_is_stale() {
        let now = now_unix_ms();
        assert_eq!(judge(&mine(now - 500), now).state, State::Running);
        let late = judge(&mine(now - 5001), now);
        assert_eq!(late.state, State::Stale, "{late:?}");
        assert!(late.why.contains("not rewritten for 5.0 s") && late.why.contains("its process lives"), "{late:?}");
        // Its own interval counts: 5 of 10 s.
        let slow = Stamp { interval_ms: Some(10_000), ..mine(now - 20_000) };
        assert_eq!(judge(&slow, now).state, State::Running);
        assert_eq!(judge(&Stamp { updated_unix_ms: None, ..mine(now) }, now).state, State::Stale);
    }

    #[test]
    fn a_gone_pid_without_a_last_write_crashed_and_with_one_stopped() {
        let now = now_unix_ms();
        let gone = Stamp { pid: Some(dead_pid()), ..mine(now) };
        let h = judge(&gone, now);
        assert_eq!(h.state, State::Crashed, "{h:?}");
        assert!(h.why.contains("is gone"), "{h:?}");
        let clean = Stamp { final_write: Some(true), state: Some("stopped".into()), ..gone.clone() };
        assert_eq!(judge(&clean, now).state, State::Stopped);
        // Format 1: the preload's clean exit said active with final; SQLite's said closed.
        let v1 = Stamp { final_write: Some(true), state: Some("active".into()), ..gone };
        assert_eq!(judge(&v1, now).state, State::Stopped);
    }

    #[test]
    fn a_pid_another_process_has_now_crashed() {
        let now = now_unix_ms();
        let reused = Stamp { pid_start_ticks: own().start_ticks.map(|t| t + 1), ..mine(now) };
        let h = judge(&reused, now);
        assert_eq!(h.state, State::Crashed, "{h:?}");
        assert!(h.why.contains("another process has its pid"), "{h:?}");
        let rebooted = Stamp { boot_id: Some("another boot".into()), ..mine(now) };
        assert_eq!(judge(&rebooted, now).state, State::Crashed);
    }

    #[test]
    fn another_namespace_is_judged_by_age_alone() {
        let now = now_unix_ms();
        let there = Stamp { pid_namespace: Some("pid:[1]".into()), pid: Some(dead_pid()), ..mine(now) };
        let h = judge(&there, now);
        assert_eq!(h.state, State::Running, "{h:?}");
        assert!(h.why.contains("another PID namespace"), "{h:?}");
        assert_eq!(judge(&there, now + 6000).state, State::Stale);
    }

    #[test]
    fn off_and_disabled_are_said_with_why_while_the_process_lives() {
        let now = now_unix_ms();
        let off = Stamp { state: Some("off".into()), ..mine(now) };
        assert_eq!(judge(&off, now).state, State::Off);
        let disabled =
            Stamp { state: Some("disabled".into()), disabled_reason: Some("native AIO".into()), ..mine(now) };
        assert_eq!(judge(&disabled, now), health(State::Disabled, "native AIO"));
        assert!(State::Disabled.is_up() && !State::Crashed.is_up() && !State::Stale.is_up());
    }
}
