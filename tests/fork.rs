//! A process that forks with databases open through `waffle` (Python's `os.fork`, as
//! `multiprocessing` and pre-forking servers do), in apsw with `libwaffle.so` loaded.
//!
//! SQLite's rule: a connection is not carried across a fork; a child opens the database anew.
//! The child then must get a cache of its own, as another process would (its own identity and
//! version names, its own threads), and what it inherited must stay the parent's: a child that
//! uses or closes a parent's connection (a finalizer does) gets plain SQLite's I/O and closes
//! nothing of the parent's cache (no flush without its threads, no sidecar saved under the
//! parent, no lock kept after the parent let go).
//!
//! Each test checks its SQL results against the same script without `waffle` (the control), and
//! the run's stderr (the host's) must be empty.

use std::path::Path;
use std::process::Command;

use serde_json::Value;
use waffle_testkit::artefact;
use waffle_testkit::db::waffle_uri;
use waffle_testkit::nodes::start_node;
use waffle_testkit::process::run_with_input;
use waffle_testkit::temp_dir::TempDir;
use waffle_testkit::writers::{python_with_apsw, APSW_PRELUDE, CHILD_TIMEOUT};

/// Turns taken by the parent's and the child's connections, each a commit the other then reads.
const ROUNDS: u32 = 16;

/// Runs `body` after the apsw prelude (`so`: the extension, or "" for the control) on `uri`;
/// `db` is the file's path. Returns the JSON lines of stdout; the run must succeed with nothing
/// on stderr.
fn python(so: &str, uri: &str, db: &Path, body: &str) -> Vec<Value> {
    let script = format!("{APSW_PRELUDE}\nimport os\ndb = sys.argv[3]\n{HELPERS}\n{body}");
    let mut cmd = Command::new(python_with_apsw());
    cmd.arg("-c").arg(script).arg(so).arg(uri).arg(db);
    let out = run_with_input(&mut cmd, "", CHILD_TIMEOUT);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "python failed: {}\nstdout: {stdout}\nstderr: {stderr}", out.status);
    assert!(stderr.trim().is_empty(), "the host's stderr is not empty:\n{stderr}\nstdout: {stdout}");
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}\nall: {stdout}")))
        .collect()
}

/// Python helpers: a connection on `uri` (busy timeout, a tiny SQLite cache so reads go below
/// it), the table's digest, a connection's cache figures (None without waffle), one line out.
const HELPERS: &str = r#"
def conn():
    c = apsw.Connection(uri, flags=flags)
    c.setbusytimeout(10000)
    c.cursor().execute("PRAGMA cache_size=4")
    return c

def digest(c):
    return list(c.cursor().execute("SELECT count(*), sum(length(v)), group_concat(substr(v, 1, 9), '') FROM t"))[0]

def cache(c):
    if not so:
        return None
    s = json.loads(list(c.cursor().execute("PRAGMA waffle_stats"))[0][0])
    return {k: s[k] for k in ("cache_id", "l2_pushes", "l2_hits", "verify_checked", "verify_mismatches")}

def out(**kw):
    sys.stdout.write(json.dumps(kw) + "\n")
    sys.stdout.flush()

def fill(c, n):
    cur = c.cursor()
    cur.execute("CREATE TABLE IF NOT EXISTS t(id INTEGER PRIMARY KEY, v TEXT)")
    cur.execute("BEGIN")
    for i in range(n):
        cur.execute("INSERT OR REPLACE INTO t VALUES (?, ?)", (i, "init-%05d" % i + "x" * 200))
    cur.execute("COMMIT")
"#;

/// Runs `script` twice, each on a new database in a temp dir of its own: as the control, plainly
/// (no extension loaded), then through waffle (`libwaffle.so`, one node, 16 KiB L1, verify
/// mode, no hot list, no cost back-off: every read below L1 asks the grid). Their JSON lines.
fn control_then_waffle(name: &str, script: &str) -> (Vec<Value>, Vec<Value>) {
    let (control_dir, waffle_dir) = (TempDir::new(&format!("{name}-control")), TempDir::new(name));
    let control_db = control_dir.join("forked.db");
    let control = python("", &format!("file:{}", utf8(&control_db)), &control_db, script);
    let node = start_node(64);
    let grid = node.addr();
    let params = [
        ("waffle_grid", grid.as_str()),
        ("waffle_local", "16KiB"),
        ("waffle_verify", "on"),
        ("waffle_hot_list", "off"),
        ("waffle_grid_backoff", "off"),
    ];
    let db = waffle_dir.join("forked.db");
    let so = artefact("libwaffle.so");
    let lines = python(utf8(&so), &waffle_uri(&db, &params), &db, script);
    (control, lines)
}

fn utf8(p: &Path) -> &str {
    p.to_str().expect("UTF-8 path")
}

/// Parent and child, each on a connection opened after the fork, take turns committing 200
/// updates; after each turn the other reads the table, which must be what the writer read.
fn turns_script(journal_mode: &str) -> String {
    format!(
        r#"
c = conn()
c.cursor().execute("PRAGMA journal_mode={journal_mode}")
fill(c, 2000)
before = cache(c)
to_child, to_parent = os.pipe(), os.pipe()
pid = os.fork()
child = pid == 0
mine = conn()
tell, hear = (to_parent[1], to_child[0]) if child else (to_child[1], to_parent[0])
rng = __import__("random").Random(7 if child else 8)
wrong = []
for turn in range({ROUNDS}):
    if (turn % 2 == 1) == child:
        cur = mine.cursor()
        cur.execute("BEGIN IMMEDIATE")
        for _ in range(200):
            tag = ("c%02d" if child else "p%02d") % turn
            cur.execute("UPDATE t SET v = ? WHERE id = ?", (tag + "-" + "y" * rng.randrange(400), rng.randrange(2000)))
        cur.execute("COMMIT")
        os.write(tell, (json.dumps(digest(mine)) + "\n").encode())
    else:
        line = b""
        while not line.endswith(b"\n"):
            line += os.read(hear, 1)
        if json.loads(line) != list(digest(mine)):
            wrong.append(turn)
ok = list(mine.cursor().execute("PRAGMA integrity_check"))[0][0]
out(who="child" if child else "parent", wrong=wrong, integrity=ok, before=before, cache=cache(mine))
if child:
    os._exit(0)
os.waitpid(pid, 0)
"#
    )
}

