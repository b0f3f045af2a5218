//! PNG charts with plotters (bitmap backend only). Text is drawn with an
//! embedded DejaVu Sans (the `dejavu` crate), so no system font is needed.

use std::path::Path;
use std::sync::Once;

use plotters::coord::ranged1d::SegmentValue;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::FontStyle;

const FONT: &str = "sans-serif";
const COLORS: [RGBColor; 8] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0xe3, 0x77, 0xc2),
    RGBColor(0x7f, 0x7f, 0x7f),
];

fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        for style in [FontStyle::Normal, FontStyle::Bold] {
            if plotters::style::register_font(FONT, style, dejavu::sans::regular()).is_err() {
                eprintln!("waffle: the embedded chart font did not load; charts will have no text");
            }
        }
    });
}

/// Draws the title and the subtitle's lines (split at '\n'); returns the area below them.
fn header<'a>(
    root: &DrawingArea<BitMapBackend<'a>, plotters::coord::Shift>,
    title: &str,
    subtitle: &str,
) -> Result<DrawingArea<BitMapBackend<'a>, plotters::coord::Shift>, String> {
    let lines: Vec<&str> = subtitle.lines().collect();
    let (top, body) = root.split_vertically(44 + 18 * lines.len() as u32);
    top.draw(&Text::new(title.to_string(), (20, 8), (FONT, 22).into_font())).map_err(fail)?;
    for (i, line) in lines.iter().enumerate() {
        let style = (FONT, 14).into_font().color(&RGBColor(80, 80, 80));
        top.draw(&Text::new(line.to_string(), (20, 36 + 18 * i as i32), style)).map_err(fail)?;
    }
    Ok(body)
}

fn fail(e: impl std::fmt::Display) -> String {
    format!("drawing a chart: {e}")
}

pub fn color(i: usize) -> RGBColor {
    COLORS[i % COLORS.len()]
}

/// One bar per configuration, its value written above it.
pub fn bar_chart(
    path: &Path,
    title: &str,
    subtitle: &str,
    y_label: &str,
    bars: &[(String, f64, String)],
) -> Result<(), String> {
    register_font();
    if bars.is_empty() {
        return Err("no bars to draw".into());
    }
    let root = BitMapBackend::new(path, (960, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(fail)?;
    let body = header(&root, title, subtitle)?;
    let max = bars.iter().map(|b| b.1).fold(0.0f64, f64::max).max(1e-9);
    let n = bars.len() as i32;
    let mut chart = ChartBuilder::on(&body)
        .margin(20)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d((0..n - 1).into_segmented(), 0f64..max * 1.2)
        .map_err(fail)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .y_desc(y_label)
        .x_labels(bars.len())
        .x_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) | SegmentValue::Exact(i) => {
                bars.get(*i as usize).map(|b| b.0.clone()).unwrap_or_default()
            }
            SegmentValue::Last => String::new(),
        })
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 15))
        .draw()
        .map_err(fail)?;
    chart
        .draw_series(bars.iter().enumerate().map(|(i, b)| {
            let i = i as i32;
            let mut r = Rectangle::new(
                [(SegmentValue::Exact(i), 0.0), (SegmentValue::Exact(i + 1), b.1)],
                color(i as usize).filled(),
            );
            r.set_margin(0, 0, 18, 18);
            r
        }))
        .map_err(fail)?;
    chart
        .draw_series(bars.iter().enumerate().map(|(i, b)| {
            Text::new(
                b.2.clone(),
                (SegmentValue::CenterOf(i as i32), b.1 + max * 0.06),
                TextStyle::from((FONT, 14).into_font()).pos(Pos::new(HPos::Center, VPos::Bottom)),
            )
        }))
        .map_err(fail)?;
    root.present().map_err(fail)?;
    Ok(())
}

pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    /// Dashed (e.g. p99 beside a solid p50).
    pub dashed: bool,
    pub color: usize,
}

/// Lines with points. `log2_x`: x values are drawn on a log2 scale (thread
/// counts 1..32); `log10_y`: y on a log10 scale (latencies spanning decades).
#[allow(clippy::too_many_arguments)]
pub fn line_chart(
    path: &Path,
    title: &str,
    subtitle: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    log2_x: bool,
    log10_y: bool,
) -> Result<(), String> {
    line_chart_with_spread(path, title, subtitle, x_label, y_label, series, &[], log2_x, log10_y)
}

/// A vertical bar from `lo` to `hi` at `x`, in the color of series `color`: the
/// spread (min..max) of the rounds behind a median point.
#[derive(Clone, Copy, Debug)]
pub struct Spread {
    pub x: f64,
    pub lo: f64,
    pub hi: f64,
    pub color: usize,
}

