//! The ONNX table's neural-network builders: convolutions, pools, Gemm/MatMul, softmax, the
//! normalizations and Resize, each reading its attributes once.

use super::*;
use crate::interp::kernels::elementwise::broadcast_shape;
use crate::interp::kernels::permute::permute;

pub(super) fn pads_of(d: &OpDesc) -> Result<Pads, String> {
    match d.str_attr("auto_pad").unwrap_or("NOTSET") {
        "SAME_UPPER" => Ok(Pads::SameUpper),
        "SAME_LOWER" => Ok(Pads::SameLower),
        "VALID" => Ok(Pads::Explicit([(0, 0), (0, 0)])),
        "NOTSET" => match d.ints_attr("pads").as_deref() {
            None => Ok(Pads::Explicit([(0, 0), (0, 0)])),
            Some([t, l, b, r]) if [t, l, b, r].iter().all(|v| **v >= 0) => {
                Ok(Pads::Explicit([(*t as usize, *b as usize), (*l as usize, *r as usize)]))
            }
            Some(p) => Err(format!("pads = {p:?} is not supported (2-D, non-negative)")),
        },
        a => Err(format!("auto_pad = \"{a}\" is not supported")),
    }
}

pub(super) fn pair(d: &OpDesc, name: &str, default: usize) -> Result<[usize; 2], String> {
    match d.ints_attr(name).as_deref() {
        None => Ok([default, default]),
        Some([h, w]) if *h > 0 && *w > 0 => Ok([*h as usize, *w as usize]),
        Some(v) => Err(format!("{name} = {v:?} is not supported (2-D only)")),
    }
}

pub(super) fn conv(d: &OpDesc) -> Result<Box<dyn Kernel>, String> {
    if let Some(Some(t)) = d.operand_types.first() {
        if t.dims.len() != 4 {
            return Err(format!(
                "Conv of rank {} is not supported (2-D NCHW only)",
                t.dims.len()
            ));
        }
    }
    let group = d.int_attr("group", 1);
    if group < 1 {
        return Err(format!("group = {group}"));
    }
    let filter = match d.consts.get(1).and_then(Option::as_deref) {
        Some(Tensor::F32(w)) => Some(std::sync::Arc::new(oihw_to_hwio(w)?)),
        _ => None,
    };
    Ok(Box::new(OnnxConv {
        strides: pair(d, "strides", 1)?,
        dilations: pair(d, "dilations", 1)?,
        pads: pads_of(d)?,
        group: group as usize,
        filter,
        packed: Default::default(),
    }))
}

