//! Loopback ports a test holds, so that no parallel test takes them.
//!
//! A port merely found free (bound to 0, then released) can be bound by
//! another test's memcached a moment later: an "unreachable" node would then
//! answer, a stand-in restarted on its port would find it taken. These ports
//! stay bound by a socket that never listens (a connect is refused at once)
//! and has no SO_REUSEADDR, which memcached and std's listeners set, so
//! neither can bind them.

use std::io;
use std::net::TcpListener;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// A loopback port nobody listens on, for as long as this process lives: an
/// unreachable node. Panics if the system has no port to give: a test cannot
/// go on without one.
pub fn closed_port() -> u16 {
    let (fd, port) = bound(0, false);
    // Kept open (never closed) so that the port stays reserved.
    std::mem::forget(fd);
    port
}

/// A port for a test's stand-in node that dies and comes back on the same
/// port: [`HeldPort::listen`] gives a listener on it; while none is open a
/// connect is refused, and no other process can bind the port. Both sockets
/// have SO_REUSEPORT, which lets the listener share the port with the held
/// socket (same user), and nothing else.
pub struct HeldPort {
    _held: OwnedFd,
    port: u16,
}

impl HeldPort {
    /// Holds a free loopback port. Panics if the system has none to give.
    pub fn new() -> HeldPort {
        let (held, port) = bound(0, true);
        HeldPort { _held: held, port }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// A listener on the port (the node is up until it is dropped). Panics if it cannot listen.
    pub fn listen(&self) -> TcpListener {
        let (fd, _) = bound(self.port, true);
        // SAFETY: listen(2) on the socket just bound.
        let listening = unsafe { libc::listen(fd.as_raw_fd(), 16) };
        assert_eq!(listening, 0, "listen on 127.0.0.1:{}: {}", self.port, io::Error::last_os_error());
        TcpListener::from(fd)
    }
}

impl Default for HeldPort {
    fn default() -> HeldPort {
        HeldPort::new()
    }
}

/// A TCP socket bound to 127.0.0.1:`port` (0: one the system picks), with SO_REUSEPORT if
/// `reuse_port`, never SO_REUSEADDR; and its port. Panics on failure.
fn bound(port: u16, reuse_port: bool) -> (OwnedFd, u16) {
    // SAFETY: plain socket(2) call; the result is checked.
    let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    assert!(raw >= 0, "socket: {}", io::Error::last_os_error());
    // SAFETY: a descriptor just made, owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    if reuse_port {
        let on: libc::c_int = 1;
        // SAFETY: an int option of `size_of::<c_int>()` bytes on a live socket.
        let set = unsafe {
            libc::setsockopt(
                raw,
                libc::SOL_SOCKET,
                libc::SO_REUSEPORT,
                &on as *const libc::c_int as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        assert_eq!(set, 0, "SO_REUSEPORT: {}", io::Error::last_os_error());
    }
    let mut addr = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes([127, 0, 0, 1]) },
        sin_zero: [0; 8],
    };
    let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: addr is a sockaddr_in of `len` bytes, raw the socket just made.
    let done = unsafe { libc::bind(raw, &addr as *const libc::sockaddr_in as *const libc::sockaddr, len) };
    assert_eq!(done, 0, "bind 127.0.0.1:{port}: {}", io::Error::last_os_error());
    // SAFETY: getsockname writes at most `len` bytes into addr.
    let named = unsafe { libc::getsockname(raw, &mut addr as *mut libc::sockaddr_in as *mut libc::sockaddr, &mut len) };
    assert_eq!(named, 0, "getsockname: {}", io::Error::last_os_error());
    (fd, u16::from_be(addr.sin_port))
}

#[cfg(test)]
mod tests {
    use std::net::{SocketAddr, TcpStream};

    use super::*;

    fn connects(port: u16) -> bool {
        TcpStream::connect(SocketAddr::from(([127, 0, 0, 1], port))).is_ok()
    }

    #[test]
    fn a_held_port_refuses_while_nothing_listens_and_no_one_else_can_bind_it() {
        let held = HeldPort::new();
        assert!(!connects(held.port()), "nothing listens yet");
        // What memcached and std do: SO_REUSEADDR.
        let other = TcpListener::bind(("127.0.0.1", held.port()));
        assert!(other.is_err(), "another listener took the held port");
        let listener = held.listen();
        assert!(connects(held.port()), "the stand-in is up");
        drop(listener);
        assert!(!connects(held.port()), "the stand-in died: refused");
        assert!(TcpListener::bind(("127.0.0.1", held.port())).is_err(), "still held after the stand-in died");
        let again = held.listen();
        assert!(connects(held.port()), "up again on the same port");
        drop(again);
    }

    #[test]
    fn a_closed_port_refuses_and_cannot_be_bound() {
        let port = closed_port();
        assert!(!connects(port));
        assert!(TcpListener::bind(("127.0.0.1", port)).is_err());
    }
}
