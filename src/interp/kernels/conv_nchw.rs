//! ONNX's NCHW convolution on the NHWC kernels: the input is transposed in and the result out,
//! a constant OIHW filter is brought to HWIO once, and groups run as depthwise (one input
//! channel per group) or as one convolution per group.

use super::conv::{conv2d, conv2d_packed, conv_result_shape, pack_filter, Padding};
use super::depthwise::depthwise_conv2d;
use super::epilogue::Epilogue;
use super::packed_gemm::{gemm_packed, PackOnce, PackedMatrix, Strides};
use super::permute::permute;
use super::{f32_arg, ChannelsLast, Kernel, KernelResult};
use crate::tensor::{DType, Tensor};
use ndarray::{ArrayD, Axis, IxDyn};
use std::borrow::Cow;
use std::sync::Arc;

/// How an ONNX conv/pool pads: explicit pads, or SAME_UPPER / SAME_LOWER worked out from the
/// input size.
#[derive(Debug, Clone)]
pub enum Pads {
    Explicit([(usize, usize); 2]),
    SameUpper,
    SameLower,
}

/// ONNX's SAME_UPPER (`upper`) / SAME_LOWER padding of one axis of `n` for a window of `k`
/// taps at stride `s` and dilation `d`: the output is ⌈n / s⌉ long, and the odd pixel goes
/// to the end (upper) or the start.
pub fn same_pads(n: usize, k: usize, s: usize, d: usize, upper: bool) -> (usize, usize) {
    let o = n.div_ceil(s).max(1);
    let eff = (k - 1) * d + 1;
    let total = ((o - 1) * s + eff).saturating_sub(n);
    let small = total / 2;
    if upper {
        (small, total - small)
    } else {
        (total - small, small)
    }
}

impl Pads {
    pub fn resolve(&self, hw: [usize; 2], k: [usize; 2], s: [usize; 2], dil: [usize; 2]) -> Padding {
        match self {
            Pads::Explicit(p) => Padding::Explicit(*p),
            Pads::SameUpper | Pads::SameLower => {
                let upper = matches!(self, Pads::SameUpper);
                Padding::Explicit([0, 1].map(|i| same_pads(hw[i], k[i], s[i], dil[i], upper)))
            }
        }
    }
}

/// A 4-D tensor with its axes permuted (`out[i] = in[perm[i]]`), in standard layout; `what`
/// names the expected layout in the error.
fn permuted4(x: &ArrayD<f32>, perm: [usize; 4], what: &str) -> KernelResult<ArrayD<f32>> {
    if x.ndim() != 4 {
        return Err(format!("expected a 4-D {what}, got shape {:?}", x.shape()));
    }
    Ok(permute(x.view(), &perm))
}

pub fn nchw_to_nhwc(x: &ArrayD<f32>) -> KernelResult<ArrayD<f32>> {
    permuted4(x, [0, 2, 3, 1], "NCHW input")
}

pub fn nhwc_to_nchw(x: ArrayD<f32>) -> ArrayD<f32> {
    permute(x.view(), &[0, 3, 1, 2])
}

/// OIHW (ONNX) → HWIO (the conv kernel's layout).
pub fn oihw_to_hwio(w: &ArrayD<f32>) -> KernelResult<ArrayD<f32>> {
    permuted4(w, [2, 3, 1, 0], "OIHW filter")
}

pub struct OnnxConv {
    pub strides: [usize; 2],
    pub dilations: [usize; 2],
    pub pads: Pads,
    pub group: usize,
    /// The filter in HWIO when it is a constant (shared with the conv's padded form).
    pub filter: Option<Arc<ArrayD<f32>>>,
    /// That filter packed for the GEMM ([`pack_filter`]) on first use when the conv has one
    /// group (shared with the padded form).
    pub packed: Arc<PackOnce>,
}

impl Kernel for OnnxConv {
    fn run(&self, x: &[&Tensor]) -> KernelResult<Vec<Tensor>> {
        self.go(x, None, ChannelsLast::default())
    }

    /// With the per-channel scale, bias and activation of the ops after it (`interp::fusion`,
    /// which gives a conv with a bias of its own only an activation).
    fn run_fused(&self, x: &[&Tensor], ep: &Epilogue) -> Option<KernelResult<Vec<Tensor>>> {
        Some(self.go(x, Some(ep), ChannelsLast::default()))
    }

    /// The NHWC kernels work channels last anyway: a channels-last input or result only skips
    /// the transpose into or out of them (and a 1×1 conv reads and writes either layout
    /// through the GEMM's strides).
    fn takes_channels_last(&self) -> bool {
        true
    }

    fn run_channels_last(
        &self,
        x: &[&Tensor],
        ep: Option<&Epilogue>,
        layout: ChannelsLast,
    ) -> KernelResult<Vec<Tensor>> {
        self.go(x, ep, layout)
    }

