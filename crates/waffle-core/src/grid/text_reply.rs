//! Reading a reply of memcached's text protocol (`stats`, `stats slabs`) on a connection of its
//! own: the few asks that are not meta-protocol requests (memory.rs, tier_sample.rs).

use std::io::Read;
use std::net::TcpStream;
use std::time::Instant;

/// A text-protocol reply up to its `END` (or `ERROR`) line, at most `max` bytes, every wait
/// bounded by `deadline`; None on a fault or the deadline. Read in chunks: nothing follows the
/// reply until the next command is sent.
pub(super) fn read_reply(stream: &mut TcpStream, max: usize, deadline: Instant) -> Option<Vec<u8>> {
    let left = || deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero());
    let mut reply = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    // Bounded: each pass reads at least one byte before the deadline, and the reply is capped.
    while reply.len() < max {
        stream.set_read_timeout(Some(left()?)).ok()?;
        let n = stream.read(&mut chunk).ok()?;
        if n == 0 {
            break;
        }
        reply.extend_from_slice(&chunk[..n]);
        if reply.ends_with(b"END\r\n") || reply.ends_with(b"ERROR\r\n") {
            break;
        }
    }
    Some(reply)
}
