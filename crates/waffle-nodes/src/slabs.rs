//! memcached slab settings that fit database pages.
//!
//! memcached stores an item in a chunk of the smallest slab class that holds
//! it; classes grow by a factor (`-f`, default 1.25) from a minimum (`-n`).
//! With the defaults a 4 KiB page in its envelope (a 4,222-byte item) lands in
//! the 4,544-byte class: 7% of every chunk unused, and compressed pages of
//! every size waste 11% on average between classes 1.25 apart.
//!
//! A [`SlabPlan`] spends memcached's classes where Waffle's items are: from
//! about a sixteenth of a page (a nearly empty page, compressed) up to the
//! whole page in its envelope, with one class boundary placed just above the
//! raw page's item, so an incompressible page wastes almost nothing either.
//!
//! How fine the classes can be depends on the node's memory: memcached hands
//! memory to a class 1 MiB at a time, so every class in use holds up to 1 MiB
//! it does not fill, and a node of 64 MiB loses more to 60 sparsely used
//! classes than it gains from tight chunks (measured: docs/benchmarks.md,
//! "Pages per MiB"). The plan uses one class per [`MIB_PER_CLASS`] of memory
//! over the page's span, from [`MIN_CLASSES`] to all 62.
//!
//! The class sizes are computed as memcached computes them ([`classes`]); a
//! test checks that against the classes a real memcached prints.

/// memcached's `sizeof(item)` on 64-bit builds (1.6), and the CAS value each item carries.
const ITEM_HEADER_BYTES: u32 = 48 + 8;
/// Chunk sizes are rounded up to this.
const CHUNK_ALIGN_BYTES: u32 = 8;
/// memcached's limit on slab classes (MAX_NUMBER_OF_SLAB_CLASSES - 1), the last
/// of which is always the largest chunk (`slab_chunk_max`).
const MAX_CLASSES: usize = 63;
/// Waffle's longest key for pages below 2^32: `wf` + 16 hex digits + `.` + 8 hex digits.
pub const KEY_BYTES_MAX: u32 = 2 + 16 + 1 + 8;
/// Memory per class of the plan: a class's unfilled last MiB stays under a quarter of its share.
pub const MIB_PER_CLASS: u32 = 4;
/// The fewest classes a plan spreads over a page's span (about memcached's own 1.25 factor).
pub const MIN_CLASSES: u32 = 12;

/// memcached's default `-n`: its first class (96 bytes) holds an extstore header with Waffle's key.
pub const FLASH_MIN_BYTES: u32 = 48;

/// Envelope bytes around a raw page: plain (header + crc32c) and sealed (header + nonce + tag).
pub const ENVELOPE_PLAIN_BYTES: u32 = 40;
pub const ENVELOPE_SEALED_BYTES: u32 = 76;

/// The memcached flags for one page size.
#[derive(Clone, Debug, PartialEq)]
pub struct SlabPlan {
    /// `-f`: the growth factor between classes.
    pub factor: f64,
    /// `-n`: the minimum space for key, value and flags (the first class is this plus the item header).
    pub min_bytes: u32,
    /// `-o slab_chunk_max`: the largest chunk, in bytes (memcached 1.6.18 reads
    /// bytes, whatever its help text says; a test checks the classes it makes);
    /// bigger items are chained.
    pub chunk_max_bytes: u32,
    /// The item a raw page of the planned size becomes, with the longest key.
    pub raw_item_bytes: u32,
}

impl SlabPlan {
    /// The plan for pages of `page_bytes` (sealed: values carry the larger
    /// sealed envelope) on a node of `memory_mib`.
    pub fn for_node(page_bytes: u32, sealed: bool, memory_mib: u32) -> SlabPlan {
        SlabPlan::spanning(page_bytes, sealed, memory_mib, (page_bytes / 16).max(FLASH_MIN_BYTES))
    }

    /// The plan for a node with flash (extstore): the first class holds the
    /// header an item on flash leaves in RAM (96 bytes with Waffle's keys),
    /// which in [`SlabPlan::for_node`]'s first class (a sixteenth of a page and
    /// more) would cost up to 3 times as much RAM per page on flash.
    pub fn for_flash_node(page_bytes: u32, sealed: bool, memory_mib: u32) -> SlabPlan {
        SlabPlan::spanning(page_bytes, sealed, memory_mib, FLASH_MIN_BYTES)
    }

    fn spanning(page_bytes: u32, sealed: bool, memory_mib: u32, min_bytes: u32) -> SlabPlan {
        assert!((512..=65536).contains(&page_bytes), "page size {page_bytes} out of 512..=65536");
        let envelope = if sealed { ENVELOPE_SEALED_BYTES } else { ENVELOPE_PLAIN_BYTES };
        let raw_item_bytes = item_bytes(KEY_BYTES_MAX, page_bytes + envelope);
        // The largest chunk: a power of two KiB at least twice the raw item, so
        // that the classes run past the raw item before memcached stops them.
        let chunk_max_bytes = (2 * raw_item_bytes).div_ceil(1024).next_power_of_two().max(16) * 1024;
        let budget = (memory_mib / MIB_PER_CLASS).clamp(MIN_CLASSES, MAX_CLASSES as u32 - 1) as usize;
        // The smallest factor whose classes reach the raw item within the budget
        // and put a boundary less than 1% above it.
        let mut factor = 1.01;
        loop {
            let plan = SlabPlan { factor, min_bytes, chunk_max_bytes, raw_item_bytes };
            let classes = plan.classes();
            if let Some(at) = classes.iter().position(|&c| c >= raw_item_bytes) {
                let fit = classes[at];
                if at < budget && at + 1 < classes.len() && fit - raw_item_bytes <= raw_item_bytes / 100 {
                    return plan;
                }
            }
            factor = ((factor + 0.0005) * 10_000.0).round() / 10_000.0;
            assert!(factor < 2.0, "no slab plan for {page_bytes}-byte pages");
        }
    }

