//! SmoothQuant (Xiao et al., "SmoothQuant: Accurate and Efficient Post-Training Quantization
//! for Large Language Models", ICML 2023) at normalization layers, part of `equalize-layers`:
//! where a per-channel gain feeds only matmuls — a LayerNormalization's scale and bias, or a
//! Mul by a per-channel constant (as decomposed layer norms and RMSNorm end) — channel `i` of
//! the value the matmuls read is divided by `s_i` in the gain (and in the biases after it) and
//! row `i` of every matmul's weight is multiplied by it. The model computes the same function;
//! the outlier channels of the activation, which set its per-tensor range and leave the other
//! channels a few levels, move into the weights, which are rounded per output channel.
//!
//! ```mlir
//! %h = "onnx.LayerNormalization"(%x, %g, %b) {axis = -1 : i64}      // %g, %b: 768
//! %q = "onnx.MatMul"(%h, %wq)  %k = "onnx.MatMul"(%h, %wk)  %v = "onnx.MatMul"(%h, %wv)
//! // becomes, with %g' = %g / s, %b' = %b / s, %wq'[i, :] = %wq[i, :] · s[i] (%wk, %wv alike)
//! %h = "onnx.LayerNormalization"(%x, %g', %b') {axis = -1 : i64} loc("ln~equalized")
//! ```
//!
//! `s` is chosen on calibration data as for the layer pairs (`mod.rs`'s `choose_scale`):
//! of no scaling and SmoothQuant's `s_i = max|x_i|^α / max|w_i|^(1−α)` for α from ¼ to ⅞
//! (`max|w_i|` over all the matmuls' rows `i`), the scale with the least estimated rounding
//! noise summed over the matmuls' outputs. There is no data-free form: without measured
//! channels a norm is left as it is. Post-LN models (BERT) also add the norm's output to the
//! residual stream; no scale can move there, and such norms are left as they are too.

use super::channels::{
    balanced, channel_axis, channel_ranges, has_equalized_key, layer, mark_equalized, on_channel_axis, per_tensor_span,
    quantization_levels, replace_constant, scale_along, Layer, ReaderNoise, GAIN,
};
use crate::calibration::ChannelMoments;
use crate::dialects::is_channel_bias;
use crate::ir::attrs::op_attrs;
use crate::ir::graph::{body_ops, defining_op, op_name, uses};
use crate::ir::keys::TensorKeys;
use crate::ir::ops::{constant_value, is_constant_op};
use crate::passes::report::PassError;
use crate::recipe::QuantConfig;
use crate::tensor::Tensor;
use melior::ir::operation::OperationLike;
use melior::ir::{OperationRef, Value, ValueLike};
use ndarray::ArrayD;

/// Ops whose result is their input times a per-channel gain along the last axis, sorted: the
/// gain's operand (`None`: whichever operand is a per-channel constant) and the op's own bias
/// operand, scaled with it.
const NORM_GAINS: &[(&str, Option<usize>, Option<usize>)] = &[
    ("onnx.LayerNormalization", Some(1), Some(2)),
    ("onnx.Mul", None, None),
    ("tf.Mul", None, None),
];

/// SmoothQuant's migration strengths tried, besides no scaling.
const ALPHAS: [f32; 6] = [0.25, 0.375, 0.5, 0.625, 0.75, 0.875];

/// A gain and the matmuls that read its channels.
struct Group<'c, 'a> {
    /// (op, operand, values) of the gain and of each per-channel bias scaled with it.
    constants: Vec<(OperationRef<'c, 'a>, usize, ArrayD<f32>)>,
    /// The ops whose results' channels change: the gain's op and each bias after it.
    between: Vec<OperationRef<'c, 'a>>,
    /// The value the matmuls read.
    end: Value<'c, 'a>,
    readers: Vec<Layer<'c, 'a>>,
}

