//! The configurations a benchmark compares, and how the memory budget is split.
//!
//! Budget B (`--memory`) is all the local memory the database gets for pages:
//! SQLite's own page caches (all connections together, a small share S of B,
//! `--sqlite-cache`) plus waffle's L1 (`waffle_local` = B - S).
//!
//! | configuration | SQLite caches | L1 (`waffle_local`) | L2 (memcached memory) |
//! |---|---|---|---|
//! | `local` | S | B - S | none (the seeds' "no Waffle") |
//! | `grid`, `grid:N` | S | B - S | B (or `--grid-memory`), over 1 (or N) nodes |
//! | `all-local` | S | B - S + L2 (2B - S by default) | none (L1 as large as L1 + L2: the ceiling) |
//! | `stock` | B (default VFS) | none | none (SQLite alone; misses go to the kernel's page cache) |
//! | `plain` | S (default VFS) | none | none (SQLite as an application runs it beside waffle: the same page cache, no L1) |
//!
//! `grid@LINK` (e.g. `grid@1gbe`, `grid:2@100mb`) runs that grid behind an
//! EMULATED link; `--link` sets the link of every grid configuration without one.
//! `CONFIG/DEVICE` (e.g. `local/hdd-10k`, `grid@1gbe/ssd-2009`) runs that
//! configuration on an EMULATED device; `--device` sets the others'.
//! `+warm` (e.g. `grid+warm`, `grid:2@1gbe/hdd-10k+warm`; `--warm` adds it to
//! every waffle configuration) replaces the warm-up pass over every table and
//! index with `PRAGMA waffle_warm` (large sequential reads into L1, past it
//! into the grid); the report says how long it took and what it filled.
//! `+compress=CODEC` (e.g. `grid+compress=off`, `all-local+compress=lz4`)
//! sets `waffle_compress` for that configuration (default: waffle's default).
//! `+restart` (issue 13 target d) measures a warm restart after the measured
//! run: every connection closes cleanly (L1 to the grid, the sidecar and the
//! hot list saved), the same number reopen on the same nodes, and the
//! workload runs for `--restart-duration` seconds, reported second by second
//! against the measured run's steady state. `+nohot` opens with
//! `waffle_hot_list=off` (the control: the restart's L1 fills on demand).
//! `+verify` opens with `waffle_verify=on` (what verify mode costs, beside
//! the same configuration without it).
//! `+flash` (e.g. `grid+flash`, `grid:2/hdd-10k+flash=256MiB`) gives a grid
//! configuration's nodes a flash tier, memcached's extstore as `waffle nodes
//! --ssd` starts it, its files on this machine's disk (`bench::flash`): of
//! `=SIZE` or `=PCT` of B in all, [`DEFAULT_FLASH`] without (RAM stays L2).
//! `+flash-uncached[=SIZE]`: the same, the flash files kept out of the kernel's
//! page cache while the configuration runs (`bench::uncached`), so that flash
//! reads reach this machine's disk, as on a node whose flash is many times its memory.
//! `all-local+flash[=SIZE]`: L1 as large as a `grid+flash`'s L1 + RAM + flash
//! (the same amount): the ceiling of the flash configuration.
//! Waffle configurations open with `waffle_direct_io=on`, so that the budget
//! is all the memory the pages use and an emulated device sees every miss;
//! `+auto` opens with the library's default instead (`auto`: a file the
//! machine's memory holds stays in the kernel's page cache), as an
//! application would run it beside `plain`.

use waffle_core::codec::Codec;
use waffle_emulation::LinkProfile;
use waffle_nodes::flash::MIN_FLASH_MIB;