pub(super) fn conv_transpose(d: &OpDesc) -> Result<Box<dyn Kernel>, String> {
    let group = d.int_attr("group", 1);
    if group < 1 {
        return Err(format!("group = {group}"));
    }
    let (strides, dilations) = (pair(d, "strides", 1)?, pair(d, "dilations", 1)?);
    let extra = match d.ints_attr("output_padding").as_deref() {
        None => [0, 0],
        Some([h, w]) if *h >= 0 && *w >= 0 => [*h as usize, *w as usize],
        Some(v) => return Err(format!("output_padding = {v:?} is not supported (2-D only)")),
    };
    let output_shape = d.ints_attr("output_shape");
    let auto = d.choice("auto_pad", &["NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"], "NOTSET")?;
    let pads = match (auto.as_str(), d.ints_attr("pads").as_deref()) {
        ("NOTSET", Some([t, l, b, r])) if [t, l, b, r].iter().all(|v| **v >= 0) => {
            [(*t as usize, *b as usize), (*l as usize, *r as usize)]
        }
        ("NOTSET", Some(p)) => return Err(format!("pads = {p:?} is not supported (2-D, non-negative)")),
        _ => [(0, 0), (0, 0)],
    };
    Ok(one(move |x| {
        let (input, w) = (f32_arg(x, 0)?, f32_arg(x, 1)?);
        if input.ndim() != 4 || w.ndim() != 4 {
            return Err("ConvTranspose is supported for 2-D NCHW only".into());
        }
        let bias = match x.get(2) {
            Some(Tensor::F32(b)) if !b.is_empty() => Some(b.iter().copied().collect::<Vec<f32>>()),
            _ => None,
        };
        let k = [w.shape()[2], w.shape()[3]];
        let hw = [input.shape()[2], input.shape()[3]];
        // a requested output size (output_shape, or input × stride for SAME_*) sets the pads
        let want: Option<[usize; 2]> = match (&output_shape, auto.as_str()) {
            (Some(s), _) if s.len() >= 2 => Some([s[s.len() - 2] as usize, s[s.len() - 1] as usize]),
            (_, "SAME_UPPER" | "SAME_LOWER") => Some([hw[0] * strides[0], hw[1] * strides[1]]),
            _ => None,
        };
        let mut g = Transposed2d {
            strides,
            dilations,
            pads,
            group: group as usize,
        };
        // pads from a requested size; a size beyond the full output gives negative pads, rows
        // and columns past the full output that only the bias reaches
        let mut grow = [(0usize, 0usize); 2];
        if let Some(want) = want {
            for i in 0..2 {
                let full = strides[i] * (hw[i] - 1) + extra[i] + (k[i] - 1) * dilations[i] + 1;
                let total = full as i64 - want[i] as i64;
                let half = total.div_euclid(2);
                let (b, e) = if auto == "SAME_UPPER" {
                    (half, total - half)
                } else {
                    (total - half, half)
                };
                g.pads[i] = (b.max(0) as usize, e.max(0) as usize);
                grow[i] = ((-b).max(0) as usize, (-e).max(0) as usize);
            }
        }
        let out = [
            g.out_dim(0, hw[0], k[0], extra[0])?,
            g.out_dim(1, hw[1], k[1], extra[1])?,
        ];
        if grow == [(0, 0); 2] {
            return Ok(Tensor::F32(conv_transpose2d(input, w, bias.as_deref(), &g, out)?));
        }
        let y = Tensor::F32(conv_transpose2d(input, w, None, &g, out)?);
        let [(t, b), (l, r)] = grow.map(|(p, q)| (p as i64, q as i64));
        let y = layout::pad(&y, &[0, 0, 0, 0, t, b, l, r], 0.0)?;
        match bias {
            Some(b) => {
                let bias = Tensor::F32(super::super::kernels::from_vec(&[b.len(), 1, 1], b)?);
                arith(BinOp::Add, &y, &bias)
            }
            None => Ok(y),
        }
    }))
}

