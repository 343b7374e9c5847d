//! Depthwise convolution (NHWC input, filter `[KH, KW, C, M]`) as a direct kernel: each output
//! channel reads one input channel, so there is no product to hand to a GEMM.
//!
//! One output row at a time. For each run of output pixels the filter taps that read inside
//! the image are listed once (as input and weight offsets), and a block of pixels × 8 channels
//! sums every listed tap in registers before one store. Columns where the whole filter row
//! fits take blocks of 8 or 4 pixels; border columns take one pixel with fewer taps. Taps
//! outside the image are skipped, not multiplied by a padding zero, and each sum is the taps'
//! products (multiplied and added separately, not fused) added in filter order from +0 — the
//! definition's order on every path, the portable one included.

use super::conv::{filter_window, Padding, Window2d, DEPTHWISE_FILTER};
use super::elementwise::unary_fn;
use super::epilogue::{Columns, Epilogue};
use super::{from_vec, KernelResult};
use ndarray::{ArrayD, ArrayRef, IxDyn};
use std::mem::MaybeUninit;

/// DepthwiseConv2dNative: x [N,H,W,C], filter [KH,KW,C,M], result [N,OH,OW,C·M], with an
/// optional fused epilogue applied to each output row while it is in cache.
pub fn depthwise_conv2d(
    x: &ArrayD<f32>,
    f: &ArrayRef<f32, IxDyn>,
    strides: [usize; 2],
    dilations: [usize; 2],
    pad: &Padding,
    ep: Option<&Epilogue>,
) -> KernelResult<ArrayD<f32>> {
    depthwise_with(x, f, strides, dilations, pad, ep, simd_available())
}

fn simd_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    return std::is_x86_feature_detected!("avx2");
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// [`depthwise_conv2d`], on the AVX2 path only when `simd` (tests run both paths).
fn depthwise_with(
    x: &ArrayD<f32>,
    f: &ArrayRef<f32, IxDyn>,
    strides: [usize; 2],
    dilations: [usize; 2],
    pad: &Padding,
    ep: Option<&Epilogue>,
    simd: bool,
) -> KernelResult<ArrayD<f32>> {
    let (g, [_, _, c, m]) = filter_window(x.shape(), f.shape(), DEPTHWISE_FILTER, strides, dilations, pad)?;
    let co = c * m;
    if let Some(e) = ep {
        e.check(co)?;
    }
    let cols = Columns::new(ep, co);
    let x = x.as_standard_layout();
    let f = f.as_standard_layout();
    let (xs, fs) = (x.as_slice().ok_or("layout")?, f.as_slice().ok_or("layout")?);
    let total = g.n * g.oh * g.ow * co;
    // every value is written once, by its sum or as +0 where no tap reads the image, so the
    // buffer is not zeroed first
    let mut out: Vec<f32> = Vec::with_capacity(total);
    if co > 0 {
        let after = cols.act_after().map(unary_fn);
        let mut taps = RowTaps::default();
        for (r, row) in out.spare_capacity_mut()[..total]
            .chunks_exact_mut(g.ow * co)
            .enumerate()
        {
            let (b, oy) = (r / g.oh, r % g.oh);
            let img = &xs[b * g.h * g.w * c..(b + 1) * g.h * g.w * c];
            if m == 1 {
                one_per_channel_row(&g, img, fs, oy, row, &cols, &mut taps, simd);
            } else {
                multiplier_row(&g, m, img, fs, oy, row, &cols);
            }
            if let Some(f) = &after {
                for v in row.iter_mut() {
                    // SAFETY: the row was written whole above
                    let y = unsafe { v.assume_init() };
                    v.write(f(y));
                }
            }
        }
    }
    // SAFETY: every row was written whole (its sums, or +0)
    unsafe { out.set_len(total) };
    from_vec(&[g.n, g.oh, g.ow, co], out)
}

