//! `equalize-layers`: cross-layer equalization (Nagel et al., "Data-Free Quantization Through
//! Weight Equalization and Bias Correction", ICCV 2019). Where one compute op feeds the next
//! through ops that commute with a positive per-channel scale (ReLU, LeakyReLU, max pooling, a
//! bias), output channel `i` of the first is divided by `s_i` and input channel `i` of the
//! second multiplied by it: the model computes the same function, and with
//! `s_i = sqrt(r1_i / r2_i)` (`r1_i`, `r2_i` the channel's largest weight magnitude in each
//! layer) both channels end with the range `sqrt(r1_i · r2_i)`, so that neither layer has
//! channels far below its largest — which per-tensor weights and the per-tensor activation
//! between the two round to a few levels.
//!
//! ```mlir
//! %0 = "onnx.Conv"(%x, %w1, %b1) {group = 16 : i64}   // depthwise, %w1: 16x1x3x3
//! %1 = "onnx.Relu"(%0)
//! %2 = "onnx.Conv"(%1, %w2, %b2)                       // %w2: 32x16x1x1
//! // becomes, with %w1'[i] = %w1[i] / s[i], %b1'[i] = %b1[i] / s[i], %w2'[:, i] = %w2[:, i] · s[i]
//! %0 = "onnx.Conv"(%x, %w1', %b1') {group = 16 : i64} loc("conv1~equalized")
//! %1 = "onnx.Relu"(%0) loc("relu1~equalized")
//! %2 = "onnx.Conv"(%1, %w2', %b2)
//! ```
//!
//! That is the paper's data-free form (`--equalize-by weights`). With per-channel weights it is
//! the per-tensor activation between the layers that loses resolution, so where calibration
//! measured that activation's channels (`QuantConfig::equalize_ranges`, the default), each
//! pair takes instead, of no scaling, SmoothQuant's balance at α = ¼, ½, ¾ against the
//! activation and the weight balance above, the scale with the least estimated rounding noise
//! at the second layer's output ([`choose_scale`]).
//!
//! A layer in two pairs (the second of one, the first of the next) takes both scales, so the
//! data-free pairs are equalized in turn until the scales settle, as the paper does. The values between
//! the two layers change (channel `i` is divided by `s_i`): their keys get `~equalized`
//! appended, so that no comparison with the float model's tensor of the old key is made. Only
//! pairs whose weights are constants used by that op alone, whose values in between have one
//! use, and whose channel counts agree are touched; a grouped convolution other than depthwise
//! ends a pair. ReLU6 and other clipping activations do not commute with a scale and end it too.
//!
//! After the pairs, `norms.rs` applies SmoothQuant at normalization layers read only by
//! matmuls; `channels.rs` holds what both read and write of a layer's channels.

mod channels;
mod norms;

pub use channels::EQUALIZED_SUFFIX;
pub use norms::smoothed_norms;

use super::{PassOptions, PassReport};
use crate::calibration::ChannelMoments;
use crate::dialects::{channel_rule, is_channel_bias, is_positive_homogeneous};
use crate::ir::attrs::op_attrs;
use crate::ir::graph::{body_ops, defining_op, functions, op_name, uses};
use crate::ir::keys::TensorKeys;
use crate::ir::ops::{constant_value, is_constant_op};
use crate::passes::report::{Change, PassError};
use crate::recipe::plan::{step_gain_db, PER_CHANNEL_MIN_GAIN_DB};
use crate::recipe::QuantConfig;
use crate::tensor::Tensor;
use channels::{
    balanced, channel_axis, channel_ranges, has_equalized_key, layer, mark_equalized, on_channel_axis, per_tensor_span,
    quantization_levels, replace_constant, scale_along, Layer, ReaderNoise, GAIN,
};
use melior::ir::operation::OperationLike;
use melior::ir::{Module, OperationRef, Value, ValueLike};
use ndarray::ArrayD;
use std::collections::HashMap;

/// Rounds of equalizing every pair in turn; the paper's scales settle in a few.
const MAX_ROUNDS: usize = 32;
/// A round that moves no scale by more than this relative step ends the iteration.
const SETTLED: f32 = 1e-4;

