//! The ONNX ops onnxruntime runs on its u8s8 int8 GEMM on x86, and the order in which that
//! GEMM reduces each op's weight (`params::saturation` says why the order matters: products of
//! neighbouring elements are added in int16 on CPUs without VNNI). Sorted by op name.

use crate::ir::attrs::AttrValue;
use ndarray::{ArrayD, Axis, Ix2};
use std::collections::BTreeMap;

/// How an op's weight is laid out along the GEMM's reduction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reduction {
    /// Weight [M, C/group, k…]: per output channel, the kernel taps row-major and, innermost,
    /// the group's input channels (QLinearConv runs channels-last). Activation channel axis 1.
    /// A depthwise Conv (one input and one output channel per group) has a kernel of its own
    /// that accumulates in int32.
    Conv,
    /// Weight B [K, N] (or [N, K] with transB = 1); activation A [M, K] (or [K, M] with
    /// transA = 1).
    Gemm,
    /// Weight [..., K, N]: K in order, per batch; activation channel axis: the last.
    MatMul,
}

/// Whether onnxruntime runs the op in int8 when its output is not quantized (DQ → op with a
/// float result): MatMul becomes MatMulIntegerToFloat and Gemm a QGemm with a float output
/// (onnxruntime 1.32, checked in its optimized graph of the digits CNN, whose last Gemm feeds
/// the model's output); Conv stays a float op then, and is fused only with a QuantizeLinear
/// after it (or after a Relu/Clip it folds away).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FloatOutput {
    Fused,
    Float,
}

/// The ops, their reductions and what a float output does, sorted.
pub const U8S8_GEMM: &[(&str, Reduction, FloatOutput)] = &[
    ("onnx.Conv", Reduction::Conv, FloatOutput::Float),
    ("onnx.Gemm", Reduction::Gemm, FloatOutput::Fused),
    ("onnx.MatMul", Reduction::MatMul, FloatOutput::Fused),
];

pub fn reduction(op: &str) -> Option<Reduction> {
    U8S8_GEMM.iter().find(|(n, ..)| *n == op).map(|(_, r, _)| *r)
}

/// True when onnxruntime runs `op` on its int8 GEMM, given whether its (fused) output is
/// quantized.
pub fn runs_int8(op: &str, output_quantized: bool) -> bool {
    U8S8_GEMM
        .iter()
        .any(|(n, _, f)| *n == op && (output_quantized || *f == FloatOutput::Fused))
}

fn flag(attrs: &BTreeMap<String, AttrValue>, name: &str) -> bool {
    attrs.get(name).and_then(AttrValue::as_int).unwrap_or(0) != 0
}

/// The axis of the activation (operand 0) along which the GEMM reduces, for an activation of
/// rank `rank`.
pub fn activation_axis(r: Reduction, rank: usize, attrs: &BTreeMap<String, AttrValue>) -> Option<usize> {
    match r {
        Reduction::Conv => (rank >= 3).then_some(1),
        Reduction::Gemm => (rank == 2).then_some(if flag(attrs, "transA") { 0 } else { 1 }),
        Reduction::MatMul => rank.checked_sub(1).filter(|_| rank >= 1),
    }
}

/// True for a Conv whose groups each have one input and one output channel.
pub fn is_depthwise(w: &[usize], attrs: &BTreeMap<String, AttrValue>) -> bool {
    let group = attrs.get("group").and_then(AttrValue::as_int).unwrap_or(1).max(1) as usize;
    w.len() >= 3 && w[1] == 1 && w[0] == group
}

/// One GEMM column: the output channel it belongs to (the weight's per-channel index), its
/// weights in reduction order, and the activation channel each multiplies: element i reads
/// channel `first_input + i % period` (a conv's taps repeat its group's channels; a matrix
/// product reads each input once), so no per-element index list is built.
pub struct Column<T = f32> {
    pub channel: usize,
    pub weights: Vec<T>,
    pub first_input: usize,
    pub period: usize,
}

impl<T> Column<T> {
    /// The activation channel element `i` multiplies.
    pub fn input(&self, i: usize) -> usize {
        self.first_input + i % self.period.max(1)
    }

