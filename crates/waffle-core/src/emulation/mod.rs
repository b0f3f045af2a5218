//! Emulated hardware for benchmarks, never on by default: backing devices
//! (`device`) and links to the grid (`link`).
//!
//! This machine's disk and network are what they are; the seed experiments
//! ran on 10K RPM disks, 2009 SSDs and 1 GbE. A profile here adds the service
//! time of such hardware to each real operation, through a queue with a fixed
//! number of servers, so latency grows with concurrency as the seeds describe.
//! Everything that uses a profile says so in its output ("emulated").
//! Profiles and their sources: `../shared/benchmarks.md` and docs/benchmarks.md.

pub mod device;
pub mod link;

pub use device::{DeviceProfile, EmulatedDevice, OnDevice};
pub use link::{Link, LinkProfile};
