//! The quantization plan: which activations get Q/DQ and with which parameters, read off the
//! dialect tables.
//!
//! - the activation operands of compute ops (Conv2D input, MatMul lhs) are *input points*;
//! - a compute op's result, followed through the ops an int8 kernel fuses (a bias add with a
//!   constant bias, then Relu/Relu6) when each has a single use, is its *output point*;
//! - the output of a same-scale op (Reshape, MaxPool, ...) whose input is quantized reuses
//!   the input's parameters.
//! Integer, boolean and shape-determining values are never points.

use super::{QuantConfig, Resolved};
use crate::calibration::StatsFile;
use crate::dialects::{rule, shape_operands};
use crate::ir::graph::{body_ops, defining_op, find_function, op_name, uses};
use crate::ir::keys::TensorKeys;
use crate::ir::ops::is_constant_op;
use crate::ir::types::tensor_type;
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
    /// The parameters of a value, if it is quantized.
    pub fn params_of(&self, v: Value) -> Option<&QuantParams> {
        self.activations
            .iter()
            .find(|a| a.value == v)
            .and_then(|a| a.params.as_ref())
    }
}

/// An activation's parameters for the range (lo, hi) under `config` (symmetric or not).
pub fn activation_params(
    config: &QuantConfig,
    scheme: Scheme,
    dtype: StorageType,
    (lo, hi): (f32, f32),
) -> Result<QuantParams, crate::params::ParamsError> {
    let opts = RangeOptions {
        symmetric: config.symmetric_activations,
        narrow_range: config.symmetric_activations && scheme == Scheme::Mlir,
        ..Default::default()
    };
    compute(scheme, dtype, lo as f64, hi as f64, &opts)
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
            let mut all: Vec<&str> = names.to_vec();
            all.push(&k);
            let res: Resolved = config.resolve(&all);
            let Some(dtype) = res.activations.filter(|_| !res.exclude) else {
                return;
            };
            seen.insert(id);
            points.push(ActivationPoint {
                value: v,
                key: k,
                same_as,
                params: None,
                dtype,
                scheme: res.scheme,
                method: res.method,
            });
        };
    if config.activations.is_some() || !config.overrides.is_empty() {
        for op in &ops {
            let name = op_name(op);
            let Some(r) = rule(&name) else { continue };
            let out_key = op.result(0).ok().map(|v| key(v.into())).unwrap_or_default();
            if r.is_compute() && !config.resolve(&[&name, &out_key]).exclude {
                for &i in r.activations {
                    if let Ok(v) = op.operand(i) {
                        add(v, None, &[&name, &out_key], &mut points);
                    }
                }
                // follow the fused bias and activation to the output point
                let Ok(mut out) = op.result(0).map(Value::from) else {
                    continue;
                };
                while let Some((user, idx)) = single_user(out) {
                    let Some(ur) = rule(&op_name(&user)) else { break };
                    let fuses =
                        (ur.bias && idx == 0 && user.operand(1).is_ok_and(is_constant_like)) || ur.fused_activation;
                    match (fuses, user.result(0)) {
                        (true, Ok(next)) => out = next.into(),
                        _ => break,
                    }
                }
                // A model output keeps the int32 accumulator's precision unless asked otherwise:
                // requantizing logits to 8 bits clips every value beyond the calibration range
                // and adds a rounding step no later op needs.
                if config.quantize_outputs || !only_reaches_return(out) {
                    add(out, None, &[&name, &out_key], &mut points);
                }
            }
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
            if config.resolve(&[&name, &key(out)]).exclude {
                continue;
            }
            let Some((src, dtype)) = points
                .iter()
                .find(|p| p.value == input)
                .map(|p| (p.same_as.clone().unwrap_or(p.key.clone()), p.dtype))
            else {
                continue;
            };
            // the input of a later compute op takes the scale it already has, not its own,
            // unless a recipe gave it another storage type (then it is requantized)
            match points.iter_mut().find(|p| p.value == out) {
                Some(existing) if existing.dtype == dtype => existing.same_as = Some(src),
                Some(_) => {}
                None => add(out, Some(src), &[&name], &mut points),
            }
        }
    }
    let mut plan = Plan { activations: points };
    if let Some(stats) = stats {
        let mut by_key: HashMap<String, QuantParams> = HashMap::new();
        for p in plan.activations.iter_mut() {
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
            let q = activation_params(config, p.scheme, p.dtype, t.range)
                .map_err(|e| IrError::Invalid(format!("tensor '{src}': {e}")))?;
            by_key.insert(src, q.clone());
            p.params = Some(q);
        }
    }
    Ok(plan)
}
