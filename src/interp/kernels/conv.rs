//! 2-D convolution (NHWC input, HWIO filter) by im2col + GEMM — a 1×1 stride-1 convolution is
//! a GEMM on the input itself — and the window geometry that depthwise convolution
//! (`depthwise.rs`) and pooling share.

use super::epilogue::Epilogue;
use super::matmul::gemm_strided_add;
use super::packed_gemm::{gemm_packed, gemm_packed_runs, PackedMatrix, Runs, Strides};
use super::{from_vec, KernelResult};
use ndarray::ArrayD;

/// How the spatial borders are padded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Padding {
    Same,
    Valid,
    /// (before, after) for H and W.
    Explicit([(usize, usize); 2]),
}

/// Output size and leading padding of one spatial dim.
pub fn out_dim(
    input: usize,
    k: usize,
    stride: usize,
    dilation: usize,
    pad: &Padding,
    dim: usize,
) -> KernelResult<(usize, usize)> {
    if input == 0 || k == 0 {
        return Err(format!("empty spatial dim (input {input}, window {k})"));
    }
    let eff = (k - 1) * dilation + 1;
    let stride = stride.max(1);
    Ok(match pad {
        Padding::Same => {
            let out = input.div_ceil(stride);
            let total = ((out - 1) * stride + eff).saturating_sub(input);
            (out, total / 2)
        }
        Padding::Valid => {
            if input < eff {
                return Err(format!("window of {eff} does not fit an input of {input}"));
            }
            ((input - eff) / stride + 1, 0)
        }
        Padding::Explicit(p) => {
            let (b, a) = p[dim];
            let padded = input + b + a;
            if padded < eff {
                return Err(format!("window of {eff} does not fit a padded input of {padded}"));
            }
            ((padded - eff) / stride + 1, b)
        }
    })
}

/// Geometry of a 2-D window op on NHWC data.
#[derive(Debug, Clone)]
pub struct Window2d {
    pub n: usize,
    pub h: usize,
    pub w: usize,
    pub c: usize,
    pub kh: usize,
    pub kw: usize,
    pub sh: usize,
    pub sw: usize,
    pub dh: usize,
    pub dw: usize,
    pub oh: usize,
    pub ow: usize,
    pub ph: usize,
    pub pw: usize,
}

impl Window2d {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        input: &[usize],
        kh: usize,
        kw: usize,
        strides: [usize; 2],
        dilations: [usize; 2],
        pad: &Padding,
    ) -> KernelResult<Self> {
        let [n, h, w, c] = input else {
            return Err(format!("expected an NHWC input, got shape {input:?}"));
        };
        if kh == 0 || kw == 0 {
            return Err("empty window".into());
        }
        let (oh, ph) = out_dim(*h, kh, strides[0], dilations[0], pad, 0)?;
        let (ow, pw) = out_dim(*w, kw, strides[1], dilations[1], pad, 1)?;
        Ok(Window2d {
            n: *n,
            h: *h,
            w: *w,
            c: *c,
            kh,
            kw,
            sh: strides[0].max(1),
            sw: strides[1].max(1),
            dh: dilations[0].max(1),
            dw: dilations[1].max(1),
            oh,
            ow,
            ph,
            pw,
        })
    }

    /// Input row/column of output position `o` and kernel tap `k`, if inside the input.
    #[inline]
    pub fn ih(&self, o: usize, k: usize) -> Option<usize> {
        (o * self.sh + k * self.dh).checked_sub(self.ph).filter(|&i| i < self.h)
    }
    #[inline]
    pub fn iw(&self, o: usize, k: usize) -> Option<usize> {
        (o * self.sw + k * self.dw).checked_sub(self.pw).filter(|&i| i < self.w)
    }
    /// The output columns whose filter column `kx` reads inside the image (those `iw` gives a
    /// column for), as one range.
    #[inline]
    pub fn cols_inside(&self, kx: usize) -> std::ops::Range<usize> {
        let off = kx * self.dw;
        let lo = self.pw.saturating_sub(off).div_ceil(self.sw);
        let hi = ((self.w + self.pw).saturating_sub(off)).div_ceil(self.sw).min(self.ow);
        lo..hi
    }

    /// The output columns whose every filter column reads inside the image (empty where the
    /// filter is wider than the image).
    pub fn cols_all_inside(&self) -> std::ops::Range<usize> {
        let lo = (0..self.kw).map(|kx| self.cols_inside(kx).start).max().unwrap_or(0);
        let hi = (0..self.kw)
            .map(|kx| self.cols_inside(kx).end)
            .min()
            .unwrap_or(0)
            .max(lo);
        lo..hi
    }

    /// The filter rows whose input row is inside the image for output row `oy`: one range, as
    /// the input row grows with the filter row.
    pub fn ky_inside(&self, oy: usize) -> std::ops::Range<usize> {
        taps_inside(self.kh, |t| self.ih(oy, t).is_some())
    }

    /// The filter columns whose input column is inside the image for output column `ox`.
    pub fn kx_inside(&self, ox: usize) -> std::ops::Range<usize> {
        taps_inside(self.kw, |t| self.iw(ox, t).is_some())
    }
}

