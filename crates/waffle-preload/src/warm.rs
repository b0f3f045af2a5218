//! Warming tablespaces on request (`waffle warm --mysql`): a control file.
//!
//! The request is a file, `waffle-warm.request`, beside the stats file
//! (`WAFFLE_STATS_FILE`, default `<datadir>/waffle-stats.json`): a first line
//! `id=TOKEN`, then the tablespaces to warm, one name (or `WAFFLE_TABLES`
//! pattern: `shop/*`, `*`) a line, as the stats file names them. The stats
//! thread looks for it at every tick, takes it (deletes it) and starts the
//! warm; progress shows in the stats file under "warm", whose target names the
//! request's id. A file rather than a signal: a signal carries no names,
//! mariadbd installs its own handlers (a preload's handler would fight
//! them), and the stats thread that writes the progress already ticks.
//!
//! Each tablespace that is open and cached is held (its segment cannot be
//! reused while the warm reads) and read in large reads (waffle_core::warm)
//! through the server's own descriptors, lent for one read at a time
//! (`Runtime::lend`): never a descriptor of the warm's own, whose close would
//! drop every POSIX lock the server holds on the file. Nothing else is needed for
//! safety: every server write of a tablespace page passes the hooks, which
//! bump the page's version after the write reached the file, and a warmed
//! page is installed only if its version did not move since before the read.

use std::fs;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use waffle_core::backing::Backing;
use waffle_core::versions::join;
use waffle_core::warm::{Budget, Finish, PUSH_WAIT};
use waffle_emulation::OnDevice;

use crate::filter::Filter;
use crate::runtime::{LentFiles, Pinned, Runtime};
use crate::{guard, log, state};

pub const REQUEST_FILE: &str = "waffle-warm.request";
/// Reads between looks at whether the preload is still on.
const PIECE_TIME: Duration = Duration::from_millis(100);
/// Names one request may carry.
const MAX_NAMES: usize = 1000;

/// The stats thread's tick: takes a request, if there is one, and starts its warm.
pub fn poll(rt: &'static Runtime) {
    let path = rt.stats_path.with_file_name(REQUEST_FILE);
    let Ok(text) = fs::read_to_string(&path) else { return };
    let _ = fs::remove_file(&path);
    let mut id = String::from("-");
    let mut names = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()).take(MAX_NAMES) {
        match line.strip_prefix("id=") {
            Some(v) => id = v.to_string(),
            None => names.push(line.to_string()),
        }
    }
    if names.is_empty() {
        names.push("*".into());
    }
    let target = format!("request {id}: {}", names.join(","));
    if let Err(e) = rt.cache.warm_progress().begin(&target) {
        log::note(&format!("warm {target} refused: {e}"));
        return;
    }
    let spawned = std::thread::Builder::new().name("waffle-warm".into()).spawn(move || {
        guard::enter_forever();
        let filter = Filter::parse(&names.join(","));
        let how = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(rt, &filter))) {
            Ok(Ok(())) => Finish::Done,
            Ok(Err(e)) if e == "stopped" => Finish::Cancelled,
            Ok(Err(e)) => Finish::Failed(e),
            Err(_) => Finish::Failed("internal error".into()),
        };
        rt.cache.warm_progress().finish(how);
    });
    if let Err(e) = spawned {
        rt.cache.warm_progress().finish(Finish::Failed(format!("cannot start the warm thread: {e}")));
    }
}

fn run(rt: &Runtime, which: &Filter) -> Result<(), String> {
    let pinned = rt.pin_cached(which);
    if pinned.is_empty() {
        return Err("no open, cached tablespace matches".into());
    }
    let result = pinned.iter().try_for_each(|p| warm_one(rt, p));
    for p in pinned {
        rt.unpin(p);
    }
    result
}

fn warm_one(rt: &Runtime, p: &Pinned) -> Result<(), String> {
    let what = |e: std::io::Error| format!("{}: {e}", p.name);
    let Some(file_bytes) = rt.lend(p.segment).map(|l| l.file_bytes) else {
        rt.counters.closed_file_skips.incr();
        log::note(&format!("warm: the server closed {} meanwhile; skipped", p.name));
        return Ok(());
    };
    let file = LentFiles { rt };
    let pages = file_bytes / rt.page_bytes;
    let progress = rt.cache.warm_progress();
    progress.plan(pages);
    let stop = AtomicBool::new(false);
    let first = join(p.segment as u64, 0);
    let mut done = 0;
    while done < pages {
        if !state::active() {
            return Err("stopped".into());
        }
        let mut budget =
            Budget { bytes: u64::MAX, deadline: Instant::now() + PIECE_TIME, cancel: &stop, push_wait: PUSH_WAIT };
        let read =
            |f: &dyn Backing, budget: &mut Budget<'_>| rt.cache.warm_run(first + done, pages - done, f, budget, None);
        let n = match rt.device() {
            Some(device) => read(&OnDevice { device, file: &file }, &mut budget),
            None => read(&file, &mut budget),
        }
        .map_err(what)?;
        done += n;
    }
    Ok(())
}
