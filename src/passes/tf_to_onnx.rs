//! `tf-to-onnx`: rewrites TensorFlow-dialect ops into ONNX-dialect ops, so that a model read
//! from a SavedModel directory or a TF `.mlir` file is quantized with ONNX's rules and written
//! as a QDQ `.onnx` model.
//!
//! TensorFlow computes images as NHWC, ONNX as NCHW. Each op that has a layout (convolution,
//! pooling, batch norm) reads an NCHW *twin* of its NHWC input and produces an NCHW result,
//! followed by a Transpose back to NHWC for whoever needs TF's layout. Layout-free ops
//! (elementwise, padding, reductions, concatenation) whose input has a twin compute on the twin
//! too, with their constants transposed ahead of time; the Transposes nobody reads are erased
//! at the end, so a chain of convolutions and activations has one Transpose at each end.
//!
//! ```mlir
//! %c = "tf.Conv2D"(%x, %w) {padding = "SAME", strides = [1, 2, 2, 1]}    // %w: 3x3x8x16 (HWIO)
//! %b = "tf.BiasAdd"(%c, %bias)                                           // %bias: 16
//! %r = "tf.Relu6"(%b)
//! // becomes
//! %xt = "onnx.Transpose"(%x) {perm = [0, 3, 1, 2]}
//! %c' = "onnx.Conv"(%xt, %w') {kernel_shape = [3, 3], pads = [0, 0, 1, 1], strides = [2, 2]}
//! //                                                                    // %w': 16x8x3x3 (OIHW)
//! %b' = "onnx.Add"(%c', %bias')                                          // %bias': 1x16x1x1
//! %r' = "onnx.Clip"(%b', %zero, %six)
//! %r = "onnx.Transpose"(%r') {perm = [0, 2, 3, 1]}
//! ```
//! The ops are written in their opset-13 form (axes of ReduceSum and Squeeze as inputs, of the
//! other reductions as attributes). A TF op with no entry in [`TABLE`] stops the pass before it
//! changes anything, with every such op named.

use super::fold_constants::{constant_value, insert_constant};
use super::{erase_with_dead_constants, PassOptions, PassReport};
use crate::formats::infer_types::tensor_type_of;
use crate::formats::onnx::types::onnx_element;
use crate::interp::kernels::{ints_of, layout};
use crate::ir::attrs::{op_attrs, AttrValue};
use crate::ir::graph::{body_ops, defining_op, erase_op, functions, insert_before, op_name, replace_all_uses, uses};
use crate::ir::keys::location_name;
use crate::ir::types::{element_type, tensor_type, Dim};
use crate::ir::IrError;
use crate::tensor::Tensor;
use melior::ir::attribute::{
    ArrayAttribute, DenseI64ArrayAttribute, FloatAttribute, IntegerAttribute, StringAttribute,
};
use melior::ir::operation::{OperationBuilder, OperationLike, OperationMutLike};
use melior::ir::r#type::IntegerType;
use melior::ir::{Attribute, Identifier, Location, Module, OperationRef, Type, Value, ValueLike};
use melior::Context;
use std::collections::{BTreeMap, HashMap};

/// NHWC → NCHW, and back.
const TO_NCHW: [usize; 4] = [0, 3, 1, 2];
const TO_NHWC: [usize; 4] = [0, 2, 3, 1];

/// How a TF op becomes ONNX.
#[derive(Clone, Copy)]
enum Rule {
    /// The same op, elementwise over all operands (numpy broadcasting on both sides).
    Elementwise(&'static str),
    /// Its own lowering.
    Custom(Lower),
}

type Lower = for<'c, 'a> fn(&mut Lowering<'c, 'a>, OperationRef<'c, 'a>) -> Result<(), IrError>;

use Rule::{Custom, Elementwise};

/// Every TF op the pass lowers, grouped by family.
const TABLE: &[(&str, Rule)] = &[
    // nn
    ("tf.Conv2D", Custom(conv)),
    ("tf.DepthwiseConv2dNative", Custom(conv)),
    ("tf.MatMul", Custom(matmul)),
    ("tf.BatchMatMul", Custom(matmul)),
    ("tf.BatchMatMulV2", Custom(matmul)),
    ("tf.BatchMatMulV3", Custom(matmul)),
    ("tf.BiasAdd", Custom(bias_add)),
    ("tf.MaxPool", Custom(pool)),
    ("tf.AvgPool", Custom(pool)),
    ("tf.FusedBatchNorm", Custom(batch_norm)),
    ("tf.FusedBatchNormV3", Custom(batch_norm)),
    ("tf.ResizeBilinear", Custom(resize)),
    ("tf.ResizeNearestNeighbor", Custom(resize)),
    ("tf.Softmax", Custom(softmax)),
    ("tf.LogSoftmax", Custom(softmax)),
    // activations
    ("tf.Relu", Elementwise("onnx.Relu")),
    ("tf.Relu6", Custom(relu6)),
    ("tf.LeakyRelu", Custom(leaky_relu)),
    ("tf.Elu", Elementwise("onnx.Elu")),
    ("tf.Selu", Elementwise("onnx.Selu")),
    ("tf.Softplus", Elementwise("onnx.Softplus")),
    ("tf.Sigmoid", Elementwise("onnx.Sigmoid")),
    ("tf.Tanh", Elementwise("onnx.Tanh")),
    // math
    ("tf.Add", Elementwise("onnx.Add")),
    ("tf.AddV2", Elementwise("onnx.Add")),
    ("tf.AddN", Elementwise("onnx.Sum")),
    ("tf.Sub", Elementwise("onnx.Sub")),
    ("tf.Mul", Elementwise("onnx.Mul")),
    ("tf.RealDiv", Elementwise("onnx.Div")),
    ("tf.Div", Elementwise("onnx.Div")),
    ("tf.FloorDiv", Custom(floor_div)),
    ("tf.Maximum", Elementwise("onnx.Max")),
    ("tf.Minimum", Elementwise("onnx.Min")),
    ("tf.Pow", Elementwise("onnx.Pow")),
    ("tf.Neg", Elementwise("onnx.Neg")),
    ("tf.Abs", Elementwise("onnx.Abs")),
    ("tf.Exp", Elementwise("onnx.Exp")),
    ("tf.Log", Elementwise("onnx.Log")),
    ("tf.Sqrt", Elementwise("onnx.Sqrt")),
    ("tf.Rsqrt", Custom(rsqrt)),
    ("tf.Square", Custom(square)),
    ("tf.SquaredDifference", Custom(squared_difference)),
    ("tf.Reciprocal", Elementwise("onnx.Reciprocal")),
    ("tf.Inv", Elementwise("onnx.Reciprocal")),
    ("tf.Erf", Elementwise("onnx.Erf")),
    ("tf.Floor", Elementwise("onnx.Floor")),
    ("tf.Ceil", Elementwise("onnx.Ceil")),
    ("tf.Round", Elementwise("onnx.Round")),
    ("tf.Sign", Elementwise("onnx.Sign")),
    ("tf.Sin", Elementwise("onnx.Sin")),
    ("tf.Cos", Elementwise("onnx.Cos")),
    ("tf.Mean", Custom(reduce)),
    ("tf.Sum", Custom(reduce)),
    ("tf.Max", Custom(reduce)),
    ("tf.Min", Custom(reduce)),
    ("tf.Prod", Custom(reduce)),
    // array
    ("tf.Reshape", Custom(reshape)),
    ("tf.Squeeze", Custom(squeeze)),
    ("tf.ExpandDims", Custom(expand_dims)),
    ("tf.ConcatV2", Custom(concat)),
    ("tf.Pad", Custom(pad)),
    ("tf.PadV2", Custom(pad)),
    ("tf.MirrorPad", Custom(pad)),
    ("tf.Transpose", Custom(transpose)),
    ("tf.Cast", Custom(cast)),
    ("tf.Shape", Custom(shape)),
    ("tf.StridedSlice", Custom(strided_slice)),
    ("tf.Slice", Custom(slice)),
    ("tf.Pack", Custom(pack)),
    ("tf.GatherV2", Custom(gather)),
    ("tf.Split", Custom(split)),
    ("tf.SplitV", Custom(split)),
    ("tf.Tile", Custom(tile_or_expand)),
    ("tf.BroadcastTo", Custom(tile_or_expand)),
    ("tf.ClipByValue", Custom(clip_by_value)),
    ("tf.ArgMax", Custom(arg_extreme)),
    ("tf.ArgMin", Custom(arg_extreme)),
    // logic
    ("tf.Less", Elementwise("onnx.Less")),
    ("tf.LessEqual", Elementwise("onnx.LessOrEqual")),
    ("tf.Greater", Elementwise("onnx.Greater")),
    ("tf.GreaterEqual", Elementwise("onnx.GreaterOrEqual")),
    ("tf.Equal", Elementwise("onnx.Equal")),
    ("tf.NotEqual", Custom(not_equal)),
    ("tf.LogicalAnd", Elementwise("onnx.And")),
    ("tf.LogicalOr", Elementwise("onnx.Or")),
    ("tf.LogicalNot", Elementwise("onnx.Not")),
    ("tf.SelectV2", Elementwise("onnx.Where")),
    ("tf.Identity", Custom(identity)),
    ("tf.IdentityN", Custom(identity)),
    ("tf.StopGradient", Custom(identity)),
    ("tf.Snapshot", Custom(identity)),
];

fn rule_of(name: &str) -> Option<Rule> {
    TABLE.iter().find(|(n, _)| *n == name).map(|(_, r)| *r)
}

fn err(e: impl std::fmt::Display) -> IrError {
    IrError::Invalid(e.to_string())
}

fn key(v: Value) -> usize {
    v.to_raw().ptr as usize
}

/// The pass state: the NCHW twin of each NHWC value that has one.
pub struct Lowering<'c, 'a> {
    ctx: &'c Context,
    twins: HashMap<usize, Value<'c, 'a>>,
    /// Transposes this pass inserted, erased at the end when nothing reads them.
    transposes: Vec<OperationRef<'c, 'a>>,
    /// Constants made so far (their names count up).
    constants: usize,
    report: PassReport,
}

/// The shape of a ranked tensor value; dynamic dimensions as `None`.
fn dims(v: Value) -> Option<Vec<Option<usize>>> {
    type_dims(v.r#type())
}

fn type_dims(t: Type) -> Option<Vec<Option<usize>>> {
    tensor_type(t).map(|t| {
        t.dims
            .iter()
            .map(|d| match d {
                Dim::Static(n) => Some(*n),
                Dim::Dynamic => None,
            })
            .collect()
    })
}

fn rank(v: Value) -> Option<usize> {
    dims(v).map(|d| d.len())
}

/// A ranked tensor type of `elem` with `dims` (`None` = dynamic).
fn ranked<'c>(elem: Type<'c>, dims: &[Option<usize>]) -> Type<'c> {
    let d: Vec<Option<i64>> = dims.iter().map(|x| x.map(|n| n as i64)).collect();
    tensor_type_of(elem, Some(&d))
}

