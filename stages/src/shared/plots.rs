//! PNG plots for the stage folders: plotters draws into an RGB buffer, `png` encodes it (no image
//! crate). Text needs a TrueType font: `$TGRAG_FONT`, else DejaVu Sans / Liberation Sans / Arial at
//! their usual places on Linux, macOS and Windows; without one the plots are drawn without text.
//! The same inputs and font give the same bytes.

use std::sync::OnceLock;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::{FontStyle, register_font};

use crate::{Result, StageError};

const FONT_PATHS: [&str; 6] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/System/Library/Fonts/Supplemental/Arial.ttf",
    "C:\\Windows\\Fonts\\arial.ttf",
];

/// Registers the plot font once; whether one was found.
pub fn font_available() -> bool {
    static FONT: OnceLock<bool> = OnceLock::new();
    *FONT.get_or_init(|| {
        let candidates = std::env::var("TGRAG_FONT").into_iter().chain(FONT_PATHS.iter().map(|s| s.to_string()));
        for path in candidates {
            if let Ok(bytes) = std::fs::read(&path) {
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                    return true;
                }
            }
        }
        false
    })
}

/// A named line (or point cloud) of a chart.
pub struct Series<'a> {
    pub name: &'a str,
    pub points: Vec<(f64, f64)>,
}

/// How a chart draws its series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// Lines with a dot at every point.
    Lines,
    /// Small dots only (scatter).
    Dots,
}

fn draw_err(e: impl std::fmt::Display) -> StageError {
    StageError::Internal(format!("drawing a plot: {e}"))
}

fn bounds(series: &[Series<'_>]) -> ((f64, f64), (f64, f64)) {
    let pts = || series.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::INFINITY, f64::NEG_INFINITY, f64::INFINITY, f64::NEG_INFINITY);
    for &(x, y) in pts().filter(|p| p.0.is_finite() && p.1.is_finite()) {
        (x0, x1, y0, y1) = (x0.min(x), x1.max(x), y0.min(y), y1.max(y));
    }
    if x0 > x1 {
        return ((0.0, 1.0), (0.0, 1.0));
    }
    let pad = |a: f64, b: f64| {
        let d = if b > a { (b - a) * 0.05 } else { a.abs().max(1.0) * 0.05 };
        (a - d, b + d)
    };
    (pad(x0, x1), pad(y0, y1))
}

/// A chart as PNG bytes.
pub fn chart(title: &str, x_desc: &str, y_desc: &str, series: &[Series<'_>], mark: Mark, (w, h): (u32, u32)) -> Result<Vec<u8>> {
    let text = font_available();
    let mut buf = vec![0u8; w as usize * h as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut buf, (w, h)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_err)?;
        let ((x0, x1), (y0, y1)) = bounds(series);
        let mut builder = ChartBuilder::on(&root);
        builder.margin(16);
        if text {
            builder.caption(title, ("sans-serif", 22)).x_label_area_size(44).y_label_area_size(64);
        }
        let mut chart = builder.build_cartesian_2d(x0..x1, y0..y1).map_err(draw_err)?;
        let mut mesh = chart.configure_mesh();
        if text {
            mesh.x_desc(x_desc).y_desc(y_desc);
        } else {
            mesh.x_labels(0).y_labels(0);
        }
        mesh.draw().map_err(draw_err)?;
        for (i, s) in series.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            let pts = s.points.iter().copied().filter(|p| p.0.is_finite() && p.1.is_finite());
            let anno = match mark {
                Mark::Lines => {
                    chart.draw_series(pts.clone().map(|p| Circle::new(p, 4, color.filled()))).map_err(draw_err)?;
                    chart.draw_series(LineSeries::new(pts, color.stroke_width(2))).map_err(draw_err)?
                }
                Mark::Dots => chart.draw_series(pts.map(|p| Circle::new(p, 1, color.mix(0.5).filled()))).map_err(draw_err)?,
            };
            if text {
                anno.label(s.name).legend(move |(x, y)| Rectangle::new([(x, y - 4), (x + 14, y + 4)], color.filled()));
            }
        }
        if text && series.len() > 1 {
            chart.configure_series_labels().background_style(WHITE.mix(0.85)).border_style(BLACK).draw().map_err(draw_err)?;
        }
        root.present().map_err(draw_err)?;
    }
    encode_png(&buf, w, h)
}