pub(super) fn resize_op(d: &OpDesc) -> Result<Box<dyn Kernel>, String> {
    let nearest = match d
        .choice(
            "nearest_mode",
            &["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"],
            "round_prefer_floor",
        )?
        .as_str()
    {
        "round_prefer_ceil" => Nearest::RoundPreferCeil,
        "floor" => Nearest::Floor,
        "ceil" => Nearest::Ceil,
        _ => Nearest::RoundPreferFloor,
    };
    let mode = match d.choice("mode", &["nearest", "linear", "cubic"], "nearest")?.as_str() {
        "linear" => Mode::Linear,
        "cubic" => Mode::Cubic(d.f64_attr("cubic_coeff_a", -0.75)),
        _ => Mode::Nearest(nearest),
    };
    let coords = match d
        .choice(
            "coordinate_transformation_mode",
            &[
                "half_pixel",
                "half_pixel_symmetric",
                "pytorch_half_pixel",
                "align_corners",
                "asymmetric",
                "tf_half_pixel_for_nn",
                "tf_crop_and_resize",
            ],
            "half_pixel",
        )?
        .as_str()
    {
        "half_pixel_symmetric" => Coordinates::HalfPixelSymmetric,
        "pytorch_half_pixel" => Coordinates::PytorchHalfPixel,
        "align_corners" => Coordinates::AlignCorners,
        "asymmetric" => Coordinates::Asymmetric,
        "tf_half_pixel_for_nn" => Coordinates::TfHalfPixelForNn,
        "tf_crop_and_resize" => Coordinates::TfCropAndResize,
        _ => Coordinates::HalfPixel,
    };
    let antialias = d.int_attr("antialias", 0) != 0;
    if antialias && matches!(mode, Mode::Nearest(_)) {
        return Err("Resize with antialias = 1 and mode = \"nearest\" is not defined".into());
    }
    let filter = Filter {
        mode,
        coords,
        antialias,
        exclude_outside: d.int_attr("exclude_outside", 0) != 0,
        extrapolation: d.f64_attr("extrapolation_value", 0.0),
    };
    let policy = d.choice(
        "keep_aspect_ratio_policy",
        &["stretch", "not_larger", "not_smaller"],
        "stretch",
    )?;
    let axes_attr = d.ints_attr("axes");
    // opset 10: (X, scales); later: (X, roi, scales, sizes)
    let (roi_at, scales_at) = if d.operand_types.len() == 2 {
        (None, 1)
    } else {
        (Some(1), 2)
    };
    Ok(one(move |x| {
        let floats = |t: &Tensor| -> KernelResult<Vec<f64>> {
            match layout::cast(t, DType::F64)? {
                Tensor::F64(a) => Ok(a.iter().copied().collect()),
                _ => Err("scales".into()),
            }
        };
        let in_shape = x[0].shape().to_vec();
        let rank = in_shape.len();
        let axes: Vec<usize> = match &axes_attr {
            None => (0..rank).collect(),
            Some(a) => a.iter().map(|&v| norm_axis(v, rank)).collect::<KernelResult<_>>()?,
        };
        let mut plan: Vec<AxisResize> = in_shape
            .iter()
            .map(|&n| AxisResize {
                scale: 1.0,
                len_out: n,
                roi: (0.0, 1.0),
            })
            .collect();
        let given = |i: usize| -> Option<&Tensor> { x.get(i).copied().filter(|t| !t.is_empty()) };
        match (given(scales_at), given(3)) {
            (Some(s), _) => {
                let s = floats(s)?;
                if s.len() != axes.len() {
                    return Err(format!("{} scales for {} axes", s.len(), axes.len()));
                }
                for (&ax, &k) in axes.iter().zip(&s) {
                    plan[ax].scale = k;
                    plan[ax].len_out = (in_shape[ax] as f64 * k).floor().max(0.0) as usize;
                }
            }
            (None, Some(sz)) => {
                let sizes = int_arg(&[sz], 0)?;
                if sizes.len() != axes.len() {
                    return Err(format!("{} sizes for {} axes", sizes.len(), axes.len()));
                }
                let ratio = |i: usize| sizes[i].max(0) as f64 / in_shape[axes[i]].max(1) as f64;
                let common = match policy.as_str() {
                    "not_larger" => Some((0..axes.len()).map(ratio).fold(f64::INFINITY, f64::min)),
                    "not_smaller" => Some((0..axes.len()).map(ratio).fold(0.0, f64::max)),
                    _ => None,
                };
                for (i, &ax) in axes.iter().enumerate() {
                    match common {
                        // one scale for every axis, the sizes rounded half up from it
                        Some(k) => {
                            plan[ax].scale = k;
                            plan[ax].len_out = (k * in_shape[ax] as f64 + 0.5).floor() as usize;
                        }
                        None => {
                            plan[ax].scale = ratio(i);
                            plan[ax].len_out = sizes[i].max(0) as usize;
                        }
                    }
                }
            }
            (None, None) => return Err("Resize needs scales or sizes".into()),
        }
        if coords == Coordinates::TfCropAndResize {
            let roi = roi_at
                .and_then(given)
                .ok_or("tf_crop_and_resize needs a region of interest (input 1)")?;
            let roi = floats(roi)?;
            if roi.len() != 2 * axes.len() {
                return Err(format!(
                    "a region of interest of {} values for {} axes",
                    roi.len(),
                    axes.len()
                ));
            }
            for (i, &ax) in axes.iter().enumerate() {
                plan[ax].roi = (roi[i], roi[axes.len() + i]);
            }
        }
        resize(x[0], &plan, &filter)
    }))
}