    fn result_shapes(&self, x: &[&Tensor]) -> Option<KernelResult<Vec<(DType, Vec<usize>)>>> {
        Some(self.result_shape(x).map(|s| vec![(DType::F32, s)]))
    }

    /// The same conv with the zeros of a Pad before it as padding of its own. The kernels
    /// skip the taps that fall in their padding where they would add 0·w for each: the same
    /// sum (an accumulator that starts at +0 is never −0, so adding ±0 leaves it), as long
    /// as every weight is finite (0·∞ is NaN). A 1×1 filter is left alone: unpadded it runs
    /// as one product per image, padded through im2col, whose GEMM may sum in another order.
    fn padded(&self, extra: [(usize, usize); 2]) -> Option<Box<dyn Kernel>> {
        let (Pads::Explicit(p), Some(f)) = (&self.pads, &self.filter) else {
            return None;
        };
        if f.shape()[..2] == [1, 1] || !f.iter().all(|w| w.is_finite()) {
            return None;
        }
        let sum = |a: (usize, usize), b: (usize, usize)| (a.0 + b.0, a.1 + b.1);
        Some(Box::new(OnnxConv {
            pads: Pads::Explicit([sum(p[0], extra[0]), sum(p[1], extra[1])]),
            filter: Some(Arc::clone(f)),
            packed: Arc::clone(&self.packed),
            ..*self
        }))
    }
}

impl OnnxConv {
    /// [KH, KW, CI, CO] of the filter (HWIO): the constant's, or operand 1's (OIHW).
    fn filter_dims(&self, x: &[&Tensor]) -> KernelResult<[usize; 4]> {
        let (f, hwio) = match &self.filter {
            Some(f) => (f.shape(), true),
            None => (f32_arg(x, 1)?.shape(), false),
        };
        match (f, hwio) {
            (&[kh, kw, ci, co], true) | (&[co, ci, kh, kw], false) => Ok([kh, kw, ci, co]),
            _ => Err(format!("expected a 4-D OIHW filter, got shape {f:?}")),
        }
    }

    /// Checks `c` input channels and a bias operand against a filter of `ci` channels per
    /// group and `co` out.
    fn check_operands(&self, x: &[&Tensor], c: usize, ci: usize, co: usize) -> KernelResult<()> {
        let g = self.group;
        if g == 0 || c != ci * g || co % g != 0 {
            return Err(format!(
                "input has {c} channels, the filter expects {ci} per group × {g} groups"
            ));
        }
        match x.get(2) {
            Some(Tensor::F32(b)) if !b.is_empty() && b.len() != co => {
                Err(format!("bias has {} values for {co} output channels", b.len()))
            }
            _ => Ok(()),
        }
    }

    /// The NCHW result shape of [`OnnxConv::go`], without the arithmetic.
    fn result_shape(&self, x: &[&Tensor]) -> KernelResult<Vec<usize>> {
        let input = f32_arg(x, 0)?;
        let &[n, c, h, w] = input.shape() else {
            return Err(format!("expected a 4-D NCHW input, got shape {:?}", input.shape()));
        };
        let [kh, kw, ci, co] = self.filter_dims(x)?;
        self.check_operands(x, c, ci, co)?;
        let pad = self.pads.resolve([h, w], [kh, kw], self.strides, self.dilations);
        // one group's input against one group's filter: the window is the same for all
        let per_group = co / self.group;
        let y = conv_result_shape(
            &[n, h, w, ci],
            &[kh, kw, ci, per_group],
            self.strides,
            self.dilations,
            &pad,
            false,
        )?;
        Ok(vec![n, co, y[1], y[2]])
    }

