//! Running MariaDB under the preload as an operator does (docs/operations.md),
//! with the files of deploy/ and a real mariadbd, memcached on 127.0.0.1:
//!
//! - the systemd unit: Debian's /lib/systemd/system/mariadb.service's
//!   ExecStart, run as systemd would (its UMask, a clean environment) with
//!   the drop-in's Environment= (deploy/mariadb/mariadb.service.d/waffle.conf)
//!   and a my.cnf that includes deploy/mariadb/60-waffle.cnf: mariadbd starts
//!   with the preload loaded, reads the configuration file, writes its stats,
//!   answers queries, and deploy/mariadb/waffle-status.sql shows the status
//!   from SQL (systemd is not PID 1 in the test machine, so the unit's command
//!   is run by hand);
//! - the off switch: `waffle-off` in the datadir turns the cache off under
//!   load (memcached sees no request while off, L1 is empty), writes and reads
//!   through SQL go to the files, and removing it turns the cache on again
//!   cold: the grid's copies from before are never served (verify mode on),
//!   the data is right and CHECK TABLE passes;
//! - the configuration file: the environment wins over it, and a bad line
//!   keeps the preload off with the file, line, key and value in the error log.

#[path = "../../../tests/mysql_support.rs"]
mod mysql_support;

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mysql_support::*;
use serde_json::Value;

/// Debian's unit, as the mariadb-server package installs it.
const UNIT: &str = "/lib/systemd/system/mariadb.service";
/// systemd's PATH for services.
const SERVICE_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).ancestors().nth(2).expect("crates/waffle-preload is in the workspace").into()
}

/// The values of `key=` in a unit file, lines ending in a backslash joined
/// with the next (with a space, as systemd joins them).
fn unit_values(text: &str, key: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut cur = String::new();
    for line in text.lines() {
        let t = line.trim();
        if cur.is_empty() && (t.is_empty() || t.starts_with('#') || t.starts_with(';')) {
            continue;
        }
        match t.strip_suffix('\\') {
            Some(part) => {
                cur.push_str(part);
                cur.push(' ');
            }
            None => {
                cur.push_str(t);
                lines.push(std::mem::take(&mut cur));
            }
        }
    }
    let prefix = format!("{key}=");
    lines.iter().filter_map(|l| l.strip_prefix(&prefix)).map(str::to_string).collect()
}

/// A command line as systemd splits it: words, double quotes grouping.
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let (mut quoted, mut any) = (false, false);
    for c in line.chars() {
        match c {
            '"' => (quoted, any) = (!quoted, true),
            c if c.is_whitespace() && !quoted => {
                if any {
                    out.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            c => {
                cur.push(c);
                any = true;
            }
        }
    }
    if any {
        out.push(cur);
    }
    out
}

/// The drop-in's `Environment=` assignments, in order.
fn drop_in_environment(text: &str) -> Vec<(String, String)> {
    let assignments = unit_values(text, "Environment").into_iter().flat_map(|v| words(&v));
    assignments.map(|a| a.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())).expect("K=V")).collect()
}

/// mariadbd started as mariadb.service starts it; killed when dropped.
struct UnitServer {
    child: Child,
    socket: PathBuf,
    error_log: PathBuf,
}

impl UnitServer {
    fn sql(&self, user: &str, query: &str) -> Result<String, String> {
        let mut cmd = Command::new(&tools().client);
        cmd.arg("--no-defaults")
            .arg(format!("--socket={}", self.socket.display()))
            .args([&format!("-u{user}"), "--batch", "--skip-column-names", "--connect-timeout=10", "-e", query])
            .env_remove("LD_PRELOAD");
        server::run_bounded(&mut cmd, Duration::from_secs(120), "mariadb client")
            .map(|o| String::from_utf8_lossy(&o.stdout).trim_end().to_string())
    }

