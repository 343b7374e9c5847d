//! How a compute op's weight multiplies its input, for rounding that looks at the layer's
//! output (`params::gptq`): the weight as `groups` blocks of `rows` × `k` (one row per output
//! channel, one column per input element the row multiplies), and how the input becomes the
//! `k`-long vectors (patches) those rows meet.
//!
//! ```text
//! onnx.Conv  W[O, C/g, kh, kw], x NCHW → g groups of O/g rows × (C/g·kh·kw), patches (c, i, j)
//! tf.Conv2D  W[kh, kw, C, O],   x NHWC → 1 group of O rows × (kh·kw·C),       patches (i, j, c)
//! MatMul     W[K, N],           x[..., K] → N rows × K,                         patches: x's rows
//! ```

use super::conv_window::{onnx_window, tf_window, ConvPads, ConvWindow};
use crate::ir::attrs::AttrValue;
use crate::params::gptq::{round_rows, GptqError, Gram, Grid};
use crate::params::QuantParams;
use ndarray::{ArrayD, ArrayViewD, Axis, Slice};
use std::collections::BTreeMap;

/// The op forms, sorted by op name.
const FORMS: &[(&str, Form)] = &[
    ("onnx.Conv", Form::ConvChannelsFirst),
    (
        "onnx.Gemm",
        Form::Matrix {
            trans_a: "transA",
            trans_b: "transB",
        },
    ),
    (
        "onnx.MatMul",
        Form::Matrix {
            trans_a: "",
            trans_b: "",
        },
    ),
    ("tf.Conv2D", Form::ConvChannelsLast { depthwise: false }),
    ("tf.DepthwiseConv2dNative", Form::ConvChannelsLast { depthwise: true }),
    (
        "tf.MatMul",
        Form::Matrix {
            trans_a: "transpose_a",
            trans_b: "transpose_b",
        },
    ),
];

#[derive(Debug, Clone, Copy)]
enum Form {
    /// NCHW / NCL input, weight [O, C/g, k…], attribute `group`.
    ConvChannelsFirst,
    /// NHWC input, weight [kh, kw, C, O] (or [kh, kw, C, M] depthwise: C groups of M rows).
    ConvChannelsLast { depthwise: bool },
    /// x[..., K] · W[K, N] (W[N, K] with `trans_b`); a transposed input (`trans_a`) is not handled.
    Matrix {
        trans_a: &'static str,
        trans_b: &'static str,
    },
}

/// The op names [`WeightLayout::of`] knows.
pub fn known_ops() -> impl Iterator<Item = &'static str> {
    FORMS.iter().map(|(n, _)| *n)
}

