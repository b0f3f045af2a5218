//! The POSIX (fcntl) locks a process holds on a file, as the kernel lists them
//! in `/proc/<pid>/fdinfo/<fd>` for each of its descriptors of the file.
//!
//! Why not `/proc/locks`: it is a seq_file, read a page at a time, each read
//! walking the system's lock list again from a position. A lock taken or
//! dropped anywhere on the machine between two reads shifts the list, and an
//! entry can be skipped: a lock that is held reads as absent (a parallel
//! suite's SQLite processes lock and unlock all the time). One descriptor's
//! fdinfo is a few lines, read whole in one call.

use std::path::Path;

use crate::descriptors::{descriptors_on, file_id};

/// One lock `pid` holds on the file (`lock:` lines of fdinfo: `1: POSIX ADVISORY WRITE <pid> <dev>:<ino> <start> <end>`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldLock {
    pub fd: i32,
    pub write: bool,
    pub start: u64,
    /// `None`: to the end of the file (`EOF`).
    pub end: Option<u64>,
}

/// The POSIX locks `pid` holds on the file at `path`, through every descriptor it has of it.
/// Empty when the process has no descriptor of the file (or has exited).
pub fn posix_locks(pid: u32, path: &Path) -> Vec<HeldLock> {
    let want = file_id(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut held = Vec::new();
    for fd in descriptors_on(pid, want) {
        // A descriptor closed meanwhile has no fdinfo: it holds nothing now.
        let info = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}")).unwrap_or_default();
        held.extend(info.lines().filter_map(|l| parse_lock_line(fd, l)));
    }
    held.sort_by_key(|l| (l.fd, l.start));
    held
}

fn parse_lock_line(fd: i32, line: &str) -> Option<HeldLock> {
    let f: Vec<&str> = line.strip_prefix("lock:")?.split_whitespace().collect();
    // ["1:", "POSIX", "ADVISORY", "WRITE", pid, dev:ino, start, end]
    if f.len() < 8 || f[1] != "POSIX" {
        return None;
    }
    let end = if f[7] == "EOF" { None } else { Some(f[7].parse().ok()?) };
    Some(HeldLock { fd, write: f[3] == "WRITE", start: f[6].parse().ok()?, end })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::io::AsRawFd;

    #[test]
    fn a_lock_this_process_holds_is_listed_and_its_release_is_seen() {
        let dir = crate::temp_dir::TempDir::new("posix-locks");
        let path = dir.join("f");
        std::fs::write(&path, [0u8; 64]).unwrap();
        let f = std::fs::OpenOptions::new().read(true).write(true).open(&path).unwrap();
        let me = std::process::id();
        assert_eq!(posix_locks(me, &path), vec![], "no lock yet");
        let set = |kind: i16, start: i64, len: i64| {
            let lk =
                libc::flock { l_type: kind, l_whence: libc::SEEK_SET as i16, l_start: start, l_len: len, l_pid: 0 };
            // SAFETY: a valid descriptor and flock.
            assert_eq!(unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETLK, &lk) }, 0);
        };
        set(libc::F_WRLCK as i16, 5, 10);
        set(libc::F_RDLCK as i16, 20, 0);
        let held = posix_locks(me, &path);
        let fd = f.as_raw_fd();
        assert_eq!(
            held,
            vec![
                HeldLock { fd, write: true, start: 5, end: Some(14) },
                HeldLock { fd, write: false, start: 20, end: None }
            ]
        );
        set(libc::F_UNLCK as i16, 0, 0);
        assert_eq!(posix_locks(me, &path), vec![], "released");
    }
}
