//! Reductions over a set of axes (Mean, Sum, Max, Min, Prod; All/Any on booleans).

use super::{from_vec, norm_axis, KernelResult};
use crate::tensor::Tensor;
use ndarray::{ArrayD, Axis};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reduce {
    Sum,
    Mean,
    Max,
    Min,
    Prod,
}

/// The sorted, de-duplicated axes of `axes` (negative allowed) for a rank.
pub fn resolve_axes(axes: &[i64], rank: usize) -> KernelResult<Vec<usize>> {
    let mut v: Vec<usize> = axes.iter().map(|&a| norm_axis(a, rank)).collect::<Result<_, _>>()?;
    v.sort_unstable();
    v.dedup();
    Ok(v)
}

fn reduce_f32(x: &ArrayD<f32>, axes: &[usize], op: Reduce) -> ArrayD<f32> {
    trailing_sum(x, axes, op).unwrap_or_else(|| axis_by_axis(x, axes, op))
}

/// [`reduce_f32`] one axis at a time, the highest first.
fn axis_by_axis(x: &ArrayD<f32>, axes: &[usize], op: Reduce) -> ArrayD<f32> {
    let mut cur = x.clone();
    // reduce the highest axes first so that lower axis numbers stay valid
    for &a in axes.iter().rev() {
        cur = match op {
            Reduce::Sum | Reduce::Mean => cur.sum_axis(Axis(a)),
            Reduce::Prod => cur.map_axis(Axis(a), |l| l.iter().product()),
            Reduce::Max => cur.map_axis(Axis(a), |l| {
                l.iter()
                    .copied()
                    .fold(f32::NEG_INFINITY, |m, v| if v > m || v.is_nan() { v } else { m })
            }),
            Reduce::Min => cur.map_axis(Axis(a), |l| {
                l.iter()
                    .copied()
                    .fold(f32::INFINITY, |m, v| if v < m || v.is_nan() { v } else { m })
            }),
        };
    }
    if op == Reduce::Mean {
        let n: usize = axes.iter().map(|&a| x.shape()[a]).product();
        let n = n.max(1) as f32;
        cur.mapv_inplace(|v| v / n);
    }
    cur
}

/// Sum or Mean over the last axes of a C-order array (global pooling of NCHW, a mean over a
/// sequence), without the copy and the intermediate arrays of the general path: each pass
/// folds the contiguous runs of the last axis left. The sums are the general path's bit for
/// bit: on a C-order array `sum_axis` folds the last axis, whose stride is the least, run by
/// run with [`unrolled_fold`]. `None` for anything else.
fn trailing_sum(x: &ArrayD<f32>, axes: &[usize], op: Reduce) -> Option<ArrayD<f32>> {
    let r = x.ndim();
    let first = r.checked_sub(axes.len())?;
    let trailing = axes.iter().copied().eq(first..r);
    if !matches!(op, Reduce::Sum | Reduce::Mean) || axes.is_empty() || !trailing || x.is_empty() {
        return None;
    }
    let mut shape = x.shape().to_vec();
    let mut cur = fold_runs(x.as_slice()?, shape.pop()?);
    while shape.len() > first {
        cur = fold_runs(&cur, shape.pop()?);
    }
    if op == Reduce::Mean {
        let n = x.shape()[first..].iter().product::<usize>() as f32;
        cur.iter_mut().for_each(|v| *v /= n);
    }
    from_vec(&shape, cur).ok()
}

/// [`unrolled_fold`] of each run of `len` values of `xs`. Runs shorter than eight (global
/// pooling's 7 × 7) are plain sums in order from +0, and eight of them are summed side by
/// side: eight independent chains of adds rather than one after another.
fn fold_runs(xs: &[f32], len: usize) -> Vec<f32> {
    if len >= 8 {
        return xs.chunks_exact(len).map(unrolled_fold).collect();
    }
    let mut out = Vec::with_capacity(xs.len() / len);
    let mut groups = xs.chunks_exact(8 * len);
    for g in &mut groups {
        let mut acc = [0f32; 8];
        for i in 0..len {
            for (l, a) in acc.iter_mut().enumerate() {
                *a += g[l * len + i];
            }
        }
        out.extend_from_slice(&acc);
    }
    out.extend(groups.remainder().chunks_exact(len).map(unrolled_fold));
    out
}

