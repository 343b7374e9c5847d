//! GPTQ's Gram matrices measured on the quantized model's inputs (asymmetric calibration,
//! `--gptq-asymmetric`): the float model and a quantized form of it run side by side on the
//! calibration samples, and each layer's float input x and quantized input x̃ (the quantized
//! model's value there, through the layer's own input quantization) make one patch of 2k, so
//! that one Gram matrix of the pairs holds X̃ X̃ᵀ and X X̃ᵀ. GPTQ then rounds each row toward
//! w M (`params::gptq::target_map`), the weights that map what the layer will read to what the
//! float layer computes, so each layer makes up for the error of the quantized layers before
//! it, not only for its own rounding.
//!
//! ```text
//! %y = onnx.Conv(%x, %w)      float run: x        quantized run: fq(x̃)
//!   G = Σ [p(x); p(x̃)] [p(x); p(x̃)]ᵀ   (2k × 2k)   →   H̃ = G[x̃, x̃],  C = G[x, x̃]
//! ```

use super::{add_sample, gram_partial, readers, select_layers, Partial, Total, WeightGrams};
use crate::calibration::StatsFile;
use crate::interp::Program;
use crate::params::gptq::{target_map, Gram};
use crate::params::{fake_quant, Rounding};
use crate::quantize::{plan, QuantConfig, QuantizeError};
use crate::run::{run_side_by_side, Feed, SideBySide};
use crate::tensor::Tensor;
use melior::ir::Module;
use std::collections::HashSet;
use std::sync::Arc;

/// The ridge that pulls a target map toward the identity, as a fraction of H̃'s mean diagonal
/// per input a row has per patch measured: k/n is how many of the map's unknowns each patch
/// must pin down. A layer deep in a network sees few patches (fer's last 3×3 convolution: 16
/// positions × 32 samples for k = 1,152), and there a map fitted with GPTQ's 1 % alone maps
/// the calibration samples' inputs, not the layer's: fer scored 44.4 dB on its calibration
/// samples and 22.7 on the test ones. At 10: 30.2 and 28.8 (3: 24.2 on the swapped fold; 30:
/// within 0.4 dB of 10 on both folds).
pub const RIDGE_PER_INPUT: f64 = 10.0;