/// The taps `0..k` for which `inside` holds, known to be one range.
fn taps_inside(k: usize, inside: impl Fn(usize) -> bool) -> std::ops::Range<usize> {
    let lo = (0..k).find(|&t| inside(t)).unwrap_or(k);
    let hi = (lo..k).find(|&t| !inside(t)).unwrap_or(k);
    lo..hi
}

/// The window of a rank-4 filter [KH, KW, C, X] over `x`, checking that `x` has C channels;
/// `expect` describes the filter layout for the error.
pub(super) fn filter_window(
    x: &[usize],
    f: &[usize],
    expect: &str,
    strides: [usize; 2],
    dilations: [usize; 2],
    pad: &Padding,
) -> KernelResult<(Window2d, [usize; 4])> {
    let &[kh, kw, c, o] = f else {
        return Err(format!("{expect}, got {f:?}"));
    };
    let g = Window2d::new(x, kh, kw, strides, dilations, pad)?;
    if g.c != c {
        return Err(format!("input has {} channels, the filter expects {c}", g.c));
    }
    Ok((g, [kh, kw, c, o]))
}

const CONV_FILTER: &str = "Conv2D filter must be HWIO rank 4";
pub(super) const DEPTHWISE_FILTER: &str = "depthwise filter must be [KH,KW,C,M]";

/// The NHWC result shape of [`conv2d`] (filter HWIO) or, `depthwise`, of [`super::depthwise::depthwise_conv2d`]
/// (filter `[KH,KW,C,M]`, C·M channels out) for an input and filter of these shapes, without
/// computing it; the same error as the kernel's when they do not fit.
pub fn conv_result_shape(
    x: &[usize],
    f: &[usize],
    strides: [usize; 2],
    dilations: [usize; 2],
    pad: &Padding,
    depthwise: bool,
) -> KernelResult<Vec<usize>> {
    let expect = if depthwise { DEPTHWISE_FILTER } else { CONV_FILTER };
    let (g, [_, _, c, o]) = filter_window(x, f, expect, strides, dilations, pad)?;
    Ok(vec![g.n, g.oh, g.ow, if depthwise { c * o } else { o }])
}

/// Output pixels per GEMM call: patches and results of one block stay in L2, and the epilogue
/// runs on them while they are there.
fn block_pixels(kdim: usize, co: usize) -> usize {
    (32 * 1024 / (kdim + co).max(1)).clamp(16, 4096)
}

/// Conv2D: x [N,H,W,Cin], filter [KH,KW,Cin,Cout] (TF HWIO), result [N,OH,OW,Cout], with an
/// optional fused epilogue. Im2col + GEMM over blocks of output pixels (a 1×1 stride-1
/// convolution is a GEMM on the input itself).
pub fn conv2d(
    x: &ArrayD<f32>,
    f: &ArrayD<f32>,
    strides: [usize; 2],
    dilations: [usize; 2],
    pad: &Padding,
    ep: Option<&Epilogue>,
) -> KernelResult<ArrayD<f32>> {
    conv2d_packed(x, f, None, strides, dilations, pad, ep)
}

