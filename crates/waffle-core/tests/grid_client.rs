//! The grid client against real memcached processes (waffle_nodes), and
//! against a fake node that answers what a broken one would.
//! Every wait is bounded; every process is killed when its `Node` drops.
//! Up/down decisions are checked on a clock the test moves ([`ManualClock`]),
//! not by timing them: only request deadlines are real time.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use waffle_core::grid::{Clock, FaultKind, Fetch, Grid, GridOptions, NodeSpec, StoreReport};
use waffle_nodes::Node;

/// Generous deadlines for tests that are about results, not timing: the
/// machine is small and shared.
fn relaxed() -> GridOptions {
    GridOptions {
        timeout_ms: 2000,
        connect_timeout_ms: 2000,
        backoff_min_ms: 100,
        backoff_max_ms: 400,
        ..GridOptions::default()
    }
}

/// Short deadlines for the fault tests.
fn tight() -> GridOptions {
    GridOptions { timeout_ms: 50, connect_timeout_ms: 50, ..relaxed() }
}

/// A node, a grid of it, and item `a` stored on it. Relaxed deadlines: the tests that use it
/// kill or restart the node, which closes or refuses at once on loopback; no deadline decides
/// them, and a request after the restart must not fail for a stall (tight ones did, under load).
fn node_holding_a() -> (Node, Grid) {
    let node = start_node();
    let grid = grid_of(&[&node], relaxed());
    wait_for(Duration::from_secs(5), "an item stored on the fresh node", || {
        (grid.store_many(&[(b"a", b"A")]).stored == 1).then_some(())
    });
    (node, grid)
}

fn start_node() -> Node {
    Node::start(64).expect("memcached must be installed (Debian package memcached)")
}

/// `Node::pause` returns once every thread of the node is stopped.
fn pause(node: &Node) {
    node.pause();
}

fn specs_of(nodes: &[&Node]) -> Vec<NodeSpec> {
    let list: Vec<String> = nodes.iter().map(|n| n.addr()).collect();
    NodeSpec::parse_list(&list.join(",")).unwrap()
}

fn grid_of(nodes: &[&Node], opts: GridOptions) -> Grid {
    Grid::new(specs_of(nodes), opts)
}

/// A clock that moves only when the test says so.
#[derive(Clone)]
struct ManualClock(Arc<Mutex<Instant>>);

impl ManualClock {
    fn new() -> ManualClock {
        ManualClock(Arc::new(Mutex::new(Instant::now())))
    }

    fn advance(&self, by: Duration) {
        *self.0.lock().unwrap() += by;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        *self.0.lock().unwrap()
    }
}

fn key(i: usize) -> Vec<u8> {
    format!("waffle:test:page:{i}").into_bytes()
}

/// Polls `f` every 20 ms until it returns Some; panics naming `what` if it
/// does not within `timeout`.
#[track_caller]
fn wait_for<T>(timeout: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(t) = f() {
            return t;
        }
        assert!(Instant::now() < deadline, "timed out after {timeout:?} waiting for {what}");
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn take_is_exclusive() {
    let node = start_node();
    let grid = grid_of(&[&node], relaxed());
    let report = grid.store_many(&[(b"k1", b"page one"), (b"k2", b"page two")]);
    assert_eq!(report, StoreReport { stored: 2, failed: 0, skipped: 0 });

    assert_eq!(grid.take(b"k1"), Fetch::Hit(b"page one".to_vec()));
    assert_eq!(grid.take(b"k1"), Fetch::Miss);
    assert_eq!(grid.get(b"k1"), Fetch::Miss);

    // A plain get leaves the item in place.
    assert_eq!(grid.get(b"k2"), Fetch::Hit(b"page two".to_vec()));
    assert_eq!(grid.get(b"k2"), Fetch::Hit(b"page two".to_vec()));
    assert_eq!(grid.take(b"k2"), Fetch::Hit(b"page two".to_vec()));
    assert_eq!(grid.get(b"k2"), Fetch::Miss);

    // Sequential requests reuse one pooled connection.
    assert_eq!(grid.idle_connections(), vec![1]);
    let status = &grid.node_status()[0];
    assert!(status.up);
    assert_eq!((status.requests, status.failures, status.timeouts, status.marked_down), (8, 0, 0, 0));
}

/// memcached's `stats` counters of `node` (one short exchange on a connection of our own).
fn memcached_stats(node: &Node) -> std::collections::HashMap<String, u64> {
    let mut conn = TcpStream::connect(node.addr()).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    conn.write_all(b"stats\r\n").unwrap();
    let mut text = Vec::new();
    let mut chunk = [0u8; 4096];
    while !text.ends_with(b"END\r\n") {
        let n = conn.read(&mut chunk).unwrap();
        assert!(n > 0, "memcached closed the stats connection");
        text.extend_from_slice(&chunk[..n]);
    }
    String::from_utf8_lossy(&text)
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace().skip(1);
            Some((w.next()?.to_string(), w.next()?.parse().ok()?))
        })
        .collect()
}

