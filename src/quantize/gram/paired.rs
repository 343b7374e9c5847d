//! GPTQ's Gram matrices measured on the quantized model's inputs (asymmetric calibration,
//! `--gptq-asymmetric`): the float model and a quantized form of it run side by side on the
//! calibration samples, and each layer's float input x and quantized input x̃ (the quantized
//! model's value there, through the layer's own input quantization) make one patch of 2k, so
//! that one Gram matrix of the pairs holds X̃ X̃ᵀ and X X̃ᵀ. GPTQ then rounds each row toward
//! w M (`params::gptq::target_map`), the weights that map what the layer will read to what the
//! float layer computes, so each layer makes up for the error of the quantized layers before
//! it, not only for its own rounding — where cross-validation over the samples says that
//! carries beyond them (`choose_ridges`).
//!
//! ```text
//! %y = onnx.Conv(%x, %w)      float run: x        quantized run: fq(x̃)
//!   G = Σ [p(x); p(x̃)] [p(x); p(x̃)]ᵀ   (2k × 2k)   →   H̃ = G[x̃, x̃],  C = G[x, x̃]
//! ```

use super::{add_sample, gram_partial, select_layers, Partial, Total, WeightGrams};
use crate::calibration::StatsFile;
use crate::dialects::weight_layout::WeightLayout;
use crate::interp::Program;
use crate::params::gptq::{held_out_error, moved_rows, target_map, GptqError, Gram};
use crate::params::{fake_quant, QuantParams, Rounding};
use crate::quantize::{plan, QuantConfig, QuantizeError};
use crate::run::{compare_side_by_side, Feed};
use crate::tensor::Tensor;
use melior::ir::Module;
use std::collections::HashSet;
use std::sync::Arc;

/// The ridge of every map where there are too few samples to choose by cross-validation
/// ([`FOLDS`]). A ridge pulls a target map toward the identity, as a fraction of H̃'s mean
/// diagonal per input a row has per patch measured: k/n is how many of the map's unknowns each patch
/// must pin down. A layer deep in a network sees few patches (fer's last 3×3 convolution: 16
/// positions × 32 samples for k = 1,152), and there a map fitted with GPTQ's 1 % alone maps
/// the calibration samples' inputs, not the layer's: fer scored 44.4 dB on its calibration
/// samples and 22.7 on the test ones. At 10: 30.2 and 28.8 (3: 24.2 on the swapped fold; 30:
/// within 0.4 dB of 10 on both folds).
pub const RIDGE_PER_INPUT: f64 = 10.0;

/// The ridges (per input, as [`RIDGE_PER_INPUT`]) a layer's map is chosen among on held-out
/// samples, besides no map at all.
pub const RIDGES_PER_INPUT: &[f64] = &[1.0, 10.0, 100.0];

/// The calibration samples fall into this many folds (sample i into fold i mod FOLDS), and
/// each layer's ridge is chosen by cross-validation: each fold judges the maps fitted on the
/// others. With fewer samples, every map is fitted at [`RIDGE_PER_INPUT`].
pub const FOLDS: usize = 4;

/// A fold's side-by-side sums and the patches summed.
type Sums = (Vec<f64>, u64);

