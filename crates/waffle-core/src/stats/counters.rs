//! Counters and latency histograms, readable while the database runs, and
//! their snapshot ([`Stats::snapshot`]).
//!
//! Counters are relaxed atomics: each is exact, but a snapshot taken during
//! traffic is not one instant across counters. Latencies go to hdrhistograms
//! sharded by thread so that recording does not serialize readers.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use hdrhistogram::Histogram;

use crate::envelope::Reject;
use crate::grid::{FaultKind, ItemFate};
use crate::presence::DiskReason;
use crate::verify::Served;

use super::cache_snapshot::{
    CacheSnapshot, CompressionSnapshot, DiskReasons, FaultCounts, LatencySnapshot, PushNotStored, RejectCounts,
    ServedCounts, TierLatency,
};

const HISTOGRAM_SHARDS: usize = 8;
/// Latencies above this are clamped (a request never legitimately takes a minute).
const HISTOGRAM_MAX_US: u64 = 60_000_000;
/// Upper bounds of the latency buckets in the stats JSON (`latency.<tier>.buckets`: `[le_us,
/// count of reads <= le_us]`, cumulative like `count`): counts that only grow, so a monitor can
/// take a recent window's quantiles from their rate (Prometheus' histogram_quantile).
pub const LATENCY_BUCKETS_US: [u64; 18] = [
    2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 200_000, 500_000, 1_000_000,
];

const FAULT_KINDS: [FaultKind; 4] = [FaultKind::Timeout, FaultKind::Io, FaultKind::Protocol, FaultKind::ServerError];

