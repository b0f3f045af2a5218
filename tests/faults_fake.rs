//! Faults a real memcached cannot be made to produce, from an in-process fake
//! node (`waffle_testkit::fake_node`) that speaks the meta protocol and misbehaves
//! on command: `SERVER_ERROR`, the connection closed before a reply or in the
//! middle of a value, a value truncated (then silence), a value whose
//! announced length is wrong, a short but well-formed value, a corrupted byte,
//! another key's value, garbage, no answer at all; and for stores
//! `SERVER_ERROR`, `NS`, a closed connection.
//!
//! 1. Through SQLite: the grid is the fake node and a real memcached; the
//!    differential workload runs while each fault is injected in turn on
//!    every third grid hit of the fake. Results identical to a plain database,
//!    integrity ok, and each injected fault is counted exactly where it
//!    belongs (`l2_faults.*` or `l2_rejects.*`), never served.
//! 2. Below SQLite: the grid client's pipelined calls (`mg ... k O q` + `mn`,
//!    quiet `ms`, `md`) against the same faults: a value is only ever given
//!    for the key it was stored under, or is refused by its envelope.
//!
//!     cargo test --release -p waffle-e2e --test faults_fake

use std::time::{Duration, Instant};

use serde_json::Value;
use waffle_core::envelope::{self, Identity};
use waffle_core::grid::{Fetch, Grid, GridOptions, NodeSpec};
use waffle_testkit::db::{flush, n, stats};
use waffle_testkit::fake_node::{FakeNode, GetFault, SetFault};
use waffle_testkit::nodes::start_node;
use waffle_testkit::soak::soak_rounds;
use waffle_testkit::workload::Differential;
use waffle_testkit::{pattern, wait_for};

fn rounds() -> u64 {
    soak_rounds(1, 30)
}

fn delta(after: &Value, before: &Value, path: &str) -> u64 {
    n(after, path) - n(before, path)
}

/// Where an injected get fault must show up in the stats, and whether that
/// count is exact (only the fake node can cause it) or a lower bound
/// (timeouts: a loaded machine can make the real node late too).
fn counter_of(f: GetFault) -> (&'static str, bool) {
    match f {
        GetFault::ServerError => ("l2_faults.server_error", true),
        GetFault::CloseBeforeReply | GetFault::CloseMidValue => ("l2_faults.io", true),
        GetFault::TruncatedValue | GetFault::Hang => ("l2_faults.timeout", false),
        GetFault::WrongLength | GetFault::Garbage => ("l2_faults.protocol", true),
        GetFault::ShortValue => ("l2_rejects.length", true),
        GetFault::CorruptByte => ("l2_rejects.checksum", true),
        GetFault::OtherKey => ("l2_rejects.page", true),
    }
}

/// Which of the fake node's faults a run injects: the run is split into tests
/// (each its own fake, node and database) so that they run side by side; one
/// test of them all took 85-130 s, the longest of the suite.
enum Faults {
    /// Replies to `mg` (these of `GetFault::ALL`): each must be a counted miss or reject, never served.
    Gets(std::ops::Range<usize>),
    /// Replies to `ms`: each must be a counted push failure, never a wrong result.
    Sets,
}

#[test]
fn every_injected_reply_fault_is_a_counted_miss_and_never_a_wrong_result() {
    injected_faults(Faults::Gets(0..GetFault::ALL.len() / 2), "faults-fake-get", 0xFA_0004);
}

#[test]
fn every_other_injected_reply_fault_is_a_counted_miss_and_never_a_wrong_result() {
    injected_faults(Faults::Gets(GetFault::ALL.len() / 2..GetFault::ALL.len()), "faults-fake-get2", 0xFA_0006);
}

#[test]
fn every_injected_store_fault_is_a_counted_push_failure_and_never_a_wrong_result() {
    injected_faults(Faults::Sets, "faults-fake-set", 0xFA_0005);
}

