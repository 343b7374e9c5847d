//! Max and average pooling over NHWC windows.

use super::conv::{Padding, Window2d};
use super::{from_vec, KernelResult};
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
}
