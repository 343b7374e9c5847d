//! ONNX dispatch table: `onnx.<OpType>` → a builder that reads the attributes once and returns
//! a kernel, over the kernels shared with TF. ONNX lays images out NCHW; the convolution and
//! pooling kernels work NHWC, so those ops transpose at their edges (and a constant conv
//! filter is brought to HWIO once, when the kernel is built).

use super::desc::OpDesc;
use super::kernels::conv::{conv2d, depthwise_conv2d, Padding};
use super::kernels::conv_transpose::{conv_transpose2d, Transposed2d};
use super::kernels::elementwise::{
    arith, compare, logical, select, BinOp, BinaryKernel, CmpOp, Epilogue, UnOp, UnaryKernel,
};
use super::kernels::layout;
use super::kernels::matmul::{batch_matmul, matmul};
use super::kernels::norm::{batch_norm, softmax};
use super::kernels::pool::pool2d;
use super::kernels::reduce::{reduce, Reduce};
use super::kernels::resize::{resize, Coordinates, Mode, Nearest};
use super::kernels::{f32_arg, int_arg, norm_axis, one, FnKernel, Kernel, KernelResult};
use super::tf::Builder;
use crate::params::{dequantize, quantize, QuantParams, Rounding, Scheme, StorageType};
use crate::tensor::{DType, Tensor};
use ndarray::{ArrayD, Axis, IxDyn};

