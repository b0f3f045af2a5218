//! The asking side of a warm, a tool (the product never depends on it): what
//! `waffle warm` (crates/waffle-cli), the benchmarks' `+warm` configurations
//! (waffle-bench) and the tests share. The warm itself runs inside the
//! product (`PRAGMA waffle_warm` in libwaffle.so, the preload's control file
//! in libwaffle_preload.so); this crate starts one, watches it and reports.
//!
//! Data flows one way: a request goes in, the warm's `"warm"` stats object
//! comes back until it says done.
//!
//! ```text
//!  sqlite::warm ──PRAGMA waffle_warm──> the connection ──PRAGMA waffle_stats──┐
//!  mysql::warm ──waffle-warm.request──> the server ──waffle-stats.json───────┤
//!                                                                           v
//!                            follow::Follow (progress, stall, the warm's error) ──> Warmed
//! ```
//!
//! - [`warmed`]: [`Warmed`], what one warm stored and what it did not, and why, in words.
//! - [`follow`]: follows a `"warm"` stats object to its end, telling a display how far it is.
//! - [`sqlite`]: a warm on a connection through the `waffle` VFS.
//! - [`mysql`]: a warm of a server under the preload, through its control file and stats file.
//!
//! A report counts what was stored, never what was tried: pages in L1, pages
//! the grid acknowledged (`pushed_pages`; the warm waits for its pushes
//! before it is done), and apart from them what was not stored and why.

pub mod follow;
pub mod mysql;
pub mod sqlite;
pub mod warmed;

pub use follow::{Seen, Show};
pub use warmed::Warmed;
