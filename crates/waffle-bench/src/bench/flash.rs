//! `+flash`: a grid configuration's nodes with a flash tier, memcached's extstore started
//! as `waffle nodes --ssd` starts it (`waffle_nodes::flash`'s settings, the slab plan of a
//! node with flash), one file per node in `<--dir>/flash/` on this machine's disk, and what
//! the flash served over the measured run.
//!
//! The nodes run without the slow-disk shim (the bench takes its setting out of the
//! environment of what it starts) and their files sit outside every EMULATED device's
//! directory: the database's disk is the emulated one, the node's flash this machine's. memcached reads its file without
//! O_DIRECT, so what the kernel keeps of it in the page cache is read at memory speed;
//! [`FlashTraffic::page_cache_share`] says how much that was at the end.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use waffle_nodes::flash::Flash;
use waffle_nodes::slabs::SlabPlan;
use waffle_nodes::Node;

use super::configs::Plan;
use super::result::FlashTraffic;

/// memcached's counters the flash figures come from, summed over the nodes.
const COUNTERS: [&str; 6] = [
    "get_hits",
    "get_extstore",
    "miss_from_extstore",
    "extstore_bytes_written",
    "extstore_objects_used",
    "extstore_limit_maxbytes",
];

/// The directory of a dataset's flash files: `flash/` beside it, in `--dir`.
pub fn dir_for(dataset: &Path) -> PathBuf {
    dataset.parent().unwrap_or(Path::new(".")).join("flash")
}

/// The plan's nodes, each with its own flash file in `dir` if the plan has flash (then also
/// the files, which the caller removes with [`remove`] once the nodes are stopped).
pub fn start_nodes(plan: &Plan, page_bytes: u32, dir: &Path) -> Result<(Vec<Node>, Vec<PathBuf>), String> {
    let fail = |e: String| format!("{}: starting memcached: {e}", plan.name);
    start(plan.nodes, plan.node_mib, plan.flash_mib_per_node, page_bytes, dir).map_err(fail)
}

