//! The sidecar file `.<database>-waffle`, hidden beside the database: what a
//! clean close saved for a warm restart, and whether this process is the only
//! one with the database open through waffle.
//!
//! Several processes may cache one database at once (each under its own
//! cache identity; they notice each other's commits as they notice any other
//! writer's, see the adapter). The sidecar is held with a shared flock by
//! every process that has the database open. An open that can take the lock
//! exclusively is alone: it reads what the last clean close saved, then marks
//! the sidecar dirty (synced) before any page is served, then shares the
//! lock. An open that finds others starts cold and leaves the file alone. A
//! close that can take the lock exclusively is the last one out and writes
//! its versions, identity and adapter state back; any other close leaves the
//! sidecar dirty.
//!
//! Crash safety: a crash leaves a dirty sidecar (or one that another open
//! made dirty), the next open picks a new random cache identity, and every
//! grid copy from before the crash is under keys nobody will ask for again.
//! A warm restart also requires the database file to be exactly as the clean
//! close left it (device, inode, size, mtime); the adapter checks its own
//! state again under the database's first lock.
//!
//! Layout (little-endian):
//!
//! ```text
//!  0 magic "WFSC" | 4 format u32 | 8 pid u32 | 12 clean u8, 3 pad | 16 cache_id u64 | 24 page_bytes u64
//! 32 db dev u64 | 40 db ino u64 | 48 db size u64 | 56 db mtime ns i64
//! 64 default version u64 | 72 0 u64 (unused) | 80 count u64 | 88 versions count*u64
//!    | extra_len u32 | extra (the adapter's state) | crc32c u32 over all before
//! ```

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::versions::{SavedVersions, MAX_PAGES};

const MAGIC: [u8; 4] = *b"WFSC";
/// How long an open tries for a lock: a close that holds it exclusively for a
/// moment to write, or a child forked by another thread of this process that
/// shares the lock of a sidecar we closed until it execs (O_CLOEXEC then
/// drops it), both take milliseconds.
const LOCK_WAIT_MS: u64 = 2_000;
const LOCK_RETRY_MS: u64 = 5;
const FORMAT: u32 = 3;
const FIXED_BYTES: usize = 88;
/// Bound of the adapter's state in a sidecar.
pub const MAX_EXTRA_BYTES: usize = 4096;

/// What a warm open restores.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Warm {
    pub cache_id: u64,
    pub page_bytes: u64,
    pub saved: SavedVersions,
    /// What the adapter saved with it (its own view of the file).
    pub extra: Vec<u8>,
}

#[derive(Debug)]
pub struct SidecarError {
    sidecar: PathBuf,
    err: io::Error,
}

impl std::fmt::Display for SidecarError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot use {}: {}", self.sidecar.display(), self.err)
    }
}

impl std::error::Error for SidecarError {}

/// The database file as a clean close left it: which file (device, inode)
/// and, as far as a stat tells, its contents (size, mtime). The hot list
/// (hot_list.rs) records the same.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DbIdentity {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime_ns: i64,
}

impl DbIdentity {
    pub fn of(db: &Path) -> Option<DbIdentity> {
        let m = std::fs::metadata(db).ok()?;
        Some(DbIdentity {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime_ns: m.mtime() * 1_000_000_000 + m.mtime_nsec(),
        })
    }
}

/// The held sidecar of an open database. Dropping it without
/// [`Sidecar::close_clean`] leaves it as it is (dirty, if this open was alone).
pub struct Sidecar {
    file: File,
    path: PathBuf,
    db: PathBuf,
}

fn flock(file: &File, op: libc::c_int) -> io::Result<bool> {
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(file.as_raw_fd(), op | libc::LOCK_NB) } == 0 {
        return Ok(true);
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(false)
    } else {
        Err(err)
    }
}

impl Sidecar {
    /// `.<name>-waffle` beside the database: hidden, so that programs (and
    /// SQLite's own tests) that list a directory see only SQLite's files.
    pub fn path_for(db: &Path) -> PathBuf {
        let mut name = std::ffi::OsString::from(".");
        name.push(db.file_name().unwrap_or(db.as_os_str()));
        name.push("-waffle");
        db.with_file_name(name)
    }

