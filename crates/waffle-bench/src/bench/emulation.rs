//! EMULATED hardware as the benchmarks use it, outside the product: the
//! databases open the shipped `waffle` VFS and preload with no emulation
//! setting, and the hardware around them is slowed.
//!
//! - Devices: `libwaffle_slowdisk.so` (crates/waffle-slowdisk). For SQLite,
//!   in this very process: [`ensure_slow_disks`] re-executes the command once
//!   under the shim, each device a directory of its own beside the datasets
//!   ([`device_dir`]), and a configuration on a device opens the dataset
//!   there ([`on_device`]: a hard link, or a copy when the workload writes).
//!   All configurations still run in one process, side by side.
//!   For MariaDB: the server runs under it (`waffle_testkit::mariadb::SlowDisk`).
//! - Links: [`Grid::behind`] puts a `LinkProxy` (waffle_emulation) in front
//!   of each memcached node; the database is given the proxies' addresses.

use std::ffi::{CStr, CString, OsString};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use waffle_emulation::slow_disk::{self, SlowDisk};
use waffle_emulation::{DeviceProfile, Link, LinkProfile, LinkProxy};

use super::dataset::remove_companions;

/// Set in the environment of the re-executed command: it must find the shim loaded.
const REEXECUTED: &str = "WAFFLE_BENCH_UNDER_SLOWDISK";

/// The directory that device `profile` holds under a benchmark's `dir`.
pub fn device_dir(dir: &Path, profile: &str) -> PathBuf {
    dir.join(format!("emulated-{profile}"))
}

/// Makes sure this process runs under libwaffle_slowdisk.so with a device
/// for each of `devices` at [`device_dir`]`(dir, ..)`: if it does not yet,
/// runs this command again under it (exec: only returns on failure). Once it
/// does, the shim's setting is taken out of the environment, so the programs
/// this process starts (memcached) run without it.
pub fn ensure_slow_disks(dir: &Path, devices: &[DeviceProfile]) -> Result<(), String> {
    if devices.is_empty() {
        return Ok(());
    }
    let wanted = devices
        .iter()
        .map(|p| {
            let d = device_dir(dir, p.name);
            std::fs::create_dir_all(&d).map_err(|e| format!("cannot create {}: {e}", d.display()))?;
            let dir = d.canonicalize().map_err(|e| format!("{}: {e}", d.display()))?;
            Ok(SlowDisk { profile: *p, dir })
        })
        .collect::<Result<Vec<_>, String>>()?;
    if shim_loaded() {
        for d in &wanted {
            match shim_dir(d.profile.name) {
                Some(dir) if dir == d.dir => {}
                other => {
                    return Err(format!(
                        "libwaffle_slowdisk.so is loaded, but its {} is {:?}, not {} (unset LD_PRELOAD and {})",
                        d.profile.name,
                        other,
                        d.dir.display(),
                        slow_disk::ENV
                    ))
                }
            }
        }
        leave_children_alone();
        return Ok(());
    }
    if std::env::var_os(REEXECUTED).is_some() {
        return Err("this command was run again under libwaffle_slowdisk.so, but the shim is not loaded".into());
    }
    reexecute(&slow_disk::format(&wanted)?)
}

