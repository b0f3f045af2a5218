//! `waffle`: the demo, local grid nodes, and (later) benchmarks and probes.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use waffle_cli::demo::{self, DemoOptions};
use waffle_core::config::parse_size;

#[derive(Parser)]
#[command(name = "waffle", version, about = "Waffle: a remote buffer cache for databases on a memcached grid")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start two local memcached nodes and compare a read workload with the grid off and on.
    Demo {
        /// Database size, e.g. 64MiB.
        #[arg(long, default_value = "64MiB", value_parser = size)]
        data: u64,
        /// Waffle's local pool (L1), e.g. 8MiB.
        #[arg(long, default_value = "8MiB", value_parser = size)]
        local: u64,
        /// SQLite's own page cache per connection, in KiB.
        #[arg(long, default_value_t = 256)]
        sqlite_cache_kib: u64,
        /// Reader threads (one connection each).
        #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=64))]
        threads: u64,
        /// Measured seconds per configuration.
        #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=3600))]
        seconds: u64,
        /// SQLite page size.
        #[arg(long, default_value_t = 4096, value_parser = page_size)]
        page_size: u32,
        /// Deadline of one grid request.
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..=60000))]
        timeout_ms: u64,
        /// Backing devices to run on, comma-separated: real (this machine's disk)
        /// and EMULATED profiles hdd-10k, ssd-2009, nvme, cloud-block (docs/benchmarks.md).
        #[arg(long, default_value = "real,hdd-10k", value_delimiter = ',', value_parser = device)]
        devices: Vec<String>,
        /// Where the database goes (reused while its parameters match).
        #[arg(long, default_value = "waffle-demo")]
        dir: PathBuf,
    },
    /// Run local memcached nodes on free loopback ports until interrupted.
    Nodes {
        #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=16))]
        count: u64,
        /// Memory per node, e.g. 64MiB.
        #[arg(long, default_value = "64MiB", value_parser = size)]
        memory: u64,
    },
}

fn size(s: &str) -> Result<u64, String> {
    parse_size(s)
}

fn device(s: &str) -> Result<String, String> {
    waffle_core::emulation::DeviceProfile::by_name(s.trim()).map(|_| s.trim().to_string())
}

fn page_size(s: &str) -> Result<u32, String> {
    let n: u32 = s.parse().map_err(|_| format!("'{s}' is not a number"))?;
    if !(512..=65536).contains(&n) || !n.is_power_of_two() {
        return Err(format!("'{s}' is not a SQLite page size (a power of two from 512 to 65536)"));
    }
    Ok(n)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo { data, local, sqlite_cache_kib, threads, seconds, page_size, timeout_ms, devices, dir } => {
            if local >= data {
                Err(format!("--local ({local} bytes) must be smaller than --data ({data} bytes) for the demo to mean anything"))
            } else {
                demo::run(&DemoOptions {
                    dir,
                    data_bytes: data,
                    local_bytes: local,
                    sqlite_cache_kib,
                    threads: threads as usize,
                    seconds,
                    page_bytes: page_size,
                    timeout_ms,
                    devices,
                })
                .map(|_| ())
            }
        }
        Command::Nodes { count, memory } => run_nodes(count as usize, memory),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("waffle: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run_nodes(count: usize, memory_bytes: u64) -> Result<(), String> {
    let mib = (memory_bytes >> 20).max(1) as u32;
    let nodes: Vec<_> = (0..count)
        .map(|_| waffle_nodes::Node::start(mib))
        .collect::<Result<_, _>>()
        .map_err(|e| format!("starting memcached: {e}"))?;
    let list: Vec<String> = nodes.iter().map(|n| n.addr()).collect();
    println!("WAFFLE_GRID={}", list.join(","));
    println!("{count} memcached nodes of {mib} MiB running; press Enter (or close stdin) to stop them");
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    drop(nodes);
    Ok(())
}
