//! onnxruntime's int8 GEMM on x86 CPUs without VNNI, simulated: its u8s8 kernel (VPMADDUBSW)
//! adds the products of reduction elements 2j and 2j+1 in int16 with saturation before it
//! accumulates in int32 (`params::saturation` has the bound, `dialects::ort_u8s8` the ops and
//! their reduction orders). With [`Numerics::OrtX86NoVnni`] the interpreter runs every op that
//! onnxruntime fuses into that kernel through [`PairSaturation`], so that `evaluate` and `run`
//! report what onnxruntime's default optimization level computes on such a CPU before the
//! model is deployed there.
//!
//! ```mlir
//! %a = quant.dcast %qa : tensor<1x16x8x8x!quant.uniform<i8:f32, 0.02:-128>> to tensor<1x16x8x8xf32>
//! %w = quant.dcast %qw : tensor<32x16x3x3x!quant.uniform<i8<-127:127>:f32:0, {…}>> to …
//! %y = "onnx.Conv"(%a, %w, %b) …                 // simulated: its output is quantized
//! %q = quant.qcast %y : … to tensor<1x32x8x8x!quant.uniform<i8:f32, 0.05:-128>>
//! ```
//!
//! The float kernel computes the exact sum from the dequantized operands; the simulation adds,
//! per output element, `s_a · s_w · Σ (sat16(p) − p)` over the pairs `p = a₂ⱼ·w₂ⱼ + a₂ⱼ₊₁·w₂ⱼ₊₁`
//! of raw uint8 activations (int8 ones enter as q + 128, padding as the zero point) and int8
//! weights. Only the pairs whose weights can reach ±2¹⁵ for some activation are looked at.

use super::kernels::conv_nchw::same_pads;
use super::kernels::{Kernel, KernelResult};
use super::ort_fusion::{dequantized, output_quantized};
use crate::dialects::conv_window::{onnx_window, ConvPads, ConvWindow};
use crate::dialects::ort_u8s8::{columns, is_depthwise, reduction, runs_int8, Reduction, BLOCK};
use crate::ir::attrs::{op_attrs, AttrValue};
use crate::ir::graph::op_name;
use crate::ir::types::tensor_type;
use crate::params::{QuantParams, StorageType};
use crate::tensor::Tensor;
use melior::ir::operation::OperationLike;
use melior::ir::{OperationRef, Value, ValueLike};
use ndarray::ArrayD;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// How the interpreter computes the ops of a quantized model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Numerics {
    /// As written: a Q/DQ model's ops in float on the dequantized values. This is what
    /// onnxruntime computes at ORT_DISABLE_ALL, and what every int8 kernel that accumulates
    /// in int32 computes (x86 with VNNI, ARM), up to the rounding of each requantization.
    #[default]
    Exact,
    /// onnxruntime's default level on an x86 CPU without VNNI: int16 pair saturation in the
    /// Conv, Gemm and MatMul it fuses into its u8s8 GEMM.
    OrtX86NoVnni,
}

impl Numerics {
    /// The numerics of a deployment runtime (`--runtime`): `onnxruntime` means any x86 CPU, so
    /// the one without VNNI; every other runtime accumulates exactly.
    pub fn of_runtime(r: crate::recipe::Runtime) -> Numerics {
        match r {
            crate::recipe::Runtime::Onnxruntime => Numerics::OrtX86NoVnni,
            _ => Numerics::Exact,
        }
    }
}

/// What one simulated op did over a run: the int16 pair sums it formed and how many of them
/// saturated. Shared by the threads running samples; sums, so independent of their order.
#[derive(Debug, Default)]
pub struct PairCounts {
    pairs: AtomicU64,
    saturated: AtomicU64,
}

