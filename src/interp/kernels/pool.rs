//! Max and average pooling: the NHWC 2-D kernel the fast paths use, and ONNX's general form
//! (any number of spatial axes, dilations, `ceil_mode`, `count_include_pad`, MaxPool's
//! indices) over NCHW-like layouts.

use super::conv::{Padding, Window2d};
use super::{from_vec, strides_of, KernelResult};
use ndarray::ArrayD;

/// MaxPool (`max = true`) or AvgPool; average pooling divides by the number of taps inside the
/// input, as TF does (padding does not count).
pub fn pool2d(
    x: &ArrayD<f32>,
    k: [usize; 2],
    strides: [usize; 2],
    pad: &Padding,
    max: bool,
) -> KernelResult<ArrayD<f32>> {
    let g = Window2d::new(x.shape(), k[0], k[1], strides, [1, 1], pad)?;
    let x = x.as_standard_layout();
    let xs = x.as_slice().ok_or("layout")?;
    let c = g.c;
    let mut out = vec![0f32; g.n * g.oh * g.ow * c];
    let mut acc = vec![0f32; c];
    for b in 0..g.n {
        for oy in 0..g.oh {
            for ox in 0..g.ow {
                acc.fill(if max { f32::NEG_INFINITY } else { 0.0 });
                let mut taps = 0usize;
                for ky in 0..g.kh {
                    let Some(iy) = g.ih(oy, ky) else { continue };
                    for kx in 0..g.kw {
                        let Some(ix) = g.iw(ox, kx) else { continue };
                        let src = &xs[((b * g.h + iy) * g.w + ix) * c..((b * g.h + iy) * g.w + ix + 1) * c];
                        taps += 1;
                        if max {
                            for (a, &s) in acc.iter_mut().zip(src) {
                                *a = if s > *a || s.is_nan() { s } else { *a };
                            }
                        } else {
                            for (a, &s) in acc.iter_mut().zip(src) {
                                *a += s;
                            }
                        }
                    }
                }
                let dst = &mut out[((b * g.oh + oy) * g.ow + ox) * c..((b * g.oh + oy) * g.ow + ox + 1) * c];
                if max {
                    dst.copy_from_slice(&acc);
                } else {
                    let inv = 1.0 / taps.max(1) as f32;
                    for (d, a) in dst.iter_mut().zip(&acc) {
                        *d = a * inv;
                    }
                }
            }
        }
    }
    from_vec(&[g.n, g.oh, g.ow, c], out)
}

/// ONNX pooling over the axes after N and C, with the pads already resolved.
#[derive(Debug, Clone)]
pub struct PoolNd {
    pub kernel: Vec<usize>,
    pub strides: Vec<usize>,
    pub dilations: Vec<usize>,
    pub pads_begin: Vec<usize>,
    pub pads_end: Vec<usize>,
    /// Output sizes rounded up; a last window that would start in the end padding is dropped.
    pub ceil: bool,
    pub max: bool,
    /// Average pooling divides by the taps inside the padded input (not only the real ones).
    pub count_include_pad: bool,
    /// Indices count the spatial axes column-major (MaxPool's `storage_order = 1`).
    pub column_major: bool,
}

impl PoolNd {
    /// Output size along spatial axis `i` for an input of `n`.
    pub fn out_dim(&self, i: usize, n: usize) -> KernelResult<usize> {
        let span = (self.kernel[i] - 1) * self.dilations[i] + 1;
        let padded = n + self.pads_begin[i] + self.pads_end[i];
        if padded < span {
            return Err(format!("a window of {span} does not fit a padded input of {padded}"));
        }
        let s = self.strides[i];
        let mut out = (padded - span) / s + 1;
        if self.ceil && (padded - span) % s != 0 {
            out += 1;
            if (out - 1) * s >= n + self.pads_begin[i] {
                out -= 1;
            }
        }
        Ok(out)
    }