/// The flash of a bare `+flash`, all nodes together: 4 B, four times the grid's RAM by default
/// (flash is bought by the terabyte where RAM is by the gigabyte).
pub const DEFAULT_FLASH: Amount = Amount::Percent(400.0);

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    Local,
    Grid {
        nodes: usize,
    },
    AllLocal,
    Stock,
    /// SQLite's default VFS with the waffle configurations' page caches (S): what waffle adds, side by side.
    Plain,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ConfigSpec {
    pub kind: Kind,
    /// `Some(profile)` for an emulated link, `Some(None)` for an explicit `@loopback`, None: the default link.
    pub link: Option<Option<LinkProfile>>,
    /// As `link`, for the backing device (`Some(None)`: this machine's disk).
    pub device: Option<Option<String>>,
    /// `+warm`: warm with `PRAGMA waffle_warm` before the run.
    pub warm: bool,
    /// `+compress=CODEC`: `waffle_compress` for this configuration (None: the default).
    pub codec: Option<Codec>,
    /// `+restart`: a clean close and reopen after the measured run, measured too.
    pub restart: bool,
    /// Not `+nohot`: `waffle_hot_list=on` (the default).
    pub hot_list: bool,
    /// `+verify`: `waffle_verify=on`.
    pub verify: bool,
    /// `+auto`: `waffle_direct_io=auto` (the library's default) instead of `on`.
    pub direct_io_auto: bool,
    /// `+flash[=AMOUNT]`: the grid's flash in all (`Some(None)`: [`DEFAULT_FLASH`]).
    pub flash: Option<Option<Amount>>,
    /// `+flash-uncached`: the flash files kept out of the page cache.
    pub flash_uncached: bool,
}

impl ConfigSpec {
    pub fn parse(s: &str) -> Result<ConfigSpec, String> {
        let given = s.trim();
        let warm = given.contains("+warm");
        let restart = given.contains("+restart");
        let hot_list = !given.contains("+nohot");
        let verify = given.contains("+verify");
        let direct_io_auto = given.contains("+auto");
        let mut stripped = given
            .replace("+warm", "")
            .replace("+restart", "")
            .replace("+nohot", "")
            .replace("+verify", "")
            .replace("+auto", "");
        let flash_uncached = stripped.contains("+flash-uncached");
        stripped = stripped.replace("+flash-uncached", "+flash");
        let mut flash = None;
        if let Some(at) = stripped.find("+flash") {
            let rest = &stripped[at + "+flash".len()..];
            let end = rest.find('+').unwrap_or(rest.len());
            flash = Some(match rest[..end].strip_prefix('=') {
                Some(amount) => Some(Amount::parse(amount).map_err(|e| format!("'{given}': +flash={amount}: {e}"))?),
                None if end == 0 => None,
                None => return Err(format!("'{given}': +flash takes =SIZE or =PCT% (of B), e.g. +flash=256MiB")),
            });
            stripped = format!("{}{}", &stripped[..at], &rest[end..]);
        }
        let mut codec = None;
        if let Some(at) = stripped.find("+compress=") {
            let rest = &stripped[at + "+compress=".len()..];
            let end = rest.find('+').unwrap_or(rest.len());
            codec = Some(Codec::parse(&rest[..end]).map_err(|e| format!("'{given}': {e}"))?);
            stripped = format!("{}{}", &stripped[..at], &rest[end..]);
        }
        let s = stripped.as_str();
        let (s_base, device) = match s.split_once('/') {
            Some((b, d)) => {
                let d = d.trim();
                waffle_emulation::DeviceProfile::by_name(d)?;
                (b, Some((d != "real").then(|| d.to_string())))
            }
            None => (s, None),
        };
        let (base, link) = match s_base.split_once('@') {
            Some((b, l)) => (b, Some(LinkProfile::by_name(l.trim())?)),
            None => (s_base, None),
        };
        let kind = match base {
            "local" => Kind::Local,
            "grid" => Kind::Grid { nodes: 1 },
            "all-local" => Kind::AllLocal,
            "stock" => Kind::Stock,
            "plain" => Kind::Plain,
            _ => match base.strip_prefix("grid:") {
                Some(n) => {
                    let nodes: usize = n.parse().map_err(|_| format!("'{n}' is not a node count"))?;
                    if !(1..=16).contains(&nodes) {
                        return Err("a grid has 1 to 16 nodes".into());
                    }
                    Kind::Grid { nodes }
                }
                None => {
                    return Err(format!(
                        "unknown configuration '{s}' (local, grid, grid:N, all-local, stock, plain; grid[:N]@LINK)"
                    ))
                }
            },
        };
        if link.is_some() && !matches!(kind, Kind::Grid { .. }) {
            return Err(format!("'{s}': only a grid configuration has a link"));
        }
        if device.is_some() && matches!(kind, Kind::Stock | Kind::Plain) {
            return Err(format!("'{s}': stock SQLite reads through the kernel; it has no emulated device"));
        }
        if (warm || restart || !hot_list || verify || direct_io_auto) && matches!(kind, Kind::Stock | Kind::Plain) {
            return Err(format!("'{given}': stock SQLite has no waffle to warm or restart"));
        }
        if codec.is_some() && matches!(kind, Kind::Stock | Kind::Plain) {
            return Err(format!("'{given}': stock SQLite has no waffle to compress"));
        }
        if flash.is_some() && !matches!(kind, Kind::Grid { .. } | Kind::AllLocal) {
            return Err(format!(
                "'{given}': only a grid configuration's nodes have flash (grid+flash, grid:N+flash), \
                 and all-local+flash is their ceiling"
            ));
        }
        if flash_uncached && kind == Kind::AllLocal {
            return Err(format!("'{given}': all-local has no flash files to keep uncached (all-local+flash)"));
        }
        Ok(ConfigSpec {
            kind,
            link,
            device,
            warm,
            codec,
            restart,
            hot_list,
            verify,
            direct_io_auto,
            flash,
            flash_uncached,
        })
    }
}

