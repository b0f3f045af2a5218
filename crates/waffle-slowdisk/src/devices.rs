//! The emulated devices of this process and the directories they hold, from
//! `WAFFLE_SLOWDISK` (`waffle_emulation::slow_disk`), read once.
//!
//! A bad setting stops the program with a message on stderr: a benchmark
//! run that meant to emulate a disk and silently did not would be labelled
//! EMULATED wrongly. No setting: no device, every call passes through.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::AtomicU64;
use std::sync::OnceLock;

use waffle_emulation::slow_disk::{self, SlowDisk};
use waffle_emulation::EmulatedDevice;

/// One emulated device.
pub struct Device {
    pub device: EmulatedDevice,
    /// The directory it holds, canonical, as the host may read it back.
    pub dir: CString,
    /// `dir` and a slash: what the canonical path of a file under it starts with.
    prefix: Vec<u8>,
    /// Reads slowed so far.
    pub reads: AtomicU64,
    /// Whether the kernel's page cache stands in front of it (page_cache.rs):
    /// not for a directory in memory.
    pub pages_cached: bool,
}

pub struct Devices {
    list: Vec<Device>,
}

static DEVICES: OnceLock<Devices> = OnceLock::new();

/// This process's devices (loaded on the first call).
pub fn get() -> &'static Devices {
    DEVICES.get_or_init(load)
}

fn load() -> Devices {
    let Some(value) = std::env::var_os(slow_disk::ENV) else { return Devices { list: Vec::new() } };
    let resolved = value
        .to_str()
        .ok_or_else(|| "not UTF-8".to_string())
        .and_then(slow_disk::parse)
        .and_then(|list| list.iter().map(resolve).collect::<Result<Vec<_>, _>>());
    match resolved {
        Ok(list) => Devices { list },
        Err(e) => {
            eprintln!("libwaffle_slowdisk: {}={}: {e}", slow_disk::ENV, value.to_string_lossy());
            // SAFETY: _exit ends the process; nothing of it is used after.
            unsafe { libc::_exit(2) }
        }
    }
}

/// A device for `d`, its directory made canonical (it must exist).
fn resolve(d: &SlowDisk) -> Result<Device, String> {
    let dir = std::fs::canonicalize(&d.dir).map_err(|e| format!("{}: {e}", d.dir.display()))?;
    if !dir.is_dir() {
        return Err(format!("{}: not a directory", d.dir.display()));
    }
    let bytes = dir.as_os_str().as_bytes().to_vec();
    let mut prefix = bytes.clone();
    if !prefix.ends_with(b"/") {
        prefix.push(b'/');
    }
    let dir = CString::new(bytes).map_err(|_| format!("{}: a NUL in the path", d.dir.display()))?;
    let pages_cached = !in_memory(&dir);
    Ok(Device { device: EmulatedDevice::new(d.profile), dir, prefix, reads: AtomicU64::new(0), pages_cached })
}

/// Whether `dir` is on a file system held in memory (tmpfs, ramfs).
fn in_memory(dir: &CString) -> bool {
    // SAFETY: an all-zero statfs is a valid out buffer.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: dir is NUL-terminated; statfs writes only into fs.
    let ok = unsafe { libc::statfs(dir.as_ptr(), &mut fs) } == 0;
    // ramfs's magic (linux/magic.h), which libc does not name.
    const RAMFS_MAGIC: libc::c_long = 0x8584_58f6;
    ok && matches!(fs.f_type, libc::TMPFS_MAGIC | RAMFS_MAGIC)
}

impl Devices {
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The device holding the file whose canonical path is `path`.
    pub fn holding(&self, path: &[u8]) -> Option<usize> {
        self.list.iter().position(|d| path.starts_with(&d.prefix))
    }

    pub fn at(&self, index: usize) -> Option<&Device> {
        self.list.get(index)
    }

    pub fn by_name(&self, name: &str) -> Option<&Device> {
        self.list.iter().find(|d| d.device.profile().name == name)
    }
}
