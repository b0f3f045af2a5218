//! EMULATED hardware for benchmarks, never on unless asked for: slower
//! backing devices (`device`) and slower links to the grid (`link`).
//!
//! This machine's disk and network are what they are; the seed experiments
//! ran on 10K RPM disks, 2009 SSDs and 1 GbE. A profile here adds the service
//! time of such hardware to each real operation, through a queue with a fixed
//! number of servers, so latency grows with concurrency as the seeds describe.
//! Everything that uses a profile says so in its output ("EMULATED").
//! Profiles and their sources: `../shared/benchmarks.md` and docs/benchmarks.md.
//!
//! Outside the product (what the benchmarks use): the shipped libraries run
//! unchanged and the hardware around them is slowed.
//!
//! ```text
//!  libwaffle.so / libwaffle_preload.so ──pread──> libwaffle_slowdisk.so (EmulatedDevice) ──> file
//!                                      ──TCP───> LinkProxy on 127.0.0.1 (Link) ──> memcached node
//! ```
//!
//! - [`link_proxy`]: a TCP proxy in front of one node, every connection
//!   relayed through a shared [`Link`] ([`link_pipe`]: one connection).
//! - `crates/waffle-slowdisk`: an LD_PRELOAD shim that makes reads of files
//!   under a directory wait for an [`EmulatedDevice`]; [`slow_disk`]: its
//!   setting (`WAFFLE_SLOWDISK=PROFILE:DIR,...`).
//!
//! Inside the product, until it loses them (issue 22): the core offers two
//! seams, and this crate plugs into them when a URI names a profile
//! (`waffle_device`, `waffle_link`, which the core passes on as plain names):
//!
//! ```text
//!  adapter ──read──> PageCache ──miss──> OnDevice { EmulatedDevice, file } ──> file   (core::backing::Backing)
//!                                ──grid──> Grid::with_link(Link) ──> nodes           (core::grid::LinkModel)
//! ```

use std::sync::Arc;

use waffle_core::config::{self, Config, ConfigError};

pub mod device;
pub mod link;
pub mod link_pipe;
pub mod link_proxy;
pub mod slow_disk;

pub use device::{DeviceProfile, EmulatedDevice, OnDevice};
pub use link::{Link, LinkProfile};
pub use link_proxy::LinkProxy;

/// What one configuration asked to emulate, its profile names resolved.
#[derive(Default)]
pub struct Emulation {
    /// The device every read that reaches the disk waits for; None: the real disk as it is.
    pub device: Option<EmulatedDevice>,
    /// The link every grid request waits for; None: the nodes as they are.
    pub link: Option<Arc<Link>>,
}

impl Emulation {
    /// Resolves `waffle_device` and `waffle_link`; an unknown name is refused
    /// with an error that names the parameter, the value and the known names.
    pub fn from_config(c: &Config) -> Result<Emulation, ConfigError> {
        let (device, link) = profiles(c)?;
        Ok(Emulation { device: device.map(EmulatedDevice::new), link: link.map(|p| Arc::new(Link::new(p))) })
    }

    /// As [`Emulation::from_config`]'s check of the names, building nothing
    /// (every open checks; only the first open of a database builds).
    pub fn check(c: &Config) -> Result<(), ConfigError> {
        profiles(c).map(|_| ())
    }

    /// Whether anything is emulated.
    pub fn is_on(&self) -> bool {
        self.device.is_some() || self.link.is_some()
    }
}

fn profiles(c: &Config) -> Result<(Option<DeviceProfile>, Option<LinkProfile>), ConfigError> {
    // The error names what was set: the URI parameter or the environment variable.
    let device = match c.device.as_deref() {
        Some(name) => DeviceProfile::by_name(name).map_err(|why| c.bad_value(&config::DEVICE, name, why))?,
        None => None,
    };
    let link = match c.link.as_deref() {
        Some(name) => LinkProfile::by_name(name).map_err(|why| c.bad_value(&config::LINK, name, why))?,
        None => None,
    };
    Ok((device, link))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn resolve(pairs: &[(&str, &str)]) -> Result<Emulation, ConfigError> {
        let m: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Emulation::from_config(&Config::from_sources(|k| m.get(k).cloned(), |_| None).unwrap())
    }

    #[test]
    fn names_resolve_and_unknown_ones_are_refused_with_the_parameter_and_value() {
        let e = resolve(&[]).unwrap();
        assert!(!e.is_on());
        let e = resolve(&[("waffle_device", "real"), ("waffle_link", "loopback")]).unwrap();
        assert!(!e.is_on(), "the real disk and loopback are no emulation");
        let e = resolve(&[("waffle_device", " hdd-10k "), ("waffle_link", "1gbe")]).unwrap();
        assert_eq!(e.device.unwrap().profile().name, "hdd-10k");
        assert_eq!(e.link.unwrap().profile().name, "1gbe");
        for (param, value, known) in [("waffle_device", "floppy", "hdd-10k"), ("waffle_link", "carrier-pigeon", "1gbe")]
        {
            let msg = resolve(&[(param, value)]).err().expect("refused").to_string();
            let config = Config::from_sources(|k| (k == param).then(|| value.to_string()), |_| None).unwrap();
            assert_eq!(Emulation::check(&config).err().map(|e| e.to_string()), Some(msg.clone()));
            assert!(msg.contains(param) && msg.contains(value) && msg.contains(known), "{msg}");
        }
        let from_env = Config::from_sources(|_| None, |k| (k == "WAFFLE_LINK").then(|| "tin-can".to_string())).unwrap();
        let e = Emulation::check(&from_env).unwrap_err();
        assert_eq!(e.param, "WAFFLE_LINK", "the variable that was set: {e}");
    }
}
