//! The sidecar file `.<database>-waffle`, hidden beside the database: what a
//! clean close saved for a warm restart, and whether this process is the only
//! one with the database open through waffle.
//!
//! Several processes may cache one database at once (each under its own
//! cache identity; they notice each other's commits as they notice any other
//! writer's, see the adapter). The sidecar is held with a shared flock by
//! every process that has the database open. An open that can take the lock
//! exclusively is alone: it reads what the last clean close saved, then
//! shares the lock; a warm one marks the sidecar dirty (synced,
//! [`DirtyMark`]) before its cache first gives a page a new version. An open
//! that finds others starts cold and leaves the file alone. A close that can
//! take the lock exclusively is the last one out and writes its versions,
//! identity and adapter state back (nothing, when the file says them already:
//! a warm open that only read); any other close leaves the sidecar as it is.
//!
//! Crash safety: a crash after a change leaves a dirty sidecar (or one that
//! another open made dirty), the next open picks a new random cache identity,
//! and every grid copy from before the crash is under keys nobody will ask
//! for again. A warm open that changed no version served and pushed only
//! copies at the saved versions: its crash leaves the sidecar clean, and
//! those copies as good as the clean close left them.
//! A warm restart also requires the database file to be exactly as the clean
//! close left it (device, inode, size, mtime); the adapter checks its own
//! state again under the database's first lock.
//!
//! Files beside the database (this one and the hot list, hot_list.rs) are
//! made as SQLite makes its journals (side_file.rs): the database's permission bits and, when
//! running as root, its owner (os_unix.c, findCreateFileMode, robustFchown).
//! Anyone who can create a file in the directory could plant a symlink or a
//! file of their own there, so an existing one is opened with O_NOFOLLOW and
//! used only if it is a regular file with one link, owned by this user (or,
//! as root, by the database's owner); a new version is never written in
//! place but to a temporary file of a random name created O_EXCL|O_NOFOLLOW,
//! then renamed over it. The one write in place is the dirty mark (5 bytes:
//! the pid and the clean flag; a warm open's at its first change, a cold
//! open's over a clean close's sidecar that no longer applies), into the file
//! it locked and checked, opened again O_NOFOLLOW and refused if it is another inode.
//! Anything wrong (a symlink, another owner, a
//! directory this user cannot write) means no sidecar: a cold open, one
//! warning, nothing written, never a refused open. Garbage of our own (bad
//! checksum, a size the database cannot need) is a cold open with one
//! warning. A read-only open (`mode=ro`, `immutable=1`) touches nothing.
//!
//! The lock and renames: a new version is locked exclusively before it is
//! renamed into place (no one can lock it first), and every lock taken is
//! checked to be on the file at the path still (the classic lock file): a
//! lock on a version renamed over since it was opened is dropped and the path
//! opened again.
//!
//! Layout (little-endian):
//!
//! ```text
//!  0 magic "WFSC" | 4 format u32 | 8 pid u32 | 12 clean u8, 3 pad | 16 cache_id u64 | 24 page_bytes u64
//! 32 db dev u64 | 40 db ino u64 | 48 db size u64 | 56 db mtime ns i64
//! 64 default version u64 | 72 0 u64 (unused) | 80 count u64 | 88 versions count*u64
//!    | extra_len u32 | extra (the adapter's state) | crc32c u32 over all before
//! ```

use std::fs::{File, Metadata};
use std::io::{self, Read};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::side_file::{
    create_beside, install, is_at, open_beside, open_held_for_write, sync_dir_of, write_temp, Beside,
};
use crate::versions::{SavedVersions, MAX_PAGES};

const MAGIC: [u8; 4] = *b"WFSC";
/// How long an open tries for a lock: a close that holds it exclusively for a
/// moment to write, or a child forked by another thread of this process that
/// shares the lock of a sidecar we closed until it execs (O_CLOEXEC then
/// drops it), both take milliseconds.
const LOCK_WAIT_MS: u64 = 2_000;
const LOCK_RETRY_MS: u64 = 5;
/// Times a lock follows a new version renamed over the one it locked before giving up.
const MAX_REOPENS: usize = 100;
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
    /// From the metadata of the descriptor the database was opened with (a
    /// stat of the path may see another file renamed over it meanwhile).
    pub fn from_metadata(m: &Metadata) -> DbIdentity {
        DbIdentity { dev: m.dev(), ino: m.ino(), size: m.size(), mtime_ns: m.mtime() * 1_000_000_000 + m.mtime_nsec() }
    }

    pub fn of(db: &Path) -> Option<DbIdentity> {
        std::fs::metadata(db).ok().map(|m| DbIdentity::from_metadata(&m))
    }
}