fn injected_faults(which: Faults, name: &str, seed: u64) {
    let started = Instant::now();
    let fake = FakeNode::start();
    let real = start_node(64);
    let grid = format!("{},{}", fake.addr(), real.addr());
    // Long enough that a stall of a loaded machine is not a timeout racing the injected fault.
    let mut d = Differential::over_grid(name, "delete", 4096, seed, &grid, 500);

    // No fault: the fake node is a working grid node.
    d.run(500);
    let (_, hits) = fake.gets();
    assert!(hits > 20, "the fake node should serve pages like a real one (hits {hits}): {}", stats(&d.cached));
    assert_eq!(n(&stats(&d.cached), "l2_rejects_total"), 0);

    let mut table = Vec::new();
    for _ in 0..rounds() {
        let gets = match &which {
            Faults::Gets(range) => &GetFault::ALL[range.clone()],
            Faults::Sets => &[],
        };
        for &fault in gets {
            let before = stats(&d.cached);
            let injected_before = fake.injected(fault);
            fake.fail_gets(Some(fault), 3);
            let want = injected_before + 3;
            let met = d.run_until(Duration::from_secs(30), |_| fake.injected(fault) >= want);
            assert!(met, "{fault:?} was injected only {} times in 30 s", fake.injected(fault) - injected_before);
            d.check(); // integrity and every row, with the fault still on
            fake.fail_gets(None, 1);
            let after = stats(&d.cached);
            let injected = fake.injected(fault) - injected_before;
            let (counter, exact) = counter_of(fault);
            let counted = delta(&after, &before, counter);
            let ctx = format!("{fault:?}: injected {injected}, {counter} +{counted}: {after}");
            if exact {
                // A reply the fake node sent after the client's deadline (a stall of a loaded
                // machine, 500 ms) is counted as that request's timeout, never served: the
                // injected fault is then in l2_faults.timeout. CI saw 101 of 102 corrupt bytes
                // as checksum rejects beside a 501 ms request.
                let late = delta(&after, &before, "l2_faults.timeout");
                assert!(
                    counted <= injected && counted + late >= injected,
                    "each injected fault is counted once, where it belongs (or as a timeout, {late} here): {ctx}"
                );
            } else {
                assert!(counted >= injected, "{ctx}");
            }
            if fault == GetFault::ServerError {
                let downs = |s: &Value| s["nodes"][0]["marked_down"].as_u64().expect("nodes[0].marked_down");
                assert_eq!(downs(&after), downs(&before), "SERVER_ERROR says the node is alive: {ctx}");
            }
            table.push(format!("{fault:?}: injected {injected}, counted in {counter}: +{counted}"));
            // Back to normal: the node is probed up again before the next fault.
            let up = d.run_until(Duration::from_secs(15), |d| stats(&d.cached)["nodes"][0]["up"] == true);
            assert!(up, "the fake node did not come back up after {fault:?}");
        }

        let sets = [(SetFault::ServerError, 4), (SetFault::NotStored, 4), (SetFault::Close, 9)];
        for (fault, every) in sets.into_iter().filter(|_| matches!(which, Faults::Sets)) {
            let before = stats(&d.cached);
            let injected_before = fake.injected_set(fault);
            fake.fail_sets(Some(fault), every);
            let want = injected_before + 3;
            let met = d.run_until(Duration::from_secs(30), |_| fake.injected_set(fault) >= want);
            assert!(met, "{fault:?} was injected only {} times in 30 s", fake.injected_set(fault) - injected_before);
            flush(&d.cached);
            d.check();
            fake.fail_sets(None, 1);
            // A batch whose refusal the fake has counted may still be on its way
            // back to the pusher: wait for the pusher before counting.
            flush(&d.cached);
            let after = stats(&d.cached);
            let injected = fake.injected_set(fault) - injected_before;
            let failed = delta(&after, &before, "l2_push_failures");
            assert!(
                failed >= injected,
                "{fault:?}: {injected} stores refused, {failed} push failures counted: {after}"
            );
            table.push(format!("store {fault:?}: injected {injected}, l2_push_failures +{failed}"));
            let up = d.run_until(Duration::from_secs(15), |d| stats(&d.cached)["nodes"][0]["up"] == true);
            assert!(up, "the fake node did not come back up after {fault:?}");
        }
    }

    // And normal again: the fake node serves.
    let (_, hits_before) = fake.gets();
    d.run(300);
    assert!(fake.gets().1 > hits_before, "the fake node should serve again");
    let r = d.finish();
    for line in &table {
        eprintln!("  {line}");
    }
    eprintln!("{} in {:.1}s", r.line(), started.elapsed().as_secs_f64());
}

