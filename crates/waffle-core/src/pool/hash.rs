//! Hashing of page numbers: which shard owns a page, and the hasher for the
//! per-shard maps.
//!
//! Page numbers are small sequential integers, so both uses must mix them.
//! The two uses need *different* functions: the shard is taken from the top
//! bits of a multiply, and hashbrown takes its 7-bit control tag from the top
//! bits too; reusing one hash would give every page in a shard nearly the same
//! tag and turn lookups into long probe chains.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// 2^64 / golden ratio: Fibonacci hashing spreads consecutive integers evenly
/// over the top bits.
const FIBONACCI: u64 = 0x9E37_79B9_7F4A_7C15;

/// Index of the shard owning `page`, for a pool of `1 << shard_bits` shards.
#[inline]
pub(super) fn shard_of(page: u64, shard_bits: u32) -> usize {
    if shard_bits == 0 {
        return 0; // a shift by 64 would overflow
    }
    (page.wrapping_mul(FIBONACCI) >> (64 - shard_bits)) as usize
}

/// murmur3's 64-bit finalizer: every input bit affects every output bit.
#[inline]
fn fmix64(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

/// Hasher for `u64` page keys. Not DoS resistant; page numbers come from the
/// database engine, not from the network.
#[derive(Default, Clone, Copy)]
pub(super) struct PageHasher(u64);

impl Hasher for PageHasher {
    #[inline]
    fn write_u64(&mut self, x: u64) {
        self.0 = fmix64(self.0 ^ x);
    }

    // Only reached if someone hashes a non-u64 key with this hasher.
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = fmix64(self.0 ^ u64::from(b));
        }
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

/// Map keyed by page number.
pub(super) type PageMap<V> = HashMap<u64, V, BuildHasherDefault<PageHasher>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_shard_takes_everything() {
        for page in [0, 1, u64::MAX] {
            assert_eq!(shard_of(page, 0), 0);
        }
    }

    #[test]
    fn sequential_pages_spread_evenly_over_shards() {
        for bits in 1..=6 {
            let shards = 1usize << bits;
            let mut counts = vec![0usize; shards];
            let pages = 64 * shards as u64;
            for page in 0..pages {
                counts[shard_of(page, bits)] += 1;
            }
            let (min, max) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
            // Fibonacci hashing of a run is close to round-robin.
            assert!(max - min <= 4, "bits {bits}: counts {counts:?}");
        }
    }

    #[test]
    fn map_hash_differs_from_shard_hash_in_top_bits() {
        // Pages of one shard must not all share the map's top-7-bit tag.
        let mut tags = std::collections::HashSet::new();
        for page in (0..640_000u64).filter(|&p| shard_of(p, 6) == 0) {
            let mut h = PageHasher::default();
            h.write_u64(page);
            tags.insert(h.finish() >> 57);
        }
        assert!(tags.len() >= 120, "only {} distinct tags of 128", tags.len());
    }
}
