//! Differential test: one seeded random workload runs on a plain database
//! (SQLite's default VFS) and on one opened through `waffle` with a tiny L1
//! (16 KiB) and an 8-page SQLite cache over three memcached nodes, so nearly
//! every page read goes below L1 (push queue, grid, disk). Every statement's
//! result (rows, row counts, errors) must be identical, both databases must
//! pass `PRAGMA integrity_check`, and their final dumps and files must be equal.
//!
//! Proves invariant 1 (no tier returns bytes that differ from the file) under
//! inserts, updates, deletes, overflow pages, VACUUM (truncation), schema
//! changes, rollbacks (journal playback and spilled pages) and WAL
//! checkpoints, for journal_mode DELETE and WAL at 4 KiB and 16 KiB pages.

use std::time::Instant;

use waffle_testkit::nodes::{grid_of, start_node};
use waffle_testkit::test_cases;
use waffle_testkit::workload::{dump, Differential};

const OPS: usize = 2500;

test_cases! { run;
    delete_journal_4k: "delete", 4096, 0xD1_4096;
    delete_journal_16k: "delete", 16384, 0xD1_16384;
    wal_4k: "wal", 4096, 0x3A1_4096;
    wal_16k: "wal", 16384, 0x3A1_16384;
}

fn run(name: &str, journal: &str, page_size: usize, seed: u64) {
    let started = Instant::now();
    let nodes = [start_node(64), start_node(64), start_node(64)];
    let grid = grid_of(&nodes);
    let mut d = Differential::over_grid(&format!("diff-{name}"), journal, page_size, seed, &grid, 1000);
    d.run(OPS);
    d.commit();
    let tag = d.tag.clone();
    assert!(
        dump(&d.plain).iter().map(|(_, r)| r.len()).sum::<usize>() > 100,
        "{tag} the workload left too little to compare"
    );
    // Integrity, equal dumps, then both closed and their files compared byte for byte.
    let report = d.finish();

    let s = &report.stats;
    let ctx = format!("{tag} stats: {s:?}");
    assert_eq!(s.page_bytes as usize, page_size, "{ctx}");
    assert!(s.l2_pushes > 0, "the grid was never pushed to: {ctx}");
    assert!(s.l2_hits > 0, "the grid never answered a read: {ctx}");
    // Nearly every read went below L1 (tiny L1, tiny SQLite cache).
    assert!(s.l1_misses > s.l1_hits, "L1 was not the bottleneck it should be here: {ctx}");
    // No fault is injected: every value a node returns is one we stored,
    // intact, and current. A page's newer bytes are always in L1, in the push
    // queue, in the batch being pushed, or already stored over the older copy;
    // a `version` reject means a read went to the grid while the newer version
    // was still in memory (see push_in_flight.rs).
    assert_eq!(s.l2_rejects_total, 0, "a grid value was rejected with no fault injected: {ctx}");
    // Nobody else writes this file: our own commits, checkpoints and WAL
    // restarts must never look like another writer's.
    assert_eq!(s.foreign_changes, 0, "our own writes looked foreign: {ctx}");
    // And with room on the nodes, nothing pushed is lost: a miss is a page
    // that was dropped or failed to push.
    assert!(
        s.l2_misses <= s.l2_push_drops + s.l2_push_failures,
        "pages pushed to the grid were not found again: {ctx}"
    );
    // Every node took part (keys spread by ketama over three nodes).
    assert_eq!(s.nodes.len(), 3, "{ctx}");
    for node in &s.nodes {
        assert!(node.requests > 0, "a node was never asked: {ctx}");
    }
    eprintln!(
        "{tag} {} ops, {} rows compared; l1_hits {} l1_misses {} push_queue_hits {} l2_hits {} \
         l2_misses {} l2_rejects.version {} l2_pushes {} disk_reads {} disk_writes {} truncates {} faults {} in {:.1}s",
        report.tally.ops,
        report.tally.rows_compared,
        s.l1_hits,
        s.l1_misses,
        s.push_queue_hits,
        s.l2_hits,
        s.l2_misses,
        s.l2_rejects.version,
        s.l2_pushes,
        s.disk_reads,
        s.disk_writes,
        s.truncates,
        serde_json::json!(s.l2_faults),
        started.elapsed().as_secs_f64()
    );
}
