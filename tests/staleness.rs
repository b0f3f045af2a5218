//! Stale grid copies are never served (invariant 3).
//!
//! 1. A node that missed an update: page P is pushed (version v0), the node
//!    is SIGSTOPped, P is rewritten and its new version cannot reach the node,
//!    the node is SIGCONTed still holding P@v0. Reading P back must give the
//!    new bytes, and the stats must count the old copy as a `version` reject.
//!
//!    How it is made deterministic: the writer connection has a big SQLite
//!    cache, so the UPDATE rewrites P from SQLite's own memory without reading
//!    it (a fetch of P would expire the old copy: a request sent to a paused
//!    node is still executed when the node resumes). Reads through a second
//!    connection mark the paused node down and grow its backoff to 800 ms;
//!    inside that window the UPDATE happens and P@v1 is evicted from the tiny
//!    L1, so its push is skipped (never sent). A direct `mg` after the resume
//!    checks the node still holds P@v0 (the scenario is retried on a fresh
//!    database if a probe happened to carry P@v1).
//!
//! 2. A node killed and restarted empty while the database keeps working: no
//!    error, every result correct, the grid used again afterwards.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rusqlite::{params, Connection};
use waffle_core::stats::CacheSnapshot;
use waffle_testkit::db::{cache_id, cache_stats, create_blob_table, drop_pager_cache, flush, open_plain, open_waffle};
use waffle_testkit::db_file::leaf_pages_by_rowid;
use waffle_testkit::nodes::{start_node, Node};
use waffle_testkit::raw_client::{envelope_identity, key, mg, node_stat};
use waffle_testkit::temp_dir::TempDir;
use waffle_testkit::{pattern, wait_for, wait_until};

const ROW: usize = 3000; // one row per 4 KiB leaf page
const A_ROWS: i64 = 40;
const B_BASE: i64 = 100_000; // rowids unique across both tables
const B_ROWS: i64 = 200;
const X: i64 = 20;

fn node_state(conn: &Connection) -> (bool, u64) {
    let s = cache_stats(conn);
    let node = &s.nodes[0];
    (node.up, node.failures)
}

/// Reads rows of table b in turn through `conn` (a small SQLite cache), so
/// that each read misses SQLite's cache and L1 and asks the grid.
struct Reader<'c> {
    conn: &'c Connection,
    next: i64,
}

impl Reader<'_> {
    fn read_one(&mut self) {
        let id = B_BASE + self.next % B_ROWS;
        self.next += 1;
        let v: Vec<u8> = self.conn.query_row("SELECT v FROM b WHERE id = ?", [id], |r| r.get(0)).unwrap();
        assert_eq!(v, pattern(id as u64, ROW), "row {id} of b");
    }
}

fn create(conn: &Connection) {
    conn.execute_batch("PRAGMA cache_size = -16000; CREATE TABLE a(id INTEGER PRIMARY KEY, v BLOB); CREATE TABLE b(id INTEGER PRIMARY KEY, v BLOB);")
        .unwrap();
    let tx = conn.unchecked_transaction().unwrap();
    for id in 1..=A_ROWS {
        tx.execute("INSERT INTO a VALUES (?, ?)", params![id, pattern(id as u64, ROW)]).unwrap();
    }
    for id in B_BASE..B_BASE + B_ROWS {
        tx.execute("INSERT INTO b VALUES (?, ?)", params![id, pattern(id as u64, ROW)]).unwrap();
    }
    tx.commit().unwrap();
}

fn integrity_ok(conn: &Connection) {
    let r: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
    assert_eq!(r, "ok");
}

/// No grid value was refused but as stale (a version older than the page's).
fn assert_only_stale_rejects(s: &CacheSnapshot) {
    let k = &s.l2_rejects;
    let others = [("length", k.length), ("format", k.format), ("checksum", k.checksum)];
    let others = others.into_iter().chain([("database", k.database), ("page", k.page), ("size", k.size)]);
    for (kind, n) in others {
        assert_eq!(n, 0, "unexpected {kind} reject: {s:?}");
    }
}
#[test]
fn a_copy_made_stale_while_its_node_was_paused_is_rejected() {
    let node = start_node(64);
    let mut why = Vec::new();
    for attempt in 1..=3 {
        match paused_rewrite(&node, attempt) {
            Ok(()) => return,
            Err(e) => {
                eprintln!("attempt {attempt}: scenario not set up: {e}; retrying on a fresh database");
                why.push(e);
            }
        }
        node.resume();
    }
    panic!("the stale-copy scenario could not be set up in 3 attempts: {why:?}");
}