    fn log(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.error_log).unwrap_or_default()).into_owned()
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + server::START_TIMEOUT;
        while !(self.socket.exists() && self.sql("root", "SELECT 1").is_ok()) {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("the unit's mariadbd exited ({status}); its log:\n{}", self.log());
            }
            assert!(Instant::now() < deadline, "the unit's mariadbd did not answer; its log:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn shutdown(mut self) {
        let _ = self.sql("root", "SHUTDOWN");
        let deadline = Instant::now() + server::SHUTDOWN_TIMEOUT;
        while self.child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "no clean shutdown; its log:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for UnitServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A my.cnf laid out as Debian's /etc/mysql/my.cnf (an includedir of
/// mariadb.conf.d): this instance's 50-server.cnf and the shipped 60-waffle.cnf.
/// No TCP: the tests talk through the socket, and a port found free could be taken by a
/// parallel test before mariadbd binds it.
fn instance_config(dir: &Path, data: &Path, socket: &Path, error_log: &Path, extra: &str) -> PathBuf {
    let conf_d = dir.join("mariadb.conf.d");
    std::fs::create_dir_all(&conf_d).unwrap();
    let mut server = format!(
        "[mysqld]\ndatadir = {}\nsocket = {}\nskip-networking\npid-file = {}\nlog-error = {}\n\
         innodb_buffer_pool_size = {POOL}\n",
        data.display(),
        socket.display(),
        dir.join("unit.pid").display(),
        error_log.display()
    );
    for arg in SERVER_ARGS {
        server.push_str(arg.trim_start_matches("--"));
        server.push('\n');
    }
    if is_root() {
        server.push_str("user = root\n"); // the unit's User=mysql: the test's files are root's
    }
    server.push_str(extra);
    std::fs::write(conf_d.join("50-server.cnf"), server).unwrap();
    std::fs::copy(repo().join("deploy/mariadb/60-waffle.cnf"), conf_d.join("60-waffle.cnf")).unwrap();
    let my_cnf = dir.join("my.cnf");
    std::fs::write(
        &my_cnf,
        format!("[client-server]\nsocket = {}\n\n!includedir {}/\n", socket.display(), conf_d.display()),
    )
    .unwrap();
    my_cnf
}

/// The shipped /etc/waffle/waffle.conf with `lines` added, at `path` (0644, as installed).
fn waffle_conf(path: &Path, lines: &str) {
    let shipped = std::fs::read_to_string(repo().join("deploy/waffle.conf")).unwrap();
    std::fs::write(path, format!("{shipped}\n{lines}")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644)).unwrap();
}

/// Starts the unit's ExecStart with its UMask and the drop-in's environment,
/// the installed paths replaced by this build's library and `conf`.
fn start_unit(dir: &Path, data: &Path, conf: &Path) -> UnitServer {
    start_unit_with(dir, data, conf, "")
}

/// start_unit, with `server_lines` added to the [mysqld] section.
fn start_unit_with(dir: &Path, data: &Path, conf: &Path, server_lines: &str) -> UnitServer {
    let unit = std::fs::read_to_string(UNIT).unwrap_or_else(|e| panic!("{UNIT}: {e}; apt-get install mariadb-server"));
    let exec = unit_values(&unit, "ExecStart");
    assert_eq!(exec.len(), 1, "one ExecStart in {UNIT}: {exec:?}");
    let argv = words(&exec[0]);
    assert!(argv.len() >= 2 && argv.last().unwrap().contains("mariadbd $MYSQLD_OPTS"), "ExecStart: {argv:?}");
    let umask = unit_values(&unit, "UMask").first().map_or(0o022, |m| u32::from_str_radix(m, 8).unwrap());
    let drop_in = std::fs::read_to_string(repo().join("deploy/mariadb/mariadb.service.d/waffle.conf")).unwrap();
    let env = drop_in_environment(&drop_in);
    let names: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(names, ["LD_PRELOAD", "WAFFLE_CONFIG"], "the drop-in's Environment=");
    let (socket, error_log) = (dir.join("unit.sock"), dir.join("unit.err"));
    let my_cnf = instance_config(dir, data, &socket, &error_log, server_lines);
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..]).env_clear().env("PATH", SERVICE_PATH);
    for (k, v) in &env {
        let v = match k.as_str() {
            "LD_PRELOAD" => {
                for private in ["/home/", "/root/", "/run/user/"] {
                    assert!(!v.starts_with(private), "{v}: the unit has ProtectHome=true");
                }
                preload_so().display().to_string()
            }
            "WAFFLE_CONFIG" => {
                assert_eq!(v, "/etc/waffle/waffle.conf", "where docs/operations.md installs it");
                conf.display().to_string()
            }
            _ => v.clone(),
        };
        cmd.env(k, v);
    }
    // MYSQLD_OPTS: the unit's hook for options (here: this instance's my.cnf, which must come first).
    cmd.env("MYSQLD_OPTS", format!("--defaults-file={}", my_cnf.display()));
    // Verify mode as the test run asked for it (scripts/test turns it on everywhere).
    for k in ["WAFFLE_VERIFY", "WAFFLE_VERIFY_LOG"] {
        if let Ok(v) = std::env::var(k) {
            cmd.env(k, v);
        }
    }
    cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).process_group(0);
    // SAFETY: umask is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            libc::umask(umask as libc::mode_t);
            Ok(())
        });
    }
    let child = cmd.spawn().unwrap();
    let mut s = UnitServer { child, socket, error_log };
    s.wait_ready();
    s
}

