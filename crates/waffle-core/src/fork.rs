//! Which process a cache belongs to, after `fork`, and the process-wide locks
//! a fork must not copy held.
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
//! told apart with one atomic load, and runs the adapter's handler (which
//! forgets the parent's caches without running a line of their close).
//!
//! The locks. Waffle's own threads (the prober, the pushers, the reloads, the
//! stats writers) take a few process-wide locks for microseconds: the
//! prober's list, the log's limiter, Rust's stderr, the adapter's maps of open
//! databases and of stats writers. A host that forks sees itself
//! single-threaded and is entitled to a child that works; a copy of one of
//! those locks taken by a thread that is not in the child would leave the
//! child's first open, or its first log line, waiting forever. So the `prepare` handler takes them (the adapter's,
//! then [`hold_locks`]) and both sides of the fork release them. It may wait
//! only on a holder that never waits on anything the forking thread could
//! hold (Python's GIL, for one, through the host's log callback): none of
//! these locks is held across a log line, a host callback or a wait, the
//! rule for the code that takes them (stderr's is held across one write of a
//! line, which waits only on whoever reads the host's stderr). Locks only
//! the host's own work takes (SQLite's mutexes, inside an open or a close it
//! runs beside its fork) are the host's fork to order, as with plain SQLite.

use std::any::Any;
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Once, OnceLock};

/// How many forks this process is down from the one that loaded waffle.
static GENERATION: AtomicU64 = AtomicU64::new(0);
/// The adapter's part (set once).
static ADAPTER: OnceLock<Adapter> = OnceLock::new();

/// What an adapter adds to the fork handlers.
pub struct Adapter {
    /// Takes the adapter's process-wide locks (released when dropped), before the core's: the
    /// adapter's code may call the core while it holds one, never the reverse.
    pub hold: fn() -> Box<dyn Any>,
    /// Runs in the child once the generation moved on and every lock is free again.
    pub in_child: fn(),
}

thread_local! {
    /// The locks `prepare` took, released by `parent` or `child` on the same thread.
    static HELD: RefCell<Option<Held>> = const { RefCell::new(None) };
}

/// Process-wide locks held across a fork (dropped: released).
struct Held {
    _guards: Vec<Box<dyn Any>>,
}

/// The fork generation of this process.
pub fn generation() -> u64 {
    GENERATION.load(Ordering::Relaxed)
}

/// Takes every process-wide lock waffle's threads take, in one order: the prober's list, the
/// log's limiter, Rust's stderr. Waits for holders, none of which waits while holding.
fn hold_locks() -> Held {
    let prober: Box<dyn Any> = Box::new(crate::grid::prober::hold_for_fork());
    let limiter: Box<dyn Any> = Box::new(crate::log::hold_for_fork());
    let stderr: Box<dyn Any> = Box::new(std::io::stderr().lock());
    Held { _guards: vec![prober, limiter, stderr] }
}

/// Holds the core's locks ([`hold_locks`]) across every fork from now on (once per process;
/// the grid calls it before its prober's first use, an adapter through [`watch`]).
pub fn hold_across_forks() {
    static REGISTERED: Once = Once::new();
    REGISTERED.call_once(|| {
        // SAFETY: registers plain functions of this library, which stays loaded for the life of
        // the process (the SQLite adapter loads permanently; the preload is never unloaded).
        unsafe {
            libc::pthread_atfork(Some(prepare), Some(parent), Some(child));
        }
    });
}

/// Watches for forks from now on: the adapter's locks, then those of [`hold_locks`], are held
/// across each fork; a child moves the generation on, releases them and runs the adapter's
/// `in_child`, on its one thread before `fork` returns. Idempotent: the first adapter is the one.
pub fn watch(adapter: Adapter) {
    // A handler that ran before this saw no adapter: nothing of the adapter's was open yet.
    let _ = ADAPTER.set(adapter);
    hold_across_forks();
}

