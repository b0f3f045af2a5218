//! Noticing other writers: the signals SQLite's own pager follows, applied to
//! Waffle's caches (L1, push queue, grid) before a read transaction reads a page.
//!
//! Other writers are everything that changes the database file without going
//! through this process's `waffle` cache: another process (through waffle or
//! not), a connection of this process opened without `vfs=waffle`, a
//! checkpoint run by either.
//!
//! Rollback-journal mode: a writer needs an EXCLUSIVE lock on the database
//! file, so while any waffle connection of this process holds SHARED or more,
//! nobody else writes the file. The cache records the file's signature (the
//! 16 header bytes at offset 24, which every rollback commit changes through
//! the change counter, plus size, mtime, ctime, inode) when the last of this
//! process's connections lets go of its lock, and compares it when the first
//! takes SHARED again: any difference is a new epoch ([`Forget::forget_all`]).
//!
//! WAL mode: connections hold SHARED for as long as they are in WAL mode, and
//! the file changes only by checkpoints, which copy WAL frames back. When a
//! waffle connection takes a read mark (the start of every read transaction),
//! the wal-index says how far the WAL has been copied back (nBackfill) in
//! which generation (salts); the frames between the last nBackfill accounted
//! for and now name exactly the pages another checkpointer wrote, and those
//! pages alone are forgotten. Our own checkpoints (a waffle connection of this
//! process holds the checkpoint lock) write through the cache and are not
//! foreign. A generation change that was not ours (a restart of the WAL after
//! a complete checkpoint elsewhere) leaves frames that can no longer be read:
//! a new epoch. So does anything that cannot be read whole.
//!
//! A look at the wal-index with nothing accounted for yet (the first read mark
//! of a warm start, the first after a rebuilt wal-index) cannot name what
//! was copied back before it: the cache then holds on only if the file and
//! the WAL show that nothing was copied back since the cache was last shown
//! in step with the file ([`Anchor`]). That look, not the first SHARED lock,
//! is where the snapshot is fixed: a SHARED lock does not stop a checkpoint,
//! and a reader may wait in its busy handler between the two while another
//! process copies a whole generation back and restarts the WAL.
//!
//! The rule, and the interleavings it was checked against, are in
//! docs/design.md ("Other writers").

use crate::wal_index::{WalHeader, WalView};

/// `WAFFLE_TRACE=coherence` (or `WAFFLE_LOG=debug`) logs every coherence step
/// at the debug level (debugging a sharing problem in the field, as vfstrace
/// does for a VFS).
fn tracing() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("WAFFLE_TRACE").is_ok_and(|v| v.split(',').any(|w| w == "coherence")))
}

macro_rules! trace {
    ($($arg:tt)*) => {
        if tracing() || waffle_core::log::enabled(waffle_core::log::Level::Debug) {
            waffle_core::log::write(waffle_core::log::Level::Debug, &format!("coherence: {}", format!($($arg)*)));
        }
    };
}

/// The cache as the coherence rules see it (a trait so the rules can be tested alone).
pub trait Forget {
    /// These pages (0-based) changed in the file.
    fn forget_pages(&self, pages: &[u64]);
    /// The file changed in ways that cannot be named: nothing cached may be served.
    fn forget_all(&self);
    /// The file is now `len` bytes: pages from there on are gone.
    fn forget_from(&self, len: u64);
    /// The page size the cache uses (0 before the first page).
    fn page_bytes(&self) -> usize;
}

/// What identifies the database file's contents as far as a cheap check can tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileSig {
    /// Bytes 24..40: change counter, size in pages, freelist trunk and count.
    pub header: [u8; 16],
    pub size: u64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    pub ino: u64,
    pub dev: u64,
}

impl FileSig {
    pub const BYTES: usize = 16 + 8 * 5;

    /// For the sidecar: a warm start is checked against it under the first lock.
    pub fn to_bytes(self) -> Vec<u8> {
        let mut b = Vec::with_capacity(Self::BYTES);
        b.extend_from_slice(&self.header);
        for v in [self.size, self.mtime_ns as u64, self.ctime_ns as u64, self.ino, self.dev] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b
    }

    pub fn from_bytes(b: &[u8]) -> Option<FileSig> {
        if b.len() != Self::BYTES {
            return None;
        }
        let at = |i: usize| u64::from_le_bytes(b[16 + i * 8..24 + i * 8].try_into().expect("8 bytes"));
        Some(FileSig {
            header: b[..16].try_into().ok()?,
            size: at(0),
            mtime_ns: at(1) as i64,
            ctime_ns: at(2) as i64,
            ino: at(3),
            dev: at(4),
        })
    }
}

/// How far the cache has accounted for the WAL's checkpoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct WalMark {
    salt: [u8; 8],
    backfilled: u32,
}

/// Where the cache was last shown in step with the file while it did not
/// know which WAL frames the file holds: the clean close of a warm start, or
/// a rebuilt wal-index. The next look at the wal-index decides against it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Anchor {
    /// None: the file could not be read then; such an anchor never holds.
    sig: Option<FileSig>,
    /// The generation the `-wal` file's header named then (None: no WAL; a
    /// clean close that vouches leaves none).
    salt: Option<[u8; 8]>,
}

impl Anchor {
    /// Whether the cache may keep what it holds for the wal-index `v`: the
    /// file is as it was then, and the WAL shows nothing copied back since
    /// that the frames of `v` cannot name.
    fn holds(self, v: WalView, frames: &dyn Frames) -> bool {
        // Times included: content cannot show a generation that was copied
        // back and then lost (a TRUNCATE checkpoint, then a wal-index rebuilt
        // from the empty WAL, or a writer that draws fresh salts).
        if self.sig.is_none() || frames.file_sig() != self.sig {
            return false;
        }
        match self.salt {
            // The same generation: what it copied back is named from frame 1.
            Some(salt) => v.salt == salt,
            // No WAL then. Content that shows a copy since, whatever the times say:
            // frames copied back; new salts without a frame (a restart); a header whose
            // checkpoint sequence moved (the restarting connection's count) or that is
            // not this generation's.
            None => {
                let header = match frames.wal_header() {
                    None => v.mx_frame == 0,
                    Some(h) => h.ckpt_seq == 0 && (v.mx_frame == 0 || h.salt == v.salt),
                };
                v.backfilled == 0 && (v.mx_frame > 0 || v.salt == [0; 8]) && header
            }
        }
    }
}

