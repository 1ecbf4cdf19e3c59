//! A hand-written SVG of the sweep: GB/s against workers, one panel per (pattern, cold/hot).
//!
//! In each panel: one line per (case, chunk, direct) for the swept cases (engine, io-threads,
//! fio); colour = chunk size (black: fio's one-expert blocks), dash = case, marker = direct on
//! (circle) / off (square). The single-configuration baselines (mmap, c-load, c-stream) are
//! grey horizontal lines labelled at the right. Workers are placed at equal steps (1, 4, 8, 18 read better than a linear axis).
//! No plotting crate: the SVG is a few hundred elements of text.

use super::report::{Mode, Row};
use super::size::Size;
use std::collections::BTreeSet;
use std::fmt::Write as _;

const PANEL_W: f64 = 520.0;
const PANEL_H: f64 = 320.0;
const MARGIN_L: f64 = 60.0;
const MARGIN_R: f64 = 110.0;
const MARGIN_T: f64 = 36.0;
const MARGIN_B: f64 = 44.0;
const COLORS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2",
];

fn swept(case: &str) -> bool {
    matches!(case, "engine" | "io-threads" | "fio") || case.starts_with("engine")
}

fn dash(case: &str) -> &'static str {
    match case {
        "engine-host" => "12,3,2,3",
        "io-threads" => "7,4",
        "fio" => "2,3",
        _ => "",
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Renders the rows as one SVG document (an empty-data note when there is nothing to plot).
pub fn svg(rows: &[Row], title: &str) -> String {
    let mut panels: Vec<(super::plan::Pattern, Mode)> = Vec::new();
    for r in rows {
        if !panels.contains(&(r.pattern, r.mode)) {
            panels.push((r.pattern, r.mode));
        }
    }
    let chunks: Vec<u64> = rows
        .iter()
        .filter(|r| swept(&r.case) && r.case != "fio")
        .map(|r| r.chunk)
        .filter(|&c| c != 0)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let color = |chunk: u64| -> &'static str {
        chunks
            .iter()
            .position(|&c| c == chunk)
            .map_or("#000000", |i| COLORS[i % COLORS.len()])
    };
    let cols = 2usize;
    let nrows = panels.len().div_ceil(cols).max(1);
    let legend_h = 70.0;
    let width = PANEL_W * cols as f64;
    let height = 40.0 + PANEL_H * nrows as f64 + legend_h;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="22" text-anchor="middle" font-size="14">{}</text>"#,
        width / 2.0,
        esc(title)
    );
    if panels.is_empty() {
        let _ = writeln!(s, r#"<text x="20" y="60">no rows</text></svg>"#);
        return s;
    }
    for (i, &(pattern, mode)) in panels.iter().enumerate() {
        let ox = PANEL_W * (i % cols) as f64;
        let oy = 40.0 + PANEL_H * (i / cols) as f64;
        panel(&mut s, rows, pattern, mode, ox, oy, &color);
    }
    // Legend.
    let ly = 40.0 + PANEL_H * nrows as f64 + 14.0;
    let mut x = 20.0;
    for &c in &chunks {
        let _ = writeln!(
            s,
            r#"<line x1="{x}" y1="{ly}" x2="{}" y2="{ly}" stroke="{}" stroke-width="2.5"/><text x="{}" y="{}">chunk {}</text>"#,
            x + 24.0,
            color(c),
            x + 28.0,
            ly + 4.0,
            Size(c)
        );
        x += 110.0;
    }
    let ly2 = ly + 22.0;
    let mut x = 20.0;
    for (case, label) in [
        ("engine", "engine (staged)"),
        ("engine-host", "engine-host"),
        ("io-threads", "io-threads (raw)"),
        ("fio", "fio"),
    ] {
        let _ = writeln!(
            s,
            r#"<line x1="{x}" y1="{ly2}" x2="{}" y2="{ly2}" stroke="black" stroke-width="2" stroke-dasharray="{}"/><text x="{}" y="{}">{label}</text>"#,
            x + 28.0,
            dash(case),
            x + 32.0,
            ly2 + 4.0
        );
        x += 140.0;
    }
    let _ = writeln!(
        s,
        r#"<circle cx="{x}" cy="{ly2}" r="3.5" fill="black"/><text x="{}" y="{}">direct on</text><rect x="{}" y="{}" width="7" height="7" fill="black"/><text x="{}" y="{}">direct off</text>"#,
        x + 8.0,
        ly2 + 4.0,
        x + 80.0,
        ly2 - 3.5,
        x + 92.0,
        ly2 + 4.0
    );
    let _ = writeln!(
        s,
        r##"<text x="20" y="{}" fill="#666">grey lines: single-configuration baselines (mmap = old path, c-load / c-stream = C engine paths)</text>"##,
        ly2 + 24.0
    );
    s.push_str("</svg>\n");
    s
}

