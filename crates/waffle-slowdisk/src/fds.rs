//! Which descriptors read from an emulated device: a fixed table indexed by
//! descriptor, set when an open hook sees a file under a device's directory.
//!
//! An entry keeps the file's inode and is checked against `fstat` before a
//! read is slowed: a descriptor closed and reused for a socket or another
//! file (by calls the shim does not hook: close, socket, fcntl's F_DUPFD) is
//! never slowed by a stale entry. Descriptors past the table are never slowed.

use std::sync::atomic::{AtomicU64, Ordering};

/// Descriptors the table covers.
const SLOTS: usize = 1 << 16;
/// An entry: device index + 1 in the top byte, the inode's low 56 bits below.
const INODE_BITS: u32 = 56;
const INODE_MASK: u64 = (1 << INODE_BITS) - 1;

static TABLE: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];

fn slot(fd: libc::c_int) -> Option<&'static AtomicU64> {
    usize::try_from(fd).ok().and_then(|i| TABLE.get(i))
}

/// `fd` reads from device `device`; its file is inode `inode`.
pub fn set(fd: libc::c_int, device: usize, inode: u64) {
    if let Some(s) = slot(fd) {
        s.store(((device as u64 + 1) << INODE_BITS) | (inode & INODE_MASK), Ordering::Relaxed);
    }
}

pub fn clear(fd: libc::c_int) {
    if let Some(s) = slot(fd) {
        s.store(0, Ordering::Relaxed);
    }
}

/// The device `fd` reads from and the inode it was opened on, if any.
#[inline]
pub fn get(fd: libc::c_int) -> Option<(usize, u64)> {
    let e = slot(fd)?.load(Ordering::Relaxed);
    (e != 0).then(|| (((e >> INODE_BITS) - 1) as usize, e & INODE_MASK))
}

/// Whether `inode` is the one an entry keeps.
pub fn same_inode(kept: u64, inode: u64) -> bool {
    kept == inode & INODE_MASK
}