// ---------------------------------------------------------------- files beside the database
// (made, opened and replaced by side_file.rs)

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

/// Longest version table a database of `db_bytes` justifies: the table
/// covers the largest size the file had, grown a quarter at a time
/// (versions.rs). A longer one is garbage, or the file shrank since: then a
/// cold start (the next clean close saves a table of its size).
fn max_table_len(db_bytes: u64, page_bytes: u64) -> u64 {
    ((db_bytes / page_bytes.max(512) + 1) * 5 / 4 + 64).min(MAX_PAGES)
}

/// The most bytes a sidecar of a database of `db_bytes` can have.
fn max_sidecar_bytes(db_bytes: u64) -> u64 {
    (FIXED_BYTES + 4 + MAX_EXTRA_BYTES + 4) as u64 + max_table_len(db_bytes, 512) * 8
}

/// Prints the one warning of an open that goes on without its sidecar.
fn warn_cold(path: &Path, why: &dyn std::fmt::Display) {
    crate::warn!(key: format!("sidecar {}", path.display()), "cannot use the sidecar: {}: {why}; opening cold", path.display());
}

// ---------------------------------------------------------------- the sidecar

/// The held sidecar of an open database. Dropping it without
/// [`Sidecar::close_clean`] leaves it as it is (dirty, if this open was alone).
pub struct Sidecar {
    /// Locked and read, never written (new versions are renamed over it).
    file: File,
    path: PathBuf,
    /// The database as opened: how new files are made and whose they may be.
    db: Metadata,
}

/// A warm open's way to mark its sidecar dirty, from wherever its first
/// change of a version happens: the sidecar's path and the device and inode
/// of the file whose lock the open holds.
pub struct DirtyMark {
    path: PathBuf,
    like: Beside,
    held: (u64, u64),
}

impl DirtyMark {
    /// Marks the sidecar dirty in place (the file this open locked, still at
    /// its path, else an error): this process's pid and the clean byte, bytes
    /// 8..13, which lie in one sector (on the disk whole or not at all),
    /// synced. A new version by rename would need the directory synced too.
    /// The checksum is left stale: `decode` reads a cleared clean byte as
    /// dirty before it. Another process can neither read nor replace the
    /// sidecar meanwhile: that takes the lock exclusively, and this open holds it shared.
    pub fn mark(&self) -> io::Result<()> {
        let file = open_held_for_write(&self.path, &self.like, self.held)?;
        let mut mark = [0u8; 5];
        mark[..4].copy_from_slice(&std::process::id().to_le_bytes());
        file.write_all_at(&mark, 8)?;
        file.sync_data()
    }
}

/// What the sidecar says to an open that has it alone.
#[derive(Debug)]
enum Found {
    /// A clean close's, for the database as opened: a warm open.
    Warm(Warm),
    /// A cold open already: a dirty mark, or a file just made.
    Cold,
    /// A clean close's for the database as it was then: a cold open, once
    /// marked dirty in place.
    Stale,
    /// Not one of ours to read (a bad checksum, a length the database cannot
    /// need, unreadable): a cold open, once replaced by a dirty one.
    Garbage,
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

    /// Joins the processes that have the database at `db_path` open; `db`:
    /// the metadata of the descriptor it was opened with. Returns the held
    /// sidecar (None: a read-only open, or it cannot be used, said once on
    /// stderr) and what a clean close saved if this open is alone and it
    /// still applies. Never fails: without a sidecar the open is cold.
    pub fn acquire(db_path: &Path, db: &Metadata, read_only: bool) -> (Option<Sidecar>, Option<Warm>) {
        if read_only {
            return (None, None); // SQLITE_OPEN_READONLY, mode=ro, immutable=1: nothing is written beside it
        }
        let path = Self::path_for(db_path);
        match Self::join(path.clone(), db) {
            Ok((sidecar, warm)) => (Some(sidecar), warm),
            Err(e) => {
                warn_cold(&path, &e);
                (None, None)
            }
        }
    }