/// Waits until the grid's one node is up: a fault of the round before marked
/// it down, and requests skipped now would test nothing. The probe is a `get`
/// of a key nobody stores (a miss: the fake injects faults into hits only).
fn wait_up(grid: &Grid) {
    wait_for(Duration::from_secs(5), "the fake node to be up again", || {
        if !grid.node_status()[0].up {
            grid.get(b"waffle:probe");
        }
        grid.node_status()[0].up
    });
}

/// Below SQLite: the grid client's pipelined fetch (`mg <key> v T-1 q O<i>`
/// ... `mn`), quiet stores and deletes against a fake node injecting every
/// fault. Every value handed back either opens as exactly the page stored
/// under that key, or is refused by the envelope; a pipeline broken midway
/// loses only the keys not yet answered.
#[test]
fn the_grid_client_never_hands_back_a_value_for_the_wrong_key() {
    let fake = FakeNode::start();
    let spec = NodeSpec::parse_list(&fake.addr()).unwrap();
    let grid = Grid::new(
        spec,
        GridOptions { timeout_ms: 100, backoff_min_ms: 1, backoff_max_ms: 1, ..GridOptions::default() },
    );
    const CACHE: u64 = 0xC0FFEE;
    const PAGES: u64 = 48;
    let page = |p: u64, version: u64| pattern(p << 8 | version, 512);
    let mut wrong_key_values = 0u64;
    let mut refused = 0u64;
    let mut served = 0u64;
    for (round, fault) in GetFault::ALL.iter().copied().cycle().take(3 * GetFault::ALL.len()).enumerate() {
        let version = round as u64 + 1;
        let keys: Vec<String> = (0..PAGES).map(|p| envelope::key(CACHE, p)).collect();
        let values: Vec<Vec<u8>> = (0..PAGES)
            .map(|p| envelope::seal(Identity { cache_id: CACHE, page: p, version }, &page(p, version)))
            .collect();
        let items: Vec<(&[u8], &[u8])> = keys.iter().zip(&values).map(|(k, v)| (k.as_bytes(), v.as_slice())).collect();
        wait_up(&grid);
        let report = grid.store_many(&items);
        assert_eq!(report.stored + report.failed + report.skipped, items.len(), "{report:?}");

        fake.fail_gets(Some(fault), 4);
        let key_refs: Vec<&[u8]> = keys.iter().map(|k| k.as_bytes()).collect();
        let fetched = grid.take_many(&key_refs);
        fake.fail_gets(None, 1);
        assert_eq!(fetched.len(), keys.len());
        for (p, f) in fetched.iter().enumerate() {
            let Fetch::Hit(v) = f else { continue };
            let expect = Identity { cache_id: CACHE, page: p as u64, version };
            match envelope::open(v, expect, 512) {
                Ok(payload) => {
                    assert_eq!(
                        payload,
                        &page(p as u64, version)[..],
                        "round {round} ({fault:?}): page {p} opened with other bytes"
                    );
                    served += 1;
                }
                Err(why) => {
                    refused += 1;
                    if why == envelope::Reject::Page {
                        wrong_key_values += 1;
                    }
                }
            }
        }
        // md of every key: HD or NF, never a desynchronized stream.
        wait_up(&grid);
        for k in &keys {
            grid.delete(k.as_bytes());
        }
    }
    assert!(served > 100, "the pipelined fetch should mostly work: {served} served");
    assert!(refused > 0 && wrong_key_values > 0, "OtherKey faults should be refused by the envelope");
    eprintln!(
        "grid client: {served} values served, {refused} refused by their envelope ({wrong_key_values} for another key)"
    );
}
