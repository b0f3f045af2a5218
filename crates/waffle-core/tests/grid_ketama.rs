//! Our ketama against libmemcached's: a C helper linked with -lmemcached maps
//! the same keys over the same node lists, and every key must land on the same node.
//! cc and libmemcached-dev are required: a missing one fails the test, loudly.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use waffle_core::grid::ketama::Continuum;
use waffle_core::grid::NodeSpec;

const KEYS_PER_LIST: usize = 6000;

/// Builds the helper once per test binary into cargo's temp dir for tests.
fn helper() -> &'static PathBuf {
    static HELPER: OnceLock<PathBuf> = OnceLock::new();
    HELPER.get_or_init(|| {
        let source = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/ketama/libmemcached_map.c");
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("grid_ketama_{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create the helper's directory");
        let binary = dir.join("libmemcached_map");
        let output = Command::new("cc")
            .arg(&source)
            .arg("-o")
            .arg(&binary)
            .arg("-lmemcached")
            .output()
            .expect("cc must be installed to build tests/ketama/libmemcached_map.c");
        assert!(
            output.status.success(),
            "building the libmemcached helper failed (is libmemcached-dev installed?):\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        binary
    })
}

/// libmemcached's node index for each key.
fn libmemcached_map(nodes: &[NodeSpec], keys: &[String]) -> Vec<usize> {
    let list: Vec<String> = nodes.iter().map(|n| format!("{}:{}:{}", n.host, n.port, n.weight)).collect();
    let mut child = Command::new(helper())
        .arg(list.join(","))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the libmemcached helper");
    let input: String = keys.iter().map(|k| format!("{k}\n")).collect();
    let mut stdin = child.stdin.take().unwrap();
    // Written from a thread: the helper's output could fill the pipe before it has read every key.
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let output = child.wait_with_output().expect("wait for the libmemcached helper");
    writer.join().unwrap().expect("feed keys to the helper");
    assert!(output.status.success(), "helper failed: {}", String::from_utf8_lossy(&output.stderr));
    let text = String::from_utf8(output.stdout).unwrap();
    let indexes: Vec<usize> = text.lines().map(|l| l.parse().expect("an index per line")).collect();
    assert_eq!(indexes.len(), keys.len());
    indexes
}

/// Page-like keys and random printable ones of every length.
fn keys(seed: u64, count: usize) -> Vec<String> {
    let mut rng = SmallRng::seed_from_u64(seed);
    (0..count)
        .map(|i| {
            if i % 2 == 0 {
                format!("waffle:{:x}:p:{}", seed, i)
            } else {
                let len = rng.gen_range(1..=250);
                (0..len).map(|_| rng.gen_range(0x21u8..=0x7e) as char).collect()
            }
        })
        .collect()
}

fn assert_same_mapping(list: &str, seed: u64) {
    let nodes = NodeSpec::parse_list(list).unwrap();
    let keys = keys(seed, KEYS_PER_LIST);
    let theirs = libmemcached_map(&nodes, &keys);
    let continuum = Continuum::new(&nodes);
    let mut used = vec![0usize; nodes.len()];
    for (key, &their) in keys.iter().zip(&theirs) {
        let ours = continuum.node_for_key(key.as_bytes()).unwrap();
        assert_eq!(ours, their, "key {key:?} on list {list}");
        used[ours] += 1;
    }
    // Every node with points gets keys (a mapping that sends everything to one node would agree on 1-node lists only).
    for (node, &points) in continuum.points_per_node().iter().enumerate() {
        if points >= 80 {
            assert!(used[node] > 0, "node {node} of {list} got no key");
        }
    }
}

#[test]
fn one_node() {
    assert_same_mapping("127.0.0.1:11211", 1);
    assert_same_mapping("cache-a:40001:7", 2);
}

#[test]
fn two_nodes_default_port_and_others() {
    assert_same_mapping("10.0.0.1:11211,10.0.0.2:11211", 3);
    assert_same_mapping("127.0.0.1:11211,127.0.0.1:11212", 4);
}

#[test]
fn three_nodes_same_host_different_ports() {
    assert_same_mapping("127.0.0.1:11211,127.0.0.1:11212,127.0.0.1:11213", 5);
}

#[test]
fn five_nodes_unequal_weights() {
    assert_same_mapping("cache-a:11211:1,cache-b:11211:3,10.1.2.3:22122:2,10.1.2.4:11211:1,localhost:40000:5", 6);
}

#[test]
fn weights_where_single_precision_rounds_down() {
    // With weights 1,1,5,9,9 the exact share of a weight-1 node is 8 digests;
    // libmemcached's float arithmetic gives 7.9999995, floored to 7 (28 points).
    let list = "n1:11211:1,n2:11211:1,n3:11211:5,n4:11211:9,n5:11211:9";
    let continuum = Continuum::new(&NodeSpec::parse_list(list).unwrap());
    assert_eq!(continuum.points_per_node(), vec![28, 28, 160, 288, 288]);
    assert_same_mapping(list, 7);
}

#[test]
fn many_nodes_and_weights() {
    let list: Vec<String> = (0..13).map(|i| format!("192.168.7.{}:{}:{}", i + 1, 11211 + (i % 3), 1 + i % 4)).collect();
    assert_same_mapping(&list.join(","), 8);
}

#[test]
fn adding_a_node_moves_about_one_in_n_plus_one_keys_and_only_to_it() {
    for n in [2usize, 4, 8] {
        let before: Vec<String> = (0..n).map(|i| format!("10.0.0.{}:11211", i + 1)).collect();
        let mut after = before.clone();
        after.push(format!("10.0.0.{}:11211", n + 1));
        let old = Continuum::new(&NodeSpec::parse_list(&before.join(",")).unwrap());
        let new = Continuum::new(&NodeSpec::parse_list(&after.join(",")).unwrap());
        let keys = keys(100 + n as u64, 20_000);
        let mut kept = 0;
        for key in &keys {
            let (was, is) = (old.node_for_key(key.as_bytes()), new.node_for_key(key.as_bytes()));
            if was == is {
                kept += 1;
            } else {
                assert_eq!(is, Some(n), "a key moved between two old nodes");
            }
        }
        let kept_share = kept as f64 / keys.len() as f64;
        let expected = n as f64 / (n + 1) as f64;
        assert!((kept_share - expected).abs() < 0.06, "n={n}: kept {kept_share:.3}, expected about {expected:.3}");
    }
}