/// The filter of [`conv2d`] as the GEMM's packed right-hand matrix ([kh·kw·ci, co]), for a
/// convolution whose filter is a constant to pack once ([`PackOnce`]); `None` for anything but
/// a 4-D filter.
pub fn pack_filter(f: &ArrayD<f32>) -> Option<PackedMatrix> {
    let &[kh, kw, ci, co] = f.shape() else { return None };
    let f = f.as_standard_layout();
    PackedMatrix::new(f.as_slice()?, kh * kw * ci, co)
}

/// [`conv2d`] with the filter already packed by [`pack_filter`] (packed here when `None` or
/// when it is not the filter's shape), so a constant filter is packed once, not per sample.
#[allow(clippy::too_many_arguments)]
pub fn conv2d_packed(
    x: &ArrayD<f32>,
    f: &ArrayD<f32>,
    packed: Option<&PackedMatrix>,
    strides: [usize; 2],
    dilations: [usize; 2],
    pad: &Padding,
    ep: Option<&Epilogue>,
) -> KernelResult<ArrayD<f32>> {
    let (g, [kh, kw, ci, co]) = filter_window(x.shape(), f.shape(), CONV_FILTER, strides, dilations, pad)?;
    let x = x.as_standard_layout();
    let f = f.as_standard_layout();
    let (xs, fs) = (x.as_slice().ok_or("layout")?, f.as_slice().ok_or("layout")?);
    let pixels = g.oh * g.ow;
    let kdim = kh * kw * ci;
    if kdim == 0 {
        return Err(format!(
            "a convolution window of {kh}x{kw} over {ci} channels holds no values"
        ));
    }
    if let Some(e) = ep {
        e.check(co)?;
    }
    let total = g.n * pixels * co;
    let direct = kh == 1 && kw == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 && g.pw == 0 && g.oh == g.h && g.ow == g.w;
    if !direct && g.dw == 1 && co <= ROW_GEMM_MAX_CO && kw * ci >= ROW_GEMM_MIN_RUN {
        return row_gemms(xs, fs, &g, [kh, kw, ci, co], ep);
    }
    let packed = PackedMatrix::given_or_packed(packed, fs, kdim, co).ok_or("filter layout")?;
    if !direct && g.dw == 1 && g.ow >= WINDOW_MIN_COLS {
        return windows_in_place(xs, &g, [kh, kw, ci, co], &packed, ep);
    }
    // every output value is written by a GEMM before anything reads it: no zero-fill
    let mut out: Vec<f32> = Vec::with_capacity(total);
    let base = out.as_mut_ptr();
    // the input is the GEMM's A as it is when direct: one product per image
    let block = if direct {
        pixels.max(1)
    } else {
        block_pixels(kdim, co).min(pixels.max(1))
    };
    let mut patches = if direct { Vec::new() } else { vec![0f32; block * kdim] };
    for b in 0..g.n {
        let img = &xs[b * g.h * g.w * ci..(b + 1) * g.h * g.w * ci];
        for p0 in (0..pixels).step_by(block) {
            let p1 = (p0 + block).min(pixels);
            let at = (b * pixels + p0) * co;
            let a = if direct {
                &img[p0 * kdim..p1 * kdim]
            } else {
                for (p, row) in (p0..p1).zip(patches.chunks_exact_mut(kdim)) {
                    fill_patch(img, &g, [kw, ci], p / g.ow, p % g.ow, row);
                }
                &patches[..(p1 - p0) * kdim]
            };
            // SAFETY: A's p1 − p0 rows of kdim values lie inside `a`; C's rows of co values
            // from `at` lie inside the capacity of `out` (at + (p1 − p0)·co ≤ total), written
            // whole by the GEMM
            unsafe {
                let rows = Strides {
                    rs: kdim as isize,
                    cs: 1,
                };
                let dst = Strides { rs: co as isize, cs: 1 };
                gemm_packed(p1 - p0, a.as_ptr(), rows, &packed, base.add(at), dst, ep)?;
            }
        }
    }
    // SAFETY: the blocks cover every pixel of every image, so all `total` values are written
    unsafe { out.set_len(total) };
    from_vec(&[g.n, g.oh, g.ow, co], out)
}

