//! The interpreter's epilogue fusion tables: which compute ops a per-channel scale, bias and
//! activation may be folded into, and which ops are those. `Program::compile` runs
//! `head → [scale] → [bias] → [activation]` as one step when each value in between has one
//! user and no observer watches it; the kernel applies the epilogue in the same pass as its
//! own output (`Kernel::run_fused`), with the same arithmetic as the separate ops.
//!
//! ```text
//! %0 = onnx.Conv(%x, %w)        // head, channels on axis 1
//! %1 = onnx.Mul(%0, %s)         // %s: tensor<Cx1x1xf32>
//! %2 = onnx.Add(%1, %b)         // %b: tensor<Cx1x1xf32>
//! %3 = onnx.Clip(%2, %0f, %6f)  // ReLU6
//!   runs as Conv with the epilogue y = relu6(y · s + b)
//! ```

use super::kernels::elementwise::UnOp;
use crate::ir::types::Dim;
use crate::tensor::Tensor;

/// Where a head's output keeps its channels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChannelAxis {
    /// NHWC, and a matmul's columns.
    Last,
    /// NCHW.
    Second,
}

/// Compute ops that take an epilogue, sorted, with the axis of their output channels and the
/// index of their own bias operand, if they have one: a head that has a bias takes only an
/// activation, since (y + b₀)·s + b₁ folded into one step would round differently.
const HEADS: &[(&str, ChannelAxis, Option<usize>)] = &[
    ("onnx.Conv", ChannelAxis::Second, Some(2)),
    ("tf.Conv2D", ChannelAxis::Last, None),
    ("tf.DepthwiseConv2dNative", ChannelAxis::Last, None),
    ("tf.MatMul", ChannelAxis::Last, None),
];

/// Ops whose operand #1 is the epilogue's per-channel scale (operand #0 the head's value).
pub const SCALES: &[&str] = &["onnx.Mul", "tf.Mul"];

/// Ops whose operand #1 is the epilogue's per-channel bias.
pub const BIASES: &[&str] = &["onnx.Add", "tf.Add", "tf.AddV2", "tf.BiasAdd"];

/// The channel axis of a head op with `operands` operands, and whether it may take a scale
/// and a bias (it has no bias operand of its own); `None` for other ops.
pub fn head(op: &str, operands: usize) -> Option<(ChannelAxis, bool)> {
    HEADS
        .iter()
        .find(|(name, ..)| *name == op)
        .map(|&(_, a, bias)| (a, bias.is_none_or(|b| operands <= b)))
}

/// True when `c` is a constant with one f32 per channel of a value of `dims`: `[C]` for
/// channels last, `[C, 1, 1]` or `[1, C, 1, 1]` (ONNX's broadcast against NCHW) for axis 1.
pub fn per_channel(c: Option<&Tensor>, dims: &[Dim], axis: ChannelAxis) -> bool {
    let Some(Tensor::F32(t)) = c else {
        return false;
    };
    match axis {
        ChannelAxis::Last => t.ndim() == 1 && dims.last() == Some(&Dim::Static(t.len())),
        ChannelAxis::Second => {
            let (r, s) = (dims.len(), t.shape());
            // right-aligned against the value's rank: C at axis 1, 1 everywhere else
            r >= 2
                && s.len() <= r
                && s.len() >= r - 1
                && dims[1] == Dim::Static(t.len())
                && s.iter().enumerate().all(|(i, &d)| i + r - s.len() == 1 || d == 1)
        }
    }
}

/// The activation an op computes, given the constants among its operands after #0; `None`
/// when it is not one an epilogue applies (ONNX's Clip only with constant bounds 0 and 6).
pub fn activation(op: &str, bounds: &[Option<&Tensor>]) -> Option<UnOp> {
    let scalar = |t: Option<&Tensor>| match t {
        Some(Tensor::F32(a)) if a.len() == 1 => a.iter().next().copied(),
        _ => None,
    };
    match (op, bounds) {
        ("onnx.Relu" | "tf.Relu", []) => Some(UnOp::Relu),
        ("tf.Relu6", []) => Some(UnOp::Relu6),
        ("onnx.Clip", [lo, hi]) if scalar(*lo) == Some(0.0) && scalar(*hi) == Some(6.0) => Some(UnOp::Relu6),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{ArrayD, IxDyn};

    fn f32s(shape: &[usize]) -> Tensor {
        Tensor::F32(ArrayD::zeros(IxDyn(shape)))
    }

    #[test]
    fn heads_are_sorted_and_unique() {
        assert!(HEADS.windows(2).all(|w| w[0].0 < w[1].0));
        assert_eq!(head("onnx.Conv", 2), Some((ChannelAxis::Second, true)));
        assert_eq!(head("onnx.Conv", 3), Some((ChannelAxis::Second, false)));
        assert_eq!(head("onnx.Gemm", 3), None);
        assert!(SCALES.windows(2).all(|w| w[0] < w[1]) && BIASES.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn per_channel_constants_by_layout() {
        let nchw = [1, 8, 5, 5].map(Dim::Static);
        let nhwc = [1, 5, 5, 8].map(Dim::Static);
        for (shape, ok) in [
            (&[8, 1, 1][..], true),
            (&[1, 8, 1, 1], true),
            (&[8], false),
            (&[8, 1], false),
            (&[1, 1, 8], false),
        ] {
            assert_eq!(
                per_channel(Some(&f32s(shape)), &nchw, ChannelAxis::Second),
                ok,
                "{shape:?}"
            );
        }
        assert!(per_channel(Some(&f32s(&[8])), &nhwc, ChannelAxis::Last));
        assert!(!per_channel(Some(&f32s(&[8, 1, 1])), &nhwc, ChannelAxis::Last));
        assert!(!per_channel(None, &nhwc, ChannelAxis::Last));
    }

    #[test]
    fn clip_is_relu6_only_between_constant_0_and_6() {
        let (zero, six) = (
            Tensor::F32(ArrayD::from_elem(IxDyn(&[]), 0.0)),
            Tensor::F32(ArrayD::from_elem(IxDyn(&[]), 6.0)),
        );
        assert_eq!(activation("onnx.Clip", &[Some(&zero), Some(&six)]), Some(UnOp::Relu6));
        assert_eq!(activation("onnx.Clip", &[Some(&zero), None]), None);
        assert_eq!(activation("onnx.Clip", &[Some(&six), Some(&six)]), None);
        assert_eq!(activation("onnx.Relu", &[]), Some(UnOp::Relu));
        assert_eq!(activation("onnx.Sigmoid", &[]), None);
    }
}
