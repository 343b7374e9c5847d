//! TF-dialect dispatch table: op name → a builder that reads the attributes once and returns a
//! kernel. Grouped by family; supporting a new op is one entry here plus, at most, one kernel.

use super::desc::OpDesc;
use super::kernels::conv::{conv2d_packed, conv_result_shape, pack_filter, Padding};
use super::kernels::depthwise::depthwise_conv2d;
use super::kernels::elementwise::{arith, compare, logical, select, BinOp, BinaryKernel, CmpOp, UnOp, UnaryKernel};
use super::kernels::join;
use super::kernels::layout::{self, StridedMasks};
use super::kernels::matmul::{MatMulKernel, Product};
use super::kernels::norm::{batch_norm, softmax};
use super::kernels::pool::pool2d;
use super::kernels::reduce::{reduce, reduce_bool, Reduce};
use super::kernels::{einsum::einsum, f32_arg, int_arg, ints_of, one, FnKernel, Identity, Kernel, KernelResult};
use crate::interp::kernels::epilogue::Epilogue;
use crate::interp::kernels::packed_gemm::PackOnce;
use crate::tensor::{DType, Tensor};
use std::sync::Arc;

pub type Builder = fn(&OpDesc) -> Result<Box<dyn Kernel>, String>;

/// Every TF op the interpreter runs, by family.
pub const TABLE: &[(&str, Builder)] = &[
    // identity-like
    ("tf.Identity", identity),
    ("tf.IdentityN", identity),
    ("tf.StopGradient", identity),
    ("tf.Snapshot", identity),
    ("tf.PreventGradient", identity),
    ("tf.CheckNumerics", identity),
    // nn
    ("tf.Conv2D", conv),
    ("tf.DepthwiseConv2dNative", depthwise),
    ("tf.MatMul", mat_mul),
    ("tf.BatchMatMul", batch_mat_mul),
    ("tf.BatchMatMulV2", batch_mat_mul),
    ("tf.BatchMatMulV3", batch_mat_mul),
    ("tf.Einsum", einsum_op),
    ("tf.BiasAdd", bias_add),
    ("tf.MaxPool", max_pool),
    ("tf.AvgPool", avg_pool),
    ("tf.Softmax", |_| {
        Ok(one(|x| Ok(Tensor::F32(softmax(f32_arg(x, 0)?, false)?))))
    }),
    ("tf.LogSoftmax", |_| {
        Ok(one(|x| Ok(Tensor::F32(softmax(f32_arg(x, 0)?, true)?))))
    }),
    ("tf.FusedBatchNorm", fused_batch_norm),
    ("tf.FusedBatchNormV2", fused_batch_norm),
    ("tf.FusedBatchNormV3", fused_batch_norm),
    // binary math
    ("tf.Add", |_| bin(BinOp::Add)),
    ("tf.AddV2", |_| bin(BinOp::Add)),
    ("tf.Sub", |_| bin(BinOp::Sub)),
    ("tf.Mul", |_| bin(BinOp::Mul)),
    ("tf.RealDiv", |_| bin(BinOp::Div)),
    ("tf.Div", |_| bin(BinOp::Div)),
    ("tf.DivNoNan", |_| bin(BinOp::DivNoNan)),
    ("tf.FloorDiv", |_| bin(BinOp::FloorDiv)),
    ("tf.FloorMod", |_| bin(BinOp::FloorMod)),
    ("tf.Maximum", |_| bin(BinOp::Max)),
    ("tf.Minimum", |_| bin(BinOp::Min)),
    ("tf.SquaredDifference", |_| bin(BinOp::SquaredDifference)),
    ("tf.Pow", |_| bin(BinOp::Pow)),
    ("tf.AddN", |_| {
        Ok(one(|x| {
            x.iter()
                .skip(1)
                .try_fold((*x.first().ok_or("AddN of nothing")?).clone(), |acc, t| {
                    arith(BinOp::Add, &acc, t)
                })
        }))
    }),
    // comparisons and logic
    ("tf.Less", |_| cmp(CmpOp::Less)),
    ("tf.LessEqual", |_| cmp(CmpOp::LessEqual)),
    ("tf.Greater", |_| cmp(CmpOp::Greater)),
    ("tf.GreaterEqual", |_| cmp(CmpOp::GreaterEqual)),
    ("tf.Equal", |_| cmp(CmpOp::Equal)),
    ("tf.NotEqual", |_| cmp(CmpOp::NotEqual)),
    ("tf.LogicalAnd", |_| Ok(one(|x| logical(x[0], x[1], |a, b| a && b)))),
    ("tf.LogicalOr", |_| Ok(one(|x| logical(x[0], x[1], |a, b| a || b)))),
    ("tf.LogicalNot", |_| {
        Ok(one(|x| match x[0] {
            Tensor::I1(a) => Ok(Tensor::I1(a.mapv(|b| !b))),
            t => Err(format!("LogicalNot of {}", t.dtype())),
        }))
    }),
    ("tf.Select", select_op),
    ("tf.SelectV2", |_| Ok(one(|x| select(x[0], x[1], x[2])))),
    // unary math
    ("tf.Relu", |_| un(UnOp::Relu)),
    ("tf.Relu6", |_| un(UnOp::Relu6)),
    ("tf.Elu", |_| un(UnOp::Elu)),
    // TensorFlow's constants (tf.nn.selu), rounded to f32 as its f32 kernel uses them
    ("tf.Selu", |_| {
        un(UnOp::Selu {
            alpha: 1.673_263_2,
            gamma: 1.050_701,
        })
    }),
    ("tf.LeakyRelu", |d| un(UnOp::LeakyRelu(d.f64_attr("alpha", 0.2) as f32))),
    ("tf.Sigmoid", |_| un(UnOp::Sigmoid)),
    ("tf.Tanh", |_| un(UnOp::Tanh)),
    ("tf.Erf", |_| un(UnOp::Erf)),
    ("tf.Exp", |_| un(UnOp::Exp)),
    ("tf.Log", |_| un(UnOp::Log)),
    ("tf.Sqrt", |_| un(UnOp::Sqrt)),
    ("tf.Rsqrt", |_| un(UnOp::Rsqrt)),
    ("tf.Neg", |_| un(UnOp::Neg)),
    ("tf.Square", |_| un(UnOp::Square)),
    ("tf.Abs", |_| un(UnOp::Abs)),
    ("tf.Reciprocal", |_| un(UnOp::Reciprocal)),
    ("tf.Inv", |_| un(UnOp::Reciprocal)),
    ("tf.Softplus", |_| un(UnOp::Softplus)),
    ("tf.Floor", |_| un(UnOp::Floor)),
    ("tf.Ceil", |_| un(UnOp::Ceil)),
    ("tf.Round", |_| un(UnOp::Round)),
    ("tf.Sign", |_| un(UnOp::Sign)),
    ("tf.Sin", |_| un(UnOp::Sin)),
    ("tf.Cos", |_| un(UnOp::Cos)),
    ("tf.ClipByValue", |_| {
        Ok(one(|x| arith(BinOp::Max, &arith(BinOp::Min, x[0], x[2])?, x[1])))
    }),
    // reductions
    ("tf.ArgMax", |d| arg_op(d, true)),
    ("tf.ArgMin", |d| arg_op(d, false)),
    ("tf.Mean", |d| red(d, Reduce::Mean)),
    ("tf.Sum", |d| red(d, Reduce::Sum)),
    ("tf.Max", |d| red(d, Reduce::Max)),
    ("tf.Min", |d| red(d, Reduce::Min)),
    ("tf.Prod", |d| red(d, Reduce::Prod)),
    ("tf.All", |d| {
        let k = d.bool_attr("keep_dims", false);
        Ok(one(move |x| reduce_bool(x[0], &int_arg(x, 1)?, k, true)))
    }),
    ("tf.Any", |d| {
        let k = d.bool_attr("keep_dims", false);
        Ok(one(move |x| reduce_bool(x[0], &int_arg(x, 1)?, k, false)))
    }),
    // layout
    ("tf.Reshape", |_| {
        Ok(one(|x| layout::reshape(x[0], &int_arg(x, 1)?, false)))
    }),
    ("tf.Squeeze", |d| {
        let dims = d.ints_attr("squeeze_dims").unwrap_or_default();
        Ok(one(move |x| layout::squeeze(x[0], &dims)))
    }),
    ("tf.ExpandDims", |_| {
        Ok(one(|x| layout::expand_dims(x[0], scalar_int(x, 1)?)))
    }),
    ("tf.ResizeBilinear", |d| resize_op(d, false)),
    ("tf.ResizeNearestNeighbor", |d| resize_op(d, true)),
    ("tf.BroadcastTo", |_| {
        Ok(one(|x| layout::broadcast_to(x[0], &int_arg(x, 1)?)))
    }),
    ("tf.Transpose", |_| {
        Ok(one(|x| layout::transpose(x[0], &int_arg(x, 1)?)))
    }),
    ("tf.ConcatV2", |_| {
        Ok(one(|x| {
            let (axis, vals) = x.split_last().ok_or("ConcatV2 of nothing")?;
            join::concat(vals, single(&ints_of(axis).ok_or("axis must be an integer")?)?)
        }))
    }),
    ("tf.Concat", |_| {
        Ok(one(|x| {
            let (axis, vals) = x.split_first().ok_or("Concat of nothing")?;
            join::concat(vals, single(&ints_of(axis).ok_or("axis must be an integer")?)?)
        }))
    }),
    ("tf.Pack", |d| {
        let a = d.int_attr("axis", 0);
        Ok(one(move |x| join::pack(x, a)))
    }),
    ("tf.Unpack", |d| {
        let a = d.int_attr("axis", 0);
        Ok(Box::new(FnKernel(move |x: &[&Tensor]| join::unpack(x[0], a))))
    }),
    ("tf.Split", split_op),
    ("tf.SplitV", |_| {
        Ok(Box::new(FnKernel(|x: &[&Tensor]| {
            join::split(x[0], scalar_int(x, 2)?, &int_arg(x, 1)?)
        })))
    }),
    ("tf.Slice", |_| {
        Ok(one(|x| layout::slice(x[0], &int_arg(x, 1)?, &int_arg(x, 2)?)))
    }),
    ("tf.StridedSlice", strided_slice_op),
    ("tf.Pad", |_| Ok(Box::new(PadKernel { value_operand: false }))),
    ("tf.PadV2", |_| Ok(Box::new(PadKernel { value_operand: true }))),
    ("tf.MirrorPad", |d| {
        let sym = d.choice("mode", &["REFLECT", "SYMMETRIC"], "REFLECT")? == "SYMMETRIC";
        Ok(one(move |x| layout::mirror_pad(x[0], &int_arg(x, 1)?, sym)))
    }),
    ("tf.Tile", |_| Ok(one(|x| layout::tile(x[0], &int_arg(x, 1)?)))),
    ("tf.Fill", |_| Ok(one(|x| layout::fill(&int_arg(x, 0)?, x[1])))),
    ("tf.ZerosLike", |_| {
        Ok(one(|x| {
            layout::cast(&layout::cast(x[0], DType::F64)?.zeroed(), x[0].dtype())
        }))
    }),
    ("tf.OnesLike", |_| {
        Ok(one(|x| {
            layout::cast(&layout::cast(x[0], DType::F64)?.oned(), x[0].dtype())
        }))
    }),
    ("tf.Shape", |d| {
        let t = d.result_dtype(0).unwrap_or(DType::I32);
        Ok(one(move |x| layout::shape_of(x[0], t)))
    }),
    ("tf.Rank", |_| {
        Ok(one(|x| {
            Ok(Tensor::I32(ndarray::arr0(x[0].shape().len() as i32).into_dyn()))
        }))
    }),
    ("tf.Size", |d| {
        let t = d.result_dtype(0).unwrap_or(DType::I32);
        Ok(one(move |x| {
            layout::cast(&Tensor::I64(ndarray::arr0(x[0].len() as i64).into_dyn()), t)
        }))
    }),
    ("tf.Cast", |d| {
        let t = d.result_dtype(0).ok_or("Cast to an unsupported type")?;
        Ok(one(move |x| layout::cast(x[0], t)))
    }),
    ("tf.GatherV2", gather_op),
    ("tf.Gather", gather_op),
    ("tf.Range", |_| Ok(one(range))),
];

