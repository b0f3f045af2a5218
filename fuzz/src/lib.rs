//! The bodies of Waffle's fuzz targets.
//!
//! Each function takes arbitrary bytes and checks properties, not only "no
//! crash": a reply parsed whole or in chunks gives the same replies, every
//! well-formed reply memcached can send is parsed exactly, an envelope is
//! opened exactly when an independent reference says so (same reject reason,
//! same payload), and only canonical envelopes open.
//!
//! `fuzz_targets/*.rs` call these under libFuzzer (nightly, `scripts/fuzz`);
//! `crates/waffle-core/tests/fuzz_replay.rs` includes this file by path and
//! runs the same bodies on stable over the saved corpus and random inputs. So
//! this file uses only `waffle_core` and `std`.

use waffle_core::codec::{Codec, Stored};
use waffle_core::config::Config;
use waffle_core::envelope::{
    self, Identity, Reject, FLAG_SEALED, HEADER_BYTES, MAX_PAYLOAD_BYTES, SEALED_OVERHEAD_BYTES, TRAILER_BYTES,
};
use waffle_core::grid::protocol::{self, ProtocolError, Reply, MAX_LINE_BYTES, MAX_VALUE_BYTES};
use waffle_core::grid::NodeSpec;
use waffle_core::seal::{SealKey, NONCE_BYTES};

/// A fuzz target's body.
pub type Body = fn(&[u8]);

/// The fuzz targets by name: (name, body). The replay test runs each over
/// `fuzz/corpus/<name>/`.
pub const TARGETS: [(&str, Body); 5] = [
    ("parse_reply", parse_reply),
    ("envelope_open", envelope_open),
    ("envelope_roundtrip", envelope_roundtrip),
    ("envelope_sealed", envelope_sealed),
    ("config", config),
];

// ------------------------------------------------------------------ replies

/// Target `parse_reply`: `data` is what a node sent on one connection.
///
/// 1. Parsed reply by reply, as the connection does: every reply's fields are
///    exactly the bytes the wire format says (checked against the line itself).
/// 2. Every prefix of the input gives "incomplete" or the same answer, so a
///    reply split over several reads is never a fault; and feeding the input
///    in chunks gives the same replies and the same final error.
/// 3. `data` also drives a generator of well-formed replies (what memcached
///    may send); the parser must return exactly them.
pub fn parse_reply(data: &[u8]) {
    let whole = parse_all(data);
    let chunked = parse_chunked(data);
    assert_eq!(whole, chunked, "whole vs chunked parse of {data:?}");
    generated_replies(data);
}

/// What a sequence of replies parsed to, owned (for comparison).
#[derive(Debug, PartialEq, Eq)]
struct Parsed {
    replies: Vec<(String, usize)>,
    /// How it ended: None = incomplete (wait for more), Some(error).
    end: Option<ProtocolError>,
}

fn parse_all(data: &[u8]) -> Parsed {
    let mut at = 0;
    let mut replies = Vec::new();
    loop {
        let buf = &data[at..];
        let result = protocol::parse_reply(buf);
        check_prefixes(buf, &result);
        match result {
            Ok(Some((reply, n))) => {
                assert!(n > 0 && n <= buf.len(), "reply length {n} outside 1..={}", buf.len());
                check_reply(buf, reply, n);
                replies.push((format!("{reply:?}"), n));
                at += n;
            }
            Ok(None) => return Parsed { replies, end: None },
            Err(e) => return Parsed { replies, end: Some(e) },
        }
    }
}