/// The filter taps `ky × kx` (both inside the image) of an output pixel, in filter order, as
/// `(input offset, weight offset)`: the input offset from the pixel's first such tap
/// ([`first_tap`]), the weight offset into the `[KH, KW, C]` filter.
fn fill_taps(list: &mut Vec<(usize, usize)>, g: &Window2d, ky: std::ops::Range<usize>, kx: std::ops::Range<usize>) {
    list.clear();
    for y in ky.clone() {
        for x in kx.clone() {
            let at = ((y - ky.start) * g.dh * g.w + (x - kx.start) * g.dw) * g.c;
            list.push((at, (y * g.kw + x) * g.c));
        }
    }
}

/// Image offset (row · W + column) · C of the tap (`ky0`, `kx0`) of output pixel (`oy`, `ox`).
fn first_tap(g: &Window2d, oy: usize, ox: usize, ky0: usize, kx0: usize) -> usize {
    let (iy0, ix0) = (oy * g.sh + ky0 * g.dh - g.ph, ox * g.sw + kx0 * g.dw - g.pw);
    (iy0 * g.w + ix0) * g.c
}

/// The tap lists of a convolution's rows, kept from row to row: the inside columns' list
/// depends on the row only through which filter rows read inside the image, so rows with the
/// same ones (all but the top and bottom few) share it.
#[derive(Default)]
struct RowTaps {
    inner: Vec<(usize, usize)>,
    /// The filter rows `inner` was made for.
    inner_ky: Option<std::ops::Range<usize>>,
    /// Border columns' lists by the filter rows and columns they read (a few kinds: top or
    /// bottom rows × left or right columns), each made once per convolution.
    border: Vec<(std::ops::Range<usize>, std::ops::Range<usize>, Vec<(usize, usize)>)>,
}

impl RowTaps {
    /// Makes `inner` the inside columns' taps for filter rows `ky`, unless it already is.
    fn make_inner(&mut self, g: &Window2d, ky: std::ops::Range<usize>) {
        if self.inner_ky.as_ref() != Some(&ky) {
            fill_taps(&mut self.inner, g, ky.clone(), 0..g.kw);
            self.inner_ky = Some(ky);
        }
    }

    /// The taps of a border pixel that reads filter rows `ky` and columns `kx`.
    fn border(&mut self, g: &Window2d, ky: std::ops::Range<usize>, kx: std::ops::Range<usize>) -> &[(usize, usize)] {
        let at = match self.border.iter().position(|(y, x, _)| *y == ky && *x == kx) {
            Some(at) => at,
            None => {
                let mut list = Vec::new();
                fill_taps(&mut list, g, ky.clone(), kx.clone());
                self.border.push((ky, kx, list));
                self.border.len() - 1
            }
        };
        &self.border[at].2
    }
}

/// Output row `oy` of a depthwise convolution with one output channel per input channel.
///
/// The columns where every filter column reads inside the image share one tap list (each
/// pixel's taps start `step` input values after the previous pixel's), made once per row;
/// each border column gets its own.
fn one_per_channel_row(
    g: &Window2d,
    img: &[f32],
    fs: &[f32],
    oy: usize,
    row: &mut [MaybeUninit<f32>],
    cols: &Columns,
    taps: &mut RowTaps,
    simd: bool,
) {
    let c = g.c;
    let ky = g.ky_inside(oy);
    if ky.is_empty() {
        row.fill(MaybeUninit::new(0.0)); // no tap reads the image
        return;
    }
    let std::ops::Range { start: lo, end: hi } = g.cols_all_inside();
    let step = g.sw * c;
    let inner_first = match lo < hi {
        true => {
            taps.make_inner(g, ky.clone());
            first_tap(g, oy, lo, ky.start, 0)
        }
        false => 0, // no column has its whole window inside
    };
    let mut ox = 0;
    while ox < g.ow {
        let (taps, first, p) = if (lo..hi).contains(&ox) {
            let p = match hi - ox {
                8.. => 8,
                4.. => 4,
                _ => 1,
            };
            (&taps.inner[..], inner_first + (ox - lo) * step, p)
        } else {
            let kx = g.kx_inside(ox);
            if kx.is_empty() {
                row[ox * c..(ox + 1) * c].fill(MaybeUninit::new(0.0)); // no tap reads the image
                ox += 1;
                continue;
            }
            let first = first_tap(g, oy, ox, ky.start, kx.start);
            (taps.border(g, ky.clone(), kx), first, 1)
        };
        let pixels = Pixels {
            taps,
            img,
            first,
            p,
            step,
        };
        pixels.sum(fs, c, &mut row[ox * c..(ox + p) * c], cols, simd);
        ox += p;
    }
}