/// The builder for a TF op.
pub fn lookup(name: &str) -> Option<Builder> {
    TABLE.iter().find(|(n, _)| *n == name).map(|(_, b)| *b)
}

trait Fill {
    fn zeroed(&self) -> Tensor;
    fn oned(&self) -> Tensor;
}
impl Fill for Tensor {
    fn zeroed(&self) -> Tensor {
        match self {
            Tensor::F64(a) => Tensor::F64(a.mapv(|_| 0.0)),
            t => t.clone(),
        }
    }
    fn oned(&self) -> Tensor {
        match self {
            Tensor::F64(a) => Tensor::F64(a.mapv(|_| 1.0)),
            t => t.clone(),
        }
    }
}

fn single(v: &[i64]) -> KernelResult<i64> {
    match v {
        [x] => Ok(*x),
        _ => Err(format!("expected a scalar, got {} values", v.len())),
    }
}

/// ResizeBilinear / ResizeNearestNeighbor on NHWC images to operand 1's [height, width], with
/// TensorFlow's three coordinate conventions mapped onto the shared resize kernel: legacy
/// (`x_in = x_out · in/out`, nearest floors), `align_corners` (corners meet, nearest rounds half
/// up) and `half_pixel_centers` (pixel centres meet; nearest floors from the centre).
fn resize_op(d: &OpDesc, nearest: bool) -> Result<Box<dyn Kernel>, String> {
    use super::kernels::resize::{resize, AxisResize, Coordinates, Filter, Mode, Nearest};
    let align = d.bool_attr("align_corners", false);
    let half = d.bool_attr("half_pixel_centers", false);
    let (coords, rounding) = match (align, half, nearest) {
        (true, true, _) => return Err("align_corners and half_pixel_centers are both set".into()),
        (true, false, _) => (Coordinates::AlignCorners, Nearest::RoundPreferCeil),
        (false, true, true) => (Coordinates::TfHalfPixelForNn, Nearest::Floor),
        (false, true, false) => (Coordinates::HalfPixel, Nearest::Floor),
        (false, false, _) => (Coordinates::Asymmetric, Nearest::Floor),
    };
    let filter = Filter {
        mode: if nearest { Mode::Nearest(rounding) } else { Mode::Linear },
        coords,
        antialias: false,
        exclude_outside: false,
        extrapolation: 0.0,
    };
    Ok(one(move |x| {
        let size = int_arg(x, 1)?;
        let sh = x[0].shape().to_vec();
        let [h, w] = size[..] else {
            return Err(format!("resize to {size:?}: the size is [height, width]"));
        };
        if sh.len() != 4 || h <= 0 || w <= 0 {
            return Err(format!(
                "resize of {sh:?} to [{h}, {w}]: expected NHWC images and a positive size"
            ));
        }
        let axes: Vec<AxisResize> = [
            (sh[0], 1.0),
            (h as usize, h as f64 / sh[1] as f64),
            (w as usize, w as f64 / sh[2] as f64),
            (sh[3], 1.0),
        ]
        .map(|(len_out, scale)| AxisResize {
            scale,
            len_out,
            roi: (0.0, 1.0),
        })
        .to_vec();
        // bilinear always yields f32, nearest keeps the input's type
        let src = if nearest {
            x[0].clone()
        } else {
            layout::cast(x[0], DType::F32)?
        };
        resize(&src, &axes, &filter)
    }))
}

