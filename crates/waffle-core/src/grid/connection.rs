//! One TCP connection to a node, every wait bounded by a deadline.
//!
//! The socket is non-blocking and every wait is a `poll(2)` with the time left
//! until the request's deadline, so a request never takes longer than its
//! deadline, whatever the node does. While a long pipeline is written, replies
//! are read as they come, so neither side can stall the other on full socket
//! buffers.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::time::Instant;

use super::outcome::FaultKind;
use super::protocol::{self, Reply, MAX_LINE_BYTES, MAX_VALUE_BYTES};

/// Bytes read per `read(2)` at most.
const READ_CHUNK_BYTES: usize = 64 * 1024;
/// While writing, replies are buffered up to this much; past it the writer
/// stops reading (the deadline then ends a stalled exchange).
const MAX_BUFFERED_BYTES: usize = 64 << 20;
/// What an idle connection keeps of its read buffer: a reply once grown it to
/// the largest a node ever sent (a hostile node could pin ~64 MiB per pooled
/// connection outside the L1 budget otherwise).
pub const IDLE_BUFFER_BYTES: usize = 4 * READ_CHUNK_BYTES;

pub struct Connection {
    stream: TcpStream,
    /// Received bytes: `buf[start..filled]` are not parsed yet.
    buf: Vec<u8>,
    start: usize,
    filled: usize,
}

impl Connection {
    /// Connects before `deadline`.
    pub fn open(addr: SocketAddr, deadline: Instant) -> Result<Connection, FaultKind> {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Err(FaultKind::Timeout);
        }
        let stream = TcpStream::connect_timeout(&addr, remaining).map_err(|e| io_fault(&e))?;
        // Requests are small and latency is the point.
        stream.set_nodelay(true).map_err(|e| io_fault(&e))?;
        stream.set_nonblocking(true).map_err(|e| io_fault(&e))?;
        Ok(Connection { stream, buf: vec![0; READ_CHUNK_BYTES], start: 0, filled: 0 })
    }

    /// An idle connection that the node has closed (restart, idle timeout), or
    /// that has bytes nobody asked for, must not be used.
    pub fn is_stale(&self) -> bool {
        if self.start != self.filled {
            return true;
        }
        let mut byte = [0u8; 1];
        match self.stream.peek(&mut byte) {
            Ok(_) => true, // 0: closed by the peer; 1: unexpected bytes
            Err(e) => e.kind() != io::ErrorKind::WouldBlock,
        }
    }

    /// Gives back what a large reply grew the read buffer to (before the
    /// connection goes back to the idle pool).
    pub fn trim(&mut self) {
        if self.start == self.filled && self.buf.len() > IDLE_BUFFER_BYTES {
            self.start = 0;
            self.filled = 0;
            self.buf = vec![0; READ_CHUNK_BYTES];
        }
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
            match self.stream.write(&request[written..]) {
                Ok(0) => return Err(FaultKind::Io),
                Ok(n) => {
                    written += n;
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(io_fault(&e)),
            }
            let read_too = self.filled - self.start < MAX_BUFFERED_BYTES;
            let events = libc::POLLOUT | if read_too { libc::POLLIN } else { 0 };
            let revents = self.wait(events, deadline)?;
            if read_too && revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0 {
                self.fill()?;
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
            self.wait(libc::POLLIN, deadline)?;
            self.fill()?;
        }
    }

    /// One `read(2)` into the buffer. End of stream is an I/O fault: we only
    /// read when a reply is due.
    fn fill(&mut self) -> Result<(), FaultKind> {
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
            match self.stream.read(&mut self.buf[self.filled..]) {
                Ok(0) => return Err(FaultKind::Io),
                Ok(n) => {
                    self.filled += n;
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(io_fault(&e)),
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
                if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(FaultKind::Io);
            }
            if rc > 0 {
                if pollfd.revents & libc::POLLNVAL != 0 {
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
        _ => FaultKind::Io,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::time::Duration;

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
            conn.wait(libc::POLLIN, deadline).unwrap();
            conn.fill().unwrap();
        }
        server.join().unwrap();
        assert!(conn.buffer_bytes() >= 8 << 20, "the reply grew the buffer");
        conn.trim();
        assert!(conn.buffer_bytes() >= 8 << 20, "unconsumed bytes are kept");
        conn.start = conn.filled; // the reply was consumed
        conn.trim();
        assert!(conn.buffer_bytes() <= IDLE_BUFFER_BYTES, "{}", conn.buffer_bytes());
    }
}
