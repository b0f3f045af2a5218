//! One TCP connection to a node, every wait bounded by a deadline.
//!
//! The socket stays in blocking mode. A request whose reply comes in one
//! piece costs one `send(2)` and one `recv(2)` when its deadline is more than
//! [`RECV_TIMER_LATENESS`] away, and one `send(2)`, one `poll(2)` and one
//! `recv(2)` when it is nearer (the 5 ms default timeout); taking a connection
//! from the idle pool costs no system call (see [`PEEK_AFTER_IDLE`]).
//!
//! - Writes are `send(MSG_DONTWAIT | MSG_NOSIGNAL)`. Only when the socket
//!   buffer is full does the writer `poll(2)` for POLLOUT until the deadline,
//!   reading replies (`recv(MSG_DONTWAIT)`) as they come meanwhile, so that
//!   neither side of a long pipeline can stall the other on full buffers.
//! - Reads are a blocking `recv(2)` bounded by the socket's receive timeout
//!   (SO_RCVTIMEO) while the deadline is far enough away, and `poll(2)` then
//!   `recv(MSG_DONTWAIT)` for its last [`RECV_TIMER_LATENESS`]. The receive
//!   timeout is a kernel tick timer: measured on Linux at HZ=250 it fires 4 to
//!   11 ms late whatever it is set to (1 ms wakes after 8 to 12 ms), and past
//!   64 ticks the timer wheel adds up to an eighth of the timeout. So it is set
//!   to at most the time left minus [`RECV_TIMER_LATENESS`], and never above
//!   [`MAX_RECV_WAIT`]; a receive timeout that fires (EAGAIN) only loops to
//!   look at the deadline again. `poll(2)` sleeps on a high-resolution timer.
//!   The receive timeout last set is remembered, and `setsockopt(2)` is called
//!   only when the wanted one differs by more than [`RCVTIMEO_GRACE`]: a
//!   steady deadline sets it once per connection.
//!
//! So a request never takes longer than its deadline plus [`RCVTIMEO_GRACE`]
//! (and poll's rounding up to the millisecond), whatever the node does, as long
//! as the kernel's tick timer is no later than [`RECV_TIMER_LATENESS`]
//! (scheduling delays of a loaded host come on top, as with any wait).

use std::cell::Cell;
use std::io;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use super::outcome::FaultKind;
use super::protocol::{self, Reply, MAX_LINE_BYTES, MAX_VALUE_BYTES};

/// Bytes read per `recv(2)` at most.
const READ_CHUNK_BYTES: usize = 64 * 1024;
/// While writing, replies are buffered up to this much; past it the writer
/// stops reading (the deadline then ends a stalled exchange).
const MAX_BUFFERED_BYTES: usize = 64 << 20;
/// What an idle connection keeps of its read buffer: a reply once grown it to
/// the largest a node ever sent (a hostile node could pin ~64 MiB per pooled
/// connection outside the L1 budget otherwise).
pub const IDLE_BUFFER_BYTES: usize = 4 * READ_CHUNK_BYTES;
/// An idle connection back in the pool for less than this is taken without
/// the `recv(MSG_PEEK)` that would see it closed by the node. A node closing a
/// connection that recently is a restart or a kill (memcached closes idle
/// connections only with `-o idle_timeout`, in seconds): the node finds out
/// when it uses it (`Node::begin` and `Exchange::fail`), counts a stale
/// connection and does not mark the node down for it.
const PEEK_AFTER_IDLE: Duration = Duration::from_millis(1000);
/// How late the kernel's receive timeout (a tick timer) may fire: the last
/// stretch before a deadline is waited with `poll(2)` instead.
pub const RECV_TIMER_LATENESS: Duration = Duration::from_millis(30);
/// Longest receive timeout set: past 64 ticks the timer wheel is coarser.
pub const MAX_RECV_WAIT: Duration = Duration::from_millis(100);
/// The receive timeout set is kept while within this of the one wanted.
pub const RCVTIMEO_GRACE: Duration = Duration::from_millis(1);

pub struct Connection {
    stream: TcpStream,
    /// Received bytes: `buf[start..filled]` are not parsed yet.
    buf: Vec<u8>,
    start: usize,
    filled: usize,
    /// When the connection last went back to the idle pool (or was opened).
    idle_since: Instant,
    /// Bytes received since it was last taken from the pool ([`Connection::taken`]).
    received_bytes: u64,
    /// The SO_RCVTIMEO set on the socket (None: not set, blocking forever).
    rcvtimeo: Option<Duration>,
    /// setsockopt(SO_RCVTIMEO) calls, for tests.
    #[cfg(test)]
    rcvtimeo_sets: usize,
}

