//! Soak runs (`scripts/soak`): fault tests scale their rounds with `WAFFLE_SOAK_SECONDS` and vary
//! their seeds with `WAFFLE_SOAK_SEED`; in a normal test run both are unset.

/// `WAFFLE_SOAK_SECONDS` (set by `scripts/soak`): 0 in a normal test run.
/// Fault tests scale their rounds with it.
pub fn soak_seconds() -> u64 {
    std::env::var("WAFFLE_SOAK_SECONDS").ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0)
}

/// Rounds of a fault test: `normal` in a test run, about one per `per_round`
/// seconds of `WAFFLE_SOAK_SECONDS` under `scripts/soak` (never fewer).
pub fn soak_rounds(normal: u64, per_round: u64) -> u64 {
    normal.max(soak_seconds() / per_round.max(1))
}

/// A test's seed, varied by `WAFFLE_SOAK_SEED` (set by `scripts/soak`, one
/// per pass; printed in every failure's tag, so a failure is replayed with
/// `WAFFLE_SOAK_SEED=<n> cargo test ...`).
pub fn soak_seed(base: u64) -> u64 {
    let extra: u64 = std::env::var("WAFFLE_SOAK_SEED").ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0);
    base ^ extra.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}
