//! Plots (plotters, SVG and PNG): line charts (bandwidth over time, latency CDF, scalability
//! curves) and bar charts (write amplification, GC and stall time), one series per policy.
//!
//! Owns: the font registration (DejaVu Sans through ab_glyph; without the font no plot is
//! drawn and the run says so) and [`line_plot`] / [`bar_plot`].

use anyhow::{anyhow, Result};
use plotters::prelude::*;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

const FONT_PATH: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";
const SIZE: (u32, u32) = (960, 540);
static FONT: OnceLock<bool> = OnceLock::new();

/// Register DejaVu Sans once; false if it is missing.
pub fn font_ready() -> bool {
    *FONT.get_or_init(|| {
        let Ok(bytes) = std::fs::read(FONT_PATH) else {
            return false;
        };
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok()
    })
}

fn color(i: usize) -> RGBColor {
    const C: [RGBColor; 8] = [
        RGBColor(214, 39, 40),
        RGBColor(31, 119, 180),
        RGBColor(44, 160, 44),
        RGBColor(255, 127, 14),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
    ];
    C[i % C.len()]
}

fn e<E: std::fmt::Debug>(x: E) -> anyhow::Error {
    anyhow!("plot: {x:?}")
}

/// A line chart description.
pub struct Lines<'a> {
    pub title: &'a str,
    pub x_desc: &'a str,
    pub y_desc: &'a str,
    pub series: &'a [(String, Vec<(f64, f64)>)],
    /// Logarithmic x axis (latency CDFs).
    pub log_x: bool,
    /// Draw points as well as lines (few points, e.g. thread counts).
    pub points: bool,
}

/// Write `dir/name.svg` and `dir/name.png`; returns the files written.
pub fn line_plot(dir: &Path, name: &str, l: &Lines) -> Result<Vec<PathBuf>> {
    if !font_ready() {
        return Ok(Vec::new());
    }
    let svg = dir.join(format!("{name}.svg"));
    let png = dir.join(format!("{name}.png"));
    draw_lines(SVGBackend::new(&svg, SIZE), l)?;
    draw_lines(BitMapBackend::new(&png, SIZE), l)?;
    Ok(vec![svg, png])
}

fn draw_lines<DB: DrawingBackend>(backend: DB, l: &Lines) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let root = backend.into_drawing_area();
    root.fill(&WHITE).map_err(e)?;
    let all = || l.series.iter().flat_map(|s| s.1.iter());
    let x_min = all().map(|p| p.0).fold(f64::INFINITY, f64::min);
    let x_max = all().map(|p| p.0).fold(f64::NEG_INFINITY, f64::max);
    let y_max = all().map(|p| p.1).fold(0.0, f64::max).max(1e-9) * 1.1;
    let (x_min, x_max) = if x_min.is_finite() && x_max > x_min {
        (x_min, x_max)
    } else {
        (0.0, 1.0)
    };
    let mut cb = ChartBuilder::on(&root);
    cb.caption(l.title, ("sans-serif", 20))
        .margin(14)
        .x_label_area_size(42)
        .y_label_area_size(70);
    macro_rules! body {
        ($chart:expr) => {{
            let mut chart = $chart;
            chart
                .configure_mesh()
                .x_desc(l.x_desc)
                .y_desc(l.y_desc)
                .draw()
                .map_err(e)?;
            for (i, (label, pts)) in l.series.iter().enumerate() {
                let c = color(i);
                chart
                    .draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(2)))
                    .map_err(e)?
                    .label(label.as_str())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2))
                    });
                if l.points {
                    chart
                        .draw_series(pts.iter().map(|&p| Circle::new(p, 4, c.filled())))
                        .map_err(e)?;
                }
            }
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperRight)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .draw()
                .map_err(e)?;
        }};
    }
    if l.log_x {
        let lo = x_min.max(1e-3);
        body!(cb
            .build_cartesian_2d((lo..x_max.max(lo * 10.0)).log_scale(), 0.0..y_max)
            .map_err(e)?);
    } else {
        body!(cb.build_cartesian_2d(x_min..x_max, 0.0..y_max).map_err(e)?);
    }
    root.present().map_err(e)?;
    Ok(())
}

/// Grouped bar chart: `groups` along x, one bar per series in each group.
pub struct Bars<'a> {
    pub title: &'a str,
    pub y_desc: &'a str,
    pub groups: &'a [String],
    /// (series label, one value per group).
    pub series: &'a [(String, Vec<f64>)],
}

pub fn bar_plot(dir: &Path, name: &str, b: &Bars) -> Result<Vec<PathBuf>> {
    if !font_ready() {
        return Ok(Vec::new());
    }
    let svg = dir.join(format!("{name}.svg"));
    let png = dir.join(format!("{name}.png"));
    draw_bars(SVGBackend::new(&svg, SIZE), b)?;
    draw_bars(BitMapBackend::new(&png, SIZE), b)?;
    Ok(vec![svg, png])
}

fn draw_bars<DB: DrawingBackend>(backend: DB, b: &Bars) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let root = backend.into_drawing_area();
    root.fill(&WHITE).map_err(e)?;
    let y_max = b
        .series
        .iter()
        .flat_map(|s| s.1.iter().copied())
        .fold(0.0, f64::max)
        .max(1e-9)
        * 1.15;
    let n = b.groups.len().max(1);
    let groups = b.groups.to_vec();
    let mut chart = ChartBuilder::on(&root)
        .caption(b.title, ("sans-serif", 20))
        .margin(14)
        .x_label_area_size(42)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..n as f64, 0.0..y_max)
        .map_err(e)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n * 2 + 1)
        .x_label_formatter(&move |x: &f64| {
            let i = x.floor() as usize;
            if (x - x.floor() - 0.5).abs() < 0.01 && i < groups.len() {
                groups[i].clone()
            } else {
                String::new()
            }
        })
        .y_desc(b.y_desc)
        .draw()
        .map_err(e)?;
    let k = b.series.len().max(1) as f64;
    let w = 0.8 / k;
    for (si, (label, vals)) in b.series.iter().enumerate() {
        let c = color(si);
        chart
            .draw_series(vals.iter().enumerate().map(|(g, &v)| {
                let x0 = g as f64 + 0.1 + si as f64 * w;
                Rectangle::new([(x0, 0.0), (x0 + w * 0.95, v)], c.filled())
            }))
            .map_err(e)?
            .label(label.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(e)?;
    root.present().map_err(e)?;
    Ok(())
}
