//! The control behind every byte-for-byte file comparison of the
//! differential tests (`workload::assert_same_files`): two plain databases
//! (no waffle anywhere) given one workload in one process end byte-equal
//! under the settings `workload::setup` uses, `secure_delete` among them.
//!
//! Without `secure_delete`, SQLite writes whatever its page buffers held into
//! pages' unused space (freed cells, freelist leaves it does not write), so
//! the files differ there: seeds 3 and 13 of this workload did (issue 19, the
//! faults_fake difference: old cell bytes in one file, zeros in the other).
//! Remove the pragma from `setup` and this test fails.
//!
//! Even with it, two plain databases whose statements interleave in one
//! process can end with different bytes in free pages (SQLite's page cache is
//! shared by a process's connections in rusqlite's build; waffle_testkit's
//! `same_files` says why): a fixed sequence that does, found as a difference
//! in `faults_nodes` (session 19), shows it and that the comparison, which
//! leaves free pages' bytes out, still passes them.

use waffle_testkit::db::open_plain;
use waffle_testkit::same_files::FreeList;
use waffle_testkit::temp_dir::TempDir;
use waffle_testkit::workload::{apply, dump, setup, Op, Workload};

const OPS: usize = 3000;
const PAGE_BYTES: usize = 4096;
/// Held by each test: the page cache is the process's, so a test running beside another
/// would see that one's connections recycle its pages, and the fixed sequence below, which
/// differs when alone, does not then (measured: no page differed with both tests running).
static ALONE: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn two_plain_databases_given_one_workload_end_byte_equal() {
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    for seed in [3, 13, 21] {
        for journal in ["delete", "wal"] {
            let dir = TempDir::new("differential-control");
            let (pa, pb) = (dir.join("a.db"), dir.join("b.db"));
            let (a, b) = (open_plain(&pa), open_plain(&pb));
            setup(&a, journal, PAGE_BYTES);
            setup(&b, journal, PAGE_BYTES);
            let mut work = Workload::new(seed, PAGE_BYTES);
            for _ in 0..OPS {
                let op = work.next_op();
                assert!(apply(&a, &op) == apply(&b, &op), "seed {seed} {journal}: results differ");
            }
            if work.in_txn() {
                let commit = waffle_testkit::workload::Op::Exec("COMMIT".into(), vec![]);
                apply(&a, &commit);
                apply(&b, &commit);
            }
            drop((a, b));
            let tag = format!("seed {seed} {journal}:");
            waffle_testkit::workload::assert_same_files(&pa, &pb, journal, PAGE_BYTES, &tag);
        }
    }
}

/// `faults_nodes::a_node_killed_mid_workload_then_restarted_empty`'s statements (seed
/// 0xfa0001; its restarted node came back after 56 and 60 statements in the run that
/// differed) on two plain databases, one statement each in turn, with its checks (SQLite's
/// caches dropped on both, integrity, dumps). No waffle anywhere, and free pages differ.
#[test]
fn two_plain_databases_interleaved_in_one_process_differ_only_in_free_pages() {
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    let dir = TempDir::new("differential-control-free");
    let (pa, pb) = (dir.join("a.db"), dir.join("b.db"));
    let (a, b) = (open_plain(&pa), open_plain(&pb));
    setup(&a, "delete", PAGE_BYTES);
    setup(&b, "delete", PAGE_BYTES);
    let mut work = Workload::new(0xFA_0001, PAGE_BYTES);
    {
        let step = |n: usize, work: &mut Workload| {
            for _ in 0..n {
                let op = work.next_op();
                assert!(apply(&a, &op) == apply(&b, &op), "results differ");
            }
        };
        let check = |work: &mut Workload| {
            if work.in_txn() {
                let commit = Op::Exec("COMMIT".into(), vec![]);
                apply(&a, &commit);
                apply(&b, &commit);
                work.committed();
            }
            for c in [&a, &b] {
                waffle_testkit::db::drop_pager_cache(c);
            }
            for c in [&a, &b] {
                let ok: String = c.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
                assert_eq!(ok, "ok");
            }
            for c in [&a, &b] {
                waffle_testkit::db::drop_pager_cache(c);
            }
            assert!(dump(&a) == dump(&b), "dumps differ");
        };
        for until_back in [56, 60] {
            step(800, &mut work);
            check(&mut work);
            step(until_back + 700, &mut work);
        }
        check(&mut work);
    }
    drop((a, b));

    let (fa, fb) = (std::fs::read(&pa).unwrap(), std::fs::read(&pb).unwrap());
    let free = FreeList::of(&fa, PAGE_BYTES);
    assert_eq!(free, FreeList::of(&fb, PAGE_BYTES), "the free lists are the same");
    let differ: Vec<u32> = (0..fa.len() / PAGE_BYTES)
        .filter(|&i| fa[i * PAGE_BYTES..(i + 1) * PAGE_BYTES] != fb[i * PAGE_BYTES..(i + 1) * PAGE_BYTES])
        .map(|i| i as u32 + 1)
        .collect();
    let leaves: Vec<u32> = free.trunks.iter().flat_map(|(_, l)| l.iter().copied()).collect();
    eprintln!("pages that differ: {differ:?}; free leaves: {}", leaves.len());
    assert!(!differ.is_empty(), "control: this sequence leaves different bytes in free pages");
    assert!(differ.iter().all(|p| leaves.contains(p)), "only free leaves differ: {differ:?}");
    waffle_testkit::workload::assert_same_files(&pa, &pb, "delete", PAGE_BYTES, "interleaved plain pair");
}