fn panel(
    s: &mut String,
    rows: &[Row],
    pattern: super::plan::Pattern,
    mode: Mode,
    ox: f64,
    oy: f64,
    color: &dyn Fn(u64) -> &'static str,
) {
    let mine: Vec<&Row> = rows
        .iter()
        .filter(|r| r.pattern == pattern && r.mode == mode)
        .collect();
    let workers: Vec<usize> = mine
        .iter()
        .filter(|r| swept(&r.case))
        .map(|r| r.workers)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let ymax = mine.iter().map(|r| r.gbps).fold(0.0f64, f64::max).max(1e-3) * 1.12;
    let (x0, y0) = (ox + MARGIN_L, oy + MARGIN_T);
    let (w, h) = (PANEL_W - MARGIN_L - MARGIN_R, PANEL_H - MARGIN_T - MARGIN_B);
    let px = |wk: usize| -> f64 {
        let i = workers.iter().position(|&x| x == wk).unwrap_or(0);
        if workers.len() <= 1 {
            x0 + w / 2.0
        } else {
            x0 + w * i as f64 / (workers.len() - 1) as f64
        }
    };
    let py = |g: f64| y0 + h - h * g / ymax;
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle" font-size="12" font-weight="bold">{} / {}</text>"#,
        x0 + w / 2.0,
        oy + 22.0,
        pattern.name(),
        mode.name()
    );
    let _ = writeln!(
        s,
        r##"<rect x="{x0}" y="{y0}" width="{w}" height="{h}" fill="none" stroke="#999"/>"##
    );
    // Y grid and labels.
    for k in 0..=5 {
        let g = ymax * k as f64 / 5.0;
        let y = py(g);
        let _ = writeln!(
            s,
            r##"<line x1="{x0}" y1="{y}" x2="{}" y2="{y}" stroke="#eee"/><text x="{}" y="{}" text-anchor="end">{g:.2}</text>"##,
            x0 + w,
            x0 - 6.0,
            y + 4.0
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle" transform="rotate(-90 {} {})">GB/s</text>"#,
        ox + 16.0,
        y0 + h / 2.0,
        ox + 16.0,
        y0 + h / 2.0
    );
    for &wk in &workers {
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">{wk}</text>"#,
            px(wk),
            y0 + h + 16.0
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">workers</text>"#,
        x0 + w / 2.0,
        y0 + h + 32.0
    );
    // Swept series.
    let mut series: Vec<(String, u64, bool)> = Vec::new();
    for r in mine.iter().filter(|r| swept(&r.case)) {
        let k = (r.case.clone(), r.chunk, r.direct);
        if !series.contains(&k) {
            series.push(k);
        }
    }
    for (case, chunk, direct) in &series {
        let mut pts: Vec<(f64, f64)> = mine
            .iter()
            .filter(|r| &r.case == case && r.chunk == *chunk && r.direct == *direct)
            .map(|r| (px(r.workers), py(r.gbps)))
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        let col = color(*chunk);
        let path: Vec<String> = pts.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
        let _ = writeln!(
            s,
            r#"<polyline points="{}" fill="none" stroke="{col}" stroke-width="{}" stroke-dasharray="{}"/>"#,
            path.join(" "),
            if case == "fio" { 1.5 } else { 2.0 },
            dash(case)
        );
        for (x, y) in pts {
            if *direct {
                let _ = writeln!(s, r#"<circle cx="{x:.1}" cy="{y:.1}" r="3" fill="{col}"/>"#);
            } else {
                let _ = writeln!(
                    s,
                    r#"<rect x="{:.1}" y="{:.1}" width="6" height="6" fill="{col}"/>"#,
                    x - 3.0,
                    y - 3.0
                );
            }
        }
    }
    // Baselines, labels pushed apart so they never overlap.
    let mut base: Vec<&&Row> = mine.iter().filter(|r| !swept(&r.case)).collect();
    base.sort_by(|a, b| b.gbps.total_cmp(&a.gbps));
    let mut last_label = f64::NEG_INFINITY;
    for r in base {
        let y = py(r.gbps);
        let ly = (y + 4.0).max(last_label + 12.0);
        last_label = ly;
        let _ = writeln!(
            s,
            r##"<line x1="{x0}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="#888" stroke-width="1.2" stroke-dasharray="4,2"/><text x="{}" y="{ly:.1}" fill="#555">{} {:.2}</text>"##,
            x0 + w,
            x0 + w + 4.0,
            esc(&r.case),
            r.gbps
        );
    }
}

/// One series of a [`LinePanel`]: (name, (x, y) points, dashed).
pub type Series = (String, Vec<(f64, f64)>, bool);

/// One panel of [`line_panels`]: y (0..=`y_max`) against linear x, one polyline per series.
pub struct LinePanel {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub y_max: f64,
    /// (name, points, dashed). Colours follow the series order, the same in every panel.
    pub series: Vec<Series>,
}

/// A row of line-chart panels with one shared legend (the series names of the first panel):
/// the plot of `ds4-bench cache` (hit rate against cache size, one panel per trace).
pub fn line_panels(title: &str, panels: &[LinePanel]) -> String {
    let cols = panels.len().clamp(1, 3);
    let nrows = panels.len().div_ceil(cols).max(1);
    let names: Vec<&str> = panels
        .first()
        .map(|p| p.series.iter().map(|(n, _, _)| n.as_str()).collect())
        .unwrap_or_default();
    let legend_h = 20.0 * names.len().div_ceil(4) as f64 + 16.0;
    let width = PANEL_W * cols as f64;
    let height = 40.0 + PANEL_H * nrows as f64 + legend_h;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="22" text-anchor="middle" font-size="14">{}</text>"#,
        width / 2.0,
        esc(title)
    );
    for (i, p) in panels.iter().enumerate() {
        let ox = PANEL_W * (i % cols) as f64;
        let oy = 40.0 + PANEL_H * (i / cols) as f64;
        line_panel(&mut s, p, ox, oy);
    }
    let ly = 40.0 + PANEL_H * nrows as f64 + 12.0;
    for (i, name) in names.iter().enumerate() {
        let (x, y) = (20.0 + 150.0 * (i % 4) as f64, ly + 20.0 * (i / 4) as f64);
        let dashed = panels[0].series[i].2;
        let _ = writeln!(
            s,
            r#"<line x1="{x}" y1="{y}" x2="{}" y2="{y}" stroke="{}" stroke-width="2.5" stroke-dasharray="{}"/><text x="{}" y="{}">{}</text>"#,
            x + 24.0,
            COLORS[i % COLORS.len()],
            if dashed { "6,3" } else { "" },
            x + 28.0,
            y + 4.0,
            esc(name)
        );
    }
    s.push_str("</svg>\n");
    s
}

