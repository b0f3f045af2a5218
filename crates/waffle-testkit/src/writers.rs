//! Writers from outside the test's own connections: Debian's `sqlite3` shell
//! (3.40) as a child process per transaction, and a long-lived Python apsw
//! process ([`Peer`]) taking requests over a pipe; each on the plain file or
//! with `libwaffle.so` loaded and the database opened through `waffle`.
//!
//! Used by `multi_writer.rs` (other processes committing to a database a
//! `waffle` connection holds open) and `extension_load.rs` (the extension in
//! hosts we did not build). Every helper fails loudly: a missing shell or
//! apsw says what to install.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use rusqlite::types::Value;

use crate::process::{run_with_input, KillOnDrop};
use crate::wait::wait_for;

/// How long one child may take before it is killed and the test fails.
pub const CHILD_TIMEOUT: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------- finding the hosts

pub fn sqlite3_shell() -> PathBuf {
    let p = PathBuf::from("/usr/bin/sqlite3");
    assert!(p.is_file(), "the sqlite3 shell is missing: apt-get install sqlite3");
    p
}

pub fn python_with_apsw() -> PathBuf {
    let p = PathBuf::from("/usr/bin/python3");
    assert!(p.is_file(), "/usr/bin/python3 is missing: apt-get install python3 python3-apsw");
    let out = Command::new(&p).args(["-c", "import apsw"]).output().expect("run /usr/bin/python3");
    assert!(
        out.status.success(),
        "/usr/bin/python3 cannot import apsw: apt-get install python3-apsw\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    p
}

// ---------------------------------------------------------------- the sqlite3 shell as a writer

/// An SQL literal for `v` (blobs as X'..', text quoted).
pub fn sql_literal(v: &Value) -> String {
    match v {
        Value::Null => "NULL".into(),
        Value::Integer(i) => i.to_string(),
        Value::Real(r) => format!("{r:?}"),
        Value::Text(t) => format!("'{}'", t.replace('\'', "''")),
        Value::Blob(b) => {
            let mut s = String::with_capacity(3 + 2 * b.len());
            s.push_str("X'");
            for byte in b {
                s.push_str(&format!("{byte:02X}"));
            }
            s.push('\'');
            s
        }
    }
}

/// How a shell opens the database.
#[derive(Clone, Debug)]
pub enum ShellOpen {
    /// The file itself, SQLite's default VFS: nothing of ours in the way.
    Plain,
    /// `.load <so>` then `.open '<uri>'` (a `file:...?vfs=waffle&...` URI):
    /// a second process caching the database through `waffle`.
    Waffle { so: PathBuf, uri: String },
}

/// What a shell run printed, and how it ended.
#[derive(Debug)]
pub struct ShellRun {
    pub success: bool,
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl ShellRun {
    /// SQLITE_BUSY / SQLITE_LOCKED as the shell reports them.
    pub fn busy(&self) -> bool {
        self.stderr.contains("database is locked") || self.stderr.contains("database table is locked")
    }

    /// `waffle` refused the open because another process owns the database.
    pub fn refused_as_owned(&self) -> bool {
        self.stderr.contains("already open through waffle")
    }

    /// Every line printed after the first line equal to `marker` (none if it never came).
    pub fn after(&self, marker: &str) -> Vec<&str> {
        let mut lines = self.stdout.lines();
        for l in lines.by_ref() {
            if l == marker {
                break;
            }
        }
        lines.collect()
    }

    /// One line for a failure message.
    pub fn describe(&self) -> String {
        let cut = |s: &str| {
            let s = s.trim();
            if s.len() > 800 {
                format!("{}... ({} bytes)", &s[..800], s.len())
            } else {
                s.to_string()
            }
        };
        format!("exit {:?}; stderr: {:?}; stdout: {:?}", self.code, cut(&self.stderr), cut(&self.stdout))
    }
}

/// Runs `sql` in a fresh `sqlite3` process on `db`, with `.bail on` (the first
/// error ends the process, so an open transaction is rolled back by the close)
/// and `.timeout busy_ms` (SQLite's busy handler).
pub fn shell(db: &Path, open: &ShellOpen, busy_ms: u32, sql: &str) -> ShellRun {
    let mut cmd = Command::new(sqlite3_shell());
    cmd.arg("-batch");
    let mut script = String::from(".bail on\n");
    match open {
        ShellOpen::Plain => {
            cmd.arg(db);
        }
        ShellOpen::Waffle { so, uri } => {
            cmd.arg(":memory:");
            script.push_str(&format!(".load {}\n.open '{uri}'\n", so.display()));
        }
    }
    // After .open: the timeout belongs to the connection.
    script.push_str(&format!(".timeout {busy_ms}\n"));
    script.push_str(sql);
    if !sql.ends_with('\n') {
        script.push('\n');
    }
    let out = run_with_input(&mut cmd, &script, CHILD_TIMEOUT);
    ShellRun {
        success: out.status.success(),
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

// ---------------------------------------------------------------- a long-lived peer process (Python apsw)

/// The start of a Python program run as `python3 -c <program> <so> <uri>`: loads the
/// extension `so` (unless it is empty) and sets `flags` for opening `uri` (SQLITE_OPEN_URI,
/// read-write, create).
pub const APSW_PRELUDE: &str = r#"
import apsw, json, sys
so, uri = sys.argv[1], sys.argv[2]
flags = apsw.SQLITE_OPEN_URI | apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
if so:
    boot = apsw.Connection(":memory:")
    # apsw 3.40 spells them enableloadextension/loadextension; newer ones also with underscores.
    (getattr(boot, "enable_load_extension", None) or boot.enableloadextension)(True)
    (getattr(boot, "load_extension", None) or boot.loadextension)(so)
"#;

/// The peer's program after [`APSW_PRELUDE`]: one JSON request per stdin line, one JSON answer
/// per stdout line. Values: integers and text as JSON, blobs as {"x": hex}.
const PEER_PY: &str = r#"
def out(o):
    sys.stdout.write(json.dumps(o) + "\n")
    sys.stdout.flush()

try:
    c = apsw.Connection(uri, flags=flags)
    list(c.cursor().execute("SELECT count(*) FROM sqlite_schema"))
except apsw.Error as e:
    out({"open_error": "%s: %s" % (type(e).__name__, e)})
    sys.exit(0)
out({"ready": True})

def param(p):
    return bytes.fromhex(p["x"]) if isinstance(p, dict) else p

def value(v):
    return {"x": v.hex()} if isinstance(v, (bytes, bytearray, memoryview)) else v

def failure(e):
    kind = "busy" if isinstance(e, (apsw.BusyError, apsw.LockedError)) else "error"
    return {kind: "%s: %s" % (type(e).__name__, e)}

for line in sys.stdin:
    req = json.loads(line)
    c.setbusytimeout(req.get("busy_ms", 5000))
    cur = c.cursor()
    try:
        if req["op"] == "txn":
            cur.execute(req.get("begin", "BEGIN IMMEDIATE"))
            changes = []
            for sql, params in req["stmts"]:
                list(cur.execute(sql, [param(p) for p in params]))
                changes.append(c.changes())
            cur.execute("COMMIT")
            out({"ok": changes})
        elif req["op"] == "query":
            rows = [[value(v) for v in row] for row in cur.execute(req["sql"], [param(p) for p in req.get("params", [])])]
            out({"ok": rows})
        else:
            out({"error": "unknown op %r" % req["op"]})
    except apsw.Error as e:
        if not c.getautocommit():
            try:
                cur.execute("ROLLBACK")
            except apsw.Error:
                pass
        out(failure(e))
c.close()
"#;

/// A SQLite connection in another, long-lived process (/usr/bin/python3 with
/// apsw), on the plain file or through `waffle` (`libwaffle.so` loaded): it
/// stays open across the test's rounds, so its caches live through other
/// writers' commits. Killed when dropped; [`Peer::close`] closes it cleanly.
pub struct Peer {
    child: Option<KillOnDrop>,
    stdin: Option<std::process::ChildStdin>,
    lines: mpsc::Receiver<String>,
    stderr: std::sync::Arc<std::sync::Mutex<String>>,
    /// Why the open failed (the peer then exited), or None if it is ready.
    pub open_error: Option<String>,
}

impl Peer {
    /// Starts the peer and opens `uri` (SQLITE_OPEN_URI): with `so`, after
    /// loading that extension (so `vfs=waffle` in the URI works).
    pub fn spawn(so: Option<&Path>, uri: &str) -> Peer {
        use std::io::{BufRead, BufReader};
        let mut child = Command::new(python_with_apsw())
            .arg("-c")
            .arg(format!("{APSW_PRELUDE}{PEER_PY}"))
            .arg(so.map(|p| p.as_os_str().to_owned()).unwrap_or_default())
            .arg(uri)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn python3 (apsw peer)");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().unwrap();
        let err = child.stderr.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = crate::process::collect_stderr(err);
        let mut peer = Peer { child: Some(KillOnDrop(child)), stdin, lines, stderr, open_error: None };
        let first = peer.answer();
        if let Some(e) = first.get("open_error") {
            peer.open_error = Some(format!("{}; stderr: {}", e.as_str().unwrap_or_default(), peer.stderr().trim()));
        } else {
            assert_eq!(first.get("ready"), Some(&serde_json::json!(true)), "apsw peer: unexpected greeting {first}");
        }
        peer
    }

    /// What the peer wrote on stderr so far (waffle's warnings and refusals).
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    fn answer(&mut self) -> serde_json::Value {
        match self.lines.recv_timeout(CHILD_TIMEOUT) {
            Ok(line) => serde_json::from_str(&line).unwrap_or_else(|e| panic!("apsw peer: not JSON ({e}): {line}")),
            Err(e) => panic!("apsw peer: no answer in {CHILD_TIMEOUT:?} ({e}); stderr: {}", self.stderr()),
        }
    }

    /// Sends one request and waits for its answer: `{"ok": ...}`, `{"busy": msg}` or `{"error": msg}`.
    pub fn request(&mut self, req: &serde_json::Value) -> serde_json::Value {
        assert!(self.open_error.is_none(), "apsw peer is not open: {:?}", self.open_error);
        let mut line = req.to_string();
        line.push('\n');
        let stdin = self.stdin.as_mut().expect("peer still running");
        if let Err(e) = stdin.write_all(line.as_bytes()).and_then(|_| stdin.flush()) {
            panic!("apsw peer: write request: {e}; stderr: {}", self.stderr());
        }
        self.answer()
    }

    /// Closes the connection and waits for the process to exit cleanly.
    pub fn close(mut self) {
        drop(self.stdin.take());
        let mut child = self.child.take().expect("not closed twice");
        let mut status = None;
        wait_for(CHILD_TIMEOUT, "the apsw peer to exit after its stdin closed", || {
            status = child.0.try_wait().expect("wait for apsw peer");
            status.is_some()
        });
        let status = status.unwrap();
        assert!(status.success(), "apsw peer exited with {status}; stderr: {}", self.stderr());
    }
}

/// A value as the apsw peer takes and gives it (blobs as {"x": hex}).
pub fn to_peer(v: &Value) -> serde_json::Value {
    match v {
        Value::Null => serde_json::Value::Null,
        Value::Integer(i) => (*i).into(),
        Value::Real(r) => (*r).into(),
        Value::Text(t) => t.clone().into(),
        Value::Blob(b) => serde_json::json!({ "x": b.iter().map(|x| format!("{x:02x}")).collect::<String>() }),
    }
}

pub fn from_peer(v: &serde_json::Value) -> Value {
    match v {
        serde_json::Value::Null => Value::Null,
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => Value::Integer(i),
            None => Value::Real(n.as_f64().unwrap()),
        },
        serde_json::Value::String(s) => Value::Text(s.clone()),
        serde_json::Value::Object(o) if o.len() == 1 && o.contains_key("x") => {
            let h = o["x"].as_str().expect("hex string");
            Value::Blob((0..h.len()).step_by(2).map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap()).collect())
        }
        other => panic!("apsw peer: unexpected value {other}"),
    }
}
