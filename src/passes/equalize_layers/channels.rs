//! What `equalize-layers` reads and writes of a layer's channels, shared by its layer pairs
//! (`mod.rs`) and its norms (`norms.rs`): the layers it may rescale, their channel axes and
//! ranges, the scales it tries, the noise estimate it chooses them by, and the rewriting of a
//! constant.

use crate::calibration::ChannelMoments;
use crate::dialects::{channel_rule, ChannelRule};
use crate::ir::attrs::op_attrs;
use crate::ir::graph::{context_of, defining_op, erase_op, op_name, set_operand, uses};
use crate::ir::keys::TensorKeys;
use crate::ir::ops::{constant_value, insert_constant, is_constant_op};
use crate::passes::report::{err, PassError};
use crate::recipe::QuantConfig;
use crate::tensor::Tensor;
use melior::ir::operation::{OperationLike, OperationMutLike};
use melior::ir::{Location, OperationRef};
use ndarray::{ArrayD, Axis};

/// A channel whose range is below this share of its layer's largest is dead (all weights ≈ 0,
/// as trained filters that were switched off): scaling it would only blow up noise.
pub(super) const DEAD: f32 = 1e-12;
/// Scales are bounded so that no weight leaves f32's comfortable range.
pub(super) const MAX_SCALE: f32 = 1e6;

/// The least relative drop of the estimated noise for which a measured pair is rescaled.
pub(super) const GAIN: f64 = 1e-3;

/// Suffix of the keys of the values whose channels the pass rescales.
pub const EQUALIZED_SUFFIX: &str = "~equalized";

/// A weight the pass may rescale: its constant, its channel axes and the op's own bias.
pub(super) struct Layer<'c, 'a> {
    pub(super) op: OperationRef<'c, 'a>,
    pub(super) rule: &'static ChannelRule,
    pub(super) weight: ArrayD<f32>,
    pub(super) out_axis: usize,
    pub(super) in_axis: usize,
    /// The op's own bias operand's values, if it has one.
    pub(super) bias: Option<ArrayD<f32>>,
    pub(super) changed: bool,
}

/// True when the pass renamed `op`'s result.
pub(super) fn has_equalized_key(op: &OperationRef) -> bool {
    crate::ir::keys::location_name(op.location()).is_some_and(|n| n.ends_with(EQUALIZED_SUFFIX))
}

/// `op` as a layer: a compute op of the channel tables whose weight is an f32 constant used by
/// it alone, with axes the weight's shape allows.
pub(super) fn layer<'c, 'a>(op: OperationRef<'c, 'a>) -> Option<Layer<'c, 'a>> {
    let rule = channel_rule(&op_name(&op))?;
    let w = op.operand(rule.weight).ok()?;
    let wdef = defining_op(w).filter(is_constant_op)?;
    if uses(w).len() != 1 {
        return None;
    }
    let Tensor::F32(weight) = constant_value(wdef)? else {
        return None;
    };
    let attrs = op_attrs(&op);
    let out_axis = rule.out_axis.axis(weight.shape(), &attrs)?;
    let mut in_axis = rule.in_axis.axis(weight.shape(), &attrs)?;
    if let Some(g) = rule.group_attr {
        let groups = attrs.get(g).and_then(|v| v.as_int()).unwrap_or(1);
        if groups != 1 {
            // depthwise only: one input channel per group, one output channel per group
            if weight.shape()[in_axis] != 1 || groups as usize != weight.shape()[out_axis] {
                return None;
            }
            in_axis = out_axis;
        }
    }
    if rule.weight_rank.is_some_and(|r| r != weight.ndim()) {
        return None;
    }
    let bias = match rule.bias_operand.and_then(|i| op.operand(i).ok()) {
        None => None,
        Some(b) => match defining_op(b) {
            Some(d) if op_name(&d) == crate::dialects::onnx::NO_VALUE => None,
            Some(d) if is_constant_op(&d) && uses(b).len() == 1 => match constant_value(d) {
                Some(Tensor::F32(a)) if a.len() == weight.shape()[out_axis] => Some(a),
                _ => return None,
            },
            _ => return None,
        },
    };
    Some(Layer {
        op,
        rule,
        weight,
        out_axis,
        in_axis,
        bias,
        changed: false,
    })
}

