//! The pusher: pages evicted from L1 wait in a bounded queue and a background
//! thread pushes them to the grid in pipelined batches.
//!
//! A read never waits on a push: eviction only appends to the queue. A full
//! queue drops its oldest page (the grid is a cache; the disk has the page)
//! and counts the drop. An L1 miss looks in the queue first and takes the page
//! back if it is there, so a page is never fetched from disk while its bytes
//! sit in memory waiting for the network.
//!
//! What becomes of each page is recorded in the presence set's fates (why a
//! later disk read happened): pushed (its stamp), dropped by the queue or
//! with nowhere to go ([`Fate::PushDropped`]), or not pushed because its node
//! is backed off ([`Fate::Unpushed`]). Pages queued with a [`PushTally`]
//! ([`Pusher::push_tallied`]) are also counted there: a caller that queues
//! pages of its own reports what the grid stored of them, not what it queued.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::codec::{Codec, Stored};
use crate::envelope::{self, Identity};
use crate::grid::{Grid, ItemFate};
use crate::pool::Evicted;
use crate::presence::{Fate, Presence};
use crate::seal::SealKey;
use crate::stats::{Counter, Stats, WarmNotStored};

/// Pages per pipelined batch; one round trip per node per batch.
pub const BATCH_PAGES: usize = 64;
/// A batch taken while the queue holds more than 1/BEHIND_DIVISOR of its bound
/// is pushed uncompressed: the pusher is falling behind, and a raw push costs
/// memcached memory where a dropped page costs a disk read.
const BEHIND_DIVISOR: u64 = 2;
/// How long a page for a node that takes only a sample waits for others to
/// go with it: the sample's few pages a second then cost one wake-up of the
/// pusher and one exchange per batch, not per page (issue 33 item 3). A read
/// of a waiting page takes it from the queue, so the wait loses no hit.
pub const SAMPLE_LINGER: Duration = Duration::from_millis(50);

struct Pending {
    seq: u64,
    entry: Evicted,
    /// Where what becomes of it is also counted (None: the cache's stats only).
    tally: Option<Arc<PushTally>>,
}

/// What became of the pages queued under one tally ([`Pusher::push_tallied`]).
#[derive(Default)]
pub struct PushTally {
    /// By [`ItemFate`]: stored, not sent (node down), refused, lost.
    fates: [Counter; ItemFate::ALL.len()],
    /// Not sent: the node is backed off (its lookups cost more than the disk
    /// reads they save, so the page would not be asked for there).
    backed_off: Counter,
    /// Pushed out of the full queue by newer evictions before it was sent.
    dropped: Counter,
    /// Not sent: no grid any more, or not sealable.
    other: Counter,
}

impl PushTally {
    /// Counts from 0 again.
    pub fn reset(&self) {
        self.fates.iter().chain([&self.backed_off, &self.dropped, &self.other]).for_each(|c| c.set(0));
    }

    pub fn stored(&self) -> u64 {
        self.fates[ItemFate::Stored.index()].get()
    }

    /// The tallied pages the grid did not store, by why.
    pub fn not_stored(&self) -> WarmNotStored {
        let fate = |f: ItemFate| self.fates[f.index()].get();
        WarmNotStored {
            node_down: fate(ItemFate::NodeDown),
            refused: fate(ItemFate::Refused),
            lost: fate(ItemFate::Lost),
            backed_off: self.backed_off.get(),
            dropped: self.dropped.get(),
            other: self.other.get(),
        }
    }
}

#[derive(Default)]
struct Queue {
    pending: HashMap<u64, Pending>,
    /// Push order: (page, seq). An item whose seq no longer matches `pending` was taken or replaced.
    order: VecDeque<(u64, u64)>,
    bytes: u64,
    next_seq: u64,
    /// Pages ever queued (what the back-off keeps out of the queue shows here).
    queued_total: u64,
    /// The batch the pusher is sending now: still readable by `take` until it is stored.
    in_flight: Option<Arc<Vec<Evicted>>>,
}

impl Queue {
    fn remove(&mut self, page: u64) -> Option<Pending> {
        let p = self.pending.remove(&page)?;
        self.bytes -= p.entry.bytes.len() as u64;
        Some(p)
    }