/// Runs this command again with the shim preloaded; returns only on failure.
fn reexecute(setting: &str) -> Result<(), String> {
    use std::os::unix::process::CommandExt;
    let shim = find_library(slow_disk::LIBRARY, "WAFFLE_SLOWDISK_SO", "waffle-slowdisk")?;
    let mut preload = OsString::from(&shim);
    if let Some(before) = std::env::var_os("LD_PRELOAD").filter(|p| !p.is_empty()) {
        preload.push(" ");
        preload.push(before);
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    eprintln!("waffle bench: EMULATED devices: running again under {} ({setting})", shim.display());
    let e = std::process::Command::new(exe)
        .args(std::env::args_os().skip(1))
        .env("LD_PRELOAD", preload)
        .env(slow_disk::ENV, setting)
        .env(REEXECUTED, "1")
        .exec();
    Err(format!("cannot run this command again under {}: {e}", shim.display()))
}

/// Takes the shim out of what this process passes on (it is loaded already and read its setting).
fn leave_children_alone() {
    let shim = format!("/{}", slow_disk::LIBRARY);
    if let Ok(p) = std::env::var("LD_PRELOAD") {
        let rest: Vec<&str> = p.split([' ', ':']).filter(|e| !e.is_empty() && !e.ends_with(&shim)).collect();
        if rest.is_empty() {
            std::env::remove_var("LD_PRELOAD");
        } else {
            std::env::set_var("LD_PRELOAD", rest.join(" "));
        }
    }
    std::env::remove_var(slow_disk::ENV);
    std::env::remove_var(REEXECUTED);
}

/// A function the shim exports, if it is loaded in this process.
fn shim_fn(name: &CStr) -> Option<*mut libc::c_void> {
    // SAFETY: a NUL-terminated name; RTLD_DEFAULT searches every object loaded.
    let f = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    (!f.is_null()).then_some(f)
}

fn shim_loaded() -> bool {
    shim_fn(c"waffle_slowdisk_reads").is_some()
}

/// The directory the loaded shim slows for `profile`.
fn shim_dir(profile: &str) -> Option<PathBuf> {
    let f = shim_fn(c"waffle_slowdisk_dir")?;
    // SAFETY: the shim exports waffle_slowdisk_dir with this signature.
    let f: unsafe extern "C" fn(*const libc::c_char) -> *const libc::c_char = unsafe { std::mem::transmute(f) };
    let name = CString::new(profile).ok()?;
    // SAFETY: a NUL-terminated name; the result is null or a static NUL-terminated string.
    let dir = unsafe { f(name.as_ptr()) };
    // SAFETY: not null: a static NUL-terminated string of the shim's.
    (!dir.is_null()).then(|| PathBuf::from(unsafe { CStr::from_ptr(dir) }.to_string_lossy().into_owned()))
}

/// Reads the shim has slowed on `profile`'s device in this process so far (None: not emulated here).
pub fn slowed_reads(profile: &str) -> Option<u64> {
    let f = shim_fn(c"waffle_slowdisk_reads")?;
    // SAFETY: the shim exports waffle_slowdisk_reads with this signature.
    let f: unsafe extern "C" fn(*const libc::c_char) -> i64 = unsafe { std::mem::transmute(f) };
    let name = CString::new(profile).ok()?;
    // SAFETY: a NUL-terminated name.
    u64::try_from(unsafe { f(name.as_ptr()) }).ok()
}

/// The database `file` as seen on device `profile`: a hard link to it in the
/// device's directory (a copy when `writes`, so every configuration starts
/// from the same bytes), with no companion files left from an earlier run.
/// A link that is there already is kept: making one changes the file's
/// ctime, which libwaffle.so takes for another writer's change (it then
/// forgets what it cached), so a database that reopens warm must keep its links.
pub fn on_device(file: &Path, profile: &str, writes: bool) -> Result<PathBuf, String> {
    use std::os::unix::fs::MetadataExt;
    let dir = device_dir(file.parent().unwrap_or(Path::new(".")), profile);
    let name = file.file_name().ok_or_else(|| format!("{}: no file name", file.display()))?;
    let target = dir.join(name);
    remove_companions(&target);
    let id = |p: &Path| std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()));
    if !writes && id(&target).is_some() && id(&target) == id(file) {
        drop_cached_pages(&target)?;
        return Ok(target);
    }
    let _ = std::fs::remove_file(&target);
    let linked = !writes && std::fs::hard_link(file, &target).is_ok();
    if !linked {
        std::fs::copy(file, &target)
            .map_err(|e| format!("cannot copy {} to {}: {e}", file.display(), target.display()))?;
    }
    drop_cached_pages(&target)?;
    Ok(target)
}

/// Drops `file`'s pages from the kernel's page cache (written back first):
/// a configuration on an EMULATED device starts with none of its database
/// cached, whatever built, copied or read it before (the page cache answers
/// reads in front of the device, see crates/waffle-slowdisk).
pub fn drop_cached_pages(file: &Path) -> Result<(), String> {
    use std::os::fd::AsRawFd;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(file)
        .map_err(|e| format!("{}: {e}", file.display()))?;
    f.sync_all().map_err(|e| format!("{}: {e}", file.display()))?;
    // SAFETY: advice on a descriptor this function owns.
    match unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) } {
        0 => Ok(()),
        e => Err(format!("{}: posix_fadvise: {}", file.display(), std::io::Error::from_raw_os_error(e))),
    }
}

/// Makes `seen` reopen as `file` would, both paths of one database (the
/// database and its link on a device, [`on_device`]): the cache's sidecar
/// and hot list beside `file`, if any, are copied beside `seen` (the same
/// inode, size and mtime, so a clean close's state is valid for it), and
/// stale ones removed. The demo reopens its database warm from one disk to
/// the next, as it did when the device was a URI parameter of one path.
pub fn carry_cache_state(file: &Path, seen: &Path) -> Result<(), String> {
    let companions: [fn(&Path) -> PathBuf; 2] =
        [waffle_core::sidecar::Sidecar::path_for, waffle_core::warming::hot_list::path_for];
    for path_for in companions {
        let (from, to) = (path_for(file), path_for(seen));
        if from == to {
            continue;
        }
        let _ = std::fs::remove_file(&to);
        if from.is_file() {
            std::fs::copy(&from, &to)
                .map_err(|e| format!("cannot copy {} to {}: {e}", from.display(), to.display()))?;
        }
    }
    Ok(())
}