/// What [`measure_paired_grams`] measured for one wave.
#[derive(Debug, Default)]
pub struct PairedGrams {
    pub grams: WeightGrams,
    /// Layers whose rows move toward a map (the others are rounded as they are, on H̃).
    pub mapped: usize,
    /// Folds the maps were chosen by (0: none, every map at [`RIDGE_PER_INPUT`]).
    pub folds: usize,
    /// Whether deeper waves are left.
    pub deeper: bool,
}

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
) -> Result<PairedGrams, QuantizeError> {
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
        return Ok(PairedGrams {
            grams: WeightGrams {
                left,
                ..Default::default()
            },
            deeper,
            ..Default::default()
        });
    }
    let (readers, keys) = crate::run::readers(layers.iter().map(|l| l.input.as_str()));
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
    let folds = if samples >= FOLDS { FOLDS } else { 1 };
    // by fold, then layer
    let mut totals: Vec<Vec<Total>> = (0..folds)
        .map(|_| wide.iter().map(|w| Total::new(w.k)).collect())
        .collect();
    let mut combine = |i: usize, s: State| {
        add_sample(&mut totals[i % folds], s);
        Ok(())
    };
    let n = compare_side_by_side(
        [float, quantized],
        feed,
        threads,
        &keys,
        &|| vec![None; layers.len()],
        &compare,
        &mut combine,
        "GPTQ (asymmetric)",
    )
    .map_err(|e| failed(e.to_string()))?;
    let mut out = WeightGrams {
        samples: n,
        left,
        ..Default::default()
    };
    let mut mapped = 0;
    let mut by_layer: Vec<Vec<Option<Sums>>> = layers.iter().map(|_| Vec::new()).collect();
    for fold in totals {
        for (i, t) in fold.into_iter().enumerate() {
            by_layer[i].push(t.finish().filter(|(_, p)| *p > 0));
        }
    }
    for (l, parts) in layers.into_iter().zip(by_layer) {
        let Some((sums, patches)) = total(&parts) else {
            out.left.push((l.out_key, "its input was never an f32 value".into()));
            continue;
        };
        let Some(weights) = &l.weights else {
            out.left.push((l.out_key, "its weight was not read".into()));
            continue;
        };
        // cross-validation where every fold reached the layer
        let held: Option<Vec<&Sums>> = parts.iter().map(Option::as_ref).collect();
        let chosen = held
            .filter(|h| h.len() > 1)
            .map(|h| choose_ridges(&l.layout, weights, (&sums, patches), &h))
            .transpose();
        match chosen.and_then(|ridges| {
            let (hq, targets) = split(&l.layout, &sums, patches, ridges.as_deref())?;
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
                mapped += usize::from(!gram.targets.is_empty());
                out.grams.insert(l.out_key, Arc::new(gram));
            }
            Err(e) => out.left.push((l.out_key, e.to_string())),
        }
    }
    Ok(PairedGrams {
        grams: out,
        mapped,
        folds: if folds > 1 { folds } else { 0 },
        deeper,
    })
}

/// The folds' sums and patches added up, in fold order; `None` where no fold has any.
fn total(parts: &[Option<Sums>]) -> Option<Sums> {
    let mut present = parts.iter().flatten();
    let (mut sums, mut patches) = present.next()?.clone();
    for (s, n) in present {
        sums.iter_mut().zip(s).for_each(|(a, b)| *a += b);
        patches += n;
    }
    Some((sums, patches))
}

/// Each group's H̃ and C blocks, out of the side-by-side sums (one 2k × 2k block per group).
fn blocks(layout: &WeightLayout, sums: &[f64]) -> Vec<(Vec<f64>, Vec<f64>)> {
    let (k, k2) = (layout.k, 2 * layout.k);
    let float_at: Vec<usize> = (0..k).map(|i| layout.side_by_side_index(i, false)).collect();
    let quant_at: Vec<usize> = (0..k).map(|i| layout.side_by_side_index(i, true)).collect();
    sums.chunks(k2 * k2)
        .map(|g| {
            let block = |rows: &[usize], cols: &[usize]| -> Vec<f64> {
                rows.iter()
                    .flat_map(|&a| cols.iter().map(move |&b| g[a * k2 + b]))
                    .collect()
            };
            (block(&quant_at, &quant_at), block(&float_at, &quant_at))
        })
        .collect()
}

/// The ridge λ of a map fitted on `patches` patches: `per_input` times H̃'s mean diagonal per
/// input a row has per patch.
fn ridge(per_input: f64, k: usize, patches: u64) -> f64 {
    per_input * k as f64 / patches.max(1) as f64
}