impl Connection {
    /// Connects before `deadline`.
    pub fn open(addr: SocketAddr, deadline: Instant) -> Result<Connection, FaultKind> {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            note(Cause::NoConnection(Duration::ZERO));
            return Err(FaultKind::Timeout);
        }
        let stream = TcpStream::connect_timeout(&addr, remaining).map_err(|e| {
            let kind = io_fault(&e);
            if kind == FaultKind::Timeout {
                note(Cause::NoConnection(remaining));
            }
            kind
        })?;
        // Requests are small and latency is the point.
        stream.set_nodelay(true).map_err(|e| io_fault(&e))?;
        Ok(Connection {
            stream,
            buf: vec![0; READ_CHUNK_BYTES],
            start: 0,
            filled: 0,
            idle_since: Instant::now(),
            received_bytes: 0,
            rcvtimeo: None,
            #[cfg(test)]
            rcvtimeo_sets: 0,
        })
    }

    /// An idle connection that the node has closed (restart, idle timeout), or
    /// that has bytes nobody asked for, must not be used. One idle for less
    /// than [`PEEK_AFTER_IDLE`] is not asked (no system call).
    pub fn is_stale(&self) -> bool {
        if self.start != self.filled {
            return true;
        }
        if self.skips_peek() {
            return false;
        }
        let mut byte = 0u8;
        // SAFETY: one writable byte; the fd is owned by `self.stream` for the call.
        let n = unsafe {
            libc::recv(self.stream.as_raw_fd(), (&mut byte as *mut u8).cast(), 1, libc::MSG_PEEK | libc::MSG_DONTWAIT)
        };
        match n {
            n if n >= 0 => true, // 0: closed by the peer; 1: unexpected bytes
            _ => io::Error::last_os_error().kind() != io::ErrorKind::WouldBlock,
        }
    }

    /// Whether [`Connection::is_stale`] trusts this one without asking the
    /// kernel (pooled less than [`PEEK_AFTER_IDLE`] ago).
    pub fn skips_peek(&self) -> bool {
        self.idle_since.elapsed() < PEEK_AFTER_IDLE
    }

    /// Taken from the pool for a new exchange: counts what it receives from now on.
    pub fn taken(&mut self) {
        self.received_bytes = 0;
    }

    /// Bytes received since [`Connection::taken`] (0: the node never answered on it).
    pub fn received_bytes(&self) -> u64 {
        self.received_bytes
    }

    /// Readies the connection for the idle pool (the node calls this right
    /// before pooling it): gives back what a large reply grew the read buffer
    /// to, and notes when idleness starts for [`Connection::is_stale`]. Noted
    /// here rather than at each reply: only the pooling knows the exchange is
    /// over, and a connection pooled without it is only peeked (the safe side).
    pub fn trim(&mut self) {
        if self.start == self.filled && self.buf.len() > IDLE_BUFFER_BYTES {
            self.start = 0;
            self.filled = 0;
            self.buf = vec![0; READ_CHUNK_BYTES];
        }
        self.idle_since = Instant::now();
    }

    /// Bytes held by the read buffer.
    #[cfg(test)]
    fn buffer_bytes(&self) -> usize {
        self.buf.capacity()
    }

    /// True when every received byte was consumed: the stream is between replies.
    pub fn is_idle(&self) -> bool {
        self.start == self.filled
    }

    /// Writes `request` before `deadline`, buffering any replies that arrive meanwhile.
    pub fn send(&mut self, request: &[u8], deadline: Instant) -> Result<(), FaultKind> {
        let mut written = 0;
        while written < request.len() {
            let rest = &request[written..];
            // SAFETY: `rest` is readable for its length; the fd is owned by `self.stream`.
            let n = unsafe {
                libc::send(
                    self.stream.as_raw_fd(),
                    rest.as_ptr().cast(),
                    rest.len(),
                    libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
                )
            };
            if n > 0 {
                written += n as usize;
                continue;
            }
            if n == 0 {
                note(Cause::Closed);
                return Err(FaultKind::Io);
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::WouldBlock => {}
                io::ErrorKind::Interrupted => continue,
                _ => return Err(io_fault(&e)),
            }
            let read_too = self.filled - self.start < MAX_BUFFERED_BYTES;
            let events = libc::POLLOUT | if read_too { libc::POLLIN } else { 0 };
            let revents = self.wait(events, deadline)?;
            if read_too && revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0 {
                self.fill(libc::MSG_DONTWAIT)?;
            }
        }
        Ok(())
    }

    /// Waits (until `deadline`) for the next complete reply and hands it to `f`.
    pub fn next_reply<R>(&mut self, deadline: Instant, f: impl FnOnce(Reply<'_>) -> R) -> Result<R, FaultKind> {
        loop {
            match protocol::parse_reply(&self.buf[self.start..self.filled]) {
                Ok(Some((reply, len))) => {
                    let result = f(reply);
                    self.start += len;
                    return Ok(result);
                }
                Ok(None) => {}
                Err(_) => return Err(FaultKind::Protocol),
            }
            self.receive(deadline)?;
        }
    }

    /// Receives at least one byte before `deadline` (see the module comment).
    fn receive(&mut self, deadline: Instant) -> Result<(), FaultKind> {
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Err(FaultKind::Timeout);
            }
            let received = match remaining.checked_sub(RECV_TIMER_LATENESS) {
                Some(room) if room > RCVTIMEO_GRACE => {
                    self.set_rcvtimeo(room.min(MAX_RECV_WAIT))?;
                    self.fill(0)?
                }
                _ => {
                    self.wait(libc::POLLIN, deadline)?;
                    self.fill(libc::MSG_DONTWAIT)?
                }
            };
            if received {
                return Ok(());
            }
            // The receive timeout fired (or a wake-up was spurious): look at the deadline again.
        }
    }

    /// Sets SO_RCVTIMEO to `want` unless the one set is within [`RCVTIMEO_GRACE`] of it.
    fn set_rcvtimeo(&mut self, want: Duration) -> Result<(), FaultKind> {
        if self.rcvtimeo.is_some_and(|set| set.abs_diff(want) <= RCVTIMEO_GRACE) {
            return Ok(());
        }
        // `want` is not zero (which would mean "forever"): the caller keeps it above the grace.
        self.stream.set_read_timeout(Some(want)).map_err(|e| io_fault(&e))?;
        self.rcvtimeo = Some(want);
        #[cfg(test)]
        {
            self.rcvtimeo_sets += 1;
        }
        Ok(())
    }

    /// One `recv(2)` with `flags` into the buffer; false when nothing came (it
    /// would block, or the receive timeout fired). End of stream is an I/O
    /// fault: we only read when a reply is due.
    fn fill(&mut self, flags: libc::c_int) -> Result<bool, FaultKind> {
        if self.start == self.filled {
            self.start = 0;
            self.filled = 0;
        } else if self.start > 0 && self.buf.len() - self.filled < READ_CHUNK_BYTES {
            self.buf.copy_within(self.start..self.filled, 0);
            self.filled -= self.start;
            self.start = 0;
        }
        if self.buf.len() - self.filled < READ_CHUNK_BYTES {
            // Bounded: a complete reply is at most a line and MAX_VALUE_BYTES, and
            // `send` stops reading past MAX_BUFFERED_BYTES.
            let wanted = (self.filled + READ_CHUNK_BYTES).max(self.buf.len() * 2);
            let cap = MAX_BUFFERED_BYTES + MAX_VALUE_BYTES + MAX_LINE_BYTES + READ_CHUNK_BYTES;
            self.buf.resize(wanted.min(cap), 0);
        }
        if self.filled == self.buf.len() {
            return Err(FaultKind::Protocol);
        }
        loop {
            let free = &mut self.buf[self.filled..];
            // SAFETY: `free` is writable for its length; the fd is owned by `self.stream`.
            let n = unsafe { libc::recv(self.stream.as_raw_fd(), free.as_mut_ptr().cast(), free.len(), flags) };
            if n > 0 {
                self.filled += n as usize;
                self.received_bytes += n as u64;
                return Ok(true);
            }
            if n == 0 {
                note(Cause::Closed);
                return Err(FaultKind::Io);
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::WouldBlock => return Ok(false),
                io::ErrorKind::Interrupted => continue,
                _ => return Err(io_fault(&e)),
            }
        }
    }

    /// `poll(2)` for `events` until `deadline`; returns the events that fired.
    fn wait(&self, events: libc::c_short, deadline: Instant) -> Result<libc::c_short, FaultKind> {
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Err(FaultKind::Timeout);
            }
            // Round up: poll's unit is the millisecond, and waking early only loops.
            let timeout_ms = remaining.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int;
            let mut pollfd = libc::pollfd { fd: self.stream.as_raw_fd(), events, revents: 0 };
            // SAFETY: one valid pollfd, and the fd is owned by `self.stream` for the call.
            let rc = unsafe { libc::poll(&mut pollfd, 1, timeout_ms) };
            if rc < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(io_fault(&e));
            }
            if rc > 0 {
                if pollfd.revents & libc::POLLNVAL != 0 {
                    note(Cause::Os(libc::EBADF));
                    return Err(FaultKind::Io);
                }
                return Ok(pollfd.revents);
            }
        }
    }
}