/// ArgMax / ArgMin: the axis is operand 1; the index type is the result's (`output_type`).
fn arg_op(d: &OpDesc, max: bool) -> Result<Box<dyn Kernel>, String> {
    let out = d.result_dtype(0).unwrap_or(DType::I64);
    Ok(one(move |x| {
        let idx = super::kernels::reduce::arg_extreme(x[0], scalar_int(x, 1)?, max, false, false)?;
        layout::cast(&idx, out)
    }))
}

fn scalar_int(x: &[&Tensor], i: usize) -> KernelResult<i64> {
    single(&int_arg(x, i)?)
}

fn scalar_f64(t: &Tensor) -> KernelResult<f64> {
    match layout::cast(t, DType::F64)? {
        Tensor::F64(a) if a.len() == 1 => Ok(a.iter().next().copied().unwrap_or(0.0)),
        _ => Err("expected a scalar".into()),
    }
}

fn identity(_: &OpDesc) -> Result<Box<dyn Kernel>, String> {
    Ok(Box::new(Identity))
}

fn bin(op: BinOp) -> Result<Box<dyn Kernel>, String> {
    Ok(Box::new(BinaryKernel(op)))
}

fn cmp(op: CmpOp) -> Result<Box<dyn Kernel>, String> {
    Ok(one(move |x| compare(op, x[0], x[1])))
}