/// The connection's loop: bytes arrive in chunks, the buffer is parsed from
/// its start after each, complete replies are consumed.
fn parse_chunked(data: &[u8]) -> Parsed {
    let mut state = 0x9E37_79B9u32 ^ data.len() as u32;
    let mut next_chunk = move || {
        state = state.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        1 + (state >> 16) as usize % 97
    };
    let (mut start, mut filled) = (0usize, 0usize);
    let mut replies = Vec::new();
    loop {
        match protocol::parse_reply(&data[start..filled]) {
            Ok(Some((reply, n))) => {
                replies.push((format!("{reply:?}"), n));
                start += n;
            }
            Ok(None) if filled < data.len() => filled = (filled + next_chunk()).min(data.len()),
            Ok(None) => return Parsed { replies, end: None },
            Err(e) => return Parsed { replies, end: Some(e) },
        }
    }
}

/// Every prefix of `buf` parses to "incomplete", or (when it already holds
/// the whole first reply, or the bytes that make it an error) to `full`.
fn check_prefixes(buf: &[u8], full: &Result<Option<(Reply<'_>, usize)>, ProtocolError>) {
    let len = buf.len();
    let mut cuts: Vec<usize> = (0..len.min(160)).collect();
    cuts.extend(len.saturating_sub(160)..len);
    if let Some(nl) = buf.iter().position(|&b| b == b'\n') {
        cuts.extend(nl.saturating_sub(2)..(nl + 3).min(len));
    }
    for k in cuts {
        let part = protocol::parse_reply(&buf[..k]);
        match (full, &part) {
            (_, Ok(None)) => {}
            (Ok(Some((reply, n))), Ok(Some((r, m)))) => {
                assert!(k >= *n, "a prefix of {k} bytes held a reply although the first reply takes {n}");
                assert_eq!((reply, n), (r, m), "prefix of {k} bytes parsed differently");
            }
            (Err(e), Err(f)) => assert_eq!(e, f, "prefix of {k} bytes failed differently"),
            _ => panic!("prefix of {k} bytes of {buf:?}: {part:?}, but the whole: {full:?}"),
        }
    }
}

/// The reply's fields are exactly what its bytes say.
fn check_reply(buf: &[u8], reply: Reply<'_>, n: usize) {
    let line_len = buf.windows(2).position(|w| w == b"\r\n").expect("a complete reply has a line");
    let line = &buf[..line_len];
    assert!(line.len() <= MAX_LINE_BYTES, "a line of {} bytes was accepted", line.len());
    assert!(line.iter().all(|&b| (0x20..0x7f).contains(&b) || b >= 0x80), "control byte in an accepted line {line:?}");
    let (code, rest) = match line.iter().position(|&b| b == b' ') {
        Some(i) => (&line[..i], Some(&line[i + 1..])),
        None => (line, None),
    };
    let after_line = line_len + 2;
    let is_within = |part: &[u8], whole: &[u8]| {
        let (p, w) = (part.as_ptr() as usize, whole.as_ptr() as usize);
        p >= w && p + part.len() <= w + whole.len()
    };
    let args = |got: &[u8]| {
        assert_eq!(got, rest.unwrap_or(b""), "the arguments are the rest of the line {line:?}");
        assert!(got.is_empty() || is_within(got, line));
        assert_eq!(n, after_line, "a reply without a value is one line");
    };
    match reply {
        Reply::Value { data, flags } => {
            assert_eq!(code, b"VA");
            let rest = rest.expect("VA has a length");
            let (len_text, flag_text) = match rest.iter().position(|&b| b == b' ') {
                Some(i) => (&rest[..i], &rest[i + 1..]),
                None => (rest, &b""[..]),
            };
            assert!(!len_text.is_empty() && len_text.iter().all(u8::is_ascii_digit), "length {len_text:?}");
            let len: u64 = std::str::from_utf8(len_text).unwrap().parse().unwrap();
            assert_eq!(len, data.len() as u64, "the value's length is the announced one");
            assert!(data.len() <= MAX_VALUE_BYTES);
            assert_eq!(flags, flag_text);
            assert_eq!(n, after_line + data.len() + 2);
            assert_eq!(data, &buf[after_line..after_line + data.len()]);
            assert_eq!(&buf[n - 2..n], b"\r\n");
            check_flags(flags);
        }
        Reply::End => {
            assert_eq!(line, b"EN");
            assert_eq!(n, 4);
        }
        Reply::Noop => {
            assert_eq!(line, b"MN");
            assert_eq!(n, 4);
        }
        Reply::Error => {
            assert_eq!(line, b"ERROR");
            assert_eq!(n, 7);
        }
        Reply::Done { flags } => {
            assert_eq!(code, b"HD");
            args(flags);
            check_flags(flags);
        }
        Reply::NotStored { flags } => {
            assert_eq!(code, b"NS");
            args(flags);
        }
        Reply::NotFound { flags } => {
            assert_eq!(code, b"NF");
            args(flags);
        }
        Reply::Exists { flags } => {
            assert_eq!(code, b"EX");
            args(flags);
        }
        Reply::ServerError(message) => {
            assert_eq!(code, b"SERVER_ERROR");
            args(message);
        }
        Reply::ClientError(message) => {
            assert_eq!(code, b"CLIENT_ERROR");
            args(message);
        }
    }
}

/// `flag` finds the first token that starts with the letter; `parse_u32`
/// accepts exactly the decimal numbers that fit.
fn check_flags(flags: &[u8]) {
    for name in [b'O', b'k', b'b', b'c', b't', b's', b'f'] {
        let expect = flags.split(|&b| b == b' ').find(|t| t.first() == Some(&name)).map(|t| &t[1..]);
        let got = protocol::flag(flags, name);
        assert_eq!(got, expect, "flag {} of {flags:?}", name as char);
        if let Some(token) = got {
            let reference = (!token.is_empty() && token.len() <= 10 && token.iter().all(u8::is_ascii_digit))
                .then(|| std::str::from_utf8(token).unwrap().parse::<u64>().unwrap())
                .and_then(|v| u32::try_from(v).ok());
            assert_eq!(protocol::parse_u32(token), reference, "parse_u32({token:?})");
        }
    }
}

/// A reader over the fuzz input that yields zeros when it runs out.
struct Bytes<'a> {
    data: &'a [u8],
    at: usize,
}

