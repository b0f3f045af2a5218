//! One slot per page of a segment, allocated in bounded steps.
//!
//! A directory of chunks of at most [`CHUNK_PAGES`] slots. A chunk is
//! allocated (and grown by a quarter, as a `Vec`) only up to the highest slot
//! asked for in it; an untouched chunk is an empty box, 16 bytes. So a page
//! number taken from a file's header or a sparse file's far end costs one
//! chunk (at most 128 KiB of `u64`s) and the directory up to it (16 bytes per
//! 16,384 pages: 4 MiB for page 2^32 - 1), never a slot for every page below.
//!
//! A lookup is one indirection more than a flat `Vec`: directory, then chunk.
//! Slots are created only by `&mut self` methods (the owner's write lock), and
//! read and written in place through `&self` (the owner's read lock).

/// Slots per chunk: 2^14.
pub const CHUNK_BITS: u32 = 14;
pub const CHUNK_PAGES: usize = 1 << CHUNK_BITS;
const OFFSET_MASK: usize = CHUNK_PAGES - 1;

pub struct PageTable<S> {
    chunks: Vec<Box<[S]>>,
}

impl<S> Default for PageTable<S> {
    fn default() -> Self {
        PageTable { chunks: Vec::new() }
    }
}

impl<S> PageTable<S> {
    /// The slots of `pages`, in order, as consecutive chunks (a restore).
    pub fn from_slots(pages: impl IntoIterator<Item = S>) -> Self {
        let mut chunks = Vec::new();
        let mut it = pages.into_iter().peekable();
        while it.peek().is_some() {
            chunks.push(it.by_ref().take(CHUNK_PAGES).collect::<Vec<S>>().into_boxed_slice());
        }
        PageTable { chunks }
    }

    /// Page `idx`'s slot, if it has one.
    #[inline]
    pub fn get(&self, idx: usize) -> Option<&S> {
        self.chunks.get(idx >> CHUNK_BITS)?.get(idx & OFFSET_MASK)
    }

    /// Gives page `idx` a slot (new slots from `make`): its chunk grows to it,
    /// by a quarter at least so a file growing page by page does not
    /// reallocate each time; other chunks are left as they are.
    pub fn grow(&mut self, idx: usize, make: impl FnMut() -> S) {
        let c = idx >> CHUNK_BITS;
        if self.chunks.len() <= c {
            self.chunks.resize_with(c + 1, Default::default);
        }
        let chunk = &mut self.chunks[c];
        let off = idx & OFFSET_MASK;
        if off < chunk.len() {
            return;
        }
        let want = (off + 1).max(chunk.len() * 5 / 4).min(CHUNK_PAGES);
        let mut slots = std::mem::take(chunk).into_vec();
        slots.reserve_exact(want - slots.len());
        slots.resize_with(want, make);
        *chunk = slots.into_boxed_slice();
    }

    /// Gives every page below `pages` a slot.
    pub fn grow_to(&mut self, pages: usize, mut make: impl FnMut() -> S) {
        let mut end = 0;
        while end < pages {
            end = ((end | OFFSET_MASK) + 1).min(pages);
            self.grow(end - 1, &mut make);
        }
    }

    /// Every slot from page `idx` on, with its page.
    pub fn iter_from(&self, idx: usize) -> impl Iterator<Item = (usize, &S)> {
        let first = idx >> CHUNK_BITS;
        self.chunks.iter().enumerate().skip(first).flat_map(move |(c, chunk)| {
            let skip = if c == first { idx & OFFSET_MASK } else { 0 };
            chunk.iter().enumerate().skip(skip).map(move |(off, s)| ((c << CHUNK_BITS) | off, s))
        })
    }

    /// Every slot, with its page.
    pub fn iter(&self) -> impl Iterator<Item = (usize, &S)> {
        self.iter_from(0)
    }