/// Every ONNX op the interpreter runs, by family.
pub const TABLE: &[(&str, Builder)] = &[
    // nn
    ("onnx.Conv", conv),
    ("onnx.ConvTranspose", conv_transpose),
    ("onnx.Gemm", gemm),
    ("onnx.MatMul", |_| Ok(one(|x| mat_mul(x[0], x[1])))),
    ("onnx.MaxPool", |d| pool(d, true)),
    ("onnx.AveragePool", |d| pool(d, false)),
    ("onnx.GlobalAveragePool", |_| {
        Ok(one(|x| global_pool(x[0], Reduce::Mean)))
    }),
    ("onnx.GlobalMaxPool", |_| Ok(one(|x| global_pool(x[0], Reduce::Max)))),
    ("onnx.Softmax", |d| softmax_op(d, false)),
    ("onnx.LogSoftmax", |d| softmax_op(d, true)),
    ("onnx.BatchNormalization", batch_normalization),
    ("onnx.InstanceNormalization", instance_norm),
    ("onnx.LayerNormalization", layer_norm),
    // binary math (NumPy broadcasting)
    ("onnx.Add", |_| bin(BinOp::Add)),
    ("onnx.Sub", |_| bin(BinOp::Sub)),
    ("onnx.Mul", |_| bin(BinOp::Mul)),
    ("onnx.Div", |_| bin(BinOp::Div)),
    ("onnx.Pow", |_| bin(BinOp::Pow)),
    ("onnx.Max", |_| variadic(BinOp::Max)),
    ("onnx.Min", |_| variadic(BinOp::Min)),
    ("onnx.Sum", |_| variadic(BinOp::Add)),
    ("onnx.Mod", |d| {
        if d.int_attr("fmod", 0) != 0 {
            return Err("Mod with fmod = 1 is not supported".into());
        }
        bin(BinOp::FloorMod)
    }),
    // comparisons and logic
    ("onnx.Equal", |_| cmp(CmpOp::Equal)),
    ("onnx.Less", |_| cmp(CmpOp::Less)),
    ("onnx.LessOrEqual", |_| cmp(CmpOp::LessEqual)),
    ("onnx.Greater", |_| cmp(CmpOp::Greater)),
    ("onnx.GreaterOrEqual", |_| cmp(CmpOp::GreaterEqual)),
    ("onnx.And", |_| Ok(one(|x| logical(x[0], x[1], |a, b| a && b)))),
    ("onnx.Or", |_| Ok(one(|x| logical(x[0], x[1], |a, b| a || b)))),
    ("onnx.Xor", |_| Ok(one(|x| logical(x[0], x[1], |a, b| a != b)))),
    ("onnx.Not", |_| {
        Ok(one(|x| match x[0] {
            Tensor::I1(a) => Ok(Tensor::I1(a.mapv(|b| !b))),
            t => Err(format!("Not of {}", t.dtype())),
        }))
    }),
    ("onnx.Where", |_| Ok(one(|x| select(x[0], x[1], x[2])))),
    // unary math
    ("onnx.Relu", |_| un(UnOp::Relu)),
    ("onnx.LeakyRelu", |d| {
        un(UnOp::LeakyRelu(d.f64_attr("alpha", 0.01) as f32))
    }),
    ("onnx.Elu", |d| {
        if d.f64_attr("alpha", 1.0) != 1.0 {
            return Err("Elu with alpha != 1 is not supported".into());
        }
        un(UnOp::Elu)
    }),
    ("onnx.Sigmoid", |_| un(UnOp::Sigmoid)),
    ("onnx.Tanh", |_| un(UnOp::Tanh)),
    ("onnx.Erf", |_| un(UnOp::Erf)),
    ("onnx.Exp", |_| un(UnOp::Exp)),
    ("onnx.Log", |_| un(UnOp::Log)),
    ("onnx.Sqrt", |_| un(UnOp::Sqrt)),
    ("onnx.Neg", |_| un(UnOp::Neg)),
    ("onnx.Abs", |_| un(UnOp::Abs)),
    ("onnx.Reciprocal", |_| un(UnOp::Reciprocal)),
    ("onnx.Softplus", |_| un(UnOp::Softplus)),
    ("onnx.Floor", |_| un(UnOp::Floor)),
    ("onnx.Ceil", |_| un(UnOp::Ceil)),
    ("onnx.Round", |_| un(UnOp::Round)),
    ("onnx.Sign", |_| un(UnOp::Sign)),
    ("onnx.Sin", |_| un(UnOp::Sin)),
    ("onnx.Cos", |_| un(UnOp::Cos)),
    ("onnx.Gelu", |d| match d.str_attr("approximate").unwrap_or("none") {
        "none" => un(UnOp::Gelu),
        "tanh" => Ok(map_f32(|v| {
            0.5 * v * (1.0 + ((2.0 / std::f32::consts::PI).sqrt() * (v + 0.044715 * v * v * v)).tanh())
        })),
        a => Err(format!("Gelu approximate = \"{a}\" is not supported")),
    }),
    ("onnx.HardSigmoid", |d| {
        let (a, b) = (d.f64_attr("alpha", 0.2) as f32, d.f64_attr("beta", 0.5) as f32);
        Ok(map_f32(move |v| (a * v + b).clamp(0.0, 1.0)))
    }),
    ("onnx.HardSwish", |_| {
        Ok(map_f32(|v| v * (v / 6.0 + 0.5).clamp(0.0, 1.0)))
    }),
    ("onnx.Clip", clip),
    // reductions
    ("onnx.ReduceMean", |d| red(d, Reduce::Mean)),
    ("onnx.ReduceSum", |d| red(d, Reduce::Sum)),
    ("onnx.ReduceMax", |d| red(d, Reduce::Max)),
    ("onnx.ReduceMin", |d| red(d, Reduce::Min)),
    ("onnx.ReduceProd", |d| red(d, Reduce::Prod)),
    // layout
    ("onnx.Identity", |_| Ok(one(|x| Ok(x[0].clone())))),
    ("onnx.Dropout", |_| Ok(one(|x| Ok(x[0].clone())))),
    ("onnx.Reshape", |d| {
        let zero_copies = d.int_attr("allowzero", 0) == 0;
        Ok(one(move |x| layout::reshape(x[0], &int_arg(x, 1)?, zero_copies)))
    }),
    ("onnx.Flatten", |d| {
        let axis = d.int_attr("axis", 1);
        Ok(one(move |x| {
            let s = x[0].shape();
            let a = if axis < 0 { axis + s.len() as i64 } else { axis };
            if a < 0 || a as usize > s.len() {
                return Err(format!("Flatten axis {axis} out of range for rank {}", s.len()));
            }
            let outer: usize = s[..a as usize].iter().product();
            layout::reshape(x[0], &[outer as i64, -1], false)
        }))
    }),
    ("onnx.Transpose", |d| {
        let perm = d.ints_attr("perm");
        Ok(one(move |x| {
            let p = perm
                .clone()
                .unwrap_or_else(|| (0..x[0].shape().len() as i64).rev().collect());
            layout::transpose(x[0], &p)
        }))
    }),
    ("onnx.Concat", |d| {
        let axis = d
            .attr("axis")
            .and_then(|a| a.as_int())
            .ok_or("Concat without an axis")?;
        Ok(one(move |x| layout::concat(x, axis)))
    }),
    ("onnx.Split", split),
    ("onnx.Slice", |d| {
        let attrs = (d.ints_attr("starts"), d.ints_attr("ends"), d.ints_attr("axes"));
        Ok(one(move |x| {
            let (starts, ends, axes, steps) = match &attrs {
                (Some(s), Some(e), a) => (s.clone(), e.clone(), a.clone(), None),
                _ => (int_arg(x, 1)?, int_arg(x, 2)?, opt_ints(x, 3)?, opt_ints(x, 4)?),
            };
            slice(x[0], &starts, &ends, axes.as_deref(), steps.as_deref())
        }))
    }),
    ("onnx.Squeeze", |d| {
        let attr = d.ints_attr("axes");
        Ok(one(move |x| {
            let axes = match &attr {
                Some(a) => Some(a.clone()),
                None => opt_ints(x, 1)?,
            };
            layout::squeeze(x[0], axes.as_deref().unwrap_or(&[]))
        }))
    }),
    ("onnx.Unsqueeze", |d| {
        let attr = d.ints_attr("axes");
        Ok(one(move |x| {
            let axes = match &attr {
                Some(a) => a.clone(),
                None => int_arg(x, 1)?,
            };
            unsqueeze(x[0], &axes)
        }))
    }),
    ("onnx.Shape", |d| {
        let (start, end) = (d.int_attr("start", 0), d.attr("end").and_then(|a| a.as_int()));
        Ok(one(move |x| {
            let s: Vec<i64> = x[0].shape().iter().map(|&v| v as i64).collect();
            let r = s.len() as i64;
            let clampi = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
            let (a, b) = (clampi(start), clampi(end.unwrap_or(r)));
            let v = s[a..b.max(a)].to_vec();
            Ok(Tensor::I64(super::kernels::from_vec(&[v.len()], v)?))
        }))
    }),
    ("onnx.Size", |_| {
        Ok(one(|x| Ok(Tensor::I64(ndarray::arr0(x[0].len() as i64).into_dyn()))))
    }),
    ("onnx.Gather", |d| {
        let axis = d.int_attr("axis", 0);
        Ok(one(move |x| {
            let idx = int_arg(x, 1)?;
            let a = norm_axis(axis, x[0].shape().len())?;
            let n = x[0].shape()[a] as i64;
            let idx: Vec<i64> = idx.iter().map(|&i| if i < 0 { i + n } else { i }).collect();
            layout::gather(x[0], &idx, x[1].shape(), axis)
        }))
    }),
    ("onnx.Expand", |_| {
        Ok(one(|x| layout::broadcast_to(x[0], &int_arg(x, 1)?)))
    }),
    ("onnx.ArgMax", |d| arg_op(d, true)),
    ("onnx.ArgMin", |d| arg_op(d, false)),
    ("onnx.Tile", |_| Ok(one(|x| layout::tile(x[0], &int_arg(x, 1)?)))),
    ("onnx.Pad", pad),
    ("onnx.Resize", resize_op),
    ("onnx.Cast", |d| {
        // `to` says it even where the result type is not known yet (during type inference)
        let to = d.attr("to").and_then(|a| a.as_int());
        let t = to
            .and_then(|t| crate::formats::onnx::types::dtype_of(t as i32))
            .or_else(|| d.result_dtype(0))
            .ok_or_else(|| format!("Cast to an unsupported type ({})", to.unwrap_or(-1)))?;
        Ok(one(move |x| layout::cast(x[0], t)))
    }),
    ("onnx.CastLike", |_| Ok(one(|x| layout::cast(x[0], x[1].dtype())))),
    ("onnx.ConstantOfShape", |d| {
        let value = match d.attr("value") {
            Some(crate::ir::attrs::AttrValue::Dense(t)) => t.clone(),
            _ => Tensor::F32(ArrayD::zeros(IxDyn(&[1]))),
        };
        Ok(one(move |x| layout::fill(&int_arg(x, 0)?, &value)))
    }),
    ("onnx.Range", |_| Ok(one(range))),
    // quantization
    ("onnx.QuantizeLinear", quantize_linear),
    ("onnx.DequantizeLinear", dequantize_linear),
];