impl Bytes<'_> {
    fn byte(&mut self) -> u8 {
        let b = self.data.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        b
    }
    fn done(&self) -> bool {
        self.at >= self.data.len()
    }
    fn take(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.byte()).collect()
    }
    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take(8).try_into().unwrap())
    }
}

/// Printable, no space: a flag token's characters.
fn token_char(b: u8) -> u8 {
    0x21 + b % (0x7f - 0x21)
}

/// Builds well-formed replies from `data` (what memcached may send) and checks
/// that the parser returns exactly them, whole and in chunks.
fn generated_replies(data: &[u8]) {
    let mut input = Bytes { data, at: 0 };
    let mut wire = Vec::new();
    let mut expect: Vec<(String, usize)> = Vec::new();
    let mut count = 0;
    while !input.done() && count < 64 {
        count += 1;
        let start = wire.len();
        let op = input.byte() % 10;
        let mut flags = Vec::new();
        if matches!(op, 0 | 2 | 3 | 4 | 5) {
            for t in 0..input.byte() % 4 {
                if t > 0 {
                    flags.push(b' ');
                }
                flags.push(if t == 0 { b'O' } else { token_char(input.byte()) });
                let n = input.byte() % 12;
                flags.extend((0..n).map(|_| token_char(input.byte())));
            }
        }
        let message: Vec<u8> = {
            let n = 1 + input.byte() % 40;
            (0..n).map(|_| 0x20 + input.byte() % 0x5f).collect()
        };
        let with_flags = |code: &str, wire: &mut Vec<u8>| {
            wire.extend_from_slice(code.as_bytes());
            if !flags.is_empty() {
                wire.push(b' ');
                wire.extend_from_slice(&flags);
            }
            wire.extend_from_slice(b"\r\n");
        };
        let reply: String = match op {
            0 => {
                let len = match input.byte() % 4 {
                    0 => 0,
                    1 => input.byte() as usize,
                    2 => 4136,
                    _ => (input.byte() as usize) << 6,
                };
                // Any bytes at all, including "\r\n" and what looks like replies.
                let value: Vec<u8> = (0..len).map(|i| if i % 7 == 3 { b'\r' } else { input.byte() }).collect();
                wire.extend_from_slice(format!("VA {len}").as_bytes());
                if !flags.is_empty() {
                    wire.push(b' ');
                    wire.extend_from_slice(&flags);
                }
                wire.extend_from_slice(b"\r\n");
                wire.extend_from_slice(&value);
                wire.extend_from_slice(b"\r\n");
                format!("{:?}", Reply::Value { data: &value, flags: &flags })
            }
            1 => {
                wire.extend_from_slice(b"EN\r\n");
                format!("{:?}", Reply::End)
            }
            2 => {
                with_flags("HD", &mut wire);
                format!("{:?}", Reply::Done { flags: &flags })
            }
            3 => {
                with_flags("NS", &mut wire);
                format!("{:?}", Reply::NotStored { flags: &flags })
            }
            4 => {
                with_flags("NF", &mut wire);
                format!("{:?}", Reply::NotFound { flags: &flags })
            }
            5 => {
                with_flags("EX", &mut wire);
                format!("{:?}", Reply::Exists { flags: &flags })
            }
            6 => {
                wire.extend_from_slice(b"MN\r\n");
                format!("{:?}", Reply::Noop)
            }
            7 | 8 => {
                let code: &[u8] = if op == 7 { b"SERVER_ERROR " } else { b"CLIENT_ERROR " };
                wire.extend_from_slice(code);
                wire.extend_from_slice(&message);
                wire.extend_from_slice(b"\r\n");
                if op == 7 {
                    format!("{:?}", Reply::ServerError(&message))
                } else {
                    format!("{:?}", Reply::ClientError(&message))
                }
            }
            _ => {
                wire.extend_from_slice(b"ERROR\r\n");
                format!("{:?}", Reply::Error)
            }
        };
        expect.push((reply, wire.len() - start));
    }
    let want = Parsed { replies: expect, end: None };
    assert_eq!(parse_all(&wire), want, "well-formed replies {wire:?}");
    assert_eq!(parse_chunked(&wire), want, "well-formed replies in chunks");
}