/// [`line_chart`] with error bars (`spread`) drawn under the lines.
#[allow(clippy::too_many_arguments)]
pub fn line_chart_with_spread(
    path: &Path,
    title: &str,
    subtitle: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    spread: &[Spread],
    log2_x: bool,
    log10_y: bool,
) -> Result<(), String> {
    register_font();
    let tx = |x: f64| if log2_x { x.max(1e-9).log2() } else { x };
    let ty = |y: f64| if log10_y { y.max(1e-9).log10() } else { y };
    let pts: Vec<(f64, f64)> = series
        .iter()
        .flat_map(|s| s.points.iter().map(|&(x, y)| (tx(x), ty(y))))
        .chain(spread.iter().flat_map(|b| [(tx(b.x), ty(b.lo)), (tx(b.x), ty(b.hi))]))
        .collect();
    if pts.is_empty() {
        return Err("no points to draw".into());
    }
    let (mut x0, mut x1) = pts.iter().fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.0), b.max(p.0)));
    let (mut y0, mut y1) = pts.iter().fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.1), b.max(p.1)));
    if x1 - x0 < 1e-9 {
        x0 -= 0.5;
        x1 += 0.5;
    }
    if log10_y {
        y0 = y0.floor();
        y1 = y1.ceil().max(y0 + 1.0);
    } else {
        y0 = 0.0;
        y1 = (y1 * 1.1).max(1e-9);
    }
    let root = BitMapBackend::new(path, (960, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(fail)?;
    let body = header(&root, title, subtitle)?;
    let pad = (x1 - x0) * 0.03;
    let mut chart = ChartBuilder::on(&body)
        .margin(20)
        .x_label_area_size(45)
        .y_label_area_size(80)
        .build_cartesian_2d(x0 - pad..x1 + pad, y0..y1)
        .map_err(fail)?;
    let x_fmt = |x: &f64| {
        if log2_x {
            let v = 2f64.powf(*x);
            if (v - v.round()).abs() < 0.01 {
                format!("{:.0}", v)
            } else {
                String::new()
            }
        } else {
            format!("{x:.0}")
        }
    };
    let y_fmt = |y: &f64| {
        if log10_y {
            let v = 10f64.powf(*y);
            if (y - y.round()).abs() < 0.01 {
                format!("{v:.0}")
            } else {
                String::new()
            }
        } else if y1 >= 100.0 {
            format!("{y:.0}")
        } else {
            format!("{y:.1}")
        }
    };
    let x_ticks = if log2_x { ((x1 - x0).round() as usize + 1).max(2) } else { 10 };
    let y_ticks = if log10_y { ((y1 - y0).round() as usize + 1).max(2) } else { 10 };
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .x_labels(x_ticks)
        .y_labels(y_ticks)
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&y_fmt)
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 15))
        .draw()
        .map_err(fail)?;
    let cap = (x1 - x0) * 0.006;
    for b in spread {
        let (x, lo, hi) = (tx(b.x), ty(b.lo), ty(b.hi));
        let style = color(b.color).stroke_width(1);
        chart
            .draw_series([
                PathElement::new(vec![(x, lo), (x, hi)], style),
                PathElement::new(vec![(x - cap, lo), (x + cap, lo)], style),
                PathElement::new(vec![(x - cap, hi), (x + cap, hi)], style),
            ])
            .map_err(fail)?;
    }
    for s in series {
        let c = color(s.color);
        let points: Vec<(f64, f64)> = s.points.iter().map(|&(x, y)| (tx(x), ty(y))).collect();
        let style = c.stroke_width(if s.dashed { 1 } else { 2 });
        let drawn = if s.dashed {
            chart.draw_series(DashedLineSeries::new(points.clone(), 6, 4, style)).map_err(fail)?
        } else {
            chart.draw_series(LineSeries::new(points.clone(), style)).map_err(fail)?
        };
        let w = if s.dashed { 1 } else { 3 };
        drawn
            .label(s.name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(w)));
        chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, c.filled()))).map_err(fail)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font((FONT, 14))
        .draw()
        .map_err(fail)?;
    root.present().map_err(fail)?;
    Ok(())
}

/// Whether `path` starts with the PNG signature and has a nonzero width and height.
pub fn looks_like_png(path: &Path) -> bool {
    let Ok(b) = std::fs::read(path) else { return false };
    b.len() > 24
        && b[..8] == [0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a]
        && &b[12..16] == b"IHDR"
        && u32::from_be_bytes([b[16], b[17], b[18], b[19]]) > 0
        && u32::from_be_bytes([b[20], b[21], b[22], b[23]]) > 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_are_pngs() {
        let dir = std::env::temp_dir().join(format!("waffle-chart-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let bar = dir.join("bar.png");
        bar_chart(&bar, "t", "s", "tps", &[("local".into(), 10.0, "10".into()), ("grid".into(), 20.0, "20".into())])
            .unwrap();
        assert!(looks_like_png(&bar));
        let line = dir.join("line.png");
        let s = Series {
            name: "a".into(),
            points: vec![(1.0, 10.0), (2.0, 100.0), (32.0, 1000.0)],
            dashed: false,
            color: 0,
        };
        let d = Series { name: "b".into(), points: vec![(1.0, 20.0), (32.0, 2000.0)], dashed: true, color: 1 };
        line_chart(&line, "t", "s", "threads", "us", &[s, d], true, true).unwrap();
        assert!(looks_like_png(&line));
        let spread = dir.join("spread.png");
        let m = Series { name: "median".into(), points: vec![(10.0, 100.0), (50.0, 150.0)], dashed: false, color: 0 };
        let bars =
            [Spread { x: 10.0, lo: 90.0, hi: 120.0, color: 0 }, Spread { x: 50.0, lo: 140.0, hi: 400.0, color: 0 }];
        line_chart_with_spread(&spread, "t", "s", "%", "tps", &[m], &bars, false, false).unwrap();
        assert!(looks_like_png(&spread));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