/// `t` with its dimensions permuted (`out[i] = in[perm[i]]`).
fn permuted_type<'c>(t: Type<'c>, perm: &[usize]) -> Result<Type<'c>, IrError> {
    let d = type_dims(t)
        .filter(|d| d.len() == perm.len())
        .ok_or_else(|| err(format!("cannot permute type {t} by {perm:?}")))?;
    Ok(ranked(element_of(t), &perm.iter().map(|&p| d[p]).collect::<Vec<_>>()))
}

/// The element type of a shaped type; any other type is its own element.
fn element_of(t: Type) -> Type {
    element_type(t).unwrap_or(t)
}

fn constant_of(v: Value) -> Option<Tensor> {
    defining_op(v).and_then(constant_value)
}

/// Integer values of a constant operand (axes, paddings, shapes).
fn const_ints(op: OperationRef, i: usize) -> Result<Vec<i64>, IrError> {
    let v = op.operand(i).map_err(err)?;
    constant_of(v)
        .as_ref()
        .and_then(ints_of)
        .ok_or_else(|| err(format!("{}: operand {i} must be an integer constant", label(op))))
}

/// How an op is named in errors: its node name, else its op name.
fn label(op: OperationRef) -> String {
    match location_name(op.location()) {
        Some(n) => format!("{} ({n})", op_name(&op)),
        None => op_name(&op),
    }
}

fn norm_axis(a: i64, rank: usize) -> Option<usize> {
    let r = rank as i64;
    let a = if a < 0 { a + r } else { a };
    (0..r).contains(&a).then_some(a as usize)
}

/// Where NHWC axis `a` sits in NCHW.
fn nchw_axis(a: usize) -> usize {
    TO_NCHW.iter().position(|&p| p == a).unwrap_or(a)
}

fn attr_ints(a: &BTreeMap<String, AttrValue>, k: &str) -> Option<Vec<i64>> {
    a.get(k).and_then(AttrValue::as_ints)
}

fn attr_str<'m>(a: &'m BTreeMap<String, AttrValue>, k: &str) -> Option<&'m str> {
    a.get(k).and_then(AttrValue::as_str)
}

