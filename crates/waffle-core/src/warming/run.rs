//! A background run (a warm, a hot list's reload) goes in pieces: where one
//! piece stops ([`Budget`]), and how the run ended ([`Finish`]). Between
//! pieces the adapter lets writers in (SQLite: each piece is a read
//! transaction of its own).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Where one piece of a run stops: `bytes` read, `deadline` passed, or `cancel` set.
pub struct Budget<'a> {
    pub bytes: u64,
    pub deadline: Instant,
    pub cancel: &'a AtomicBool,
    /// How long one page may wait for room in the push queue (then it counts as dropped).
    pub push_wait: Duration,
}

impl Budget<'_> {
    pub fn spent(&self) -> bool {
        self.bytes == 0 || Instant::now() >= self.deadline || self.cancel.load(Ordering::Relaxed)
    }
}

/// How a run ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Finish {
    Done,
    Cancelled,
    Failed(String),
}
