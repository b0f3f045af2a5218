//! MySQL/MariaDB: the same cache under an unmodified server, through
//! `libwaffle_preload.so` (crates/waffle-preload).
//!
//! - [`server`]: throwaway MariaDB servers (own datadir, socket, loopback
//!   port; always killed), the mariadb client, sysbench. Used by the tests too.
//! - [`bench`]: `waffle bench mysql`: the real sysbench against stock, waffle
//!   and stock with twice the memory.
//! - [`stats`]: `waffle stats FILE`: the preload's stats file (or any
//!   `waffle_stats` JSON) for people.

pub mod bench;
pub mod server;
pub mod stats;