impl<'c, 'a> Lowering<'c, 'a> {
    fn int(&self, v: i64) -> Attribute<'c> {
        IntegerAttribute::new(IntegerType::new(self.ctx, 64).into(), v).into()
    }
    fn ints(&self, v: &[i64]) -> Attribute<'c> {
        DenseI64ArrayAttribute::new(self.ctx, v).into()
    }
    fn float(&self, v: f64) -> Attribute<'c> {
        FloatAttribute::new(self.ctx, Type::float32(self.ctx), v).into()
    }
    fn string(&self, s: &str) -> Attribute<'c> {
        StringAttribute::new(self.ctx, s).into()
    }

    /// The location of a new op derived from `op`: its name, plus `suffix` when not empty.
    fn loc(&self, op: OperationRef<'c, 'a>, suffix: &str) -> Location<'c> {
        match (location_name(op.location()), suffix) {
            (Some(n), "") => Location::name(self.ctx, &n, Location::unknown(self.ctx)),
            (Some(n), s) => Location::name(self.ctx, &format!("{n}/{s}"), Location::unknown(self.ctx)),
            (None, _) => op.location(),
        }
    }

    /// Builds `name(operands) {attrs}` with `results` before `anchor`.
    fn build(
        &mut self,
        anchor: OperationRef<'c, 'a>,
        name: &str,
        operands: &[Value<'c, 'a>],
        attrs: &[(&str, Attribute<'c>)],
        results: &[Type<'c>],
        loc: Location<'c>,
    ) -> Result<OperationRef<'c, 'a>, IrError> {
        let attrs: Vec<(Identifier, Attribute)> =
            attrs.iter().map(|(k, v)| (Identifier::new(self.ctx, k), *v)).collect();
        let op = OperationBuilder::new(name, loc)
            .add_operands(operands)
            .add_attributes(&attrs)
            .add_results(results)
            .build()
            .map_err(|e| err(format!("cannot build {name}: {e}")))?;
        self.report.count(&format!("{name} written"));
        insert_before(anchor, op)
    }

    /// One-result form of [`Self::build`].
    fn build1(
        &mut self,
        anchor: OperationRef<'c, 'a>,
        name: &str,
        operands: &[Value<'c, 'a>],
        attrs: &[(&str, Attribute<'c>)],
        result: Type<'c>,
        loc: Location<'c>,
    ) -> Result<Value<'c, 'a>, IrError> {
        let op = self.build(anchor, name, operands, attrs, &[result], loc)?;
        Ok(op.result(0).map_err(err)?.into())
    }

    /// A new constant before `anchor`, named after it (`conv1/const3`): a constant without a
    /// name would get a positional key, which can collide with the positional names the
    /// lowered ops carry over from the TF ops.
    fn constant(&mut self, anchor: OperationRef<'c, 'a>, t: &Tensor) -> Result<Value<'c, 'a>, IrError> {
        self.constants += 1;
        let loc = self.loc(anchor, &format!("const{}", self.constants));
        let c = insert_constant(anchor, t, false, loc)?;
        Ok(c.result(0).map_err(err)?.into())
    }

    fn i64s(&mut self, anchor: OperationRef<'c, 'a>, v: &[i64]) -> Result<Value<'c, 'a>, IrError> {
        let t = Tensor::I64(ndarray::ArrayD::from_shape_vec(vec![v.len()], v.to_vec()).map_err(err)?);
        self.constant(anchor, &t)
    }

    /// A scalar constant of `like`'s float element type.
    fn scalar_like(&mut self, anchor: OperationRef<'c, 'a>, like: Value, v: f64) -> Result<Value<'c, 'a>, IrError> {
        let t = match tensor_type(like.r#type()).and_then(|t| t.dtype) {
            Some(crate::tensor::DType::F64) => Tensor::F64(ndarray::arr0(v).into_dyn()),
            Some(crate::tensor::DType::F16) => Tensor::F16(ndarray::arr0(half::f16::from_f64(v)).into_dyn()),
            Some(crate::tensor::DType::BF16) => Tensor::BF16(ndarray::arr0(half::bf16::from_f64(v)).into_dyn()),
            _ => Tensor::F32(ndarray::arr0(v as f32).into_dyn()),
        };
        self.constant(anchor, &t)
    }

    fn transpose_op(
        &mut self,
        anchor: OperationRef<'c, 'a>,
        v: Value<'c, 'a>,
        perm: &[usize],
        loc: Location<'c>,
    ) -> Result<Value<'c, 'a>, IrError> {
        let p: Vec<i64> = perm.iter().map(|&x| x as i64).collect();
        let ty = permuted_type(v.r#type(), perm)?;
        let attr = self.ints(&p);
        let op = self.build(anchor, "onnx.Transpose", &[v], &[("perm", attr)], &[ty], loc)?;
        self.transposes.push(op);
        Ok(op.result(0).map_err(err)?.into())
    }

    fn has_twin(&self, v: Value) -> bool {
        self.twins.contains_key(&key(v))
    }

    /// Whether `v` can be read in NCHW: a twin, a rank-4 value (through a Transpose), or a
    /// constant that broadcasts against a rank-4 value.
    fn nchw_ok(&self, v: Value) -> bool {
        self.has_twin(v) || rank(v) == Some(4) || constant_of(v).is_some_and(|t| t.shape().len() <= 4)
    }

    /// `v` in NCHW: its twin, its constant transposed (rank padded to 4 as broadcasting
    /// would), or a Transpose of it.
    fn nchw_of(&mut self, anchor: OperationRef<'c, 'a>, v: Value<'c, 'a>) -> Result<Value<'c, 'a>, IrError> {
        if let Some(t) = self.twins.get(&key(v)) {
            return Ok(*t);
        }
        if let Some(t) = constant_of(v) {
            if t.shape().is_empty() || t.len() == 1 && t.shape().len() < 4 {
                return Ok(v);
            }
            if t.shape().len() <= 4 {
                let mut shape = vec![1i64; 4 - t.shape().len()];
                shape.extend(t.shape().iter().map(|&d| d as i64));
                let r = layout::reshape(&t, &shape, false).map_err(err)?;
                let p: Vec<i64> = TO_NCHW.iter().map(|&x| x as i64).collect();
                let c = layout::transpose(&r, &p).map_err(err)?;
                return self.constant(anchor, &c);
            }
        }
        if rank(v) != Some(4) {
            return Err(err(format!("a value of type {} has no NCHW form", v.r#type())));
        }
        let loc = match defining_op(v) {
            Some(d) => self.loc(d, "nchw"),
            None => {
                // a function argument: named after its key's position
                let k = unsafe { mlir_sys::mlirBlockArgumentGetArgNumber(v.to_raw()) };
                Location::name(self.ctx, &format!("arg#{k}/nchw"), Location::unknown(self.ctx))
            }
        };
        let t = self.transpose_op(anchor, v, &TO_NCHW, loc)?;
        self.twins.insert(key(v), t);
        Ok(t)
    }

    /// Result `i` of `op` is `y`, computed in NCHW: the NHWC users read a Transpose of it.
    fn finish_nchw(&mut self, op: OperationRef<'c, 'a>, i: usize, y: Value<'c, 'a>) -> Result<(), IrError> {
        let r: Value = op.result(i).map_err(err)?.into();
        let loc = self.loc(op, "nhwc");
        let t = self.transpose_op(op, y, &TO_NHWC, loc)?;
        replace_all_uses(r, t);
        self.twins.insert(key(t), y);
        Ok(())
    }

    /// Result `i` of `op` is `y`, in TF's own layout.
    fn finish(&mut self, op: OperationRef<'c, 'a>, i: usize, y: Value<'c, 'a>) -> Result<(), IrError> {
        let r: Value = op.result(i).map_err(err)?.into();
        replace_all_uses(r, y);
        Ok(())
    }

    /// The one-result op's replacement in TF's layout: `name(operands) {attrs}` with the op's
    /// own result type and name.
    fn replace(
        &mut self,
        op: OperationRef<'c, 'a>,
        name: &str,
        operands: &[Value<'c, 'a>],
        attrs: &[(&str, Attribute<'c>)],
    ) -> Result<(), IrError> {
        let ty = self.result_type(op, 0)?;
        let loc = self.loc(op, "");
        let y = self.build1(op, name, operands, attrs, ty, loc)?;
        self.finish(op, 0, y)
    }

    fn result_type(&self, op: OperationRef<'c, 'a>, i: usize) -> Result<Type<'c>, IrError> {
        Ok(op.result(i).map_err(err)?.r#type())
    }

    /// `name` over `operands` (the extra ones scalars or broadcast constants), in NCHW when
    /// the result is rank 4, some operand has a twin and every operand can be read in NCHW.
    fn elementwise_on(
        &mut self,
        op: OperationRef<'c, 'a>,
        name: &str,
        operands: &[Value<'c, 'a>],
        attrs: &[(&str, Attribute<'c>)],
    ) -> Result<(), IrError> {
        let ty = self.result_type(op, 0)?;
        let result: Value = op.result(0).map_err(err)?.into();
        let nchw = rank(result) == Some(4)
            && operands.iter().any(|v| self.has_twin(*v))
            && operands.iter().all(|v| self.nchw_ok(*v));
        let loc = self.loc(op, "");
        if nchw {
            let ins = operands
                .iter()
                .map(|v| self.nchw_of(op, *v))
                .collect::<Result<Vec<_>, _>>()?;
            let y = self.build1(op, name, &ins, attrs, permuted_type(ty, &TO_NCHW)?, loc)?;
            self.finish_nchw(op, 0, y)
        } else {
            let y = self.build1(op, name, operands, attrs, ty, loc)?;
            self.finish(op, 0, y)
        }
    }
}

fn operands<'c, 'a>(op: OperationRef<'c, 'a>) -> Vec<Value<'c, 'a>> {
    op.operands().collect()
}

fn elementwise<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>, name: &str) -> Result<(), IrError> {
    let ins = operands(op);
    let mut attrs = Vec::new();
    let a = op_attrs(&op);
    // TF's Elu/Selu constants are ONNX's defaults; LeakyRelu carries its own
    if name == "onnx.LeakyRelu" {
        attrs.push((
            "alpha",
            l.float(a.get("alpha").and_then(AttrValue::as_f64).unwrap_or(0.2)),
        ));
    }
    l.elementwise_on(op, name, &ins, &attrs)
}

fn leaky_relu<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), IrError> {
    elementwise(l, op, "onnx.LeakyRelu")
}

/// `Relu6(x)` is `Clip(x, 0, 6)`, which int8 kernels fuse as ReLU6.
fn relu6<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), IrError> {
    let x = op.operand(0).map_err(err)?;
    let lo = l.scalar_like(op, x, 0.0)?;
    let hi = l.scalar_like(op, x, 6.0)?;
    l.elementwise_on(op, "onnx.Clip", &[x, lo, hi], &[])
}

/// Runs `first` into a temporary op, then `second` on its result; `Rsqrt = Reciprocal(Sqrt)`.
fn two_step<'c, 'a>(
    l: &mut Lowering<'c, 'a>,
    op: OperationRef<'c, 'a>,
    first: &str,
    first_operands: &[Value<'c, 'a>],
    second: &str,
    square_second: bool,
) -> Result<(), IrError> {
    let ty = l.result_type(op, 0)?;
    let result: Value = op.result(0).map_err(err)?.into();
    let nchw = rank(result) == Some(4)
        && first_operands.iter().any(|v| l.has_twin(*v))
        && first_operands.iter().all(|v| l.nchw_ok(*v));
    let (ins, ty) = if nchw {
        let ins = first_operands
            .iter()
            .map(|v| l.nchw_of(op, *v))
            .collect::<Result<Vec<_>, _>>()?;
        (ins, permuted_type(ty, &TO_NCHW)?)
    } else {
        (first_operands.to_vec(), ty)
    };
    let loc1 = l.loc(op, &first.replace("onnx.", "").to_lowercase());
    let t = l.build1(op, first, &ins, &[], ty, loc1)?;
    let second_ins = if square_second { vec![t, t] } else { vec![t] };
    let loc = l.loc(op, "");
    let y = l.build1(op, second, &second_ins, &[], ty, loc)?;
    if nchw {
        l.finish_nchw(op, 0, y)
    } else {
        l.finish(op, 0, y)
    }
}

fn rsqrt<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), IrError> {
    let x = operands(op);
    two_step(l, op, "onnx.Sqrt", &x, "onnx.Reciprocal", false)
}

fn not_equal<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), IrError> {
    let x = operands(op);
    two_step(l, op, "onnx.Equal", &x, "onnx.Not", false)
}

/// Float `FloorDiv` is `Floor(Div)`; ONNX's integer `Div` truncates, which TF's does not.
fn floor_div<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), IrError> {
    let ty = l.result_type(op, 0)?;
    if !tensor_type(ty).and_then(|t| t.dtype).is_some_and(|d| d.is_float()) {
        return Err(err(format!(
            "{}: integer FloorDiv has no ONNX form (ONNX's Div truncates)",
            label(op)
        )));
    }
    let x = operands(op);
    two_step(l, op, "onnx.Div", &x, "onnx.Floor", false)
}

fn square<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), IrError> {
    let x = op.operand(0).map_err(err)?;
    l.elementwise_on(op, "onnx.Mul", &[x, x], &[])
}

fn squared_difference<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), IrError> {
    let x = operands(op);
    two_step(l, op, "onnx.Sub", &x, "onnx.Mul", true)
}

/// `BiasAdd` is an `Add` whose bias broadcasts on the channel axis; for NCHW data the bias is
/// reshaped to `[C, 1, ..., 1]` first.
fn bias_add<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), IrError> {
    let a = op_attrs(&op);
    let (x, b) = (op.operand(0).map_err(err)?, op.operand(1).map_err(err)?);
    if attr_str(&a, "data_format") != Some("NCHW") {
        return l.elementwise_on(op, "onnx.Add", &[x, b], &[]);
    }
    let r = rank(x).ok_or_else(|| err(format!("{}: unranked input", label(op))))?;
    let mut shape = vec![-1i64];
    shape.extend(std::iter::repeat_n(1, r.saturating_sub(2)));
    let b2 = match constant_of(b) {
        Some(t) => {
            let t = layout::reshape(&t, &shape, false).map_err(err)?;
            l.constant(op, &t)?
        }
        None => {
            let s = l.i64s(op, &shape)?;
            let c = dims(b).and_then(|d| d.first().copied().flatten());
            let d: Vec<Option<usize>> = std::iter::once(c)
                .chain(std::iter::repeat_n(Some(1), r.saturating_sub(2)))
                .collect();
            let ty = ranked(element_of(b.r#type()), &d);
            let loc = l.loc(op, "bias");
            l.build1(op, "onnx.Reshape", &[b, s], &[], ty, loc)?
        }
    };
    l.replace(op, "onnx.Add", &[x, b2], &[])
}

/// TF's SAME padding of one spatial axis: the extra pixel goes at the end (ONNX SAME_UPPER).
fn same_pads(input: usize, k: usize, s: usize, d: usize) -> (i64, i64) {
    let out = input.div_ceil(s.max(1));
    let needed = ((out.saturating_sub(1)) * s + (k.saturating_sub(1)) * d + 1).saturating_sub(input);
    let begin = needed / 2;
    (begin as i64, (needed - begin) as i64)
}

/// ONNX padding attributes for a TF window op on `hw` with kernel `k`, strides `s`, dilations
/// `d`: explicit `pads` where the spatial size is known, `auto_pad` otherwise.
fn window_pads(
    a: &BTreeMap<String, AttrValue>,
    hw: [Option<usize>; 2],
    k: [usize; 2],
    s: [usize; 2],
    d: [usize; 2],
    spatial: [usize; 2],
    op: OperationRef,
) -> Result<Result<Vec<i64>, &'static str>, IrError> {
    match attr_str(a, "padding").unwrap_or("VALID") {
        "VALID" => Ok(Ok(vec![0; 4])),
        "SAME" => match hw {
            [Some(h), Some(w)] => {
                let (t, b) = same_pads(h, k[0], s[0], d[0]);
                let (l, r) = same_pads(w, k[1], s[1], d[1]);
                Ok(Ok(vec![t, l, b, r]))
            }
            _ => Ok(Err("SAME_UPPER")),
        },
        "EXPLICIT" => {
            let p = attr_ints(a, "explicit_paddings").unwrap_or_default();
            if p.len() != 8 {
                return Err(err(format!(
                    "{}: explicit_paddings has {} values, not 8",
                    label(op),
                    p.len()
                )));
            }
            let [h, w] = spatial;
            Ok(Ok(vec![p[2 * h], p[2 * w], p[2 * h + 1], p[2 * w + 1]]))
        }
        other => Err(err(format!("{}: padding \"{other}\" has no ONNX form", label(op)))),
    }
}

fn two(v: &[i64], at: [usize; 2], what: &str, op: OperationRef) -> Result<[usize; 2], IrError> {
    let get = |i: usize| {
        v.get(i)
            .copied()
            .filter(|&x| x > 0)
            .map(|x| x as usize)
            .ok_or_else(|| err(format!("{}: {what} {v:?} has no positive value at axis {i}", label(op))))
    };
    Ok([get(at[0])?, get(at[1])?])
}

/// `Conv2D` (HWIO filter) and `DepthwiseConv2dNative` (`[KH, KW, C, M]` filter) as an NCHW
/// `Conv` with an OIHW weight (`[C·M, 1, KH, KW]` and `group = C` for depthwise).
fn conv<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), IrError> {
    let a = op_attrs(&op);
    let depthwise = op_name(&op) == "tf.DepthwiseConv2dNative";
    let nchw_data = attr_str(&a, "data_format") == Some("NCHW");
    let spatial = if nchw_data { [2, 3] } else { [1, 2] };
    let (x, f) = (op.operand(0).map_err(err)?, op.operand(1).map_err(err)?);
    let fdims = dims(f)
        .filter(|d| d.len() == 4 && d.iter().all(Option::is_some))
        .map(|d| d.into_iter().flatten().collect::<Vec<usize>>())
        .ok_or_else(|| err(format!("{}: the filter needs a static rank-4 shape", label(op))))?;
    let (kh, kw, fi, fo) = (fdims[0], fdims[1], fdims[2], fdims[3]);
    let xd = dims(x)
        .filter(|d| d.len() == 4)
        .ok_or_else(|| err(format!("{}: the input is not rank 4", label(op))))?;
    let strides = two(&attr_ints(&a, "strides").unwrap_or(vec![1; 4]), spatial, "strides", op)?;
    let dil = two(
        &attr_ints(&a, "dilations").unwrap_or(vec![1; 4]),
        spatial,
        "dilations",
        op,
    )?;
    let channels = xd[if nchw_data { 1 } else { 3 }];
    let group = if depthwise {
        fi
    } else {
        match channels {
            Some(c) if fi > 0 && c % fi == 0 => c / fi,
            Some(c) => return Err(err(format!("{}: {c} input channels for a filter of {fi}", label(op)))),
            None => 1,
        }
    };
    let pads = window_pads(
        &a,
        [xd[spatial[0]], xd[spatial[1]]],
        [kh, kw],
        strides,
        dil,
        spatial,
        op,
    )?;
    // the weight in OIHW
    let (w_shape, perm): (Vec<i64>, [i64; 4]) = if depthwise {
        (vec![kh as i64, kw as i64, 1, (fi * fo) as i64], [3, 2, 0, 1])
    } else {
        (fdims.iter().map(|&d| d as i64).collect(), [3, 2, 0, 1])
    };
    let w = match constant_of(f) {
        Some(t) => {
            let t = layout::reshape(&t, &w_shape, false).map_err(err)?;
            let t = layout::transpose(&t, &perm).map_err(err)?;
            l.constant(op, &t)?
        }
        None => {
            let mut f2 = f;
            if depthwise {
                let s = l.i64s(op, &w_shape)?;
                let elem = element_of(f.r#type());
                let ty = ranked(elem, &w_shape.iter().map(|&d| Some(d as usize)).collect::<Vec<_>>());
                let loc = l.loc(op, "filter");
                f2 = l.build1(op, "onnx.Reshape", &[f, s], &[], ty, loc)?;
            }
            let loc = l.loc(op, "filter_oihw");
            l.transpose_op(op, f2, &[3, 2, 0, 1], loc)?
        }
    };
    let xin = if nchw_data { x } else { l.nchw_of(op, x)? };
    let mut attrs = vec![
        ("dilations", l.ints(&[dil[0] as i64, dil[1] as i64])),
        ("group", l.int(group as i64)),
        ("kernel_shape", l.ints(&[kh as i64, kw as i64])),
        ("strides", l.ints(&[strides[0] as i64, strides[1] as i64])),
    ];
    match pads {
        Ok(p) => attrs.push(("pads", l.ints(&p))),
        Err(auto) => attrs.push(("auto_pad", l.string(auto))),
    }
    let ty = l.result_type(op, 0)?;
    let loc = l.loc(op, "");
    if nchw_data {
        let y = l.build1(op, "onnx.Conv", &[xin, w], &attrs, ty, loc)?;
        l.finish(op, 0, y)
    } else {
        let y = l.build1(op, "onnx.Conv", &[xin, w], &attrs, permuted_type(ty, &TO_NCHW)?, loc)?;
        l.finish_nchw(op, 0, y)
    }
}

/// `MaxPool` / `AvgPool` (NHWC `ksize` and `strides`) as NCHW pooling; TF's average leaves the
/// padding out, as ONNX's default `count_include_pad = 0` does.
fn pool<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), IrError> {
    let a = op_attrs(&op);
    let nchw_data = attr_str(&a, "data_format") == Some("NCHW");
    let spatial = if nchw_data { [2, 3] } else { [1, 2] };
    let x = op.operand(0).map_err(err)?;
    let xd = dims(x)
        .filter(|d| d.len() == 4)
        .ok_or_else(|| err(format!("{}: the input is not rank 4", label(op))))?;
    let k = two(&attr_ints(&a, "ksize").unwrap_or_default(), spatial, "ksize", op)?;
    let s = two(&attr_ints(&a, "strides").unwrap_or(vec![1; 4]), spatial, "strides", op)?;
    let pads = window_pads(&a, [xd[spatial[0]], xd[spatial[1]]], k, s, [1, 1], spatial, op)?;
    let name = if op_name(&op) == "tf.MaxPool" {
        "onnx.MaxPool"
    } else {
        "onnx.AveragePool"
    };
    let mut attrs = vec![
        ("kernel_shape", l.ints(&[k[0] as i64, k[1] as i64])),
        ("strides", l.ints(&[s[0] as i64, s[1] as i64])),
    ];
    match pads {
        Ok(p) => attrs.push(("pads", l.ints(&p))),
        Err(auto) => attrs.push(("auto_pad", l.string(auto))),
    }
    let ty = l.result_type(op, 0)?;
    let loc = l.loc(op, "");
    if nchw_data {
        let y = l.build1(op, name, &[x], &attrs, ty, loc)?;
        l.finish(op, 0, y)
    } else {
        let xin = l.nchw_of(op, x)?;
        let y = l.build1(op, name, &[xin], &attrs, permuted_type(ty, &TO_NCHW)?, loc)?;
        l.finish_nchw(op, 0, y)
    }
}

/// Inference-mode `FusedBatchNorm` as `BatchNormalization` on NCHW.
fn batch_norm<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), IrError> {
    let a = op_attrs(&op);
    if a.get("is_training").and_then(AttrValue::as_bool) == Some(true) {
        return Err(err(format!(
            "{}: training-mode batch norm has no inference form",
            label(op)
        )));
    }
    for i in 1..op.result_count() {
        if !uses(op.result(i).map_err(err)?.into()).is_empty() {
            return Err(err(format!(
                "{}: result {i} (batch statistics) is used; only the normalized output has an ONNX form",
                label(op)
            )));
        }
    }
    let ins = operands(op);
    if ins.len() < 5 {
        return Err(err(format!("{}: {} operands, not 5", label(op), ins.len())));
    }
    let eps = a.get("epsilon").and_then(AttrValue::as_f64).unwrap_or(1e-4);
    let attrs = [("epsilon", l.float(eps))];
    let ty = l.result_type(op, 0)?;
    let loc = l.loc(op, "");
    if attr_str(&a, "data_format") == Some("NCHW") {
        let y = l.build1(op, "onnx.BatchNormalization", &ins[..5], &attrs, ty, loc)?;
        return l.finish(op, 0, y);
    }
    let mut nins = ins[..5].to_vec();
    nins[0] = l.nchw_of(op, ins[0])?;
    let y = l.build1(
        op,
        "onnx.BatchNormalization",
        &nins,
        &attrs,
        permuted_type(ty, &TO_NCHW)?,
        loc,
    )?;
    l.finish_nchw(op, 0, y)
}

/// `ResizeBilinear` / `ResizeNearestNeighbor` (NHWC, constant `[h, w]`) as ONNX `Resize` on
/// NCHW with `sizes`, TF's `align_corners` / `half_pixel_centers` as the coordinate
/// transformation and rounding TF uses.
fn resize<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), IrError> {
    let a = op_attrs(&op);
    let nearest = op_name(&op) == "tf.ResizeNearestNeighbor";
    let flag = |k: &str| a.get(k).and_then(AttrValue::as_bool).unwrap_or(false);
    let (coords, rounding) = match (flag("align_corners"), flag("half_pixel_centers"), nearest) {
        (true, true, _) => {
            return Err(err(format!(
                "{}: align_corners and half_pixel_centers are both set",
                label(op)
            )))
        }
        (true, false, _) => ("align_corners", "round_prefer_ceil"),
        (false, true, true) => ("tf_half_pixel_for_nn", "floor"),
        (false, true, false) => ("half_pixel", "floor"),
        (false, false, _) => ("asymmetric", "floor"),
    };
    let x = op.operand(0).map_err(err)?;
    let xd = dims(x).filter(|d| d.len() == 4);
    let (n, c) = match xd.as_deref() {
        Some([Some(n), _, _, Some(c)]) => (*n as i64, *c as i64),
        _ => {
            return Err(err(format!(
                "{}: the input needs a static batch and channel count",
                label(op)
            )))
        }
    };
    let size = const_ints(op, 1)?;
    let [h, w] = size.as_slice() else {
        return Err(err(format!("{}: size {size:?} is not [height, width]", label(op))));
    };
    let ty = l.result_type(op, 0)?;
    let mut xin = l.nchw_of(op, x)?;
    // bilinear yields float whatever the input; ONNX's Resize keeps the input's type
    if !nearest && element_of(xin.r#type()) != element_of(ty) {
        let to = onnx_element(element_of(ty)).ok_or_else(|| err(format!("{}: result type", label(op))))?;
        let to = l.int(to as i64);
        let cast_ty = ranked(element_of(ty), &dims(xin).unwrap_or_default());
        let loc = l.loc(op, "cast");
        xin = l.build1(op, "onnx.Cast", &[xin], &[("to", to)], cast_ty, loc)?;
    }
    let none_ty = unsafe { Type::from_raw(mlir_sys::mlirNoneTypeGet(l.ctx.to_raw())) };
    let none = l.build1(
        op,
        crate::formats::onnx::import::NO_VALUE,
        &[],
        &[],
        none_ty,
        Location::unknown(l.ctx),
    )?;
    let sizes = l.i64s(op, &[n, c, *h, *w])?;
    let mut attrs = vec![
        ("coordinate_transformation_mode", l.string(coords)),
        ("mode", l.string(if nearest { "nearest" } else { "linear" })),
    ];
    if nearest {
        attrs.push(("nearest_mode", l.string(rounding)));
    }
    let loc = l.loc(op, "");
    let y = l.build1(
        op,
        "onnx.Resize",
        &[xin, none, none, sizes],
        &attrs,
        permuted_type(ty, &TO_NCHW)?,
        loc,
    )?;
    l.finish_nchw(op, 0, y)
}

fn softmax<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), IrError> {
    let name = if op_name(&op) == "tf.Softmax" {
        "onnx.Softmax"
    } else {
        "onnx.LogSoftmax"
    };
    let x = op.operand(0).map_err(err)?;
    let axis = l.int(-1);
    l.replace(op, name, &[x], &[("axis", axis)])
}

