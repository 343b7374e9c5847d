//! `fold-batchnorm`: folds the per-channel scale and shift that follow a convolution or matmul
//! into its weight and a `BiasAdd`, so that what gets quantized is the weight an int8 kernel
//! really uses (quantizing the pre-scale output per tensor would crush channels whose scale is
//! small). Handles the `Mul` / `AddV2` / `Sub` form TF exports for batch normalisation (after
//! `fold-constants` has evaluated the `Rsqrt(var + eps) * gamma` chain) and `FusedBatchNormV3`
//! in inference mode.
//!
//! ```mlir
//! %0 = "tf.Conv2D"(%x, %w) ...            // %w: 3x3x8x16 constant
//! %1 = "tf.Mul"(%0, %k) ...               // %k: 16 constant
//! %2 = "tf.AddV2"(%1, %b) ...             // %b: 16 constant
//! // becomes
//! %0 = "tf.Conv2D"(%x, %w') ...           // %w'[..., o] = %w[..., o] * %k[o]
//! %2 = "tf.BiasAdd"(%0, %b) {data_format = "NHWC"} ...
//! ```
//! An `AddV2`/`Sub` of a per-channel constant right after a compute op becomes a `BiasAdd`
//! too (negated for `Sub`), so that the bias is fused and quantized to int32.

mod onnx;

use super::{PassOptions, PassReport};
use crate::dialects::rule;
use crate::ir::attrs::op_attrs;
use crate::ir::graph::{
    body_ops, defining_op, erase_op, functions, insert_after, op_name, replace_all_uses, set_operand, uses,
};
use crate::ir::ops::is_constant_op;
use crate::ir::ops::{constant_value, erase_with_dead_constants, insert_constant};
use crate::passes::report::{err, Change, PassError};
use crate::tensor::Tensor;
use melior::ir::attribute::StringAttribute;
use melior::ir::operation::{OperationBuilder, OperationLike};
use melior::ir::{Identifier, Module, OperationRef, Value, ValueLike};
use ndarray::ArrayD;

/// The single user of `v` and the operand index it uses it at.
fn single_user<'c, 'a>(v: Value<'c, 'a>) -> Option<(OperationRef<'c, 'a>, usize)> {
    match uses(v).as_slice() {
        [u] => Some((u.owner, u.operand)),
        _ => None,
    }
}

/// A per-channel constant vector of `c` elements (shape [c] or [1, ..., 1, c]).
fn channel_vector(v: Value, c: usize) -> Option<Vec<f32>> {
    let d = defining_op(v).filter(is_constant_op)?;
    let Tensor::F32(a) = constant_value(d)? else {
        return None;
    };
    let last = *a.shape().last()?;
    let ok = last == c && a.shape()[..a.ndim() - 1].iter().all(|&x| x == 1);
    ok.then(|| a.iter().copied().collect())
}

/// The output-channel count of a compute op's weight and a function scaling it per channel.
fn scale_weight(op: OperationRef, w: &ArrayD<f32>, k: &[f32]) -> Option<ArrayD<f32>> {
    let name = op_name(&op);
    let mut out = w.clone();
    match (name.as_str(), w.shape()) {
        ("tf.Conv2D", [_, _, _, co]) if *co == k.len() => {
            for (i, x) in out.iter_mut().enumerate() {
                *x *= k[i % co];
            }
        }
        ("tf.DepthwiseConv2dNative", [_, _, c, m]) if c * m == k.len() => {
            for (i, x) in out.iter_mut().enumerate() {
                *x *= k[i % (c * m)];
            }
        }
        ("tf.MatMul", [a, b]) => {
            let tb = op_attrs(&op)
                .get("transpose_b")
                .and_then(|v| v.as_bool())
                .unwrap_or(false);
            let n = if tb { *a } else { *b };
            if n != k.len() {
                return None;
            }
            for (i, x) in out.iter_mut().enumerate() {
                *x *= if tb { k[i / b] } else { k[i % b] };
            }
        }
        _ => return None,
    }
    Some(out)
}