/// Where the pages of a WAL frame range can be read (the `-wal` file), and
/// the files as they are now.
pub trait Frames {
    /// 1-based page numbers written by frames `first..=last` of generation
    /// `salt`; None if they cannot all be read.
    fn pages(&self, salt: [u8; 8], page_bytes: u32, first: u32, last: u32) -> Option<Vec<u32>>;
    /// The database file's length now.
    fn db_len(&self) -> Option<u64>;
    /// The database file's signature now (None: it cannot be read).
    fn file_sig(&self) -> Option<FileSig>;
    /// The `-wal` file's header now (None: no whole header).
    fn wal_header(&self) -> Option<WalHeader>;
}

/// One database's coherence state, shared by this process's connections (behind a mutex).
#[derive(Debug, Default)]
pub struct Coherence {
    /// The file as the cache last knew it to be in step (None: it could not be read).
    sig: Option<FileSig>,
    /// The cache holds nothing yet (a cold start): the first check has nothing to compare.
    cold: bool,
    /// Waffle connections of this process holding SHARED or more on the file.
    holders: u32,
    wal: Option<WalMark>,
    /// Waffle connections of this process inside a checkpoint (holding the checkpoint lock).
    own_checkpoints: u32,
    /// The wal-index as an own WAL restart found it (all frames copied back).
    restart_from: Option<WalView>,
    /// The wal-index as an own write transaction found it, and the WAL writes counted then.
    write_from: Option<(WalView, u64)>,
    /// A connection of ours holds the write lock to rebuild the wal-index.
    recovering: bool,
    /// The recorded signature may be saved for a warm start: the last unlock
    /// left the cache equal to the file (see [`Coherence::on_unlock`]).
    vouched: bool,
    /// WAL mode: a connection of ours took EXCLUSIVE on the database file and
    /// caught up with the wal-index then (nobody else has the database open).
    exclusive_caught_up: bool,
    /// What the first look at the wal-index with nothing accounted for (`wal`
    /// None) must find for the cache to keep what it holds.
    anchor: Option<Anchor>,
    /// This span of held locks began with the file as recorded, and no connection
    /// of ours has gone past SHARED or mapped the wal-index since
    /// ([`Coherence::on_unlock_unchanged`]).
    span_unchanged: bool,
}

impl Coherence {
    /// A cache that starts from a clean close: it was in step with a file
    /// whose signature was `sig` (None: a cold cache).
    pub fn new(sig: Option<FileSig>) -> Coherence {
        let anchor = sig.map(|sig| Anchor { sig: Some(sig), salt: None });
        Coherence { sig, cold: sig.is_none(), vouched: sig.is_some(), anchor, ..Coherence::default() }
    }

    /// The signature a clean close may save for a warm start: recorded by an
    /// unlock that could vouch for the cache (None: the next open starts cold).
    pub fn sig(&self) -> Option<FileSig> {
        if self.cold || !self.vouched {
            None
        } else {
            self.sig
        }
    }

    /// Whether a WAL-mode EXCLUSIVE lock of ours caught up with the wal-index.
    pub fn exclusive_caught_up(&self) -> bool {
        self.exclusive_caught_up
    }

    /// A connection of ours took EXCLUSIVE on a WAL-mode database (SQLite does
    /// it to close the database as its last user, and for exclusive locking
    /// mode): nobody else has it open, so nobody else checkpoints from here on.
    /// What others copied back before is caught up now; what follows goes
    /// through the cache. Without a whole wal-index view nothing is learnt.
    pub fn on_exclusive(&mut self, cache: &dyn Forget, view: Option<WalView>, frames: &dyn Frames) {
        if view.is_some() {
            self.catch_up(cache, view, frames);
            self.exclusive_caught_up = true;
        }
    }

    /// A waffle connection got SHARED (from no lock). `now` reads the file's
    /// signature; it is only called when no other connection of ours held a lock.
    pub fn on_shared(&mut self, cache: &dyn Forget, now: impl FnOnce() -> Option<FileSig>) {
        self.holders += 1;
        if self.holders > 1 {
            return; // another connection of ours held a lock all along: nobody wrote in between
        }
        let now = now();
        trace!("shared: file {:?}, recorded {:?}, cold {}", now, self.sig, self.cold);
        self.span_unchanged = !self.cold && now.is_some() && now == self.sig;
        if !self.cold && (now.is_none() || now != self.sig) {
            cache.forget_all();
            self.anchor = None; // nothing from before is held
        }
        self.cold = false;
        self.sig = now;
    }

    /// Right after [`Coherence::on_shared`]: when this was the first lock of
    /// ours and nothing of the WAL is accounted for (a cold cache, one just
    /// forgotten, one that was in rollback mode) and no older anchor is held,
    /// the cache is in step with the file as that lock found it: the anchor is
    /// taken there, before SQLite reads a page, with the `-wal` file's
    /// generation then (`wal_salt`, None without a whole header). SQLite reads
    /// page 1 under SHARED before it opens a WAL it did not see, and may then
    /// wait before its first read mark while another process copies a whole
    /// generation back (issue 31, the cold variant).
    pub fn on_first_lock_anchor(&mut self, wal_salt: impl FnOnce() -> Option<[u8; 8]>) {
        if self.holders == 1 && self.wal.is_none() && self.anchor.is_none() {
            self.anchor = Some(Anchor { sig: self.sig, salt: wal_salt() });
            trace!("anchored at the first lock: {:?}", self.anchor);
        }
    }

