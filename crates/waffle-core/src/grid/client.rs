//! The grid: keys mapped to nodes by ketama, requests as meta commands.
//!
//! Multi-key calls group keys by node, write every node's pipeline first and
//! then read every node's replies, so a call takes about one round trip of the
//! slowest node rather than the sum of them. A down node is never remapped:
//! its keys are misses until it is back (the disk has every page).
//!
//! The process's prober thread (prober.rs) sends an `mn` to each node that
//! has seen no request for [`GridOptions::idle_probe_ms`] (node.rs,
//! `probe_if_idle`): without it a node nobody asks stays "up" after it died.
//! A grid is enrolled while it lives; the prober talks to its configured nodes only.

use super::clock::{Clock, SystemClock};
use super::disk_cost::DiskCost;
use super::health::Admission;
use super::ketama::Continuum;
use super::memory::GridMemory;
use super::node::{Exchange, Node};
use super::options::GridOptions;
use super::outcome::{FaultKind, Fetch, ItemFate, NodeStatus, StoreReport};
use super::prober::Enrolment;
use super::protocol::{self, Reply, MAX_VALUE_BYTES};
use super::spec::NodeSpec;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The L2 client. `Send + Sync`: share one `Grid` between threads.
///
/// `C` is the clock of the nodes' up/down decisions ([`Grid::with_clock`]):
/// the real one but in tests.
pub struct Grid<C: Clock = SystemClock> {
    /// Shared with the prober thread (which holds them only during a probe).
    nodes: Arc<Vec<Node<C>>>,
    continuum: Continuum,
    opts: GridOptions,
    /// The single-page disk reads of the cache this grid serves: what a hit saves.
    disk: DiskCost,
    /// Probed when nobody asks them ([`Grid::new`] only: a test clock has none).
    prober: Option<Enrolment>,
}

/// How a pipeline's replies ended.
struct PipelineEnd {
    /// Whether the connection may be reused (no reply that leaves its state in doubt).
    reusable: bool,
}

impl Grid {
    /// Never connects and never fails. A host that does not resolve makes a node
    /// that is always down (one warning line on stderr); it keeps its place on
    /// the ketama ring, so other nodes keep their keys.
    /// Enrols its nodes with the process's prober unless `opts.idle_probe_ms` is 0.
    pub fn new(nodes: Vec<NodeSpec>, opts: GridOptions) -> Grid {
        let mut grid = Grid::with_clock(nodes, opts, SystemClock);
        // The prober's thread takes its list's lock: a fork must not copy it held (fork.rs).
        crate::fork::hold_across_forks();
        grid.prober = super::prober::enrol(&grid.nodes, grid.opts.idle_probe_ms);
        grid
    }
}