/// A constant operand `i` of `op`, f32, used by `op` alone, holding `c` values along the last
/// axis of a rank-`rank` result.
fn channel_constant<'c, 'a>(op: OperationRef<'c, 'a>, i: usize, c: usize, rank: usize) -> Option<ArrayD<f32>> {
    let v = op.operand(i).ok()?;
    let d = defining_op(v).filter(is_constant_op)?;
    let Tensor::F32(a) = constant_value(d)? else {
        return None;
    };
    (uses(v).len() == 1 && on_channel_axis(a.shape(), c, rank - 1, rank)).then_some(a)
}

/// The group that starts at `op`, when `op` is a gain of [`NORM_GAINS`] whose result reaches,
/// through single-use per-channel biases, only matmuls that read its channels as their rows.
fn group_from<'c, 'a>(op: OperationRef<'c, 'a>) -> Option<Group<'c, 'a>> {
    let name = op_name(&op);
    let &(_, gain, bias) = NORM_GAINS.iter().find(|(n, ..)| *n == name)?;
    let mut cur: Value = op.result(0).ok()?.into();
    // the channel count is static; other dims (a batch) may be dynamic
    let dims = crate::ir::types::tensor_type(cur.r#type())?.dims;
    let (rank, c) = match dims.last()? {
        crate::ir::types::Dim::Static(c) => (dims.len(), *c),
        crate::ir::types::Dim::Dynamic => return None,
    };
    if rank < 2 || c < 2 {
        return None;
    }
    if name == "onnx.LayerNormalization" {
        let axis = op_attrs(&op).get("axis").and_then(|v| v.as_int()).unwrap_or(-1);
        if axis != -1 && axis != rank as i64 - 1 {
            return None;
        }
    }
    let mut constants = Vec::new();
    let g = match gain {
        Some(i) => i,
        // a Mul of a computed value by a constant gain (not of two constants, folded anyway)
        None => (0..2)
            .find(|&i| channel_constant(op, i, c, rank).is_some() && channel_constant(op, 1 - i, c, rank).is_none())?,
    };
    if op.operand_count() < g + 1 || (gain.is_none() && op.operand_count() != 2) {
        return None;
    }
    constants.push((op, g, channel_constant(op, g, c, rank)?));
    if let Some(b) = bias.filter(|&b| b < op.operand_count()) {
        let absent = op
            .operand(b)
            .ok()
            .and_then(defining_op)
            .is_some_and(|d| op_name(&d) == crate::dialects::onnx::NO_VALUE);
        if !absent {
            constants.push((op, b, channel_constant(op, b, c, rank)?));
        }
    }
    let mut between = vec![op];
    loop {
        let us = uses(cur);
        let readers: Vec<Layer> = us
            .iter()
            .filter(|u| u.operand == 0)
            .filter_map(|u| layer(u.owner))
            .filter(|l| {
                let trans_a = op_attrs(&l.op).get("transA").and_then(|v| v.as_int()).unwrap_or(0) != 0;
                l.rule.group_attr.is_none()
                    && l.weight.shape()[l.in_axis] == c
                    && channel_axis(l.rule, rank) == Some(rank - 1)
                    && !trans_a
            })
            .collect();
        if !us.is_empty() && readers.len() == us.len() {
            return Some(Group {
                constants,
                between,
                end: cur,
                readers,
            });
        }
        let [u] = us.as_slice() else { return None };
        if !is_channel_bias(&op_name(&u.owner)) || u.owner.operand_count() != 2 {
            return None;
        }
        let k = 1 - u.operand;
        constants.push((u.owner, k, channel_constant(u.owner, k, c, rank)?));
        between.push(u.owner);
        cur = u.owner.result(0).ok()?.into();
    }
}

fn groups<'c, 'a>(func: OperationRef<'c, 'a>) -> Vec<Group<'c, 'a>> {
    body_ops(func).into_iter().filter_map(group_from).collect()
}

/// The values the matmuls of each group read, by key, with their channel axis (the last):
/// what calibration measures per channel for [`smooth_norms`].
pub(super) fn norm_points(func: OperationRef) -> Vec<(String, usize)> {
    let keys = TensorKeys::new(func);
    groups(func)
        .iter()
        .filter_map(|g| {
            let rank = crate::ir::types::tensor_type(g.end.r#type())?.dims.len();
            Some((keys.get(g.end)?.to_string(), rank - 1))
        })
        .collect()
}

/// How many gains of `module` were rescaled: each carries the `~equalized` key.
pub fn smoothed_norms(module: &melior::ir::Module) -> usize {
    crate::ir::graph::functions(module)
        .into_iter()
        .flat_map(body_ops)
        .filter(|op| NORM_GAINS.iter().any(|(n, ..)| *n == op_name(op)) && has_equalized_key(op))
        .count()
}

/// Smooths every group of `func` whose read value calibration measured; returns how many.
pub(super) fn smooth_norms(func: OperationRef, config: &QuantConfig) -> Result<usize, PassError> {
    let keys = TensorKeys::new(func);
    let levels = quantization_levels(config);
    let mut done = 0;
    for mut g in groups(func) {
        let c = g.constants[0].2.len();
        let Some(m) = keys
            .get(g.end)
            .and_then(|k| config.equalize_ranges.get(k))
            .filter(|m| m.max.len() == c && m.min.len() == c && m.mean_square.len() == c)
        else {
            continue;
        };
        let s = choose_scale(&g, m, levels, config.per_channel);
        if s.iter().all(|&k| k == 1.0) {
            continue;
        }
        for (op, i, v) in &mut g.constants {
            // the constant's only non-unit axis is the channel axis: its flat order is channels
            v.iter_mut().zip(&s).for_each(|(x, k)| *x /= k);
            replace_constant(*op, *i, &Tensor::F32(v.clone()))?;
        }
        for l in &mut g.readers {
            scale_along(&mut l.weight, l.in_axis, &s, false);
            replace_constant(l.op, l.rule.weight, &Tensor::F32(l.weight.clone()))?;
        }
        mark_equalized(&keys, &g.between);
        done += 1;
    }
    Ok(done)
}

/// Of no scaling and SmoothQuant's balance at each of [`ALPHAS`], the scale whose estimated
/// rounding noise summed over the readers' outputs is least (the activation per tensor, the
/// weights per output channel or per tensor); a candidate must lower it by more than [`GAIN`].
fn choose_scale(
    g: &Group,
    m: &ChannelMoments,
    (act_levels, w_levels): (f32, f32),
    per_channel_weights: bool,
) -> Vec<f32> {
    let c = m.max.len();
    let readers: Vec<ReaderNoise> = g
        .readers
        .iter()
        .map(|l| ReaderNoise::of(&l.weight, l.out_axis, l.in_axis, c))
        .collect();
    let noise = |s: &[f32]| -> f64 {
        let dx = vec![per_tensor_span(m, s) / act_levels as f64; c];
        readers
            .iter()
            .map(|r| r.noise(s, &dx, &m.mean_square, w_levels, per_channel_weights))
            .sum()
    };
    let a: Vec<f32> = (0..c).map(|i| m.max[i].abs().max(m.min[i].abs())).collect();
    let mut r = vec![0f32; c];
    for l in &g.readers {
        r.iter_mut()
            .zip(channel_ranges(&l.weight, l.in_axis))
            .for_each(|(x, v)| *x = x.max(v));
    }
    let mut best = vec![1.0f32; c];
    let mut least = noise(&best) * (1.0 - GAIN);
    for alpha in ALPHAS {
        let s = balanced(&a, &r, alpha);
        let n = noise(&s);
        if n < least {
            (best, least) = (s, n);
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gain_table_is_sorted() {
        assert!(NORM_GAINS.windows(2).all(|w| w[0].0 < w[1].0));
    }
}