    /// A waffle connection is about to let go of its last lock. Called before
    /// the real unlock. `vouch`: the adapter can show the cache equal to the
    /// file as this unlock leaves it (docs/design.md, "Warm starts"): in
    /// rollback mode any unlock (SHARED kept every writer out since the last
    /// check), in WAL mode only one from EXCLUSIVE after [`Coherence::on_exclusive`]
    /// with the WAL gone (a SHARED lock does not stop another process's checkpoint).
    pub fn on_unlock(&mut self, now: impl FnOnce() -> Option<FileSig>, vouch: bool) {
        self.on_unlock_in_step(now, vouch, vouch);
    }

    /// [`Coherence::on_unlock`], with `in_step`: the cache is equal to the file
    /// as this unlock leaves it, though that may not be saved for a warm start
    /// (a vouch implies it; so does a span in rollback mode, where SHARED kept
    /// every other writer out, even one whose own commit switched the file
    /// to WAL mode). The next first look is then checked from here.
    pub fn on_unlock_in_step(&mut self, now: impl FnOnce() -> Option<FileSig>, vouch: bool, in_step: bool) {
        debug_assert!(self.holders > 0, "unlock without a lock");
        self.holders = self.holders.saturating_sub(1);
        self.exclusive_caught_up = false;
        if self.holders == 0 {
            self.span_unchanged = false;
            self.sig = now();
            self.vouched = vouch;
            if in_step {
                // In step with the file as this unlock leaves it, and no WAL then (a vouch
                // needs none; a rollback span has no -wal file): the next first look is
                // checked from here, as a warm start's. With the WAL followed, nothing is.
                self.anchor = self.wal.is_none().then_some(Anchor { sig: self.sig, salt: None });
            }
            trace!("unlock: recorded {:?}, vouched {vouch}", self.sig);
        }
    }

    /// A connection of ours asked for more than SHARED (it may write the file)
    /// or mapped the wal-index (it is in WAL mode, where others checkpoint
    /// under our SHARED lock): this span's end must look at the file again.
    pub fn on_beyond_shared(&mut self) {
        self.span_unchanged = false;
    }

    /// The last connection of ours is about to let go of its lock, and the
    /// span was a rollback-mode read: the first SHARED found the file as
    /// recorded, SHARED kept every other writer out, nothing of ours went past
    /// SHARED or into WAL mode. The file is as recorded, so is the vouch made
    /// for it: both are kept, and the adapter reads nothing (issue 33). So
    /// does an unlock that is not the last (another connection of ours still
    /// holds a lock: nothing is recorded, the vouch is not asked). False
    /// (nothing done): call [`Coherence::on_unlock`].
    pub fn on_unlock_unchanged(&mut self) -> bool {
        if self.holders > 1 {
            self.on_unlock(|| None, false); // not the last: neither is read
            return true;
        }
        if self.holders != 1 || !self.span_unchanged {
            return false;
        }
        let (sig, vouched) = (self.sig, self.vouched);
        self.on_unlock(|| sig, vouched);
        true
    }

    /// A waffle connection took a read mark (a WAL read transaction starts):
    /// forget what other checkpointers wrote since the last look.
    pub fn on_wal_read(&mut self, cache: &dyn Forget, view: Option<WalView>, frames: &dyn Frames) {
        self.catch_up(cache, view, frames);
    }

    /// A waffle connection took the checkpoint lock: what others copied back
    /// before is foreign, what this checkpoint copies is ours.
    pub fn on_checkpoint_begin(&mut self, cache: &dyn Forget, view: Option<WalView>, frames: &dyn Frames) {
        self.catch_up(cache, view, frames);
        self.own_checkpoints += 1;
    }

    /// The checkpoint lock is about to be released: our own backfill is
    /// accounted for, and the file is as the cache knows it (everything copied
    /// back before was caught up at the start, the rest went through the cache).
    pub fn on_checkpoint_end(
        &mut self,
        cache: &dyn Forget,
        view: Option<WalView>,
        file: impl FnOnce() -> Option<FileSig>,
    ) {
        self.own_checkpoints = self.own_checkpoints.saturating_sub(1);
        if !self.cold {
            self.sig = file();
        }
        match (view, self.wal) {
            (Some(v), Some(m)) if v.salt == m.salt && v.backfilled >= m.backfilled => {
                self.wal = Some(WalMark { salt: v.salt, backfilled: v.backfilled });
            }
            (Some(v), Some(m)) if v.salt == m.salt => {
                cache.forget_all(); // nBackfill went back within one generation: not a state SQLite makes
                self.wal = Some(WalMark { salt: v.salt, backfilled: v.backfilled });
            }
            // A restart inside the checkpoint (TRUNCATE) was seen by on_restart_end.
            _ => {}
        }
    }

    /// A waffle connection took the WAL's write lock (it begins a write
    /// transaction): catch up, and remember the WAL as it was.
    pub fn on_write_begin(&mut self, cache: &dyn Forget, view: Option<WalView>, frames: &dyn Frames, wal_writes: u64) {
        self.write_from = view.map(|v| (v, wal_writes));
        match view {
            Some(_) => self.catch_up(cache, view, frames),
            // No whole header: SQLite takes the write lock to rebuild the
            // wal-index from the WAL file (recovery). Its own pager then drops
            // its cache; ours checks the database file at the end of it.
            None => self.recovering = true,
        }
    }

