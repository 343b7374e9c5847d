//! The quantization plan: which activations get Q/DQ and with which parameters, read off the
//! dialect tables.
//!
//! - the activation operands of compute ops (Conv2D input, MatMul lhs) are *input points*;
//! - a compute op's result, followed through the ops an int8 kernel fuses (a bias add with a
//!   constant bias, then Relu/Relu6) when each has a single use, is its *output point* when
//!   an op reads it as int8 (or `float_read_outputs` asks for it regardless);
//! - the 8-bit input of a depthwise convolution is observed per channel, and quantized so
//!   where that cuts the rounding noise to a third or less, judged on the ranges new samples
//!   are expected to reach (`per_channel_depthwise_inputs`, `TensorStats::channel_reach`);
//!   a 16-bit one is not: its rounding noise is already 48 dB below 8 bits', and a channel's
//!   own range would only clip inputs beyond its calibration maximum (fer at W8A16: 31.66 dB
//!   per channel, 33.69 per tensor);
//! - the output of a same-scale op (Reshape, MaxPool, ...) whose input is quantized reuses
//!   the input's parameters.
//! Integer, boolean and shape-determining values are never points.

use super::{QuantConfig, Resolved};
use crate::calibration::StatsFile;
use crate::dialects::{rule, shape_operands};
use crate::ir::attrs::op_attrs;
use crate::ir::graph::{body_ops, defining_op, find_function, op_name, uses};
use crate::ir::keys::TensorKeys;
use crate::ir::ops::is_constant_op;
use crate::ir::types::{tensor_type, Dim};
use crate::ir::IrError;
use crate::params::{compute, QuantParams, RangeOptions, Scheme, StorageType};
use crate::tensor::DType;
use melior::ir::operation::OperationLike;
use melior::ir::{Module, OperationRef, Value, ValueLike};
use std::collections::{HashMap, HashSet};

/// One quantized activation.
#[derive(Debug, Clone)]
pub struct ActivationPoint<'c, 'a> {
    pub value: Value<'c, 'a>,
    pub key: String,
    /// Reuses the parameters of this key (same-scale ops); observed itself when `None`.
    pub same_as: Option<String>,
    pub params: Option<QuantParams>,
    /// Storage and scheme after the recipe's overrides.
    pub dtype: StorageType,
    pub scheme: Scheme,
    /// Calibration method an override asks for (name, percentile).
    pub method: Option<(String, Option<f64>)>,
    /// The channel axis when the point is quantized per channel (the activation input of
    /// depthwise convolutions, [`QuantConfig::per_channel_depthwise_inputs`]): observed per
    /// channel (min/max, whatever the method) and given one scale and zero point per channel.
    pub channel_axis: Option<usize>,
    /// The axis observed per channel for onnxruntime's u8s8 GEMM (the axis it reduces over,
    /// [`u8s8_axis`]), whose per-channel extremes bound its int16 pair sums; quantized per
    /// tensor all the same.
    pub observe_axis: Option<usize>,
    /// Per-channel (min, max) along `channel_axis` or `observe_axis`, from the statistics.
    pub channel_range: Option<(Vec<f32>, Vec<f32>)>,
}

#[derive(Debug, Default)]
pub struct Plan<'c, 'a> {
    pub activations: Vec<ActivationPoint<'c, 'a>>,
}

impl<'c, 'a> Plan<'c, 'a> {
    /// Keys that calibration must observe.
    pub fn observed_keys(&self) -> Vec<String> {
        self.activations
            .iter()
            .filter(|a| a.same_as.is_none())
            .map(|a| a.key.clone())
            .collect()
    }
    /// Every point's key, followers of same-scale ops included: what a calibration observes, so
    /// that a follower whose source a recipe (or `--target-sqnr`) leaves float or stores
    /// otherwise has statistics of its own when it becomes a point.
    pub fn calibrated_keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = Vec::new();
        for a in &self.activations {
            if !keys.contains(&a.key) {
                keys.push(a.key.clone());
            }
        }
        keys
    }
    /// The keys observed per channel, with their channel axis.
    pub fn channel_axes(&self) -> std::collections::BTreeMap<String, usize> {
        self.activations
            .iter()
            .filter_map(|a| {
                let quantized = a.channel_axis.filter(|_| a.same_as.is_none());
                quantized.or(a.observe_axis).map(|ax| (a.key.clone(), ax))
            })
            .collect()
    }
    /// The per-channel (min, max) the statistics hold for a value, if any.
    pub fn channel_range_of(&self, v: Value) -> Option<(&[f32], &[f32])> {
        self.point_of(v)
            .and_then(|a| a.channel_range.as_ref())
            .map(|(lo, hi)| (lo.as_slice(), hi.as_slice()))
    }
    /// The parameters of a value, if it is quantized.
    pub fn params_of(&self, v: Value) -> Option<&QuantParams> {
        self.point_of(v).and_then(|a| a.params.as_ref())
    }
    /// The point of a value, if it is one.
    fn point_of(&self, v: Value) -> Option<&ActivationPoint<'c, 'a>> {
        self.activations.iter().find(|a| a.value == v)
    }
}