// ------------------------------------------------------------------ envelopes

/// What `envelope::open` must answer, written from docs/design.md ("Reject
/// reasons, in the order checked") without looking at the implementation.
pub fn reference_open(value: &[u8], expect: Identity, page_bytes: usize) -> Result<Vec<u8>, Reject> {
    let le64 = |at: usize| u64::from_le_bytes(value[at..at + 8].try_into().unwrap());
    if value.len() < 40 {
        return Err(Reject::Length);
    }
    if &value[0..4] != b"WAFL" || value[4] != 1 || value[5] != 0 || value[6] != 0 || value[7] != 0 {
        return Err(Reject::Format);
    }
    let n = u32::from_le_bytes(value[32..36].try_into().unwrap()) as u64;
    if n > 65536 || 36 + n + 4 != value.len() as u64 {
        return Err(Reject::Length);
    }
    let n = n as usize;
    let crc = u32::from_le_bytes(value[36 + n..].try_into().unwrap());
    if crc32c_reference(&value[..36 + n]) != crc {
        return Err(Reject::Checksum);
    }
    if le64(8) != expect.cache_id {
        return Err(Reject::Database);
    }
    if le64(16) != expect.page {
        return Err(Reject::Page);
    }
    if le64(24) != expect.version {
        return Err(Reject::Version);
    }
    if n != page_bytes {
        return Err(Reject::Size);
    }
    Ok(value[36..36 + n].to_vec())
}