    fn pop_oldest(&mut self) -> Option<Pending> {
        while let Some((page, seq)) = self.order.pop_front() {
            if self.pending.get(&page).is_some_and(|p| p.seq == seq) {
                return self.remove(page);
            }
        }
        None
    }

    /// Stale order entries are skipped lazily; compact when they dominate so `order` stays bounded.
    fn compact(&mut self) {
        if self.order.len() > 2 * self.pending.len() + 1024 {
            let pending = &self.pending;
            self.order.retain(|(page, seq)| pending.get(page).is_some_and(|p| p.seq == *seq));
        }
    }
}

/// The grid in use, replaceable while the database is open (`PRAGMA waffle_grid`).
pub struct GridSlot(RwLock<Option<Arc<Grid>>>);

impl GridSlot {
    pub fn new(grid: Option<Arc<Grid>>) -> GridSlot {
        GridSlot(RwLock::new(grid.filter(|g| !g.is_empty())))
    }

    pub fn get(&self) -> Option<Arc<Grid>> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn set(&self, grid: Option<Arc<Grid>>) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = grid.filter(|g| !g.is_empty());
    }
}

struct Shared {
    queue: Mutex<Queue>,
    work: Condvar,
    idle: Condvar,
    stop: AtomicBool,
    capacity_bytes: u64,
    cache_id: u64,
    grid: Arc<GridSlot>,
    stats: Arc<Stats>,
    seal_key: Option<Arc<SealKey>>,
    /// Marked before each batch is sent: reads then ask the grid for these pages.
    presence: Arc<Presence>,
    codec: Codec,
    /// A clean close is pushing L1: every page goes, whatever the node's cost
    /// (the back-off spares steady state; a close's pushes are the next open's warm grid).
    closing: AtomicBool,
    /// Callers waiting for the queue to empty or make room (flush, close): no lingering then.
    hurry: AtomicUsize,
}

