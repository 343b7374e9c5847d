//! What a quantized module holds, op by op: which compute ops run on integers, which stayed
//! float and why, and the size of its constants — the summary `quantize` prints.

use super::QuantConfig;
use crate::dialects::rule;
use crate::ir::graph::{body_ops, defining_op, find_function, op_name};
use crate::ir::keys::location_name;
use crate::ir::{IrError, TensorKeys};
use melior::ir::operation::OperationLike;
use melior::ir::{Module, Value, ValueLike};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

/// A compute op left in float (or weight-only) and the reason.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FloatOp {
    pub op: String,
    pub key: String,
    pub reason: String,
}

/// One compute op of the quantized module: what it computes on, and its cost.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ComputeOp {
    pub key: String,
    pub op: String,
    /// Weight storage: `i8`, `i4`, `u8`, `f16`, `bf16`, or `float`; `none` for ops without one.
    pub weights: String,
    /// Activation storage (the widest of the op's activation inputs), or `float`.
    pub activations: String,
    /// Why the op is not W8A8, when it is not.
    pub reason: Option<String>,
    /// Multiply-accumulates per sample, from the static shapes (dynamic ones at
    /// [`Totals::macs_at`]); `None` when a shape is unknown.
    pub macs: Option<u64>,
}

impl ComputeOp {
    /// True when the op computes on 8-bit weights (or has none) and 8-bit activations.
    pub fn is_w8a8(&self) -> bool {
        let eight = |st: &str| matches!(st, "i8" | "u8");
        eight(&self.activations) && (self.weights == "none" || eight(&self.weights))
    }
}

/// The whole module's compute: how much of it runs on 8-bit weights and 8-bit activations.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Totals {
    /// MACs of the compute ops whose shapes are known.
    pub macs: u64,
    /// MACs on 8-bit weights and 8-bit activations (W8A8).
    pub int8_macs: u64,
    /// `int8_macs / macs`; `None` when no compute op has a known count (dynamic shapes).
    pub int8_mac_share: Option<f64>,
    /// Compute ops whose MACs are unknown (dynamic shapes), not in the share.
    pub ops_without_macs: usize,
    /// For a model with dynamic dims: the input shapes (the calibration data's first sample)
    /// its MACs are counted at; `None` when every shape is static or no sample was seen.
    pub macs_at: Option<Vec<Vec<usize>>>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    /// Every compute op, in program order.
    pub ops: Vec<ComputeOp>,
    pub totals: Totals,
    /// Compute ops whose activation inputs and weight are all quantized, per op name.
    pub quantized_ops: BTreeMap<String, usize>,
    /// Compute ops not (fully) quantized.
    pub left_float: Vec<FloatOp>,
    /// Ops the dialect tables do not know (they run in float), per op name.
    pub unknown_ops: BTreeMap<String, usize>,
}