    /// The write lock is about to be released. Nobody else appends to the WAL
    /// or restarts it meanwhile (nobody who follows SQLite's locks), so a new
    /// generation that appeared during the span, in a WAL that was empty, is
    /// ours if we wrote to the WAL: the first frame written into an empty WAL
    /// draws new salts (a restart is seen by the restart hooks). Holding the
    /// lock without writing (a superlock, a file swapped under it) proves nothing.
    pub fn on_write_end(&mut self, cache: &dyn Forget, view: Option<WalView>, wal_writes: u64, files: &dyn Frames) {
        let from = self.write_from.take();
        trace!("write end: wal-index {:?}, from {:?}, writes now {}, accounted {:?}", view, from, wal_writes, self.wal);
        if std::mem::take(&mut self.recovering) {
            // A rebuilt wal-index says nothing of how the database file got
            // here (a crash, a file swapped underneath): the file must be as
            // the cache last knew it to be in step, or nothing is trusted.
            let now = files.file_sig();
            trace!("recovery: file {:?}, recorded {:?}", now, self.sig);
            if !self.cold && (now.is_none() || now != self.sig) {
                cache.forget_all();
                self.sig = now;
                self.anchor = None;
            } else if let (false, None, Some(sig)) = (self.cold, self.anchor, now) {
                // In step now; the next look (the read mark may come after a wait) checks
                // nothing was copied back in between. A warm start's older anchor stays.
                self.anchor = Some(Anchor { sig: Some(sig), salt: files.wal_header().map(|h| h.salt) });
            }
            self.wal = None; // the next look starts over from what the WAL says then
            return;
        }
        let (Some(now), Some(m)) = (view, self.wal) else { return };
        if now.salt == m.salt {
            return;
        }
        match from {
            Some((f, writes)) if f.salt == m.salt && f.mx_frame == 0 && wal_writes > writes => {
                self.wal = Some(WalMark { salt: now.salt, backfilled: now.backfilled });
            }
            _ => {} // the next read mark decides (a new epoch)
        }
    }

    /// A waffle connection is restarting the WAL (it holds every read mark
    /// exclusively; a restart happens only once every frame was copied back).
    pub fn on_restart_begin(&mut self, cache: &dyn Forget, view: Option<WalView>, frames: &dyn Frames) {
        self.catch_up(cache, view, frames);
        self.restart_from = view;
    }

    /// The restart is done (about to release the read marks): if the old
    /// generation was wholly copied back and accounted for, the new one
    /// starts in step; otherwise nothing is trusted.
    pub fn on_restart_end(&mut self, cache: &dyn Forget, view: Option<WalView>) {
        let from = self.restart_from.take();
        let Some(now) = view else {
            cache.forget_all();
            self.wal = None;
            return;
        };
        match (from, self.wal) {
            (Some(f), Some(m)) if f.salt == m.salt && m.backfilled == f.mx_frame && f.backfilled == f.mx_frame => {
                self.wal = Some(WalMark { salt: now.salt, backfilled: now.backfilled });
            }
            (Some(f), _) if f.salt == now.salt => {} // no restart happened after all
            _ => {
                cache.forget_all();
                self.wal = Some(WalMark { salt: now.salt, backfilled: now.backfilled });
            }
        }
    }