/// The axis a layer's channels run along in a rank-`rank` activation.
pub(super) fn channel_axis(rule: &ChannelRule, rank: usize) -> Option<usize> {
    match rule.result_axis {
        a if a < 0 => rank.checked_sub(a.unsigned_abs() as usize),
        a => Some(a as usize).filter(|&a| a < rank),
    }
}

/// True when a constant of `shape` holds `c` values along `axis` of a rank-`rank` result
/// (right-aligned broadcasting): `[c]` for the last axis, `[c, 1, 1]` or `[1, c, 1, 1]` for NCHW.
pub(super) fn on_channel_axis(shape: &[usize], c: usize, axis: usize, rank: usize) -> bool {
    if shape.iter().product::<usize>() != c || shape.len() > rank {
        return false;
    }
    let at = rank - shape.len();
    shape
        .iter()
        .enumerate()
        .all(|(k, &n)| if at + k == axis { n == c } else { n == 1 })
}

/// Largest magnitude of each slice of `w` along `axis`.
pub(super) fn channel_ranges(w: &ArrayD<f32>, axis: usize) -> Vec<f32> {
    w.axis_iter(Axis(axis))
        .map(|s| s.iter().fold(0.0f32, |m, v| m.max(v.abs())))
        .collect()
}

/// Scales `s_i = x_i^α / r_i^(1−α)` (SmoothQuant's migration strength α; at ½ both sides
/// end at `sqrt(x_i · r_i)`, the paper's equalization when `x` is the first layer's weight
/// ranges), bounded; a dead channel (either side ≈ 0) takes the geometric mean of the others,
/// so that it neither sets the range in between nor loses its weights.
pub(super) fn balanced(x: &[f32], r: &[f32], alpha: f32) -> Vec<f32> {
    let top = |v: &[f32]| v.iter().fold(0.0f32, |m, &a| m.max(a));
    let (tx, tr) = (top(x), top(r));
    let raw: Vec<Option<f64>> = (0..x.len())
        .map(|i| {
            let live = x[i] > DEAD * tx && r[i] > DEAD * tr;
            live.then(|| (x[i] as f64).powf(alpha as f64) / (r[i] as f64).powf(1.0 - alpha as f64))
        })
        .collect();
    let logs: Vec<f64> = raw.iter().flatten().map(|v| v.ln()).collect();
    let mean = match logs.is_empty() {
        true => 0.0,
        false => logs.iter().sum::<f64>() / logs.len() as f64,
    };
    raw.iter()
        .map(|v| (v.unwrap_or(mean.exp()) as f32).clamp(1.0 / MAX_SCALE, MAX_SCALE))
        .collect()
}

/// (activation levels, weight levels) the noise estimate divides ranges by.
pub(super) fn quantization_levels(config: &QuantConfig) -> (f32, f32) {
    let act = match config.activations {
        Some(crate::params::StorageType::Int16) => 65535.0,
        _ => 255.0,
    };
    let w = match config.weights {
        crate::recipe::WeightMode::Int4 => 7.0,
        _ => 127.0,
    };
    (act, w)
}

/// The span of a per-tensor range over a value whose channels are divided by `s`.
pub(super) fn per_tensor_span(m: &ChannelMoments, s: &[f32]) -> f64 {
    let hi = (0..s.len()).map(|i| m.max[i] / s[i]).fold(0.0f32, f32::max);
    let lo = (0..s.len()).map(|i| m.min[i] / s[i]).fold(0.0f32, f32::min);
    (hi - lo) as f64
}

/// One layer's weights seen from its `c` input channels, for the rounding noise at its output
/// when those channels are multiplied by `s` ([`choose_scale`]'s estimate): per (output,
/// input) channel Σ w², max |w| and the number of taps.
pub(super) struct ReaderNoise {
    sq: Vec<f64>,
    mx: Vec<f32>,
    taps: Vec<f64>,
    outs: usize,
    c: usize,
}

