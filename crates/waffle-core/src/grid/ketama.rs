//! Key to node mapping, the same as libmemcached's weighted ketama
//! (`MEMCACHED_BEHAVIOR_KETAMA_WEIGHTED`, MD5 key hash), so a Waffle grid
//! and any libmemcached client agree on where a key lives.
//!
//! The continuum, as libmemcached 1.x builds it (`update_continuum` in hosts.cc):
//! - node `i` in list order gets `floor(pct * 160 / 4 * n + 1e-10) * 4` points, computed
//!   in single precision (`pct = weight / total_weight`, `n` = number of nodes);
//! - its points come from the MD5 digests of "host-j" (port 11211) or
//!   "host:port-j" (other ports), for j = 0, 1, ...: each digest gives four
//!   points, its four little-endian 32-bit words;
//! - points are sorted by (value, node index).
//!
//! A key's hash is the first little-endian word of its MD5; its node is the one
//! of the first point >= the hash, wrapping to the first point. With one node,
//! libmemcached does not hash at all: every key is on node 0.

use md5::{Digest, Md5};

use super::spec::NodeSpec;

/// libmemcached's `MEMCACHED_POINTS_PER_SERVER_KETAMA`.
const POINTS_PER_NODE: u32 = 160;
/// Points taken from one MD5 digest.
const POINTS_PER_DIGEST: u32 = 4;
/// libmemcached's `MEMCACHED_DEFAULT_PORT`: its name on the continuum omits the port.
const DEFAULT_PORT: u16 = 11211;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Point {
    value: u32,
    node: u32,
}

/// The sorted ring of points.
#[derive(Clone, Debug)]
pub struct Continuum {
    points: Vec<Point>,
    node_count: usize,
}

impl Continuum {
    pub fn new(nodes: &[NodeSpec]) -> Continuum {
        let total_weight: u64 = nodes.iter().map(|n| u64::from(n.weight)).sum();
        let node_count = nodes.len();
        let mut points = Vec::new();
        for (index, node) in nodes.iter().enumerate() {
            let count = points_for(node.weight, total_weight, node_count);
            for j in 0..count / POINTS_PER_DIGEST {
                let name = if node.port == DEFAULT_PORT {
                    format!("{}-{}", node.host, j)
                } else {
                    format!("{}:{}-{}", node.host, node.port, j)
                };
                let digest = Md5::digest(name.as_bytes());
                for word in digest.chunks_exact(4) {
                    let value = u32::from_le_bytes([word[0], word[1], word[2], word[3]]);
                    points.push(Point { value, node: index as u32 });
                }
            }
        }
        points.sort_unstable();
        Continuum { points, node_count }
    }

    /// The node of `key`, None if there is no node.
    pub fn node_for_key(&self, key: &[u8]) -> Option<usize> {
        match self.node_count {
            0 => None,
            1 => Some(0),
            _ => self.node_for_hash(key_hash(key)),
        }
    }

    /// The node of the first point >= `hash`, wrapping around the ring.
    pub fn node_for_hash(&self, hash: u32) -> Option<usize> {
        if self.points.is_empty() {
            return None;
        }
        let at = self.points.partition_point(|p| p.value < hash);
        let point = self.points.get(at).unwrap_or(&self.points[0]);
        Some(point.node as usize)
    }

    /// Points per node, in node order (for tests and tools).
    pub fn points_per_node(&self) -> Vec<usize> {
        let mut counts = vec![0; self.node_count];
        for p in &self.points {
            counts[p.node as usize] += 1;
        }
        counts
    }
}

/// Points of one node. The arithmetic is libmemcached's, in `float`, so that
/// rounding lands where it lands there (e.g. on 39.99998 rather than 40).
fn points_for(weight: u32, total_weight: u64, node_count: usize) -> u32 {
    let pct = weight as f32 / total_weight as f32;
    let per_digest =
        (pct * POINTS_PER_NODE as f32 / POINTS_PER_DIGEST as f32 * node_count as f32 + 0.000_000_000_1_f32).floor();
    per_digest as u32 * POINTS_PER_DIGEST
}

/// libhashkit's MD5 key hash: the first four bytes of the digest, little-endian.
pub fn key_hash(key: &[u8]) -> u32 {
    let digest = Md5::digest(key);
    u32::from_le_bytes([digest[0], digest[1], digest[2], digest[3]])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(list: &str) -> Vec<NodeSpec> {
        NodeSpec::parse_list(list).unwrap()
    }

    #[test]
    fn equal_weights_give_160_points_each() {
        let c = Continuum::new(&nodes("a:1,b:2,c:3"));
        assert_eq!(c.points_per_node(), vec![160, 160, 160]);
    }

    #[test]
    fn weights_share_the_points() {
        let c = Continuum::new(&nodes("a:1:1,b:2:3"));
        // pct 0.25 * 40 * 2 = 20 digests; 0.75 * 40 * 2 = 60 digests.
        assert_eq!(c.points_per_node(), vec![80, 240]);
    }

    #[test]
    fn empty_and_single() {
        assert_eq!(Continuum::new(&[]).node_for_key(b"k"), None);
        assert_eq!(Continuum::new(&nodes("a:1")).node_for_key(b"k"), Some(0));
    }

    #[test]
    fn key_hash_is_md5_little_endian() {
        // MD5("") = d41d8cd98f00b204e9800998ecf8427e
        assert_eq!(key_hash(b""), 0xd98c1dd4);
    }

    #[test]
    fn wraps_past_the_last_point() {
        let c = Continuum::new(&nodes("a:1,b:2"));
        let last = c.points.last().unwrap();
        assert_eq!(
            c.node_for_hash(u32::MAX),
            Some(if last.value == u32::MAX { last.node } else { c.points[0].node } as usize)
        );
        assert_eq!(c.node_for_hash(0), Some(c.points[0].node as usize));
    }
}
