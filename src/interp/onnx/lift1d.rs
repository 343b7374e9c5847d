//! 1-D convolutions (Conv, ConvTranspose, ConvInteger, QLinearConv) on the 2-D kernels (pools
//! of any rank have a kernel of their own). An `[N, C, L]` input is run as
//! `[N, C, 1, L]`, with every spatial attribute given a leading unit entry (kernel 1, stride 1,
//! dilation 1, no padding along the new axis) — the same arithmetic, so the result is exact.
//!
//! ```text
//! onnx.Conv(x: [1,4,9], w: [8,4,3]) {pads = [1, 1], strides = [2]}
//!   runs as Conv(x: [1,4,1,9], w: [8,4,1,3]) {pads = [0, 1, 0, 1], strides = [1, 2]}
//!   and its [1,8,1,5] result is returned as [1,8,5]
//! ```

use super::*;
use crate::ir::attrs::AttrValue;
use crate::ir::types::{Dim, TensorType};

/// Attributes with one entry per spatial axis, and the unit entry the new axis takes.
const SPATIAL: &[(&str, i64)] = &[
    ("dilations", 1),
    ("kernel_shape", 1),
    ("output_padding", 0),
    ("output_shape", 1),
    ("strides", 1),
];

/// True when `d` describes a 1-D op: a rank-3 input or weight, or 1-entry spatial attributes.
pub(super) fn is_1d(d: &OpDesc) -> bool {
    let rank3 = |i: usize| {
        d.operand_types
            .get(i)
            .and_then(|t| t.as_ref())
            .is_some_and(|t| t.dims.len() == 3)
            || d.consts
                .get(i)
                .and_then(|c| c.as_ref())
                .is_some_and(|c| c.shape().len() == 3)
    };
    rank3(0) || rank3(1) || d.ints_attr("kernel_shape").is_some_and(|k| k.len() == 1)
}

fn lift_type(t: &Option<TensorType>) -> Option<TensorType> {
    let mut t = t.clone()?;
    if t.dims.len() == 3 {
        t.dims.insert(2, Dim::Static(1));
    }
    Some(t)
}

/// `d` as the 2-D op it runs as: spatial attributes with a unit entry in front, pads
/// `[b, e]` → `[0, b, 0, e]`, rank-3 operand types and constants given an axis of 1 at 2.
fn lifted(d: &OpDesc) -> KernelResult<OpDesc> {
    let mut l = d.clone();
    for (name, unit) in SPATIAL {
        if let Some(v) = d.ints_attr(name) {
            l.attrs
                .insert(name.to_string(), AttrValue::Ints([vec![*unit], v].concat()));
        }
    }
    if let Some(p) = d.ints_attr("pads") {
        let [b, e] = p[..] else {
            return Err(format!("pads = {p:?} for a 1-D op"));
        };
        l.attrs.insert("pads".into(), AttrValue::Ints(vec![0, b, 0, e]));
    }
    l.operand_types = d.operand_types.iter().map(lift_type).collect();
    l.result_types = d.result_types.iter().map(lift_type).collect();
    l.consts = d
        .consts
        .iter()
        .map(|c| match c {
            Some(t) if t.shape().len() == 3 => unsqueeze(t, &[2]).map(|t| Some(std::sync::Arc::new(t))),
            other => Ok(other.clone()),
        })
        .collect::<KernelResult<_>>()?;
    Ok(l)
}

/// The 2-D kernel `build` makes for `d` lifted, run with rank-3 operands given an axis of 1
/// and rank-4 results losing it.
pub(super) fn lift(d: &OpDesc, build: Builder) -> Result<Box<dyn Kernel>, String> {
    let inner = build(&lifted(d)?)?;
    Ok(Box::new(FnKernel(move |x: &[&Tensor]| {
        let up: Vec<Tensor> = x
            .iter()
            .map(|t| {
                if t.shape().len() == 3 {
                    unsqueeze(t, &[2])
                } else {
                    Ok((*t).clone())
                }
            })
            .collect::<KernelResult<_>>()?;
        let refs: Vec<&Tensor> = up.iter().collect();
        inner
            .run(&refs)?
            .into_iter()
            .map(|t| {
                if t.shape().len() == 4 {
                    layout::squeeze(&t, &[2])
                } else {
                    Ok(t)
                }
            })
            .collect()
    })))
}