/// `p` consecutive output pixels of a row, `step` input values apart: the first one's taps
/// read from `first` in the image, each later one's `step` further.
struct Pixels<'a> {
    taps: &'a [(usize, usize)],
    img: &'a [f32],
    first: usize,
    p: usize,
    step: usize,
}

impl Pixels<'_> {
    /// The sums of every channel of `fs`' `c`, with the epilogue, into `dst` (written whole).
    #[inline(always)]
    fn sum(&self, fs: &[f32], c: usize, dst: &mut [MaybeUninit<f32>], cols: &Columns, simd: bool) {
        let Pixels {
            taps,
            img,
            first,
            p,
            step,
        } = *self;
        // the last pixel's last tap reads `c` values from `first + (p-1)·step + last.0`; taps
        // are listed in growing order of both offsets
        let Some(&(last_x, last_w)) = taps.last() else { return };
        assert!(first + (p - 1) * step + last_x + c <= img.len() && last_w + c <= fs.len() && dst.len() == p * c);
        #[cfg(target_arch = "x86_64")]
        if simd {
            // SAFETY: AVX2 is available (`simd` is only set when it is); the reads are within
            // `img` and `fs` and the writes within `dst` (asserted above)
            unsafe {
                let (x, w, out) = (img.as_ptr().add(first), fs.as_ptr(), dst.as_mut_ptr().cast::<f32>());
                match p {
                    8 => avx2::pixels::<8>(taps, x, w, step, c, out, cols),
                    4 => avx2::pixels::<4>(taps, x, w, step, c, out, cols),
                    _ => avx2::pixels::<1>(taps, x, w, step, c, out, cols),
                }
            }
            return;
        }
        let _ = simd;
        // without SIMD: the same sums in the same order
        for q in 0..p {
            for ch in 0..c {
                let mut acc = 0f32;
                for &(xo, wo) in taps {
                    let prod = img[first + q * step + xo + ch] * fs[wo + ch];
                    acc += prod;
                }
                dst[q * c + ch].write(cols.one(acc, ch));
            }
        }
    }
}