/// CRC-32C (Castagnoli, reflected 0x82F63B78), bit by bit: slow and obviously right.
pub fn crc32c_reference(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ 0x82F6_3B78 } else { crc >> 1 };
        }
    }
    !crc
}

/// Target `envelope_open`: `data[0]` says how to build the expectation, the
/// rest is the grid value. `open` must agree with [`reference_open`] (reason
/// and payload), and whatever opens must be exactly what `seal` makes.
pub fn envelope_open(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else { return };
    let mut value = rest.to_vec();
    let header = |v: &[u8], at: usize| v.get(at..at + 8).map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap()));
    let len_field = value.get(32..36).map_or(0, |b| u32::from_le_bytes(b.try_into().unwrap()) as usize);
    // Random bytes almost never carry a right crc32c: mode bit 2 makes it right,
    // so the identity checks behind it are reached.
    if mode & 4 != 0 && value.len() >= HEADER_BYTES + TRAILER_BYTES {
        let body_end = value.len() - TRAILER_BYTES;
        let crc = crc32c_reference(&value[..body_end]);
        value[body_end..].copy_from_slice(&crc.to_le_bytes());
    }
    // Bit 3: a well-formed header too (magic, format, flags, length field).
    if mode & 8 != 0 && value.len() >= HEADER_BYTES + TRAILER_BYTES {
        value[0..8].copy_from_slice(b"WAFL\x01\x00\x00\x00");
        let n = (value.len() - HEADER_BYTES - TRAILER_BYTES) as u32;
        value[32..36].copy_from_slice(&n.to_le_bytes());
        let body_end = value.len() - TRAILER_BYTES;
        let crc = crc32c_reference(&value[..body_end]);
        value[body_end..].copy_from_slice(&crc.to_le_bytes());
    }
    let from_value = Identity { cache_id: header(&value, 8), page: header(&value, 16), version: header(&value, 24) };
    // Bits 0-1: which identity is expected; bits 4-5: which page size.
    let expect = match mode & 3 {
        0 => from_value,
        1 => Identity { cache_id: from_value.cache_id ^ 1, ..from_value },
        2 => Identity { page: from_value.page.wrapping_add(1), ..from_value },
        _ => Identity { version: from_value.version.wrapping_sub(1), ..from_value },
    };
    let page_bytes = match (mode >> 4) & 3 {
        0 => len_field,
        1 => 4096,
        2 => value.len().saturating_sub(HEADER_BYTES + TRAILER_BYTES),
        _ => len_field ^ 1,
    };
    let got = envelope::open(&value, expect, page_bytes);
    let want = reference_open(&value, expect, page_bytes);
    assert_eq!(got.map(<[u8]>::to_vec), want, "open vs the reference for {value:?}");
    if let Ok(payload) = got {
        assert_eq!(payload.len(), page_bytes);
        assert_eq!(envelope::seal(expect, payload), value, "only the canonical envelope opens");
    }
}

