//! `waffle_direct_io` (issue 33): by default (`auto`) a database the
//! machine's memory holds many times over stays in the kernel's page cache
//! after waffle read it (an L1 miss is then a memory copy, as for plain
//! SQLite); `on` drops every range waffle read; `off` drops nothing.
//! Residency is read with `mincore` on a mapping of the file.

use std::fs::File;
use std::os::unix::io::AsRawFd;
use std::path::Path;

use waffle_testkit::db::{create_blob_table, open_plain, open_waffle, snapshot};
use waffle_testkit::pattern;
use waffle_testkit::temp_dir::TempDir;

const ROW: usize = 3000; // one row per 4 KiB leaf page
const ROWS: i64 = 256;

/// Pages of the file the kernel's page cache holds, and the file's pages.
fn resident_pages(path: &Path) -> (usize, usize) {
    let f = File::open(path).unwrap();
    let len = f.metadata().unwrap().len() as usize;
    // SAFETY: sysconf reads a constant.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    let pages = len.div_ceil(page);
    // SAFETY: a read-only shared mapping of an open file of `len` bytes (> 0), unmapped below.
    let map = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_SHARED, f.as_raw_fd(), 0) };
    assert_ne!(map, libc::MAP_FAILED);
    let mut vec = vec![0u8; pages];
    // SAFETY: `map` is the mapping above; `vec` holds one byte per page of it.
    let rc = unsafe { libc::mincore(map, len, vec.as_mut_ptr()) };
    // SAFETY: the mapping above, not used after.
    unsafe { libc::munmap(map, len) };
    assert_eq!(rc, 0, "mincore: {}", std::io::Error::last_os_error());
    (vec.iter().filter(|&&b| b & 1 != 0).count(), pages)
}

/// Writes the file out and asks the kernel to forget it.
fn drop_from_page_cache(path: &Path) {
    let f = File::open(path).unwrap();
    f.sync_all().unwrap();
    // SAFETY: advice on an open descriptor; it changes no data.
    assert_eq!(unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) }, 0);
}

#[test]
fn a_small_database_stays_in_the_page_cache_by_default_and_leaves_it_with_on() {
    for (param, kept) in [(None, true), (Some("on"), false), (Some("off"), true)] {
        let dir = TempDir::new("direct-io");
        let path = dir.join("db");
        create_blob_table(&open_plain(&path), 16, 1..=ROWS, |id| pattern(id as u64, ROW));
        drop_from_page_cache(&path);
        let (before, total) = resident_pages(&path);
        assert!(before * 20 < total, "{before} of {total} pages still cached before the read");
        let params: Vec<(&str, &str)> = param.map(|v| ("waffle_direct_io", v)).into_iter().collect();
        let conn = open_waffle(&path, &params);
        conn.execute_batch("PRAGMA cache_size = 16").unwrap();
        let n: i64 = conn.query_row("SELECT count(*) FROM t WHERE length(v) = ?1", [ROW as i64], |r| r.get(0)).unwrap();
        assert_eq!(n, ROWS);
        let (resident, total) = resident_pages(&path);
        let in_effect = snapshot(&conn).sqlite.map(|s| s.config.direct_io);
        // `auto` and `off` issue no POSIX_FADV_DONTNEED: every page stays (the file was just read).
        // `on` drops each range read, and its advice of no read-ahead comes before the pager's
        // header read (the one page that read leaves). Given after it, the kernel read ahead
        // through the whole scan and about 80% of the file stayed (docs/benchmarks.md).
        if kept {
            assert!(resident * 100 >= total * 99, "{param:?}: {resident} of {total} pages cached after the read");
            assert_eq!(in_effect, Some(false), "{param:?}");
        } else {
            assert!(resident <= 2, "{param:?}: {resident} of {total} pages cached after the read");
            assert_eq!(in_effect, Some(true), "{param:?}");
        }
    }
}
