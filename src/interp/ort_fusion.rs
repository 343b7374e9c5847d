//! Which ops of a quantized model onnxruntime's QDQ transformers fuse into its int8 kernels at
//! its default optimization level, read off the DequantizeLinear / QuantizeLinear (or
//! `quant.dcast` / `quant.qcast`) around each op: what the u8s8 simulation (`ort_x86`) runs
//! saturating, and what `quantize` reports onnxruntime will run in int8 (`quantize::ort_int8`).
//! The rules follow onnxruntime 1.32's CPU selectors (`qdq_selector_action_transformer.cc`,
//! `ReluQuantFusion`, `ClipQuantFusion`), checked against its optimized graphs of the shared
//! models.

use super::kernels::norm_axis;
use crate::dialects::ort_u8s8::{reduction, runs_int8};
use crate::ir::attrs::{op_attrs, AttrValue};
use crate::ir::graph::{defining_op, op_name, uses};
use crate::ir::types::tensor_type;
use crate::params::{QuantParams, StorageType};
use crate::tensor::Tensor;
use melior::ir::operation::OperationLike;
use melior::ir::{OperationRef, Value, ValueLike};

/// The parameters of `op` when it quantizes its operand 0 (a `quant.qcast`, or an
/// `onnx.QuantizeLinear` with constant scale and zero point).
fn quantizes<'t>(op: &OperationRef, const_of: &dyn Fn(Value) -> Option<&'t Tensor>) -> Option<QuantParams> {
    match op_name(op).as_str() {
        "quant.qcast" => super::quant_of(op.result(0).ok()?.r#type()),
        "onnx.QuantizeLinear" => {
            let t = tensor_type(op.result(0).ok()?.r#type())?;
            let zp = op.operand(2).ok().and_then(const_of);
            let storage = super::onnx::quant::storage_of(&t.element)
                .or_else(|| zp.and_then(|z| super::onnx::quant::held_in(z.dtype())))?;
            super::onnx::quant::qparams(const_of(op.operand(1).ok()?)?, zp, storage, None).ok()
        }
        _ => None,
    }
}

/// The per-tensor 8-bit quantization of `v` when each of its users is one (onnxruntime's int8
/// kernels take one output scale), the first's parameters.
fn quantized_by_all<'t>(v: Value, const_of: &dyn Fn(Value) -> Option<&'t Tensor>) -> Option<QuantParams> {
    let us = uses(v);
    let ps: Vec<QuantParams> = us.iter().filter_map(|u| quantizes(&u.owner, const_of)).collect();
    let ok = !us.is_empty()
        && ps.len() == us.len()
        && ps
            .iter()
            .all(|p| matches!(p.dtype, StorageType::Int8 | StorageType::Uint8) && p.scale.len() == 1);
    ok.then(|| ps.into_iter().next()).flatten()
}

/// A Clip's bound from constant operand `i` (opset 11+) or attribute `name` (opset 6); absent:
/// `default`.
fn clip_bound<'t>(
    op: &OperationRef,
    i: usize,
    name: &str,
    default: f32,
    const_of: &dyn Fn(Value) -> Option<&'t Tensor>,
) -> Option<f32> {
    match op.operand(i).ok() {
        Some(v) => match const_of(v)? {
            Tensor::F32(a) if a.is_empty() => Some(default),
            Tensor::F32(a) if a.len() == 1 => a.iter().next().copied(),
            _ => None,
        },
        None => Some(
            op_attrs(op)
                .get(name)
                .and_then(AttrValue::as_f64)
                .map_or(default, |v| v as f32),
        ),
    }
}

/// True when the op's result is quantized as onnxruntime fuses it: every user a per-tensor
/// QuantizeLinear; or its one user a Relu or Clip that onnxruntime folds into the one
/// QuantizeLinear after it — a Relu when the zero point is the type's minimum, a Clip whose
/// bounds hold the quantized range (`ReluQuantFusion`, `ClipQuantFusion`).
pub(crate) fn output_quantized<'t>(
    op: OperationRef,
    const_of: &dyn Fn(Value) -> Option<&'t Tensor>,
) -> Option<QuantParams> {
    let r: Value = op.result(0).ok()?.into();
    if let Some(p) = quantized_by_all(r, const_of) {
        return Some(p);
    }
    let us = uses(r);
    let [u] = us.as_slice() else { return None };
    let act = op_name(&u.owner);
    let out: Value = u.owner.result(0).ok()?.into();
    let p = quantized_by_all(out, const_of).filter(|_| uses(out).len() == 1)?;
    let (qmin, qmax) = p.dtype.full_range();
    let folds = match act.as_str() {
        "onnx.Relu" => p.zero_point[0] == qmin,
        "onnx.Clip" => {
            let (s, zp) = (p.scale[0] as f32, p.zero_point[0]);
            let (lower, upper) = (s * (qmin - zp) as f32, s * (qmax - zp) as f32);
            let lo = clip_bound(&u.owner, 1, "min", f32::MIN, const_of);
            let hi = clip_bound(&u.owner, 2, "max", f32::MAX, const_of);
            matches!((lo, hi), (Some(lo), Some(hi)) if lo - lower <= f32::EPSILON && upper - hi <= f32::EPSILON)
        }
        _ => false,
    };
    folds.then_some(p)
}

