//! The cost back-off (`waffle_core::grid::cost`): a node whose lookups cost
//! more than the disk reads they save is backed off (the lookups and pushes
//! of a sample of page keys sent, 1 in SAMPLE_EVERY here), and comes back when it gets cheap
//! again. Decisions are taken at the end of windows of COST_WINDOW_MS here
//! (10 s in production) and held for a dwell of at least one window. Below
//! SQLite (`PageCache`) over a disk that takes 2 ms a read and a fake node
//! made slow (20 ms a lookup), then fast again; every read is checked against
//! the file. The control: the same phases with the back-off off send every
//! lookup to the slow node.

use std::io;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use waffle_core::backing::{Backing, PageId};
use waffle_core::envelope::GridKey;
use waffle_core::grid::cost::{in_sample, SAMPLE_EVERY};
use waffle_core::grid::{CostState, Grid, GridOptions, NodeSpec};
use waffle_core::stats::CacheSnapshot;
use waffle_core::{CacheOptions, PageCache, ReadAhead};
use waffle_testkit::fake_node::FakeNode;
use waffle_testkit::mem_file::MemFile;
use waffle_testkit::pattern;

const PAGE: usize = 4096;
const PAGES: u64 = 48;
const L1_PAGES: u64 = 4;
const DISK_READ: Duration = Duration::from_millis(2);
const SLOW_LOOKUP: Duration = Duration::from_millis(20);
/// The cost back-off's window (and first dwell): short, as the test runs in real time.
const COST_WINDOW_MS: u64 = 100;

/// A disk that takes DISK_READ per read (a slow volume), over a memory file.
struct SlowDisk(MemFile);

impl Backing for SlowDisk {
    fn read_pages(&self, first: PageId, page_bytes: usize, buf: &mut [u8]) -> io::Result<usize> {
        std::thread::sleep(DISK_READ);
        self.0.read_pages(first, page_bytes, buf)
    }
    fn is_direct(&self) -> bool {
        false
    }
}

struct Rig {
    node: FakeNode,
    cache: PageCache,
    disk: SlowDisk,
    file: Arc<Mutex<Vec<u8>>>,
    next: u64,
    pages: u64,
    l1_pages: u64,
}

impl Rig {
    fn new(backoff: bool) -> Rig {
        Rig::sized(backoff, PAGES, L1_PAGES)
    }

    /// A file of `pages` pages under an L1 of `l1_pages`.
    fn sized(backoff: bool, pages: u64, l1_pages: u64) -> Rig {
        let node = FakeNode::start();
        let opts = GridOptions {
            timeout_ms: 1000,
            cost_backoff: backoff,
            cost_window_ms: COST_WINDOW_MS,
            ..GridOptions::default()
        };
        let grid = Arc::new(Grid::new(NodeSpec::parse_list(&node.addr()).unwrap(), opts));
        let cache = PageCache::new(CacheOptions {
            cache_id: 0xc057,
            saved: None,
            page_bytes: PAGE,
            local_bytes: l1_pages * PAGE as u64,
            push_queue_bytes: 1 << 20,
            grid: Some(grid),
            seal_key: None,
            page_check: None,
            codec: waffle_core::codec::DEFAULT,
        });
        let file = Arc::new(Mutex::new((0..pages).flat_map(|p| pattern(p, PAGE)).collect::<Vec<u8>>()));
        let disk = SlowDisk(MemFile(Arc::clone(&file)));
        Rig { node, cache, disk, file, next: 0, pages, l1_pages }
    }

    /// Reads `count` pages round the file (each checked), letting the pusher keep up.
    fn read(&mut self, count: u64) {
        let mut buf = vec![0u8; PAGE];
        for _ in 0..count {
            let p = self.next % self.pages;
            self.next += 1;
            self.cache.read(p, &mut buf, &self.disk).unwrap();
            let want = &self.file.lock().unwrap()[p as usize * PAGE..][..PAGE];
            assert!(buf == want, "page {p} read other bytes than the file's");
            if self.next.is_multiple_of(self.l1_pages) {
                assert!(self.cache.flush_pushes(Duration::from_secs(10)));
            }
        }
    }