/// Output channels of a compute op's result (its last dim).
fn out_channels(op: OperationRef) -> Option<usize> {
    let t = crate::ir::types::tensor_type(op.result(0).ok()?.r#type())?;
    match t.dims.last()? {
        crate::ir::types::Dim::Static(n) => Some(*n),
        _ => None,
    }
}

/// Replaces `add` (AddV2/Add/Sub/BiasAdd of `x` and a per-channel constant) by a BiasAdd.
fn to_bias_add<'c, 'a>(add: OperationRef<'c, 'a>, x: Value<'c, 'a>, bias: Vec<f32>) -> Result<(), PassError> {
    let ctx = crate::ir::graph::context_of(&add);
    let n = bias.len();
    let t = Tensor::F32(ArrayD::from_shape_vec(ndarray::IxDyn(&[n]), bias).map_err(err)?);
    let c = insert_constant(add, &t, true, add.location())?;
    let b = OperationBuilder::new("tf.BiasAdd", add.location())
        .add_operands(&[x, c.result(0).map_err(err)?.into()])
        .add_attributes(&[(
            Identifier::new(ctx, "data_format"),
            StringAttribute::new(ctx, "NHWC").into(),
        )])
        .add_results(&[add.result(0).map_err(err)?.r#type()])
        .build()
        .map_err(err)?;
    let b = insert_after(c, b)?;
    replace_all_uses(add.result(0).map_err(err)?.into(), b.result(0).map_err(err)?.into());
    erase_with_dead_constants(add)?;
    Ok(())
}

pub fn run(module: &Module, _: &PassOptions) -> Result<PassReport, PassError> {
    let mut report = PassReport::default();
    for func in functions(module) {
        // ops this pass erases further down the block; the loop must not touch them again
        let mut erased: std::collections::HashSet<usize> = std::collections::HashSet::new();
        for op in body_ops(func) {
            if erased.contains(&(op.to_raw().ptr as usize)) {
                continue;
            }
            let Some((wi, _)) = rule(&op_name(&op)).and_then(|r| r.weight) else {
                continue;
            };
            let Some(c) = out_channels(op) else { continue };
            let Ok(w) = op.operand(wi) else { continue };
            let Some(wdef) = defining_op(w).filter(is_constant_op) else {
                continue;
            };
            // a float weight (its values are read below, only where a scale is folded in)
            if crate::ir::types::tensor_type(w.r#type()).and_then(|t| t.dtype) != Some(crate::tensor::DType::F32) {
                continue;
            }
            let out: Value = op.result(0).map_err(err)?.into();
            let Some((user, idx)) = single_user(out) else { continue };
            let uname = op_name(&user);
            // scale: Mul by a per-channel constant, or a FusedBatchNorm in inference mode
            let (scale, shift, after): (Option<Vec<f32>>, Option<Vec<f32>>, OperationRef) = if uname == "tf.Mul" {
                match user.operand(1 - idx).ok().and_then(|v| channel_vector(v, c)) {
                    Some(k) => (Some(k), None, user),
                    None => continue,
                }
            } else if uname.starts_with("tf.FusedBatchNorm") && idx == 0 {
                let get = |i: usize| user.operand(i).ok().and_then(|v| channel_vector(v, c));
                let attrs = op_attrs(&user);
                let training = attrs.get("is_training").and_then(|v| v.as_bool()).unwrap_or(false);
                let nhwc = attrs
                    .get("data_format")
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or("NHWC".into())
                    == "NHWC";
                let (Some(g), Some(beta), Some(mean), Some(var)) = (get(1), get(2), get(3), get(4)) else {
                    continue;
                };
                if training || !nhwc || user.results().skip(1).any(|r| !uses(r.into()).is_empty()) {
                    continue;
                }
                let eps = attrs.get("epsilon").and_then(|v| v.as_f64()).unwrap_or(1e-3) as f32;
                let k: Vec<f32> = g.iter().zip(&var).map(|(g, v)| g / (v + eps).sqrt()).collect();
                let b: Vec<f32> = beta.iter().zip(&mean).zip(&k).map(|((b, m), k)| b - m * k).collect();
                (Some(k), Some(b), user)
            } else if matches!(uname.as_str(), "tf.AddV2" | "tf.Add" | "tf.Sub") && idx == 0 {
                if let Some(b) = user.operand(1).ok().and_then(|v| channel_vector(v, c)) {
                    let b = if uname == "tf.Sub" {
                        b.iter().map(|x| -x).collect()
                    } else {
                        b
                    };
                    erased.insert(user.to_raw().ptr as usize);
                    to_bias_add(user, out, b)?;
                    report.count(Change::AddsToBiasAdd);
                }
                continue;
            } else {
                continue;
            };
            let Some(k) = scale else { continue };
            // the weight's values only where there is a scale to fold into them (a model's
            // every weight copied to find no batch norm after it cost a BERT encoder 0.06 s)
            let Some(Tensor::F32(wt)) = constant_value(wdef) else {
                continue;
            };
            let Some(w2) = scale_weight(op, &wt, &k) else { continue };
            let tf = op_name(&wdef).starts_with("tf.");
            let nc = insert_constant(op, &Tensor::F32(w2), tf, wdef.location())?;
            set_operand(op, wi, nc.result(0).map_err(err)?.into());
            if uses(wdef.result(0).map_err(err)?.into()).is_empty() {
                erase_op(wdef)?;
            }
            report.count(Change::ScalesFolded);
            let after_out: Value = after.result(0).map_err(err)?.into();
            match shift {
                Some(b) => {
                    erased.insert(after.to_raw().ptr as usize);
                    to_bias_add(after, out, b)?
                }
                None => {
                    // the Mul disappears: its users read the compute op directly
                    replace_all_uses(after_out, out);
                    erased.insert(after.to_raw().ptr as usize);
                    erase_with_dead_constants(after)?;
                    // a shift after the Mul becomes the bias
                    if let Some((add, 0)) = single_user(out) {
                        let an = op_name(&add);
                        if matches!(an.as_str(), "tf.AddV2" | "tf.Add" | "tf.Sub") {
                            if let Some(b) = add.operand(1).ok().and_then(|v| channel_vector(v, c)) {
                                let b = if an == "tf.Sub" {
                                    b.iter().map(|x| -x).collect()
                                } else {
                                    b
                                };
                                erased.insert(add.to_raw().ptr as usize);
                                to_bias_add(add, out, b)?;
                            }
                        }
                    }
                }
            }
        }
        onnx::run(func, &mut report)?;
    }
    Ok(report)
}