/// A size given as bytes or as a percentage of something.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Amount {
    Bytes(u64),
    Percent(f64),
}

impl Amount {
    pub fn parse(s: &str) -> Result<Amount, String> {
        let t = s.trim();
        if let Some(p) = t.strip_suffix('%') {
            let v: f64 = p.trim().parse().map_err(|_| format!("'{t}' is not a percentage"))?;
            if !(v > 0.0 && v <= 1000.0) {
                return Err(format!("'{t}': a percentage from 0 to 1000"));
            }
            return Ok(Amount::Percent(v));
        }
        waffle_core::config::parse_size(t).map(Amount::Bytes).map_err(|e| e.to_string())
    }

    pub fn of(&self, whole: u64) -> u64 {
        match *self {
            Amount::Bytes(b) => b,
            Amount::Percent(p) => (whole as f64 * p / 100.0) as u64,
        }
    }
}

/// One configuration, resolved: who holds how much memory.
#[derive(Clone, Debug)]
pub struct Plan {
    /// As given (`grid:2@1gbe`).
    pub name: String,
    pub kind: Kind,
    /// Through the waffle VFS (false: SQLite's default VFS).
    pub waffle: bool,
    /// SQLite's page caches, all connections together, and per connection.
    pub sqlite_cache_bytes: u64,
    pub sqlite_cache_per_conn_kib: u64,
    pub l1_bytes: u64,
    /// memcached memory in all (0: no grid).
    pub l2_bytes: u64,
    pub nodes: usize,
    pub node_mib: u32,
    pub link: Option<LinkProfile>,
    /// An emulated device profile name; None: this machine's disk.
    pub device: Option<String>,
    /// Warm with `PRAGMA waffle_warm` instead of the pass over every table and index.
    pub warm: bool,
    /// `waffle_compress` (None: the default).
    pub codec: Option<Codec>,
    /// Measure a clean close and reopen after the measured run.
    pub restart: bool,
    /// `waffle_hot_list` of the connections.
    pub hot_list: bool,
    /// `waffle_verify=on`.
    pub verify: bool,
    /// `waffle_direct_io=auto` rather than `on`.
    pub direct_io_auto: bool,
    /// Flash per node, MiB (0: none): memcached's extstore behind its `node_mib` of RAM.
    pub flash_mib_per_node: u32,
    /// The flash files kept out of the kernel's page cache while the configuration runs.
    pub flash_uncached: bool,
}

