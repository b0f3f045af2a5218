//! The child programs as the end-to-end tests find and start them. Being an integration test of
//! this package also makes `cargo test --workspace` build them (a dependency's binaries are not
//! built for its dependents' tests).

use std::path::PathBuf;
use std::process::Command;

use waffle_testkit::{artefact, BINARIES};

/// The binary cargo built for this test, by name (`CARGO_BIN_EXE_<name>` is a compile-time variable).
fn built(name: &str) -> PathBuf {
    PathBuf::from(match name {
        "crash-writer" => env!("CARGO_BIN_EXE_crash-writer"),
        "commit-then-hang" => env!("CARGO_BIN_EXE_commit-then-hang"),
        "open-config-cases" => env!("CARGO_BIN_EXE_open-config-cases"),
        "preload-file-io" => env!("CARGO_BIN_EXE_preload-file-io"),
        "explorer-worker" => env!("CARGO_BIN_EXE_explorer-worker"),
        other => panic!("no binary {other} in this package: add it here"),
    })
}

#[test]
fn artefact_finds_the_binaries_of_the_profile_in_use() {
    let mut in_src: Vec<String> = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/src/bin"))
        .unwrap()
        .map(|e| e.unwrap().path().file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    in_src.sort();
    let mut listed: Vec<String> = BINARIES.iter().map(|b| b.to_string()).collect();
    listed.sort();
    assert_eq!(in_src, listed, "BINARIES lists every program of src/bin");
    for name in BINARIES {
        assert_eq!(artefact(name), built(name), "{name}");
    }
}

#[test]
fn a_child_without_its_arguments_prints_its_usage_and_does_nothing() {
    for name in BINARIES {
        let out = Command::new(built(name)).output().unwrap_or_else(|e| panic!("run {name}: {e}"));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {stderr}");
        assert!(stderr.starts_with(&format!("usage: {name} <")), "{name}: {stderr}");
        assert!(out.stdout.is_empty(), "{name}");
    }
}
