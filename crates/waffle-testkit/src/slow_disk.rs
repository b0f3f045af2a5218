//! A test on an EMULATED slow disk: the test binary runs the same test again
//! under `libwaffle_slowdisk.so` (crates/waffle-slowdisk), whose reads of
//! files under a directory wait for a device profile. For a test whose point
//! needs reads to be slow (a warm still running when the database closes, a
//! reload still running while a writer commits); the product has no
//! emulation of its own.
//!
//! ```text
//!  parent: the files in DIR ──> run_again(test, profile, DIR) ──> its child's output checked
//!  child (the same test): child_dir() = Some(DIR) ──> drop_from_page_cache ──> the slow part
//! ```
//!
//! The shim reads its setting when it is loaded; the child then takes it out
//! of its environment, so the programs it starts (memcached) run without it.

use std::ffi::{CStr, CString, OsString};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Tells the child which directory is on the EMULATED disk.
const CHILD_DIR: &str = "WAFFLE_TEST_SLOW_DIR";
/// The shim's setting (`PROFILE:DIR`), read when it is loaded.
const SETTING: &str = "WAFFLE_SLOWDISK";

/// In the test run again by [`run_again`]: the directory on the EMULATED
/// disk (the shim checked loaded, and taken out of the environment). None in
/// the parent.
pub fn child_dir() -> Option<PathBuf> {
    let dir = std::env::var_os(CHILD_DIR)?;
    assert!(shim_fn(c"waffle_slowdisk_reads").is_some(), "run again without libwaffle_slowdisk.so loaded");
    for var in [CHILD_DIR, SETTING, "LD_PRELOAD"] {
        std::env::remove_var(var);
    }
    Some(PathBuf::from(dir))
}

/// Runs the test `test` of this test binary again, in a child process where
/// reads of files under `dir` wait for an EMULATED device `profile`
/// (`hdd-10k`, `cloud-block`, ...), with `env` added. Panics with the child's
/// output unless that test ran there and passed.
#[track_caller]
pub fn run_again(test: &str, profile: &str, dir: &Path, env: &[(&str, String)]) {
    let shim = crate::artefact("libwaffle_slowdisk.so");
    let dir = dir.canonicalize().unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let mut preload = OsString::from(&shim);
    if let Some(before) = std::env::var_os("LD_PRELOAD").filter(|p| !p.is_empty()) {
        preload.push(" ");
        preload.push(before);
    }
    let out = Command::new(std::env::current_exe().expect("this test binary"))
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env("LD_PRELOAD", preload)
        .env(SETTING, format!("{profile}:{}", dir.display()))
        .env(CHILD_DIR, &dir)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .expect("running this test binary again");
    let text = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{test} on an EMULATED {profile} disk failed:\n{text}");
    assert!(text.contains(&format!("{test} ... ok")), "{test} did not run on the EMULATED disk:\n{text}");
}

/// Reads the shim has slowed on `profile`'s device in this process so far.
pub fn slowed_reads(profile: &str) -> u64 {
    let f = shim_fn(c"waffle_slowdisk_reads").expect("libwaffle_slowdisk.so is loaded");
    // SAFETY: the shim exports waffle_slowdisk_reads with this signature.
    let f: unsafe extern "C" fn(*const libc::c_char) -> i64 = unsafe { std::mem::transmute(f) };
    let name = CString::new(profile).expect("a profile name");
    // SAFETY: a NUL-terminated name.
    let n = unsafe { f(name.as_ptr()) };
    u64::try_from(n).unwrap_or_else(|_| panic!("this process emulates no {profile} device"))
}

/// Takes `path` out of the kernel's page cache (fdatasync, then
/// POSIX_FADV_DONTNEED): a read the page cache answers pays no device time,
/// and a file just written is all there.
pub fn drop_from_page_cache(path: &Path) {
    let f = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    f.sync_data().unwrap_or_else(|e| panic!("fdatasync {}: {e}", path.display()));
    // SAFETY: an open descriptor of ours; advice only.
    let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(rc, 0, "posix_fadvise {}", path.display());
}

/// A function the shim exports, if it is loaded in this process.
fn shim_fn(name: &CStr) -> Option<*mut libc::c_void> {
    // SAFETY: a NUL-terminated name; RTLD_DEFAULT searches every object loaded.
    let f = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    (!f.is_null()).then_some(f)
}
