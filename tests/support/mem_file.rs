//! An in-memory database file for tests that drive `PageCache` directly: the
//! test writes it first, as the database would, then tells the cache.

use std::io;
use std::sync::{Arc, Mutex};

use waffle_core::backing::Backing;

/// The "file": a vector shared between the test and the cache's backing.
pub struct MemFile(pub Arc<Mutex<Vec<u8>>>);

impl Backing for MemFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let f = self.0.lock().unwrap();
        let at = (offset as usize).min(f.len());
        let n = buf.len().min(f.len() - at);
        buf[..n].copy_from_slice(&f[at..at + n]);
        Ok(n)
    }
    fn is_direct(&self) -> bool {
        false
    }
}
