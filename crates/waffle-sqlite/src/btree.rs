//! SQLite's b-tree page format, as far as finding one tree's pages needs:
//! the child pointers of interior pages and the first page of each cell's
//! overflow chain (https://www.sqlite.org/fileformat2.html, "B-tree Pages").
//! Page numbers here are SQLite's, from 1; page 1 starts with the 100-byte
//! database header. A page that does not parse yields what parsed before the
//! fault: warming a damaged tree warms less, it is never wrong.

/// The database header's fields a walk needs, from page 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub page_bytes: usize,
    /// Bytes of each page the b-tree uses (the page less its reserved tail).
    pub usable_bytes: usize,
}

impl Header {
    pub fn parse(page1: &[u8]) -> Option<Header> {
        if page1.len() < 100 || &page1[..16] != b"SQLite format 3\0" {
            return None;
        }
        let page_bytes = match u16::from_be_bytes([page1[16], page1[17]]) {
            1 => 65536,
            n => n as usize,
        };
        let usable_bytes = page_bytes.checked_sub(page1[20] as usize)?;
        (page_bytes.is_power_of_two() && (512..=65536).contains(&page_bytes) && usable_bytes >= 480)
            .then_some(Header { page_bytes, usable_bytes })
    }
}

/// The pages one b-tree page points to.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Links {
    /// Child pages (interior pages only).
    pub children: Vec<u32>,
    /// The first overflow page of each cell that spills.
    pub overflow: Vec<u32>,
}

/// The next page of an overflow chain (0: the chain ends).
pub fn overflow_next(page: &[u8]) -> u32 {
    be32(page, 0).unwrap_or(0)
}

/// What b-tree page `number` (its bytes `page`) points to.
pub fn links(number: u32, page: &[u8], usable_bytes: usize) -> Links {
    let mut links = Links::default();
    let _ = parse(number, page, usable_bytes, &mut links);
    links
}

fn parse(number: u32, page: &[u8], usable: usize, links: &mut Links) -> Option<()> {
    let page = page.get(..usable)?;
    let h = if number == 1 { 100 } else { 0 };
    let kind = *page.get(h)?;
    let (interior, table) = match kind {
        2 => (true, false),
        5 => (true, true),
        10 => (false, false),
        13 => (false, true),
        _ => return None, // not a b-tree page (freed and reused since it was named)
    };
    let cells = u16::from_be_bytes([*page.get(h + 3)?, *page.get(h + 4)?]) as usize;
    let header_len = if interior { 12 } else { 8 };
    if interior {
        links.children.push(be32(page, h + 8)?);
    }
    // Most bytes of a payload kept on the page (fileformat2, "Cell Payload Overflow Pages").
    let max_local = if table { usable - 35 } else { (usable - 12) * 64 / 255 - 23 };
    let min_local = (usable - 12) * 32 / 255 - 23;
    for i in 0..cells {
        let at = h + header_len + 2 * i;
        let mut off = u16::from_be_bytes([*page.get(at)?, *page.get(at + 1)?]) as usize;
        if interior {
            links.children.push(be32(page, off)?);
            off += 4;
        }
        if interior && table {
            continue; // a table's interior cell is a child and a rowid: no payload
        }
        let (payload, n) = varint(page.get(off..)?)?;
        off += n;
        if table {
            off += varint(page.get(off..)?)?.1; // the rowid
        }
        let payload = usize::try_from(payload).ok()?;
        if payload > max_local {
            let spill = min_local + (payload - min_local) % (usable - 4);
            let local = if spill <= max_local { spill } else { min_local };
            links.overflow.push(be32(page, off.checked_add(local)?)?);
        }
    }
    Some(())
}

