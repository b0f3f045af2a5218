//! `waffle stats`' metrics read by the parsers operators run (issue 32 item
//! 4): `promtool check metrics` (Debian's package `prometheus`) on the classic
//! text format 0.0.4, and the Python prometheus-client parsers (Debian's
//! `python3-prometheus-client`, under Debian's /usr/bin/python3) on both
//! formats, printed and served. A tool that is missing fails the test and
//! says which package brings it: scripts/install-deps installs both.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use waffle_testkit::process::exited_pid;

const PYTHON: &str = "/usr/bin/python3";

/// A stats file with every kind of figure: nodes, a histogram, a label value to escape.
fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/known-stats.json")
}

/// The fixture as a live writer (this test's process) wrote it now, or (`crashed`) as one whose
/// process is gone left it: a file in a directory of this test's (canonical: the `source` label).
fn written(name: &str, crashed: bool) -> PathBuf {
    let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(fixture()).unwrap()).unwrap();
    let me = waffle_core::stats::health::own();
    let now_ms = waffle_core::stats::health::now_unix_ms();
    for (k, x) in [
        ("format_version", serde_json::json!(2)),
        ("state", serde_json::json!("running")),
        ("pid", serde_json::json!(if crashed { exited_pid() } else { std::process::id() })),
        ("pid_start_ticks", serde_json::json!(me.start_ticks)),
        ("pid_namespace", serde_json::json!(me.pid_namespace)),
        ("boot_id", serde_json::json!(me.boot_id)),
        ("interval_ms", serde_json::json!(3_600_000)), // never stale in this test, however slow the machine
        ("updated_unix_ms", serde_json::json!(now_ms)),
        ("started_unix_ms", serde_json::json!(now_ms - 60_000)),
    ] {
        v[k] = x;
    }
    let dir = std::env::temp_dir().join(format!("waffle-real-parsers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = std::fs::canonicalize(&dir).unwrap().join(name);
    std::fs::write(&path, v.to_string()).unwrap();
    path
}

/// `waffle stats --format FORMAT` of a live file, a crashed writer's and a missing one; and the
/// live file's name.
fn waffle_stats(format: &str) -> (String, PathBuf) {
    let (live, crashed) =
        (written(&format!("live-{format}.json"), false), written(&format!("crashed-{format}.json"), true));
    let missing = std::env::temp_dir().join(format!("waffle-real-parsers-missing-{}.json", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_waffle"))
        .args(["stats", "--format", format])
        .arg(&live)
        .arg(&crashed) // waffle_up 0 and waffle_state crashed
        .arg(&missing) // waffle_up 0 beside a healthy source
        .output()
        .expect("run waffle stats");
    assert_eq!(out.status.code(), Some(1), "one file missing: {}", String::from_utf8_lossy(&out.stderr));
    (String::from_utf8(out.stdout).expect("UTF-8"), live)
}

/// Runs `program args` with `input` on stdin; (exit code, stdout and stderr). Panics, naming the
/// Debian package, when the program is not installed.
fn run_tool(program: &str, args: &[&str], input: &str, package: &str) -> (Option<i32>, String) {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("{program} cannot be run ({e}): install Debian's package {package} (scripts/install-deps does)")
        });
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code(), said)
}

fn promtool(exposition: &str) -> (Option<i32>, String) {
    run_tool("promtool", &["check", "metrics"], exposition, "prometheus")
}

/// The Python parser of `format` (`classic` or `openmetrics`) on `exposition`: one line per sample,
/// `family type name labels value`, sorted.
fn python_parse(format: &str, exposition: &str) -> String {
    let module = match format {
        "classic" => "prometheus_client.parser",
        _ => "prometheus_client.openmetrics.parser",
    };
    let script = format!(
        "import sys, json\n\
         from {module} import text_string_to_metric_families as parse\n\
         out = []\n\
         for f in parse(sys.stdin.read()):\n\
         \x20   for s in f.samples:\n\
         \x20       out.append(f'{{f.name}} {{f.type}} {{s.name}} {{json.dumps(s.labels, sort_keys=True)}} {{float(s.value)}}')\n\
         print('\\n'.join(sorted(out)))\n"
    );
    let (code, said) = run_tool(PYTHON, &["-c", &script], exposition, "python3-prometheus-client");
    assert_eq!(code, Some(0), "the Python {format} parser refused it:\n{said}\n{exposition}");
    said
}

