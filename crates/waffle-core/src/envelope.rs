//! The page envelope: what a grid value holds.
//!
//! A grid value is trusted only when its envelope names exactly the page the
//! caller expects: same cache identity, same page number, same version, and a
//! checksum that matches. Anything else is a reject (counted, never served).
//!
//! Layout (little-endian, 40 bytes of overhead):
//!
//! ```text
//!  0      4      5      6        8              16             24             32        36           36+n
//!  +------+------+------+--------+--------------+--------------+--------------+---------+------------+--------+
//!  | magic| fmt  | flags| rsvd=0 | cache id u64 | page no u64  | version u64  | len u32 | payload(n) | crc32c |
//!  +------+------+------+--------+--------------+--------------+--------------+---------+------------+--------+
//!  "WAFL"   1      0                                                                                   over 0..36+n
//! ```
//!
//! Sealed (flags = 2, with a [`SealKey`]): the same header, then a 24-byte
//! nonce, the XChaCha20-Poly1305 ciphertext of the payload and its 16-byte tag
//! (76 bytes of overhead). The header is the associated data, so the identity,
//! page, version and length are authenticated; there is no crc32c.
//!
//! ```text
//!  0 header (36, flags=2) | 36 nonce (24) | 60 ciphertext (n) | 60+n tag (16)
//! ```

use crate::seal::{SealKey, NONCE_BYTES, TAG_BYTES};

/// First four bytes of every envelope.
pub const MAGIC: [u8; 4] = *b"WAFL";
/// Format version this build writes and accepts.
pub const FORMAT: u8 = 1;
/// Bytes before the payload.
pub const HEADER_BYTES: usize = 36;
/// Bytes after the payload.
pub const TRAILER_BYTES: usize = 4;
/// Flag: the payload is sealed (AEAD) instead of checksummed.
pub const FLAG_SEALED: u8 = 2;
/// Bytes a sealed value adds around the payload.
pub const SEALED_OVERHEAD_BYTES: usize = HEADER_BYTES + NONCE_BYTES + TAG_BYTES;
/// Largest payload accepted (InnoDB's largest page is 64 KiB).
pub const MAX_PAYLOAD_BYTES: usize = 64 * 1024;

/// Which page, of which cache incarnation, at which version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Identity {
    pub cache_id: u64,
    pub page: u64,
    pub version: u64,
}

/// Why a grid value was not served. Each is counted separately in the stats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reject {
    /// Shorter than header and trailer, or length field disagrees with the value's size.
    Length,
    /// Not our magic or format version, or flags this build does not know.
    Format,
    /// Checksum mismatch: corrupted in transit or in memory.
    Checksum,
    /// Another cache incarnation or another database wrote it.
    Database,
    /// Another page's envelope stored under this page's key.
    Page,
    /// An older (or newer) version than the file holds: stale.
    Version,
    /// Payload length differs from the page size being read.
    Size,
    /// Sealing: the value failed authentication, or it is sealed and we have
    /// no key, or it is plain and we require sealed values.
    Seal,
    /// The envelope matched but the adapter's own check of the page refused it
    /// (InnoDB: page number, space id, checksum, LSN), before it reached L1.
    Content,
}

impl Reject {
    pub const ALL: [Reject; 9] = [
        Reject::Length,
        Reject::Format,
        Reject::Checksum,
        Reject::Database,
        Reject::Page,
        Reject::Version,
        Reject::Size,
        Reject::Seal,
        Reject::Content,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Reject::Length => "length",
            Reject::Format => "format",
            Reject::Checksum => "checksum",
            Reject::Database => "database",
            Reject::Page => "page",
            Reject::Version => "version",
            Reject::Size => "size",
            Reject::Seal => "seal",
            Reject::Content => "content",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }
}

/// The grid key of a page: short, ASCII, namespaced by the cache identity so
/// that many databases (and incarnations of one) share a grid without meeting.
pub fn key(cache_id: u64, page: u64) -> String {
    String::from_utf8(GridKey::new(cache_id, page).as_bytes().to_vec()).expect("keys are ASCII")
}

/// [`key`] on the stack: `wf<cache_id:016x>.<page:x>`, at most 2 + 16 + 1 + 16
/// bytes, built without an allocation (one per grid lookup on the read path).
#[derive(Clone, Copy)]
pub struct GridKey {
    bytes: [u8; GridKey::MAX_BYTES],
    len: u8,
}