    /// The chunk sizes memcached will make with these flags (slabs.c, slabs_init).
    pub fn classes(&self) -> Vec<u32> {
        classes(self.factor, self.min_bytes, self.chunk_max_bytes)
    }

    /// The command-line flags for memcached.
    pub fn args(&self) -> Vec<String> {
        vec![
            "-f".into(),
            format!("{}", self.factor),
            "-n".into(),
            self.min_bytes.to_string(),
            "-o".into(),
            format!("slab_chunk_max={}", self.chunk_max_bytes),
        ]
    }

    /// The flags as one line, for docs and messages.
    pub fn describe(&self) -> String {
        self.args().join(" ")
    }
}

/// The bytes memcached uses for an item: header, CAS, key and its NUL, value and "\r\n".
pub fn item_bytes(key_bytes: u32, value_bytes: u32) -> u32 {
    ITEM_HEADER_BYTES + key_bytes + 1 + value_bytes + 2
}

/// memcached's slab classes for `-f factor -n min_bytes -o slab_chunk_max=chunk_max_bytes`:
/// from `sizeof(item) + min_bytes`, aligned to 8, times `factor` each, until the
/// next would pass `chunk_max / factor` or the classes run out; the last class is
/// `chunk_max`.
pub fn classes(factor: f64, min_bytes: u32, chunk_max_bytes: u32) -> Vec<u32> {
    let mut out = Vec::with_capacity(MAX_CLASSES);
    // memcached's `size` starts at sizeof(item) (without CAS) + chunk_size.
    let mut size = 48 + min_bytes;
    while out.len() < MAX_CLASSES - 1 {
        if f64::from(size) >= f64::from(chunk_max_bytes) / factor {
            break;
        }
        if !size.is_multiple_of(CHUNK_ALIGN_BYTES) {
            size += CHUNK_ALIGN_BYTES - size % CHUNK_ALIGN_BYTES;
        }
        out.push(size);
        size = (f64::from(size) * factor) as u32;
    }
    out.push(chunk_max_bytes);
    out
}

/// The chunk an item of `bytes` is stored in (None: larger than every class; chained).
pub fn chunk_for(classes: &[u32], bytes: u32) -> Option<u32> {
    classes.iter().copied().find(|&c| c >= bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_memcacheds_own_classes() {
        let c = classes(1.25, 48, 512 * 1024);
        assert_eq!(&c[..6], &[96, 120, 152, 192, 240, 304]);
        assert_eq!(chunk_for(&c, item_bytes(24, 4096 + 40)), Some(4544), "a raw 4 KiB page today");
        assert_eq!(c.len(), 39);
        assert_eq!(c[c.len() - 1], 524288);
    }

    #[test]
    fn a_plan_fits_the_raw_page_tightly_and_grows_slowly() {
        for page in [512u32, 1024, 4096, 8192, 16384, 65536] {
            for sealed in [false, true] {
                let plan = SlabPlan::for_node(page, sealed, 1024);
                let c = plan.classes();
                assert!(c.len() <= MAX_CLASSES, "{page}: {} classes", c.len());
                let fit = chunk_for(&c, plan.raw_item_bytes).unwrap();
                assert!(
                    fit - plan.raw_item_bytes <= plan.raw_item_bytes / 100,
                    "{page}: {fit} for {}",
                    plan.raw_item_bytes
                );
                assert!(plan.factor < 1.1, "{page} sealed={sealed}: factor {}", plan.factor);
                // Every item of a page compressed to a sixteenth or more wastes little.
                let mut worst: f64 = 0.0;
                let envelope = if sealed { ENVELOPE_SEALED_BYTES } else { ENVELOPE_PLAIN_BYTES };
                for value in (page / 16..=page + envelope).step_by(7) {
                    let item = item_bytes(KEY_BYTES_MAX, value);
                    let chunk = chunk_for(&c, item).unwrap();
                    worst = worst.max(1.0 - f64::from(item) / f64::from(chunk));
                }
                assert!(worst < 0.1, "{page}: worst waste {worst:.3} with {}", plan.describe());
            }
        }
    }

    #[test]
    fn a_flash_plan_starts_at_the_header_and_still_fits_the_page() {
        for (page, mib) in [(4096u32, 8u32), (4096, 64), (16384, 1024), (65536, 64)] {
            let p = SlabPlan::for_flash_node(page, false, mib);
            assert_eq!(p.classes()[0], 96, "{}", p.describe());
            let fit = chunk_for(&p.classes(), p.raw_item_bytes).unwrap();
            assert!(fit - p.raw_item_bytes <= p.raw_item_bytes / 100, "{}", p.describe());
        }
    }

    #[test]
    fn a_small_node_gets_fewer_coarser_classes() {
        let small = SlabPlan::for_node(4096, false, 64);
        let large = SlabPlan::for_node(4096, false, 4096);
        let span =
            |p: &SlabPlan| p.classes().iter().filter(|&&c| c <= p.raw_item_bytes + p.raw_item_bytes / 100).count();
        assert!(span(&small) <= (64 / MIB_PER_CLASS) as usize, "{}", small.describe());
        assert!(span(&large) > 40, "{}", large.describe());
        assert!(small.factor > large.factor);
        for p in [&small, &large] {
            let fit = chunk_for(&p.classes(), p.raw_item_bytes).unwrap();
            assert!(fit - p.raw_item_bytes <= p.raw_item_bytes / 100, "{}", p.describe());
        }
    }
}
