//! Which descriptors are InnoDB tablespace files: a lock-free table indexed by
//! fd, read on every hooked call. A slot is 0 for an untracked descriptor,
//! else [`TRACKED`] | (cached? [`CACHED`]) | segment.
//!
//! Chunks of 1024 slots are allocated on first use and never freed (a chunk
//! is 4 KiB); descriptors from [`MAX_FD`] on cannot be tracked.

use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};

pub const TRACKED: u32 = 1 << 30;
pub const CACHED: u32 = 1 << 31;
const SEGMENT_MASK: u32 = 0xFFFF;

const CHUNK: usize = 1024;
const CHUNKS: usize = 1024;
/// Descriptors below this can be tracked.
pub const MAX_FD: usize = CHUNK * CHUNKS;

type Chunk = [AtomicU32; CHUNK];

static TABLE: [AtomicPtr<Chunk>; CHUNKS] = [const { AtomicPtr::new(std::ptr::null_mut()) }; CHUNKS];

pub fn encode(segment: u32, cached: bool) -> u32 {
    debug_assert!(segment <= SEGMENT_MASK);
    TRACKED | if cached { CACHED } else { 0 } | segment
}

pub fn segment(slot: u32) -> u32 {
    slot & SEGMENT_MASK
}

pub fn is_cached(slot: u32) -> bool {
    slot & CACHED != 0
}

fn chunk(fd: i32, create: bool) -> Option<&'static Chunk> {
    if fd < 0 || fd as usize >= MAX_FD {
        return None;
    }
    let cell = &TABLE[fd as usize / CHUNK];
    let mut p = cell.load(Ordering::Acquire);
    if p.is_null() {
        if !create {
            return None;
        }
        let fresh = Box::into_raw(Box::new([const { AtomicU32::new(0) }; CHUNK]));
        match cell.compare_exchange(std::ptr::null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => p = fresh,
            Err(existing) => {
                // SAFETY: fresh was never shared.
                drop(unsafe { Box::from_raw(fresh) });
                p = existing;
            }
        }
    }
    // SAFETY: chunks are never freed.
    Some(unsafe { &*p })
}

/// The slot of `fd` (0: not a tracked tablespace).
#[inline]
pub fn get(fd: i32) -> u32 {
    chunk(fd, false).map_or(0, |c| c[fd as usize % CHUNK].load(Ordering::Acquire))
}

/// Tracks `fd`. False if the descriptor is beyond the table.
pub fn set(fd: i32, slot: u32) -> bool {
    match chunk(fd, true) {
        Some(c) => {
            c[fd as usize % CHUNK].store(slot, Ordering::Release);
            true
        }
        None => false,
    }
}

/// Stops tracking `fd` and returns what its slot was.
#[inline]
pub fn take(fd: i32) -> u32 {
    chunk(fd, false).map_or(0, |c| c[fd as usize % CHUNK].swap(0, Ordering::AcqRel))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_round_trip() {
        assert_eq!(get(5000), 0);
        assert!(set(5000, encode(7, true)));
        let s = get(5000);
        assert_eq!(segment(s), 7);
        assert!(is_cached(s));
        assert_eq!(take(5000), s);
        assert_eq!(get(5000), 0);
        assert!(set(5001, encode(0, false)));
        assert_ne!(get(5001), 0, "segment 0 uncached is still tracked");
        assert!(!is_cached(get(5001)));
        assert!(!set(MAX_FD as i32, encode(1, true)));
        assert_eq!(get(-1), 0);
    }
}