/// Target `envelope_roundtrip`: an arbitrary identity and payload. What `seal`
/// makes, `open` returns; every other expectation, every truncation and
/// every bit flip is refused with the right reason; the key names exactly
/// this cache and page.
pub fn envelope_roundtrip(data: &[u8]) {
    let mut input = Bytes { data, at: 0 };
    let id = Identity { cache_id: input.u64(), page: input.u64(), version: input.u64() };
    let shape = input.byte();
    let rest = &data[input.at.min(data.len())..];
    // Bit 7: grow the payload to a size chosen by two bytes (up to the largest
    // allowed), repeating the input, so big pages are covered too.
    let payload: Vec<u8> = if shape & 0x80 != 0 {
        let len = (((shape as usize & 1) << 16) | (input.byte() as usize) << 8 | input.byte() as usize)
            .min(MAX_PAYLOAD_BYTES);
        (0..len).map(|i| if rest.is_empty() { i as u8 } else { rest[i % rest.len()] }).collect()
    } else {
        rest[..rest.len().min(MAX_PAYLOAD_BYTES)].to_vec()
    };
    let v = envelope::seal(id, &payload);
    assert_eq!(v.len(), HEADER_BYTES + payload.len() + TRAILER_BYTES);
    assert_eq!(envelope::open(&v, id, payload.len()), Ok(&payload[..]));
    assert_eq!(reference_open(&v, id, payload.len()), Ok(payload.clone()), "seal disagrees with the layout");

    let delta = input.u64() | 1;
    assert_eq!(
        envelope::open(&v, Identity { cache_id: id.cache_id ^ delta, ..id }, payload.len()),
        Err(Reject::Database)
    );
    assert_eq!(envelope::open(&v, Identity { page: id.page ^ delta, ..id }, payload.len()), Err(Reject::Page));
    assert_eq!(envelope::open(&v, Identity { version: id.version ^ delta, ..id }, payload.len()), Err(Reject::Version));
    assert_eq!(envelope::open(&v, id, payload.len() ^ (delta as usize & 0xffff | 1)), Err(Reject::Size));

    let cut = input.u64() as usize % v.len();
    assert_eq!(envelope::open(&v[..cut], id, payload.len()), Err(Reject::Length), "truncated to {cut}");
    let mut longer = v.clone();
    longer.push(input.byte());
    assert_eq!(envelope::open(&longer, id, payload.len()), Err(Reject::Length), "one byte too long");

    let at = input.u64() as usize % v.len();
    let bit = input.byte() % 8;
    let mut flipped = v.clone();
    flipped[at] ^= 1 << bit;
    let why = envelope::open(&flipped, id, payload.len());
    let expected = match at {
        0..=7 => Reject::Format,
        32..=35 => Reject::Length,
        _ => Reject::Checksum,
    };
    assert_eq!(why, Err(expected), "bit {bit} of byte {at} flipped");

    let key = envelope::key(id.cache_id, id.page);
    assert!(protocol::is_valid_key(key.as_bytes()), "key {key:?}");
    let (cache_hex, page_hex) = key.strip_prefix("wf").and_then(|k| k.split_once('.')).expect("wf<id>.<page>");
    assert_eq!(cache_hex.len(), 16);
    assert_eq!(u64::from_str_radix(cache_hex, 16), Ok(id.cache_id));
    assert_eq!(u64::from_str_radix(page_hex, 16), Ok(id.page));
}

/// The key the sealed target uses (a fixed one: the fuzzer plays the
/// attacker, who does not have it).
fn fuzz_key() -> &'static SealKey {
    static KEY: std::sync::OnceLock<SealKey> = std::sync::OnceLock::new();
    KEY.get_or_init(|| SealKey::from_bytes(&[0x5a; 32]))
}

