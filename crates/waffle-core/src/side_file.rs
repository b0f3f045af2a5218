//! Files beside a database (the sidecar and hot list of sidecar.rs and
//! hot_list.rs; the MariaDB preload's stats file and hot list), made as
//! SQLite makes its journals: the database's permission bits and, when
//! running as root, its owner (os_unix.c, findCreateFileMode, robustFchown).
//!
//! Anyone who can create a file in the directory could plant a symlink or a
//! file of their own there, so an existing one is opened with O_NOFOLLOW
//! (after an lstat: no FIFO or device is ever opened) and used only if it is
//! a regular file with one link, owned by this user (or, as root, by the
//! database's owner), and read only up to a bound. A new version is never
//! written in place but to a temporary file of a random name created
//! O_CREAT|O_EXCL|O_NOFOLLOW|O_CLOEXEC in the same directory, then renamed
//! over the old one (a symlink there is replaced, never followed). The
//! callers turn any error into "no such file" and one warning.

use std::fs::{File, Metadata, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

/// How files beside a database are made, and whose an existing one may be:
/// the database's permission bits, user and group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Beside {
    /// Permission bits of new files (0o777 at most).
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
}

impl Beside {
    /// Files like the database whose metadata this is.
    pub fn like(db: &Metadata) -> Beside {
        Beside { mode: db.mode() & 0o777, uid: db.uid(), gid: db.gid() }
    }
}

impl From<&Metadata> for Beside {
    fn from(db: &Metadata) -> Beside {
        Beside::like(db)
    }
}

pub fn euid() -> u32 {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() }
}

/// Whether a file found beside the database may be trusted: a regular file
/// with one link (not a hard link to something else), this user's or, as
/// root, the database owner's (a file another user planted is not ours to read or replace).
pub fn check_ours(m: &Metadata, like: &Beside) -> io::Result<()> {
    check_plain(m)?;
    if m.uid() != euid() && !(euid() == 0 && m.uid() == like.uid) {
        return Err(io::Error::other("owned by another user"));
    }
    Ok(())
}

/// Whether a file found beside the database is a regular file with one link
/// (whoever owns it: see [`check_ours`]).
pub fn check_plain(m: &Metadata) -> io::Result<()> {
    if m.file_type().is_symlink() {
        Err(io::Error::other("a symlink"))
    } else if !m.file_type().is_file() {
        Err(io::Error::other("not a regular file"))
    } else if m.nlink() != 1 {
        Err(io::Error::other("more than one link"))
    } else {
        Ok(())
    }
}

/// Opens the existing file `path` beside the database read-only (writes go
/// by rename; a read-only descriptor holds a flock) if it is one to trust;
/// None if there is none.
pub fn open_beside(path: &Path, like: &Beside) -> io::Result<Option<File>> {
    open_if(path, &|m| check_ours(m, like))
}

/// Opens the existing file `path` read-only, never through a symlink, if
/// `trust` accepts it (as lstat sees it, and then as opened); None if there is none.
pub fn open_if(path: &Path, trust: &dyn Fn(&Metadata) -> io::Result<()>) -> io::Result<Option<File>> {
    // lstat first: a FIFO or device is never opened (an open may block or act).
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
        Ok(m) if m.file_type().is_symlink() => return Err(io::Error::other("a symlink")),
        Ok(m) => trust(&m)?,
    }
    let opened =
        OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK).open(path);
    let file = match opened {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Err(io::Error::other("a symlink")),
        other => other?,
    };
    trust(&file.metadata()?)?; // what was opened, not what lstat saw
    Ok(Some(file))
}

/// Opens the file at `path` for writing in place, never through a symlink, if
/// it is the file `held` (its device and inode: the file this process locked
/// and checked) and still one to trust.
pub fn open_held_for_write(path: &Path, like: &Beside, held: (u64, u64)) -> io::Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)?;
    let m = file.metadata()?;
    check_ours(&m, like)?;
    if (m.dev(), m.ino()) != held {
        return Err(io::Error::other("replaced since it was locked"));
    }
    Ok(file)
}