/// An activation's parameters for the range (lo, hi) under `config` (symmetric or not). The
/// range is widened to hold 0 first, as TensorFlow's converter does before MLIR's
/// `fakeQuantAttrsToType` (`ConvertStatsToQDQs`: "the default nudging ... might cause
/// clamping during inference if the calibration range isn't wide enough"): the `mlir` scheme
/// alone would shift a one-sided range such as [0.5, 2] to [0, 1.5] and clip; onnxruntime's
/// and PyTorch's arithmetic widen it themselves, so for them this changes nothing.
pub fn activation_params(
    config: &QuantConfig,
    scheme: Scheme,
    dtype: StorageType,
    (lo, hi): (f32, f32),
) -> Result<QuantParams, crate::params::ParamsError> {
    let opts = activation_range_options(config, scheme);
    compute(scheme, dtype, lo.min(0.0) as f64, hi.max(0.0) as f64, &opts)
}

/// How an activation range becomes parameters: symmetric when `config` asks, narrow only then
/// and only in the `mlir` scheme.
fn activation_range_options(config: &QuantConfig, scheme: Scheme) -> RangeOptions {
    RangeOptions {
        symmetric: config.symmetric_activations,
        narrow_range: config.symmetric_activations && scheme == Scheme::Mlir,
        ..Default::default()
    }
}

/// The least gain in rounding noise for which a depthwise input is quantized per channel:
/// a third of the noise power (10·log10 3 dB). Below it the channels' ranges are alike, and
/// one scale keeps the convolution in the int8 kernels of runtimes that take one input scale
/// (onnxruntime's QLinearConv, twice as fast there on MobileNet v2). Measured gains: 2–4 dB on
/// MobileNet v2's batch-normed ReLU6 inputs and 3–5.6 dB on fer's, where per-channel scales
/// changed SQNR by ±0.2 dB; 5.5–10 dB on ppocr_det's HardSwish + affine inputs, +5 dB there.
/// The gain is taken at each channel's reach, not its extremes: fer's last depthwise input
/// gains 5.6 dB at its extremes over 32 samples, which its 16 test samples exceed by up to
/// 57 % in a channel, so that per channel it had 8 dB *more* noise there than one scale.
pub const PER_CHANNEL_MIN_GAIN_DB: f64 = 4.771_212_547_196_624;

/// How much less rounding noise per-channel parameters give than per-tensor ones, in dB:
/// `10·log10(s² / mean(s_c²))` (the noise of a uniform grid goes with its step squared, and
/// every channel holds as many values).
pub fn resolution_gain_db(per_tensor: &QuantParams, per_channel: &QuantParams) -> f64 {
    step_gain_db(per_tensor.scale[0], &per_channel.scale)
}

/// [`resolution_gain_db`] of a per-tensor step against per-channel steps (or any quantities
/// proportional to them, such as the ranges they cover).
pub fn step_gain_db(per_tensor: f64, per_channel: &[f64]) -> f64 {
    let n = per_channel.len().max(1) as f64;
    let mean_sq = per_channel.iter().map(|s| s * s).sum::<f64>() / n;
    10.0 * (per_tensor * per_tensor / mean_sq.max(f64::MIN_POSITIVE)).log10()
}

