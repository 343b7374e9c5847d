//! The Gram matrices of a convolution with one input channel per group (depthwise, or a first
//! convolution over one channel) over every output position, without patches: each tap's
//! inputs gathered once as a column of the plane, then one long dot product per pair of taps.

use super::Geometry;
use crate::dialects::weight_layout::{ConvPatches, WeightLayout};
use crate::interp::kernels::dot::dot_f32;

/// Longest patch taken this way (7×7); past it the GEMM's k² multiply-adds per patch, at its
/// speed, beat k(k + 1)/2 dot-product steps.
pub const MAX_K: usize = 49;

/// Adds Σ_p c_t[p] c_u[p] to `block[t·k + u]` and its mirror, for the k columns `cols` (each
/// `m` long, one after another) and each pair t ≤ u once.
fn add_column_products(cols: &[f32], m: usize, k: usize, block: &mut [f64]) {
    for t in 0..k {
        for u in t..k {
            let s = dot_f32(&cols[t * m..(t + 1) * m], &cols[u * m..(u + 1) * m]) as f64;
            block[t * k + u] += s;
            if u != t {
                block[u * k + t] += s;
            }
        }
    }
}

/// The Gram matrices of a convolution with one input channel per group over every output
/// position: each tap's inputs over all positions gathered as one column (runs of a row of
/// the plane, zeros in the padding), then one long dot product per pair of taps — k(k + 1)/2
/// multiply-adds a position instead of the GEMM's k², on columns instead of patches.
///
/// ```text
/// col_(i,j)[oy, ox] = x[oy·s + i·d − pt, ox·s + j·d − pl]      H[t, u] = col_t · col_u
/// ```
pub fn depthwise_grams(data: &[f32], g: &Geometry, c: &ConvPatches, l: &WeightLayout, sums: &mut [f64]) {
    let [kh, kw] = c.kernel;
    let k = l.k;
    let (sh, sw) = (c.strides[0], c.strides[1]);
    let (dh, dw) = (c.dilations[0], c.dilations[1]);
    // element (y, x) of a channel's plane at base + (y·w + x)·step
    let step = if c.channels_last { g.ch } else { 1 };
    // tap column j reads input column ox·sw + off(j), in the input for ox in lo(j)..hi(j)
    let off = |j: usize| (j * dw) as isize - g.pl as isize;
    let span: Vec<(usize, usize)> = (0..kw)
        .map(|j| {
            let o = off(j);
            let lo = if o >= 0 { 0 } else { (-o) as usize }.div_ceil(sw).min(g.ow);
            let hi = if (g.w as isize) <= o {
                0
            } else {
                (g.w as isize - o) as usize
            }
            .div_ceil(sw)
            .min(g.ow);
            (lo, hi.max(lo))
        })
        .collect();
    let m = g.oh * g.ow;
    let mut cols = vec![0f32; k * m];
    for img in 0..g.n {
        for grp in 0..l.groups {
            let base = if c.channels_last {
                img * g.h * g.w * g.ch + grp
            } else {
                (img * g.ch + grp) * g.h * g.w
            };
            for i in 0..kh {
                for j in 0..kw {
                    let col = &mut cols[(i * kw + j) * m..(i * kw + j + 1) * m];
                    let (lo, hi) = span[j];
                    for oy in 0..g.oh {
                        let out = &mut col[oy * g.ow..(oy + 1) * g.ow];
                        let y = (oy * sh + i * dh) as isize - g.pt as isize;
                        if y < 0 || y as usize >= g.h || lo == hi {
                            out.fill(0.0);
                            continue;
                        }
                        out[..lo].fill(0.0);
                        out[hi..].fill(0.0);
                        // first element of the run, then every sw·step
                        let first = base + ((y as usize * g.w) as isize + (lo * sw) as isize + off(j)) as usize * step;
                        let stride = sw * step;
                        if stride == 1 {
                            out[lo..hi].copy_from_slice(&data[first..first + hi - lo]);
                        } else {
                            for (r, v) in out[lo..hi].iter_mut().enumerate() {
                                *v = data[first + r * stride];
                            }
                        }
                    }
                }
            }
            add_column_products(&cols, m, k, &mut sums[grp * k * k..(grp + 1) * k * k]);
        }
    }
}