fn by_who<'a>(lines: &'a [Value], who: &str) -> &'a Value {
    lines.iter().find(|l| l["who"] == who).unwrap_or_else(|| panic!("no line of the {who}: {lines:?}"))
}

fn turns(journal_mode: &str) {
    let (control, lines) = control_then_waffle("fork-turns", &turns_script(journal_mode));
    for who in ["parent", "child"] {
        let l = by_who(&control, who);
        assert_eq!(
            (&l["wrong"], &l["integrity"]),
            (&Value::from(Vec::<u32>::new()), &Value::from("ok")),
            "control: {l}"
        );
    }

    let (parent, child) = (by_who(&lines, "parent"), by_who(&lines, "child"));
    for l in [parent, child] {
        assert_eq!(l["wrong"], Value::from(Vec::<u32>::new()), "turns whose read differed from the writer's: {l}");
        assert_eq!(l["integrity"], "ok", "{l}");
        assert_eq!(l["cache"]["verify_mismatches"], 0, "a served page differed from the file: {l}");
        assert!(l["cache"]["verify_checked"].as_u64().unwrap() > 0, "verify mode checked nothing: {l}");
    }
    assert_eq!(parent["cache"]["cache_id"], parent["before"]["cache_id"], "the parent's connections share its cache");
    assert_ne!(
        child["cache"]["cache_id"], parent["cache"]["cache_id"],
        "the child's open joined the parent's cache (its identity, version names and threads are the parent's)"
    );
    assert!(child["cache"]["l2_pushes"].as_u64().unwrap() > 0, "the child's cache pushed nothing: {child}");
    assert!(child["cache"]["l2_hits"].as_u64().unwrap() > 0, "the child's cache never read the grid: {child}");
}

#[test]
fn a_forked_childs_open_gets_a_cache_of_its_own_rollback_journal() {
    turns("delete");
}

#[test]
fn a_forked_childs_open_gets_a_cache_of_its_own_wal() {
    turns("wal");
}

/// The child reads through the connection it inherited (SQLite says not to; it must still be
/// right), closes it, exits as Python does (finalizers run). The parent's cache goes on, and
/// its sidecar is not saved under it: a clean close's file while the parent has it open would
/// let a crash of the parent leave a sidecar that says clean.
#[test]
fn a_forked_child_that_closes_its_parents_connection_closes_nothing_of_the_parents_cache() {
    let script = r#"
c = conn()
fill(c, 2000)
before = cache(c)
pid = os.fork()
if pid == 0:
    seen = digest(c)
    c.close()
    out(who="child", digest=seen)
    sys.exit(0)
_, status = os.waitpid(pid, 0)
side = os.path.join(os.path.dirname(db), "." + os.path.basename(db) + "-waffle")
data = open(side, "rb").read() if os.path.exists(side) else b""
fill(c, 3000)
out(who="parent", status=status, digest=digest(c), sidecar_clean=len(data) > 12 and data[12] == 1,
    before=before, cache=cache(c), integrity=list(c.cursor().execute("PRAGMA integrity_check"))[0][0])
c.close()
"#;
    let (control, lines) = control_then_waffle("fork-close", script);
    for who in ["parent", "child"] {
        assert_eq!(by_who(&lines, who)["digest"], by_who(&control, who)["digest"], "{who}: {lines:?}");
    }
    let parent = by_who(&lines, "parent");
    assert_eq!(parent["status"], 0, "the child's exit: {parent}");
    assert_eq!(parent["integrity"], "ok", "{parent}");
    assert_eq!(parent["sidecar_clean"], false, "the child saved the parent's sidecar as a clean close: {parent}");
    assert_eq!(parent["cache"]["cache_id"], parent["before"]["cache_id"], "{parent}");
    assert!(
        parent["cache"]["l2_pushes"].as_u64().unwrap() > parent["before"]["l2_pushes"].as_u64().unwrap(),
        "the parent's cache stopped pushing after the child's close: {parent}"
    );
    assert_eq!(parent["cache"]["verify_mismatches"], 0, "{parent}");
}

/// A child that lives on (a worker) while its parent closes a warm database: the child's copy of
/// the sidecar's locked descriptor must not keep the lock, or the parent's next open waits it
/// out and starts cold (another cache id, a warning on stderr).
#[test]
fn a_long_lived_child_keeps_no_lock_of_its_parents_sidecar() {
    let script = r#"
c = conn()
fill(c, 500)
c.close()
c = conn()
warm = cache(c)
digest(c)
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.read(r, 1)
    os._exit(0)
c.close()
c = conn()
again = cache(c)
seen = digest(c)
c.close()
os.write(w, b"x")
os.waitpid(pid, 0)
out(who="parent", warm=warm, again=again, digest=seen)
"#;
    let (control, lines) = control_then_waffle("fork-lock", script);
    let parent = by_who(&lines, "parent");
    assert_eq!(parent["digest"], by_who(&control, "parent")["digest"], "{parent}");
    assert_eq!(
        parent["again"]["cache_id"], parent["warm"]["cache_id"],
        "the reopen after a clean close was not warm (the child held the sidecar's lock): {parent}"
    );
}
