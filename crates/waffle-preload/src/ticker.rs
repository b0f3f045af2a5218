//! The ticker: what runs on its own once the runtime started. One thread
//! that, every stats interval, polls the off switch, writes the stats file,
//! then (while on) answers a warm request and keeps the hot list; and the
//! last stats write at exit. A runtime that cannot start has the ticker too,
//! which only rewrites the stats file (saying why it is disabled).
//!
//! The top of the preload's one-way order: the ticker calls the runtime, the
//! warm, the hot list and the stats file; none of them calls it.

use std::sync::Once;
use std::time::Duration;

use crate::runtime::{self, Runtime};
use crate::settings;
use crate::{guard, hot_list, log, state, stats_file, warm};

static TICKER: Once = Once::new();

/// Starts the runtime at the first tracked open (`first_fd`), and with it
/// the ticker. None if it could not start (the preload is then off).
pub fn get_or_start(first_fd: i32) -> Option<&'static Runtime> {
    let rt = runtime::get_or_start(first_fd);
    TICKER.call_once(|| begin(rt.is_some()));
    rt
}

/// The preload turned itself off before its cache started (native AIO):
/// the stats file says so now, and is rewritten on its interval.
pub fn disabled_before_start() {
    let mut began = false;
    TICKER.call_once(|| {
        began = true;
        begin(false);
    });
    if !began {
        stats_file::write_stats(false);
    }
}

fn begin(has_runtime: bool) {
    stats_file::mark_started();
    if !has_runtime {
        stats_file::write_stats(false); // disabled: there at once, with the reason
    }
    // Disabled too: a file rewritten on its interval says "disabled" while the server runs,
    // where one written once would read as stale (issue 32 item 2).
    start();
    // SAFETY: registering a plain extern "C" function.
    unsafe {
        libc::atexit(stats_file::at_exit);
    }
}

fn start() {
    let interval = settings::stats_interval_ms();
    let spawned = std::thread::Builder::new().name("waffle-stats".into()).spawn(move || {
        guard::enter_forever();
        loop {
            std::thread::sleep(Duration::from_millis(interval));
            if state::get() == state::FORKED {
                return;
            }
            // The switch first: the stats written next show where it stands.
            if let Some(rt) = runtime::get() {
                let new_grid = || settings::make_grid(rt.config());
                let _ =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| rt.switch().poll(rt.cache(), &new_grid)));
            }
            let _ = std::panic::catch_unwind(|| stats_file::write_stats(false));
            // Off: a warm request waits, and the hot list keeps what it listed while on.
            if let Some(rt) = runtime::get().filter(|rt| !rt.switch().is_off()) {
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| warm::poll(rt)));
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| hot_list::tick(rt)));
            }
        }
    });
    if let Err(e) = spawned {
        log::error(&format!("cannot start the stats thread ({e}); no stats file"));
    }
}
