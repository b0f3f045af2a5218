//! Emulated backing devices: a queue of `servers`, each read holding one for
//! its service time. A read that starts where the previous one ended costs
//! `sequential_us_per_4k` per 4 KiB (no seek); any other read pays `random_us`
//! for its first 4 KiB (the seek, or the I/O a volume bills) and the
//! sequential price for the rest, so a run read ahead costs its length on every
//! profile: on `cloud-block`, where a sequential 4 KiB costs what a random one
//! does, a 64 KiB run costs 16 reads, not one.

use std::io;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use waffle_core::backing::{Backing, PageId};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceProfile {
    pub name: &'static str,
    /// Requests served at once (spindles, queue depth).
    pub servers: usize,
    /// Service time of one random read.
    pub random_us: u64,
    /// Service time per 4 KiB of a read that continues the previous one.
    pub sequential_us_per_4k: u64,
    /// Where the numbers come from.
    pub source: &'static str,
}

/// The emulated profiles. `real` (this machine's disk) is not among them: it is no emulation.
pub const PROFILES: [DeviceProfile; 4] = [
    DeviceProfile {
        name: "hdd-10k",
        servers: 2,
        random_us: 5_000,
        sequential_us_per_4k: 30,
        source: "seeds 000/001: two 10K RPM disks, ~5 ms seek+rotation per random read, ~130 MB/s streaming",
    },
    DeviceProfile {
        name: "ssd-2009",
        servers: 1,
        random_us: 200,
        sequential_us_per_4k: 20,
        source: "seed 000 (Intel X25): ~0.25 ms at 1 thread rising to ~2 ms at 10 threads",
    },
    DeviceProfile {
        name: "nvme",
        servers: 32,
        random_us: 80,
        sequential_us_per_4k: 2,
        source: "typical current NVMe: ~0.08 ms, deep parallelism",
    },
    DeviceProfile {
        name: "cloud-block",
        servers: 2,
        random_us: 667,
        sequential_us_per_4k: 667,
        source: "typical network block volume: ~0.6 ms, capped at 3000 IOPS",
    },
];

impl DeviceProfile {
    /// A profile by name; `real` and the empty string are None (no emulation).
    pub fn by_name(name: &str) -> Result<Option<DeviceProfile>, String> {
        match name {
            "" | "real" => Ok(None),
            _ => PROFILES.iter().find(|p| p.name == name).copied().map(Some).ok_or_else(|| {
                let names: Vec<&str> = PROFILES.iter().map(|p| p.name).collect();
                format!("unknown device profile (use real, {})", names.join(", "))
            }),
        }
    }

    /// The service time of one read of `len` bytes.
    pub fn service(&self, len: usize, sequential: bool) -> Duration {
        let blocks = (len as u64).div_ceil(4096).max(1);
        let us = if sequential {
            self.sequential_us_per_4k * blocks
        } else {
            self.random_us + self.sequential_us_per_4k * (blocks - 1)
        };
        Duration::from_micros(us)
    }
}

struct Queue {
    /// When each server is next free.
    free_at: Vec<Instant>,
    /// Where the last read ended (a read starting there is sequential).
    last_end: u64,
}

/// An emulated device: the queue every read that reaches it waits in. It
/// holds no file; [`OnDevice`] puts one behind it for a read.
pub struct EmulatedDevice {
    profile: DeviceProfile,
    queue: Mutex<Queue>,
}

impl EmulatedDevice {
    pub fn new(profile: DeviceProfile) -> EmulatedDevice {
        assert!(profile.servers > 0, "a device needs at least one server");
        let now = Instant::now();
        EmulatedDevice { profile, queue: Mutex::new(Queue { free_at: vec![now; profile.servers], last_end: u64::MAX }) }
    }

    pub fn profile(&self) -> DeviceProfile {
        self.profile
    }

    /// Books the earliest free server for a read of `len` bytes at
    /// `position` starting now; returns when the device would complete it.
    /// `position` orders every file's bytes on one device (the file in the
    /// high bits), so only a read that continues the last one is sequential.
    pub fn book(&self, position: u64, len: usize) -> Instant {
        let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        let sequential = q.last_end == position;
        q.last_end = position + len as u64;
        let (i, &free) = q.free_at.iter().enumerate().min_by_key(|(_, t)| **t).expect("servers > 0");
        let finish = free.max(Instant::now()) + self.profile.service(len, sequential);
        q.free_at[i] = finish;
        finish
    }

