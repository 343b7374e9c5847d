//! Integer convolution and matrix product, accumulated exactly in i64: the kernels of models
//! other tools already quantized (ONNX ConvInteger / MatMulInteger, and QLinearConv /
//! QLinearMatMul before their requantization). They are reference loops, not fast ones: they
//! let quantir evaluate such a model, not run it at speed.

use super::elementwise::broadcast_shape;
use super::{from_vec, strides_of, KernelResult};
use ndarray::{ArrayD, IxDyn};

/// NumPy matmul of integer arrays (rank ≥ 1, leading dims broadcast).
pub fn matmul_i64(a: &ArrayD<i64>, b: &ArrayD<i64>) -> KernelResult<ArrayD<i64>> {
    let (a1, b1) = (a.ndim() == 1, b.ndim() == 1);
    let a = if a1 {
        a.clone().insert_axis(ndarray::Axis(0))
    } else {
        a.clone()
    };
    let b = if b1 {
        b.clone().insert_axis(ndarray::Axis(1))
    } else {
        b.clone()
    };
    let (ra, rb) = (a.ndim(), b.ndim());
    let (m, k, k2, n) = (
        a.shape()[ra - 2],
        a.shape()[ra - 1],
        b.shape()[rb - 2],
        b.shape()[rb - 1],
    );
    if k != k2 {
        return Err(format!("MatMul of {:?} and {:?}", a.shape(), b.shape()));
    }
    let batch = broadcast_shape(&a.shape()[..ra - 2], &b.shape()[..rb - 2])?;
    let full = |s: &[usize], t: usize| [&batch[..], &s[t - 2..]].concat();
    let av = a
        .broadcast(IxDyn(&full(a.shape(), ra)))
        .ok_or("broadcast")?
        .as_standard_layout()
        .into_owned();
    let bv = b
        .broadcast(IxDyn(&full(b.shape(), rb)))
        .ok_or("broadcast")?
        .as_standard_layout()
        .into_owned();
    let (x, y) = (av.as_slice().ok_or("layout")?, bv.as_slice().ok_or("layout")?);
    let nb: usize = batch.iter().product();
    let mut out = vec![0i64; nb * m * n];
    for bi in 0..nb {
        let (xa, yb) = (&x[bi * m * k..][..m * k], &y[bi * k * n..][..k * n]);
        let o = &mut out[bi * m * n..][..m * n];
        for i in 0..m {
            for p in 0..k {
                let v = xa[i * k + p];
                for j in 0..n {
                    o[i * n + j] += v * yb[p * n + j];
                }
            }
        }
    }
    let mut shape = [&batch[..], &[m, n]].concat();
    if b1 {
        shape.pop();
    }
    if a1 {
        shape.remove(shape.len() - if b1 { 1 } else { 2 });
    }
    from_vec(&shape, out)
}

/// A 2-D NCHW convolution geometry.
#[derive(Debug, Clone)]
pub struct ConvGeometry {
    pub strides: [usize; 2],
    pub dilations: [usize; 2],
    pub pads: [(usize, usize); 2],
    pub group: usize,
}

/// Direct 2-D convolution of an NCHW integer input with an OIHW integer filter.
pub fn conv2d_i64(x: &ArrayD<i64>, w: &ArrayD<i64>, g: &ConvGeometry) -> KernelResult<ArrayD<i64>> {
    let (xs, ws) = (x.shape(), w.shape());
    if xs.len() != 4 || ws.len() != 4 {
        return Err(format!("integer convolution of {xs:?} by {ws:?}: 2-D NCHW only"));
    }
    let (n, c, h, wd) = (xs[0], xs[1], xs[2], xs[3]);
    let (m, cg, kh, kw) = (ws[0], ws[1], ws[2], ws[3]);
    if g.group == 0 || c != cg * g.group || m % g.group != 0 {
        return Err(format!(
            "input has {c} channels, the filter expects {cg} per group × {} groups",
            g.group
        ));
    }
    let dim = |i: usize, len: usize, k: usize| -> KernelResult<usize> {
        let span = (k - 1) * g.dilations[i] + 1;
        let padded = len + g.pads[i].0 + g.pads[i].1;
        if padded < span {
            return Err(format!("a window of {span} does not fit a padded input of {padded}"));
        }
        Ok((padded - span) / g.strides[i] + 1)
    };
    let (oh, ow) = (dim(0, h, kh)?, dim(1, wd, kw)?);
    let x = x.as_standard_layout();
    let w = w.as_standard_layout();
    let (xv, wv) = (x.as_slice().ok_or("layout")?, w.as_slice().ok_or("layout")?);
    let (xst, wst) = (strides_of(xs), strides_of(ws));
    let per_group = m / g.group;
    let mut out = vec![0i64; n * m * oh * ow];
    for b in 0..n {
        for oc in 0..m {
            let gi = oc / per_group;
            for oy in 0..oh {
                for ox in 0..ow {
                    let mut acc = 0i64;
                    for ic in 0..cg {
                        let ch = gi * cg + ic;
                        for ky in 0..kh {
                            let iy = (oy * g.strides[0] + ky * g.dilations[0]) as i64 - g.pads[0].0 as i64;
                            if iy < 0 || iy >= h as i64 {
                                continue;
                            }
                            for kx in 0..kw {
                                let ix = (ox * g.strides[1] + kx * g.dilations[1]) as i64 - g.pads[1].0 as i64;
                                if ix < 0 || ix >= wd as i64 {
                                    continue;
                                }
                                acc += xv[b * xst[0] + ch * xst[1] + iy as usize * xst[2] + ix as usize]
                                    * wv[oc * wst[0] + ic * wst[1] + ky * wst[2] + kx];
                            }
                        }
                    }
                    out[((b * m + oc) * oh + oy) * ow + ox] = acc;
                }
            }
        }
    }
    from_vec(&[n, m, oh, ow], out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::arr2;

    #[test]
    fn integer_matmul_and_conv_are_exact() {
        let a = arr2(&[[1i64 << 40, 1], [2, 3]]).into_dyn();
        let b = arr2(&[[1i64, 0], [0, 1]]).into_dyn();
        assert_eq!(matmul_i64(&a, &b).unwrap(), a);
        // a 1×1×3×3 input of ones, a 2×2 filter of ones, pad 1: corners see 1, edges 2, centre 4
        let x = ArrayD::from_elem(IxDyn(&[1, 1, 3, 3]), 1i64);
        let w = ArrayD::from_elem(IxDyn(&[1, 1, 2, 2]), 1i64);
        let g = ConvGeometry {
            strides: [2, 2],
            dilations: [1, 1],
            pads: [(1, 1), (1, 1)],
            group: 1,
        };
        let y = conv2d_i64(&x, &w, &g).unwrap();
        assert_eq!(y.iter().copied().collect::<Vec<_>>(), vec![1, 2, 2, 4]);
    }
}
