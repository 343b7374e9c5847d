//! Types of intermediate values found by running the function on zeros, for importers (ONNX,
//! SavedModel) whose files do not record every value's shape — and again once sample data is
//! bound, with the inputs' dynamic dims taken from the first sample (a model exported with
//! `[?, 3, ?, ?]` may not run at the importer's guess of 1 for each: a 2×2 pool does not fit).
//!
//! Each fill runs twice, the second time with every dynamic input dim changed (importer: 1 then
//! 3; samples: the sample's size then twice it); a result dim that changes with them is written
//! dynamic, so a resolved model still accepts every input size its file accepted.

use super::{ort_x86, InterpError, Program, Step};
use crate::ir::graph::{body_ops, find_function, op_name, set_function_type, set_value_type};
use crate::ir::keys::TensorKeys;
use crate::ir::types::{element_type, is_ranked_tensor, tensor_type_of};
use crate::tensor::{DType, Tensor};
use melior::ir::operation::OperationLike;
use melior::ir::{Module, Type, Value, ValueLike};
use melior::Context;
use std::collections::HashMap;

/// Largest input (elements) inference runs on: a declared shape beyond it is taken as corrupt
/// and the types stay as declared.
const MAX_INFER_ELEMENTS: usize = 1 << 28;

fn zeros(dtype: DType, shape: &[usize]) -> Option<Tensor> {
    crate::tensor::element_count(shape).filter(|&n| n <= MAX_INFER_ELEMENTS)?;
    Some(Tensor::zeros(dtype, shape))
}

impl Program {
    /// Compiles the entry function for shapes-only runs (type inference), large weights as
    /// untouched zeros, not copies ([`unread_weight`]).
    pub fn compile_for_shapes(module: &Module) -> Result<Program, InterpError> {
        Self::compile_impl(module, None, ort_x86::Numerics::Exact, true)
    }

    /// Zeros shaped like the step's results, when its kernel can tell their shapes without
    /// computing them; `None` sends the step to its kernel (which computes, or says why not).
    pub(super) fn zeros_shaped_like_results(&self, st: &Step, env: &[Option<Tensor>]) -> Option<Vec<Tensor>> {
        let args: Vec<&Tensor> = st
            .inputs
            .iter()
            .map(|&s| self.consts[s].as_deref().or(env[s].as_ref()))
            .collect::<Option<Vec<_>>>()?;
        let shapes = st.kernel.result_shapes(&args)?.ok()?;
        Some(shapes.into_iter().map(|(d, shape)| Tensor::zeros(d, &shape)).collect())
    }
}

/// Ops that read operand 1 (a filter or weight matrix) only for its shape in a shapes-only
/// run: their kernels give [`Kernel::result_shapes`](super::Kernel::result_shapes). Sorted.
const SHAPE_ONLY_WEIGHT_READERS: &[&str] = &[
    "onnx.Conv",
    "onnx.MatMul",
    "tf.BatchMatMul",
    "tf.BatchMatMulV2",
    "tf.BatchMatMulV3",
    "tf.Conv2D",
    "tf.DepthwiseConv2dNative",
    "tf.MatMul",
];

/// Constants of fewer elements are always read: shapes, axes, pads and indices are small.
const UNREAD_WEIGHT_ELEMENTS: usize = 1 << 12;

