//! The segment table: which cache segment each open tablespace file is.
//!
//! Each open tablespace file (by device and inode) gets a segment: its page
//! `i` is the cache's page `versions::join(segment, i)`. Every descriptor of
//! the file maps to the segment (see `fds`), reference counted; when the
//! last one closes, the segment's pages are dropped from every tier (their
//! versions bumped) and the segment number is free for another file. So a
//! file deleted and another created on the same inode never meet.
//!
//! A warm or the hot list's reload pins the files it reads ([`Pinned`]) and
//! reads through the server's own descriptors, lent one read at a time
//! ([`Loan`]): a close of a lent descriptor waits for the loan to end.
//!
//! Below the runtime: it knows the cache only to drop a closed file's pages.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use waffle_core::stats::Counter;
use waffle_core::versions::{join, MAX_SEGMENTS};
use waffle_core::PageCache;

use crate::filter::Filter;
use crate::off_switch::{OffSwitch, Pass};
use crate::{fds, state};

/// Distinct tablespace names with their own counters; later ones share "(other)".
const MAX_NAMES: usize = 10_000;
/// A segment's space id before a consistent page of it was seen.
pub const NO_SPACE: u64 = u64::MAX;

/// Counters of one tablespace name (kept across its files and segments).
#[derive(Default)]
pub struct NameStats {
    pub cached: AtomicBool,
    /// The segment its file had when last opened (its pages' high bits in the cache).
    pub segment: AtomicU64,
    pub opens: Counter,
    pub l1_hits: Counter,
    pub push_queue_hits: Counter,
    pub l2_hits: Counter,
    pub disk_reads: Counter,
    pub short_reads: Counter,
    pub page_writes: Counter,
    pub invalidations: Counter,
    pub innodb_rejects: Counter,
}

/// What the hot path needs about a segment; one per segment number, reused.
pub struct SegInfo {
    stats: AtomicPtr<NameStats>,
    /// The tablespace id its pages carry, once a consistent page was seen.
    pub space_id: AtomicU64,
}

impl SegInfo {
    pub fn stats(&self) -> &'static NameStats {
        // SAFETY: NameStats are leaked; set before the segment is used.
        unsafe { &*self.stats.load(Ordering::Acquire) }
    }
}

struct Slot {
    refs: u32,
    file: (u64, u64),
    cached: bool,
    /// The tablespace's name (as the stats file and the hot list name it).
    name: String,
    /// The server's readable descriptors of the file: a warm or the hot
    /// list's reload reads through one of them ([`Segments::lend`]).
    fds: Vec<i32>,
}

/// A cached tablespace file held for a warm or a reload (its segment cannot
/// be reused meanwhile); give it back with `Runtime::unpin`.
pub struct Pinned {
    pub segment: u32,
    pub name: String,
}

#[derive(Default)]
struct Table {
    by_file: HashMap<(u64, u64), u32>,
    slots: Vec<Option<Slot>>,
    free: Vec<u32>,
    /// Server descriptors lent for a read right now (once per loan): their close waits.
    lent: Vec<i32>,
}

/// A server descriptor of a tablespace file, lent for one read of a warm or
/// a reload: the server's close of it waits until the loan is dropped.
pub struct Loan<'a> {
    segs: &'a Segments,
    pub fd: i32,
    /// The file's size when lent.
    pub file_bytes: u64,
    /// A read through a loan fills the cache: not while the switch is off.
    _pass: Pass<'a>,
}

impl Drop for Loan<'_> {
    fn drop(&mut self) {
        let mut table = self.segs.lock();
        if let Some(i) = table.lent.iter().position(|&fd| fd == self.fd) {
            table.lent.swap_remove(i);
        }
        drop(table);
        self.segs.returned.notify_all();
    }
}

/// What [`Segments::open`] did with a new descriptor.
pub enum Opened {
    /// The descriptor is of `segment`'s file; `cached`: its pages go through the cache.
    Segment { segment: u32, cached: bool },
    /// Every segment number is taken.
    Full,
}

/// Every segment number's [`SegInfo`], read without a lock (the hot path
/// and the InnoDB check of grid copies share it).
pub struct SegInfos(Box<[AtomicPtr<SegInfo>]>);

impl Default for SegInfos {
    fn default() -> SegInfos {
        SegInfos((0..MAX_SEGMENTS).map(|_| AtomicPtr::new(std::ptr::null_mut())).collect())
    }
}

impl SegInfos {
    /// The segment's info; None if no file ever had the segment.
    pub fn get(&self, segment: usize) -> Option<&SegInfo> {
        let p = self.0.get(segment)?.load(Ordering::Acquire);
        // SAFETY: SegInfos are leaked, never freed.
        (!p.is_null()).then(|| unsafe { &*p })
    }

