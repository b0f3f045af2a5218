//! Real memcached nodes for a test: `waffle_nodes::Node` (the crate `waffle nodes` uses too),
//! started on a free loopback port and killed when dropped, and the grid list that names them.

pub use waffle_nodes::Node;

/// A real memcached on a free loopback port (killed when dropped).
pub fn start_node(memory_mib: u32) -> Node {
    Node::start(memory_mib).unwrap_or_else(|e| {
        panic!(
            "cannot start memcached ({e}). The end-to-end tests need memcached 1.6 \
             (Debian: apt-get install memcached, or set WAFFLE_MEMCACHED=/path/to/memcached)"
        )
    })
}

/// "addr1,addr2,..." for `waffle_grid`: `grid_of(&nodes)`, `grid_of(&nodes[..2])`.
pub fn grid_of<'a>(nodes: impl IntoIterator<Item = &'a Node>) -> String {
    nodes.into_iter().map(|n| n.addr()).collect::<Vec<_>>().join(",")
}