/// The fetch frees the item's memory, not just its visibility: `mg ... T-1`
/// left an expired item in its slab chunk until the LRU reached it (1000
/// items of 4 KiB stayed `curr_items` after all were fetched).
#[test]
fn an_exclusive_fetch_frees_the_items_memory() {
    let node = start_node();
    let grid = grid_of(&[&node], relaxed());
    let value = vec![7u8; 4200];
    let keys: Vec<Vec<u8>> = (0..1000).map(key).collect();
    let items: Vec<(&[u8], &[u8])> = keys.iter().map(|k| (k.as_slice(), value.as_slice())).collect();
    assert_eq!(grid.store_many(&items).stored, 1000);
    let before = memcached_stats(&node);
    assert_eq!(before["curr_items"], 1000, "{before:?}");
    // Half in pipelines, half one by one; every one a hit.
    let refs: Vec<&[u8]> = keys[..500].iter().map(Vec::as_slice).collect();
    assert!(grid.take_many(&refs).iter().all(|f| matches!(f, Fetch::Hit(v) if *v == value)));
    for k in &keys[500..] {
        assert_eq!(grid.take(k), Fetch::Hit(value.clone()));
    }
    let after = memcached_stats(&node);
    assert_eq!((after["curr_items"], after["bytes"]), (0, 0), "fetched items still occupy memory: {after:?}");
    // A miss is one too: the delete finds nothing, and says so without breaking the pipeline.
    assert_eq!(grid.take(&keys[0]), Fetch::Miss);
    assert!(grid.take_many(&refs[..3]).iter().all(|f| *f == Fetch::Miss));
    assert!(grid.node_status()[0].up);
}

#[test]
fn pipelined_store_many_across_three_nodes() {
    let nodes = [start_node(), start_node(), start_node()];
    let grid = grid_of(&[&nodes[0], &nodes[1], &nodes[2]], relaxed());
    let mut rng = SmallRng::seed_from_u64(42);
    // Binary values of many sizes, including bytes that look like protocol (\r\n, "MN").
    let values: Vec<Vec<u8>> = (0..600)
        .map(|i| {
            let len = if i % 50 == 0 { 0 } else { rng.gen_range(1..20_000) };
            let mut v: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
            if len > 8 {
                v[..8].copy_from_slice(b"\r\nMN\r\nEN");
            }
            v
        })
        .collect();
    let keys: Vec<Vec<u8>> = (0..600).map(key).collect();
    let items: Vec<(&[u8], &[u8])> =
        keys.iter().map(|k| k.as_slice()).zip(values.iter().map(|v| v.as_slice())).collect();

    let before: Vec<u64> = grid.node_status().iter().map(|s| s.requests).collect();
    assert_eq!(grid.store_many(&items), StoreReport { stored: 600, failed: 0, skipped: 0 });
    // One round trip per node.
    let after: Vec<u64> = grid.node_status().iter().map(|s| s.requests).collect();
    assert_eq!(after.iter().zip(&before).map(|(a, b)| a - b).collect::<Vec<_>>(), vec![1, 1, 1]);

    let mut per_node = [0usize; 3];
    for (k, v) in keys.iter().zip(&values) {
        per_node[grid.node_index(k).unwrap()] += 1;
        assert_eq!(grid.get(k), Fetch::Hit(v.clone()), "key {}", String::from_utf8_lossy(k));
    }
    assert!(per_node.iter().all(|&n| n > 100), "keys spread over the nodes: {per_node:?}");

    let key_refs: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
    let fetched = grid.take_many(&key_refs);
    for (i, f) in fetched.iter().enumerate() {
        assert_eq!(f, &Fetch::Hit(values[i].clone()), "key {i}");
    }
    assert!(grid.take_many(&key_refs).iter().all(|f| *f == Fetch::Miss));
}

