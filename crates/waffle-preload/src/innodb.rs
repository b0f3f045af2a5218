//! What the preload knows about InnoDB: which files are tablespaces, what a
//! tablespace is called, the page size a tablespace declares, and whether a
//! page's bytes are a consistent InnoDB page (the second line of defence for
//! grid copies).
//!
//! Page layout used here (MariaDB 10.x, `fil0fil.h`; big-endian):
//!
//! ```text
//!  0 FIL_PAGE_SPACE_OR_CHKSUM (4)   old formats: checksum; full_crc32: 0 or key version
//!  4 FIL_PAGE_OFFSET (4)            the page number
//! 16 FIL_PAGE_LSN (8)               LSN of the last change
//! 34 FIL_PAGE_SPACE_ID (4)          the tablespace id
//! 54 FSP_SPACE_FLAGS (4)            page 0 only: page size, format
//!  ...
//! full_crc32 (MariaDB's default since 10.5):    size-8: low 32 bits of the LSN, size-4: CRC-32C of 0..size-4
//! crc32 (MySQL 5.7 and older MariaDB formats):  0: CRC-32C(4..26) ^ CRC-32C(38..size-8), size-8: the same, size-4: low 32 bits of the LSN
//! ```

/// Whether `path`'s file name is an InnoDB tablespace: `*.ibd`, `ibdata*`, `undoNNN`.
/// Redo logs (`ib_logfile*`), the temporary tablespace (`ibtmp*`), binlogs and
/// everything else are not.
pub fn is_tablespace_path(path: &[u8]) -> bool {
    let base = match path.iter().rposition(|&b| b == b'/') {
        Some(i) => &path[i + 1..],
        None => path,
    };
    if base.len() > 4 && base.ends_with(b".ibd") {
        return true;
    }
    if base.starts_with(b"ibdata") {
        return true;
    }
    base.len() > 4 && base.starts_with(b"undo") && base[4..].iter().all(u8::is_ascii_digit)
}

/// The name a tablespace goes by in stats and in `WAFFLE_TABLES`:
/// `db/table` for `.../db/table.ibd`, the file name for the system and undo
/// tablespaces (`ibdata1`, `undo001`).
pub fn tablespace_name(path: &str) -> String {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty() && *p != ".").collect();
    let Some(last) = parts.last() else {
        return path.to_string();
    };
    match last.strip_suffix(".ibd") {
        Some(table) if parts.len() >= 2 => format!("{}/{}", parts[parts.len() - 2], table),
        Some(table) => table.to_string(),
        None => last.to_string(),
    }
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Offset of FSP_SPACE_FLAGS in page 0 (FIL_PAGE_DATA 38 + 16).
pub const FSP_FLAGS_OFFSET: usize = 54;
const FCRC32_MARKER: u32 = 1 << 4;

/// The page size a tablespace's page 0 declares in its FSP flags.
pub fn page_bytes_from_flags(flags: u32) -> Option<usize> {
    let ssize = if flags & FCRC32_MARKER != 0 { flags & 0xF } else { (flags >> 6) & 0xF };
    match ssize {
        0 if flags & FCRC32_MARKER == 0 => Some(16384),
        3..=7 => Some(512 << ssize),
        _ => None,
    }
}

/// The page size declared by a tablespace's first bytes (page 0), if they hold one.
pub fn page_bytes_from_page0(head: &[u8]) -> Option<usize> {
    if head.len() < FSP_FLAGS_OFFSET + 4 || head.iter().all(|&b| b == 0) {
        return None;
    }
    if be32(head, 4) != 0 {
        return None; // not page 0
    }
    page_bytes_from_flags(be32(head, FSP_FLAGS_OFFSET))
}

/// The tablespace id in a page's header.
pub fn space_id(page: &[u8]) -> u32 {
    be32(page, 34)
}