fn un(op: UnOp) -> Result<Box<dyn Kernel>, String> {
    Ok(Box::new(UnaryKernel(op)))
}

fn red(d: &OpDesc, op: Reduce) -> Result<Box<dyn Kernel>, String> {
    let keep = d.bool_attr("keep_dims", false);
    Ok(one(move |x| reduce(x[0], &int_arg(x, 1)?, keep, op)))
}

fn nhwc(d: &OpDesc) -> Result<(), String> {
    d.choice("data_format", &["NHWC"], "NHWC").map(|_| ())
}

/// [h, w] of a 4-element NHWC attribute (strides, dilations, ksize).
fn hw(d: &OpDesc, name: &str) -> Result<[usize; 2], String> {
    match d.ints_attr(name).as_deref() {
        None => Ok([1, 1]),
        Some([1, h, w, 1]) if *h > 0 && *w > 0 => Ok([*h as usize, *w as usize]),
        Some(v) => Err(format!("{name} = {v:?} is not supported (expected [1, h, w, 1])")),
    }
}

fn padding(d: &OpDesc) -> Result<Padding, String> {
    match d.choice("padding", &["SAME", "VALID", "EXPLICIT"], "VALID")?.as_str() {
        "SAME" => Ok(Padding::Same),
        "VALID" => Ok(Padding::Valid),
        _ => match d.ints_attr("explicit_paddings").as_deref() {
            Some([0, 0, t, b, l, r, 0, 0]) if [t, b, l, r].iter().all(|v| **v >= 0) => Ok(Padding::Explicit([
                (*t as usize, *b as usize),
                (*l as usize, *r as usize),
            ])),
            v => Err(format!("explicit_paddings = {v:?} is not supported")),
        },
    }
}