fn fault_index(f: FaultKind) -> usize {
    match f {
        FaultKind::Timeout => 0,
        FaultKind::Io => 1,
        FaultKind::Protocol => 2,
        FaultKind::ServerError => 3,
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tier {
    L1,
    L2,
    Disk,
}

impl Tier {
    pub const ALL: [Tier; 3] = [Tier::L1, Tier::L2, Tier::Disk];
}

#[derive(Default)]
pub struct Counter(AtomicU64);

impl Counter {
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    pub fn incr(&self) {
        self.add(1);
    }
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
    pub fn set(&self, n: u64) {
        self.0.store(n, Ordering::Relaxed);
    }
}

struct Latency {
    shards: Vec<Mutex<Histogram<u64>>>,
}

impl Latency {
    fn new() -> Latency {
        let shards = (0..HISTOGRAM_SHARDS)
            .map(|_| Mutex::new(Histogram::new_with_bounds(1, HISTOGRAM_MAX_US, 2).expect("valid histogram bounds")))
            .collect();
        Latency { shards }
    }

    fn record(&self, d: Duration) {
        let us = (d.as_micros() as u64).clamp(1, HISTOGRAM_MAX_US);
        let mut h = self.shards[thread_shard()].lock().unwrap();
        h.saturating_record(us);
    }

    fn merged(&self) -> Histogram<u64> {
        let mut all = Histogram::new_with_bounds(1, HISTOGRAM_MAX_US, 2).expect("valid histogram bounds");
        for s in &self.shards {
            all.add(&*s.lock().unwrap()).expect("same bounds");
        }
        all
    }

    /// Percentiles, sum and cumulative buckets of everything recorded.
    fn snapshot(&self) -> TierLatency {
        let h = self.merged();
        TierLatency {
            count: h.len(),
            p50_us: h.value_at_quantile(0.50),
            p95_us: h.value_at_quantile(0.95),
            p99_us: h.value_at_quantile(0.99),
            max_us: h.max(),
            // Within the histogram's 1% resolution, as the percentiles.
            sum_us: (h.mean() * h.len() as f64).round() as u64,
            buckets: LATENCY_BUCKETS_US.map(|le| [le, h.count_between(1, le)]).to_vec(),
        }
    }

    fn reset(&self) {
        for s in &self.shards {
            s.lock().unwrap().reset();
        }
    }
}

fn thread_shard() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local!(static SHARD: Cell<usize> = const { Cell::new(usize::MAX) });
    SHARD.with(|s| {
        if s.get() == usize::MAX {
            s.set(NEXT.fetch_add(1, Ordering::Relaxed) % HISTOGRAM_SHARDS);
        }
        s.get()
    })
}

/// Everything the cache counts. Field names are the JSON names.
pub struct Stats {
    pub l1_hits: Counter,
    pub l1_misses: Counter,
    pub l2_hits: Counter,
    pub l2_misses: Counter,
    /// A miss because the page's node was marked down and not asked.
    /// (Every `l2_misses` is of a page the presence set marked: only those
    /// are asked for. So each is a page memcached evicted or a node lost.)
    pub l2_skipped: Counter,
    /// Lookups that did not ask the grid: this cache never pushed the page at
    /// its current version, or took it back since (the presence set).
    pub l2_presence_skips: Counter,
    /// Lookups that did not ask the grid: the page's node costs more than the
    /// disk read it would save, and this lookup was not one of its samples.
    pub l2_cost_skips: Counter,
    /// Lookups that did not ask the grid: the page was pushed longer ago than
    /// the grid is seen to keep pages (its reach; one in 16 such lookups goes).
    pub l2_aged_skips: Counter,
    /// Evicted pages not pushed for the same reason (dropped: the disk has them).
    pub l2_push_cost_skips: Counter,
    /// Read-ahead windows that asked the grid nothing: not every page of them
    /// may be there (within its reach), so one disk read of the run is cheaper.
    pub read_ahead_presence_skips: Counter,
    pub l2_rejects: [Counter; Reject::ALL.len()],
    pub l2_faults: [Counter; FAULT_KINDS.len()],
    pub l2_pushes: Counter,
    pub l2_push_drops: Counter,
    pub l2_push_failures: Counter,
    /// `l2_push_failures` by why ([`ItemFate`] as index, `Stored` unused):
    /// not sent because the node was down, refused by the node (memcached
    /// out of memory, too large), lost to a fault (a missed deadline, a reset).
    pub l2_push_not_stored: [Counter; ItemFate::ALL.len()],
    /// The rest of `l2_push_failures`: the grid was removed while the pages
    /// waited, or a page could not be sealed.
    pub l2_push_not_stored_other: Counter,
    pub l2_push_bytes: Counter,
    pub l2_fetch_bytes: Counter,
    /// L1 misses answered from the push queue (evicted, not yet pushed).
    pub push_queue_hits: Counter,
    /// Demand reads of the disk (read-ahead windows apart): count them with [`Stats::disk_read`].
    pub disk_reads: Counter,
    /// `disk_reads` by why each happened ([`DiskReason`] as index; they sum to it).
    pub disk_reasons: [Counter; DiskReason::ALL.len()],
    pub disk_short_reads: Counter,
    pub disk_writes: Counter,
    /// Writes that were not one whole page (the page is dropped from the tiers).
    pub partial_writes: Counter,
    pub truncates: Counter,
    /// Sequential scans: windows fetched, pages they brought from the grid and
    /// from disk, demand reads served by them, and scan pages dropped unread.
    pub read_ahead_windows: Counter,
    pub read_ahead_grid_requests: Counter,
    pub read_ahead_disk_reads: Counter,
    pub read_ahead_pages_l2: Counter,
    pub read_ahead_pages_disk: Counter,
    pub read_ahead_hits: Counter,
    pub scan_drops: Counter,
    /// Pages a window read ahead of its reader (the page it missed not
    /// counted) into L1, from the disk and from the grid; and of those, the
    /// ones a read used later. The rest left L1 unread or are still there
    /// (`Pool::ahead_counts`; `ahead_*` in the stats JSON, cache/stats_json.rs).
    pub ahead_pages_disk: Counter,
    pub ahead_pages_l2: Counter,
    pub ahead_used_disk: Counter,
    pub ahead_used_l2: Counter,
    /// Read-ahead windows that left their disk pages unread because a page
    /// of a run costs too much of a random read (`read_ahead_disk` in the
    /// stats JSON, cache/disk_ahead.rs `DiskAhead`), and windows that read them anyway to
    /// keep measuring (one in 16 while it is off).
    pub read_ahead_disk_skips: Counter,
    pub read_ahead_disk_probes: Counter,
    /// Whole-cache invalidations (page size changed).
    pub resets: Counter,
    /// Commits by writers that bypass this cache (another process, another
    /// connection without waffle, a checkpoint elsewhere), noticed by the adapter.
    pub foreign_changes: Counter,
    /// Of those, the ones that made every cached copy unreachable (a new epoch)
    /// because the changed pages could not be named.
    pub foreign_resets: Counter,
    /// Pages named as changed by another writer (their versions bumped).
    pub foreign_pages_invalidated: Counter,
    /// Copies dropped from L1 and the push queue because another writer changed them.
    pub foreign_copies_dropped: Counter,
    /// L1 entries found at a version the file has left, dropped instead of served.
    pub l1_stale_drops: Counter,
    /// Compression of pushed pages (codec on): pages stored compressed, pages
    /// kept raw because compression saved too little, page bytes before and
    /// payload bytes after (raw ones at full size), and the time it took.
    pub compress_pages: Counter,
    pub compress_raw_pages: Counter,
    pub compress_bytes_in: Counter,
    pub compress_bytes_out: Counter,
    pub compress_ns: Counter,
    /// Pages pushed raw although compression is on: the push queue was over
    /// half full (the pusher behind; compressing would have made it drop pages).
    pub compress_behind_pages: Counter,
    /// Compressed grid values opened on reads, and the time opening them took
    /// (checksum or tag, and decompression).
    pub decompress_pages: Counter,
    pub decompress_ns: Counter,
    /// Verify mode (verify.rs): pages served from a tier and compared with the
    /// file, and the ones that differed, by the tier that served them.
    pub verify_checked: Counter,
    pub verify_mismatches: [Counter; Served::ALL.len()],
    latency: [Latency; 3],
}

impl Default for Stats {
    fn default() -> Self {
        Self::new()
    }
}

impl Stats {
    pub fn new() -> Stats {
        Stats {
            l1_hits: Counter::default(),
            l1_misses: Counter::default(),
            l2_hits: Counter::default(),
            l2_misses: Counter::default(),
            l2_skipped: Counter::default(),
            l2_presence_skips: Counter::default(),
            l2_cost_skips: Counter::default(),
            l2_aged_skips: Counter::default(),
            l2_push_cost_skips: Counter::default(),
            read_ahead_presence_skips: Counter::default(),
            l2_rejects: Default::default(),
            l2_faults: Default::default(),
            l2_pushes: Counter::default(),
            l2_push_drops: Counter::default(),
            l2_push_failures: Counter::default(),
            l2_push_not_stored: Default::default(),
            l2_push_not_stored_other: Counter::default(),
            l2_push_bytes: Counter::default(),
            l2_fetch_bytes: Counter::default(),
            push_queue_hits: Counter::default(),
            disk_reads: Counter::default(),
            disk_reasons: Default::default(),
            disk_short_reads: Counter::default(),
            disk_writes: Counter::default(),
            partial_writes: Counter::default(),
            truncates: Counter::default(),
            read_ahead_windows: Counter::default(),
            read_ahead_grid_requests: Counter::default(),
            read_ahead_disk_reads: Counter::default(),
            read_ahead_pages_l2: Counter::default(),
            read_ahead_pages_disk: Counter::default(),
            read_ahead_hits: Counter::default(),
            scan_drops: Counter::default(),
            ahead_pages_disk: Counter::default(),
            ahead_pages_l2: Counter::default(),
            ahead_used_disk: Counter::default(),
            ahead_used_l2: Counter::default(),
            read_ahead_disk_skips: Counter::default(),
            read_ahead_disk_probes: Counter::default(),
            resets: Counter::default(),
            foreign_changes: Counter::default(),
            foreign_resets: Counter::default(),
            foreign_pages_invalidated: Counter::default(),
            foreign_copies_dropped: Counter::default(),
            l1_stale_drops: Counter::default(),
            compress_pages: Counter::default(),
            compress_raw_pages: Counter::default(),
            compress_bytes_in: Counter::default(),
            compress_bytes_out: Counter::default(),
            compress_ns: Counter::default(),
            compress_behind_pages: Counter::default(),
            decompress_pages: Counter::default(),
            decompress_ns: Counter::default(),
            verify_checked: Counter::default(),
            verify_mismatches: Default::default(),
            latency: [Latency::new(), Latency::new(), Latency::new()],
        }
    }

    /// A page the pusher did not store, and why (`ItemFate::Stored` counts nothing here).
    pub fn push_not_stored(&self, fate: ItemFate) {
        if fate != ItemFate::Stored {
            self.l2_push_failures.incr();
            self.l2_push_not_stored[fate.index()].incr();
        }
    }

    /// Pages that could not be sent at all: no grid any more, or not sealable.
    pub fn push_not_sent(&self, pages: u64) {
        self.l2_push_failures.add(pages);
        self.l2_push_not_stored_other.add(pages);
    }

    pub fn reject(&self, r: Reject) {
        self.l2_rejects[r.index()].incr();
    }

    /// A demand read of the disk, and why (the two counters move together).
    pub fn disk_read(&self, why: DiskReason) {
        self.disk_reads.incr();
        self.disk_reasons[why as usize].incr();
    }

    pub fn fault(&self, f: FaultKind) {
        self.l2_faults[fault_index(f)].incr();
    }

    pub fn l2_rejects_total(&self) -> u64 {
        self.l2_rejects.iter().map(Counter::get).sum()
    }

    /// A page served from `tier` differed from the file (verify mode).
    pub fn verify_mismatch(&self, tier: Served) {
        self.verify_mismatches[tier as usize].incr();
    }

    pub fn verify_mismatches_total(&self) -> u64 {
        self.verify_mismatches.iter().map(Counter::get).sum()
    }

    pub fn record(&self, tier: Tier, d: Duration) {
        self.latency[tier as usize].record(d);
    }

    /// Clears the latency histograms (counters only grow).
    pub fn reset_latency(&self) {
        for l in &self.latency {
            l.reset();
        }
    }

    /// The counters and latency percentiles (microseconds), the cache's own
    /// fields (`cache_id`, `l1`, `nodes`, ...) left at their defaults for the
    /// cache to fill (`PageCache::stats_snapshot`).
    pub fn snapshot(&self) -> CacheSnapshot {
        // One snapshot of the reasons, and `disk_reads` as their sum: exact even under traffic.
        let disk_reasons = self.disk_reasons();
        let l2_rejects_total = self.l2_rejects_total();
        // Expected (a copy older than the page: it was rewritten after the
        // push, or a store in flight met the rewrite) against the rest (a copy
        // damaged, foreign or forged: a fault worth a look).
        let stale = self.l2_rejects[Reject::Version.index()].get();
        CacheSnapshot {
            l1_hits: self.l1_hits.get(),
            l1_misses: self.l1_misses.get(),
            l2_hits: self.l2_hits.get(),
            l2_misses: self.l2_misses.get(),
            l2_skipped: self.l2_skipped.get(),
            l2_presence_skips: self.l2_presence_skips.get(),
            l2_cost_skips: self.l2_cost_skips.get(),
            l2_aged_skips: self.l2_aged_skips.get(),
            l2_push_cost_skips: self.l2_push_cost_skips.get(),
            read_ahead_presence_skips: self.read_ahead_presence_skips.get(),
            l2_rejects: self.rejects(),
            l2_rejects_total,
            l2_rejects_stale: stale,
            l2_rejects_bad: l2_rejects_total.saturating_sub(stale),
            l2_faults: self.faults(),
            l2_pushes: self.l2_pushes.get(),
            l2_push_drops: self.l2_push_drops.get(),
            l2_push_failures: self.l2_push_failures.get(),
            l2_push_not_stored: self.push_not_stored_counts(),
            l2_push_bytes: self.l2_push_bytes.get(),
            l2_fetch_bytes: self.l2_fetch_bytes.get(),
            push_queue_hits: self.push_queue_hits.get(),
            disk_reads: disk_reasons.total(),
            disk_reasons,
            disk_short_reads: self.disk_short_reads.get(),
            disk_writes: self.disk_writes.get(),
            partial_writes: self.partial_writes.get(),
            truncates: self.truncates.get(),
            read_ahead_windows: self.read_ahead_windows.get(),
            read_ahead_grid_requests: self.read_ahead_grid_requests.get(),
            read_ahead_disk_reads: self.read_ahead_disk_reads.get(),
            read_ahead_pages_l2: self.read_ahead_pages_l2.get(),
            read_ahead_pages_disk: self.read_ahead_pages_disk.get(),
            read_ahead_hits: self.read_ahead_hits.get(),
            scan_drops: self.scan_drops.get(),
            resets: self.resets.get(),
            foreign_changes: self.foreign_changes.get(),
            foreign_resets: self.foreign_resets.get(),
            foreign_pages_invalidated: self.foreign_pages_invalidated.get(),
            foreign_copies_dropped: self.foreign_copies_dropped.get(),
            l1_stale_drops: self.l1_stale_drops.get(),
            verify_checked: self.verify_checked.get(),
            verify_mismatches: self.verify_mismatches_total(),
            verify_mismatches_by_tier: self.mismatches_by_tier(),
            compression: self.compression(),
            latency: LatencySnapshot {
                l1: self.latency[Tier::L1 as usize].snapshot(),
                l2: self.latency[Tier::L2 as usize].snapshot(),
                disk: self.latency[Tier::Disk as usize].snapshot(),
            },
            ..CacheSnapshot::default()
        }
    }

    fn rejects(&self) -> RejectCounts {
        let n = |r: Reject| self.l2_rejects[r.index()].get();
        RejectCounts {
            length: n(Reject::Length),
            format: n(Reject::Format),
            checksum: n(Reject::Checksum),
            database: n(Reject::Database),
            page: n(Reject::Page),
            version: n(Reject::Version),
            size: n(Reject::Size),
            seal: n(Reject::Seal),
            content: n(Reject::Content),
            codec: n(Reject::Codec),
        }
    }

    fn faults(&self) -> FaultCounts {
        let n = |f: FaultKind| self.l2_faults[fault_index(f)].get();
        FaultCounts {
            timeout: n(FaultKind::Timeout),
            io: n(FaultKind::Io),
            protocol: n(FaultKind::Protocol),
            server_error: n(FaultKind::ServerError),
        }
    }

    fn push_not_stored_counts(&self) -> PushNotStored {
        let n = |f: ItemFate| self.l2_push_not_stored[f.index()].get();
        PushNotStored {
            node_down: n(ItemFate::NodeDown),
            refused: n(ItemFate::Refused),
            lost: n(ItemFate::Lost),
            other: self.l2_push_not_stored_other.get(),
        }
    }

    fn disk_reasons(&self) -> DiskReasons {
        let n = |r: DiskReason| self.disk_reasons[r as usize].get();
        DiskReasons {
            cold: n(DiskReason::Cold),
            never_pushed: n(DiskReason::NeverPushed),
            push_dropped: n(DiskReason::PushDropped),
            aged_out: n(DiskReason::AgedOut),
            evicted: n(DiskReason::Evicted),
            skipped: n(DiskReason::Skipped),
            rejected: n(DiskReason::Rejected),
            invalidated: n(DiskReason::Invalidated),
        }
    }

    fn mismatches_by_tier(&self) -> ServedCounts {
        let n = |t: Served| self.verify_mismatches[t as usize].get();
        ServedCounts { l1: n(Served::L1), push_queue: n(Served::PushQueue), l2: n(Served::L2) }
    }

    fn compression(&self) -> CompressionSnapshot {
        let (bytes_in, bytes_out) = (self.compress_bytes_in.get(), self.compress_bytes_out.get());
        CompressionSnapshot {
            pages_compressed: self.compress_pages.get(),
            pages_raw: self.compress_raw_pages.get(),
            pages_raw_behind: self.compress_behind_pages.get(),
            bytes_before: bytes_in,
            bytes_after: bytes_out,
            // Page bytes per payload byte: 2.0 means the grid holds twice the pages.
            ratio: if bytes_out == 0 { 1.0 } else { ((bytes_in as f64 / bytes_out as f64) * 1000.0).round() / 1000.0 },
            compress_us: self.compress_ns.get() / 1000,
            pages_decompressed: self.decompress_pages.get(),
            decompress_us: self.decompress_ns.get() / 1000,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn rejects_and_push_failures_are_split_by_what_they_mean() {
        let s = Stats::new();
        s.reject(Reject::Version);
        s.reject(Reject::Version);
        s.reject(Reject::Checksum);
        for fate in [ItemFate::Stored, ItemFate::NodeDown, ItemFate::NodeDown, ItemFate::Refused, ItemFate::Lost] {
            s.push_not_stored(fate);
        }
        s.push_not_sent(3);
        let j = s.snapshot();
        assert_eq!((j.l2_rejects_stale, j.l2_rejects_bad), (2, 1), "{j:?}");
        let n = j.l2_push_not_stored;
        assert_eq!((n.node_down, n.refused, n.lost, n.other), (2, 1, 1, 3));
        assert_eq!(j.l2_push_failures, n.node_down + n.refused + n.lost + n.other, "the parts sum to the total");
    }

    #[test]
    fn snapshot_has_every_counter_and_percentiles() {
        let s = Stats::new();
        s.l1_hits.add(3);
        s.reject(Reject::Version);
        s.fault(FaultKind::Timeout);
        s.disk_read(DiskReason::Cold);
        s.verify_mismatch(Served::PushQueue);
        for us in [10, 20, 30, 1000] {
            s.record(Tier::L2, Duration::from_micros(us));
        }
        let j = s.snapshot();
        assert_eq!(j.l1_hits, 3);
        assert_eq!((j.l2_rejects.version, j.l2_rejects_total), (1, 1));
        assert_eq!(j.l2_faults.timeout, 1);
        assert_eq!((j.disk_reasons.cold, j.disk_reads), (1, 1));
        assert_eq!((j.verify_mismatches_by_tier.push_queue, j.verify_mismatches), (1, 1));
        let l2 = &j.latency.l2;
        assert_eq!(l2.count, 4);
        assert!((990..=1010).contains(&l2.p99_us), "{}", l2.p99_us);
        assert_eq!(j.latency.disk.count, 0);
        assert!((1060..=1070).contains(&l2.sum_us), "10 + 20 + 30 + 1000 within 1%: {}", l2.sum_us);
        assert_eq!(l2.buckets.len(), LATENCY_BUCKETS_US.len());
        let at = |le: u64| l2.buckets.iter().find(|b| b[0] == le).unwrap()[1];
        assert_eq!((at(5), at(10), at(20), at(50), at(500), at(1_000), at(1_000_000)), (0, 1, 2, 3, 3, 4, 4));
    }

    /// The JSON names of the counters kept by enum (rejects, faults, disk
    /// reasons, tiers) are the enums' names: a variant added without its field fails here.
    #[test]
    fn enum_keyed_counts_are_named_as_their_enums() {
        let s = Stats::new();
        Reject::ALL.iter().for_each(|&r| s.reject(r));
        FAULT_KINDS.iter().for_each(|&f| s.fault(f));
        DiskReason::ALL.iter().for_each(|&r| s.disk_read(r));
        Served::ALL.iter().for_each(|&t| s.verify_mismatch(t));
        let j = serde_json::to_value(s.snapshot()).unwrap();
        let ones = |all: Vec<&str>| Value::Object(all.into_iter().map(|n| (n.to_string(), Value::from(1))).collect());
        assert_eq!(j["l2_rejects"], ones(Reject::ALL.iter().map(|r| r.name()).collect()));
        assert_eq!(j["l2_faults"], ones(FAULT_KINDS.iter().map(|f| f.name()).collect()));
        assert_eq!(j["disk_reasons"], ones(DiskReason::ALL.iter().map(|r| r.name()).collect()));
        assert_eq!(j["verify_mismatches_by_tier"], ones(Served::ALL.iter().map(|t| t.name()).collect()));
    }

    #[test]
    fn rejects_are_read_by_their_names() {
        let s = Stats::new();
        s.reject(Reject::Version);
        s.reject(Reject::Version);
        s.reject(Reject::Checksum);
        let k = s.snapshot().l2_rejects;
        assert_eq!(
            k.of(&["version", "checksum", "page", "nonsense"]),
            [("version", 2), ("checksum", 1), ("page", 0), ("nonsense", 0)]
        );
        let all: Vec<&'static str> = Reject::ALL.iter().map(|r| r.name()).collect();
        assert_eq!(k.of(&all).iter().map(|(_, n)| n).sum::<u64>(), 3);
    }
}