/// Narrowest output rows [`windows_in_place`] takes: on narrower ones the border pixels, one
/// or two GEMM rows each, are most of the row, and blocks of patches over many rows are faster.
const WINDOW_MIN_COLS: usize = 16;

/// [`conv2d_packed`] undilated along W, without patches where the window lies inside the
/// image: in NHWC, filter row ky of pixel ox's window is one run of `kw · ci` values of input
/// row iy + ky·dh, so the inside pixels of an output row are one GEMM whose rows of A are their
/// windows read in place ([`Runs`], rows `sw · ci` apart). Pixels whose window crosses the
/// border take patches with zeros ([`fill_patch`]). The sums are those of the patches': the
/// same k order, and a padding zero adds nothing to a fused multiply-add.
///
/// ```text
/// output row oy:  | border | inside: A rows = windows in the image | border |
///                   patches      gemm_packed_runs                    patches
/// ```
fn windows_in_place(
    xs: &[f32],
    g: &Window2d,
    [kh, kw, ci, co]: [usize; 4],
    packed: &PackedMatrix,
    ep: Option<&Epilogue>,
) -> KernelResult<ArrayD<f32>> {
    let pixels = g.oh * g.ow;
    let kdim = kh * kw * ci;
    let total = g.n * pixels * co;
    let std::ops::Range { start: lo, end: hi } = g.cols_all_inside();
    let runs = Runs {
        count: kh,
        len: kw * ci,
        stride: (g.dh * g.w * ci) as isize,
    };
    let c_rows = Strides { rs: co as isize, cs: 1 };
    let mut patches = vec![0f32; g.ow * kdim];
    // every output value is written by a GEMM before anything reads it: no zero-fill
    let mut out: Vec<f32> = Vec::with_capacity(total);
    let base = out.as_mut_ptr();
    for b in 0..g.n {
        let img = &xs[b * g.h * g.w * ci..(b + 1) * g.h * g.w * ci];
        for oy in 0..g.oh {
            let row_at = b * pixels + oy * g.ow;
            let (l, h) = match g.ih(oy, 0) {
                Some(iy0) if g.ky_inside(oy) == (0..kh) && lo < hi => {
                    let a = &img[(iy0 * g.w + lo * g.sw - g.pw) * ci..];
                    // the last window's last run ends inside the image
                    let last_iy = iy0 + (kh - 1) * g.dh;
                    let end = (last_iy * g.w + (hi - 1) * g.sw - g.pw + kw) * ci;
                    assert!(end <= img.len());
                    // SAFETY: A's windows lie inside `img` (checked just above: the last
                    // window's last run ends at `end`); C's rows lo..hi of row oy lie inside
                    // the capacity of `out`, written whole
                    unsafe {
                        let c = base.add((row_at + lo) * co);
                        gemm_packed_runs(hi - lo, a.as_ptr(), (g.sw * ci) as isize, runs, packed, c, c_rows, ep)?;
                    }
                    (lo, hi)
                }
                _ => (g.ow, g.ow),
            };
            for (c0, c1) in [(0, l), (h, g.ow)] {
                if c0 >= c1 {
                    continue;
                }
                for (ox, row) in (c0..c1).zip(patches.chunks_exact_mut(kdim)) {
                    fill_patch(img, g, [kw, ci], oy, ox, row);
                }
                let rows = Strides {
                    rs: kdim as isize,
                    cs: 1,
                };
                // SAFETY: the patches hold c1 − c0 rows of kdim values; C's rows c0..c1 of
                // row oy lie inside the capacity of `out`, written whole
                unsafe {
                    gemm_packed(
                        c1 - c0,
                        patches.as_ptr(),
                        rows,
                        packed,
                        base.add((row_at + c0) * co),
                        c_rows,
                        ep,
                    )?
                };
            }
        }
    }
    // SAFETY: each output row's inside and border columns cover it, so all `total` values are
    // written
    unsafe { out.set_len(total) };
    from_vec(&[g.n, g.oh, g.ow, co], out)
}

