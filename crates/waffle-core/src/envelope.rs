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
//! Sealed (flags bit 1, with a [`SealKey`]): the same header, then a 24-byte
//! nonce, the XChaCha20-Poly1305 ciphertext of the payload and its 16-byte tag
//! (76 bytes of overhead). The header is the associated data, so the identity,
//! page, version and length are authenticated; there is no crc32c.
//!
//! ```text
//!  0 header (36, flags=2) | 36 nonce (24) | 60 ciphertext (n) | 60+n tag (16)
//! ```
//!
//! Compressed (flags bit 2: LZ4 block, bit 3: zstd frame; [`crate::codec`]):
//! the payload is the compressed page and `len` its length; the page's own
//! size is the size the reader asks for, which the payload must decompress to
//! exactly. Compression comes before sealing, so the crc32c or the tag covers
//! the compressed bytes and nothing unchecked reaches the decompressor.
//!
//! ```text
//!  flags (byte 5):  bit 1 sealed | bits 2-3 payload: 00 raw, 01 lz4, 10 zstd (11 refused) | others 0
//! ```

use std::cell::RefCell;

use crate::codec::{Codec, Stored};
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
/// Flag: the payload is an LZ4 block of the page.
pub const FLAG_LZ4: u8 = 4;
/// Flag: the payload is a zstd frame of the page.
pub const FLAG_ZSTD: u8 = 8;
const CODEC_MASK: u8 = FLAG_LZ4 | FLAG_ZSTD;
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
    /// A compressed payload that passed its check but did not decompress to
    /// exactly the page size asked for.
    Codec,
}

