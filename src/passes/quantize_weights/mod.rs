//! `quantize-weights`: stores each weight of a compute op as integers — per-channel symmetric
//! narrow-range int8 by default (int4 and per-tensor as options) — followed by `quant.scast`
//! to the quantized type and `quant.dcast` to float; the bias after it (BiasAdd with a constant
//! operand) becomes int32 with scale = input scale × weight scale, per channel when the weight
//! is. fp16/bf16 is a weight-only mode: half constants converted back with a cast.
//!
//! ```mlir
//! %w = "tf.Const"() {value = dense<...> : tensor<3x3x1x16xf32>}
//! %0 = "tf.Conv2D"(%x, %w) ...
//! // becomes
//! %wq = "tf.Const"() {value = dense<...> : tensor<3x3x1x16xi8>}
//! %ws = quant.scast %wq : tensor<3x3x1x16xi8> to tensor<3x3x1x16x!quant.uniform<i8<-127:127>:f32:3, {...}>>
//! %wd = quant.dcast %ws : ... to tensor<3x3x1x16xf32>
//! %0 = "tf.Conv2D"(%x, %wd) ...
//! ```
//! A weight shared by several ops is quantized once; bias overflows are reported per channel.

mod u8s8;

use super::{PassOptions, PassReport};
use crate::dialects::weight_layout::WeightLayout;
use crate::dialects::{rule, OpRule};
use crate::ir::attrs::op_attrs;
use crate::ir::constants::int4_attribute;
use crate::ir::graph::{body_ops, defining_op, erase_op, find_function, insert_after, op_name, set_operand, uses};
use crate::ir::ops::is_constant_op;
use crate::ir::ops::location_string;
use crate::ir::ops::{constant_value, insert_constant, insert_constant_attr};
use crate::ir::quant::quantized_tensor_type;
use crate::params::gptq::Gram;
use crate::params::{
    compute, compute_per_axis, quantize, quantize_bias, to_bf16, to_f16, QuantParams, RangeOptions, Rounding,
    StorageType,
};
use crate::passes::report::{err, Change, PassError};
use crate::recipe::{plan, Resolved, Runtime, WeightMode};
use crate::tensor::Tensor;
use melior::ir::operation::{OperationBuilder, OperationLike};
use melior::ir::{Location, Module, OperationRef, Value, ValueLike};
use ndarray::{ArrayD, Axis};
use std::collections::HashMap;
pub use u8s8::U8_WEIGHTS_ABOVE_DB;
use u8s8::{u8s8_layer, widen_for_u8s8, U8s8Layer};

/// Per-channel (or global) symmetric parameters of a weight.
/// A weight channel whose largest |w| is at most this fraction of its layer's largest is dead
/// (fer's `conv2d_1` has two at 2e-34 beside weights of order 0.1): quantized at its own
/// scale, its bias would not fit int32 at input scale × weight scale, and its scale is near
/// f32's underflow. It gets the scale of the layer's largest channel instead, where its
/// weights are 0 — what they contribute — and its bias fits.
pub const DEAD_CHANNEL: f64 = 1e-20;

/// Per-channel ranges with the dead channels' replaced by the widest channel's; returns how
/// many were.
fn revive_dead_channels(mins: &mut [f64], maxs: &mut [f64]) -> usize {
    let abs: Vec<f64> = mins
        .iter()
        .zip(maxs.iter())
        .map(|(lo, hi)| lo.abs().max(hi.abs()))
        .collect();
    let Some((widest, &top)) = abs.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)) else {
        return 0;
    };
    if top <= 0.0 {
        return 0;
    }
    let (lo, hi) = (mins[widest], maxs[widest]);
    let mut n = 0;
    for c in 0..abs.len() {
        if abs[c] <= DEAD_CHANNEL * top {
            (mins[c], maxs[c]) = (lo, hi);
            n += 1;
        }
    }
    n
}

