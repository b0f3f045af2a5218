//! The descriptors a process has open on a file, from `/proc/<pid>/fd`: what
//! [`posix_locks`](crate::posix_locks) reads the locks of, and how the
//! explorer sees a worker's open reach the database file.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// A file's identity: (device, inode), the same through any of its names or descriptors.
pub type FileId = (u64, u64);

/// The identity of the file at `path` (a symlink, as `/proc/<pid>/fd/<n>`, is followed).
pub fn file_id(path: &Path) -> std::io::Result<FileId> {
    let m = std::fs::metadata(path)?;
    Ok((m.dev(), m.ino()))
}

/// The descriptors process `pid` has open on `file`, ascending. Empty when it has none or has
/// exited; a descriptor closed while the list is read is left out.
pub fn descriptors_on(pid: u32, file: FileId) -> Vec<i32> {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return Vec::new() };
    let mut out: Vec<i32> = fds
        .flatten()
        .filter(|entry| file_id(&entry.path()).is_ok_and(|id| id == file))
        .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
        .collect();
    out.sort_unstable();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::io::AsRawFd;

    #[test]
    fn lists_this_processs_descriptors_of_a_file_and_no_other() {
        let dir = crate::temp_dir::TempDir::new("descriptors");
        let (a, b) = (dir.join("a"), dir.join("b"));
        std::fs::write(&a, b"a").unwrap();
        std::fs::write(&b, b"b").unwrap();
        let id = file_id(&a).unwrap();
        let me = std::process::id();
        assert_eq!(descriptors_on(me, id), Vec::<i32>::new());
        let (f1, f2, _other) =
            (std::fs::File::open(&a).unwrap(), std::fs::File::open(&a).unwrap(), std::fs::File::open(&b).unwrap());
        let mut want = vec![f1.as_raw_fd(), f2.as_raw_fd()];
        want.sort_unstable();
        assert_eq!(descriptors_on(me, id), want);
        drop(f1);
        assert_eq!(descriptors_on(me, id), vec![f2.as_raw_fd()]);
    }
}
