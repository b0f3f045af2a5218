//! `waffle stats` of a live database whose node has flash (memcached's
//! extstore, issue 34 item 2): the node's flash figures an operator's tools
//! read (the text and the Prometheus exposition of the stats file the
//! database's process writes) are the node's own. tests/flash_tier.rs checks
//! the same figures through `PRAGMA waffle_stats`.
//!
//! A real memcached whose items all go to flash at once, a database of 1,500
//! one-page rows written through waffle (L1 16 KiB: nearly every page is
//! pushed) and read back from the node; the stats file's node asks memcached
//! for its stats every 10 s or so.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use waffle_testkit::db::{create_blob_table, drop_pager_cache, flush, open_waffle};
use waffle_testkit::pattern;
use waffle_testkit::raw_client::node_stat;
use waffle_testkit::temp_dir::TempDir;
use waffle_testkit::wait::wait_for;

const FLASH_MIB: u64 = 64;
const ROWS: i64 = 1500;
/// Enough for the node's stats to be asked twice.
const WAIT: Duration = Duration::from_secs(40);

/// The first `flash` object of a node in the stats file at `path`, if it has one yet.
fn node_flash(path: &Path) -> Option<Value> {
    let v: Value = serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
    v["nodes"].as_array()?.iter().find_map(|n| n.get("flash").filter(|f| f.is_object()).cloned())
}

fn waffle_stats(format: &str, file: &Path) -> String {
    let out =
        Command::new(env!("CARGO_BIN_EXE_waffle")).args(["stats", "--format", format]).arg(file).output().unwrap();
    assert!(out.status.success(), "waffle stats --format {format}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// The value of the Prometheus sample whose line starts with `name` (and a label or a space).
fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .find_map(|l| l.rsplit(' ').next()?.parse().ok())
}

#[test]
fn the_node_flash_figures_of_a_live_database_reach_the_text_and_the_exposition() {
    let dir = TempDir::new("flash-stats");
    let opts = format!(
        "ext_page_size=2,ext_wbuf_size=2,ext_threads=2,ext_item_size=512,ext_item_age=0,ext_path={}:{FLASH_MIB}m",
        dir.join("flash").display()
    );
    let node = waffle_nodes::Node::start_with_args(16, &["-o".into(), opts])
        .unwrap_or_else(|e| panic!("cannot start memcached with extstore ({e}); memcached 1.6 is needed"));
    let addr = node.addr();
    let stats = dir.join("stats.json");
    let stats_text = stats.display().to_string();
    let conn = open_waffle(
        &dir.join("f.db"),
        &[
            ("waffle_grid", &addr),
            ("waffle_local", "16KiB"),
            ("waffle_compress", "off"),
            ("waffle_stats_file", &stats_text),
        ],
    );
    create_blob_table(&conn, 10, 1..=ROWS, |id| pattern(id as u64, 3000));
    flush(&conn);
    wait_for(WAIT, "the pages to go to flash", || node_stat(&addr, "extstore_objects_used") >= 1000);
    let from_flash = node_stat(&addr, "get_extstore");
    drop_pager_cache(&conn);
    let n: i64 = conn.query_row("SELECT count(*) FROM t WHERE length(v) = 3000", [], |r| r.get(0)).unwrap();
    assert_eq!(n, ROWS);
    assert!(node_stat(&addr, "get_extstore") > from_flash, "control: the rows were read back from flash");

    wait_for(WAIT, "the stats file to show the node's flash hits", || {
        node_flash(&stats).is_some_and(|f| f["node_flash_hits"].as_u64().is_some_and(|h| h > 0))
    });
    let flash = node_flash(&stats).unwrap();
    let hits = flash["node_flash_hits"].as_u64().unwrap();
    assert!(hits <= node_stat(&addr, "get_extstore"), "more flash hits than the node's flash reads: {flash}");

    let exposition = waffle_stats("prometheus", &stats);
    assert_eq!(sample(&exposition, "waffle_node_flash_bytes"), Some((FLASH_MIB << 20) as f64), "{exposition}");
    let exposed =
        sample(&exposition, "waffle_node_flash_hits_total").or_else(|| sample(&exposition, "waffle_node_flash_hits"));
    assert!(
        exposed.is_some_and(|h| h >= hits as f64),
        "flash hits {hits} in the file, exposed {exposed:?}: {exposition}"
    );
    let text = waffle_stats("text", &stats);
    assert!(text.contains("flash") && text.contains(" from flash"), "the text names the node's flash: {text}");
}
