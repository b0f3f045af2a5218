//! Sizes follow one rule in every flag and parameter (waffle_core::config::parse_size):
//! KiB/MiB/GiB (and K/M/G) binary, KB/MB/GB refused, nonsense budgets refused, and
//! every refusal names what was set (the flag, the URI parameter or the environment
//! variable) and the value.

use std::process::Command;

use waffle_nodes::Node;

fn waffle() -> Command {
    Command::new(env!("CARGO_BIN_EXE_waffle"))
}

/// Runs `waffle args...` (with `env`) and returns its stderr; it must fail.
fn refused(args: &[&str], env: &[(&str, &str)]) -> String {
    let out = waffle().args(args).envs(env.iter().copied()).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{args:?} {env:?} was accepted: {}{err}", String::from_utf8_lossy(&out.stdout));
    err
}

#[test]
fn size_flags_refuse_decimal_units_and_nonsense_naming_the_flag() {
    for (args, flag, value) in [
        (&["demo", "--local", "1"][..], "--local", "1"),
        (&["demo", "--data", "64MB"][..], "--data", "64MB"),
        (&["bench", "--data", "256MB"][..], "--data", "256MB"),
        (&["bench", "--page-size", "1000"][..], "--page-size", "1000"),
        (&["probe", "--file-size", "1GB"][..], "--file-size", "1GB"),
        (&["bench", "capacity", "--node-memory", "1536KiB"][..], "--node-memory", "1536KiB"),
    ] {
        // A directory nobody can make: were the size accepted, the command would stop at once anyway.
        let err = refused(&[args, &["--dir", "/proc/no-such-dir"]].concat(), &[]);
        assert!(err.contains(flag) && err.contains(&format!("'{value}'")), "{args:?}: {err}");
    }
}

/// `waffle warm` opens a database through waffle: the refusals of a real open.
/// (It names `waffle_local` in its URI, so the environment's turn is shown with
/// the push queue and the codec; tests/faults_config.rs does WAFFLE_LOCAL.)
#[test]
fn a_bad_value_is_named_as_it_was_set() {
    let node = Node::start(8).expect("memcached");
    let dir = std::env::temp_dir().join(format!("waffle-sizes-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("empty.db");
    std::fs::write(&db, b"").unwrap();
    let db = db.to_str().unwrap();
    let grid = node.addr();
    let queue = refused(&["warm", db], &[("WAFFLE_GRID", &grid), ("WAFFLE_PUSH_QUEUE", "1")]);
    let codec = refused(&["warm", db], &[("WAFFLE_GRID", &grid), ("WAFFLE_COMPRESS", "gzip")]);
    let local = refused(&["warm", db, "--local", "1"], &[("WAFFLE_GRID", &grid)]);
    let decimal = refused(&["warm", db, "--local", "64MB"], &[("WAFFLE_GRID", &grid)]);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(queue.contains("bad value for WAFFLE_PUSH_QUEUE: '1': too small: at least 4KiB"), "{queue}");
    assert!(codec.contains("bad value for WAFFLE_COMPRESS: 'gzip'"), "{codec}");
    assert!(local.contains("bad value for waffle_local: '1': too small: at least 4KiB"), "{local}");
    assert!(decimal.contains("bad value for waffle_local: '64MB'") && decimal.contains("64MiB"), "{decimal}");
}