/// Output row `oy` with M > 1 output channels per input channel (channel `ch·M + j` reads input
/// channel `ch`): per pixel and channel, the taps inside the image in filter order.
fn multiplier_row(
    g: &Window2d,
    m: usize,
    img: &[f32],
    fs: &[f32],
    oy: usize,
    row: &mut [MaybeUninit<f32>],
    cols: &Columns,
) {
    let (kw, c) = (g.kw, g.c);
    let co = c * m;
    let ky = g.ky_inside(oy);
    for ox in 0..g.ow {
        let kx = g.kx_inside(ox);
        for o in 0..co {
            let mut acc = 0f32;
            for y in ky.clone() {
                let iy = oy * g.sh + y * g.dh - g.ph;
                for x in kx.clone() {
                    let ix = ox * g.sw + x * g.dw - g.pw;
                    let prod = img[(iy * g.w + ix) * c + o / m] * fs[(y * kw + x) * co + o];
                    acc += prod;
                }
            }
            row[ox * co + o].write(cols.one(acc, o));
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::super::epilogue::avx2::finish;
    use super::Columns;
    use std::arch::x86_64::*;

    /// `P` consecutive output pixels, `step` input values apart, over all `c` channels: for
    /// each block of 8 channels (the last one masked), every tap of `taps` multiplied and
    /// added in order into one register per pixel from +0, then the epilogue applied
    /// ([`finish`]) and stored once to `out` (`P · c` values, pixel-major).
    ///
    /// # Safety
    /// AVX2 must be available; for every tap `(xo, wo)`, `x + q·step + xo .. + c` (q < P) and
    /// `w + wo .. + c` must be readable, and `out .. + P·c` writable.
    #[target_feature(enable = "avx2")]
    pub unsafe fn pixels<const P: usize>(
        taps: &[(usize, usize)],
        x: *const f32,
        w: *const f32,
        step: usize,
        c: usize,
        out: *mut f32,
        cols: &Columns,
    ) {
        let mut cb = 0;
        while cb + 8 <= c {
            let mut acc = [_mm256_setzero_ps(); P];
            for &(xo, wo) in taps {
                let wv = _mm256_loadu_ps(w.add(wo + cb));
                let src = x.add(xo + cb);
                for (q, a) in acc.iter_mut().enumerate() {
                    *a = _mm256_add_ps(*a, _mm256_mul_ps(_mm256_loadu_ps(src.add(q * step)), wv));
                }
            }
            for (q, a) in finish(acc, cols, cb).iter().enumerate() {
                _mm256_storeu_ps(out.add(q * c + cb), *a);
            }
            cb += 8;
        }
        if cb < c {
            // the last channels: lanes past `c` are neither read nor written
            let lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
            let mask = _mm256_cmpgt_epi32(_mm256_set1_epi32((c - cb) as i32), lane);
            let mut acc = [_mm256_setzero_ps(); P];
            for &(xo, wo) in taps {
                let wv = _mm256_maskload_ps(w.add(wo + cb), mask);
                let src = x.add(xo + cb);
                for (q, a) in acc.iter_mut().enumerate() {
                    *a = _mm256_add_ps(*a, _mm256_mul_ps(_mm256_maskload_ps(src.add(q * step), mask), wv));
                }
            }
            for (q, a) in finish(acc, cols, cb).iter().enumerate() {
                _mm256_maskstore_ps(out.add(q * c + cb), mask, *a);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::IxDyn;

    /// The definition, loop by loop: taps inside the image, in filter order, from +0.
    fn reference(x: &ArrayD<f32>, f: &ArrayD<f32>, g: &Window2d) -> ArrayD<f32> {
        let (kh, kw, m) = (f.shape()[0], f.shape()[1], f.shape()[3]);
        let co = f.shape()[2] * m;
        ArrayD::from_shape_fn(IxDyn(&[g.n, g.oh, g.ow, co]), |i| {
            let (b, oy, ox, o) = (i[0], i[1], i[2], i[3]);
            let mut s = 0f32;
            for ky in 0..kh {
                for kx in 0..kw {
                    if let (Some(iy), Some(ix)) = (g.ih(oy, ky), g.iw(ox, kx)) {
                        let prod = x[[b, iy, ix, o / m]] * f[[ky, kx, o / m, o % m]];
                        s += prod;
                    }
                }
            }
            s
        })
    }

    /// Every path — blocks of 8 and 4 pixels, single border pixels, masked channel tails, a
    /// depth multiplier, a filter wider than the image, rows with no tap inside — gives the
    /// definition's sums bit for bit, with and without SIMD.
    #[test]
    fn depthwise_sums_the_taps_in_the_definitions_order() {
        for (w, c, m, k, s, d, pad) in [
            (11, 3, 1, 3, 1, 1, Padding::Same),
            (11, 8, 1, 3, 1, 1, Padding::Same),
            (23, 16, 1, 3, 1, 1, Padding::Same),
            (23, 20, 1, 3, 2, 1, Padding::Same),
            (11, 17, 1, 5, 1, 2, Padding::Explicit([(2, 1), (3, 0)])),
            (11, 16, 1, 3, 2, 1, Padding::Valid),
            (11, 9, 2, 3, 1, 1, Padding::Same),
            (11, 24, 1, 9, 1, 1, Padding::Same),
            (4, 12, 1, 7, 1, 1, Padding::Same),
            (11, 8, 1, 3, 1, 3, Padding::Explicit([(4, 4), (1, 1)])),
        ] {
            let x = ArrayD::from_shape_fn(IxDyn(&[2, 9, w, c]), |i| {
                ((i[1] * 31 + i[2] * 7 + i[3] * 13 + i[0] * 5) % 23) as f32 * 0.37 - 3.1
            });
            let f = ArrayD::from_shape_fn(IxDyn(&[k, k, c, m]), |i| {
                ((i[0] * 11 + i[1] * 3 + i[2] * 5 + i[3]) % 17) as f32 * 0.113 - 0.9
            });
            let g = Window2d::new(x.shape(), k, k, [s, s], [d, d], &pad).unwrap();
            let want = reference(&x, &f, &g);
            for simd in [false, simd_available()] {
                let y = depthwise_with(&x, &f, [s, s], [d, d], &pad, None, simd).unwrap();
                assert_eq!(y.shape(), want.shape());
                let differ = y.iter().zip(&want).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
                assert_eq!(differ, 0, "w {w} c {c} m {m} k {k} s {s} d {d} {pad:?} simd {simd}");
            }
        }
    }

    /// The fused epilogue — scale, bias, ReLU or ReLU6 in registers, any other activation
    /// after the row — is the separate ops bit for bit, on both paths, with one and two
    /// output channels per input channel; a bias of the wrong length is an error, not skipped.
    #[test]
    fn depthwise_epilogue_is_the_separate_ops() {
        use crate::interp::kernels::elementwise::{unary_fn, UnOp};
        for m in [1, 2] {
            let c = 11;
            let co = c * m;
            let x = ArrayD::from_shape_fn(IxDyn(&[1, 6, 13, c]), |i| {
                (i[1] * 7 + i[2] * 3 + i[3]) as f32 * 0.21 - 4.0
            });
            let f = ArrayD::from_shape_fn(IxDyn(&[3, 3, c, m]), |i| {
                (i[0] * 3 + i[1] + i[2] + i[3]) as f32 * 0.05 - 0.3
            });
            let scale: Vec<f32> = (0..co).map(|i| 1.5 - i as f32 * 0.125).collect();
            let bias: Vec<f32> = (0..co).map(|i| i as f32 * 0.5 - 2.0).collect();
            for act in [None, Some(UnOp::Relu), Some(UnOp::Relu6), Some(UnOp::Sigmoid)] {
                let ep = Epilogue {
                    scale: Some(&scale),
                    bias: Some(&bias),
                    act,
                };
                let mut want = depthwise_conv2d(&x, &f, [1, 1], [1, 1], &Padding::Same, None).unwrap();
                let affine = Epilogue { act: None, ..ep };
                affine.apply_on_axis(&mut want, 3).unwrap();
                if let Some(op) = act {
                    want.mapv_inplace(unary_fn(op));
                }
                for simd in [false, simd_available()] {
                    let fused = depthwise_with(&x, &f, [1, 1], [1, 1], &Padding::Same, Some(&ep), simd).unwrap();
                    let same = fused.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(same, "m {m} {act:?} simd {simd}");
                }
            }
            let bad = Epilogue {
                bias: Some(&bias[..5]),
                ..Default::default()
            };
            assert!(depthwise_conv2d(&x, &f, [1, 1], [1, 1], &Padding::Same, Some(&bad)).is_err());
        }
    }
}
