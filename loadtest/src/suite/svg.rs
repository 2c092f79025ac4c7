//! Line charts as inline SVG, so the HTML report is one self-contained file.

use std::fmt::Write as _;

/// One line of a chart: a name for the legend and its (x, y) points.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// Points in drawing order.
    pub points: Vec<(f64, f64)>,
}

/// A chart: title, axis labels, a log-scaled y axis or not, and its lines.
#[derive(Debug, Clone, PartialEq)]
pub struct Chart {
    /// Title above the plot.
    pub title: String,
    /// X axis label.
    pub x_label: String,
    /// Y axis label.
    pub y_label: String,
    /// Scale y logarithmically (throughput spans decades).
    pub log_y: bool,
    /// The lines.
    pub series: Vec<Series>,
}

const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 400.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 190.0;
const TOP: f64 = 36.0;
const BOTTOM: f64 = 50.0;
const TICKS: usize = 5;
/// Line colours, one per series in turn (colour-blind-safe palette).
const COLOURS: [&str; 8] = [
    "#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#000000", "#f0e442",
];

impl Chart {
    /// Renders the chart as an `<svg>` element (empty series are skipped;
    /// a chart with no finite point says so instead of drawing axes).
    pub fn to_svg(&self) -> String {
        let y_of = |y: f64| if self.log_y { y.log10() } else { y };
        let usable =
            |&(x, y): &(f64, f64)| x.is_finite() && y.is_finite() && (!self.log_y || y > 0.0);
        let pts: Vec<(f64, f64)> = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().copied().filter(usable))
            .map(|(x, y)| (x, y_of(y)))
            .collect();
        let mut out = String::new();
        let _ = write!(
            out,
            r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" font-family="sans-serif" font-size="12">"#
        );
        let _ = write!(
            out,
            r#"<text x="{}" y="20" text-anchor="middle" font-size="14">{}</text>"#,
            WIDTH / 2.0,
            escape(&self.title)
        );
        if pts.is_empty() {
            let _ = write!(
                out,
                r#"<text x="{}" y="{}" text-anchor="middle">no data</text></svg>"#,
                WIDTH / 2.0,
                HEIGHT / 2.0
            );
            return out;
        }
        let (x0, x1) = padded(pts.iter().map(|p| p.0));
        let (y0, y1) = padded(pts.iter().map(|p| p.1));
        let (pw, ph) = (WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM);
        let sx = |x: f64| LEFT + (x - x0) / (x1 - x0) * pw;
        let sy = |y: f64| TOP + ph - (y - y0) / (y1 - y0) * ph;
        let _ = write!(
            out,
            r##"<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="#888"/>"##
        );
        for i in 0..=TICKS {
            let f = i as f64 / TICKS as f64;
            let (x, y) = (x0 + f * (x1 - x0), y0 + f * (y1 - y0));
            let ylabel = if self.log_y { 10f64.powf(y) } else { y };
            let _ = write!(
                out,
                r##"<line x1="{0:.1}" y1="{1}" x2="{0:.1}" y2="{2}" stroke="#eee"/><text x="{0:.1}" y="{3}" text-anchor="middle">{4}</text>"##,
                sx(x),
                TOP,
                TOP + ph,
                TOP + ph + 16.0,
                tick(x)
            );
            let _ = write!(
                out,
                r##"<line x1="{1}" y1="{0:.1}" x2="{2}" y2="{0:.1}" stroke="#eee"/><text x="{3}" y="{4:.1}" text-anchor="end">{5}</text>"##,
                sy(y),
                LEFT,
                LEFT + pw,
                LEFT - 6.0,
                sy(y) + 4.0,
                tick(ylabel)
            );
        }
        let _ = write!(
            out,
            r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
            LEFT + pw / 2.0,
            HEIGHT - 10.0,
            escape(&self.x_label)
        );
        let _ = write!(
            out,
            r#"<text transform="translate(16 {}) rotate(-90)" text-anchor="middle">{}{}</text>"#,
            TOP + ph / 2.0,
            escape(&self.y_label),
            if self.log_y { " (log)" } else { "" }
        );
        let drawn = self.series.iter().filter(|s| s.points.iter().any(usable));
        for (i, s) in drawn.enumerate() {
            let colour = COLOURS[i % COLOURS.len()];
            let coords: Vec<String> = s
                .points
                .iter()
                .copied()
                .filter(usable)
                .map(|(x, y)| format!("{:.1},{:.1}", sx(x), sy(y_of(y))))
                .collect();
            let _ = write!(
                out,
                r#"<polyline fill="none" stroke="{colour}" stroke-width="2" points="{}"/>"#,
                coords.join(" ")
            );
            for c in &coords {
                let (cx, cy) = c.split_once(',').unwrap_or(("0", "0"));
                let _ = write!(
                    out,
                    r#"<circle cx="{cx}" cy="{cy}" r="3" fill="{colour}"/>"#
                );
            }
            let ly = TOP + 10.0 + 18.0 * i as f64;
            let lx = LEFT + pw + 12.0;
            let _ = write!(
                out,
                r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{colour}" stroke-width="3"/><text x="{}" y="{}">{}</text>"#,
                lx + 18.0,
                lx + 24.0,
                ly + 4.0,
                escape(&s.name)
            );
        }
        out.push_str("</svg>");
        out
    }
}

/// The range of `values` with 5 % room on each side (a unit around a
/// single value).
fn padded(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    if hi - lo < 1e-12 {
        return (lo - 0.5, hi + 0.5);
    }
    let pad = (hi - lo) * 0.05;
    (lo - pad, hi + pad)
}

/// A tick label with a precision that suits its size.
fn tick(v: f64) -> String {
    let a = v.abs();
    if a >= 10_000.0 {
        format!("{:.0}k", v / 1000.0)
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

/// Escapes text for SVG and HTML.
pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chart_draws_one_polyline_per_series_with_data_and_escapes_text() {
        let chart = Chart {
            title: "q/s <vs> recall".into(),
            x_label: "recall@10".into(),
            y_label: "q/s".into(),
            log_y: true,
            series: vec![
                Series {
                    name: "eddy & co".into(),
                    points: vec![(0.9, 1000.0), (0.95, 500.0), (0.99, 0.0)],
                },
                Series {
                    name: "empty".into(),
                    points: vec![],
                },
            ],
        };
        let svg = chart.to_svg();
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        assert_eq!(svg.matches("<polyline").count(), 1);
        // The zero is left out of a log axis: two circles, not three.
        assert_eq!(svg.matches("<circle").count(), 2);
        assert!(svg.contains("q/s &lt;vs&gt; recall") && svg.contains("eddy &amp; co"));
        assert!(!svg.contains("empty"));
        let none = Chart {
            series: vec![],
            ..chart
        };
        assert!(none.to_svg().contains("no data"));
    }
}