impl Reject {
    pub const ALL: [Reject; 10] = [
        Reject::Length,
        Reject::Format,
        Reject::Checksum,
        Reject::Database,
        Reject::Page,
        Reject::Version,
        Reject::Size,
        Reject::Seal,
        Reject::Content,
        Reject::Codec,
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
            Reject::Codec => "codec",
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

/// Builds the envelope for `payload` (stored raw) into a new buffer.
pub fn seal(id: Identity, payload: &[u8]) -> Vec<u8> {
    let out = build(id, payload, Stored::Raw, None).expect("a plain envelope needs no nonce");
    debug_assert_eq!(open(&out, id, payload.len()), Ok(payload));
    out
}

/// Builds the envelope (payload stored raw), sealed when a key is given
/// (None: no nonce could be drawn; the page is then not pushed).
pub fn seal_with(id: Identity, payload: &[u8], key: Option<&SealKey>) -> Option<Vec<u8>> {
    build(id, payload, Stored::Raw, key)
}

/// Builds the envelope of a page: compressed with `codec` when that saves
/// enough, sealed when a key is given. Returns the value and the form its
/// payload took (None: no nonce could be drawn).
pub fn seal_page(id: Identity, page: &[u8], key: Option<&SealKey>, codec: Codec) -> Option<(Vec<u8>, Stored)> {
    SCRATCH.with(|scratch| {
        let mut scratch = scratch.borrow_mut();
        let stored = codec.compress(page, &mut scratch);
        let payload = if stored == Stored::Raw { page } else { &scratch[..] };
        let value = build(id, payload, stored, key)?;
        // Checked on this side of the push as the reader will check it on the other.
        debug_assert!(key.is_some() || open_into(&value, id, None, &mut vec![0u8; page.len()]) == Ok(stored));
        Some((value, stored))
    })
}

/// Builds the envelope of a payload already in the form `stored` says (the
/// pusher compresses first, to time it), sealed when a key is given.
pub fn seal_stored(id: Identity, payload: &[u8], stored: Stored, key: Option<&SealKey>) -> Option<Vec<u8>> {
    build(id, payload, stored, key)
}

fn build(id: Identity, payload: &[u8], stored: Stored, key: Option<&SealKey>) -> Option<Vec<u8>> {
    assert!(payload.len() <= MAX_PAYLOAD_BYTES, "page of {} bytes exceeds the envelope limit", payload.len());
    let codec_flag = match stored {
        Stored::Raw => 0,
        Stored::Lz4 => FLAG_LZ4,
        Stored::Zstd => FLAG_ZSTD,
    };
    let Some(key) = key else {
        let mut out = Vec::with_capacity(HEADER_BYTES + payload.len() + TRAILER_BYTES);
        out.extend_from_slice(&header(id, payload.len(), codec_flag));
        out.extend_from_slice(payload);
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        return Some(out);
    };
    let mut out = Vec::with_capacity(SEALED_OVERHEAD_BYTES + payload.len());
    out.extend_from_slice(&header(id, payload.len(), FLAG_SEALED | codec_flag));
    out.extend_from_slice(&[0u8; NONCE_BYTES]);
    out.extend_from_slice(payload);
    let (head, rest) = out.split_at_mut(HEADER_BYTES);
    let (nonce_slot, body) = rest.split_at_mut(NONCE_BYTES);
    let (nonce, tag) = key.seal_in_place(head, body)?;
    nonce_slot.copy_from_slice(&nonce);
    out.extend_from_slice(&tag);
    Some(out)
}

// Room for one compressed payload (sealing side) or one decrypted one before
// it is decompressed (opening side): one per thread, bounded by MAX_PAYLOAD_BYTES.
thread_local! {
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Checks `value` against what the caller expects and writes the page into
/// `out` (whose length is the page size being read), decompressing it if the
/// envelope says it is compressed. With a key only sealed values are
/// accepted; without one only plain values. Returns the form the payload had.
/// Never panics.
pub fn open_into(value: &[u8], expect: Identity, key: Option<&SealKey>, out: &mut [u8]) -> Result<Stored, Reject> {
    // Shorter than the smallest envelope of either kind (plain: header and
    // crc32c; sealed is longer): `length`, as `open` says, before any other check.
    if value.len() < HEADER_BYTES + TRAILER_BYTES {
        return Err(Reject::Length);
    }
    if value[0..4] != MAGIC || value[4] != FORMAT || value[6..8] != [0, 0] {
        return Err(Reject::Format);
    }
    let flags = value[5];
    let stored = match flags & CODEC_MASK {
        0 => Stored::Raw,
        FLAG_LZ4 => Stored::Lz4,
        FLAG_ZSTD => Stored::Zstd,
        _ => return Err(Reject::Format),
    };
    if flags & !(FLAG_SEALED | CODEC_MASK) != 0 {
        return Err(Reject::Format);
    }
    let result = match (flags & FLAG_SEALED != 0, key) {
        (false, None) => open_plain(value, expect, stored, out),
        (true, Some(key)) => open_sealed(value, expect, stored, key, out),
        _ => Err(Reject::Seal),
    };
    result.map(|()| stored)
}

fn open_plain(value: &[u8], expect: Identity, stored: Stored, out: &mut [u8]) -> Result<(), Reject> {
    unpack(stored, plain_payload(value, expect)?, out)
}

/// A plain value's payload once its length, crc32c and identity are checked
/// (magic, format and flags are the caller's).
fn plain_payload(value: &[u8], expect: Identity) -> Result<&[u8], Reject> {
    let payload_len = u32_at(value, 32) as usize;
    if payload_len > MAX_PAYLOAD_BYTES || HEADER_BYTES + payload_len + TRAILER_BYTES != value.len() {
        return Err(Reject::Length);
    }
    let body_end = HEADER_BYTES + payload_len;
    if crc32c::crc32c(&value[..body_end]) != u32_at(value, body_end) {
        return Err(Reject::Checksum);
    }
    check_identity(value, expect)?;
    Ok(&value[HEADER_BYTES..body_end])
}

/// The checked payload into the page: copied, or decompressed to exactly its size.
fn unpack(stored: Stored, payload: &[u8], out: &mut [u8]) -> Result<(), Reject> {
    if stored == Stored::Raw {
        if payload.len() != out.len() {
            return Err(Reject::Size);
        }
        out.copy_from_slice(payload);
        return Ok(());
    }
    if stored.decompress(payload, out) {
        return Ok(());
    }
    out.fill(0);
    Err(Reject::Codec)
}

fn open_sealed(value: &[u8], expect: Identity, stored: Stored, key: &SealKey, out: &mut [u8]) -> Result<(), Reject> {
    let payload_len = u32_at(value, 32) as usize;
    if payload_len > MAX_PAYLOAD_BYTES || SEALED_OVERHEAD_BYTES + payload_len != value.len() {
        return Err(Reject::Length);
    }
    // Identity first (cheap); the tag below authenticates these same bytes.
    check_identity(value, expect)?;
    let body = HEADER_BYTES + NONCE_BYTES;
    let (nonce, aad, tag) = (&value[HEADER_BYTES..body], &value[..HEADER_BYTES], &value[body + payload_len..]);
    let ciphertext = &value[body..body + payload_len];
    if stored == Stored::Raw {
        if payload_len != out.len() {
            return Err(Reject::Size);
        }
        out.copy_from_slice(ciphertext);
        if !key.open_in_place(nonce, aad, out, tag) {
            out.fill(0);
            return Err(Reject::Seal);
        }
        return Ok(());
    }
    // Decrypted aside, then decompressed into the page: nothing unauthenticated is decompressed.
    SCRATCH.with(|scratch| {
        let mut scratch = scratch.borrow_mut();
        scratch.clear();
        scratch.extend_from_slice(ciphertext);
        if !key.open_in_place(nonce, aad, &mut scratch, tag) {
            return Err(Reject::Seal);
        }
        unpack(stored, &scratch, out)
    })
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

/// Checks a plain, uncompressed `value` against what the caller expects and
/// returns the payload (a compressed or sealed value is a `format` reject:
/// [`open_into`] opens every kind). Never panics, whatever the bytes.
pub fn open(value: &[u8], expect: Identity, page_bytes: usize) -> Result<&[u8], Reject> {
    if value.len() < HEADER_BYTES + TRAILER_BYTES {
        return Err(Reject::Length);
    }
    if value[0..4] != MAGIC || value[4] != FORMAT || value[5] != 0 || value[6..8] != [0, 0] {
        return Err(Reject::Format);
    }
    let payload = plain_payload(value, expect)?;
    if payload.len() != page_bytes {
        return Err(Reject::Size);
    }
    Ok(payload)
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

    fn leafy(len: usize) -> Vec<u8> {
        let mut p = vec![0u8; len];
        for (i, b) in p[..len / 2].iter_mut().enumerate() {
            *b = b"customer balance 00042 "[i % 23];
        }
        p
    }

    #[test]
    fn compressed_pages_round_trip_plain_and_sealed() {
        let key = SealKey::from_bytes(&[7; 32]);
        let page = leafy(4096);
        for (codec, want) in [(Codec::Lz4, Stored::Lz4), (Codec::Zstd { level: 1 }, Stored::Zstd)] {
            for k in [None, Some(&key)] {
                let (v, stored) = seal_page(ID, &page, k, codec).unwrap();
                assert_eq!(stored, want, "{codec}");
                assert!(v.len() < page.len() / 2, "{codec}: {} bytes", v.len());
                assert_eq!(v[5] & CODEC_MASK, if want == Stored::Lz4 { FLAG_LZ4 } else { FLAG_ZSTD });
                let mut out = vec![0u8; 4096];
                assert_eq!(open_into(&v, ID, k, &mut out), Ok(want), "{codec} sealed={}", k.is_some());
                assert_eq!(out, page);
                // The page size is the reader's: another size does not decompress.
                assert_eq!(open_into(&v, ID, k, &mut vec![0u8; 8192]), Err(Reject::Codec));
                // Identity checks come first, as for raw pages.
                assert_eq!(open_into(&v, Identity { version: 4, ..ID }, k, &mut out), Err(Reject::Version));
                // `open` reads only plain raw values.
                assert_eq!(open(&v, ID, 4096), Err(Reject::Format));
            }
        }
        // Off, or a page that does not compress: raw, as `seal` makes it.
        assert_eq!(seal_page(ID, &page, None, Codec::Off).unwrap(), (seal(ID, &page), Stored::Raw));
    }

    #[test]
    fn every_bit_flip_of_a_compressed_value_is_rejected() {
        let key = SealKey::from_bytes(&[8; 32]);
        let page = leafy(1024);
        for k in [None, Some(&key)] {
            for codec in [Codec::Lz4, Codec::Zstd { level: 3 }] {
                let (v, _) = seal_page(ID, &page, k, codec).unwrap();
                let mut out = vec![0u8; 1024];
                for n in 0..v.len() {
                    assert!(open_into(&v[..n], ID, k, &mut out).is_err(), "{codec}: truncated to {n}");
                }
                for byte in 0..v.len() {
                    for bit in 0..8 {
                        let mut w = v.clone();
                        w[byte] ^= 1 << bit;
                        assert!(open_into(&w, ID, k, &mut out).is_err(), "{codec}: flip byte {byte} bit {bit}");
                    }
                }
            }
        }
    }

    #[test]
    fn a_payload_that_passes_its_check_but_is_not_a_page_is_a_codec_reject() {
        // A writer with no key can checksum anything: the decompressor meets it
        // after the crc, and must refuse it without harm.
        let mut out = vec![0u8; 4096];
        for flag in [FLAG_LZ4, FLAG_ZSTD] {
            for junk in [&b""[..], b"\x00", &[0xffu8; 300][..], &leafy(4096)[..]] {
                let mut v = header(ID, junk.len(), flag).to_vec();
                v.extend_from_slice(junk);
                let crc = crc32c::crc32c(&v);
                v.extend_from_slice(&crc.to_le_bytes());
                assert_eq!(open_into(&v, ID, None, &mut out), Err(Reject::Codec), "flag {flag} {} bytes", junk.len());
                assert!(out.iter().all(|&b| b == 0), "nothing of a refused value is left in the page");
            }
        }
        // Both codec bits: not a form this build knows.
        let mut v = seal(ID, &page());
        v[5] = FLAG_LZ4 | FLAG_ZSTD;
        assert_eq!(open_into(&v, ID, None, &mut out), Err(Reject::Format));
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
