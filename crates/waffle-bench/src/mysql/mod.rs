//! MySQL/MariaDB: the same cache under an unmodified server, through
//! `libwaffle_preload.so` (crates/waffle-preload).
//!
//! - [`bench`]: `waffle bench mysql`: the real sysbench against stock, waffle
//!   and stock with twice the memory, on throwaway servers
//!   (`waffle_testkit::mariadb`, which the tests use too).
//! - [`stats`]: `waffle stats FILE`: the preload's stats file (or any
//!   `waffle_stats` JSON) for people; [`prometheus`]: the same figures for
//!   Prometheus (`--format prometheus`).

pub mod bench;
pub mod prometheus;
pub mod stats;