/// Where a convolution's patches come from.
#[derive(Debug, Clone, PartialEq)]
pub struct ConvPatches {
    /// NHWC input (else NCHW; a 1-D input is NCL, taken as H = 1).
    pub channels_last: bool,
    /// One input channel per group (TF depthwise).
    pub depthwise: bool,
    pub one_d: bool,
    pub kernel: [usize; 2],
    pub strides: [usize; 2],
    pub dilations: [usize; 2],
    pub pads: ConvPads,
    /// Input channels a group reads.
    pub group_channels: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Patches {
    /// The input's rows along its last axis.
    Rows,
    Conv(ConvPatches),
}

/// A weight seen as groups of rows × k, and the patches of the input its rows multiply.
#[derive(Debug, Clone, PartialEq)]
pub struct WeightLayout {
    pub groups: usize,
    pub rows: usize,
    pub k: usize,
    pub patches: Patches,
    /// The weight's flat (row-major) index of each matrix element, in [group][row][k] order.
    index: Vec<usize>,
}

fn flag(attrs: &BTreeMap<String, AttrValue>, name: &str) -> bool {
    !name.is_empty()
        && attrs
            .get(name)
            .is_some_and(|v| v.as_bool().unwrap_or(false) || v.as_int().is_some_and(|i| i != 0))
}

impl WeightLayout {
    /// The layout of op `name` (attributes `attrs`) with a weight of `shape`; `None` for an op
    /// or a form (a transposed input, 3-D convolutions, NCHW TF ops, batched weights) it does
    /// not know.
    pub fn of(name: &str, attrs: &BTreeMap<String, AttrValue>, shape: &[usize]) -> Option<WeightLayout> {
        let form = FORMS.iter().find(|(n, _)| *n == name)?.1;
        let layout = match form {
            Form::ConvChannelsFirst => {
                let one_d = match shape.len() {
                    3 => true,
                    4 => false,
                    _ => return None,
                };
                let groups = attrs.get("group").and_then(AttrValue::as_int).unwrap_or(1);
                let groups = usize::try_from(groups).ok().filter(|g| *g > 0 && shape[0] % g == 0)?;
                let kernel = if one_d { [1, shape[2]] } else { [shape[2], shape[3]] };
                let k = shape[1] * kernel[0] * kernel[1];
                let ConvWindow {
                    strides,
                    dilations,
                    pads,
                } = onnx_window(attrs, one_d)?;
                WeightLayout {
                    groups,
                    rows: shape[0] / groups,
                    k,
                    patches: Patches::Conv(ConvPatches {
                        channels_last: false,
                        depthwise: false,
                        one_d,
                        kernel,
                        strides,
                        dilations,
                        pads,
                        group_channels: shape[1],
                    }),
                    // [O, C/g, k…] is already [group][row][k]
                    index: (0..shape.iter().product()).collect(),
                }
            }
            Form::ConvChannelsLast { depthwise } => {
                let &[kh, kw, c, o] = shape else { return None };
                if attrs
                    .get("data_format")
                    .and_then(AttrValue::as_str)
                    .is_some_and(|f| f != "NHWC")
                {
                    return None;
                }
                let ConvWindow {
                    strides,
                    dilations,
                    pads,
                } = tf_window(attrs)?;
                let patches = |group_channels| {
                    Some(Patches::Conv(ConvPatches {
                        channels_last: true,
                        depthwise,
                        one_d: false,
                        kernel: [kh, kw],
                        strides,
                        dilations,
                        pads,
                        group_channels,
                    }))
                };
                if depthwise {
                    // [kh, kw, C, M]: group c, row m, column (i, j)
                    let index = (0..c)
                        .flat_map(|g| (0..o).flat_map(move |m| (0..kh * kw).map(move |t| (t * c + g) * o + m)))
                        .collect();
                    WeightLayout {
                        groups: c,
                        rows: o,
                        k: kh * kw,
                        patches: patches(1)?,
                        index,
                    }
                } else {
                    // [kh, kw, C, O]: row o, column (i, j, c)
                    let k = kh * kw * c;
                    WeightLayout {
                        groups: 1,
                        rows: o,
                        k,
                        patches: patches(c)?,
                        index: (0..o).flat_map(|r| (0..k).map(move |t| t * o + r)).collect(),
                    }
                }
            }
            Form::Matrix { trans_a, trans_b } => {
                let &[a, b] = shape else { return None };
                if flag(attrs, trans_a) {
                    return None;
                }
                let (n, k) = if flag(attrs, trans_b) { (a, b) } else { (b, a) };
                let index = if flag(attrs, trans_b) {
                    (0..n * k).collect()
                } else {
                    (0..n).flat_map(|r| (0..k).map(move |t| t * n + r)).collect()
                };
                WeightLayout {
                    groups: 1,
                    rows: n,
                    k,
                    patches: Patches::Rows,
                    index,
                }
            }
        };
        (layout.k > 0 && layout.rows > 0).then_some(layout)
    }

    /// Row `row` of group `group` of the weight whose row-major values are `flat`, in patch
    /// order: the weights of output channel `group · rows + row`.
    pub fn row_values<T: Copy>(&self, flat: &[T], group: usize, row: usize) -> Vec<T> {
        let start = (group * self.rows + row) * self.k;
        self.index[start..start + self.k].iter().map(|&i| flat[i]).collect()
    }

    /// The layout of the same layer reading two inputs side by side — its float input and its
    /// quantized one (`quantize::gram::paired`): each group's channels twice (the first input's,
    /// then the second's; rows of 2k for a matrix), so that one patch of the interleaved input
    /// ([`WeightLayout::interleave`]) holds both inputs' patches and its Gram matrix holds
    /// X Xᵀ, X X̃ᵀ and X̃ X̃ᵀ. It lays out patches only: it rounds no weights.
    ///
    /// ```text
    /// NCHW, 2 groups of 3 channels: [x0 x1 x2 | x3 x4 x5] → [x0 x1 x2 x̃0 x̃1 x̃2 | x3 x4 x5 x̃3 x̃4 x̃5]
    /// ```
    pub fn side_by_side(&self) -> WeightLayout {
        let patches = match &self.patches {
            Patches::Rows => Patches::Rows,
            Patches::Conv(c) => Patches::Conv(ConvPatches {
                group_channels: 2 * c.group_channels,
                ..c.clone()
            }),
        };
        WeightLayout {
            groups: self.groups,
            rows: self.rows,
            k: 2 * self.k,
            patches,
            index: Vec::new(),
        }
    }