/// A grouped bar chart: one group per category along x, one bar per series in each group (a
/// missing value draws no bar). Categories are labelled below their group.
pub fn bars(title: &str, y_desc: &str, categories: &[String], series: &[(&str, Vec<Option<f64>>)], (w, h): (u32, u32)) -> Result<Vec<u8>> {
    let text = font_available();
    let mut buf = vec![0u8; w as usize * h as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut buf, (w, h)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_err)?;
        let vals = || series.iter().flat_map(|s| s.1.iter().flatten().copied()).filter(|v| v.is_finite());
        let (lo, hi) = (vals().fold(0.0f64, f64::min), vals().fold(0.0f64, f64::max));
        // Headroom above the tallest bar for the legend.
        let (lo, hi) = if hi > lo { (lo, hi + (hi - lo) * 0.4) } else { (0.0, 1.0) };
        let n = categories.len().max(1);
        let cats: Vec<String> = categories
            .iter()
            .map(|c| if c.chars().count() > 18 { c.chars().take(17).collect::<String>() + "…" } else { c.clone() })
            .collect();
        // Names wider than their group (about 7 px a character) are written downwards instead.
        let longest = cats.iter().map(|c| c.chars().count()).max().unwrap_or(0) as u32;
        let rotate = longest * 7 > (w.saturating_sub(112)) / n as u32;
        let mut builder = ChartBuilder::on(&root);
        builder.margin(16);
        if text {
            let area = if rotate { (longest * 7 + 16).min(h / 3) } else { 60 };
            builder.caption(title, ("sans-serif", 20)).x_label_area_size(area).y_label_area_size(64);
        }
        let mut chart = builder.build_cartesian_2d(0.0..n as f64, lo..hi).map_err(draw_err)?;
        // Labels every half unit: the category names sit at the group centres (i + 0.5).
        let label = |x: &f64| {
            let i = x.floor() as usize;
            if (x - x.floor() - 0.5).abs() < 1e-6 && i < cats.len() { cats[i].clone() } else { String::new() }
        };
        let mut mesh = chart.configure_mesh();
        mesh.disable_x_mesh();
        if text {
            // Rotated names are drawn below (plotters centres its labels on the tick).
            mesh.y_desc(y_desc).x_labels(if rotate { 0 } else { n * 2 + 1 }).x_label_formatter(&label);
        } else {
            mesh.x_labels(0).y_labels(0);
        }
        mesh.draw().map_err(draw_err)?;
        let k = series.len().max(1) as f64;
        let width = 0.8 / k;
        for (j, (name, values)) in series.iter().enumerate() {
            let color = Palette99::pick(j).to_rgba();
            let rects = values.iter().enumerate().filter_map(|(i, v)| {
                let v = (*v)?.clamp(lo, hi);
                let x0 = i as f64 + 0.1 + j as f64 * width;
                Some(Rectangle::new([(x0, 0.0f64.clamp(lo, hi)), (x0 + width * 0.92, v)], color.filled()))
            });
            let anno = chart.draw_series(rects).map_err(draw_err)?;
            if text {
                anno.label(*name).legend(move |(x, y)| Rectangle::new([(x, y - 4), (x + 14, y + 4)], color.filled()));
            }
        }
        if text && rotate {
            // Written downwards from just below the axis, first letter at the group's centre.
            let font = ("sans-serif", 12).into_font().transform(FontTransform::Rotate90);
            let style = TextStyle::from(font).pos(Pos::new(HPos::Left, VPos::Top));
            for (i, c) in cats.iter().enumerate() {
                let (x, y) = chart.backend_coord(&(i as f64 + 0.5, lo));
                root.draw(&Text::new(c.clone(), (x + 6, y + 8), style.clone())).map_err(draw_err)?;
            }
        }
        if text && series.len() > 1 {
            // In the headroom above the bars (plotters' default, middle right, covers the last group).
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperRight)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .draw()
                .map_err(draw_err)?;
        }
        root.present().map_err(draw_err)?;
    }
    encode_png(&buf, w, h)
}

