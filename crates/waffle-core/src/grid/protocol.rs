//! memcached's meta text protocol, as pure functions over bytes.
//!
//! Requests are appended to a buffer; replies are parsed from a buffer without
//! I/O, so the parser can be tested and fuzzed on its own. The parser never
//! panics: every malformed input is a [`ProtocolError`], every short input is
//! `Ok(None)` ("read more").

/// The largest value the client stores or accepts. A page envelope is far
/// smaller; memcached's own default item limit is 1 MiB.
pub const MAX_VALUE_BYTES: usize = 2 << 20;

/// memcached's key limit.
pub const MAX_KEY_BYTES: usize = 250;

/// The longest reply line the parser waits for (a `VA` line carries at most a
/// length and a few short flags; error lines are short sentences).
pub const MAX_LINE_BYTES: usize = 1024;

/// A reply the server can send to a meta command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply<'a> {
    /// `VA <len> <flags>*` and the value.
    Value { data: &'a [u8], flags: &'a [u8] },
    /// `EN`: miss (mg).
    End,
    /// `HD <flags>*`: success without a value (ms, md, mg without v).
    Done { flags: &'a [u8] },
    /// `NS`: not stored.
    NotStored { flags: &'a [u8] },
    /// `NF`: not found (md).
    NotFound { flags: &'a [u8] },
    /// `EX`: CAS mismatch.
    Exists { flags: &'a [u8] },
    /// `MN`: the end of a pipeline (answer to `mn`).
    Noop,
    /// `SERVER_ERROR <message>`: the server could not do it (e.g. out of memory, too large).
    ServerError(&'a [u8]),
    /// `CLIENT_ERROR <message>`: we sent something the server did not accept.
    ClientError(&'a [u8]),
    /// `ERROR`: an unknown command.
    Error,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProtocolError {
    /// No `\r\n` within [`MAX_LINE_BYTES`].
    LineTooLong,
    /// A line ended with a bare `\n`, or held a control byte.
    BadLine,
    /// The first word is no reply code we know.
    UnknownReply,
    /// A `VA` line without a decimal length.
    BadLength,
    /// A `VA` length above [`MAX_VALUE_BYTES`].
    ValueTooLarge,
    /// The value is not followed by `\r\n`.
    MissingTerminator,
    /// A reply code that takes no arguments came with some.
    UnexpectedArguments,
}

/// Parses one reply at the start of `buf`. `Ok(None)`: `buf` holds only the
/// beginning of a reply. `Ok(Some((reply, n)))`: the reply took `n` bytes.
pub fn parse_reply(buf: &[u8]) -> Result<Option<(Reply<'_>, usize)>, ProtocolError> {
    let Some(line_len) = find_line(buf)? else {
        return Ok(None);
    };
    let line = &buf[..line_len];
    let after_line = line_len + 2;
    let (code, rest, has_args) = match line.iter().position(|&b| b == b' ') {
        Some(i) => (&line[..i], &line[i + 1..], true),
        None => (line, &line[line.len()..], false),
    };
    // "EN " (a space, then nothing) is no more a bare EN than "EN x" is.
    let no_args = |reply: Reply<'static>| {
        if !has_args {
            Ok(Some((reply, after_line)))
        } else {
            Err(ProtocolError::UnexpectedArguments)
        }
    };
    match code {
        b"VA" => {
            let (len_text, flags) = match rest.iter().position(|&b| b == b' ') {
                Some(i) => (&rest[..i], &rest[i + 1..]),
                None => (rest, &rest[rest.len()..]),
            };
            let len = parse_length(len_text)?;
            let end = after_line + len;
            if buf.len() < end + 2 {
                return Ok(None);
            }
            if &buf[end..end + 2] != b"\r\n" {
                return Err(ProtocolError::MissingTerminator);
            }
            Ok(Some((Reply::Value { data: &buf[after_line..end], flags }, end + 2)))
        }
        b"HD" => Ok(Some((Reply::Done { flags: rest }, after_line))),
        b"NS" => Ok(Some((Reply::NotStored { flags: rest }, after_line))),
        b"NF" => Ok(Some((Reply::NotFound { flags: rest }, after_line))),
        b"EX" => Ok(Some((Reply::Exists { flags: rest }, after_line))),
        b"EN" => no_args(Reply::End),
        b"MN" => no_args(Reply::Noop),
        b"ERROR" => no_args(Reply::Error),
        b"SERVER_ERROR" => Ok(Some((Reply::ServerError(rest), after_line))),
        b"CLIENT_ERROR" => Ok(Some((Reply::ClientError(rest), after_line))),
        _ => Err(ProtocolError::UnknownReply),
    }
}

/// The length of the first line (without its `\r\n`), if it is complete.
fn find_line(buf: &[u8]) -> Result<Option<usize>, ProtocolError> {
    let window = &buf[..buf.len().min(MAX_LINE_BYTES + 2)];
    for (i, &b) in window.iter().enumerate() {
        match b {
            b'\n' => {
                return if i > 0 && window[i - 1] == b'\r' { Ok(Some(i - 1)) } else { Err(ProtocolError::BadLine) };
            }
            // A '\r' not followed by '\n', or any other control byte, is no meta reply.
            b'\r' if window.get(i + 1).is_some_and(|&next| next != b'\n') => return Err(ProtocolError::BadLine),
            b'\r' => {}
            0..=0x1f | 0x7f => return Err(ProtocolError::BadLine),
            _ => {}
        }
    }
    if buf.len() >= MAX_LINE_BYTES + 2 {
        Err(ProtocolError::LineTooLong)
    } else {
        Ok(None)
    }
}

fn parse_length(text: &[u8]) -> Result<usize, ProtocolError> {
    // Eight digits are enough for MAX_VALUE_BYTES and cannot overflow usize.
    if text.is_empty() || text.len() > 8 || !text.iter().all(u8::is_ascii_digit) {
        return Err(ProtocolError::BadLength);
    }
    let len = text.iter().fold(0usize, |n, &d| n * 10 + usize::from(d - b'0'));
    if len > MAX_VALUE_BYTES {
        return Err(ProtocolError::ValueTooLarge);
    }
    Ok(len)
}

/// The value of the one-letter return flag `name` (e.g. `O` for the opaque)
/// in the flags of a reply, e.g. `flag(b"k12 O7", b'O') == Some(b"7")`.
pub fn flag(flags: &[u8], name: u8) -> Option<&[u8]> {
    flags.split(|&b| b == b' ').find(|token| token.first() == Some(&name)).map(|token| &token[1..])
}

/// Parses a decimal `u32` as sent in an opaque token.
pub fn parse_u32(text: &[u8]) -> Option<u32> {
    if text.is_empty() || text.len() > 10 || !text.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = text.iter().fold(0u64, |n, &d| n * 10 + u64::from(d - b'0'));
    u32::try_from(n).ok()
}

/// A key memcached's text protocol accepts: 1..=250 printable ASCII bytes, no space.
pub fn is_valid_key(key: &[u8]) -> bool {
    !key.is_empty() && key.len() <= MAX_KEY_BYTES && key.iter().all(|&b| (0x21..=0x7e).contains(&b))
}

/// `mg <key> v [q O<opaque>]`: the value, the item left as it is.
pub fn encode_get(out: &mut Vec<u8>, key: &[u8], quiet_opaque: Option<u32>) {
    push_command(out, b"mg ", key, b" v", quiet_opaque.is_some(), quiet_opaque);
}

/// `mg <key> v q [O<opaque>]` then `md <key> q [O<opaque>]`: the exclusive
/// fetch, one write. A hit answers `VA` and the value, and the delete frees the
/// item's memory at once (its `HD` is quiet); a miss answers only the delete's
/// `NF` (the quiet `mg` says nothing). An expired item (`T-1`) would keep its
/// slab chunk until the LRU reached it. The caller ends the pipeline with `mn`.
pub fn encode_take(out: &mut Vec<u8>, key: &[u8], opaque: Option<u32>) {
    push_command(out, b"mg ", key, b" v", true, opaque);
    push_command(out, b"md ", key, b"", true, opaque);
}

/// `<verb><key><flags>[ q][ O<opaque>]\r\n`.
fn push_command(out: &mut Vec<u8>, verb: &[u8], key: &[u8], flags: &[u8], quiet: bool, opaque: Option<u32>) {
    out.extend_from_slice(verb);
    out.extend_from_slice(key);
    out.extend_from_slice(flags);
    if quiet {
        out.extend_from_slice(b" q");
    }
    push_opaque(out, opaque);
    out.extend_from_slice(b"\r\n");
}

fn push_opaque(out: &mut Vec<u8>, opaque: Option<u32>) {
    if let Some(o) = opaque {
        out.extend_from_slice(b" O");
        push_decimal(out, o as u64);
    }
}

/// `n` in decimal, without a formatting allocation (the hot path encodes one per request).
fn push_decimal(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

/// `ms <key> <len> T<ttl> q` and the data: a quiet set (only failures answer).
pub fn encode_set(out: &mut Vec<u8>, key: &[u8], data: &[u8], ttl_s: u32) {
    out.extend_from_slice(b"ms ");
    out.extend_from_slice(key);
    out.push(b' ');
    push_decimal(out, data.len() as u64);
    out.extend_from_slice(b" T");
    push_decimal(out, ttl_s as u64);
    out.extend_from_slice(b" q\r\n");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// `md <key>`: answered by `HD` (deleted) or `NF` (was not there).
pub fn encode_delete(out: &mut Vec<u8>, key: &[u8]) {
    out.extend_from_slice(b"md ");
    out.extend_from_slice(key);
    out.extend_from_slice(b"\r\n");
}

/// `mn`: answered by `MN` after every reply to the commands before it.
pub fn encode_noop(out: &mut Vec<u8>) {
    out.extend_from_slice(b"mn\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(buf: &[u8]) -> (Reply<'_>, usize) {
        parse_reply(buf).expect("valid").expect("complete")
    }

    #[test]
    fn parses_every_reply_code() {
        assert_eq!(one(b"VA 3\r\nabc\r\n"), (Reply::Value { data: b"abc", flags: b"" }, 11));
        assert_eq!(one(b"VA 2 kb O7\r\nxy\r\nMN\r\n"), (Reply::Value { data: b"xy", flags: b"kb O7" }, 16));
        assert_eq!(one(b"VA 0\r\n\r\n"), (Reply::Value { data: b"", flags: b"" }, 8));
        assert_eq!(one(b"EN\r\n"), (Reply::End, 4));
        assert_eq!(one(b"HD\r\n"), (Reply::Done { flags: b"" }, 4));
        assert_eq!(one(b"HD O3\r\n"), (Reply::Done { flags: b"O3" }, 7));
        assert_eq!(one(b"NS\r\n"), (Reply::NotStored { flags: b"" }, 4));
        assert_eq!(one(b"NF\r\n"), (Reply::NotFound { flags: b"" }, 4));
        assert_eq!(one(b"EX\r\n"), (Reply::Exists { flags: b"" }, 4));
        assert_eq!(one(b"MN\r\n"), (Reply::Noop, 4));
        assert_eq!(one(b"ERROR\r\n"), (Reply::Error, 7));
        assert_eq!(
            one(b"SERVER_ERROR object too large for cache\r\n"),
            (Reply::ServerError(b"object too large for cache"), 41)
        );
        assert_eq!(one(b"CLIENT_ERROR bad data chunk\r\n"), (Reply::ClientError(b"bad data chunk"), 29));
    }

    #[test]
    fn value_may_hold_any_bytes_including_crlf() {
        let buf = b"VA 6\r\n\r\nEN\r\n\r\n";
        assert_eq!(one(buf), (Reply::Value { data: b"\r\nEN\r\n", flags: b"" }, buf.len()));
        let mut buf = b"VA 256\r\n".to_vec();
        buf.extend((0..=255u8).collect::<Vec<_>>());
        buf.extend_from_slice(b"\r\n");
        let (reply, n) = one(&buf);
        assert_eq!(n, buf.len());
        assert!(matches!(reply, Reply::Value { data, .. } if data.len() == 256 && data[13] == 13));
    }

    #[test]
    fn every_prefix_of_a_reply_is_incomplete() {
        let full = b"VA 5 O12\r\nhello\r\n";
        for cut in 0..full.len() {
            assert_eq!(parse_reply(&full[..cut]), Ok(None), "cut at {cut}");
        }
        assert!(parse_reply(full).unwrap().is_some());
    }

    #[test]
    fn wrong_lengths_are_errors_or_incomplete() {
        // The value is longer than announced: the terminator is not where it must be.
        assert_eq!(parse_reply(b"VA 2\r\nabc\r\n"), Err(ProtocolError::MissingTerminator));
        // Shorter than announced: we would wait for more bytes (a deadline ends the wait).
        assert_eq!(parse_reply(b"VA 4\r\nab\r\n"), Ok(None));
        assert_eq!(parse_reply(b"VA 4\r\nab\r\nXY"), Err(ProtocolError::MissingTerminator));
        assert_eq!(parse_reply(b"VA -1\r\n"), Err(ProtocolError::BadLength));
        assert_eq!(parse_reply(b"VA +1\r\nx\r\n"), Err(ProtocolError::BadLength));
        assert_eq!(parse_reply(b"VA\r\n"), Err(ProtocolError::BadLength));
        assert_eq!(parse_reply(b"VA  3\r\nabc\r\n"), Err(ProtocolError::BadLength));
        assert_eq!(parse_reply(b"VA 3x\r\nabc\r\n"), Err(ProtocolError::BadLength));
        assert_eq!(parse_reply(b"VA 99999999999999999999\r\n"), Err(ProtocolError::BadLength));
        assert_eq!(parse_reply(b"VA 18446744073709551617\r\n"), Err(ProtocolError::BadLength));
        assert_eq!(parse_reply(b"VA 2097153\r\n"), Err(ProtocolError::ValueTooLarge));
        assert_eq!(parse_reply(b"VA 2097152\r\n"), Ok(None));
    }

    #[test]
    fn garbage_is_an_error() {
        assert_eq!(parse_reply(b"HELLO\r\n"), Err(ProtocolError::UnknownReply));
        assert_eq!(parse_reply(b"VALUE k 0 3\r\nabc\r\nEND\r\n"), Err(ProtocolError::UnknownReply));
        assert_eq!(parse_reply(b"\r\n"), Err(ProtocolError::UnknownReply));
        assert_eq!(parse_reply(b"va 3\r\nabc\r\n"), Err(ProtocolError::UnknownReply));
        assert_eq!(parse_reply(b"EN\n"), Err(ProtocolError::BadLine));
        assert_eq!(parse_reply(b"\n"), Err(ProtocolError::BadLine));
        assert_eq!(parse_reply(b"EN\rX\n"), Err(ProtocolError::BadLine));
        assert_eq!(parse_reply(b"E\0N\r\n"), Err(ProtocolError::BadLine));
        assert_eq!(parse_reply(b"EN 1\r\n"), Err(ProtocolError::UnexpectedArguments));
        assert_eq!(parse_reply(b"MN x\r\n"), Err(ProtocolError::UnexpectedArguments));
        // Found by fuzz/ (parse_reply): a trailing space passed for "no arguments".
        assert_eq!(parse_reply(b"EN \r\n"), Err(ProtocolError::UnexpectedArguments));
        assert_eq!(parse_reply(b"MN \r\n"), Err(ProtocolError::UnexpectedArguments));
        assert_eq!(parse_reply(b"ERROR \r\n8bb"), Err(ProtocolError::UnexpectedArguments));
        assert_eq!(parse_reply(&[b'A'; MAX_LINE_BYTES + 2]), Err(ProtocolError::LineTooLong));
        assert_eq!(parse_reply(&[b'A'; 10]), Ok(None));
        assert_eq!(parse_reply(b""), Ok(None));
        assert_eq!(parse_reply(b"EN\r"), Ok(None));
    }

    #[test]
    fn never_panics_on_random_bytes() {
        // A small deterministic fuzz: random bytes, and mutations of valid replies.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let seeds: [&[u8]; 5] = [b"VA 5 O1\r\nhello\r\n", b"EN\r\n", b"MN\r\n", b"SERVER_ERROR x\r\n", b"HD O3\r\n"];
        let alphabet = b"VAENHDMNSF 0123456789\r\n-O_x";
        for round in 0..200_000u32 {
            let mut buf: Vec<u8> = if round % 2 == 0 {
                let len = (next() % 24) as usize;
                (0..len).map(|_| alphabet[(next() % alphabet.len() as u64) as usize]).collect()
            } else {
                seeds[(next() % seeds.len() as u64) as usize].to_vec()
            };
            for _ in 0..(next() % 3) {
                if !buf.is_empty() {
                    let i = (next() % buf.len() as u64) as usize;
                    buf[i] = next() as u8;
                }
            }
            if let Ok(Some((reply, n))) = parse_reply(&buf) {
                assert!(n <= buf.len());
                if let Reply::Value { data, .. } = reply {
                    assert!(data.len() <= MAX_VALUE_BYTES);
                }
            }
        }
    }

    #[test]
    fn a_pipeline_parses_reply_by_reply() {
        let buf = b"NS\r\nVA 1 O2\r\nz\r\nSERVER_ERROR out of memory\r\nMN\r\n";
        let mut at = 0;
        let mut seen = Vec::new();
        while let Some((reply, n)) = parse_reply(&buf[at..]).unwrap() {
            seen.push(format!("{reply:?}"));
            at += n;
        }
        assert_eq!(at, buf.len());
        assert_eq!(seen.len(), 4);
    }

    #[test]
    fn flags_and_keys() {
        assert_eq!(flag(b"kabc O17", b'O'), Some(&b"17"[..]));
        assert_eq!(flag(b"kabc O17", b'k'), Some(&b"abc"[..]));
        assert_eq!(flag(b"kabc", b'O'), None);
        assert_eq!(flag(b"", b'O'), None);
        assert_eq!(parse_u32(b"4294967295"), Some(u32::MAX));
        assert_eq!(parse_u32(b"4294967296"), None);
        assert_eq!(parse_u32(b"9999999999"), None);
        assert_eq!(parse_u32(b""), None);
        assert!(is_valid_key(b"waffle:1:page:42"));
        assert!(is_valid_key(&[b'k'; 250]));
        assert!(!is_valid_key(&[b'k'; 251]));
        assert!(!is_valid_key(b""));
        assert!(!is_valid_key(b"a b"));
        assert!(!is_valid_key(b"a\r\nmn"));
        assert!(!is_valid_key("é".as_bytes()));
    }

    #[test]
    fn encodes_requests() {
        let mut out = Vec::new();
        encode_take(&mut out, b"k1", None);
        encode_get(&mut out, b"k2", None);
        encode_take(&mut out, b"k3", Some(9));
        encode_get(&mut out, b"k7", Some(4_294_967_295));
        encode_set(&mut out, b"k4", b"data", 0);
        encode_set(&mut out, b"k5", b"", 60);
        encode_delete(&mut out, b"k6");
        encode_noop(&mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "mg k1 v q\r\nmd k1 q\r\nmg k2 v\r\nmg k3 v q O9\r\nmd k3 q O9\r\nmg k7 v q O4294967295\r\n\
             ms k4 4 T0 q\r\ndata\r\nms k5 0 T60 q\r\n\r\nmd k6\r\nmn\r\n"
        );
    }
}