/// Two layers joined through scale-commuting ops, and the per-channel constants in between
/// (biases) that scale with the first layer's outputs.
struct Pair<'c, 'a> {
    first: usize,
    second: usize,
    /// (op, operand) of each per-channel bias between them, with its values.
    biases: Vec<(OperationRef<'c, 'a>, usize, ArrayD<f32>)>,
    /// The values whose channels change: the first layer's result and each op's after it.
    between: Vec<OperationRef<'c, 'a>>,
    /// The per-channel moments of the value the second layer reads, measured on calibration
    /// data; `None`: the first layer's weights stand for it.
    activation: Option<ChannelMoments>,
    /// That value may be quantized per channel (a depthwise convolution's input, see
    /// `recipe::plan::depthwise_input_axis`): the plan does so where that cuts the noise by
    /// `PER_CHANNEL_MIN_GAIN_DB` or more, per tensor otherwise.
    activation_per_channel: bool,
    /// A scale other than 1 was applied.
    applied: bool,
}

pub fn run(module: &Module, options: &PassOptions) -> Result<PassReport, PassError> {
    let mut report = PassReport::default();
    for func in functions(module) {
        let (pairs, norms) = equalize_function(func, &options.config)?;
        report.add(Change::LayerPairsEqualized, pairs);
        report.add(Change::NormsSmoothed, norms);
    }
    Ok(report)
}

/// How many layer pairs of `module` were rescaled: each one's first layer carries the
/// `~equalized` key.
pub fn equalized_pairs(module: &Module) -> usize {
    functions(module)
        .into_iter()
        .flat_map(body_ops)
        .filter(|op| channel_rule(&op_name(op)).is_some() && has_equalized_key(op))
        .count()
}

/// The values the pass would balance against the next layer's weights — the second layer's
/// input of each pair — by key, with the axis their channels run along: what calibration
/// measures per channel first ([`crate::recipe::QuantConfig::equalize_ranges`]).
pub fn range_points(module: &Module) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    for func in functions(module) {
        let (layers, pairs) = find_pairs(func);
        let keys = TensorKeys::new(func);
        for p in &pairs {
            let second = layers[p.second].op;
            let Some(v) = second.operand(0).ok() else { continue };
            let Some(rank) = crate::ir::types::tensor_type(v.r#type()).map(|t| t.dims.len()) else {
                continue;
            };
            if let (Some(k), Some(axis)) = (keys.get(v), channel_axis(layers[p.second].rule, rank)) {
                out.push((k.to_string(), axis));
            }
        }
        out.extend(norms::norm_points(func));
    }
    out
}

/// Equalizes the pairs of one function, then smooths its norms (`norms.rs`); returns how
/// many of each.
fn equalize_function(func: OperationRef, config: &QuantConfig) -> Result<(usize, usize), PassError> {
    let ranges = &config.equalize_ranges;
    // equalized before (prepare runs again on a prepared module): the scales have settled
    if body_ops(func).iter().any(has_equalized_key) {
        return Ok((0, 0));
    }
    let (mut layers, mut pairs) = find_pairs(func);
    if pairs.is_empty() {
        return Ok((0, norms::smooth_norms(func, config)?));
    }
    // measured channel ranges of each pair's value in between, where calibration has them
    let keys = TensorKeys::new(func);
    for p in &mut pairs {
        let v = layers[p.second].op.operand(0).ok();
        p.activation_per_channel = config.per_channel_depthwise_inputs
            && config.per_channel
            && v.is_some_and(|v| crate::recipe::plan::depthwise_input_axis(v).is_some());
        p.activation = v
            .and_then(|v| keys.get(v))
            .and_then(|k| ranges.get(k))
            .filter(|r| r.max.len() == layers[p.first].weight.shape()[layers[p.first].out_axis])
            .filter(|r| r.min.len() == r.max.len() && r.mean_square.len() == r.max.len())
            .cloned();
    }
    // measured pairs: the candidate scale whose estimated noise at the second layer's output
    // is least, once, in order
    let levels = quantization_levels(config);
    for p in pairs.iter_mut().filter(|p| p.activation.is_some()) {
        let s = choose_scale(&layers, p, levels, config.per_channel);
        if s.iter().any(|&k| k != 1.0) {
            apply(&mut layers, p, &s);
        }
    }
    // the others: the paper's weight ranges, in turn until the scales settle
    for _ in 0..MAX_ROUNDS {
        let mut step = 0.0f32;
        for p in pairs.iter_mut().filter(|p| p.activation.is_none()) {
            step = step.max(equalize_pair(&mut layers, p));
        }
        if step < SETTLED {
            break;
        }
    }
    write_back(func, &mut layers, &pairs)?;
    drop(layers);
    let norms = norms::smooth_norms(func, config)?;
    Ok((pairs.iter().filter(|p| p.applied).count(), norms))
}