/// The storage type of a dequantized value (`!quant.uniform<i8...>` → "i8"), if it is one.
fn dequantized_storage(v: Value) -> Option<String> {
    let d = defining_op(v)?;
    if op_name(&d) != "quant.dcast" {
        return None;
    }
    let t = crate::ir::types::tensor_type(d.operand(0).ok()?.r#type())?.element;
    let at = t.find("!quant.uniform<")? + "!quant.uniform<".len();
    Some(t[at..].split([':', '<']).next()?.to_string())
}

/// Multiply-accumulates of a compute op per run, from static shapes: output elements × the
/// reduction each one takes (conv: the filter's window × input channels per group; matmul: the
/// inner dimension; transposed conv: input elements × the filter's output window).
/// Where a shape is dynamic, it is read from `at` (value key → shape on a sample), looking
/// through the Q/DQ pair in front of a quantized operand to the value it quantizes.
fn macs(
    op: &melior::ir::OperationRef,
    name: &str,
    weight: Option<usize>,
    keys: &TensorKeys,
    at: Option<&HashMap<String, Vec<usize>>>,
) -> Option<u64> {
    let shape = |v: Option<Value>| -> Option<Vec<u64>> {
        let v = v?;
        let fixed = crate::ir::types::tensor_type(v.r#type())?.static_shape();
        let s = fixed.or_else(|| at?.get(key_before_qdq(keys, v)?).cloned())?;
        Some(s.into_iter().map(|d| d as u64).collect())
    };
    let out = shape(op.result(0).ok().map(Into::into))?;
    let input = shape(op.operand(0).ok())?;
    let w = weight.and_then(|i| shape(op.operand(i).ok()));
    let n_out: u64 = out.iter().product();
    let attrs = crate::ir::attrs::op_attrs(op);
    let flag = |k: &str| {
        attrs
            .get(k)
            .and_then(crate::ir::attrs::AttrValue::as_bool)
            .unwrap_or(false)
            || attrs
                .get(k)
                .and_then(crate::ir::attrs::AttrValue::as_int)
                .is_some_and(|v| v != 0)
    };
    Some(match name {
        // HWIO: kh·kw·ci per output element
        "tf.Conv2D" => n_out * w?.iter().take(3).product::<u64>(),
        // [kh, kw, c, m]: one input channel per output element
        "tf.DepthwiseConv2dNative" => n_out * w?.iter().take(2).product::<u64>(),
        // OIHW (O × I/group × window)
        "onnx.Conv" => n_out * w?.iter().skip(1).product::<u64>(),
        // IOHW: every input element reaches O/group × window outputs
        "onnx.ConvTranspose" => input.iter().product::<u64>() * w?.iter().skip(1).product::<u64>(),
        _ => {
            let transposed = flag("transpose_a") || flag("adj_x") || flag("transA");
            let r = input.len();
            let k = if transposed && r >= 2 {
                input[r - 2]
            } else {
                *input.last()?
            };
            n_out * k
        }
    })
}

/// The key of the value a `quant.dcast(quant.qcast(v))` pair (or a lone `dcast`) stands for:
/// `v`'s.
fn key_before_qdq<'k>(keys: &'k TensorKeys, v: Value) -> Option<&'k str> {
    if let Some(d) = defining_op(v).filter(|d| matches!(op_name(d).as_str(), "quant.dcast" | "quant.qcast")) {
        if let Ok(x) = d.operand(0) {
            return key_before_qdq(keys, x);
        }
    }
    keys.get(v)
}

