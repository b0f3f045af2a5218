//! Files beside the database (`.<db>-waffle`, `.<db>-waffle-hot` and their
//! temporary files) are made and opened as SQLite makes its journals, and
//! anything wrong with them is a cold open, never a refused one nor a write
//! to another file (issue 19, item 4). Debian's `sqlite3` shell with
//! `libwaffle.so` loaded, each case beside the plain shell on the same file.
//!
//! The cases that act as another user run the shell as user `nobody`
//! (uid 65534), so this file must run as root; it fails otherwise.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use waffle_core::sidecar::Sidecar;
use waffle_core::warming::hot_list;
use waffle_testkit::artefact;
use waffle_testkit::process::run_with_input;
use waffle_testkit::temp_dir::TempDir;
use waffle_testkit::writers::{sqlite3_shell, CHILD_TIMEOUT};

const NOBODY: u32 = 65534;
const ROWS: &str = "select a from t order by a;\n";

/// The shell's output.
struct Run {
    ok: bool,
    stdout: String,
    stderr: String,
}

/// Runs `sql` in the `sqlite3` shell on the URI `uri`, with `libwaffle.so` loaded if `waffle`,
/// as user nobody if `nobody`.
fn shell(uri: &str, waffle: bool, nobody: bool, sql: &str) -> Run {
    let mut script = String::from(".bail on\n");
    if waffle {
        script.push_str(&format!(".load {}\n", artefact("libwaffle.so").display()));
    }
    script.push_str(&format!(".open '{uri}'\n{sql}"));
    let mut cmd = Command::new(sqlite3_shell());
    cmd.args(["-batch", ":memory:"]).env("HOME", "/nonexistent");
    if nobody {
        cmd.uid(NOBODY).gid(NOBODY); // as root: the supplementary groups are dropped too
    }
    let out = run_with_input(&mut cmd, &script, CHILD_TIMEOUT);
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    Run { ok: out.status.success(), stdout: text(&out.stdout), stderr: text(&out.stderr) }
}

fn must_be_root() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "run as root: these cases run the shell as user nobody");
}