/// `a @ b` with TF's transpose / adjoint flags made explicit: on constants ahead of time, on
/// activations as a Transpose of the two last axes.
fn matmul<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), IrError> {
    let a = op_attrs(&op);
    let flag = |k: &str| a.get(k).and_then(AttrValue::as_bool).unwrap_or(false);
    let (ta, tb) = if op_name(&op) == "tf.MatMul" {
        (flag("transpose_a"), flag("transpose_b"))
    } else {
        (flag("adj_x"), flag("adj_y"))
    };
    let mut ins = Vec::new();
    for (i, t) in [(0, ta), (1, tb)] {
        let v = op.operand(i).map_err(err)?;
        if !t {
            ins.push(v);
            continue;
        }
        let r = rank(v)
            .filter(|&r| r >= 2)
            .ok_or_else(|| err(format!("{}: operand {i} is not a matrix", label(op))))?;
        let mut perm: Vec<usize> = (0..r).collect();
        perm.swap(r - 2, r - 1);
        ins.push(match constant_of(v) {
            Some(c) => {
                let p: Vec<i64> = perm.iter().map(|&x| x as i64).collect();
                let c = layout::transpose(&c, &p).map_err(err)?;
                l.constant(op, &c)?
            }
            None => {
                let loc = l.loc(op, &format!("transpose_{i}"));
                l.transpose_op(op, v, &perm, loc)?
            }
        });
    }
    l.replace(op, "onnx.MatMul", &ins, &[])
}