/// Σ xs as ndarray sums a contiguous run: eight running sums from +0 over whole groups of
/// eight, added pairwise into +0 ((s0 + s4), (s1 + s5), …), then the last values in order.
fn unrolled_fold(xs: &[f32]) -> f32 {
    let mut p = [0f32; 8];
    let mut groups = xs.chunks_exact(8);
    for g in &mut groups {
        for (s, &v) in p.iter_mut().zip(g) {
            *s += v;
        }
    }
    let mut acc = 0f32;
    for i in 0..4 {
        acc += p[i] + p[i + 4];
    }
    groups.remainder().iter().fold(acc, |a, &v| a + v)
}

/// The Sum or Mean over H and W of a channels-last `[N, H, W, C]` array, as `[N, C]`, with
/// the bits [`trailing_sum`] gives over the same values in NCHW order (global pooling of a
/// value a convolution wrote channels last): each channel's runs are folded as
/// [`unrolled_fold`] folds them, W first, then H, the channels side by side. `None` for
/// another rank, op or layout.
pub fn spatial_sum_channels_last(x: &ArrayD<f32>, op: Reduce) -> Option<ArrayD<f32>> {
    let &[n, h, w, c] = x.shape() else { return None };
    if !matches!(op, Reduce::Sum | Reduce::Mean) || x.is_empty() {
        return None;
    }
    let xs = x.as_slice()?;
    let mut out = Vec::with_capacity(n * c);
    let mut rows = vec![0f32; h * c];
    // the eight running sums of every lane, made once for all the folds
    let mut partial = vec![0f32; 8 * c];
    for img in xs.chunks_exact(h * w * c) {
        for (row, sum) in img.chunks_exact(w * c).zip(rows.chunks_exact_mut(c)) {
            fold_lanes(row, c, sum, &mut partial);
        }
        let start = out.len();
        out.resize(start + c, 0.0);
        fold_lanes(&rows, c, &mut out[start..], &mut partial);
    }
    if op == Reduce::Mean {
        let count = (h * w) as f32;
        out.iter_mut().for_each(|v| *v /= count);
    }
    from_vec(&[n, c], out).ok()
}

/// [`unrolled_fold`] of each of the `c` lanes of `xs` (runs of `c` values, lane `l` of run `i`
/// at `i · c + l`) into `out`; `p` holds the running sums (8 · c values, overwritten).
fn fold_lanes(xs: &[f32], c: usize, out: &mut [f32], p: &mut [f32]) {
    let len = xs.len() / c;
    let whole = len / 8 * 8;
    p.fill(0.0);
    for (i, run) in xs[..whole * c].chunks_exact(c).enumerate() {
        for (s, &v) in p[(i % 8) * c..(i % 8 + 1) * c].iter_mut().zip(run) {
            *s += v;
        }
    }
    out.fill(0.0);
    for j in 0..4 {
        let (lo, hi) = (&p[j * c..(j + 1) * c], &p[(j + 4) * c..(j + 5) * c]);
        for ((a, &x), &y) in out.iter_mut().zip(lo).zip(hi) {
            *a += x + y;
        }
    }
    for run in xs[whole * c..].chunks_exact(c) {
        for (a, &v) in out.iter_mut().zip(run) {
            *a += v;
        }
    }
}

fn reduce_int<T: Copy + Ord + std::iter::Sum + std::iter::Product + num_cast::FromI64>(
    x: &ArrayD<T>,
    axes: &[usize],
    op: Reduce,
) -> ArrayD<T> {
    let mut cur = x.clone();
    for &a in axes.iter().rev() {
        cur = match op {
            Reduce::Sum | Reduce::Mean => cur.map_axis(Axis(a), |l| l.iter().copied().sum()),
            Reduce::Prod => cur.map_axis(Axis(a), |l| l.iter().copied().product()),
            Reduce::Max => cur.map_axis(Axis(a), |l| l.iter().copied().max().unwrap_or(T::from_i64(0))),
            Reduce::Min => cur.map_axis(Axis(a), |l| l.iter().copied().min().unwrap_or(T::from_i64(0))),
        };
    }
    cur
}

mod num_cast {
    pub trait FromI64 {
        fn from_i64(v: i64) -> Self;
    }
    impl FromI64 for i32 {
        fn from_i64(v: i64) -> Self {
            v as i32
        }
    }
    impl FromI64 for i64 {
        fn from_i64(v: i64) -> Self {
            v
        }
    }
}