/// The patch of output pixel (oy, ox): its window's kh · kw · ci values in filter order, zeros
/// where the window lies outside the image.
fn fill_patch(img: &[f32], g: &Window2d, [kw, ci]: [usize; 2], oy: usize, ox: usize, row: &mut [f32]) {
    for (ky, taps) in row.chunks_exact_mut(kw * ci).enumerate() {
        let Some(iy) = g.ih(oy, ky) else {
            taps.fill(0.0);
            continue;
        };
        let line = &img[iy * g.w * ci..(iy + 1) * g.w * ci];
        if g.dw == 1 {
            // undilated: the taps inside the row are one run of the input
            // (one copy, not kw of ci values each: conv1d has ci = 1)
            let start = ox * g.sw;
            let k0 = g.pw.saturating_sub(start).min(kw);
            let k1 = (g.w + g.pw).saturating_sub(start).clamp(k0, kw);
            taps[..k0 * ci].fill(0.0);
            if k1 > k0 {
                let ix0 = start + k0 - g.pw;
                taps[k0 * ci..k1 * ci].copy_from_slice(&line[ix0 * ci..(ix0 + k1 - k0) * ci]);
            }
            taps[k1 * ci..].fill(0.0);
            continue;
        }
        for (kx, seg) in taps.chunks_exact_mut(ci).enumerate() {
            match g.iw(ox, kx) {
                Some(ix) => seg.copy_from_slice(&line[ix * ci..(ix + 1) * ci]),
                None => seg.fill(0.0),
            }
        }
    }
}

/// Most output channels [`row_gemms`] takes: with few, im2col copies far more values than the
/// GEMM multiplies by each (basic_pitch's 3×39 convolution, 8 channels in and out, would copy
/// 936 values a pixel for 8 multiply-adds each).
const ROW_GEMM_MAX_CO: usize = 16;

/// Shortest run of a filter row (kw · ci values) [`row_gemms`] takes.
const ROW_GEMM_MIN_RUN: usize = 32;

/// [`conv2d`] undilated along W with few output channels, without patches: in NHWC the window
/// of output pixel ox over input row iy is one run of that row, `kw · ci` values from
/// `ox · sw · ci`, so each (output row, filter row) pair is one GEMM that reads the (padded)
/// input row in place, rows `sw · ci` apart, and adds into the output row.
///
/// ```text
/// y[oy, ox, :] += row(iy)[ox·sw·ci .. ox·sw·ci + kw·ci] · f[ky]      (f[ky]: kw·ci × co)
/// ```
fn row_gemms(
    xs: &[f32],
    fs: &[f32],
    g: &Window2d,
    [kh, kw, ci, co]: [usize; 4],
    ep: Option<&Epilogue>,
) -> KernelResult<ArrayD<f32>> {
    let pixels = g.oh * g.ow;
    let mut out = vec![0f32; g.n * pixels * co];
    // each input row over columns −pw .. −pw + span (every window of an output row): line j
    // of a row is input column j − pw, the padding zeros, written once for all images
    let span = (g.ow - 1) * g.sw + kw;
    let (first, last) = (g.pw.min(span), (g.pw + g.w).min(span).max(g.pw.min(span)));
    let mut padded = vec![0f32; g.h * span * ci];
    let run = kw * ci;
    for b in 0..g.n {
        let img = &xs[b * g.h * g.w * ci..(b + 1) * g.h * g.w * ci];
        for (iy, line) in padded.chunks_exact_mut(span * ci).enumerate() {
            line[first * ci..last * ci].copy_from_slice(&img[iy * g.w * ci..(iy * g.w + last - first) * ci]);
        }
        for oy in 0..g.oh {
            let dst = &mut out[(b * pixels + oy * g.ow) * co..(b * pixels + (oy + 1) * g.ow) * co];
            for ky in 0..kh {
                let Some(iy) = g.ih(oy, ky) else { continue };
                gemm_strided_add(
                    g.ow,
                    co,
                    run,
                    &padded[iy * span * ci..(iy + 1) * span * ci],
                    (g.sw * ci, 1),
                    &fs[ky * run * co..(ky + 1) * run * co],
                    (co, 1),
                    dst,
                );
            }
        }
    }
    if let Some(ep) = ep.and_then(|e| e.tiled(co)) {
        ep.apply(&mut out);
    }
    from_vec(&[g.n, g.oh, g.ow, co], out)
}