/// One op onnxruntime runs on its u8s8 GEMM, as the interpreter simulates it.
#[derive(Debug, Clone, Serialize)]
pub struct SimulatedOp {
    /// The key of the op's result.
    pub key: String,
    pub op: String,
    /// Output channels with a pair of weights that can leave int16 for some activation.
    pub channels_at_risk: usize,
    pub channels: usize,
    /// Pair sums formed and saturated so far (every run of the program adds to them).
    pub pairs: u64,
    pub saturated: u64,
}

/// A simulated op's description with its live counters.
pub struct Simulated {
    pub key: String,
    pub op: String,
    pub channels_at_risk: usize,
    pub channels: usize,
    pub counts: Arc<PairCounts>,
}

impl Simulated {
    pub fn snapshot(&self) -> SimulatedOp {
        SimulatedOp {
            key: self.key.clone(),
            op: self.op.clone(),
            channels_at_risk: self.channels_at_risk,
            channels: self.channels,
            pairs: self.counts.pairs.load(Ordering::Relaxed),
            saturated: self.counts.saturated.load(Ordering::Relaxed),
        }
    }
}

/// Where the reduction elements of an op's activation come from.
#[derive(Debug, Clone)]
enum Geometry {
    /// NCHW (a 1-D Conv as H = 1): per element of a column, its input channel and kernel tap.
    Conv {
        strides: [usize; 2],
        dilations: [usize; 2],
        pads: ConvPads,
        kernel: [usize; 2],
        /// Output channels per group and input channels per group.
        per_group: usize,
        cg: usize,
        /// True for a 1-D Conv (N, C, L).
        one_d: bool,
    },
    /// A [M, K] (or [K, M] with transA), output [M, N].
    Gemm { trans_a: bool, k: usize, n: usize },
    /// A [..., M, K], weight [B..., K, N] (B = 1 when the weight has rank 2), output [..., M, N].
    MatMul { k: usize, n: usize, batches: usize },
}

/// The pairs of one GEMM column that can saturate.
#[derive(Debug, Clone)]
struct RiskyColumn {
    /// The column's index among the op's columns (for a batched MatMul weight: batch · N + j).
    index: usize,
    /// s_a · s_w of its output channel.
    scale: f64,
    /// (reduction element, int8 weight) of each element of each risky pair.
    pairs: Vec<[(usize, i32); 2]>,
}

/// An op's kernel with onnxruntime's int16 pair saturation added to its result.
pub struct PairSaturation {
    inner: Box<dyn Kernel>,
    geometry: Geometry,
    /// raw uint8 activation = round(x / scale) + offset (offset: zero point, + 128 for int8)
    act_scale: f64,
    act_offset: i64,
    risky: Vec<RiskyColumn>,
    counts: Arc<PairCounts>,
}

/// The Conv geometry of an NCHW (or NCL) activation and an [M, C/g, k…] weight.
fn conv_geometry(attrs: &BTreeMap<String, AttrValue>, rank: usize, w: &[usize]) -> Option<Geometry> {
    let sp = rank.checked_sub(2).filter(|s| (1..=2).contains(s))?;
    if w.len() != rank {
        return None;
    }
    let group = attrs.get("group").and_then(AttrValue::as_int).unwrap_or(1).max(1) as usize;
    let ConvWindow {
        strides,
        dilations,
        pads,
    } = onnx_window(attrs, sp == 1)?;
    let kernel = if sp == 1 { [1, w[2]] } else { [w[2], w[3]] };
    (w[0] % group == 0).then_some(Geometry::Conv {
        strides,
        dilations,
        pads,
        kernel,
        per_group: w[0] / group,
        cg: w[1],
        one_d: sp == 1,
    })
}

/// The pairs of `weights` (int8, in reduction order) whose int16 sum some pair of uint8
/// activations can push past [−2¹⁵, 2¹⁵ − 1].
fn risky_pairs(weights: &[i32]) -> Vec<[(usize, i32); 2]> {
    weights
        .chunks(2)
        .enumerate()
        .filter_map(|(j, p)| match p {
            [w0, w1] => {
                let hi = 255 * (w0.max(&0) + w1.max(&0));
                let lo = 255 * (w0.min(&0) + w1.min(&0));
                (hi > i16::MAX as i32 || lo < i16::MIN as i32).then_some([(2 * j, *w0), (2 * j + 1, *w1)])
            }
            _ => None, // an odd last element is alone: |a·w| ≤ 255 · 128 < 2¹⁵
        })
        .collect()
}

