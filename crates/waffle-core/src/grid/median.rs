//! The median of the latest few figures of one kind, for a trial that must
//! not be swayed by one of them: a stall of the client's machine makes one
//! exchange slow, not the node (grid::cost's promise from push exchanges).

use std::collections::VecDeque;
use std::sync::Mutex;

/// The latest `keep` figures (older ones fall out), and their median.
pub struct LatestMedian {
    kept: Mutex<VecDeque<u64>>,
    keep: usize,
}

impl LatestMedian {
    pub fn new(keep: usize) -> LatestMedian {
        assert!(keep > 0, "a median of nothing");
        LatestMedian { kept: Mutex::new(VecDeque::with_capacity(keep)), keep }
    }

    /// Keeps `figure`; the median of those kept (the upper one of an even
    /// count) once at least `min` are, else None.
    pub fn record(&self, figure: u64, min: usize) -> Option<u64> {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        if kept.len() == self.keep {
            kept.pop_front();
        }
        kept.push_back(figure);
        debug_assert!(kept.len() <= self.keep);
        let mut sorted: Vec<u64> = kept.iter().copied().collect();
        sorted.sort_unstable();
        (sorted.len() >= min).then(|| sorted[sorted.len() / 2])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_of_the_latest_once_there_are_enough() {
        let m = LatestMedian::new(3);
        assert_eq!(m.record(300_000, 2), None);
        assert_eq!(m.record(150, 2), Some(300_000), "the upper of two");
        assert_eq!(m.record(140, 2), Some(150), "one stall among three");
        assert_eq!(m.record(160, 2), Some(150), "the oldest fell out: 150, 140, 160");
    }
}
