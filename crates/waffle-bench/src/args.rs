//! What the `waffle` commands' flags share: flags that mean the same in several commands,
//! declared once here and `#[command(flatten)]`ed (crates/waffle-cli, and `waffle bench
//! mysql`'s flags in mysql/bench.rs), and the parsers of flag values. `--json`/`--charts`
//! are `Output`, next to the code that writes them (bench/report.rs). This file is below the
//! commands: it uses none of them.

use clap::Args;
use waffle_emulation::{DeviceProfile, LinkProfile};

/// `--timeout-ms` (demo, bench, bench mysql).
#[derive(Args, Clone, Copy, Debug)]
pub struct GridTimeout {
    /// Deadline of one grid request.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..=60000))]
    pub timeout_ms: u64,
}

/// `--page-size` (demo, bench).
#[derive(Args, Clone, Copy, Debug)]
pub struct PageSize {
    /// SQLite page size: a power of two from 512 to 64KiB, e.g. 4096 or 16KiB.
    #[arg(long, default_value_t = 4096, value_parser = page_size)]
    pub page_size: u32,
}

/// A size, by the rule of every size Waffle reads ([`waffle_core::config::parse_size`]):
/// `65536`, `64KiB`, `256MiB`, `2GiB` (K, M, G binary too; KB, MB, GB refused).
/// clap's error names the flag and the value; this gives the reason.
pub fn size(s: &str) -> Result<u64, String> {
    waffle_core::config::parse_size(s).map_err(|e| e.to_string())
}

/// An L1 budget (`--local`): a size of at least 4 KiB, as `waffle_local`.
pub fn local(s: &str) -> Result<u64, String> {
    waffle_core::config::parse_local(s).map_err(|e| e.to_string())
}

/// A database page size: a power of two from 512 bytes to 64 KiB (`4096`, `16KiB`).
pub fn page_size(s: &str) -> Result<u32, String> {
    waffle_core::config::parse_page_size(s).map_err(|e| e.to_string())
}

pub use waffle_core::codec::Codec;

/// A codec as `waffle_compress` spells it: off, lz4, zstd, zstd:LEVEL.
pub fn codec(s: &str) -> Result<Codec, String> {
    waffle_core::codec::Codec::parse(s).map_err(|e| e.to_string())
}

/// A device profile's name (`real` or an EMULATED one), trimmed.
pub fn device(s: &str) -> Result<String, String> {
    DeviceProfile::by_name(s.trim()).map(|_| s.trim().to_string())
}

/// A link profile's name (`loopback` or an EMULATED one), trimmed.
pub fn link(s: &str) -> Result<String, String> {
    LinkProfile::by_name(s.trim()).map(|_| s.trim().to_string())
}

/// The most rounds `--rounds` takes (bench, bench sweep, bench mysql).
pub const MAX_ROUNDS: u32 = 20;

/// `--rounds N` (bench, bench sweep, bench mysql): every configuration runs N times,
/// interleaved (a, b, a, b, ...), and the median round is reported with the spread.
#[derive(Args, Clone, Copy, Debug)]
pub struct Rounds {
    /// Run every configuration this many times (1 to 20), interleaved, and report the median round
    /// with the spread (min..max) of all; every round goes in the JSON. Evens out a shared machine's
    /// changing load.
    #[arg(long, default_value_t = 1, value_parser = rounds)]
    pub rounds: u32,
}

/// A `--rounds` value: 1 to [`MAX_ROUNDS`] (clap's error names the flag and the value).
pub fn rounds(s: &str) -> Result<u32, String> {
    let n: u32 = s.trim().parse().map_err(|_| format!("not a number of rounds (1 to {MAX_ROUNDS})"))?;
    if n == 0 || n > MAX_ROUNDS {
        return Err(format!("from 1 to {MAX_ROUNDS} rounds"));
    }
    Ok(n)
}

/// Refuses 0 rounds and more than [`MAX_ROUNDS`], naming the flag and the value.
pub fn check_rounds(n: usize) -> Result<usize, String> {
    if n == 0 || n > MAX_ROUNDS as usize {
        return Err(format!("--rounds {n}: from 1 to {MAX_ROUNDS} rounds"));
    }
    Ok(n)
}

/// The median of `values` as the bench reports it: the index of the middle value once sorted
/// (the upper of the two middle ones for an even count), and the min and max. None when empty.
pub fn median_round(values: &[f64]) -> Option<(usize, f64, f64)> {
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&a, &b| values[a].total_cmp(&values[b]));
    let mid = *order.get(values.len() / 2)?;
    Some((mid, values[order[0]], values[order[values.len() - 1]]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_read_sizes_by_the_one_rule() {
        assert_eq!(size("64MiB"), Ok(64 << 20));
        assert_eq!(size("64M"), Ok(64 << 20));
        assert!(size("64MB").unwrap_err().contains("64MiB"), "decimal units are refused, naming the binary one");
        assert_eq!(local("8KiB"), Ok(8 << 10));
        assert!(local("1").is_err());
        assert_eq!(page_size("16KiB"), Ok(16384));
        assert!(page_size("1000").is_err());
    }

    #[test]
    fn rounds_are_refused_outside_1_to_20() {
        assert_eq!(rounds("3"), Ok(3));
        assert_eq!(rounds("20"), Ok(20));
        for bad in ["0", "21", "-1", "x"] {
            assert!(rounds(bad).unwrap_err().contains("1 to 20"), "{bad}");
        }
        assert_eq!(check_rounds(1), Ok(1));
        for bad in [0, 21] {
            let e = check_rounds(bad).unwrap_err();
            assert!(e.starts_with(&format!("--rounds {bad}: ")), "{e}");
        }
    }

    #[test]
    fn the_median_round_and_the_spread() {
        assert_eq!(median_round(&[]), None);
        assert_eq!(median_round(&[5.0]), Some((0, 5.0, 5.0)));
        assert_eq!(median_round(&[3.0, 1.0, 2.0]), Some((2, 1.0, 3.0)));
        // Even: the upper middle, as `waffle bench` reports it.
        assert_eq!(median_round(&[4.0, 1.0]), Some((0, 1.0, 4.0)));
    }
}