    /// The activation channel of each element, in reduction order.
    pub fn inputs(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.weights.len()).map(|i| self.input(i))
    }
}

/// The weight's GEMM columns in the kernel's reduction order; `None` when the kernel does not
/// pair elements (a depthwise Conv) or the weight's shape does not fit the op.
///
/// ```text
/// Conv W[2, 3, 1, 2] (M, C, kh, kw), group 1: column o = W[o,0,0,0] W[o,1,0,0] W[o,2,0,0]
///                                                        W[o,0,0,1] W[o,1,0,1] W[o,2,0,1]
/// pairs: (c0 c1 @tap0) (c2 @tap0, c0 @tap1) (c1 c2 @tap1)
/// ```
pub fn columns<T: Copy>(r: Reduction, w: &ArrayD<T>, attrs: &BTreeMap<String, AttrValue>) -> Option<Vec<Column<T>>> {
    let shape = w.shape();
    match r {
        Reduction::Conv => {
            if shape.len() < 3 || is_depthwise(shape, attrs) {
                return None;
            }
            let group = attrs.get("group").and_then(AttrValue::as_int).unwrap_or(1).max(1) as usize;
            let (m, cg) = (shape[0], shape[1]);
            if m % group != 0 {
                return None;
            }
            let taps: usize = shape[2..].iter().product();
            let flat = w.as_standard_layout();
            let flat = flat.as_slice()?;
            Some(
                (0..m)
                    .map(|o| {
                        let g = o / (m / group);
                        let mut weights = Vec::with_capacity(taps * cg);
                        for t in 0..taps {
                            for c in 0..cg {
                                weights.push(flat[(o * cg + c) * taps + t]);
                            }
                        }
                        Column {
                            channel: o,
                            weights,
                            first_input: g * cg,
                            period: cg,
                        }
                    })
                    .collect(),
            )
        }
        Reduction::Gemm => {
            let b = w.view().into_dimensionality::<Ix2>().ok()?;
            let b = if flag(attrs, "transB") { b.reversed_axes() } else { b };
            Some(
                b.axis_iter(Axis(1))
                    .enumerate()
                    .map(|(n, col)| Column {
                        channel: n,
                        weights: col.to_vec(),
                        first_input: 0,
                        period: col.len(),
                    })
                    .collect(),
            )
        }
        Reduction::MatMul => {
            if shape.len() < 2 {
                return None;
            }
            let (k, n) = (shape[shape.len() - 2], shape[shape.len() - 1]);
            let batches = w.len() / (k * n).max(1);
            let flat = w.as_standard_layout();
            let flat = flat.as_slice()?;
            // each batch's [K, N] gathered into its columns tile by tile (gathering one column
            // at a time strides through the whole weight): one copy of the weight, no
            // transposed one in between
            let mut cols = Vec::with_capacity(batches * n);
            for mat in flat.chunks_exact((k * n).max(1)).take(batches) {
                cols.extend(
                    columns_of(mat, k, n)
                        .into_iter()
                        .enumerate()
                        .map(|(j, weights)| Column {
                            channel: j,
                            weights,
                            first_input: 0,
                            period: k,
                        }),
                );
            }
            Some(cols)
        }
    }
}