fn io_fault(e: &io::Error) -> FaultKind {
    match e.kind() {
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => FaultKind::Timeout,
        _ => {
            note(e.raw_os_error().map_or(Cause::Closed, Cause::Os));
            FaultKind::Io
        }
    }
}

/// What an I/O fault was, for the line that marks its node down: the fault's
/// kind is what is counted, this is what an operator can act on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// The node ended the stream (EOF where a reply was due).
    Closed,
    /// The connection did not open within this.
    NoConnection(Duration),
    /// An errno.
    Os(i32),
}

impl Cause {
    /// In words an operator can act on.
    pub fn words(self) -> String {
        match self {
            Cause::Closed => "it closed the connection: memcached restarted or was stopped".into(),
            Cause::NoConnection(d) => format!(
                "no connection within {} ms: the host does not answer (down, or a firewall drops the packets)",
                d.as_millis()
            ),
            Cause::Os(libc::ECONNREFUSED) => {
                "connection refused: nothing listens on that port (memcached not running there?)".into()
            }
            Cause::Os(libc::ECONNRESET | libc::EPIPE) => {
                "connection reset: memcached restarted, or something between resets connections".into()
            }
            Cause::Os(libc::EHOSTUNREACH | libc::ENETUNREACH) => {
                "no route to the host: its network or a firewall (ICMP unreachable)".into()
            }
            Cause::Os(libc::ETIMEDOUT) => "the connection timed out in the kernel: the host stopped answering".into(),
            Cause::Os(errno) => io::Error::from_raw_os_error(errno).to_string(),
        }
    }
}