/// `count` nodes of `node_mib` MiB with slab classes for pages of `page_bytes`, each with
/// `flash_mib` MiB of flash in a file of its own in `dir` (0: none), and the files.
pub fn start(
    count: usize,
    node_mib: u32,
    flash_mib: u32,
    page_bytes: u32,
    dir: &Path,
) -> Result<(Vec<Node>, Vec<PathBuf>), String> {
    if flash_mib == 0 {
        let nodes = (0..count).map(|_| Node::start_for_pages(node_mib, page_bytes));
        return Ok((nodes.collect::<Result<_, _>>().map_err(|e| e.to_string())?, Vec::new()));
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    // Absolute: memcached gets the path on its command line.
    let dir = dir.canonicalize().map_err(|e| format!("{}: {e}", dir.display()))?;
    let slabs = SlabPlan::for_flash_node(page_bytes, false, node_mib).args();
    let (mut nodes, mut files) = (Vec::new(), Vec::new());
    for i in 0..count {
        let flash = Flash::new(dir.join(format!("node-{}", i + 1)), u64::from(flash_mib) << 20)
            .and_then(|f| f.check_here().map(|()| f))
            .map_err(|e| format!("flash of {flash_mib} MiB in {}: {e}", dir.display()))?;
        let args: Vec<String> = slabs.iter().cloned().chain(flash.args()).collect();
        files.push(flash.path.clone());
        match Node::start_with_args(node_mib, &args) {
            Ok(n) => nodes.push(n),
            Err(e) => {
                drop(nodes);
                remove(&files);
                return Err(format!("{e} (with {})", args.join(" ")));
            }
        }
    }
    Ok((nodes, files))
}

/// Removes the flash files of stopped nodes (memcached 1.6.18 truncates its file when it
/// starts: nothing in them outlives the nodes).
pub fn remove(files: &[PathBuf]) {
    for f in files {
        let _ = std::fs::remove_file(f); // ours: the nodes this configuration started made them
    }
}

/// The nodes' counters now, summed (a node that does not answer counts 0).
pub fn counters(addrs: &[String]) -> HashMap<&'static str, u64> {
    let mut sum: HashMap<&'static str, u64> = COUNTERS.iter().map(|&k| (k, 0)).collect();
    for stats in addrs.iter().filter_map(|a| waffle_nodes::stats(a.parse().ok()?).ok()) {
        for k in COUNTERS {
            *sum.entry(k).or_default() += stats.get(k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        }
    }
    sum
}

/// What the flash did between `before` and `after` ([`counters`]), and how much of `files`
/// the page cache holds now.
pub fn traffic(before: &HashMap<&str, u64>, after: &HashMap<&str, u64>, files: &[PathBuf]) -> FlashTraffic {
    let d = |k: &str| after.get(k).copied().unwrap_or(0).saturating_sub(before.get(k).copied().unwrap_or(0));
    let flash_reads = d("get_extstore");
    FlashTraffic {
        file_bytes: after.get("extstore_limit_maxbytes").copied().unwrap_or(0),
        items: after.get("extstore_objects_used").copied().unwrap_or(0),
        ram_hits: d("get_hits").saturating_sub(flash_reads),
        flash_hits: flash_reads.saturating_sub(d("miss_from_extstore")),
        flash_misses: d("miss_from_extstore"),
        bytes_written: d("extstore_bytes_written"),
        page_cache_share: page_cache_share(files),
    }
}

/// Of the bytes of `files`, the share the kernel's page cache holds (mincore over a read-only
/// mapping, as util-linux's fincore). None if a file cannot be looked at, or all are empty.
fn page_cache_share(files: &[PathBuf]) -> Option<f64> {
    let (mut cached, mut total) = (0u64, 0u64);
    for f in files {
        let (c, t) = cached_pages(f)?;
        cached += c;
        total += t;
    }
    (total > 0).then(|| cached as f64 / total as f64)
}

/// (pages in the page cache, pages) of one file.
fn cached_pages(path: &Path) -> Option<(u64, u64)> {
    use std::os::fd::AsRawFd;
    let file = std::fs::File::open(path).ok()?;
    let len = usize::try_from(file.metadata().ok()?.len()).ok()?;
    if len == 0 {
        return Some((0, 0));
    }
    // SAFETY: sysconf has no preconditions.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).ok()?;
    let pages = len.div_ceil(page);
    // SAFETY: a fresh shared read-only mapping of an open file, never read through; unmapped below.
    let map = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_SHARED, file.as_raw_fd(), 0) };
    if map == libc::MAP_FAILED {
        return None;
    }
    let mut vec = vec![0u8; pages];
    // SAFETY: `map` spans `len` bytes; `vec` has one byte per page of it.
    let rc = unsafe { libc::mincore(map, len, vec.as_mut_ptr()) };
    // SAFETY: the mapping made above, of `len` bytes.
    unsafe { libc::munmap(map, len) };
    (rc == 0).then(|| (vec.iter().filter(|&&b| b & 1 == 1).count() as u64, pages as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_cache_share_of_a_file_just_written_and_of_one_dropped() {
        let dir = std::env::temp_dir().join(format!("waffle-bench-flash-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("f");
        std::fs::write(&f, vec![7u8; 1 << 20]).unwrap();
        let written = page_cache_share(std::slice::from_ref(&f));
        // Dropped after a sync: the kernel may keep none of it.
        let file = std::fs::File::open(&f).unwrap();
        file.sync_all().unwrap();
        // SAFETY: an open descriptor; advice only.
        unsafe { libc::posix_fadvise(std::os::fd::AsRawFd::as_raw_fd(&file), 0, 0, libc::POSIX_FADV_DONTNEED) };
        let dropped = page_cache_share(std::slice::from_ref(&f));
        let missing = page_cache_share(&[dir.join("none")]);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(written, Some(1.0), "a file just written is in the page cache");
        assert!(dropped.is_some_and(|s| s < 0.5), "{dropped:?}");
        assert_eq!(missing, None);
    }

    #[test]
    fn the_counters_of_a_run_are_their_change() {
        let at = |v: [u64; 6]| COUNTERS.iter().copied().zip(v).collect::<HashMap<_, _>>();
        let before = at([100, 40, 2, 1000, 10, 64 << 20]);
        let after = at([300, 190, 12, 5000, 30, 64 << 20]);
        let t = traffic(&before, &after, &[]);
        // 200 hits, 150 flash reads of which 10 missed: 50 from RAM, 140 from flash.
        assert_eq!((t.ram_hits, t.flash_hits, t.flash_misses), (50, 140, 10));
        assert_eq!((t.bytes_written, t.items, t.file_bytes), (4000, 30, 64 << 20));
        assert_eq!(t.flash_share(), Some(140.0 / 190.0));
    }
}