/// `x.db` (mode 0644, root's when run as root, three rows) in a fresh
/// directory of mode `dir_mode`, with nothing beside it.
fn fixture(name: &str, dir_mode: u32) -> (TempDir, PathBuf) {
    let dir = TempDir::new(name);
    let db = dir.join("x.db");
    let made = shell(
        &format!("file:{}", db.display()),
        false,
        false,
        "create table t(a); insert into t values (1),(2),(3);\n",
    );
    assert!(made.ok, "{}", made.stderr);
    chmod(&db, 0o644);
    chmod(dir.path(), dir_mode);
    assert_eq!(beside(&db), Vec::<String>::new());
    (dir, db)
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// The names in the database's directory other than the database.
fn beside(db: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(db.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "x.db")
        .collect();
    names.sort();
    names
}

/// A file's bytes, inode, owner, mode and mtime: whether anything wrote or replaced it.
fn fingerprint(path: &Path) -> (Vec<u8>, u64, u32, u32, i64, i64) {
    let m = std::fs::symlink_metadata(path).unwrap();
    (std::fs::read(path).unwrap(), m.ino(), m.uid(), m.mode(), m.mtime(), m.mtime_nsec())
}

/// The lines waffle printed on stderr.
fn warnings(run: &Run) -> Vec<&str> {
    run.stderr.lines().filter_map(waffle_core::log::unstamped).collect()
}

/// The plain shell and the shell through waffle on `db` (URI parameters `params`), as nobody if
/// `nobody`: both read the three rows, waffle prints one warning at most and never refuses.
fn both_read(db: &Path, params: &str, nobody: bool) -> Run {
    let plain = shell(&format!("file:{}{params}", db.display()), false, nobody, ROWS);
    assert!(plain.ok && plain.stdout == "1\n2\n3\n", "the plain control: {} {}", plain.stdout, plain.stderr);
    let sep = if params.is_empty() { "?" } else { "&" };
    let waffle = shell(&format!("file:{}{params}{sep}vfs=waffle", db.display()), true, nobody, ROWS);
    assert!(waffle.ok, "through waffle: {}", waffle.stderr);
    assert_eq!(waffle.stdout, plain.stdout, "through waffle: {}", waffle.stderr);
    assert!(warnings(&waffle).len() <= 1, "one warning at most: {}", waffle.stderr);
    waffle
}

/// (a) A database nobody can read but not write, in a directory nobody cannot write: plain
/// SQLite opens it (read-only), so waffle must too, and makes nothing beside it.
#[test]
fn a_database_in_a_directory_its_reader_cannot_write_opens_through_waffle() {
    must_be_root();
    let (_dir, db) = fixture("ro-dir", 0o755);
    both_read(&db, "", true);
    assert_eq!(beside(&db), Vec::<String>::new(), "nothing made beside the database");
}

/// (b) Root opened the database through waffle first (its sidecar and hot list are root's, mode
/// 0600 or 0644), in a directory anyone may write: user nobody still opens it through waffle,
/// cold, and neither reads nor replaces root's files.
#[test]
fn files_another_user_made_first_are_left_alone() {
    must_be_root();
    for mode in [0o600, 0o644] {
        let (_dir, db) = fixture("other-owner", 0o777);
        chmod(&db, 0o666); // nobody opens it read-write: the sidecar is needed, not skipped
        let first = shell(&format!("file:{}?vfs=waffle", db.display()), true, false, ROWS);
        assert!(first.ok, "{}", first.stderr);
        let side = Sidecar::path_for(&db);
        let hot = hot_list::path_for(&db);
        assert_eq!(beside(&db), [name(&side), name(&hot)], "root's open made both");
        chmod(&side, mode);
        chmod(&hot, mode);
        let before = (fingerprint(&side), fingerprint(&hot));
        let run = both_read(&db, "", true);
        assert_eq!(warnings(&run).len(), 1, "one warning, naming the sidecar: {}", run.stderr);
        assert!(warnings(&run)[0].contains(&*side.to_string_lossy()), "{}", run.stderr);
        assert_eq!((fingerprint(&side), fingerprint(&hot)), before, "mode {mode:o}: root's files unchanged");
        assert_eq!(beside(&db), [name(&side), name(&hot)], "mode {mode:o}: nothing else made");
    }
}

fn name(path: &Path) -> String {
    path.file_name().unwrap().to_string_lossy().into_owned()
}

/// (c) Symlinks planted at the sidecar, the hot list and the hot list's old temporary name: an
/// open, a write and a close through waffle never write their targets. Control: without the
/// links the same run writes the sidecar and the hot list (the path the links sit on is used).
#[test]
fn planted_symlinks_never_lead_to_a_write() {
    let (_dir, db) = fixture("symlink", 0o755);
    let work = "insert into t values (4);\nselect count(*) from t;\n";
    let uri = format!("file:{}?vfs=waffle", db.display());
    let control = shell(&uri, true, false, work);
    assert!(control.ok && control.stdout == "4\n", "{}", control.stderr);
    let (side, hot) = (Sidecar::path_for(&db), hot_list::path_for(&db));
    assert_eq!(beside(&db), [name(&side), name(&hot)], "the control wrote both");
    let mut old_tmp = hot.clone().into_os_string();
    old_tmp.push(".tmp");
    let links = [side.clone(), hot.clone(), PathBuf::from(old_tmp)];
    for (i, link) in links.iter().enumerate() {
        let _ = std::fs::remove_file(link);
        let victim = db.with_file_name(format!("victim{i}"));
        std::fs::write(&victim, format!("victim {i}\n")).unwrap();
        std::os::unix::fs::symlink(&victim, link).unwrap();
    }
    let victims: Vec<PathBuf> = (0..links.len()).map(|i| db.with_file_name(format!("victim{i}"))).collect();
    let before: Vec<_> = victims.iter().map(|v| fingerprint(v)).collect();
    std::thread::sleep(std::time::Duration::from_millis(20)); // an mtime a write would change
    let run = shell(&uri, true, false, work);
    assert!(run.ok && run.stdout == "5\n", "{}", run.stderr);
    let after: Vec<_> = victims.iter().map(|v| fingerprint(v)).collect();
    assert_eq!(after, before, "no symlink's target was written");
    assert_eq!(warnings(&run).len(), 1, "one warning: {}", run.stderr);
    // With the sidecar's link gone, a clean close writes the hot list by a rename over its link.
    std::fs::remove_file(&side).unwrap();
    let run = shell(&uri, true, false, work);
    assert!(run.ok && run.stdout == "6\n" && warnings(&run).is_empty(), "{}", run.stderr);
    assert!(std::fs::symlink_metadata(&hot).unwrap().file_type().is_file(), "the hot list replaced its link");
    let after: Vec<_> = victims.iter().map(|v| fingerprint(v)).collect();
    assert_eq!(after, before, "no symlink's target was written");
}

/// (d) `mode=ro` and `immutable=1` through waffle: the rows of the plain shell's same open, and
/// nothing written beside the database.
fn a_read_only_open_writes_nothing(params: &str) {
    let (_dir, db) = fixture("read-only", 0o755);
    let run = both_read(&db, params, false);
    assert!(warnings(&run).is_empty(), "{params}: a read-only open is not a fault: {}", run.stderr);
    assert_eq!(beside(&db), Vec::<String>::new(), "{params}: nothing beside the database");
}

#[test]
fn mode_ro_writes_nothing_beside_the_database() {
    a_read_only_open_writes_nothing("?mode=ro");
}

/// SQLite opens an `immutable=1` file read-write and treats it as read-only in the pager: the
/// VFS must tell the registry (`sqlite3_uri_boolean(name, "immutable", 0)`).
#[test]
fn immutable_writes_nothing_beside_the_database() {
    a_read_only_open_writes_nothing("?immutable=1");
}