pub(crate) fn weight_params(
    w: &ArrayD<f32>,
    axis: Option<usize>,
    res: &Resolved,
) -> Result<(QuantParams, usize), PassError> {
    let dtype = if res.weights == WeightMode::Int4 {
        StorageType::Int4
    } else {
        StorageType::Int8
    };
    let opts = RangeOptions {
        symmetric: true,
        narrow_range: true,
        reduce_range: res.reduce_range,
        ..Default::default()
    };
    let min_max = |v: ndarray::ArrayViewD<f32>| {
        v.iter()
            .fold((0f64, 0f64), |(lo, hi), &x| (lo.min(x as f64), hi.max(x as f64)))
    };
    match axis {
        Some(a) if a < w.ndim() => {
            let (mut mins, mut maxs) = channel_min_max(w, a);
            let dead = revive_dead_channels(&mut mins, &mut maxs);
            Ok((
                compute_per_axis(res.scheme, dtype, &mins, &maxs, a, &opts).map_err(err)?,
                dead,
            ))
        }
        Some(a) => Err(err(format!("axis {a} of a weight of shape {:?}", w.shape()))),
        None => {
            let (lo, hi) = min_max(w.view());
            Ok((compute(res.scheme, dtype, lo, hi, &opts).map_err(err)?, 0))
        }
    }
}

/// The minimum and maximum of each index of axis `a` of `w`, 0 included (as a symmetric range
/// needs), in one pass over the weight in memory order: a matrix product's weight [K, N] is
/// quantized per column, and reading it column by column strides through all of it.
fn channel_min_max(w: &ArrayD<f32>, a: usize) -> (Vec<f64>, Vec<f64>) {
    let c = w.shape()[a];
    let inner: usize = w.shape()[a + 1..].iter().product();
    let (mut lo, mut hi) = (vec![0f32; c], vec![0f32; c]);
    let standard = w.as_standard_layout();
    let flat = standard.as_slice().expect("standard layout");
    // blocks of [C, inner]: channel ch owns the ch-th run of `inner` values of each block; a
    // block of a matrix product's weight [K, N] (inner = 1) is a row, folded value by value
    // into the channels' extremes (a loop that vectorises)
    for block in flat.chunks_exact((c * inner).max(1)) {
        if inner == 1 {
            for ((l, h), &x) in lo.iter_mut().zip(hi.iter_mut()).zip(block) {
                *l = l.min(x);
                *h = h.max(x);
            }
            continue;
        }
        for ((l, h), run) in lo.iter_mut().zip(hi.iter_mut()).zip(block.chunks_exact(inner.max(1))) {
            for &x in run {
                *l = l.min(x);
                *h = h.max(x);
            }
        }
    }
    (
        lo.into_iter().map(f64::from).collect(),
        hi.into_iter().map(f64::from).collect(),
    )
}