/// Reduces `x` over `axes`; `keep_dims` keeps them as size 1.
pub fn reduce(x: &Tensor, axes: &[i64], keep_dims: bool, op: Reduce) -> KernelResult<Tensor> {
    let rank = x.shape().len();
    let axes = resolve_axes(axes, rank)?;
    let mut kept = x.shape().to_vec();
    for &a in &axes {
        kept[a] = 1;
    }
    let out = match x {
        Tensor::F32(a) => Tensor::F32(reduce_f32(a, &axes, op)),
        Tensor::I32(a) => Tensor::I32(reduce_int(a, &axes, op)),
        Tensor::I64(a) => Tensor::I64(reduce_int(a, &axes, op)),
        _ => return Err(format!("{op:?} of {} is not supported", x.dtype())),
    };
    if keep_dims {
        return Ok(crate::map_tensor!(out, a => a.into_shape_with_order(kept.clone()).map_err(|e| e.to_string())?));
    }
    Ok(out)
}

/// All / Any over axes of a boolean tensor.
pub fn reduce_bool(x: &Tensor, axes: &[i64], keep_dims: bool, all: bool) -> KernelResult<Tensor> {
    let Tensor::I1(a) = x else {
        return Err(format!("All/Any take i1, got {}", x.dtype()));
    };
    let axes = resolve_axes(axes, a.ndim())?;
    let mut cur = a.clone();
    for &ax in axes.iter().rev() {
        cur = cur.map_axis(Axis(ax), |l| {
            if all {
                l.iter().all(|&b| b)
            } else {
                l.iter().any(|&b| b)
            }
        });
    }
    if keep_dims {
        let mut kept = a.shape().to_vec();
        for &ax in &axes {
            kept[ax] = 1;
        }
        return Ok(Tensor::I1(from_vec(&kept, cur.iter().copied().collect())?));
    }
    Ok(Tensor::I1(cur))
}

