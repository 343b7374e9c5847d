//! The ONNX ops onnxruntime runs on its u8s8 int8 GEMM on x86, and the order in which that
//! GEMM reduces each op's weight (`params::saturation` says why the order matters: products of
//! neighbouring elements are added in int16 on CPUs without VNNI). Sorted by op name.

use crate::ir::attrs::AttrValue;
use ndarray::ArrayD;
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

/// One GEMM column's place: the output channel it belongs to (the weight's per-channel
/// index), its length, and the activation channel each element multiplies: element i reads
/// channel `first_input + i % period` (a conv's taps repeat its group's channels; a matrix
/// product reads each input once), so no per-element index list is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Column {
    pub channel: usize,
    pub len: usize,
    pub first_input: usize,
    pub period: usize,
}

impl Column {
    /// The activation channel element `i` multiplies.
    pub fn input(&self, i: usize) -> usize {
        self.first_input + i % self.period.max(1)
    }

    /// The activation channel of each element, in reduction order.
    pub fn inputs(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.len).map(|i| self.input(i))
    }
}

/// Where a weight's GEMM columns are in its row-major elements.
enum Layout {
    /// Conv W[M, C/group, taps]: column o is W[o, c, t] taps-major, channels innermost.
    Conv {
        group: usize,
        m: usize,
        cg: usize,
        taps: usize,
    },
    /// `batches` matrices [K, N]: column (b, n) is rows 0..K of column n of matrix b.
    Matrix { batches: usize, k: usize, n: usize },
    /// One matrix [N, K] (Gemm's B with transB = 1): column n is row n.
    Rows { n: usize, k: usize },
}

/// The neighbouring columns [`Columns::gather_block`] is asked for at once: a 64-byte cache
/// line of each row of an f32 matrix.
pub const BLOCK: usize = 16;

/// A weight's GEMM columns in the kernel's reduction order, each gathered when asked for:
/// a BERT layer's [768, 3072] weight is read in place rather than copied column by column.
pub struct Columns<'a, T: Clone> {
    flat: std::borrow::Cow<'a, [T]>,
    layout: Layout,
}

