//! CI smoke tests of `waffle bench`, `waffle bench sweep`, `waffle bench mysql`
//! and `waffle probe`: each command at a tiny size for a second or two. They
//! check structure (JSON fields, finite ratios, PNG charts), never speed.

use std::path::Path;
use std::process::Command;

use serde_json::Value;
use waffle_testkit::temp_dir::TempDir;

fn waffle() -> Command {
    Command::new(env!("CARGO_BIN_EXE_waffle"))
}

fn run(args: &[&str]) -> String {
    let out = waffle().args(args).output().expect("run waffle");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "waffle {args:?} failed\nstdout:\n{stdout}\nstderr:\n{stderr}");
    stdout
}

/// Runs `waffle` with `cmd` (words split on spaces) in `dir`, its JSON report written to
/// `dir/<json>` and, with `charts`, its charts to `dir/charts`; returns stdout and the report.
fn run_in(dir: &TempDir, cmd: &str, json: &str, charts: bool) -> (String, Value) {
    let report = dir.path().join(json);
    let chart_dir = dir.path().join("charts");
    let mut args: Vec<&str> = cmd.split_whitespace().collect();
    args.extend(["--dir", dir.path().to_str().unwrap(), "--json", report.to_str().unwrap()]);
    if charts {
        args.extend(["--charts", chart_dir.to_str().unwrap()]);
    }
    let stdout = run(&args);
    (stdout, read_json(&report))
}

fn read_json(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).expect("json written")).expect("valid json")
}

fn assert_png(p: &Path) {
    let b = std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    assert!(b.len() > 1000, "{} is {} bytes", p.display(), b.len());
    assert_eq!(&b[..8], &[0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a], "{} is not a PNG", p.display());
    assert_eq!(&b[12..16], b"IHDR");
    let w = u32::from_be_bytes([b[16], b[17], b[18], b[19]]);
    let h = u32::from_be_bytes([b[20], b[21], b[22], b[23]]);
    assert!(w > 100 && h > 100, "{w}x{h}");
}

fn finite_or_null(v: &Value, what: &str) {
    assert!(v.is_null() || v.as_f64().is_some_and(f64::is_finite), "{what}: {v}");
}

/// Fields every configuration result has, with sane values.
fn check_config(c: &Value) {
    let name = c["name"].as_str().expect("name");
    for k in ["throughput", "seconds"] {
        let v = c[k].as_f64().unwrap_or_else(|| panic!("{name}: {k} missing: {c}"));
        assert!(v.is_finite() && v >= 0.0, "{name}: {k} = {v}");
    }
    assert!(c["transactions"].as_u64().is_some(), "{name}");
    for k in ["p50_ms", "p95_ms", "p99_ms"] {
        assert!(c["latency"][k].as_f64().is_some_and(f64::is_finite), "{name}: latency.{k}");
    }
    for k in ["ratio_to_local", "ratio_to_all_local", "ratio_to_stock"] {
        finite_or_null(&c[k], &format!("{name}.{k}"));
    }
    assert!(c["unit"].is_string() && c["device"].is_string() && c["link"].is_string(), "{name}");
    assert!(c["memory"]["budget_bytes"].as_u64().is_some_and(|b| b > 0), "{name}");
    if c["vfs"] == "waffle" {
        let h = &c["hits"];
        let sum = ["l1", "l2", "disk"].iter().map(|k| h[k].as_f64().expect("hit ratio")).sum::<f64>();
        assert!(h["vfs_reads"].as_u64() == Some(0) || (sum - 1.0).abs() < 0.02, "{name}: hit ratios sum to {sum}: {h}");
    }
    if name.starts_with("grid") {
        for k in ["pushed_bytes", "fetched_bytes", "l2_p50_us", "memcached_limit_bytes"] {
            assert!(c["grid"][k].as_u64().is_some(), "{name}: grid.{k}: {c}");
        }
    }
    assert!(c["cpu_us_per_txn"].as_f64().is_some_and(f64::is_finite), "{name}: cpu_us_per_txn: {c}");
    // The wire's limit beside a grid run (issue 33 item 4): there when the run had grid hits.
    let w = &c["wire"];
    if !w.is_null() {
        for k in ["bare_cpu_us_per_get", "bare_wall_us_per_get", "cpu_us_per_l2_hit_total"] {
            assert!(w[k].as_f64().is_some_and(|x| x.is_finite() && x >= 0.0), "{name}: wire.{k}: {w}");
        }
        for k in ["cpu_us_per_l2_hit", "ratio_to_bare", "limit_ratio_to_all_local", "share_of_limit"] {
            finite_or_null(&w[k], &format!("{name}.wire.{k}"));
        }
    }
}

