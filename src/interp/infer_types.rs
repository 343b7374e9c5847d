//! Types of intermediate values found by running the imported function on zeros, for
//! importers (ONNX, SavedModel) whose files do not record every value's shape.

use super::Program;
use crate::ir::graph::{body_ops, find_function, op_name, set_function_type, set_value_type};
use crate::ir::keys::TensorKeys;
use crate::ir::types::{element_type, is_ranked_tensor, tensor_type_of};
use crate::tensor::{DType, Tensor};
use melior::ir::block::BlockLike;
use melior::ir::operation::OperationLike;
use melior::ir::{Module, RegionLike, Type, Value, ValueLike};
use melior::Context;
use std::collections::HashMap;

/// Largest input (elements) inference runs on: a declared shape beyond it is taken as corrupt
/// and the types stay as declared.
const MAX_INFER_ELEMENTS: usize = 1 << 28;

fn zeros(dtype: DType, shape: &[usize]) -> Option<Tensor> {
    crate::tensor::element_count(shape).filter(|&n| n <= MAX_INFER_ELEMENTS)?;
    let s = ndarray::IxDyn(shape);
    Some(match dtype {
        DType::F32 => Tensor::F32(ndarray::ArrayD::zeros(s)),
        DType::F64 => Tensor::F64(ndarray::ArrayD::zeros(s)),
        DType::I64 => Tensor::I64(ndarray::ArrayD::zeros(s)),
        DType::I32 => Tensor::I32(ndarray::ArrayD::zeros(s)),
        DType::I8 => Tensor::I8(ndarray::ArrayD::zeros(s)),
        DType::U8 => Tensor::U8(ndarray::ArrayD::zeros(s)),
        DType::I1 => Tensor::I1(ndarray::ArrayD::from_elem(s, false)),
        DType::F16 => Tensor::F16(ndarray::ArrayD::from_elem(s, half::f16::ZERO)),
        _ => return None,
    })
}

/// Dtype and shape of every value of @main on zero inputs whose symbolic dims are `fill`.
fn run_shapes(prog: &Program, fill: usize) -> Option<HashMap<String, (DType, Vec<usize>)>> {
    let mut inputs = Vec::new();
    for spec in &prog.inputs {
        let shape: Vec<usize> = spec
            .dims
            .iter()
            .map(|d| match d {
                crate::ir::types::Dim::Static(n) => *n,
                crate::ir::types::Dim::Dynamic => fill,
            })
            .collect();
        inputs.push(zeros(spec.dtype?, &shape)?);
    }
    let mut seen = HashMap::new();
    for (key, t) in prog.constant_values() {
        seen.insert(key.to_string(), (t.dtype(), t.shape().to_vec()));
    }
    let keys: Vec<String> = prog
        .values
        .iter()
        .filter(|v| !v.constant)
        .map(|v| v.key.clone())
        .collect();
    let watch = prog.watch(&keys).ok()?;
    prog.run_observed(&inputs, &watch, &mut |k, t| {
        seen.insert(k.to_string(), (t.dtype(), t.shape().to_vec()));
        Ok(())
    })
    .ok()?;
    Some(seen)
}

/// Gives every op result of the module's function a ranked type from running it on zeros
/// (twice, with batch sizes 1 and 3, when an input has dynamic dims: dims that change are
/// dynamic). Results of ops named in `skip` and results already ranked keep their types; when
/// the interpreter cannot run the function, nothing changes.
pub fn infer_types(ctx: &Context, module: &Module, skip: &[&str]) {
    let Ok(func) = find_function(module, None) else { return };
    let unranked = |op: &melior::ir::OperationRef| op.results().any(|r| !is_ranked_tensor(Value::from(r).r#type()));
    if !body_ops(func)
        .iter()
        .any(|op| !skip.contains(&op_name(op).as_str()) && unranked(op))
    {
        return;
    }
    // one compiled program (constants read once) for both runs
    let Ok(prog) = Program::compile(module, None) else {
        return;
    };
    let dynamic = prog
        .inputs
        .iter()
        .any(|s| s.dims.iter().any(|d| matches!(d, crate::ir::types::Dim::Dynamic)));
    let Some(first) = run_shapes(&prog, 1) else { return };
    let second = if dynamic { run_shapes(&prog, 3) } else { None };
    drop(prog);
    let keys = TensorKeys::new(func);
    for op in body_ops(func) {
        let name = op_name(&op);
        if name == "func.return" || skip.contains(&name.as_str()) {
            continue;
        }
        for r in op.results() {
            let v: Value = r.into();
            // declared types (graph outputs, value_info, constants) stay as they are
            if is_ranked_tensor(v.r#type()) {
                continue;
            }
            let Some(key) = keys.get(v) else { continue };
            let Some((dtype, shape)) = first.get(key) else { continue };
            let dims: Vec<Option<i64>> = match (dynamic, second.as_ref().and_then(|s| s.get(key))) {
                (false, _) => shape.iter().map(|&d| Some(d as i64)).collect(),
                (true, Some((_, s2))) if s2.len() == shape.len() => shape
                    .iter()
                    .zip(s2)
                    .map(|(&a, &b)| (a == b).then_some(a as i64))
                    .collect(),
                (true, _) => vec![None; shape.len()],
            };
            let Some(old_elem) = element_type(v.r#type()) else {
                continue;
            };
            // 4-bit integers are held in 8-bit tensors: keep the declared width
            let elem = if crate::ir::types::element_dtype(old_elem) == Some(*dtype) {
                old_elem
            } else {
                crate::ir::types::dtype_to_type(ctx, *dtype)
            };
            set_value_type(v, tensor_type_of(elem, Some(&dims)));
        }
    }
    // the signature follows the refined result types
    if let Some(ret) = body_ops(func).into_iter().find(|o| op_name(o) == "func.return") {
        let outs: Vec<Type> = ret.operands().map(|v| v.r#type()).collect();
        let ins: Vec<Type> = func
            .region(0)
            .ok()
            .and_then(|r| r.first_block())
            .map(|b| {
                (0..b.argument_count())
                    .filter_map(|k| b.argument(k).ok())
                    .map(|a| a.r#type())
                    .collect()
            })
            .unwrap_or_default();
        set_function_type(ctx, func, &ins, &outs);
    }
}