/// Pad and PadV2 (operand 2: the value); a convolution after a zero Pad may take its zeros
/// as its own padding (`interp::pad_fusion`).
struct PadKernel {
    value_operand: bool,
}

impl Kernel for PadKernel {
    fn run(&self, x: &[&Tensor]) -> KernelResult<Vec<Tensor>> {
        let value = if self.value_operand { scalar_f64(x[2])? } else { 0.0 };
        Ok(vec![layout::pad(x[0], &int_arg(x, 1)?, value)?])
    }

    /// `[[0, 0], [t, b], [l, r], [0, 0]]` of zeros, the spatial padding of an NHWC value.
    fn zero_spatial_pads(&self, rest: &[Option<&Tensor>]) -> Option<[(usize, usize); 2]> {
        let value = match (self.value_operand, rest.get(1)) {
            (false, _) => 0.0,
            (true, Some(Some(v))) => scalar_f64(v).ok()?,
            (true, _) => return None,
        };
        let p = ints_of(rest.first().copied().flatten()?)?;
        let spatial = |i: usize| usize::try_from(p[i]).ok();
        match (value == 0.0, p.as_slice()) {
            (true, [0, 0, _, _, _, _, 0, 0]) => Some([(spatial(2)?, spatial(3)?), (spatial(4)?, spatial(5)?)]),
            _ => None,
        }
    }
}

