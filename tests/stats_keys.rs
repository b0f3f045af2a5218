//! The stats JSON is a published format (`PRAGMA waffle_stats`, the stats
//! file, `waffle stats`, the Prometheus metrics): every key path and the kind
//! of its value, from a real SQLite database with a grid, must stay as the
//! fixture lists them (tests/fixtures/stats_keys_*.txt, written down from the
//! output before the stats became one typed snapshot). A dropped or renamed
//! key fails here, not in a consumer at run time.
//!
//! `WAFFLE_WRITE_FIXTURES=1` rewrites the fixtures from today's output (for
//! a deliberate change of the format; review the diff).

use std::collections::BTreeMap;
use std::path::Path;

use rusqlite::{params, Connection};
use serde_json::Value;
use waffle_core::stats::{PreloadSection, SkippedTarget, StatsSnapshot, SwitchSnapshot, TablespaceSnapshot};
use waffle_testkit::db::{drop_pager_cache, flush, open_waffle, stats};
use waffle_testkit::nodes::{grid_of, start_node};
use waffle_testkit::pattern;
use waffle_testkit::temp_dir::TempDir;

/// Every key path of `v` with the kind of its value (`nodes[].addr`, `latency.l1.buckets[][]`).
fn key_paths(v: &Value) -> BTreeMap<String, &'static str> {
    let mut out = BTreeMap::new();
    walk(v, "", &mut out);
    out
}

fn walk(v: &Value, path: &str, out: &mut BTreeMap<String, &'static str>) {
    let kind = match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    if !path.is_empty() {
        // A null (an option not set in this run) is compatible with the value it may hold.
        let e = out.entry(path.to_string()).or_insert(kind);
        if *e == "null" {
            *e = kind;
        }
    }
    let join = |k: &str| if path.is_empty() { k.to_string() } else { format!("{path}.{k}") };
    match v {
        Value::Object(m) => m.iter().for_each(|(k, v)| walk(v, &join(k), out)),
        Value::Array(a) => a.iter().for_each(|v| walk(v, &format!("{path}[]"), out)),
        _ => {}
    }
}

fn fixture_path(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures").join(format!("stats_keys_{name}.txt"))
}

/// Compares `v`'s key paths with the fixture `name` (rewrites it under WAFFLE_WRITE_FIXTURES=1).
fn check_against_fixture(v: &Value, name: &str) {
    let got = key_paths(v);
    let text: String = got.iter().map(|(k, kind)| format!("{k} {kind}\n")).collect();
    let path = fixture_path(name);
    if std::env::var_os("WAFFLE_WRITE_FIXTURES").is_some() {
        std::fs::write(&path, &text).unwrap();
        return;
    }
    let want_text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let want: BTreeMap<&str, &str> = want_text.lines().filter_map(|l| l.split_once(' ')).collect();
    let missing: Vec<&&str> = want.keys().filter(|k| !got.contains_key(**k)).collect();
    let extra: Vec<&String> = got.keys().filter(|k| !want.contains_key(k.as_str())).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{name}: keys missing {missing:?}, keys not in the fixture {extra:?}"
    );
    for (k, kind) in &got {
        let w = want[k.as_str()];
        assert!(w == *kind || w == "null" || *kind == "null", "{name}: {k} is {kind}, the fixture says {w}");
    }
}

const ROW: usize = 3000; // one row per 4 KiB leaf page

/// Writes, pushes, reads back from the grid and the disk: every section has figures.
fn traffic(conn: &Connection) {
    conn.execute_batch("PRAGMA cache_size = 10; CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB);").unwrap();
    let tx = conn.unchecked_transaction().unwrap();
    for id in 1..=300i64 {
        tx.execute("INSERT INTO t VALUES (?, ?)", params![id, pattern(id as u64, ROW)]).unwrap();
    }
    tx.commit().unwrap();
    flush(conn);
    for id in (1..=300i64).step_by(7) {
        drop_pager_cache(conn);
        let v: Vec<u8> = conn.query_row("SELECT v FROM t WHERE id = ?", [id], |r| r.get(0)).unwrap();
        assert!(v == pattern(id as u64, ROW), "row {id}");
    }
}

#[test]
fn pragma_and_stats_file_keep_every_key_of_the_published_format() {
    let node = start_node(64);
    let dir = TempDir::new("stats-keys");
    let (db, file) = (dir.join("k.db"), dir.join("stats.json"));
    let grid = grid_of([&node]);
    let file_text = file.display().to_string();
    let conn =
        open_waffle(&db, &[("waffle_grid", &grid), ("waffle_local", "256KiB"), ("waffle_stats_file", &file_text)]);
    traffic(&conn);
    let pragma = stats(&conn);
    assert!(pragma["l2_hits"].as_u64().unwrap() > 0, "the grid answered reads: {pragma}");
    check_against_fixture(&pragma, "pragma");
    assert_round_trip(&pragma);
    drop(conn); // the last close writes the file
    let written: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(written["final"], true, "{written}");
    check_against_fixture(&written, "sqlite_file");
    assert_round_trip(&written);
    check_against_fixture(&as_preload_file(&written).to_json(), "preload_file");
}

/// The typed snapshot reads the object and writes it back as it was: no key
/// lost, added or changed in value.
fn assert_round_trip(v: &Value) {
    let typed = StatsSnapshot::from_json(v).unwrap_or_else(|e| panic!("not a stats snapshot ({e}): {v}"));
    assert!(typed.cache.is_some() && typed.warming.is_some() && typed.sqlite.is_some(), "{typed:?}");
    assert!(typed.preload.is_none(), "a SQLite object has no preload section: {typed:?}");
    assert_eq!(&typed.to_json(), v, "the snapshot does not write back what it read");
}

/// A preload's stats file with the cache and warming of `sqlite_file` (the
/// preload fills the same sections from its own cache, and its part as
/// crates/waffle-preload/src/stats_file.rs does).
fn as_preload_file(sqlite_file: &Value) -> StatsSnapshot {
    let mut s = StatsSnapshot::from_json(sqlite_file).unwrap();
    s.sqlite = None;
    s.stamp.adapter = Some("mariadb-preload".into());
    let warm = &mut s.warming.as_mut().unwrap().warm;
    warm.skipped_targets.push(SkippedTarget { name: "db/u".into(), why: "not open".into() });
    let space =
        TablespaceSnapshot { cached: true, hit_ratio: Some(0.5), l2_hit_ratio: Some(0.25), ..Default::default() };
    s.preload = Some(PreloadSection {
        switch: SwitchSnapshot { state: "on".into(), ..Default::default() },
        config_file: Some("/etc/waffle.conf".into()),
        tables: vec!["*".into()],
        tablespaces: [("db/t".to_string(), space)].into_iter().collect(),
        ..Default::default()
    });
    s
}

/// A preload that turned off before its cache started writes its stamp alone,
/// and a consumer reads it as a snapshot without a cache.
#[test]
fn a_stamp_alone_reads_as_a_snapshot_without_a_cache() {
    let v = serde_json::json!({"adapter": "mariadb-preload", "pid": 7, "updated_unix_ms": 1, "final": false,
                               "state": "disabled", "disabled_reason": "native AIO"});
    let s = StatsSnapshot::from_json(&v).unwrap();
    assert!(s.cache.is_none() && s.warming.is_none() && s.sqlite.is_none() && s.preload.is_none(), "{s:?}");
    assert_eq!(s.stamp.disabled_reason.as_deref(), Some("native AIO"));
    assert_eq!(s.to_json(), v);
}