/// Why a page is not the consistent InnoDB page expected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mismatch {
    /// FIL_PAGE_OFFSET names another page.
    PageNumber,
    /// FIL_PAGE_SPACE_ID names another tablespace.
    SpaceId,
    /// Neither the full_crc32 nor the crc32 checksum matches.
    Checksum,
    /// The header's LSN and the trailer's disagree (a torn page).
    Lsn,
}

impl Mismatch {
    /// Every kind (tests: the stats file names each, stats_file.rs).
    #[cfg(test)]
    pub const ALL: [Mismatch; 4] = [Mismatch::PageNumber, Mismatch::SpaceId, Mismatch::Checksum, Mismatch::Lsn];

    pub fn name(self) -> &'static str {
        match self {
            Mismatch::PageNumber => "page_number",
            Mismatch::SpaceId => "space_id",
            Mismatch::Checksum => "checksum",
            Mismatch::Lsn => "lsn",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }
}

/// Checks that `page` is a consistent InnoDB page numbered `index` of
/// tablespace `space` (None: not known yet). An all-zero page (allocated,
/// never written) is consistent. Pages in other checksum formats (legacy
/// `innodb`, `none`, page-compressed) fail: the caller reads the file.
pub fn check_page(page: &[u8], index: u32, space: Option<u32>) -> Result<(), Mismatch> {
    let n = page.len();
    if n < 1024 {
        return Err(Mismatch::Checksum);
    }
    if page.iter().all(|&b| b == 0) {
        return Ok(());
    }
    if be32(page, 4) != index {
        return Err(Mismatch::PageNumber);
    }
    if let Some(s) = space {
        if space_id(page) != s {
            return Err(Mismatch::SpaceId);
        }
    }
    if crc32c::crc32c(&page[..n - 4]) == be32(page, n - 4) {
        // full_crc32; the LSN copy is only kept on unencrypted pages (key version 0).
        if be32(page, 0) == 0 && be32(page, 20) != be32(page, n - 8) {
            return Err(Mismatch::Lsn);
        }
        return Ok(());
    }
    let crc = crc32c::crc32c(&page[4..26]) ^ crc32c::crc32c(&page[38..n - 8]);
    if be32(page, 0) == crc && be32(page, n - 8) == crc {
        if be32(page, 20) != be32(page, n - 4) {
            return Err(Mismatch::Lsn);
        }
        return Ok(());
    }
    Err(Mismatch::Checksum)
}

#[cfg(test)]
pub mod tests {
    use super::*;

    /// A full_crc32 page as MariaDB 10.11 writes it.
    pub fn full_crc32_page(size: usize, index: u32, space: u32, lsn: u64, fill: u8) -> Vec<u8> {
        let mut p = vec![fill; size];
        p[0..4].fill(0);
        p[4..8].copy_from_slice(&index.to_be_bytes());
        p[16..24].copy_from_slice(&lsn.to_be_bytes());
        p[34..38].copy_from_slice(&space.to_be_bytes());
        p[size - 8..size - 4].copy_from_slice(&(lsn as u32).to_be_bytes());
        let crc = crc32c::crc32c(&p[..size - 4]);
        p[size - 4..].copy_from_slice(&crc.to_be_bytes());
        p
    }

    fn crc32_page(size: usize, index: u32, space: u32, lsn: u64) -> Vec<u8> {
        let mut p = vec![7u8; size];
        p[4..8].copy_from_slice(&index.to_be_bytes());
        p[16..24].copy_from_slice(&lsn.to_be_bytes());
        p[34..38].copy_from_slice(&space.to_be_bytes());
        p[size - 4..].copy_from_slice(&(lsn as u32).to_be_bytes());
        let crc = crc32c::crc32c(&p[4..26]) ^ crc32c::crc32c(&p[38..size - 8]);
        p[0..4].copy_from_slice(&crc.to_be_bytes());
        p[size - 8..size - 4].copy_from_slice(&crc.to_be_bytes());
        p
    }

