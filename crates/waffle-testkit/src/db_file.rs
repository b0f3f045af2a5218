//! The database file itself: which page of it holds a row.

use std::collections::HashMap;
use std::path::Path;

/// Reads the database file and returns, for every row of every table b-tree
/// leaf, its rowid and the SQLite page number (1-based) holding it. Page 1
/// (sqlite_schema) is left out. Only meaningful for a file without free pages
/// (old leaves would be listed too) and rowids unique across tables.
pub fn leaf_pages_by_rowid(db: &Path, page_size: usize) -> HashMap<i64, u64> {
    let bytes = std::fs::read(db).unwrap_or_else(|e| panic!("read {}: {e}", db.display()));
    assert_eq!(bytes.len() % page_size, 0, "{} is not whole pages of {page_size}", db.display());
    let mut out = HashMap::new();
    for (i, page) in bytes.chunks(page_size).enumerate() {
        if i == 0 || page[0] != 0x0d {
            continue; // page 1, or not a table leaf
        }
        let cells = u16::from_be_bytes([page[3], page[4]]) as usize;
        for c in 0..cells {
            let at = 8 + 2 * c;
            let mut off = u16::from_be_bytes([page[at], page[at + 1]]) as usize;
            let (_payload, used) = varint(&page[off..]);
            off += used;
            let (rowid, _) = varint(&page[off..]);
            out.insert(rowid as i64, i as u64 + 1);
        }
    }
    out
}

/// SQLite's big-endian varint: (value, bytes used).
fn varint(b: &[u8]) -> (u64, usize) {
    let mut v: u64 = 0;
    for (i, &byte) in b.iter().enumerate().take(9) {
        if i == 8 {
            return ((v << 8) | byte as u64, 9);
        }
        v = (v << 7) | (byte & 0x7f) as u64;
        if byte & 0x80 == 0 {
            return (v, i + 1);
        }
    }
    panic!("truncated varint")
}