    fn catch_up(&mut self, cache: &dyn Forget, view: Option<WalView>, frames: &dyn Frames) {
        trace!("catch up: wal-index {:?}, accounted {:?}, own checkpoints {}", view, self.wal, self.own_checkpoints);
        let Some(v) = view else {
            cache.forget_all();
            self.wal = None;
            self.anchor = None;
            return;
        };
        // Nothing accounted for yet: what was copied back before this look can be named only
        // from the anchor's generation (issue 31: a warm reader waited between its first
        // SHARED lock and this read mark while a whole generation was copied back).
        if self.wal.is_none() {
            if let Some(anchor) = self.anchor.take() {
                if !anchor.holds(v, frames) {
                    trace!("anchor {:?} does not hold for {:?}: a new epoch", anchor, v);
                    cache.forget_all();
                    self.wal = Some(WalMark { salt: v.salt, backfilled: v.backfilled });
                    return;
                }
            }
        }
        let page_bytes = cache.page_bytes();
        // An empty WAL has no page size yet (0).
        if page_bytes != 0 && v.page_bytes != 0 && page_bytes != v.page_bytes as usize {
            cache.forget_all(); // the cache's pages are not the WAL's pages
            self.wal = Some(WalMark { salt: v.salt, backfilled: v.backfilled });
            return;
        }
        let from = match self.wal {
            Some(m) if m.salt == v.salt && v.backfilled >= m.backfilled => m.backfilled,
            // Another generation, or nBackfill went back: frames we did not see are gone.
            Some(_) => {
                cache.forget_all();
                self.wal = Some(WalMark { salt: v.salt, backfilled: v.backfilled });
                return;
            }
            // First look: whatever this generation copied back may be news.
            None => 0,
        };
        if v.backfilled > from && self.own_checkpoints == 0 {
            match frames.pages(v.salt, v.page_bytes, from + 1, v.backfilled) {
                Some(pages) => {
                    let pages: Vec<u64> = pages.into_iter().map(|p| u64::from(p) - 1).collect();
                    cache.forget_pages(&pages);
                    // A checkpoint also cuts the file to the database's size.
                    if let Some(len) = frames.db_len() {
                        cache.forget_from(len);
                    }
                }
                None => cache.forget_all(),
            }
        }
        self.wal = Some(WalMark { salt: v.salt, backfilled: v.backfilled });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::{Cell, RefCell};
    use std::collections::HashMap;

    #[derive(Default)]
    struct Log {
        events: RefCell<Vec<String>>,
    }

    impl Forget for Log {
        fn forget_pages(&self, pages: &[u64]) {
            self.events.borrow_mut().push(format!("pages {pages:?}"));
        }
        fn forget_all(&self) {
            self.events.borrow_mut().push("all".into());
        }
        fn forget_from(&self, len: u64) {
            self.events.borrow_mut().push(format!("from {len}"));
        }
        fn page_bytes(&self) -> usize {
            4096
        }
    }

    impl Log {
        fn take(&self) -> Vec<String> {
            std::mem::take(&mut *self.events.borrow_mut())
        }
    }

    /// A WAL: frame number -> (salt, pgno); the `-wal` header and the database file as they are now.
    #[derive(Default)]
    struct Wal {
        frames: HashMap<u32, ([u8; 8], u32)>,
        header: Cell<Option<WalHeader>>,
        file: Cell<Option<FileSig>>,
    }

    impl Frames for Wal {
        fn pages(&self, salt: [u8; 8], _page_bytes: u32, first: u32, last: u32) -> Option<Vec<u32>> {
            let mut v: Vec<u32> = (first..=last)
                .map(|f| self.frames.get(&f).filter(|(s, _)| *s == salt).map(|(_, p)| *p))
                .collect::<Option<_>>()?;
            v.sort_unstable();
            v.dedup();
            Some(v)
        }
        fn db_len(&self) -> Option<u64> {
            Some(1 << 20)
        }
        fn file_sig(&self) -> Option<FileSig> {
            self.file.get()
        }
        fn wal_header(&self) -> Option<WalHeader> {
            self.header.get()
        }
    }

    fn sig(counter: u8) -> FileSig {
        let mut header = [0u8; 16];
        header[3] = counter;
        FileSig { header, size: 8192, mtime_ns: 1, ctime_ns: 1, ino: 7, dev: 1 }
    }

    fn view(salt: u8, mx_frame: u32, backfilled: u32) -> Option<WalView> {
        Some(WalView { salt: [salt; 8], mx_frame, backfilled, page_bytes: 4096 })
    }

    #[test]
    fn rollback_mode_a_foreign_commit_between_transactions_is_a_new_epoch() {
        let cache = Log::default();
        let mut c = Coherence::new(None);
        c.on_shared(&cache, || Some(sig(1)));
        assert!(cache.take().is_empty(), "a cold cache has nothing to forget");
        c.on_unlock(|| Some(sig(2)), true); // our own commit moved the counter: recorded, not foreign
        c.on_shared(&cache, || Some(sig(2)));
        assert!(cache.take().is_empty(), "our own commit does not look foreign");
        c.on_unlock(|| Some(sig(2)), true);
        c.on_shared(&cache, || Some(sig(3))); // someone else committed while we held nothing
        assert_eq!(cache.take(), vec!["all"]);
    }

    /// Issue 33: a rollback-mode read span that found the file as recorded
    /// ends without reading the file; any span that may have changed it does not.
    #[test]
    fn an_unchanged_span_keeps_its_signature_and_vouch() {
        let cache = Log::default();
        let mut c = Coherence::new(None);
        c.on_shared(&cache, || Some(sig(1)));
        assert!(!c.on_unlock_unchanged(), "a cold start has recorded nothing to keep");
        c.on_unlock(|| Some(sig(1)), true);
        c.on_shared(&cache, || Some(sig(1)));
        assert!(c.on_unlock_unchanged());
        assert_eq!(c.sig(), Some(sig(1)));
        // Two holders: only the last unlock ends the span; the other reads nothing, whatever the span.
        c.on_shared(&cache, || Some(sig(1)));
        c.on_shared(&cache, || panic!("a second holder reads nothing"));
        assert!(c.on_unlock_unchanged());
        assert!(c.on_unlock_unchanged());
        assert_eq!(c.sig(), Some(sig(1)));
        c.on_shared(&cache, || Some(sig(1)));
        c.on_shared(&cache, || panic!("a second holder reads nothing"));
        c.on_beyond_shared();
        assert!(c.on_unlock_unchanged(), "not the last: nothing to record");
        assert!(!c.on_unlock_unchanged(), "the last of a span that may have written records afresh");
        c.on_unlock(|| Some(sig(1)), true);
        // Past SHARED (a write may follow), or into WAL mode: the unlock reads the file.
        c.on_shared(&cache, || Some(sig(1)));
        c.on_beyond_shared();
        assert!(!c.on_unlock_unchanged());
        c.on_unlock(|| Some(sig(2)), true);
        // A foreign change found at the first lock: recorded afresh at the unlock.
        c.on_shared(&cache, || Some(sig(3)));
        assert_eq!(cache.take(), vec!["all"]);
        assert!(!c.on_unlock_unchanged());
        c.on_unlock(|| Some(sig(3)), false);
        // An unvouched signature stays unvouched.
        c.on_shared(&cache, || Some(sig(3)));
        assert!(c.on_unlock_unchanged());
        assert_eq!(c.sig(), None);
        assert!(cache.take().is_empty());
    }

    #[test]
    fn rollback_mode_a_second_holder_does_not_check_again() {
        let cache = Log::default();
        let mut c = Coherence::new(Some(sig(1)));
        c.on_shared(&cache, || Some(sig(1)));
        c.on_shared(&cache, || panic!("not read while another connection of ours holds a lock"));
        c.on_unlock(|| panic!("not recorded while another connection holds a lock"), true);
        c.on_unlock(|| Some(sig(1)), true);
        assert!(cache.take().is_empty());
    }

    #[test]
    fn an_unreadable_signature_is_never_in_step() {
        let cache = Log::default();
        let mut c = Coherence::new(Some(sig(1)));
        c.on_shared(&cache, || Some(sig(1)));
        c.on_unlock(|| None, true);
        c.on_shared(&cache, || None);
        assert_eq!(cache.take(), vec!["all"]);
        c.on_unlock(|| None, true);
        c.on_shared(&cache, || Some(sig(1)));
        assert_eq!(cache.take(), vec!["all"]);
    }

    #[test]
    fn a_warm_start_checks_the_saved_signature_under_the_first_lock() {
        let cache = Log::default();
        let mut c = Coherence::new(Some(sig(5)));
        c.on_shared(&cache, || Some(sig(6)));
        assert_eq!(cache.take(), vec!["all"]);
    }

    #[test]
    fn wal_foreign_backfill_names_its_pages() {
        let cache = Log::default();
        let mut wal = Wal::default();
        for (f, p) in [(1, 2), (2, 5), (3, 2), (4, 9)] {
            wal.frames.insert(f, ([1; 8], p));
        }
        let mut c = Coherence::new(None);
        c.on_wal_read(&cache, view(1, 4, 0), &wal);
        assert!(cache.take().is_empty());
        c.on_wal_read(&cache, view(1, 4, 3), &wal); // someone checkpointed frames 1..=3
        assert_eq!(cache.take(), vec!["pages [1, 4]", "from 1048576"]);
        c.on_wal_read(&cache, view(1, 4, 3), &wal);
        assert!(cache.take().is_empty(), "nothing new");
        c.on_wal_read(&cache, view(1, 4, 4), &wal);
        assert_eq!(cache.take(), vec!["pages [8]", "from 1048576"]);
    }

    #[test]
    fn wal_own_checkpoint_is_not_foreign_but_what_came_before_it_is() {
        let cache = Log::default();
        let mut wal = Wal::default();
        for f in 1..=6 {
            wal.frames.insert(f, ([1; 8], f + 10));
        }
        let mut c = Coherence::new(None);
        c.on_wal_read(&cache, view(1, 6, 0), &wal);
        c.on_checkpoint_begin(&cache, view(1, 6, 2), &wal); // frames 1..=2 by someone else
        assert_eq!(cache.take(), vec!["pages [10, 11]", "from 1048576"]);
        c.on_wal_read(&cache, view(1, 6, 4), &wal); // a reader of ours while our checkpoint runs
        assert!(cache.take().is_empty());
        c.on_checkpoint_end(&cache, view(1, 6, 6), || None);
        c.on_wal_read(&cache, view(1, 6, 6), &wal);
        assert!(cache.take().is_empty(), "our own backfill is accounted for");
    }

    #[test]
    fn wal_foreign_restart_is_a_new_epoch_and_our_own_is_not() {
        let cache = Log::default();
        let wal = Wal::default();
        let mut c = Coherence::new(None);
        c.on_wal_read(&cache, view(1, 0, 0), &wal);
        c.on_wal_read(&cache, view(2, 3, 0), &wal); // restarted elsewhere
        assert_eq!(cache.take(), vec!["all"]);
        // Our own restart after everything was copied back and accounted for.
        let mut c = Coherence::new(None);
        c.on_wal_read(&cache, view(1, 5, 0), &wal);
        c.on_checkpoint_begin(&cache, view(1, 5, 0), &wal);
        c.on_checkpoint_end(&cache, view(1, 5, 5), || None);
        c.on_restart_begin(&cache, view(1, 5, 5), &wal);
        c.on_restart_end(&cache, view(2, 0, 0));
        c.on_wal_read(&cache, view(2, 1, 0), &wal);
        assert!(cache.take().is_empty(), "our own restart keeps the cache");
    }

    #[test]
    fn wal_our_first_frame_in_an_empty_wal_is_not_a_foreign_generation() {
        let cache = Log::default();
        let wal = Wal::default();
        let mut c = Coherence::new(None);
        let empty = Some(WalView { salt: [0; 8], mx_frame: 0, backfilled: 0, page_bytes: 0 });
        c.on_wal_read(&cache, empty, &wal);
        c.on_write_begin(&cache, empty, &wal, 10);
        c.on_write_end(&cache, view(7, 2, 0), 12, &wal);
        c.on_wal_read(&cache, view(7, 2, 0), &wal);
        assert!(cache.take().is_empty(), "{:?}", c);
        // The same change while we held the write lock but wrote nothing (a
        // superlock while the files were swapped underneath): not ours.
        let mut c = Coherence::new(None);
        c.on_wal_read(&cache, empty, &wal);
        c.on_write_begin(&cache, empty, &wal, 10);
        c.on_write_end(&cache, view(7, 2, 0), 10, &wal);
        c.on_wal_read(&cache, view(7, 2, 0), &wal);
        assert_eq!(cache.take(), vec!["all"]);
        // The same salt change seen without our write lock is someone else's.
        let mut c = Coherence::new(None);
        c.on_wal_read(&cache, empty, &wal);
        c.on_wal_read(&cache, view(7, 2, 0), &wal);
        assert_eq!(cache.take(), vec!["all"]);
        // A write span that began on a non-empty WAL cannot explain a new generation.
        let mut c = Coherence::new(None);
        c.on_wal_read(&cache, view(3, 5, 0), &wal);
        c.on_write_begin(&cache, view(3, 5, 0), &wal, 0);
        c.on_write_end(&cache, view(4, 1, 0), 5, &wal);
        c.on_wal_read(&cache, view(4, 1, 0), &wal);
        assert_eq!(cache.take(), vec!["all"]);
    }

    /// SQLite rebuilds the wal-index (recovery) after a crash, or when a file
    /// was swapped under a held lock (superlock.test): the database file is
    /// checked against what the cache last knew.
    #[test]
    fn a_recovery_checks_the_database_file() {
        let cache = Log::default();
        let wal = Wal::default();
        let empty = Some(WalView { salt: [0; 8], mx_frame: 0, backfilled: 0, page_bytes: 0 });
        let mut c = Coherence::new(Some(sig(1)));
        wal.file.set(Some(sig(1)));
        c.on_shared(&cache, || Some(sig(1)));
        c.on_wal_read(&cache, empty, &wal);
        c.on_write_begin(&cache, None, &wal, 0);
        c.on_write_end(&cache, empty, 0, &wal);
        c.on_wal_read(&cache, empty, &wal);
        assert!(cache.take().is_empty(), "the file is as recorded: a warm cache stays");
        c.on_write_begin(&cache, None, &wal, 0);
        wal.file.set(Some(sig(2)));
        c.on_write_end(&cache, empty, 0, &wal);
        assert_eq!(cache.take(), vec!["all"], "the file changed under the rebuilt index");
    }

    /// Issue 31: the warm check at the first SHARED lock passes; the reader
    /// then waits (busy handler, another process's recovery) while a whole
    /// generation is copied back and the WAL restarted. The read mark finds a
    /// generation whose frames name none of it: the warm cache is forgotten,
    /// with the file's times equal throughout (content decides).
    #[test]
    fn a_warm_start_is_decided_at_the_first_read_mark_not_the_first_lock() {
        let empty = Some(WalView { salt: [0; 8], mx_frame: 0, backfilled: 0, page_bytes: 0 });
        let hdr = |ckpt_seq, salt| Some(WalHeader { ckpt_seq, salt: [salt; 8] });
        // (the wal-index at the read mark, the -wal header then, whether the warm cache stays)
        let cases = [
            (empty, None, true),               // a WAL nobody wrote: the file is as the close left it
            (view(7, 3, 0), hdr(0, 7), true),  // frames not copied back yet: the file is untouched
            (view(7, 3, 2), hdr(0, 7), false), // frames copied back since the close
            (view(8, 0, 0), None, false),      // TRUNCATE: new salts, no frame, an empty file
            (view(8, 0, 0), hdr(0, 7), false), // RESTART: new salts, no frame yet
            (view(8, 2, 0), hdr(1, 8), false), // restarted, then written: the sequence moved
            (view(8, 2, 0), hdr(0, 9), false), // a header of another generation
            (view(8, 2, 0), None, false),      // frames the file does not hold
        ];
        for (at_mark, header, stays) in cases {
            let cache = Log::default();
            let mut wal = Wal::default();
            wal.file.set(Some(sig(1)));
            for f in 1..=3 {
                wal.frames.insert(f, ([7; 8], f + 1));
            }
            let mut c = Coherence::new(Some(sig(1)));
            c.on_shared(&cache, || Some(sig(1)));
            assert!(cache.take().is_empty(), "the first lock finds the file as the close left it");
            // Our recovery attempt, busy on the other process's recovery lock: the file still matches.
            c.on_write_begin(&cache, None, &wal, 0);
            c.on_write_end(&cache, None, 0, &wal);
            assert!(cache.take().is_empty());
            wal.header.set(header);
            c.on_wal_read(&cache, at_mark, &wal);
            let want: Vec<String> = if stays { vec![] } else { vec!["all".into()] };
            assert_eq!(cache.take(), want, "{at_mark:?} {header:?}");
            // Accounted from here: the next read mark names what follows.
            c.on_wal_read(&cache, at_mark, &wal);
            assert!(cache.take().is_empty(), "{at_mark:?}");
        }
        // The file changed since the close (its times, or its header): never trusted.
        let (cache, wal) = (Log::default(), Wal::default());
        wal.file.set(Some(sig(2)));
        let mut c = Coherence::new(Some(sig(1)));
        c.on_shared(&cache, || Some(sig(1)));
        c.on_wal_read(&cache, empty, &wal);
        assert_eq!(cache.take(), vec!["all"]);
    }

    /// A rollback-mode warm start is decided at the first SHARED lock (it
    /// keeps writers out); its vouching unlock leaves nothing for a later
    /// switch to WAL mode to decide.
    #[test]
    fn a_vouched_unlock_settles_a_warm_start() {
        let (cache, wal) = (Log::default(), Wal::default());
        let mut c = Coherence::new(Some(sig(1)));
        c.on_shared(&cache, || Some(sig(1)));
        c.on_unlock(|| Some(sig(2)), true); // our own rollback-mode commits

        // Our own switch to WAL mode: a rollback-mode span (no -wal file, nothing mapped)
        // whose commit moved the file; the header says WAL, so it does not vouch.
        c.on_shared(&cache, || Some(sig(2)));
        c.on_unlock_in_step(|| Some(sig(3)), false, true);
        wal.file.set(Some(sig(3)));
        c.on_shared(&cache, || Some(sig(3)));
        c.on_first_lock_anchor(|| panic!("the unlock left an anchor"));
        // The first read mark finds the WAL our switch created, empty.
        let empty = Some(WalView { salt: [0; 8], mx_frame: 0, backfilled: 0, page_bytes: 0 });
        c.on_wal_read(&cache, empty, &wal);
        assert!(cache.take().is_empty(), "{c:?}");
        // An unlock from SHARED in WAL mode vouches for nothing: the warm decision waits.
        let (cache, wal) = (Log::default(), Wal::default());
        let mut c = Coherence::new(Some(sig(1)));
        c.on_shared(&cache, || Some(sig(1)));
        c.on_unlock(|| Some(sig(4)), false); // a checkpoint elsewhere moved the file
        c.on_shared(&cache, || Some(sig(4)));
        wal.file.set(Some(sig(4)));
        c.on_wal_read(&cache, view(5, 1, 0), &wal);
        assert_eq!(cache.take(), vec!["all"]);
    }

    /// Issue 31, the cold variant: a cache with nothing accounted for (cold, or
    /// just forgotten) is anchored at its first lock, before SQLite reads page
    /// 1 and then waits before its first read mark; that look decides as a
    /// warm start's does.
    #[test]
    fn a_cold_start_is_anchored_at_its_first_lock() {
        let hdr = |ckpt_seq, salt| Some(WalHeader { ckpt_seq, salt: [salt; 8] });
        let empty = Some(WalView { salt: [0; 8], mx_frame: 0, backfilled: 0, page_bytes: 0 });
        // (the -wal salt at the first lock; the file, the wal-index and the -wal header at the
        // read mark; what is forgotten)
        type Case = (Option<[u8; 8]>, FileSig, Option<WalView>, Option<WalHeader>, &'static [&'static str]);
        let cases: [Case; 7] = [
            (None, sig(1), empty, None, &[]),                   // nobody wrote: page 1 stays
            (None, sig(2), empty, None, &["all"]),              // the file changed (a CREATE TABLE copied back)
            (None, sig(1), view(8, 0, 0), None, &["all"]),      // TRUNCATE: new salts, no frame
            (None, sig(1), view(8, 2, 0), hdr(1, 8), &["all"]), // RESTART, then a write
            (None, sig(1), view(8, 2, 0), hdr(0, 8), &[]),      // a WAL started since, nothing copied back
            (Some([7; 8]), sig(1), view(7, 3, 2), hdr(0, 7), &["pages [1, 2]", "from 1048576"]), // named
            (Some([7; 8]), sig(1), view(9, 1, 0), hdr(0, 9), &["all"]), // another generation
        ];
        for (salt_at_lock, file, at_mark, header, forgotten) in cases {
            let cache = Log::default();
            let mut wal = Wal::default();
            for f in 1..=3 {
                wal.frames.insert(f, ([7; 8], f + 1));
            }
            let mut c = Coherence::new(None);
            c.on_shared(&cache, || Some(sig(1)));
            c.on_first_lock_anchor(|| salt_at_lock);
            // A second lock of ours takes no anchor of its own.
            c.on_shared(&cache, || panic!("not read"));
            c.on_first_lock_anchor(|| panic!("a second holder anchors nothing"));
            assert!(cache.take().is_empty(), "a cold start forgets nothing at its first lock");
            wal.file.set(Some(file));
            wal.header.set(header);
            c.on_wal_read(&cache, at_mark, &wal);
            assert_eq!(cache.take(), forgotten, "{salt_at_lock:?} {file:?} {at_mark:?} {header:?}");
        }
        // A warm start keeps its older anchor; one whose signature failed at the first lock
        // forgot everything and is anchored there (the file as it is then).
        let (cache, wal) = (Log::default(), Wal::default());
        let mut c = Coherence::new(Some(sig(1)));
        c.on_shared(&cache, || Some(sig(2)));
        assert_eq!(cache.take(), vec!["all"]);
        c.on_first_lock_anchor(|| None);
        wal.file.set(Some(sig(3)));
        c.on_wal_read(&cache, empty, &wal);
        assert_eq!(cache.take(), vec!["all"], "changed after the first lock: {c:?}");
        // With the WAL followed, a first lock takes no anchor; an unreadable file never holds.
        c.on_unlock(|| None, false);
        c.on_shared(&cache, || None);
        c.on_first_lock_anchor(|| panic!("the WAL is followed"));
        let mut c = Coherence::new(None);
        c.on_shared(&cache, || None);
        c.on_first_lock_anchor(|| None);
        wal.file.set(None);
        c.on_wal_read(&cache, empty, &wal);
        assert_eq!(cache.take(), vec!["all", "all"]);
    }

