//! The benchmarks behind the `waffle` command (a tool, never a dependency of the product): they
//! measure Waffle against the seeds' claims on real SQLite and MariaDB, on this machine's disk or
//! on EMULATED devices and links. `crates/waffle-cli` parses the flags and calls in here.
//!
//! Data flows one way. A dataset is built once and reused while its parameters match
//! ([`dataset`], [`bench::dataset`]); the configurations to compare are planned from a memory
//! budget ([`bench::configs`]: `local`, `grid`, `all-local`, `stock`); the runner starts the
//! memcached nodes of each configuration, opens connections through the `waffle` VFS ([`open`])
//! and drives a workload ([`bench::oltp`], [`bench::tpcc`], [`bench::scan`]) through a warm-up
//! and a measured period ([`bench::runner`]); the results become a table on stdout, a JSON report
//! and PNG charts ([`bench::report`], [`bench::chart`]).
//!
//! - [`args`]: the flags several commands share, and the parsers of flag values.
//! - [`demo`]: `waffle demo`: two local memcached nodes, one database several times larger
//!   than L1, the same read workload with the grid off and on.
//! - [`bench`]: `waffle bench` and `waffle bench sweep`, the seeds' experiments.
//! - [`probe`]: `waffle probe`, latency against concurrency for disk and grid.
//! - [`mysql`]: `waffle bench mysql` (MariaDB under the preload, real sysbench; the servers are
//!   `waffle_testkit::mariadb`'s) and the text `waffle stats` prints for people.
//!
//! A `+warm` configuration (SQLite or MariaDB) asks for its warm through waffle-warm-client,
//! as the operator's `waffle warm` (crates/waffle-cli) does.

pub mod args;
pub mod bench;
pub mod capacity;
pub mod dataset;
pub mod demo;
pub mod mysql;
pub mod open;
pub mod probe;
