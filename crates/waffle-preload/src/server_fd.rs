//! The cache's backings under the preload: it reads a tablespace's pages
//! through the server's own descriptors, never one of its own (whose close
//! would drop the POSIX locks the server holds on the file).

use std::io;

use waffle_core::backing::{with_bounce, Backing, PageId, DIRECT_ALIGN};
use waffle_core::stats::Counter;

use crate::off_switch::OffSwitch;
use crate::real;
use crate::segments::Segments;

/// The cache's view of the disk for one read: pages of the segment's file,
/// read through the descriptor the server is reading with (no descriptor of
/// our own; O_DIRECT when the server's is). Made for each call and never kept:
/// the server's descriptor is only known valid while its read is in progress
/// (or while it is lent: [`LentFiles`]).
/// Reads go straight into the caller's buffer when it is aligned, else
/// through the thread's aligned bounce buffer (`backing::with_bounce`).
pub struct ServerFd {
    pub segment: u32,
    pub fd: i32,
}

impl Backing for ServerFd {
    fn read_pages(&self, first: PageId, page_bytes: usize, buf: &mut [u8]) -> io::Result<usize> {
        if first.segment != self.segment {
            return Err(io::Error::other(format!(
                "page {} of segment {} asked of segment {}'s descriptor",
                first.index, first.segment, self.segment
            )));
        }
        let file_offset = first.byte_offset(page_bytes);
        let aligned = (buf.as_ptr() as usize).is_multiple_of(DIRECT_ALIGN)
            && buf.len().is_multiple_of(DIRECT_ALIGN)
            && file_offset.is_multiple_of(DIRECT_ALIGN as u64);
        if aligned {
            return pread_full(self.fd, buf, file_offset);
        }
        let span = buf.len().div_ceil(DIRECT_ALIGN) * DIRECT_ALIGN;
        // The thread's bounce buffer, kept between reads (no allocation per read).
        with_bounce(span, |bounce| {
            pread_full(self.fd, bounce, file_offset).map(|n| {
                let n = n.min(buf.len());
                buf[..n].copy_from_slice(&bounce[..n]);
                n
            })
        })
    }

    fn is_direct(&self) -> bool {
        true
    }
}

/// The cache's view of the disk for a warm or the hot list's reload: pages
/// of any segment, each read through a server descriptor of its file lent
/// for that read ([`Segments::lend`]). A file the server closed meanwhile
/// reads as empty: its pages are skipped (counted in `closed_file_skips`).
pub struct LentFiles<'a> {
    pub segs: &'a Segments,
    pub switch: &'a OffSwitch,
    pub closed_file_skips: &'a Counter,
}

impl Backing for LentFiles<'_> {
    fn read_pages(&self, first: PageId, page_bytes: usize, buf: &mut [u8]) -> io::Result<usize> {
        let Some(loan) = self.segs.lend(first.segment, self.switch) else {
            self.closed_file_skips.incr();
            return Ok(0);
        };
        ServerFd { segment: first.segment, fd: loan.fd }.read_pages(first, page_bytes, buf)
    }

    fn is_direct(&self) -> bool {
        true
    }
}

fn pread_full(fd: i32, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        // SAFETY: the range is inside buf.
        let n = unsafe {
            real::pread64(
                fd,
                buf[got..].as_mut_ptr() as *mut libc::c_void,
                buf.len() - got,
                (offset + got as u64) as i64,
            )
        };
        match n {
            0 => break,
            n if n > 0 => got += n as usize,
            _ => {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
        }
        if got % DIRECT_ALIGN != 0 {
            break; // a short read at EOF; O_DIRECT could not continue unaligned anyway
        }
    }
    Ok(got)
}
