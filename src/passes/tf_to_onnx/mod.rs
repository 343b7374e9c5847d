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
//! other reductions as attributes). A TF op with no entry in [`FAMILIES`] stops the pass before it
//! changes anything, with every such op named.

mod array;
mod logic;
mod math;
mod nn;

use super::{PassOptions, PassReport};
use crate::dialects::onnx_types::onnx_element;
use crate::interp::kernels::{ints_of, layout};
use crate::ir::attrs::{op_attrs, AttrValue};
use crate::ir::graph::{body_ops, defining_op, erase_op, functions, insert_before, op_name, replace_all_uses, uses};
use crate::ir::keys::location_name;
use crate::ir::ops::{constant_value, erase_with_dead_constants, insert_constant};
use crate::ir::types::tensor_type_of;
use crate::ir::types::{element_type, tensor_type, Dim};
use crate::passes::report::{err, Change, PassError};
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
    /// Its own lowering, with every ONNX op it may write (besides the layout Transposes and
    /// constants any lowering adds): the pass checks each lowering against this list, and the
    /// table cross-check test checks the list against the interpreter.
    Custom(Lower, &'static [&'static str]),
}

type Lower = for<'c, 'a> fn(&mut Lowering<'c, 'a>, OperationRef<'c, 'a>) -> Result<(), PassError>;

use Rule::{Custom, Elementwise};

/// Every TF op the pass lowers, one table per family (each sorted by TF op name).
const FAMILIES: &[&[(&str, Rule)]] = &[nn::TABLE, math::TABLE, array::TABLE, logic::TABLE];

/// Ops any lowering may write besides its own: layout transposes and absent optional inputs.
const ALWAYS_EMITTED: &[&str] = &["onnx.Transpose", crate::dialects::onnx::NO_VALUE];

fn rule_of(name: &str) -> Option<Rule> {
    FAMILIES
        .iter()
        .flat_map(|t| t.iter())
        .find(|(n, _)| *n == name)
        .map(|(_, r)| *r)
}

/// The TF op names of each family table, in table order.
pub fn families() -> Vec<Vec<&'static str>> {
    FAMILIES.iter().map(|t| t.iter().map(|(n, _)| *n).collect()).collect()
}

/// Every TF op the pass lowers, with the ONNX ops its lowering may write.
pub fn lowerings() -> Vec<(&'static str, Vec<&'static str>)> {
    FAMILIES
        .iter()
        .flat_map(|t| t.iter())
        .map(|(n, r)| {
            let mut emits = match r {
                Elementwise(onnx) => vec![*onnx],
                Custom(_, e) => e.to_vec(),
            };
            emits.extend_from_slice(ALWAYS_EMITTED);
            (*n, emits)
        })
        .collect()
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
    /// Ops written for the TF op being lowered (checked against its table entry).
    emitted: Vec<String>,
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
fn permuted_type<'c>(t: Type<'c>, perm: &[usize]) -> Result<Type<'c>, PassError> {
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
fn const_ints(op: OperationRef, i: usize) -> Result<Vec<i64>, PassError> {
    let v = op.operand(i).map_err(err)?;
    constant_of(v)
        .as_ref()
        .and_then(ints_of)
        .ok_or_else(|| err(format!("{}: operand {i} must be an integer constant", label(op))))
}