    /// After a rebuilt wal-index the next look names what the same generation
    /// copied back; another generation in between is a new epoch.
    #[test]
    fn a_rebuilt_index_is_followed_by_its_generation_only() {
        for (at_mark, stays) in [(view(3, 4, 2), true), (view(4, 1, 0), false)] {
            let cache = Log::default();
            let mut wal = Wal::default();
            for f in 1..=4 {
                wal.frames.insert(f, ([3; 8], f + 20));
            }
            wal.file.set(Some(sig(1)));
            wal.header.set(Some(WalHeader { ckpt_seq: 2, salt: [3; 8] }));
            let mut c = Coherence::new(None);
            c.on_shared(&cache, || Some(sig(1)));
            c.on_wal_read(&cache, view(3, 4, 0), &wal);
            c.on_write_begin(&cache, None, &wal, 0);
            c.on_write_end(&cache, view(3, 4, 0), 0, &wal);
            c.on_wal_read(&cache, at_mark, &wal);
            let want: Vec<String> =
                if stays { vec!["pages [20, 21]".into(), "from 1048576".into()] } else { vec!["all".into()] };
            assert_eq!(cache.take(), want, "{at_mark:?}");
        }
    }

    /// A WAL-mode unlock vouches only when the adapter says so (an exclusive
    /// close that caught up); a SHARED one never does, and a warm start then
    /// saves nothing (issue 19, case 2: a checkpoint under our SHARED lock).
    #[test]
    fn only_a_vouched_unlock_is_saved_for_a_warm_start() {
        let cache = Log::default();
        let mut c = Coherence::new(Some(sig(1)));
        assert_eq!(c.sig(), Some(sig(1)), "a warm start never locked keeps what it was given");
        c.on_shared(&cache, || Some(sig(1)));
        c.on_unlock(|| Some(sig(1)), false);
        assert_eq!(c.sig(), None, "a WAL close from SHARED cannot vouch");
        c.on_shared(&cache, || Some(sig(1)));
        c.on_unlock(|| Some(sig(2)), true);
        assert_eq!(c.sig(), Some(sig(2)));
    }