/// Index of the largest (`max`) or smallest element along `axis`, as i64; ties go to the first
/// index, or to the last when `last` (ONNX `select_last_index`). The axis is kept with size 1
/// when `keep_dims`.
pub fn arg_extreme(x: &Tensor, axis: i64, max: bool, last: bool, keep_dims: bool) -> KernelResult<Tensor> {
    let Tensor::F64(a) = super::layout::cast(x, crate::tensor::DType::F64)? else {
        return Err("internal: cast to f64".into());
    };
    let ax = norm_axis(axis, a.ndim())?;
    if a.shape()[ax] == 0 {
        return Err(format!("Arg{} over an empty axis", if max { "Max" } else { "Min" }));
    }
    let better = |v: f64, b: f64| {
        let strictly = if max { v > b } else { v < b };
        strictly || (last && v == b)
    };
    let out = a.map_axis(Axis(ax), |lane| {
        let mut best = (0usize, lane[0]);
        for (i, &v) in lane.iter().enumerate().skip(1) {
            if better(v, best.1) {
                best = (i, v);
            }
        }
        best.0 as i64
    });
    Ok(Tensor::I64(if keep_dims { out.insert_axis(Axis(ax)) } else { out }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::array;

    /// Sums and means over trailing axes give the axis-by-axis path's bits: runs shorter than,
    /// equal to and longer than eight values, one and several axes, −0 and NaN among them.
    #[test]
    fn trailing_sums_are_the_axis_by_axis_sums() {
        for shape in [
            vec![2, 3, 7, 7],
            vec![1, 5, 8],
            vec![2, 17],
            vec![3, 2, 1, 9],
            vec![4, 33],
        ] {
            let n: usize = shape.iter().product();
            let mut v: Vec<f32> = (0..n).map(|i| ((i * 7919 % 251) as f32 - 125.0) * 0.0173).collect();
            v[0] = -0.0;
            if n > 40 {
                v[40] = f32::NAN;
            }
            let x = ArrayD::from_shape_vec(shape.clone(), v).unwrap();
            for k in 1..shape.len() {
                let axes: Vec<usize> = (shape.len() - k..shape.len()).collect();
                for op in [Reduce::Sum, Reduce::Mean] {
                    let fast = trailing_sum(&x, &axes, op).unwrap();
                    let want = axis_by_axis(&x, &axes, op);
                    assert_eq!(fast.shape(), want.shape());
                    let same = fast.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(same, "{shape:?} axes {axes:?} {op:?}: {fast:?} vs {want:?}");
                }
            }
        }
    }

    /// Global pooling of a channels-last array gives the bits of the trailing sums over its
    /// NCHW transpose: runs shorter than, equal to and longer than eight, −0 and NaN.
    #[test]
    fn channels_last_spatial_sums_are_the_trailing_sums_of_the_nchw_value() {
        for [n, c, h, w] in [
            [2, 3, 7, 7],
            [1, 5, 8, 8],
            [1, 9, 17, 3],
            [2, 16, 1, 33],
            [1, 1, 14, 14],
        ] {
            let len = n * c * h * w;
            let mut v: Vec<f32> = (0..len).map(|i| ((i * 7919 % 251) as f32 - 125.0) * 0.0173).collect();
            v[0] = -0.0;
            if len > 40 {
                v[40] = f32::NAN;
            }
            let nchw = ArrayD::from_shape_vec(vec![n, c, h, w], v).unwrap();
            let nhwc = nchw
                .view()
                .permuted_axes(vec![0, 2, 3, 1])
                .as_standard_layout()
                .into_owned();
            for op in [Reduce::Sum, Reduce::Mean] {
                let want = trailing_sum(&nchw, &[2, 3], op).unwrap();
                let got = spatial_sum_channels_last(&nhwc, op).unwrap();
                assert_eq!(got.shape(), &[n, c]);
                let same = got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{:?} {op:?}: {got:?} vs {want:?}", [n, c, h, w]);
            }
        }
        assert!(spatial_sum_channels_last(&ArrayD::zeros(vec![2, 3, 4]), Reduce::Sum).is_none());
        assert!(spatial_sum_channels_last(&ArrayD::zeros(vec![1, 2, 2, 3]), Reduce::Max).is_none());
    }

    #[test]
    fn mean_sum_max_keep_dims() {
        let x = Tensor::F32(array![[[1.0f32, 2.0], [3.0, 4.0]], [[5.0, 6.0], [7.0, 8.0]]].into_dyn());
        let m = reduce(&x, &[1, 2], true, Reduce::Mean).unwrap();
        assert_eq!(
            m,
            Tensor::F32(ArrayD::from_shape_vec(vec![2, 1, 1], vec![2.5, 6.5]).unwrap())
        );
        let s = reduce(&x, &[-1], false, Reduce::Sum).unwrap();
        assert_eq!(s, Tensor::F32(array![[3.0f32, 7.0], [11.0, 15.0]].into_dyn()));
        let mx = reduce(&x, &[0], false, Reduce::Max).unwrap();
        assert_eq!(mx, Tensor::F32(array![[5.0f32, 6.0], [7.0, 8.0]].into_dyn()));
        assert!(reduce(&x, &[3], false, Reduce::Sum).is_err());
    }
}

/// Running sums along `axis` (ONNX CumSum): `exclusive` leaves each element out of its own
/// sum, `reverse` sums from the end.
pub fn cumsum(x: &Tensor, axis: i64, exclusive: bool, reverse: bool) -> KernelResult<Tensor> {
    fn run<T: Copy + Default + std::ops::Add<Output = T>>(
        a: &ArrayD<T>,
        ax: usize,
        exclusive: bool,
        reverse: bool,
    ) -> ArrayD<T> {
        let mut out = a.clone();
        for mut lane in out.lanes_mut(ndarray::Axis(ax)) {
            let n = lane.len();
            let mut acc = T::default();
            for k in 0..n {
                let i = if reverse { n - 1 - k } else { k };
                let v = lane[i];
                if exclusive {
                    lane[i] = acc;
                    acc = acc + v;
                } else {
                    acc = acc + v;
                    lane[i] = acc;
                }
            }
        }
        out
    }
    let ax = super::norm_axis(axis, x.shape().len())?;
    Ok(match x {
        Tensor::F32(a) => Tensor::F32(run(a, ax, exclusive, reverse)),
        Tensor::F64(a) => Tensor::F64(run(a, ax, exclusive, reverse)),
        Tensor::I32(a) => Tensor::I32(run(a, ax, exclusive, reverse)),
        Tensor::I64(a) => Tensor::I64(run(a, ax, exclusive, reverse)),
        t => return Err(format!("CumSum of {} is not supported", t.dtype())),
    })
}