#[test]
fn a_pipeline_large_both_ways_does_not_stall() {
    // 15 MB of requests while 18 MB of replies come back: more than the socket
    // buffers hold both ways, so a client that wrote everything before reading
    // would wait on the node while the node waits on it (checked: it times out).
    let node = Node::start(128).expect("memcached must be installed");
    let grid = grid_of(&[&node], GridOptions { timeout_ms: 10_000, connect_timeout_ms: 10_000, ..relaxed() });
    let keys: Vec<Vec<u8>> = (0..60_000).map(|i| format!("{i:0>250}").into_bytes()).collect();
    let value = vec![0x5au8; 300];
    for chunk in keys.chunks(10_000) {
        let items: Vec<(&[u8], &[u8])> = chunk.iter().map(|k| (k.as_slice(), value.as_slice())).collect();
        assert_eq!(grid.store_many(&items), StoreReport { stored: chunk.len(), failed: 0, skipped: 0 });
    }
    let key_refs: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
    let fetched = grid.take_many(&key_refs);
    assert_eq!(fetched.iter().filter(|f| **f == Fetch::Hit(value.clone())).count(), keys.len());
    assert_eq!(grid.node_status()[0].requests, 7);
}

#[test]
fn fetch_many_keeps_key_order_with_misses_and_duplicates() {
    let nodes = [start_node(), start_node()];
    let grid = grid_of(&[&nodes[0], &nodes[1]], relaxed());
    let keys: Vec<Vec<u8>> = (0..40).map(key).collect();
    let stored: Vec<(&[u8], &[u8])> = keys.iter().step_by(2).map(|k| (k.as_slice(), k.as_slice())).collect();
    assert_eq!(grid.store_many(&stored).stored, 20);

    let mut asked: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
    asked.push(keys[0].as_slice()); // the same key again: a miss, it was expired by the first
    let fetched = grid.take_many(&asked);
    for (i, f) in fetched.iter().enumerate().take(40) {
        let expected = if i % 2 == 0 { Fetch::Hit(keys[i].clone()) } else { Fetch::Miss };
        assert_eq!(f, &expected, "key {i}");
    }
    assert_eq!(fetched[40], Fetch::Miss);
    assert_eq!(grid.take_many(&[]), vec![]);
}

#[test]
fn a_refused_item_fails_alone_and_the_connection_stays_in_sync() {
    let node = start_node();
    let grid = grid_of(&[&node], relaxed());
    let big = vec![7u8; 1536 * 1024]; // over memcached's default 1 MiB item limit: SERVER_ERROR
    let huge = vec![7u8; 3 << 20]; // over the client's limit: never sent
    let report = grid.store_many(&[(b"a", b"1"), (b"big", &big), (b"b", b"2"), (b"huge", &huge), (b"c", b"3")]);
    assert_eq!(report, StoreReport { stored: 3, failed: 2, skipped: 0 });
    assert_eq!(grid.get(b"a"), Fetch::Hit(b"1".to_vec()));
    assert_eq!(grid.get(b"c"), Fetch::Hit(b"3".to_vec()));
    assert_eq!(grid.get(b"big"), Fetch::Miss);
    let status = &grid.node_status()[0];
    assert!(status.up);
    assert_eq!(status.failures, 0, "an item refused is not a node failure");
    assert_eq!(grid.idle_connections(), vec![1]);
}

