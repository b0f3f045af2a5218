//! Which process a cache belongs to, after `fork`.
//!
//! A forked child has one thread and copies of everything else: the caches its
//! parent had open (with their version counters and cache identities), their
//! push and reload threads (absent in the child), their grid sockets and their
//! sidecar locks (shared with the parent). None of it is the child's to use or
//! to close: SQLite's own rule is that a connection is not carried across a
//! fork, and a child that opens the database anew must get a cache of its own,
//! exactly as another process would (docs/design.md, "After fork").
//!
//! Each cache records the fork generation it was opened in; the child's
//! `pthread_atfork` handler moves the generation on, so a parent's cache is
//! told apart with one atomic load, and runs the registry's handler (which
//! forgets the parent's caches without running a line of their close).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// How many forks this process is down from the one that loaded waffle.
static GENERATION: AtomicU64 = AtomicU64::new(0);
/// What the child runs after the generation moved on (the registry's, set once).
static IN_CHILD: OnceLock<fn()> = OnceLock::new();

/// The fork generation of this process.
pub fn generation() -> u64 {
    GENERATION.load(Ordering::Relaxed)
}

/// Watches for forks from now on: a child moves the generation on and calls `then`, on its one
/// thread before `fork` returns (no allocation, no lock it cannot try). Idempotent: the first
/// caller's `then` is the one.
pub fn watch(then: fn()) {
    let mut first = false;
    IN_CHILD.get_or_init(|| {
        first = true;
        then
    });
    if first {
        // SAFETY: registers a plain function of this library, which stays loaded for the life of
        // the process (SQLITE_OK_LOAD_PERMANENTLY, lib.rs); no prepare or parent handler.
        unsafe {
            libc::pthread_atfork(None, None, Some(in_child));
        }
    }
}

extern "C" fn in_child() {
    GENERATION.fetch_add(1, Ordering::Relaxed);
    if let Some(then) = IN_CHILD.get() {
        // A panic must not unwind into libc's fork.
        let _ = std::panic::catch_unwind(then);
    }
}
