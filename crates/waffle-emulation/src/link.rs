//! Emulated links to the grid: a fixed round trip plus each request's bytes
//! on a shared, full-duplex link of a given bandwidth.
//!
//! The model, for one request sent at `start` with `tx` bytes out and `rx`
//! bytes back: the request waits for the outgoing direction to be free, takes
//! `tx` bytes of wire time, then one round trip (`rtt_us`: propagation, the
//! two network stacks, the switch and memcached's service), then waits for
//! the incoming direction and takes `rx` bytes of wire time. Each direction is
//! one queue (bytes are serialised: 16 threads fetching 16 KiB pages over
//! 1 Gb/s wait for each other, as on a real link). Wire bytes include
//! Ethernet/IP/TCP framing (78 bytes per 1448-byte segment).
//!
//! A [`crate::LinkProxy`] relays the real exchange (loopback memcached) and
//! holds each direction's bytes until the link would have carried them
//! ([`Link::send`], [`Link::reply`]): the real loopback time (memcached's
//! service included) hides inside the emulated round trip, unless the machine
//! is so loaded that it is longer.
//!
//! Never on by default; everything that uses a profile says "EMULATED".

use std::sync::Mutex;

use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkProfile {
    pub name: &'static str,
    /// Fixed round trip of a small request: network, stacks, memcached.
    pub rtt_us: u64,
    /// Link speed in each direction, bits per second.
    pub bits_per_s: u64,
    /// Where the numbers come from.
    pub source: &'static str,
}

/// The emulated profiles. `loopback` (the real local network) is not among them: it is no emulation.
pub const LINKS: [LinkProfile; 4] = [
    LinkProfile {
        name: "10gbe",
        rtt_us: 30,
        bits_per_s: 10_000_000_000,
        source: "typical 10 GbE: ~0.03 ms round trip; a 16 KiB get ~0.045 ms at 1 thread",
    },
    LinkProfile {
        name: "1gbe",
        rtt_us: 50,
        bits_per_s: 1_000_000_000,
        source: "seed 000 (ttcp): 0.15-0.20 ms for 16 KiB at 1 thread (here 0.19 ms); seed 002: ~1.1 ms under load",
    },
    LinkProfile {
        name: "100mb",
        rtt_us: 100,
        bits_per_s: 100_000_000,
        source: "seed 001: 16 KiB at 100 Mb/s is ~1.4 ms on the wire (here 1.5 ms at 1 thread)",
    },
    LinkProfile {
        name: "dolphin",
        rtt_us: 20,
        bits_per_s: 16_000_000_000,
        source: "seed 002 (Dolphin PCIe interconnect): gets stay under ~0.3 ms under load (here 0.03 ms at 1 thread, ~0.16 ms at 16)",
    },
];

/// Payload bytes per TCP segment and framing bytes per segment (Ethernet 38 incl. preamble and gap, IP 20, TCP 20).
const SEGMENT_PAYLOAD: u64 = 1448;
const SEGMENT_OVERHEAD: u64 = 78;

impl LinkProfile {
    /// A profile by name; `loopback` and the empty string are None (no emulation).
    pub fn by_name(name: &str) -> Result<Option<LinkProfile>, String> {
        match name {
            "" | "loopback" => Ok(None),
            _ => LINKS.iter().find(|p| p.name == name).copied().map(Some).ok_or_else(|| {
                let names: Vec<&str> = LINKS.iter().map(|p| p.name).collect();
                format!("unknown link profile (use loopback, {})", names.join(", "))
            }),
        }
    }

    /// Time `bytes` of payload take on the wire, framing included.
    pub fn wire(&self, bytes: usize) -> Duration {
        let bytes = bytes as u64;
        let framed = bytes + bytes.div_ceil(SEGMENT_PAYLOAD).max(1) * SEGMENT_OVERHEAD;
        Duration::from_nanos(framed * 8 * 1_000_000_000 / self.bits_per_s.max(1))
    }

    /// The emulated time of one request alone on the link.
    pub fn unloaded(&self, tx: usize, rx: usize) -> Duration {
        self.wire(tx) + Duration::from_micros(self.rtt_us) + self.wire(rx)
    }
}

struct Directions {
    /// When the outgoing and the incoming direction are next free.
    tx_free: Instant,
    rx_free: Instant,
}

/// One shared link (the database host's network interface towards the grid).
pub struct Link {
    profile: LinkProfile,
    state: Mutex<Directions>,
}

impl Link {
    pub fn new(profile: LinkProfile) -> Link {
        let now = Instant::now();
        Link { profile, state: Mutex::new(Directions { tx_free: now, rx_free: now }) }
    }

    pub fn profile(&self) -> LinkProfile {
        self.profile
    }

