//! Emulated backing devices: a queue of `servers`, each read holding one for
//! its service time. A read that starts where the previous one ended costs
//! `sequential_us_per_4k` per 4 KiB (no seek); any other read pays `random_us`
//! for its first 4 KiB (the seek, or the I/O a volume bills) and the
//! sequential price for the rest, so a run read ahead costs its length on every
//! profile: on `cloud-block`, where a sequential 4 KiB costs what a random one
//! does, a 64 KiB run costs 16 reads, not one.

use std::sync::Mutex;
use std::time::{Duration, Instant};

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
/// holds no file: a reader books its read ([`EmulatedDevice::book`]), reads,
/// and waits for the time booked (libwaffle_slowdisk.so, `waffle probe`).
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
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let dev = EmulatedDevice::new(p);
        let t0 = Instant::now();
        // 4 random reads at once on 2 servers of 20 ms: two rounds.
        let ends: Vec<Duration> = (0..4u64).map(|i| dev.book(i * 1000 * 4096, 4096) - t0).collect();
        let round = Duration::from_millis(20);
        assert!(ends[..2].iter().all(|&e| e >= round && e < 2 * round), "the first two at once: {ends:?}");
        assert!(ends[2..].iter().all(|&e| e >= 2 * round), "the other two after them: {ends:?}");
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
        let t0 = Instant::now();
        let first = dev.book(0, 4096); // random: pays 50 ms
        assert!(first - t0 >= Duration::from_millis(50));
        for i in 1..20 {
            assert_eq!(dev.book(i * 4096, 4096), first, "read {i} continues the last one: no seek");
        }
        // One that does not continue the last read seeks again, after the others.
        assert!(dev.book(1 << 30, 4096) - first >= Duration::from_millis(50));
    }
}