/// Target `envelope_sealed`: `open_into`, the entry the cache uses, with and
/// without a key.
///
/// 1. Arbitrary bytes as a grid value (the identity expected is the one the
///    value's own header claims, so the checks behind it are reached): never
///    a panic; without a key the answer is exactly `open`'s (a sealed value
///    is a `seal` reject); with a key a plain value is a `seal` reject, and a
///    value opens only if its header is the expected identity and page size
///    (the tag is not forgeable by a fuzzer).
/// 2. An arbitrary identity and payload sealed with the key: opens to the
///    payload; refused without the key, under another identity, at another
///    page size, truncated or with any bit flipped.
pub fn envelope_sealed(data: &[u8]) {
    let key = fuzz_key();
    let Some((&mode, rest)) = data.split_first() else { return };
    // 1. As a value.
    let value = rest;
    if value.len() >= 32 {
        let header = |at: usize| u64::from_le_bytes(value[at..at + 8].try_into().unwrap());
        let expect = Identity { cache_id: header(8), page: header(16), version: header(24) };
        let page_bytes = match mode & 3 {
            0 => 4096,
            1 => value.len().saturating_sub(SEALED_OVERHEAD_BYTES),
            2 => value.len().saturating_sub(HEADER_BYTES + TRAILER_BYTES),
            _ => 512,
        };
        let mut out = vec![0u8; page_bytes];
        let plain = envelope::open_into(value, expect, None, &mut out);
        // Shorter than any envelope: `length` first, whatever else is wrong (docs/design.md's order).
        let long_enough = value.len() >= HEADER_BYTES + TRAILER_BYTES;
        // Flags this build knows: bit 1 sealed, bits 2-3 one codec (docs/design.md).
        let known_flags = long_enough && value[5] & !0b1110 == 0 && value[5] & 0b1100 != 0b1100;
        let compressed = known_flags && value[5] & 0b1100 != 0;
        let sealed_flag = known_flags && value[5] & FLAG_SEALED != 0;
        if long_enough && format_ok(value) && sealed_flag {
            assert_eq!(plain, Err(Reject::Seal), "a sealed value without a key");
        } else if long_enough && format_ok(value) && compressed {
            // A plain compressed value: `open` reads raw ones only. Whatever
            // opens fills the page exactly; a checked payload that does not
            // decompress is a `codec` reject.
            if plain.is_ok() {
                assert!(matches!(plain, Ok(Stored::Lz4 | Stored::Zstd)));
            }
        } else {
            let want_plain = envelope::open(value, expect, page_bytes).map(|_| Stored::Raw);
            assert_eq!(plain, want_plain, "open_into without a key vs open for {value:?}");
        }
        let sealed = envelope::open_into(value, expect, Some(key), &mut out);
        if long_enough && format_ok(value) && known_flags && !sealed_flag {
            assert_eq!(sealed, Err(Reject::Seal), "a plain value with a key configured");
        }
        if sealed.is_ok() {
            assert!(sealed_flag);
        }
    }
    // 2. As an identity and a payload.
    let mut input = Bytes { data: rest, at: 0 };
    let id = Identity { cache_id: input.u64(), page: input.u64(), version: input.u64() };
    let payload: Vec<u8> = rest[input.at.min(rest.len())..].iter().copied().take(MAX_PAYLOAD_BYTES).collect();
    let v = envelope::seal_with(id, &payload, Some(key)).expect("a nonce");
    assert_eq!(v.len(), SEALED_OVERHEAD_BYTES + payload.len());
    assert_eq!(v[5], FLAG_SEALED);
    // The ciphertext shows no 16 bytes of the payload. (The header is
    // plaintext by design, it is the associated data; so is the nonce, which
    // the fuzzer can learn from the comparisons and copy into the payload.)
    let ciphertext = &v[HEADER_BYTES + NONCE_BYTES..HEADER_BYTES + NONCE_BYTES + payload.len()];
    if payload.len() >= 16 {
        assert!(!ciphertext.windows(16).any(|w| w == &payload[..16]), "plaintext visible in a sealed value");
    }
    let mut out = vec![0u8; payload.len()];
    assert_eq!(envelope::open_into(&v, id, Some(key), &mut out), Ok(Stored::Raw));
    assert_eq!(out, payload);
    assert_eq!(envelope::open_into(&v, id, None, &mut out), Err(Reject::Seal));
    let delta = mode as u64 | 1;
    assert_eq!(
        envelope::open_into(&v, Identity { page: id.page ^ delta, ..id }, Some(key), &mut out),
        Err(Reject::Page)
    );
    assert_eq!(
        envelope::open_into(&v, Identity { version: id.version ^ delta, ..id }, Some(key), &mut out),
        Err(Reject::Version)
    );
    assert_eq!(
        envelope::open_into(&v, Identity { cache_id: id.cache_id ^ delta, ..id }, Some(key), &mut out),
        Err(Reject::Database)
    );
    let mut other_size = vec![0u8; payload.len() + 1];
    assert_eq!(envelope::open_into(&v, id, Some(key), &mut other_size), Err(Reject::Size));
    let at = (id.cache_id ^ id.version) as usize % v.len();
    let mut flipped = v.clone();
    flipped[at] ^= 1 << (mode % 8);
    assert!(envelope::open_into(&flipped, id, Some(key), &mut out).is_err(), "bit {} of byte {at} flipped", mode % 8);
    let cut = (id.page as usize) % v.len();
    assert!(envelope::open_into(&v[..cut], id, Some(key), &mut out).is_err(), "truncated to {cut}");
    // A fresh nonce every time: the same page sealed twice differs.
    assert_ne!(envelope::seal_with(id, &payload, Some(key)).expect("a nonce"), v);
    // 3. The same payload compressed (where it compresses), sealed and plain:
    // opens to the payload, at no other page size, with no bit flipped.
    let codec = if mode & 1 == 0 { Codec::Lz4 } else { Codec::Zstd { level: 1 } };
    for k in [None, Some(key)] {
        let (c, stored) = envelope::seal_page(id, &payload, k, codec).expect("a nonce");
        let mut out = vec![0u8; payload.len()];
        assert_eq!(envelope::open_into(&c, id, k, &mut out), Ok(stored));
        assert_eq!(out, payload);
        if stored == Stored::Raw {
            continue;
        }
        assert!(envelope::open_into(&c, id, k, &mut vec![0u8; payload.len() + 1]).is_err(), "a longer page");
        let mut flipped = c.clone();
        flipped[at % c.len()] ^= 1 << (mode % 8);
        assert!(envelope::open_into(&flipped, id, k, &mut out).is_err(), "a bit of a compressed value flipped");
    }
}

