//! Page compression: what a page becomes before it is sealed into an envelope.
//!
//! A grid value costs memcached memory; a compressed page costs less, so the
//! same nodes hold more of the working set. A page is stored compressed only
//! when that saves at least an eighth of it ([`MIN_SAVING_DIVISOR`]); otherwise
//! it is stored raw and a hit costs no decompression. Which form a value holds
//! is in its envelope's flags ([`Stored`]), so a cache reads whatever another
//! setting wrote, and an unknown form is refused, never guessed.
//!
//! Decompression runs only on bytes the envelope has already checked (crc32c)
//! or authenticated (sealed), and must produce exactly the page size asked
//! for; anything else is a reject, never a panic or a short page.

use std::cell::RefCell;
use std::fmt;

/// A page is kept compressed only if it saves at least `page / 8` bytes:
/// less rarely moves the item into a smaller memcached slab class and would
/// cost a decompression on every hit for nothing.
pub const MIN_SAVING_DIVISOR: usize = 8;
/// zstd levels accepted by `waffle_compress=zstd:N` (negative levels are zstd's fast modes).
pub const ZSTD_LEVELS: std::ops::RangeInclusive<i32> = -7..=19;
/// The level of a plain `zstd`: the fastest of the ordinary levels.
pub const ZSTD_DEFAULT_LEVEL: i32 = 1;

/// What the operator chose (`waffle_compress`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Codec {
    Off,
    Lz4,
    Zstd { level: i32 },
}

/// The default: chosen from docs/benchmarks.md "Compression" (ratio and
/// speed of each codec on the bench datasets' pages).
/// zstd at level 1: on the TPC-C and oltp datasets' pages (random strings
/// and digits, few repeats) LZ4 saves 2-8% and stores most pages raw, zstd:1
/// stores 1.4x and 2.0x the pages per byte at 230-300 MB/s compressing and
/// 750 MB/s decompressing (about 5 us per 4 KiB page).
pub const DEFAULT: Codec = Codec::Zstd { level: 1 };

/// A `waffle_compress` value that names no codec.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    #[error("zstd's level is a number in {:?}", ZSTD_LEVELS)]
    LevelNotANumber,
    #[error("zstd's level must be in {:?}", ZSTD_LEVELS)]
    LevelOutOfRange,
    #[error("expected off, lz4, zstd or zstd:LEVEL")]
    Unknown,
}

impl Codec {
    /// `off`, `lz4`, `zstd` or `zstd:LEVEL`.
    pub fn parse(text: &str) -> Result<Codec, CodecError> {
        let t = text.trim().to_ascii_lowercase();
        match t.as_str() {
            "off" | "none" => return Ok(Codec::Off),
            "lz4" => return Ok(Codec::Lz4),
            "zstd" => return Ok(Codec::Zstd { level: ZSTD_DEFAULT_LEVEL }),
            _ => {}
        }
        if let Some(level) = t.strip_prefix("zstd:") {
            let level: i32 = level.parse().map_err(|_| CodecError::LevelNotANumber)?;
            if !ZSTD_LEVELS.contains(&level) {
                return Err(CodecError::LevelOutOfRange);
            }
            return Ok(Codec::Zstd { level });
        }
        Err(CodecError::Unknown)
    }

    /// Compresses `page` into `out` (cleared first) and says which form `out`
    /// holds: Raw (and `out` empty) when compression is off or saves too little.
    pub fn compress(self, page: &[u8], out: &mut Vec<u8>) -> Stored {
        out.clear();
        let worth = |n: usize| n <= page.len() - page.len() / MIN_SAVING_DIVISOR;
        let stored = match self {
            Codec::Off => return Stored::Raw,
            Codec::Lz4 => {
                out.resize(lz4_flex::block::get_maximum_output_size(page.len()), 0);
                match lz4_flex::block::compress_into(page, out) {
                    Ok(n) if worth(n) => {
                        out.truncate(n);
                        Stored::Lz4
                    }
                    _ => Stored::Raw,
                }
            }
            Codec::Zstd { level } => {
                out.resize(zstd::zstd_safe::compress_bound(page.len()), 0);
                match zstd_compress(page, out, level) {
                    Some(n) if worth(n) => {
                        out.truncate(n);
                        Stored::Zstd
                    }
                    _ => Stored::Raw,
                }
            }
        };
        if stored == Stored::Raw {
            out.clear();
        }
        stored
    }
}

impl fmt::Display for Codec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Codec::Off => write!(f, "off"),
            Codec::Lz4 => write!(f, "lz4"),
            Codec::Zstd { level } => write!(f, "zstd:{level}"),
        }
    }
}

/// The form of an envelope's payload, recorded in its flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stored {
    Raw,
    Lz4,
    Zstd,
}

impl Stored {
    /// Decompresses `src` into `out`; true only if it fills `out` exactly.
    /// Never panics, whatever the bytes.
    pub fn decompress(self, src: &[u8], out: &mut [u8]) -> bool {
        match self {
            Stored::Raw => {
                if src.len() != out.len() {
                    return false;
                }
                out.copy_from_slice(src);
                true
            }
            Stored::Lz4 => {
                let want = out.len();
                matches!(lz4_flex::block::decompress_into(src, out), Ok(n) if n == want)
            }
            Stored::Zstd => {
                let want = out.len();
                zstd_decompress(src, out) == Some(want)
            }
        }
    }
}