/// Measures, on the samples of `feed`, the side-by-side Gram matrices of the layers of `wave`
/// (those `wave` quantized-weight layers deep) whose int8/int4 weight `config` quantizes:
/// `float` is `module` (prepared, calibrated as `stats` say) compiled, `quantized` its
/// quantized form compiled, with every layer of an earlier wave already rounded as it will
/// be. A layer whose input the quantized model does not compute under the same key is left
/// out, and said. Also says whether deeper waves are left.
pub fn measure_paired_grams(
    module: &Module,
    [float, quantized]: [&Program; 2],
    stats: &StatsFile,
    config: &QuantConfig,
    feed: Feed,
    threads: usize,
    wave: usize,
) -> Result<(WeightGrams, bool), QuantizeError> {
    let failed = |m: String| QuantizeError::Stats(format!("GPTQ (asymmetric): {m}"));
    let samples = feed.len().unwrap_or(32).max(1);
    let plan = plan(module, Some(stats), config)?;
    let (mut layers, mut left, deeper) = select_layers(module, config, samples, Some((&plan, wave)))?;
    drop(plan);
    let computed: HashSet<&str> = quantized.values.iter().map(|v| v.key.as_str()).collect();
    layers.retain(|l| {
        let there = computed.contains(l.input.as_str());
        if !there {
            left.push((
                l.out_key.clone(),
                "the quantized model does not compute its input".into(),
            ));
        }
        there
    });
    if layers.is_empty() {
        // a wave of layers no Gram matrix is measured for (a ConvTranspose): nothing to run
        return Ok((
            WeightGrams {
                left,
                ..Default::default()
            },
            deeper,
        ));
    }
    let (readers, keys) = readers(&layers);
    let paired: HashSet<String> = keys.iter().cloned().collect();
    let watch_f = float.watch(&keys).map_err(|e| failed(e.to_string()))?;
    let watch_q = quantized.watch(&keys).map_err(|e| failed(e.to_string()))?;
    let wide: Vec<_> = layers.iter().map(|l| l.layout.side_by_side()).collect();
    type State = Vec<Option<(Partial, u64)>>;
    let compare = |s: &mut State, key: &str, f: &Tensor, q: &Tensor| -> Result<(), String> {
        let (Tensor::F32(f), Tensor::F32(q)) = (f, q) else {
            return Ok(());
        };
        for &i in readers.get(key).map_or(&[][..], |v| v.as_slice()) {
            let l = &layers[i];
            let at = |e: String| format!("{}: {e}", l.out_key);
            if s[i].is_some() {
                return Err(at("its input was computed twice in one sample".into()));
            }
            // what the layer reads: the quantized model's value through its input's Q/DQ
            let read = match &l.input_params {
                Some(p) => fake_quant(&q.view(), p, Rounding::HalfEven).map_err(|e| at(e.to_string()))?,
                None => q.clone(),
            };
            let both = l.layout.interleave(&f.view(), &read.view()).map_err(at)?;
            s[i] = Some(gram_partial(&both.view(), &wide[i], l.per_sample).map_err(at)?);
        }
        Ok(())
    };
    let mut totals: Vec<Total> = wide.iter().map(|w| Total::new(w.k)).collect();
    let mut combine = |_: usize, _: [Vec<Tensor>; 2], _: (), s: State| {
        add_sample(&mut totals, s);
        Ok(())
    };
    let n = run_side_by_side(
        [float, quantized],
        feed,
        threads,
        [&watch_f, &watch_q],
        &paired,
        SideBySide {
            init: &|| ((), vec![None; layers.len()]),
            observe_a: &|_, _, _| Ok(()),
            compare: &compare,
            combine: &mut combine,
        },
        "GPTQ (asymmetric)",
    )
    .map_err(|e| failed(e.to_string()))?;
    let mut out = WeightGrams {
        samples: n,
        left,
        ..Default::default()
    };
    for (l, t) in layers.into_iter().zip(totals) {
        let Some((sums, patches)) = t.finish().filter(|(_, p)| *p > 0) else {
            out.left.push((l.out_key, "its input was never an f32 value".into()));
            continue;
        };
        match split(&l.layout, &sums, patches).and_then(|(hq, targets)| {
            let mut gram = Gram {
                groups: l.layout.groups,
                k: l.layout.k,
                sums: hq,
                patches,
                factors: Vec::new(),
                targets,
            };
            gram.factorize()?;
            Ok(gram)
        }) {
            Ok(gram) => {
                out.grams.insert(l.out_key, Arc::new(gram));
            }
            Err(e) => out.left.push((l.out_key, e.to_string())),
        }
    }
    Ok((out, deeper))
}

/// Each group's H̃ = Σ x̃ x̃ᵀ and target map (from C = Σ x x̃ᵀ), out of the side-by-side sums
/// (one 2k × 2k block per group) of `layout`.
fn split(
    layout: &crate::dialects::weight_layout::WeightLayout,
    sums: &[f64],
    patches: u64,
) -> Result<(Vec<f64>, Vec<f64>), crate::params::gptq::GptqError> {
    let ridge = RIDGE_PER_INPUT * layout.k as f64 / patches.max(1) as f64;
    let (k, k2) = (layout.k, 2 * layout.k);
    let mut hq = Vec::with_capacity(layout.groups * k * k);
    let mut targets = Vec::with_capacity(layout.groups * k * k);
    let float_at: Vec<usize> = (0..k).map(|i| layout.side_by_side_index(i, false)).collect();
    let quant_at: Vec<usize> = (0..k).map(|i| layout.side_by_side_index(i, true)).collect();
    for g in sums.chunks(k2 * k2) {
        let block = |rows: &[usize], cols: &[usize]| -> Vec<f64> {
            rows.iter()
                .flat_map(|&a| cols.iter().map(move |&b| g[a * k2 + b]))
                .collect()
        };
        let h = block(&quant_at, &quant_at);
        let c = block(&float_at, &quant_at);
        targets.extend(target_map(&h, &c, k, ridge)?);
        hq.extend(h);
    }
    Ok((hq, targets))
}