/// Operand `i` as constant axes of a rank-`r` value, negative ones counted from the end.
fn const_axes(op: OperationRef, i: usize, r: usize) -> Result<Vec<usize>, PassError> {
    const_ints(op, i)?
        .iter()
        .map(|&v| norm_axis(v, r).ok_or_else(|| err(format!("{}: axis {v} out of rank {r}", label(op)))))
        .collect()
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
    ) -> Result<OperationRef<'c, 'a>, PassError> {
        let attrs: Vec<(Identifier, Attribute)> =
            attrs.iter().map(|(k, v)| (Identifier::new(self.ctx, k), *v)).collect();
        let op = OperationBuilder::new(name, loc)
            .add_operands(operands)
            .add_attributes(&attrs)
            .add_results(results)
            .build()
            .map_err(|e| err(format!("cannot build {name}: {e}")))?;
        self.report.count(Change::Written(name.to_string()));
        self.emitted.push(name.to_string());
        Ok(insert_before(anchor, op)?)
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
    ) -> Result<Value<'c, 'a>, PassError> {
        let op = self.build(anchor, name, operands, attrs, &[result], loc)?;
        Ok(op.result(0).map_err(err)?.into())
    }

    /// A new constant before `anchor`, named after it (`conv1/const3`): a constant without a
    /// name would get a positional key, which can collide with the positional names the
    /// lowered ops carry over from the TF ops.
    fn constant(&mut self, anchor: OperationRef<'c, 'a>, t: &Tensor) -> Result<Value<'c, 'a>, PassError> {
        self.constants += 1;
        let loc = self.loc(anchor, &format!("const{}", self.constants));
        let c = insert_constant(anchor, t, false, loc)?;
        Ok(c.result(0).map_err(err)?.into())
    }

    fn i64s(&mut self, anchor: OperationRef<'c, 'a>, v: &[i64]) -> Result<Value<'c, 'a>, PassError> {
        let t = Tensor::I64(ndarray::ArrayD::from_shape_vec(vec![v.len()], v.to_vec()).map_err(err)?);
        self.constant(anchor, &t)
    }

    /// A scalar constant of `like`'s float element type.
    fn scalar_like(&mut self, anchor: OperationRef<'c, 'a>, like: Value, v: f64) -> Result<Value<'c, 'a>, PassError> {
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
    ) -> Result<Value<'c, 'a>, PassError> {
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
    fn nchw_of(&mut self, anchor: OperationRef<'c, 'a>, v: Value<'c, 'a>) -> Result<Value<'c, 'a>, PassError> {
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
            return Err(err(format!(
                "a value of type {} has no NCHW form",
                crate::ir::type_text(v.r#type())
            )));
        }
        let loc = match defining_op(v) {
            Some(d) => self.loc(d, "nchw"),
            None => {
                // a function argument: named after its key's position
                let k = crate::ir::graph::block_argument_number(v).unwrap_or(0);
                Location::name(self.ctx, &format!("arg#{k}/nchw"), Location::unknown(self.ctx))
            }
        };
        let t = self.transpose_op(anchor, v, &TO_NCHW, loc)?;
        self.twins.insert(key(v), t);
        Ok(t)
    }

    /// Result `i` of `op` is `y`, computed in NCHW: the NHWC users read a Transpose of it.
    fn finish_nchw(&mut self, op: OperationRef<'c, 'a>, i: usize, y: Value<'c, 'a>) -> Result<(), PassError> {
        let r: Value = op.result(i).map_err(err)?.into();
        let loc = self.loc(op, "nhwc");
        let t = self.transpose_op(op, y, &TO_NHWC, loc)?;
        replace_all_uses(r, t);
        self.twins.insert(key(t), y);
        Ok(())
    }

    /// Result `i` of `op` is `y`, in TF's own layout.
    fn finish(&mut self, op: OperationRef<'c, 'a>, i: usize, y: Value<'c, 'a>) -> Result<(), PassError> {
        let r: Value = op.result(i).map_err(err)?.into();
        replace_all_uses(r, y);
        Ok(())
    }

    /// The one-result op's replacement `name(operands) {attrs}`, named as the op: in TF's
    /// layout with the op's own result type, or computed in NCHW (`operands` already NCHW)
    /// with the NHWC users reading a Transpose of it.
    fn replace(
        &mut self,
        op: OperationRef<'c, 'a>,
        nchw: bool,
        name: &str,
        operands: &[Value<'c, 'a>],
        attrs: &[(&str, Attribute<'c>)],
    ) -> Result<(), PassError> {
        let ty = self.result_type(op, 0)?;
        let ty = if nchw { permuted_type(ty, &TO_NCHW)? } else { ty };
        let loc = self.loc(op, "");
        let y = self.build1(op, name, operands, attrs, ty, loc)?;
        if nchw {
            self.finish_nchw(op, 0, y)
        } else {
            self.finish(op, 0, y)
        }
    }

    /// `pads` (explicit, or an `auto_pad` mode) as the attribute of a conv or pool.
    fn pads_attr(&self, pads: Result<Vec<i64>, &str>) -> (&'static str, Attribute<'c>) {
        match pads {
            Ok(p) => ("pads", self.ints(&p)),
            Err(auto) => ("auto_pad", self.string(auto)),
        }
    }

    fn result_type(&self, op: OperationRef<'c, 'a>, i: usize) -> Result<Type<'c>, PassError> {
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
    ) -> Result<(), PassError> {
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
            self.replace(op, true, name, &ins, attrs)
        } else {
            let y = self.build1(op, name, operands, attrs, ty, loc)?;
            self.finish(op, 0, y)
        }
    }
}