/// Each group's ridge (per input, [`RIDGES_PER_INPUT`]), or `None` where the rows are best
/// left as they are, by cross-validation over `folds` (each fold's sums; `all` their total):
/// for each candidate and fold, the map fitted on the other folds moves the group's rows of
/// `weights`, and the candidate whose rows land nearest the float output on the folds left
/// out ([`held_out_error`], summed; each moved row clipped to its grid, as rounding will clip
/// it) is kept — the rows themselves (no map) among them. A layer whose map fits only the
/// samples it was fitted on is then left as it is (with every layer mapped at one ridge,
/// ppocr_cls scored 38.0 dB on its calibration samples and 27.8 on its test ones).
fn choose_ridges(
    layout: &WeightLayout,
    (weights, shape_of, p): &(Vec<f32>, Vec<usize>, QuantParams),
    (all, patches): (&[f64], u64),
    folds: &[&Sums],
) -> Result<Vec<Option<f64>>, GptqError> {
    let shape = || {
        GptqError::Shape(format!(
            "{} weights for a layout of {} groups",
            weights.len(),
            layout.groups
        ))
    };
    let k = layout.k;
    // each group's float rows and their grids, the same for every fold
    let rows = (0..layout.groups)
        .map(|g| {
            Ok((
                layout.group_rows(weights, g).ok_or_else(shape)?,
                layout.row_grids(shape_of, p, g)?,
            ))
        })
        .collect::<Result<Vec<_>, GptqError>>()?;
    // error[group][candidate], candidate 0 = no map
    let mut error = vec![vec![0f64; RIDGES_PER_INPUT.len() + 1]; layout.groups];
    for (held, n) in folds {
        let rest: Vec<f64> = all.iter().zip(held).map(|(a, b)| a - b).collect();
        let fit = blocks(layout, &rest);
        for (g, ((hq, c), (hq_h, c_h))) in fit.iter().zip(blocks(layout, held)).enumerate() {
            let (w, grids) = &rows[g];
            error[g][0] += held_out_error(w, w, &hq_h, &c_h, k)?;
            for (e, &per_input) in error[g][1..].iter_mut().zip(RIDGES_PER_INPUT) {
                let m = target_map(hq, c, k, ridge(per_input, k, patches - n))?;
                let mut moved = moved_rows(w, &m, k);
                // as rounding will: the grid's ends are those of w's range
                for (row, grid) in moved.chunks_mut(k).zip(grids) {
                    let (a, b) = (grid.value(grid.qmin), grid.value(grid.qmax));
                    row.iter_mut().for_each(|v| *v = v.clamp(a.min(b), a.max(b)));
                }
                *e += held_out_error(&moved, w, &hq_h, &c_h, k)?;
            }
        }
    }
    Ok(error
        .iter()
        .map(|e| {
            // the first least: no map on a tie
            let best = (1..e.len()).fold(0, |b, i| if e[i] < e[b] { i } else { b });
            (best > 0).then(|| RIDGES_PER_INPUT[best - 1])
        })
        .collect())
}