#[test]
fn delete_makes_the_key_unreachable() {
    let node = start_node();
    let grid = grid_of(&[&node], relaxed());
    grid.store_many(&[(b"d", b"x")]);
    assert!(grid.delete(b"d"));
    assert_eq!(grid.get(b"d"), Fetch::Miss);
    assert!(grid.delete(b"d"), "a key that is not there is gone too");
}

#[test]
fn ttl_is_sent_with_the_item() {
    let node = start_node();
    let grid = grid_of(&[&node], GridOptions { ttl_s: 100, ..relaxed() });
    assert_eq!(grid.store_many(&[(b"t", b"x")]).stored, 1);
    // Ask memcached directly for the remaining TTL.
    let mut s = TcpStream::connect(node.socket_addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"mg t t\r\n").unwrap();
    let mut buf = [0u8; 64];
    let n = s.read(&mut buf).unwrap();
    let reply = String::from_utf8_lossy(&buf[..n]);
    assert!(reply == "HD t100\r\n" || reply == "HD t99\r\n", "{reply:?}");
}

#[test]
fn a_paused_node_times_out_then_is_skipped_then_comes_back() {
    let node = start_node();
    let opts = tight();
    let timeout = Duration::from_millis(opts.timeout_ms);
    let backoff_min = Duration::from_millis(opts.backoff_min_ms);
    let backoff_max = Duration::from_millis(opts.backoff_max_ms);
    const MS: Duration = Duration::from_millis(1);
    let clock = ManualClock::new();
    let grid = Grid::with_clock(specs_of(&[&node]), opts, clock.clone());
    // Warm the pool so the first fault is a read timeout on an open connection.
    // A try that fails marks the node down: the clock skips its backoff, so the next try is a probe.
    wait_for(Duration::from_secs(5), "both items stored on the fresh node", || {
        clock.advance(backoff_max);
        (grid.store_many(&[(b"a", b"A"), (b"b", b"B")]).stored == 2).then_some(())
    });

    pause(&node);
    // Three missed deadlines in a row, each a deadline after the last on the
    // node's clock, mark it down (grid::health::MISSES_TO_DOWN); one does not.
    for miss in 1..=3u64 {
        let start = Instant::now();
        assert_eq!(grid.take(b"a"), Fetch::Fault(FaultKind::Timeout));
        let took = start.elapsed();
        // A real socket against a real deadline: the lower bound is exact; the upper one only tells a
        // kept deadline from none, with room for a loaded machine.
        assert!(took >= timeout - Duration::from_millis(2), "gave up early: {took:?}");
        assert!(took < timeout * 20, "deadline not kept: {took:?}");
        let status = &grid.node_status()[0];
        assert_eq!((status.up, status.timeouts), (miss < 3, miss), "after {miss} missed deadlines");
        if miss < 3 {
            clock.advance(timeout);
        }
    }

    // Down: every request is skipped, none sent, until the clock reaches the backoff.
    let requests = grid.node_status()[0].requests;
    assert_eq!(grid.take(b"b"), Fetch::Skipped);
    assert_eq!(grid.store_many(&[(b"c", b"C")]), StoreReport { stored: 0, failed: 0, skipped: 1 });
    assert!(!grid.delete(b"c"));
    clock.advance(backoff_min - MS);
    assert_eq!(grid.get(b"b"), Fetch::Skipped);
    let status = &grid.node_status()[0];
    assert!(!status.up);
    assert_eq!(status.requests, requests, "a down node must be skipped without a request");
    assert_eq!((status.timeouts, status.marked_down), (3, 1));

    // At the backoff one probe goes, still into the paused node: timeout, and the backoff doubles.
    clock.advance(MS);
    let start = Instant::now();
    assert_eq!(grid.get(b"b"), Fetch::Fault(FaultKind::Timeout));
    assert!(start.elapsed() < timeout * 20);
    assert_eq!(grid.get(b"b"), Fetch::Skipped);
    clock.advance(2 * backoff_min - MS);
    assert_eq!(grid.get(b"b"), Fetch::Skipped);
    assert_eq!(grid.node_status()[0].requests, requests + 1, "one probe, nothing else");

    node.resume();
    clock.advance(MS);
    // "b" was never touched (only "a" was asked, then expired when the node resumed).
    // A probe the resuming node answers too late fails: the clock then skips the longer backoff.
    let back = wait_for(Duration::from_secs(5), "a probe to bring the resumed node back", || match grid.get(b"b") {
        Fetch::Skipped | Fetch::Fault(_) => {
            clock.advance(backoff_max);
            None
        }
        other => Some(other),
    });
    assert_eq!(back, Fetch::Hit(b"B".to_vec()));
    let status = &grid.node_status()[0];
    assert!(status.up);
    assert_eq!(status.marked_down, 1, "a failed probe is no new marking down");
}

