//! A node's flash tier: memcached's extstore (`-o ext_path=FILE:SIZE`), with
//! settings chosen for Waffle's values, one database page (4-16 KiB typically,
//! 512 B to 64 KiB) in its envelope. docs/flash-tier.md explains them and how
//! to size RAM against flash.
//!
//! What is chosen, and why:
//! - `ext_item_size=512`: a value under 512 bytes (a nearly empty page,
//!   compressed) stays in RAM: on flash it would still keep its ~96-byte
//!   header in RAM and cost a flash read for little RAM saved.
//! - `ext_item_age` is left unset: memcached then writes items to flash only
//!   when its RAM is short, coldest first, so RAM keeps the hot pages.
//! - `ext_page_size`: a sixteenth of the file, 4 to 64 MiB, a multiple of the
//!   write buffer (memcached refuses to start otherwise: "page_size must be
//!   divisible by wbuf_size"). Compaction and eviction work a whole page at a
//!   time, so a small file needs small pages to have enough of them.
//! - `ext_wbuf_size=4` MiB (memcached's default), ≤ the page: a write buffer
//!   holds about a thousand 4 KiB pages and goes to flash in one write.
//! - `ext_threads=4`: a page is one small random read; one IO thread would
//!   queue the reads of concurrent clients behind each other, while an SSD
//!   serves several at once.
//! - `ext_max_frag=0.5`: Waffle deletes a grid copy when it reads it (the
//!   tiers are exclusive) and replaces it when the page is rewritten, so flash
//!   pages empty out quickly. Compacting a page rewrites its live values; at
//!   0.5 at most half a page is rewritten to free one, and fuller pages are
//!   evicted whole when flash runs short (losing cold copies costs a disk
//!   read each, not wrong data). memcached's 0.8 would rewrite 4 pages to free 1.
//! - `ext_drop_unread` stays off: every live copy on flash is unread (a read
//!   deletes it), so dropping unread values would empty flash at every compaction.

use std::path::{Path, PathBuf};

/// The smallest flash file: 16 extstore pages of the smallest page size.
pub const MIN_FLASH_MIB: u32 = 16 * MIN_EXT_PAGE_MIB;
/// The largest flash file of one node `waffle nodes` starts or prints flags for (64 TiB).
pub const MAX_FLASH_MIB: u32 = 64 << 20;
const MIN_EXT_PAGE_MIB: u32 = 4;
const MAX_EXT_PAGE_MIB: u32 = 64;
const EXT_WBUF_MIB: u32 = 4;
const EXT_ITEM_BYTES: u32 = 512;
const EXT_THREADS: u32 = 4;
const EXT_MAX_FRAG: &str = "0.5";

/// A node's extstore file and its size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Flash {
    pub path: PathBuf,
    pub size_mib: u32,
}

impl Flash {
    /// Checks the size and the path's form (the error is the reason; the caller names the flag
    /// and value). Whether its directory exists is [`Flash::check_here`]'s: a command printed
    /// for another machine names that machine's path.
    pub fn new(path: PathBuf, size_bytes: u64) -> Result<Flash, String> {
        let size_mib = flash_mib(size_bytes)?;
        check_form(&path)?;
        Ok(Flash { path, size_mib })
    }

    /// Whether memcached can create or reuse the file on this machine: its directory exists,
    /// and it is no directory or device itself.
    pub fn check_here(&self) -> Result<(), String> {
        let parent = match self.path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        if !parent.is_dir() {
            return Err(format!("{}: no such directory (create it first, on the flash device)", parent.display()));
        }
        match std::fs::metadata(&self.path) {
            Ok(m) if !m.is_file() => Err(format!("{} exists and is not a regular file", self.path.display())),
            _ => Ok(()),
        }
    }

    /// `PATH:SIZE` as the flag takes it.
    pub fn describe(&self) -> String {
        format!("{}:{}MiB", self.path.display(), self.size_mib)
    }

    /// The same size in a file of its own for node `index` of several: `PATH.INDEX`.
    pub fn for_node(&self, index: usize) -> Flash {
        let mut name = self.path.clone().into_os_string();
        name.push(format!(".{index}"));
        Flash { path: PathBuf::from(name), size_mib: self.size_mib }
    }

    /// extstore's page size for this file (see the module's notes).
    pub fn ext_page_mib(&self) -> u32 {
        (self.size_mib / 16 / EXT_WBUF_MIB * EXT_WBUF_MIB).clamp(MIN_EXT_PAGE_MIB, MAX_EXT_PAGE_MIB)
    }