pub fn lookup(name: &str) -> Option<Builder> {
    TABLE.iter().find(|(n, _)| *n == name).map(|(_, b)| *b)
}

fn bin(op: BinOp) -> Result<Box<dyn Kernel>, String> {
    Ok(Box::new(BinaryKernel(op)))
}

fn un(op: UnOp) -> Result<Box<dyn Kernel>, String> {
    Ok(Box::new(UnaryKernel(op)))
}

fn cmp(op: CmpOp) -> Result<Box<dyn Kernel>, String> {
    Ok(one(move |x| compare(op, x[0], x[1])))
}

fn map_f32(f: impl Fn(f32) -> f32 + Send + Sync + 'static) -> Box<dyn Kernel> {
    one(move |x| Ok(Tensor::F32(f32_arg(x, 0)?.mapv(&f))))
}

fn variadic(op: BinOp) -> Result<Box<dyn Kernel>, String> {
    Ok(one(move |x| {
        let (first, rest) = x.split_first().ok_or("no operands")?;
        rest.iter().try_fold((*first).clone(), |acc, t| arith(op, &acc, t))
    }))
}

/// An optional integer operand: absent (`""`, an empty tensor) or beyond the operand list.
fn opt_ints(x: &[&Tensor], i: usize) -> KernelResult<Option<Vec<i64>>> {
    match x.get(i) {
        None => Ok(None),
        Some(t) if t.is_empty() && t.dtype() == DType::F32 => Ok(None),
        Some(_) => int_arg(x, i).map(Some),
    }
}

fn present(d: &OpDesc, i: usize) -> bool {
    d.operand_types.get(i).is_some_and(Option::is_some)
}

fn scalar_f32(t: &Tensor) -> KernelResult<f32> {
    match layout::cast(t, DType::F32)? {
        Tensor::F32(a) if a.len() == 1 => Ok(a.iter().next().copied().unwrap_or(0.0)),
        _ => Err("expected a scalar".into()),
    }
}

fn red(d: &OpDesc, op: Reduce) -> Result<Box<dyn Kernel>, String> {
    let keep = d.int_attr("keepdims", 1) != 0;
    let noop_empty = d.int_attr("noop_with_empty_axes", 0) != 0;
    let attr = d.ints_attr("axes");
    Ok(one(move |x| {
        let axes = match &attr {
            Some(a) => a.clone(),
            None => opt_ints(x, 1)?.unwrap_or_default(),
        };
        if axes.is_empty() {
            if noop_empty {
                return Ok(x[0].clone());
            }
            let all: Vec<i64> = (0..x[0].shape().len() as i64).collect();
            return reduce(x[0], &all, keep, op);
        }
        reduce(x[0], &axes, keep, op)
    }))
}

