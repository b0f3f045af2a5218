//! What every configuration of one invocation runs with ([`super::configs`]'
//! plan says what differs): threads, the warm-up and measured lengths, the
//! grid's deadline, the budget, the seed. Uses no other file of the bench.

use std::time::Duration;

#[derive(Clone, Debug)]
pub struct RunOptions {
    pub threads: usize,
    pub warmup: Duration,
    pub duration: Duration,
    pub timeout_ms: u64,
    pub budget_bytes: u64,
    pub seed: u64,
    /// The dataset's page size: the grid's memcached nodes get slab classes for it.
    pub page_bytes: u32,
    /// `+restart`: how long the workload runs after the restart.
    pub restart: Duration,
}