/// Magic, format and reserved bytes as this build writes them.
fn format_ok(v: &[u8]) -> bool {
    v[0..4] == *b"WAFL" && v[4] == 1 && v[6..8] == [0, 0]
}

// ------------------------------------------------------------------ configuration

/// Target `config`: up to five lines, the values of waffle_grid, waffle_local,
/// waffle_timeout_ms, waffle_push_queue and waffle_direct_io (a missing line:
/// not given; more lines are not read). Never a panic; an error names its
/// parameter and the value exactly as given; an accepted value is within its
/// bounds.
pub fn config(data: &[u8]) {
    const NAMES: [&str; 5] =
        ["waffle_grid", "waffle_local", "waffle_timeout_ms", "waffle_push_queue", "waffle_direct_io"];
    let text = String::from_utf8_lossy(data);
    let values: Vec<&str> = text.split('\n').collect();
    let lookup = |name: &str| {
        let i = NAMES.iter().position(|n| *n == name)?;
        values.get(i).filter(|v| **v != "-").map(|v| v.to_string())
    };
    match Config::from_sources(lookup, |_| None) {
        Ok(c) => {
            assert!((1..=60_000).contains(&c.timeout_ms), "timeout {}", c.timeout_ms);
            assert!(c.local_bytes <= 1 << 40 && c.push_queue_bytes <= 1 << 40);
            for spec in &c.grid {
                assert!(spec.port >= 1 && spec.weight >= 1 && !spec.host.is_empty(), "{spec:?}");
                assert!(!spec.host.chars().any(|ch| ch.is_whitespace() || ch.is_control()), "{spec:?}");
            }
        }
        Err(e) => {
            let i =
                NAMES.iter().position(|n| *n == e.param()).unwrap_or_else(|| panic!("unknown parameter {}", e.param()));
            assert_eq!(Some(&e.value()), values.get(i), "the error quotes the value as given");
            let shown = e.to_string();
            assert!(shown.contains(e.param()) && shown.contains(e.value()), "{shown}");
        }
    }
    if let Ok(specs) = NodeSpec::parse_list(values[0]) {
        let items = if values[0].trim().is_empty() { 0 } else { values[0].split(',').count() };
        assert_eq!(specs.len(), items, "one node per item of {:?}", values[0]);
    }
}