    /// Reads the whole file `times` over in page order, as a scan does (read-ahead windows).
    fn scan(&mut self, times: u64) {
        let mut buf = vec![0u8; PAGE];
        for _ in 0..times {
            let mut ra = ReadAhead::new();
            for p in 0..self.pages {
                self.cache.read_sequential(p, &mut buf, &self.disk, &mut ra).unwrap();
                let want = &self.file.lock().unwrap()[p as usize * PAGE..][..PAGE];
                assert!(buf == want, "page {p} (scan) read other bytes than the file's");
            }
            assert!(self.cache.flush_pushes(Duration::from_secs(10)));
        }
    }

    fn stats(&self) -> CacheSnapshot {
        self.cache.stats_snapshot()
    }

    fn state(&self) -> CostState {
        self.stats().nodes[0].cost.state
    }

    /// Reads until the node's state is `want` (at most `max` reads); the reads it took.
    fn read_until(&mut self, want: CostState, max: u64) -> u64 {
        let mut reads = 0;
        while self.state() != want {
            assert!(reads < max, "not {want:?} after {reads} reads: {:?}", self.stats().nodes[0]);
            self.read(1);
            reads += 1;
        }
        reads
    }
}

#[test]
fn a_slow_node_is_backed_off_and_comes_back_when_fast() {
    let started = Instant::now();
    let mut rig = Rig::new(true);

    // Fast node, slow disk: the grid pays, every lookup goes (on from the first window judged).
    rig.read(4 * PAGES);
    rig.read_until(CostState::On, 200 * PAGES); // hits are quick: a window (100 ms) takes a few thousand reads
    let s = rig.stats();
    assert!(s.l2_hits > PAGES, "{s:?}");
    assert_eq!(s.l2_cost_skips + s.l2_push_cost_skips, 0, "{s:?}");

    // The node slows down past the disk: backed off at the end of a window of MIN_SAMPLES lookups or so.
    rig.node.delay_gets(SLOW_LOOKUP);
    let took = rig.read_until(CostState::BackedOff, 40);
    let cost = rig.stats().nodes[0].cost.clone();
    assert!(cost.lookup_us > cost.saved_us, "{cost:?}");
    assert!(cost.reason.starts_with("backed off"), "{cost:?}");
    eprintln!("backed off after {took} reads: {cost:?}");

    // Backed off: the lookups and pushes of about one page key in SAMPLE_EVERY
    // go (here 4 of the 48 pages: the sample is by key), the rest read the disk.
    let before = rig.stats();
    let (gets_before, _) = rig.node.gets();
    let queued_before = rig.cache.pages_queued_total();
    rig.read(8 * PAGES);
    let after = rig.stats();
    let queued = rig.cache.pages_queued_total() - queued_before;
    let gets = rig.node.gets().0 - gets_before;
    let declined = after.l2_cost_skips - before.l2_cost_skips;
    let pushes_declined = after.l2_push_cost_skips - before.l2_push_cost_skips;
    eprintln!(
        "backed off: {gets} lookups sent, {declined} declined, {pushes_declined} pushes declined, {queued} queued"
    );
    assert!(declined >= 4 * PAGES, "most lookups were declined: {after:?}");
    // Only the sample's pages are looked up: each of them once per pass over the file at most.
    let every = after.nodes[0].cost.sample_every;
    assert_eq!(every, SAMPLE_EVERY, "a few lookups a window: the densest sample");
    let sampled = (0..PAGES).filter(|&p| in_sample(GridKey::new(0xc057, p).as_bytes(), every)).count() as u64;
    assert!(sampled >= 1, "this cache id's sample has a page of the file");
    assert!(gets >= 1 && gets <= 8 * sampled + 2, "{gets} lookups for {declined} declined, {sampled} pages sampled");
    assert!(pushes_declined > 0, "pushes back off too: {after:?}");
    // Declined at the eviction: no queue, no wake-up of the pusher for a page it would drop.
    assert!(queued <= pushes_declined / 4, "{queued} pages queued for {pushes_declined} declined");
    assert_eq!(rig.state(), CostState::BackedOff);

    // Fast again: the sampled lookups notice, and it is on again.
    rig.node.delay_gets(Duration::ZERO);
    let took = rig.read_until(CostState::On, 100 * SAMPLE_EVERY);
    eprintln!("on again after {took} reads: {:?}", rig.stats().nodes[0].cost);
    let before = rig.stats().l2_hits;
    rig.read(4 * PAGES);
    assert!(rig.stats().l2_hits > before + PAGES, "the grid serves again: {:?}", rig.stats());
    assert_eq!(rig.stats().l2_rejects_total, 0);
    eprintln!("in {:.1}s", started.elapsed().as_secs_f64());
}