/// The columns of `m` ([rows, cols], row-major), each as a vector of `rows` values, filled
/// in 32 × 32 tiles that stay in cache.
fn columns_of<T: Copy>(m: &[T], rows: usize, cols: usize) -> Vec<Vec<T>> {
    const TILE: usize = 32;
    let mut out: Vec<Vec<T>> = (0..cols).map(|_| Vec::with_capacity(rows)).collect();
    for r0 in (0..rows).step_by(TILE) {
        let r1 = (r0 + TILE).min(rows);
        for c0 in (0..cols).step_by(TILE) {
            for (c, col) in out.iter_mut().enumerate().skip(c0).take(TILE) {
                col.extend((r0..r1).map(|r| m[r * cols + c]));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(kv: &[(&str, i64)]) -> BTreeMap<String, AttrValue> {
        kv.iter().map(|(k, v)| (k.to_string(), AttrValue::Int(*v))).collect()
    }

    #[test]
    fn the_table_is_sorted() {
        assert!(U8S8_GEMM.windows(2).all(|p| p[0].0 < p[1].0));
        assert!(runs_int8("onnx.MatMul", false) && !runs_int8("onnx.Conv", false) && runs_int8("onnx.Gemm", false));
    }

    #[test]
    fn conv_columns_are_taps_then_channels() {
        // W[o, c, 0, t] = 100·o + 10·c + t
        let w = ArrayD::from_shape_fn(vec![2, 3, 1, 2], |i| (100 * i[0] + 10 * i[1] + i[3]) as f32);
        let cols = columns(Reduction::Conv, &w, &attrs(&[])).unwrap();
        assert_eq!(cols[1].weights, vec![100., 110., 120., 101., 111., 121.]);
        assert_eq!(cols[1].inputs().collect::<Vec<_>>(), vec![0, 1, 2, 0, 1, 2]);
    }

    #[test]
    fn grouped_conv_columns_read_their_groups_channels() {
        let w = ArrayD::from_shape_fn(vec![4, 2, 1, 1], |i| (10 * i[0] + i[1]) as f32);
        let cols = columns(Reduction::Conv, &w, &attrs(&[("group", 2)])).unwrap();
        assert_eq!(cols[3].weights, vec![30., 31.]);
        assert_eq!(cols[3].inputs().collect::<Vec<_>>(), vec![2, 3]);
        // depthwise: no pairs
        let dw = ArrayD::<f32>::zeros(vec![8, 1, 3, 3]);
        assert!(columns(Reduction::Conv, &dw, &attrs(&[("group", 8)])).is_none());
    }

    #[test]
    fn gemm_and_matmul_columns_follow_k() {
        let w = ArrayD::from_shape_fn(vec![3, 2], |i| (10 * i[0] + i[1]) as f32); // [K, N]
        let cols = columns(Reduction::MatMul, &w, &attrs(&[])).unwrap();
        assert_eq!(cols[1].weights, vec![1., 11., 21.]);
        assert_eq!(cols[1].inputs().collect::<Vec<_>>(), vec![0, 1, 2]);
        // a batched weight [B, K, N]: batch b's columns follow batch b − 1's
        let w3 = ArrayD::from_shape_fn(vec![2, 3, 2], |i| (100 * i[0] + 10 * i[1] + i[2]) as i8 as i32);
        let cols3 = columns(Reduction::MatMul, &w3, &attrs(&[])).unwrap();
        assert_eq!(cols3.len(), 4);
        assert_eq!((cols3[3].channel, cols3[3].weights.clone()), (1, vec![101, 111, 121]));
        let cols = columns(Reduction::Gemm, &w, &attrs(&[])).unwrap();
        assert_eq!(cols[1].weights, vec![1., 11., 21.]);
        // transB: [N, K]
        let cols = columns(Reduction::Gemm, &w, &attrs(&[("transB", 1)])).unwrap();
        assert_eq!(cols.len(), 3);
        assert_eq!(cols[2].weights, vec![20., 21.]);
        assert_eq!(activation_axis(Reduction::Gemm, 2, &attrs(&[("transA", 1)])), Some(0));
        assert_eq!(activation_axis(Reduction::MatMul, 3, &attrs(&[])), Some(2));
    }

    #[test]
    fn matmul_columns_are_the_weights_columns_across_tiles() {
        // [K, N] spanning several 32 × 32 tiles, with partial ones on both axes
        let (k, n) = (70, 45);
        let w = ArrayD::from_shape_fn(vec![k, n], |i| (1000 * i[0] + i[1]) as f32);
        let cols = columns(Reduction::MatMul, &w, &attrs(&[])).unwrap();
        assert_eq!(cols.len(), n);
        for (j, c) in cols.iter().enumerate() {
            let want: Vec<f32> = (0..k).map(|r| (1000 * r + j) as f32).collect();
            assert_eq!((c.channel, &c.weights), (j, &want), "column {j}");
        }
    }
}
