//! Op tables, one file per dialect: what an op *is* for quantization — which operands are
//! activations, weights (and their per-channel axis) and shape-determining values, which ops
//! keep their input's scale, and which fuse into the op before them (bias, activation). The
//! passes read these tables; none of them names an op itself.

pub mod conv_window;
pub mod onnx;
pub mod onnx_types;
pub mod ort_qlinear;
pub mod ort_u8s8;
pub mod tf;
pub mod weight_layout;

use crate::ir::attrs::AttrValue;
use std::collections::BTreeMap;

/// How to find the per-channel axis of a weight operand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AxisRule {
    /// A fixed axis (Conv2D HWIO → 3).
    Fixed(usize),
    /// 1, or 0 when the named boolean attribute (transpose_b / adj_y) is set.
    Transposed(&'static str, usize, usize),
    /// Depthwise [KH, KW, C, M]: axis 2 when M == 1 (one output channel per input channel),
    /// per-tensor otherwise.
    DepthwiseChannel,
    /// The last axis (MatMul weights [..., K, N]).
    Last,
    /// The axis before the last (a MatMul weight's K: the axis its input channels run along).
    SecondLast,
    /// No per-channel form.
    PerTensor,
}

impl AxisRule {
    /// The axis for a weight of `shape` on an op with `attrs`.
    pub fn axis(&self, shape: &[usize], attrs: &BTreeMap<String, AttrValue>) -> Option<usize> {
        match *self {
            AxisRule::Fixed(a) => (a < shape.len()).then_some(a),
            AxisRule::Transposed(attr, plain, transposed) => {
                let t = attrs.get(attr).and_then(AttrValue::as_bool).unwrap_or(false);
                let a = if t { transposed } else { plain };
                // batch matmul weights: counted from the end
                let r = shape.len();
                (r >= 2).then(|| r - 2 + a)
            }
            AxisRule::DepthwiseChannel => (shape.len() == 4 && shape[3] == 1).then_some(2),
            AxisRule::Last => shape.len().checked_sub(1).filter(|_| shape.len() >= 2),
            AxisRule::SecondLast => shape.len().checked_sub(2),
            AxisRule::PerTensor => None,
        }
    }
}

/// What an op is, for quantization.
#[derive(Debug, Clone, Copy)]
pub struct OpRule {
    pub name: &'static str,
    /// A compute op worth running in int8: its activation operands get Q/DQ.
    pub activations: &'static [usize],
    /// The weight operand and its per-channel axis rule.
    pub weight: Option<(usize, AxisRule)>,
    /// Adds a per-channel bias (operand 1) to the output of the op before it (BiasAdd).
    pub bias: bool,
    /// The op's own bias operand (ONNX Conv/Gemm input 2), quantized to int32 at input scale ×
    /// weight scale.
    pub bias_operand: Option<usize>,
    /// An activation that an int8 kernel fuses into the op before it (Relu, Relu6).
    pub fused_activation: bool,
    /// The output keeps operand 0's scale and zero point (Reshape, MaxPool, ...).
    pub same_scale: bool,
    /// Operands that determine shapes (negative = from the end); never quantized.
    pub shape_operands: &'static [i64],
    /// Produces a shape from a tensor's type (Shape, Rank, Size): the shape walk stops here.
    pub shape_source: bool,
}

impl OpRule {
    pub const fn other(name: &'static str) -> OpRule {
        OpRule {
            name,
            activations: &[],
            weight: None,
            bias: false,
            bias_operand: None,
            fused_activation: false,
            same_scale: false,
            shape_operands: &[],
            shape_source: false,
        }
    }
    pub fn is_compute(&self) -> bool {
        !self.activations.is_empty()
    }
}

/// An op whose output keeps operand 0's scale, with its shape-determining operands.
pub(crate) const fn same_scale(name: &'static str, shape_operands: &'static [i64]) -> OpRule {
    OpRule {
        same_scale: true,
        shape_operands,
        ..OpRule::other(name)
    }
}

/// An op that is not quantized, with its shape-determining operands.
pub(crate) const fn shape(name: &'static str, shape_operands: &'static [i64]) -> OpRule {
    OpRule {
        shape_operands,
        ..OpRule::other(name)
    }
}

/// How a compute op's weight holds its output and input channels, for moving a per-channel
/// scale from one layer's outputs to the next one's inputs (`equalize-layers`).
#[derive(Debug, Clone, Copy)]
pub struct ChannelRule {
    pub name: &'static str,
    pub weight: usize,
    /// The weight axis of the output channels.
    pub out_axis: AxisRule,
    /// The weight axis of the input channels.
    pub in_axis: AxisRule,
    /// The result axis the output channels run along (1 for NCHW, -1 for the last).
    pub result_axis: i64,
    /// The op's own bias operand (ONNX Conv/Gemm input 2).
    pub bias_operand: Option<usize>,
    /// The attribute holding the group count (ONNX Conv): only 1 and depthwise (one input
    /// channel per group) are handled; a depthwise weight holds both channels on `out_axis`.
    pub group_attr: Option<&'static str>,
    /// The weight rank the rule holds for, when it holds for one only (a MatMul's [K, N], not
    /// a batched weight).
    pub weight_rank: Option<usize>,
}

/// The channel rule of an op of any dialect; `None` for ops whose channels no table knows.
pub fn channel_rule(name: &str) -> Option<&'static ChannelRule> {
    of_dialect(name, onnx::CHANNEL_RULES, tf::CHANNEL_RULES)
        .iter()
        .find(|r| r.name == name)
}

/// True for ops that commute with a positive per-channel scale, f(s·x) = s·f(x) channel by
/// channel (ReLU, LeakyReLU, max pooling), so that a scale moves through them.
pub fn is_positive_homogeneous(name: &str) -> bool {
    of_dialect(name, onnx::POSITIVE_HOMOGENEOUS, tf::POSITIVE_HOMOGENEOUS)
        .binary_search(&name)
        .is_ok()
}

/// True for an op that adds a per-channel constant (operand 1) to its operand 0: a bias that
/// a per-channel scale of operand 0 must scale as well (TF BiasAdd, an Add after MatMul).
pub fn is_channel_bias(name: &str) -> bool {
    rule(name).is_some_and(|r| r.bias)
}

/// The table of `name`'s dialect: ONNX's for `onnx.` ops, TF's otherwise.
fn of_dialect<T>(name: &str, onnx: &'static [T], tf: &'static [T]) -> &'static [T] {
    match name.starts_with("onnx.") {
        true => onnx,
        false => tf,
    }
}

/// The rule of an op of any dialect; `None` for ops no table knows.
pub fn rule(name: &str) -> Option<&'static OpRule> {
    of_dialect(name, onnx::RULES, tf::RULES).iter().find(|r| r.name == name)
}

/// The resolved shape-determining operand indices of an op with `num_operands` operands.
pub fn shape_operands(name: &str, num_operands: usize) -> Vec<usize> {
    let Some(r) = rule(name) else { return Vec::new() };
    r.shape_operands
        .iter()
        .filter_map(|&i| {
            let j = if i < 0 { num_operands as i64 + i } else { i };
            (j >= 0 && (j as usize) < num_operands).then_some(j as usize)
        })
        .collect()
}

/// True for ops that hold a constant (the values the shape pass may duplicate).
pub fn is_constant_name(name: &str) -> bool {
    matches!(name, "tf.Const" | "arith.constant" | "onnx.Constant")
}
