//! The ticker: what runs on its own once the runtime started. One thread
//! that, every stats interval, polls the off switch, writes the stats file,
//! then (while on) answers a warm request and keeps the hot list; and the
//! last stats write at exit. A runtime that cannot start writes the stats
//! file once, saying why.
//!
//! The top of the preload's one-way order: the ticker calls the runtime, the
//! warm, the hot list and the stats file; none of them calls it.

use std::sync::Once;
use std::time::Duration;

use crate::runtime::{self, Runtime};
use crate::settings::{self, DEFAULT_STATS_INTERVAL_MS, STATS_INTERVAL_MS};
use crate::{guard, hot_list, log, state, stats_file, warm};

/// Starts the runtime at the first tracked open (`first_fd`), and with it
/// the ticker. None if it could not start (the preload is then off).
pub fn get_or_start(first_fd: i32) -> Option<&'static Runtime> {
    static TICKER: Once = Once::new();
    let rt = runtime::get_or_start(first_fd);
    TICKER.call_once(|| match rt {
        Some(_) => {
            start();
            // SAFETY: registering a plain extern "C" function.
            unsafe {
                libc::atexit(stats_file::at_exit);
            }
        }
        None => stats_file::write_disabled_stats(),
    });
    rt
}

fn start() {
    let interval = settings::env("WAFFLE_STATS_INTERVAL_MS")
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|ms| STATS_INTERVAL_MS.contains(ms))
        .unwrap_or(DEFAULT_STATS_INTERVAL_MS);
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