/// MaxPool / AveragePool. 2-D f32 pools without dilations, `ceil_mode` or indices run on the
/// NHWC kernel; every other form (1-D, 3-D, dilated, ceil_mode, MaxPool's Indices, integer
/// inputs) on the general one, [`PoolNd`].
pub(super) fn pool(d: &OpDesc, max: bool) -> Result<Box<dyn Kernel>, String> {
    let k: Vec<usize> = match d.ints_attr("kernel_shape") {
        Some(k) if !k.is_empty() && k.iter().all(|&v| v > 0) => k.iter().map(|&v| v as usize).collect(),
        Some(k) => return Err(format!("kernel_shape = {k:?}")),
        None => return Err("kernel_shape is required".into()),
    };
    let r = k.len();
    let per_axis = |name: &str, default: usize| -> Result<Vec<usize>, String> {
        match d.ints_attr(name) {
            None => Ok(vec![default; r]),
            Some(v) if v.len() == r && v.iter().all(|&x| x > 0) => Ok(v.iter().map(|&x| x as usize).collect()),
            Some(v) => Err(format!("{name} = {v:?} does not fit kernel_shape {k:?}")),
        }
    };
    let (strides, dilations) = (per_axis("strides", 1)?, per_axis("dilations", 1)?);
    let ceil = d.int_attr("ceil_mode", 0) != 0;
    let include_pad = !max && d.int_attr("count_include_pad", 0) != 0;
    let indices = max && d.result_types.len() > 1;
    let auto = d.choice("auto_pad", &["NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"], "NOTSET")?;
    let explicit: Vec<usize> = match d.ints_attr("pads") {
        Some(p) if auto == "NOTSET" && p.len() == 2 * r && p.iter().all(|&v| v >= 0) => {
            p.iter().map(|&v| v as usize).collect()
        }
        Some(p) if auto == "NOTSET" => return Err(format!("pads = {p:?} does not fit kernel_shape {k:?}")),
        _ => vec![0; 2 * r],
    };
    let fast = (r == 2 && !ceil && dilations.iter().all(|&v| v == 1) && !indices)
        .then(|| -> Result<_, String> { Ok(([k[0], k[1]], [strides[0], strides[1]], pads_of(d)?)) })
        .transpose()?;
    let general = PoolNd {
        kernel: k,
        strides,
        dilations,
        pads_begin: explicit[..r].to_vec(),
        pads_end: explicit[r..].to_vec(),
        ceil,
        max,
        count_include_pad: include_pad,
        column_major: d.int_attr("storage_order", 0) != 0,
    };
    Ok(Box::new(FnKernel(move |x: &[&Tensor]| {
        if let (Some((k, s, pads)), Tensor::F32(a)) = (&fast, x[0]) {
            return Ok(vec![pool2d_nchw(a, *k, *s, pads, max, include_pad)?]);
        }
        let shape = x[0].shape();
        let mut p = general.clone();
        if auto.starts_with("SAME") {
            for i in 0..r {
                let n = shape.get(i + 2).copied().unwrap_or(0);
                (p.pads_begin[i], p.pads_end[i]) =
                    same_pads(n, p.kernel[i], p.strides[i], p.dilations[i], auto == "SAME_UPPER");
            }
        }
        let Tensor::F64(v) = layout::cast(x[0], DType::F64)? else {
            return Err("pool input".into());
        };
        let flat: Vec<f64> = v.iter().copied().collect();
        let (y, out_shape, idx) = p.run(&flat, shape)?;
        let y = layout::cast(
            &Tensor::F64(super::super::kernels::from_vec(&out_shape, y)?),
            x[0].dtype(),
        )?;
        let mut out = vec![y];
        if indices {
            out.push(Tensor::I64(super::super::kernels::from_vec(&out_shape, idx)?));
        }
        Ok(out)
    })))
}