/// Appends a chain of one-operand ops (`name`, result type) after `first`, each consuming the
/// previous result; returns the last result.
fn chain_after<'c, 'a>(
    first: OperationRef<'c, 'a>,
    ops: &[(&str, melior::ir::Type<'c>)],
    loc: Location<'c>,
) -> Result<Value<'c, 'a>, PassError> {
    let mut cur = first;
    for (name, ty) in ops {
        let op = OperationBuilder::new(name, loc)
            .add_operands(&[cur.result(0).map_err(err)?.into()])
            .add_results(&[*ty])
            .build()
            .map_err(err)?;
        cur = insert_after(cur, op)?;
    }
    Ok(cur.result(0).map_err(err)?.into())
}

/// Inserts, after `anchor`, a constant built by `make` (given the op to insert before, the
/// context and the location) followed by the chain `ops`; returns the chain's float value.
fn constant_then<'c, 'a>(
    anchor: OperationRef<'c, 'a>,
    key: &str,
    make: impl FnOnce(OperationRef<'c, 'a>, &'c melior::Context, Location<'c>) -> Result<OperationRef<'c, 'a>, PassError>,
    ops: impl FnOnce(&'c melior::Context) -> Result<Vec<(&'static str, melior::ir::Type<'c>)>, PassError>,
) -> Result<Value<'c, 'a>, PassError> {
    let ctx = crate::ir::graph::context_of(&anchor);
    let loc = Location::name(ctx, key, anchor.location());
    let next = anchor
        .next_in_block()
        .ok_or_else(|| err("a constant at the end of its block"))?;
    let c = make(next, ctx, loc)?;
    chain_after(c, &ops(ctx)?, loc)
}

/// Inserts `const(storage) → scast → dcast` after `anchor`; returns the float value.
fn quantized_constant<'c, 'a>(
    anchor: OperationRef<'c, 'a>,
    like: Value<'c, 'a>,
    storage: &Tensor,
    p: &QuantParams,
    tf: bool,
    key: &str,
) -> Result<Value<'c, 'a>, PassError> {
    let make = |next, ctx, loc| match (p.dtype, storage) {
        // 4-bit storage: an i4/ui4 constant, one element per byte
        (StorageType::Int4, Tensor::I8(a)) => {
            let bytes: Vec<u8> = a.iter().map(|&v| v as u8).collect();
            Ok(insert_constant_attr(
                next,
                int4_attribute(ctx, a.shape(), &bytes, false),
                tf,
                loc,
            )?)
        }
        (StorageType::Uint4, Tensor::U8(a)) => {
            let bytes: Vec<u8> = a.iter().copied().collect();
            Ok(insert_constant_attr(
                next,
                int4_attribute(ctx, a.shape(), &bytes, true),
                tf,
                loc,
            )?)
        }
        // 8-bit unsigned storage: MLIR's quant storage is signless, the same bits as i8
        (StorageType::Uint8, Tensor::U8(a)) => Ok(insert_constant(next, &Tensor::I8(a.mapv(|v| v as i8)), tf, loc)?),
        _ => Ok(insert_constant(next, storage, tf, loc)?),
    };
    let float = like.r#type();
    constant_then(anchor, key, make, |ctx| {
        Ok(vec![
            ("quant.scast", quantized_tensor_type(ctx, float, p)?),
            ("quant.dcast", float),
        ])
    })
}

/// Inserts `const(half) → cast to f32` after `anchor`.
fn half_constant<'c, 'a>(
    anchor: OperationRef<'c, 'a>,
    like: Value<'c, 'a>,
    half: &Tensor,
    tf: bool,
    key: &str,
) -> Result<Value<'c, 'a>, PassError> {
    let cast = if tf { "tf.Cast" } else { "arith.extf" };
    let float = like.r#type();
    constant_then(
        anchor,
        key,
        |next, _, loc| Ok(insert_constant(next, half, tf, loc)?),
        |_| Ok(vec![(cast, float)]),
    )
}

/// A compute op's constant f32 weight and how the recipe quantizes it.
pub struct WeightSite<'c, 'a> {
    pub rule: &'static OpRule,
    /// The weight's operand index, value and defining constant.
    pub index: usize,
    pub value: Value<'c, 'a>,
    pub def: OperationRef<'c, 'a>,
    pub values: ArrayD<f32>,
    /// Its per-channel axis, `None` per tensor.
    pub axis: Option<usize>,
    pub res: Resolved,
    /// The weight's key (`<constant>/weight`) and the op's output key.
    pub key: String,
    pub out_key: String,
}

/// The weight of `op` that `config` quantizes; `None` for an op with no rule or weight
/// operand, a weight that is not a constant f32, or an op the recipe excludes.
pub fn weight_site<'c, 'a>(
    op: OperationRef<'c, 'a>,
    config: &crate::recipe::QuantConfig,
) -> Option<WeightSite<'c, 'a>> {
    let name = op_name(&op);
    let r = rule(&name)?;
    let (wi, axis_rule) = r.weight?;
    let w = op.operand(wi).ok()?;
    let def = defining_op(w).filter(is_constant_op)?;
    let Some(Tensor::F32(wt)) = constant_value(def) else {
        return None;
    };
    let key = format!(
        "{}/weight",
        crate::ir::keys::location_name(def.location()).unwrap_or_else(|| location_string(def.location()))
    );
    let out_key = op
        .result(0)
        .ok()
        .and_then(|r| crate::ir::keys::location_name(r.owner().location()))
        .unwrap_or_default();
    let res = config.resolve_op(&op, &[&key]);
    if res.exclude {
        return None;
    }
    let axis = if res.per_channel {
        axis_rule.axis(wt.shape(), &op_attrs(&op))
    } else {
        None
    };
    Some(WeightSite {
        rule: r,
        index: wi,
        value: w,
        def,
        values: wt,
        axis,
        res,
        key,
        out_key,
    })
}

pub fn run(module: &Module, options: &PassOptions) -> Result<PassReport, PassError> {
    let plan = plan(module, options.stats.as_ref(), &options.config)?;
    run_with_plan(module, &options.config, &plan)
}

/// Most bytes of float weights the pass holds at once: the weights of a batch are fitted and
/// quantized in parallel, then written into the IR in op order.
const BATCH_BYTES: usize = 64 << 20;

/// A weight to quantize, as read from the IR, and what its fitting needs besides (owned, so
/// that weights are fitted on several threads).
struct Job<'c, 'a> {
    op: OperationRef<'c, 'a>,
    rule: &'static OpRule,
    index: usize,
    value: Value<'c, 'a>,
    def: OperationRef<'c, 'a>,
    key: String,
    out_key: String,
    fit: Fit,
}

/// What a weight's parameters are fitted from.
struct Fit {
    values: ArrayD<f32>,
    axis: Option<usize>,
    res: Resolved,
    u8s8: Option<U8s8Layer>,
}

/// A fitted int8/int4 weight: its parameters, its dead channels and what the u8s8 widening
/// changed.
type Fitted = (QuantParams, usize, Vec<(Change, usize)>);

/// The pass with a plan made already (`quantize` makes one for both quantize passes).
pub fn run_with_plan<'c, 'a>(
    module: &'a Module<'c>,
    config: &crate::recipe::QuantConfig,
    plan: &crate::recipe::Plan<'c, 'a>,
) -> Result<PassReport, PassError> {
    let func = find_function(module, None)?;
    let mut state = State::default();
    let mut batch: Vec<Job> = Vec::new();
    let mut bytes = 0;
    for op in body_ops(func) {
        if state.erased.contains(&(op.to_raw().ptr as usize)) {
            continue;
        }
        let Some(site) = weight_site(op, config) else { continue };
        let id = (site.def.to_raw().ptr as usize, site.axis);
        // a weight an op of this batch reads too: that op's quantized copy is made first
        if batch.iter().any(|j| j.id() == id) {
            state.flush(std::mem::take(&mut batch), config, plan)?;
            bytes = 0;
        }
        if let Some((v, _)) = state.done.get(&id) {
            set_operand(op, site.index, *v);
            state.report.count(Change::SharedWeightsReused);
            // the last op to move to the shared quantized copy leaves the float one unused
            let def = site.def;
            if uses(def.result(0).map_err(err)?.into()).is_empty() && state.erased.insert(def.to_raw().ptr as usize) {
                erase_op(def)?;
            }
            continue;
        }
        // a measured shift for an op without its bias: a bias of zeros takes it (a second
        // reader of a shared weight, above, keeps its bias as it is)
        if let Some(shift) = config.bias_shifts.get(&site.out_key) {
            if lacks_own_bias(op, site.rule) {
                add_zero_bias(op, site.rule, shift.len())?;
                state.report.count(Change::BiasesAdded);
            }
        }
        let widens =
            config.runtime == Runtime::Onnxruntime && site.res.weights == WeightMode::Int8 && !site.res.reduce_range;
        bytes += site.values.len() * std::mem::size_of::<f32>();
        batch.push(Job {
            op,
            rule: site.rule,
            index: site.index,
            value: site.value,
            def: site.def,
            key: site.key,
            out_key: site.out_key,
            fit: Fit {
                values: site.values,
                axis: site.axis,
                u8s8: if widens { u8s8_layer(op, plan) } else { None },
                res: site.res,
            },
        });
        if bytes >= BATCH_BYTES {
            state.flush(std::mem::take(&mut batch), config, plan)?;
            bytes = 0;
        }
    }
    state.flush(batch, config, plan)?;
    Ok(state.report)
}

impl Job<'_, '_> {
    /// Which quantized copy the weight gets: one per constant and per-channel axis.
    fn id(&self) -> (usize, Option<usize>) {
        (self.def.to_raw().ptr as usize, self.fit.axis)
    }
}

impl Fit {
    /// The parameters of an int8/int4 weight (widened for onnxruntime's u8s8 GEMM where it
    /// runs on it); `None` for a half-precision one.
    fn fitted(&self) -> Result<Option<Fitted>, PassError> {
        if !matches!(self.res.weights, WeightMode::Int8 | WeightMode::Int4) {
            return Ok(None);
        }
        let (mut p, dead) = weight_params(&self.values, self.axis, &self.res)?;
        let changes = match &self.u8s8 {
            Some(layer) => widen_for_u8s8(layer, &self.values, &mut p),
            None => Vec::new(),
        };
        Ok(Some((p, dead, changes)))
    }
}

/// What the pass has done so far.
#[derive(Default)]
struct State<'c, 'a> {
    report: PassReport,
    /// Each weight's quantized value and parameters, by constant and axis.
    done: HashMap<(usize, Option<usize>), (Value<'c, 'a>, Option<QuantParams>)>,
    /// Constants erased: the loop must not touch them again (a bias constant inserted next to
    /// its BiasAdd may stand later in the block).
    erased: std::collections::HashSet<usize>,
}

impl<'c, 'a> State<'c, 'a> {
    /// Quantizes the weights of `batch`: parameters and storage computed in parallel, the
    /// biases, the reports and the IR changes in op order (the same on any number of threads).
    fn flush(
        &mut self,
        batch: Vec<Job<'c, 'a>>,
        config: &crate::recipe::QuantConfig,
        plan: &crate::recipe::Plan<'c, 'a>,
    ) -> Result<(), PassError> {
        use rayon::prelude::*;
        if batch.is_empty() {
            return Ok(());
        }
        let fits: Vec<&Fit> = batch.iter().map(|j| &j.fit).collect();
        let fitted: Vec<Result<Option<Fitted>, PassError>> = fits.par_iter().map(|f| f.fitted()).collect();
        // the biases (which may enlarge a weight scale) and GPTQ, in order
        let mut finals: Vec<(Option<QuantParams>, Option<ArrayD<f32>>)> = Vec::with_capacity(batch.len());
        for (job, fitted) in batch.iter().zip(fitted) {
            finals.push(match fitted? {
                Some((p, dead, changes)) => {
                    if dead > 0 {
                        self.report.add(Change::DeadChannels, dead);
                    }
                    for (c, n) in changes {
                        self.report.add(c, n);
                    }
                    let (p, rounded) = self.with_bias(job, p, config, plan)?;
                    (Some(p), rounded)
                }
                None => (None, None),
            });
        }
        let storage: Vec<Result<Tensor, PassError>> = batch
            .iter()
            .map(|j| &j.fit)
            .zip(&finals)
            .collect::<Vec<_>>()
            .par_iter()
            .map(|(fit, (p, rounded))| match (p, fit.res.weights) {
                (Some(p), _) => {
                    quantize(&rounded.as_ref().unwrap_or(&fit.values).view(), p, Rounding::HalfEven).map_err(err)
                }
                (None, WeightMode::Bf16) => Ok(Tensor::BF16(to_bf16(&fit.values.view()))),
                (None, _) => Ok(Tensor::F16(to_f16(&fit.values.view()))),
            })
            .collect();
        for ((job, (p, _)), storage) in batch.iter().zip(finals).zip(storage) {
            let storage = storage?;
            let tf = op_name(&job.def).starts_with("tf.");
            let value = match &p {
                Some(p) => quantized_constant(job.def, job.value, &storage, p, tf, &job.key)?,
                None => half_constant(job.def, job.value, &storage, tf, &job.key)?,
            };
            set_operand(job.op, job.index, value);
            self.done.insert(job.id(), (value, p));
            self.report.count(Change::WeightsQuantized);
            erase_if_unused(job.def, &mut self.erased)?;
        }
        Ok(())
    }

    /// Quantizes the bias after `job`'s op at input scale × weight scale (enlarging a weight
    /// scale where the bias would not fit int32, as the policy says), or corrects a float bias
    /// by its measured shift; then rounds the weight by GPTQ where a Gram matrix was measured.
    /// Returns the weight's final parameters, and its GPTQ-rounded values.
    fn with_bias(
        &mut self,
        job: &Job<'c, 'a>,
        mut p: QuantParams,
        config: &crate::recipe::QuantConfig,
        plan: &crate::recipe::Plan<'c, 'a>,
    ) -> Result<(QuantParams, Option<ArrayD<f32>>), PassError> {
        let (op, r, wt, axis, out_key) = (job.op, job.rule, &job.fit.values, job.fit.axis, &job.out_key);
        let report = &mut self.report;
        // the bias after this op, at input scale × weight scale
        if let Some(bias) = bias_site(op, r, plan) {
            let (badd, bidx, bdef, mut bvals, s_in) = bias;
            // bias correction's measured shift of this layer's output
            if let Some(shift) = config.bias_shifts.get(out_key).filter(|s| s.len() == bvals.len()) {
                bvals.iter_mut().zip(shift).for_each(|(b, s)| *b -= s);
            }
            let q =
                quantize_bias(bvals.as_slice().unwrap_or(&[]), &s_in, &p.scale, config.bias_overflow).map_err(err)?;
            // how small the channel's weights are, next to the layer's largest
            let absmax = |c: Option<usize>| -> f64 {
                match (axis, c) {
                    (Some(a), Some(c)) if c < wt.shape()[a] => wt
                        .index_axis(Axis(a), c)
                        .iter()
                        .fold(0f64, |m, v| m.max(v.abs() as f64)),
                    _ => wt.iter().fold(0f64, |m, v| m.max(v.abs() as f64)),
                }
            };
            let top = if q.overflows.is_empty() { 0.0 } else { absmax(None) };
            for o in &q.overflows {
                report.warnings.push(format!(
                    "{}: bias of channel {} (largest |weight| {:.3e}, {:.1e} of the layer's) overflows int32 by a factor of {:.3}{}",
                    location_string(badd.location()),
                    o.channel,
                    absmax(Some(o.channel)),
                    absmax(Some(o.channel)) / top.max(f64::MIN_POSITIVE),
                    o.factor,
                    if config.bias_overflow == crate::params::BiasOverflowPolicy::Clip {
                        " (clipped)"
                    } else {
                        " (weight scale enlarged)"
                    }
                ));
            }
            if q.weight_scale != p.scale && p.scale.len() == q.weight_scale.len() {
                // enlarged so that the bias fits int32: the weight uses the new scales
                p.scale = q.weight_scale.clone();
            }
            let bp = QuantParams {
                scheme: p.scheme,
                dtype: StorageType::Int32,
                axis: (q.scale.len() > 1).then_some(0),
                zero_point: vec![0; q.scale.len()],
                scale: q.scale.clone(),
                qmin: i32::MIN as i64,
                qmax: i32::MAX as i64,
            };
            let storage = Tensor::I32(ArrayD::from_shape_vec(bvals.raw_dim(), q.values).map_err(err)?);
            let bv: Value = badd.operand(bidx).map_err(err)?;
            let bkey = format!(
                "{}/bias",
                crate::ir::keys::location_name(bdef.location()).unwrap_or_default()
            );
            let nv = quantized_constant(bdef, bv, &storage, &bp, op_name(&bdef).starts_with("tf."), &bkey)?;
            set_operand(badd, bidx, nv);
            report.count(Change::BiasesQuantized);
            erase_if_unused(bdef, &mut self.erased)?;
        } else if let Some(shift) = config
            .bias_shifts_float_input
            .get(out_key)
            .or_else(|| config.bias_shifts.get(out_key))
        {
            // a float input: the bias stays float, and takes the weights' shift alone
            // (measured so where calibration had quantized that input)
            if let Some((owner, bidx, bdef, mut bvals)) = float_bias(op, r).filter(|b| b.3.len() == shift.len()) {
                bvals.iter_mut().zip(shift).for_each(|(b, s)| *b -= s);
                let nc = insert_constant(
                    owner,
                    &Tensor::F32(bvals),
                    op_name(&bdef).starts_with("tf."),
                    bdef.location(),
                )
                .map_err(err)?;
                set_operand(owner, bidx, nc.result(0).map_err(err)?.into());
                report.count(Change::FloatBiasesCorrected);
                erase_if_unused(bdef, &mut self.erased)?;
            }
        }
        let rounded = match config.weight_grams.get(out_key) {
            Some(gram) => match gptq_rounded(op, wt, &p, gram) {
                Ok(w) => {
                    report.count(Change::WeightsGptq);
                    Some(w)
                }
                Err(e) => {
                    report
                        .warnings
                        .push(format!("{}: rounded to nearest, not by GPTQ: {e}", job.key));
                    None
                }
            },
            None => None,
        };
        Ok((p, rounded))
    }
}

/// Erases constant `def` once nothing reads it, and remembers it in `erased`, so that the
/// loop over the block does not reach it later (a bias constant may stand after its reader).
/// Erased whether or not its address is in `erased` already: a constant made in this pass
/// may sit where an erased one was.
fn erase_if_unused(def: OperationRef, erased: &mut std::collections::HashSet<usize>) -> Result<(), PassError> {
    if uses(def.result(0).map_err(err)?.into()).is_empty() {
        erased.insert(def.to_raw().ptr as usize);
        erase_op(def)?;
    }
    Ok(())
}

/// `w` rounded by GPTQ on the grid of `p` for the inputs whose Gram matrices are `gram`
/// (`dialects::weight_layout`): values exactly on the grid, so that quantizing them with `p`
/// gives GPTQ's levels.
pub fn gptq_rounded(op: OperationRef, w: &ArrayD<f32>, p: &QuantParams, gram: &Gram) -> Result<ArrayD<f32>, String> {
    let name = op_name(&op);
    let layout = WeightLayout::of(&name, &op_attrs(&op), w.shape())
        .ok_or_else(|| format!("{name} in this form is not handled"))?;
    layout.round_by_gptq(w, p, gram).map_err(|e| e.to_string())
}

/// A bias to quantize: the op that reads it, the operand index, the constant, its values and
/// the scale of the compute op's quantized activation input: one, or one per output channel
/// (a depthwise convolution's per-channel input, channel `o` reading input channel `o / m`).
pub(crate) type BiasSite<'c, 'a> = (OperationRef<'c, 'a>, usize, OperationRef<'c, 'a>, ArrayD<f32>, Vec<f64>);

/// The bias to quantize with compute op `op`: its own bias operand when the table names one
/// (ONNX Conv/Gemm input C), else the bias add right after it (its single use). The bias must
/// be a constant f32 rank-1 tensor, and a per-channel input's channel count must divide it.
pub(crate) fn bias_site<'c, 'a>(
    op: OperationRef<'c, 'a>,
    r: &OpRule,
    plan: &crate::recipe::Plan<'c, 'a>,
) -> Option<BiasSite<'c, 'a>> {
    let s_in = plan.params_of(op.operand(*r.activations.first()?).ok()?)?;
    let (owner, idx, bdef, b) = float_bias(op, r)?;
    let (n, c) = (s_in.scale.len(), b.len());
    let scales = match n {
        1 => s_in.scale.clone(),
        _ if n <= c && c % n == 0 => (0..c).map(|o| s_in.scale[o / (c / n)]).collect(),
        _ => return None,
    };
    Some((owner, idx, bdef, b, scales))
}

/// The constant rank-1 f32 bias of compute op `op`, whatever its input's precision: the op
/// that reads it, the operand index, the constant and its values.
pub(crate) fn float_bias<'c, 'a>(
    op: OperationRef<'c, 'a>,
    r: &OpRule,
) -> Option<(OperationRef<'c, 'a>, usize, OperationRef<'c, 'a>, ArrayD<f32>)> {
    let (owner, idx) = match r.bias_operand {
        Some(bi) => (op, bi),
        None => {
            let out: Value = op.result(0).ok()?.into();
            let all = uses(out);
            let [u] = all.as_slice() else { return None };
            if u.operand != 0 || !rule(&op_name(&u.owner)).is_some_and(|r| r.bias) {
                return None;
            }
            (u.owner, 1)
        }
    };
    let bdef = defining_op(owner.operand(idx).ok()?).filter(is_constant_op)?;
    let Tensor::F32(b) = constant_value(bdef)? else {
        return None;
    };
    (b.ndim() == 1).then_some((owner, idx, bdef, b))
}

/// Whether compute op `op` lacks the own bias operand its table names (ONNX Conv and
/// ConvTranspose input 2 left out or empty; Gemm's C, where `beta` is 1), so that a bias of
/// zeros can be given to it ([`add_zero_bias`]) without changing what it computes.
pub(crate) fn lacks_own_bias(op: OperationRef, r: &OpRule) -> bool {
    let Some(bi) = r.bias_operand else { return false };
    let n = op.operand_count();
    let absent = n == bi
        || (n == bi + 1
            && op
                .operand(bi)
                .ok()
                .and_then(defining_op)
                .is_some_and(|d| op_name(&d) == crate::dialects::onnx::NO_VALUE));
    let beta_one = op_attrs(&op)
        .get("beta")
        .and_then(|v| v.as_f64())
        .is_none_or(|b| b == 1.0);
    absent && (op_name(&op) != "onnx.Gemm" || beta_one)
}

/// Gives `op` (one that [`lacks_own_bias`]) a bias of `channels` zeros, for bias correction's
/// shift to go to:
///
/// ```mlir
/// %y = "onnx.Conv"(%x, %w) {...} : (tensor<1x8x4x4xf32>, tensor<16x8x1x1xf32>) -> ...
/// // becomes
/// %b = "onnx.Constant"() {value = dense<0.0> : tensor<16xf32>}
/// %y = "onnx.Conv"(%x, %w, %b) {...}
/// ```
fn add_zero_bias(op: OperationRef, r: &OpRule, channels: usize) -> Result<(), PassError> {
    let Some(bi) = r.bias_operand else { return Ok(()) };
    let zeros = Tensor::F32(ArrayD::zeros(ndarray::IxDyn(&[channels])));
    let c = insert_constant(op, &zeros, false, op.location()).map_err(err)?;
    let mut operands: Vec<Value> = op.operands().take(bi).collect();
    operands.push(c.result(0).map_err(err)?.into());
    crate::ir::graph::set_operands(op, &operands);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::Dimension;

    #[test]
    fn channel_ranges_are_each_channels_extremes_with_zero() {
        for shape in [vec![5, 7], vec![3, 4, 2, 2], vec![2, 3, 1]] {
            let w = ArrayD::from_shape_fn(ndarray::IxDyn(&shape), |i| {
                let k = i.slice().iter().fold(7usize, |h, &d| h * 31 + d);
                (k % 23) as f32 * 0.37 - 2.0 + (k % 5) as f32 * 0.011
            });
            for a in 0..shape.len() {
                let want: (Vec<f64>, Vec<f64>) = w
                    .axis_iter(Axis(a))
                    .map(|v| {
                        v.iter()
                            .fold((0f64, 0f64), |(lo, hi), &x| (lo.min(x as f64), hi.max(x as f64)))
                    })
                    .unzip();
                assert_eq!(channel_min_max(&w, a), want, "{shape:?} axis {a}");
                // a transposed view is read in its logical order
                let t = w.t().to_owned();
                assert_eq!(channel_min_max(&t, shape.len() - 1 - a), want, "{shape:?}ᵀ axis {a}");
            }
        }
    }

    #[test]
    fn dead_channels_take_the_widest_channels_range() {
        // fer's conv2d_1: channels at 2e-34 (and one all zero) beside weights of order 0.1
        let (mut lo, mut hi) = (vec![-0.3, -2e-34, -0.1, 0.0], vec![0.2, 1e-34, 0.4, 0.0]);
        assert_eq!(revive_dead_channels(&mut lo, &mut hi), 2);
        assert_eq!(lo, vec![-0.3, -0.1, -0.1, -0.1]);
        assert_eq!(hi, vec![0.2, 0.4, 0.4, 0.4]);
        // small but alive (1e-8 of the layer) keeps its own range
        let (mut lo, mut hi) = (vec![-1e-9, -1.0], vec![1e-9, 1.0]);
        assert_eq!(revive_dead_channels(&mut lo, &mut hi), 0);
        assert_eq!(lo[0], -1e-9);
    }
}