    /// Joins the processes that have `db` open. Returns what a clean close
    /// saved if this open is alone and it still applies.
    pub fn acquire(db: &Path) -> Result<(Sidecar, Option<Warm>), SidecarError> {
        let path = Self::path_for(db);
        let io_err = |err| SidecarError { sidecar: path.clone(), err };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o644)
            .custom_flags(libc::O_CLOEXEC)
            .open(&path)
            .map_err(io_err)?;
        let sidecar = Sidecar { file, path: path.clone(), db: db.to_path_buf() };
        let deadline = Instant::now() + Duration::from_millis(LOCK_WAIT_MS);
        loop {
            if flock(&sidecar.file, libc::LOCK_EX).map_err(io_err)? {
                let mut bytes = Vec::new();
                (&sidecar.file).read_to_end(&mut bytes).map_err(io_err)?;
                let warm = decode(&bytes).and_then(|(ident, warm)| (Some(ident) == DbIdentity::of(db)).then_some(warm));
                // Dirty before anything is served: a crash from here on means a cold start.
                sidecar.write(&encode(false, 0, 0, None, None, &[])).map_err(io_err)?;
                sidecar.share(deadline);
                return Ok((sidecar, warm));
            }
            if flock(&sidecar.file, libc::LOCK_SH).map_err(io_err)? {
                return Ok((sidecar, None)); // others have it open: start cold, touch nothing
            }
            if Instant::now() >= deadline {
                eprintln!("waffle: {} stayed locked for {LOCK_WAIT_MS} ms; opening cold without it", path.display());
                return Ok((sidecar, None));
            }
            std::thread::sleep(Duration::from_millis(LOCK_RETRY_MS));
        }
    }

    /// Turns the exclusive lock into a shared one (not atomic in Linux: another
    /// open may slip in between, finds the sidecar dirty and starts cold).
    fn share(&self, deadline: Instant) {
        while !matches!(flock(&self.file, libc::LOCK_SH), Ok(true)) {
            if Instant::now() >= deadline {
                eprintln!("waffle: could not share the lock on {}; the next close may not save", self.path.display());
                return;
            }
            std::thread::sleep(Duration::from_millis(LOCK_RETRY_MS));
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Takes the lock exclusively if this is the last process with the
    /// database open (then [`Sidecar::close_clean`] saves); false otherwise.
    /// What is written meanwhile (the hot list) no open can read half-done.
    pub fn lock_last_out(&self) -> io::Result<bool> {
        flock(&self.file, libc::LOCK_EX)
    }

    /// Saves what a warm restart needs, after the database's last write, if
    /// this is the last process with the database open. Returns whether it saved.
    pub fn close_clean(self, cache_id: u64, page_bytes: u64, saved: &SavedVersions, extra: &[u8]) -> io::Result<bool> {
        if !flock(&self.file, libc::LOCK_EX)? {
            return Ok(false); // another process still has it open: the sidecar stays dirty
        }
        let ident = DbIdentity::of(&self.db);
        self.write(&encode(true, cache_id, page_bytes, ident, Some(saved), extra))?;
        Ok(true)
    }

    fn write(&self, bytes: &[u8]) -> io::Result<()> {
        self.file.set_len(0)?;
        self.file.write_all_at(bytes, 0)?;
        self.file.sync_data()
    }
}

fn encode(
    clean: bool,
    cache_id: u64,
    page_bytes: u64,
    ident: Option<DbIdentity>,
    saved: Option<&SavedVersions>,
    extra: &[u8],
) -> Vec<u8> {
    assert!(extra.len() <= MAX_EXTRA_BYTES, "sidecar: adapter state of {} bytes", extra.len());
    let ident = ident.unwrap_or(DbIdentity { dev: 0, ino: 0, size: 0, mtime_ns: 0 });
    let clean = clean && saved.is_some();
    let empty = SavedVersions { default: 0, table: Vec::new() };
    let saved = saved.unwrap_or(&empty);
    let mut b = Vec::with_capacity(FIXED_BYTES + saved.table.len() * 8 + 8 + extra.len());
    b.extend_from_slice(&MAGIC);
    b.extend_from_slice(&FORMAT.to_le_bytes());
    b.extend_from_slice(&std::process::id().to_le_bytes());
    b.extend_from_slice(&[clean as u8, 0, 0, 0]);
    for v in [cache_id, page_bytes, ident.dev, ident.ino, ident.size] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    b.extend_from_slice(&ident.mtime_ns.to_le_bytes());
    for v in [saved.default, 0, saved.table.len() as u64] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    for v in &saved.table {
        b.extend_from_slice(&v.to_le_bytes());
    }
    b.extend_from_slice(&(extra.len() as u32).to_le_bytes());
    b.extend_from_slice(extra);
    let crc = crc32c::crc32c(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

/// A clean, intact sidecar's contents; None for anything else.
fn decode(b: &[u8]) -> Option<(DbIdentity, Warm)> {
    if b.len() < FIXED_BYTES + 8 || b[0..4] != MAGIC {
        return None;
    }
    let body = &b[..b.len() - 4];
    if crc32c::crc32c(body) != u32::from_le_bytes(b[b.len() - 4..].try_into().ok()?) {
        return None;
    }
    let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
    if u32::from_le_bytes(b[4..8].try_into().ok()?) != FORMAT || b[12] != 1 {
        return None;
    }
    let count = u64_at(80);
    if count > MAX_PAGES {
        return None;
    }
    let extra_at = FIXED_BYTES as u64 + count * 8;
    if (body.len() as u64) < extra_at + 4 {
        return None;
    }
    let extra_at = extra_at as usize;
    let extra_len = u32::from_le_bytes(b[extra_at..extra_at + 4].try_into().ok()?) as usize;
    if extra_len > MAX_EXTRA_BYTES || body.len() != extra_at + 4 + extra_len {
        return None;
    }
    let table: Vec<u64> = (0..count as usize).map(|i| u64_at(FIXED_BYTES + i * 8)).collect();
    let saved = SavedVersions { default: u64_at(64), table };
    let ident = DbIdentity { dev: u64_at(32), ino: u64_at(40), size: u64_at(48), mtime_ns: u64_at(56) as i64 };
    let extra = b[extra_at + 4..extra_at + 4 + extra_len].to_vec();
    Some((ident, Warm { cache_id: u64_at(16), page_bytes: u64_at(24), saved, extra }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn temp_db(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("waffle-sidecar-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let db = dir.join("x.db");
        File::create(&db).unwrap().write_all(b"0123456789").unwrap();
        db
    }

    /// A temp database whose sidecar a clean close wrote (cache id 5, 4 KiB pages, `saved()`).
    fn closed_cleanly(name: &str) -> PathBuf {
        let db = temp_db(name);
        let (s, _) = Sidecar::acquire(&db).unwrap();
        assert!(s.close_clean(5, 4096, &saved(), &[]).unwrap(), "alone: the close saves");
        db
    }

    fn saved() -> SavedVersions {
        SavedVersions { default: 2, table: vec![0, 5, 9, 3] }
    }

    #[test]
    fn clean_close_then_warm_open() {
        let db = temp_db("warm");
        let (s, warm) = Sidecar::acquire(&db).unwrap();
        assert_eq!(warm, None);
        assert!(s.close_clean(77, 4096, &saved(), b"adapter").unwrap());
        let (s, warm) = Sidecar::acquire(&db).unwrap();
        assert_eq!(warm, Some(Warm { cache_id: 77, page_bytes: 4096, saved: saved(), extra: b"adapter".to_vec() }));
        drop(s); // no clean close: a crash as far as the sidecar knows
        let (_s, warm) = Sidecar::acquire(&db).unwrap();
        assert_eq!(warm, None, "after a dirty close the next open is cold");
    }

    #[test]
    fn several_processes_share_and_only_the_last_out_saves() {
        let db = closed_cleanly("shared");
        // flock conflicts between two open file descriptions, even in one
        // process: two acquires here behave as two processes.
        let (a, warm_a) = Sidecar::acquire(&db).unwrap();
        let t0 = Instant::now();
        let (b, warm_b) = Sidecar::acquire(&db).unwrap();
        assert!(t0.elapsed() < Duration::from_millis(LOCK_WAIT_MS), "a second open does not wait");
        assert!(warm_a.is_some(), "the first open is alone: warm");
        assert_eq!(warm_b, None, "an open beside another starts cold");
        assert!(!a.close_clean(6, 4096, &saved(), &[]).unwrap(), "b is still open: a does not save");
        assert!(b.close_clean(7, 4096, &saved(), &[]).unwrap(), "b is the last out");
        let (_c, warm_c) = Sidecar::acquire(&db).unwrap();
        assert_eq!(warm_c.map(|w| w.cache_id), Some(7));
    }

    #[test]
    fn a_crash_beside_another_process_leaves_the_sidecar_dirty() {
        let db = closed_cleanly("crash-shared");
        let (a, warm) = Sidecar::acquire(&db).unwrap();
        assert!(warm.is_some());
        let (b, _) = Sidecar::acquire(&db).unwrap();
        drop(a); // a crashes
        drop(b); // b crashes too
        let (_c, warm) = Sidecar::acquire(&db).unwrap();
        assert_eq!(warm, None);
    }

    #[test]
    fn a_write_between_sessions_makes_the_open_cold() {
        let db = closed_cleanly("modified");
        std::fs::OpenOptions::new().append(true).open(&db).unwrap().write_all(b"more").unwrap();
        let (_s, warm) = Sidecar::acquire(&db).unwrap();
        assert_eq!(warm, None);
    }

    #[test]
    fn a_corrupt_sidecar_is_a_cold_start() {
        let db = closed_cleanly("corrupt");
        let path = Sidecar::path_for(&db);
        let mut b = std::fs::read(&path).unwrap();
        for i in 0..b.len() {
            b[i] ^= 0x40;
            assert!(decode(&b).is_none(), "flip at {i}");
            b[i] ^= 0x40;
        }
        assert!(decode(&b).is_some());
    }
}