    /// Pools `x` ([N, C, spatial...]) given as f64 values; returns the output values, its shape
    /// and, for max pooling, the flat input index each maximum came from (row-major over the
    /// whole input, as ONNX's Indices output counts).
    pub fn run(&self, x: &[f64], shape: &[usize]) -> KernelResult<(Vec<f64>, Vec<usize>, Vec<i64>)> {
        let sp = shape
            .len()
            .checked_sub(2)
            .filter(|&r| r == self.kernel.len())
            .ok_or_else(|| format!("a {}-D pool of an input of shape {shape:?}", self.kernel.len()))?;
        let in_sp = &shape[2..];
        let out_sp: Vec<usize> = (0..sp)
            .map(|i| self.out_dim(i, in_sp[i]))
            .collect::<KernelResult<_>>()?;
        let taps: usize = self.kernel.iter().product();
        let planes = shape[0] * shape[1];
        let in_plane: usize = in_sp.iter().product();
        let out_plane: usize = out_sp.iter().product();
        let (in_st, k_st) = (strides_of(in_sp), strides_of(&self.kernel));
        let out_st = strides_of(&out_sp);
        // where an index counts each spatial axis: row-major, or first axis fastest
        let idx_st: Vec<usize> = if self.column_major {
            (0..sp).map(|i| in_sp[..i].iter().product()).collect()
        } else {
            in_st.clone()
        };
        let mut y = Vec::with_capacity(planes * out_plane);
        let mut idx = Vec::with_capacity(if self.max { planes * out_plane } else { 0 });
        for p in 0..planes {
            let base = p * in_plane;
            for o in 0..out_plane {
                let (mut best, mut best_at, mut sum, mut real, mut padded) =
                    (f64::NEG_INFINITY, None, 0.0, 0usize, 0usize);
                'tap: for t in 0..taps {
                    let (mut at, mut reported) = (0usize, 0usize);
                    let mut inside_pads = true;
                    for i in 0..sp {
                        let (oi, ki) = ((o / out_st[i]) % out_sp[i], (t / k_st[i]) % self.kernel[i]);
                        let pos = (oi * self.strides[i] + ki * self.dilations[i]) as i64 - self.pads_begin[i] as i64;
                        if pos >= (in_sp[i] + self.pads_end[i]) as i64 {
                            // the ceil_mode extension beyond the end padding counts nowhere
                            continue 'tap;
                        }
                        if pos < 0 || pos >= in_sp[i] as i64 {
                            inside_pads = false;
                        } else {
                            at += pos as usize * in_st[i];
                            reported += pos as usize * idx_st[i];
                        }
                    }
                    padded += 1;
                    if !inside_pads {
                        continue;
                    }
                    real += 1;
                    let v = x[base + at];
                    if self.max {
                        if best_at.is_none() || v > best || v.is_nan() && !best.is_nan() {
                            best = v;
                            best_at = Some(base + reported);
                        }
                    } else {
                        sum += v;
                    }
                }
                if self.max {
                    y.push(best);
                    idx.push(best_at.map_or(-1, |a| a as i64));
                } else {
                    let n = if self.count_include_pad { padded } else { real };
                    y.push(if n == 0 { f64::NAN } else { sum / n as f64 });
                }
            }
        }
        Ok((y, [&shape[..2], &out_sp[..]].concat(), idx))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::IxDyn;

    #[test]
    fn max_and_avg_with_same_padding() {
        let x = ArrayD::from_shape_vec(IxDyn(&[1, 3, 3, 1]), (1..=9).map(|v| v as f32).collect()).unwrap();
        let m = pool2d(&x, [2, 2], [2, 2], &Padding::Same, true).unwrap();
        assert_eq!(m.iter().copied().collect::<Vec<_>>(), vec![5.0, 6.0, 8.0, 9.0]);
        let a = pool2d(&x, [2, 2], [2, 2], &Padding::Same, false).unwrap();
        // windows: {1,2,4,5} {3,6} {7,8} {9} — padding is not counted
        assert_eq!(a.iter().copied().collect::<Vec<_>>(), vec![3.0, 4.5, 7.5, 9.0]);
        let v = pool2d(&x, [2, 2], [1, 1], &Padding::Valid, true).unwrap();
        assert_eq!(v.iter().copied().collect::<Vec<_>>(), vec![5.0, 6.0, 8.0, 9.0]);
    }

    #[test]
    fn ceil_mode_adds_a_partial_window_and_indices_count_the_whole_input() {
        // 1×1×4×4 input 1..16, 3×3 max windows at stride 2: floor gives 1×1, ceil 2×2
        let x: Vec<f64> = (1..=16).map(f64::from).collect();
        let mut p = PoolNd {
            kernel: vec![3, 3],
            strides: vec![2, 2],
            dilations: vec![1, 1],
            pads_begin: vec![0, 0],
            pads_end: vec![0, 0],
            ceil: false,
            max: true,
            count_include_pad: false,
            column_major: false,
        };
        let (y, s, i) = p.run(&x, &[1, 1, 4, 4]).unwrap();
        assert_eq!((y, s, i), (vec![11.0], vec![1, 1, 1, 1], vec![10]));
        p.ceil = true;
        let (y, s, i) = p.run(&x, &[1, 1, 4, 4]).unwrap();
        assert_eq!(
            (y, s, i),
            (vec![11.0, 12.0, 15.0, 16.0], vec![1, 1, 2, 2], vec![10, 11, 14, 15])
        );
        // averages of the partial windows divide by their real taps
        p.max = false;
        let (y, _, _) = p.run(&x, &[1, 1, 4, 4]).unwrap();
        assert_eq!(y, vec![6.0, 7.5, 12.0, 13.5]);
    }
}
