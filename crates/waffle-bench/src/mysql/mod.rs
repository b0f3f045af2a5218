//! MySQL/MariaDB: the same cache under an unmodified server, through
//! `libwaffle_preload.so` (crates/waffle-preload).
//!
//! - [`bench`]: `waffle bench mysql`: the real sysbench against stock, waffle
//!   and stock with twice the memory, on throwaway servers
//!   (`waffle_testkit::mariadb`, which the tests use too).
//! - [`waffle_delta`]: what waffle did during one measured run (two stats snapshots' difference).

pub mod bench;
pub mod waffle_delta;