fn check_figures(parsed: &str, format: &str, live: &Path) {
    let src = live.display().to_string();
    let crashed = live.with_file_name(format!("crashed-{format}.json")).display().to_string();
    for want in [
        format!("waffle_state gauge waffle_state {{\"source\": \"{src}\", \"state\": \"running\"}} 1.0"),
        format!("waffle_state gauge waffle_state {{\"source\": \"{crashed}\", \"state\": \"crashed\"}} 1.0"),
        format!("waffle_up gauge waffle_up {{\"source\": \"{crashed}\"}} 0.0"),
        format!(
            "waffle_info gauge waffle_info {{\"adapter\": \"mariadb-preload\", \"database\": \"/var/lib/mysql\", \
             \"source\": \"{src}\"}} 1.0"
        ),
        format!("waffle_cache_info gauge waffle_cache_info {{\"cache_id\": \"00ff\", \"source\": \"{src}\"}} 1.0"),
        format!("waffle_l1_hits counter waffle_l1_hits_total {{\"source\": \"{src}\"}} 600.0"),
        format!("waffle_up gauge waffle_up {{\"source\": \"{src}\"}} 1.0"),
        format!("waffle_node_up gauge waffle_node_up {{\"node\": \"10.0.0.3:11211\", \"source\": \"{src}\"}} 0.0"),
        format!(
            "waffle_read_latency_seconds histogram waffle_read_latency_seconds_bucket {{\"le\": \"+Inf\", \"source\": \
             \"{src}\", \"tier\": \"l1\"}} 600.0"
        ),
        format!(
            "waffle_tablespace_page_writes counter waffle_tablespace_page_writes_total {{\"source\": \"{src}\", \
             \"tablespace\": \"shop/\\\"odd\\\"\\\\name\"}} 4.0"
        ),
    ] {
        assert!(parsed.lines().any(|l| l == want), "{format}: no `{want}` in\n{parsed}");
    }
    assert!(parsed.lines().any(|l| l.starts_with("waffle_up gauge waffle_up") && l.ends_with(" 0.0")), "{parsed}");
}

#[test]
fn promtool_and_the_python_parser_read_the_classic_format() {
    let (text, live) = waffle_stats("prometheus");
    let (code, said) = promtool(&text);
    assert_eq!(code, Some(0), "promtool check metrics:\n{said}\n{text}");
    assert!(said.trim().is_empty(), "no lint problem: {said}");
    check_figures(&python_parse("classic", &text), "prometheus", &live);
}

#[test]
fn the_python_parser_reads_the_openmetrics_format_that_promtool_would_refuse() {
    let (text, live) = waffle_stats("openmetrics");
    check_figures(&python_parse("openmetrics", &text), "openmetrics", &live);
    // Why the classic format is the default: a classic parser fails on OpenMetrics' counter families.
    let (code, said) = promtool(&text);
    assert_ne!(code, Some(0), "promtool would take OpenMetrics after all:\n{said}");
    assert!(said.contains("no help text"), "{said}");
}

/// `waffle stats --listen 127.0.0.1:0 FILE`, killed when dropped.
struct Endpoint(Child, String);

impl Drop for Endpoint {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn scrape(addr: &str, accept: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\nAccept: {accept}\r\n\r\n").unwrap();
    let mut all = String::new();
    s.read_to_string(&mut all).unwrap();
    let (head, body) = all.split_once("\r\n\r\n").expect("a head and a body");
    (head.to_ascii_lowercase(), body.to_string())
}

#[test]
fn the_endpoint_answers_each_scraper_in_the_format_it_asks_for() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_waffle"))
        .args(["stats", "--listen", "127.0.0.1:0"])
        .arg(written("live-listen.json", false))
        .arg(written("crashed-listen.json", true))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start waffle stats --listen");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let url = line.trim().rsplit(' ').next().unwrap().to_string();
    let addr = url.strip_prefix("http://").and_then(|u| u.strip_suffix("/metrics")).expect(&line).to_string();
    let endpoint = Endpoint(child, addr);
    // A classic scraper (Prometheus 1.x, promtool's own) and Prometheus 2.x's header.
    let (head, body) = scrape(&endpoint.1, "text/plain;version=0.0.4");
    assert!(head.contains("content-type: text/plain; version=0.0.4"), "{head}");
    let (code, said) = promtool(&body);
    assert_eq!(code, Some(0), "promtool check metrics:\n{said}\n{body}");
    python_parse("classic", &body);
    let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,\
                      text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    let (head, body) = scrape(&endpoint.1, prometheus);
    assert!(head.contains("content-type: application/openmetrics-text; version=1.0.0"), "{head}");
    python_parse("openmetrics", &body);
}