/// Whether dropping `axes` from a twin leaves the remaining axes in TF's order, so that the
/// result needs no transpose back.
fn order_kept(axes: &[usize]) -> bool {
    let kept: Vec<usize> = (0..4).filter(|a| !axes.contains(a)).map(nchw_axis).collect();
    kept.windows(2).all(|w| w[0] < w[1])
}

/// `Mean`/`Sum`/`Max`/`Min`/`Prod` over constant axes.
fn reduce<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), IrError> {
    let a = op_attrs(&op);
    let keep = a.get("keep_dims").and_then(AttrValue::as_bool).unwrap_or(false);
    let x = op.operand(0).map_err(err)?;
    let r = rank(x).ok_or_else(|| err(format!("{}: unranked input", label(op))))?;
    let axes: Vec<usize> = const_ints(op, 1)?
        .iter()
        .map(|&v| norm_axis(v, r).ok_or_else(|| err(format!("{}: axis {v} out of rank {r}", label(op)))))
        .collect::<Result<_, _>>()?;
    let name = match op_name(&op).as_str() {
        "tf.Mean" => "onnx.ReduceMean",
        "tf.Sum" => "onnx.ReduceSum",
        "tf.Max" => "onnx.ReduceMax",
        "tf.Min" => "onnx.ReduceMin",
        _ => "onnx.ReduceProd",
    };
    let on_twin = r == 4 && l.has_twin(x) && (keep || order_kept(&axes));
    let (xin, axes): (Value, Vec<i64>) = if on_twin {
        let mut s: Vec<i64> = axes.iter().map(|&a| nchw_axis(a) as i64).collect();
        s.sort_unstable();
        (l.nchw_of(op, x)?, s)
    } else {
        (x, axes.iter().map(|&a| a as i64).collect())
    };
    let ty = l.result_type(op, 0)?;
    let ty = if on_twin && keep {
        permuted_type(ty, &TO_NCHW)?
    } else {
        ty
    };
    let keepdims = l.int(keep as i64);
    let loc = l.loc(op, "");
    // opset 13: ReduceSum reads its axes from an input, the others from an attribute
    let y = if name == "onnx.ReduceSum" {
        let ax = l.i64s(op, &axes)?;
        l.build1(op, name, &[xin, ax], &[("keepdims", keepdims)], ty, loc)?
    } else {
        let ax = l.ints(&axes);
        l.build1(op, name, &[xin], &[("axes", ax), ("keepdims", keepdims)], ty, loc)?
    };
    if on_twin && keep {
        l.finish_nchw(op, 0, y)
    } else {
        l.finish(op, 0, y)
    }
}