    /// The convolution, then `fused` (whose bias, if any, stands in for the conv's own: the
    /// caller never gives both), reading operand 0 and writing the result as `layout` says.
    fn go(&self, x: &[&Tensor], fused: Option<&Epilogue>, layout: ChannelsLast) -> KernelResult<Vec<Tensor>> {
        let own_bias = matches!(x.get(2), Some(Tensor::F32(b)) if !b.is_empty());
        if own_bias && fused.is_some_and(|ep| ep.scale.is_some() || ep.bias.is_some()) {
            return Err("a conv with a bias of its own cannot take a fused scale or bias".into());
        }
        let input = f32_arg(x, 0)?;
        let owned;
        let f: &ArrayD<f32> = match &self.filter {
            Some(f) => f,
            None => {
                owned = oihw_to_hwio(f32_arg(x, 1)?)?;
                &owned
            }
        };
        let bias = match x.get(2) {
            Some(Tensor::F32(b)) if !b.is_empty() => Some(b.as_slice().ok_or("bias layout")?.to_vec()),
            _ => None,
        };
        if input.ndim() != 4 {
            return Err(format!("expected a 4-D NCHW input, got shape {:?}", input.shape()));
        }
        let [kh, kw, ci, co] = self.filter_dims(x)?;
        let c = input.shape()[if layout.input { 3 } else { 1 }];
        let g = self.group;
        self.check_operands(x, c, ci, co)?;
        let own = Epilogue {
            bias: bias.as_deref(),
            ..Default::default()
        };
        let ep = match fused {
            Some(f) => Some(Epilogue {
                bias: f.bias.or(bias.as_deref()),
                ..*f
            }),
            None => bias.as_ref().map(|_| own),
        };
        if let Some(e) = &ep {
            e.check(co)?;
        }
        let ep = ep.as_ref();
        let packed = match (&self.filter, g) {
            (Some(f), 1) => self.packed.get(|| pack_filter(f)),
            _ => None,
        };
        if let Some(y) = pointwise(input, f, packed, self, ep, layout) {
            return Ok(vec![Tensor::F32(y?)]);
        }
        let xs = match layout.input {
            true => Cow::Borrowed(input),
            false => Cow::Owned(nchw_to_nhwc(input)?),
        };
        let pad = self
            .pads
            .resolve([xs.shape()[1], xs.shape()[2]], [kh, kw], self.strides, self.dilations);
        let y = if g == 1 {
            conv2d_packed(&xs, f, packed, self.strides, self.dilations, &pad, ep)?
        } else if ci == 1 {
            // depthwise: output channel c·M + m reads input channel c
            let m = co / g;
            // a view: the filter is not copied for every sample
            let fd = f
                .view()
                .into_shape_with_order(IxDyn(&[kh, kw, g, m]))
                .map_err(|e| e.to_string())?;
            depthwise_conv2d(&xs, &fd, self.strides, self.dilations, &pad, ep)?
        } else {
            let per_out = co / g;
            let mut parts = Vec::with_capacity(g);
            for gi in 0..g {
                let xg = xs
                    .slice_axis(Axis(3), (gi * ci..(gi + 1) * ci).into())
                    .as_standard_layout()
                    .into_owned();
                let fg = f
                    .slice_axis(Axis(3), (gi * per_out..(gi + 1) * per_out).into())
                    .as_standard_layout()
                    .into_owned();
                parts.push(conv2d(&xg, &fg, self.strides, self.dilations, &pad, None)?);
            }
            let views: Vec<_> = parts.iter().map(|p| p.view()).collect();
            let mut y = super::join::concat_axis(&views, 3)?;
            if let Some(e) = ep {
                // NHWC here: channels last (concatenate's result need not be in C order)
                e.apply_on_axis(&mut y, 3)?;
            }
            y
        };
        Ok(vec![Tensor::F32(if layout.output { y } else { nhwc_to_nchw(y) })])
    }
}