/// The NHWC 2-D pool on an NCHW input.
fn pool2d_nchw(
    a: &ndarray::ArrayD<f32>,
    k: [usize; 2],
    s: [usize; 2],
    pads: &Pads,
    max: bool,
    include_pad: bool,
) -> KernelResult<Tensor> {
    let xs = nchw_to_nhwc(a)?;
    let p = pads.resolve([xs.shape()[1], xs.shape()[2]], k, s, [1, 1]);
    let y = match (&p, include_pad) {
        (Padding::Explicit([(t, b), (l, r)]), true) => {
            // zeros count in the average: pad first, then pool without padding
            let padded = layout::pad(
                &Tensor::F32(xs),
                &[0, 0, *t as i64, *b as i64, *l as i64, *r as i64, 0, 0],
                0.0,
            )?;
            let Tensor::F32(pa) = padded else {
                return Err("pad".into());
            };
            pool2d(&pa, k, s, &Padding::Valid, max)?
        }
        _ => pool2d(&xs, k, s, &p, max)?,
    };
    Ok(Tensor::F32(nhwc_to_nchw(y)))
}

pub(super) fn global_pool(x: &Tensor, op: Reduce) -> KernelResult<Tensor> {
    let r = x.shape().len();
    if r < 3 {
        return Err(format!("global pooling of rank {r}"));
    }
    let axes: Vec<i64> = (2..r as i64).collect();
    reduce(x, &axes, true, op)
}

/// ONNX GlobalAveragePool. It takes the value a convolution wrote channels last as it is
/// (summing each channel's pixels side by side, in the order the NCHW sums take), so that the
/// convolution before it does not write its channels transposed.
pub(super) struct GlobalAveragePool;

impl Kernel for GlobalAveragePool {
    fn run(&self, x: &[&Tensor]) -> KernelResult<Vec<Tensor>> {
        Ok(vec![global_pool(x[0], Reduce::Mean)?])
    }

    fn takes_channels_last(&self) -> bool {
        true
    }

    // the result is [N, C, 1, 1]; channels last, [N, 1, 1, C]: the same values in one order
    fn run_channels_last(
        &self,
        x: &[&Tensor],
        _ep: Option<&crate::interp::kernels::epilogue::Epilogue>,
        layout: crate::interp::kernels::ChannelsLast,
    ) -> KernelResult<Vec<Tensor>> {
        // [N, C] from the NHWC value, or [N, C, 1, 1] from the NCHW one: the same order
        let means = match layout.input {
            true => crate::interp::kernels::reduce::spatial_sum_channels_last(f32_arg(x, 0)?, Reduce::Mean)
                .ok_or_else(|| {
                    format!(
                        "a channels-last GlobalAveragePool needs a 4-D f32 value, got shape {:?}",
                        x[0].shape()
                    )
                })?,
            false => match global_pool(x[0], Reduce::Mean)? {
                Tensor::F32(y) => y,
                other => {
                    return Err(format!(
                        "a channels-last GlobalAveragePool of a {} value",
                        other.dtype()
                    ))
                }
            },
        };
        let n = means.shape()[0];
        let c = means.len() / n.max(1);
        let dims: [usize; 4] = if layout.output { [n, 1, 1, c] } else { [n, c, 1, 1] };
        Ok(vec![Tensor::F32(
            means.into_shape_with_order(IxDyn(&dims)).map_err(|e| e.to_string())?,
        )])
    }
}

pub(super) fn gemm(d: &OpDesc) -> Result<Box<dyn Kernel>, String> {
    let (ta, tb) = (d.int_attr("transA", 0) != 0, d.int_attr("transB", 0) != 0);
    let (alpha, beta) = (d.f64_attr("alpha", 1.0) as f32, d.f64_attr("beta", 1.0) as f32);
    Ok(one(move |x| {
        let mut y = matmul(f32_arg(x, 0)?, f32_arg(x, 1)?, ta, tb)?;
        if alpha != 1.0 {
            y.mapv_inplace(|v| v * alpha);
        }
        match x.get(2) {
            Some(c) if !c.is_empty() => {
                let c = if beta != 1.0 {
                    Tensor::F32(f32_arg(x, 2)?.mapv(|v| v * beta))
                } else {
                    (*c).clone()
                };
                arith(BinOp::Add, &Tensor::F32(y), &c)
            }
            _ => Ok(Tensor::F32(y)),
        }
    }))
}