#[cfg(test)]
mod tests {
    use super::super::depthwise::depthwise_conv2d;
    use super::*;
    use ndarray::IxDyn;

    /// The definition, loop by loop, for comparison.
    fn conv_ref(x: &ArrayD<f32>, f: &ArrayD<f32>, g: &Window2d, depthwise: bool) -> ArrayD<f32> {
        let (kh, kw) = (f.shape()[0], f.shape()[1]);
        let co = if depthwise {
            f.shape()[2] * f.shape()[3]
        } else {
            f.shape()[3]
        };
        let mut out = ArrayD::zeros(IxDyn(&[g.n, g.oh, g.ow, co]));
        for b in 0..g.n {
            for oy in 0..g.oh {
                for ox in 0..g.ow {
                    for o in 0..co {
                        let mut s = 0.0;
                        for ky in 0..kh {
                            for kx in 0..kw {
                                let (Some(iy), Some(ix)) = (g.ih(oy, ky), g.iw(ox, kx)) else {
                                    continue;
                                };
                                if depthwise {
                                    let m = f.shape()[3];
                                    s += x[[b, iy, ix, o / m]] * f[[ky, kx, o / m, o % m]];
                                } else {
                                    for i in 0..g.c {
                                        s += x[[b, iy, ix, i]] * f[[ky, kx, i, o]];
                                    }
                                }
                            }
                        }
                        out[[b, oy, ox, o]] = s;
                    }
                }
            }
        }
        out
    }

    fn close(a: &ArrayD<f32>, b: &ArrayD<f32>) -> bool {
        a.shape() == b.shape() && a.iter().zip(b).all(|(x, y)| (x - y).abs() <= 1e-4 * (1.0 + y.abs()))
    }

    #[test]
    fn padding_geometry_matches_tensorflow() {
        // TF: SAME, in 8, k 3, s 2 -> out 4, pad total 1 -> before 0
        assert_eq!(out_dim(8, 3, 2, 1, &Padding::Same, 0).unwrap(), (4, 0));
        // SAME, in 7, k 3, s 2 -> out 4, pad total 2 -> before 1
        assert_eq!(out_dim(7, 3, 2, 1, &Padding::Same, 0).unwrap(), (4, 1));
        assert_eq!(out_dim(7, 3, 2, 1, &Padding::Valid, 0).unwrap(), (3, 0));
        // dilation 2: effective window 5
        assert_eq!(out_dim(9, 3, 1, 2, &Padding::Valid, 0).unwrap(), (5, 0));
        assert_eq!(
            out_dim(5, 3, 1, 1, &Padding::Explicit([(2, 1), (0, 0)]), 0).unwrap(),
            (6, 2)
        );
        assert!(out_dim(2, 3, 1, 1, &Padding::Valid, 0).is_err());
        assert!(
            out_dim(0, 3, 1, 1, &Padding::Same, 0).is_err(),
            "an empty input is an error, not an underflow"
        );
    }