// A zstd context is tens of KiB to set up: one per thread, reused (the pusher
// compresses, readers decompress).
thread_local! {
    static COMPRESSOR: RefCell<Option<(i32, zstd::bulk::Compressor<'static>)>> = const { RefCell::new(None) };
    static DECOMPRESSOR: RefCell<Option<zstd::bulk::Decompressor<'static>>> = const { RefCell::new(None) };
}

fn zstd_compress(page: &[u8], out: &mut [u8], level: i32) -> Option<usize> {
    COMPRESSOR.with(|slot| {
        let mut slot = slot.borrow_mut();
        if slot.as_ref().is_none_or(|(l, _)| *l != level) {
            *slot = Some((level, zstd::bulk::Compressor::new(level).ok()?));
        }
        let (_, c) = slot.as_mut()?;
        c.compress_to_buffer(page, out).ok()
    })
}

fn zstd_decompress(src: &[u8], out: &mut [u8]) -> Option<usize> {
    DECOMPRESSOR.with(|slot| {
        let mut slot = slot.borrow_mut();
        if slot.is_none() {
            *slot = Some(zstd::bulk::Decompressor::new().ok()?);
        }
        slot.as_mut()?.decompress_to_buffer(src, out).ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A page like a b-tree leaf: a header, records with repeated structure, free space.
    fn leafy_page(len: usize) -> Vec<u8> {
        let mut p = vec![0u8; len];
        for (i, chunk) in p[..len * 3 / 4].chunks_mut(64).enumerate() {
            let rec = format!("row {i:08} name customer-{:05} balance {:>10}", i * 7 % 1000, i * 31);
            let n = rec.len().min(chunk.len());
            chunk[..n].copy_from_slice(&rec.as_bytes()[..n]);
        }
        p
    }

    /// Bytes that do not compress (seeded by their length, so the same every run).
    fn noise(len: usize) -> Vec<u8> {
        use rand::{RngCore, SeedableRng};
        let mut v = vec![0u8; len];
        rand::rngs::SmallRng::seed_from_u64(len as u64).fill_bytes(&mut v);
        v
    }

    #[test]
    fn each_codec_round_trips_and_saves_on_a_leafy_page() {
        for codec in [Codec::Lz4, Codec::Zstd { level: 1 }, Codec::Zstd { level: -3 }, Codec::Zstd { level: 9 }] {
            for len in [512, 4096, 16384, 65536] {
                let page = leafy_page(len);
                let mut out = Vec::new();
                let stored = codec.compress(&page, &mut out);
                assert_ne!(stored, Stored::Raw, "{codec} on {len}");
                assert!(out.len() < len / 2, "{codec} on {len}: {} bytes", out.len());
                let mut back = vec![0xAAu8; len];
                assert!(stored.decompress(&out, &mut back), "{codec} on {len}");
                assert_eq!(back, page);
            }
        }
    }

    #[test]
    fn an_incompressible_page_is_stored_raw() {
        let page = noise(4096);
        for codec in [Codec::Off, Codec::Lz4, Codec::Zstd { level: 3 }] {
            let mut out = vec![1, 2, 3];
            assert_eq!(codec.compress(&page, &mut out), Stored::Raw, "{codec}");
            assert!(out.is_empty());
        }
    }

    #[test]
    fn a_saving_below_an_eighth_is_stored_raw() {
        // Half noise, half zeros would compress by ~half; 15/16 noise saves less than 1/8.
        let mut page = noise(4096);
        page[4096 - 200..].fill(0);
        assert_eq!(Codec::Lz4.compress(&page, &mut Vec::new()), Stored::Raw);
        page[2048..].fill(0);
        assert_eq!(Codec::Lz4.compress(&page, &mut Vec::new()), Stored::Lz4);
    }

    #[test]
    fn decompression_into_the_wrong_size_or_from_garbage_fails_without_panic() {
        let page = leafy_page(4096);
        for codec in [Codec::Lz4, Codec::Zstd { level: 1 }] {
            let mut out = Vec::new();
            let stored = codec.compress(&page, &mut out);
            assert!(!stored.decompress(&out, &mut vec![0u8; 4095]), "{codec}: shorter page");
            assert!(!stored.decompress(&out, &mut vec![0u8; 8192]), "{codec}: longer page");
            for cut in [0, 1, out.len() / 2, out.len() - 1] {
                assert!(!stored.decompress(&out[..cut], &mut vec![0u8; 4096]), "{codec}: cut at {cut}");
            }
            let mut buf = vec![0u8; 4096];
            for seed in 0..200 {
                let junk = noise(64 + seed * 7);
                let _ = stored.decompress(&junk, &mut buf);
            }
        }
        assert!(!Stored::Raw.decompress(&page[..100], &mut vec![0u8; 4096]));
    }

    #[test]
    fn parse_names_and_levels() {
        assert_eq!(Codec::parse("off"), Ok(Codec::Off));
        assert_eq!(Codec::parse(" LZ4 "), Ok(Codec::Lz4));
        assert_eq!(Codec::parse("zstd"), Ok(Codec::Zstd { level: ZSTD_DEFAULT_LEVEL }));
        assert_eq!(Codec::parse("zstd:-3"), Ok(Codec::Zstd { level: -3 }));
        assert_eq!(Codec::parse("zstd:99"), Err(CodecError::LevelOutOfRange));
        assert_eq!(Codec::parse("zstd:99").unwrap_err().to_string(), "zstd's level must be in -7..=19");
        assert!(Codec::parse("zstd:x").is_err());
        assert_eq!(Codec::parse("gzip").unwrap_err().to_string(), "expected off, lz4, zstd or zstd:LEVEL");
        for c in [Codec::Off, Codec::Lz4, Codec::Zstd { level: 4 }] {
            assert_eq!(Codec::parse(&c.to_string()), Ok(c));
        }
    }
}