fn line_panel(s: &mut String, p: &LinePanel, ox: f64, oy: f64) {
    let (x0, y0) = (ox + MARGIN_L, oy + MARGIN_T);
    let (w, h) = (
        PANEL_W - MARGIN_L - MARGIN_R / 3.0,
        PANEL_H - MARGIN_T - MARGIN_B,
    );
    let xs = p
        .series
        .iter()
        .flat_map(|(_, pts, _)| pts.iter().map(|q| q.0));
    let (xmin, xmax) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
        (a.min(x), b.max(x))
    });
    let (xmin, xmax) = if xmin.is_finite() && xmax > xmin {
        (xmin, xmax)
    } else if xmin.is_finite() {
        (xmin - 1.0, xmin + 1.0)
    } else {
        (0.0, 1.0)
    };
    let px = |x: f64| x0 + w * (x - xmin) / (xmax - xmin);
    let ymax = p.y_max.max(1e-9);
    let py = |y: f64| y0 + h - h * y / ymax;
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle" font-size="12" font-weight="bold">{}</text>"#,
        x0 + w / 2.0,
        oy + 22.0,
        esc(&p.title)
    );
    let _ = writeln!(
        s,
        r##"<rect x="{x0}" y="{y0}" width="{w}" height="{h}" fill="none" stroke="#999"/>"##
    );
    for k in 0..=5 {
        let v = ymax * k as f64 / 5.0;
        let y = py(v);
        let _ = writeln!(
            s,
            r##"<line x1="{x0}" y1="{y}" x2="{}" y2="{y}" stroke="#eee"/><text x="{}" y="{}" text-anchor="end">{v:.2}</text>"##,
            x0 + w,
            x0 - 6.0,
            y + 4.0
        );
    }
    for k in 0..=4 {
        let v = xmin + (xmax - xmin) * k as f64 / 4.0;
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{}" text-anchor="middle">{v:.0}</text>"#,
            px(v),
            y0 + h + 16.0
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text><text x="{}" y="{}" text-anchor="middle" transform="rotate(-90 {} {})">{}</text>"#,
        x0 + w / 2.0,
        y0 + h + 32.0,
        esc(&p.x_label),
        ox + 16.0,
        y0 + h / 2.0,
        ox + 16.0,
        y0 + h / 2.0,
        esc(&p.y_label)
    );
    for (i, (_, pts, dashed)) in p.series.iter().enumerate() {
        let col = COLORS[i % COLORS.len()];
        let path: Vec<String> = pts
            .iter()
            .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
            .collect();
        let _ = writeln!(
            s,
            r#"<polyline points="{}" fill="none" stroke="{col}" stroke-width="2" stroke-dasharray="{}"/>"#,
            path.join(" "),
            if *dashed { "6,3" } else { "" }
        );
        for &(x, y) in pts {
            let _ = writeln!(
                s,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{col}"/>"#,
                px(x),
                py(y)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::report::sample_row;
    use super::*;

    #[test]
    fn svg_has_series_and_baselines() {
        let rows = vec![
            sample_row("engine", 1, 1 << 20, 1.0),
            sample_row("engine", 4, 1 << 20, 2.0),
            sample_row("engine", 4, 4 << 20, 2.5),
            sample_row("fio", 4, 1 << 20, 2.2),
            sample_row("mmap", 1, 1 << 20, 0.4),
        ];
        let s = svg(&rows, "t <x>");
        assert!(s.starts_with("<svg"));
        assert!(s.trim_end().ends_with("</svg>"));
        assert_eq!(s.matches("<polyline").count(), 3);
        assert!(s.contains("mmap 0.40"));
        assert!(s.contains("t &lt;x&gt;"));
        assert!(s.contains("chunk 4MiB"));
    }

    #[test]
    fn line_panels_draw_every_series() {
        let panel = |t: &str| LinePanel {
            title: t.into(),
            x_label: "x".into(),
            y_label: "y".into(),
            y_max: 1.0,
            series: vec![
                ("a".into(), vec![(1.0, 0.2), (2.0, 0.4)], false),
                ("b<".into(), vec![(1.0, 0.3), (2.0, 0.5)], true),
            ],
        };
        let s = line_panels("hit rate", &[panel("p1"), panel("p2")]);
        assert!(s.starts_with("<svg") && s.trim_end().ends_with("</svg>"));
        assert_eq!(s.matches("<polyline").count(), 4);
        assert!(s.contains("b&lt;") && s.contains("p2"));
    }
}
