//! What the `waffle` commands' flags share: flags that mean the same in several commands,
//! declared once here and `#[command(flatten)]`ed (crates/waffle-cli, and [`MysqlArgs`] here),
//! and the parsers of flag values. `--json`/`--charts` are [`Output`], next to the code that
//! writes them.
//!
//! [`MysqlArgs`]: crate::mysql::bench::MysqlArgs
//! [`Output`]: crate::bench::report::Output

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
    /// SQLite page size.
    #[arg(long, default_value_t = 4096, value_parser = page_size)]
    pub page_size: u32,
}

/// A size: `65536`, `64KiB`, `256MiB`, `2GiB`.
pub fn size(s: &str) -> Result<u64, String> {
    waffle_core::config::parse_size(s)
}

/// A SQLite page size: a power of two from 512 to 65536.
pub fn page_size(s: &str) -> Result<u32, String> {
    let n: u32 = s.parse().map_err(|_| format!("'{s}' is not a number"))?;
    if !(512..=65536).contains(&n) || !n.is_power_of_two() {
        return Err(format!("'{s}' is not a SQLite page size (a power of two from 512 to 65536)"));
    }
    Ok(n)
}

pub use waffle_core::codec::Codec;

/// A codec as `waffle_compress` spells it: off, lz4, zstd, zstd:LEVEL.
pub fn codec(s: &str) -> Result<Codec, String> {
    waffle_core::codec::Codec::parse(s)
}

/// A device profile's name (`real` or an EMULATED one), trimmed.
pub fn device(s: &str) -> Result<String, String> {
    DeviceProfile::by_name(s.trim()).map(|_| s.trim().to_string())
}

/// A link profile's name (`loopback` or an EMULATED one), trimmed.
pub fn link(s: &str) -> Result<String, String> {
    LinkProfile::by_name(s.trim()).map(|_| s.trim().to_string())
}