pub struct Pusher {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Pusher {
    pub fn start(
        grid: Arc<GridSlot>,
        stats: Arc<Stats>,
        cache_id: u64,
        capacity_bytes: u64,
        seal_key: Option<Arc<SealKey>>,
        presence: Arc<Presence>,
        codec: Codec,
    ) -> Pusher {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            work: Condvar::new(),
            idle: Condvar::new(),
            stop: AtomicBool::new(false),
            capacity_bytes,
            cache_id,
            grid,
            stats,
            seal_key,
            presence,
            codec,
            closing: AtomicBool::new(false),
            hurry: AtomicUsize::new(0),
        });
        let worker = Arc::clone(&shared);
        let thread = thread::Builder::new()
            .name("waffle-pusher".into())
            .spawn(move || drain(&worker))
            .expect("spawn the pusher thread");
        Pusher { shared, thread: Some(thread) }
    }

    /// Queues an evicted page. Never blocks on the network.
    pub fn push(&self, entry: Evicted) {
        self.push_as(entry, None);
    }

    /// Queues a page whose fate is also counted in `tally`.
    pub fn push_tallied(&self, entry: Evicted, tally: &Arc<PushTally>) {
        self.push_as(entry, Some(Arc::clone(tally)));
    }

    fn push_as(&self, entry: Evicted, tally: Option<Arc<PushTally>>) {
        let len = entry.bytes.len() as u64;
        if len > self.shared.capacity_bytes {
            self.note_dropped(entry.page, tally.as_deref());
            return;
        }
        let mut q = self.shared.queue.lock().unwrap();
        q.remove(entry.page);
        while q.bytes + len > self.shared.capacity_bytes {
            let Some(dropped) = q.pop_oldest() else { break };
            self.note_dropped(dropped.entry.page, dropped.tally.as_deref());
        }
        let seq = q.next_seq;
        q.next_seq += 1;
        q.order.push_back((entry.page, seq));
        q.bytes += len;
        q.queued_total += 1;
        q.pending.insert(entry.page, Pending { seq, entry, tally });
        q.compact();
        debug_assert!(q.bytes <= self.shared.capacity_bytes);
        // The pusher looks at the queue before it waits: only a queue that was
        // empty, or a batch's worth that ends a linger, needs a wake-up.
        let wake = q.pending.len() == 1 || q.pending.len() >= BATCH_PAGES;
        drop(q);
        if wake {
            self.shared.work.notify_one();
        }
    }

    fn note_dropped(&self, page: u64, tally: Option<&PushTally>) {
        self.shared.stats.l2_push_drops.incr();
        self.shared.presence.set_fate(page, Fate::PushDropped);
        if let Some(t) = tally {
            t.dropped.incr();
        }
    }

    /// A clean close begins: from now on every page is sent whatever the node's cost.
    pub fn begin_close(&self) {
        self.shared.closing.store(true, Ordering::Relaxed);
        self.shared.work.notify_one();
    }

    /// Whether a clean close began (every page is sent whatever the node's cost).
    pub fn is_closing(&self) -> bool {
        self.shared.closing.load(Ordering::Relaxed)
    }

    /// Queues a page at a clean close: waits (until `deadline`) for room
    /// instead of dropping older pages. False if the page was not queued.
    pub fn push_waiting(&self, entry: Evicted, deadline: Instant) -> bool {
        let len = entry.bytes.len() as u64;
        if len > self.shared.capacity_bytes {
            self.shared.stats.l2_push_drops.incr();
            self.shared.presence.set_fate(entry.page, Fate::PushDropped);
            return false;
        }
        let _hurry = Hurry::new(&self.shared);
        let mut q = self.shared.queue.lock().unwrap();
        while q.bytes + len > self.shared.capacity_bytes {
            let now = Instant::now();
            if now >= deadline {
                self.shared.stats.l2_push_drops.incr();
                self.shared.presence.set_fate(entry.page, Fate::PushDropped);
                return false;
            }
            // The pusher signals `idle` after every batch it sent.
            q = self.shared.idle.wait_timeout(q, deadline - now).unwrap().0;
        }
        drop(q);
        self.push(entry);
        true
    }

    /// Waits (at most `timeout`) until `bytes` more fit in the queue without
    /// dropping anything. A caller pushing pages of its own paces itself with this: its pages wait
    /// for room rather than push older pages (or each other) out.
    pub fn wait_room(&self, bytes: u64, timeout: Duration) -> bool {
        if bytes > self.shared.capacity_bytes {
            return false;
        }
        let deadline = Instant::now() + timeout;
        let _hurry = Hurry::new(&self.shared);
        let mut q = self.shared.queue.lock().unwrap();
        while q.bytes + bytes > self.shared.capacity_bytes {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            // The pusher signals `idle` after every batch it sent.
            q = self.shared.idle.wait_timeout(q, deadline - now).unwrap().0;
        }
        true
    }

    /// Takes a page back out of the queue (an L1 miss on a page not yet
    /// pushed). A page in the batch being sent is copied: its push goes on,
    /// and the grid copy it leaves is valid (same version) or will be rejected.
    pub fn take(&self, page: u64) -> Option<Evicted> {
        let mut q = self.shared.queue.lock().unwrap();
        if let Some(p) = q.remove(page) {
            return Some(p.entry);
        }
        let batch = q.in_flight.as_ref()?;
        let e = batch.iter().find(|e| e.page == page)?;
        Some(Evicted { page, version: e.version, bytes: e.bytes.clone(), scan: false })
    }

    /// Whether `page` waits in the queue or is in the batch being sent (its
    /// grid copy, if any, may still be an older one: a read takes it from here).
    pub fn holds(&self, page: u64) -> bool {
        let q = self.shared.queue.lock().unwrap();
        q.pending.contains_key(&page) || q.in_flight.as_ref().is_some_and(|b| b.iter().any(|e| e.page == page))
    }

    /// Whether `page` waits in the queue (not the batch being sent).
    pub fn is_queued(&self, page: u64) -> bool {
        self.shared.queue.lock().unwrap().pending.contains_key(&page)
    }

    /// Forgets queued pages for which `doomed(page)` holds (truncation, reset).
    pub fn discard(&self, doomed: impl Fn(u64) -> bool) {
        let mut q = self.shared.queue.lock().unwrap();
        let pages: Vec<u64> = q.pending.keys().copied().filter(|&p| doomed(p)).collect();
        for p in pages {
            q.remove(p);
        }
    }

    /// Pages waiting in the queue (not the batch being sent).
    pub fn queued_pages(&self) -> usize {
        self.shared.queue.lock().unwrap().pending.len()
    }

    /// Pages queued since the start, taken back or sent since or not.
    pub fn queued_total(&self) -> u64 {
        self.shared.queue.lock().unwrap().queued_total
    }

    pub fn queued_bytes(&self) -> u64 {
        self.shared.queue.lock().unwrap().bytes
    }

    /// Waits (at most `timeout`) until everything queued so far was sent. True if it was.
    pub fn flush(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let _hurry = Hurry::new(&self.shared);
        let mut q = self.shared.queue.lock().unwrap();
        while !q.pending.is_empty() || q.in_flight.is_some() {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            q = self.shared.idle.wait_timeout(q, deadline - now).unwrap().0;
        }
        true
    }
}

