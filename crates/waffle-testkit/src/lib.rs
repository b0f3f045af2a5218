//! Test support for the end-to-end tests (`tests/`, package `waffle-e2e`), never a dependency of
//! a product crate. Its binaries are the child programs those tests start and kill, each taking
//! its inputs as arguments: `crash-writer` (`faults_crash.rs`), `commit-then-hang`
//! (`warm_restart.rs`), `open-config-cases` (`faults_config.rs`) and `preload-file-io`
//! (`mysql_preload.rs`); they are programs rather than `#[test]` functions that return early
//! unless an environment variable is set, so a test count counts tests.
//!
//! The library is what those tests and children share. The world a test runs in: a [`temp_dir`]
//! on the real disk, real memcached [`nodes`] (`waffle_nodes::Node`, killed on drop), a
//! [`fake_node`] that injects the faults a real one cannot (and holds sets mid-batch), a
//! [`raw_client`] that reads and writes a node's values as another client would, and child
//! [`process`]es killed on drop. The databases: opening them plainly or through `waffle`,
//! reading its stats, a table of blobs ([`db`]), the page of the file that holds a row
//! ([`db_file`]), an in-memory backing for tests of `PageCache` alone ([`mem_file`]), the shared
//! differential [`workload`] (a seeded statement stream run on a plain and a `waffle` database,
//! compared statement by statement, then the closed files by [`same_files`]), and the [`writers`] outside the test's own connections (the `sqlite3` shell, a
//! Python apsw peer).
//! What a child program shares with its test: the crash workload, the warm-restart rows, the
//! configuration cases, InnoDB pages. Throwaway MariaDB servers and sysbench ([`mariadb`]), for
//! the MySQL tests and for `waffle bench mysql` (waffle-bench). A test on an EMULATED slow disk
//! runs again under `libwaffle_slowdisk.so` ([`slow_disk`]). And the plumbing: [`artefact`]
//! finds a built binary or library of the profile the tests run under, [`wait_for`] polls a
//! condition with a deadline instead of sleeping, [`stall`] measures how late the machine wakes
//! this process's threads (the part of a timed wait that is not the code's), [`posix_locks`]
//! reads the locks a process holds on a file without /proc/locks' torn reads, through the
//! [`descriptors`] it has open on the file, [`soak`] scales fault tests under
//! `scripts/soak`, [`pattern`] makes bytes a wrong page cannot hold by accident, and
//! [`test_cases!`] writes one `#[test]` per case of a matrix.
//!
//! Every helper fails loudly (panics with what is missing and how to get it): an end-to-end test
//! never skips.

mod artefact;
pub mod config_cases;
pub mod crash_workload;
pub mod db;
pub mod db_file;
pub mod descriptors;
pub mod explorer;
pub mod fake_node;
pub mod innodb_page;
pub mod mariadb;
pub mod mem_file;
pub mod nodes;
mod pattern;
pub mod posix_locks;
pub mod process;
pub mod raw_client;
pub mod same_files;
pub mod slow_disk;
pub mod soak;
pub mod stall;
pub mod temp_dir;
mod test_cases;
pub mod wait;
pub mod wal_recovery;
pub mod warm_restart;
pub mod workload;
pub mod writers;

pub use artefact::{artefact, BINARIES};
pub use pattern::pattern;
pub use process::child_args;
pub use wait::{wait_for, wait_until};
