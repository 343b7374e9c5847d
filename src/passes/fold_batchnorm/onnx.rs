//! The ONNX half of `fold-batchnorm`: a per-channel `Mul` and/or `Add` of constants after a
//! `Conv` or `Gemm` (the batch normalisation tf2onnx leaves after depthwise convolutions)
//! folds into the op's weight and bias input, so that the output point of the convolution is
//! the tensor an int8 kernel produces, not a pre-scale value quantized per tensor.
//!
//! ```mlir
//! %0 = "onnx.Conv"(%x, %w) {group = 16 : i64, ...}   // %w: 16x1x3x3
//! %1 = "onnx.Mul"(%0, %k)                            // %k: 1x16x1x1 constant
//! %2 = "onnx.Add"(%1, %b)                            // %b: 1x16x1x1 constant
//! // becomes
//! %2' = "onnx.Conv"(%x, %w', %b') {group = 16 : i64, ...}
//! //   %w'[o] = %w[o] · k[o],  %b'[o] = (bias[o] or 0) · k[o] + b[o]
//! ```

use crate::ir::attrs::op_attrs;
use crate::ir::graph::{body_ops, defining_op, erase_op, op_name, replace_all_uses, uses};
use crate::ir::ops::is_constant_op;
use crate::ir::ops::{constant_value, erase_with_dead_constants, insert_constant};
use crate::passes::report::{err, Change, PassError};
use crate::passes::PassReport;
use crate::tensor::Tensor;
use melior::ir::operation::OperationLike;
use melior::ir::{OperationRef, Value};
use ndarray::{ArrayD, Axis};

/// `v` as `c` per-channel values when it is a constant that broadcasts along axis `axis` of a
/// rank-`rank` result (a scalar repeats to every channel).
fn channel_values(v: Value, c: usize, axis: usize, rank: usize) -> Option<Vec<f32>> {
    let d = defining_op(v).filter(is_constant_op)?;
    let Tensor::F32(a) = constant_value(d)? else {
        return None;
    };
    if a.len() == 1 {
        return Some(vec![a.iter().copied().next()?; c]);
    }
    if a.ndim() > rank || a.len() != c {
        return None;
    }
    // right-aligned against the result: the one non-unit dim must be the channel axis
    let at = (rank - a.ndim()..rank).zip(a.shape()).find(|(_, &n)| n != 1)?;
    (at.0 == axis).then(|| a.iter().copied().collect())
}

/// A single-use Mul/Add of a per-channel constant after `v`: (op, constant values).
fn next_affine<'c, 'a>(
    v: Value<'c, 'a>,
    c: usize,
    axis: usize,
    rank: usize,
) -> Option<(OperationRef<'c, 'a>, String, Vec<f32>)> {
    let [u] = uses(v).as_slice().try_into().ok()?;
    let u: crate::ir::graph::Use = u;
    let name = op_name(&u.owner);
    if !matches!(name.as_str(), "onnx.Mul" | "onnx.Add" | "onnx.Sub") || u.owner.operand_count() != 2 {
        return None;
    }
    if name == "onnx.Sub" && u.operand != 0 {
        return None;
    }
    let other = u.owner.operand(1 - u.operand).ok()?;
    let k = channel_values(other, c, axis, rank)?;
    Some((u.owner, name, k))
}

pub fn run(func: OperationRef, report: &mut PassReport) -> Result<(), PassError> {
    let mut erased: std::collections::HashSet<usize> = std::collections::HashSet::new();
    for op in body_ops(func) {
        if erased.contains(&(op.to_raw().ptr as usize)) {
            continue;
        }
        let name = op_name(&op);
        if !matches!(name.as_str(), "onnx.Conv" | "onnx.Gemm") || op.result_count() != 1 {
            continue;
        }
        let attrs = op_attrs(&op);
        let trans_b = attrs.get("transB").and_then(|v| v.as_int()).unwrap_or(0) != 0;
        if name == "onnx.Gemm" && attrs.get("beta").and_then(|v| v.as_f64()).unwrap_or(1.0) != 1.0 {
            continue;
        }
        let Ok(w) = op.operand(1) else { continue };
        let Some(wdef) = defining_op(w).filter(is_constant_op) else {
            continue;
        };
        let Some(Tensor::F32(wt)) = constant_value(wdef) else {
            continue;
        };
        // output channels and their axis in the weight
        let (c, waxis) = match (name.as_str(), wt.ndim()) {
            ("onnx.Conv", n) if n >= 3 => (wt.shape()[0], 0),
            ("onnx.Gemm", 2) if trans_b => (wt.shape()[0], 0),
            ("onnx.Gemm", 2) => (wt.shape()[1], 1),
            _ => continue,
        };
        let rank = if name == "onnx.Conv" { wt.ndim() } else { 2 };
        let bdef = op
            .operand(2)
            .ok()
            .and_then(defining_op)
            .filter(|d| op_name(d) != crate::dialects::onnx::NO_VALUE);
        let mut bias: Vec<f32> = match bdef {
            None => vec![0.0; c],
            Some(d) => match constant_value(d) {
                Some(Tensor::F32(b)) if b.len() == c => b.iter().copied().collect(),
                _ => continue,
            },
        };
        let out: Value = op.result(0).map_err(err)?.into();
        let mut scale = vec![1.0f32; c];
        let mut cur = out;
        let mut chain = Vec::new();
        while let Some((next, nname, k)) = next_affine(cur, c, 1, rank) {
            for ch in 0..c {
                match nname.as_str() {
                    "onnx.Mul" => {
                        scale[ch] *= k[ch];
                        bias[ch] *= k[ch];
                    }
                    "onnx.Add" => bias[ch] += k[ch],
                    _ => bias[ch] -= k[ch],
                }
            }
            chain.push(next);
            cur = next.result(0).map_err(err)?.into();
        }
        if chain.is_empty() {
            continue;
        }
        let mut w2: ArrayD<f32> = wt.clone();
        for (ch, mut sub) in w2.axis_iter_mut(Axis(waxis)).enumerate() {
            let k = scale[ch];
            sub.mapv_inplace(|v| v * k);
        }
        let wloc = wdef.location();
        let nw = insert_constant(op, &Tensor::F32(w2), false, wloc)?;
        let nb = insert_constant(
            op,
            &Tensor::F32(ArrayD::from_shape_vec(vec![c], bias).map_err(err)?),
            false,
            bdef.map(|d| d.location()).unwrap_or(wloc),
        )?;
        let x = op.operand(0).map_err(err)?;
        let operands = [x, nw.result(0).map_err(err)?.into(), nb.result(0).map_err(err)?.into()];
        crate::ir::graph::set_operands(op, &operands);
        for d in [Some(wdef), bdef].into_iter().flatten() {
            if d.results().all(|r| uses(r.into()).is_empty()) {
                erased.insert(d.to_raw().ptr as usize);
                erase_op(d)?;
            }
        }
        // the last op's users read the folded op directly, and its value is the one that
        // survives: it keeps that op's name, so that keys (per-layer comparisons, statistics)
        // mean the same tensor before and after
        replace_all_uses(cur, out);
        if let Some(last) = chain.last() {
            use melior::ir::operation::OperationMutLike;
            let mut m = crate::ir::graph::op_mut(op);
            m.set_location(last.location());
        }
        for a in chain.into_iter().rev() {
            erased.insert(a.to_raw().ptr as usize);
            erase_with_dead_constants(a)?;
        }
        report.count(Change::OnnxScaleShiftFolded);
    }
    Ok(())
}
