//! The kernel's page cache in front of an emulated device, as in front of a
//! real disk: a read the page cache answers whole does not reach the disk,
//! so it does not wait. Asked with `preadv2(RWF_NOWAIT)`, which returns data
//! only when it needs no I/O.
//!
//! Not asked (every read waits): descriptors opened O_DIRECT (InnoDB's: the
//! page cache is bypassed), and devices whose directory is in memory (tmpfs,
//! ramfs: every read would be "cached"). A partly cached read waits whole.

use libc::{c_int, iovec, ssize_t};

use crate::devices::Device;

/// Whether the page cache may answer reads of `fd` on `device`.
pub fn applies(fd: c_int, device: &Device) -> bool {
    // SAFETY: F_GETFL only reads the descriptor's flags.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    device.pages_cached && flags >= 0 && flags & libc::O_DIRECT == 0
}

/// Reads `iov` at `offset` (-1: at the file position, moving it) from the
/// page cache only. Some(n) when it answered: every byte asked for, or the
/// end of the file (0), or, with `short_ok` (read(2) may return fewer bytes
/// than asked), a cached beginning. None: the disk is needed; nothing was
/// consumed.
///
/// # Safety
/// `iov` is a valid iovec array for a read of `fd`.
pub unsafe fn answer(fd: c_int, device: &Device, iov: &[iovec], offset: i64, short_ok: bool) -> Option<ssize_t> {
    if !applies(fd, device) {
        return None;
    }
    let len: usize = iov.iter().map(|v| v.iov_len).sum();
    // SAFETY: the caller's iovecs. RWF_NOWAIT: data only if no I/O is needed (else EAGAIN, or what was cached).
    let n = unsafe { libc::preadv2(fd, iov.as_ptr(), iov.len() as c_int, offset, libc::RWF_NOWAIT) };
    let answered = n == 0 || (n > 0 && (n as usize == len || short_ok));
    answered.then_some(n)
}