/// A 1×1 convolution at stride 1 without padding or groups, as one product per image in
/// whichever layout its input and result are in, so that neither is transposed (most
/// convolutions of MobileNet-style models are of this kind): with X the image as `[H·W, ci]`
/// (read through its strides: pixels 1 apart and channels H·W apart in NCHW, the other way
/// round in NHWC) and F the filter `[ci, co]`, the result X·F is written as `[H·W, co]` for
/// NHWC or through transposed strides as `[co, H·W]` for NCHW. `None` for any other
/// convolution.
fn pointwise(
    x: &ArrayD<f32>,
    f: &ArrayD<f32>,
    packed: Option<&PackedMatrix>,
    conv: &OnnxConv,
    ep: Option<&Epilogue>,
    layout: ChannelsLast,
) -> Option<KernelResult<ArrayD<f32>>> {
    let &[1, 1, ci, co] = f.shape() else {
        return None;
    };
    let &[n, d1, d2, d3] = x.shape() else {
        return None;
    };
    let (c, h, w) = if layout.input { (d3, d1, d2) } else { (d1, d2, d3) };
    let unpadded = match conv.pads {
        Pads::Explicit(p) => p == [(0, 0); 2],
        Pads::SameUpper | Pads::SameLower => true,
    };
    if conv.group != 1 || conv.strides != [1, 1] || !unpadded || c != ci {
        return None;
    }
    let (xs, fs) = (x.as_slice()?, f.as_slice()?);
    let hw = h * w;
    if ci * hw == 0 || co == 0 || xs.len() != n * ci * hw {
        return None;
    }
    let packed = PackedMatrix::given_or_packed(packed, fs, ci, co)?;
    // X[pixel, channel] and Y[pixel, channel] as strides of one image
    let x_at = match layout.input {
        true => Strides { rs: ci as isize, cs: 1 },
        false => Strides { rs: 1, cs: hw as isize },
    };
    let y_at = match layout.output {
        true => Strides { rs: co as isize, cs: 1 },
        false => Strides { rs: 1, cs: hw as isize },
    };
    // the GEMMs write every value: no zero-fill first (it was 3 % of MobileNet's run)
    let total = n * co * hw;
    let mut y: Vec<f32> = Vec::with_capacity(total);
    let base = y.as_mut_ptr();
    for (i, img) in xs.chunks_exact(ci * hw).enumerate() {
        // SAFETY: the strides reach hw pixels × ci channels inside `img` and hw × co values
        // inside image i's part of `y`'s capacity (i < n), each written once
        if let Err(e) = unsafe { gemm_packed(hw, img.as_ptr(), x_at, &packed, base.add(i * co * hw), y_at, ep) } {
            return Some(Err(e));
        }
    }
    // SAFETY: the n images' blocks cover all `total` values, each written by its GEMM
    unsafe { y.set_len(total) };
    let shape = if layout.output { [n, h, w, co] } else { [n, co, h, w] };
    Some(ArrayD::from_shape_vec(IxDyn(&shape), y).map_err(|e| e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::Dimension;

    fn ramp(shape: &[usize]) -> ArrayD<f32> {
        ArrayD::from_shape_fn(IxDyn(shape), |i| (i.as_array_view().sum() % 7) as f32 * 0.25 - 0.75)
    }

    /// `result_shapes` gives the shape `run` computes, for every path of `go`: 1×1 GEMM,
    /// im2col, row GEMMs, depthwise, grouped; explicit and SAME pads; a filter as a constant or
    /// as an operand.
    #[test]
    fn result_shapes_are_the_shapes_run_computes() {
        let cases: [(&[usize], &[usize], Pads, [usize; 2], [usize; 2], usize); 7] = [
            (
                &[2, 3, 7, 6],
                &[5, 3, 1, 1],
                Pads::Explicit([(0, 0); 2]),
                [1, 1],
                [1, 1],
                1,
            ),
            (
                &[1, 3, 7, 6],
                &[4, 3, 3, 2],
                Pads::Explicit([(1, 2), (0, 1)]),
                [2, 1],
                [1, 1],
                1,
            ),
            (&[1, 8, 5, 20], &[4, 8, 3, 5], Pads::SameUpper, [1, 2], [1, 1], 1),
            (&[1, 4, 9, 8], &[4, 1, 3, 3], Pads::SameLower, [2, 2], [1, 1], 4),
            (
                &[1, 4, 9, 8],
                &[8, 1, 3, 3],
                Pads::Explicit([(2, 2), (1, 1)]),
                [1, 1],
                [2, 1],
                4,
            ),
            (
                &[1, 6, 6, 5],
                &[4, 3, 2, 2],
                Pads::Explicit([(0, 1), (1, 0)]),
                [1, 1],
                [1, 1],
                2,
            ),
            (
                &[1, 3, 5, 5],
                &[2, 3, 5, 5],
                Pads::Explicit([(0, 0); 2]),
                [1, 1],
                [1, 1],
                1,
            ),
        ];
        for (xs, ws, pads, strides, dilations, group) in cases {
            let (x, w) = (Tensor::F32(ramp(xs)), Tensor::F32(ramp(ws)));
            let b = Tensor::F32(ramp(&[ws[0]]));
            for constant in [false, true] {
                let conv = OnnxConv {
                    strides,
                    dilations,
                    pads: pads.clone(),
                    group,
                    filter: constant.then(|| Arc::new(oihw_to_hwio(w.as_f32().unwrap()).unwrap())),
                    packed: Arc::default(),
                };
                let args = [&x, &w, &b];
                let y = conv.run(&args).unwrap();
                let shapes = conv.result_shapes(&args).unwrap().unwrap();
                assert_eq!(
                    shapes,
                    vec![(DType::F32, y[0].shape().to_vec())],
                    "{xs:?} {ws:?} {pads:?}"
                );
            }
        }
    }

    #[test]
    fn result_shapes_refuse_what_run_refuses() {
        let x = Tensor::F32(ramp(&[1, 3, 4, 4]));
        for (ws, bias, group) in [
            (&[4usize, 2, 3, 3][..], 4, 1),
            (&[4, 3, 3, 3], 5, 1),
            (&[4, 1, 3, 3], 4, 2),
            (&[4, 3, 5, 5], 4, 1),
        ] {
            let conv = OnnxConv {
                strides: [1, 1],
                dilations: [1, 1],
                pads: Pads::Explicit([(0, 0); 2]),
                group,
                filter: None,
                packed: Arc::default(),
            };
            let (w, b) = (Tensor::F32(ramp(ws)), Tensor::F32(ramp(&[bias])));
            let args = [&x, &w, &b];
            assert_eq!(
                conv.run(&args).err(),
                conv.result_shapes(&args).unwrap().err(),
                "{ws:?} bias {bias} group {group}"
            );
        }
    }
}
