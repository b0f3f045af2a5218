//! The sidecar file `<database>-waffle`: who owns the database, and what a
//! clean close saved for a warm restart.
//!
//! One process at a time caches a database: the sidecar is held with an
//! exclusive flock for as long as the database is open, and holds the owner's
//! pid so a second process can say who is in its way.
//!
//! Crash safety: on open the sidecar is rewritten as "dirty" (and synced)
//! before any page is served. Only a clean close writes the versions and the
//! cache identity back. A crash therefore leaves a dirty sidecar, the next open
//! picks a new random cache identity, and every grid copy from before the
//! crash is under keys nobody will ask for again. A warm restart also requires
//! the database file to be exactly as the clean close left it (device, inode,
//! size, mtime), so a write by plain SQLite in between makes the open cold.
//!
//! Layout (little-endian):
//!
//! ```text
//!  0 magic "WFSC" | 4 format u32 | 8 pid u32 | 12 clean u8, 3 pad | 16 cache_id u64 | 24 page_bytes u64
//! 32 db dev u64 | 40 db ino u64 | 48 db size u64 | 56 db mtime ns i64
//! 64 floor u64 | 72 next u64 | 80 count u64 | 88 versions count*u64 | crc32c u32 over all before
//! ```

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use crate::versions::{SavedVersions, MAX_PAGES};

const MAGIC: [u8; 4] = *b"WFSC";
/// How long an open waits when the lock is held under our own pid: a child
/// forked by another thread of this process shares the lock of a sidecar we
/// have closed until it execs (O_CLOEXEC then drops it), a matter of
/// milliseconds.
const OWN_LOCK_WAIT_MS: u64 = 2_000;
const FORMAT: u32 = 1;
const FIXED_BYTES: usize = 88;

/// What a warm open restores.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Warm {
    pub cache_id: u64,
    pub page_bytes: u64,
    pub saved: SavedVersions,
}

#[derive(Debug)]
pub enum SidecarError {
    /// Another live process holds the database.
    Owned { pid: Option<u32>, sidecar: PathBuf },
    Io { sidecar: PathBuf, err: io::Error },
}

impl std::fmt::Display for SidecarError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SidecarError::Owned { pid: Some(pid), sidecar } => write!(
                f,
                "the database is already open through waffle in process {pid} (lock held on {}); close it there first",
                sidecar.display()
            ),
            SidecarError::Owned { pid: None, sidecar } => write!(
                f,
                "the database is already open through waffle in another process (lock held on {})",
                sidecar.display()
            ),
            SidecarError::Io { sidecar, err } => write!(f, "cannot use {}: {err}", sidecar.display()),
        }
    }
}

impl std::error::Error for SidecarError {}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct DbIdentity {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i64,
}

impl DbIdentity {
    fn of(db: &Path) -> Option<DbIdentity> {
        let m = std::fs::metadata(db).ok()?;
        Some(DbIdentity { dev: m.dev(), ino: m.ino(), size: m.size(), mtime_ns: m.mtime() * 1_000_000_000 + m.mtime_nsec() })
    }
}

/// The held sidecar of an open database. Dropping it without
/// [`Sidecar::close_clean`] leaves it dirty: the next open is cold.
pub struct Sidecar {
    file: File,
    path: PathBuf,
    db: PathBuf,
}

impl Sidecar {
    pub fn path_for(db: &Path) -> PathBuf {
        let mut s = db.as_os_str().to_owned();
        s.push("-waffle");
        PathBuf::from(s)
    }

    /// Takes ownership of `db`. Returns what a clean close saved, if it still applies.
    pub fn acquire(db: &Path) -> Result<(Sidecar, Option<Warm>), SidecarError> {
        let path = Self::path_for(db);
        let io_err = |err| SidecarError::Io { sidecar: path.clone(), err };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o644)
            .custom_flags(libc::O_CLOEXEC)
            .open(&path)
            .map_err(io_err)?;
        let deadline = std::time::Instant::now() + std::time::Duration::from_millis(OWN_LOCK_WAIT_MS);
        // SAFETY: flock on a descriptor we own.
        while unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let err = io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::EWOULDBLOCK) {
                return Err(io_err(err));
            }
            let pid = read_pid(&file);
            // Another process: refuse at once. Our own pid: a forked child may still hold
            // the lock of our last close until it execs, so wait a little (bounded).
            if pid != Some(std::process::id()) || std::time::Instant::now() >= deadline {
                return Err(SidecarError::Owned { pid, sidecar: path });
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let mut bytes = Vec::new();
        (&file).read_to_end(&mut bytes).map_err(io_err)?;
        let warm = decode(&bytes).and_then(|(ident, warm)| (Some(ident) == DbIdentity::of(db)).then_some(warm));
        let sidecar = Sidecar { file, path: path.clone(), db: db.to_path_buf() };
        // Dirty before anything is served: a crash from here on means a cold start.
        sidecar.write(&encode(false, 0, 0, None, None)).map_err(io_err)?;
        Ok((sidecar, warm))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Saves what a warm restart needs, after the database's last write.
    pub fn close_clean(self, cache_id: u64, page_bytes: u64, saved: &SavedVersions) -> io::Result<()> {
        let ident = DbIdentity::of(&self.db);
        self.write(&encode(true, cache_id, page_bytes, ident, Some(saved)))
    }

    fn write(&self, bytes: &[u8]) -> io::Result<()> {
        self.file.set_len(0)?;
        self.file.write_all_at(bytes, 0)?;
        self.file.sync_data()
    }
}