/// Err: the scenario did not come about (timing); a failed assertion panics.
fn paused_rewrite(node: &Node, attempt: u32) -> Result<(), String> {
    let dir = TempDir::new(&format!("stale-{attempt}"));
    let path = dir.join("s.db");
    let addr = node.addr();
    let params = [("waffle_grid", addr.as_str()), ("waffle_local", "16KiB"), ("waffle_timeout_ms", "100")];
    let writer = open_waffle(&path, &params);
    create(&writer);
    let reader_conn = open_waffle(&path, &params);
    reader_conn.execute_batch("PRAGMA cache_size = 10").unwrap();
    let mut reader = Reader { conn: &reader_conn, next: 0 };

    // Everything out of L1 and into the grid.
    for _ in 0..20 {
        reader.read_one();
    }
    flush(&writer);
    let (up, failures) = node_state(&writer);
    if !up || failures > 0 {
        return Err(format!("the node failed before the pause (loaded machine?): up {up}, failures {failures}"));
    }
    let id = cache_id(&writer);
    let page = *leaf_pages_by_rowid(&path, 4096).get(&X).expect("row X is on a leaf page");
    let key = key(id, page - 1);
    let Some(old_copy) = mg(&addr, &key) else {
        return Err(format!("page {page} ({key}) was not in the grid after the flush"));
    };
    let (cid, pg, v0) = envelope_identity(&old_copy);
    assert_eq!((cid, pg), (id, page - 1), "the envelope under {key} names another page");

    // Pause; grow the node's backoff to 800 ms (down after MISSES_TO_DOWN missed
    // deadlines: 100 ms, then 3 failed probes: 200, 400, 800 ms).
    node.pause();
    let failed = waffle_core::grid::MISSES_TO_DOWN as u64 + 3;
    wait_for(Duration::from_secs(20), "the paused node to fail 6 times (reads drive the probes)", || {
        reader.read_one();
        let (up, failures) = node_state(&writer);
        !up && failures >= failed
    });

    // Inside the backoff window: rewrite P (from SQLite's cache: no read of P),
    // then evict P@v1 from L1; its push is skipped.
    let window = Instant::now();
    let before = cache_stats(&writer);
    let new = pattern(0xbeef, ROW);
    assert_eq!(writer.execute("UPDATE a SET v = ? WHERE id = ?", params![new, X]).unwrap(), 1);
    for _ in 0..8 {
        reader.read_one();
    }
    flush(&writer);
    let after = cache_stats(&writer);
    let spent = window.elapsed();
    assert!(
        after.l2_push_failures > before.l2_push_failures,
        "evicted pages should have failed to push while the node was down: {after:?}"
    );
    assert!(after.disk_writes > before.disk_writes, "the UPDATE did not reach the file");

    node.resume();
    // Requests sent while it was paused run now; one may be a probe carrying P@v1, so the check
    // below must come after them. The client dropped their connections (timed out) and holds none
    // while the node is down and nothing is read or pushed; the node closes each once it has run
    // what was sent on it. So: wait until the node's only connection is the one asking.
    wait_for(Duration::from_secs(5), "the resumed node to finish the requests sent while it was paused", || {
        node_stat(&addr, "curr_connections") == 1
    });
    match mg(&addr, &key) {
        Some(v) if envelope_identity(&v).2 == v0 => {}
        Some(v) => {
            return Err(format!(
                "the node holds version {} of page {page}, not the stale {v0} (a probe carried it; window {spent:?})",
                envelope_identity(&v).2
            ))
        }
        None => return Err(format!("the stale copy of page {page} is gone (window {spent:?})")),
    }

    // Wait for the backoff to pass: a probe (a read) brings the node back up.
    let up = wait_until(Duration::from_secs(15), || {
        let up = node_state(&writer).0;
        if !up {
            reader.read_one();
        }
        up
    });
    assert!(up, "timed out after 15 s waiting for the resumed node to come back up: {:?}", cache_stats(&writer));

    // P is in neither L1 nor the push queue: a fresh connection's read asks the grid.
    let before = cache_stats(&writer);
    let fresh = open_waffle(&path, &params);
    let got: Vec<u8> = fresh.query_row("SELECT v FROM a WHERE id = ?", [X], |r| r.get(0)).unwrap();
    let after = cache_stats(&writer);
    assert!(got == new, "row {X} read back the OLD bytes after its page's stale copy was fetched");
    assert!(
        after.l2_rejects.version > before.l2_rejects.version,
        "the stale copy of page {page} (version {v0}) was not counted as a version reject.\nbefore: {before:?}\nafter: {after:?}"
    );
    assert_only_stale_rejects(&after);
    assert!(mg(&addr, &key).is_none(), "the rejected stale copy under {key} should have been expired by the fetch");

    // Every connection sees the new bytes; everything else is intact.
    for c in [&writer, &reader_conn, &fresh] {
        let v: Vec<u8> = c.query_row("SELECT v FROM a WHERE id = ?", [X], |r| r.get(0)).unwrap();
        assert!(v == new, "a connection read the old row {X}");
    }
    check_all(&fresh, |id| if id == X { new.clone() } else { pattern(id as u64, ROW) });
    integrity_ok(&fresh);
    eprintln!("stale copy of page {page} (v{v0}) rejected; critical window took {spent:?}");
    Ok(())
}