    /// Reads through `file`, then waits until the device would have served the read.
    pub fn read_pages(
        &self,
        file: &dyn Backing,
        first: PageId,
        page_bytes: usize,
        buf: &mut [u8],
    ) -> io::Result<usize> {
        // A byte offset stays below 2^48 (see PageId::byte_offset); segments above it.
        let position = ((first.segment as u64) << 48) | first.byte_offset(page_bytes);
        let finish = self.book(position, buf.len());
        let n = file.read_pages(first, page_bytes, buf)?;
        let now = Instant::now();
        if finish > now {
            std::thread::sleep(finish - now);
        }
        Ok(n)
    }
}

/// A file read through an emulated device.
pub struct OnDevice<'a> {
    pub device: &'a EmulatedDevice,
    pub file: &'a dyn Backing,
}

impl Backing for OnDevice<'_> {
    fn read_pages(&self, first: PageId, page_bytes: usize, buf: &mut [u8]) -> io::Result<usize> {
        self.device.read_pages(self.file, first, page_bytes, buf)
    }

    fn is_direct(&self) -> bool {
        self.file.is_direct()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Zeros;
    impl Backing for Zeros {
        fn read_pages(&self, _first: PageId, _page_bytes: usize, buf: &mut [u8]) -> io::Result<usize> {
            buf.fill(0);
            Ok(buf.len())
        }
        fn is_direct(&self) -> bool {
            false
        }
    }

    #[test]
    fn names() {
        assert_eq!(DeviceProfile::by_name("real"), Ok(None));
        assert_eq!(DeviceProfile::by_name("hdd-10k").unwrap().unwrap().servers, 2);
        let e = DeviceProfile::by_name("floppy").unwrap_err();
        assert!(e.contains("hdd-10k"), "{e}");
    }

    #[test]
    fn latency_grows_with_concurrency_beyond_the_servers() {
        let p = DeviceProfile { name: "t", servers: 2, random_us: 20_000, sequential_us_per_4k: 0, source: "" };
        let dev = std::sync::Arc::new(EmulatedDevice::new(p));
        let t0 = Instant::now();
        let threads: Vec<_> = (0..4u32)
            .map(|i| {
                let dev = std::sync::Arc::clone(&dev);
                std::thread::spawn(move || {
                    let mut b = [0u8; 4096];
                    dev.read_pages(&Zeros, PageId::new(0, i * 1000), 4096, &mut b).unwrap();
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        // 4 random reads on 2 servers of 20 ms: two rounds, at least 40 ms.
        assert!(t0.elapsed() >= Duration::from_millis(40), "{:?}", t0.elapsed());
    }

    #[test]
    fn a_random_run_pays_the_seek_once_and_its_length() {
        let cloud = DeviceProfile::by_name("cloud-block").unwrap().unwrap();
        assert_eq!(cloud.service(4096, false), Duration::from_micros(667));
        // 64 KiB that does not continue the last read: 16 reads of the volume, not one.
        assert_eq!(cloud.service(65536, false), Duration::from_micros(16 * 667));
        assert_eq!(cloud.service(65536, true), Duration::from_micros(16 * 667));
        let hdd = DeviceProfile::by_name("hdd-10k").unwrap().unwrap();
        assert_eq!(hdd.service(16384, false), Duration::from_micros(5_000 + 3 * 30));
        assert_eq!(hdd.service(16384, true), Duration::from_micros(4 * 30));
    }

    #[test]
    fn sequential_reads_skip_the_seek() {
        let p = DeviceProfile { name: "t", servers: 1, random_us: 50_000, sequential_us_per_4k: 0, source: "" };
        let dev = EmulatedDevice::new(p);
        let mut b = [0u8; 4096];
        dev.read_pages(&Zeros, PageId::new(0, 0), 4096, &mut b).unwrap(); // random: pays 50 ms
        let t0 = Instant::now();
        for i in 1..20 {
            dev.read_pages(&Zeros, PageId::new(0, i), 4096, &mut b).unwrap();
        }
        assert!(t0.elapsed() < Duration::from_millis(50), "{:?}", t0.elapsed());
    }
}
