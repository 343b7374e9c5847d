//! What onnxruntime's default optimization level will run on its int8 kernels in a quantized
//! ONNX-dialect module, counted by op (`interp::ort_x86::runs_in_int8` decides each op): the
//! `quantize` summary's line for `--runtime onnxruntime`, so that a user sees which ops stay
//! float in onnxruntime before deploying.

use crate::interp::ort_fusion::runs_in_int8;
use crate::ir::graph::{body_ops, find_function, op_name};
use crate::ir::ops::{constant_value, is_constant_op};
use crate::ir::types::tensor_type;
use crate::ir::IrError;
use crate::tensor::Tensor;
use melior::ir::operation::OperationLike;
use melior::ir::{Module, Value, ValueLike};
use std::collections::{BTreeMap, HashMap};

/// Constants this small are read (scales, zero points, Clip bounds); larger ones (weights)
/// only need to be known as constants.
const SMALL: usize = 4096;

/// Per op name (without its dialect prefix), of the ops onnxruntime has an int8 kernel for:
/// how many it will run in int8, and how many there are.
pub fn count(module: &Module) -> Result<BTreeMap<String, (usize, usize)>, IrError> {
    let func = find_function(module, None)?;
    let ops = body_ops(func);
    let mut consts: HashMap<usize, Tensor> = HashMap::new();
    for op in &ops {
        let Ok(r) = op.result(0) else { continue };
        let small = tensor_type(r.r#type())
            .and_then(|t| t.static_shape())
            .is_some_and(|s| s.iter().product::<usize>() <= SMALL);
        if is_constant_op(op) && small {
            if let Some(t) = constant_value(*op) {
                consts.insert(r.to_raw().ptr as usize, t);
            }
        }
    }
    let const_of = |v: Value| consts.get(&(v.to_raw().ptr as usize));
    let mut counts: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for op in &ops {
        if let Some(int8) = runs_in_int8(*op, &const_of) {
            let name = op_name(op);
            let short = name.strip_prefix("onnx.").unwrap_or(&name).to_string();
            let c = counts.entry(short).or_default();
            c.0 += int8 as usize;
            c.1 += 1;
        }
    }
    Ok(counts)
}

/// "52/52 Conv, 10/10 Add, 0/1 GlobalAveragePool", most ops first.
pub fn describe(counts: &BTreeMap<String, (usize, usize)>) -> String {
    let mut v: Vec<_> = counts.iter().collect();
    v.sort_by(|a, b| b.1 .1.cmp(&a.1 .1).then_with(|| a.0.cmp(b.0)));
    v.iter()
        .map(|(op, (n, total))| format!("{n}/{total} {op}"))
        .collect::<Vec<_>>()
        .join(", ")
}