fn read_stats(path: &Path) -> Option<Value> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

fn wait_file_stats(path: &Path, what: &str, mut cond: impl FnMut(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(v) = read_stats(path).filter(|v| cond(v)) {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: {} never got there: {:?}", path.display(), read_stats(path));
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn the_systemd_unit_with_the_shipped_files_runs_mariadb_under_the_preload() {
    let OneServer { turn: _turn, dir, node, data } = one_server("deploy-unit", 64);
    let conf = dir.join("waffle.conf");
    // The operator's lines: the grid, and a stats file LOAD_FILE() may read (docs/operations.md).
    waffle_conf(
        &conf,
        &format!("WAFFLE_GRID = {}\nWAFFLE_STATS_MODE = 0644\nWAFFLE_STATS_INTERVAL_MS = 200\n", node.addr()),
    );
    let s = start_unit(dir.path(), &data, &conf);
    let pid = s.child.id();
    assert_eq!(std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap().trim(), "mariadbd", "ExecStart's exec");
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    assert!(maps.contains("libwaffle_preload.so"), "the preload is loaded into mariadbd");
    // 60-waffle.cnf was read (native AIO is on by default).
    let opts = s.sql("root", "SELECT @@innodb_use_native_aio, @@innodb_flush_method").unwrap();
    assert_eq!(opts, "0\tO_DIRECT", "60-waffle.cnf's options");
    s.sql(
        "root",
        "CREATE DATABASE w; CREATE TABLE w.t (id INT PRIMARY KEY, v INT) ENGINE=InnoDB;
         USE w; INSERT INTO w.t SELECT seq, seq * 2 FROM seq_1_to_5000;",
    )
    .unwrap();
    assert_eq!(s.sql("root", "SELECT COUNT(*), SUM(v) FROM w.t").unwrap(), "5000\t25005000", "a query works");
    let stats_path = data.join("waffle-stats.json");
    let v = wait_file_stats(&stats_path, "the unit's stats", |v| {
        stat(v, "preload.page_reads") > 0 && stat(v, "tablespaces.w/t.opens") > 0
    });
    assert_eq!(v["state"], "running", "{v}");
    assert_eq!(v["config_file"], conf.display().to_string(), "WAFFLE_CONFIG's file was read: {v}");
    assert_eq!(v["grid"], node.addr(), "the grid from the file: {v}");
    assert_eq!(v["switch"]["state"], "on", "{v}");
    let mode = std::fs::metadata(&stats_path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o644, "WAFFLE_STATS_MODE");
    // Status from SQL: the shipped views, also for a user without the FILE privilege.
    s.sql("root", &status_sql(&conf)).unwrap();
    let row = s.sql("root", "SELECT state, switch, grid, config_file, page_reads > 0 FROM waffle.status").unwrap();
    assert_eq!(row, format!("running\ton\t{}\t{}\t1", node.addr(), conf.display()), "waffle.status");
    s.sql("root", "CREATE USER monitor@localhost; GRANT SELECT, EXECUTE ON waffle.* TO monitor@localhost").unwrap();
    assert_eq!(why_null(&s), "NULL", "why_null of a readable stats file");
    let direct = s.sql("monitor", &format!("SELECT LOAD_FILE('{}') IS NULL", stats_path.display())).unwrap();
    assert_eq!(direct, "1", "without FILE, LOAD_FILE reads nothing (the control of the next query)");
    let spaces = s.sql("monitor", "SELECT name, cached FROM waffle.tablespaces WHERE name = 'w/t'").unwrap();
    assert_eq!(spaces, "w/t\t1", "waffle.tablespaces through the definer's function");
    let reads = s.sql("monitor", "SELECT SUM(page_reads) > 0, SUM(name = 'ibdata1') FROM waffle.tablespaces").unwrap();
    assert_eq!(reads, "1\t1", "the system tablespace's reads at the start");
    the_status_view_says_why_when_it_cannot_read(&s, dir.path(), &stats_path);
    let errors: Vec<String> = s.log().lines().filter(|l| l.contains("[ERROR]")).map(str::to_string).collect();
    assert!(errors.is_empty(), "{errors:?}");
    s.shutdown();
    assert_eq!(read_stats(&stats_path).unwrap()["final"], true, "written at the server's exit");
}

/// deploy/mariadb/waffle-status.sql as an operator with the configuration file at `conf`
/// runs it: waffle.config_path() edited to name it.
fn status_sql(conf: &Path) -> String {
    let sql = std::fs::read_to_string(repo().join("deploy/mariadb/waffle-status.sql")).unwrap();
    let default = "RETURN '/etc/waffle/waffle.conf';";
    assert_eq!(sql.matches(default).count(), 1, "waffle.config_path()'s body in waffle-status.sql");
    sql.replace(default, &format!("RETURN '{}';", conf.display()))
}

/// waffle.stats_path() pointed at `path`, as the script's comment tells an operator to.
fn point_stats_path(s: &UnitServer, path: &Path) {
    let f = format!("CREATE OR REPLACE FUNCTION waffle.stats_path() RETURNS VARCHAR(4096) RETURN '{}'", path.display());
    s.sql("root", &f).unwrap();
}

/// waffle.status's why_null, read by a user with SELECT and EXECUTE only; the other columns
/// must be NULL whenever it is not.
fn why_null(s: &UnitServer) -> String {
    let row = s.sql("monitor", "SELECT CONCAT_WS(',', state, switch, updated, l1_hits), why_null FROM waffle.status");
    let row = row.unwrap();
    let (others, why) = row.split_once('\t').unwrap_or_else(|| panic!("two columns: {row:?}"));
    if why != "NULL" {
        assert_eq!(others, "", "the other columns beside why_null = {why}");
    }
    why.to_string()
}

fn assert_says(why: &str, case: &str, words: &[&str]) {
    for w in words {
        assert!(why.contains(w), "{case}: why_null does not say {w:?}: {why}");
    }
}

/// The reasons waffle.status's why_null gives that one running server can show: the view
/// pointed at a file not there, at a file not Waffle's, the stats file over
/// max_allowed_packet, and views made by a definer without FILE. (The file mode and
/// secure_file_priv need their own servers: the_status_view_says_why_it_is_null_by_default.)
fn the_status_view_says_why_when_it_cannot_read(s: &UnitServer, dir: &Path, stats_path: &Path) {
    point_stats_path(s, &dir.join("elsewhere/waffle-stats.json"));
    let why = why_null(s);
    assert_says(
        &why,
        "no file",
        &["elsewhere/waffle-stats.json: no such file yet", "WAFFLE_STATS_MODE = 0644", "LD_PRELOAD"],
    );

    let foreign = dir.join("pkg.json");
    std::fs::write(&foreign, br#"{"name": "my-app", "state": "active"}"#).unwrap();
    std::fs::set_permissions(&foreign, std::fs::Permissions::from_mode(0o644)).unwrap();
    point_stats_path(s, &foreign);
    let why = why_null(s);
    assert_says(&why, "a foreign file", &["pkg.json is not a Waffle stats file", "Move it away"]);
    let json = s.sql("monitor", "SELECT waffle.stats_json() IS NULL").unwrap();
    assert_eq!(json, "1", "waffle.stats_json() of a file that is not a stats file");

    point_stats_path(s, stats_path);
    assert_eq!(why_null(s), "NULL", "pointed back");
    let size = std::fs::metadata(stats_path).unwrap().len();
    assert!(size > 1024, "the stats file is larger than the smallest max_allowed_packet: {size} bytes");
    let packet = s.sql("root", "SELECT @@GLOBAL.max_allowed_packet").unwrap();
    // A session takes the global value when it connects: each sql() is a new client.
    s.sql("root", "SET GLOBAL max_allowed_packet = 1024").unwrap();
    let why = why_null(s);
    s.sql("root", &format!("SET GLOBAL max_allowed_packet = {packet}")).unwrap();
    assert_says(
        &why,
        "max_allowed_packet",
        &["larger than max_allowed_packet (1024 bytes)", "raise max_allowed_packet"],
    );
    assert_eq!(why_null(s), "NULL", "max_allowed_packet back");

    // The script run by a user who may make the views but has no FILE (the last case: it
    // leaves that user's views behind).
    s.sql("root", "GRANT ALL ON waffle.* TO monitor@localhost").unwrap();
    s.sql("monitor", &status_sql(Path::new("/etc/waffle/waffle.conf"))).unwrap();
    let why = why_null(s);
    assert_says(
        &why,
        "no FILE",
        &["needs the FILE privilege", "monitor@localhost", "run deploy/mariadb/waffle-status.sql again as root"],
    );
}

#[test]
fn the_status_view_says_why_it_is_null_by_default() {
    // The shipped configuration and the grid only: the stats file is made 0660, as ibdata1.
    let OneServer { turn: _turn, dir, node, data } = one_server("status-why", 16);
    let conf = dir.join("waffle.conf");
    waffle_conf(&conf, &format!("WAFFLE_GRID = {}\nWAFFLE_STATS_INTERVAL_MS = 200\n", node.addr()));
    let s = start_unit(dir.path(), &data, &conf);
    let stats_path = data.join("waffle-stats.json");
    wait_file_stats(&stats_path, "the default mode's stats", |v| stat(v, "preload.page_reads") > 0);
    assert_eq!(std::fs::metadata(&stats_path).unwrap().permissions().mode() & 0o777, 0o660, "the default mode");
    s.sql("root", &status_sql(&conf)).unwrap();
    s.sql("root", "CREATE USER monitor@localhost; GRANT SELECT, EXECUTE ON waffle.* TO monitor@localhost").unwrap();
    let why = why_null(&s);
    let file_mode =
        format!("{} sets no WAFFLE_STATS_MODE, so the preload makes the file as ibdata1 (0660)", conf.display());
    assert_says(
        &why,
        "the default mode",
        &[
            "LOAD_FILE() reads only a file every user may read",
            &file_mode,
            "set WAFFLE_STATS_MODE = 0644 there and restart",
        ],
    );
    s.shutdown();
    drop(_turn);

    // secure_file_priv elsewhere than the datadir: the view says so; its fix, the stats file
    // inside that directory and waffle.stats_path() pointed at it, makes the view work.
    let OneServer { turn: _turn, dir, node, data } = one_server("status-why-priv", 16);
    let (conf, priv_dir) = (dir.join("waffle.conf"), dir.join("files"));
    std::fs::create_dir(&priv_dir).unwrap();
    let in_priv = priv_dir.join("waffle-stats.json");
    let lines = format!(
        "WAFFLE_GRID = {}\nWAFFLE_STATS_MODE = 0644\nWAFFLE_STATS_FILE = {}\nWAFFLE_STATS_INTERVAL_MS = 200\n",
        node.addr(),
        in_priv.display()
    );
    waffle_conf(&conf, &lines);
    let s = start_unit_with(dir.path(), &data, &conf, &format!("secure_file_priv = {}\n", priv_dir.display()));
    wait_file_stats(&in_priv, "the stats in secure_file_priv", |v| stat(v, "preload.page_reads") > 0);
    s.sql("root", &status_sql(&conf)).unwrap();
    s.sql("root", "CREATE USER monitor@localhost; GRANT SELECT, EXECUTE ON waffle.* TO monitor@localhost").unwrap();
    let why = why_null(&s);
    let priv_is = format!("secure_file_priv is {}/ and LOAD_FILE() reads no file outside it", priv_dir.display());
    let fix = format!("set WAFFLE_STATS_FILE = {}/waffle-stats.json in {}", priv_dir.display(), conf.display());
    assert_says(
        &why,
        "secure_file_priv",
        &[&format!("cannot read {}", data.join("waffle-stats.json").display()), &priv_is, &fix],
    );
    point_stats_path(&s, &in_priv);
    assert_eq!(why_null(&s), "NULL", "the stats file inside secure_file_priv");
    assert_eq!(s.sql("monitor", "SELECT grid FROM waffle.status").unwrap(), node.addr(), "waffle.status read");
    s.shutdown();
}

/// The sum of the grid requests memcached answered (gets and sets, meta commands included).
fn node_requests(node: &Node) -> u64 {
    node.stat("cmd_get").unwrap() + node.stat("cmd_set").unwrap()
}

fn grid_counters(v: &Value) -> [u64; 4] {
    [stat(v, "l2_hits"), stat(v, "l2_misses"), stat(v, "l2_pushes"), stat(v, "push_queue_hits")]
}

#[test]
fn the_off_switch_stops_the_cache_under_load_and_on_again_starts_cold() {
    let os = one_server("off-switch", 64);
    let options = waffle_options(&os.node.addr(), "2MiB", &[("WAFFLE_VERIFY", "on")]);
    let s = start(&os.data, options.clone());
    const ROWS: u64 = 2000;
    create_padded_table(&s, ROWS, "i");
    let scan = "SELECT COUNT(*), SUM(v) FROM w.t";
    let expect = |add: u64| format!("{ROWS}\t{}", ROWS * (ROWS + 1) / 2 + add * ROWS);
    // On: the table (16 MiB) does not fit the pool (6 MiB) and L1 (2 MiB): the grid holds it.
    for _ in 0..2 {
        assert_eq!(s.sql(scan).unwrap().trim(), expect(0));
    }
    let on = stats_after(&s, "grid traffic", |v| stat(v, "l2_pushes") > 100 && stat(v, "l2_hits") > 0);
    assert_eq!(on["switch"]["state"], "on");
    assert!(node_requests(&os.node) > 100, "memcached counts the cache's requests (the measure below can fail)");
    let on_conns = os.node.stat("curr_connections").unwrap(); // the grid client's and this query's

    let control = os.data.join("waffle-off");
    std::fs::write(&control, b"").unwrap();
    let off = stats_after(&s, "switched off", |v| v["state"] == "off");
    assert_eq!((off["switch"]["state"].as_str(), stat(&off, "switch.turned_off")), (Some("off"), 1), "{off}");
    assert_eq!(stat(&off, "l1.pages"), 0, "L1 dropped: {off}");
    // A push the pusher had taken before the switch may still land, and the stats file is
    // rewritten every 200 ms: the baseline is taken once the counters (the file's and
    // memcached's) hold still across two reads half a second apart, a starved writer included.
    let counters = || (grid_counters(&s.stats().unwrap()), node_requests(&os.node));
    let mut last = counters();
    let still = waffle_testkit::wait_until(Duration::from_secs(15), || {
        std::thread::sleep(Duration::from_millis(500));
        let now = counters();
        std::mem::replace(&mut last, now) == now
    });
    assert!(still, "the grid counters kept moving after the switch: {last:?}");
    let (grid_before, node_before) = last;
    // Writes and reads through SQL while off: every row (every leaf page) changes on disk.
    s.sql("UPDATE w.t SET v = v + 1000000").unwrap();
    for _ in 0..2 {
        assert_eq!(s.sql(scan).unwrap().trim(), expect(1_000_000), "reads while off");
    }
    s.sql("SET GLOBAL innodb_max_dirty_pages_pct = 0").unwrap();
    let passed = stats_after(&s, "pages passed", |v| {
        stat(v, "switch.reads_passed") > 100 && stat(v, "switch.writes_passed") > 100
    });
    assert_eq!(grid_counters(&passed), grid_before, "no grid traffic while off: {passed}");
    assert_eq!(node_requests(&os.node), node_before, "memcached saw no request while off");
    assert_eq!(stat(&passed, "l1.pages"), 0, "nothing entered L1 while off: {passed}");
    assert_eq!(stat(&passed, "preload.fallback_reads"), 0, "{passed}");
    // memcached counts a closed connection down on the worker thread that served it, which a
    // loaded machine may run after the next stats query (each query is a connection of its own):
    // a few seconds for the count to settle, then the grid client's connections must be gone.
    let mut off_conns = 0;
    let settled = waffle_testkit::wait_until(Duration::from_secs(5), || {
        off_conns = os.node.stat("curr_connections").unwrap();
        off_conns == 1
    });
    assert!(
        on_conns > 1 && settled,
        "the grid client's connections closed ({on_conns} -> {off_conns}: this query's own)"
    );

    std::fs::remove_file(&control).unwrap();
    let back = stats_after(&s, "switched on", |v| v["state"] == "running" && stat(v, "switch.turned_on") == 1);
    assert_eq!(back["switch"]["state"], "on", "{back}");
    // On again: the grid's copies of the pages from before the update must never be served.
    for _ in 0..2 {
        assert_eq!(s.sql(scan).unwrap().trim(), expect(1_000_000), "reads after the switch");
    }
    s.check_tables(&["w.t"]).unwrap();
    let after = stats_after(&s, "grid used again", |v| stat(v, "l2_pushes") > grid_before[2]);
    assert_eq!(stat(&after, "verify_mismatches"), 0, "no page served from a tier differed from the file: {after}");
    let log = s.log();
    let lines = |needle: &str| log.lines().filter(|l| l.contains(needle)).count();
    assert_eq!(lines("[Warning] waffle: OFF now"), 1, "{log}");
    assert_eq!(lines("[Warning] waffle: ON again"), 1, "{log}");
    assert!(log_errors(&s, &[]).is_empty(), "{:?}", log_errors(&s, &[]));

    // A server started while the control file exists starts off, before any read.
    s.shutdown().unwrap();
    std::fs::write(&control, b"").unwrap();
    let s = start(&os.data, options);
    assert_eq!(s.sql(scan).unwrap().trim(), expect(1_000_000));
    let v = stats_after(&s, "off from the start", |v| v["state"] == "off" && stat(v, "switch.reads_passed") > 0);
    assert_eq!(stat(&v, "l1_hits") + stat(&v, "l1_misses") + stat(&v, "disk_reads"), 0, "the cache never read: {v}");
    assert!(s.log().contains("[Warning] waffle: OFF from the start"), "{}", s.log());
}

#[test]
fn the_environment_wins_over_the_configuration_file_and_a_bad_line_keeps_waffle_off() {
    let os = one_server("config-file", 16);
    let conf = os.dir.join("waffle.conf");
    let write = |text: &str| {
        std::fs::write(&conf, text).unwrap();
        std::fs::set_permissions(&conf, std::fs::Permissions::from_mode(0o644)).unwrap();
    };
    write("# the operator's\nWAFFLE_LOCAL = 8MiB\nwaffle_tables = \"w/*, ibdata*\"\n");
    let with_file =
        |local: &str| waffle_options(&os.node.addr(), local, &[("WAFFLE_CONFIG", &conf.display().to_string())]);
    let s = start(&os.data, with_file("4MiB"));
    s.sql("CREATE DATABASE w; CREATE TABLE w.t (id INT PRIMARY KEY) ENGINE=InnoDB; INSERT INTO w.t VALUES (1)")
        .unwrap();
    let v = stats_after(&s, "the file's settings", |v| stat(v, "tablespaces.w/t.opens") > 0);
    assert_eq!(stat(&v, "l1.capacity_bytes"), 4 << 20, "WAFFLE_LOCAL from the environment, not the file's 8MiB");
    assert_eq!(v["tables"], serde_json::json!(["w/*", "ibdata*"]), "WAFFLE_TABLES from the file: {v}");
    assert_eq!(v["config_file"], conf.display().to_string());
    s.shutdown().unwrap();

    write("WAFFLE_TABLES = w/*\nWAFFLE_COMPRESS = gzip\n");
    let s = start(&os.data, with_file("4MiB"));
    assert_eq!(s.sql("SELECT COUNT(*) FROM w.t").unwrap().trim(), "1", "the server runs without Waffle");
    let v = stats_after(&s, "refused", |v| v["state"] == "disabled");
    let want = format!("configuration file {} line 2: WAFFLE_COMPRESS = 'gzip'", conf.display());
    let reason = v["disabled_reason"].as_str().unwrap_or_default().to_string();
    assert!(reason.contains(&want), "{reason}");
    let logged: Vec<String> = s.log().lines().filter(|l| l.contains("[ERROR] waffle:")).map(str::to_string).collect();
    assert!(logged.len() == 1 && logged[0].contains(&want) && logged[0].contains("runs without Waffle"), "{logged:?}");
}