    /// The info of a segment a file has now.
    pub fn seg(&self, segment: u32) -> &SegInfo {
        let p = self.0[segment as usize].load(Ordering::Acquire);
        debug_assert!(!p.is_null());
        // SAFETY: SegInfos are leaked, never freed; set before any slot names the segment.
        unsafe { &*p }
    }

    /// The segment's info, made at its first use.
    fn get_or_make(&self, segment: u32) -> &'static SegInfo {
        let info = &self.0[segment as usize];
        let p = info.load(Ordering::Acquire);
        if !p.is_null() {
            // SAFETY: leaked, never freed.
            return unsafe { &*p };
        }
        let fresh: &'static SegInfo = Box::leak(Box::new(SegInfo {
            stats: AtomicPtr::new(std::ptr::null_mut()),
            space_id: AtomicU64::new(NO_SPACE),
        }));
        info.store(fresh as *const SegInfo as *mut SegInfo, Ordering::Release);
        fresh
    }
}

#[derive(Default)]
pub struct Segments {
    table: Mutex<Table>,
    /// Signalled when a [`Loan`] ends (a close of the lent descriptor waits for it).
    returned: Condvar,
    info: Arc<SegInfos>,
    names: Mutex<HashMap<String, &'static NameStats>>,
}

/// `fd` if the server's open of it with `flags` can be read through (not write-only).
fn readable(fd: i32, flags: i32) -> Option<i32> {
    (flags & libc::O_ACCMODE != libc::O_WRONLY).then_some(fd)
}

impl Segments {
    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every segment's info, shared (the InnoDB check holds it).
    pub fn infos(&self) -> Arc<SegInfos> {
        Arc::clone(&self.info)
    }

    pub fn seg(&self, segment: u32) -> &SegInfo {
        self.info.seg(segment)
    }