    /// Group `g`'s weight rows (rows × k, row-major) out of the weight's flat (row-major)
    /// values; `None` where `flat` is not a weight of this layout or there is no group `g`.
    pub fn group_rows(&self, flat: &[f32], g: usize) -> Option<Vec<f64>> {
        let block = self.rows * self.k;
        if flat.len() != self.index.len() {
            return None;
        }
        let idx = self.index.get(g * block..(g + 1) * block)?;
        Some(idx.iter().map(|&i| flat[i] as f64).collect())
    }

    /// Where entry `i` (of k) of this layout's patch sits in the patch of its
    /// [`WeightLayout::side_by_side`] layout, for the first input or (`second`) the other.
    /// Channels-first patches run channel by channel, so the second input's k follow the
    /// first's; channels-last ones run tap by tap, each tap the first's channels then the
    /// second's.
    pub fn side_by_side_index(&self, i: usize, second: bool) -> usize {
        match &self.patches {
            Patches::Conv(c) if c.channels_last => {
                let gc = c.group_channels;
                (i / gc) * 2 * gc + usize::from(second) * gc + i % gc
            }
            _ => i + usize::from(second) * self.k,
        }
    }

    /// `a` and `b` (one shape) interleaved as the [`WeightLayout::side_by_side`] layout reads
    /// them: along the channel axis, each group's channels of `a` then of `b`.
    pub fn interleave(&self, a: &ArrayViewD<f32>, b: &ArrayViewD<f32>) -> Result<ArrayD<f32>, String> {
        if a.shape() != b.shape() || a.ndim() == 0 {
            return Err(format!(
                "inputs of shapes {:?} and {:?} side by side",
                a.shape(),
                b.shape()
            ));
        }
        let axis = match &self.patches {
            Patches::Conv(c) if !c.channels_last => 1,
            _ => a.ndim() - 1,
        };
        let channels = a.shape()[axis];
        if channels % self.groups != 0 {
            return Err(format!("{channels} channels in {} groups", self.groups));
        }
        let gc = channels / self.groups;
        let mut shape = a.shape().to_vec();
        shape[axis] *= 2;
        let mut out = ArrayD::<f32>::zeros(shape);
        for g in 0..self.groups {
            for (half, src) in [a, b].into_iter().enumerate() {
                let from = src.slice_axis(Axis(axis), Slice::from(g * gc..(g + 1) * gc));
                let at = (2 * g + half) * gc;
                out.slice_axis_mut(Axis(axis), Slice::from(at..at + gc)).assign(&from);
            }
        }
        Ok(out)
    }

    /// f64 values one Gram matrix per group takes.
    pub fn gram_len(&self) -> usize {
        self.groups * self.k * self.k
    }

    /// The quantization grid of each row of group `g` of a weight of `shape` quantized with
    /// `p` (one per row: a row lies in one channel of a per-channel `p`).
    pub fn row_grids(&self, shape: &[usize], p: &QuantParams, g: usize) -> Result<Vec<Grid>, GptqError> {
        let shape_err = |m: String| GptqError::Shape(m);
        // the channel of each flat index, by the parameters' axis: (i / inner) % channels
        let (inner, channels) = match p.axis {
            Some(a) if a < shape.len() => (shape[a + 1..].iter().product::<usize>(), shape[a]),
            _ => (1, 1),
        };
        let channel = |i: usize| (i / inner) % channels;
        let grid = |c: usize| -> Option<Grid> {
            Some(Grid {
                scale: *p.scale.get(c).or(p.scale.first())?,
                zero_point: *p.zero_point.get(c).or(p.zero_point.first())?,
                qmin: p.qmin,
                qmax: p.qmax,
            })
        };
        let block = self.rows * self.k;
        let idx = self
            .index
            .get(g * block..(g + 1) * block)
            .ok_or_else(|| shape_err(format!("no group {g}")))?;
        idx.chunks(self.k.max(1))
            .map(|row| {
                let c = channel(row[0]);
                if row.iter().any(|&i| channel(i) != c) {
                    return Err(shape_err("a row spans two quantization channels".into()));
                }
                grid(c).ok_or_else(|| shape_err(format!("no parameters for channel {c}")))
            })
            .collect()
    }

