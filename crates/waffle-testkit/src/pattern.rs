//! Bytes a wrong page cannot hold by accident.

/// Deterministic pseudo-random bytes (a page-sized row that does not compress
/// or repeat, so a wrong page is never the right bytes by accident).
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
