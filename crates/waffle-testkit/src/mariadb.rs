//! Throwaway MariaDB servers for benchmarks and tests: a datadir of our own,
//! reachable only through its own socket (`--skip-networking`: no TCP port),
//! started as a child process, every wait bounded, always killed at the end
//! (a [`Server`] is SIGKILLed when dropped). The system MariaDB service is
//! never touched.
//!
//! A server runs stock or under `libwaffle_preload.so` ([`Preload`]). Either
//! way with `--innodb-use-native-aio=0 --innodb-flush-method=O_DIRECT`
//! unless told otherwise, so both read and write pages the same way. Either
//! can also run on an EMULATED disk ([`SlowDisk`]: `libwaffle_slowdisk.so`
//! preloaded after the preload, so the preload's own reads wait for it too).

use std::io::{self, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// How long a server may take to accept connections (startup, crash recovery).
pub const START_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a clean shutdown may take before the server is killed.
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(60);
/// Smallest buffer pool MariaDB 10.11 accepts at 16 KiB pages.
pub const MIN_BUFFER_POOL: u64 = 6 << 20;

/// The programs a server needs, found on PATH or in Debian's places.
#[derive(Clone, Debug)]
pub struct Tools {
    pub mariadbd: PathBuf,
    pub install_db: PathBuf,
    pub client: PathBuf,
    /// None when sysbench is not installed (only benchmarks and some tests need it).
    pub sysbench: Option<PathBuf>,
}

pub const INSTALL_HINT: &str =
    "install MariaDB and sysbench: `apt-get install -y mariadb-server sysbench` (Debian 12), or ./scripts/install-deps; \
     the system service need not run: Waffle starts its own servers";

fn find(names: &[&str], dirs: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut all: Vec<PathBuf> = std::env::split_paths(&path).collect();
    all.extend(dirs.iter().map(PathBuf::from));
    for name in names {
        for dir in &all {
            let c = dir.join(name);
            if c.is_file() {
                return Some(c);
            }
        }
    }
    None
}

impl Tools {
    /// Finds mariadbd (or mysqld), mariadb-install-db, the mariadb client and sysbench.
    pub fn find() -> Result<Tools, String> {
        let sbin = ["/usr/sbin", "/usr/local/sbin", "/usr/libexec"];
        let mariadbd = std::env::var_os("WAFFLE_MARIADBD")
            .map(PathBuf::from)
            .or_else(|| find(&["mariadbd", "mysqld"], &sbin))
            .ok_or_else(|| format!("mariadbd not found; {INSTALL_HINT}"))?;
        let install_db = find(&["mariadb-install-db", "mysql_install_db"], &["/usr/bin", "/usr/local/bin"])
            .ok_or_else(|| format!("mariadb-install-db not found; {INSTALL_HINT}"))?;
        let client = find(&["mariadb", "mysql"], &["/usr/bin", "/usr/local/bin"])
            .ok_or_else(|| format!("the mariadb client not found; {INSTALL_HINT}"))?;
        let sysbench = find(&["sysbench"], &["/usr/bin", "/usr/local/bin"]);
        Ok(Tools { mariadbd, install_db, client, sysbench })
    }

    pub fn sysbench(&self) -> Result<&Path, String> {
        self.sysbench.as_deref().ok_or_else(|| format!("sysbench not found; {INSTALL_HINT}"))
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Runs `cmd` with a deadline; its output, or an error with the tail of its stderr.
pub fn run_bounded(cmd: &mut Command, timeout: Duration, what: &str) -> Result<std::process::Output, String> {
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| format!("{what}: cannot start: {e}"))?;
    let out = wait_output(&mut child, timeout).map_err(|e| format!("{what}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{what} failed ({}): {}", out.status, tail(&out.stderr, 2000)));
    }
    Ok(out)
}

/// Waits for a child with piped stdout/stderr, reading both; kills it at the deadline.
pub fn wait_output(child: &mut Child, timeout: Duration) -> io::Result<std::process::Output> {
    let mut so = child.stdout.take();
    let mut se = child.stderr.take();
    let out_t = std::thread::spawn(move || {
        let mut b = Vec::new();
        if let Some(s) = so.as_mut() {
            let _ = s.read_to_end(&mut b);
        }
        b
    });
    let err_t = std::thread::spawn(move || {
        let mut b = Vec::new();
        if let Some(s) = se.as_mut() {
            let _ = s.read_to_end(&mut b);
        }
        b
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break s;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(io::Error::new(io::ErrorKind::TimedOut, format!("did not finish within {timeout:?}")));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Ok(std::process::Output {
        status,
        stdout: out_t.join().unwrap_or_default(),
        stderr: err_t.join().unwrap_or_default(),
    })
}

pub fn tail(b: &[u8], n: usize) -> String {
    let s = String::from_utf8_lossy(b);
    let start = s.len().saturating_sub(n);
    let start = (start..s.len()).find(|&i| s.is_char_boundary(i)).unwrap_or(s.len());
    s[start..].trim().to_string()
}

/// Creates a fresh datadir at `datadir` (which must not exist or be empty);
/// `extra` server options go to the bootstrap server too (e.g. a redo log size).
pub fn install_datadir(tools: &Tools, datadir: &Path, extra: &[String]) -> Result<(), String> {
    std::fs::create_dir_all(datadir).map_err(|e| format!("cannot create {}: {e}", datadir.display()))?;
    let mut cmd = Command::new(&tools.install_db);
    cmd.arg("--no-defaults")
        .arg(format!("--datadir={}", datadir.display()))
        .args(["--auth-root-authentication-method=normal", "--skip-test-db"])
        .args(extra);
    if is_root() {
        cmd.arg("--user=root");
    }
    // The bootstrap server never runs under the preload.
    cmd.env_remove("LD_PRELOAD");
    run_bounded(&mut cmd, Duration::from_secs(180), "mariadb-install-db").map(|_| ())
}

/// Copies a datadir (a template made once) to `to`: faster than installing again.
pub fn copy_datadir(from: &Path, to: &Path) -> Result<(), String> {
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent).map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    }
    run_bounded(Command::new("cp").arg("-a").arg(from).arg(to), Duration::from_secs(120), "cp -a datadir").map(|_| ())
}

/// Running under `libwaffle_preload.so`, with these `WAFFLE_*` variables.
#[derive(Clone, Debug)]
pub struct Preload {
    pub library: PathBuf,
    pub env: Vec<(String, String)>,
}

/// Running on an EMULATED disk (benchmarks): `libwaffle_slowdisk.so` with
/// `WAFFLE_SLOWDISK=setting` (`PROFILE:DIR`, DIR usually the datadir).
#[derive(Clone, Debug)]
pub struct SlowDisk {
    pub library: PathBuf,
    pub setting: String,
}

#[derive(Clone, Debug)]
pub struct ServerOptions {
    pub buffer_pool_bytes: u64,
    pub preload: Option<Preload>,
    /// Preloaded after `preload` (whose real pread64 is then the shim's).
    pub slow_disk: Option<SlowDisk>,
    /// `--innodb-use-native-aio`: off unless a test wants to see the preload refuse.
    pub native_aio: bool,
    /// More `--option=value` arguments.
    pub extra_args: Vec<String>,
}

impl ServerOptions {
    pub fn stock(buffer_pool_bytes: u64) -> ServerOptions {
        ServerOptions { buffer_pool_bytes, preload: None, slow_disk: None, native_aio: false, extra_args: Vec::new() }
    }

    pub fn waffle(buffer_pool_bytes: u64, preload: Preload) -> ServerOptions {
        ServerOptions { preload: Some(preload), ..ServerOptions::stock(buffer_pool_bytes) }
    }

    /// The same on an EMULATED disk.
    pub fn on_slow_disk(self, slow_disk: SlowDisk) -> ServerOptions {
        ServerOptions { slow_disk: Some(slow_disk), ..self }
    }

    /// LD_PRELOAD's value: the preload, then the slow disk (None: neither).
    fn ld_preload(&self) -> Option<std::ffi::OsString> {
        let libs: Vec<&Path> = self
            .preload
            .iter()
            .map(|p| p.library.as_path())
            .chain(self.slow_disk.iter().map(|s| s.library.as_path()))
            .collect();
        let mut value = std::ffi::OsString::new();
        for (i, lib) in libs.iter().enumerate() {
            if i > 0 {
                value.push(" ");
            }
            value.push(lib);
        }
        (!libs.is_empty()).then_some(value)
    }
}

/// A running mariadbd on its own datadir and socket (no TCP). Killed when dropped.
pub struct Server {
    child: Option<Child>,
    pub datadir: PathBuf,
    pub socket: PathBuf,
    pub error_log: PathBuf,
    pub client: PathBuf,
    pub options: ServerOptions,
}

impl Server {
    /// Starts a server on `datadir` and waits (bounded) until it answers.
    /// The socket and error log go into the datadir's parent directory.
    /// No TCP port: every client here (the mariadb client, sysbench) comes through the socket,
    /// and a port found free could be bound by a parallel test before mariadbd binds it (a
    /// retry on another port then left the failed start's errors in the log the test reads).
    pub fn start(tools: &Tools, datadir: &Path, options: ServerOptions) -> Result<Server, String> {
        let datadir = datadir.canonicalize().map_err(|e| format!("datadir {}: {e}", datadir.display()))?;
        let parent = datadir.parent().unwrap_or(Path::new("/tmp")).to_path_buf();
        let name = datadir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "db".into());
        let socket = parent.join(format!("{name}.sock"));
        let error_log = parent.join(format!("{name}.err"));
        let pid_file = parent.join(format!("{name}.pid"));
        let _ = std::fs::remove_file(&socket);
        let mut cmd = Command::new(&tools.mariadbd);
        cmd.arg("--no-defaults")
            .arg(format!("--datadir={}", datadir.display()))
            .arg(format!("--socket={}", socket.display()))
            .arg("--skip-networking")
            .arg(format!("--pid-file={}", pid_file.display()))
            .arg(format!("--log-error={}", error_log.display()))
            .arg(format!("--innodb-use-native-aio={}", if options.native_aio { 1 } else { 0 }))
            .arg("--innodb-flush-method=O_DIRECT")
            .arg(format!("--innodb-buffer-pool-size={}", options.buffer_pool_bytes.max(MIN_BUFFER_POOL)))
            .arg("--skip-name-resolve")
            .arg("--max-connections=200")
            .args(&options.extra_args);
        if is_root() {
            cmd.arg("--user=root");
        }
        cmd.env_remove("LD_PRELOAD");
        for (k, _) in std::env::vars() {
            if k.starts_with("WAFFLE_") {
                cmd.env_remove(k);
            }
        }
        if let Some(libs) = options.ld_preload() {
            cmd.env("LD_PRELOAD", libs);
        }
        if let Some(s) = &options.slow_disk {
            cmd.env("WAFFLE_SLOWDISK", &s.setting);
        }
        if let Some(p) = &options.preload {
            // Verify mode as the test run asked for it (scripts/test turns it on everywhere).
            for k in ["WAFFLE_VERIFY", waffle_core::config::VERIFY_LOG_ENV] {
                if let Ok(v) = std::env::var(k) {
                    cmd.env(k, v);
                }
            }
            for (k, v) in &p.env {
                cmd.env(k, v);
            }
        }
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
        // Its own process group: a test's Ctrl-C does not reach it half-way, and Drop still kills it.
        cmd.process_group(0);
        let log_start = std::fs::metadata(&error_log).map(|m| m.len()).unwrap_or(0);
        let child = cmd.spawn().map_err(|e| format!("cannot start {}: {e}", tools.mariadbd.display()))?;
        let mut server =
            Server { child: Some(child), datadir, socket, error_log, client: tools.client.clone(), options };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = server.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                server.child = None;
                return Err(format!(
                    "mariadbd exited during startup ({status}); its log says: {}",
                    server.log_since(log_start, 3000)
                ));
            }
            if server.socket.exists() && server.sql("SELECT 1").is_ok() {
                return Ok(server);
            }
            if Instant::now() >= deadline {
                let log = server.log_since(log_start, 3000);
                server.kill();
                return Err(format!("mariadbd did not answer within {START_TIMEOUT:?}; its log says: {log}"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => c.try_wait().ok().flatten().is_none(),
            None => false,
        }
    }

    fn log_since(&self, from: u64, max: usize) -> String {
        let all = std::fs::read(&self.error_log).unwrap_or_default();
        tail(&all[(from as usize).min(all.len())..], max)
    }

    /// The whole error log (the preload's lines start with `[Note] waffle:` / `[ERROR] waffle:`).
    pub fn log(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.error_log).unwrap_or_default()).into_owned()
    }

    fn client_cmd(&self) -> Command {
        let mut cmd = Command::new(&self.client);
        cmd.arg("--no-defaults").arg(format!("--socket={}", self.socket.display())).args([
            "-uroot",
            "--batch",
            "--skip-column-names",
            "--connect-timeout=10",
        ]);
        cmd.env_remove("LD_PRELOAD");
        cmd
    }

    /// Runs SQL (one or more statements); tab-separated rows without headers.
    pub fn sql(&self, query: &str) -> Result<String, String> {
        self.sql_timeout(query, Duration::from_secs(300))
    }

    pub fn sql_timeout(&self, query: &str, timeout: Duration) -> Result<String, String> {
        let mut cmd = self.client_cmd();
        cmd.arg("-e").arg(query);
        let out = run_bounded(&mut cmd, timeout, "mariadb client")?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Pipes a script of statements into one client session (one connection,
    /// statements in order); returns what it printed.
    pub fn sql_script(&self, script: &str, timeout: Duration) -> Result<String, String> {
        let mut cmd = self.client_cmd();
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().map_err(|e| format!("mariadb client: {e}"))?;
        let mut stdin = child.stdin.take().expect("piped");
        let text = script.to_string();
        let feeder = std::thread::spawn(move || {
            let _ = stdin.write_all(text.as_bytes());
        });
        let out = wait_output(&mut child, timeout).map_err(|e| format!("mariadb client: {e}"))?;
        let _ = feeder.join();
        if !out.status.success() {
            return Err(format!("mariadb client failed ({}): {}", out.status, tail(&out.stderr, 2000)));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `CHECK TABLE` of each table; Err names any that is not OK.
    pub fn check_tables(&self, tables: &[&str]) -> Result<(), String> {
        let out = self.sql(&format!("CHECK TABLE {}", tables.join(", ")))?;
        let bad: Vec<&str> = out
            .lines()
            .filter(|l| l.contains("\tstatus\t") && !l.ends_with("\tOK") || l.contains("\terror\t"))
            .collect();
        let ok = out.lines().filter(|l| l.contains("\tstatus\tOK")).count();
        if !bad.is_empty() || ok != tables.len() {
            return Err(format!("CHECK TABLE: {out}"));
        }
        Ok(())
    }

    /// `CHECKSUM TABLE` of each table, in order.
    pub fn checksums(&self, tables: &[&str]) -> Result<Vec<String>, String> {
        let out = self.sql(&format!("CHECKSUM TABLE {}", tables.join(", ")))?;
        let sums: Vec<String> = out.lines().filter_map(|l| l.split('\t').nth(1)).map(str::to_string).collect();
        if sums.len() != tables.len() || sums.iter().any(|s| s == "NULL") {
            return Err(format!("CHECKSUM TABLE: {out}"));
        }
        Ok(sums)
    }

    /// The preload's stats file (`<datadir>/waffle-stats.json`), if written yet.
    pub fn stats(&self) -> Option<Value> {
        let path = self.stats_path();
        serde_json::from_slice(&std::fs::read(path).ok()?).ok()
    }

    pub fn stats_path(&self) -> PathBuf {
        self.options
            .preload
            .as_ref()
            .and_then(|p| p.env.iter().find(|(k, _)| k == "WAFFLE_STATS_FILE").map(|(_, v)| PathBuf::from(v)))
            .unwrap_or_else(|| self.datadir.join("waffle-stats.json"))
    }

    /// Waits for the stats file to satisfy `cond` (it is rewritten every second or so).
    pub fn wait_stats(&self, timeout: Duration, mut cond: impl FnMut(&Value) -> bool) -> Option<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(v) = self.stats() {
                if cond(&v) {
                    return Some(v);
                }
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A clean shutdown (SHUTDOWN), waited for; killed if it takes longer than [`SHUTDOWN_TIMEOUT`].
    pub fn shutdown(mut self) -> Result<(), String> {
        let _ = self.sql_timeout("SHUTDOWN", Duration::from_secs(30));
        let deadline = Instant::now() + SHUTDOWN_TIMEOUT;
        while self.is_running() {
            if Instant::now() >= deadline {
                self.kill();
                return Err(format!("mariadbd did not shut down within {SHUTDOWN_TIMEOUT:?}; killed"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.child = None;
        Ok(())
    }

    /// SIGKILL (a crash), then reap.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// What one sysbench run reported.
#[derive(Clone, Debug, Default)]
pub struct SysbenchResult {
    pub tps: f64,
    pub qps: f64,
    pub latency_p95_ms: f64,
    pub latency_avg_ms: f64,
    pub transactions: u64,
    pub errors: u64,
    pub ignored_errors: u64,
    pub reconnects: u64,
    pub output: String,
}

/// sysbench's common arguments for a server.
pub fn sysbench_args(server: &Server, tables: u32, table_size: u64) -> Vec<String> {
    vec![
        "--db-driver=mysql".into(),
        format!("--mysql-socket={}", server.socket.display()),
        "--mysql-user=root".into(),
        "--mysql-db=sbtest".into(),
        format!("--tables={tables}"),
        format!("--table-size={table_size}"),
    ]
}

/// Runs `sysbench <args>` with a deadline and parses its report.
pub fn sysbench(tools: &Tools, args: &[String], timeout: Duration) -> Result<SysbenchResult, String> {
    let mut cmd = Command::new(tools.sysbench()?);
    cmd.args(args).env_remove("LD_PRELOAD");
    let out = run_bounded(&mut cmd, timeout, "sysbench")?;
    Ok(parse_sysbench(&String::from_utf8_lossy(&out.stdout)))
}

/// Starts sysbench without waiting (a crash test kills the server under it).
pub fn sysbench_spawn(tools: &Tools, args: &[String]) -> Result<Child, String> {
    let mut cmd = Command::new(tools.sysbench()?);
    cmd.args(args).env_remove("LD_PRELOAD").stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd.spawn().map_err(|e| format!("sysbench: {e}"))
}

fn number_after(text: &str, label: &str) -> Option<f64> {
    let line = text.lines().find(|l| l.trim_start().starts_with(label))?;
    let rest = line.trim_start()[label.len()..].trim();
    rest.split_whitespace().next()?.parse().ok()
}

fn per_sec(text: &str, label: &str) -> Option<f64> {
    let line = text.lines().find(|l| l.trim_start().starts_with(label))?;
    let open = line.find('(')?;
    line[open + 1..].split_whitespace().next()?.parse().ok()
}

pub fn parse_sysbench(text: &str) -> SysbenchResult {
    SysbenchResult {
        tps: per_sec(text, "transactions:").unwrap_or(0.0),
        qps: per_sec(text, "queries:").unwrap_or(0.0),
        latency_p95_ms: number_after(text, "95th percentile:").unwrap_or(0.0),
        latency_avg_ms: number_after(text, "avg:").unwrap_or(0.0),
        transactions: number_after(text, "transactions:").unwrap_or(0.0) as u64,
        errors: text.lines().filter(|l| l.contains("FATAL") || l.contains("error ")).count() as u64,
        ignored_errors: number_after(text, "ignored errors:").unwrap_or(0.0) as u64,
        reconnects: number_after(text, "reconnects:").unwrap_or(0.0) as u64,
        output: text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_sysbench_report() {
        let text = "SQL statistics:\n    queries performed:\n        read:                            92232\n    \
            transactions:                        6587   (439.02 per sec.)\n    queries:                             131740 (8780.41 per sec.)\n    \
            ignored errors:                      3      (0.20 per sec.)\n    reconnects:                          0      (0.00 per sec.)\n\
            Latency (ms):\n         min:                                    1.31\n         avg:                                    9.10\n         \
            max:                                   95.47\n         95th percentile:                       18.61\n";
        let r = parse_sysbench(text);
        assert_eq!(r.tps, 439.02);
        assert_eq!(r.qps, 8780.41);
        assert_eq!(r.transactions, 6587);
        assert_eq!(r.ignored_errors, 3);
        assert_eq!(r.latency_p95_ms, 18.61);
        assert_eq!(r.latency_avg_ms, 9.10);
        assert_eq!(r.errors, 0);
    }
}
