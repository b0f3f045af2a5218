//! One sequential reader's read-ahead window: how many pages the next miss reads.

/// Most pages one read-ahead window asks for (one grid round trip, one disk read).
pub const READ_AHEAD_MAX_PAGES: u64 = 32;
/// The first window of a sequential run, in pages (the missed page included):
/// a range query of two or three leaves reads ahead at most three pages.
pub const READ_AHEAD_FIRST_PAGES: u64 = 4;
/// A miss at most this many pages past the last window continues its run
/// (a b-tree scan skips the interior pages between its leaves).
const READ_AHEAD_GAP_PAGES: u64 = 8;

/// One sequential reader's read-ahead: the adapter keeps one per handle it
/// reads through ([`PageCache::read_sequential`](super::PageCache::read_sequential)), as Linux keeps one per open
/// file. A window grows only while its pages are used (Linux's on-demand
/// read-ahead; InnoDB's linear read-ahead waits for most of an extent):
///
/// - a run starts with a window of [`READ_AHEAD_FIRST_PAGES`];
/// - at the next miss past it (within [`READ_AHEAD_GAP_PAGES`] of its end),
///   if the reader read at least half of the pages the window read ahead,
///   the next window doubles (up to [`READ_AHEAD_MAX_PAGES`] and 1/16 of
///   L1); if it read fewer, it halves (not below the first size); if it read
///   none, read-ahead stops: misses read their page alone until the reader
///   reads a page right after the last one it missed, which starts a first
///   window again;
/// - a miss elsewhere (behind the window, or further past it) starts a new run.
///
/// While read-ahead from the disk is off ([`DiskAhead`](super::DiskAhead)) the ramp runs on:
/// a window that left its disk pages unread (`skipped`) counts the reader's
/// misses inside it as used (read ahead, they would have been hits), so a
/// probe window, and the first window after it turns on again, has the size
/// the reader's run has earned.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadAhead {
    /// The last window: pages `start..end` (`start`: the miss that opened it).
    /// Stopped: `end` is the page after the last one the reader read.
    start: u64,
    end: u64,
    /// Pages of `start + 1..end` the reader has read since (found in L1).
    used: u64,
    /// The last window's size in pages: 0 none yet, 1 stopped.
    size: u64,
    /// The last window read nothing ahead from the disk (only the grid's pages).
    skipped: bool,
}

impl ReadAhead {
    pub const fn new() -> ReadAhead {
        ReadAhead { start: 0, end: 0, used: 0, size: 0, skipped: false }
    }

    /// The reader left its run: the next window starts small.
    pub fn reset(&mut self) {
        *self = ReadAhead::new();
    }

    /// The last window's size in pages (its missed page included); 1 when
    /// read-ahead stopped, 0 before the first window.
    pub fn last_window(&self) -> u64 {
        self.size
    }

    /// The reader found `page` in L1 (or the push queue).
    pub(super) fn read_hit(&mut self, page: u64) {
        if self.size == 1 {
            if page == self.end {
                self.end += 1;
            }
        } else if page > self.start && page < self.end {
            self.used += 1;
        }
    }

    /// The reader missed `page`: the size of the window to read now, in
    /// pages (`page` included), at most `max`; 1: `page` alone.
    pub(super) fn next_size(&self, page: u64, max: u64) -> u64 {
        let continues = self.size > 0 && page > self.start && page <= self.end + READ_AHEAD_GAP_PAGES;
        let size = if !continues {
            READ_AHEAD_FIRST_PAGES
        } else if self.size == 1 {
            if page == self.end {
                READ_AHEAD_FIRST_PAGES
            } else {
                1
            }
        } else {
            let ahead = self.end - self.start - 1;
            if ahead == 0 {
                READ_AHEAD_FIRST_PAGES
            } else if self.used == 0 {
                1
            } else if self.used * 2 >= ahead {
                self.size * 2
            } else {
                (self.size / 2).max(READ_AHEAD_FIRST_PAGES)
            }
        };
        size.min(max)
    }

    /// A window of `size` pages opened at `page`, reaching `end` (the end of
    /// its file may cut it short).
    pub(super) fn opened(&mut self, page: u64, end: u64, size: u64) {
        *self = ReadAhead { start: page, end, used: 0, size, skipped: false };
    }

    /// The reader missed `page` inside a window that skipped the disk: the
    /// page is read on demand, and counts as used (the window would have
    /// brought it).
    pub(super) fn inside_skipped(&mut self, page: u64) -> bool {
        let inside = self.skipped && self.size > 1 && page > self.start && page < self.end;
        if inside {
            self.used += 1;
        }
        inside
    }

    /// The window just opened leaves its disk pages to the reader (`skip`) or reads them.
    pub(super) fn set_skipped(&mut self, skip: bool) {
        self.skipped = skip;
    }

    /// Where the last window began.
    #[cfg(test)]
    pub(super) fn start(&self) -> u64 {
        self.start
    }
}
