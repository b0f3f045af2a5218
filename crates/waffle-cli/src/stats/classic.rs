//! The Prometheus text format 0.0.4, the classic one: what `promtool check
//! metrics`, node_exporter's textfile collector and scrapers that do not ask
//! for OpenMetrics parse. prometheus-client writes OpenMetrics only, so this
//! is written from its output: the two differ, for what we write, in a
//! counter family's name (OpenMetrics names the family `x` and its sample
//! `x_total`; the classic format names both `x_total`, and a classic parser
//! that meets `# TYPE x counter` finds no help or type for `x_total`) and in
//! the closing `# EOF`, which the classic format has not.

use std::collections::HashSet;

/// The content type of the classic text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// `openmetrics` (as [`super::prometheus::Exposition::render`] writes it) in the classic text format.
pub fn from_openmetrics(openmetrics: &str) -> String {
    let counters: HashSet<&str> =
        openmetrics.lines().filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter")).collect();
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" {
            continue;
        }
        let renamed = ["# HELP ", "# TYPE "].iter().find_map(|p| {
            let rest = line.strip_prefix(p)?;
            let (name, tail) = rest.split_once(' ')?;
            counters.contains(name).then(|| format!("{p}{name}_total {tail}"))
        });
        out.push_str(renamed.as_deref().unwrap_or(line));
        out.push('\n');
    }
    out
}

/// Whether a scraper's `Accept` header prefers OpenMetrics to the classic
/// format (by their `q`; a tie goes to OpenMetrics, which Prometheus ranks
/// first). No header, or one that names neither: the classic format, as
/// Prometheus' own client libraries answer.
pub fn wants_openmetrics(accept: Option<&str>) -> bool {
    let (mut om, mut text) = (None::<f64>, None::<f64>);
    for range in accept.unwrap_or("").split(',') {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or("").to_ascii_lowercase();
        let q =
            parts.filter_map(|p| p.strip_prefix("q=").and_then(|q| q.trim().parse::<f64>().ok())).next().unwrap_or(1.0);
        let slot = match media.as_str() {
            "application/openmetrics-text" => &mut om,
            "text/plain" => &mut text,
            _ => continue,
        };
        *slot = Some(slot.map_or(q, |was| was.max(q)));
    }
    match (om, text) {
        (Some(om), Some(text)) => om > 0.0 && om >= text,
        (Some(om), None) => om > 0.0,
        _ => false,
    }
}