/// Conv2D and DepthwiseConv2dNative, with their fused-epilogue form.
struct ConvKernel {
    strides: [usize; 2],
    dilations: [usize; 2],
    padding: Padding,
    depthwise: bool,
    /// For a Conv2D whose filter is a constant: that filter packed for the GEMM on first use
    /// ([`pack_filter`]), shared with the padded form of the conv ([`Kernel::padded`]).
    packed: Option<Arc<PackOnce>>,
    /// The filter is a constant whose every weight is finite.
    finite_filter: bool,
    /// The filter is a constant 1×1 one.
    one_by_one: bool,
}

impl ConvKernel {
    fn go(&self, x: &[&Tensor], ep: Option<&Epilogue>) -> KernelResult<Vec<Tensor>> {
        let (a, f) = (f32_arg(x, 0)?, f32_arg(x, 1)?);
        let (s, d, p) = (self.strides, self.dilations, &self.padding);
        Ok(vec![Tensor::F32(if self.depthwise {
            depthwise_conv2d(a, f, s, d, p, ep)?
        } else {
            conv2d_packed(
                a,
                f,
                self.packed.as_deref().and_then(|once| once.get(|| pack_filter(f))),
                s,
                d,
                p,
                ep,
            )?
        })])
    }
}

impl Kernel for ConvKernel {
    fn run(&self, x: &[&Tensor]) -> KernelResult<Vec<Tensor>> {
        self.go(x, None)
    }
    fn run_fused(&self, x: &[&Tensor], ep: &Epilogue) -> Option<KernelResult<Vec<Tensor>>> {
        Some(self.go(x, Some(ep)))
    }
    /// The same conv with the zeros of a Pad before it (Keras' ZeroPadding2D before a VALID
    /// stride-2 conv) as padding of its own. The kernels skip the taps that fall in their
    /// padding (depthwise) or multiply-add a patch's zeros (conv): either way the sum the
    /// padded copy gives (adding ±0 to an accumulator that started at +0 leaves it), as long
    /// as every weight is finite (0·∞ is NaN). Not for SAME, whose padding depends on the
    /// input's size, nor for a 1×1 filter, as in the ONNX table.
    fn padded(&self, extra: [(usize, usize); 2]) -> Option<Box<dyn Kernel>> {
        let sum = |a: (usize, usize), b: (usize, usize)| (a.0 + b.0, a.1 + b.1);
        let padding = match &self.padding {
            Padding::Valid => Padding::Explicit(extra),
            Padding::Explicit(p) => Padding::Explicit([sum(p[0], extra[0]), sum(p[1], extra[1])]),
            Padding::Same => return None,
        };
        if !self.finite_filter || self.one_by_one {
            return None;
        }
        Some(Box::new(ConvKernel {
            padding,
            packed: self.packed.clone(),
            ..*self
        }))
    }

    fn result_shapes(&self, x: &[&Tensor]) -> Option<KernelResult<Vec<(DType, Vec<usize>)>>> {
        let shape = |a: &ndarray::ArrayD<f32>, f: &ndarray::ArrayD<f32>| {
            conv_result_shape(
                a.shape(),
                f.shape(),
                self.strides,
                self.dilations,
                &self.padding,
                self.depthwise,
            )
        };
        Some(
            f32_arg(x, 0)
                .and_then(|a| shape(a, f32_arg(x, 1)?))
                .map(|s| vec![(DType::F32, s)]),
        )
    }
}