fn clip(d: &OpDesc) -> Result<Box<dyn Kernel>, String> {
    // opset < 11: bounds are attributes; later: optional inputs 1 and 2
    let (amin, amax) = (
        d.attr("min").and_then(|a| a.as_f64()),
        d.attr("max").and_then(|a| a.as_f64()),
    );
    let (has_min, has_max) = (present(d, 1), present(d, 2));
    let relu6 = !has_min && !has_max && amin == Some(0.0) && amax == Some(6.0)
        || [1, 2].iter().all(|&i| d.consts.get(i).cloned().flatten().is_some())
            && d.consts[1].as_ref().and_then(|t| scalar_f32(t).ok()) == Some(0.0)
            && d.consts[2].as_ref().and_then(|t| scalar_f32(t).ok()) == Some(6.0);
    if relu6 {
        return un(UnOp::Relu6);
    }
    Ok(one(move |x| {
        let lo = if has_min {
            Some(scalar_f32(x[1])?)
        } else {
            amin.map(|v| v as f32)
        };
        let hi = if has_max {
            Some(scalar_f32(x[2])?)
        } else {
            amax.map(|v| v as f32)
        };
        let (lo, hi) = (lo.unwrap_or(f32::NEG_INFINITY), hi.unwrap_or(f32::INFINITY));
        Ok(Tensor::F32(f32_arg(x, 0)?.mapv(|v| {
            if v.is_nan() {
                v
            } else {
                v.max(lo).min(hi)
            }
        })))
    }))
}

/// How an ONNX conv/pool pads: explicit pads, or SAME_UPPER / SAME_LOWER worked out from the
/// input size.
#[derive(Debug, Clone)]
enum Pads {
    Explicit([(usize, usize); 2]),
    SameUpper,
    SameLower,
}

fn pads_of(d: &OpDesc) -> Result<Pads, String> {
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

impl Pads {
    fn resolve(&self, hw: [usize; 2], k: [usize; 2], s: [usize; 2], dil: [usize; 2]) -> Padding {
        match self {
            Pads::Explicit(p) => Padding::Explicit(*p),
            Pads::SameUpper | Pads::SameLower => {
                let mut out = [(0, 0); 2];
                for i in 0..2 {
                    let o = hw[i].div_ceil(s[i]);
                    let eff = (k[i] - 1) * dil[i] + 1;
                    let total = ((o - 1) * s[i] + eff).saturating_sub(hw[i]);
                    let small = total / 2;
                    out[i] = if matches!(self, Pads::SameUpper) {
                        (small, total - small)
                    } else {
                        (total - small, small)
                    };
                }
                Padding::Explicit(out)
            }
        }
    }
}

fn pair(d: &OpDesc, name: &str, default: usize) -> Result<[usize; 2], String> {
    match d.ints_attr(name).as_deref() {
        None => Ok([default, default]),
        Some([h, w]) if *h > 0 && *w > 0 => Ok([*h as usize, *w as usize]),
        Some(v) => Err(format!("{name} = {v:?} is not supported (2-D only)")),
    }
}

fn nchw_to_nhwc(x: &ArrayD<f32>) -> KernelResult<ArrayD<f32>> {
    if x.ndim() != 4 {
        return Err(format!("expected a 4-D NCHW input, got shape {:?}", x.shape()));
    }
    Ok(x.view()
        .permuted_axes(IxDyn(&[0, 2, 3, 1]))
        .as_standard_layout()
        .into_owned())
}

fn nhwc_to_nchw(x: ArrayD<f32>) -> ArrayD<f32> {
    x.permuted_axes(IxDyn(&[0, 3, 1, 2])).as_standard_layout().into_owned()
}

/// OIHW (ONNX) → HWIO (the conv kernel's layout).
fn oihw_to_hwio(w: &ArrayD<f32>) -> KernelResult<ArrayD<f32>> {
    if w.ndim() != 4 {
        return Err(format!("expected a 4-D OIHW filter, got shape {:?}", w.shape()));
    }
    Ok(w.view()
        .permuted_axes(IxDyn(&[2, 3, 1, 0]))
        .as_standard_layout()
        .into_owned())
}

struct OnnxConv {
    strides: [usize; 2],
    dilations: [usize; 2],
    pads: Pads,
    group: usize,
    /// The filter in HWIO when it is a constant.
    filter: Option<ArrayD<f32>>,
}

impl Kernel for OnnxConv {
    fn run(&self, x: &[&Tensor]) -> KernelResult<Vec<Tensor>> {
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
        let xs = nchw_to_nhwc(input)?;
        let (kh, kw, ci, co) = (f.shape()[0], f.shape()[1], f.shape()[2], f.shape()[3]);
        let c = xs.shape()[3];
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
        let pad = self
            .pads
            .resolve([xs.shape()[1], xs.shape()[2]], [kh, kw], self.strides, self.dilations);
        let ep = Epilogue {
            bias: bias.as_deref(),
            ..Default::default()
        };
        let ep = bias.as_ref().map(|_| &ep);
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
            let mut y = ndarray::concatenate(Axis(3), &views).map_err(|e| e.to_string())?;
            if let Some(b) = &bias {
                for (ch, mut sub) in y.axis_iter_mut(Axis(3)).enumerate() {
                    sub.mapv_inplace(|v| v + b[ch]);
                }
            }
            y
        };
        Ok(vec![Tensor::F32(nhwc_to_nchw(y))])
    }
}