extern "C" fn prepare() {
    // A panic must not unwind into libc's fork; without the locks the fork goes on as before.
    let held = std::panic::catch_unwind(|| {
        let adapter = ADAPTER.get().map(|a| (a.hold)());
        let core = hold_locks();
        Held { _guards: adapter.into_iter().chain(core._guards).collect() }
    });
    // try_with: a thread whose locals are being torn down forks without the locks, not aborting.
    let _ = HELD.try_with(|h| *h.borrow_mut() = held.ok());
}

extern "C" fn parent() {
    release();
}

extern "C" fn child() {
    GENERATION.fetch_add(1, Ordering::Relaxed);
    // The copies were taken by this thread: released before the adapter's handler, which may
    // need one of them.
    release();
    if let Some(adapter) = ADAPTER.get() {
        let _ = std::panic::catch_unwind(adapter.in_child);
    }
}

fn release() {
    let held = HELD.try_with(|h| h.borrow_mut().take());
    drop(held);
}

#[cfg(test)]
mod tests {
    use std::any::Any;
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    /// How long a helper thread holds a lock while the test forks.
    const HOLD_MS: u64 = 300;
    /// How long the child may take to get the lock and exit.
    const CHILD_DEADLINE_MS: u64 = 10_000;

    fn prober() -> Box<dyn Any> {
        Box::new(crate::grid::prober::hold_for_fork())
    }
    fn limiter() -> Box<dyn Any> {
        Box::new(crate::log::hold_for_fork())
    }
    fn stderr() -> Box<dyn Any> {
        Box::new(std::io::stderr().lock())
    }

    /// Forks while another thread holds one of the locks (handlers registered as a grid does);
    /// the child takes the same lock and exits. Without the prepare handler the child's copy is held by a thread it does not have,
    /// and it waits forever (killed at the deadline: the test fails).
    fn fork_while_held(name: &str, take: fn() -> Box<dyn Any>) {
        super::hold_across_forks();
        let (holding_tx, holding_rx) = mpsc::channel();
        let holder = std::thread::spawn(move || {
            let guard = take();
            holding_tx.send(()).expect("the test waits");
            std::thread::sleep(Duration::from_millis(HOLD_MS));
            drop(guard);
        });
        holding_rx.recv().expect("the holder took the lock");
        let generation = super::generation();
        // SAFETY: the child only takes a lock and leaves with _exit (no allocation, no unwinding).
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed: {}", std::io::Error::last_os_error());
        if pid == 0 {
            let held = take();
            let ok = super::generation() == generation + 1;
            drop(held);
            // SAFETY: leaves the forked child without running the parent's atexit handlers.
            unsafe { libc::_exit(if ok { 0 } else { 2 }) };
        }
        holder.join().expect("the holder thread");
        assert_eq!(super::generation(), generation, "the parent's generation moved");
        let deadline = Instant::now() + Duration::from_millis(CHILD_DEADLINE_MS);
        let mut status = 0;
        loop {
            // SAFETY: waits for our own child, without blocking.
            let done = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            if done == pid {
                break;
            }
            if Instant::now() >= deadline {
                // SAFETY: our own child, then reaped.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                    libc::waitpid(pid, &mut status, 0);
                }
                panic!("the forked child still waits on the {name} lock after {CHILD_DEADLINE_MS} ms");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(libc::WIFEXITED(status), "the child did not exit: status {status:#x}");
        assert_eq!(libc::WEXITSTATUS(status), 0, "the child's generation did not move on");
    }

    #[test]
    fn a_fork_waits_for_the_probers_list_and_the_child_gets_it() {
        fork_while_held("prober's", prober);
    }

    #[test]
    fn a_fork_waits_for_the_logs_limiter_and_the_child_gets_it() {
        fork_while_held("log limiter's", limiter);
    }

    #[test]
    fn a_fork_waits_for_stderr_and_the_child_gets_it() {
        fork_while_held("stderr", stderr);
    }
}
