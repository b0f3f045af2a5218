//! The values of a memcached node's flags (`waffle nodes --memory/--page-size/--ssd`,
//! `waffle bench capacity --node-memory`): an operator's command parses them
//! here, by the core's rule of every size and page size, without the bench.

/// A memcached node's memory (`-m`): a size that is a whole number of MiB, 8 MiB to 64 GiB.
pub fn node_memory(s: &str) -> Result<u32, String> {
    let bytes = waffle_core::config::parse_size(s).map_err(|e| e.to_string())?;
    waffle_nodes::memory_mib(bytes)
}

/// `waffle nodes --page-size`: 0 (memcached's default classes) or a page size.
pub fn node_page_size(s: &str) -> Result<u32, String> {
    if s.trim() == "0" {
        return Ok(0);
    }
    waffle_core::config::parse_page_size(s).map_err(|e| format!("{e}; or 0 for memcached's defaults"))
}

/// `waffle nodes --ssd PATH:SIZE`: a node's extstore file and its size, a whole number of MiB
/// (the size after the last `:`, so a path may hold colons). The directory is checked when
/// nodes start here, not for `--print-flags` (another machine's path).
pub fn node_flash(s: &str) -> Result<waffle_nodes::flash::Flash, String> {
    let (path, size) = s.rsplit_once(':').ok_or("expected PATH:SIZE, e.g. /srv/flash/waffle:100GiB")?;
    let bytes = waffle_core::config::parse_size(size).map_err(|e| format!("size '{size}': {e}"))?;
    waffle_nodes::flash::Flash::new(path.into(), bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flash_takes_a_path_in_a_directory_and_a_size() {
        let f = node_flash("/tmp/waffle-ext:1GiB").unwrap();
        assert_eq!((f.path.to_str().unwrap(), f.size_mib), ("/tmp/waffle-ext", 1024));
        assert!(node_flash("/tmp/waffle-ext").unwrap_err().contains("PATH:SIZE"));
        assert!(node_flash("/tmp/waffle-ext:1GB").unwrap_err().contains("size '1GB'"));
        assert!(node_flash("/tmp/waffle-ext:1000000").unwrap_err().contains("whole number of MiB"));
        assert!(node_flash("/tmp/waffle-ext:8MiB").unwrap_err().contains("16 extstore pages"));
        assert!(node_flash("/tmp/a,b:1GiB").unwrap_err().contains("comma"));
        assert!(node_flash(":1GiB").is_err());
    }

    #[test]
    fn node_flags_take_whole_mib_and_page_sizes_or_0() {
        assert_eq!(node_page_size("0"), Ok(0));
        assert_eq!(node_page_size("4096"), Ok(4096));
        assert_eq!(node_page_size("16KiB"), Ok(16384));
        assert!(node_page_size("1000").unwrap_err().contains("power of two"));
        assert_eq!(node_memory("4GiB"), Ok(4096));
        assert_eq!(node_memory("64MiB"), Ok(64));
        for bad in ["0", "1MiB", "1536KiB", "64MB", "65GiB"] {
            assert!(node_memory(bad).is_err(), "{bad}");
        }
    }
}