impl Drop for Pusher {
    fn drop(&mut self) {
        {
            // Under the queue's lock: the pusher checks `stop` under it before
            // it waits, so the wake-up cannot fall between its check and its wait.
            let _q = self.shared.queue.lock().unwrap_or_else(|e| e.into_inner());
            self.shared.stop.store(true, Ordering::Release);
            self.shared.work.notify_all();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn drain(shared: &Shared) {
    loop {
        let (batch, tallies, behind) = {
            let mut q = shared.queue.lock().unwrap();
            q.in_flight = None;
            shared.idle.notify_all();
            while q.pending.is_empty() && !shared.stop.load(Ordering::Acquire) {
                q = shared.work.wait(q).unwrap();
            }
            if shared.stop.load(Ordering::Acquire) {
                return;
            }
            q = linger(shared, q);
            if shared.stop.load(Ordering::Acquire) {
                return;
            }
            let mut batch = Vec::with_capacity(BATCH_PAGES);
            let mut tallies = Vec::with_capacity(BATCH_PAGES);
            while batch.len() < BATCH_PAGES {
                match q.pop_oldest() {
                    Some(p) => {
                        batch.push(p.entry);
                        tallies.push(p.tally);
                    }
                    None => break,
                }
            }
            let behind = q.bytes > shared.capacity_bytes / BEHIND_DIVISOR;
            let batch = Arc::new(batch);
            q.in_flight = Some(Arc::clone(&batch));
            (batch, tallies, behind)
        };
        send(shared, &batch, &tallies, behind);
    }
}

/// Someone waits on the queue (a flush, a close, a caller pacing itself):
/// the pusher sends at once. Counted while it lives.
struct Hurry<'a>(&'a Shared);

impl<'a> Hurry<'a> {
    fn new(shared: &'a Shared) -> Hurry<'a> {
        shared.hurry.fetch_add(1, Ordering::AcqRel);
        // Under the lock, so a pusher about to linger sees the count (or is already waiting and is woken).
        drop(shared.queue.lock().unwrap_or_else(|e| e.into_inner()));
        shared.work.notify_one();
        Hurry(shared)
    }
}

impl Drop for Hurry<'_> {
    fn drop(&mut self) {
        self.0.hurry.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Waits (at most [`SAMPLE_LINGER`]) for a batch's worth of pages while some
/// node takes only a sample, unless someone waits on the queue.
fn linger<'a>(shared: &Shared, mut q: MutexGuard<'a, Queue>) -> MutexGuard<'a, Queue> {
    let deadline = Instant::now() + SAMPLE_LINGER;
    let sampling = shared.grid.get().is_some_and(|g| g.samples_any());
    while sampling && q.pending.len() < BATCH_PAGES {
        let now = Instant::now();
        let hurried = shared.hurry.load(Ordering::Acquire) > 0 || shared.closing.load(Ordering::Relaxed);
        if hurried || shared.stop.load(Ordering::Acquire) || now >= deadline {
            break;
        }
        q = shared.work.wait_timeout(q, deadline - now).unwrap().0;
    }
    q
}

/// Sends `batch` (`tallies[i]`: where page i's fate is also counted) and
/// counts what became of every page.
fn send(shared: &Shared, batch: &[Evicted], tallies: &[Option<Arc<PushTally>>], behind: bool) {
    let stats = &shared.stats;
    let Some(grid) = shared.grid.get() else {
        // The grid was removed while these waited: nowhere to push them.
        stats.push_not_sent(batch.len() as u64);
        for (e, t) in batch.iter().zip(tallies) {
            shared.presence.set_fate(e.page, Fate::PushDropped);
            if let Some(t) = t {
                t.other.incr();
            }
        }
        return;
    };
    // A node that costs more than the disk read it would save takes only a
    // sample of pages (grid::cost); the others are dropped, never marked. Not at a close.
    // A warm's pages (those with a tally) are not declined by a node's trial, only by a verdict.
    let closing = shared.closing.load(Ordering::Relaxed);
    let batch: Vec<(&Evicted, Option<&PushTally>)> = batch
        .iter()
        .zip(tallies.iter().map(Option::as_deref))
        .filter(|(e, t)| {
            let key = envelope::GridKey::new(shared.cache_id, e.page);
            let admitted = closing
                || if t.is_some() { grid.admits_warm_push(key.as_bytes()) } else { grid.admits_push(key.as_bytes()) };
            if !admitted {
                stats.l2_push_cost_skips.incr();
                shared.presence.set_fate(e.page, Fate::Unpushed);
                if let Some(t) = t {
                    t.backed_off.incr();
                }
            }
            admitted
        })
        .collect();
    // Marked before the store, so a read right after it asks the grid (a store
    // that then fails costs that read a miss; a mark never makes a read wrong).
    for (e, _) in &batch {
        shared.presence.insert(e.page);
    }
    // A page that cannot be sealed (no nonce) is not pushed: a failure, not a plain copy.
    let mut compressed = Vec::new();
    let mut sent_tallies = Vec::with_capacity(batch.len());
    let (keys, values): (Vec<String>, Vec<Vec<u8>>) = batch
        .iter()
        .filter_map(|&(e, t)| {
            let id = Identity { cache_id: shared.cache_id, page: e.page, version: e.version };
            let key = envelope::key(shared.cache_id, e.page);
            // A node that takes only a sample has room for it raw: compressing would be CPU for nothing.
            let stored = if grid.samples(key.as_bytes()) {
                Stored::Raw
            } else {
                compress(shared, &e.bytes, &mut compressed, behind)
            };
            let payload = if stored == Stored::Raw { &e.bytes[..] } else { &compressed[..] };
            let value = envelope::seal_stored(id, payload, stored, shared.seal_key.as_deref());
            if value.is_none() {
                stats.push_not_sent(1);
                if let Some(t) = t {
                    t.other.incr();
                }
                // Not sent: the stamp set above would send a read to the grid for nothing.
                shared.presence.remove(e.page);
                shared.presence.set_fate(e.page, Fate::PushDropped);
            } else {
                sent_tallies.push(t);
            }
            Some((key, value?))
        })
        .unzip();
    let items: Vec<(&[u8], &[u8])> = keys.iter().zip(&values).map(|(k, v)| (k.as_bytes(), v.as_slice())).collect();
    let fates = grid.store_each(&items);
    for (&fate, t) in fates.iter().zip(&sent_tallies) {
        if fate == ItemFate::Stored {
            stats.l2_pushes.incr();
        }
        stats.push_not_stored(fate);
        if let Some(t) = t {
            t.fates[fate.index()].incr();
        }
    }
    // Bytes offered to the network, stored or not.
    stats.l2_push_bytes.add(values.iter().map(|v| v.len() as u64).sum());
}

/// Compresses one page with the cache's codec into `out` (not when the
/// pusher is behind) and counts it.
fn compress(shared: &Shared, page: &[u8], out: &mut Vec<u8>, behind: bool) -> Stored {
    if shared.codec == Codec::Off {
        return Stored::Raw;
    }
    if behind {
        let stats = &shared.stats;
        stats.compress_behind_pages.incr();
        stats.compress_bytes_in.add(page.len() as u64);
        stats.compress_bytes_out.add(page.len() as u64);
        return Stored::Raw;
    }
    let t0 = Instant::now();
    let stored = shared.codec.compress(page, out);
    let stats = &shared.stats;
    stats.compress_ns.add(t0.elapsed().as_nanos() as u64);
    stats.compress_bytes_in.add(page.len() as u64);
    if stored == Stored::Raw {
        stats.compress_raw_pages.incr();
        stats.compress_bytes_out.add(page.len() as u64);
    } else {
        stats.compress_pages.incr();
        stats.compress_bytes_out.add(out.len() as u64);
    }
    stored
}