fn be32(page: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(page.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

/// SQLite's varint: 1 to 9 bytes, big-endian, 7 bits a byte (8 in the ninth).
fn varint(b: &[u8]) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for i in 0..9 {
        let byte = *b.get(i)?;
        if i == 8 {
            return Some(((v << 8) | byte as u64, 9));
        }
        v = (v << 7) | (byte & 0x7f) as u64;
        if byte & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeSet, VecDeque};

    /// Walks the tree rooted at `root` in a database file's bytes, as warm.rs does (level by level).
    fn walk(file: &[u8], root: u32) -> BTreeSet<u32> {
        let header = Header::parse(file).expect("a database header");
        let page = |n: u32| &file[(n as usize - 1) * header.page_bytes..n as usize * header.page_bytes];
        let mut seen = BTreeSet::new();
        let mut todo = VecDeque::from([(root, false)]);
        while let Some((n, overflow)) = todo.pop_front() {
            if n == 0 || !seen.insert(n) {
                continue;
            }
            if overflow {
                todo.push_back((overflow_next(page(n)), true));
            } else {
                let l = links(n, page(n), header.usable_bytes);
                todo.extend(l.children.into_iter().map(|c| (c, false)));
                todo.extend(l.overflow.into_iter().map(|c| (c, true)));
            }
        }
        seen
    }

    /// SQLite's own answer: dbstat lists every page of a tree, overflow pages included.
    fn dbstat(conn: &rusqlite::Connection, name: &str) -> BTreeSet<u32> {
        let mut stmt = conn.prepare("SELECT pageno FROM dbstat WHERE name = ?1").unwrap();
        let rows = stmt.query_map([name], |r| r.get::<_, u32>(0)).unwrap();
        rows.map(Result::unwrap).collect()
    }

    #[test]
    fn the_walk_finds_exactly_the_pages_sqlite_counts_with_overflow_chains() {
        let dir = std::env::temp_dir().join(format!("waffle-btree-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (page_bytes, reserved) in [(4096, 0), (1024, 0), (512, 32)] {
            let path = dir.join(format!("walk-{page_bytes}.db"));
            let _ = std::fs::remove_file(&path);
            let conn = rusqlite::Connection::open(&path).unwrap();
            conn.execute_batch(&format!("PRAGMA page_size = {page_bytes}; VACUUM;")).unwrap();
            if reserved > 0 {
                // The reserved tail shrinks the usable bytes every formula above uses.
                let mut n: std::os::raw::c_int = reserved;
                // SAFETY: an open connection, the main schema, and the int this op reads and writes.
                let rc = unsafe {
                    rusqlite::ffi::sqlite3_file_control(
                        conn.handle(),
                        c"main".as_ptr(),
                        rusqlite::ffi::SQLITE_FCNTL_RESERVE_BYTES,
                        &mut n as *mut _ as *mut std::os::raw::c_void,
                    )
                };
                assert_eq!(rc, 0);
                conn.execute_batch("VACUUM").unwrap();
            }
            conn.execute_batch(
                "CREATE TABLE t(id INTEGER PRIMARY KEY, a TEXT, b BLOB);
                 CREATE INDEX t_a ON t(a);
                 CREATE TABLE w(k TEXT PRIMARY KEY, v BLOB, u INTEGER UNIQUE) WITHOUT ROWID;
                 CREATE TABLE other(x);",
            )
            .unwrap();
            let tx = conn.unchecked_transaction().unwrap();
            for i in 0..3000i64 {
                // Payloads from a few bytes to several pages: cells that fit, spill, and chain.
                let len = (i * 37 % 9000) as usize;
                let blob = vec![(i % 251) as u8; len];
                let text = format!("{i:08}-{}", "x".repeat((i % 700) as usize));
                tx.execute("INSERT INTO t VALUES (?1, ?2, ?3)", rusqlite::params![i, text, blob]).unwrap();
                tx.execute("INSERT INTO w VALUES (?1, ?2, ?3)", rusqlite::params![text, blob, i]).unwrap();
                tx.execute("INSERT INTO other VALUES (?1)", [i]).unwrap();
            }
            tx.commit().unwrap();
            let roots: Vec<(String, u32)> = conn
                .prepare("SELECT name, rootpage FROM sqlite_schema WHERE rootpage > 0")
                .unwrap()
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                .unwrap()
                .map(Result::unwrap)
                .collect();
            assert!(roots.len() >= 5, "t, t_a, w (an index b-tree), w's unique index, other: {roots:?}");
            let file = std::fs::read(&path).unwrap();
            let mut overflow_seen = false;
            for (name, root) in &roots {
                let expected = dbstat(&conn, name);
                let found = walk(&file, *root);
                assert_eq!(found, expected, "{name} at page size {page_bytes}, {reserved} reserved");
                let stat_overflow: i64 = conn
                    .query_row("SELECT count(*) FROM dbstat WHERE name = ?1 AND pagetype = 'overflow'", [name], |r| {
                        r.get(0)
                    })
                    .unwrap();
                overflow_seen |= stat_overflow > 0;
            }
            assert!(overflow_seen, "the data made overflow chains at page size {page_bytes}");
            // sqlite_schema itself lives at page 1, behind the database header.
            assert_eq!(walk(&file, 1), dbstat(&conn, "sqlite_schema"));
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn varints_and_damaged_pages() {
        assert_eq!(varint(&[0x05]), Some((5, 1)));
        assert_eq!(varint(&[0x81, 0x00]), Some((128, 2)));
        assert_eq!(varint(&[0xff; 9]), Some((u64::MAX, 9)));
        assert_eq!(varint(&[0x80]), None);
        // A page of another kind, or cut short: nothing (or what parsed) comes back.
        assert_eq!(links(2, &[0u8; 4096], 4096), Links::default());
        let mut p = vec![0u8; 512];
        p[0] = 5; // table interior, right child 7, 1000 cells pointing outside the page
        p[8..12].copy_from_slice(&7u32.to_be_bytes());
        p[3..5].copy_from_slice(&1000u16.to_be_bytes());
        assert_eq!(links(2, &p, 512).children[0], 7);
    }
}
