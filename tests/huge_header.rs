//! A database whose header claims 2^30 pages (issue 19, item 5): a crafted or
//! corrupt file, sparse on disk, read by Debian's `sqlite3` shell under a
//! 1 GiB address-space limit (`ulimit -v`), plainly (the control) and through
//! `waffle`. Waffle must print what plain SQLite prints and not abort: its
//! per-page bookkeeping (versions, presence stamps) costs the pages read, not
//! every page up to the highest one. Before chunked tables, reading the rows
//! at the file's far end aborted the shell with "memory allocation of
//! 1073741824 bytes failed".

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use waffle_testkit::artefact;
use waffle_testkit::nodes::{grid_of, start_node};
use waffle_testkit::process::run_with_input;
use waffle_testkit::temp_dir::TempDir;
use waffle_testkit::writers::{sqlite3_shell, CHILD_TIMEOUT};

const PAGE_BYTES: u64 = 4096;
/// The header's claim: SQLite 3.40's bound (2^30 - 1 pages) less room for the rows written past it.
const CLAIMED_PAGES: u64 = (1 << 30) - 64;
/// The least claim worth the test: 2^28 pages of versions alone are 2 GiB, over the limit.
const LEAST_CLAIMED_PAGES: u64 = 1 << 28;
/// `ulimit -v` of every shell that reads the crafted file: 1 GiB.
const LIMIT_KIB: u64 = 1 << 20;
/// Reads the near rows, the far ones (pages past the claim), and every b-tree page.
const QUERIES: &str = "SELECT count(*) FROM t;\n\
     SELECT count(*), sum(length(x)), sum(x = zeroblob(5000)) FROM far;\n\
     PRAGMA integrity_check;\n";

/// What a shell printed, and how it ended.
#[derive(Debug, PartialEq)]
struct Answer {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs `script` in the `sqlite3` shell on `:memory:` (the script opens the
/// database), under `ulimit -v` when `limited`.
fn shell(script: &str, limited: bool) -> Answer {
    let limit = if limited { format!("ulimit -v {LIMIT_KIB} && ") } else { String::new() };
    let mut cmd = Command::new("bash");
    cmd.arg("-c").arg(format!("{limit}exec \"$0\" -batch :memory:")).arg(sqlite3_shell());
    let out = run_with_input(&mut cmd, script, CHILD_TIMEOUT);
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    Answer { code: out.status.code(), stdout: text(&out.stdout), stderr: text(&out.stderr) }
}

/// `sql` on `db` plainly, under the limit or not. The first line stands where
/// the waffle script loads the extension, so errors name the same lines.
fn plain(db: &Path, sql: &str, limited: bool) -> Answer {
    shell(&format!(".timeout 0\n.open '{}'\n{sql}", db.display()), limited)
}

/// `sql` on `db` through `waffle` (1 MiB L1, `grid` if any), under the limit.
fn through_waffle(db: &Path, grid: Option<&str>, sql: &str) -> Answer {
    let so = artefact("libwaffle.so");
    let grid = grid.map_or(String::new(), |g| format!("&waffle_grid={g}"));
    let uri = format!("file:{}?vfs=waffle&waffle_local=1MiB{grid}", db.display());
    shell(&format!(".load {}\n.open '{uri}'\n{sql}", so.display()), true)
}

/// A 4 KiB-page database with three rows in `t`.
fn small_database(dir: &TempDir) -> PathBuf {
    let db = dir.join("huge.db");
    let made = plain(
        &db,
        "PRAGMA page_size=4096;\nCREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT);\n\
         INSERT INTO t(b) VALUES ('one'), ('two'), ('three');\n",
        false,
    );
    assert_eq!((made.code, made.stderr.as_str()), (Some(0), ""), "{made:?}");
    db
}

/// Makes the header claim `pages` pages, trusted (the valid-for number, bytes
/// 92..96, equal to the change counter, 24..28), and the file that long if
/// `sparse` (the largest claim the filesystem allows, halving from `pages`).
/// Returns the claim.
fn claim(db: &Path, mut pages: u64, sparse: bool) -> u64 {
    let f = OpenOptions::new().read(true).write(true).open(db).unwrap();
    while sparse && f.set_len(pages * PAGE_BYTES).is_err() {
        pages /= 2;
        assert!(pages >= LEAST_CLAIMED_PAGES, "the filesystem refuses a sparse file of {pages} pages");
    }
    let mut header = [0u8; 100];
    f.read_exact_at(&mut header, 0).unwrap();
    header[28..32].copy_from_slice(&(pages as u32).to_be_bytes());
    header.copy_within(24..28, 92);
    f.write_all_at(&header, 0).unwrap();
    f.sync_all().unwrap();
    pages
}

/// The crafted file, as the control and as `waffle` (a cold open, then a warm
/// one restoring what the first saved) read it: the same answer, no abort.
fn same_answer_as_plain(db: &Path, grid: Option<&str>) -> Answer {
    let control = plain(db, QUERIES, true);
    let head: Vec<&str> = control.stdout.lines().take(4).collect();
    eprintln!("plain SQLite under a {LIMIT_KIB} KiB limit: exit {:?}, {head:?}..., {:?}", control.code, control.stderr);
    for open in ["cold", "warm"] {
        let got = through_waffle(db, grid, QUERIES);
        assert!(!got.stderr.contains("memory allocation"), "{open} open aborted: {got:?}");
        assert_eq!(got, control, "{open} open through waffle differs from plain SQLite");
    }
    control
}

/// Rows written past the claim land at the sparse file's far end; reading them
/// made waffle size its tables by their page numbers.
#[test]
fn far_rows_of_a_sparse_file_read_as_plain_sqlite_reads_them() {
    let dir = TempDir::new("huge-sparse");
    let db = small_database(&dir);
    let claimed = claim(&db, CLAIMED_PAGES, true);
    let far =
        plain(&db, "CREATE TABLE far(x);\nINSERT INTO far VALUES (randomblob(20000)), (zeroblob(5000));\n", false);
    assert_eq!((far.code, far.stderr.as_str()), (Some(0), ""), "{far:?}");
    let pages = plain(&db, "PRAGMA page_count;\n", false);
    assert!(pages.stdout.trim().parse::<u64>().unwrap() > claimed, "the far rows are past the claim: {pages:?}");

    let node = start_node(64);
    for grid in [None, Some(grid_of([&node]))] {
        let control = same_answer_as_plain(&db, grid.as_deref());
        let lines: Vec<&str> = control.stdout.lines().collect();
        assert_eq!(lines[..2], ["3", "2|25000|1"], "the control reads near and far rows: {control:?}");
    }
}

/// Only the header claims the pages (the file holds two): SQLite calls it
/// malformed, and waffle must say the same.
#[test]
fn a_claim_the_file_does_not_back_reads_as_plain_sqlite_reads_it() {
    let dir = TempDir::new("huge-claim");
    let db = small_database(&dir);
    claim(&db, CLAIMED_PAGES, false);
    let control = same_answer_as_plain(&db, None);
    assert!(control.stderr.contains("malformed"), "{control:?}");
}
