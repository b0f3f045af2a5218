//! `waffle stats --listen ADDR`: an HTTP endpoint Prometheus scrapes. Each
//! GET of `/metrics` reads the stats files again and answers their
//! exposition (`super::prometheus`); a file that cannot be read is
//! `waffle_up{source} 0` in it, and said once on stderr when that changes.
//! One thread answers the requests one at a time (a scrape is a few file
//! reads): nothing grows with the number of scrapers.

use std::collections::HashMap;
use std::io::Write as _;
use std::path::PathBuf;

use tiny_http::{Header, Method, Request, Response, Server};

use super::{classic, prometheus, sources};

/// Serves `paths` at `http://ADDR/metrics` until the process is stopped. Says
/// where on stdout (the address bound: a port 0 asks for a free one).
pub fn serve(addr: &str, paths: &[PathBuf]) -> Result<(), String> {
    let server = Server::http(addr).map_err(|e| format!("--listen {addr}: {e}"))?;
    let ip = server.server_addr().to_ip();
    let bound = ip.map_or_else(|| addr.to_string(), |a| a.to_string());
    if let Some(warning) = ip.and_then(|a| exposure_warning(addr, a)) {
        eprintln!("{warning}");
    }
    println!("waffle stats: serving Prometheus metrics at http://{bound}/metrics");
    let _ = std::io::stdout().flush();
    let mut said = HashMap::new();
    for request in server.incoming_requests() {
        let response = answer(&request, paths, &mut said);
        // A scraper that went away is its own business.
        let _ = request.respond(response);
    }
    Ok(())
}

/// The warning for an endpoint bound beyond this host: it has no authentication, and its
/// metrics name the databases (paths) and the grid nodes (addresses). None on a loopback address.
pub fn exposure_warning(asked: &str, bound: std::net::SocketAddr) -> Option<String> {
    if bound.ip().is_loopback() {
        return None;
    }
    let reach = if bound.ip().is_unspecified() { "every interface of this host" } else { "its network" };
    Some(format!(
        "waffle stats: warning: --listen {asked} serves {reach} without authentication, and the metrics name \
         databases (file paths) and grid nodes (addresses): bind 127.0.0.1 (a Prometheus on this host) or \
         let a firewall admit only the scraper"
    ))
}

fn answer(
    request: &Request,
    paths: &[PathBuf],
    said: &mut HashMap<String, bool>,
) -> Response<std::io::Cursor<Vec<u8>>> {
    let path = request.url().split('?').next().unwrap_or("");
    if !matches!(request.method(), Method::Get | Method::Head) {
        return Response::from_string("only GET and HEAD\n").with_status_code(405);
    }
    match path {
        "/metrics" => {
            let all = sources::read_all(paths);
            note_changes(&all, said);
            let openmetrics = prometheus::render(&all);
            // What the scraper asks for: a classic parser fails on OpenMetrics' counter families (issue 32 item 4).
            let accept = request.headers().iter().find(|h| h.field.equiv("Accept")).map(|h| h.value.as_str());
            if classic::wants_openmetrics(accept) {
                Response::from_string(openmetrics).with_header(content_type(prometheus::CONTENT_TYPE))
            } else {
                Response::from_string(classic::from_openmetrics(&openmetrics))
                    .with_header(content_type(classic::CONTENT_TYPE))
            }
        }
        "/" => Response::from_string("waffle stats: the metrics are at /metrics\n")
            .with_header(content_type("text/plain; charset=utf-8")),
        _ => Response::from_string("not found: the metrics are at /metrics\n").with_status_code(404),
    }
}

fn content_type(value: &str) -> Header {
    Header::from_bytes(&b"Content-Type"[..], value.as_bytes()).expect("a valid header")
}

/// A line on stderr when a source becomes unreadable or readable again (not at every scrape).
fn note_changes(all: &[sources::Source], said: &mut HashMap<String, bool>) {
    for s in all {
        let before = said.insert(s.name.clone(), s.stats.is_ok());
        match (&s.stats, before) {
            (Err(e), None | Some(true)) => eprintln!("waffle stats: {e} (waffle_up 0)"),
            (Ok(_), Some(false)) => eprintln!("waffle stats: {} is read again (waffle_up 1)", s.name),
            _ => {}
        }
    }
}
