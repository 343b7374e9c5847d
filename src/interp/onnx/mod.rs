//! ONNX dispatch table: `onnx.<OpType>` → a builder that reads the attributes once and returns
//! a kernel, over the kernels shared with TF. ONNX lays images out NCHW; the convolution and
//! pooling kernels work NHWC, so those ops transpose at their edges (and a constant conv
//! filter is brought to HWIO once, when the kernel is built).

mod arrays;
mod lift1d;
mod nn;
pub(crate) mod quant;

use arrays::*;
use nn::*;
use quant::*;

use super::desc::OpDesc;
use super::kernels::conv::Padding;
use super::kernels::conv_nchw::{nchw_to_nhwc, nhwc_to_nchw, oihw_to_hwio, same_pads, OnnxConv, Pads};
use super::kernels::conv_transpose::{conv_transpose2d, Transposed2d};
use super::kernels::elementwise::{
    arith, bitwise, compare, logical, select, BinOp, BinaryKernel, CmpOp, UnOp, UnaryKernel,
};
use super::kernels::indexing::{gather_elements, hardmax, one_hot, top_k, trilu};
use super::kernels::matmul::{matmul, MatMulKernel, Product};
use super::kernels::norm::{batch_norm, group_normalize, lrn, normalize, softmax};
use super::kernels::pool::{pool2d, PoolNd};
use super::kernels::reduce::{cumsum, reduce, Reduce};
use super::kernels::resize::{resize, AxisResize, Coordinates, Filter, Mode, Nearest};
use super::kernels::rotary::{rotary_embedding, Rotary};
use super::kernels::scatter::{gather_nd, scatter_elements, scatter_nd, Reduction};
use super::kernels::{
    f32_arg, int_arg, ints_of, norm_axis, one, FnKernel, Identity, Kernel, KernelResult, ResultShapes, Shaped,
};
use super::kernels::{join, layout};
use super::tf::Builder;
use crate::params::{dequantize, quantize, QuantParams, Rounding, Scheme, StorageType};
use crate::tensor::{DType, Tensor};
use ndarray::{ArrayD, Axis, IxDyn};

