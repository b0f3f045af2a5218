//! Bad configuration through a real SQLite open: every parameter, many bad
//! values, from the URI and from the environment.
//!
//! A bad value refuses the open (SQLite reports SQLITE_CANTOPEN), creates no
//! file, and prints one line on stderr naming the parameter and the value as
//! given; never a panic, never silently ignored. Values at the edges of what
//! is allowed open, and a small workload on them gives the right results.
//! An unreachable grid node (a closed port, a name that does not resolve) is
//! not an error: one warning line, and its pages are misses.
//!
//! The table (waffle-testkit's `config_cases`) runs in a child process
//! (waffle-testkit's `open-config-cases`, every WAFFLE_* variable removed) so
//! that its stderr can be read case by case.
//!
//!     cargo test --release -p waffle-e2e --test faults_config

use std::process::Command;

use waffle_testkit::artefact;
use waffle_testkit::config_cases::{cases, Want};
use waffle_testkit::temp_dir::TempDir;

#[test]
fn every_bad_value_refuses_the_open_and_names_the_parameter_and_value() {
    let dir = TempDir::new("config");
    let closed_port = waffle_nodes::closed_port();
    let mut cmd = Command::new(artefact("open-config-cases"));
    cmd.arg(dir.path()).arg(closed_port.to_string());
    for (k, _) in std::env::vars() {
        if k.starts_with("WAFFLE_") {
            cmd.env_remove(k);
        }
    }
    let out = cmd.output().unwrap_or_else(|e| panic!("run {cmd:?}: {e}"));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "the child failed ({}):\n{stderr}", out.status);
    assert!(!stderr.contains("panicked"), "a panic in the child:\n{stderr}");
    assert!(stderr.contains("=== done"), "the child did not finish the table:\n{stderr}");

    let cases = cases(dir.path(), closed_port);
    let (mut refused, mut opened, mut warned) = (0, 0, 0);
    for (i, case) in cases.iter().enumerate() {
        let start = stderr.find(&format!("=== case {i}\n")).unwrap_or_else(|| panic!("no output for case {i}"));
        let rest = &stderr[start..];
        let end = rest.find(&format!("=== result {i}:")).unwrap_or_else(|| panic!("no result for case {i}:\n{rest}"));
        let said = &rest[rest.find('\n').unwrap() + 1..end];
        let result = rest[end..].lines().next().unwrap();
        let what = format!("case {i} (uri {:?}, env {:?}): {result}\nstderr: {said}", case.uri, case.env);
        match case.want {
            Want::Refused(param, value) => {
                assert!(result.contains("refused Some(CannotOpen)"), "should be refused with SQLITE_CANTOPEN: {what}");
                assert!(result.contains("file created: false"), "a refused open must not create the file: {what}");
                let line = said
                    .lines()
                    .filter_map(waffle_core::log::unstamped)
                    .find(|l| l.starts_with("waffle: cannot open"))
                    .unwrap_or_else(|| panic!("no error line: {what}"));
                assert!(
                    line.contains(&format!("bad value for {param}: '{value}'")),
                    "the error should name {param} and '{value}': {what}"
                );
                assert_eq!(said.lines().count(), 1, "one line of error, nothing else: {what}");
                refused += 1;
            }
            Want::Opens => {
                assert!(result.contains("opened ok"), "should open and work: {what}");
                assert!(!said.contains("waffle:"), "no warning expected: {what}");
                opened += 1;
            }
            Want::Warns(text) => {
                assert!(result.contains("opened ok"), "an unreachable node must not fail the open: {what}");
                let warnings: Vec<&str> = said.lines().filter_map(waffle_core::log::unstamped).collect();
                assert!(warnings.iter().any(|l| l.contains(text)), "expected a warning with '{text}': {what}");
                assert_eq!(warnings.len(), 1, "one warning, not one per request: {what}");
                let misses: u64 = result.rsplit(' ').next().unwrap().parse().unwrap();
                assert!(misses > 0, "the node's pages should be misses: {what}");
                warned += 1;
            }
        }
    }
    eprintln!("{} cases: {refused} refused with the parameter and value named, {opened} edge values opened and worked, {warned} unreachable nodes warned", cases.len());
}