/// The layers of `func` and the pairs they form.
fn find_pairs<'c, 'a>(func: OperationRef<'c, 'a>) -> (Vec<Layer<'c, 'a>>, Vec<Pair<'c, 'a>>) {
    let mut layers: Vec<Layer> = Vec::new();
    let mut index: HashMap<usize, usize> = HashMap::new();
    for op in body_ops(func) {
        if let Some(l) = layer(op) {
            index.insert(op.to_raw().ptr as usize, layers.len());
            layers.push(l);
        }
    }
    let mut pairs = Vec::new();
    for (i, l) in layers.iter().enumerate() {
        if let Some(p) = pair_from(i, l, &layers, &index) {
            pairs.push(p);
        }
    }
    (layers, pairs)
}

/// The pair that starts at layer `i`: its result's single-use chain through biases and
/// positive-homogeneous ops, ending at a layer that reads it as its activation operand with as
/// many input channels.
fn pair_from<'c, 'a>(
    i: usize,
    first: &Layer<'c, 'a>,
    layers: &[Layer<'c, 'a>],
    index: &HashMap<usize, usize>,
) -> Option<Pair<'c, 'a>> {
    let c = first.weight.shape()[first.out_axis];
    let mut cur: Value = first.op.result(0).ok()?.into();
    let mut between = vec![first.op];
    let mut biases = Vec::new();
    let rank = crate::ir::types::tensor_type(cur.r#type())?.dims.len();
    let axis = channel_axis(first.rule, rank)?;
    loop {
        let [u] = uses(cur).as_slice().try_into().ok()?;
        let u: crate::ir::graph::Use = u;
        let name = op_name(&u.owner);
        if let Some(&j) = index.get(&(u.owner.to_raw().ptr as usize)) {
            let second = &layers[j];
            // the second reads its input channels on the axis the first wrote them on (a
            // Conv's NCHW axis 1 into a MatMul's last would mix them), and a Gemm with transA
            // reads them transposed
            let trans_a = op_attrs(&second.op).get("transA").and_then(|v| v.as_int()).unwrap_or(0) != 0;
            let ok = u.operand == 0
                && second.weight.shape()[second.in_axis] == c
                && channel_axis(second.rule, rank) == Some(axis)
                && !trans_a
                && j != i;
            return ok.then_some(Pair {
                first: i,
                second: j,
                biases,
                between,
                activation: None,
                activation_per_channel: false,
                applied: false,
            });
        }
        if is_positive_homogeneous(&name) && u.operand == 0 && u.owner.result_count() == 1 {
            // LeakyRelu, MaxPool: a scale commutes with them
        } else if is_channel_bias(&name) && u.owner.operand_count() == 2 {
            let k = 1 - u.operand;
            let b = u.owner.operand(k).ok()?;
            let d = defining_op(b).filter(is_constant_op)?;
            let Tensor::F32(v) = constant_value(d)? else {
                return None;
            };
            if uses(b).len() != 1 || !on_channel_axis(v.shape(), c, axis, rank) {
                return None;
            }
            biases.push((u.owner, k, v));
        } else {
            return None;
        }
        between.push(u.owner);
        cur = u.owner.result(0).ok()?.into();
    }
}

/// One equalization step of `p`: returns the largest relative change of a scale.
fn equalize_pair(layers: &mut [Layer], p: &mut Pair) -> f32 {
    let r1 = channel_ranges(&layers[p.first].weight, layers[p.first].out_axis);
    let r2 = channel_ranges(&layers[p.second].weight, layers[p.second].in_axis);
    let s = balanced(&r1, &r2, 0.5);
    let step = s.iter().fold(0.0f32, |m, &v| m.max((v - 1.0).abs()));
    if step < SETTLED {
        return step;
    }
    apply(layers, p, &s);
    step
}

/// Of no scaling, SmoothQuant's balance at α = ¼, ½, ¾ against the measured activation and
/// the paper's weight balance, the scale whose estimated rounding noise at the second layer's
/// output is least, rounding each side as the quantized model will: the activation between the
/// layers per tensor (step = its range over the levels) or per channel (a depthwise input),
/// the second layer's weights per output channel or per tensor.
///
/// ```text
/// noise(s) = Σ_o,i Δx_i(s)²/12 · Σ_taps (w_oi · s_i)²  +  Σ_o Δw_o(s)²/12 · Σ_i taps_oi · E[x_i²] / s_i²
/// per tensor:  Δx_i(s) = (max(0, max_k hi_k/s_k) − min(0, min_k lo_k/s_k)) / levels
/// per channel: Δx_i(s) = (max(0, hi_i) − min(0, lo_i)) / s_i / levels  (where the plan will
///              choose it: a gain of PER_CHANNEL_MIN_GAIN_DB over per tensor at the
///              channels' reach, ChannelMoments::reach_min/max)
/// Δw_o(s) = max_i |w_oi| s_i / levels   (per tensor: the max over o too)
/// ```
///
/// Where both sides round per channel along `i` (a depthwise second layer reading per-channel
/// activations) the noise does not depend on `s`; a scale that evens the channels out enough
/// turns that input per tensor again, which may be better or worse. A candidate must lower the noise by more than
/// [`GAIN`] to be taken, so that float rounding in the estimate never rescales a pair for
/// nothing.
fn choose_scale(layers: &[Layer], p: &Pair, (act_levels, w_levels): (f32, f32), per_channel_weights: bool) -> Vec<f32> {
    let m = p.activation.as_ref().expect("a measured pair");
    let c = m.max.len();
    let second = &layers[p.second];
    let (w2, ia) = (&second.weight, second.in_axis);
    let reader = ReaderNoise::of(w2, second.out_axis, ia, c);
    let noise = |s: &[f32]| -> f64 {
        let span = |lo: &[f32], hi: &[f32], i: usize| (hi[i].max(0.0) - lo[i].min(0.0)) as f64 / s[i] as f64;
        let whole = per_tensor_span(m, s);
        let spans: Vec<f64> = (0..c).map(|i| span(&m.min, &m.max, i)).collect();
        // as the plan will decide it on the rescaled model: at the channels' reach
        let reach: Vec<f64> = match m.reach_max.len() == c && m.reach_min.len() == c {
            true => (0..c).map(|i| span(&m.reach_min, &m.reach_max, i)).collect(),
            false => spans.clone(),
        };
        let per_channel = p.activation_per_channel && step_gain_db(whole, &reach) >= PER_CHANNEL_MIN_GAIN_DB;
        let dx: Vec<f64> = match per_channel {
            true => spans.iter().map(|v| v / act_levels as f64).collect(),
            false => vec![whole / act_levels as f64; c],
        };
        reader.noise(s, &dx, &m.mean_square, w_levels, per_channel_weights)
    };
    let a: Vec<f32> = (0..c).map(|i| m.max[i].abs().max(m.min[i].abs())).collect();
    let r2 = channel_ranges(w2, ia);
    let r1 = channel_ranges(&layers[p.first].weight, layers[p.first].out_axis);
    let mut best = vec![1.0f32; c];
    let unscaled = noise(&best);
    let mut least = unscaled * (1.0 - GAIN);
    for s in [
        balanced(&a, &r2, 0.25),
        balanced(&a, &r2, 0.5),
        balanced(&a, &r2, 0.75),
        balanced(&r1, &r2, 0.5),
    ] {
        let n = noise(&s);
        if n < least {
            (best, least) = (s, n);
        }
    }
    best
}

/// Divides the first layer's output channels (weights, its bias, the biases in between) by
/// `s` and multiplies the second layer's input channels by it.
fn apply(layers: &mut [Layer], p: &mut Pair, s: &[f32]) {
    p.applied = true;
    let first = &mut layers[p.first];
    scale_along(&mut first.weight, first.out_axis, s, true);
    if let Some(b) = &mut first.bias {
        // a bias of one value per channel, whatever its shape ([N], [1, N])
        b.iter_mut().zip(s).for_each(|(v, k)| *v /= k);
    }
    first.changed = true;
    for (_, _, b) in &mut p.biases {
        // the constant's only non-unit axis is the channel axis, so its flat order is channels
        b.iter_mut().zip(s).for_each(|(v, k)| *v /= k);
    }
    let second = &mut layers[p.second];
    scale_along(&mut second.weight, second.in_axis, s, false);
    second.changed = true;
}

/// Writes every changed weight and bias back as new constants and renames the keys of the
/// values in between.
fn write_back(func: OperationRef, layers: &mut [Layer], pairs: &[Pair]) -> Result<(), PassError> {
    let keys = TensorKeys::new(func);
    for l in layers.iter().filter(|l| l.changed) {
        let w = Tensor::F32(l.weight.clone());
        replace_constant(l.op, l.rule.weight, &w)?;
        if let (Some(b), Some(i)) = (&l.bias, l.rule.bias_operand) {
            replace_constant(l.op, i, &Tensor::F32(b.clone()))?;
        }
    }
    for p in pairs {
        if !p.applied {
            continue;
        }
        for (op, k, b) in &p.biases {
            replace_constant(*op, *k, &Tensor::F32(b.clone()))?;
        }
        mark_equalized(&keys, &p.between);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_axis_shapes() {
        assert!(on_channel_axis(&[8], 8, 3, 4));
        assert!(on_channel_axis(&[1, 8, 1, 1], 8, 1, 4));
        assert!(on_channel_axis(&[8, 1, 1], 8, 1, 4));
        assert!(!on_channel_axis(&[8], 8, 1, 4));
        assert!(!on_channel_axis(&[1, 1, 8], 8, 1, 4));
        assert!(!on_channel_axis(&[2, 4], 8, 1, 2));
    }

    #[test]
    fn one_step_equalizes_both_ranges() {
        // first: 2 output channels of ranges 4 and 1; second: input channels of ranges 1 and 4
        let w1 = ndarray::arr2(&[[4.0f32, -2.0], [0.5, 1.0]]).into_dyn(); // [out, in]
        let w2 = ndarray::arr2(&[[1.0f32, 4.0], [-0.5, 2.0]]).into_dyn(); // [out, in]
        let mut a = [w1.clone(), w2.clone()];
        let s = [2.0f32, 0.5]; // sqrt(4/1), sqrt(1/4)
        scale_along(&mut a[0], 0, &s, true);
        scale_along(&mut a[1], 1, &s, false);
        assert_eq!(channel_ranges(&a[0], 0), vec![2.0, 2.0]);
        assert_eq!(channel_ranges(&a[1], 1), vec![2.0, 2.0]);
        // the product through a ReLU is unchanged: w2 · relu(w1 x) for x = (1, 1)
        let y = |w1: &ArrayD<f32>, w2: &ArrayD<f32>| {
            let h: Vec<f32> = (0..2).map(|o| (w1[[o, 0]] + w1[[o, 1]]).max(0.0)).collect();
            (0..2)
                .map(|o| w2[[o, 0]] * h[0] + w2[[o, 1]] * h[1])
                .collect::<Vec<f32>>()
        };
        assert_eq!(y(&w1, &w2), y(&a[0], &a[1]));
    }
}