#[test]
fn bench_oltp_all_configurations() {
    let dir = TempDir::new("oltp");
    let cmd = "bench --data 3MiB --memory 30% --threads 2 --warmup 0 --duration 1 \
               --configs local,grid,all-local,stock,grid:2@10gbe";
    let (stdout, v) = run_in(&dir, cmd, "out.json", true);
    let (json, charts) = (dir.path().join("out.json"), dir.path().join("charts"));
    for c in ["local", "grid", "all-local", "stock", "grid:2@10gbe"] {
        assert!(stdout.contains(c), "{c} missing from the table:\n{stdout}");
    }
    assert!(stdout.contains("EMULATED"), "the emulated link must be labelled:\n{stdout}");
    assert_eq!(v["workload"], "oltp-read-only");
    assert_eq!(v["unit"], "tps");
    let configs = v["configs"].as_array().expect("configs");
    assert_eq!(configs.len(), 5);
    configs.iter().for_each(check_config);
    assert_eq!(configs[0]["ratio_to_local"].as_f64(), Some(1.0));
    assert!(configs[4]["emulated"].as_bool().unwrap());
    assert!(configs[4]["link"].as_str().unwrap().contains("EMULATED"));
    assert!(v["emulated"].as_array().is_some_and(|a| !a.is_empty()));
    assert!(v["checks"].is_array());
    assert_png(&charts.join("bench-oltp-read-only.png"));

    // The chart can be redrawn from the report alone.
    let again = dir.path().join("replot");
    run(&["bench", "replot", "--json", json.to_str().unwrap(), "--charts", again.to_str().unwrap()]);
    assert_png(&again.join("bench-oltp-read-only.png"));

    // A second run reuses the dataset.
    let cmd = "bench --data 3MiB --threads 1 --warmup 0 --duration 0.5 --configs local --dist pareto";
    let (_, v2) = run_in(&dir, cmd, "again.json", false);
    assert_eq!(v2["dataset"]["built_now"], false);
    assert_eq!(v2["params"]["distribution"], "pareto:0.2");
}

#[test]
fn bench_tpcc_and_scan() {
    let dir = TempDir::new("tpcc");
    let cmd = "bench --workload tpcc --warehouses 1 --items 200 --customers 30 --threads 2 --warmup 0 \
               --duration 1 --configs local,grid@1gbe/hdd-10k";
    let (_, v) = run_in(&dir, cmd, "tpcc.json", false);
    assert_eq!(v["unit"], "NOTPM");
    let configs = v["configs"].as_array().unwrap();
    configs.iter().for_each(check_config);
    let kinds: Vec<&str> = configs[0]["per_kind"].as_array().unwrap().iter().map(|k| k[0].as_str().unwrap()).collect();
    assert_eq!(kinds, ["new-order", "payment", "order-status", "delivery", "stock-level"]);
    assert!(configs[0]["transactions"].as_u64().unwrap() > 0, "no TPC-C transaction completed");
    assert!(configs[1]["device"].as_str().unwrap().contains("hdd-10k (EMULATED)"));

    let cmd = "bench --workload scan --data 2MiB --warmup 0 --duration 0.5 --configs local,grid";
    let (_, v) = run_in(&dir, cmd, "scan.json", true);
    let charts = dir.path().join("charts");
    assert_eq!(v["unit"], "scans/min");
    assert_eq!(v["params"]["threads"], 1);
    v["configs"].as_array().unwrap().iter().for_each(check_config);
    assert_png(&charts.join("bench-scan.png"));
}

#[test]
fn sweep_draws_throughput_against_memory() {
    let dir = TempDir::new("sweep");
    let cmd = "bench sweep --data 2MiB --points 50,120 --threads 2 --warmup 0 --duration 0.5";
    let (stdout, v) = run_in(&dir, cmd, "sweep.json", true);
    assert!(stdout.contains("grid/local"), "{stdout}");
    let points = v["points"].as_array().unwrap();
    assert_eq!(points.len(), 2);
    for p in points {
        let cs = p["configs"].as_array().unwrap();
        assert_eq!(cs.iter().map(|c| c["name"].as_str().unwrap()).collect::<Vec<_>>(), ["local", "grid"]);
        cs.iter().for_each(check_config);
    }
    assert_png(&dir.path().join("charts/sweep-oltp-read-only.png"));
}