/// A file cargo builds beside this program: `$env`, else next to it (or one
/// level up, for a test binary in deps/), else in target/release or target/debug.
pub fn find_library(file: &str, env: &str, package: &str) -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os(env) {
        let p = PathBuf::from(p);
        return if p.is_file() { Ok(p) } else { Err(format!("{env}={} does not exist", p.display())) };
    }
    let mut candidates = Vec::new();
    if let Some(dir) = std::env::current_exe().ok().and_then(|e| e.parent().map(Path::to_path_buf)) {
        candidates.push(dir.join(file));
        if let Some(up) = dir.parent() {
            candidates.push(up.join(file));
        }
    }
    candidates.push(PathBuf::from("target/release").join(file));
    candidates.push(PathBuf::from("target/debug").join(file));
    candidates
        .into_iter()
        .find(|c| c.is_file())
        .map(|c| c.canonicalize().unwrap_or(c))
        .ok_or_else(|| format!("{file} not found: build it with `cargo build --release -p {package}` (or set {env})"))
}

/// The memcached nodes of one configuration as the database sees them:
/// their own addresses, or proxies on an EMULATED link in front of them.
pub struct Grid {
    /// What the database is given (`waffle_grid`, `WAFFLE_GRID`).
    pub addrs: Vec<String>,
    /// Kept running while the configuration runs; stopped when dropped.
    _proxies: Vec<LinkProxy>,
}

impl Grid {
    /// `nodes` (host:port, loopback) behind `link`: one proxy per node, all on
    /// one shared link (the database host's network interface). None: the nodes as they are.
    pub fn behind(nodes: &[String], link: Option<LinkProfile>) -> Result<Grid, String> {
        let Some(profile) = link else { return Ok(Grid { addrs: nodes.to_vec(), _proxies: Vec::new() }) };
        let shared = Arc::new(Link::new(profile));
        let proxies = nodes
            .iter()
            .map(|n| {
                let addr = n.parse().map_err(|e| format!("{n}: {e}"))?;
                LinkProxy::start(addr, Arc::clone(&shared)).map_err(|e| format!("link proxy for {n}: {e}"))
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Grid { addrs: proxies.iter().map(|p| p.addr().to_string()).collect(), _proxies: proxies })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_sees_a_link_of_a_read_only_dataset_and_a_copy_of_one_that_is_written() {
        let dir = std::env::temp_dir().join(format!("waffle-bench-emulation-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(device_dir(&dir, "hdd-10k")).unwrap();
        let file = dir.join("data.db");
        std::fs::write(&file, b"dataset").unwrap();
        std::fs::write(dir.join("emulated-hdd-10k/data.db-journal"), b"left over").unwrap();
        let linked = on_device(&file, "hdd-10k", false).unwrap();
        assert_eq!(linked, dir.join("emulated-hdd-10k/data.db"));
        assert!(!dir.join("emulated-hdd-10k/data.db-journal").exists(), "a stale journal would be rolled back");
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(&linked).unwrap();
        assert_eq!(meta.ino(), std::fs::metadata(&file).unwrap().ino());
        // Asked again: the same link, its ctime untouched (libwaffle.so would take a new one for a writer's change).
        std::thread::sleep(std::time::Duration::from_millis(20));
        on_device(&file, "hdd-10k", false).unwrap();
        let again = std::fs::metadata(&linked).unwrap();
        assert_eq!((again.ino(), again.ctime(), again.ctime_nsec()), (meta.ino(), meta.ctime(), meta.ctime_nsec()));
        let copied = on_device(&file, "hdd-10k", true).unwrap();
        assert_ne!(std::fs::metadata(&copied).unwrap().ino(), std::fs::metadata(&file).unwrap().ino());
        assert_eq!(std::fs::read(&copied).unwrap(), b"dataset");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_grid_behind_a_link_names_proxies_and_one_without_names_the_nodes() {
        let node = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let nodes = vec![node.local_addr().unwrap().to_string()];
        assert_eq!(Grid::behind(&nodes, None).unwrap().addrs, nodes);
        let g = Grid::behind(&nodes, LinkProfile::by_name("1gbe").unwrap()).unwrap();
        assert_eq!(g.addrs.len(), 1);
        assert_ne!(g.addrs, nodes);
        assert!(g.addrs[0].starts_with("127.0.0.1:"));
    }
}