fn conv(d: &OpDesc) -> Result<Box<dyn Kernel>, String> {
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
    let filter = match d.consts.get(1) {
        Some(Some(Tensor::F32(w))) => Some(oihw_to_hwio(w)?),
        _ => None,
    };
    Ok(Box::new(OnnxConv {
        strides: pair(d, "strides", 1)?,
        dilations: pair(d, "dilations", 1)?,
        pads: pads_of(d)?,
        group: group as usize,
        filter,
    }))
}

fn conv_transpose(d: &OpDesc) -> Result<Box<dyn Kernel>, String> {
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
        if let Some(want) = want {
            for i in 0..2 {
                let full = strides[i] * (hw[i] - 1) + extra[i] + (k[i] - 1) * dilations[i] + 1;
                let total = full
                    .checked_sub(want[i])
                    .ok_or_else(|| format!("output size {} is larger than the full output {full}", want[i]))?;
                g.pads[i] = if auto == "SAME_UPPER" {
                    (total / 2, total - total / 2)
                } else {
                    (total - total / 2, total / 2)
                };
            }
        }
        let out = [
            g.out_dim(0, hw[0], k[0], extra[0])?,
            g.out_dim(1, hw[1], k[1], extra[1])?,
        ];
        Ok(Tensor::F32(conv_transpose2d(input, w, bias.as_deref(), &g, out)?))
    }))
}

fn resize_op(d: &OpDesc) -> Result<Box<dyn Kernel>, String> {
    let mode = match d.choice("mode", &["nearest", "linear"], "nearest")?.as_str() {
        "linear" => Mode::Linear,
        _ => Mode::Nearest(
            match d
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
            },
        ),
    };
    let coords = match d
        .choice(
            "coordinate_transformation_mode",
            &[
                "half_pixel",
                "pytorch_half_pixel",
                "align_corners",
                "asymmetric",
                "tf_half_pixel_for_nn",
            ],
            "half_pixel",
        )?
        .as_str()
    {
        "pytorch_half_pixel" => Coordinates::PytorchHalfPixel,
        "align_corners" => Coordinates::AlignCorners,
        "asymmetric" => Coordinates::Asymmetric,
        "tf_half_pixel_for_nn" => Coordinates::TfHalfPixelForNn,
        _ => Coordinates::HalfPixel,
    };
    if d.int_attr("antialias", 0) != 0 {
        return Err("Resize with antialias = 1 is not supported".into());
    }
    if d.attr("axes").is_some() {
        return Err("Resize with axes is not supported".into());
    }
    d.choice("keep_aspect_ratio_policy", &["stretch"], "stretch")?;
    // opset 10: (X, scales); later: (X, roi, scales, sizes)
    let scales_at = if d.operand_types.len() == 2 { 1 } else { 2 };
    Ok(one(move |x| {
        let floats = |t: &Tensor| -> KernelResult<Vec<f64>> {
            match layout::cast(t, DType::F64)? {
                Tensor::F64(a) => Ok(a.iter().copied().collect()),
                _ => Err("scales".into()),
            }
        };
        let in_shape = x[0].shape().to_vec();
        let (out, scales): (Vec<usize>, Vec<f64>) = match (
            x.get(scales_at).filter(|t| !t.is_empty()),
            x.get(3).filter(|t| !t.is_empty()),
        ) {
            (Some(s), _) => {
                let s = floats(s)?;
                let out = in_shape
                    .iter()
                    .zip(&s)
                    .map(|(&n, &k)| (n as f64 * k).floor() as usize)
                    .collect();
                (out, s)
            }
            (None, Some(sz)) => {
                let out: Vec<usize> = int_arg(&[*sz], 0)?.iter().map(|&v| v.max(0) as usize).collect();
                let s = out
                    .iter()
                    .zip(&in_shape)
                    .map(|(&o, &n)| o as f64 / n.max(1) as f64)
                    .collect();
                (out, s)
            }
            (None, None) => return Err("Resize needs scales or sizes".into()),
        };
        resize(x[0], &out, &scales, mode, coords)
    }))
}

fn pool(d: &OpDesc, max: bool) -> Result<Box<dyn Kernel>, String> {
    if d.int_attr("ceil_mode", 0) != 0 {
        return Err("ceil_mode = 1 is not supported".into());
    }
    if pair(d, "dilations", 1)? != [1, 1] {
        return Err("pooling with dilations is not supported".into());
    }
    if max && d.result_types.len() > 1 {
        return Err("MaxPool with an Indices output is not supported".into());
    }
    let k = pair(d, "kernel_shape", 0)?;
    if k.contains(&0) {
        return Err("kernel_shape is required".into());
    }
    let (s, pads) = (pair(d, "strides", 1)?, pads_of(d)?);
    let include_pad = !max && d.int_attr("count_include_pad", 0) != 0;
    Ok(one(move |x| {
        let xs = nchw_to_nhwc(f32_arg(x, 0)?)?;
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
    }))
}

