//! The ONNX table: compute ops and their weight axes (Conv OIHW → 0, ConvTranspose IOHW → 1,
//! Gemm by transB, MatMul [K, N] → the last axis), in-op biases, the ops that keep their
//! input's scale, and the operands that determine shapes.

use super::{same_scale, shape, AxisRule, ChannelRule, OpRule};

/// Channel axes of the weights whose channels `equalize-layers` scales, sorted by name.
pub const CHANNEL_RULES: &[ChannelRule] = &[
    // OIHW; depthwise (group = C, weight C×1×KH×KW): channel c is row c
    ChannelRule {
        name: "onnx.Conv",
        weight: 1,
        out_axis: AxisRule::Fixed(0),
        in_axis: AxisRule::Fixed(1),
        result_axis: 1,
        bias_operand: Some(2),
        group_attr: Some("group"),
        weight_rank: None,
    },
    // B [K, N], or [N, K] with transB
    ChannelRule {
        name: "onnx.Gemm",
        weight: 1,
        out_axis: AxisRule::Transposed("transB", 1, 0),
        in_axis: AxisRule::Transposed("transB", 0, 1),
        result_axis: -1,
        bias_operand: Some(2),
        group_attr: None,
        weight_rank: None,
    },
    // B [K, N]
    ChannelRule {
        name: "onnx.MatMul",
        weight: 1,
        out_axis: AxisRule::Last,
        in_axis: AxisRule::SecondLast,
        result_axis: -1,
        bias_operand: None,
        group_attr: None,
        weight_rank: Some(2),
    },
];

/// Ops a positive per-channel scale moves through (`dialects::is_positive_homogeneous`), sorted.
pub const POSITIVE_HOMOGENEOUS: &[&str] = &["onnx.LeakyRelu", "onnx.MaxPool", "onnx.Relu"];

/// The op that stands for an absent optional input.
pub const NO_VALUE: &str = "onnx.NoValue";

const fn compute(name: &'static str, weight: (usize, AxisRule), bias_operand: Option<usize>) -> OpRule {
    OpRule {
        activations: &[0],
        weight: Some(weight),
        bias_operand,
        ..OpRule::other(name)
    }
}
const fn fused(name: &'static str, shape_operands: &'static [i64]) -> OpRule {
    OpRule {
        fused_activation: true,
        shape_operands,
        ..OpRule::other(name)
    }
}

pub const RULES: &[OpRule] = &[
    compute("onnx.Conv", (1, AxisRule::Fixed(0)), Some(2)),
    compute("onnx.ConvTranspose", (1, AxisRule::Fixed(1)), Some(2)),
    compute("onnx.Gemm", (1, AxisRule::Transposed("transB", 1, 0)), Some(2)),
    compute("onnx.MatMul", (1, AxisRule::Last), None),
    // the operand-1 weight of a TF Einsum keeps its per-tensor rule through the lowering
    compute("onnx.Einsum", (1, AxisRule::PerTensor), None),
    // a per-channel constant added right after MatMul is its bias
    OpRule {
        bias: true,
        ..OpRule::other("onnx.Add")
    },
    fused("onnx.Relu", &[]),
    // Clip(0, 6) is ReLU6; its bounds are scalars, never quantized
    fused("onnx.Clip", &[1, 2]),
    same_scale("onnx.Identity", &[]),
    same_scale("onnx.Reshape", &[1]),
    same_scale("onnx.Flatten", &[]),
    same_scale("onnx.Squeeze", &[1]),
    same_scale("onnx.Unsqueeze", &[1]),
    same_scale("onnx.Transpose", &[]),
    same_scale("onnx.MaxPool", &[]),
    same_scale("onnx.Slice", &[1, 2, 3, 4]),
    same_scale("onnx.Pad", &[1, 3]),
    same_scale("onnx.Expand", &[1]),
    same_scale("onnx.Tile", &[1]),
    same_scale("onnx.Gather", &[1]),
    same_scale("onnx.GatherElements", &[1]),
    same_scale("onnx.GatherND", &[1]),
    // values kept or zeroed (zero is exact in every scheme)
    same_scale("onnx.Trilu", &[1]),
    same_scale("onnx.Resize", &[1, 2, 3]),
    same_scale("onnx.DepthToSpace", &[]),
    same_scale("onnx.SpaceToDepth", &[]),
    shape("onnx.Split", &[1]),
    shape("onnx.ReduceMean", &[1]),
    shape("onnx.ReduceSum", &[1]),
    shape("onnx.ReduceMax", &[1]),
    shape("onnx.ReduceMin", &[1]),
    shape("onnx.ReduceProd", &[1]),
    shape("onnx.ReduceL1", &[1]),
    shape("onnx.ReduceL2", &[1]),
    shape("onnx.ReduceSumSquare", &[1]),
    shape("onnx.ReduceLogSumExp", &[1]),
    shape("onnx.TopK", &[1]),
    shape("onnx.CumSum", &[1]),
    shape("onnx.OneHot", &[1]),
    shape("onnx.ConstantOfShape", &[0]),
    // only the input's shape is read
    shape("onnx.EyeLike", &[0]),
    shape("onnx.Range", &[0, 1, 2]),
    // the parameters of Q/DQ nodes already in a model
    shape("onnx.QuantizeLinear", &[1, 2]),
    shape("onnx.DequantizeLinear", &[1, 2]),
    OpRule {
        shape_source: true,
        ..OpRule::other("onnx.Shape")
    },
    OpRule {
        shape_source: true,
        ..OpRule::other("onnx.Size")
    },
];