/// Every ONNX op the interpreter runs, by family.
pub const TABLE: &[(&str, Builder)] = &[
    // nn
    ("onnx.Conv", |d| spatial(d, conv)),
    ("onnx.ConvTranspose", |d| spatial(d, conv_transpose)),
    ("onnx.Gemm", gemm),
    ("onnx.MatMul", |d| {
        Ok(Box::new(MatMulKernel::new(
            Product::Numpy,
            d.consts.get(1).and_then(Option::as_deref),
        )))
    }),
    ("onnx.MaxPool", |d| pool(d, true)),
    ("onnx.AveragePool", |d| pool(d, false)),
    ("onnx.GlobalAveragePool", |_| Ok(Box::new(nn::GlobalAveragePool))),
    ("onnx.GlobalMaxPool", |_| Ok(one(|x| global_pool(x[0], Reduce::Max)))),
    ("onnx.Softmax", |d| softmax_op(d, false)),
    ("onnx.LogSoftmax", |d| softmax_op(d, true)),
    ("onnx.BatchNormalization", batch_normalization),
    ("onnx.InstanceNormalization", instance_norm),
    ("onnx.LayerNormalization", layer_norm),
    ("onnx.RMSNormalization", rms_norm),
    ("onnx.GroupNormalization", group_norm),
    ("onnx.MeanVarianceNormalization", mvn),
    ("onnx.LRN", lrn_op),
    ("onnx.RotaryEmbedding", rotary_op),
    ("onnx.Einsum", |d| {
        let eq = d.str_attr("equation").ok_or("Einsum without an equation")?.to_string();
        Ok(one(move |x| super::kernels::einsum::einsum(&eq, x)))
    }),
    // binary math (NumPy broadcasting)
    ("onnx.Add", |_| bin(BinOp::Add)),
    ("onnx.Sub", |_| bin(BinOp::Sub)),
    ("onnx.Mul", |_| bin(BinOp::Mul)),
    ("onnx.Div", |_| bin(BinOp::Div)),
    // the result has the base's type; an exponent of another type is converted first (an
    // integer base with a float exponent is raised in f64 and truncated, as NumPy does)
    ("onnx.Pow", |_| {
        Ok(one(|x| {
            let (base, exp) = (x[0], x[1]);
            if base.dtype() == exp.dtype() {
                return arith(BinOp::Pow, base, exp);
            }
            if base.dtype().is_float() {
                return arith(BinOp::Pow, base, &layout::cast(exp, base.dtype())?);
            }
            let wide = arith(
                BinOp::Pow,
                &layout::cast(base, DType::F64)?,
                &layout::cast(exp, DType::F64)?,
            )?;
            layout::cast(&wide, base.dtype())
        }))
    }),
    ("onnx.Max", |_| variadic(BinOp::Max)),
    ("onnx.Min", |_| variadic(BinOp::Min)),
    ("onnx.Sum", |_| variadic(BinOp::Add)),
    ("onnx.Mean", |_| {
        Ok(one(|x| {
            let (first, rest) = x.split_first().ok_or("no operands")?;
            let sum = rest
                .iter()
                .try_fold((*first).clone(), |acc, t| arith(BinOp::Add, &acc, t))?;
            let n = Tensor::F32(ndarray::arr0(x.len() as f32).into_dyn());
            arith(BinOp::Div, &sum, &n)
        }))
    }),
    ("onnx.Mod", |d| {
        bin(if d.int_attr("fmod", 0) != 0 {
            BinOp::Fmod
        } else {
            BinOp::FloorMod
        })
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
    ("onnx.Elu", |d| match d.f64_attr("alpha", 1.0) as f32 {
        1.0 => un(UnOp::Elu),
        a => Ok(map_f32(move |v| if v > 0.0 { v } else { a * v.exp_m1() })),
    }),
    ("onnx.Selu", |d| {
        un(UnOp::Selu {
            alpha: d.f64_attr("alpha", 1.673_263_192_176_818_8) as f32,
            gamma: d.f64_attr("gamma", 1.050_701_022_148_132_3) as f32,
        })
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
    ("onnx.Tan", |_| Ok(map_f32(f32::tan))),
    ("onnx.Acos", |_| Ok(map_f32(f32::acos))),
    ("onnx.Asin", |_| Ok(map_f32(f32::asin))),
    ("onnx.Atan", |_| Ok(map_f32(f32::atan))),
    ("onnx.Sinh", |_| Ok(map_f32(f32::sinh))),
    ("onnx.Cosh", |_| Ok(map_f32(f32::cosh))),
    ("onnx.Softsign", |_| Ok(map_f32(|v| v / (1.0 + v.abs())))),
    // x·tanh(softplus(x)), softplus computed without overflow
    ("onnx.Mish", |_| {
        Ok(map_f32(|v| v * (v.max(0.0) + (-v.abs()).exp().ln_1p()).tanh()))
    }),
    ("onnx.Celu", |d| {
        let a = d.f64_attr("alpha", 1.0) as f32;
        Ok(map_f32(move |v| v.max(0.0) + (a * ((v / a).exp() - 1.0)).min(0.0)))
    }),
    ("onnx.ThresholdedRelu", |d| {
        let a = d.f64_attr("alpha", 1.0) as f32;
        Ok(map_f32(move |v| if v > a { v } else { 0.0 }))
    }),
    ("onnx.Shrink", |d| {
        let (bias, lambd) = (d.f64_attr("bias", 0.0) as f32, d.f64_attr("lambd", 0.5) as f32);
        Ok(map_f32(move |v| {
            if v < -lambd {
                v + bias
            } else if v > lambd {
                v - bias
            } else {
                0.0
            }
        }))
    }),
    ("onnx.IsNaN", |_| {
        Ok(one(|x| Ok(Tensor::I1(f32_arg(x, 0)?.mapv(f32::is_nan)))))
    }),
    ("onnx.IsInf", |d| {
        let (neg, pos) = (
            d.int_attr("detect_negative", 1) != 0,
            d.int_attr("detect_positive", 1) != 0,
        );
        Ok(one(move |x| {
            Ok(Tensor::I1(
                f32_arg(x, 0)?.mapv(|v| v.is_infinite() && ((v > 0.0 && pos) || (v < 0.0 && neg))),
            ))
        }))
    }),
    // max(0, x) + slope · min(0, x), slope broadcast to x
    ("onnx.PRelu", |_| {
        Ok(one(|x| {
            let zero = Tensor::F32(ndarray::arr0(0.0f32).into_dyn());
            let neg = arith(BinOp::Min, x[0], &zero)?;
            let pos = arith(BinOp::Max, x[0], &zero)?;
            arith(BinOp::Add, &pos, &arith(BinOp::Mul, &neg, x[1])?)
        }))
    }),
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
    ("onnx.ReduceL1", |d| red_of(d, f32::abs, Reduce::Sum, |v| v)),
    ("onnx.ReduceL2", |d| red_of(d, |v| v * v, Reduce::Sum, f32::sqrt)),
    ("onnx.ReduceSumSquare", |d| red_of(d, |v| v * v, Reduce::Sum, |v| v)),
    ("onnx.ReduceLogSum", |d| red_of(d, |v| v, Reduce::Sum, f32::ln)),
    ("onnx.ReduceLogSumExp", log_sum_exp),
    // layout
    ("onnx.Identity", |_| Ok(Box::new(Identity))),
    // inference: the input as it is, and (when asked for) a mask of all true
    ("onnx.Dropout", |d| {
        let mask = d.result_types.len() > 1;
        Ok(Box::new(FnKernel(move |x: &[&Tensor]| {
            // training mode drops at random (unless the ratio is 0): not an inference op,
            // refused rather than ignored
            let training = matches!(x.get(2), Some(Tensor::I1(t)) if t.iter().any(|&b| b));
            let ratio = match x.get(1) {
                Some(Tensor::F32(r)) if !r.is_empty() => r.iter().next().copied().unwrap_or(0.5),
                _ => 0.5,
            };
            if training && ratio != 0.0 {
                return Err("Dropout with training_mode = true is not an inference op".into());
            }
            let mut out = vec![x[0].clone()];
            if mask {
                out.push(Tensor::I1(ndarray::ArrayD::from_elem(x[0].shape(), true)));
            }
            Ok(out)
        })))
    }),
    ("onnx.DepthToSpace", |d| {
        let (b, crd) = (d.int_attr("blocksize", 1), d.str_attr("mode") == Some("CRD"));
        Ok(one(move |x| layout::depth_to_space(x[0], b, crd)))
    }),
    ("onnx.SpaceToDepth", |d| {
        let (b, crd) = (d.int_attr("blocksize", 1), d.str_attr("mode") == Some("CRD"));
        Ok(one(move |x| layout::space_to_depth(x[0], b, crd)))
    }),
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
        Ok(Box::new(arrays::Transpose {
            perm: d.ints_attr("perm"),
        }))
    }),
    ("onnx.Concat", |d| {
        let axis = d
            .attr("axis")
            .and_then(|a| a.as_int())
            .ok_or("Concat without an axis")?;
        Ok(one(move |x| join::concat(x, axis)))
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
    ("onnx.GatherND", gather_nd_op),
    ("onnx.ScatterND", scatter_nd_op),
    ("onnx.ScatterElements", scatter_elements_op),
    ("onnx.EyeLike", eye_like),
    ("onnx.GatherElements", |d| {
        let axis = d.int_attr("axis", 0);
        Ok(one(move |x| {
            gather_elements(x[0], x.get(1).ok_or("GatherElements without indices")?, axis)
        }))
    }),
    ("onnx.Trilu", |d| {
        let upper = d.int_attr("upper", 1) != 0;
        Ok(one(move |x| {
            let k = match x.get(1).filter(|t| !t.is_empty()).map(|t| ints_of(t)) {
                None => 0,
                Some(Some(v)) if v.len() == 1 => v[0],
                Some(_) => return Err("Trilu's k must be one integer".into()),
            };
            trilu(x[0], k, upper)
        }))
    }),
    ("onnx.Hardmax", |d| {
        let axis = d.int_attr("axis", -1);
        Ok(one(move |x| hardmax(x[0], axis)))
    }),
    ("onnx.CumSum", |d| {
        let (exclusive, reverse) = (d.int_attr("exclusive", 0) != 0, d.int_attr("reverse", 0) != 0);
        Ok(one(move |x| {
            let axis = match x.get(1).and_then(|t| ints_of(t)).as_deref() {
                Some([a]) => *a,
                _ => return Err("CumSum's axis must be one integer".into()),
            };
            cumsum(x[0], axis, exclusive, reverse)
        }))
    }),
    ("onnx.BitwiseAnd", |_| Ok(one(|x| bitwise(x[0], x[1], |a, b| a & b)))),
    ("onnx.BitwiseOr", |_| Ok(one(|x| bitwise(x[0], x[1], |a, b| a | b)))),
    ("onnx.BitwiseXor", |_| Ok(one(|x| bitwise(x[0], x[1], |a, b| a ^ b)))),
    ("onnx.BitwiseNot", |_| Ok(one(|x| bitwise(x[0], x[0], |a, _| !a)))),
    ("onnx.TopK", |d| {
        let (axis, largest) = (d.int_attr("axis", -1), d.int_attr("largest", 1) != 0);
        Ok(Box::new(FnKernel(move |x: &[&Tensor]| {
            let k = match ints_of(x.get(1).ok_or("TopK without K")?).as_deref() {
                Some([k]) => *k,
                _ => return Err("TopK's K must be one integer".into()),
            };
            let (v, i) = top_k(x[0], k, axis, largest)?;
            Ok(vec![v, i])
        })))
    }),
    ("onnx.OneHot", |d| {
        let axis = d.int_attr("axis", -1);
        Ok(one(move |x| {
            one_hot(
                x[0],
                x.get(1).ok_or("OneHot without depth")?,
                x.get(2).ok_or("OneHot without values")?,
                axis,
            )
        }))
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
            .and_then(|t| crate::dialects::onnx_types::dtype_of(t as i32))
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
    ("onnx.DynamicQuantizeLinear", dynamic_quantize_linear),
    // integer kernels of models other tools quantized
    ("onnx.ConvInteger", |d| spatial(d, conv_integer)),
    ("onnx.MatMulInteger", matmul_integer),
    ("onnx.QLinearConv", |d| spatial(d, qlinear_conv)),
    ("onnx.QLinearMatMul", qlinear_matmul),
];

pub fn lookup(name: &str) -> Option<Builder> {
    TABLE.iter().find(|(n, _)| *n == name).map(|(_, b)| *b)
}

/// A convolution's kernel: 1-D forms run on the 2-D kernel (lift1d.rs).
fn spatial(d: &OpDesc, build: Builder) -> Result<Box<dyn Kernel>, String> {
    if lift1d::is_1d(d) {
        lift1d::lift(d, build)
    } else {
        build(d)
    }
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

/// The axes a Reduce* op reduces over: its `axes` attribute (before opset 18) or input 1; none
/// given means all of them, or (with `noop_with_empty_axes`) none at all.
#[derive(Clone)]
struct ReduceAxes {
    attr: Option<Vec<i64>>,
    noop_empty: bool,
}

impl ReduceAxes {
    fn of(d: &OpDesc) -> ReduceAxes {
        ReduceAxes {
            attr: d.ints_attr("axes"),
            noop_empty: d.int_attr("noop_with_empty_axes", 0) != 0,
        }
    }

    /// The axes for operands `x`; `None` when the op is the identity.
    fn resolve(&self, x: &[&Tensor]) -> KernelResult<Option<Vec<i64>>> {
        let axes = match &self.attr {
            Some(a) => a.clone(),
            None => opt_ints(x, 1)?.unwrap_or_default(),
        };
        Ok(match (axes.is_empty(), self.noop_empty) {
            (false, _) => Some(axes),
            (true, true) => None,
            (true, false) => Some((0..x[0].shape().len() as i64).collect()),
        })
    }
}

fn red(d: &OpDesc, op: Reduce) -> Result<Box<dyn Kernel>, String> {
    let (keep, axes) = (d.int_attr("keepdims", 1) != 0, ReduceAxes::of(d));
    Ok(one(move |x| match (axes.resolve(x)?, x[0].dtype()) {
        (None, _) => Ok(x[0].clone()),
        // Max of booleans is Any, Min is All
        (Some(a), DType::I1) if matches!(op, Reduce::Max | Reduce::Min) => {
            super::kernels::reduce::reduce_bool(x[0], &a, keep, op == Reduce::Min)
        }
        // the reduction kernels hold i32 and i64; narrower integers go through i64 and back
        (Some(a), t) if !t.is_float() && !matches!(t, DType::I32 | DType::I64 | DType::I1) => {
            layout::cast(&reduce(&layout::cast(x[0], DType::I64)?, &a, keep, op)?, t)
        }
        (Some(a), _) => reduce(x[0], &a, keep, op),
    }))
}

/// A reduction of `pre(x)` followed by `post` (ReduceL2 = √Σx², ...), on float tensors.
fn red_of(d: &OpDesc, pre: fn(f32) -> f32, op: Reduce, post: fn(f32) -> f32) -> Result<Box<dyn Kernel>, String> {
    let inner = red(d, op)?;
    Ok(Box::new(FnKernel(move |x: &[&Tensor]| {
        let a = f32_arg(x, 0)?;
        let mapped = Tensor::F32(a.mapv(pre));
        let mut args: Vec<&Tensor> = x.to_vec();
        args[0] = &mapped;
        let mut out = inner.run(&args)?;
        if let Some(Tensor::F32(y)) = out.first_mut() {
            y.mapv_inplace(post);
        }
        Ok(out)
    })))
}

/// log Σ eˣ, shifted by the maximum over the reduced axes so that large inputs do not overflow.
fn log_sum_exp(d: &OpDesc) -> Result<Box<dyn Kernel>, String> {
    let (keep, reduced) = (d.int_attr("keepdims", 1) != 0, ReduceAxes::of(d));
    Ok(one(move |x| {
        let a = f32_arg(x, 0)?;
        let Some(axes) = reduced.resolve(x)? else {
            return Ok(x[0].clone());
        };
        let Tensor::F32(m) = reduce(x[0], &axes, true, Reduce::Max)? else {
            return Err("ReduceLogSumExp of a non-float tensor".into());
        };
        let m = m.mapv(|v| if v.is_finite() { v } else { 0.0 });
        let shifted = Tensor::F32((a - &m).mapv(f32::exp));
        let Tensor::F32(s) = reduce(&shifted, &axes, true, Reduce::Sum)? else {
            return Err("ReduceLogSumExp of a non-float tensor".into());
        };
        let y = s.mapv(f32::ln) + &m;
        let y = Tensor::F32(y);
        if keep {
            Ok(y)
        } else {
            layout::squeeze(&y, &axes)
        }
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
            && d.consts[1].as_deref().and_then(|t| scalar_f32(t).ok()) == Some(0.0)
            && d.consts[2].as_deref().and_then(|t| scalar_f32(t).ok()) == Some(6.0);
    if relu6 {
        return un(UnOp::Relu6);
    }
    Ok(one(move |x| {
        if !x[0].dtype().is_float() {
            // integers: bounds of the input's type, applied as Max / Min
            let mut y = x[0].clone();
            if has_min {
                y = arith(BinOp::Max, &y, x[1])?;
            }
            if has_max {
                y = arith(BinOp::Min, &y, x[2])?;
            }
            return Ok(y);
        }
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
