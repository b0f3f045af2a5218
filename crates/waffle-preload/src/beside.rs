//! Files the preload writes beside the server's data (the stats file, the
//! hot list): made as SQLite makes its journals (waffle_core::side_file),
//! never through a symlink or into another user's file.

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use waffle_core::side_file::{self, Beside};

/// How the preload makes its files beside the server's data (the stats file
/// and the hot list) and whose an existing one may be, as SQLite makes its
/// journals (waffle_core::side_file): the permission bits of the server's
/// system tablespace `ibdata1` (mariadbd makes its data files 0660: the
/// server's user and group, so a monitoring user reads the stats file as a
/// member of the server's group; without an ibdata1, the datadir's bits
/// without execute) and, when running as root, the datadir's owner and group.
pub(crate) fn beside_data(datadir: &Path) -> Beside {
    let dir = std::fs::metadata(datadir).ok();
    let ibdata = std::fs::symlink_metadata(datadir.join("ibdata1")).ok().filter(|m| m.file_type().is_file());
    let mode = match (&ibdata, &dir) {
        (Some(m), _) => m.mode() & 0o777,
        (None, Some(d)) => d.mode() & 0o666,
        (None, None) => 0o600,
    };
    // SAFETY: getegid cannot fail.
    let (uid, gid) = dir.map_or_else(|| (side_file::euid(), unsafe { libc::getegid() }), |d| (d.uid(), d.gid()));
    Beside { mode, uid, gid }
}

/// Replaces the file `path` beside the server's data with `bytes` (a
/// temporary file of a random name, made O_EXCL|O_NOFOLLOW as
/// [`beside_data`] says, synced, renamed over it): a reader sees the old
/// file or the new one. A symlink or another user's file at `path` is left
/// alone (an error); a leftover temporary file never is written through.
pub(crate) fn write_beside_data(path: &Path, datadir: &Path, bytes: &[u8]) -> io::Result<()> {
    side_file::replace_beside(path, &beside_data(datadir), bytes)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::path::PathBuf;
    use std::time::Duration;

    /// A fresh directory standing for a datadir, with an `ibdata1` of `mode` (None: no ibdata1).
    pub(crate) fn datadir(name: &str, ibdata_mode: Option<u32>) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("waffle-preload-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        if let Some(mode) = ibdata_mode {
            std::fs::write(dir.join("ibdata1"), b"").unwrap();
            std::fs::set_permissions(dir.join("ibdata1"), std::fs::Permissions::from_mode(mode)).unwrap();
        }
        dir
    }

    /// A file's bytes, inode and mtime: whether anything wrote it.
    pub(crate) fn fingerprint(path: &Path) -> (Vec<u8>, u64, i64, i64) {
        let m = std::fs::metadata(path).unwrap();
        (std::fs::read(path).unwrap(), m.ino(), m.mtime(), m.mtime_nsec())
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> =
            std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        v.sort();
        v
    }

    #[test]
    fn the_stats_file_gets_the_data_files_mode_and_as_root_the_datadirs_owner() {
        let dir = datadir("stats-mode", Some(0o640));
        let path = dir.join("waffle-stats.json");
        write_beside_data(&path, &dir, b"{}\n").unwrap();
        write_beside_data(&path, &dir, b"{\"a\": 1}\n").unwrap();
        let m = std::fs::symlink_metadata(&path).unwrap();
        assert_eq!(m.mode() & 0o777, 0o640, "ibdata1's mode, past the umask");
        assert_eq!(std::fs::read(&path).unwrap(), b"{\"a\": 1}\n");
        assert_eq!(names(&dir), ["ibdata1", "waffle-stats.json"], "no temporary file left");
        // No ibdata1: the datadir's bits without execute.
        let bare = datadir("stats-mode-bare", None);
        std::fs::set_permissions(&bare, std::fs::Permissions::from_mode(0o750)).unwrap();
        write_beside_data(&bare.join("s.json"), &bare, b"{}").unwrap();
        assert_eq!(std::fs::metadata(bare.join("s.json")).unwrap().mode() & 0o777, 0o640);
        if side_file::euid() != 0 {
            eprintln!("not root: the owner case is not run");
            return;
        }
        std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).unwrap();
        write_beside_data(&path, &dir, b"{}").unwrap();
        let m = std::fs::metadata(&path).unwrap();
        assert_eq!((m.uid(), m.gid()), (65534, 65534), "as root: the datadir's owner");
        write_beside_data(&path, &dir, b"{}").unwrap(); // and replaced again
                                                        // A file of a third user at the name is left alone.
        std::os::unix::fs::chown(&path, Some(4242), Some(4242)).unwrap();
        let err = write_beside_data(&path, &dir, b"{}").unwrap_err();
        assert!(err.to_string().contains("another user"), "{err}");
        assert_eq!(std::fs::metadata(&path).unwrap().uid(), 4242);
    }

    #[test]
    fn a_symlink_at_the_stats_file_or_at_a_predictable_temporary_name_is_never_followed() {
        let dir = datadir("stats-symlink", Some(0o660));
        let victim = dir.join("victim");
        std::fs::write(&victim, b"the victim's bytes").unwrap();
        let before = fingerprint(&victim);
        std::thread::sleep(Duration::from_millis(20)); // an mtime a write would change
        let path = dir.join("waffle-stats.json");
        // The names the stats file was once written through: `<path>.tmp<pid>`.
        for tmp in [format!("waffle-stats.json.tmp{}", std::process::id()), "waffle-stats.json.tmp".into()] {
            std::os::unix::fs::symlink(&victim, dir.join(tmp)).unwrap();
        }
        write_beside_data(&path, &dir, b"{}").unwrap();
        assert_eq!(fingerprint(&victim), before, "a temporary name's symlink is never written through");
        assert!(std::fs::symlink_metadata(&path).unwrap().file_type().is_file());
        // A symlink at the stats file itself: left alone, its target unwritten, an error (one warning).
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        let err = write_beside_data(&path, &dir, b"{}").unwrap_err();
        assert!(err.to_string().contains("symlink"), "{err}");
        assert_eq!(fingerprint(&victim), before, "the stats file's symlink is never written through");
        assert!(std::fs::symlink_metadata(&path).unwrap().file_type().is_symlink(), "and left alone");
        let left: Vec<String> = names(&dir).into_iter().filter(|n| n.ends_with(".tmp")).collect();
        assert!(left.len() <= 1, "no temporary file of ours left: {left:?}"); // the planted ".tmp" link
    }
}