fn check_all(conn: &Connection, expect: impl Fn(i64) -> Vec<u8>) {
    let mut stmt = conn.prepare("SELECT id, v FROM a ORDER BY id").unwrap();
    let rows: Vec<(i64, Vec<u8>)> =
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap().collect::<Result<_, _>>().unwrap();
    assert_eq!(rows.len() as i64, A_ROWS);
    for (id, v) in rows {
        assert!(v == expect(id), "row {id} of a has wrong bytes");
    }
}

#[test]
fn a_node_killed_and_restarted_empty_changes_no_result() {
    let mut node = start_node(64);
    let dir = TempDir::new("killed");
    let path = dir.join("k.db");
    let addr = node.addr();
    let conn = open_waffle(&path, &[("waffle_grid", &addr), ("waffle_local", "16KiB"), ("waffle_timeout_ms", "200")]);
    create_blob_table(&conn, 10, 1..=300, |id| pattern(id as u64, ROW));
    let mut expect: BTreeMap<i64, Vec<u8>> = (1..=300).map(|id| (id, pattern(id as u64, ROW))).collect();
    flush(&conn);
    check(&conn, &expect, "before the kill");
    let s0 = cache_stats(&conn);
    assert!(s0.l2_hits > 0, "the grid should serve reads before the kill: {s0:?}");

    node.kill();
    for round in 0..3u64 {
        let tx = conn.unchecked_transaction().unwrap();
        for id in (1..=300i64).filter(|id| (*id as u64 + round).is_multiple_of(6)) {
            let v = pattern(0x1000 * (round + 1) + id as u64, ROW);
            tx.execute("UPDATE t SET v = ? WHERE id = ?", params![v, id]).unwrap();
            expect.insert(id, v);
        }
        tx.commit().unwrap();
        check(&conn, &expect, "while the node is dead");
    }
    let s1 = cache_stats(&conn);
    // The first request to fail may be a fetch (l2_faults) or a push (l2_push_failures): the node counts both.
    assert!(
        s1.nodes[0].failures > 0 && s1.l2_skipped > s0.l2_skipped,
        "a dead node should fail a request, then be skipped: {s1:?}"
    );
    assert!(!s1.nodes[0].up, "the dead node should be marked down: {s1:?}");

    node.restart().expect("restart memcached on the same port");
    // Reads (checked) drive the probes that bring the node back.
    wait_for(Duration::from_secs(15), "the restarted node to come back up", || {
        let up = cache_stats(&conn).nodes[0].up;
        if !up {
            check(&conn, &expect, "while the node comes back");
        }
        up
    });
    check(&conn, &expect, "after the restart");
    flush(&conn);
    let s2 = cache_stats(&conn);
    check(&conn, &expect, "after the restart, from the grid");
    let s3 = cache_stats(&conn);
    assert!(s3.l2_hits > s2.l2_hits, "the restarted node should serve reads again: {s3:?}");
    assert_only_stale_rejects(&s3);
    integrity_ok(&conn);
    drop(conn);
    // And after a clean close the file alone (plain SQLite) has every row.
    check(&open_plain(&path), &expect, "plain SQLite after close");
}

fn check(conn: &Connection, expect: &BTreeMap<i64, Vec<u8>>, when: &str) {
    drop_pager_cache(conn);
    let mut stmt = conn.prepare("SELECT id, v FROM t ORDER BY id").unwrap();
    let rows: BTreeMap<i64, Vec<u8>> =
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap().collect::<Result<_, _>>().unwrap();
    assert_eq!(rows.len(), expect.len(), "{when}: row count");
    for (id, v) in expect {
        assert!(rows.get(id) == Some(v), "{when}: row {id} has wrong bytes");
    }
}
