//! The demo's pictures: horizontal bars in the terminal, and the same figures as an SVG file
//! (`fairlock demo --plot FILE`).

use std::fmt::Write as _;

/// Eighths of a character cell, for bars with sub-character resolution.
const EIGHTHS: [char; 8] = [' ', '▏', '▎', '▍', '▌', '▋', '▊', '▉'];

/// A bar `width` cells wide at most, `value / max` of it filled (a sliver for any non-zero
/// value; nothing when `max` is zero), padded to `width`.
pub fn bar(value: f64, max: f64, width: usize) -> String {
    let frac = if max > 0.0 {
        (value / max).clamp(0.0, 1.0)
    } else {
        0.0
    };
    let eighths = (frac * (width * 8) as f64).round() as usize;
    let eighths = if value > 0.0 && max > 0.0 {
        eighths.max(1)
    } else {
        eighths
    };
    let mut s = "█".repeat(eighths / 8);
    if eighths % 8 != 0 {
        s.push(EIGHTHS[eighths % 8]);
    }
    let used = eighths.div_ceil(8);
    s.push_str(&" ".repeat(width.saturating_sub(used)));
    s
}

/// The wait histogram's buckets: upper bounds in ns, and labels.
pub const BUCKETS: [(u64, &str); 6] = [
    (10_000, "< 10 us"),
    (100_000, "10-100 us"),
    (1_000_000, "0.1-1 ms"),
    (10_000_000, "1-10 ms"),
    (100_000_000, "10-100 ms"),
    (u64::MAX, ">= 100 ms"),
];

/// How many of `waits` (ns) fall in each of [`BUCKETS`].
pub fn histogram(waits: &[u64]) -> [u64; 6] {
    let mut h = [0u64; 6];
    for &w in waits {
        let i = BUCKETS.iter().position(|(hi, _)| w < *hi).unwrap_or(5);
        h[i] += 1;
    }
    h
}

/// One series of a chart: a label and its values (one per category).
pub struct Series<'a> {
    pub label: &'a str,
    pub values: Vec<f64>,
}

/// A chart for the SVG: a title, category labels, series drawn as grouped horizontal bars,
/// and how to print a value.
pub struct Chart<'a> {
    pub title: String,
    pub categories: Vec<String>,
    pub series: Vec<Series<'a>>,
    pub unit: fn(f64) -> String,
}

const COLOURS: [&str; 2] = ["#2a7ab9", "#d9822b"];

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// An SVG document with `charts` stacked vertically.
pub fn svg(title: &str, charts: &[Chart<'_>]) -> String {
    let (width, label_w, bar_w, row_h) = (760.0, 150.0, 470.0, 16.0);
    let mut body = String::new();
    let mut y = 40.0;
    for c in charts {
        let _ = writeln!(
            body,
            r#"<text x="10" y="{y}" font-weight="bold">{}</text>"#,
            escape(&c.title)
        );
        y += 12.0;
        for (si, s) in c.series.iter().enumerate() {
            let colour = COLOURS[si % COLOURS.len()];
            let x = label_w + 10.0 + si as f64 * 120.0;
            let _ = writeln!(
                body,
                r#"<rect x="{x}" y="{y}" width="10" height="10" fill="{colour}"/><text x="{}" y="{}">{}</text>"#,
                x + 14.0,
                y + 9.0,
                escape(s.label)
            );
        }
        y += 18.0;
        let max = c
            .series
            .iter()
            .flat_map(|s| s.values.iter().copied())
            .fold(0.0f64, f64::max);
        for (ci, cat) in c.categories.iter().enumerate() {
            let _ = writeln!(
                body,
                r#"<text x="{}" y="{}" text-anchor="end">{}</text>"#,
                label_w,
                y + row_h * c.series.len() as f64 / 2.0 + 4.0,
                escape(cat)
            );
            for (si, s) in c.series.iter().enumerate() {
                let v = s.values.get(ci).copied().unwrap_or(0.0);
                let w = if max > 0.0 { bar_w * v / max } else { 0.0 };
                let w = if v > 0.0 { w.max(1.0) } else { 0.0 };
                let colour = COLOURS[si % COLOURS.len()];
                let _ = writeln!(
                    body,
                    r#"<rect x="{}" y="{y}" width="{w:.1}" height="{}" fill="{colour}"/><text x="{}" y="{}">{}</text>"#,
                    label_w + 10.0,
                    row_h - 3.0,
                    label_w + 14.0 + w,
                    y + row_h - 5.0,
                    escape(&(c.unit)(v))
                );
                y += row_h;
            }
            y += 4.0;
        }
        y += 24.0;
    }
    format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{y}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="10" y="20" font-size="15" font-weight="bold">{}</text>
{body}</svg>
"#,
        escape(title)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_scale_and_pad() {
        assert_eq!(bar(0.0, 10.0, 4), "    ");
        assert_eq!(bar(10.0, 10.0, 4), "████");
        assert_eq!(bar(5.0, 10.0, 4), "██  ");
        assert_eq!(
            bar(0.001, 10.0, 4),
            "▏   ",
            "a sliver for any non-zero value"
        );
        assert_eq!(bar(1.0, 0.0, 2), "  ");
    }

    #[test]
    fn histogram_buckets() {
        let h = histogram(&[
            5_000,
            50_000,
            500_000,
            5_000_000,
            50_000_000,
            500_000_000,
            0,
        ]);
        assert_eq!(h, [2, 1, 1, 1, 1, 1]);
    }

    #[test]
    fn svg_is_one_document_with_every_label() {
        let c = Chart {
            title: "waits <&>".into(),
            categories: vec!["a".into(), "b".into()],
            series: vec![
                Series {
                    label: "fairlock",
                    values: vec![1.0, 2.0],
                },
                Series {
                    label: "flock(2)",
                    values: vec![0.0, 4.0],
                },
            ],
            unit: |v| format!("{v:.0}"),
        };
        let s = svg("demo", &[c]);
        assert!(s.starts_with("<svg") && s.trim_end().ends_with("</svg>"));
        assert!(s.contains("waits &lt;&amp;&gt;") && s.contains("flock(2)"));
        assert_eq!(s.matches("<rect").count(), 1 + 2 + 4);
    }
}