impl<T: Copy> Columns<'_, T> {
    pub fn len(&self) -> usize {
        match self.layout {
            Layout::Conv { m, .. } => m,
            Layout::Matrix { batches, n, .. } => batches * n,
            Layout::Rows { n, .. } => n,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Column `c`'s place.
    pub fn column(&self, c: usize) -> Column {
        let len = self.column_len();
        let (channel, first_input, period) = match self.layout {
            Layout::Conv { group, m, cg, .. } => (c, c / (m / group) * cg, cg),
            Layout::Matrix { k, n, .. } => (c % n.max(1), 0, k),
            Layout::Rows { k, .. } => (c, 0, k),
        };
        Column {
            channel,
            len,
            first_input,
            period,
        }
    }

    /// Column `c`'s weights, in reduction order, into `out` (cleared first).
    pub fn gather(&self, c: usize, out: &mut Vec<T>) {
        out.clear();
        self.extend_with(c, out);
    }

    /// Column `c`'s weights, in reduction order, appended to `out`.
    fn extend_with(&self, c: usize, out: &mut Vec<T>) {
        let flat = &self.flat[..];
        match self.layout {
            Layout::Conv { cg, taps, .. } => {
                let filter = &flat[c * cg * taps..(c + 1) * cg * taps];
                out.extend((0..taps).flat_map(|t| filter[t..].iter().step_by(taps).take(cg).copied()));
            }
            Layout::Matrix { k, n, .. } => {
                let (b, j) = (c / n, c % n);
                out.extend(flat[b * k * n + j..].iter().step_by(n).take(k).copied());
            }
            Layout::Rows { k, .. } => out.extend_from_slice(&flat[c * k..(c + 1) * k]),
        }
    }

    /// The length of every column.
    pub fn column_len(&self) -> usize {
        match self.layout {
            Layout::Conv { cg, taps, .. } => cg * taps,
            Layout::Matrix { k, .. } | Layout::Rows { k, .. } => k,
        }
    }

    /// Columns `first..first + count` one after another into `out` (cleared first): a block
    /// of a matrix's neighbouring columns is read row by row, a cache line a row, where
    /// gathering them one by one would read every line of the block once per column.
    pub fn gather_block(&self, first: usize, count: usize, out: &mut Vec<T>) {
        let len = self.column_len();
        match self.layout {
            Layout::Matrix { k, n, .. } if count > 0 && first / n == (first + count - 1) / n => {
                let (b, j) = (first / n, first % n);
                out.clear();
                out.resize(count * len, self.flat[b * k * n + j]);
                for (r, row) in self.flat[b * k * n..(b + 1) * k * n].chunks_exact(n).enumerate() {
                    for (i, &v) in row[j..j + count].iter().enumerate() {
                        out[i * len + r] = v;
                    }
                }
            }
            _ => {
                out.clear();
                for c in first..first + count {
                    self.extend_with(c, out);
                }
            }
        }
    }

    /// Every column's weights.
    #[cfg(test)]
    pub fn to_vecs(&self) -> Vec<Vec<T>> {
        (0..self.len())
            .map(|c| {
                let mut v = Vec::new();
                self.gather(c, &mut v);
                v
            })
            .collect()
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
pub fn columns<'a, T: Copy>(
    r: Reduction,
    w: &'a ArrayD<T>,
    attrs: &BTreeMap<String, AttrValue>,
) -> Option<Columns<'a, T>> {
    let shape = w.shape();
    let layout = match r {
        Reduction::Conv => {
            if shape.len() < 3 || is_depthwise(shape, attrs) {
                return None;
            }
            let group = attrs.get("group").and_then(AttrValue::as_int).unwrap_or(1).max(1) as usize;
            let (m, cg) = (shape[0], shape[1]);
            if m % group != 0 {
                return None;
            }
            let taps = shape[2..].iter().product();
            Layout::Conv { group, m, cg, taps }
        }
        Reduction::Gemm => {
            if shape.len() != 2 {
                return None;
            }
            match flag(attrs, "transB") {
                true => Layout::Rows {
                    n: shape[0],
                    k: shape[1],
                },
                false => Layout::Matrix {
                    batches: 1,
                    k: shape[0],
                    n: shape[1],
                },
            }
        }
        Reduction::MatMul => {
            if shape.len() < 2 {
                return None;
            }
            let (k, n) = (shape[shape.len() - 2], shape[shape.len() - 1]);
            Layout::Matrix {
                batches: w.len().checked_div(k * n).unwrap_or(0),
                k,
                n,
            }
        }
    };
    let flat = match w.as_slice() {
        Some(s) => std::borrow::Cow::Borrowed(s),
        None => std::borrow::Cow::Owned(w.iter().copied().collect()),
    };
    Some(Columns { flat, layout })
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
        assert_eq!(cols.to_vecs()[1], vec![100., 110., 120., 101., 111., 121.]);
        assert_eq!(cols.column(1).inputs().collect::<Vec<_>>(), vec![0, 1, 2, 0, 1, 2]);
    }

    #[test]
    fn grouped_conv_columns_read_their_groups_channels() {
        let w = ArrayD::from_shape_fn(vec![4, 2, 1, 1], |i| (10 * i[0] + i[1]) as f32);
        let cols = columns(Reduction::Conv, &w, &attrs(&[("group", 2)])).unwrap();
        assert_eq!(cols.to_vecs()[3], vec![30., 31.]);
        assert_eq!(cols.column(3).inputs().collect::<Vec<_>>(), vec![2, 3]);
        // depthwise: no pairs
        let dw = ArrayD::<f32>::zeros(vec![8, 1, 3, 3]);
        assert!(columns(Reduction::Conv, &dw, &attrs(&[("group", 8)])).is_none());
    }

    #[test]
    fn gemm_and_matmul_columns_follow_k() {
        let w = ArrayD::from_shape_fn(vec![3, 2], |i| (10 * i[0] + i[1]) as f32); // [K, N]
        let cols = columns(Reduction::MatMul, &w, &attrs(&[])).unwrap();
        assert_eq!(cols.to_vecs()[1], vec![1., 11., 21.]);
        assert_eq!(cols.column(1).inputs().collect::<Vec<_>>(), vec![0, 1, 2]);
        // a batched weight [B, K, N]: batch b's columns follow batch b − 1's
        let w3 = ArrayD::from_shape_fn(vec![2, 3, 2], |i| (100 * i[0] + 10 * i[1] + i[2]) as i8 as i32);
        let cols3 = columns(Reduction::MatMul, &w3, &attrs(&[])).unwrap();
        assert_eq!(cols3.len(), 4);
        assert_eq!(
            (cols3.column(3).channel, cols3.to_vecs()[3].clone()),
            (1, vec![101, 111, 121])
        );
        let cols = columns(Reduction::Gemm, &w, &attrs(&[])).unwrap();
        assert_eq!(cols.to_vecs()[1], vec![1., 11., 21.]);
        // transB: [N, K]
        let cols = columns(Reduction::Gemm, &w, &attrs(&[("transB", 1)])).unwrap();
        assert_eq!(cols.len(), 3);
        assert_eq!(cols.to_vecs()[2], vec![20., 21.]);
        assert_eq!(activation_axis(Reduction::Gemm, 2, &attrs(&[("transA", 1)])), Some(0));
        assert_eq!(activation_axis(Reduction::MatMul, 3, &attrs(&[])), Some(2));
    }

    #[test]
    fn matmul_columns_are_the_weights_columns_in_any_layout() {
        let (k, n) = (70, 45);
        let want = |j: usize| (0..k).map(|r| (1000 * r + j) as f32).collect::<Vec<f32>>();
        let w = ArrayD::from_shape_fn(vec![k, n], |i| (1000 * i[0] + i[1]) as f32);
        // the same [K, N] values held transposed in memory (not standard layout): gathered
        // from a standard-layout copy
        let wt = ArrayD::from_shape_fn(vec![n, k], |i| (1000 * i[1] + i[0]) as f32).reversed_axes();
        assert!(!wt.is_standard_layout());
        for w in [w, wt] {
            let cols = columns(Reduction::MatMul, &w, &attrs(&[])).unwrap();
            assert_eq!(cols.len(), n);
            let mut buf = vec![-1.0; 3];
            for j in 0..n {
                cols.gather(j, &mut buf);
                assert_eq!(
                    (cols.column(j).channel, cols.column(j).len, &buf),
                    (j, k, &want(j)),
                    "column {j}"
                );
            }
        }
    }

    #[test]
    fn a_block_is_its_columns_one_after_another() {
        // [2, 5, 3] batched MatMul weight: a block inside one matrix (read row by row) and one
        // across the two (column by column); a conv's block
        let w = ArrayD::from_shape_fn(vec![2, 5, 3], |i| (100 * i[0] + 10 * i[1] + i[2]) as f32);
        let conv = ArrayD::from_shape_fn(vec![4, 2, 1, 2], |i| (100 * i[0] + 10 * i[1] + i[3]) as f32);
        let mut block = vec![-1.0; 2];
        for (cols, first, count) in [
            (columns(Reduction::MatMul, &w, &attrs(&[])).unwrap(), 0, 3),
            (columns(Reduction::MatMul, &w, &attrs(&[])).unwrap(), 1, 4),
            (columns(Reduction::Conv, &conv, &attrs(&[])).unwrap(), 1, 3),
        ] {
            cols.gather_block(first, count, &mut block);
            let want: Vec<f32> = cols.to_vecs()[first..first + count].concat();
            assert_eq!(block, want, "columns {first}..{}", first + count);
        }
    }
}
