//! Softmax / LogSoftmax over the last axis, and batch normalisation in inference form.

use super::exp::exp_shifted_in_place;
use super::{from_vec, KernelResult};
use ndarray::{ArrayD, Axis};

/// Softmax (or LogSoftmax) over the last axis, max-subtracted for stability.
pub fn softmax(x: &ArrayD<f32>, log: bool) -> KernelResult<ArrayD<f32>> {
    let mut out = x.as_standard_layout().into_owned();
    let last = out.ndim().checked_sub(1).ok_or("softmax of a scalar")?;
    let n = out.shape()[last];
    let Some(flat) = out.as_slice_mut() else {
        return Err("softmax of a non-contiguous array".into());
    };
    let mut scratch = vec![0f32; if log { n } else { 0 }];
    // each lane (contiguous: the last axis of a standard-layout array): its exps in one
    // vectorised pass, their sum in order
    for lane in flat.chunks_exact_mut(n.max(1)) {
        let m = lane.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        if log {
            scratch.copy_from_slice(lane);
            exp_shifted_in_place(&mut scratch, m);
            let lse = scratch.iter().sum::<f32>().ln() + m;
            lane.iter_mut().for_each(|v| *v -= lse);
        } else {
            exp_shifted_in_place(lane, m);
            let s: f32 = lane.iter().sum();
            lane.iter_mut().for_each(|v| *v /= s);
        }
    }
    Ok(out)
}

/// y = (x − mean) · scale / sqrt(var + eps) + offset, per channel on `axis`.
pub fn batch_norm(
    x: &ArrayD<f32>,
    scale: &ArrayD<f32>,
    offset: &ArrayD<f32>,
    mean: &ArrayD<f32>,
    var: &ArrayD<f32>,
    eps: f32,
    axis: usize,
) -> KernelResult<ArrayD<f32>> {
    let c = *x.shape().get(axis).ok_or("batch norm axis out of range")?;
    for (n, p) in [("scale", scale), ("offset", offset), ("mean", mean), ("variance", var)] {
        if p.len() != c {
            return Err(format!("{n} has {} elements, the input has {c} channels", p.len()));
        }
    }
    let mul: Vec<f32> = scale.iter().zip(var).map(|(&s, &v)| s / (v + eps).sqrt()).collect();
    let add: Vec<f32> = offset
        .iter()
        .zip(mean)
        .zip(&mul)
        .map(|((&o, &m), &k)| o - m * k)
        .collect();
    let mut out = x.as_standard_layout().into_owned();
    for (ch, mut sub) in out.axis_iter_mut(Axis(axis)).enumerate() {
        let (k, b) = (mul[ch], add[ch]);
        sub.mapv_inplace(|v| v * k + b);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::array;

    #[test]
    fn softmax_rows_sum_to_one() {
        let x = array![[1.0f32, 2.0, 3.0], [1000.0, 1000.0, 1000.0]].into_dyn();
        let s = softmax(&x, false).unwrap();
        assert!((s.row_sum(0) - 1.0).abs() < 1e-6 && (s[[1, 0]] - 1.0 / 3.0).abs() < 1e-6);
        let l = softmax(&x, true).unwrap();
        assert!((l[[0, 2]] - s[[0, 2]].ln()).abs() < 1e-5);
    }

    trait RowSum {
        fn row_sum(&self, r: usize) -> f32;
    }
    impl RowSum for ArrayD<f32> {
        fn row_sum(&self, r: usize) -> f32 {
            self.index_axis(Axis(0), r).sum()
        }
    }
}

/// Mean and variance over `axes` of every slice along the others; y = (x − μ)/√(σ² + ε).
pub fn normalize(x: &ArrayD<f32>, from_axis: usize, eps: f32) -> ArrayD<f32> {
    let inner: usize = x.shape()[from_axis..].iter().product();
    let mut y = x.as_standard_layout().into_owned();
    if inner == 0 {
        return y;
    }
    if let Some(s) = y.as_slice_mut() {
        for row in s.chunks_mut(inner) {
            let n = row.len() as f32;
            let mean = row.iter().sum::<f32>() / n;
            let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / n;
            let inv = 1.0 / (var + eps).sqrt();
            row.iter_mut().for_each(|v| *v = (*v - mean) * inv);
        }
    }
    y
}

/// Local response normalization across channels (axis 1 of [N, C, ...]):
/// y = x / (bias + α/size · Σ x²)^β, the sum over the `size` channels around each one
/// (⌊(size−1)/2⌋ before, ⌈(size−1)/2⌉ after).
pub fn lrn(x: &ArrayD<f32>, size: usize, alpha: f32, beta: f32, bias: f32) -> KernelResult<ArrayD<f32>> {
    let s = x.shape();
    if s.len() < 2 || size == 0 {
        return Err(format!("LRN of shape {s:?} with size {size}"));
    }
    let (n, c) = (s[0], s[1]);
    let inner: usize = s[2..].iter().product();
    let x = x.as_standard_layout();
    let v = x.as_slice().ok_or("layout")?;
    let (before, after) = ((size - 1) / 2, (size - 1).div_ceil(2));
    let mut y = vec![0f32; v.len()];
    for b in 0..n {
        for ch in 0..c {
            let (lo, hi) = (ch.saturating_sub(before), (ch + after).min(c - 1));
            for i in 0..inner {
                let sq: f32 = (lo..=hi).map(|k| v[(b * c + k) * inner + i].powi(2)).sum();
                let at = (b * c + ch) * inner + i;
                y[at] = v[at] / (bias + alpha / size as f32 * sq).powf(beta);
            }
        }
    }
    from_vec(s, y)
}

/// Mean and variance normalization of every [N, G] group of `x` ([N, C, ...], C = G·k) over
/// its channels and spatial positions.
pub fn group_normalize(x: &ArrayD<f32>, groups: usize, eps: f32) -> KernelResult<ArrayD<f32>> {
    let s = x.shape().to_vec();
    if s.len() < 2 || groups == 0 || s[1] % groups != 0 {
        return Err(format!("{groups} groups for an input of shape {s:?}"));
    }
    let grouped = x
        .as_standard_layout()
        .into_owned()
        .into_shape_with_order(ndarray::IxDyn(&[s[0], groups, x.len() / (s[0] * groups).max(1)]))
        .map_err(|e| e.to_string())?;
    normalize(&grouped, 2, eps)
        .into_shape_with_order(ndarray::IxDyn(&s))
        .map_err(|e| e.to_string())
}
