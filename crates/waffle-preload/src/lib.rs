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
//! Modules: `hooks` (the interposed functions), `real` (the functions behind
//! them), `guard` (re-entry), `state` (which process, still caching?),
//! `fds` (descriptor table), `runtime` (the cache, segments, stats file),
//! `innodb` (file names, page checks), `filter` (`WAFFLE_TABLES`), `warm` (warming
//! tablespaces on request: `waffle warm --mysql`), `hot_list` (the pages L1
//! held, written every 30 s and preloaded from disk at the next start),
//! `off_switch` (`waffle-off` beside the stats file: off without a restart).

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