/// Classifies every compute op of the main function of a quantized module. `at`: the shape of
/// every value on a sample (by key, from the float module), for MACs where shapes are dynamic.
pub fn summarize(
    module: &Module,
    config: &QuantConfig,
    at: Option<&HashMap<String, Vec<usize>>>,
) -> Result<Summary, IrError> {
    let func = find_function(module, None)?;
    let keys = TensorKeys::new(func);
    let mut s = Summary::default();
    for op in body_ops(func) {
        let name = op_name(&op);
        let Some(r) = rule(&name) else {
            let structural = name.starts_with("quant.")
                || name == "func.return"
                || crate::ir::ops::is_constant_op(&op)
                || op.result_count() == 0;
            if !structural {
                *s.unknown_ops.entry(name).or_default() += 1;
            }
            continue;
        };
        if !r.is_compute() {
            continue;
        }
        let key = location_name(op.location()).unwrap_or_default();
        let acts: Vec<Option<String>> = r
            .activations
            .iter()
            .map(|&i| op.operand(i).ok().and_then(dequantized_storage))
            .collect();
        let weight = r.weight.map(|(i, _)| op.operand(i).ok());
        let weight_storage = weight.flatten().and_then(dequantized_storage);
        let weight_half = weight
            .flatten()
            .and_then(defining_op)
            .is_some_and(|d| matches!(op_name(&d).as_str(), "tf.Cast" | "arith.extf"));
        let acts_ok = acts.iter().all(Option::is_some);
        let untyped = r.activations.iter().any(|&i| {
            op.operand(i)
                .is_ok_and(|v| crate::ir::types::tensor_type(v.r#type()).is_none())
        });
        let weight_ok = r.weight.is_none() || weight_storage.is_some();
        let weights = match (&weight_storage, r.weight.is_some(), weight_half) {
            (Some(st), _, _) => st.clone(),
            (None, false, _) => "none".to_string(),
            (None, true, true) => format!("{:?}", config.resolve_op(&op, &[]).weights).to_lowercase(),
            (None, true, false) => "float".to_string(),
        };
        let activations = if acts_ok {
            // the widest storage among the inputs (i16 over i8)
            acts.iter()
                .flatten()
                .max_by_key(|st| st.trim_start_matches(['i', 'u']).parse::<u32>().unwrap_or(0))
                .cloned()
                .unwrap_or_else(|| "float".into())
        } else {
            "float".to_string()
        };
        let mut entry = ComputeOp {
            key: key.clone(),
            op: name.clone(),
            reason: None,
            macs: macs(&op, &name, r.weight.map(|(i, _)| i), &keys, at),
            weights,
            activations,
        };
        // the activation inputs by their own keys: whether each is quantized, and the settings
        // that key alone resolves to (an exclusion or a raise that named it)
        let inputs = || {
            r.activations.iter().zip(&acts).filter_map(|(&i, st)| {
                let k = op.operand(i).ok().and_then(|v| key_before_qdq(&keys, v))?;
                Some((k, st.is_some(), config.resolve_point(&[], Some(k))))
            })
        };
        if acts_ok && weight_ok {
            if !entry.is_w8a8() {
                // an input a target raised says so; the rest is the recipe's
                let by = inputs().find_map(|(k, _, res)| res.activations_by.map(|by| (k, by)));
                entry.reason = Some(match by {
                    Some((k, by)) => format!(
                        "{} weights, {} activations: input '{k}' raised by {by}",
                        entry.weights, entry.activations
                    ),
                    None => format!(
                        "{} weights, {} activations (by the recipe)",
                        entry.weights, entry.activations
                    ),
                });
            }
            s.ops.push(entry);
            *s.quantized_ops.entry(name).or_default() += 1;
            continue;
        }
        let res = config.resolve_op(&op, &[]);
        let reason = if let (true, Some(by)) = (res.exclude, &res.excluded_by) {
            format!("left float by {by}")
        } else if res.exclude {
            "excluded by --exclude / recipe".to_string()
        } else if weight_half {
            format!("{:?} weights (weight-only)", res.weights).to_lowercase()
        } else if res.activations.is_none() && weight_ok {
            "weight-only (activations none)".to_string()
        } else if r.weight.is_some() && !weight_ok {
            "weight is computed at run time, not a constant".to_string()
        } else if let Some((k, _, r)) = inputs().find(|(_, quantized, r)| !quantized && r.exclude) {
            // its own key an exclusion matched (often another op's output key)
            match r.excluded_by {
                Some(by) => format!("its input '{k}' is left float by {by}"),
                None => format!("its input '{k}' is excluded by --exclude / recipe"),
            }
        } else if untyped {
            "type unknown: the interpreter could not run the model to type this input (see the warning)".to_string()
        } else {
            "activation input is integer, shape-determining or constant".to_string()
        };
        entry.reason = Some(reason.clone());
        s.ops.push(entry);
        s.left_float.push(FloatOp { op: name, key, reason });
    }
    s.totals = totals(&s.ops);
    Ok(s)
}

/// The MAC totals of `ops` and the W8A8 share.
pub fn totals(ops: &[ComputeOp]) -> Totals {
    let mut t = Totals::default();
    for o in ops {
        let Some(m) = o.macs else {
            t.ops_without_macs += 1;
            continue;
        };
        t.macs += m;
        if o.is_w8a8() {
            t.int8_macs += m;
        }
    }
    t.int8_mac_share = (t.macs > 0).then(|| t.int8_macs as f64 / t.macs as f64);
    t
}
