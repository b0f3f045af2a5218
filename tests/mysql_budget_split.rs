//! The budget split under writes (issue 20, item 4): however a memory budget B is
//! split between InnoDB's buffer pool and Waffle's L1 (`waffle bench mysql`'s
//! `waffle` and `waffle@S` configurations), a write-heavy run ends with exactly
//! the data of a stock server given all of B.
//!
//! The split decides where dirty pages live: a small buffer pool writes a page
//! each time it makes room for a dirty one, and every such write passes the
//! preload (a new version, L1 takes the bytes, the old grid copy is refused
//! from then on). A large one keeps them and leaves L1 little room, so L1's
//! pages are pushed soon after they arrive. Both paths are run here with verify
//! mode on (every page served from L1, the push queue or the grid is compared
//! with the file) and the grid asked always.
//!
//! The oracle: sysbench oltp_write_only with one thread, a fixed seed and a
//! fixed number of events is deterministic, so the stock server's tables
//! (the control, no Waffle) and each split's must have the same checksums.

#[path = "mysql_support.rs"]
mod mysql_support;

use std::time::{Duration, Instant};

use mysql_support::*;

/// The memory budget B: the stock server's buffer pool; under Waffle, buffer pool + L1.
const BUDGET: u64 = 16 << 20;
const TABLES: u32 = 4;
/// About 37 MiB of rows: over twice the budget, so pages leave both the buffer pool and L1.
const ROWS: u64 = 20_000;
/// Buffer pools of the splits: MariaDB's smallest (L1 gets the rest), and three quarters of B.
const SPLITS: [u64; 2] = [POOL, BUDGET / 4 * 3];
const WRITE_ONLY: [&str; 6] =
    ["--threads=1", "--time=0", "--events=1500", "--rand-seed=20261126", "--report-interval=0", "oltp_write_only"];

/// The deterministic write-only run on `s`; panics with the server's log if sysbench fails.
fn write_only(s: &Server) -> server::SysbenchResult {
    let mut rest = WRITE_ONLY.to_vec();
    rest.push("run");
    let args = sysbench_args(s, TABLES, ROWS, &rest);
    let r =
        server::sysbench(tools(), &args, Duration::from_secs(300)).unwrap_or_else(|e| panic!("{e}\nlog:\n{}", s.log()));
    assert!(r.transactions > 0 && r.errors == 0, "{}", r.output);
    r
}

/// InnoDB's pages written from its buffer pool so far.
fn pages_flushed(s: &Server) -> u64 {
    let out = s.sql("SHOW GLOBAL STATUS LIKE 'Innodb_buffer_pool_pages_flushed'").unwrap();
    out.split_whitespace().last().and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("no flush count in {out:?}"))
}

#[test]
fn every_split_of_the_budget_ends_with_the_stock_servers_data_under_writes() {
    let _serial = serial();
    let t0 = Instant::now();
    let dir = TempDir::new("budget-split");
    let tables = sbtest_tables(TABLES);

    // The prepared tables, once: every configuration starts from a copy.
    let prepared = fresh_datadir(&dir, "prepared");
    let s = start(&prepared, stock_options(BUDGET));
    sysbench_prepare(&s, TABLES, ROWS);
    s.shutdown().unwrap();
    let copy = |name: &str| {
        let to = dir.join(name);
        server::copy_datadir(&prepared, &to).unwrap();
        to
    };

    // The control: a stock server given the whole budget.
    let stock = start(&copy("stock"), stock_options(BUDGET));
    let flushed0 = pages_flushed(&stock);
    let r = write_only(&stock);
    let per_txn = (pages_flushed(&stock) - flushed0) as f64 / r.transactions as f64;
    eprintln!(
        "stock, buffer pool {} MiB: {} transactions, {per_txn:.2} pages written each",
        BUDGET >> 20,
        r.transactions
    );
    let expected = stock.checksums(&refs(&tables)).unwrap();
    stock.shutdown().unwrap();

    let node = start_node(32);
    for pool in SPLITS {
        let name = format!("waffle@{}MiB", pool >> 20);
        let local = (BUDGET - pool).to_string();
        let mut options =
            waffle_options(&node.addr(), &local, &[("WAFFLE_VERIFY", "on"), ("WAFFLE_TIMEOUT_MS", "200")]);
        options.buffer_pool_bytes = pool;
        let s = start(&copy(&name), options);
        let flushed0 = pages_flushed(&s);
        let before = s.stats().unwrap_or_default();
        let r = write_only(&s);
        let per_txn = (pages_flushed(&s) - flushed0) as f64 / r.transactions as f64;
        s.check_tables(&refs(&tables)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(s.checksums(&refs(&tables)).unwrap(), expected, "{name}: the tables differ from the stock server's");
        let v = stats_after(&s, &name, |v| {
            preload_of(v).preload.page_writes > preload_of(&before).preload.page_writes
                && cache_of(v).verify_checked > cache_of(&before).verify_checked
        });
        eprintln!(
            "{name}: {} transactions, {per_txn:.2} pages written each; L1 hits {}, grid hits {}, disk reads {}, \
             pushes {}, pages verified {}",
            r.transactions,
            cache_of(&v).l1_hits,
            cache_of(&v).l2_hits,
            cache_of(&v).disk_reads,
            cache_of(&v).l2_pushes,
            cache_of(&v).verify_checked
        );
        assert_eq!(cache_of(&v).verify_mismatches, 0, "{name}: a page served from a tier differed from the file: {v}");
        assert!(cache_of(&v).l2_pushes > 0 && cache_of(&v).l2_hits > 0, "{name}: the grid took part: {v}");
        assert_eq!(preload_of(&v).preload.innodb_rejects.total(), 0, "{name}: {v}");
        assert_eq!(v["state"], "running", "{name}: {v}");
        let errors = log_errors(&s, &[]);
        assert!(errors.is_empty(), "{name}: the server logged errors: {errors:#?}");
        s.shutdown().unwrap();
    }
    eprintln!("total {:.1} s", t0.elapsed().as_secs_f64());
}