    /// The `-o` settings, ext_path last (memcached reads the page and buffer sizes before it).
    pub fn options(&self) -> Vec<String> {
        vec![
            format!("ext_page_size={}", self.ext_page_mib()),
            format!("ext_wbuf_size={EXT_WBUF_MIB}"),
            format!("ext_threads={EXT_THREADS}"),
            format!("ext_item_size={EXT_ITEM_BYTES}"),
            format!("ext_max_frag={EXT_MAX_FRAG}"),
            format!("ext_path={}:{}m", self.path.display(), self.size_mib),
        ]
    }

    /// The flags for memcached: `-o` and the settings, comma separated.
    pub fn args(&self) -> Vec<String> {
        vec!["-o".into(), self.options().join(",")]
    }
}

/// A flash size as a whole number of MiB within bounds.
fn flash_mib(bytes: u64) -> Result<u32, String> {
    if !bytes.is_multiple_of(1 << 20) {
        return Err(format!("{bytes} bytes is no whole number of MiB (extstore's size is in MiB)"));
    }
    let mib = bytes >> 20;
    if !(u64::from(MIN_FLASH_MIB)..=u64::from(MAX_FLASH_MIB)).contains(&mib) {
        return Err(format!(
            "{mib} MiB: a node's flash has from {MIN_FLASH_MIB} MiB (16 extstore pages) to {} TiB",
            MAX_FLASH_MIB >> 20
        ));
    }
    Ok(mib as u32)
}

/// A path memcached's `-o` can carry: named, with no `,` (memcached splits `-o` at commas) or
/// white space (a command line printed to paste).
fn check_form(path: &Path) -> Result<(), String> {
    if path.as_os_str().is_empty() {
        return Err("no file named before the ':'".into());
    }
    if path.to_string_lossy().contains([',', ' ', '\t', '\n']) {
        return Err(format!(
            "{}: a comma or white space in the path would split memcached's -o settings",
            path.display()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_whole_mib_within_bounds() {
        assert_eq!(flash_mib(64 << 20), Ok(64));
        assert_eq!(flash_mib(1 << 40), Ok(1 << 20));
        for bad in [0, 63 << 20, (64 << 20) + 1, 65u64 << 40] {
            assert!(flash_mib(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn pages_are_a_sixteenth_of_the_file_in_bounds_and_whole_write_buffers() {
        let f = |mib| Flash { path: "/tmp/x".into(), size_mib: mib };
        assert_eq!(f(64).ext_page_mib(), 4);
        assert_eq!(f(200).ext_page_mib(), 12);
        assert_eq!(f(1 << 20).ext_page_mib(), 64);
        // 123 MiB made 6 MiB pages, which memcached refused: "page_size must be divisible by wbuf_size".
        for mib in MIN_FLASH_MIB..=2048 {
            assert_eq!(f(mib).ext_page_mib() % EXT_WBUF_MIB, 0, "{mib} MiB");
        }
        let opts = f(64).options();
        assert_eq!(opts.last().unwrap(), "ext_path=/tmp/x:64m");
        assert_eq!(f(64).for_node(2).path, PathBuf::from("/tmp/x.2"));
    }

    #[test]
    fn memcached_takes_the_settings_and_makes_the_file() {
        let dir = std::env::temp_dir().join(format!("waffle-flash-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // 123 MiB: a size whose sixteenth is no whole number of write buffers.
        for mib in [64, 123] {
            let flash = Flash::new(dir.join(format!("ext-{mib}")), mib << 20).unwrap();
            let node = crate::Node::start_with_args(16, &flash.args()).map_err(|e| e.to_string());
            let limit = node
                .as_ref()
                .map_err(Clone::clone)
                .and_then(|n| n.stat("extstore_limit_maxbytes").map_err(|e| e.to_string()));
            drop(node);
            let made = flash.path.is_file();
            // memcached uses whole extstore pages of the file: 123 MiB in 4 MiB pages is 120 MiB.
            let page = u64::from(flash.ext_page_mib());
            if limit != Ok((mib / page * page) << 20) || !made {
                std::fs::remove_dir_all(&dir).unwrap();
                panic!("{mib} MiB: memcached with {:?}: {limit:?}, file made: {made}", flash.args());
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bad_paths_say_why() {
        let e = Flash::new("/no/such/dir/ext".into(), 64 << 20).unwrap().check_here().unwrap_err();
        assert!(e.contains("/no/such/dir") && e.contains("no such directory"), "{e}");
        let e = Flash::new("/tmp".into(), 64 << 20).unwrap().check_here().unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
        assert_eq!(Flash::new("/tmp/ext".into(), 64 << 20).unwrap().check_here(), Ok(()));
        assert!(Flash::new("/tmp/a,b".into(), 64 << 20).unwrap_err().contains("comma"));
        assert!(Flash::new("".into(), 64 << 20).is_err());
    }
}