/// A histogram of `values` in `bins` equal-width bins (non-finite values left out).
pub fn histogram(title: &str, x_desc: &str, values: &[f64], bins: usize, (w, h): (u32, u32)) -> Result<Vec<u8>> {
    let v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    let (lo, hi) = (v.iter().copied().fold(f64::INFINITY, f64::min), v.iter().copied().fold(f64::NEG_INFINITY, f64::max));
    let bins = bins.max(1);
    let (lo, hi) = if v.is_empty() {
        (0.0, 1.0)
    } else if hi > lo {
        (lo, hi)
    } else {
        (lo - 0.5, lo + 0.5)
    };
    let step = (hi - lo) / bins as f64;
    let mut count = vec![0.0f64; bins];
    for x in &v {
        count[(((x - lo) / step) as usize).min(bins - 1)] += 1.0;
    }
    let text = font_available();
    let mut buf = vec![0u8; w as usize * h as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut buf, (w, h)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_err)?;
        let top = count.iter().copied().fold(1.0f64, f64::max) * 1.08;
        let mut builder = ChartBuilder::on(&root);
        builder.margin(16);
        if text {
            builder.caption(title, ("sans-serif", 20)).x_label_area_size(44).y_label_area_size(64);
        }
        let mut chart = builder.build_cartesian_2d(lo..hi, 0.0..top).map_err(draw_err)?;
        let mut mesh = chart.configure_mesh();
        if text {
            mesh.x_desc(x_desc).y_desc("count");
        } else {
            mesh.x_labels(0).y_labels(0);
        }
        mesh.draw().map_err(draw_err)?;
        let color = Palette99::pick(0).to_rgba();
        chart
            .draw_series(count.iter().enumerate().map(|(i, &c)| {
                let x0 = lo + i as f64 * step;
                Rectangle::new([(x0, 0.0), (x0 + step * 0.95, c)], color.filled())
            }))
            .map_err(draw_err)?;
        root.present().map_err(draw_err)?;
    }
    encode_png(&buf, w, h)
}

/// RGB8 pixels → PNG bytes.
pub fn encode_png(rgb: &[u8], w: u32, h: u32) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut out, w, h);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        let mut writer = enc.write_header().map_err(draw_err)?;
        writer.write_image_data(rgb).map_err(draw_err)?;
        writer.finish().map_err(draw_err)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes a PNG back to (width, height, RGB pixels).
    fn decode(bytes: &[u8]) -> (u32, u32, Vec<u8>) {
        let dec = png::Decoder::new(std::io::Cursor::new(bytes));
        let mut reader = dec.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size().unwrap()];
        let info = reader.next_frame(&mut buf).unwrap();
        buf.truncate(info.buffer_size());
        (info.width, info.height, buf)
    }

    #[test]
    fn bars_and_histograms_draw_their_values_deterministically() {
        let cats = vec!["bm25".to_string(), "mor".to_string()];
        let series = vec![("hit1", vec![Some(0.2), Some(0.8)]), ("mrr", vec![Some(0.3), None])];
        let a = bars("synthetic", "value", &cats, &series, (400, 300)).unwrap();
        assert_eq!(a, bars("synthetic", "value", &cats, &series, (400, 300)).unwrap());
        let (w, h, px) = decode(&a);
        assert_eq!((w, h), (400, 300));
        let colour = |j: usize| {
            let c = Palette99::pick(j).to_rgba();
            px.chunks(3).filter(|p| *p == [c.0, c.1, c.2]).count()
        };
        // Both series are drawn, and the taller bars of the first cover more pixels.
        assert!(colour(0) > colour(1) && colour(1) > 100, "{} {}", colour(0), colour(1));
        let hist = histogram("latency", "ms", &[1.0, 1.5, 2.0, 9.0, f64::NAN], 4, (300, 200)).unwrap();
        let (_, _, hp) = decode(&hist);
        let c = Palette99::pick(0).to_rgba();
        assert!(hp.chunks(3).filter(|p| *p == [c.0, c.1, c.2]).count() > 100);
    }

    #[test]
    fn png_round_trips() {
        let rgb: Vec<u8> = (0..4 * 3 * 3).map(|i| (i * 7) as u8).collect();
        let (w, h, px) = decode(&encode_png(&rgb, 4, 3).unwrap());
        assert_eq!((w, h, px), (4, 3, rgb));
    }

    #[test]
    fn a_chart_is_a_deterministic_png_with_the_series_drawn() {
        let s = [Series { name: "proximity", points: vec![(1.0, 0.1), (2.0, 0.2), (3.0, 0.25)] }];
        let a = chart("correlation", "K", "Pearson r", &s, Mark::Lines, (320, 240)).unwrap();
        assert_eq!(a, chart("correlation", "K", "Pearson r", &s, Mark::Lines, (320, 240)).unwrap());
        let (w, h, px) = decode(&a);
        assert_eq!((w, h), (320, 240));
        // The series colour (Palette99's first) appears; most of the canvas stays white.
        let c = Palette99::pick(0).to_rgba();
        let pixels: Vec<&[u8]> = px.chunks(3).collect();
        assert!(pixels.iter().filter(|p| **p == [c.0, c.1, c.2]).count() > 50);
        assert!(pixels.iter().filter(|p| **p == [255, 255, 255]).count() > pixels.len() / 2);
    }
}
