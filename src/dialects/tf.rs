//! The TF-dialect table.

use super::{same_scale, shape, AxisRule, OpRule};

const fn compute(name: &'static str, activations: &'static [usize], weight: Option<(usize, AxisRule)>) -> OpRule {
    OpRule {
        activations,
        weight,
        ..OpRule::other(name)
    }
}

pub const RULES: &[OpRule] = &[
    // compute ops: activations, weight and its per-channel axis
    compute("tf.Conv2D", &[0], Some((1, AxisRule::Fixed(3)))),
    compute("tf.DepthwiseConv2dNative", &[0], Some((1, AxisRule::DepthwiseChannel))),
    compute("tf.MatMul", &[0], Some((1, AxisRule::Transposed("transpose_b", 1, 0)))),
    compute("tf.BatchMatMulV2", &[0], Some((1, AxisRule::Transposed("adj_y", 1, 0)))),
    compute("tf.BatchMatMulV3", &[0], Some((1, AxisRule::Transposed("adj_y", 1, 0)))),
    compute("tf.Einsum", &[0], Some((1, AxisRule::PerTensor))),
    // fused into the compute op before them
    OpRule {
        bias: true,
        ..OpRule::other("tf.BiasAdd")
    },
    OpRule {
        fused_activation: true,
        ..OpRule::other("tf.Relu")
    },
    OpRule {
        fused_activation: true,
        ..OpRule::other("tf.Relu6")
    },
    // outputs keep the input's scale
    same_scale("tf.Identity", &[]),
    same_scale("tf.Reshape", &[1]),
    same_scale("tf.Squeeze", &[]),
    same_scale("tf.ExpandDims", &[1]),
    same_scale("tf.Transpose", &[1]),
    same_scale("tf.MaxPool", &[]),
    same_scale("tf.StridedSlice", &[1, 2, 3]),
    same_scale("tf.Slice", &[1, 2]),
    same_scale("tf.Pad", &[1]),
    // shape-determining operands: TensorFlow's table (notes §1.3) plus what it misses
    shape("tf.AllToAll", &[1]),
    shape("tf.ArgMax", &[1]),
    shape("tf.ArgMin", &[1]),
    shape("tf.AvgPool3DGrad", &[0]),
    shape("tf.AvgPoolGrad", &[0]),
    shape("tf.BatchToSpaceND", &[1, 2]),
    shape("tf.BatchToSpace", &[1]),
    shape("tf.Bincount", &[1]),
    shape("tf.BroadcastArgs", &[0, 1]),
    shape("tf.BroadcastGradientArgs", &[0, 1]),
    shape("tf.BroadcastTo", &[1]),
    shape("tf.CollectiveAssignGroupV2", &[0]),
    shape("tf.CollectivePermute", &[1]),
    shape("tf.CollectiveReduceV2", &[1, 2]),
    shape("tf.ConcatV2", &[-1]),
    shape("tf.Conv2DBackpropFilter", &[1]),
    shape("tf.Conv3DBackpropFilterV2", &[1]),
    shape("tf.DepthwiseConv2dNativeBackpropFilter", &[1]),
    shape("tf.Conv2DBackpropInput", &[0]),
    shape("tf.Conv3DBackpropInputV2", &[0]),
    shape("tf.DepthwiseConv2dNativeBackpropInput", &[0]),
    shape("tf.CrossReplicaSum", &[1]),
    shape("tf.Cumprod", &[1]),
    shape("tf.Cumsum", &[1]),
    shape("tf.CumulativeLogsumexp", &[1]),
    shape("tf.Empty", &[0]),
    shape("tf.EmptyTensorList", &[0, 1]),
    shape("tf.Fill", &[0]),
    shape("tf.GatherV2", &[2]),
    shape("tf.IRFFT", &[1]),
    shape("tf.IRFFT2D", &[1]),
    shape("tf.IRFFT3D", &[1]),
    shape("tf.RFFT", &[1]),
    shape("tf.RFFT2D", &[1]),
    shape("tf.RFFT3D", &[1]),
    shape("tf.InTopKV2", &[2]),
    shape("tf.LinSpace", &[2]),
    shape("tf.ListDiff", &[0, 1]),
    shape("tf.MatrixDiagPartV3", &[1, 2]),
    shape("tf.MatrixDiagV2", &[1, 2, 3, 4]),
    shape("tf.MatrixDiagV3", &[1, 2, 3, 4]),
    shape("tf.MatrixSetDiagV2", &[2]),
    shape("tf.MatrixSetDiagV3", &[2]),
    shape("tf.Max", &[1]),
    shape("tf.Mean", &[1]),
    shape("tf.Sum", &[1]),
    shape("tf.MaxPoolGradGradV2", &[3, 4]),
    shape("tf.MaxPoolGradV2", &[2, 3]),
    shape("tf.MaxPoolV2", &[1, 2]),
    shape("tf.MirrorPad", &[1]),
    shape("tf.MirrorPadGrad", &[1]),
    shape("tf.PadV2", &[1]),
    shape("tf.Multinomial", &[1]),
    shape("tf.StatelessMultinomial", &[1]),
    shape("tf.NonMaxSuppressionV3", &[2]),
    shape("tf.NonMaxSuppressionV4", &[2]),
    shape("tf.OneHot", &[1]),
    shape("tf.ParameterizedTruncatedNormal", &[0]),
    shape("tf.RandomStandardNormal", &[0]),
    shape("tf.RandomUniformInt", &[0]),
    shape("tf.RandomUniform", &[0]),
    shape("tf.TruncatedNormal", &[0]),
    shape("tf.Range", &[0, 1, 2]),
    shape("tf.ResizeBilinear", &[1]),
    shape("tf.ResizeNearestNeighbor", &[1]),
    shape("tf.ResourceStridedSliceAssign", &[1, 2, 3]),
    shape("tf.TensorStridedSliceUpdate", &[1, 2, 3]),
    shape("tf.Reverse", &[1]),
    shape("tf.ReverseV2", &[1]),
    shape("tf.ScatterNd", &[2]),
    shape("tf.SegmentSumV2", &[2]),
    shape("tf.SparseToDense", &[1]),
    shape("tf.StackV2", &[0]),
    shape("tf.StridedSliceGrad", &[0, 1, 2, 3]),
    shape("tf.TensorArraySplitV3", &[2]),
    shape("tf.TensorArrayV3", &[0]),
    shape("tf.TensorListFromTensor", &[1]),
    shape("tf.TensorListReserve", &[0, 1]),
    shape("tf.Tile", &[1]),
    shape("tf.TopKV2", &[1]),
    shape("tf.UnsortedSegmentMax", &[2]),
    shape("tf.UnsortedSegmentMin", &[2]),
    shape("tf.UnsortedSegmentSum", &[2]),
    shape("tf.XlaBroadcastHelper", &[2]),
    shape("tf.XlaConv", &[2, 3, 4, 5, 6]),
    shape("tf.XlaConvV2", &[2, 3, 4, 5, 6]),
    shape("tf.XlaDynamicSlice", &[2]),
    shape("tf.XlaGather", &[2]),
    shape("tf.XlaPad", &[2, 3, 4]),
    shape("tf.XlaReduceWindow", &[2, 3, 4, 5, 6]),
    shape("tf.XlaRemoveDynamicDimensionSize", &[1]),
    shape("tf.XlaSetDynamicDimensionSize", &[1]),
    shape("tf.XlaSelectAndScatter", &[1, 2, 3]),
    shape("tf.XlaSetBound", &[1]),
    // beyond TensorFlow's table: axes of Split/SplitV, the other reductions
    shape("tf.Split", &[0]),
    shape("tf.SplitV", &[1, 2]),
    shape("tf.Min", &[1]),
    shape("tf.Prod", &[1]),
    shape("tf.All", &[1]),
    shape("tf.Any", &[1]),
    // shape sources: the walk stops at them
    OpRule {
        shape_source: true,
        ..OpRule::other("tf.Shape")
    },
    OpRule {
        shape_source: true,
        ..OpRule::other("tf.ShapeN")
    },
    OpRule {
        shape_source: true,
        ..OpRule::other("tf.Rank")
    },
    OpRule {
        shape_source: true,
        ..OpRule::other("tf.Size")
    },
];
