//! Finding a file cargo builds apart from the test that uses it: the child programs of this crate,
//! `libwaffle.so`, `libwaffle_preload.so` and `libwaffle_slowdisk.so`, the ones built for the
//! profile the tests run under, not older than their sources.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// The child programs of this crate (`src/bin/`).
pub const BINARIES: [&str; 5] =
    ["crash-writer", "commit-then-hang", "open-config-cases", "preload-file-io", "explorer-worker"];

/// A file cargo builds apart from the test that uses it.
struct Known {
    file: &'static str,
    /// An environment variable naming the file to use instead of searching.
    env: Option<&'static str>,
    /// The package that builds it (for the message saying what to build).
    package: &'static str,
    /// The crates it is built from: a file older than any of their sources is stale.
    sources: &'static [&'static str],
}

fn known(file: &str) -> Known {
    match file {
        "libwaffle.so" => Known {
            file: "libwaffle.so",
            env: Some("WAFFLE_SO"),
            package: "waffle-sqlite",
            sources: &["crates/waffle-sqlite", "crates/waffle-core"],
        },
        "libwaffle_preload.so" => Known {
            file: "libwaffle_preload.so",
            env: Some("WAFFLE_PRELOAD_SO"),
            package: "waffle-preload",
            sources: &["crates/waffle-preload", "crates/waffle-core"],
        },
        "libwaffle_slowdisk.so" => Known {
            file: "libwaffle_slowdisk.so",
            env: Some("WAFFLE_SLOWDISK_SO"),
            package: "waffle-slowdisk",
            sources: &["crates/waffle-slowdisk", "crates/waffle-emulation"],
        },
        _ => {
            let Some(bin) = BINARIES.iter().find(|b| **b == file) else {
                panic!(
                    "artefact({file:?}): not one this crate knows ({BINARIES:?}, libwaffle.so, libwaffle_preload.so, libwaffle_slowdisk.so)"
                )
            };
            Known {
                file: bin,
                env: None,
                package: "waffle-testkit",
                sources: &["crates/waffle-testkit", "crates/waffle-sqlite", "crates/waffle-core"],
            }
        }
    }
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).ancestors().nth(2).expect("crates/waffle-testkit is in the workspace").into()
}

/// target/<profile> of the running executable: a test binary is in its `deps/`.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the path of the running executable");
    let dir = exe.parent().expect("an executable is in a directory");
    if dir.file_name() == Some("deps".as_ref()) { dir.parent().unwrap_or(dir) } else { dir }.to_path_buf()
}

/// The cargo command that builds `package` into the profile directory `dir`.
fn build_command(dir: &Path, package: &str) -> String {
    match dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => format!("cargo build -p {package}"),
        Some("release") | None => format!("cargo build --release -p {package}"),
        Some(profile) => format!("cargo build --profile {profile} -p {package}"),
    }
}

/// The newest file among the sources (src/ and Cargo.toml) of `crates`.
fn newest_source(crates: &[&str]) -> (SystemTime, PathBuf) {
    let mut newest = (SystemTime::UNIX_EPOCH, PathBuf::new());
    let mut stack: Vec<PathBuf> =
        crates.iter().flat_map(|c| [workspace().join(c).join("src"), workspace().join(c).join("Cargo.toml")]).collect();
    while let Some(p) = stack.pop() {
        let Ok(meta) = std::fs::metadata(&p) else { continue };
        if meta.is_dir() {
            stack.extend(std::fs::read_dir(&p).into_iter().flatten().flatten().map(|e| e.path()));
        } else if let Ok(t) = meta.modified() {
            if t > newest.0 {
                newest = (t, p);
            }
        }
    }
    newest
}

/// A built binary of this crate (one of [`BINARIES`]), `libwaffle.so`, `libwaffle_preload.so` or
/// `libwaffle_slowdisk.so`.
///
/// The libraries' variables `WAFFLE_SO`, `WAFFLE_PRELOAD_SO` and `WAFFLE_SLOWDISK_SO` name the file
/// to use. Otherwise it is the one built for the profile of the running test binary: in its
/// `target/<profile>` (or in `deps/` there, where `cargo test` leaves a dependency's cdylib), never
/// another profile's, so a test under `--profile checked` runs checked children. It must not be
/// older than its sources. Missing or stale, the test fails and says what to build: `cargo test` builds a dependency's
/// library but not its binaries, so a run of one test file needs `cargo build --release` (or
/// `-p waffle-testkit`) first; `cargo test --workspace` builds them (this crate's tests use them).
#[track_caller]
pub fn artefact(file: &str) -> PathBuf {
    let known = known(file);
    if let Some(var) = known.env {
        if let Some(p) = std::env::var_os(var) {
            let p = PathBuf::from(p);
            assert!(p.is_file(), "{var}={} does not exist", p.display());
            return p;
        }
    }
    let dir = profile_dir();
    let candidates = [dir.join(known.file), dir.join("deps").join(known.file)];
    let Some((time, path)) = candidates
        .iter()
        .filter_map(|p| Some((std::fs::metadata(p).ok()?.modified().ok()?, p.clone())))
        .max_by_key(|(t, _)| *t)
    else {
        panic!(
            "{file} not found (looked for {candidates:?}, the profile these tests run under): build it with `{}`",
            build_command(&dir, known.package)
        )
    };
    let (src_time, src) = newest_source(known.sources);
    assert!(
        time >= src_time,
        "{} is older than {}: rebuild it with `{}`",
        path.display(),
        src.display(),
        build_command(&dir, known.package)
    );
    path
}