    #[test]
    fn an_exclusive_lock_catches_up_with_what_others_copied_back() {
        let cache = Log::default();
        let mut wal = Wal::default();
        for (f, p) in [(1, 4), (2, 6)] {
            wal.frames.insert(f, ([1; 8], p));
        }
        let mut c = Coherence::new(None);
        c.on_wal_read(&cache, view(1, 2, 0), &wal);
        assert!(!c.exclusive_caught_up());
        c.on_exclusive(&cache, view(1, 2, 2), &wal); // another process backfilled both frames meanwhile
        assert_eq!(cache.take(), vec!["pages [3, 5]", "from 1048576"]);
        assert!(c.exclusive_caught_up());
        c.on_exclusive(&cache, None, &wal);
        assert!(cache.take().is_empty(), "no view: nothing learnt, nothing forgotten");
    }

    #[test]
    fn unreadable_state_trusts_nothing() {
        let cache = Log::default();
        let wal = Wal::default();
        let mut c = Coherence::new(None);
        c.on_wal_read(&cache, None, &wal);
        assert_eq!(cache.take(), vec!["all"]);
        c.on_wal_read(&cache, view(1, 4, 0), &wal);
        c.on_wal_read(&cache, view(1, 4, 2), &wal); // frames missing from the file
        assert_eq!(cache.take(), vec!["all"]);
        c.on_wal_read(&cache, view(1, 4, 1), &wal); // nBackfill went back in one generation
        assert_eq!(cache.take(), vec!["all"]);
    }
}