impl GridKey {
    const MAX_BYTES: usize = 35;

    pub fn new(cache_id: u64, page: u64) -> GridKey {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut bytes = [0u8; GridKey::MAX_BYTES];
        bytes[..2].copy_from_slice(b"wf");
        for i in 0..16 {
            bytes[2 + i] = HEX[(cache_id >> (60 - 4 * i) & 0xf) as usize];
        }
        bytes[18] = b'.';
        let digits = ((64 - page.leading_zeros()).div_ceil(4)).max(1) as usize;
        for i in 0..digits {
            bytes[19 + i] = HEX[(page >> (4 * (digits - 1 - i)) & 0xf) as usize];
        }
        GridKey { bytes, len: (19 + digits) as u8 }
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
}

/// Builds the envelope for `payload` into a new buffer.
pub fn seal(id: Identity, payload: &[u8]) -> Vec<u8> {
    assert!(payload.len() <= MAX_PAYLOAD_BYTES, "page of {} bytes exceeds the envelope limit", payload.len());
    let mut out = Vec::with_capacity(HEADER_BYTES + payload.len() + TRAILER_BYTES);
    out.extend_from_slice(&header(id, payload.len(), 0));
    out.extend_from_slice(payload);
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    debug_assert_eq!(open(&out, id, payload.len()), Ok(payload));
    out
}

/// Builds the envelope, sealed when a key is given (None: no nonce could be
/// drawn; the page is then not pushed).
pub fn seal_with(id: Identity, payload: &[u8], key: Option<&SealKey>) -> Option<Vec<u8>> {
    let Some(key) = key else { return Some(seal(id, payload)) };
    assert!(payload.len() <= MAX_PAYLOAD_BYTES, "page of {} bytes exceeds the envelope limit", payload.len());
    let mut out = Vec::with_capacity(SEALED_OVERHEAD_BYTES + payload.len());
    out.extend_from_slice(&header(id, payload.len(), FLAG_SEALED));
    out.extend_from_slice(&[0u8; NONCE_BYTES]);
    out.extend_from_slice(payload);
    let (head, rest) = out.split_at_mut(HEADER_BYTES);
    let (nonce_slot, body) = rest.split_at_mut(NONCE_BYTES);
    let (nonce, tag) = key.seal_in_place(head, body)?;
    nonce_slot.copy_from_slice(&nonce);
    out.extend_from_slice(&tag);
    Some(out)
}

/// Checks `value` against what the caller expects and writes the payload into
/// `out` (whose length is the page size being read). With a key only sealed
/// values are accepted; without one only plain values. Never panics.
pub fn open_into(value: &[u8], expect: Identity, key: Option<&SealKey>, out: &mut [u8]) -> Result<(), Reject> {
    // Shorter than the smallest envelope of either kind (plain: header and
    // crc32c; sealed is longer): `length`, as `open` says, before any other check.
    if value.len() < HEADER_BYTES + TRAILER_BYTES {
        return Err(Reject::Length);
    }
    if value[0..4] != MAGIC || value[4] != FORMAT || value[6..8] != [0, 0] {
        return Err(Reject::Format);
    }
    match (value[5], key) {
        (0, None) => {
            out.copy_from_slice(open(value, expect, out.len())?);
            Ok(())
        }
        (FLAG_SEALED, Some(key)) => open_sealed(value, expect, key, out),
        (0 | FLAG_SEALED, _) => Err(Reject::Seal),
        _ => Err(Reject::Format),
    }
}

fn open_sealed(value: &[u8], expect: Identity, key: &SealKey, out: &mut [u8]) -> Result<(), Reject> {
    let payload_len = u32_at(value, 32) as usize;
    if payload_len > MAX_PAYLOAD_BYTES || SEALED_OVERHEAD_BYTES + payload_len != value.len() {
        return Err(Reject::Length);
    }
    // Identity first (cheap); the tag below authenticates these same bytes.
    check_identity(value, expect)?;
    if payload_len != out.len() {
        return Err(Reject::Size);
    }
    let body = HEADER_BYTES + NONCE_BYTES;
    out.copy_from_slice(&value[body..body + payload_len]);
    let opened =
        key.open_in_place(&value[HEADER_BYTES..body], &value[..HEADER_BYTES], out, &value[body + payload_len..]);
    if !opened {
        out.fill(0);
        return Err(Reject::Seal);
    }
    Ok(())
}

fn check_identity(value: &[u8], expect: Identity) -> Result<(), Reject> {
    if u64_at(value, 8) != expect.cache_id {
        return Err(Reject::Database);
    }
    if u64_at(value, 16) != expect.page {
        return Err(Reject::Page);
    }
    if u64_at(value, 24) != expect.version {
        return Err(Reject::Version);
    }
    Ok(())
}

fn header(id: Identity, payload_len: usize, flags: u8) -> [u8; HEADER_BYTES] {
    let mut h = [0u8; HEADER_BYTES];
    h[0..4].copy_from_slice(&MAGIC);
    h[4] = FORMAT;
    h[5] = flags;
    h[8..16].copy_from_slice(&id.cache_id.to_le_bytes());
    h[16..24].copy_from_slice(&id.page.to_le_bytes());
    h[24..32].copy_from_slice(&id.version.to_le_bytes());
    h[32..36].copy_from_slice(&(payload_len as u32).to_le_bytes());
    h
}

/// Checks `value` against what the caller expects and returns the payload.
/// Never panics, whatever the bytes.
pub fn open(value: &[u8], expect: Identity, page_bytes: usize) -> Result<&[u8], Reject> {
    if value.len() < HEADER_BYTES + TRAILER_BYTES {
        return Err(Reject::Length);
    }
    if value[0..4] != MAGIC || value[4] != FORMAT || value[5] != 0 || value[6..8] != [0, 0] {
        return Err(Reject::Format);
    }
    let payload_len = u32_at(value, 32) as usize;
    if payload_len > MAX_PAYLOAD_BYTES || HEADER_BYTES + payload_len + TRAILER_BYTES != value.len() {
        return Err(Reject::Length);
    }
    let body_end = HEADER_BYTES + payload_len;
    if crc32c::crc32c(&value[..body_end]) != u32_at(value, body_end) {
        return Err(Reject::Checksum);
    }
    check_identity(value, expect)?;
    if payload_len != page_bytes {
        return Err(Reject::Size);
    }
    Ok(&value[HEADER_BYTES..body_end])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: Identity = Identity { cache_id: 0xfeed, page: 7, version: 3 };

    fn page() -> Vec<u8> {
        (0..4096u32).map(|i| (i * 31 % 251) as u8).collect()
    }

    #[test]
    fn round_trip() {
        let p = page();
        let v = seal(ID, &p);
        assert_eq!(v.len(), p.len() + HEADER_BYTES + TRAILER_BYTES);
        assert_eq!(open(&v, ID, 4096).unwrap(), &p[..]);
    }

    #[test]
    fn each_mismatch_has_its_reason() {
        let v = seal(ID, &page());
        assert_eq!(open(&v, Identity { cache_id: 1, ..ID }, 4096), Err(Reject::Database));
        assert_eq!(open(&v, Identity { page: 8, ..ID }, 4096), Err(Reject::Page));
        assert_eq!(open(&v, Identity { version: 2, ..ID }, 4096), Err(Reject::Version));
        assert_eq!(open(&v, ID, 8192), Err(Reject::Size));
        assert_eq!(open(&v[..v.len() - 1], ID, 4096), Err(Reject::Length));
        assert_eq!(open(b"garbage", ID, 4096), Err(Reject::Length));
        let mut flipped = v.clone();
        flipped[HEADER_BYTES + 100] ^= 1;
        assert_eq!(open(&flipped, ID, 4096), Err(Reject::Checksum));
        let mut foreign = v.clone();
        foreign[0] = b'X';
        assert_eq!(open(&foreign, ID, 4096), Err(Reject::Format));
        let mut flags = v;
        flags[5] = 1;
        assert_eq!(open(&flags, ID, 4096), Err(Reject::Format));
    }

    #[test]
    fn sealed_round_trip_and_policy() {
        let key = SealKey::from_bytes(&[3; 32]);
        let p = page();
        let v = seal_with(ID, &p, Some(&key)).unwrap();
        assert_eq!(v.len(), p.len() + SEALED_OVERHEAD_BYTES);
        assert!(!v.windows(64).any(|w| w == &p[100..164]), "no plaintext in a sealed value");
        let mut out = vec![0u8; 4096];
        open_into(&v, ID, Some(&key), &mut out).unwrap();
        assert_eq!(out, p);
        // A sealed value without a key, a plain value with one: both refused.
        assert_eq!(open_into(&v, ID, None, &mut out), Err(Reject::Seal));
        assert_eq!(open_into(&seal(ID, &p), ID, Some(&key), &mut out), Err(Reject::Seal));
        // Another key, another page's slot, a replay of an older version.
        let other = SealKey::from_bytes(&[4; 32]);
        assert_eq!(open_into(&v, ID, Some(&other), &mut out), Err(Reject::Seal));
        assert_eq!(open_into(&v, Identity { page: 8, ..ID }, Some(&key), &mut out), Err(Reject::Page));
        assert_eq!(open_into(&v, Identity { version: 4, ..ID }, Some(&key), &mut out), Err(Reject::Version));
        // A header rewritten to claim the expected identity fails the tag.
        let moved = seal_with(Identity { page: 8, ..ID }, &p, Some(&key)).unwrap();
        let mut forged = moved.clone();
        forged[16..24].copy_from_slice(&ID.page.to_le_bytes());
        assert_eq!(open_into(&forged, ID, Some(&key), &mut out), Err(Reject::Seal));
    }

    #[test]
    fn every_bit_flip_of_a_sealed_value_is_rejected() {
        let key = SealKey::from_bytes(&[5; 32]);
        let p: Vec<u8> = (0..512u32).map(|i| i as u8).collect();
        let v = seal_with(ID, &p, Some(&key)).unwrap();
        let mut out = vec![0u8; 512];
        for n in 0..v.len() {
            assert!(open_into(&v[..n], ID, Some(&key), &mut out).is_err(), "truncated to {n}");
        }
        for byte in 0..v.len() {
            let mut w = v.clone();
            w[byte] ^= 0x10;
            assert!(open_into(&w, ID, Some(&key), &mut out).is_err(), "flip at byte {byte}");
        }
    }

    #[test]
    fn too_short_for_any_envelope_is_a_length_reject_from_both_entry_points() {
        // Found by fuzz/ (envelope_sealed): 36..=39 bytes were `format` from
        // `open_into` but `length` from `open`.
        let key = SealKey::from_bytes(&[6; 32]);
        let v = seal(ID, &page());
        let mut out = vec![0u8; 4096];
        for n in 0..HEADER_BYTES + TRAILER_BYTES {
            let mut short = pattern_bytes(n);
            if n >= 8 {
                short[..8].copy_from_slice(&v[..8]); // even with a right header start
            }
            assert_eq!(open(&short, ID, 4096), Err(Reject::Length), "{n} bytes");
            assert_eq!(open_into(&short, ID, None, &mut out), Err(Reject::Length), "{n} bytes, no key");
            assert_eq!(open_into(&short, ID, Some(&key), &mut out), Err(Reject::Length), "{n} bytes, key");
        }
    }

    fn pattern_bytes(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 37 + 11) as u8).collect()
    }

    #[test]
    fn every_truncation_and_every_bit_flip_is_rejected() {
        let p: Vec<u8> = (0..512u32).map(|i| i as u8).collect();
        let v = seal(ID, &p);
        for n in 0..v.len() {
            assert!(open(&v[..n], ID, 512).is_err(), "truncated to {n}");
        }
        for byte in 0..v.len() {
            for bit in 0..8 {
                let mut w = v.clone();
                w[byte] ^= 1 << bit;
                assert!(open(&w, ID, 512).is_err(), "flip byte {byte} bit {bit}");
            }
        }
    }

    #[test]
    fn a_grid_key_on_the_stack_is_the_formatted_one() {
        for (id, page) in [(0u64, 0u64), (1, 1), (u64::MAX, u64::MAX), (0xabc, 0x10), (0x1234_5678_9abc_def0, 1 << 40)]
        {
            let formatted = format!("wf{id:016x}.{page:x}");
            assert_eq!(GridKey::new(id, page).as_bytes(), formatted.as_bytes());
            assert_eq!(key(id, page), formatted);
        }
    }
}