#[test]
fn a_killed_node_is_an_io_fault_then_skipped_then_back_after_restart() {
    let (mut node, grid) = node_holding_a();
    assert_eq!(grid.idle_connections(), vec![1]);

    node.kill();
    // The pooled connection, used a moment ago, is trusted without a peek: its
    // failure is the connection's (a restart would look the same), not the node's.
    assert_eq!(grid.take(b"a"), Fetch::Fault(FaultKind::Io));
    assert!(grid.node_status()[0].up);
    assert_eq!(grid.node_status()[0].stale_connections, 1);
    // A new connection is refused: now the node is down, and skipped.
    assert_eq!(grid.take(b"a"), Fetch::Fault(FaultKind::Io));
    assert_eq!(grid.take(b"a"), Fetch::Skipped);
    assert!(!grid.node_status()[0].up);
    assert_eq!(grid.idle_connections(), vec![0]);

    node.restart().expect("restart memcached on the same port");
    wait_for(Duration::from_secs(5), "the restarted node to store an item", || {
        (grid.store_many(&[(b"n", b"N")]).stored == 1).then_some(())
    });
    assert!(grid.node_status()[0].up);
    assert_eq!(grid.take(b"n"), Fetch::Hit(b"N".to_vec()));
    assert_eq!(grid.take(b"a"), Fetch::Miss, "a restarted node is empty");
}

/// A node restarted between two requests: the pooled connection (trusted
/// without a peek, it was used a moment ago) is found closed when used. That
/// request is lost (a fault: the caller reads the disk), the node is not
/// marked down, and the next request goes on a new connection.
#[test]
fn a_restart_between_requests_costs_one_request_and_no_mark_down() {
    let (mut node, grid) = node_holding_a();
    node.restart().expect("restart memcached on the same port");
    let first = grid.take(b"a");
    assert!(matches!(first, Fetch::Fault(FaultKind::Io) | Fetch::Miss), "{first:?}");
    assert_eq!(grid.take(b"a"), Fetch::Miss, "a restarted node is empty, and answers");
    let status = &grid.node_status()[0];
    assert!(status.up);
    assert_eq!(status.marked_down, 0, "{status:?}");
    assert!(status.stale_connections <= 1, "{status:?}");
}