/// What the simulation of one op needs: where its activation elements come from, how raw
/// uint8 activations are recovered, and its risky columns.
pub struct SimPlan {
    geometry: Geometry,
    act_scale: f64,
    act_offset: i64,
    risky: Vec<RiskyColumn>,
    channels: usize,
}

/// The simulation of `op`, when onnxruntime runs it on its u8s8 GEMM: a Conv (not depthwise),
/// Gemm or MatMul whose activation is dequantized 8-bit and whose weight is a dequantized
/// int8 constant, with a quantized output where onnxruntime fuses only then.
/// `weights` is the op's float weight operand; `const_of` gives the value of a constant.
pub fn plan<'t>(
    op: OperationRef,
    weights: Option<&Tensor>,
    const_of: &dyn Fn(Value) -> Option<&'t Tensor>,
) -> Option<SimPlan> {
    let name = op_name(&op);
    let r = reduction(&name)?;
    if !runs_int8(&name, output_quantized(op, const_of).is_some()) {
        return None;
    }
    let (act, act_const) = dequantized(op.operand(0).ok()?, const_of)?;
    let (wq, w_const) = dequantized(op.operand(1).ok()?, const_of)?;
    let per_tensor = |p: &QuantParams| p.scale.len() == 1 && p.zero_point.len() == 1;
    if act_const || !w_const || !per_tensor(&act) || wq.dtype != StorageType::Int8 {
        return None;
    }
    let act_offset = match act.dtype {
        StorageType::Int8 => act.zero_point[0] + 128,
        StorageType::Uint8 => act.zero_point[0],
        _ => return None,
    };
    let Some(Tensor::F32(w)) = weights else { return None };
    let attrs = op_attrs(&op);
    let rank = tensor_type(op.operand(0).ok()?.r#type())?.dims.len();
    let shape = w.shape();
    let flag = |n: &str| attrs.get(n).and_then(AttrValue::as_int).unwrap_or(0) != 0;
    // with the weight's per-channel axis: the one its columns are numbered by
    let (geometry, channel_axis) = match r {
        Reduction::Conv => {
            if is_depthwise(shape, &attrs) {
                return None;
            }
            (conv_geometry(&attrs, rank, shape)?, 0)
        }
        Reduction::Gemm => {
            let &[rows, cols] = shape else { return None };
            if rank != 2 {
                return None;
            }
            let (k, n, axis) = if flag("transB") {
                (cols, rows, 0)
            } else {
                (rows, cols, 1)
            };
            (
                Geometry::Gemm {
                    trans_a: flag("transA"),
                    k,
                    n,
                },
                axis,
            )
        }
        Reduction::MatMul => {
            let last = shape.len().checked_sub(1)?;
            let (k, n) = (shape[last.checked_sub(1)?], shape[last]);
            let batches = w.len() / (k * n).max(1);
            (Geometry::MatMul { k, n, batches }, last)
        }
    };
    if wq.scale.len() > 1 && wq.axis != Some(channel_axis) {
        return None;
    }
    let cols = columns(r, w, &attrs)?;
    let n_cols = cols.len();
    let mut risky = Vec::new();
    // neighbouring columns gathered together: one by one, each would read every row's line
    let (mut block, len) = (Vec::new(), cols.column_len());
    for index in 0..n_cols {
        let (first, i) = (index - index % BLOCK, index % BLOCK);
        if i == 0 {
            cols.gather_block(first, BLOCK.min(n_cols - first), &mut block);
        }
        let ch = if wq.scale.len() > 1 {
            cols.column(index).channel
        } else {
            0
        };
        let (s, zp) = (*wq.scale.get(ch)?, *wq.zero_point.get(ch)?);
        let q: Vec<i32> = block[i * len..(i + 1) * len]
            .iter()
            .map(|&x| ((x as f64 / s).round() as i64 + zp).clamp(-128, 127) as i32)
            .collect();
        let pairs = risky_pairs(&q);
        if !pairs.is_empty() {
            risky.push(RiskyColumn {
                index,
                scale: act.scale[0] * s,
                pairs,
            });
        }
    }
    Some(SimPlan {
        geometry,
        act_scale: act.scale[0],
        act_offset,
        risky,
        channels: n_cols,
    })
}

impl PairSaturation {
    /// Wraps `inner`, the op's own kernel, with the simulation `plan` made for it; returns the
    /// kernel and its description for the report.
    pub fn wrap(inner: Box<dyn Kernel>, plan: SimPlan, key: String, op: String) -> (Box<dyn Kernel>, Simulated) {
        let SimPlan {
            geometry,
            act_scale,
            act_offset,
            risky,
            channels,
        } = plan;
        let counts = Arc::new(PairCounts::default());
        let sim = Simulated {
            key,
            op,
            channels_at_risk: risky.len(),
            channels,
            counts: counts.clone(),
        };
        let k = PairSaturation {
            inner,
            geometry,
            act_scale,
            act_offset,
            risky,
            counts,
        };
        (Box::new(k), sim)
    }

    fn raw(&self, x: &[f32]) -> Vec<i32> {
        x.iter()
            .map(|&v| ((v as f64 / self.act_scale).round() as i64 + self.act_offset).clamp(0, 255) as i32)
            .collect()
    }

    /// Adds the saturation of every risky pair to `y` (the exact result); returns the pair
    /// sums the op formed and how many saturated.
    fn correct(&self, xs: &[f32], sh: &[usize], y: &mut ArrayD<f32>) -> Result<(u64, u64), String> {
        let a = self.raw(xs);
        let pad_value = self.act_offset.clamp(0, 255) as i32;
        let ysh = y.shape().to_vec();
        let ys = y.as_slice_mut().ok_or("a non-contiguous result")?;
        let mut saturated = 0u64;
        let mut fix = |sum: i32, yv: &mut f32, scale: f64| {
            let s = sum.clamp(i16::MIN as i32, i16::MAX as i32);
            if s != sum {
                saturated += 1;
                *yv += ((s - sum) as f64 * scale) as f32;
            }
        };
        let pairs_per_output: u64;
        match &self.geometry {
            Geometry::Conv {
                strides,
                dilations,
                pads,
                kernel,
                per_group,
                cg,
                one_d,
            } => {
                let (n, c, h, w) = match (one_d, sh) {
                    (true, [n, c, l]) => (*n, *c, 1, *l),
                    (false, [n, c, h, w]) => (*n, *c, *h, *w),
                    _ => return Err(format!("activation of shape {sh:?}")),
                };
                let (m, oh, ow) = match (one_d, ysh.as_slice()) {
                    (true, [_, m, l]) => (*m, 1, *l),
                    (false, [_, m, oh, ow]) => (*m, *oh, *ow),
                    _ => return Err(format!("result of shape {ysh:?}")),
                };
                let [(pt, _), (pl, _)] = match pads {
                    ConvPads::Explicit(p) => *p,
                    ConvPads::Same { upper } => {
                        [0, 1].map(|i| same_pads([h, w][i], kernel[i], strides[i], dilations[i], *upper))
                    }
                };
                pairs_per_output = (kernel[0] * kernel[1] * cg).div_ceil(2) as u64;
                for col in &self.risky {
                    let o = col.index;
                    let g = o / per_group;
                    // per element: input channel and tap offsets
                    let elems: Vec<[(usize, usize, usize); 2]> = col
                        .pairs
                        .iter()
                        .map(|p| {
                            p.map(|(k, _)| {
                                let t = k / cg;
                                (
                                    g * cg + k % cg,
                                    (t / kernel[1]) * dilations[0],
                                    (t % kernel[1]) * dilations[1],
                                )
                            })
                        })
                        .collect();
                    for b in 0..n {
                        for oy in 0..oh {
                            for ox in 0..ow {
                                let at = |(ch, dy, dx): (usize, usize, usize)| -> i32 {
                                    let iy = (oy * strides[0] + dy) as isize - pt as isize;
                                    let ix = (ox * strides[1] + dx) as isize - pl as isize;
                                    if iy < 0 || ix < 0 || iy >= h as isize || ix >= w as isize || ch >= c {
                                        pad_value
                                    } else {
                                        a[((b * c + ch) * h + iy as usize) * w + ix as usize]
                                    }
                                };
                                let yi = ((b * m + o) * oh + oy) * ow + ox;
                                for (p, e) in col.pairs.iter().zip(&elems) {
                                    let sum = at(e[0]) * p[0].1 + at(e[1]) * p[1].1;
                                    fix(sum, &mut ys[yi], col.scale);
                                }
                            }
                        }
                    }
                }
            }
            Geometry::Gemm { trans_a, k, n } => {
                if sh.len() != 2 {
                    return Err(format!("activation of shape {sh:?}"));
                }
                let rows = if *trans_a { sh[1] } else { sh[0] };
                let el = |r: usize, kk: usize| if *trans_a { a[kk * rows + r] } else { a[r * k + kk] };
                pairs_per_output = k.div_ceil(2) as u64;
                for col in &self.risky {
                    for r in 0..rows {
                        let yi = r * n + col.index;
                        for p in &col.pairs {
                            let sum = el(r, p[0].0) * p[0].1 + el(r, p[1].0) * p[1].1;
                            fix(sum, &mut ys[yi], col.scale);
                        }
                    }
                }
            }
            Geometry::MatMul { k, n, batches } => {
                let rows = a.len() / (*k).max(1);
                let rows_per_batch = rows / batches;
                if rows % batches != 0 {
                    return Err(format!("activation of shape {sh:?} for {batches} weight batches"));
                }
                pairs_per_output = k.div_ceil(2) as u64;
                for col in &self.risky {
                    let (b, j) = (col.index / n, col.index % n);
                    for r in b * rows_per_batch..(b + 1) * rows_per_batch {
                        let yi = r * n + j;
                        for p in &col.pairs {
                            let sum = a[r * k + p[0].0] * p[0].1 + a[r * k + p[1].0] * p[1].1;
                            fix(sum, &mut ys[yi], col.scale);
                        }
                    }
                }
            }
        }
        Ok((ys.len() as u64 * pairs_per_output, saturated))
    }
}

impl Kernel for PairSaturation {
    fn run(&self, inputs: &[&Tensor]) -> KernelResult<Vec<Tensor>> {
        let mut out = self.inner.run(inputs)?;
        let x = match inputs.first() {
            Some(Tensor::F32(x)) => x,
            _ => return Err("the u8s8 simulation needs an f32 activation".into()),
        };
        let Some(Tensor::F32(y)) = out.first_mut() else {
            return Err("the u8s8 simulation needs an f32 result".into());
        };
        let x = x.as_standard_layout();
        let xs = x.as_slice().ok_or("a non-contiguous activation")?;
        let (pairs, saturated) = self.correct(xs, x.shape(), y)?;
        self.counts.pairs.fetch_add(pairs, Ordering::Relaxed);
        self.counts.saturated.fetch_add(saturated, Ordering::Relaxed);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interp::kernels::FnKernel;
    use ndarray::IxDyn;

    /// A kernel whose "exact" result is zero: what remains is the simulation's correction.
    fn zeros(shape: Vec<usize>) -> Box<dyn Kernel> {
        Box::new(FnKernel(move |_: &[&Tensor]| {
            Ok(vec![Tensor::F32(ArrayD::zeros(IxDyn(&shape)))])
        }))
    }

    fn sat_error(p: i32) -> f32 {
        (p.clamp(i16::MIN as i32, i16::MAX as i32) - p) as f32
    }

    /// Pseudo-random values in 0..m, the same on every run.
    fn values(n: usize, m: u64, seed: u64) -> Vec<i32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((s >> 33) % m) as i32
            })
            .collect()
    }

    fn wrap(geometry: Geometry, weights: &[Vec<i32>], offset: i64, out: Vec<usize>) -> PairSaturation {
        let risky = weights
            .iter()
            .enumerate()
            .map(|(index, w)| RiskyColumn {
                index,
                scale: 1.0,
                pairs: risky_pairs(w),
            })
            .filter(|c| !c.pairs.is_empty())
            .collect();
        PairSaturation {
            inner: zeros(out),
            geometry,
            act_scale: 1.0,
            act_offset: offset,
            risky,
            counts: Arc::new(PairCounts::default()),
        }
    }

    fn run(k: &PairSaturation, x: ArrayD<f32>) -> ArrayD<f32> {
        match k.run(&[&Tensor::F32(x)]).unwrap().remove(0) {
            Tensor::F32(y) => y,
            _ => unreachable!(),
        }
    }

    /// A grouped, strided, padded 3×2 Conv against the kernel's pairs formed one by one: each
    /// output's column in reduction order (taps, then the group's channels), padding entering
    /// as the zero point (raw value `offset`).
    #[test]
    fn conv_correction_is_the_sum_of_saturated_pairs() {
        let (c, h, w, m, group, kh, kw, offset) = (4, 5, 6, 4, 2, 3, 2, 7i64);
        let cg = c / group;
        let raw = values(c * h * w, 256, 1);
        let x = ArrayD::from_shape_vec(
            IxDyn(&[1, c, h, w]),
            raw.iter().map(|&v| (v as i64 - offset) as f32).collect(),
        )
        .unwrap();
        // weights near ±127 so that many pairs can saturate
        let wq: Vec<i32> = values(m * cg * kh * kw, 60, 2)
            .iter()
            .map(|v| if v % 2 == 0 { 127 - v } else { v - 127 })
            .collect();
        let (sy, sx, pt, pl) = (2, 1, 1, 0);
        let (oh, ow) = ((h + 2 * pt - kh) / sy + 1, (w + 2 * pl - kw) / sx + 1);
        // columns in reduction order: tap-major, channel-minor
        let cols: Vec<Vec<i32>> = (0..m)
            .map(|o| {
                let mut v = Vec::new();
                for t in 0..kh * kw {
                    for ci in 0..cg {
                        v.push(wq[((o * cg + ci) * kh + t / kw) * kw + t % kw]);
                    }
                }
                v
            })
            .collect();
        let geometry = Geometry::Conv {
            strides: [sy, sx],
            dilations: [1, 1],
            pads: ConvPads::Explicit([(pt, pt), (pl, pl)]),
            kernel: [kh, kw],
            per_group: m / group,
            cg,
            one_d: false,
        };
        let k = wrap(geometry, &cols, offset, vec![1, m, oh, ow]);
        let y = run(&k, x);
        let mut saturated = 0;
        for o in 0..m {
            let g = o / (m / group);
            for oy in 0..oh {
                for ox in 0..ow {
                    let a: Vec<i32> = (0..kh * kw * cg)
                        .map(|e| {
                            let (t, ci) = (e / cg, g * cg + e % cg);
                            let (iy, ix) = (
                                (oy * sy + t / kw) as isize - pt as isize,
                                (ox * sx + t % kw) as isize - pl as isize,
                            );
                            if iy < 0 || ix < 0 || iy >= h as isize || ix >= w as isize {
                                offset as i32
                            } else {
                                raw[(ci * h + iy as usize) * w + ix as usize]
                            }
                        })
                        .collect();
                    let want: f32 = a
                        .chunks(2)
                        .zip(cols[o].chunks(2))
                        .map(|(a, w)| sat_error(a.iter().zip(w).map(|(a, w)| a * w).sum()))
                        .sum();
                    saturated += a
                        .chunks(2)
                        .zip(cols[o].chunks(2))
                        .filter(|(a, w)| sat_error(a.iter().zip(*w).map(|(a, w)| a * w).sum()) != 0.0)
                        .count();
                    assert_eq!(y[[0, o, oy, ox]], want, "output channel {o} at ({oy}, {ox})");
                }
            }
        }
        assert!(saturated > 10, "the case must saturate somewhere: {saturated}");
        assert_eq!(k.counts.saturated.load(Ordering::Relaxed), saturated as u64);
        assert_eq!(
            k.counts.pairs.load(Ordering::Relaxed),
            (m * oh * ow * (kh * kw * cg).div_ceil(2)) as u64
        );
    }

    /// Gemm with transA and a batched MatMul: K in order, per row (and per weight batch).
    #[test]
    fn gemm_and_matmul_corrections_follow_k() {
        let (rows, k, n, offset) = (3, 5, 4, 0i64);
        let raw = values(rows * k, 256, 3);
        let cols: Vec<Vec<i32>> = (0..n)
            .map(|j| values(k, 40, 4 + j as u64).iter().map(|v| 127 - v).collect())
            .collect();
        let expect = |r: usize, j: usize, a: &dyn Fn(usize, usize) -> i32| -> f32 {
            (0..k)
                .step_by(2)
                .map(|e| sat_error((e..(e + 2).min(k)).map(|i| a(r, i) * cols[j][i]).sum()))
                .sum()
        };
        // Gemm with transA: A stored [K, rows]
        let at: Vec<f32> = (0..k * rows).map(|i| raw[(i % rows) * k + i / rows] as f32).collect();
        let g = wrap(Geometry::Gemm { trans_a: true, k, n }, &cols, offset, vec![rows, n]);
        let y = run(&g, ArrayD::from_shape_vec(IxDyn(&[k, rows]), at).unwrap());
        for r in 0..rows {
            for j in 0..n {
                assert_eq!(y[[r, j]], expect(r, j, &|r, i| raw[r * k + i]), "Gemm ({r}, {j})");
            }
        }
        // MatMul: A [2, rows, K] with a weight of 2 batches; batch 1's columns are batch 0's
        // reversed, so a wrong batch gives another correction
        let raw2 = values(2 * rows * k, 256, 9);
        let mut both = cols.clone();
        both.extend(cols.iter().rev().cloned());
        let mm = wrap(Geometry::MatMul { k, n, batches: 2 }, &both, offset, vec![2, rows, n]);
        let x = ArrayD::from_shape_vec(IxDyn(&[2, rows, k]), raw2.iter().map(|&v| v as f32).collect()).unwrap();
        let y = run(&mm, x);
        for b in 0..2 {
            for r in 0..rows {
                for j in 0..n {
                    let col = &both[b * n + j];
                    let want: f32 = (0..k)
                        .step_by(2)
                        .map(|e| sat_error((e..(e + 2).min(k)).map(|i| raw2[(b * rows + r) * k + i] * col[i]).sum()))
                        .sum();
                    assert_eq!(y[[b, r, j]], want, "MatMul ({b}, {r}, {j})");
                }
            }
        }
    }

    #[test]
    fn only_pairs_that_can_leave_int16_are_risky() {
        // 255 · (127 + 1) = 32640 fits; 255 · (127 + 2) = 32895 does not; mixed signs never
        let q = [127, 1, 127, 2, 127, -127, -128, -1, 5];
        let r = risky_pairs(&q);
        assert_eq!(r, vec![[(2, 127), (3, 2)], [(6, -128), (7, -1)]]);
    }
}