/// Whether onnxruntime's default level runs `op` as one of its int8 kernels on a CPU: a Conv,
/// Gemm or MatMul whose activation is dequantized 8-bit per tensor and whose weight is a
/// dequantized 8-bit constant (a MatMul's may be an activation dequantized per tensor:
/// attention's P·V runs as QLinearMatMul), in a type pair onnxruntime's x86 QDQ selectors take (uint8
/// activations with either weight type, int8 with int8), with an output quantized to the
/// activation's type (Conv, Gemm; a MatMul with a float output runs as
/// MatMulIntegerToFloat); or an op of `dialects::ort_qlinear` whose activation inputs are all
/// dequantized and whose output is quantized, in one 8-bit type. `None` for other ops.
pub fn runs_in_int8<'t>(op: OperationRef, const_of: &dyn Fn(Value) -> Option<&'t Tensor>) -> Option<bool> {
    let name = op_name(&op);
    let eight = |p: &QuantParams| matches!(p.dtype, StorageType::Int8 | StorageType::Uint8);
    let per_tensor_act = |i: usize| {
        op.operand(i)
            .ok()
            .and_then(|v| dequantized(v, const_of))
            .filter(|(p, constant)| !constant && eight(p) && p.scale.len() == 1)
            .map(|(p, _)| p.dtype)
    };
    if reduction(&name).is_some() {
        let Some(act) = per_tensor_act(0) else {
            return Some(false);
        };
        // With int8 activations onnxruntime's x86 selectors fused only ops whose activation DQ
        // has one consumer (MobileNet: none of the 10 convs reading a shared DQ; the attention
        // encoder: none of Q, K and V); a shared one ran in float. Not counting those keeps
        // the int8-activation count a lower bound.
        if act == StorageType::Int8 && op.operand(0).is_ok_and(|v| uses(v).len() > 1) {
            return Some(false);
        }
        let Some((w, constant)) = op.operand(1).ok().and_then(|v| dequantized(v, const_of)) else {
            return Some(false);
        };
        // a MatMul of two activations (attention) fuses as well, its B dequantized per tensor
        if !constant && (name != "onnx.MatMul" || w.scale.len() != 1) {
            return Some(false);
        }
        let pair = matches!(
            (act, w.dtype),
            (StorageType::Uint8, StorageType::Uint8 | StorageType::Int8) | (StorageType::Int8, StorageType::Int8)
        );
        let out = output_quantized(op, const_of);
        let fused = runs_int8(&name, out.is_some()) && out.is_none_or(|o| o.dtype == act);
        return Some(pair && fused);
    }
    let inputs = crate::dialects::ort_qlinear::activation_inputs(&name, op.operand_count())?;
    let types: Option<Vec<StorageType>> = inputs.iter().map(|&i| per_tensor_act(i)).collect();
    let out = op
        .result(0)
        .ok()
        .and_then(|r| quantized_by_all(r.into(), const_of))
        .map(|p| p.dtype);
    Some(match (types, out) {
        (Some(t), Some(o)) => t.iter().all(|&d| d == o),
        _ => false,
    })
}

/// The parameters of the dequantization that defines `v` — a `quant.dcast`, or an
/// `onnx.DequantizeLinear` with constant scale and zero point — and whether what it
/// dequantizes is a constant.
pub(crate) fn dequantized<'t>(v: Value, const_of: &dyn Fn(Value) -> Option<&'t Tensor>) -> Option<(QuantParams, bool)> {
    let op = defining_op(v)?;
    let input = op.operand(0).ok()?;
    let constant = const_of(input).is_some() || crate::recipe::plan::is_constant_like(input);
    match op_name(&op).as_str() {
        "quant.dcast" => Some((super::quant_of(input.r#type())?, constant)),
        "onnx.DequantizeLinear" => {
            let attrs = op_attrs(&op);
            if attrs.get("block_size").and_then(AttrValue::as_int).unwrap_or(0) > 0 {
                return None;
            }
            let t = tensor_type(input.r#type())?;
            let storage = super::onnx::quant::storage_of(&t.element)?;
            let scale = const_of(op.operand(1).ok()?)?;
            let zp = op.operand(2).ok().and_then(const_of);
            let axis = attrs.get("axis").and_then(AttrValue::as_int).unwrap_or(1);
            let axis = norm_axis(axis, t.dims.len().max(1)).ok();
            let p = super::onnx::quant::qparams(scale, zp, storage, axis).ok()?;
            Some((p, constant))
        }
        _ => None,
    }
}