    #[test]
    fn tablespace_files_are_recognised() {
        for yes in [
            "./sbtest/sbtest1.ibd",
            "/var/lib/mysql/ibdata1",
            "./ibdata2",
            ".//undo001",
            "undo12",
            "t.ibd",
            "./db/#sql-alter-1.ibd",
        ] {
            assert!(is_tablespace_path(yes.as_bytes()), "{yes}");
        }
        for no in [
            "./ib_logfile0",
            "./ibtmp1",
            "./mysql-bin.000001",
            "./db/t.frm",
            "./undo",
            "./undo01x",
            ".ibd",
            "./aria_log.00000001",
            "./ib_buffer_pool",
            "./db/t.ibd.tmp",
        ] {
            assert!(!is_tablespace_path(no.as_bytes()), "{no}");
        }
    }

    #[test]
    fn names() {
        assert_eq!(tablespace_name("./sbtest/sbtest1.ibd"), "sbtest/sbtest1");
        assert_eq!(tablespace_name("/var/lib/mysql/db/t.ibd"), "db/t");
        assert_eq!(tablespace_name("./ibdata1"), "ibdata1");
        assert_eq!(tablespace_name(".//undo001"), "undo001");
        assert_eq!(tablespace_name("t.ibd"), "t");
    }

    #[test]
    fn page_sizes_from_flags() {
        // Seen on MariaDB 10.11 (full_crc32, 16 KiB): 0x15.
        assert_eq!(page_bytes_from_flags(0x15), Some(16384));
        assert_eq!(page_bytes_from_flags(0x13), Some(4096));
        assert_eq!(page_bytes_from_flags(0x17), Some(65536));
        // Old format: ssize in bits 6..10, 0 = 16 KiB.
        assert_eq!(page_bytes_from_flags(0x21), Some(16384));
        assert_eq!(page_bytes_from_flags(3 << 6), Some(4096));
        assert_eq!(page_bytes_from_flags(0x10 | 1), None);
    }

    #[test]
    fn consistent_pages_pass_and_every_kind_of_wrong_page_fails() {
        for size in [4096, 16384] {
            let p = full_crc32_page(size, 9, 5, 0x1_2345_6789, 0xAB);
            assert_eq!(check_page(&p, 9, Some(5)), Ok(()));
            assert_eq!(check_page(&p, 9, None), Ok(()));
            assert_eq!(check_page(&p, 10, Some(5)), Err(Mismatch::PageNumber));
            assert_eq!(check_page(&p, 9, Some(6)), Err(Mismatch::SpaceId));
            let mut torn = p.clone();
            torn[size / 2] ^= 1;
            assert_eq!(check_page(&torn, 9, Some(5)), Err(Mismatch::Checksum));
            // A trailer LSN that disagrees, with a checksum made to match it.
            let mut lsn = p.clone();
            lsn[size - 8] ^= 1;
            let crc = crc32c::crc32c(&lsn[..size - 4]);
            lsn[size - 4..].copy_from_slice(&crc.to_be_bytes());
            assert_eq!(check_page(&lsn, 9, Some(5)), Err(Mismatch::Lsn));

            let q = crc32_page(size, 3, 0, 777);
            assert_eq!(check_page(&q, 3, Some(0)), Ok(()));
            let mut bad = q.clone();
            bad[100] ^= 0x40;
            assert_eq!(check_page(&bad, 3, Some(0)), Err(Mismatch::Checksum));
            assert_eq!(check_page(&vec![0u8; size], 3, Some(4)), Ok(()), "an all-zero page is consistent");
        }
    }

    #[test]
    fn real_mariadb_pages_if_present() {
        // Pages of a real datadir, when a developer points at one (not needed in CI).
        let Some(dir) = std::env::var_os("WAFFLE_TEST_DATADIR") else {
            return;
        };
        let data = std::fs::read(std::path::Path::new(&dir).join("ibdata1")).unwrap();
        assert_eq!(page_bytes_from_page0(&data[..16384]), Some(16384));
        for i in 0..8u32 {
            let p = &data[i as usize * 16384..(i as usize + 1) * 16384];
            assert_eq!(check_page(p, i, Some(0)), Ok(()), "page {i}");
        }
    }
}
