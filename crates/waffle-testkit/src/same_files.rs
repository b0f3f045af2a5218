//! Two closed database files that ran the same statements hold the same bytes
//! wherever SQLite can read them: the differential tests' last oracle.
//!
//! Every page is compared byte for byte except what no reader ever reads:
//! the content of free-list leaf pages (SQLite takes a leaf back without
//! reading it) and the tail of a free-list trunk page past its leaf count.
//! The free lists themselves must be equal, trunk by trunk. In WAL mode the
//! header's change counter (24..28, copied to 92..96) is left out too: it
//! depends on how often SQLite re-read page 1, not on what it wrote.
//!
//! Why the free leaves are left out: two plain databases given the same
//! statements, interleaved one statement each in one process, end with
//! different bytes in free pages (tests/differential_control.rs, a fixed
//! sequence that does). rusqlite's bundled SQLite is built with
//! SQLITE_ENABLE_MEMORY_MANAGEMENT, so every connection of a process shares
//! one page cache: the first side's fetches recycle the second's unpinned
//! pages and the other way round, the two caches differ, and so does when a
//! dirty page spills to the file. A page a statement took from the free list
//! is not journaled; spilled and then given back by a rollback, it stays free
//! with what was spilled in it. The same two databases run one after the
//! other end byte-equal. Without `secure_delete` (workload::setup) freed
//! cells' bytes would differ inside used pages too; with it they are zeros.

use std::collections::BTreeSet;
use std::path::Path;

/// The free list of a database image: its trunk pages in order, each with its leaves.
#[derive(Debug, PartialEq, Eq)]
pub struct FreeList {
    pub trunks: Vec<(u32, Vec<u32>)>,
}

impl FreeList {
    /// The free list of `file` (a whole database image of `page_size` pages), as its
    /// header and trunk pages say; panics on a list that leaves the file or loops.
    pub fn of(file: &[u8], page_size: usize) -> FreeList {
        let be = |at: usize| u32::from_be_bytes(file[at..at + 4].try_into().unwrap());
        let pages = file.len() / page_size;
        let mut trunks = Vec::new();
        let mut seen = BTreeSet::new();
        let mut trunk = be(32);
        while trunk != 0 {
            let t = trunk as usize;
            assert!(t >= 1 && t <= pages && seen.insert(t), "free-list trunk {trunk} is outside the file or loops");
            let at = (t - 1) * page_size;
            let count = be(at + 4) as usize;
            assert!(8 + 4 * count <= page_size, "free-list trunk {trunk} claims {count} leaves");
            let leaves = (0..count).map(|i| be(at + 8 + 4 * i)).collect();
            trunks.push((trunk, leaves));
            trunk = be(at);
        }
        FreeList { trunks }
    }

    /// The bytes of page `page` (1-based) no reader reads: all of a leaf, a trunk's tail.
    fn unread_from(&self, page: u32) -> Option<usize> {
        for (trunk, leaves) in &self.trunks {
            if *trunk == page {
                return Some(8 + 4 * leaves.len());
            }
            if leaves.contains(&page) {
                return Some(0);
            }
        }
        None
    }
}

/// Panics, naming the first page and byte that differ, unless `plain` and `waffle` hold the
/// same bytes wherever SQLite can read them (module doc).
pub fn assert_same_files(plain: &Path, waffle: &Path, journal: &str, page_size: usize, tag: &str) {
    let mut a = std::fs::read(plain).unwrap_or_else(|e| panic!("{tag} read {}: {e}", plain.display()));
    let mut b = std::fs::read(waffle).unwrap_or_else(|e| panic!("{tag} read {}: {e}", waffle.display()));
    assert_eq!(a.len(), b.len(), "{tag} file sizes differ");
    assert_eq!(a.len() % page_size, 0, "{tag} not a whole number of {page_size}-byte pages");
    if journal == "wal" {
        for f in [&mut a, &mut b] {
            f[24..28].fill(0);
            f[92..96].fill(0);
        }
    }
    let free = FreeList::of(&a, page_size);
    assert_eq!(free, FreeList::of(&b, page_size), "{tag} the free lists differ");
    for (i, (pa, pb)) in a.chunks(page_size).zip(b.chunks(page_size)).enumerate() {
        let page = i as u32 + 1;
        let read = free.unread_from(page).unwrap_or(page_size);
        if let Some(at) = pa[..read].iter().zip(&pb[..read]).position(|(x, y)| x != y) {
            let byte = i * page_size + at;
            panic!(
                "{tag} the files differ first at byte {byte} (page {page}, byte {at} of it)\nplain:  {:?}\nwaffle: {:?}",
                &pa[at.saturating_sub(8)..(at + 16).min(read)],
                &pb[at.saturating_sub(8)..(at + 16).min(read)]
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PS: usize = 512;

    /// A 4-page image: page 2 a trunk with leaves 3 and 4, page 1's header pointing at it.
    fn image() -> Vec<u8> {
        let mut f = vec![0u8; 4 * PS];
        f[32..36].copy_from_slice(&2u32.to_be_bytes());
        f[36..40].copy_from_slice(&3u32.to_be_bytes());
        let t = PS;
        f[t + 4..t + 8].copy_from_slice(&2u32.to_be_bytes());
        f[t + 8..t + 12].copy_from_slice(&3u32.to_be_bytes());
        f[t + 12..t + 16].copy_from_slice(&4u32.to_be_bytes());
        f
    }

    fn same(a: &[u8], b: &[u8]) -> bool {
        let dir = crate::temp_dir::TempDir::new("same-files");
        let (pa, pb) = (dir.join("a"), dir.join("b"));
        std::fs::write(&pa, a).unwrap();
        std::fs::write(&pb, b).unwrap();
        std::panic::catch_unwind(|| assert_same_files(&pa, &pb, "delete", PS, "t")).is_ok()
    }

    #[test]
    fn reads_the_free_list() {
        assert_eq!(FreeList::of(&image(), PS), FreeList { trunks: vec![(2, vec![3, 4])] });
    }

    #[test]
    fn free_leaves_and_a_trunks_tail_may_differ_and_nothing_else() {
        let a = image();
        let mut b = image();
        b[2 * PS + 7] = 9; // leaf 3
        b[3 * PS] = 9; // leaf 4
        b[PS + 16] = 9; // the trunk past its two leaves
        assert!(same(&a, &b), "unread bytes differ only");
        for at in [100, PS + 8, PS + 3] {
            let mut c = image();
            c[at] ^= 1; // page 1's body, a leaf number, the next-trunk pointer
            assert!(!same(&a, &c), "byte {at} is read");
        }
        let mut longer = image();
        longer.extend_from_slice(&[0u8; PS]);
        assert!(!same(&a, &longer), "sizes");
    }
}