    fn join(path: PathBuf, db: &Metadata) -> io::Result<(Sidecar, Option<Warm>)> {
        let file = Self::open_or_create(&path, db)?;
        let mut sidecar = Sidecar { file, path, db: db.clone() };
        let deadline = Instant::now() + Duration::from_millis(LOCK_WAIT_MS);
        loop {
            if sidecar.lock(libc::LOCK_EX)? {
                let found = sidecar.read_found();
                // A warm one stays clean until the open first changes a version (the caller's
                // `dirty_mark`): an open that only reads serves and pushes the copies the saved
                // versions name, so a crash of it leaves them as good as the clean close did.
                // One that no longer applies is marked dirty in place (one sync), garbage is
                // replaced by a dirty one; one that already says cold (a dirty mark, an empty
                // file just made) is left as it is: the next open reads the same, and a cold
                // open pays no sync for it.
                match found {
                    Found::Stale => sidecar.dirty_mark()?.mark()?,
                    Found::Garbage => sidecar.replace(&encode(false, 0, 0, None, None, &[]), true)?,
                    Found::Warm(_) | Found::Cold => {}
                }
                sidecar.share(deadline)?;
                let warm = match found {
                    Found::Warm(warm) => Some(warm),
                    Found::Cold | Found::Stale | Found::Garbage => None,
                };
                return Ok((sidecar, warm));
            }
            if sidecar.lock(libc::LOCK_SH)? {
                return Ok((sidecar, None)); // others have it open: start cold, touch nothing
            }
            if Instant::now() >= deadline {
                return Err(io::Error::other(format!("stayed locked for {LOCK_WAIT_MS} ms")));
            }
            std::thread::sleep(Duration::from_millis(LOCK_RETRY_MS));
        }
    }

    /// The sidecar at `path`, made empty (a cold one) if there is none.
    fn open_or_create(path: &Path, db: &Metadata) -> io::Result<File> {
        for _ in 0..MAX_REOPENS {
            if let Some(file) = open_beside(path, &Beside::like(db))? {
                return Ok(file);
            }
            match create_beside(path, &Beside::like(db)) {
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue, // another open made it first
                made => return made,
            }
        }
        Err(io::Error::other("it kept appearing and disappearing"))
    }

    /// Takes the lock (`op`, not waiting) on the file at the path: a lock on a
    /// version renamed over since it was opened is worth nothing, so the path
    /// is opened again and locked again.
    fn lock(&mut self, op: libc::c_int) -> io::Result<bool> {
        for _ in 0..MAX_REOPENS {
            if !flock(&self.file, op)? {
                return Ok(false);
            }
            if is_at(&self.file, &self.path)? {
                return Ok(true);
            }
            self.file = Self::open_or_create(&self.path, &self.db)?; // the old descriptor's lock goes with it
        }
        Err(io::Error::other("it kept being replaced"))
    }

    /// Turns the exclusive lock into a shared one (not atomic in Linux: another
    /// open may slip in between, finds the sidecar dirty and starts cold).
    fn share(&mut self, deadline: Instant) -> io::Result<()> {
        while !self.lock(libc::LOCK_SH)? {
            if Instant::now() >= deadline {
                return Err(io::Error::other("could not share its lock"));
            }
            std::thread::sleep(Duration::from_millis(LOCK_RETRY_MS));
        }
        Ok(())
    }

    /// What the sidecar says to an open that is alone: what a clean close
    /// saved, if it applies to the database as opened; a garbage sidecar is
    /// said once.
    fn read_found(&self) -> Found {
        let limit = max_sidecar_bytes(self.db.size());
        let mut bytes = Vec::new();
        let read = (&self.file).take(limit + 1).read_to_end(&mut bytes);
        let why = match read.map(|_| decode(&bytes)) {
            Err(e) => e.to_string(),
            Ok(_) if bytes.len() as u64 > limit => format!("longer than {limit} bytes"),
            Ok(_) if bytes.is_empty() => return Found::Cold, // just made
            Ok(Err(why)) => why.to_string(),
            Ok(Ok(None)) => return Found::Cold, // dirty: a crash, or another process had it
            Ok(Ok(Some((ident, warm)))) => {
                let db = DbIdentity::from_metadata(&self.db);
                let fits = warm.saved.table.len() as u64 <= max_table_len(db.size, warm.page_bytes);
                return if ident == db && fits { Found::Warm(warm) } else { Found::Stale };
            }
        };
        crate::warn!(key: format!("sidecar {}", self.path.display()), "ignoring the sidecar: {}: {why}; opening cold", self.path.display());
        Found::Garbage
    }