impl ReaderNoise {
    pub(super) fn of(w: &ArrayD<f32>, out_axis: usize, in_axis: usize, c: usize) -> ReaderNoise {
        let outs = w.shape()[out_axis];
        let (mut sq, mut mx, mut taps) = (vec![0f64; outs * c], vec![0f32; outs * c], vec![0f64; outs * c]);
        for (idx, &v) in w.indexed_iter() {
            let k = idx[out_axis] * c + idx[in_axis];
            sq[k] += v as f64 * v as f64;
            mx[k] = mx[k].max(v.abs());
            taps[k] += 1.0;
        }
        ReaderNoise { sq, mx, taps, outs, c }
    }

    /// The estimated noise at the output for input channels scaled by `s` and rounded with
    /// step `dx[i]`, weights rounded per output channel (or per tensor) on `w_levels` levels,
    /// inputs of mean square `mean_square` before scaling.
    pub(super) fn noise(
        &self,
        s: &[f32],
        dx: &[f64],
        mean_square: &[f32],
        w_levels: f32,
        per_channel_weights: bool,
    ) -> f64 {
        let c = self.c;
        let dw_of =
            |o: usize| (0..c).map(|i| self.mx[o * c + i] * s[i]).fold(0.0f32, f32::max) as f64 / w_levels as f64;
        let dw_all = (0..self.outs).map(dw_of).fold(0.0f64, f64::max);
        let mut act = 0.0f64;
        let mut wn = 0.0f64;
        for o in 0..self.outs {
            let row = &self.sq[o * c..(o + 1) * c];
            act += (0..c).map(|i| row[i] * (s[i] as f64 * dx[i]).powi(2)).sum::<f64>();
            let dw = if per_channel_weights { dw_of(o) } else { dw_all };
            let x2: f64 = (0..c)
                .map(|i| self.taps[o * c + i] * mean_square[i] as f64 / (s[i] as f64).powi(2))
                .sum();
            wn += dw * dw * x2;
        }
        (act + wn) / 12.0
    }
}

/// Divides (or multiplies) slice `i` of `w` along `axis` by `s[i]`.
pub(super) fn scale_along(w: &mut ArrayD<f32>, axis: usize, s: &[f32], divide: bool) {
    for (mut sub, &k) in w.axis_iter_mut(Axis(axis)).zip(s) {
        if divide {
            sub.mapv_inplace(|v| v / k);
        } else {
            sub.mapv_inplace(|v| v * k);
        }
    }
}

/// Replaces operand `i` of `op` (a constant used by it alone) by a new constant `t` of the
/// same dialect and location.
pub(super) fn replace_constant(op: OperationRef, i: usize, t: &Tensor) -> Result<(), PassError> {
    let old =
        defining_op(op.operand(i).map_err(err)?).ok_or_else(|| PassError::new("bias or weight has no constant"))?;
    let tf = op_name(&old).starts_with("tf.");
    let nc = insert_constant(op, t, tf, old.location())?;
    set_operand(op, i, nc.result(0).map_err(err)?.into());
    if old.results().all(|r| uses(r.into()).is_empty()) {
        erase_op(old)?;
    }
    Ok(())
}

/// Appends `~equalized` to the keys of the results of `ops`, whose channels were rescaled (a
/// key that has it already keeps it).
pub(super) fn mark_equalized(keys: &TensorKeys, ops: &[OperationRef]) {
    for op in ops {
        let Some(key) = op.result(0).ok().and_then(|r| keys.get(r.into()).map(str::to_string)) else {
            continue;
        };
        if key.ends_with(EQUALIZED_SUFFIX) {
            continue;
        }
        let loc = Location::name(context_of(op), &format!("{key}{EQUALIZED_SUFFIX}"), op.location());
        crate::ir::graph::op_mut(*op).set_location(loc);
    }
}