thread_local! {
    /// The cause of this thread's last I/O fault, taken by the node that records it (an exchange
    /// fails on the thread that ran it, right after).
    static CAUSE: Cell<Option<Cause>> = const { Cell::new(None) };
}

fn note(cause: Cause) {
    CAUSE.with(|c| c.set(Some(cause)));
}

/// The cause of this thread's last I/O fault since the last call, if one was noted.
pub fn take_cause() -> Option<Cause> {
    CAUSE.with(Cell::take)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpListener;

    /// A connection and the server's end of it.
    fn pair(deadline: Instant) -> (Connection, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let conn = Connection::open(listener.local_addr().unwrap(), deadline).unwrap();
        let (server, _) = listener.accept().unwrap();
        (conn, server)
    }

    fn value_of(conn: &mut Connection, deadline: Instant) -> Result<Vec<u8>, FaultKind> {
        conn.next_reply(deadline, |reply| match reply {
            Reply::Value { data, .. } => data.to_vec(),
            _ => panic!("not a value"),
        })
    }

    #[test]
    fn an_idle_connection_gives_back_what_a_large_reply_grew() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            s.write_all(&vec![b'x'; 8 << 20]).unwrap();
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut conn = Connection::open(addr, deadline).unwrap();
        while conn.filled < 8 << 20 {
            conn.receive(deadline).unwrap();
        }
        server.join().unwrap();
        assert!(conn.buffer_bytes() >= 8 << 20, "the reply grew the buffer");
        conn.trim();
        assert!(conn.buffer_bytes() >= 8 << 20, "unconsumed bytes are kept");
        conn.start = conn.filled; // the reply was consumed
        conn.trim();
        assert!(conn.buffer_bytes() <= IDLE_BUFFER_BYTES, "{}", conn.buffer_bytes());
    }

    /// The value comes in two writes 20 ms apart: the blocking `recv` returns
    /// the first half, and the next one waits for the rest. Two requests with
    /// the same timeout set the socket's receive timeout once.
    #[test]
    fn a_reply_split_across_sends_is_read_whole_and_the_receive_timeout_is_set_once() {
        let (mut conn, mut server) = pair(Instant::now() + Duration::from_secs(5));
        let value: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
        let mut reply = format!("VA {}\r\n", value.len()).into_bytes();
        reply.extend_from_slice(&value);
        reply.extend_from_slice(b"\r\n");
        let sent = reply.clone();
        let writer = std::thread::spawn(move || {
            let mut request = [0u8; 4];
            for _ in 0..2 {
                server.read_exact(&mut request).unwrap();
                let half = sent.len() / 2;
                server.write_all(&sent[..half]).unwrap();
                std::thread::sleep(Duration::from_millis(20));
                server.write_all(&sent[half..]).unwrap();
            }
        });
        for _ in 0..2 {
            let deadline = Instant::now() + Duration::from_secs(2);
            conn.send(b"mg\r\n", deadline).unwrap();
            assert_eq!(value_of(&mut conn, deadline).unwrap(), value);
            assert!(conn.is_idle());
        }
        writer.join().unwrap();
        assert_eq!(conn.rcvtimeo, Some(MAX_RECV_WAIT));
        assert_eq!(conn.rcvtimeo_sets, 1, "a steady deadline sets SO_RCVTIMEO once");
    }

    /// A node that never answers: `next_reply` ends with a timeout at the
    /// deadline, never before, and at most a few ms after, for a deadline
    /// waited with `poll` only (5 ms, the default timeout) and for ones that
    /// start with a blocking `recv` under SO_RCVTIMEO. A loaded host can stall
    /// any thread for tens of ms, so the tight bound must hold on the best of a
    /// few tries; a receive timeout left to end the wait would fail it on every
    /// try (its tick timer fires 4 ms late or more at HZ=250).
    #[test]
    fn a_silent_node_times_out_at_the_deadline_and_not_before() {
        // Grace, and poll's rounding up to the millisecond.
        let allowed_late = RCVTIMEO_GRACE + Duration::from_millis(2);
        let (mut conn, _server) = pair(Instant::now() + Duration::from_secs(5));
        for ms in [5u64, 40, 250, 5] {
            // Each try beside a control: a plain sleep of the same length, just before. What the
            // scheduler of a loaded machine adds to any wait (CI-like runs saw 4-12 ms) is not the
            // connection's; the connection may add the grace, no more.
            let mut lateness = Vec::new();
            for _try in 0..10 {
                let slept_to = Instant::now() + Duration::from_millis(ms);
                std::thread::sleep(Duration::from_millis(ms));
                let control_late = Instant::now().saturating_duration_since(slept_to);
                let deadline = Instant::now() + Duration::from_millis(ms);
                assert_eq!(value_of(&mut conn, deadline), Err(FaultKind::Timeout));
                let end = Instant::now();
                assert!(end >= deadline, "{ms} ms: ended {:?} early", deadline - end);
                // No bound on one try: a stall of any length can land in it (a wait the
                // deadline does not end would be late in every try, and fail below).
                let late = end - deadline;
                lateness.push((late, control_late));
                if late <= allowed_late + control_late {
                    break;
                }
            }
            let ok = lateness.iter().any(|&(late, control)| late <= allowed_late + control);
            assert!(ok, "{ms} ms: ended late by (late, a plain sleep's lateness) {lateness:?}");
        }
    }

    #[test]
    fn only_a_connection_idle_past_the_bound_is_peeked() {
        let deadline = Instant::now() + Duration::from_secs(5);
        // Alive and idle past the bound: peeked, nothing there, not stale.
        let (mut alive, _server) = pair(deadline);
        alive.trim();
        alive.idle_since -= PEEK_AFTER_IDLE * 2;
        assert!(!alive.is_stale());

        // Closed by the node.
        let (mut closed, server) = pair(deadline);
        drop(server);
        std::thread::sleep(Duration::from_millis(20)); // the FIN arrives
        closed.trim();
        assert!(!closed.is_stale(), "pooled just now: not peeked, so the close is not seen");
        closed.idle_since -= PEEK_AFTER_IDLE * 2;
        assert!(closed.is_stale(), "idle past the bound: peeked, closed");
        // Had it been used within the bound, the request would have failed as an I/O fault.
        closed.idle_since = Instant::now();
        let sent = closed.send(b"mg\r\n", deadline);
        assert!(sent.is_err() || value_of(&mut closed, deadline) == Err(FaultKind::Io));

        // Unconsumed bytes make a connection stale however recent.
        let (mut chatty, mut server) = pair(deadline);
        server.write_all(b"HD\r\n").unwrap();
        chatty.receive(deadline).unwrap();
        chatty.trim();
        assert!(chatty.is_stale());
    }
}
