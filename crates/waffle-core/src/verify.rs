//! Verify mode (`waffle_verify=on`): an oracle inside the product.
//!
//! Every page a tier serves (L1, the push queue, the grid) is compared with a
//! read of the file made at that moment, under the lock the adapter's read
//! holds. A difference is counted by tier, logged with the cached copy's
//! provenance (its version name, the cache's epoch, how and when it entered
//! L1), and the file's bytes are served instead; the page is forgotten by
//! every tier. Off, verify mode costs one relaxed load per served page and
//! nothing per install.
//!
//! The provenance table remembers how each page last entered L1 while verify
//! mode is on. It is bounded ([`MAX_ENTRIES`]): past the bound it starts over
//! (a page without a record is logged as "not recorded").

use std::collections::HashMap;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

/// Pages whose provenance is remembered at most (a few dozen bytes each).
pub const MAX_ENTRIES: usize = 1 << 20;

/// The tier a verified page was served from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Served {
    L1,
    PushQueue,
    L2,
}

impl Served {
    pub const ALL: [Served; 3] = [Served::L1, Served::PushQueue, Served::L2];
    pub fn name(self) -> &'static str {
        match self {
            Served::L1 => "l1",
            Served::PushQueue => "push_queue",
            Served::L2 => "l2",
        }
    }
}

/// How a page entered L1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum How {
    /// A demand read found it on the disk.
    Disk,
    /// A demand read found it in the grid.
    Grid,
    /// A demand read took it back from the push queue.
    PushQueue,
    /// The database wrote it (the write reached the file first).
    Write,
    /// A sequential scan's read-ahead window brought it (grid or disk).
    ReadAhead,
    /// A warm or the hot list's reload placed it.
    Warm,
}

impl How {
    pub fn name(self) -> &'static str {
        match self {
            How::Disk => "read from the disk",
            How::Grid => "fetched from the grid",
            How::PushQueue => "taken back from the push queue",
            How::Write => "written by the database",
            How::ReadAhead => "read ahead",
            How::Warm => "placed by a warm or the hot list",
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Entered {
    how: How,
    at: Instant,
    version: u64,
}

/// One cache's verify mode: off until [`Verifier::enable`].
#[derive(Default)]
pub struct Verifier {
    on: AtomicBool,
    /// What the log names the cache by (the database's path).
    label: OnceLock<String>,
    /// A file every difference is appended to as well (WAFFLE_VERIFY_LOG).
    log: OnceLock<PathBuf>,
    entered: Mutex<HashMap<u64, Entered>>,
}

impl Verifier {
    pub fn enable(&self, label: String, log: Option<PathBuf>) {
        let _ = self.label.set(label);
        if let Some(log) = log {
            let _ = self.log.set(log);
        }
        self.on.store(true, Ordering::Release);
    }

    /// Says a difference: in the log (an error: a copy differed from the
    /// file), and appended to the log file if there is one, every line
    /// (opened for each line: differences are rare; never through a symlink).
    pub fn report(&self, line: &str) {
        crate::error!("{line}");
        let Some(path) = self.log.get() else { return };
        let appended = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
            .and_then(|mut f| writeln!(f, "{line}"));
        if let Err(e) = appended {
            crate::error!("waffle verify: cannot append to {}: {e}", path.display());
        }
    }

    pub fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// `page` entered L1 at `version` (recorded only while on).
    pub fn entered(&self, page: u64, version: u64, how: How) {
        if !self.is_on() {
            return;
        }
        let mut m = self.entered.lock().unwrap_or_else(|e| e.into_inner());
        if m.len() >= MAX_ENTRIES && !m.contains_key(&page) {
            m.clear();
        }
        m.insert(page, Entered { how, at: Instant::now(), version });
    }

    /// The log line of a difference: what was served, and where it came from.
    pub fn describe(&self, page: u64, tier: &str, version: u64, epoch: u64, first_diff: Option<usize>) -> String {
        let label = self.label.get().map(String::as_str).unwrap_or("?");
        let at = first_diff.map_or("past the end of the file".to_string(), |i| format!("at byte {i}"));
        let entered = self.entered.lock().unwrap_or_else(|e| e.into_inner()).get(&page).copied();
        let how = match entered {
            Some(e) => format!(
                "entered L1 {} {} ms ago at version {:#018x}",
                e.how.name(),
                e.at.elapsed().as_millis(),
                e.version
            ),
            None => "its entry was not recorded".to_string(),
        };
        format!(
            "waffle verify: page {page} of {label} served from {tier} differs from the file {at}: \
             version {version:#018x}, epoch {epoch}, {how}; serving the file's bytes"
        )
    }
}

/// Where the first byte differs (None: the lengths differ and the common part is equal).
pub fn first_difference(served: &[u8], file: &[u8]) -> Option<usize> {
    served.iter().zip(file).position(|(a, b)| a != b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_records_nothing_and_on_names_the_entry() {
        let v = Verifier::default();
        v.entered(3, 7, How::Grid);
        assert!(v.entered.lock().unwrap().is_empty(), "off: no record");
        v.enable("x.db".into(), None);
        v.entered(3, 7, How::Grid);
        let line = v.describe(3, "l2", 7, 1, Some(100));
        assert!(line.contains("page 3 of x.db served from l2"), "{line}");
        assert!(line.contains("fetched from the grid"), "{line}");
        assert!(line.contains("at byte 100"), "{line}");
        assert!(v.describe(4, "l1", 1, 0, None).contains("not recorded"));
    }

    #[test]
    fn first_difference_finds_the_byte() {
        assert_eq!(first_difference(b"abcd", b"abxd"), Some(2));
        assert_eq!(first_difference(b"abcd", b"abcd"), None);
    }
}