pub(super) fn softmax_op(d: &OpDesc, log: bool) -> Result<Box<dyn Kernel>, String> {
    let axis = d.int_attr("axis", -1);
    let run = move |x: &[&Tensor]| {
        let a = f32_arg(x, 0)?;
        let ax = norm_axis(axis, a.ndim())?;
        let last = a.ndim() - 1;
        if ax == last {
            return Ok(vec![Tensor::F32(softmax(a, log)?)]);
        }
        let mut perm: Vec<usize> = (0..a.ndim()).collect();
        perm.swap(ax, last);
        let t = permute(a.view(), &perm);
        let y = softmax(&t, log)?;
        Ok(vec![Tensor::F32(permute(y.view(), &perm))])
    };
    // operand 0's shape, once its axis is known to be one of its own
    let shapes = move |x: &[&Tensor]| match x.first() {
        Some(Tensor::F32(a)) => norm_axis(axis, a.ndim())
            .ok()
            .map(|_| Ok(vec![(DType::F32, a.shape().to_vec())])),
        _ => None,
    };
    Ok(Box::new(Shaped(run, shapes)))
}

/// BatchNormalization. In training mode (deterministic, unlike Dropout's) the statistics are
/// the batch's own — mean and population variance over every axis but the channels — and the
/// running ones come out updated: `running · momentum + batch · (1 − momentum)`.
pub(super) fn batch_normalization(d: &OpDesc) -> Result<Box<dyn Kernel>, String> {
    let eps = d.f64_attr("epsilon", 1e-5) as f32;
    if d.int_attr("training_mode", 0) != 0 {
        let momentum = d.f64_attr("momentum", 0.9) as f32;
        return Ok(Box::new(FnKernel(move |x: &[&Tensor]| {
            let a = f32_arg(x, 0)?;
            let axes: Vec<i64> = (0..a.ndim() as i64).filter(|&i| i != 1).collect();
            let Tensor::F32(mean) = reduce(x[0], &axes, false, Reduce::Mean)? else {
                return Err("mean".into());
            };
            let mut shape = vec![1usize; a.ndim()];
            shape[1] = mean.len();
            let centred = a - &mean
                .clone()
                .into_shape_with_order(shape.clone())
                .map_err(|e| e.to_string())?;
            let Tensor::F32(var) = reduce(&Tensor::F32(centred.mapv(|v| v * v)), &axes, false, Reduce::Mean)? else {
                return Err("variance".into());
            };
            let y = batch_norm(a, f32_arg(x, 1)?, f32_arg(x, 2)?, &mean, &var, eps, 1)?;
            let blend =
                |run: &ndarray::ArrayD<f32>, batch: &ndarray::ArrayD<f32>| run * momentum + batch * (1.0 - momentum);
            Ok(vec![
                Tensor::F32(y),
                Tensor::F32(blend(f32_arg(x, 3)?, &mean)),
                Tensor::F32(blend(f32_arg(x, 4)?, &var)),
            ])
        })));
    }
    Ok(Box::new(FnKernel(move |x: &[&Tensor]| {
        let y = batch_norm(
            f32_arg(x, 0)?,
            f32_arg(x, 1)?,
            f32_arg(x, 2)?,
            f32_arg(x, 3)?,
            f32_arg(x, 4)?,
            eps,
            1,
        )?;
        Ok(vec![Tensor::F32(y)])
    })))
}

pub(super) fn instance_norm(d: &OpDesc) -> Result<Box<dyn Kernel>, String> {
    let eps = d.f64_attr("epsilon", 1e-5) as f32;
    Ok(one(move |x| {
        let a = f32_arg(x, 0)?;
        if a.ndim() < 3 {
            return Err("InstanceNormalization needs N, C and spatial dims".into());
        }
        let mut y = normalize(a, 2, eps);
        let (s, b) = (f32_arg(x, 1)?, f32_arg(x, 2)?);
        for (ch, mut sub) in y.axis_iter_mut(Axis(1)).enumerate() {
            let (k, o) = (
                s.as_slice().map(|v| v[ch]).unwrap_or(1.0),
                b.as_slice().map(|v| v[ch]).unwrap_or(0.0),
            );
            sub.mapv_inplace(|v| v * k + o);
        }
        Ok(Tensor::F32(y))
    }))
}

