//! `waffle nodes`: local memcached nodes started together and watched until
//! asked to stop.
//!
//! A [`Group`] stops its nodes on every way out: [`Group::watch`] returning
//! (asked to stop, or a node that died on its own, which stops the others),
//! an error or a panic (dropping a [`Node`] kills it), and a SIGKILL of the
//! program (the nodes are tied to the thread that started them,
//! [`Node::start_tied`]). The program turns SIGINT and SIGTERM into the stop
//! flag (the CLI does, with signal-hook).

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use crate::slabs::SlabPlan;
use crate::Node;

/// How often [`Group::watch`] looks at the stop flag and the nodes.
pub const WATCH_INTERVAL_MS: u64 = 100;

/// Nodes that run together and stop together.
pub struct Group {
    nodes: Vec<Node>,
}

impl Group {
    /// Starts `count` nodes of `memory_mib` (with `plan`'s slab classes, if any), each tied to
    /// the calling thread. If one fails, those started are stopped again.
    pub fn start(count: usize, memory_mib: u32, plan: Option<&SlabPlan>) -> io::Result<Group> {
        let args = plan.map(SlabPlan::args).unwrap_or_default();
        Group::start_with_args(memory_mib, vec![args; count])
    }

    /// One node per entry of `args`, each with its own flags (a flash file is one node's).
    pub fn start_with_args(memory_mib: u32, args: Vec<Vec<String>>) -> io::Result<Group> {
        let nodes = args.iter().map(|a| Node::start_tied_with_args(memory_mib, a)).collect::<io::Result<_>>()?;
        Ok(Group { nodes })
    }

    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// `127.0.0.1:PORT,...`: the value of WAFFLE_GRID for these nodes.
    pub fn grid(&self) -> String {
        self.nodes.iter().map(Node::addr).collect::<Vec<_>>().join(",")
    }

    /// Waits until `stop` is set (Ok) or a node exits by itself (Err naming it and how it
    /// ended). Either way the caller drops the group, which stops every node left.
    pub fn watch(&mut self, stop: &AtomicBool) -> Result<(), String> {
        loop {
            if stop.load(Ordering::SeqCst) {
                return Ok(());
            }
            if let Some(dead) = self.first_exited() {
                // A terminal's Ctrl-C reaches the nodes too: their exit is then no error.
                if stop.load(Ordering::SeqCst) {
                    return Ok(());
                }
                return Err(dead);
            }
            thread::sleep(Duration::from_millis(WATCH_INTERVAL_MS));
        }
    }

    /// The first node found to have exited by itself, described.
    fn first_exited(&mut self) -> Option<String> {
        self.nodes.iter_mut().find_map(|n| n.exit_status().map(|s| format!("memcached at {} exited ({s})", n.addr())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpStream;
    use std::sync::Arc;
    use std::time::Instant;

    fn answers(addr: std::net::SocketAddr) -> bool {
        TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
    }

    #[test]
    fn the_stop_flag_ends_the_watch_and_the_drop_stops_every_node() {
        let mut group = Group::start(2, 8, None).expect("memcached must be installed");
        let addrs: Vec<_> = group.nodes().iter().map(Node::socket_addr).collect();
        assert_eq!(group.grid(), addrs.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(","));
        let stop = Arc::new(AtomicBool::new(false));
        let setter = Arc::clone(&stop);
        let started = Instant::now();
        let t = thread::spawn(move || {
            thread::sleep(Duration::from_millis(300));
            setter.store(true, Ordering::SeqCst);
        });
        assert_eq!(group.watch(&stop), Ok(()));
        assert!(started.elapsed() >= Duration::from_millis(300), "returned before the flag");
        t.join().unwrap();
        assert!(addrs.iter().all(|&a| answers(a)), "the watch stops nothing itself");
        drop(group);
        assert!(addrs.iter().all(|&a| !answers(a)), "dropped: every node stopped");
    }

    #[test]
    fn a_node_that_dies_ends_the_watch_with_its_name() {
        let mut group = Group::start(2, 8, None).expect("memcached must be installed");
        let (dead, alive) = (group.nodes()[0].addr(), group.nodes()[1].socket_addr());
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(group.nodes()[0].pid().unwrap() as libc::pid_t, libc::SIGKILL) };
        let e = group.watch(&AtomicBool::new(false)).unwrap_err();
        assert!(e.contains(&dead) && e.contains("exited"), "{e}");
        assert!(answers(alive));
        drop(group);
        assert!(!answers(alive), "the other node stopped with the group");
    }
}