/// A TF int32 shape operand as the int64 ONNX wants: a constant converted, else a Cast.
fn i64_operand<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>, i: usize) -> Result<Value<'c, 'a>, IrError> {
    let v = op.operand(i).map_err(err)?;
    if let Some(t) = constant_of(v) {
        let vals = ints_of(&t).ok_or_else(|| err(format!("{}: operand {i} is not integer", label(op))))?;
        let t = Tensor::I64(ndarray::ArrayD::from_shape_vec(t.shape().to_vec(), vals).map_err(err)?);
        return l.constant(op, &t);
    }
    let d = dims(v).ok_or_else(|| err(format!("{}: operand {i} is unranked", label(op))))?;
    let ty = ranked(IntegerType::new(l.ctx, 64).into(), &d);
    let to = l.int(crate::formats::onnx::proto::data_type::INT64 as i64);
    let loc = l.loc(op, "shape_i64");
    l.build1(op, "onnx.Cast", &[v], &[("to", to)], ty, loc)
}

fn reshape<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), IrError> {
    let x = op.operand(0).map_err(err)?;
    let s = i64_operand(l, op, 1)?;
    l.replace(op, "onnx.Reshape", &[x, s], &[])
}

fn squeeze<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), IrError> {
    let a = op_attrs(&op);
    let x = op.operand(0).map_err(err)?;
    let d = dims(x).ok_or_else(|| err(format!("{}: unranked input", label(op))))?;
    let r = d.len();
    let given = attr_ints(&a, "squeeze_dims").unwrap_or_default();
    let axes: Vec<usize> = if given.is_empty() {
        // every unit axis, which needs them known
        if d.iter().any(Option::is_none) {
            return Err(err(format!(
                "{}: squeezing all unit axes of a dynamic shape",
                label(op)
            )));
        }
        (0..r).filter(|&i| d[i] == Some(1)).collect()
    } else {
        given
            .iter()
            .map(|&v| norm_axis(v, r).ok_or_else(|| err(format!("{}: axis {v} out of rank {r}", label(op)))))
            .collect::<Result<_, _>>()?
    };
    let on_twin = r == 4 && l.has_twin(x) && order_kept(&axes);
    let (xin, mut ax): (Value, Vec<i64>) = if on_twin {
        (l.nchw_of(op, x)?, axes.iter().map(|&a| nchw_axis(a) as i64).collect())
    } else {
        (x, axes.iter().map(|&a| a as i64).collect())
    };
    ax.sort_unstable();
    let axv = l.i64s(op, &ax)?;
    l.replace(op, "onnx.Squeeze", &[xin, axv], &[])
}

fn expand_dims<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), IrError> {
    let x = op.operand(0).map_err(err)?;
    let out_rank =
        rank(op.result(0).map_err(err)?.into()).ok_or_else(|| err(format!("{}: unranked result", label(op))))?;
    let dim = const_ints(op, 1)?;
    let [d] = dim.as_slice() else {
        return Err(err(format!("{}: dim must be one value", label(op))));
    };
    let a = norm_axis(*d, out_rank).ok_or_else(|| err(format!("{}: dim {d} out of rank {out_rank}", label(op))))?;
    let axv = l.i64s(op, &[a as i64])?;
    l.replace(op, "onnx.Unsqueeze", &[x, axv], &[])
}

fn concat<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), IrError> {
    let ins = operands(op);
    let n = ins.len();
    if n < 2 {
        return Err(err(format!("{}: no axis operand", label(op))));
    }
    let values = &ins[..n - 1];
    let result: Value = op.result(0).map_err(err)?.into();
    let r = rank(result).ok_or_else(|| err(format!("{}: unranked result", label(op))))?;
    let axis = const_ints(op, n - 1)?;
    let [axis] = axis.as_slice() else {
        return Err(err(format!("{}: axis must be one value", label(op))));
    };
    let axis = norm_axis(*axis, r).ok_or_else(|| err(format!("{}: axis {axis} out of rank {r}", label(op))))?;
    let ty = l.result_type(op, 0)?;
    let loc = l.loc(op, "");
    let nchw =
        r == 4 && values.iter().any(|v| l.has_twin(*v)) && values.iter().all(|v| l.has_twin(*v) || rank(*v) == Some(4));
    if nchw {
        let ins = values
            .iter()
            .map(|v| l.nchw_of(op, *v))
            .collect::<Result<Vec<_>, _>>()?;
        let ax = l.int(nchw_axis(axis) as i64);
        let y = l.build1(
            op,
            "onnx.Concat",
            &ins,
            &[("axis", ax)],
            permuted_type(ty, &TO_NCHW)?,
            loc,
        )?;
        l.finish_nchw(op, 0, y)
    } else {
        let ax = l.int(axis as i64);
        let y = l.build1(op, "onnx.Concat", values, &[("axis", ax)], ty, loc)?;
        l.finish(op, 0, y)
    }
}

/// `Pad` / `PadV2` / `MirrorPad(REFLECT)`: TF's `[[b0, e0], [b1, e1], ...]` paddings as ONNX's
/// `[b0, b1, ..., e0, e1, ...]`, reordered for a twin.
fn pad<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), IrError> {
    let a = op_attrs(&op);
    let name = op_name(&op);
    let mode = if name == "tf.MirrorPad" {
        match attr_str(&a, "mode") {
            Some("REFLECT") => "reflect",
            m => {
                return Err(err(format!(
                    "{}: mode {} has no ONNX form (only REFLECT)",
                    label(op),
                    m.unwrap_or("?")
                )))
            }
        }
    } else {
        "constant"
    };
    let x = op.operand(0).map_err(err)?;
    let r = rank(x).ok_or_else(|| err(format!("{}: unranked input", label(op))))?;
    let p = const_ints(op, 1)?;
    if p.len() != 2 * r {
        return Err(err(format!("{}: {} paddings for rank {r}", label(op), p.len())));
    }
    let on_twin = r == 4 && l.has_twin(x);
    let order: Vec<usize> = if on_twin { TO_NCHW.to_vec() } else { (0..r).collect() };
    let mut pads: Vec<i64> = order.iter().map(|&i| p[2 * i]).collect();
    pads.extend(order.iter().map(|&i| p[2 * i + 1]));
    let xin = if on_twin { l.nchw_of(op, x)? } else { x };
    let pv = l.i64s(op, &pads)?;
    let mut ins = vec![xin, pv];
    if name == "tf.PadV2" {
        ins.push(op.operand(2).map_err(err)?);
    }
    let ty = l.result_type(op, 0)?;
    let ty = if on_twin { permuted_type(ty, &TO_NCHW)? } else { ty };
    let m = l.string(mode);
    let loc = l.loc(op, "");
    let y = l.build1(op, "onnx.Pad", &ins, &[("mode", m)], ty, loc)?;
    if on_twin {
        l.finish_nchw(op, 0, y)
    } else {
        l.finish(op, 0, y)
    }
}

