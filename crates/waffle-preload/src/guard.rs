//! The re-entry guard: while a thread runs the library's own code (the cache,
//! the grid client, Rust's std, the stats writer), every hook it reaches
//! again goes straight to the real function.
//!
//! Rust's std inside this library calls open64/close/pread64/write through
//! the PLT, and the preloaded definitions, ours, are the ones found: without
//! the guard they would recurse into the hooks.

use std::cell::Cell;

thread_local! {
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

/// Whether this thread is running the library's own code.
#[inline]
pub fn inside() -> bool {
    INSIDE.with(Cell::get)
}

/// Marks this thread as inside the library until dropped (nesting is fine).
pub struct Guard {
    was: bool,
}

impl Guard {
    #[inline]
    pub fn enter() -> Guard {
        Guard { was: INSIDE.with(|c| c.replace(true)) }
    }
}

impl Drop for Guard {
    #[inline]
    fn drop(&mut self) {
        let was = self.was;
        INSIDE.with(|c| c.set(was));
    }
}

/// For threads the library starts itself: inside for their whole life.
pub fn enter_forever() {
    INSIDE.with(|c| c.set(true));
}
