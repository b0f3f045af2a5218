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
//! The product knows nothing of it: no adapter or core setting names a
//! profile (`waffle_device`/`waffle_link` are gone), and the product crates
//! do not depend on this one (scripts/check-layout).

pub mod device;
pub mod link;
pub mod link_pipe;
pub mod link_proxy;
pub mod slow_disk;

pub use device::{DeviceProfile, EmulatedDevice};
pub use link::{Link, LinkProfile};
pub use link_proxy::LinkProxy;
