//! Waffle's core: a remote buffer cache for database pages, shared by every
//! database adapter (SQLite VFS, MySQL/MariaDB preload).
//!
//! How the data flows, for one database file ([`cache::PageCache`]):
//!
//! ```text
//!  adapter read(page) ──> L1 pool (pool) ──hit──> bytes
//!                           │ miss
//!                           ├──> push queue (pusher): evicted, not yet sent ──> bytes
//!                           ├──> L2 grid (grid): `mg key v` + `md key`, envelope checked
//!                           │      against versions ──> bytes (into L1)
//!                           └──> backing file (backing), O_DIRECT ──> bytes (into L1)
//!
//!  adapter write(page): the file first (adapter's own handle), then
//!    versions.bump(page) (every older grid copy is now rejected) and L1 takes the bytes.
//!
//!  L1 eviction ──> pusher (bounded queue, drops oldest) ──> grid, pipelined `ms ... q`
//! ```
//!
//! Above the cache, one layer (warming/): warming and the hot list's reload
//! read pages ahead of demand and hand them to the cache's narrow interface
//! (L1's free room, then the pusher; a version captured before each read).
//! Warming uses the cache; the cache knows nothing of warming: the adapter
//! holds a [`warming::Warming`] beside each cache.
//!
//! The disk is the only source of truth. A grid value is served only when its
//! envelope names this cache incarnation, this page and the version the file
//! holds; any fault of the grid is a miss. The sidecar file makes a crash
//! start the next open cold and lets a clean close start it warm.
//!
//! Errors are typed, one enum per job in the module that owns it
//! ([`ConfigError`] for a refused configuration, with its parsers' own
//! errors inside); their `Display` is the text users see, and adapters turn
//! them into strings only at their edges (SQLite's message, the log).

// No unsafe fn here yet; should one come, each unsafe operation in it needs its own `unsafe {}` block.
#![warn(unsafe_op_in_unsafe_fn)]

pub mod backing;
pub mod cache;
pub mod codec;
pub mod config;
pub mod config_file;
pub mod envelope;
pub mod fork;
pub mod grid;
pub mod log;
pub mod page_table;
pub mod pool;
pub mod presence;
pub mod pusher;
pub mod seal;
pub mod side_file;
pub mod sidecar;
pub mod stats;
pub mod stats_file;
#[cfg(test)]
mod test_file;
pub mod verify;
pub mod versions;
pub mod warming;
pub mod working_set;

pub use cache::{CacheOptions, CloseReport, PageCache, PageCheck, ReadAhead, Source};
pub use config::{Config, ConfigError};

/// A random 64-bit identity for a new cache incarnation.
pub fn random_cache_id() -> u64 {
    random_u64()
}

/// 64 random bits from the OS. Never panics: should the OS source fail
/// (it does not on Linux after boot), the time, pid, a process-wide counter
/// and an address are mixed instead, and a warning says so once.
pub fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    if getrandom::getrandom(&mut b).is_ok() {
        return u64::from_le_bytes(b);
    }
    static WARNED: std::sync::Once = std::sync::Once::new();
    WARNED.call_once(|| crate::warn!("the OS random source failed; drawing identities from the clock instead"));
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let local = 0u8;
    let mut z = nanos ^ (u64::from(std::process::id()) << 32) ^ n.rotate_left(17) ^ (&local as *const u8 as u64);
    for _ in 0..2 {
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
    }
    z
}