fn transpose<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), IrError> {
    let x = op.operand(0).map_err(err)?;
    let perm = const_ints(op, 1)?;
    let p = l.ints(&perm);
    l.replace(op, "onnx.Transpose", &[x], &[("perm", p)])
}

fn cast<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), IrError> {
    let x = op.operand(0).map_err(err)?;
    let elem = element_of(l.result_type(op, 0)?);
    let to = onnx_element(elem).ok_or_else(|| err(format!("{}: {elem} has no ONNX type", label(op))))?;
    let to = l.int(to as i64);
    l.replace(op, "onnx.Cast", &[x], &[("to", to)])
}

/// `Shape` is int64 in ONNX; TF's int32 form gets a Cast.
fn shape<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), IrError> {
    let x = op.operand(0).map_err(err)?;
    let r = rank(x).ok_or_else(|| err(format!("{}: unranked input", label(op))))?;
    let ty = l.result_type(op, 0)?;
    let i64t = ranked(IntegerType::new(l.ctx, 64).into(), &[Some(r)]);
    let loc = l.loc(op, "");
    let elem = element_of(ty);
    if elem == IntegerType::new(l.ctx, 64).into() {
        let y = l.build1(op, "onnx.Shape", &[x], &[], ty, loc)?;
        return l.finish(op, 0, y);
    }
    let loc64 = l.loc(op, "i64");
    let s = l.build1(op, "onnx.Shape", &[x], &[], i64t, loc64)?;
    let to = onnx_element(elem).ok_or_else(|| err(format!("{}: {elem} has no ONNX type", label(op))))?;
    let to = l.int(to as i64);
    let y = l.build1(op, "onnx.Cast", &[s], &[("to", to)], ty, loc)?;
    l.finish(op, 0, y)
}

/// `StridedSlice` with constant begin/end/strides as ONNX `Slice`, then `Squeeze` of the
/// shrunk axes. Masks become ONNX's clamped bounds: a masked begin is the first element in the
/// step's direction, a masked end runs past the last.
fn strided_slice<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), IrError> {
    let a = op_attrs(&op);
    let mask = |k: &str| a.get(k).and_then(AttrValue::as_int).unwrap_or(0);
    if mask("ellipsis_mask") != 0 || mask("new_axis_mask") != 0 {
        return Err(err(format!(
            "{}: ellipsis_mask / new_axis_mask have no ONNX Slice form",
            label(op)
        )));
    }
    let (begin, end, strides) = (const_ints(op, 1)?, const_ints(op, 2)?, const_ints(op, 3)?);
    if begin.len() != end.len() || begin.len() != strides.len() || strides.contains(&0) {
        return Err(err(format!(
            "{}: begin/end/strides {begin:?} {end:?} {strides:?}",
            label(op)
        )));
    }
    let (bm, em, sm) = (mask("begin_mask"), mask("end_mask"), mask("shrink_axis_mask"));
    let (mut starts, mut ends, mut shrink) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..begin.len() {
        let bit = 1i64 << i;
        let up = strides[i] > 0;
        if sm & bit != 0 {
            // one element: [b, b + 1), with b = -1 running to the end
            starts.push(begin[i]);
            ends.push(if begin[i] == -1 { i64::MAX } else { begin[i] + 1 });
            shrink.push(i as i64);
            continue;
        }
        starts.push(match (bm & bit != 0, up) {
            (true, true) => 0,
            (true, false) => i64::MAX,
            (false, _) => begin[i],
        });
        ends.push(match (em & bit != 0, up) {
            (true, true) => i64::MAX,
            (true, false) => i64::MIN,
            (false, _) => end[i],
        });
    }
    let steps: Vec<i64> = (0..begin.len())
        .map(|i| if sm & (1 << i) != 0 { 1 } else { strides[i] })
        .collect();
    let axes: Vec<i64> = (0..begin.len() as i64).collect();
    let x = op.operand(0).map_err(err)?;
    let ins = [
        x,
        l.i64s(op, &starts)?,
        l.i64s(op, &ends)?,
        l.i64s(op, &axes)?,
        l.i64s(op, &steps)?,
    ];
    let ty = l.result_type(op, 0)?;
    let loc = l.loc(op, "");
    if shrink.is_empty() {
        let y = l.build1(op, "onnx.Slice", &ins, &[], ty, loc)?;
        return l.finish(op, 0, y);
    }
    // the slice keeps the shrunk axes at size 1
    let r = rank(x).ok_or_else(|| err(format!("{}: unranked input", label(op))))?;
    let out = dims(op.result(0).map_err(err)?.into()).unwrap_or_default();
    let mut kept = out.iter();
    let sliced: Vec<Option<usize>> = (0..r as i64)
        .map(|i| {
            if shrink.contains(&i) {
                Some(1)
            } else {
                kept.next().copied().flatten()
            }
        })
        .collect();
    let mid = ranked(element_of(ty), &sliced);
    let loc_s = l.loc(op, "slice");
    let s1 = l.build1(op, "onnx.Slice", &ins, &[], mid, loc_s)?;
    let ax = l.i64s(op, &shrink)?;
    let y = l.build1(op, "onnx.Squeeze", &[s1, ax], &[], ty, loc)?;
    l.finish(op, 0, y)
}

/// `Slice(x, begin, size)`: ends are `begin + size`, or the end of the axis for `size = -1`.
fn slice<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), IrError> {
    let (begin, size) = (const_ints(op, 1)?, const_ints(op, 2)?);
    if begin.len() != size.len() {
        return Err(err(format!("{}: begin {begin:?} and size {size:?}", label(op))));
    }
    let ends: Vec<i64> = begin
        .iter()
        .zip(&size)
        .map(|(&b, &s)| if s < 0 { i64::MAX } else { b + s })
        .collect();
    let axes: Vec<i64> = (0..begin.len() as i64).collect();
    let x = op.operand(0).map_err(err)?;
    let ins = [x, l.i64s(op, &begin)?, l.i64s(op, &ends)?, l.i64s(op, &axes)?];
    l.replace(op, "onnx.Slice", &ins, &[])
}

/// `Pack` (tf.stack) as an `Unsqueeze` of each value, then `Concat`.
fn pack<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), IrError> {
    let a = op_attrs(&op);
    let r = rank(op.result(0).map_err(err)?.into()).ok_or_else(|| err(format!("{}: unranked result", label(op))))?;
    let axis = a.get("axis").and_then(AttrValue::as_int).unwrap_or(0);
    let axis = norm_axis(axis, r).ok_or_else(|| err(format!("{}: axis {axis} out of rank {r}", label(op))))?;
    let mut parts = Vec::new();
    for (i, v) in operands(op).into_iter().enumerate() {
        let mut d = dims(v).ok_or_else(|| err(format!("{}: unranked operand", label(op))))?;
        d.insert(axis.min(d.len()), Some(1));
        let t = ranked(element_of(v.r#type()), &d);
        let ax = l.i64s(op, &[axis as i64])?;
        let loc = l.loc(op, &format!("unsqueeze_{i}"));
        parts.push(l.build1(op, "onnx.Unsqueeze", &[v, ax], &[], t, loc)?);
    }
    let ax = l.int(axis as i64);
    l.replace(op, "onnx.Concat", &parts, &[("axis", ax)])
}

fn gather<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), IrError> {
    let a = op_attrs(&op);
    if a.get("batch_dims").and_then(AttrValue::as_int).unwrap_or(0) != 0 {
        return Err(err(format!("{}: batch_dims has no ONNX Gather form", label(op))));
    }
    let (x, idx) = (op.operand(0).map_err(err)?, op.operand(1).map_err(err)?);
    let axis = const_ints(op, 2)?;
    let [axis] = axis.as_slice() else {
        return Err(err(format!("{}: axis must be one value", label(op))));
    };
    let ax = l.int(*axis);
    l.replace(op, "onnx.Gather", &[x, idx], &[("axis", ax)])
}

/// `Split(axis, x)` (equal parts) and `SplitV(x, sizes, axis)` as ONNX `Split` with its sizes.
fn split<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), IrError> {
    let v = op_name(&op) == "tf.SplitV";
    let (x, axis) = if v {
        (op.operand(0).map_err(err)?, const_ints(op, 2)?)
    } else {
        (op.operand(1).map_err(err)?, const_ints(op, 0)?)
    };
    let [axis] = axis.as_slice() else {
        return Err(err(format!("{}: axis must be one value", label(op))));
    };
    let xd = dims(x).ok_or_else(|| err(format!("{}: unranked input", label(op))))?;
    let ax = norm_axis(*axis, xd.len()).ok_or_else(|| err(format!("{}: axis {axis} out of rank", label(op))))?;
    // sizes from the results' static extents along the axis (they are what TF inferred)
    let mut sizes = Vec::new();
    for i in 0..op.result_count() {
        let d = dims(op.result(i).map_err(err)?.into()).and_then(|d| d.get(ax).copied().flatten());
        sizes.push(d.ok_or_else(|| err(format!("{}: result {i} has no static size on axis {ax}", label(op))))? as i64);
    }
    let types: Vec<Type> = (0..op.result_count())
        .map(|i| l.result_type(op, i))
        .collect::<Result<_, _>>()?;
    let sv = l.i64s(op, &sizes)?;
    let a = l.int(ax as i64);
    let loc = l.loc(op, "");
    let s = l.build(op, "onnx.Split", &[x, sv], &[("axis", a)], &types, loc)?;
    for i in 0..op.result_count() {
        let y: Value = s.result(i).map_err(err)?.into();
        l.finish(op, i, y)?;
    }
    Ok(())
}