impl Plan {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        name: &str,
        spec: &ConfigSpec,
        budget: u64,
        sqlite_share: u64,
        grid_bytes: u64,
        threads: usize,
        default_link: Option<LinkProfile>,
        default_device: Option<String>,
    ) -> Plan {
        let threads = threads.max(1) as u64;
        let s = sqlite_share.min(budget / 2);
        let per_conn = |total: u64| (total / threads / 1024).max(16);
        let mut p = Plan {
            name: name.to_string(),
            kind: spec.kind.clone(),
            waffle: true,
            sqlite_cache_bytes: s,
            sqlite_cache_per_conn_kib: per_conn(s),
            l1_bytes: budget - s,
            l2_bytes: 0,
            nodes: 0,
            node_mib: 0,
            link: None,
            device: spec.device.clone().unwrap_or(default_device),
            warm: spec.warm,
            codec: spec.codec,
            restart: spec.restart,
            hot_list: spec.hot_list,
            verify: spec.verify,
            direct_io_auto: spec.direct_io_auto,
            flash_mib_per_node: 0,
            flash_uncached: spec.flash_uncached,
        };
        match spec.kind {
            Kind::Local => {}
            Kind::Grid { nodes } => {
                p.nodes = nodes;
                // memcached needs at least 2 MiB (its largest item, 1 MiB, must fit twice).
                p.node_mib = ((grid_bytes / nodes as u64) >> 20).max(2) as u32;
                p.l2_bytes = (p.node_mib as u64) << 20;
                p.l2_bytes *= nodes as u64;
                p.link = spec.link.unwrap_or(default_link);
                // extstore's size is whole MiB, at least MIN_FLASH_MIB per node.
                p.flash_mib_per_node = spec.flash.map_or(0, |f| {
                    let bytes = f.unwrap_or(DEFAULT_FLASH).of(budget);
                    ((bytes / nodes as u64) >> 20).max(u64::from(MIN_FLASH_MIB)) as u32
                });
            }
            // The ceiling: L1 as large as the grid configurations' L1 + L2 (+ their flash).
            Kind::AllLocal => {
                let flash = spec.flash.map_or(0, |f| f.unwrap_or(DEFAULT_FLASH).of(budget));
                p.l1_bytes = budget - s + grid_bytes + flash;
            }
            Kind::Stock => {
                p.waffle = false;
                p.sqlite_cache_bytes = budget;
                p.sqlite_cache_per_conn_kib = per_conn(budget);
                p.l1_bytes = 0;
                p.device = None;
            }
            Kind::Plain => {
                p.waffle = false;
                p.l1_bytes = 0;
                p.device = None;
            }
        }
        p
    }

    pub fn link_label(&self) -> String {
        match (&self.kind, self.link) {
            (Kind::Grid { .. }, Some(l)) => format!("{} (EMULATED)", l.name),
            (Kind::Grid { .. }, None) => "loopback".into(),
            _ => "-".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_plan() {
        assert_eq!(ConfigSpec::parse("grid").unwrap().kind, Kind::Grid { nodes: 1 });
        assert_eq!(ConfigSpec::parse("grid:3").unwrap().kind, Kind::Grid { nodes: 3 });
        let g = ConfigSpec::parse("grid:2@1gbe").unwrap();
        assert_eq!(g.link.unwrap().unwrap().name, "1gbe");
        assert!(ConfigSpec::parse("local@1gbe").is_err());
        assert!(ConfigSpec::parse("grid:0").is_err());
        assert!(ConfigSpec::parse("remote").is_err());
        let d = ConfigSpec::parse("grid@1gbe/hdd-10k").unwrap();
        assert_eq!(d.device, Some(Some("hdd-10k".to_string())));
        assert_eq!(ConfigSpec::parse("local/real").unwrap().device, Some(None));
        assert!(ConfigSpec::parse("local/floppy").is_err());
        assert!(ConfigSpec::parse("stock/hdd-10k").is_err());
        let w = ConfigSpec::parse("grid:2@1gbe/hdd-10k+warm").unwrap();
        assert!(w.warm && w.kind == Kind::Grid { nodes: 2 } && w.device == Some(Some("hdd-10k".to_string())));
        assert!(!ConfigSpec::parse("grid").unwrap().warm);
        assert!(ConfigSpec::parse("stock+warm").is_err());
        let c = ConfigSpec::parse("grid:2/hdd-10k+compress=zstd:3+warm").unwrap();
        assert_eq!((c.codec, c.warm, c.kind), (Some(Codec::Zstd { level: 3 }), true, Kind::Grid { nodes: 2 }));
        assert_eq!(ConfigSpec::parse("all-local+compress=off").unwrap().codec, Some(Codec::Off));
        assert!(ConfigSpec::parse("grid+compress=gzip").unwrap_err().contains("lz4"));
        assert!(ConfigSpec::parse("stock+compress=off").is_err());
        let r = ConfigSpec::parse("grid+restart+nohot").unwrap();
        assert!(r.restart && !r.hot_list && !r.warm && r.kind == Kind::Grid { nodes: 1 });
        let r = ConfigSpec::parse("grid:2@1gbe+restart").unwrap();
        assert!(r.restart && r.hot_list && r.link.is_some());
        assert!(ConfigSpec::parse("stock+restart").is_err());

        let b = 64 << 20;
        let s = 4 << 20;
        let local = Plan::new("local", &ConfigSpec::parse("local").unwrap(), b, s, b, 16, None, None);
        assert_eq!(local.l1_bytes + local.sqlite_cache_bytes, b);
        let grid = Plan::new("grid:2", &ConfigSpec::parse("grid:2").unwrap(), b, s, b, 16, None, None);
        assert_eq!(grid.l2_bytes, b);
        assert_eq!(grid.l1_bytes, local.l1_bytes);
        let all = Plan::new("all-local", &ConfigSpec::parse("all-local").unwrap(), b, s, b, 16, None, None);
        assert_eq!(all.l1_bytes + all.sqlite_cache_bytes, 2 * b);
        let stock = Plan::new("stock", &ConfigSpec::parse("stock").unwrap(), b, s, b, 16, None, None);
        assert!(!stock.waffle);
        let plain = Plan::new("plain", &ConfigSpec::parse("plain").unwrap(), b, s, b, 16, None, None);
        assert!(!plain.waffle && plain.l1_bytes == 0 && plain.sqlite_cache_bytes == local.sqlite_cache_bytes);
        assert!(ConfigSpec::parse("plain+warm").is_err() && ConfigSpec::parse("plain/hdd-10k").is_err());
        assert!(
            ConfigSpec::parse("grid:2+auto").unwrap().direct_io_auto
                && !ConfigSpec::parse("grid:2").unwrap().direct_io_auto
        );
        assert!(ConfigSpec::parse("plain+auto").is_err());
        assert_eq!(stock.sqlite_cache_per_conn_kib, 4096);
        assert_eq!(Amount::parse("25%").unwrap().of(400), 100);

        // +flash: a grid's nodes only, of B x 4 by default or the amount given, per node at least
        // extstore's smallest file.
        let f = ConfigSpec::parse("grid:2/hdd-10k+flash").unwrap();
        assert_eq!(
            (f.flash, f.kind.clone(), f.device.clone()),
            (Some(None), Kind::Grid { nodes: 2 }, Some(Some("hdd-10k".into())))
        );
        assert_eq!(Plan::new("f", &f, b, s, b, 16, None, None).flash_mib_per_node, 128, "4 x 64 MiB over 2 nodes");
        let f = ConfigSpec::parse("grid+flash=300MiB+warm").unwrap();
        assert!(f.warm && f.flash == Some(Some(Amount::Bytes(300 << 20))));
        assert_eq!(Plan::new("f", &f, b, s, b, 16, None, None).flash_mib_per_node, 300);
        let small = ConfigSpec::parse("grid:4+flash=50%").unwrap();
        assert_eq!(Plan::new("f", &small, b, s, b, 16, None, None).flash_mib_per_node, MIN_FLASH_MIB);
        assert_eq!(grid.flash_mib_per_node, 0, "no flash unless asked");
        for bad in ["local+flash", "stock+flash"] {
            assert!(ConfigSpec::parse(bad).unwrap_err().contains("only a grid"), "{bad}");
        }
        // all-local+flash: the ceiling of grid+flash, L1 = B - S + L2 + the same flash; no nodes.
        let ceiling = Plan::new("c", &ConfigSpec::parse("all-local+flash").unwrap(), b, s, b, 16, None, None);
        assert_eq!((ceiling.l1_bytes, ceiling.flash_mib_per_node, ceiling.nodes), (b - s + b + 4 * b, 0, 0));
        let sized = Plan::new("c", &ConfigSpec::parse("all-local+flash=1GiB").unwrap(), b, s, b, 16, None, None);
        assert_eq!(sized.l1_bytes, b - s + b + (1 << 30));
        assert!(ConfigSpec::parse("all-local+flash-uncached").unwrap_err().contains("no flash files"));
        assert!(ConfigSpec::parse("grid+flash=lots").unwrap_err().contains("+flash=lots"));
        assert!(ConfigSpec::parse("grid+flashy").unwrap_err().contains("=SIZE"));
        let u = ConfigSpec::parse("grid+flash-uncached=128MiB").unwrap();
        assert!(u.flash_uncached && u.flash == Some(Some(Amount::Bytes(128 << 20))));
        assert!(!ConfigSpec::parse("grid+flash").unwrap().flash_uncached);
        assert!(ConfigSpec::parse("local+flash-uncached").unwrap_err().contains("only a grid"));
        assert_eq!(Amount::parse("1MiB").unwrap().of(7), 1 << 20);
    }
}
