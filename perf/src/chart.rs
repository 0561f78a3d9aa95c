//! The results as an SVG bar chart: one group of bars per row of the table
//! (workload and W), one bar per engine or peer, ns/op on a log scale
//! (pingpong: p50 ns), so a person can look rather than read.

use std::fmt::Write as _;

/// One bar: which engine, which group, how many ns.
pub(crate) struct Bar<'a> {
    pub(crate) engine: &'a str,
    pub(crate) group: String,
    pub(crate) ns: f64,
}

/// Colours for the engines, in the order they first appear.
const PALETTE: [&str; 8] = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"];

/// Renders `bars` (with `title` on top) as a standalone SVG document.
pub(crate) fn svg(title: &str, bars: &[Bar]) -> String {
    let mut engines: Vec<&str> = Vec::new();
    let mut groups: Vec<&str> = Vec::new();
    for b in bars.iter().filter(|b| b.ns.is_finite() && b.ns > 0.0) {
        if !engines.contains(&b.engine) {
            engines.push(b.engine);
        }
        if !groups.contains(&b.group.as_str()) {
            groups.push(&b.group);
        }
    }
    let (lo, hi) = bars
        .iter()
        .filter(|b| b.ns.is_finite() && b.ns > 0.0)
        .fold((f64::MAX, f64::MIN), |(lo, hi), b| (lo.min(b.ns), hi.max(b.ns)));
    if engines.is_empty() {
        return format!("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"400\" height=\"40\"><text x=\"10\" y=\"25\">{}: no results</text></svg>\n", escape(title));
    }
    let (lo_exp, hi_exp) = (lo.log10().floor() as i32, hi.log10().ceil().max(lo.log10().floor() + 1.0) as i32);
    let bar_w = 14.0;
    let group_w = bar_w * engines.len() as f64 + 16.0;
    let (left, top, plot_h) = (70.0, 50.0, 320.0);
    let width = (left + group_w * groups.len() as f64 + 20.0).max(640.0);
    let height = top + plot_h + 120.0 + 18.0 * engines.len() as f64;
    let y = |ns: f64| top + plot_h * (1.0 - (ns.log10() - lo_exp as f64) / (hi_exp - lo_exp) as f64);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" height=\"{height:.0}\" font-family=\"sans-serif\" font-size=\"11\">"
    );
    let _ = writeln!(s, "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>");
    let _ = writeln!(s, "<text x=\"{left}\" y=\"24\" font-size=\"14\">{}</text>", escape(title));
    for e in lo_exp..=hi_exp {
        let yy = y(10f64.powi(e));
        let _ = writeln!(
            s,
            "<line x1=\"{left}\" x2=\"{:.0}\" y1=\"{yy:.1}\" y2=\"{yy:.1}\" stroke=\"#ddd\"/><text x=\"{:.0}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            width - 20.0,
            left - 6.0,
            yy + 4.0,
            ns_label(10f64.powi(e))
        );
    }
    let _ = writeln!(
        s,
        "<text transform=\"translate(16,{:.0}) rotate(-90)\" text-anchor=\"middle\">ns/op (pingpong: p50 ns), log scale</text>",
        top + plot_h / 2.0
    );
    for (gi, g) in groups.iter().enumerate() {
        let x0 = left + gi as f64 * group_w + 8.0;
        for b in bars.iter().filter(|b| b.group == *g && b.ns.is_finite() && b.ns > 0.0) {
            let ei = engines.iter().position(|e| *e == b.engine).unwrap_or(0);
            let x = x0 + ei as f64 * bar_w;
            let yy = y(b.ns);
            let _ = writeln!(
                s,
                "<rect x=\"{x:.1}\" y=\"{yy:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{}\"><title>{} {}: {:.1} ns</title></rect>",
                bar_w - 2.0,
                top + plot_h - yy,
                PALETTE[ei % PALETTE.len()],
                escape(b.engine),
                escape(g),
                b.ns
            );
        }
        let cx = x0 + bar_w * engines.len() as f64 / 2.0;
        let _ = writeln!(
            s,
            "<text transform=\"translate({cx:.1},{:.0}) rotate(-40)\" text-anchor=\"end\">{}</text>",
            top + plot_h + 14.0,
            escape(g)
        );
    }
    for (ei, e) in engines.iter().enumerate() {
        let ly = top + plot_h + 100.0 + 18.0 * ei as f64;
        let _ = writeln!(
            s,
            "<rect x=\"{left}\" y=\"{:.0}\" width=\"12\" height=\"12\" fill=\"{}\"/><text x=\"{:.0}\" y=\"{:.0}\">{}</text>",
            ly - 10.0,
            PALETTE[ei % PALETTE.len()],
            left + 18.0,
            ly,
            escape(e)
        );
    }
    s.push_str("</svg>\n");
    s
}

fn ns_label(ns: f64) -> String {
    match ns {
        n if n >= 1e6 => format!("{} ms", n / 1e6),
        n if n >= 1e3 => format!("{} µs", n / 1e3),
        n => format!("{n} ns"),
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_land_on_a_log_scale_with_a_legend() {
        let bars = [
            Bar { engine: "pooled", group: "chain W=0".into(), ns: 100.0 },
            Bar { engine: "per_device", group: "chain W=0".into(), ns: 1000.0 },
            Bar { engine: "pooled", group: "pingpong".into(), ns: 10.0 },
            Bar { engine: "omp<gcc>", group: "pingpong".into(), ns: f64::NAN },
        ];
        let svg = svg("t", &bars);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<title>").count(), 3, "a bar per finite result");
        assert!(svg.contains(">10 ns<") && svg.contains(">1 µs<"), "decade gridlines");
        assert!(svg.contains(">pooled<") && svg.contains(">per_device<"));
        assert!(!svg.contains("omp&lt;gcc&gt;"), "no legend for an engine without results");
    }
}
