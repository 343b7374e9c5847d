//! The HTML report of `evaluate --report`: one self-contained page (inline SVG drawn with
//! `plotters`, no scripts, no external files) with the outputs' figures, a per-layer SQNR bar
//! chart in program order with the first sharp drop marked, and per quantized activation the
//! float model's histogram with the quantized type's range marked.
//!
//! SVG text is rendered by the browser, so writing the report needs no font on this machine.

use crate::evaluate::{db, pct, ActivationHistogram, EvalReport, LayerReport};
use plotters::prelude::*;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

type Drawn = Result<String, String>;

/// Per-layer SQNR bars in program order; exact layers are drawn at the top of the axis, the
/// first sharp drop in red.
fn layer_chart(layers: &[LayerReport]) -> Drawn {
    let mut ordered: Vec<&LayerReport> = layers.iter().collect();
    ordered.sort_by_key(|l| l.order);
    let top = ordered
        .iter()
        .filter_map(|l| l.sqnr_db)
        .fold(20.0f64, f64::max)
        .min(120.0)
        + 5.0;
    let mut svg = String::new();
    {
        let width = (120 + 14 * ordered.len()).clamp(480, 1600) as u32;
        let root = SVGBackend::with_string(&mut svg, (width, 320)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let mut chart = ChartBuilder::on(&root)
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(50)
            .caption("SQNR per layer (program order)", ("sans-serif", 16))
            .build_cartesian_2d(0f64..ordered.len().max(1) as f64, 0f64..top)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .y_desc("dB")
            .x_desc("layer")
            .draw()
            .map_err(|e| e.to_string())?;
        chart
            .draw_series(ordered.iter().enumerate().map(|(i, l)| {
                let v = l.sqnr_db.unwrap_or(top).clamp(0.0, top);
                let color = if l.sharp_drop {
                    RED.filled()
                } else if l.sqnr_db.is_none() {
                    RGBColor(170, 170, 170).filled()
                } else {
                    RGBColor(68, 136, 102).filled()
                };
                Rectangle::new([(i as f64 + 0.1, 0.0), (i as f64 + 0.9, v)], color)
            }))
            .map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

/// The float values' histogram (log count) with the quantized range as two vertical lines.
fn histogram_chart(h: &ActivationHistogram) -> Drawn {
    let (lo, hi) = h.range;
    let x0 = h.edges.first().copied().unwrap_or(lo).min(lo);
    let x1 = h.edges.last().copied().unwrap_or(hi).max(hi);
    let pad = (x1 - x0).abs().max(1e-9) * 0.03;
    let ymax = h.counts.iter().map(|&c| ((c + 1) as f64).log10()).fold(1.0, f64::max) * 1.1;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (420, 200)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let mut chart = ChartBuilder::on(&root)
            .margin(8)
            .x_label_area_size(24)
            .y_label_area_size(40)
            .build_cartesian_2d((x0 - pad)..(x1 + pad), 0f64..ymax)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .disable_mesh()
            .y_desc("log10(count+1)")
            .x_labels(6)
            .draw()
            .map_err(|e| e.to_string())?;
        chart
            .draw_series(h.counts.iter().enumerate().filter(|(_, &c)| c > 0).map(|(i, &c)| {
                Rectangle::new(
                    [(h.edges[i], 0.0), (h.edges[i + 1], ((c + 1) as f64).log10())],
                    RGBColor(70, 110, 170).filled(),
                )
            }))
            .map_err(|e| e.to_string())?;
        for x in [lo, hi] {
            chart
                .draw_series(std::iter::once(PathElement::new(
                    vec![(x, 0.0), (x, ymax)],
                    RED.stroke_width(2),
                )))
                .map_err(|e| e.to_string())?;
        }
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

/// The whole page.
pub fn html(r: &EvalReport, title: &str) -> String {
    let mut h = format!(
        "<!doctype html><meta charset=utf-8><title>quantir: {t}</title><style>body{{font:14px sans-serif;margin:2em}}\
         td,th{{padding:2px 8px;text-align:left}}.drop{{color:#c22;font-weight:bold}}\
         .hist{{display:inline-block;margin:4px;vertical-align:top}}.hist p{{margin:0;font-size:12px;max-width:420px;word-break:break-all}}</style>\
         <h1>quantir evaluation: {t}</h1><p>{n} samples</p><table><tr><th>output</th><th>SQNR</th><th>cosine</th>\
         <th>max |error|</th><th>top-1 agreement</th><th>float accuracy</th><th>quantized accuracy</th></tr>",
        t = esc(title),
        n = r.samples
    );
    for o in &r.outputs {
        h += &format!(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.4}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&o.name),
            db(o.sqnr_db),
            o.cosine.map_or("-".into(), |c| format!("{c:.6}")),
            o.max_abs_error,
            pct(o.top1_agreement),
            pct(o.float_accuracy),
            pct(o.quantized_accuracy)
        );
    }
    h += "</table>";
    if !r.layers.is_empty() {
        h += "<h2>Per layer</h2>";
        match &r.first_sharp_drop {
            Some(k) => {
                h += &format!(
                    "<p class=drop>First sharp drop (≥ {:.0} dB below the layer before): {}</p>",
                    crate::evaluate::SHARP_DROP_DB,
                    esc(k)
                )
            }
            None => h += "<p>No sharp SQNR drop between consecutive layers.</p>",
        }
        match layer_chart(&r.layers) {
            Ok(svg) => h += &svg,
            Err(e) => h += &format!("<p>(chart not drawn: {})</p>", esc(&e)),
        }
        h += "<h3>Worst SQNR first</h3><table><tr><th>SQNR</th><th>op</th><th>runs at</th><th>tensor</th><th>raised by the target</th></tr>";
        for l in &r.layers {
            h += &format!(
                "<tr{}><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                if l.sharp_drop { " class=drop" } else { "" },
                db(l.sqnr_db),
                esc(&l.producer),
                esc(l.precision.as_deref().unwrap_or("")),
                esc(&l.key),
                esc(l.raised.as_deref().unwrap_or(""))
            );
        }
        h += "</table>";
    }
    if !r.histograms.is_empty() {
        h += "<h2>Quantized activations</h2><p>Float values on the evaluation data (log scale) and the \
              range the quantized type represents (red); values outside it are clipped.</p>";
        for a in &r.histograms {
            h += &format!(
                "<div class=hist><p>{} — range [{:.4}, {:.4}], clipped {:.4} %</p>",
                esc(&a.key),
                a.range.0,
                a.range.1,
                a.clipped * 100.0
            );
            match histogram_chart(a) {
                Ok(svg) => h += &svg,
                Err(e) => h += &format!("<p>(chart not drawn: {})</p>", esc(&e)),
            }
            h += "</div>";
        }
    }
    h
}