#[test]
fn a_down_node_does_not_touch_the_keys_of_the_others() {
    let nodes = [start_node(), start_node()];
    // The live node must answer within the deadline even on a loaded machine.
    let opts = GridOptions { timeout_ms: 250, connect_timeout_ms: 250, ..tight() };
    let timeout = Duration::from_millis(opts.timeout_ms);
    let grid = grid_of(&[&nodes[0], &nodes[1]], opts);
    let keys: Vec<Vec<u8>> = (0..60).map(key).collect();
    let items: Vec<(&[u8], &[u8])> = keys.iter().map(|k| (k.as_slice(), &b"v"[..])).collect();
    wait_for(Duration::from_secs(5), "every item stored on the fresh nodes", || {
        (grid.store_many(&items).stored == 60).then_some(())
    });

    pause(&nodes[1]);
    let key_refs: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
    // Down after three missed deadlines in a row (grid::health::MISSES_TO_DOWN), not one.
    for round in 0..3 {
        let start = Instant::now();
        let fetched = grid.take_many(&key_refs);
        // Real deadlines: a bound that tells a kept one from none, with room for a loaded machine.
        assert!(start.elapsed() < timeout * 20);
        for (k, f) in keys.iter().zip(&fetched) {
            match grid.node_index(k) {
                Some(0) if round == 0 => assert_eq!(f, &Fetch::Hit(b"v".to_vec())),
                Some(0) => assert_eq!(f, &Fetch::Miss, "taken in round 0"),
                Some(1) => assert_eq!(f, &Fetch::Fault(FaultKind::Timeout)),
                other => panic!("node {other:?}"),
            }
        }
        assert_eq!(grid.node_status()[1].up, round < 2, "round {round}");
    }
    // The next call skips the paused node and is not remapped to the other one.
    let report = grid.store_many(&items);
    let on_paused = keys.iter().filter(|k| grid.node_index(k) == Some(1)).count();
    assert_eq!(report, StoreReport { stored: 60 - on_paused, failed: 0, skipped: on_paused });
    nodes[1].resume();
}

#[test]
fn many_threads_share_one_grid() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Grid>();

    let nodes = [start_node(), start_node()];
    let opts = GridOptions { max_connections_per_node: 3, ..relaxed() };
    let grid = grid_of(&[&nodes[0], &nodes[1]], opts);
    thread::scope(|scope| {
        for t in 0..8 {
            let grid = &grid;
            scope.spawn(move || {
                for i in 0..150 {
                    let k = format!("t{t}:k{i}").into_bytes();
                    let v = format!("value {t} {i}").into_bytes();
                    assert_eq!(grid.store_many(&[(&k, &v)]).stored, 1);
                    assert_eq!(grid.take(&k), Fetch::Hit(v));
                    assert_eq!(grid.take(&k), Fetch::Miss);
                }
            });
        }
    });
    assert!(grid.idle_connections().iter().all(|&n| (1..=3).contains(&n)), "{:?}", grid.idle_connections());
    assert!(grid.node_status().iter().all(|s| s.up && s.failures == 0));
}

#[test]
fn an_empty_grid_asks_nobody() {
    let grid = Grid::new(vec![], GridOptions::default());
    assert!(grid.is_empty());
    assert_eq!(grid.node_index(b"k"), None);
    assert_eq!(grid.take(b"k"), Fetch::Skipped);
    assert_eq!(grid.take_many(&[b"k"]), vec![Fetch::Skipped]);
    assert_eq!(grid.store_many(&[(b"k", b"v")]), StoreReport { stored: 0, failed: 0, skipped: 1 });
    assert!(!grid.delete(b"k"));
    assert!(grid.node_status().is_empty());
}

#[test]
fn an_unresolvable_host_is_a_node_that_is_always_down() {
    // A 64-byte label cannot be encoded in a DNS query: the lookup fails locally, sending nothing.
    let host = format!("{}.invalid", "x".repeat(64));
    let grid = Grid::new(NodeSpec::parse_list(&format!("{host}:11211")).unwrap(), GridOptions::default());
    assert_eq!(grid.node_count(), 1);
    assert_eq!(grid.take(b"k"), Fetch::Skipped);
    assert_eq!(grid.store_many(&[(b"k", b"v")]).skipped, 1);
    let status = &grid.node_status()[0];
    assert!(!status.up);
    assert_eq!(status.requests, 0);
    assert_eq!(status.addr, format!("{host}:11211"));
}