/// Per-channel activation parameters for the ranges `[lo[c], hi[c]]` along `axis`, each
/// widened to hold 0.
pub fn channel_params(
    config: &QuantConfig,
    scheme: Scheme,
    dtype: StorageType,
    lo: &[f32],
    hi: &[f32],
    axis: usize,
) -> Result<QuantParams, crate::params::ParamsError> {
    let opts = activation_range_options(config, scheme);
    // widened to hold 0 per channel, as `activation_params` does per tensor
    let lo: Vec<f64> = lo.iter().map(|&x| x.min(0.0) as f64).collect();
    let hi: Vec<f64> = hi.iter().map(|&x| x.max(0.0) as f64).collect();
    crate::params::compute_per_axis(scheme, dtype, &lo, &hi, axis, &opts)
}

fn is_float_tensor(v: Value) -> bool {
    tensor_type(v.r#type()).is_some_and(|t| t.dtype == Some(DType::F32))
}

/// A constant, or a quantized constant (`dcast(scast(const))`) as `quantize-weights` leaves
/// weights and biases, or a half constant converted back.
pub fn is_constant_like(v: Value) -> bool {
    let Some(d) = defining_op(v) else { return false };
    if is_constant_op(&d) {
        return true;
    }
    matches!(
        op_name(&d).as_str(),
        "quant.dcast" | "quant.scast" | "tf.Cast" | "arith.extf"
    ) && d.operand(0).is_ok_and(is_constant_like)
}

/// The single user of `v`, if it has exactly one use.
fn single_user<'c, 'a>(v: Value<'c, 'a>) -> Option<(OperationRef<'c, 'a>, usize)> {
    match uses(v).as_slice() {
        [u] => Some((u.owner, u.operand)),
        _ => None,
    }
}

/// True when every path from `v` ends at the function's return, through same-scale ops only:
/// the value is a model output (or a reshaped view of one), not an input of any later op.
fn only_reaches_return(v: Value) -> bool {
    let us = uses(v);
    !us.is_empty()
        && us.iter().all(|u| {
            let name = op_name(&u.owner);
            name == "func.return"
                || (rule(&name).is_some_and(|r| r.same_scale)
                    && u.owner.result(0).is_ok_and(|r| only_reaches_return(r.into())))
        })
}

/// The channel axis of `v` (NCHW: 1) when the compute ops reading it are all depthwise ONNX
/// convolutions reading it as their activation — weight `[C·m, 1, k…]` with `group = C`, so
/// output channel `o` reads input channel `o / m` alone — and its channel dim is static: an
/// integer kernel then applies input channel `c`'s scale and zero point with its weights, as
/// it applies a per-channel weight scale.
///
/// ```mlir
/// %x = "onnx.Add"(...)                                 // tensor<1x16x40x40xf32>
/// %y = "onnx.Conv"(%x, %w, %b) {group = 16 : si64}     // %w: tensor<16x1x3x3xf32>
/// // %x: one (scale, zero point) per channel, axis 1
/// ```
/// Ops without a quantization rule (a HardSwish's Mul, a residual Add) may read it too: they
/// read its dequantized value.
pub(crate) fn depthwise_input_axis(v: Value) -> Option<usize> {
    let mut depthwise = false;
    for u in uses(v) {
        let name = op_name(&u.owner);
        if !rule(&name).is_some_and(|r| r.is_compute()) {
            continue;
        }
        if name != "onnx.Conv" || u.operand != 0 {
            return None;
        }
        let w = tensor_type(u.owner.operand(1).ok()?.r#type())?;
        let group = op_attrs(&u.owner).get("group").and_then(|a| a.as_int()).unwrap_or(1);
        if group <= 1 || w.dims.get(1) != Some(&Dim::Static(1)) {
            return None;
        }
        depthwise = true;
    }
    let t = tensor_type(v.r#type())?;
    let channels_known = matches!(t.dims.get(1), Some(Dim::Static(c)) if *c > 1);
    (depthwise && channels_known).then_some(1)
}

/// A compute op's result followed through the ops an int8 kernel fuses (a bias add with a
/// constant bias, then Relu/Relu6), each the single user of the one before: where its output
/// point goes.
pub fn fused_output<'c, 'a>(op: OperationRef<'c, 'a>) -> Option<Value<'c, 'a>> {
    let mut out: Value = op.result(0).ok()?.into();
    while let Some((user, idx)) = single_user(out) {
        let Some(ur) = rule(&op_name(&user)) else { break };
        let fuses = (ur.bias && idx == 0 && user.operand(1).is_ok_and(is_constant_like)) || ur.fused_activation;
        match (fuses, user.result(0)) {
            (true, Ok(next)) => out = next.into(),
            _ => break,
        }
    }
    Some(out)
}

/// The axis onnxruntime's u8s8 GEMM reduces `v` over, when every compute op reading `v` as its
/// activation is one that GEMM runs (`dialects::ort_u8s8`: a Conv that is not depthwise, a
/// MatMul, a Gemm) and they agree on it; its dim must be static.
///
/// ```mlir
/// %x = "onnx.Relu"(...)                                // tensor<1x16x40x40xf32>
/// %y = "onnx.Conv"(%x, %w, %b) {group = 1 : si64}      // %w: tensor<32x16x3x3xf32>
/// // %x: observed per channel along axis 1
/// ```
fn u8s8_axis(v: Value) -> Option<usize> {
    use crate::dialects::ort_u8s8::{activation_axis, is_depthwise, reduction};
    let t = tensor_type(v.r#type())?;
    let mut axis = None;
    for u in uses(v) {
        let name = op_name(&u.owner);
        if !rule(&name).is_some_and(|r| r.is_compute()) {
            continue;
        }
        let r = reduction(&name).filter(|_| u.operand == 0)?;
        let attrs = op_attrs(&u.owner);
        let w = tensor_type(u.owner.operand(1).ok()?.r#type())?.static_shape()?;
        if is_depthwise(&w, &attrs) {
            return None;
        }
        let a = activation_axis(r, t.dims.len(), &attrs)?;
        if axis.is_some_and(|b| b != a) {
            return None;
        }
        axis = Some(a);
    }
    axis.filter(|&a| matches!(t.dims.get(a), Some(Dim::Static(c)) if *c > 1))
}

/// The operands of a compute op that are points when they are float activations: its
/// activation operands, and with `activation_matmuls` its weight operand too — which `add`
/// skips when it is a constant, so only a weight computed at run time (attention's K in
/// Q·Kᵀ, V in P·V) becomes a point, quantized per tensor like its other input.
///
/// ```mlir
/// %s = "onnx.Einsum"(%q, %k) {equation = "bqhd,bkhd->bhqk"}   // %q and %k: points
/// %p = "onnx.Softmax"(%s)
/// %c = "onnx.MatMul"(%p, %v)                                  // %p and %v: points
/// ```
fn activation_operands(r: &crate::dialects::OpRule, config: &QuantConfig) -> Vec<usize> {
    let weight = r.weight.map(|(i, _)| i).filter(|_| config.activation_matmuls);
    r.activations.iter().copied().chain(weight).collect()
}

/// True when some op reads `v` as int8 — a compute op's activation operand, or a same-scale
/// op whose output one reads. A compute op's output that only float ops read (the `Add`,
/// `Clip`, `Mul`, `Div` of an exported HardSwish, a Sigmoid) gains nothing from a Q/DQ pair
/// but a rounding: those ops dequantize it, and the next compute op quantizes what they make.
fn read_as_int8(v: Value, config: &QuantConfig) -> bool {
    uses(v).iter().any(|u| match rule(&op_name(&u.owner)) {
        Some(r) if r.is_compute() => activation_operands(r, config).contains(&u.operand),
        Some(r) if r.same_scale && u.operand == 0 => u.owner.result(0).is_ok_and(|o| read_as_int8(o.into(), config)),
        _ => false,
    })
}

/// `qlinear_outputs`: the compute outputs that complete an int8 kernel of onnxruntime's
/// (`dialects::ort_qlinear`) get points. An op such as Add is fused there when every
/// activation input is dequantized and its output quantized, so a compute output it reads is
/// quantized when its output is a point already and each of its other inputs is a point or
/// another such compute output.
///
/// ```mlir
/// %p = "onnx.Conv"(%x, %w, %b)          // project conv: only the Add reads %p
/// %s = "onnx.Add"(%p, %r)               // %r: a point (the block's input)
/// %y = "onnx.Conv"(%s, %w2, %b2)        // %s: a point (a conv input)
/// // %p gets a point: onnxruntime runs QLinearConv → QLinearAdd → QLinearConv
/// ```
fn ort_qlinear_points<'c, 'a>(
    ops: &[OperationRef<'c, 'a>],
    float_outputs: &[(Value<'c, 'a>, Vec<String>)],
    points: &mut Vec<ActivationPoint<'c, 'a>>,
    add: &mut dyn FnMut(Value<'c, 'a>, Option<String>, &[&str], &mut Vec<ActivationPoint<'c, 'a>>),
) {
    for op in ops {
        let Some(inputs) = crate::dialects::ort_qlinear::activation_inputs(&op_name(op), op.operand_count()) else {
            continue;
        };
        let is_point = |v: Value, points: &[ActivationPoint]| points.iter().any(|p| p.value == v);
        if !op.result(0).is_ok_and(|r| is_point(r.into(), points)) {
            continue;
        }
        let mut wanted = Vec::new();
        let complete = inputs.iter().all(|&i| match op.operand(i) {
            Ok(v) if is_point(v, points) => true,
            Ok(v) => match float_outputs.iter().find(|(f, _)| *f == v) {
                Some(f) => {
                    wanted.push(f);
                    true
                }
                None => false,
            },
            Err(_) => false,
        });
        if complete {
            for (v, names) in wanted {
                let names: Vec<&str> = names.iter().map(String::as_str).collect();
                add(*v, None, &names, points);
            }
        }
    }
}

/// Builds the plan for the main function; with `stats`, computes every point's parameters.
pub fn plan<'c, 'a>(
    module: &'a Module<'c>,
    stats: Option<&StatsFile>,
    config: &QuantConfig,
) -> Result<Plan<'c, 'a>, IrError> {
    let func = find_function(module, None)?;
    let keys = TensorKeys::new(func);
    let key = |v: Value| keys.get(v).unwrap_or("?").to_string();
    let mut points: Vec<ActivationPoint<'c, 'a>> = Vec::new();
    let mut seen: HashSet<usize> = HashSet::new();
    // shape-determining values are never quantized
    let mut shape_values: HashSet<usize> = HashSet::new();
    let ops = body_ops(func);
    for op in &ops {
        for i in shape_operands(&op_name(op), op.operand_count()) {
            if let Ok(v) = op.operand(i) {
                shape_values.insert(v.to_raw().ptr as usize);
            }
        }
    }
    // `res`: the settings of the op the point belongs to; the point's own key may match an
    // override too
    let mut add =
        |v: Value<'c, 'a>, same_as: Option<String>, names: &[&str], points: &mut Vec<ActivationPoint<'c, 'a>>| {
            let id = v.to_raw().ptr as usize;
            if !is_float_tensor(v) || shape_values.contains(&id) || seen.contains(&id) || is_constant_like(v) {
                return;
            }
            let k = key(v);
            let res: Resolved = config.resolve_point(names, Some(&k));
            let Some(dtype) = res.activations.filter(|_| !res.exclude) else {
                return;
            };
            seen.insert(id);
            let per_channel =
                config.per_channel_depthwise_inputs && config.per_channel && same_as.is_none() && dtype.bits() <= 8;
            points.push(ActivationPoint {
                value: v,
                key: k,
                same_as,
                params: None,
                dtype,
                scheme: res.scheme,
                method: res.method,
                channel_axis: per_channel.then(|| depthwise_input_axis(v)).flatten(),
                observe_axis: u8s8_axis(v),
                channel_range: None,
            });
        };
    if config.activations.is_some() || !config.overrides.is_empty() {
        // compute outputs left float, with the names of their ops (`ort_qlinear` below)
        let mut float_outputs: Vec<(Value<'c, 'a>, Vec<String>)> = Vec::new();
        for op in &ops {
            let name = op_name(op);
            let Some(r) = rule(&name) else { continue };
            let out_key = op.result(0).ok().map(|v| key(v.into())).unwrap_or_default();
            // the node name (an ONNX node's, a TF node's) as well as the op and tensor names
            let owned = super::file::op_names(op, &[&out_key]);
            let names: Vec<&str> = owned.iter().map(String::as_str).collect();
            if r.is_compute() && !config.resolve(&names).exclude {
                for i in activation_operands(r, config) {
                    if let Ok(v) = op.operand(i) {
                        add(v, None, &names, &mut points);
                    }
                }
                // follow the fused bias and activation to the output point
                let Some(out) = fused_output(*op) else {
                    continue;
                };
                // A model output keeps the int32 accumulator's precision unless asked otherwise:
                // requantizing logits to 8 bits clips every value beyond the calibration range
                // and adds a rounding step no later op needs.
                let wanted = match only_reaches_return(out) {
                    true => config.quantize_outputs,
                    false => config.float_read_outputs || read_as_int8(out, config),
                };
                if wanted {
                    add(out, None, &names, &mut points);
                } else {
                    float_outputs.push((out, owned.clone()));
                }
            }
        }
        if config.qlinear_outputs {
            ort_qlinear_points(&ops, &float_outputs, &mut points, &mut add);
        }
        // same-scale ops downstream of quantized values, in program order
        for op in &ops {
            let name = op_name(op);
            if !rule(&name).is_some_and(|r| r.same_scale) {
                continue;
            }
            let (Ok(input), Ok(out)) = (op.operand(0), op.result(0)) else {
                continue;
            };
            let out: Value = out.into();
            if config.resolve_op(op, &[&key(out)]).exclude {
                continue;
            }
            // a per-channel point's scales belong to its channel axis, which a Reshape or
            // Transpose moves: its followers are points of their own
            let Some((src, dtype)) = points
                .iter()
                .find(|p| p.value == input && p.channel_axis.is_none())
                .map(|p| (p.same_as.clone().unwrap_or(p.key.clone()), p.dtype))
            else {
                continue;
            };
            // the input of a later compute op takes the scale it already has, not its own,
            // unless a recipe gave it another storage type (then it is requantized)
            match points.iter_mut().find(|p| p.value == out) {
                Some(existing) if existing.dtype == dtype => {
                    existing.same_as = Some(src);
                    existing.channel_axis = None;
                }
                Some(_) => {}
                None => add(out, Some(src), &[&name], &mut points),
            }
        }
    }
    let mut plan = Plan { activations: points };
    if let Some(stats) = stats {
        let mut by_key: HashMap<String, QuantParams> = HashMap::new();
        for p in plan.activations.iter_mut() {
            if let Some(t) = stats.tensors.get(&p.key) {
                if let (Some(lo), Some(hi)) = (&t.channel_min, &t.channel_max) {
                    p.channel_range = Some((lo.clone(), hi.clone()));
                }
            }
            let src = p.same_as.clone().unwrap_or(p.key.clone());
            if let Some(q) = by_key.get(&src) {
                p.params = Some(q.clone());
                continue;
            }
            let t = stats.tensors.get(&src).ok_or_else(|| {
                IrError::Invalid(format!(
                    "no statistics for tensor '{src}': the statistics were calibrated with settings that leave it float \
                     (calibrate again with this run's --config / --exclude / --activations)"
                ))
            })?;
            let bad = |e: crate::params::ParamsError| IrError::Invalid(format!("tensor '{src}': {e}"));
            let per_tensor = activation_params(config, p.scheme, p.dtype, t.range).map_err(bad)?;
            let q = match (p.channel_axis, &t.channel_min, &t.channel_max) {
                (Some(axis), Some(lo), Some(hi)) => {
                    // onnxruntime's x86 QDQ selector fuses a uint8 Conv whose output has
                    // per-channel parameters into a QLinearConv, which then fails at run time
                    // ("result zero point must be a scalar"); an int8 output keeps that Conv,
                    // and the depthwise Conv reading it, unfused (float), as it must be
                    let dtype = match (p.dtype, config.runtime.is_onnxruntime()) {
                        (StorageType::Uint8, true) => StorageType::Int8,
                        (d, _) => d,
                    };
                    let per_channel = channel_params(config, p.scheme, dtype, lo, hi, axis).map_err(bad)?;
                    // judged on the ranges samples not yet seen are expected to reach: a
                    // channel whose extreme came from one calibration sample is clipped on
                    // new data, which the extremes alone do not show (the grid itself stays at
                    // the extremes: widened, it cost ppocr_cls 4–5 dB)
                    let (reach_lo, reach_hi) = t.channel_reach.as_ref().map_or((lo, hi), |(l, h)| (l, h));
                    let reach = channel_params(config, p.scheme, dtype, reach_lo, reach_hi, axis).map_err(bad)?;
                    if resolution_gain_db(&per_tensor, &reach) >= PER_CHANNEL_MIN_GAIN_DB {
                        p.dtype = dtype;
                        per_channel
                    } else {
                        p.channel_axis = None;
                        per_tensor
                    }
                }
                _ => per_tensor,
            };
            by_key.insert(src, q.clone());
            p.params = Some(q);
        }
    }
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(scale: Vec<f64>) -> QuantParams {
        QuantParams {
            scheme: Scheme::Onnx,
            dtype: StorageType::Int8,
            zero_point: vec![0; scale.len()],
            axis: (scale.len() > 1).then_some(1),
            scale,
            qmin: -128,
            qmax: 127,
        }
    }

    /// A residual block: the project conv's output %p is read only by the Add. With
    /// `qlinear_outputs` it is a point (onnxruntime then runs QLinearConv → QLinearAdd); the
    /// Add with a constant operand (%q + 3, as in an exported HardSwish) completes no int8
    /// kernel, so %q stays float either way.
    #[test]
    fn qlinear_outputs_quantize_what_completes_an_onnxruntime_int8_kernel() {
        let text = r#"
func.func @main(%x: tensor<1x4x8x8xf32>) -> (tensor<1x4x8x8xf32>, tensor<1x4x8x8xf32>) {
  %w = "onnx.Constant"() {value = dense<0.5> : tensor<4x4x1x1xf32>} : () -> tensor<4x4x1x1xf32>
  %b = "onnx.Constant"() {value = dense<0.1> : tensor<4xf32>} : () -> tensor<4xf32>
  %c3 = "onnx.Constant"() {value = dense<3.0> : tensor<f32>} : () -> tensor<f32>
  %r = "onnx.Conv"(%x, %w, %b) {group = 1 : si64} : (tensor<1x4x8x8xf32>, tensor<4x4x1x1xf32>, tensor<4xf32>) -> tensor<1x4x8x8xf32>
  %p = "onnx.Conv"(%r, %w, %b) {group = 1 : si64} : (tensor<1x4x8x8xf32>, tensor<4x4x1x1xf32>, tensor<4xf32>) -> tensor<1x4x8x8xf32>
  %s = "onnx.Add"(%p, %r) : (tensor<1x4x8x8xf32>, tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32>
  %y = "onnx.Conv"(%s, %w, %b) {group = 1 : si64} : (tensor<1x4x8x8xf32>, tensor<4x4x1x1xf32>, tensor<4xf32>) -> tensor<1x4x8x8xf32>
  %q = "onnx.Conv"(%s, %w, %b) {group = 1 : si64} : (tensor<1x4x8x8xf32>, tensor<4x4x1x1xf32>, tensor<4xf32>) -> tensor<1x4x8x8xf32>
  %h = "onnx.Add"(%q, %c3) : (tensor<1x4x8x8xf32>, tensor<f32>) -> tensor<1x4x8x8xf32>
  %z = "onnx.Conv"(%h, %w, %b) {group = 1 : si64} : (tensor<1x4x8x8xf32>, tensor<4x4x1x1xf32>, tensor<4xf32>) -> tensor<1x4x8x8xf32>
  return %y, %z : tensor<1x4x8x8xf32>, tensor<1x4x8x8xf32>
}"#;
        let ctx = crate::ir::new_context();
        let module = crate::ir::io::load_bytes(&ctx, text.as_bytes(), std::path::Path::new("t.mlir")).unwrap();
        let keys_of = |config: &QuantConfig| -> Vec<String> {
            let mut k: Vec<String> = plan(&module, None, config)
                .unwrap()
                .activations
                .into_iter()
                .map(|p| p.key)
                .collect();
            k.sort();
            k
        };
        let base = QuantConfig {
            scheme: Scheme::Onnx,
            runtime: super::super::Runtime::Onnxruntime,
            ..QuantConfig::default()
        };
        let plain = keys_of(&base);
        let fused = keys_of(&QuantConfig {
            qlinear_outputs: true,
            ..base.clone()
        });
        // keys are result numbers: %r is 0, %p 1, %s 2, %q 4, %h 5
        let added: Vec<&String> = fused.iter().filter(|k| !plain.contains(k)).collect();
        assert_eq!(added.len(), 1, "{plain:?} → {fused:?}");
        let p_key = plan(&module, None, &base).unwrap();
        let func = find_function(&module, None).unwrap();
        let keys = TensorKeys::new(func);
        let ops = body_ops(func);
        let conv_p = ops.iter().filter(|o| op_name(*o) == "onnx.Conv").nth(1).unwrap();
        let p = keys.get(conv_p.result(0).unwrap().into()).unwrap();
        assert_eq!(added[0], p, "{plain:?} → {fused:?}");
        assert!(p_key.activations.iter().all(|a| a.key != p));
    }

    /// x → conv a → conv b → conv c: an override that matches an op's output key acts on the
    /// op and on that value; `op_only` (the target leaving an op float) spares the value, which
    /// conv c goes on reading as int8.
    #[test]
    fn an_op_only_override_leaves_the_op_float_and_its_output_a_point() {
        let text = r#"
func.func @main(%x: tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32> {
  %w = "onnx.Constant"() {value = dense<0.5> : tensor<4x4x1x1xf32>} : () -> tensor<4x4x1x1xf32>
  %b = "onnx.Constant"() {value = dense<0.1> : tensor<4xf32>} : () -> tensor<4xf32>
  %0 = "onnx.Conv"(%x, %w, %b) {group = 1 : si64} : (tensor<1x4x8x8xf32>, tensor<4x4x1x1xf32>, tensor<4xf32>) -> tensor<1x4x8x8xf32>
  %1 = "onnx.Conv"(%0, %w, %b) {group = 1 : si64} : (tensor<1x4x8x8xf32>, tensor<4x4x1x1xf32>, tensor<4xf32>) -> tensor<1x4x8x8xf32>
  %2 = "onnx.Conv"(%1, %w, %b) {group = 1 : si64} : (tensor<1x4x8x8xf32>, tensor<4x4x1x1xf32>, tensor<4xf32>) -> tensor<1x4x8x8xf32>
  return %2 : tensor<1x4x8x8xf32>
}"#;
        let ctx = crate::ir::new_context();
        let module = crate::ir::io::load_bytes(&ctx, text.as_bytes(), std::path::Path::new("t.mlir")).unwrap();
        let func = find_function(&module, None).unwrap();
        let keys = TensorKeys::new(func);
        let ops: Vec<_> = body_ops(func)
            .into_iter()
            .filter(|o| op_name(o) == "onnx.Conv")
            .collect();
        let key_of = |v: Value| keys.get(v).unwrap().to_string();
        let (x, a, b) = (
            key_of(ops[0].operand(0).unwrap()),
            key_of(ops[0].result(0).unwrap().into()),
            key_of(ops[1].result(0).unwrap().into()),
        );
        let points = |op_only| -> Vec<String> {
            let config = QuantConfig {
                scheme: Scheme::Onnx,
                overrides: vec![super::super::Override {
                    pattern: b.clone(),
                    exclude: true,
                    op_only,
                    ..Default::default()
                }],
                ..QuantConfig::default()
            };
            let mut p: Vec<String> = plan(&module, None, &config)
                .unwrap()
                .activations
                .into_iter()
                .map(|p| p.key)
                .collect();
            p.sort();
            p
        };
        let sorted = |mut v: Vec<String>| {
            v.sort();
            v
        };
        // conv b float either way; its output b, conv c's input, stays a point only when the
        // override spares the value (a: conv a's output, read by a compute op)
        assert_eq!(points(true), sorted(vec![x.clone(), a.clone(), b.clone()]));
        assert_eq!(points(false), sorted(vec![x, a]));
    }

    #[test]
    fn resolution_gain_is_the_noise_power_ratio() {
        // steps 1 and 1/4 of one step 1: mean square 17/32, gain 10·log10(32/17)
        let g = resolution_gain_db(&params(vec![1.0]), &params(vec![1.0, 0.25]));
        assert!((g - 10.0 * (32.0f64 / 17.0).log10()).abs() < 1e-12);
        // equal channels gain nothing
        assert_eq!(resolution_gain_db(&params(vec![0.5]), &params(vec![0.5; 4])), 0.0);
        // a third of the noise is the threshold exactly
        let s = (1.0f64 / 3.0).sqrt();
        let g = resolution_gain_db(&params(vec![1.0]), &params(vec![s; 3]));
        assert!((g - PER_CHANNEL_MIN_GAIN_DB).abs() < 1e-9);
    }
}