impl<C: Clock> Grid<C> {
    /// As [`Grid::new`], the nodes' up/down decisions on `clock` (each node a clone of it).
    pub fn with_clock(nodes: Vec<NodeSpec>, opts: GridOptions, clock: C) -> Grid<C>
    where
        C: Clone,
    {
        let opts = opts.normalized();
        let continuum = Continuum::new(&nodes);
        let nodes = Arc::new(nodes.iter().map(|spec| Node::new(spec, &opts, clock.clone())).collect());
        Grid { nodes, continuum, opts, disk: DiskCost::default(), prober: None }
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    pub fn options(&self) -> &GridOptions {
        &self.opts
    }

    /// The node of `key` (libmemcached's weighted ketama), None if there is no node.
    pub fn node_index(&self, key: &[u8]) -> Option<usize> {
        self.continuum.node_for_key(key)
    }

    /// The exclusive fetch: `mg <key> v q` + `md <key> q` + `mn` in one write,
    /// one round trip; the value, and the item deleted (its memory freed), so
    /// a page that comes back to L1 leaves L2.
    pub fn take(&self, key: &[u8]) -> Fetch {
        self.take_with(key, <[u8]>::to_vec)
    }

    /// As [`Grid::take`], `open` given the value where it lies in the
    /// connection's buffer (no copy, no allocation): a hit is what it returns.
    pub fn take_with<R>(&self, key: &[u8], open: impl FnOnce(&[u8]) -> R) -> Fetch<R> {
        self.fetch_one(key, true, open)
    }

    /// A lookup of `key` answered (`hit` or not) in `took`, link included:
    /// what asking its node costs (grid::cost). The caller says which lookups
    /// count: those it would make anyway, not its exploratory samples.
    pub fn note_lookup(&self, key: &[u8], took: std::time::Duration, hit: bool) {
        if let Some(i) = self.node_index(key) {
            self.nodes[i].note_lookup(took, hit, &self.disk);
            if hit {
                self.nodes[i].note_hit(key, took);
            }
        }
    }

    /// The node of `key` by its configured "host:port" (comparable across grids), None without nodes.
    pub fn node_label(&self, key: &[u8]) -> Option<&str> {
        self.node_index(key).map(|i| self.nodes[i].label())
    }

    /// Whether a lookup of `key` should go to its node: false while the node
    /// costs more than the disk read it would save (backed off, not sampled).
    pub fn admits_lookup(&self, key: &[u8]) -> bool {
        self.all_on() || self.node_index(key).is_none_or(|i| self.nodes[i].admits_lookup(key))
    }

    /// Whether a read-ahead window may ask `key`'s node for it (not while it is backed off).
    pub fn admits_read_ahead(&self, key: &[u8]) -> bool {
        self.all_on() || self.node_index(key).is_none_or(|i| self.nodes[i].admits_read_ahead())
    }

    /// Whether the evicted page of `key` should be pushed to its node (as for lookups).
    pub fn admits_push(&self, key: &[u8]) -> bool {
        self.all_on() || self.node_index(key).is_none_or(|i| self.nodes[i].admits_push(key))
    }

    /// Whether a warm's page of `key` should be pushed: as [`Grid::admits_push`], but not
    /// declined by a node's trial (see `NodeCost::admits_warm_push`).
    pub fn admits_warm_push(&self, key: &[u8]) -> bool {
        self.all_on() || self.node_index(key).is_none_or(|i| self.nodes[i].admits_warm_push(key))
    }

    /// Whether `key`'s node takes only a sample of pages now (backed off or on trial).
    pub fn samples(&self, key: &[u8]) -> bool {
        !self.all_on() && self.node_index(key).is_some_and(|i| self.nodes[i].samples())
    }

    /// Whether some node takes only a sample of pages now.
    pub fn samples_any(&self) -> bool {
        !self.all_on()
    }

    /// No node is backed off: every request is admitted without hashing its key
    /// to its node (the admits above run on every miss, eviction and window page).
    fn all_on(&self) -> bool {
        self.nodes.iter().all(|n| n.admits_read_ahead())
    }

    /// A single page read from the disk in `took`: what a grid hit saves.
    pub fn note_disk_read(&self, took: std::time::Duration) {
        self.disk.record(took);
    }

    /// `mg <key> v`: the value, the item left as it is.
    pub fn get(&self, key: &[u8]) -> Fetch {
        self.get_with(key, <[u8]>::to_vec)
    }

    /// As [`Grid::get`], `open` given the value in place (as [`Grid::take_with`]).
    pub fn get_with<R>(&self, key: &[u8], open: impl FnOnce(&[u8]) -> R) -> Fetch<R> {
        self.fetch_one(key, false, open)
    }

    /// One key's fetch (`take`: exclusive), `open` run on the value in place.
    fn fetch_one<R>(&self, key: &[u8], take: bool, open: impl FnOnce(&[u8]) -> R) -> Fetch<R> {
        if !checked_key(key) {
            return Fetch::Fault(FaultKind::Protocol);
        }
        let Some(node) = self.node_index(key).map(|i| &self.nodes[i]) else {
            return Fetch::Skipped;
        };
        let admission = node.admit();
        if admission == Admission::Skip {
            return Fetch::Skipped;
        }
        let mut open = Some(open);
        let mut request = Vec::with_capacity(2 * key.len() + 24);
        if take {
            protocol::encode_take(&mut request, key, None);
            protocol::encode_noop(&mut request);
        } else {
            protocol::encode_get(&mut request, key, None);
        }
        let mut exchange = match node.begin(admission, &request) {
            Ok(exchange) => exchange,
            Err(kind) => return Fetch::Fault(kind),
        };
        if take {
            // `VA` and the value, or the delete's `NF`, then `MN`. A value and an
            // `NF` both: another client deleted the item between the two commands.
            let mut fetch = Fetch::Miss;
            let outcome = read_pipeline(&mut exchange, |reply| match reply {
                Reply::Value { data, .. } if matches!(fetch, Fetch::Miss) => {
                    let open = open.take().expect("one value per take: later ones are refused above");
                    fetch = Fetch::Hit(open(data));
                    Ok(true)
                }
                Reply::NotFound { .. } | Reply::End => Ok(true),
                Reply::ServerError(_) | Reply::ClientError(_) | Reply::Error => Err(FaultKind::ServerError),
                _ => Err(FaultKind::Protocol),
            });
            return match outcome {
                Ok(end) => {
                    exchange.finish(end.reusable);
                    fetch
                }
                Err(kind) => Fetch::Fault(exchange.fail(kind)),
            };
        }
        let deadline = exchange.deadline;
        let reply = exchange.conn.next_reply(deadline, |reply| match reply {
            Reply::Value { data, .. } => {
                let open = open.take().expect("one reply per get");
                Ok(Fetch::Hit(open(data)))
            }
            Reply::End => Ok(Fetch::Miss),
            Reply::ServerError(_) | Reply::ClientError(_) | Reply::Error => Err(FaultKind::ServerError),
            _ => Err(FaultKind::Protocol),
        });
        match reply.and_then(|r| r) {
            Ok(fetch) => {
                exchange.finish(true);
                fetch
            }
            Err(kind) => Fetch::Fault(exchange.fail(kind)),
        }
    }

    /// Many [`Grid::take`] at once: per node one pipeline of
    /// `mg <key> v q O<i>` + `md <key> q O<i>` ended by `mn` (a hit answers
    /// the value, a miss the delete's `NF`; the opaque says which key a reply
    /// answers). Results are in `keys` order. A key given twice is a hit at
    /// most once (the first fetch deletes it).
    pub fn take_many(&self, keys: &[&[u8]]) -> Vec<Fetch> {
        self.fetch_many(keys, true)
    }

    /// As [`Grid::take_many`], but the items stay (plain `mg k v q`):
    /// for read-ahead of a scan, which should not take pages out of the grid.
    pub fn get_many(&self, keys: &[&[u8]]) -> Vec<Fetch> {
        self.fetch_many(keys, false)
    }

    fn fetch_many(&self, keys: &[&[u8]], take: bool) -> Vec<Fetch> {
        let mut results = vec![Fetch::Miss; keys.len()];
        let mut per_node: Vec<Vec<usize>> = vec![Vec::new(); self.nodes.len()];
        for (i, key) in keys.iter().enumerate() {
            if !checked_key(key) {
                results[i] = Fetch::Fault(FaultKind::Protocol);
            } else if let Some(node) = self.node_index(key) {
                per_node[node].push(i);
            } else {
                results[i] = Fetch::Skipped;
            }
        }

        // Write every node's pipeline, then read every node's replies.
        let mut in_flight: Vec<(Exchange<'_, C>, &[usize])> = Vec::new();
        for (node, indexes) in self.nodes.iter().zip(&per_node) {
            if indexes.is_empty() {
                continue;
            }
            let admission = node.admit();
            if admission == Admission::Skip {
                indexes.iter().for_each(|&i| results[i] = Fetch::Skipped);
                continue;
            }
            let mut request = Vec::with_capacity(indexes.len() * if take { 96 } else { 48 });
            for (opaque, &i) in indexes.iter().enumerate() {
                if take {
                    protocol::encode_take(&mut request, keys[i], Some(opaque as u32));
                } else {
                    protocol::encode_get(&mut request, keys[i], Some(opaque as u32));
                }
            }
            protocol::encode_noop(&mut request);
            match node.begin(admission, &request) {
                Ok(exchange) => in_flight.push((exchange, indexes)),
                Err(kind) => indexes.iter().for_each(|&i| results[i] = Fetch::Fault(kind)),
            }
        }
        for (mut exchange, indexes) in in_flight {
            let mut answered = vec![false; indexes.len()];
            let mut next_opaque = 0usize;
            let mut server_error = false;
            let outcome = read_pipeline(&mut exchange, |reply| match reply {
                Reply::Value { data, flags } => {
                    // Replies come in request order: a value answers a key after the last one answered.
                    match opaque_of(flags) {
                        Some(o) if (next_opaque..indexes.len()).contains(&o) && !answered[o] => {
                            answered[o] = true;
                            next_opaque = o; // its own delete's NF may follow (another client deleted it)
                            results[indexes[o]] = Fetch::Hit(data.to_vec());
                            Ok(true)
                        }
                        _ => Err(FaultKind::Protocol),
                    }
                }
                Reply::NotFound { flags } if take => match opaque_of(flags) {
                    // The delete of a key the get found nothing for: a miss.
                    Some(o) if (next_opaque..indexes.len()).contains(&o) => {
                        answered[o] = true;
                        next_opaque = o + 1;
                        Ok(true)
                    }
                    _ => Err(FaultKind::Protocol),
                },
                Reply::End => Ok(true), // a miss, had quiet mode not hidden it
                Reply::ServerError(_) => {
                    server_error = true;
                    Ok(true)
                }
                Reply::ClientError(_) | Reply::Error => {
                    server_error = true;
                    Ok(false)
                }
                _ => Err(FaultKind::Protocol),
            });
            let unanswered = |kind: Option<FaultKind>, results: &mut Vec<Fetch>| {
                for (o, &i) in indexes.iter().enumerate() {
                    if !answered[o] {
                        results[i] = kind.map_or(Fetch::Miss, Fetch::Fault);
                    }
                }
            };
            match outcome {
                Ok(end) => {
                    // Which key a SERVER_ERROR was about is not said: none of the unanswered is a sure miss.
                    unanswered(server_error.then_some(FaultKind::ServerError), &mut results);
                    exchange.finish(end.reusable);
                }
                // Values already received stay hits: they are complete, and now expired on the node.
                Err(kind) => unanswered(Some(exchange.fail(kind)), &mut results),
            }
        }
        results
    }

    /// Stores items with pipelined quiet sets: per node one write of
    /// `ms <key> <len> T<ttl> q` + data for each item, then `mn`, then the
    /// replies up to `MN`; any reply before `MN` is one item that failed.
    /// At most one round trip per node; nodes are written first, then read.
    pub fn store_many(&self, items: &[(&[u8], &[u8])]) -> StoreReport {
        StoreReport::of(&self.store_each(items))
    }

    /// As [`Grid::store_many`], with what became of each item, in `items` order.
    pub fn store_each(&self, items: &[(&[u8], &[u8])]) -> Vec<ItemFate> {
        let mut fates = vec![ItemFate::NodeDown; items.len()];
        let mut per_node: Vec<Vec<usize>> = vec![Vec::new(); self.nodes.len()];
        for (i, (key, data)) in items.iter().enumerate() {
            if !checked_key(key) || data.len() > MAX_VALUE_BYTES {
                fates[i] = ItemFate::Refused; // a value we could not read back is not worth storing
            } else if let Some(node) = self.node_index(key) {
                per_node[node].push(i);
            }
        }

        // Each node's exchange is timed (its write, then its replies): what a
        // push costs on both ends, per page, for the cost back-off (grid::cost).
        let mut in_flight: Vec<(Exchange<'_, C>, &[usize], std::time::Duration)> = Vec::new();
        for (node, indexes) in self.nodes.iter().zip(&per_node) {
            if indexes.is_empty() {
                continue;
            }
            let admission = node.admit();
            if admission == Admission::Skip {
                continue; // NodeDown already
            }
            let write_start = Instant::now();
            let bytes: usize = indexes.iter().map(|&i| items[i].0.len() + items[i].1.len() + 32).sum();
            let mut request = Vec::with_capacity(bytes + 4);
            for &i in indexes {
                protocol::encode_set(&mut request, items[i].0, items[i].1, self.opts.ttl_s);
            }
            protocol::encode_noop(&mut request);
            match node.begin(admission, &request) {
                Ok(exchange) => in_flight.push((exchange, indexes, write_start.elapsed())),
                // Not connected, or the request not written whole: the node is unreachable.
                Err(_) => indexes.iter().for_each(|&i| fates[i] = ItemFate::NodeDown),
            }
        }
        for (mut exchange, indexes, wrote) in in_flight {
            let read_start = Instant::now();
            let node = exchange.node();
            let mut failures = 0usize;
            let outcome = read_pipeline(&mut exchange, |reply| {
                let reusable = match reply {
                    Reply::Done { .. } => return Ok(true), // not sent in quiet mode; harmless
                    Reply::NotStored { .. } | Reply::Exists { .. } | Reply::NotFound { .. } => true,
                    Reply::ServerError(_) => true,
                    // e.g. "CLIENT_ERROR bad data chunk" then "ERROR": one item, two lines.
                    Reply::ClientError(_) | Reply::Error => false,
                    _ => return Err(FaultKind::Protocol),
                };
                failures += 1;
                Ok(reusable)
            });
            match outcome {
                Ok(end) => {
                    // Quiet replies do not name their item: the last `failed` of the pipeline take the blame.
                    let failed = failures.min(indexes.len());
                    let (stored, refused) = indexes.split_at(indexes.len() - failed);
                    stored.iter().for_each(|&i| fates[i] = ItemFate::Stored);
                    refused.iter().for_each(|&i| fates[i] = ItemFate::Refused);
                    exchange.finish(end.reusable);
                    node.note_push(stored.len() as u64, wrote + read_start.elapsed(), &self.disk);
                }
                Err(kind) => {
                    // Some items may be stored, but none is known to be: count them all lost.
                    exchange.fail(kind);
                    indexes.iter().for_each(|&i| fates[i] = ItemFate::Lost);
                }
            }
        }
        fates
    }

    /// `md <key>`. True when the key is known not to be on its node any more
    /// (deleted, or not there); false when that is unknown (node down, fault).
    pub fn delete(&self, key: &[u8]) -> bool {
        if !checked_key(key) {
            return false;
        }
        let Some(node) = self.node_index(key).map(|i| &self.nodes[i]) else {
            return false;
        };
        let admission = node.admit();
        if admission == Admission::Skip {
            return false;
        }
        let mut request = Vec::with_capacity(key.len() + 8);
        protocol::encode_delete(&mut request, key);
        let Ok(mut exchange) = node.begin(admission, &request) else {
            return false;
        };
        let deadline = exchange.deadline;
        let reply = exchange.conn.next_reply(deadline, |reply| match reply {
            Reply::Done { .. } | Reply::NotFound { .. } => Ok(()),
            Reply::ServerError(_) | Reply::ClientError(_) | Reply::Error => Err(FaultKind::ServerError),
            _ => Err(FaultKind::Protocol),
        });
        match reply.and_then(|r| r) {
            Ok(()) => {
                exchange.finish(true);
                true
            }
            Err(kind) => {
                exchange.fail(kind);
                false
            }
        }
    }

    /// Counts, on `key`'s node, a miss of a page the cache had pushed there.
    pub fn note_presence_miss(&self, key: &[u8]) {
        if let Some(i) = self.node_index(key) {
            self.nodes[i].note_presence_miss();
        }
    }

    /// The memory of the nodes that are up, as far as they say it (memcached's
    /// `limit_maxbytes`), asking those not asked in the last
    /// [`super::memory::REFRESH`]: for the stats, never on a read.
    pub fn memory(&self) -> GridMemory {
        let known: Vec<u64> = self.nodes.iter().filter_map(Node::memory_bytes).collect();
        GridMemory { bytes: known.iter().sum(), nodes: self.nodes.len(), known_nodes: known.len() }
    }

    pub fn node_status(&self) -> Vec<NodeStatus> {
        self.nodes.iter().map(|n| n.status(&self.disk)).collect()
    }

    /// Idle pooled connections per node (for tests and tools).
    pub fn idle_connections(&self) -> Vec<usize> {
        self.nodes.iter().map(Node::idle_count).collect()
    }

    /// Probes every node idle for `idle` once, now (what the prober thread
    /// does each tick; tests on a clock of their own call it). How many went.
    pub fn probe_idle_nodes(&self, idle: Duration) -> usize {
        self.nodes.iter().filter(|n| n.probe_if_idle(idle)).count()
    }
}

/// Reads replies up to `MN`, handing each other one to `on_reply`, which says
/// whether the connection stays reusable (or that the reply is a protocol fault).
fn read_pipeline<C: Clock>(
    exchange: &mut Exchange<'_, C>,
    mut on_reply: impl FnMut(Reply<'_>) -> Result<bool, FaultKind>,
) -> Result<PipelineEnd, FaultKind> {
    let deadline = exchange.deadline;
    let mut reusable = true;
    // Each reply consumes bytes, and `next_reply` is bounded by the deadline: the loop ends.
    loop {
        let step = exchange.conn.next_reply(deadline, |reply| match reply {
            Reply::Noop => Ok(None),
            other => on_reply(other).map(Some),
        })??;
        match step {
            None => return Ok(PipelineEnd { reusable }),
            Some(ok) => reusable &= ok,
        }
    }
}

/// The opaque (`O<i>`) a quiet pipeline's reply carries: which request it answers.
fn opaque_of(flags: &[u8]) -> Option<usize> {
    protocol::flag(flags, b'O').and_then(protocol::parse_u32).map(|o| o as usize)
}

/// Keys go into the protocol as they are: one with a space or a line break
/// would desynchronize the stream. A caller bug, loud in debug builds.
fn checked_key(key: &[u8]) -> bool {
    let valid = protocol::is_valid_key(key);
    debug_assert!(valid, "grid key must be 1..=250 printable ASCII bytes without space: {key:?}");
    valid
}