/// `--rounds 2`: each point runs local and grid twice, interleaved; the table shows the median
/// with the spread, the JSON every round.
#[test]
fn sweep_with_rounds_reports_medians_and_every_round() {
    let dir = TempDir::new("sweep-rounds");
    let cmd = "bench sweep --data 2MiB --points 50 --threads 2 --warmup 0 --duration 0.5 --rounds 2";
    let (stdout, v) = run_in(&dir, cmd, "sweep.json", true);
    assert!(stdout.contains("2 rounds per point, interleaved"), "{stdout}");
    assert!(stdout.contains("the median round of 2 (min..max of all rounds)"), "{stdout}");
    let row = stdout.lines().find(|l| l.starts_with("real")).unwrap_or_else(|| panic!("no row:\n{stdout}"));
    assert_eq!(row.matches("..").count(), 3, "local, grid and grid/local with their spread: {row}");
    assert_eq!(v["params"]["rounds"], 2);
    let points = v["points"].as_array().unwrap();
    assert_eq!(points.len(), 1);
    let p = &points[0];
    for c in p["configs"].as_array().unwrap() {
        check_config(c);
        let rounds: Vec<f64> = c["rounds"].as_array().unwrap().iter().map(|t| t.as_f64().unwrap()).collect();
        assert_eq!(rounds.len(), 2, "{c}");
        let (t, lo, hi) = (
            c["throughput"].as_f64().unwrap(),
            c["throughput_min"].as_f64().unwrap(),
            c["throughput_max"].as_f64().unwrap(),
        );
        let median = c["median_round"].as_u64().unwrap() as usize;
        assert!((1..=2).contains(&median), "{c}");
        assert_eq!(t, rounds[median - 1], "the median shown is its round's: {c}");
        assert_eq!(lo, rounds.iter().copied().fold(f64::MAX, f64::min));
        assert_eq!(hi, rounds.iter().copied().fold(f64::MIN, f64::max));
    }
    let grid = &p["configs"][1];
    let local = p["configs"][0]["throughput"].as_f64().unwrap();
    let ratio = grid["ratio_to_local"].as_f64().expect("grid/local of the medians");
    assert!((ratio - grid["throughput"].as_f64().unwrap() / local).abs() < 1e-9, "{ratio}");
    let every = p["rounds"].as_array().expect("every round");
    assert_eq!(every.iter().map(|r| r["round"].as_u64().unwrap()).collect::<Vec<_>>(), [1, 2]);
    for r in every {
        let names: Vec<&str> = r["configs"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["local", "grid"], "{r}");
        finite_or_null(&r["configs"][1]["ratio_to_local"], "a round's grid/local");
    }
    assert_png(&dir.path().join("charts/sweep-oltp-read-only.png"));
}