#[test]
#[cfg_attr(debug_assertions, should_panic(expected = "grid key"))]
fn a_key_with_a_space_is_refused() {
    let grid = Grid::new(NodeSpec::parse_list("127.0.0.1:1").unwrap(), GridOptions::default());
    assert_eq!(grid.take(b"two words"), Fetch::Fault(FaultKind::Protocol));
}

/// A node that answers the first request line with `reply` and then keeps
/// the connection open (until the client closes it, or 5 s).
fn fake_node(reply: &'static [u8]) -> (String, thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    listener.set_nonblocking(true).unwrap();
    let handle = thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut conn = loop {
            match listener.accept() {
                Ok((conn, _)) => break conn,
                Err(_) if Instant::now() < deadline => thread::sleep(Duration::from_millis(5)),
                Err(_) => return,
            }
        };
        conn.set_nonblocking(false).unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut request = Vec::new();
        let mut byte = [0u8; 1];
        while !request.ends_with(b"\r\n") {
            match conn.read(&mut byte) {
                Ok(1) => request.push(byte[0]),
                _ => return,
            }
        }
        let _ = conn.write_all(reply);
        // The rest of the request (an exclusive fetch is several lines), until the client hangs up.
        while matches!(conn.read(&mut byte), Ok(1)) {}
    });
    (addr, handle)
}

fn fetch_from_fake(reply: &'static [u8]) -> (Fetch, waffle_core::grid::NodeStatus) {
    let (addr, handle) = fake_node(reply);
    let grid = Grid::new(
        NodeSpec::parse_list(&addr).unwrap(),
        GridOptions { timeout_ms: 300, connect_timeout_ms: 300, ..GridOptions::default() },
    );
    let fetch = grid.take(b"k");
    let status = grid.node_status().remove(0);
    drop(grid); // closes the connection: the fake ends
    handle.join().unwrap();
    (fetch, status)
}

#[test]
fn broken_replies_are_faults_that_mark_the_node_down_a_missed_deadline_is_not() {
    for (reply, kind) in [
        (&b"HELLO\r\n"[..], FaultKind::Protocol),
        (b"VA 2\r\nabcdef\r\n", FaultKind::Protocol),
        (b"VA 99999999\r\n", FaultKind::Protocol),
        (b"EN\n", FaultKind::Protocol),
        // The exclusive fetch's delete is quiet: an HD is an answer nobody asked for.
        (b"HD\r\nMN\r\n", FaultKind::Protocol),
        (b"VA 10\r\nabc", FaultKind::Timeout),
        (b"", FaultKind::Timeout),
    ] {
        let (fetch, status) = fetch_from_fake(reply);
        assert_eq!(fetch, Fetch::Fault(kind), "reply {:?}", String::from_utf8_lossy(reply));
        // A missed deadline is one miss, not a dead node (grid::health::MISSES_TO_DOWN).
        let down = kind != FaultKind::Timeout;
        assert_eq!(
            (status.up, status.marked_down),
            (!down, u64::from(down)),
            "reply {:?}",
            String::from_utf8_lossy(reply)
        );
    }
}

#[test]
fn a_server_error_is_a_fault_but_the_node_stays_up() {
    let (fetch, status) = fetch_from_fake(b"SERVER_ERROR out of memory\r\n");
    assert_eq!(fetch, Fetch::Fault(FaultKind::ServerError));
    assert!(status.up);
    assert_eq!((status.failures, status.marked_down), (1, 0));
}

#[test]
fn a_node_that_hangs_up_mid_value_is_an_io_fault() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let server = thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        let mut buf = [0u8; 256];
        let _ = conn.read(&mut buf);
        let _ = conn.write_all(b"VA 10\r\nabc");
        // Dropping `conn` closes it mid-value.
    });
    let grid =
        Grid::new(NodeSpec::parse_list(&addr).unwrap(), GridOptions { timeout_ms: 2000, ..GridOptions::default() });
    assert_eq!(grid.take(b"k"), Fetch::Fault(FaultKind::Io));
    server.join().unwrap();
}