    fn name_stats(&self, name: &str) -> &'static NameStats {
        let mut names = self.names.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = names.get(name) {
            return s;
        }
        let key = if names.len() >= MAX_NAMES { "(other)" } else { name };
        names.entry(key.to_string()).or_insert_with(|| Box::leak(Box::default()))
    }

    /// The counters of every tablespace name, sorted by name.
    pub fn names(&self) -> Vec<(String, &'static NameStats)> {
        let names = self.names.lock().unwrap_or_else(|p| p.into_inner());
        let mut sorted: Vec<_> = names.iter().map(|(n, s)| (n.clone(), *s)).collect();
        sorted.sort_by(|a, b| a.0.cmp(&b.0));
        sorted
    }

    /// How many tablespace files are open.
    pub fn open_files(&self) -> usize {
        self.table.lock().map(|t| t.by_file.len()).unwrap_or(0)
    }

    /// `fd`, opened with `flags`, is of `file` (device, inode) named `name`;
    /// a file new to the table is cached if `cached` says so. An open with
    /// O_TRUNC of a cached file drops its pages from `cache`.
    pub fn open(
        &self,
        cache: &PageCache,
        fd: i32,
        flags: i32,
        file: (u64, u64),
        name: &str,
        cached: impl FnOnce(&str) -> bool,
    ) -> Opened {
        let mut table = self.lock();
        if let Some(segment) = table.by_file.get(&file).copied() {
            let slot = table.slots[segment as usize].as_mut().expect("a mapped segment has a slot");
            slot.refs += 1;
            slot.fds.extend(readable(fd, flags));
            let cached = slot.cached;
            if cached && flags & libc::O_TRUNC != 0 {
                cache.truncated(join(segment as u64, 0));
            }
            return Opened::Segment { segment, cached };
        }
        let segment = match table.free.pop() {
            Some(s) => s,
            None if (table.slots.len() as u64) < MAX_SEGMENTS => {
                table.slots.push(None);
                (table.slots.len() - 1) as u32
            }
            None => return Opened::Full,
        };
        let cached = cached(name);
        let stats = self.name_stats(name);
        stats.cached.store(cached, Ordering::Relaxed);
        stats.segment.store(segment as u64, Ordering::Relaxed);
        let info = self.info.get_or_make(segment);
        info.stats.store(stats as *const NameStats as *mut NameStats, Ordering::Release);
        info.space_id.store(NO_SPACE, Ordering::Release);
        let fds = readable(fd, flags).into_iter().collect();
        table.slots[segment as usize] = Some(Slot { refs: 1, file, cached, name: name.to_string(), fds });
        table.by_file.insert(file, segment);
        Opened::Segment { segment, cached }
    }

    /// Another descriptor `fd` (`dup` of `old`) of the file `slot` names.
    pub fn share(&self, old: i32, fd: i32, slot: u32) {
        let mut table = self.lock();
        if let Some(s) = table.slots.get_mut(fds::segment(slot) as usize).and_then(Option::as_mut) {
            s.refs += 1;
            if s.fds.contains(&old) {
                s.fds.push(fd);
            }
        }
    }

    /// Holds every open, cached tablespace file whose name `which` matches
    /// (one reference each, as a descriptor would): a warm reads them.
    pub fn pin_cached(&self, which: &Filter) -> Vec<Pinned> {
        self.pin_where(|name| which.matches(name))
    }

    /// As [`Segments::pin_cached`], for the tablespaces named in `names` (the hot list's reload).
    pub fn pin_names(&self, names: &HashSet<String>) -> Vec<Pinned> {
        self.pin_where(|name| names.contains(name))
    }

    /// The open, cached tablespaces by segment (the hot list names pages by tablespace).
    pub fn cached_names(&self) -> HashMap<u32, String> {
        let table = self.lock();
        let named = table.slots.iter().enumerate();
        named.filter_map(|(i, s)| s.as_ref().filter(|s| s.cached).map(|s| (i as u32, s.name.clone()))).collect()
    }

    fn pin_where(&self, pick: impl Fn(&str) -> bool) -> Vec<Pinned> {
        let mut table = self.lock();
        let mut pinned = Vec::new();
        for (segment, slot) in table.slots.iter_mut().enumerate() {
            if let Some(s) = slot.as_mut().filter(|s| s.cached && pick(&s.name)) {
                s.refs += 1;
                pinned.push(Pinned { segment: segment as u32, name: s.name.clone() });
            }
        }
        pinned
    }

    /// The server is about to close `fd` (or dup2 over it), a descriptor of
    /// the file `slot` names: it is lent no more, and a loan of it in
    /// progress ends first (one read), so no read goes through a closed or
    /// reused descriptor number.
    pub fn forget(&self, slot: u32, fd: i32) {
        let mut table = self.lock();
        if let Some(s) = table.slots.get_mut(fds::segment(slot) as usize).and_then(Option::as_mut) {
            s.fds.retain(|&f| f != fd);
        }
        drop(self.returned.wait_while(table, |t| t.lent.contains(&fd)).unwrap_or_else(|p| p.into_inner()));
    }

    /// `fd`, forgotten for a dup2 over it that failed, is lendable again.
    pub fn remember(&self, slot: u32, fd: i32) {
        let mut table = self.lock();
        if let Some(s) = table.slots.get_mut(fds::segment(slot) as usize).and_then(Option::as_mut) {
            s.fds.push(fd);
        }
    }

    /// One of the server's descriptors of `segment`'s file, lent for one
    /// read: a warm and the hot list's reload read through it, never through
    /// a descriptor of their own (closing that would drop every POSIX lock
    /// the server holds on the file: InnoDB locks ibdata1 so). None: the
    /// server has no descriptor of the file open now, or `switch` is off.
    pub fn lend<'a>(&'a self, segment: u32, switch: &'a OffSwitch) -> Option<Loan<'a>> {
        if state::get() != state::ACTIVE {
            return None; // the close hook no longer waits for loans
        }
        let pass = switch.enter()?;
        let mut table = self.lock();
        let slot = table.slots.get(segment as usize)?.as_ref()?;
        let (fd, file) = (*slot.fds.last()?, slot.file);
        table.lent.push(fd);
        drop(table);
        let mut loan = Loan { segs: self, fd, file_bytes: 0, _pass: pass };
        // SAFETY: fstat into a zeroed struct we own; the loan keeps fd open.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let ok = unsafe { libc::fstat(fd, &mut st) } == 0 && (st.st_dev, st.st_ino) == file;
        loan.file_bytes = st.st_size.max(0) as u64;
        // Another file: a descriptor number closed and reused behind the hooks' back (close_range).
        ok.then_some(loan)
    }

    /// A descriptor of the file `slot` names was closed (or a pin given
    /// back). True if it was the last: the file's pages left `cache` and the
    /// segment number is free.
    pub fn release(&self, cache: &PageCache, slot: u32) -> bool {
        let segment = fds::segment(slot);
        let mut table = self.lock();
        let Some(s) = table.slots.get_mut(segment as usize).and_then(Option::as_mut) else {
            return false;
        };
        s.refs -= 1;
        if s.refs > 0 {
            return false;
        }
        let s = table.slots[segment as usize].take().expect("checked above");
        table.by_file.remove(&s.file);
        if s.cached {
            // Every page of the file leaves every tier (versions bumped), so
            // the segment number can serve another file.
            cache.truncated(join(segment as u64, 0));
        }
        table.free.push(segment);
        true
    }
}