    #[test]
    fn conv_and_depthwise_match_the_definition() {
        let x = ArrayD::from_shape_fn(IxDyn(&[2, 7, 6, 3]), |i| {
            ((i[0] * 31 + i[1] * 7 + i[2] * 3 + i[3]) % 11) as f32 - 5.0
        });
        for (pad, s, d) in [
            (Padding::Same, [1, 1], [1, 1]),
            (Padding::Same, [2, 2], [1, 1]),
            (Padding::Valid, [2, 1], [1, 1]),
            (Padding::Valid, [1, 1], [2, 2]),
            (Padding::Explicit([(1, 2), (0, 1)]), [1, 2], [1, 1]),
        ] {
            let f = ArrayD::from_shape_fn(IxDyn(&[3, 2, 3, 4]), |i| {
                ((i[0] * 5 + i[1] * 3 + i[2] * 2 + i[3]) % 7) as f32 * 0.25 - 0.5
            });
            let g = Window2d::new(x.shape(), 3, 2, s, d, &pad).unwrap();
            let y = conv2d(&x, &f, s, d, &pad, None).unwrap();
            assert!(close(&y, &conv_ref(&x, &f, &g, false)), "conv {pad:?} {s:?} {d:?}");
            assert_eq!(
                conv_result_shape(x.shape(), f.shape(), s, d, &pad, false).unwrap(),
                y.shape()
            );
            let fd = ArrayD::from_shape_fn(IxDyn(&[3, 2, 3, 2]), |i| {
                ((i[0] * 5 + i[1] * 3 + i[2] * 2 + i[3]) % 7) as f32 * 0.25 - 0.5
            });
            let yd = depthwise_conv2d(&x, &fd, s, d, &pad, None).unwrap();
            assert!(close(&yd, &conv_ref(&x, &fd, &g, true)), "depthwise {pad:?}");
            assert_eq!(
                conv_result_shape(x.shape(), fd.shape(), s, d, &pad, true).unwrap(),
                yd.shape()
            );
        }
        // the row-GEMM path (kw · ci ≥ 32, few output channels): with pads on both sides,
        // strides, a window wider than the row, and an output row with no input row (dilated H)
        let xw = ArrayD::from_shape_fn(IxDyn(&[2, 5, 9, 8]), |i| {
            ((i[0] * 31 + i[1] * 7 + i[2] * 3 + i[3]) % 13) as f32 - 6.0
        });
        for (kh, kw, co, pad, s, d) in [
            (3, 5, 8, Padding::Same, [1, 1], [1, 1]),
            (2, 4, 3, Padding::Explicit([(1, 0), (2, 3)]), [2, 3], [1, 1]),
            (1, 12, 1, Padding::Explicit([(0, 0), (2, 1)]), [1, 1], [1, 1]),
            (2, 4, 16, Padding::Explicit([(2, 2), (1, 1)]), [1, 2], [3, 1]),
        ] {
            let f = ArrayD::from_shape_fn(IxDyn(&[kh, kw, 8, co]), |i| {
                ((i[0] * 5 + i[1] * 3 + i[2] * 2 + i[3]) % 7) as f32 * 0.25 - 0.5
            });
            let g = Window2d::new(xw.shape(), kh, kw, s, d, &pad).unwrap();
            assert!(
                close(
                    &conv2d(&xw, &f, s, d, &pad, None).unwrap(),
                    &conv_ref(&xw, &f, &g, false)
                ),
                "row GEMMs {kh}×{kw}→{co} {pad:?} {s:?} {d:?}"
            );
        }
        // the 1×1 GEMM path
        let f = ArrayD::from_shape_fn(IxDyn(&[1, 1, 3, 5]), |i| (i[2] * 5 + i[3]) as f32 * 0.1);
        let g = Window2d::new(x.shape(), 1, 1, [1, 1], [1, 1], &Padding::Same).unwrap();
        assert!(close(
            &conv2d(&x, &f, [1, 1], [1, 1], &Padding::Same, None).unwrap(),
            &conv_ref(&x, &f, &g, false)
        ));
        assert_eq!(
            conv_result_shape(x.shape(), f.shape(), [1, 1], [1, 1], &Padding::Same, false).unwrap(),
            [2, 7, 6, 5]
        );
    }