    /// Books a request sent at `start` with `tx` bytes out and `rx` back; returns when it completes on the link.
    pub fn book(&self, start: Instant, tx: usize, rx: usize) -> Instant {
        let mut d = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let tx_end = start.max(d.tx_free) + self.profile.wire(tx);
        d.tx_free = tx_end;
        let rx_start = (tx_end + Duration::from_micros(self.profile.rtt_us)).max(d.rx_free);
        let rx_end = rx_start + self.profile.wire(rx);
        d.rx_free = rx_end;
        rx_end
    }

    /// A proxy's first half of [`Link::book`]: `bytes` leaving the database
    /// host at `at` wait for the outgoing direction and take its wire time;
    /// returns when their last byte is on the wire (the node may have them
    /// then: the round trip is paid on the way back, [`Link::reply`]).
    pub fn send(&self, at: Instant, bytes: usize) -> Instant {
        let mut d = self.state.lock().unwrap_or_else(|p| p.into_inner());
        d.tx_free = at.max(d.tx_free) + self.profile.wire(bytes);
        d.tx_free
    }

    /// The second half: `bytes` a node sent at `at`, answering a request
    /// whose last byte [`Link::send`] put on the wire at `asked`, start back
    /// no earlier than one round trip after it, wait for the incoming
    /// direction and take its wire time; returns when they reach the
    /// database host. As in [`Link::book`], the node's real time (loopback
    /// and memcached's service) hides inside the round trip, which counts
    /// them; a lone request costs [`LinkProfile::unloaded`] unless the real
    /// exchange is longer.
    pub fn reply(&self, at: Instant, bytes: usize, asked: Instant) -> Instant {
        let mut d = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let start = at.max(asked + Duration::from_micros(self.profile.rtt_us)).max(d.rx_free);
        d.rx_free = start + self.profile.wire(bytes);
        d.rx_free
    }
}

/// Lowers this thread's timer slack to 1 us, once (the default 50 us would
/// add most of a 10 GbE round trip to every wait).
pub(crate) fn fine_timer_slack() {
    thread_local!(static SLACK_SET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) });
    SLACK_SET.with(|set| {
        if !set.get() {
            // SAFETY: prctl(PR_SET_TIMERSLACK) only changes this thread's timer slack.
            unsafe {
                libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong, 0, 0, 0);
            }
            set.set(true);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(LinkProfile::by_name("loopback"), Ok(None));
        assert_eq!(LinkProfile::by_name("1gbe").unwrap().unwrap().bits_per_s, 1_000_000_000);
        let e = LinkProfile::by_name("carrier-pigeon").unwrap_err();
        assert!(e.contains("100mb"), "{e}");
    }

    #[test]
    fn profiles_match_their_sources_at_one_thread() {
        let page = 16 * 1024 + 40;
        let get = |name: &str| LinkProfile::by_name(name).unwrap().unwrap().unloaded(60, page);
        let gbe = get("1gbe");
        assert!(gbe >= Duration::from_micros(150) && gbe <= Duration::from_micros(200), "{gbe:?}");
        let mb = get("100mb");
        assert!(mb >= Duration::from_micros(1300) && mb <= Duration::from_micros(1700), "{mb:?}");
        let ten = get("10gbe");
        assert!(ten >= Duration::from_micros(40) && ten <= Duration::from_micros(50), "{ten:?}");
        assert!(get("dolphin") < Duration::from_micros(300));
    }

    #[test]
    fn a_shared_link_serialises_bytes() {
        let p = LinkProfile { name: "t", rtt_us: 100, bits_per_s: 8_000_000, source: "" }; // 1 byte per us
        let link = Link::new(p);
        let t0 = Instant::now();
        // Four replies of ~1000 us of wire each, sent at once: the last is done after ~4 of them.
        let ends: Vec<Instant> = (0..4).map(|_| link.book(t0, 0, 1000)).collect();
        let last = ends[3] - t0;
        assert!(last >= Duration::from_micros(4 * 1000 + 100), "{last:?}");
        // Sent alone, much later: only its own time.
        let later = t0 + Duration::from_secs(1);
        let alone = link.book(later, 0, 1000) - later;
        assert!(alone < Duration::from_micros(1300), "{alone:?}");
    }

    #[test]
    fn send_and_reply_split_a_request_and_share_the_directions() {
        let p = LinkProfile { name: "t", rtt_us: 100, bits_per_s: 8_000_000, source: "" }; // 1 byte per us
        let link = Link::new(p);
        let t0 = Instant::now();
        let sent = link.send(t0, 1000);
        assert_eq!(sent - t0, p.wire(1000));
        // The node answers at once: the reply pays the round trip from the request's last byte.
        assert_eq!(link.reply(sent, 1000, sent) - t0, p.unloaded(1000, 1000));
        // A node slower than the round trip: its own time counts, the round trip hides in it.
        let late = sent + Duration::from_millis(5);
        assert_eq!(link.reply(late, 1000, sent) - late, p.wire(1000));
        // A second send at the same instant queues behind the first one's bytes.
        assert_eq!(link.send(t0, 1000) - sent, p.wire(1000));
    }
}