/// LayerNormalization, with its optional Mean and InvStdDev outputs (shaped like the input
/// with the normalized dims set to 1).
pub(super) fn layer_norm(d: &OpDesc) -> Result<Box<dyn Kernel>, String> {
    let (axis, eps) = (d.int_attr("axis", -1), d.f64_attr("epsilon", 1e-5) as f32);
    let outputs = d.result_types.len().max(1);
    // one output over f32 operands: the broadcast of the input, the scale and the bias (the
    // Mean and InvStdDev outputs, other types and operands that do not fit are left to a run)
    let shapes = move |x: &[&Tensor]| -> ResultShapes {
        if outputs != 1 || x.len() < 2 || !x.iter().all(|t| matches!(t, Tensor::F32(_))) {
            return None;
        }
        norm_axis(axis, x[0].shape().len()).ok()?;
        let mut shape = broadcast_shape(x[0].shape(), x[1].shape()).ok()?;
        if let Some(b) = x.get(2).filter(|b| !b.is_empty()) {
            shape = broadcast_shape(&shape, b.shape()).ok()?;
        }
        Some(Ok(vec![(DType::F32, shape)]))
    };
    let run = move |x: &[&Tensor]| {
        let a = f32_arg(x, 0)?;
        let ax = norm_axis(axis, a.ndim())?;
        let y = Tensor::F32(normalize(a, ax, eps));
        let y = arith(BinOp::Mul, &y, x[1])?;
        let y = match x.get(2) {
            Some(b) if !b.is_empty() => arith(BinOp::Add, &y, b)?,
            _ => y,
        };
        let mut out = vec![y];
        if outputs > 1 {
            let (mean, inv) = row_moments(a, ax, eps)?;
            out.push(Tensor::F32(mean));
            out.push(Tensor::F32(inv));
            out.truncate(outputs);
        }
        Ok(out)
    };
    Ok(Box::new(Shaped(run, shapes)))
}

/// Mean and 1/√(σ² + ε) of every slice over the dims from `axis` on, kept as size-1 dims.
fn row_moments(
    a: &ndarray::ArrayD<f32>,
    axis: usize,
    eps: f32,
) -> KernelResult<(ndarray::ArrayD<f32>, ndarray::ArrayD<f32>)> {
    let inner: usize = a.shape()[axis..].iter().product();
    let mut shape = a.shape().to_vec();
    shape[axis..].iter_mut().for_each(|d| *d = 1);
    let a = a.as_standard_layout();
    let flat = a.as_slice().ok_or("layout")?;
    let (mut m, mut s) = (Vec::new(), Vec::new());
    for row in flat.chunks(inner.max(1)) {
        let n = row.len() as f32;
        let mean = row.iter().sum::<f32>() / n;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / n;
        m.push(mean);
        s.push(1.0 / (var + eps).sqrt());
    }
    Ok((
        ndarray::ArrayD::from_shape_vec(shape.clone(), m).map_err(|e| e.to_string())?,
        ndarray::ArrayD::from_shape_vec(shape, s).map_err(|e| e.to_string())?,
    ))
}

/// RMSNormalization: x / √(mean(x²) + ε) · scale over the dims from `axis` on.
pub(super) fn rms_norm(d: &OpDesc) -> Result<Box<dyn Kernel>, String> {
    let (axis, eps) = (d.int_attr("axis", -1), d.f64_attr("epsilon", 1e-5) as f32);
    Ok(one(move |x| {
        let a = f32_arg(x, 0)?;
        let ax = norm_axis(axis, a.ndim())?;
        let inner: usize = a.shape()[ax..].iter().product();
        let mut y = a.as_standard_layout().into_owned();
        if let Some(s) = y.as_slice_mut() {
            for row in s.chunks_mut(inner.max(1)) {
                let ms = row.iter().map(|v| v * v).sum::<f32>() / row.len() as f32;
                let inv = 1.0 / (ms + eps).sqrt();
                row.iter_mut().for_each(|v| *v *= inv);
            }
        }
        arith(
            BinOp::Mul,
            &Tensor::F32(y),
            x.get(1).ok_or("RMSNormalization without a scale")?,
        )
    }))
}

