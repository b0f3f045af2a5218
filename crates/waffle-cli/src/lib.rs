//! The `waffle` command's pieces, usable from tests.
//!
//! - [`demo`]: two local memcached nodes, one database several times larger
//!   than L1, the same read workload with the grid off and on.
//! - [`dataset`]: builds (or reuses) a benchmark database with progress.
//! - [`open`]: opening SQLite connections through the `waffle` VFS.
//! - [`bench`]: `waffle bench` and `waffle bench sweep`, the seeds' experiments.
//! - [`probe`]: `waffle probe`, latency against concurrency for disk and grid.
//! - [`mysql`]: `waffle bench mysql` (MariaDB under the preload, real sysbench) and `waffle stats`.

pub mod bench;
pub mod dataset;
pub mod demo;
pub mod mysql;
pub mod open;
pub mod probe;