/// A scan's read-ahead windows ask a node that is on for the pages it holds
/// (the control), and a backed-off node nothing, not even for its sample's
/// pages: the sample's own lookups measure it, and a window's round trip
/// would cost what the back-off spares (issue 20: 27,867 such requests in
/// one sweep point's measured run). L1 of 256 pages: windows up to 16.
#[test]
fn a_backed_off_node_gets_no_read_ahead_requests() {
    let pages = 1024;
    let mut rig = Rig::sized(true, pages, 256);
    rig.read(2 * pages);
    rig.read_until(CostState::On, 200 * pages);
    let before = rig.stats();
    rig.scan(1);
    let after = rig.stats();
    assert!(after.read_ahead_windows > before.read_ahead_windows, "the scan read ahead: {after:?}");
    assert!(after.read_ahead_grid_requests > before.read_ahead_grid_requests, "on: windows ask the grid: {after:?}");

    rig.node.delay_gets(SLOW_LOOKUP);
    rig.read_until(CostState::BackedOff, 4 * pages);
    rig.read(pages); // the sample's pages are pushed, and held
    let before = rig.stats();
    rig.scan(2);
    let after = rig.stats();
    assert_eq!(rig.state(), CostState::BackedOff);
    assert!(after.read_ahead_windows > before.read_ahead_windows, "the scans read ahead: {after:?}");
    assert!(after.l2_presence_pages > 0, "the grid holds the sample's pages: {after:?}");
    let asked = after.read_ahead_grid_requests - before.read_ahead_grid_requests;
    assert_eq!(asked, 0, "read-ahead windows asked a backed-off node: {after:?}");
}

/// The control: with the back-off off, the slow node gets every lookup (and
/// the stats still say it would be backed off, and why).
#[test]
fn with_the_backoff_off_a_slow_node_gets_every_lookup() {
    let mut rig = Rig::new(false);
    rig.read(4 * PAGES);
    rig.node.delay_gets(SLOW_LOOKUP);
    rig.read(PAGES);
    let (gets_before, _) = rig.node.gets();
    let before = rig.stats();
    rig.read(2 * PAGES);
    let after = rig.stats();
    let lookups = after.l2_hits + after.l2_misses - before.l2_hits - before.l2_misses;
    assert_eq!(rig.node.gets().0 - gets_before, lookups, "every lookup went to the node");
    assert!(lookups >= PAGES, "{after:?}");
    assert_eq!(after.l2_cost_skips + after.l2_push_cost_skips, 0, "{after:?}");
    let cost = &after.nodes[0].cost;
    assert_eq!(cost.state, CostState::BackedOff, "{cost:?}");
    assert!(cost.reason.contains("waffle_grid_backoff=off"), "{cost:?}");
}

/// A clean close pushes every page of L1 even to a backed-off node: the back-off
/// spares steady state, and the close's pushes are what the next open reads
/// warm (a bench run had dropped 12,860 of 13,717 pages at its close).
#[test]
fn a_clean_close_pushes_all_of_l1_even_to_a_backed_off_node() {
    let mut rig = Rig::new(true);
    rig.read(4 * PAGES);
    rig.node.delay_gets(SLOW_LOOKUP);
    rig.read_until(CostState::BackedOff, 40);
    rig.read(2 * PAGES);
    assert_eq!(rig.state(), CostState::BackedOff);
    assert!(rig.stats().l2_push_cost_skips > 0, "pushes were backed off before the close: {:?}", rig.stats());
    let Rig { node, cache, .. } = rig;
    let sets_before = node.sets();
    let (_, report) = cache.close();
    assert!(report.l1_pages >= L1_PAGES - 1, "{report:?}");
    assert_eq!((report.pushed, report.dropped), (report.l1_pages, 0), "{report:?}");
    assert!(node.sets() - sets_before >= report.l1_pages, "every page of L1 reached the node");
}
