//! The `waffle` command's pieces, usable from tests.
//!
//! - [`demo`]: two local memcached nodes, one database several times larger
//!   than L1, the same read workload with the grid off and on.
//! - [`dataset`]: builds (or reuses) a benchmark database with progress.
//! - [`open`]: opening SQLite connections through the `waffle` VFS.

pub mod dataset;
pub mod demo;
pub mod open;