/// The bytes of the file `path` beside the database, opened as
/// [`open_beside`] opens it, if it has at most `max_bytes` (a longer one is
/// an error: never read whole); None if there is none.
pub fn read_beside(path: &Path, like: &Beside, max_bytes: u64) -> io::Result<Option<Vec<u8>>> {
    read_if(path, max_bytes, &|m| check_ours(m, like))
}

/// [`read_beside`] with another rule of whose file may be read ([`open_if`]).
pub fn read_if(
    path: &Path,
    max_bytes: u64,
    trust: &dyn Fn(&Metadata) -> io::Result<()>,
) -> io::Result<Option<Vec<u8>>> {
    match open_if(path, trust)? {
        Some(file) => read_bounded(&file, max_bytes).map(Some),
        None => Ok(None),
    }
}

/// The bytes of `file` if it has at most `max_bytes` (a longer one is an error, never read whole).
pub fn read_bounded(file: &File, max_bytes: u64) -> io::Result<Vec<u8>> {
    let too_long = || io::Error::other(format!("longer than {max_bytes} bytes"));
    if file.metadata()?.len() > max_bytes {
        return Err(too_long());
    }
    let mut bytes = Vec::new();
    file.take(max_bytes + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max_bytes {
        return Err(too_long()); // it grew meanwhile
    }
    Ok(bytes)
}

/// Whether `file` is still the file at `path` (nothing renamed over it, no symlink there).
pub fn is_at(file: &File, path: &Path) -> io::Result<bool> {
    let held = file.metadata()?;
    match std::fs::symlink_metadata(path) {
        Ok(m) => Ok(m.file_type().is_file() && (m.dev(), m.ino()) == (held.dev(), held.ino())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// A file of `like`'s mode and (as root) owner, created at `path`, which
/// must not exist (O_EXCL also refuses a symlink there).
pub fn create_beside(path: &Path, like: &Beside) -> io::Result<File> {
    let mode = like.mode & 0o777;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    let made = (|| {
        // The umask may have taken bits away: SQLite sets the mode exactly.
        // SAFETY: fchmod and fchown on a descriptor we own.
        if unsafe { libc::fchmod(file.as_raw_fd(), mode) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // As root, the database's owner must still be able to use it (robustFchown).
        // SAFETY: as above.
        if euid() == 0 && unsafe { libc::fchown(file.as_raw_fd(), like.uid, like.gid) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    })();
    match made {
        Ok(()) => Ok(file),
        Err(e) => {
            let _ = std::fs::remove_file(path);
            Err(e)
        }
    }
}

/// Writes `bytes` (synced if `sync`) to a new temporary file of a random
/// name beside `path`, made as [`create_beside`] makes files; returns it and its name.
pub fn write_temp(path: &Path, like: &Beside, bytes: &[u8], sync: bool) -> io::Result<(File, PathBuf)> {
    let mut name = path.file_name().unwrap_or(path.as_os_str()).to_owned();
    name.push(format!(".{:016x}.tmp", crate::random_u64()));
    let tmp = path.with_file_name(name);
    let mut file = create_beside(&tmp, like)?;
    let written = file.write_all(bytes).and_then(|()| if sync { file.sync_data() } else { Ok(()) });
    match written {
        Ok(()) => Ok((file, tmp)),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// Renames `tmp` over `path` (a symlink there is replaced, never followed); removes it on failure.
pub fn install(tmp: &Path, path: &Path) -> io::Result<()> {
    std::fs::rename(tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(tmp);
    })
}

/// Replaces the file at `path` with `bytes`: a synced temporary file
/// ([`write_temp`]) renamed over it, so a reader sees the old file or the
/// new one. Only a file [`check_ours`] trusts is replaced (or none): a
/// symlink or another user's file there is an error, and left alone.
pub fn replace_beside(path: &Path, like: &Beside, bytes: &[u8]) -> io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
        Ok(m) => check_ours(&m, like)?,
    }
    let (_file, tmp) = write_temp(path, like, bytes, true)?;
    install(&tmp, path)
}

/// Makes a rename in `path`'s directory durable.
pub fn sync_dir_of(path: &Path) -> io::Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    OpenOptions::new().read(true).custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC).open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("waffle-side-file-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn mine(mode: u32) -> Beside {
        Beside { mode, uid: euid(), gid: 0 }
    }

    /// A file's bytes, inode and mtime: whether anything wrote it.
    fn fingerprint(path: &Path) -> (Vec<u8>, u64, i64, i64) {
        let m = std::fs::metadata(path).unwrap();
        (std::fs::read(path).unwrap(), m.ino(), m.mtime(), m.mtime_nsec())
    }

    #[test]
    fn a_write_in_place_goes_only_to_the_file_held() {
        let dir = temp_dir("held");
        let path = dir.join("side");
        std::fs::write(&path, b"held").unwrap();
        let id = |p: &Path| std::fs::metadata(p).map(|m| (m.dev(), m.ino())).unwrap();
        let held = id(&path);
        assert!(open_held_for_write(&path, &mine(0o644), held).is_ok(), "the file held, at its path");
        // Another file renamed over the path since it was locked: refused, nothing written.
        std::fs::write(dir.join("other"), b"other").unwrap();
        std::fs::rename(dir.join("other"), &path).unwrap();
        let other = fingerprint(&path);
        assert!(open_held_for_write(&path, &mine(0o644), held).is_err(), "another inode");
        // A symlink there to the very file held: never followed.
        std::fs::remove_file(&path).unwrap();
        let target = dir.join("target");
        std::fs::write(&target, b"target").unwrap();
        let held = id(&target);
        std::os::unix::fs::symlink(&target, &path).unwrap();
        assert!(open_held_for_write(&path, &mine(0o644), held).is_err(), "a symlink");
        assert_eq!(std::fs::read(&target).unwrap(), b"target");
        assert_eq!(other.0, b"other");
    }

    #[test]
    fn a_replacement_has_the_mode_asked_and_leaves_a_symlink_and_its_target_alone() {
        let dir = temp_dir("replace");
        let path = dir.join("stats.json");
        replace_beside(&path, &mine(0o640), b"old").unwrap();
        replace_beside(&path, &mine(0o640), b"new").unwrap();
        let m = std::fs::symlink_metadata(&path).unwrap();
        assert!(m.file_type().is_file() && m.mode() & 0o777 == 0o640, "{:o}", m.mode());
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        let names: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names.len(), 1, "no temporary file left: {names:?}");
        // A symlink planted at the path: neither it nor its target is written.
        let victim = dir.join("victim");
        std::fs::write(&victim, b"the victim's bytes").unwrap();
        let before = fingerprint(&victim);
        std::thread::sleep(Duration::from_millis(20)); // an mtime a write would change
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        let err = replace_beside(&path, &mine(0o640), b"newer").unwrap_err();
        assert!(err.to_string().contains("symlink"), "{err}");
        assert_eq!(fingerprint(&victim), before, "the symlink's target is never written");
        assert!(std::fs::symlink_metadata(&path).unwrap().file_type().is_symlink());
        // A symlink at a temporary name: O_EXCL refuses it, the target is untouched.
        let planted = dir.join("planted.tmp");
        std::os::unix::fs::symlink(&victim, &planted).unwrap();
        let err = create_beside(&planted, &mine(0o640)).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists, "{err}");
        assert_eq!(fingerprint(&victim), before);
    }

    #[test]
    fn a_read_is_bounded_and_never_follows_a_symlink() {
        let dir = temp_dir("read");
        let path = dir.join("list");
        assert_eq!(read_beside(&path, &mine(0o600), 10).unwrap(), None);
        std::fs::write(&path, b"0123456789").unwrap();
        assert_eq!(read_beside(&path, &mine(0o600), 10).unwrap().as_deref(), Some(&b"0123456789"[..]));
        let err = read_beside(&path, &mine(0o600), 9).unwrap_err();
        assert!(err.to_string().contains("longer than 9"), "{err}");
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(dir.join("elsewhere"), &path).unwrap();
        std::fs::write(dir.join("elsewhere"), b"x").unwrap();
        let err = read_beside(&path, &mine(0o600), 10).unwrap_err();
        assert!(err.to_string().contains("symlink"), "{err}");
        // A FIFO is never opened (an open of one would block).
        let fifo = dir.join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let err = read_beside(&fifo, &mine(0o600), 10).unwrap_err();
        assert!(err.to_string().contains("not a regular file"), "{err}");
    }
}
