//! ONNX's NCHW convolution on the NHWC kernels: the input is transposed in and the result out,
//! a constant OIHW filter is brought to HWIO once, and groups run as depthwise (one input
//! channel per group) or as one convolution per group.

use super::conv::{conv2d, depthwise_conv2d, Padding};
use super::epilogue::Epilogue;
use super::permute::permute;
use super::{f32_arg, Kernel, KernelResult};
use crate::tensor::Tensor;
use ndarray::{ArrayD, Axis, IxDyn};

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
    /// The filter in HWIO when it is a constant.
    pub filter: Option<ArrayD<f32>>,
}

impl Kernel for OnnxConv {
    fn run(&self, x: &[&Tensor]) -> KernelResult<Vec<Tensor>> {
        self.go(x, None)
    }

    /// With the per-channel scale, bias and activation of the ops after it (`interp::fusion`,
    /// which gives a conv with a bias of its own only an activation).
    fn run_fused(&self, x: &[&Tensor], ep: &Epilogue) -> Option<KernelResult<Vec<Tensor>>> {
        let own_bias = matches!(x.get(2), Some(Tensor::F32(b)) if !b.is_empty());
        if own_bias && (ep.scale.is_some() || ep.bias.is_some()) {
            return Some(Err(
                "a conv with a bias of its own cannot take a fused scale or bias".into()
            ));
        }
        Some(self.go(x, Some(ep)))
    }
}

impl OnnxConv {
    /// The convolution, then `fused` (whose bias, if any, stands in for the conv's own: the
    /// caller never gives both).
    fn go(&self, x: &[&Tensor], fused: Option<&Epilogue>) -> KernelResult<Vec<Tensor>> {
        let input = f32_arg(x, 0)?;
        let owned;
        let f = match &self.filter {
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
        let (kh, kw, ci, co) = (f.shape()[0], f.shape()[1], f.shape()[2], f.shape()[3]);
        let c = input.shape()[1];
        let g = self.group;
        if g == 0 || c != ci * g || co % g != 0 {
            return Err(format!(
                "input has {c} channels, the filter expects {ci} per group × {g} groups"
            ));
        }
        if bias.as_ref().is_some_and(|b| b.len() != co) {
            return Err(format!(
                "bias has {} values for {co} output channels",
                bias.map(|b| b.len()).unwrap_or(0)
            ));
        }
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
        if let Some(y) = pointwise_nchw(input, f, self, ep) {
            return Ok(vec![Tensor::F32(y?)]);
        }
        let xs = nchw_to_nhwc(input)?;
        let pad = self
            .pads
            .resolve([xs.shape()[1], xs.shape()[2]], [kh, kw], self.strides, self.dilations);
        let y = if g == 1 {
            conv2d(&xs, f, self.strides, self.dilations, &pad, ep)?
        } else if ci == 1 {
            // depthwise: output channel c·M + m reads input channel c
            let m = co / g;
            let fd = f
                .clone()
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
            let mut y = super::layout::concat_axis(&views, 3)?;
            if let Some(e) = ep {
                // NHWC here: channels last (concatenate's result need not be in C order)
                e.apply_on_axis(&mut y, 3)?;
            }
            y
        };
        Ok(vec![Tensor::F32(nhwc_to_nchw(y))])
    }
}

/// A 1×1 convolution at stride 1 without padding or groups, in NCHW as it stands: per image
/// one product `W[co, ci] · X[ci, H·W]`, which is the output's `[co, H·W]`, so neither the input
/// nor the output is transposed (most convolutions of MobileNet-style models are of this
/// kind). `None` for any other convolution.
fn pointwise_nchw(
    x: &ArrayD<f32>,
    f: &ArrayD<f32>,
    conv: &OnnxConv,
    ep: Option<&Epilogue>,
) -> Option<KernelResult<ArrayD<f32>>> {
    let (&[n, c, h, w], &[1, 1, ci, co]) = (x.shape(), f.shape()) else {
        return None;
    };
    let unpadded = match conv.pads {
        Pads::Explicit(p) => p == [(0, 0); 2],
        Pads::SameUpper | Pads::SameLower => true,
    };
    if conv.group != 1 || conv.strides != [1, 1] || !unpadded || c != ci {
        return None;
    }
    let (xs, fs) = (x.as_slice()?, f.as_slice()?);
    let hw = h * w;
    let mut y = vec![0f32; n * co * hw];
    for (img, out) in xs.chunks_exact(ci * hw).zip(y.chunks_exact_mut(co * hw)) {
        // the HWIO filter [ci, co] read as W[co, ci]: row stride 1, column stride co
        super::matmul::gemm_strided(co, hw, ci, fs, 1, co as isize, img, hw as isize, 1, out);
        if let Some(e) = ep {
            // channel oc is the plane oc
            e.apply_planes(out, co, hw);
        }
    }
    Some(ArrayD::from_shape_vec(IxDyn(&[n, co, h, w]), y).map_err(|e| e.to_string()))
}