fn conv_kernel(d: &OpDesc, depthwise: bool) -> Result<Box<dyn Kernel>, String> {
    nhwc(d)?;
    let filter = d.consts.get(1).and_then(Option::as_deref);
    Ok(Box::new(ConvKernel {
        strides: hw(d, "strides")?,
        dilations: hw(d, "dilations")?,
        padding: padding(d)?,
        depthwise,
        packed: match filter {
            Some(Tensor::F32(_)) if !depthwise => Some(Arc::default()),
            _ => None,
        },
        finite_filter: matches!(filter, Some(Tensor::F32(f)) if f.iter().all(|w| w.is_finite())),
        one_by_one: matches!(filter, Some(t) if t.shape().get(..2) == Some(&[1, 1])),
    }))
}

fn conv(d: &OpDesc) -> Result<Box<dyn Kernel>, String> {
    conv_kernel(d, false)
}

fn depthwise(d: &OpDesc) -> Result<Box<dyn Kernel>, String> {
    conv_kernel(d, true)
}

fn mat_mul(d: &OpDesc) -> Result<Box<dyn Kernel>, String> {
    let (ta, tb) = (d.bool_attr("transpose_a", false), d.bool_attr("transpose_b", false));
    Ok(Box::new(MatMulKernel::new(
        Product::Batched { ta, tb, rank2: true },
        d.consts.get(1).and_then(Option::as_deref),
    )))
}

fn batch_mat_mul(d: &OpDesc) -> Result<Box<dyn Kernel>, String> {
    let (ta, tb) = (d.bool_attr("adj_x", false), d.bool_attr("adj_y", false));
    Ok(Box::new(MatMulKernel::new(
        Product::Batched { ta, tb, rank2: false },
        d.consts.get(1).and_then(Option::as_deref),
    )))
}

fn einsum_op(d: &OpDesc) -> Result<Box<dyn Kernel>, String> {
    let eq = d.str_attr("equation").ok_or("Einsum without an equation")?.to_string();
    Ok(one(move |x| einsum(&eq, x)))
}

fn bias_add(d: &OpDesc) -> Result<Box<dyn Kernel>, String> {
    let nchw = d.choice("data_format", &["NHWC", "NCHW"], "NHWC")? == "NCHW";
    let rank1_bias = d
        .operand_types
        .get(1)
        .and_then(|t| t.as_ref())
        .is_some_and(|t| t.dims.len() == 1);
    if !nchw && rank1_bias {
        // NHWC: the bias runs along the last axis, an in-place broadcast add
        return Ok(Box::new(BinaryKernel(BinOp::Add)));
    }
    Ok(one(move |x| {
        let (v, b) = (x[0], x[1]);
        if b.shape().len() != 1 {
            return Err(format!("BiasAdd bias must be rank 1, got {:?}", b.shape()));
        }
        let axis = if nchw {
            1
        } else {
            v.shape().len().checked_sub(1).ok_or("BiasAdd of a scalar")?
        };
        if v.shape().get(axis) != Some(&b.shape()[0]) {
            return Err(format!(
                "bias of {} does not match dim {axis} of {:?}",
                b.shape()[0],
                v.shape()
            ));
        }
        if nchw {
            let mut s = vec![1i64; v.shape().len() - 1];
            s[0] = b.shape()[0] as i64;
            return arith(BinOp::Add, v, &layout::reshape(b, &s, false)?);
        }
        arith(BinOp::Add, v, b)
    }))
}

fn pool(d: &OpDesc, max: bool) -> Result<Box<dyn Kernel>, String> {
    nhwc(d)?;
    let (k, s, p) = (hw(d, "ksize")?, hw(d, "strides")?, padding(d)?);
    Ok(one(move |x| Ok(Tensor::F32(pool2d(f32_arg(x, 0)?, k, s, &p, max)?))))
}
fn max_pool(d: &OpDesc) -> Result<Box<dyn Kernel>, String> {
    pool(d, true)
}
fn avg_pool(d: &OpDesc) -> Result<Box<dyn Kernel>, String> {
    pool(d, false)
}

