//! One relayed connection of the link proxy: both directions in one thread,
//! on non-blocking sockets and `ppoll`. link_proxy.rs starts one per
//! connection; this file knows nothing of the proxy.
//!
//! Bytes towards the node are booked on the link ([`Link::send`]: when their
//! last byte is on the wire) and written at once; bytes back are held until
//! the round trip from the last request byte and their own wire time are over
//! ([`Link::reply`]; the node's real time hides in the round trip, as in the
//! in-process model). Writing requests early changes no reply's time (a reply
//! waits for the request's booked end plus the round trip) and saves a
//! wake-up per request, which the proxy's host pays in CPU. Reading goes on while earlier bytes wait, so a
//! pipelined stream (the pusher's `ms ... q` runs) pays the round trip once,
//! as on a real link, not once per read. Each direction holds at most
//! [`MAX_QUEUED_BYTES`]; past that it stops reading and TCP pushes back.
//!
//! The end of either side's stream (or an error) ends the pipe once the bytes
//! already read from that side are delivered: both sockets close. memcached's
//! clients never half-close, so nothing is lost by not relaying a half-close.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::link::{fine_timer_slack, Link};

/// Largest read: a few TCP segments' worth keeps the wire time per chunk close to the bytes' own.
const CHUNK_BYTES: usize = 64 * 1024;
/// Bytes one direction may hold before it stops reading.
pub const MAX_QUEUED_BYTES: usize = 1 << 20;
/// How often an idle relay thread (a pipe, the proxy's acceptor) looks at the stop flag.
pub const POLL_MS: u64 = 50;

/// Relays `client` <-> `node` through `link` until either side ends or `stop` is set.
pub(crate) fn run(client: TcpStream, node: TcpStream, link: &Link, stop: &AtomicBool) -> io::Result<()> {
    fine_timer_slack();
    for s in [&client, &node] {
        s.set_nonblocking(true)?;
        // Small requests go out at once, as the grid client's own sockets do.
        s.set_nodelay(true)?;
    }
    let mut out = Direction::new(Way::Send);
    let mut back = Direction::new(Way::Reply);
    let mut buf = vec![0u8; CHUNK_BYTES];
    // When the last request byte went out on the emulated wire: replies pay the round trip from there.
    let mut asked = Instant::now();
    while !stop.load(Ordering::Relaxed) && !out.finished() && !back.finished() {
        let (client_ready, node_ready) = wait(&client, &node, &out, &back)?;
        if client_ready && out.wants_read() {
            out.read(&client, link, &mut buf, &mut asked)?;
        }
        if node_ready && back.wants_read() {
            back.read(&node, link, &mut buf, &mut asked)?;
        }
        out.write_due(&node)?;
        back.write_due(&client)?;
    }
    Ok(())
}

#[derive(Clone, Copy)]
enum Way {
    /// Client to node.
    Send,
    /// Node to client.
    Reply,
}

struct Chunk {
    due: Instant,
    bytes: Vec<u8>,
    written: usize,
}

/// One direction's bytes in flight on the emulated link.
struct Direction {
    way: Way,
    queue: VecDeque<Chunk>,
    queued_bytes: usize,
    ended: bool,
}

impl Direction {
    fn new(way: Way) -> Direction {
        Direction { way, queue: VecDeque::new(), queued_bytes: 0, ended: false }
    }

    fn wants_read(&self) -> bool {
        !self.ended && self.queued_bytes < MAX_QUEUED_BYTES
    }

    /// Its source ended and everything read from it was delivered.
    fn finished(&self) -> bool {
        self.ended && self.queue.is_empty()
    }

    fn next_due(&self) -> Option<Instant> {
        self.queue.front().map(|c| c.due)
    }

    /// Reads what `from` has (up to the bound), each read stamped with its
    /// delivery time; `asked`: when the last request byte went out (set by
    /// sends, used by replies).
    fn read(&mut self, from: &TcpStream, link: &Link, buf: &mut [u8], asked: &mut Instant) -> io::Result<()> {
        while self.wants_read() {
            match (&*from).read(buf) {
                Ok(0) => self.ended = true,
                Ok(n) => {
                    let now = Instant::now();
                    let due = match self.way {
                        Way::Send => {
                            *asked = link.send(now, n);
                            now
                        }
                        Way::Reply => link.reply(now, n, *asked),
                    };
                    self.queue.push_back(Chunk { due, bytes: buf[..n].to_vec(), written: 0 });
                    self.queued_bytes += n;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Writes to `to` every chunk whose time has come, as far as `to` takes them.
    fn write_due(&mut self, to: &TcpStream) -> io::Result<()> {
        let now = Instant::now();
        while let Some(c) = self.queue.front_mut() {
            if c.due > now {
                return Ok(());
            }
            match (&*to).write(&c.bytes[c.written..]) {
                Ok(n) => {
                    c.written += n;
                    if c.written == c.bytes.len() {
                        self.queued_bytes -= c.bytes.len();
                        self.queue.pop_front();
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// Waits until a side has bytes to read (where a direction wants them), a
/// due chunk can be written, or the next chunk falls due (at most
/// [`POLL_MS`]); returns whether the client and the node are ready.
fn wait(client: &TcpStream, node: &TcpStream, out: &Direction, back: &Direction) -> io::Result<(bool, bool)> {
    let now = Instant::now();
    let due = |d: &Direction| d.next_due().is_some_and(|t| t <= now);
    let events =
        |read: bool, write: bool| (if read { libc::POLLIN } else { 0 }) | (if write { libc::POLLOUT } else { 0 });
    let (client_events, node_events) = (events(out.wants_read(), due(back)), events(back.wants_read(), due(out)));
    // A descriptor with nothing to wait for is left out (-1), so a peer's hang-up cannot spin the loop.
    let fd = |s: &TcpStream, ev: libc::c_short| if ev == 0 { -1 } else { s.as_raw_fd() };
    let mut fds = [
        libc::pollfd { fd: fd(client, client_events), events: client_events, revents: 0 },
        libc::pollfd { fd: fd(node, node_events), events: node_events, revents: 0 },
    ];
    let next = [out.next_due(), back.next_due()].into_iter().flatten().filter(|t| *t > now).min();
    let timeout = next.map_or(Duration::from_millis(POLL_MS), |t| (t - now).min(Duration::from_millis(POLL_MS)));
    let ts = libc::timespec { tv_sec: timeout.as_secs() as libc::time_t, tv_nsec: timeout.subsec_nanos() as _ };
    // SAFETY: two valid pollfds (fd -1 is ignored), a valid timeout, no signal mask.
    let n = unsafe { libc::ppoll(fds.as_mut_ptr(), 2, &ts, std::ptr::null()) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted { Ok((false, false)) } else { Err(e) };
    }
    let ready = |p: &libc::pollfd| p.fd >= 0 && p.revents != 0;
    Ok((ready(&fds[0]), ready(&fds[1])))
}