/// Each group's H̃ = Σ x̃ x̃ᵀ and target map (from C = Σ x x̃ᵀ), out of the side-by-side sums
/// of `layout`, at each group's ridge of `ridges` (`None`: no map for the group; no `ridges`:
/// [`RIDGE_PER_INPUT`] for every group). The maps are empty where no group has one.
fn split(
    layout: &WeightLayout,
    sums: &[f64],
    patches: u64,
    ridges: Option<&[Option<f64>]>,
) -> Result<(Vec<f64>, Vec<f64>), GptqError> {
    let k = layout.k;
    let mut hq = Vec::with_capacity(layout.groups * k * k);
    let mut targets = Vec::with_capacity(layout.groups * k * k);
    let mut any = false;
    for (g, (h, c)) in blocks(layout, sums).into_iter().enumerate() {
        match ridges.map_or(Some(RIDGE_PER_INPUT), |r| r.get(g).copied().flatten()) {
            Some(per_input) => {
                any = true;
                targets.extend(target_map(&h, &c, k, ridge(per_input, k, patches))?);
            }
            // the identity: w M = w
            None => targets.extend((0..k * k).map(|i| if i / k == i % k { 1.0 } else { 0.0 })),
        }
        hq.extend(h);
    }
    if !any {
        targets.clear();
    }
    Ok((hq, targets))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::gptq::tests::noise;
    use std::collections::BTreeMap;

    /// The side-by-side sums of a MatMul's patches: Σ [x; x̃] [x; x̃]ᵀ (2k × 2k).
    fn side_by_side_sums(x: &[f64], xq: &[f64], k: usize) -> (Vec<f64>, u64) {
        let n = x.len() / k;
        let mut s = vec![0f64; 4 * k * k];
        for p in 0..n {
            let both: Vec<f64> = x[p * k..(p + 1) * k]
                .iter()
                .chain(&xq[p * k..(p + 1) * k])
                .copied()
                .collect();
            for a in 0..2 * k {
                for b in 0..2 * k {
                    s[a * 2 * k + b] += both[a] * both[b];
                }
            }
        }
        (s, n as u64)
    }

    #[test]
    fn a_map_is_kept_only_where_held_out_samples_bear_it_out() {
        let (k, rows, n) = (6, 3, 400);
        let layout = WeightLayout::of("onnx.MatMul", &BTreeMap::new(), &[k, rows]).unwrap();
        let values: Vec<f32> = noise(1, k * rows).iter().map(|v| *v as f32).collect();
        // a grid wide enough that nothing here clips: rows moved by 1/0.8 stay on it
        let grid = |scale: f64| QuantParams {
            scheme: crate::params::Scheme::Onnx,
            dtype: crate::params::StorageType::Int8,
            scale: vec![scale],
            zero_point: vec![0],
            axis: None,
            qmin: -127,
            qmax: 127,
        };
        let weights = (values.clone(), vec![k, rows], grid(0.1));
        let x = noise(2, n * k);
        let e = noise(3, n * k);
        // every sample reads its inputs 0.8 too small, with a little noise: the map carries over
        let shrunk: Vec<f64> = x.iter().zip(&e).map(|(a, b)| 0.8 * a + 0.01 * b).collect();
        let half = n * k / 2;
        let choose = |a: &(Vec<f64>, u64), b: &(Vec<f64>, u64)| {
            let all: Vec<f64> = a.0.iter().zip(&b.0).map(|(p, q)| p + q).collect();
            choose_ridges(&layout, &weights, (&all, a.1 + b.1), &[a, b]).unwrap()
        };
        let fit = side_by_side_sums(&x[..half], &shrunk[..half], k);
        let held = side_by_side_sums(&x[half..], &shrunk[half..], k);
        let ridges = choose(&fit, &held);
        assert!(ridges[0].is_some(), "a gain both folds share: {ridges:?}");
        // one fold's inputs leak into each other, the other's are read exactly: a map fitted
        // on the first fits it only
        let leaked: Vec<f64> = (0..n * k)
            .map(|i| x[i] + 0.3 * x[(i / k) * k + (i + 1) % k] + 0.01 * e[i])
            .collect();
        let fit = side_by_side_sums(&x[..half], &leaked[..half], k);
        let held = side_by_side_sums(&x[half..], &x[half..], k);
        assert_eq!(choose(&fit, &held), vec![None]);
        // and a map of no group leaves the rows as they are
        let (hq, targets) = split(&layout, &fit.0, fit.1, Some(&[None])).unwrap();
        assert_eq!((hq.len(), targets.len()), (k * k, 0));
        let (_, targets) = split(&layout, &fit.0, fit.1, None).unwrap();
        assert_eq!(targets.len(), k * k);
        // inputs read half as large, weights all ±0.5: the map doubles the rows, which a grid
        // that ends at ±0.5 clips back to w, so it wins only on a wider grid
        let halved: Vec<f64> = x.iter().zip(&e).map(|(a, b)| 0.5 * a + 0.001 * b).collect();
        let fit = side_by_side_sums(&x[..half], &halved[..half], k);
        let held = side_by_side_sums(&x[half..], &halved[half..], k);
        let signs: Vec<f32> = values.iter().map(|v| 0.5f32.copysign(*v)).collect();
        let all: Vec<f64> = fit.0.iter().zip(&held.0).map(|(p, q)| p + q).collect();
        let on = |scale: f64| {
            let w = (signs.clone(), vec![k, rows], grid(scale));
            choose_ridges(&layout, &w, (&all, fit.1 + held.1), &[&fit, &held]).unwrap()
        };
        assert!(on(0.1)[0].is_some());
        assert_eq!(on(0.5 / 127.0), vec![None]);
    }
}