    /// How this warm open's sidecar is marked dirty when the open first
    /// changes a page's version ([`DirtyMark::mark`]); until then it stays as
    /// the clean close wrote it.
    pub fn dirty_mark(&self) -> io::Result<DirtyMark> {
        let held = self.file.metadata()?;
        Ok(DirtyMark { path: self.path.clone(), like: Beside::like(&self.db), held: (held.dev(), held.ino()) })
    }

    /// Puts a new version in place (holding the exclusive lock): written to a
    /// temporary file, locked before the rename so that no open can lock it
    /// first, renamed over the sidecar; its lock is then this one's.
    /// `durable`: synced and its rename too, before this returns (a dirty
    /// mark); else a crash of the machine may leave the old version, a short
    /// one or none, each read as a cold start (a clean close's: warmth is all
    /// it would buy).
    fn replace(&mut self, bytes: &[u8], durable: bool) -> io::Result<()> {
        let (file, tmp) = write_temp(&self.path, &Beside::like(&self.db), bytes, durable)?;
        if !matches!(flock(&file, libc::LOCK_EX), Ok(true)) {
            let _ = std::fs::remove_file(&tmp);
            return Err(io::Error::other("cannot lock a new version"));
        }
        install(&tmp, &self.path)?;
        if durable {
            sync_dir_of(&self.path)?;
        }
        self.file = file;
        Ok(())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// In a forked child, closes the child's copy of the descriptor its lock is held on: a flock
    /// belongs to the open file description, which the copy would keep locked after the parent
    /// let go, so that a later open waits out `LOCK_WAIT_MS` and starts cold. The parent's
    /// descriptor and lock are untouched.
    ///
    /// # Safety
    /// Only in a forked child, for a sidecar of its parent's, which the caller then forgets: never
    /// used or dropped again (its descriptor number may be reused).
    pub unsafe fn close_copy_in_child(&self) {
        // SAFETY: the child's own copy of a descriptor this struct holds (the caller's promise).
        unsafe { libc::close(self.file.as_raw_fd()) };
    }

    /// Takes the lock exclusively if this is the last process with the
    /// database open (then [`Sidecar::close_clean`] saves); false otherwise.
    /// What is written meanwhile (the hot list) no open can read half-done.
    pub fn lock_last_out(&mut self) -> io::Result<bool> {
        self.lock(libc::LOCK_EX)
    }

    /// Saves what a warm restart needs, after the database's last write, if
    /// this is the last process with the database open. `db`: the metadata of
    /// the database's descriptor now. Returns whether it saved.
    pub fn close_clean(
        mut self,
        cache_id: u64,
        page_bytes: u64,
        saved: &SavedVersions,
        extra: &[u8],
        db: &Metadata,
    ) -> io::Result<bool> {
        if !self.lock(libc::LOCK_EX)? {
            return Ok(false); // another process still has it open: the sidecar stays dirty
        }
        if saved.table.len() as u64 > max_table_len(db.size(), page_bytes) {
            return Ok(false); // the file shrank: the next open would refuse the table anyway
        }
        let ident = DbIdentity::from_metadata(db);
        let bytes = encode(true, cache_id, page_bytes, Some(ident), Some(saved), extra);
        if !self.already_says(&bytes)? {
            self.replace(&bytes, false)?;
        }
        Ok(true)
    }

    /// Whether the file held (locked, at the path) already says what `bytes` say (the pid of
    /// the close that wrote it, and so its checksum, may differ): then a close writes nothing
    /// (a warm open that only read leaves the clean close's file as it found it).
    fn already_says(&self, bytes: &[u8]) -> io::Result<bool> {
        let mut now = vec![0u8; bytes.len() + 1];
        let mut got = 0;
        while got < now.len() {
            match self.file.read_at(&mut now[got..], got as u64)? {
                0 => break,
                n => got += n,
            }
        }
        let said = decode(&now[..got]);
        Ok(got == bytes.len() && matches!(said, Ok(Some(_))) && said == decode(bytes))
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

/// An intact sidecar's contents: Some for a clean close's, None for a dirty
/// one (a crash, or other processes had it); Err says why it is garbage.
fn decode(b: &[u8]) -> Result<Option<(DbIdentity, Warm)>, &'static str> {
    if b.len() < FIXED_BYTES + 8 || b[0..4] != MAGIC {
        return Err("too short or wrong magic");
    }
    if b[12] == 0 {
        return Ok(None); // dirty: marked in place (the sum no longer holds), or written so
    }
    let body = &b[..b.len() - 4];
    if crc32c::crc32c(body) != u32::from_le_bytes(b[b.len() - 4..].try_into().expect("4 bytes")) {
        return Err("checksum mismatch");
    }
    let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
    if u32::from_le_bytes(b[4..8].try_into().expect("4 bytes")) != FORMAT {
        return Err("another format version");
    }
    let count = u64_at(80);
    if count > MAX_PAGES || body.len() as u64 <= FIXED_BYTES as u64 + count * 8 + 3 {
        return Err("a table longer than the file");
    }
    let extra_at = FIXED_BYTES + count as usize * 8;
    let extra_len = u32::from_le_bytes(b[extra_at..extra_at + 4].try_into().expect("4 bytes")) as usize;
    if extra_len > MAX_EXTRA_BYTES || body.len() != extra_at + 4 + extra_len {
        return Err("lengths disagree");
    }
    let page_bytes = u64_at(24);
    if page_bytes != 0 && (!page_bytes.is_power_of_two() || !(512..=65536).contains(&page_bytes)) {
        return Err("not a page size");
    }
    if b[12] != 1 {
        return Ok(None);
    }
    let table: Vec<u64> = (0..count as usize).map(|i| u64_at(FIXED_BYTES + i * 8)).collect();
    let saved = SavedVersions { default: u64_at(64), table };
    let ident = DbIdentity { dev: u64_at(32), ino: u64_at(40), size: u64_at(48), mtime_ns: u64_at(56) as i64 };
    let extra = b[extra_at + 4..extra_at + 4 + extra_len].to_vec();
    Ok(Some((ident, Warm { cache_id: u64_at(16), page_bytes, saved, extra })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::side_file::euid;
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;

    fn temp_db(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("waffle-sidecar-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let db = dir.join("x.db");
        File::create(&db).unwrap().write_all(b"0123456789").unwrap();
        db
    }

    fn meta(db: &Path) -> Metadata {
        std::fs::metadata(db).unwrap()
    }

    fn acquire(db: &Path) -> (Option<Sidecar>, Option<Warm>) {
        Sidecar::acquire(db, &meta(db), false)
    }

    fn close(s: Option<Sidecar>, cache_id: u64, db: &Path) -> bool {
        s.expect("a sidecar").close_clean(cache_id, 4096, &saved(), &[], &meta(db)).unwrap()
    }

    /// A temp database whose sidecar a clean close wrote (cache id 5, 4 KiB pages, `saved()`).
    fn closed_cleanly(name: &str) -> PathBuf {
        let db = temp_db(name);
        let (s, _) = acquire(&db);
        assert!(close(s, 5, &db), "alone: the close saves");
        db
    }

    /// The warm open `s` changes its first version: the adapter's hook marks the sidecar dirty.
    fn first_change(s: &Option<Sidecar>) {
        s.as_ref().expect("a sidecar").dirty_mark().unwrap().mark().unwrap();
    }

    fn saved() -> SavedVersions {
        SavedVersions { default: 2, table: vec![0, 5, 9, 3] }
    }

    /// A file's bytes, inode and mtime: whether anything wrote it.
    fn fingerprint(path: &Path) -> (Vec<u8>, u64, i64, i64) {
        let m = std::fs::metadata(path).unwrap();
        (std::fs::read(path).unwrap(), m.ino(), m.mtime(), m.mtime_nsec())
    }

    fn root() -> bool {
        let root = euid() == 0;
        if !root {
            eprintln!("not root: cannot give a file to another user; this case is not run");
        }
        root
    }

    fn chown(path: &Path, uid: u32) {
        std::os::unix::fs::lchown(path, Some(uid), Some(uid)).unwrap();
    }

    #[test]
    fn clean_close_then_warm_open() {
        let db = temp_db("warm");
        let (s, warm) = acquire(&db);
        assert_eq!(warm, None);
        assert!(s.unwrap().close_clean(77, 4096, &saved(), b"adapter", &meta(&db)).unwrap());
        let (s, warm) = acquire(&db);
        let warm_again = Some(Warm { cache_id: 77, page_bytes: 4096, saved: saved(), extra: b"adapter".to_vec() });
        assert_eq!(warm, warm_again);
        drop(s); // a crash of an open that changed no version: the saved ones still hold
        let (s, warm) = acquire(&db);
        assert_eq!(warm, warm_again, "an open that only read leaves the sidecar clean");
        first_change(&s);
        drop(s); // a crash after a change
        let (_s, warm) = acquire(&db);
        assert_eq!(warm, None, "after a change and a crash the next open is cold");
    }

    #[test]
    fn several_processes_share_and_only_the_last_out_saves() {
        let db = closed_cleanly("shared");
        // flock conflicts between two open file descriptions, even in one
        // process: two acquires here behave as two processes.
        let (a, warm_a) = acquire(&db);
        let t0 = Instant::now();
        let (b, warm_b) = acquire(&db);
        assert!(t0.elapsed() < Duration::from_millis(LOCK_WAIT_MS), "a second open does not wait");
        assert!(warm_a.is_some(), "the first open is alone: warm");
        assert_eq!(warm_b, None, "an open beside another starts cold");
        assert!(!close(a, 6, &db), "b is still open: a does not save");
        assert!(close(b, 7, &db), "b is the last out");
        let (_c, warm_c) = acquire(&db);
        assert_eq!(warm_c.map(|w| w.cache_id), Some(7));
    }

    #[test]
    fn a_crash_beside_another_process_leaves_the_sidecar_dirty() {
        let db = closed_cleanly("crash-shared");
        let (a, warm) = acquire(&db);
        assert!(warm.is_some());
        let (b, _) = acquire(&db);
        first_change(&a); // while b has it open too
        drop(a); // a crashes
        drop(b); // b crashes too
        let (_c, warm) = acquire(&db);
        assert_eq!(warm, None);
    }

    #[test]
    fn a_write_between_sessions_makes_the_open_cold() {
        let db = closed_cleanly("modified");
        let path = Sidecar::path_for(&db);
        let clean = fingerprint(&path);
        std::fs::OpenOptions::new().append(true).open(&db).unwrap().write_all(b"more").unwrap();
        let (s, warm) = acquire(&db);
        assert_eq!(warm, None);
        // The clean close's sidecar no longer applies; it is marked dirty all the same, so that
        // nothing after a crash of this open can take it for a clean close: in place (one sync,
        // no rename), the pid and the clean byte, nothing else.
        let marked = fingerprint(&path);
        assert_eq!(marked.1, clean.1, "the same file");
        assert_eq!(marked.0[8..13], [&std::process::id().to_le_bytes()[..], &[0]].concat()[..], "pid, dirty");
        assert_eq!((&marked.0[..8], &marked.0[13..]), (&clean.0[..8], &clean.0[13..]), "nothing else");
        assert_eq!(decode(&marked.0), Ok(None), "read as dirty, not as garbage");
        drop(s);
        assert_eq!(acquire(&db).1, None);
    }

    #[test]
    fn a_cold_open_of_a_sidecar_that_says_cold_writes_nothing() {
        let db = closed_cleanly("dirty-again");
        let path = Sidecar::path_for(&db);
        let (s, warm) = acquire(&db);
        assert!(warm.is_some());
        first_change(&s);
        drop(s); // a crash: the sidecar stays dirty
        let dirty = fingerprint(&path);
        assert_eq!(dirty.0[12], 0, "the warm open's first change marked it dirty");
        let (s, warm) = acquire(&db);
        assert_eq!(warm, None, "after a crash: cold");
        assert_eq!(fingerprint(&path), dirty, "already dirty: not written again");
        drop(s); // crashes too
        assert_eq!(acquire(&db).1, None, "still cold");
        // A sidecar just made (empty) says cold too.
        let fresh = temp_db("fresh");
        let (s, _) = acquire(&fresh);
        assert_eq!(std::fs::read(Sidecar::path_for(&fresh)).unwrap(), b"", "made, nothing written");
        assert!(close(s, 9, &fresh), "the close saves");
        assert_eq!(acquire(&fresh).1.map(|w| w.cache_id), Some(9));
    }

    #[test]
    fn a_close_that_would_write_what_the_file_says_writes_nothing() {
        let db = closed_cleanly("unchanged");
        let path = Sidecar::path_for(&db);
        let clean = fingerprint(&path);
        // Another process's pid in it (and so another checksum): the same state all the same.
        let (ident, mut warm) = decode(&clean.0).unwrap().unwrap();
        let mut other = encode(true, warm.cache_id, warm.page_bytes, Some(ident), Some(&warm.saved), &warm.extra);
        other[8..12].copy_from_slice(&(std::process::id() ^ 1).to_le_bytes());
        let crc_at = other.len() - 4;
        let crc = crc32c::crc32c(&other[..crc_at]);
        other[crc_at..].copy_from_slice(&crc.to_le_bytes());
        std::fs::write(&path, &other).unwrap();
        let clean = fingerprint(&path);
        std::thread::sleep(Duration::from_millis(20)); // an mtime a write would change
        let (s, found) = acquire(&db);
        assert_eq!(found.as_ref(), Some(&warm), "warm");
        assert!(close(s, 5, &db), "alone: saved");
        assert_eq!(fingerprint(&path), clean, "the same state: not written, not renamed");
        // Each difference is written: the cache id, a version, the adapter's state, the database.
        let append = |db: &Path| std::fs::OpenOptions::new().append(true).open(db).unwrap().write_all(b"+").unwrap();
        type Change<'a> = &'a dyn Fn(&mut Warm, &Path);
        let changes: [Change; 4] = [
            &|w, _| w.cache_id += 1,
            &|w, _| w.saved.table[1] += 1,
            &|w, _| w.extra.push(7),
            &|_, db| append(db), // written between the open and the close
        ];
        for (n, change) in changes.iter().enumerate() {
            let (s, found) = acquire(&db);
            assert!(found.is_some(), "change {n}: warm");
            change(&mut warm, &db);
            let saved = s.unwrap().close_clean(warm.cache_id, warm.page_bytes, &warm.saved, &warm.extra, &meta(&db));
            assert!(saved.unwrap(), "change {n}: saved");
            let said = decode(&std::fs::read(&path).unwrap()).unwrap().unwrap();
            assert_eq!(
                said,
                (DbIdentity::of(&db).unwrap(), warm.clone()),
                "change {n}: the file says the close's state"
            );
        }
        // A dirty mark with nothing else changed: the close makes it clean again.
        let (s, _) = acquire(&db);
        first_change(&s);
        let saved = s.unwrap().close_clean(warm.cache_id, warm.page_bytes, &warm.saved, &warm.extra, &meta(&db));
        assert!(saved.unwrap());
        assert_eq!(acquire(&db).1, Some(warm), "clean again after the mark");
    }

    #[test]
    fn a_corrupt_sidecar_is_a_cold_start() {
        let db = closed_cleanly("corrupt");
        let path = Sidecar::path_for(&db);
        let mut b = std::fs::read(&path).unwrap();
        for i in 0..b.len() {
            b[i] ^= 0x40;
            assert!(!matches!(decode(&b), Ok(Some(_))), "flip at {i}");
            b[i] ^= 0x40;
        }
        assert!(matches!(decode(&b), Ok(Some(_))));
        std::fs::write(&path, b"garbage, not a sidecar at all").unwrap();
        let (s, warm) = acquire(&db);
        assert!(s.is_some() && warm.is_none(), "garbage of our own: replaced, cold");
    }

    #[test]
    fn new_versions_have_the_database_mode_and_are_renamed_into_place() {
        let db = closed_cleanly("mode");
        std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o640)).unwrap();
        let path = Sidecar::path_for(&db);
        let before = std::fs::metadata(&path).unwrap().ino();
        let (s, warm) = acquire(&db);
        assert!(warm.is_some());
        assert_eq!(std::fs::read(&path).unwrap()[12], 1, "a warm open leaves it clean until its first change");
        first_change(&s);
        let marked = std::fs::read(&path).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().ino(), before, "the warm open's dirty mark is in place");
        assert_eq!(marked[8..13], [&std::process::id().to_le_bytes()[..], &[0]].concat()[..], "pid, dirty");
        assert_eq!(decode(&marked), Ok(None), "read as dirty, not as garbage");
        assert!(close(s, 8, &db));
        let m = std::fs::metadata(&path).unwrap();
        assert_ne!(m.ino(), before, "the clean close's version is a new file renamed over the old one");
        assert_eq!(m.mode() & 0o777, 0o640, "the database's mode");
        let names: Vec<_> = std::fs::read_dir(db.parent().unwrap()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names.len(), 2, "the database and its sidecar, no temporary file left: {names:?}");
    }

    #[test]
    fn a_symlink_at_the_sidecar_is_never_followed() {
        let db = temp_db("symlink");
        let victim = db.with_file_name("victim");
        std::fs::write(&victim, b"the victim's bytes").unwrap();
        let path = Sidecar::path_for(&db);
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        let before = fingerprint(&victim);
        std::thread::sleep(Duration::from_millis(20)); // an mtime a write would change
        let (s, warm) = acquire(&db);
        assert!(s.is_none() && warm.is_none(), "a symlink: no sidecar, cold");
        assert_eq!(fingerprint(&victim), before, "the symlink's target is never written");
        assert!(std::fs::symlink_metadata(&path).unwrap().file_type().is_symlink(), "and the link is left alone");
    }

    #[test]
    fn a_file_made_beside_the_database_never_follows_a_symlink() {
        let db = temp_db("symlink-create");
        let victim = db.with_file_name("victim");
        std::fs::write(&victim, b"the victim's bytes").unwrap();
        let planted = db.with_file_name(".x.db-waffle.planted.tmp");
        std::os::unix::fs::symlink(&victim, &planted).unwrap();
        let before = fingerprint(&victim);
        let err = create_beside(&planted, &Beside::like(&meta(&db))).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists, "O_EXCL: {err}");
        assert_eq!(fingerprint(&victim), before);
    }

    #[test]
    fn a_sidecar_of_another_user_is_left_alone() {
        if !root() {
            return;
        }
        let db = closed_cleanly("other-user");
        let path = Sidecar::path_for(&db);
        chown(&path, 65534);
        let before = fingerprint(&path);
        let (s, warm) = acquire(&db);
        assert!(s.is_none() && warm.is_none(), "another user's sidecar: cold, no sidecar");
        assert_eq!(fingerprint(&path), before, "nor replaced");
        // Control: a database of that user, opened by root: the sidecar is its owner's, and stays so.
        chown(&db, 65534);
        let (s, warm) = acquire(&db);
        assert!(s.is_some() && warm.is_some(), "the database owner's sidecar, as root: used");
        assert_eq!(std::fs::metadata(&path).unwrap().uid(), 65534, "new versions get the database's owner");
        assert!(close(s, 9, &db));
        assert_eq!(std::fs::metadata(&path).unwrap().uid(), 65534);
    }

    #[test]
    fn a_table_longer_than_the_database_needs_is_garbage() {
        let db = temp_db("oversized");
        let (s, _) = acquire(&db);
        assert!(close(s, 5, &db));
        // A clean sidecar of the right identity whose table a 10-byte database cannot need.
        let long = SavedVersions { default: 2, table: vec![7; 100_000] };
        let ident = DbIdentity::of(&db);
        let path = Sidecar::path_for(&db);
        std::fs::write(&path, encode(true, 5, 4096, ident, Some(&long), &[])).unwrap();
        let (s, warm) = acquire(&db);
        assert!(s.is_some() && warm.is_none(), "cold");
        drop(s);
        // A huge (sparse) file is not read whole.
        File::options().write(true).open(&path).unwrap().set_len(1 << 36).unwrap();
        let t0 = Instant::now();
        let (s, warm) = acquire(&db);
        assert!(s.is_some() && warm.is_none() && t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
    }

    #[test]
    fn a_lock_on_a_version_renamed_over_moves_to_the_new_one() {
        let db = temp_db("renamed");
        let path = Sidecar::path_for(&db);
        let (a, _) = acquire(&db);
        // b opens the sidecar before a's close renames a new version over it, and locks after.
        let old = File::open(&path).unwrap();
        let mut b = Sidecar { file: old, path: path.clone(), db: meta(&db) };
        assert!(close(a, 11, &db), "a is alone (b holds no lock yet)");
        assert!(!is_at(&b.file, &path).unwrap(), "b's file is the old version now");
        assert!(b.lock(libc::LOCK_EX).unwrap(), "a is gone: b is alone");
        assert!(is_at(&b.file, &path).unwrap(), "b's lock is on the file at the path");
        assert!(matches!(b.read_found(), Found::Warm(w) if w.cache_id == 11), "and b reads what a saved");
        // While b holds it, a newcomer on the new file is not alone.
        let (c, warm) = acquire(&db);
        assert!(c.is_none() && warm.is_none(), "b holds it exclusively: c waits, then goes cold");
    }

    #[test]
    fn a_read_only_open_touches_nothing() {
        let db = temp_db("read-only");
        let (s, warm) = Sidecar::acquire(&db, &meta(&db), true);
        assert!(s.is_none() && warm.is_none());
        assert!(!Sidecar::path_for(&db).exists());
    }
}