/// `a` when `op` is the TF op `tf`, else `b` (one lowering serves a pair of TF ops).
fn one_of(op: OperationRef, tf: &str, a: &'static str, b: &'static str) -> &'static str {
    if op_name(&op) == tf {
        a
    } else {
        b
    }
}

fn operands<'c, 'a>(op: OperationRef<'c, 'a>) -> Vec<Value<'c, 'a>> {
    op.operands().collect()
}

fn elementwise<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>, name: &str) -> Result<(), PassError> {
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

/// Runs `first` into a temporary op, then `second` on its result; `Rsqrt = Reciprocal(Sqrt)`.
fn two_step<'c, 'a>(
    l: &mut Lowering<'c, 'a>,
    op: OperationRef<'c, 'a>,
    first: &str,
    first_operands: &[Value<'c, 'a>],
    second: &str,
    square_second: bool,
) -> Result<(), PassError> {
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

/// Whether dropping `axes` from a twin leaves the remaining axes in TF's order, so that the
/// result needs no transpose back.
fn order_kept(axes: &[usize]) -> bool {
    let kept: Vec<usize> = (0..4).filter(|a| !axes.contains(a)).map(nchw_axis).collect();
    kept.windows(2).all(|w| w[0] < w[1])
}

/// TF ops of `module` that [`FAMILIES`] has no lowering for, with their counts.
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

pub fn run(module: &Module, _: &PassOptions) -> Result<PassReport, PassError> {
    let missing = unsupported(module);
    if !missing.is_empty() {
        let list: Vec<String> = missing.iter().map(|(k, v)| format!("{v} {k}")).collect();
        return Err(err(format!(
            "tf-to-onnx: no ONNX form for {} (quantir lowers {} TF ops; the model can still be written as .mlir)",
            list.join(", "),
            lowerings().len()
        )));
    }
    let ctx: &Context = crate::ir::graph::module_context(module);
    let mut l = Lowering {
        ctx,
        twins: HashMap::new(),
        transposes: Vec::new(),
        constants: 0,
        emitted: Vec::new(),
        report: PassReport::default(),
    };
    for func in functions(module) {
        for op in body_ops(func) {
            let name = op_name(&op);
            if !name.starts_with("tf.") || name == "tf.Const" {
                continue;
            }
            let Some(rule) = rule_of(&name) else { continue };
            l.emitted.clear();
            let declared: &[&str] = match &rule {
                Elementwise(onnx) => {
                    elementwise(&mut l, op, onnx)?;
                    std::slice::from_ref(onnx)
                }
                Custom(f, emits) => {
                    f(&mut l, op)?;
                    emits
                }
            };
            // a lowering that writes an op its entry does not declare would escape the table
            // cross-check (tests/tables.rs): refuse rather than write an op nothing checked
            if let Some(bad) = l
                .emitted
                .iter()
                .find(|e| !declared.contains(&e.as_str()) && !ALWAYS_EMITTED.contains(&e.as_str()))
            {
                return Err(err(format!(
                    "tf-to-onnx: the lowering of {name} wrote {bad}, which its table entry does not declare"
                )));
            }
            l.report.count(Change::TfOpsLowered);
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
    if l.report.changes.contains_key(&Change::TfOpsLowered)
        && module.as_operation().attribute("onnx.opset_import").is_err()
    {
        // the ops above are written in their opset-13 form
        let opset = ArrayAttribute::new(ctx, &[ArrayAttribute::new(ctx, &[l.string(""), l.int(13)]).into()]);
        let mut m = crate::ir::graph::module_op_mut(module);
        m.set_attribute("onnx.opset_import", opset.into());
    }
    let written = l.report.get(&Change::Written("onnx.Transpose".into()));
    l.report
        .changes
        .insert(Change::Written("onnx.Transpose".into()), written - erased);
    l.report.changes.retain(|_, v| *v > 0);
    Ok(l.report)
}

#[cfg(test)]
mod tests {
    use super::nn::same_pads;
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