fn read_pid(file: &File) -> Option<u32> {
    let mut head = [0u8; 12];
    file.read_exact_at(&mut head, 0).ok()?;
    (head[0..4] == MAGIC).then(|| u32::from_le_bytes(head[8..12].try_into().unwrap()))
}

fn encode(
    clean: bool,
    cache_id: u64,
    page_bytes: u64,
    ident: Option<DbIdentity>,
    saved: Option<&SavedVersions>,
) -> Vec<u8> {
    let ident = ident.unwrap_or(DbIdentity { dev: 0, ino: 0, size: 0, mtime_ns: 0 });
    let clean = clean && saved.is_some();
    let empty = SavedVersions { floor: 0, next: 1, table: Vec::new() };
    let saved = saved.unwrap_or(&empty);
    let mut b = Vec::with_capacity(FIXED_BYTES + saved.table.len() * 8 + 4);
    b.extend_from_slice(&MAGIC);
    b.extend_from_slice(&FORMAT.to_le_bytes());
    b.extend_from_slice(&std::process::id().to_le_bytes());
    b.extend_from_slice(&[clean as u8, 0, 0, 0]);
    for v in [cache_id, page_bytes, ident.dev, ident.ino, ident.size] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    b.extend_from_slice(&ident.mtime_ns.to_le_bytes());
    for v in [saved.floor, saved.next, saved.table.len() as u64] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    for v in &saved.table {
        b.extend_from_slice(&v.to_le_bytes());
    }
    let crc = crc32c::crc32c(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

/// A clean, intact sidecar's contents; None for anything else.
fn decode(b: &[u8]) -> Option<(DbIdentity, Warm)> {
    if b.len() < FIXED_BYTES + 4 || b[0..4] != MAGIC {
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
    if count > MAX_PAGES || body.len() as u64 != FIXED_BYTES as u64 + count * 8 {
        return None;
    }
    let table: Vec<u64> = (0..count as usize).map(|i| u64_at(FIXED_BYTES + i * 8)).collect();
    let saved = SavedVersions { floor: u64_at(64), next: u64_at(72), table };
    if saved.next <= saved.floor || saved.table.iter().any(|&v| v >= saved.next) {
        return None;
    }
    let ident = DbIdentity { dev: u64_at(32), ino: u64_at(40), size: u64_at(48), mtime_ns: u64_at(56) as i64 };
    Some((ident, Warm { cache_id: u64_at(16), page_bytes: u64_at(24), saved }))
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

    fn saved() -> SavedVersions {
        SavedVersions { floor: 2, next: 10, table: vec![0, 5, 9, 3] }
    }

    #[test]
    fn clean_close_then_warm_open() {
        let db = temp_db("warm");
        let (s, warm) = Sidecar::acquire(&db).unwrap();
        assert_eq!(warm, None);
        s.close_clean(77, 4096, &saved()).unwrap();
        let (s, warm) = Sidecar::acquire(&db).unwrap();
        assert_eq!(warm, Some(Warm { cache_id: 77, page_bytes: 4096, saved: saved() }));
        drop(s); // no clean close: a crash as far as the sidecar knows
        let (_s, warm) = Sidecar::acquire(&db).unwrap();
        assert_eq!(warm, None, "after a dirty close the next open is cold");
    }

    #[test]
    fn a_second_owner_is_told_the_pid() {
        let db = temp_db("owned");
        let (_s, _) = Sidecar::acquire(&db).unwrap();
        // flock conflicts between two open file descriptions, even in one
        // process; under our own pid acquire waits (bounded) before it says so.
        let t0 = std::time::Instant::now();
        match Sidecar::acquire(&db) {
            Err(SidecarError::Owned { pid, .. }) => assert_eq!(pid, Some(std::process::id())),
            other => panic!("expected Owned, got {:?}", other.map(|_| ())),
        }
        assert!(t0.elapsed() >= std::time::Duration::from_millis(OWN_LOCK_WAIT_MS), "it waited for a forked child");
    }

    #[test]
    fn a_write_between_sessions_makes_the_open_cold() {
        let db = temp_db("modified");
        let (s, _) = Sidecar::acquire(&db).unwrap();
        s.close_clean(1, 4096, &saved()).unwrap();
        std::fs::OpenOptions::new().append(true).open(&db).unwrap().write_all(b"more").unwrap();
        let (_s, warm) = Sidecar::acquire(&db).unwrap();
        assert_eq!(warm, None);
    }

    #[test]
    fn a_corrupt_sidecar_is_a_cold_start() {
        let db = temp_db("corrupt");
        let (s, _) = Sidecar::acquire(&db).unwrap();
        s.close_clean(1, 4096, &saved()).unwrap();
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
