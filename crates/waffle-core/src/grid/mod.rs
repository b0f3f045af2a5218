//! L2: the memcached grid client.
//!
//! Pages evicted from L1 are pushed to a grid of plain memcached servers and
//! fetched back (and expired: exclusive caching) on an L1 miss. Written here,
//! on the meta text protocol, rather than with a client crate: it is the product.
//!
//! - `spec`: the configured node list; `options`: deadlines, pool, backoff.
//! - `clock`: the time of up/down decisions (the real one but in tests).
//! - `ketama`: key to node, exactly as libmemcached's weighted ketama.
//! - `protocol`: requests and replies as pure functions over bytes.
//! - `connection`: one socket, every wait bounded by the request's deadline.
//! - `health`: up/down with backoff and a single half-open probe.
//! - `cost`: whether asking a node pays (its lookups against the disk's reads);
//!   `cost_verdict`: the arithmetic of one window's verdict, for `cost`.
//! - `disk_cost`: what the cache's single-page disk reads take, for `cost`;
//!   `median`: the median of a trial's latest push exchanges, for `cost`.
//! - `memory`: how much memory a node has (memcached's `limit_maxbytes`), for the stats;
//!   `tier_sample`: which tier (RAM, flash) served this client's hits, for `memory`.
//! - `node`: a node's pool, health, cost and counters; `client`: [`Grid`];
//!   `prober`: the process's one thread that probes idle nodes of every grid.
//!
//! The grid never fails the database: a fault, a timeout or a down node is a
//! miss for the caller (see [`Fetch`]), and every request has a deadline.

pub mod client;
pub mod clock;
mod connection;
pub mod cost;
mod cost_verdict;
pub mod disk_cost;
mod health;
pub mod ketama;
mod median;
pub mod memory;
mod node;
pub mod options;
pub mod outcome;
pub(crate) mod prober;
pub mod protocol;
pub mod spec;
mod text_reply;
pub mod tier_sample;

pub use client::Grid;
pub use clock::{Clock, SystemClock};
pub use cost::{CostState, CostStatus};
pub use health::MISSES_TO_DOWN;
pub use memory::GridMemory;
pub use options::GridOptions;
pub use outcome::{FaultKind, Fetch, ItemFate, NodeStatus, StoreReport};
pub use prober::LINGER as PROBER_LINGER;
pub use spec::{NodeSpec, SpecError};
