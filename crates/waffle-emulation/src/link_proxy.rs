//! An EMULATED link as a TCP proxy: a listener on 127.0.0.1 in front of one
//! memcached node, whose every connection is relayed through a shared
//! [`Link`] (its round trip and bandwidth). The database's grid client talks
//! to the proxy's address as to any node and knows nothing of the emulation.
//!
//! ```text
//!  grid client ──> 127.0.0.1:proxy ──[Link::send: the request's wire time]──────────────> node
//!              <──                 <──[Link::reply: the round trip, the reply's wire time]──
//! ```
//!
//! The real exchange with the node (loopback, memcached's service) hides
//! inside the round trip, as in the in-process model; the two loopback hops
//! between the client and the proxy, and the proxy's wake-ups, do not.
//!
//! Bounded: at most `max_connections` relayed at once (one thread each,
//! [`crate::link_pipe`]); a connection past the bound waits in the listen
//! backlog until one ends, as on a busy server. Dropping the proxy stops it:
//! the listener closes and every relayed connection closes within
//! [`link_pipe::POLL_MS`].

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::link::Link;
use crate::link_pipe::{self, POLL_MS};

/// Connections relayed at once by default: the grid client pools 16 per node
/// and opens a few more under load.
pub const MAX_CONNECTIONS: usize = 64;
/// How long connecting to the node may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// A running proxy; stopped when dropped.
pub struct LinkProxy {
    addr: SocketAddr,
    upstream: SocketAddr,
    stop: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
    pipes: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl LinkProxy {
    /// A proxy on a free 127.0.0.1 port relaying to `upstream` (a loopback
    /// address: the tools send traffic nowhere else) through `link`.
    pub fn start(upstream: SocketAddr, link: Arc<Link>) -> io::Result<LinkProxy> {
        LinkProxy::start_bounded(upstream, link, MAX_CONNECTIONS)
    }

    /// As [`LinkProxy::start`], with at most `max_connections` relayed at once.
    pub fn start_bounded(upstream: SocketAddr, link: Arc<Link>, max_connections: usize) -> io::Result<LinkProxy> {
        if !upstream.ip().is_loopback() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{upstream}: not a loopback address")));
        }
        let listener = TcpListener::bind(("127.0.0.1", 0))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let pipes = Arc::new(Mutex::new(Vec::new()));
        let acceptor = Acceptor {
            listener,
            upstream,
            link,
            stop: Arc::clone(&stop),
            pipes: Arc::clone(&pipes),
            active: Arc::new(AtomicUsize::new(0)),
            max_connections: max_connections.max(1),
        };
        let acceptor = std::thread::Builder::new().name("link-proxy".into()).spawn(move || acceptor.run())?;
        Ok(LinkProxy { addr, upstream, stop, acceptor: Some(acceptor), pipes })
    }

    /// Where the database connects instead of the node.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The node behind it.
    pub fn upstream(&self) -> SocketAddr {
        self.upstream
    }
}

impl Drop for LinkProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
        let pipes = std::mem::take(&mut *self.pipes.lock().unwrap_or_else(|p| p.into_inner()));
        for p in pipes {
            let _ = p.join();
        }
    }
}

/// The listener's thread: accepts, connects to the node, hands both to a pipe thread.
struct Acceptor {
    listener: TcpListener,
    upstream: SocketAddr,
    link: Arc<Link>,
    stop: Arc<AtomicBool>,
    pipes: Arc<Mutex<Vec<JoinHandle<()>>>>,
    active: Arc<AtomicUsize>,
    max_connections: usize,
}

