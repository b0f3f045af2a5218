//! `explorer-worker <db> <grid> <local> <verify on|off>`: a process of the explorer of
//! interleavings (`tests/explorer.rs`): a few connection slots to `db`, each on a thread of its
//! own, opened through `waffle` (L1 `local`, grid `grid`, verify mode) or plainly as the driver
//! says, running one command a line from stdin and answering one line each on stdout.

use std::path::PathBuf;

use waffle_testkit::explorer::worker::{serve, Setup};

fn main() {
    let [db, grid, local, verify] = waffle_testkit::child_args("explorer-worker", ["db", "grid", "local", "verify"]);
    serve(Setup { db: PathBuf::from(db), grid, local, verify: verify == "on" });
}