fn fused_batch_norm(d: &OpDesc) -> Result<Box<dyn Kernel>, String> {
    if d.bool_attr("is_training", false) {
        return Err("FusedBatchNorm with is_training = true is not an inference op".into());
    }
    let nchw = d.choice("data_format", &["NHWC", "NCHW"], "NHWC")? == "NCHW";
    let eps = d.f64_attr("epsilon", 1e-3) as f32;
    let n_results = d.result_types.len();
    Ok(Box::new(FnKernel(move |x: &[&Tensor]| {
        let v = f32_arg(x, 0)?;
        let axis = if nchw {
            1
        } else {
            v.ndim().checked_sub(1).ok_or("batch norm of a scalar")?
        };
        let y = batch_norm(
            v,
            f32_arg(x, 1)?,
            f32_arg(x, 2)?,
            f32_arg(x, 3)?,
            f32_arg(x, 4)?,
            eps,
            axis,
        )?;
        // the other results (batch mean/variance, reserve spaces) echo the moving statistics
        let mut out = vec![Tensor::F32(y)];
        for i in 1..n_results {
            out.push(
                x.get(if i % 2 == 1 { 3 } else { 4 })
                    .map(|t| (*t).clone())
                    .unwrap_or_else(|| x[3].clone()),
            );
        }
        Ok(out)
    })))
}

fn split_op(d: &OpDesc) -> Result<Box<dyn Kernel>, String> {
    let n = d.int_attr("num_split", d.result_types.len() as i64);
    Ok(Box::new(FnKernel(move |x: &[&Tensor]| {
        let axis = scalar_int(x, 0)?;
        let v = x[1];
        let a = super::kernels::norm_axis(axis, v.shape().len())?;
        let dsz = v.shape()[a] as i64;
        if n <= 0 || dsz % n != 0 {
            return Err(format!("cannot split a dim of {dsz} into {n} equal parts"));
        }
        join::split(v, axis, &vec![dsz / n; n as usize])
    })))
}

fn select_op(_: &OpDesc) -> Result<Box<dyn Kernel>, String> {
    Ok(one(|x| {
        // TF Select: a rank-1 condition picks whole rows of higher-rank operands
        let (c, t) = (x[0], x[1]);
        if c.shape().len() == 1 && t.shape().len() > 1 {
            let mut s = vec![1i64; t.shape().len()];
            s[0] = c.shape()[0] as i64;
            return select(&layout::reshape(c, &s, false)?, t, x[2]);
        }
        select(c, t, x[2])
    }))
}

fn strided_slice_op(d: &OpDesc) -> Result<Box<dyn Kernel>, String> {
    let m = StridedMasks {
        begin: d.int_attr("begin_mask", 0),
        end: d.int_attr("end_mask", 0),
        ellipsis: d.int_attr("ellipsis_mask", 0),
        new_axis: d.int_attr("new_axis_mask", 0),
        shrink_axis: d.int_attr("shrink_axis_mask", 0),
    };
    Ok(one(move |x| {
        layout::strided_slice(x[0], &int_arg(x, 1)?, &int_arg(x, 2)?, &int_arg(x, 3)?, m)
    }))
}

fn gather_op(d: &OpDesc) -> Result<Box<dyn Kernel>, String> {
    if d.int_attr("batch_dims", 0) != 0 {
        return Err("GatherV2 with batch_dims != 0 is not supported".into());
    }
    let has_axis = d.name == "tf.GatherV2";
    Ok(one(move |x| {
        let axis = if has_axis { scalar_int(x, 2)? } else { 0 };
        let idx = int_arg(x, 1)?;
        layout::gather(x[0], &idx, x[1].shape(), axis)
    }))
}

fn range(x: &[&Tensor]) -> KernelResult<Tensor> {
    let (s, l, d) = (scalar_f64(x[0])?, scalar_f64(x[1])?, scalar_f64(x[2])?);
    if d == 0.0 {
        return Err("Range with delta 0".into());
    }
    let n = ((l - s) / d).ceil().max(0.0) as usize;
    let v: Vec<f64> = (0..n).map(|i| s + i as f64 * d).collect();
    layout::cast(&Tensor::F64(super::kernels::from_vec(&[n], v)?), x[0].dtype())
}
