//! The ONNX half of `fold-batchnorm`: an inference-mode `BatchNormalization` (what PyTorch and
//! paddle2onnx export after a convolution) or a per-channel `Mul` and/or `Add` of constants (the
//! batch normalisation tf2onnx leaves after depthwise convolutions) after a `Conv` or `Gemm`
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

/// The per-channel affine map `y = x · mul + add` of the single-use op after `v`, when it is
/// a Mul/Add/Sub of a per-channel constant or an inference-mode BatchNormalization whose four
/// parameters are constants:
///
/// ```mlir
/// %1 = "onnx.BatchNormalization"(%0, %g, %b, %m, %v) {epsilon = 1.0e-05 : f32}
/// //   mul = g / sqrt(v + eps),  add = b - m · mul
/// ```
fn next_affine<'c, 'a>(
    v: Value<'c, 'a>,
    c: usize,
    axis: usize,
    rank: usize,
) -> Option<(OperationRef<'c, 'a>, Vec<f32>, Vec<f32>)> {
    let [u] = uses(v).as_slice().try_into().ok()?;
    let u: crate::ir::graph::Use = u;
    let name = op_name(&u.owner);
    if name == "onnx.BatchNormalization" {
        return batch_norm_affine(u.owner, u.operand, c, axis).map(|(m, a)| (u.owner, m, a));
    }
    if !matches!(name.as_str(), "onnx.Mul" | "onnx.Add" | "onnx.Sub") || u.owner.operand_count() != 2 {
        return None;
    }
    if name == "onnx.Sub" && u.operand != 0 {
        return None;
    }
    let other = u.owner.operand(1 - u.operand).ok()?;
    let k = channel_values(other, c, axis, rank)?;
    Some(match name.as_str() {
        "onnx.Mul" => (u.owner, k, vec![0.0; c]),
        "onnx.Add" => (u.owner, vec![1.0; c], k),
        _ => (u.owner, vec![1.0; c], k.iter().map(|v| -v).collect()),
    })
}

/// `bn`'s per-channel (mul, add) when `x` is its data operand, it runs in inference mode with
/// one result, and scale, B, mean and var are `c`-element constants on the channel axis.
fn batch_norm_affine(bn: OperationRef, x: usize, c: usize, axis: usize) -> Option<(Vec<f32>, Vec<f32>)> {
    if x != 0 || bn.operand_count() != 5 || bn.result_count() != 1 || axis != 1 {
        return None;
    }
    let attrs = op_attrs(&bn);
    if attrs.get("training_mode").and_then(|v| v.as_int()).unwrap_or(0) != 0 {
        return None;
    }
    let eps = attrs.get("epsilon").and_then(|v| v.as_f64()).unwrap_or(1e-5);
    let p: Vec<Vec<f32>> = (1..5)
        .map(|i| {
            let v = bn.operand(i).ok()?;
            channel_values(v, c, 0, 1).filter(|_| const_len(v) == Some(c))
        })
        .collect::<Option<_>>()?;
    let (g, b, m, var) = (&p[0], &p[1], &p[2], &p[3]);
    // in f64, so that the folded weight is within one f32 rounding of the two ops' product
    let mul: Vec<f32> = (0..c)
        .map(|i| (g[i] as f64 / (var[i] as f64 + eps).sqrt()) as f32)
        .collect();
    let add: Vec<f32> = (0..c)
        .map(|i| (b[i] as f64 - m[i] as f64 * mul[i] as f64) as f32)
        .collect();
    Some((mul, add))
}

/// The element count of a constant operand.
fn const_len(v: Value) -> Option<usize> {
    let d = defining_op(v).filter(is_constant_op)?;
    constant_value(d).map(|t| t.len())
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
        while let Some((next, mul, add)) = next_affine(cur, c, 1, rank) {
            for ch in 0..c {
                scale[ch] *= mul[ch];
                bias[ch] = bias[ch] * mul[ch] + add[ch];
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