    /// `w` rounded by GPTQ on the grid of `p` (its scales and zero points are kept), given the
    /// Gram matrices of the inputs; every value returned is exactly on its channel's grid, so
    /// quantizing it with `p` gives the levels GPTQ chose.
    pub fn round_by_gptq(&self, w: &ArrayD<f32>, p: &QuantParams, gram: &Gram) -> Result<ArrayD<f32>, GptqError> {
        let shape_err = |m: String| GptqError::Shape(m);
        if gram.groups != self.groups || gram.k != self.k {
            return Err(shape_err(format!(
                "a Gram of {} groups of {} for a weight of {} groups of {}",
                gram.groups, gram.k, self.groups, self.k
            )));
        }
        let flat = w.as_standard_layout();
        let flat = flat.as_slice().unwrap_or(&[]);
        if flat.len() != self.index.len() {
            return Err(shape_err(format!(
                "{} weights for a layout of {}",
                flat.len(),
                self.index.len()
            )));
        }
        let mut out = flat.to_vec();
        let block = self.rows * self.k;
        for g in 0..self.groups {
            let idx = &self.index[g * block..(g + 1) * block];
            let grids = self.row_grids(w.shape(), p, g)?;
            let mut m = self
                .group_rows(flat, g)
                .ok_or_else(|| shape_err(format!("no group {g}")))?;
            if !gram.targets.is_empty() {
                // each row moved to w M, what the quantized model's inputs should multiply
                let k = self.k;
                let t = gram
                    .targets
                    .get(g * k * k..(g + 1) * k * k)
                    .ok_or_else(|| shape_err(format!("no target map for group {g}")))?;
                m = crate::params::gptq::moved_rows(&m, t, k);
            }
            round_rows(&mut m, self.rows, self.k, gram.factor_of(g)?.as_ref(), &grids)?;
            for (&i, v) in idx.iter().zip(m) {
                out[i] = v as f32;
            }
        }
        ArrayD::from_shape_vec(w.raw_dim(), out).map_err(|e| shape_err(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_names_a_compute_op_with_a_weight() {
        let names: Vec<&str> = known_ops().collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted, "FORMS is sorted by op name");
        for n in names {
            let r = super::super::rule(n).unwrap_or_else(|| panic!("{n} has no op rule"));
            assert!(
                r.weight.is_some() && r.is_compute(),
                "{n} is a compute op with a weight"
            );
        }
    }

    #[test]
    fn each_row_lists_the_weights_of_one_output_channel_in_patch_order() {
        let none = BTreeMap::new();
        // TF HWIO [2, 1, 3, 2]: row o, column (i, j, c) → flat ((i·kw + j)·C + c)·O + o
        let l = WeightLayout::of("tf.Conv2D", &none, &[2, 1, 3, 2]).unwrap();
        assert_eq!((l.groups, l.rows, l.k), (1, 2, 6));
        assert_eq!(&l.index[..6], &[0, 2, 4, 6, 8, 10]);
        assert_eq!(&l.index[6..], &[1, 3, 5, 7, 9, 11]);
        // depthwise [1, 2, 3, 1]: group c, one row, column j → flat (j·C + c)
        let d = WeightLayout::of("tf.DepthwiseConv2dNative", &none, &[1, 2, 3, 1]).unwrap();
        assert_eq!((d.groups, d.rows, d.k), (3, 1, 2));
        assert_eq!(d.index, vec![0, 3, 1, 4, 2, 5]);
        // MatMul [K = 2, N = 3]: row n, column k → flat k·N + n
        let m = WeightLayout::of("onnx.MatMul", &none, &[2, 3]).unwrap();
        assert_eq!(m.index, vec![0, 3, 1, 4, 2, 5]);
        let mut t = BTreeMap::new();
        t.insert("transB".to_string(), AttrValue::Int(1));
        assert_eq!(
            WeightLayout::of("onnx.Gemm", &t, &[3, 2]).unwrap().index,
            vec![0, 1, 2, 3, 4, 5]
        );
        // grouped ONNX conv [4, 2, 1, 1], group 2: two groups of two rows of two
        let mut g = BTreeMap::new();
        g.insert("group".to_string(), AttrValue::Int(2));
        let c = WeightLayout::of("onnx.Conv", &g, &[4, 2, 1, 1]).unwrap();
        assert_eq!((c.groups, c.rows, c.k), (2, 2, 2));
        // forms left out
        t.insert("transA".to_string(), AttrValue::Int(1));
        assert!(WeightLayout::of("onnx.Gemm", &t, &[3, 2]).is_none());
        assert!(WeightLayout::of("onnx.MatMul", &none, &[4, 2, 3]).is_none());
        assert!(WeightLayout::of("onnx.Conv", &none, &[4, 2, 1, 1, 1]).is_none());
    }
}