/// `waffle bench mysql --rounds 2` at the tiniest size: a real MariaDB and sysbench, stock and
/// waffle twice each, interleaved; the medians with their spread, every round in the JSON.
#[test]
fn mysql_with_rounds_reports_medians_and_every_round() {
    let dir = TempDir::new("mysql-rounds");
    let json = dir.path().join("mysql.json");
    let mysql_dir = dir.path().join("mysql");
    let stdout = run(&[
        "bench",
        "mysql",
        "--budget",
        "8MiB",
        "--data",
        "1MiB",
        "--tables",
        "1",
        "--threads",
        "2",
        "--warmup",
        "0",
        "--duration",
        "1",
        "--configs",
        "stock,waffle",
        "--workloads",
        "oltp_read_only,oltp_read_write",
        "--nodes",
        "1",
        "--rounds",
        "2",
        "--dir",
        mysql_dir.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(stdout.contains("2 rounds, interleaved"), "{stdout}");
    assert!(stdout.contains("tps min..max"), "{stdout}");
    for w in ["oltp_read_only", "oltp_read_write"] {
        for c in ["stock", "waffle"] {
            assert!(stdout.contains(&format!("rounds: {w} {c}: tps ")), "{w} {c}:\n{stdout}");
        }
    }
    let v = read_json(&json);
    assert_eq!(v["rounds"], 2);
    let runs = v["runs"].as_array().expect("every round");
    let order: Vec<(u64, &str, &str)> = runs
        .iter()
        .map(|r| (r["round"].as_u64().unwrap(), r["config"].as_str().unwrap(), r["workload"].as_str().unwrap()))
        .collect();
    assert_eq!(
        order,
        [
            (1, "stock", "oltp_read_only"),
            (1, "stock", "oltp_read_write"),
            (1, "waffle", "oltp_read_only"),
            (1, "waffle", "oltp_read_write"),
            (2, "stock", "oltp_read_only"),
            (2, "stock", "oltp_read_write"),
            (2, "waffle", "oltp_read_only"),
            (2, "waffle", "oltp_read_write"),
        ],
        "interleaved"
    );
    for r in runs {
        assert!(r["tps"].as_f64().is_some_and(|t| t.is_finite() && t > 0.0), "{r}");
    }
    let results = v["results"].as_array().expect("medians");
    assert_eq!(results.len(), 4);
    for r in results {
        let tps: Vec<f64> = r["tps_rounds"].as_array().unwrap().iter().map(|t| t.as_f64().unwrap()).collect();
        assert_eq!(tps.len(), 2, "{r}");
        let median = r["median_round"].as_u64().unwrap() as usize;
        assert!((1..=2).contains(&median), "{r}");
        assert_eq!(r["tps"].as_f64().unwrap(), tps[median - 1], "{r}");
        assert_eq!(r["round"].as_u64(), Some(median as u64), "{r}");
        assert!(r["tps_min"].as_f64().unwrap() <= r["tps"].as_f64().unwrap());
        assert!(r["tps_max"].as_f64().unwrap() >= r["tps"].as_f64().unwrap());
        assert!(r["ratio_to_stock"].as_f64().is_some_and(f64::is_finite), "{r}");
        assert_eq!(r["ratio_to_stock_rounds"].as_array().map(Vec::len), Some(2), "{r}");
        if r["config"] == "waffle" {
            assert!(r["waffle"].is_object(), "the median run's waffle counters: {r}");
            let stock = results.iter().find(|s| s["config"] == "stock" && s["workload"] == r["workload"]).unwrap();
            let ratio = r["tps"].as_f64().unwrap() / stock["tps"].as_f64().unwrap();
            assert!((r["ratio_to_stock"].as_f64().unwrap() - ratio).abs() < 1e-9, "the ratio of the medians: {r}");
        }
    }
}

#[test]
fn probe_reports_disk_and_grid_latency() {
    let dir = TempDir::new("probe");
    let cmd = "probe --threads 1,2 --seconds 0.3 --file-size 2MiB --link 1gbe";
    let (stdout, v) = run_in(&dir, cmd, "probe.json", true);
    assert!(stdout.contains("1gbe (EMULATED)"), "{stdout}");
    let series = v["series"].as_array().unwrap();
    assert_eq!(
        series.iter().map(|s| s["name"].as_str().unwrap()).collect::<Vec<_>>(),
        ["disk", "mg (bare)", "grid hit"]
    );
    for s in series {
        let pts = s["points"].as_array().unwrap();
        assert_eq!(pts.len(), 2);
        for p in pts {
            assert!(p["p50_us"].as_f64().is_some_and(|x| x.is_finite() && x > 0.0), "{p}");
            assert!(p["ops_per_s"].as_f64().is_some_and(|x| x.is_finite() && x > 0.0), "{p}");
        }
    }
    for r in v["grid_hit_over_bare_mg"].as_array().unwrap() {
        finite_or_null(&r["grid_hit_over_bare_mg_p50"], "ratio");
    }
    assert_png(&dir.path().join("charts/probe.png"));
}

#[test]
fn bad_arguments_are_refused_with_a_reason() {
    for (args, needle) in [
        (&["bench", "--configs", "local,remote"][..], "unknown configuration"),
        (&["bench", "--configs", "local@1gbe"][..], "only a grid configuration has a link"),
        (&["bench", "--link", "carrier-pigeon"][..], "unknown link profile"),
        (&["bench", "--workload", "tpch"][..], "unknown workload"),
        (&["bench", "--memory", "lots"][..], "memory"),
        (&["probe", "--device", "floppy"][..], "unknown device profile"),
        (&["bench", "--rounds", "0"][..], "'0' for '--rounds"),
        (&["bench", "sweep", "--rounds", "0"][..], "'0' for '--rounds"),
        (&["bench", "sweep", "--rounds", "21"][..], "'21' for '--rounds"),
        (&["bench", "mysql", "--rounds", "0"][..], "'0' for '--rounds"),
        (&["bench", "mysql", "--rounds", "21"][..], "'21' for '--rounds"),
    ] {
        let dir = TempDir::new("bad");
        let mut all = args.to_vec();
        all.extend(["--dir", dir.path().to_str().unwrap()]);
        let out = waffle().args(&all).output().unwrap();
        assert!(!out.status.success(), "{args:?} was accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn warm_a_database_and_a_bench_configuration() {
    let dir = TempDir::new("warm");
    let cmd = "bench --workload scan --data 2MiB --warmup 0 --duration 0.5 --configs local,grid --warm";
    let (_, v) = run_in(&dir, cmd, "warm.json", false);
    let configs = v["configs"].as_array().unwrap();
    configs.iter().for_each(check_config);
    assert_eq!(configs[1]["name"], "grid+warm");
    let w = &configs[1]["warm"];
    let g = |k: &str| w[k].as_u64().unwrap_or_else(|| panic!("no {k} in {w}"));
    assert!(g("planned_pages") > 100, "{w}");
    // Every planned page is accounted for once: kept in L1, queued for the grid, skipped, or
    // dropped for lack of room; a queued page was stored, not stored (a push that missed its
    // deadline on a loaded host is `lost`: 13 of 471 in session 19's second run, which a sum of
    // the stored ones alone failed), or is unsettled.
    assert_eq!(g("l1_pages") + g("queued_pages") + g("skipped_pages") + g("dropped_pages"), g("planned_pages"), "{w}");
    assert_eq!(g("pushed_pages") + g("not_stored_pages") + g("unsettled_pages"), g("queued_pages"), "{w}");
    assert!(g("pushed_pages") > 0, "the grid stored pages: {w}");
    assert!(configs[0]["ratio_to_local"].as_f64().is_some(), "local+warm is still the local baseline");

    // `waffle warm` on the bench's database file without a grid: refused, since what its own process
    // holds is gone when it exits (issue 21 item 2: a warm that can store nothing says so, non-zero).
    let db = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "db"))
        .expect("the bench's database");
    let none = waffle().args(["warm", db.to_str().unwrap(), "--local", "64MiB", "--grid", "", "--quiet"]).output();
    let none = none.unwrap();
    assert!(!none.status.success());
    let stderr = String::from_utf8_lossy(&none.stderr);
    assert!(stderr.contains("no grid (--grid or WAFFLE_GRID)"), "{stderr}");
    // An unknown table is named (a grid is given: a node nobody listens on will do for that).
    let bad = waffle().args(["warm", db.to_str().unwrap(), "no_such", "--grid", "127.0.0.1:1", "--quiet"]).output();
    let bad = bad.unwrap();
    assert!(!bad.status.success());
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(stderr.contains("'no_such'"), "{stderr}");
}

/// `CONFIG+restart`: the restart's run is reported, with the hot list's
/// reload (trusted: a clean close under the same identity) and without it (`+nohot`).
#[test]
fn bench_restart_reports_the_reopen_against_the_steady_state() {
    let dir = TempDir::new("restart");
    let d = dir.path().to_str().unwrap();
    let json = dir.path().join("out.json");
    let stdout = run(&[
        "bench",
        "--data",
        "3MiB",
        "--memory",
        "30%",
        "--threads",
        "2",
        "--warmup",
        "0",
        "--duration",
        "1",
        "--restart-duration",
        "2",
        "--configs",
        "grid+restart,grid+restart+nohot",
        "--dir",
        d,
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(stdout.contains("restart: closed in"), "{stdout}");
    let v = read_json(&json);
    let configs = v["configs"].as_array().expect("configs");
    assert_eq!(configs.len(), 2);
    for (c, hot) in configs.iter().zip(["done", "off"]) {
        check_config(c);
        let r = &c["restart"];
        assert!(r["tps"].as_f64().is_some_and(|t| t > 0.0) && r["steady_tps"].as_f64().is_some(), "{r}");
        assert!(r["per_second"].as_array().is_some_and(|s| (1..=3).contains(&s.len())), "{r}");
        assert_eq!(r["hot_list"]["state"], hot, "{r}");
    }
    assert_eq!(configs[0]["restart"]["hot_list"]["trusted"], true, "{}", configs[0]["restart"]);
}