fn global_pool(x: &Tensor, op: Reduce) -> KernelResult<Tensor> {
    let r = x.shape().len();
    if r < 3 {
        return Err(format!("global pooling of rank {r}"));
    }
    let axes: Vec<i64> = (2..r as i64).collect();
    reduce(x, &axes, true, op)
}

fn gemm(d: &OpDesc) -> Result<Box<dyn Kernel>, String> {
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

/// NumPy matmul: 1-D operands get a unit dim that is dropped again, batch dims broadcast.
fn mat_mul(a: &Tensor, b: &Tensor) -> KernelResult<Tensor> {
    let (Tensor::F32(a), Tensor::F32(b)) = (a, b) else {
        return Err(format!("MatMul of {} and {}", a.dtype(), b.dtype()));
    };
    let (a1, b1) = (a.ndim() == 1, b.ndim() == 1);
    let a2 = if a1 { a.clone().insert_axis(Axis(0)) } else { a.clone() };
    let b2 = if b1 { b.clone().insert_axis(Axis(1)) } else { b.clone() };
    let mut y = if a2.ndim() == 2 && b2.ndim() == 2 {
        matmul(&a2, &b2, false, false)?
    } else {
        batch_matmul(&a2, &b2, false, false)?
    };
    if b1 {
        let last = y.ndim() - 1;
        y = y.remove_axis(Axis(last));
    }
    if a1 {
        let at = y.ndim() - if b1 { 1 } else { 2 };
        y = y.remove_axis(Axis(at));
    }
    Ok(Tensor::F32(y))
}

fn softmax_op(d: &OpDesc, log: bool) -> Result<Box<dyn Kernel>, String> {
    let axis = d.int_attr("axis", -1);
    Ok(one(move |x| {
        let a = f32_arg(x, 0)?;
        let ax = norm_axis(axis, a.ndim())?;
        let last = a.ndim() - 1;
        if ax == last {
            return Ok(Tensor::F32(softmax(a, log)?));
        }
        let mut perm: Vec<usize> = (0..a.ndim()).collect();
        perm.swap(ax, last);
        let t = a.view().permuted_axes(IxDyn(&perm)).as_standard_layout().into_owned();
        let y = softmax(&t, log)?;
        Ok(Tensor::F32(
            y.permuted_axes(IxDyn(&perm)).as_standard_layout().into_owned(),
        ))
    }))
}

fn batch_normalization(d: &OpDesc) -> Result<Box<dyn Kernel>, String> {
    if d.int_attr("training_mode", 0) != 0 {
        return Err("BatchNormalization with training_mode = 1 is not an inference op".into());
    }
    let eps = d.f64_attr("epsilon", 1e-5) as f32;
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

/// Mean and variance over `axes` of every slice along the others; y = (x − μ)/√(σ² + ε).
fn normalize(x: &ArrayD<f32>, from_axis: usize, eps: f32) -> ArrayD<f32> {
    let inner: usize = x.shape()[from_axis..].iter().product();
    let mut y = x.as_standard_layout().into_owned();
    if inner == 0 {
        return y;
    }
    if let Some(s) = y.as_slice_mut() {
        for row in s.chunks_mut(inner) {
            let n = row.len() as f32;
            let mean = row.iter().sum::<f32>() / n;
            let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / n;
            let inv = 1.0 / (var + eps).sqrt();
            row.iter_mut().for_each(|v| *v = (*v - mean) * inv);
        }
    }
    y
}

fn instance_norm(d: &OpDesc) -> Result<Box<dyn Kernel>, String> {
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

fn layer_norm(d: &OpDesc) -> Result<Box<dyn Kernel>, String> {
    let (axis, eps) = (d.int_attr("axis", -1), d.f64_attr("epsilon", 1e-5) as f32);
    if d.result_types.len() > 1 {
        return Err("LayerNormalization with Mean/InvStdDev outputs is not supported".into());
    }
    Ok(one(move |x| {
        let a = f32_arg(x, 0)?;
        let ax = norm_axis(axis, a.ndim())?;
        let y = Tensor::F32(normalize(a, ax, eps));
        let y = arith(BinOp::Mul, &y, x[1])?;
        match x.get(2) {
            Some(b) if !b.is_empty() => arith(BinOp::Add, &y, b),
            _ => Ok(y),
        }
    }))
}

fn split(d: &OpDesc) -> Result<Box<dyn Kernel>, String> {
    let axis = d.int_attr("axis", 0);
    let attr = d.ints_attr("split");
    let n_out = d.result_types.len() as i64;
    let num_outputs = d.attr("num_outputs").and_then(|a| a.as_int()).unwrap_or(n_out);
    Ok(Box::new(FnKernel(move |x: &[&Tensor]| {
        let sizes = match (&attr, opt_ints(x, 1)?) {
            (Some(s), _) => s.clone(),
            (None, Some(s)) => s,
            (None, None) => {
                let a = norm_axis(axis, x[0].shape().len())?;
                let dim = x[0].shape()[a] as i64;
                let n = num_outputs.max(1);
                let chunk = (dim + n - 1) / n;
                (0..n).map(|i| chunk.min(dim - i * chunk).max(0)).collect()
            }
        };
        layout::split(x[0], axis, &sizes)
    })))
}

/// ONNX Slice: per listed axis, start/end clamped to the dim, any non-zero step.
fn slice(
    t: &Tensor,
    starts: &[i64],
    ends: &[i64],
    axes: Option<&[i64]>,
    steps: Option<&[i64]>,
) -> KernelResult<Tensor> {
    let r = t.shape().len();
    let mut begin = vec![0i64; r];
    let mut end: Vec<i64> = t.shape().iter().map(|&d| d as i64).collect();
    let mut stride = vec![1i64; r];
    let default_axes: Vec<i64> = (0..starts.len() as i64).collect();
    let axes = axes.unwrap_or(&default_axes);
    if starts.len() != ends.len() || axes.len() != starts.len() {
        return Err("starts, ends and axes differ in length".into());
    }
    for (i, &ax) in axes.iter().enumerate() {
        let a = norm_axis(ax, r)?;
        let dim = t.shape()[a] as i64;
        let step = steps.and_then(|s| s.get(i).copied()).unwrap_or(1);
        if step == 0 {
            return Err("Slice step 0".into());
        }
        let fix = |v: i64| if v < 0 { v + dim } else { v };
        let (s, e) = (fix(starts[i]), fix(ends[i]));
        if step > 0 {
            begin[a] = s.clamp(0, dim);
            end[a] = e.clamp(0, dim);
        } else {
            begin[a] = s.clamp(-1, dim - 1);
            end[a] = e.clamp(-1, dim - 1);
        }
        stride[a] = step;
    }
    // the strided slice with explicit bounds on every axis; a negative end (-1) means "before
    // index 0", which the end mask expresses
    let mut end_mask = 0i64;
    for a in 0..r {
        if stride[a] < 0 && end[a] < 0 {
            end_mask |= 1 << a;
        }
    }
    layout::strided_slice(
        t,
        &begin,
        &end,
        &stride,
        layout::StridedMasks {
            begin: 0,
            end: end_mask,
            ellipsis: 0,
            new_axis: 0,
            shrink_axis: 0,
        },
    )
}

fn unsqueeze(t: &Tensor, axes: &[i64]) -> KernelResult<Tensor> {
    let out_rank = t.shape().len() + axes.len();
    let mut ax: Vec<usize> = axes
        .iter()
        .map(|&a| norm_axis(a, out_rank))
        .collect::<KernelResult<_>>()?;
    ax.sort_unstable();
    let mut shape = Vec::with_capacity(out_rank);
    let mut src = t.shape().iter();
    for i in 0..out_rank {
        if ax.binary_search(&i).is_ok() {
            shape.push(1i64);
        } else {
            shape.push(*src.next().ok_or("Unsqueeze axes out of range")? as i64);
        }
    }
    layout::reshape(t, &shape, false)
}

fn arg_op(d: &OpDesc, max: bool) -> Result<Box<dyn Kernel>, String> {
    let axis = d.int_attr("axis", 0);
    let keep = d.int_attr("keepdims", 1) != 0;
    let last = d.int_attr("select_last_index", 0) != 0;
    Ok(one(move |x| {
        super::kernels::reduce::arg_extreme(x[0], axis, max, last, keep)
    }))
}

fn pad(d: &OpDesc) -> Result<Box<dyn Kernel>, String> {
    let mode = d.choice("mode", &["constant", "reflect", "edge"], "constant")?;
    if mode == "edge" {
        return Err("Pad mode \"edge\" is not supported".into());
    }
    let attr_pads = d.ints_attr("pads");
    let attr_value = d.f64_attr("value", 0.0);
    Ok(one(move |x| {
        let pads = match &attr_pads {
            Some(p) => p.clone(),
            None => int_arg(x, 1)?,
        };
        let r = x[0].shape().len();
        let axes: Vec<usize> = match opt_ints(x, 3)? {
            Some(a) => a.iter().map(|&v| norm_axis(v, r)).collect::<KernelResult<_>>()?,
            None => (0..r).collect(),
        };
        if pads.len() != 2 * axes.len() {
            return Err(format!("{} pads for {} axes", pads.len(), axes.len()));
        }
        // ONNX [b0, b1, ..., e0, e1, ...] → TF [[b0, e0], [b1, e1], ...]
        let mut tf = vec![0i64; 2 * r];
        for (i, &a) in axes.iter().enumerate() {
            tf[2 * a] = pads[i];
            tf[2 * a + 1] = pads[axes.len() + i];
        }
        if mode == "reflect" {
            return layout::mirror_pad(x[0], &tf, false);
        }
        let value = match x.get(2) {
            Some(v) if !v.is_empty() => scalar_f32(v)? as f64,
            _ => attr_value,
        };
        layout::pad(x[0], &tf, value)
    }))
}

fn range(x: &[&Tensor]) -> KernelResult<Tensor> {
    let s = layout::cast(x[0], DType::F64)?;
    let l = layout::cast(x[1], DType::F64)?;
    let dl = layout::cast(x[2], DType::F64)?;
    let g = |t: &Tensor| -> KernelResult<f64> {
        match t {
            Tensor::F64(a) if a.len() == 1 => Ok(a.iter().next().copied().unwrap_or(0.0)),
            _ => Err("Range operands must be scalars".into()),
        }
    };
    let (s, l, dl) = (g(&s)?, g(&l)?, g(&dl)?);
    if dl == 0.0 {
        return Err("Range with delta 0".into());
    }
    let n = ((l - s) / dl).ceil().max(0.0) as usize;
    let v: Vec<f64> = (0..n).map(|i| s + i as f64 * dl).collect();
    layout::cast(&Tensor::F64(super::kernels::from_vec(&[n], v)?), x[0].dtype())
}

/// Quantization parameters from QuantizeLinear/DequantizeLinear operands: the scale tensor,
/// the zero-point tensor (whose type is the storage type; uint8 when absent) and the axis.
fn qparams(
    scale: &Tensor,
    zp: Option<&Tensor>,
    storage: StorageType,
    axis: Option<usize>,
) -> KernelResult<QuantParams> {
    let s: Vec<f64> = match layout::cast(scale, DType::F64)? {
        Tensor::F64(a) => a.iter().copied().collect(),
        _ => return Err("scale".into()),
    };
    let z: Vec<i64> = match zp {
        Some(t) if !t.is_empty() => super::kernels::ints_of(t).ok_or("zero point must be an integer tensor")?,
        _ => vec![0; s.len()],
    };
    if s.len() != z.len() {
        return Err(format!("{} scales and {} zero points", s.len(), z.len()));
    }
    let (qmin, qmax) = storage.full_range();
    Ok(QuantParams {
        scheme: Scheme::Onnx,
        dtype: storage,
        axis: if s.len() > 1 { axis } else { None },
        scale: s,
        zero_point: z,
        qmin,
        qmax,
    })
}

/// The storage type of a quantized ONNX tensor from its MLIR element type name.
fn storage_of(elem: &str) -> Option<StorageType> {
    Some(match elem {
        "i4" | "si4" => StorageType::Int4,
        "ui4" => StorageType::Uint4,
        "i8" | "si8" => StorageType::Int8,
        "ui8" => StorageType::Uint8,
        "i16" | "si16" => StorageType::Int16,
        "ui16" => StorageType::Uint16,
        "i32" | "si32" => StorageType::Int32,
        _ => return None,
    })
}

/// The storage type whose values a tensor of `dtype` holds (4-bit types are held in bytes;
/// only a declared type tells them apart).
fn held_in(dtype: DType) -> Option<StorageType> {
    Some(match dtype {
        DType::I8 => StorageType::Int8,
        DType::U8 => StorageType::Uint8,
        DType::I16 => StorageType::Int16,
        DType::U16 => StorageType::Uint16,
        DType::I32 => StorageType::Int32,
        _ => return None,
    })
}

fn quantize_linear(d: &OpDesc) -> Result<Box<dyn Kernel>, String> {
    let storage = d
        .result_types
        .first()
        .and_then(|t| t.as_ref())
        .and_then(|t| storage_of(&t.element));
    let axis = d.int_attr("axis", 1);
    if d.int_attr("block_size", 0) != 0 {
        return Err("blocked quantization (block_size) is not supported".into());
    }
    Ok(one(move |x| {
        let a = f32_arg(x, 0)?;
        let ax = norm_axis(axis, a.ndim().max(1)).ok();
        // the zero point's type is the output type (4-bit types only the result type tells)
        let storage = match (storage, x.get(2).filter(|z| !z.is_empty())) {
            (Some(s @ (StorageType::Int4 | StorageType::Uint4)), _) => s,
            (s, Some(z)) => held_in(z.dtype()).or(s).unwrap_or(StorageType::Uint8),
            (s, None) => s.unwrap_or(StorageType::Uint8),
        };
        let p = qparams(x[1], x.get(2).copied(), storage, ax)?;
        quantize(&a.view(), &p, Rounding::HalfEven).map_err(|e| e.to_string())
    }))
}

fn dequantize_linear(d: &OpDesc) -> Result<Box<dyn Kernel>, String> {
    let storage = d
        .operand_types
        .first()
        .and_then(|t| t.as_ref())
        .and_then(|t| storage_of(&t.element));
    let axis = d.int_attr("axis", 1);
    if d.int_attr("block_size", 0) != 0 {
        return Err("blocked quantization (block_size) is not supported".into());
    }
    Ok(one(move |x| {
        // an input of unknown type (before inference): its storage from the values' type
        let storage = storage
            .or_else(|| held_in(x[0].dtype()))
            .ok_or_else(|| format!("DequantizeLinear of {}", x[0].dtype()))?;
        let ax = norm_axis(axis, x[0].shape().len().max(1)).ok();
        let p = qparams(x[1], x.get(2).copied(), storage, ax)?;
        dequantize(x[0], &p).map(Tensor::F32).map_err(|e| e.to_string())
    }))
}