/// Zeros standing in for constant `op` (its value `attr`) in a shapes-only program, when it
/// is a large weight whose every use is operand 1 of a [`SHAPE_ONLY_WEIGHT_READERS`] op: the
/// run never reads it, and zeros from the allocator take no memory until written, so type
/// inference on a model with 340 MB of weights does not hold a second copy of them.
pub(super) fn unread_weight(op: &melior::ir::OperationRef, attr: melior::ir::Attribute) -> Option<Tensor> {
    use melior::ir::attribute::AttributeLike;
    let t = crate::ir::types::tensor_type(attr.r#type())?;
    let (dtype, shape) = (t.dtype?, t.static_shape()?);
    if crate::tensor::element_count(&shape)? < UNREAD_WEIGHT_ELEMENTS {
        return None;
    }
    let uses = crate::ir::graph::uses(op.result(0).ok()?.into());
    let unread = |u: &crate::ir::graph::Use| {
        u.operand == 1
            && SHAPE_ONLY_WEIGHT_READERS
                .binary_search(&op_name(&u.owner).as_str())
                .is_ok()
    };
    (!uses.is_empty() && uses.iter().all(unread)).then(|| Tensor::zeros(dtype, &shape))
}

/// What the inputs' dynamic dims are set to for one inference run.
#[derive(Debug, Clone, Copy)]
pub enum Fill<'s> {
    /// Every dynamic dim `n` (the importer's guess).
    Each(usize),
    /// Each input's shape from a sample, every dynamic dim multiplied by the factor.
    Sample(&'s [Vec<usize>], usize),
}

/// Dtype and shape of every value of @main on zero inputs whose dynamic dims are `fill`; the
/// interpreter's error when it cannot run them.
fn run_shapes(prog: &Program, fill: Fill) -> Result<HashMap<String, (DType, Vec<usize>)>, String> {
    let mut inputs = Vec::new();
    for (k, spec) in prog.inputs.iter().enumerate() {
        let shape: Vec<usize> = spec
            .dims
            .iter()
            .enumerate()
            .map(|(i, d)| match (d, fill) {
                (crate::ir::types::Dim::Static(n), _) => *n,
                (crate::ir::types::Dim::Dynamic, Fill::Each(n)) => n,
                (crate::ir::types::Dim::Dynamic, Fill::Sample(shapes, f)) => {
                    shapes.get(k).and_then(|s| s.get(i)).copied().unwrap_or(1) * f
                }
            })
            .collect();
        let dtype = spec.dtype.ok_or_else(|| {
            format!(
                "input '{}' has an element type the interpreter does not compute with",
                spec.name
            )
        })?;
        inputs.push(zeros(dtype, &shape).ok_or_else(|| {
            format!(
                "input '{}' of shape {shape:?}: no zeros of {dtype} that size",
                spec.name
            )
        })?);
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
    let watch = prog.watch(&keys).map_err(|e| e.to_string())?;
    prog.run_observed(&inputs, &watch, &mut |k, t| {
        seen.insert(k.to_string(), (t.dtype(), t.shape().to_vec()));
        Ok(())
    })
    .map_err(|e| e.to_string())?;
    Ok(seen)
}

/// What a type inference did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Inferred {
    /// Op results given a ranked type.
    pub refined: usize,
    /// Op results still without a ranked type (not run, or run but not observed).
    pub unknown: usize,
    /// Why the function could not be run, when it could not.
    pub failure: Option<String>,
}

/// Gives every op result of the module's function a ranked type from running it on zeros with
/// dynamic dims 1 (and again 3, when an input has dynamic dims: dims that change are dynamic).
/// Results of ops named in `skip` and results already ranked keep their types; when the
/// interpreter cannot run the function, nothing changes and the outcome says why.
pub fn infer_types(ctx: &Context, module: &Module, skip: &[&str]) -> Inferred {
    infer_types_with(ctx, module, skip, Fill::Each(1), Fill::Each(3))
}

/// [`infer_types`] with the dynamic input dims of `sample_shapes` (one shape per function
/// input, in order: the first sample's), changed to twice that for the second run.
pub fn infer_types_from_sample(
    ctx: &Context,
    module: &Module,
    skip: &[&str],
    sample_shapes: &[Vec<usize>],
) -> Inferred {
    infer_types_with(
        ctx,
        module,
        skip,
        Fill::Sample(sample_shapes, 1),
        Fill::Sample(sample_shapes, 2),
    )
}

/// The shape of every value of @main (by key) on zero inputs shaped like a sample
/// (`sample_shapes`, one per function input); the interpreter's error when it cannot run it.
/// What a dynamic-dim model computes on real data: `quantize` counts MACs with it.
pub fn shapes_at_sample(module: &Module, sample_shapes: &[Vec<usize>]) -> Result<HashMap<String, Vec<usize>>, String> {
    let prog = Program::compile_for_shapes(module).map_err(|e| e.to_string())?;
    Ok(run_shapes(&prog, Fill::Sample(sample_shapes, 1))?
        .into_iter()
        .map(|(k, (_, shape))| (k, shape))
        .collect())
}

/// Results of the entry function's ops (outside `skip`) without a ranked type.
pub fn unranked_results(module: &Module, skip: &[&str]) -> usize {
    let Ok(func) = find_function(module, None) else {
        return 0;
    };
    body_ops(func)
        .iter()
        .filter(|op| !skip.contains(&op_name(*op).as_str()) && op_name(*op) != "func.return")
        .map(|op| {
            op.results()
                .filter(|r| !is_ranked_tensor(Value::from(*r).r#type()))
                .count()
        })
        .sum()
}

fn infer_types_with(ctx: &Context, module: &Module, skip: &[&str], first_fill: Fill, second_fill: Fill) -> Inferred {
    let mut outcome = Inferred::default();
    let Ok(func) = find_function(module, None) else {
        return outcome;
    };
    outcome.unknown = unranked_results(module, skip);
    if outcome.unknown == 0 {
        return outcome;
    }
    // one compiled program (constants read once) for both runs
    let prog = match Program::compile_for_shapes(module) {
        Ok(p) => p,
        Err(e) => {
            outcome.failure = Some(e.to_string());
            return outcome;
        }
    };
    let dynamic = prog
        .inputs
        .iter()
        .any(|s| s.dims.iter().any(|d| matches!(d, crate::ir::types::Dim::Dynamic)));
    let first = match run_shapes(&prog, first_fill) {
        Ok(f) => f,
        Err(e) => {
            outcome.failure = Some(e);
            return outcome;
        }
    };
    // a second fill that does not run leaves every dim that could vary dynamic
    let second = if dynamic {
        run_shapes(&prog, second_fill).ok()
    } else {
        None
    };
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
            outcome.refined += 1;
        }
    }
    // the signature follows the refined result types
    if let Some(ret) = body_ops(func).into_iter().find(|o| op_name(o) == "func.return") {
        let outs: Vec<Type> = ret.operands().map(|v| v.r#type()).collect();
        let ins: Vec<Type> = crate::ir::graph::argument_types(func);
        set_function_type(ctx, func, &ins, &outs);
    }
    outcome.unknown = unranked_results(module, skip);
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_weight_readers_are_sorted_and_give_result_shapes() {
        assert!(SHAPE_ONLY_WEIGHT_READERS.windows(2).all(|p| p[0] < p[1]));
        for name in SHAPE_ONLY_WEIGHT_READERS {
            assert!(super::super::supports(name), "{name}");
        }
    }
}