    /// Slots held (pages with one).
    pub fn slots(&self) -> usize {
        self.chunks.iter().map(|c| c.len()).sum()
    }

    /// Chunks allocated (tests: what a far page cost).
    pub fn chunks_held(&self) -> usize {
        self.chunks.iter().filter(|c| !c.is_empty()).count()
    }

    /// How many pages a dense copy holds, and whether slots lie beyond them.
    /// It runs to the last slot, unless the pages without one (copied as
    /// the default) would outnumber the slots by more than `slack_pages`:
    /// then to the end of the longest prefix where they do not.
    pub fn dense_len(&self, slack_pages: usize) -> (usize, bool) {
        let (mut best, mut held, mut last) = (0, 0, 0);
        for (c, chunk) in self.chunks.iter().enumerate().filter(|(_, chunk)| !chunk.is_empty()) {
            held += chunk.len();
            last = (c << CHUNK_BITS) + chunk.len();
            if last - held <= held + slack_pages {
                best = last;
            }
        }
        (best, best < last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_far_page_costs_one_chunk_and_the_directory() {
        let mut t: PageTable<u64> = PageTable::default();
        t.grow((1 << 32) - 1, || 7);
        assert_eq!(t.chunks_held(), 1);
        assert_eq!(t.slots(), CHUNK_PAGES, "the last page of its chunk: the chunk up to it");
        assert_eq!(t.chunks.capacity(), 1 << (32 - CHUNK_BITS));
        assert_eq!(t.get((1 << 32) - 1), Some(&7));
        assert_eq!(t.get(5), None);
        assert_eq!(t.get(1 << 32), None);
        t.grow(1 << 30, || 8);
        assert_eq!((t.chunks_held(), t.slots()), (2, CHUNK_PAGES + 1));
    }

    #[test]
    fn chunks_grow_by_a_quarter_up_to_their_bound() {
        let mut t: PageTable<u32> = PageTable::default();
        t.grow(9, || 0);
        assert_eq!(t.slots(), 10);
        t.grow(10, || 0);
        assert_eq!(t.slots(), 12);
        t.grow(CHUNK_PAGES - 2, || 0);
        t.grow(CHUNK_PAGES - 1, || 0);
        assert_eq!((t.slots(), t.chunks_held()), (CHUNK_PAGES, 1), "never past the chunk");
    }

    #[test]
    fn iteration_and_restore_keep_page_numbers() {
        let mut t: PageTable<usize> = PageTable::default();
        t.grow_to(CHUNK_PAGES + 3, || 0);
        assert_eq!(t.slots(), CHUNK_PAGES + 3);
        let r = PageTable::from_slots(0..CHUNK_PAGES * 2 + 5);
        assert!(r.iter().all(|(page, &v)| page == v));
        let from: Vec<usize> = r.iter_from(CHUNK_PAGES - 1).map(|(page, _)| page).take(3).collect();
        assert_eq!(from, [CHUNK_PAGES - 1, CHUNK_PAGES, CHUNK_PAGES + 1]);
        assert_eq!(r.iter_from(CHUNK_PAGES * 2 + 5).count(), 0);
        assert_eq!(r.dense_len(0), (CHUNK_PAGES * 2 + 5, false));
    }

    #[test]
    fn a_dense_copy_stops_before_a_sparse_far_end() {
        let mut t: PageTable<u8> = PageTable::default();
        t.grow(3, || 0);
        assert_eq!(t.dense_len(0), (4, false));
        t.grow(CHUNK_PAGES * 3 + 1, || 0);
        assert_eq!(t.dense_len(0), (4, true), "three chunks of gap for 6 slots");
        assert_eq!(t.dense_len(1 << 20), (CHUNK_PAGES * 3 + 2, false), "within the slack");
        t.grow_to(CHUNK_PAGES * 3, || 0);
        assert_eq!(t.dense_len(0), (CHUNK_PAGES * 3 + 2, false));
    }
}
