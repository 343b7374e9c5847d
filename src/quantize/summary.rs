//! What a quantized module holds, op by op: which compute ops run on integers, which stayed
//! float and why, and the size of its constants — the summary `quantize` prints.

use super::QuantConfig;
use crate::dialects::rule;
use crate::ir::graph::{body_ops, defining_op, find_function, op_name};
use crate::ir::keys::location_name;
use crate::ir::IrError;
use melior::ir::operation::OperationLike;
use melior::ir::{Module, Value, ValueLike};
use serde::Serialize;
use std::collections::BTreeMap;

/// A compute op left in float (or weight-only) and the reason.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FloatOp {
    pub op: String,
    pub key: String,
    pub reason: String,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
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
    let t = d.operand(0).ok()?.r#type().to_string();
    let at = t.find("!quant.uniform<")? + "!quant.uniform<".len();
    Some(t[at..].split([':', '<']).next()?.to_string())
}

/// Classifies every compute op of the main function of a quantized module.
pub fn summarize(module: &Module, config: &QuantConfig) -> Result<Summary, IrError> {
    let func = find_function(module, None)?;
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
        let weight_ok = r.weight.is_none() || weight_storage.is_some();
        if acts_ok && weight_ok {
            *s.quantized_ops.entry(name).or_default() += 1;
            continue;
        }
        let res = config.resolve(&[&name, &key]);
        let reason = if res.exclude {
            "excluded by --exclude / recipe".to_string()
        } else if weight_half {
            format!("{:?} weights (weight-only)", res.weights).to_lowercase()
        } else if res.activations.is_none() && weight_ok {
            "weight-only (activations none)".to_string()
        } else if r.weight.is_some() && !weight_ok {
            "weight is computed at run time, not a constant".to_string()
        } else {
            "activation input is integer, shape-determining or constant".to_string()
        };
        s.left_float.push(FloatOp { op: name, key, reason });
    }
    Ok(s)
}
