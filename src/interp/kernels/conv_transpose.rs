//! Transposed 2-D convolution (ONNX ConvTranspose, NCHW): per image and group, one GEMM
//! `cols = Wᵀ · X` ([M/g·kh·kw] × [H·W]) and a col2im scatter-add into the output.

use super::matmul::gemm_strided;
use super::KernelResult;
use ndarray::{ArrayD, IxDyn};

/// Geometry of a transposed convolution over the two spatial dims.
#[derive(Debug, Clone, Copy)]
pub struct Transposed2d {
    pub strides: [usize; 2],
    pub dilations: [usize; 2],
    /// (begin, end) cropped from the full output, per spatial dim.
    pub pads: [(usize, usize); 2],
    pub group: usize,
}

impl Transposed2d {
    /// The output size of spatial dim `i` for an input of `input` and a kernel of `k`, with
    /// `extra` added at the end (output_padding).
    pub fn out_dim(&self, i: usize, input: usize, k: usize, extra: usize) -> KernelResult<usize> {
        let full = self.strides[i] * input.saturating_sub(1) + (k - 1) * self.dilations[i] + 1 + extra;
        full.checked_sub(self.pads[i].0 + self.pads[i].1)
            .filter(|&o| o > 0)
            .ok_or_else(|| format!("pads {:?} leave no output of a dim of {full}", self.pads[i]))
    }
}

/// y[N, M, OH, OW] from x[N, C, H, W] and w[C, M/g, kh, kw]; `out` = (OH, OW).
pub fn conv_transpose2d(
    x: &ArrayD<f32>,
    w: &ArrayD<f32>,
    bias: Option<&[f32]>,
    g: &Transposed2d,
    out: [usize; 2],
) -> KernelResult<ArrayD<f32>> {
    let (xs, ws) = (x.shape(), w.shape());
    if xs.len() != 4 || ws.len() != 4 {
        return Err(format!("expected 4-D NCHW input and filter, got {xs:?} and {ws:?}"));
    }
    let (n, c, h, wd) = (xs[0], xs[1], xs[2], xs[3]);
    let (mg, kh, kw) = (ws[1], ws[2], ws[3]);
    let groups = g.group;
    if groups == 0 || c != ws[0] || c % groups != 0 {
        return Err(format!("input has {c} channels, the filter {} (group {groups})", ws[0]));
    }
    let (cg, m) = (c / groups, mg * groups);
    if bias.is_some_and(|b| b.len() != m) {
        return Err(format!(
            "bias has {} values for {m} output channels",
            bias.map_or(0, |b| b.len())
        ));
    }
    let (oh, ow) = (out[0], out[1]);
    let x = x.as_standard_layout();
    let w = w.as_standard_layout();
    let (xv, wv) = (x.as_slice().ok_or("layout")?, w.as_slice().ok_or("layout")?);
    let rows = mg * kh * kw;
    let hw = h * wd;
    let mut cols = vec![0f32; rows * hw];
    let mut y = vec![0f32; n * m * oh * ow];
    for b in 0..n {
        for gi in 0..groups {
            let xg = &xv[(b * c + gi * cg) * hw..(b * c + (gi + 1) * cg) * hw];
            let wg = &wv[gi * cg * rows..(gi + 1) * cg * rows];
            // cols[r, p] = Σ_c w[c, r] · x[c, p]
            gemm_strided(rows, hw, cg, wg, 1, rows as isize, xg, hw as isize, 1, &mut cols);
            for mi in 0..mg {
                let plane = &mut y[((b * m) + gi * mg + mi) * oh * ow..((b * m) + gi * mg + mi + 1) * oh * ow];
                for ki in 0..kh {
                    for kj in 0..kw {
                        let row = &cols[((mi * kh + ki) * kw + kj) * hw..][..hw];
                        for ih in 0..h {
                            let Some(oy) = (ih * g.strides[0] + ki * g.dilations[0]).checked_sub(g.pads[0].0) else {
                                continue;
                            };
                            if oy >= oh {
                                continue;
                            }
                            for iw in 0..wd {
                                let Some(ox) = (iw * g.strides[1] + kj * g.dilations[1]).checked_sub(g.pads[1].0)
                                else {
                                    continue;
                                };
                                if ox < ow {
                                    plane[oy * ow + ox] += row[ih * wd + iw];
                                }
                            }
                        }
                    }
                }
                if let Some(bv) = bias {
                    let v = bv[gi * mg + mi];
                    plane.iter_mut().for_each(|p| *p += v);
                }
            }
        }
    }
    ArrayD::from_shape_vec(IxDyn(&[n, m, oh, ow]), y).map_err(|e| e.to_string())
}