/// LRN across channels.
pub(super) fn lrn_op(d: &OpDesc) -> Result<Box<dyn Kernel>, String> {
    let size = d.int_attr("size", 0);
    if size < 1 {
        return Err(format!("LRN size = {size}"));
    }
    let (alpha, beta, bias) = (
        d.f64_attr("alpha", 1e-4) as f32,
        d.f64_attr("beta", 0.75) as f32,
        d.f64_attr("bias", 1.0) as f32,
    );
    Ok(one(move |x| {
        Ok(Tensor::F32(lrn(f32_arg(x, 0)?, size as usize, alpha, beta, bias)?))
    }))
}

/// GroupNormalization: normalized per group, then scaled and shifted per channel (opset 21)
/// or per group (opset 18, where scale and bias have one value per group).
pub(super) fn group_norm(d: &OpDesc) -> Result<Box<dyn Kernel>, String> {
    let (groups, eps) = (d.int_attr("num_groups", 0), d.f64_attr("epsilon", 1e-5) as f32);
    if groups < 1 {
        return Err(format!("num_groups = {groups}"));
    }
    let groups = groups as usize;
    Ok(one(move |x| {
        let a = f32_arg(x, 0)?;
        let y = group_normalize(a, groups, eps)?;
        let c = a.shape()[1];
        let per_channel = |i: usize| -> KernelResult<Tensor> {
            let v: Vec<f32> = f32_arg(x, i)?.iter().copied().collect();
            let v = match v.len() {
                n if n == c => v,
                n if n == groups => (0..c).map(|ch| v[ch / (c / groups)]).collect(),
                n => return Err(format!("{n} scale/bias values for {c} channels in {groups} groups")),
            };
            let mut shape = vec![1i64; a.ndim()];
            shape[1] = c as i64;
            layout::reshape(&Tensor::F32(super::super::kernels::from_vec(&[c], v)?), &shape, false)
        };
        arith(
            BinOp::Add,
            &arith(BinOp::Mul, &Tensor::F32(y), &per_channel(1)?)?,
            &per_channel(2)?,
        )
    }))
}

/// MeanVarianceNormalization: (x − E[x]) / (√(E[x²] − E[x]²) + 1e-9) over `axes` ([0, 2, 3]
/// by default), as ONNX's function body computes it.
pub(super) fn mvn(d: &OpDesc) -> Result<Box<dyn Kernel>, String> {
    let axes = d.ints_attr("axes").unwrap_or_else(|| vec![0, 2, 3]);
    Ok(one(move |x| {
        let mean = reduce(x[0], &axes, true, Reduce::Mean)?;
        let sq = arith(BinOp::Mul, x[0], x[0])?;
        let mean_sq = reduce(&sq, &axes, true, Reduce::Mean)?;
        let var = arith(BinOp::Sub, &mean_sq, &arith(BinOp::Mul, &mean, &mean)?)?;
        let Tensor::F32(sd) = var else {
            return Err("MeanVarianceNormalization of a non-float tensor".into());
        };
        let sd = Tensor::F32(sd.mapv(|v| v.sqrt() + 1e-9));
        arith(BinOp::Div, &arith(BinOp::Sub, x[0], &mean)?, &sd)
    }))
}

/// RotaryEmbedding (X, cos_cache, sin_cache, position_ids?).
pub(super) fn rotary_op(d: &OpDesc) -> Result<Box<dyn Kernel>, String> {
    let interleaved = d.int_attr("interleaved", 0) != 0;
    let (rotary_dim, num_heads) = (
        d.int_attr("rotary_embedding_dim", 0).max(0) as usize,
        d.int_attr("num_heads", 0).max(0) as usize,
    );
    Ok(one(move |x| {
        let positions = match x.get(3).filter(|t| !t.is_empty()) {
            Some(_) => Some(int_arg(x, 3)?),
            None => None,
        };
        let r = Rotary {
            cos: f32_arg(x, 1)?,
            sin: f32_arg(x, 2)?,
            positions,
            interleaved,
            rotary_dim,
            num_heads,
        };
        Ok(Tensor::F32(rotary_embedding(f32_arg(x, 0)?, &r)?))
    }))
}