impl Acceptor {
    fn run(self) {
        while !self.stop.load(Ordering::Relaxed) {
            if self.active.load(Ordering::Acquire) >= self.max_connections {
                // Full: the next connection waits in the backlog until a pipe ends.
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            if !readable(&self.listener) {
                continue;
            }
            match self.listener.accept() {
                Ok((client, _)) => self.relay(client),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted => {}
                // Out of descriptors or the like: wait rather than spin.
                Err(_) => std::thread::sleep(Duration::from_millis(POLL_MS)),
            }
        }
    }

    /// Connects `client` to the node and starts its pipe; a node that does
    /// not answer closes `client`, as the node itself would.
    fn relay(&self, client: TcpStream) {
        let Ok(node) = TcpStream::connect_timeout(&self.upstream, CONNECT_TIMEOUT) else { return };
        let mut pipes = self.pipes.lock().unwrap_or_else(|p| p.into_inner());
        pipes.retain(|p| !p.is_finished());
        self.active.fetch_add(1, Ordering::AcqRel);
        let (link, stop, active) = (Arc::clone(&self.link), Arc::clone(&self.stop), Arc::clone(&self.active));
        let spawned = std::thread::Builder::new().name("link-pipe".into()).spawn(move || {
            let _ = link_pipe::run(client, node, &link, &stop);
            active.fetch_sub(1, Ordering::AcqRel);
        });
        match spawned {
            Ok(handle) => pipes.push(handle),
            Err(_) => {
                self.active.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }
}

/// Waits up to [`POLL_MS`] for a connection to accept.
fn readable(listener: &TcpListener) -> bool {
    let mut fds = [libc::pollfd { fd: listener.as_raw_fd(), events: libc::POLLIN, revents: 0 }];
    // SAFETY: one valid pollfd for a descriptor the listener owns.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), 1, POLL_MS as libc::c_int) };
    n > 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::LinkProfile;
    use std::io::{Read, Write};
    use std::time::Instant;
    use waffle_nodes::Node;

    fn node() -> Node {
        Node::start(16).expect("memcached (apt-get install memcached, or set WAFFLE_MEMCACHED)")
    }

    fn node_addr(n: &Node) -> SocketAddr {
        n.addr().parse().unwrap()
    }

    fn connect(addr: SocketAddr) -> TcpStream {
        let s = TcpStream::connect(addr).unwrap();
        s.set_nodelay(true).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s
    }

    /// Reads until `buf` ends with `end` (bounded by the stream's read timeout).
    fn read_until(s: &mut TcpStream, end: &[u8]) -> Vec<u8> {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 65536];
        while !buf.ends_with(end) {
            let n = s.read(&mut chunk).expect("reply within the timeout");
            assert!(n > 0, "closed before the reply ended: {:?}", String::from_utf8_lossy(&buf));
            buf.extend_from_slice(&chunk[..n]);
        }
        buf
    }

    fn set(s: &mut TcpStream, key: &str, value: &[u8]) {
        s.write_all(format!("ms {key} {}\r\n", value.len()).as_bytes()).unwrap();
        s.write_all(value).unwrap();
        s.write_all(b"\r\n").unwrap();
        assert_eq!(read_until(s, b"\r\n"), b"HD\r\n");
    }

    /// `mg KEY v`: the value's bytes (the reply is `VA <len>`, the value, CRLF).
    fn get(s: &mut TcpStream, key: &str, len: usize) -> Vec<u8> {
        s.write_all(format!("mg {key} v\r\n").as_bytes()).unwrap();
        let head = format!("VA {len}\r\n");
        let mut reply = vec![0u8; head.len() + len + 2];
        s.read_exact(&mut reply).expect("the whole reply within the timeout");
        assert!(reply.starts_with(head.as_bytes()), "{:?}", String::from_utf8_lossy(&reply[..head.len()]));
        reply[head.len()..head.len() + len].to_vec()
    }

    fn value(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
    }

    #[test]
    fn a_get_through_the_proxy_pays_the_link_and_bytes_pass_unchanged() {
        let n = node();
        let profile = LinkProfile::by_name("100mb").unwrap().unwrap();
        let proxy = LinkProxy::start(node_addr(&n), Arc::new(Link::new(profile))).unwrap();
        let v = value(16 * 1024);
        let mut through = connect(proxy.addr());
        set(&mut through, "k", &v);
        // The node holds what went through the proxy, and the proxy returns what the node holds.
        assert_eq!(get(&mut connect(node_addr(&n)), "k", v.len()), v);
        for _ in 0..5 {
            let t = Instant::now();
            assert_eq!(get(&mut through, "k", v.len()), v);
            let took = t.elapsed();
            // Request and reply bytes on the wire plus the round trip: at least the profile's lone get.
            let floor = profile.unloaded("mg k v\r\n".len(), v.len() + 10);
            assert!(took >= floor, "a get took {took:?}, the 100mb link alone {floor:?}");
        }
    }

    #[test]
    fn closing_either_side_closes_the_other() {
        let n = node();
        let proxy =
            LinkProxy::start(node_addr(&n), Arc::new(Link::new(LinkProfile::by_name("1gbe").unwrap().unwrap())))
                .unwrap();
        // memcached's `curr_connections` counts its clients, and counts a closed one down on
        // that connection's worker thread, some time after the close. One connection of
        // ours asks throughout (a new one per read would itself come and go), so once the
        // closes have been counted, the count is exactly 1 + the connections the proxy holds:
        // each check waits for that, with a deadline.
        let mut poller = connect(node_addr(&n));
        let mut held_by_proxy = |want: u64, what: &str| {
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                poller.write_all(b"stats\r\n").unwrap();
                let text = String::from_utf8(read_until(&mut poller, b"END\r\n")).unwrap();
                let curr: u64 = text
                    .lines()
                    .find_map(|l| l.strip_prefix("STAT curr_connections "))
                    .and_then(|v| v.trim().parse().ok())
                    .expect("curr_connections in stats");
                if curr == 1 + want {
                    return;
                }
                assert!(Instant::now() < deadline, "{what}: the node has {curr} connections, expected 1 + {want}");
                std::thread::sleep(Duration::from_millis(10));
            }
        };
        // The node closes (quit): the client sees the end of the stream.
        let mut c = connect(proxy.addr());
        c.write_all(b"quit\r\n").unwrap();
        let mut b = [0u8; 16];
        assert_eq!(c.read(&mut b).expect("closed within the timeout"), 0);
        held_by_proxy(0, "after the node closed");

        // The client closes: the node's side closes too.
        let mut c = connect(proxy.addr());
        set(&mut c, "x", b"1");
        held_by_proxy(1, "the proxy holds one connection to the node");
        drop(c);
        held_by_proxy(0, "the node's side stayed open after the client closed");
    }

    #[test]
    fn connections_past_the_bound_wait_and_a_dropped_proxy_refuses() {
        let n = node();
        let link = Arc::new(Link::new(LinkProfile::by_name("10gbe").unwrap().unwrap()));
        let proxy = LinkProxy::start_bounded(node_addr(&n), link, 1).unwrap();
        let mut first = connect(proxy.addr());
        set(&mut first, "a", b"1");
        // The second connection is accepted by the kernel but not relayed while the first lives.
        let mut second = connect(proxy.addr());
        second.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
        second.write_all(b"mn\r\n").unwrap();
        let mut b = [0u8; 16];
        assert!(second.read(&mut b).is_err(), "a connection past the bound was relayed");
        drop(first);
        second.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        assert_eq!(read_until(&mut second, b"\r\n"), b"MN\r\n");

        let addr = proxy.addr();
        drop(proxy);
        assert!(TcpStream::connect(addr).is_err(), "the proxy still listens after it was dropped");
        // Its relayed connection was closed too (an end of stream or a reset, not a timeout).
        match second.read(&mut b) {
            Ok(n) => assert_eq!(n, 0, "bytes after the proxy was dropped"),
            Err(e) => assert!(
                !matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut),
                "still open after the proxy was dropped"
            ),
        }
    }
}
