//! Waffle's core: a remote buffer cache for database pages, shared by every
//! database adapter (SQLite VFS, MySQL/MariaDB preload).
//!
//! How the data flows, for one database file ([`cache::PageCache`]):
//!
//! ```text
//!  adapter read(page) ──> L1 pool (pool) ──hit──> bytes
//!                           │ miss
//!                           ├──> push queue (pusher): evicted, not yet sent ──> bytes
//!                           ├──> L2 grid (grid): `mg key v T-1`, envelope checked
//!                           │      against versions ──> bytes (into L1)
//!                           └──> backing file (backing), O_DIRECT ──> bytes (into L1)
//!
//!  adapter write(page): the file first (adapter's own handle), then
//!    versions.bump(page) (every older grid copy is now rejected) and L1 takes the bytes.
//!
//!  L1 eviction ──> pusher (bounded queue, drops oldest) ──> grid, pipelined `ms ... q`
//! ```
//!
//! The disk is the only source of truth. A grid value is served only when its
//! envelope names this cache incarnation, this page and the version the file
//! holds; any fault of the grid is a miss. The sidecar file makes a crash
//! start the next open cold and lets a clean close start it warm.

pub mod backing;
pub mod cache;
pub mod config;
pub mod emulation;
pub mod envelope;
pub mod grid;
pub mod pool;
pub mod pusher;
pub mod seal;
pub mod sidecar;
pub mod stats;
pub mod versions;

pub use cache::{CacheOptions, CloseReport, PageCache, Source};
pub use config::{Config, ConfigError};

/// A random 64-bit identity for a new cache incarnation.
pub fn random_cache_id() -> u64 {
    let mut b = [0u8; 8];
    getrandom::getrandom(&mut b).expect("the OS random source works");
    u64::from_le_bytes(b)
}