/// `Tile(x, multiples)` and `BroadcastTo(x, shape)`: ONNX's `Tile` and `Expand`, int64 operand.
fn tile_or_expand<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), IrError> {
    let name = if op_name(&op) == "tf.Tile" {
        "onnx.Tile"
    } else {
        "onnx.Expand"
    };
    let x = op.operand(0).map_err(err)?;
    let s = i64_operand(l, op, 1)?;
    l.replace(op, name, &[x, s], &[])
}

/// `ClipByValue` with scalar bounds is ONNX's `Clip`; tensor bounds are `Max(Min(x, hi), lo)`.
fn clip_by_value<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), IrError> {
    let ins = operands(op);
    let scalar = |v: &Value| dims(*v).is_some_and(|d| d.iter().all(|x| *x == Some(1)));
    if ins.len() == 3 && scalar(&ins[1]) && scalar(&ins[2]) {
        let mut bounds = Vec::new();
        for v in &ins[1..] {
            bounds.push(if rank(*v) == Some(0) {
                *v
            } else {
                let ax = l.i64s(op, &(0..rank(*v).unwrap_or(0) as i64).collect::<Vec<_>>())?;
                let t = ranked(element_of(v.r#type()), &[]);
                let loc = l.loc(op, "bound");
                l.build1(op, "onnx.Squeeze", &[*v, ax], &[], t, loc)?
            });
        }
        return l.elementwise_on(op, "onnx.Clip", &[ins[0], bounds[0], bounds[1]], &[]);
    }
    Err(err(format!(
        "{}: bounds that are not scalars have no ONNX Clip form",
        label(op)
    )))
}

/// `ArgMax`/`ArgMin` over a constant axis (ONNX's result is int64; an int32 result gets a Cast).
fn arg_extreme<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), IrError> {
    let name = if op_name(&op) == "tf.ArgMax" {
        "onnx.ArgMax"
    } else {
        "onnx.ArgMin"
    };
    let x = op.operand(0).map_err(err)?;
    let axis = const_ints(op, 1)?;
    let [axis] = axis.as_slice() else {
        return Err(err(format!("{}: dimension must be one value", label(op))));
    };
    let ty = l.result_type(op, 0)?;
    let attrs = [("axis", l.int(*axis)), ("keepdims", l.int(0))];
    let loc = l.loc(op, "");
    let i64t: Type = IntegerType::new(l.ctx, 64).into();
    if element_of(ty) == i64t {
        let y = l.build1(op, name, &[x], &attrs, ty, loc)?;
        return l.finish(op, 0, y);
    }
    let t64 = ranked(i64t, &dims(op.result(0).map_err(err)?.into()).unwrap_or_default());
    let loc64 = l.loc(op, "i64");
    let a = l.build1(op, name, &[x], &attrs, t64, loc64)?;
    let to = onnx_element(element_of(ty)).ok_or_else(|| err(format!("{}: index type has no ONNX form", label(op))))?;
    let to = l.int(to as i64);
    let y = l.build1(op, "onnx.Cast", &[a], &[("to", to)], ty, loc)?;
    l.finish(op, 0, y)
}

fn identity<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), IrError> {
    for i in 0..op.result_count().min(op.operand_count()) {
        let x = op.operand(i).map_err(err)?;
        l.finish(op, i, x)?;
    }
    Ok(())
}

/// TF ops of `module` that [`TABLE`] has no lowering for, with their counts.
pub fn unsupported(module: &Module) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for func in functions(module) {
        for op in body_ops(func) {
            let name = op_name(&op);
            if name.starts_with("tf.") && name != "tf.Const" && rule_of(&name).is_none() {
                *out.entry(name).or_insert(0) += 1;
            }
        }
    }
    out
}

/// Whether `module` holds TF-dialect compute ops (what this pass would rewrite).
pub fn has_tf_ops(module: &Module) -> bool {
    functions(module)
        .into_iter()
        .flat_map(body_ops)
        .any(|op| op_name(&op).starts_with("tf.") && op_name(&op) != "tf.Const")
}

pub fn run(module: &Module, _: &PassOptions) -> Result<PassReport, IrError> {
    let missing = unsupported(module);
    if !missing.is_empty() {
        let list: Vec<String> = missing.iter().map(|(k, v)| format!("{v} {k}")).collect();
        return Err(err(format!(
            "tf-to-onnx: no ONNX form for {} (quantir lowers {} TF ops; the model can still be written as .mlir)",
            list.join(", "),
            TABLE.len()
        )));
    }
    let ctx_ref = module.context();
    let ctx: &Context = unsafe { ctx_ref.to_ref() };
    let mut l = Lowering {
        ctx,
        twins: HashMap::new(),
        transposes: Vec::new(),
        constants: 0,
        report: PassReport::default(),
    };
    for func in functions(module) {
        for op in body_ops(func) {
            let name = op_name(&op);
            if !name.starts_with("tf.") || name == "tf.Const" {
                continue;
            }
            let Some(rule) = rule_of(&name) else { continue };
            match rule {
                Elementwise(onnx) => elementwise(&mut l, op, onnx)?,
                Custom(f) => f(&mut l, op)?,
            }
            l.report.count("tf ops lowered");
            erase_with_dead_constants(op)?;
        }
    }
    // Transposes nobody reads, last first so that chains go too
    let mut erased = 0;
    loop {
        let before = erased;
        let mut keep = Vec::new();
        for t in std::mem::take(&mut l.transposes) {
            let used = t.results().any(|r| !uses(r.into()).is_empty());
            if used {
                keep.push(t);
            } else {
                erase_op(t)?;
                erased += 1;
            }
        }
        l.transposes = keep;
        if erased == before {
            break;
        }
    }
    if l.report.changes.contains_key("tf ops lowered") && module.as_operation().attribute("onnx.opset_import").is_err()
    {
        // the ops above are written in their opset-13 form
        let opset = ArrayAttribute::new(ctx, &[ArrayAttribute::new(ctx, &[l.string(""), l.int(13)]).into()]);
        let mut m = unsafe { melior::ir::operation::OperationRefMut::from_raw(module.as_operation().to_raw()) };
        m.set_attribute("onnx.opset_import", opset.into());
    }
    let written = l.report.changes.get("onnx.Transpose written").copied().unwrap_or(0);
    l.report
        .changes
        .insert("onnx.Transpose written".into(), written - erased);
    l.report.changes.retain(|_, v| *v > 0);
    Ok(l.report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_padding_puts_the_odd_pixel_at_the_end() {
        // 224 input, 3x3 kernel, stride 2: out 112, needs 1 → (0, 1)
        assert_eq!(same_pads(224, 3, 2, 1), (0, 1));
        // stride 1: needs 2 → (1, 1)
        assert_eq!(same_pads(8, 3, 1, 1), (1, 1));
        // dilation 2, kernel 3: effective 5 → needs 4 → (2, 2)
        assert_eq!(same_pads(10, 3, 1, 2), (2, 2));
        // kernel smaller than stride: nothing
        assert_eq!(same_pads(4, 1, 2, 1), (0, 0));
    }

    #[test]
    fn dropping_spatial_axes_keeps_order_dropping_channels_does_not() {
        // NHWC mean over H, W → [N, C]: NCHW's remaining [N, C] is the same order
        assert!(order_kept(&[1, 2]));
        // dropping N leaves (H, W, C) in NCHW as (C, H, W): not TF's order
        assert!(!order_kept(&[0]));
        // dropping C leaves (N, H, W), in order in NCHW too
        assert!(order_kept(&[3]));
        assert_eq!(nchw_axis(3), 1);
        assert_eq!(nchw_axis(1), 2);
    }
}
