//! `libwaffle_preload.so`: Waffle under an unmodified MariaDB/MySQL server.
//!
//! ```sh
//! LD_PRELOAD=target/release/libwaffle_preload.so WAFFLE_GRID=10.0.0.2:11211,10.0.0.3:11211 WAFFLE_LOCAL=1GiB \
//!   mariadbd --innodb-use-native-aio=0 --innodb-flush-method=O_DIRECT --innodb-buffer-pool-size=256M ...
//! ```
//!
//! With native AIO off, InnoDB reads and writes its tablespace pages with
//! `pread64`/`pwrite64` on O_DIRECT descriptors (checked with strace on
//! MariaDB 10.11). This library interposes those calls (and the opens,
//! closes, dups, truncations and hole punches around them) for InnoDB
//! tablespace files only (`*.ibd`, `ibdata*`, `undoNNN`) and sends whole-page
//! reads through one process-wide [`waffle_core::PageCache`]: L1, then the
//! memcached grid, then the file. Writes reach the file first, then the
//! cache. Redo logs, binlogs and every other file pass through untouched.
//!
//! Data flow: a hook (`hooks`) sees a call on a tracked descriptor (`fds`
//! maps it to its file's segment) and calls the runtime (`runtime`): a
//! whole-page `pread64` asks the cache, whose miss reads through the
//! server's own descriptor (`server_fd`); the real `pwrite64` first, then
//! the cache takes the page; every other change drops the pages it touches.
//! A grid copy reaches L1 only past the InnoDB page check (`innodb_check`).
//! The ticker's thread (`ticker`) polls the off switch, writes the stats
//! file, answers a warm request (`warm`) and keeps the hot list
//! (`hot_list`), which read through server descriptors lent by the segment
//! table (`segments`).
//!
//! The files, top to bottom, in their one-way order (a file uses files of
//! its own line or below, never one above; no circle: `scripts/check-layout`):
//!
//! - `hooks`: the interposed functions (left out of unit tests);
//! - `ticker`: starts with the runtime; the stats thread and the exit's
//!   last stats write;
//! - `warm` (`waffle warm --mysql`: a request file beside the stats file),
//!   `hot_list` (the pages L1 held, written every 30 s and preloaded from
//!   disk at the next start), `stats_file` (the stats file's JSON and write);
//! - `runtime`: the process-wide cache, its start, the read and write paths;
//! - `server_fd` (the cache's backings through the server's descriptors),
//!   `innodb_check` (the cache's check of grid copies): over the segments;
//! - `segments` (the segment table, pins and lent descriptors), `settings`
//!   (`WAFFLE_*` and the configuration file, the page size), `off_switch`
//!   (`waffle-off` beside the stats file: off without a restart), `beside`
//!   (files beside the data, made as SQLite makes its journals);
//! - the bottom: `fds` (descriptor table), `innodb` (file names, page
//!   checks), `filter` (`WAFFLE_TABLES`), `state` (which process, still
//!   caching?), `guard` (re-entry), `real` (the functions behind the hooks),
//!   `log`, `errno`.

// Every unsafe block says why it is sound (CI runs clippy with -D warnings).
#![warn(clippy::undocumented_unsafe_blocks)]
// Inside an unsafe fn, every unsafe operation still sits in its own `unsafe {}` block with its SAFETY reason.
#![warn(unsafe_op_in_unsafe_fn)]
// The hooks are left out of unit tests (they would interpose the test binary), so much looks unused there.
#![cfg_attr(test, allow(dead_code))]

mod beside;
mod errno;
mod fds;
mod filter;
mod guard;
#[cfg(not(test))]
mod hooks;
mod hot_list;
mod innodb;
mod innodb_check;
mod log;
mod off_switch;
mod real;
mod runtime;
mod segments;
mod server_fd;
mod settings;
mod state;
mod stats_file;
#[cfg(not(test))]
mod ticker;
mod warm;