    /// Convolutions over output rows of at least [`WINDOW_MIN_COLS`] columns read the inside
    /// windows in place ([`windows_in_place`]): every value is the patch's sum bit for bit
    /// (im2col, then the same packed GEMM), with padding on every side, strides, a dilated H,
    /// rows with no window inside, and a fused epilogue.
    #[test]
    fn windows_read_in_place_give_the_patches_sums() {
        use crate::interp::kernels::elementwise::UnOp;
        for (h, w, ci, co, kh, kw, s, d, pad) in [
            (9, 40, 3, 16, 3, 3, [2, 2], [1, 1], Padding::Same),
            (7, 17, 5, 8, 3, 3, [1, 1], [1, 1], Padding::Explicit([(1, 1), (2, 1)])),
            (8, 33, 2, 24, 5, 3, [1, 2], [2, 1], Padding::Same),
            (6, 19, 4, 3, 2, 4, [1, 1], [1, 1], Padding::Valid),
            (3, 20, 3, 5, 3, 3, [1, 1], [2, 1], Padding::Explicit([(3, 3), (1, 1)])),
        ] {
            let x = ArrayD::from_shape_fn(IxDyn(&[2, h, w, ci]), |i| {
                ((i[0] * 31 + i[1] * 7 + i[2] * 3 + i[3]) % 13) as f32 * 0.37 - 2.0
            });
            let f = ArrayD::from_shape_fn(IxDyn(&[kh, kw, ci, co]), |i| {
                ((i[0] * 5 + i[1] * 3 + i[2] * 2 + i[3]) % 7) as f32 * 0.21 - 0.6
            });
            let bias: Vec<f32> = (0..co).map(|j| j as f32 * 0.3 - 1.0).collect();
            let ep = Epilogue {
                bias: Some(&bias),
                act: Some(UnOp::Relu6),
                ..Default::default()
            };
            let g = Window2d::new(x.shape(), kh, kw, s, d, &pad).unwrap();
            assert!(g.ow >= WINDOW_MIN_COLS);
            let kdim = kh * kw * ci;
            let packed = PackedMatrix::new(f.as_slice().unwrap(), kdim, co).unwrap();
            for ep in [None, Some(&ep)] {
                let y = conv2d(&x, &f, s, d, &pad, ep).unwrap();
                let pixels = g.oh * g.ow;
                let mut patches = vec![0f32; g.n * pixels * kdim];
                let xs = x.as_slice().unwrap();
                for (p, row) in patches.chunks_exact_mut(kdim).enumerate() {
                    let (b, at) = (p / pixels, p % pixels);
                    let img = &xs[b * h * w * ci..(b + 1) * h * w * ci];
                    fill_patch(img, &g, [kw, ci], at / g.ow, at % g.ow, row);
                }
                let mut want = vec![f32::NAN; g.n * pixels * co];
                let (a_rows, c_rows) = (
                    Strides {
                        rs: kdim as isize,
                        cs: 1,
                    },
                    Strides { rs: co as isize, cs: 1 },
                );
                unsafe {
                    gemm_packed(
                        g.n * pixels,
                        patches.as_ptr(),
                        a_rows,
                        &packed,
                        want.as_mut_ptr(),
                        c_rows,
                        ep,
                    )
                }
                .unwrap();
                let y = y.as_slice().unwrap();
                let differ = y.iter().zip(&want).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
                assert_eq!(
                    differ,
                    0,
                    "{h}×{w}×{ci} → {co}, {kh}×{kw} s {s:?} d {d:?} {pad:?} ep {}",
                    ep.is_some()
                );
            }
        }
    }

    #[test]
    fn result_shapes_refuse_what_the_kernels_refuse() {
        let x = ArrayD::<f32>::zeros(IxDyn(&[1, 4, 4, 3]));
        for (f, pad) in [
            (vec![3, 3, 2, 4], Padding::Same),  // 2 channels for an input of 3
            (vec![5, 5, 3, 4], Padding::Valid), // window larger than the input
            (vec![3, 3, 3], Padding::Same),     // not rank 4
        ] {
            let fa = ArrayD::<f32>::zeros(IxDyn(&f));
            for depthwise in [false, true] {
                let run = match depthwise {
                    false => conv2d(&x, &fa, [1, 1], [1, 1], &pad, None),
                    true => depthwise_conv2d(&x, &fa, [1, 1], [1, 1], &pad, None),
                };
                let shape = conv_result_shape(x.shape(), &f, [1, 1], [1, 1], &pad, depthwise);
                assert_eq!(run.err(), shape.err(), "{f:?} {pad:?} depthwise {depthwise}");
            }
        }
    }
}
