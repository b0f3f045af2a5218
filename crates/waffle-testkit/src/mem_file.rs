//! An in-memory database file for tests that drive `PageCache` directly: the
//! test writes it first, as the database would, then tells the cache.

use std::io;
use std::sync::{Arc, Mutex};

use waffle_core::backing::{Backing, PageId};

/// The "file": a vector shared between the test and the cache's reads.
pub struct MemFile(pub Arc<Mutex<Vec<u8>>>);

impl Backing for MemFile {
    fn read_pages(&self, first: PageId, page_bytes: usize, buf: &mut [u8]) -> io::Result<usize> {
        let f = self.0.lock().unwrap();
        let at = (first.byte_offset(page_bytes) as usize).min(f.len());
        let n = buf.len().min(f.len() - at);
        buf[..n].copy_from_slice(&f[at..at + n]);
        Ok(n)
    }
    fn is_direct(&self) -> bool {
        false
    }
}
