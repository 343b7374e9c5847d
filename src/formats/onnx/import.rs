//! ONNX → MLIR: the graph becomes one `func.func @main` of `onnx.<OpType>` ops in generic
//! form (`onnx.<domain>.<OpType>` outside the default domain), so that everything after the
//! import — inspection, calibration, the rewriter, the interpreter — is shared with the other
//! dialects.
//!
//! ```mlir
//! // node "conv1" (Conv): inputs x, W, B → output "conv1:0"
//! %2 = "onnx.Conv"(%arg0, %0, %1) {group = 1 : i64, pads = array<i64: 1, 1, 1, 1>, ...}
//!        : (tensor<1x1x8x8xf32>, tensor<16x1x3x3xf32>, tensor<16xf32>) -> tensor<1x16x8x8xf32>
//!        loc("conv1:0"("conv1"("model.onnx":5:1)))
//! ```
//! - every value's ONNX name is its name location (so tensor keys are the ONNX names); the
//!   node name is the child name, and `file:N:1` says it is node N of the graph;
//! - initializers and `Constant` nodes become `onnx.Constant` ops whose `value` is built from
//!   the raw bytes in one call (no per-element work), external data read from its file;
//! - attributes keep their ONNX names: INT → `i64`, FLOAT → `f32`, STRING → string, INTS →
//!   `array<i64: ...>`, FLOATS → `array<f32: ...>`, STRINGS → `[...]`, TENSOR → `dense<...>`;
//! - an absent optional input (`""`) is the result of one `onnx.NoValue` op (type `none`);
//! - graph inputs and outputs are the signature (`onnx.input_names` / `onnx.output_names`,
//!   symbolic dims in `onnx.input_dim_params` / `onnx.output_dim_params`), model metadata the
//!   module's `onnx.*` attributes, so that the export can write them back.
//!
//! ONNX files rarely carry the types of intermediate values. They are inferred by running the
//! imported function once on zeros (twice, with two batch sizes, when an input has symbolic
//! dims: dims that change are dynamic); when the interpreter cannot run the model, values keep
//! unranked types with an element type from [`result_element`].

use super::proto::{self, attribute_type as at, data_type as dt, AttributeProto, ModelProto, TensorProto};
use crate::dialects::onnx::NO_VALUE;
use crate::dialects::onnx_types::{mlir_element, name as type_name, raw_size};
use crate::formats::FormatError;
use crate::interp::infer_types::infer_types;
use crate::ir::blobs::{mapped_attribute, MappedFile};
use crate::ir::constants::{int4_attribute, tensor_to_attribute};
use crate::ir::graph::set_function_type;
use crate::ir::types::{attr_type, tensor_type_of};
use crate::tensor::Tensor;
use melior::dialect::func;
use melior::ir::attribute::{
    ArrayAttribute, DenseI64ArrayAttribute, FloatAttribute, IntegerAttribute, StringAttribute, TypeAttribute,
};
use melior::ir::block::BlockLike;
use melior::ir::operation::{OperationBuilder, OperationLike, OperationMutLike};
use melior::ir::r#type::{FunctionType, IntegerType};
use melior::ir::{Attribute, Block, Identifier, Location, Module, Region, RegionLike, Type, Value, ValueLike};
use melior::Context;
use std::cell::RefCell;
use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// Reads and imports an `.onnx` file (external data relative to its folder).
pub fn load<'c>(ctx: &'c Context, path: &Path) -> Result<Module<'c>, FormatError> {
    let bytes = std::fs::read(path).map_err(|source| FormatError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    import(ctx, &bytes, path)
}

/// Imports a serialized `ModelProto`; `path` names it in errors and locates external data.
pub fn import<'c>(ctx: &'c Context, bytes: &[u8], path: &Path) -> Result<Module<'c>, FormatError> {
    let err = |reason: String| FormatError::Onnx {
        path: path.to_path_buf(),
        reason,
    };
    let model = proto::decode_model(bytes).map_err(|e| err(format!("not a valid ONNX model: {e}")))?;
    if model.ir_version <= 0 || model.opset_import.is_empty() {
        return Err(err("not a valid ONNX model: no IR version or opset import".into()));
    }
    if model.graph.is_none() {
        return Err(err("not a valid ONNX model: no graph".into()));
    }
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let file = path.file_name().and_then(|f| f.to_str()).unwrap_or("model.onnx");
    let module = Module::new(Location::unknown(ctx));
    set_module_attrs(ctx, &module, &model);
    let reader = Reader {
        ctx,
        dir,
        err: &err,
        maps: RefCell::default(),
    };
    build_function(&reader, &module, &model, file)?;
    infer_types(ctx, &module, &[NO_VALUE]);
    Ok(module)
}

struct Reader<'c, 'e> {
    ctx: &'c Context,
    dir: PathBuf,
    err: &'e dyn Fn(String) -> FormatError,
    /// External-data files mapped so far, by path (one map per file, shared by its tensors).
    maps: RefCell<HashMap<PathBuf, MappedFile>>,
}

/// External tensors of at least this many bytes stay in their mapped file as `dense_resource`
/// blobs ([`crate::ir::blobs`]) instead of being copied into the context: the weights, not the
/// shapes and scalars that passes read and compare.
const MAP_AT_LEAST: usize = 64 << 10;

fn named<'c>(ctx: &'c Context, name: &str, a: Attribute<'c>) -> (Identifier<'c>, Attribute<'c>) {
    (Identifier::new(ctx, name), a)
}

fn str_attr<'c>(ctx: &'c Context, s: &str) -> Attribute<'c> {
    StringAttribute::new(ctx, s).into()
}

fn i64_attr(ctx: &Context, v: i64) -> Attribute<'_> {
    IntegerAttribute::new(IntegerType::new(ctx, 64).into(), v).into()
}

fn strings_attr<'c>(ctx: &'c Context, v: &[String]) -> Attribute<'c> {
    let items: Vec<Attribute> = v.iter().map(|s| str_attr(ctx, s)).collect();
    ArrayAttribute::new(ctx, &items).into()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Model-level fields as module attributes (only those that are set).
fn set_module_attrs(ctx: &Context, module: &Module, m: &ModelProto) {
    let mut attrs: Vec<(Identifier, Attribute)> = vec![named(ctx, "onnx.ir_version", i64_attr(ctx, m.ir_version))];
    let opsets: Vec<Attribute> = m
        .opset_import
        .iter()
        .map(|o| ArrayAttribute::new(ctx, &[str_attr(ctx, &o.domain), i64_attr(ctx, o.version)]).into())
        .collect();
    attrs.push(named(
        ctx,
        "onnx.opset_import",
        ArrayAttribute::new(ctx, &opsets).into(),
    ));
    for (k, v) in [
        ("onnx.producer_name", &m.producer_name),
        ("onnx.producer_version", &m.producer_version),
        ("onnx.domain", &m.domain),
        ("onnx.doc_string", &m.doc_string),
    ] {
        if !v.is_empty() {
            attrs.push(named(ctx, k, str_attr(ctx, v)));
        }
    }
    if m.model_version != 0 {
        attrs.push(named(ctx, "onnx.model_version", i64_attr(ctx, m.model_version)));
    }
    let pairs = |v: &[proto::StringStringEntryProto]| -> Attribute {
        let items: Vec<Attribute> = v
            .iter()
            .map(|e| ArrayAttribute::new(ctx, &[str_attr(ctx, &e.key), str_attr(ctx, &e.value)]).into())
            .collect();
        ArrayAttribute::new(ctx, &items).into()
    };
    if !m.metadata_props.is_empty() {
        attrs.push(named(ctx, "onnx.metadata_props", pairs(&m.metadata_props)));
    }
    if let Some(g) = &m.graph {
        if !g.name.is_empty() {
            attrs.push(named(ctx, "onnx.graph_name", str_attr(ctx, &g.name)));
        }
        if !g.doc_string.is_empty() {
            attrs.push(named(ctx, "onnx.graph_doc_string", str_attr(ctx, &g.doc_string)));
        }
        if !g.metadata_props.is_empty() {
            attrs.push(named(ctx, "onnx.graph_metadata_props", pairs(&g.metadata_props)));
        }
    }
    // parts quantir does not interpret, kept byte for byte for the export
    use prost::Message;
    let blobs = |v: Vec<Vec<u8>>| -> Attribute {
        let items: Vec<Attribute> = v.iter().map(|b| str_attr(ctx, &hex(b))).collect();
        ArrayAttribute::new(ctx, &items).into()
    };
    if !m.functions.is_empty() {
        attrs.push(named(
            ctx,
            "onnx.functions",
            blobs(m.functions.iter().map(|f| f.encode_to_vec()).collect()),
        ));
    }
    if !m.training_info.is_empty() {
        attrs.push(named(
            ctx,
            "onnx.training_info",
            blobs(m.training_info.iter().map(|f| f.encode_to_vec()).collect()),
        ));
    }
    let mut op = crate::ir::graph::module_op_mut(module);
    for (k, v) in attrs {
        op.set_attribute(crate::ir::ref_str(k.as_string_ref()).unwrap_or_default(), v);
    }
}

/// Shape (`None` = unknown rank) and symbolic dim names of a value's `TypeProto`.
struct Declared {
    elem: i32,
    dims: Option<Vec<Option<i64>>>,
    params: Vec<String>,
}

fn declared(v: &proto::ValueInfoProto) -> Option<Declared> {
    let proto::type_proto::Value::TensorType(t) = v.r#type.as_ref()?.value.as_ref()? else {
        return None;
    };
    let (dims, params) = match &t.shape {
        None => (None, vec![]),
        Some(s) => {
            let dims = s
                .dim
                .iter()
                .map(|d| match &d.value {
                    Some(proto::Dim::Value(v)) if *v >= 0 => Some(*v),
                    _ => None,
                })
                .collect();
            let params = s
                .dim
                .iter()
                .map(|d| match &d.value {
                    Some(proto::Dim::Param(p)) => p.clone(),
                    _ => String::new(),
                })
                .collect();
            (Some(dims), params)
        }
    };
    Some(Declared {
        elem: t.elem_type,
        dims,
        params,
    })
}

impl<'c> Reader<'c, '_> {
    fn declared_type(&self, d: &Declared, what: &str) -> Result<Type<'c>, FormatError> {
        let elem = mlir_element(self.ctx, d.elem)
            .ok_or_else(|| (self.err)(format!("'{what}': element type {} is not supported", type_name(d.elem))))?;
        Ok(tensor_type_of(elem, d.dims.as_deref()))
    }

    /// Where a tensor stored in an external file is: the file, and its byte range checked
    /// against the file's size.
    fn external_range(&self, t: &TensorProto) -> Result<(PathBuf, u64, u64), FormatError> {
        let get = |k: &str| t.external_data.iter().find(|e| e.key == k).map(|e| e.value.as_str());
        let e = |reason: String| (self.err)(format!("tensor '{}': external data {reason}", t.name));
        let loc = get("location").ok_or_else(|| e("without a location".into()))?;
        let rel = Path::new(loc);
        if rel.is_absolute() || rel.components().any(|c| matches!(c, std::path::Component::ParentDir)) {
            return Err(e(format!("file '{loc}' is outside the model's folder")));
        }
        let num = |k: &str| -> Result<Option<u64>, FormatError> {
            get(k)
                .map(|s| s.parse::<u64>().map_err(|_| e(format!("{k} '{s}' is not a number"))))
                .transpose()
        };
        let (offset, length) = (num("offset")?.unwrap_or(0), num("length")?);
        let full = self.dir.join(rel);
        let size = std::fs::metadata(&full)
            .map_err(|x| e(format!("file '{}': {x}", full.display())))?
            .len();
        let length = length.unwrap_or(size.saturating_sub(offset));
        if offset.checked_add(length).is_none_or(|end| end > size) {
            return Err(e(format!(
                "file '{}' has {size} bytes, the tensor needs {length} from offset {offset}",
                full.display()
            )));
        }
        Ok((full, offset, length))
    }

    /// The bytes of a tensor stored in an external file.
    fn external(&self, t: &TensorProto) -> Result<Vec<u8>, FormatError> {
        let (full, offset, length) = self.external_range(t)?;
        let e = |reason: String| (self.err)(format!("tensor '{}': external data {reason}", t.name));
        let mut buf = vec![0u8; length as usize];
        std::fs::File::open(&full)
            .and_then(|mut f| f.seek(SeekFrom::Start(offset)).and_then(|_| f.read_exact(&mut buf)))
            .map_err(|x| e(format!("file '{}': {x}", full.display())))?;
        Ok(buf)
    }

    /// A large external tensor as a `dense_resource` over its mapped file, when its element
    /// type is stored byte-wise and read back element-wise by MLIR too (not i1, i4, f16 or
    /// bf16), its size is what its shape needs and its offset suits its elements; else `None`
    /// and the caller copies its bytes.
    fn mapped(&self, t: &TensorProto, elem: Type<'c>, n: usize) -> Result<Option<Attribute<'c>>, FormatError> {
        let size = raw_size(t.data_type).unwrap_or(0);
        let byte_wise = !matches!(
            t.data_type,
            dt::BOOL | dt::INT4 | dt::UINT4 | dt::FLOAT16 | dt::BFLOAT16 | dt::STRING
        );
        if t.data_location != 1 || !byte_wise || size == 0 || n.checked_mul(size).is_none_or(|b| b < MAP_AT_LEAST) {
            return Ok(None);
        }
        let (full, offset, length) = self.external_range(t)?;
        if length != (n * size) as u64 {
            return Ok(None); // the copying path reports the mismatch
        }
        let mut maps = self.maps.borrow_mut();
        let file = match maps.get(&full) {
            Some(f) => f.clone(),
            None => {
                let f = MappedFile::open(&full).map_err(|x| {
                    (self.err)(format!(
                        "tensor '{}': external data file '{}': {x}",
                        t.name,
                        full.display()
                    ))
                })?;
                maps.insert(full.clone(), f.clone());
                f
            }
        };
        let ty = tensor_type_of(elem, Some(&t.dims.iter().map(|&d| Some(d)).collect::<Vec<_>>()));
        Ok(mapped_attribute(
            ty,
            &t.name,
            &file,
            offset as usize,
            length as usize,
            size,
        ))
    }

    /// A `DenseElementsAttr` holding a `TensorProto`'s value.
    fn tensor_attr(&self, t: &TensorProto, what: &str) -> Result<Attribute<'c>, FormatError> {
        let e = |reason: String| (self.err)(format!("tensor '{what}': {reason}"));
        if t.data_type == dt::STRING {
            return Err(e("string tensors are not supported".into()));
        }
        if t.segment.is_some() {
            return Err(e("segmented tensors are not supported".into()));
        }
        let elem = mlir_element(self.ctx, t.data_type)
            .ok_or_else(|| e(format!("element type {} is not supported", type_name(t.data_type))))?;
        if t.dims.iter().any(|&d| d < 0) {
            return Err(e(format!("negative dimension in {:?}", t.dims)));
        }
        let shape: Vec<usize> = t.dims.iter().map(|&d| d as usize).collect();
        let n: usize = shape.iter().product();
        if let Some(a) = self.mapped(t, elem, n)? {
            return Ok(a);
        }
        let ext;
        let raw: Option<&[u8]> = if t.data_location == 1 {
            ext = self.external(t)?;
            Some(&ext)
        } else if !t.raw_data.is_empty() || (n == 0 && t.float_data.is_empty()) {
            Some(&t.raw_data)
        } else {
            None
        };
        let size = raw_size(t.data_type).unwrap_or(0);
        // typed fields → little-endian bytes (the rarer form; exporters write raw_data)
        let owned: Vec<u8>;
        let bytes: &[u8] = match raw {
            Some(b) => b,
            None => {
                owned = match t.data_type {
                    dt::FLOAT => t.float_data.iter().flat_map(|v| v.to_le_bytes()).collect(),
                    dt::DOUBLE => t.double_data.iter().flat_map(|v| v.to_le_bytes()).collect(),
                    dt::INT64 => t.int64_data.iter().flat_map(|v| v.to_le_bytes()).collect(),
                    dt::UINT32 => t.uint64_data.iter().flat_map(|v| (*v as u32).to_le_bytes()).collect(),
                    dt::UINT64 => t.uint64_data.iter().flat_map(|v| v.to_le_bytes()).collect(),
                    dt::INT32 => t.int32_data.iter().flat_map(|v| v.to_le_bytes()).collect(),
                    dt::INT16 | dt::UINT16 | dt::FLOAT16 | dt::BFLOAT16 => {
                        t.int32_data.iter().flat_map(|v| (*v as u16).to_le_bytes()).collect()
                    }
                    dt::INT8 | dt::UINT8 | dt::BOOL | dt::INT4 | dt::UINT4 => {
                        t.int32_data.iter().map(|v| *v as u8).collect()
                    }
                    _ => Vec::new(),
                };
                &owned
            }
        };
        match t.data_type {
            dt::INT4 | dt::UINT4 => {
                if bytes.len() != n.div_ceil(2) {
                    return Err(e(format!("{} bytes of 4-bit data for {n} elements", bytes.len())));
                }
                let signed = t.data_type == dt::INT4;
                let vals: Vec<u8> = (0..n)
                    .map(|i| {
                        let nib = (bytes[i / 2] >> (4 * (i % 2))) & 0xF;
                        if signed && nib >= 8 {
                            nib | 0xF0
                        } else {
                            nib
                        }
                    })
                    .collect();
                Ok(int4_attribute(self.ctx, &shape, &vals, !signed))
            }
            dt::BOOL => {
                if bytes.len() != n {
                    return Err(e(format!("{} bytes of bool data for {n} elements", bytes.len())));
                }
                let a = ndarray::ArrayD::from_shape_vec(shape.clone(), bytes.iter().map(|&b| b != 0).collect())
                    .map_err(|x| e(x.to_string()))?;
                Ok(tensor_to_attribute(self.ctx, &Tensor::I1(a)))
            }
            _ => {
                if bytes.len() != n * size {
                    return Err(e(format!(
                        "{} bytes of data for {n} elements of {} ({} expected)",
                        bytes.len(),
                        type_name(t.data_type),
                        n * size
                    )));
                }
                let ty = tensor_type_of(elem, Some(&t.dims.iter().map(|&d| Some(d)).collect::<Vec<_>>()));
                Ok(crate::ir::constants::dense_from_raw(ty, &bytes))
            }
        }
    }

    /// An ONNX attribute as an MLIR attribute.
    fn attribute(&self, a: &AttributeProto, node: &str) -> Result<Attribute<'c>, FormatError> {
        let ctx = self.ctx;
        let e = |what: &str| {
            (self.err)(format!(
                "node '{node}': attribute '{}' is {what}, which quantir does not support",
                a.name
            ))
        };
        let utf8 = |b: &[u8]| String::from_utf8(b.to_vec()).map_err(|_| e("a non-UTF-8 string"));
        if !a.ref_attr_name.is_empty() {
            return Err(e("a reference to a function attribute"));
        }
        Ok(match a.r#type {
            at::FLOAT => FloatAttribute::new(ctx, Type::float32(ctx), a.f as f64).into(),
            at::INT => i64_attr(ctx, a.i),
            at::STRING => str_attr(ctx, &utf8(&a.s)?),
            at::TENSOR => {
                let t = a.t.as_ref().ok_or_else(|| e("a tensor without a value"))?;
                self.tensor_attr(t, &format!("{node}/{}", a.name))?
            }
            at::FLOATS => crate::ir::constants::dense_f32_array(ctx, &a.floats),
            at::INTS => DenseI64ArrayAttribute::new(ctx, &a.ints).into(),
            at::STRINGS => {
                let v: Result<Vec<String>, FormatError> = a.strings.iter().map(|s| utf8(s)).collect();
                strings_attr(ctx, &v?)
            }
            at::GRAPH | at::GRAPHS => return Err(e("a subgraph (control flow)")),
            at::SPARSE_TENSOR | at::SPARSE_TENSORS => return Err(e("a sparse tensor")),
            at::TENSORS => return Err(e("a list of tensors")),
            at::TYPE_PROTO | at::TYPE_PROTOS => return Err(e("a type")),
            t => return Err(e(&format!("of unknown attribute type {t}"))),
        })
    }

    /// The `value` of a `Constant` node from whichever of its attributes is set.
    fn constant_value(&self, n: &proto::NodeProto) -> Result<Attribute<'c>, FormatError> {
        let ctx = self.ctx;
        let a = n
            .attribute
            .first()
            .ok_or_else(|| (self.err)(format!("node '{}': Constant without a value", n.name)))?;
        let dense = |elem: Type<'c>, dims: &[i64], bytes: Vec<u8>| {
            let ty = tensor_type_of(elem, Some(&dims.iter().map(|&d| Some(d)).collect::<Vec<_>>()));
            crate::ir::constants::dense_from_raw(ty, &bytes)
        };
        let i64t: Type = IntegerType::new(ctx, 64).into();
        Ok(match a.name.as_str() {
            "value" => self.attribute(a, &n.name)?,
            "value_float" => dense(Type::float32(ctx), &[], a.f.to_le_bytes().to_vec()),
            "value_floats" => dense(
                Type::float32(ctx),
                &[a.floats.len() as i64],
                a.floats.iter().flat_map(|v| v.to_le_bytes()).collect(),
            ),
            "value_int" => dense(i64t, &[], a.i.to_le_bytes().to_vec()),
            "value_ints" => dense(
                i64t,
                &[a.ints.len() as i64],
                a.ints.iter().flat_map(|v| v.to_le_bytes()).collect(),
            ),
            other => {
                return Err((self.err)(format!(
                    "node '{}': Constant with '{other}' is not supported",
                    n.name
                )))
            }
        })
    }
}

/// onnxruntime's contrib-op domain.
pub const CONTRIB_DOMAIN: &str = "com.microsoft";

/// The MLIR op name of a node: `onnx.Conv`, `onnx.com.microsoft.FusedConv`. onnxruntime's
/// contrib `com.microsoft` QuantizeLinear/DequantizeLinear are the standard ops with 16- and
/// 4-bit types before opset 21 (onnxruntime's quantizer writes them there, and so does quantir's
/// export): they import as the standard ops.
pub fn op_name_of(domain: &str, op_type: &str) -> String {
    let contrib_qdq = domain == CONTRIB_DOMAIN && matches!(op_type, "QuantizeLinear" | "DequantizeLinear");
    if domain.is_empty() || domain == "ai.onnx" || contrib_qdq {
        format!("onnx.{op_type}")
    } else {
        format!("onnx.{domain}.{op_type}")
    }
}

/// The element type of a node's result before inference can tell (see module docs).
fn result_element<'c>(ctx: &'c Context, n: &proto::NodeProto, operands: &[Type<'c>], i: usize) -> Type<'c> {
    let elem_of = |t: Type<'c>| -> Type<'c> { crate::ir::types::element_type(t).unwrap_or_else(|| Type::float32(ctx)) };
    let operand = |k: usize| operands.get(k).copied().map(elem_of);
    let int_attr = |name: &str| n.attribute.iter().find(|a| a.name == name).map(|a| a.i as i32);
    let i64t = || IntegerType::new(ctx, 64).into();
    match n.op_type.as_str() {
        "Shape" | "Size" | "NonZero" | "ArgMax" | "ArgMin" => i64t(),
        "TopK" if i == 1 => i64t(),
        "Equal" | "Less" | "Greater" | "LessOrEqual" | "GreaterOrEqual" | "Not" | "And" | "Or" | "Xor" | "IsNaN"
        | "IsInf" => IntegerType::new(ctx, 1).into(),
        "Cast" => int_attr("to")
            .and_then(|t| mlir_element(ctx, t))
            .unwrap_or(Type::float32(ctx)),
        "CastLike" | "Where" => operand(1).unwrap_or(Type::float32(ctx)),
        "QuantizeLinear" => operand(2)
            .or_else(|| int_attr("output_dtype").and_then(|t| mlir_element(ctx, t)))
            .unwrap_or_else(|| IntegerType::unsigned(ctx, 8).into()),
        "DequantizeLinear" => operand(1).unwrap_or(Type::float32(ctx)),
        "ConstantOfShape" => Type::float32(ctx),
        _ => operand(0).unwrap_or(Type::float32(ctx)),
    }
}

fn build_function<'c>(r: &Reader<'c, '_>, module: &Module<'c>, m: &ModelProto, file: &str) -> Result<(), FormatError> {
    let ctx = r.ctx;
    let err = r.err;
    let Some(g) = m.graph.as_ref() else {
        return Err(err("no graph".into()));
    };
    if !g.sparse_initializer.is_empty() {
        return Err(err("sparse initializers are not supported".into()));
    }
    let init_names: std::collections::HashSet<&str> = g.initializer.iter().map(|t| t.name.as_str()).collect();
    // graph inputs that are initializers too (IR < 4) are constants, not arguments
    let inputs: Vec<&proto::ValueInfoProto> = g
        .input
        .iter()
        .filter(|v| !init_names.contains(v.name.as_str()))
        .collect();
    let mut in_types = Vec::new();
    let mut in_params = Vec::new();
    for v in &inputs {
        let d = declared(v).ok_or_else(|| err(format!("input '{}' is not a tensor", v.name)))?;
        in_types.push(r.declared_type(&d, &v.name)?);
        in_params.push(d.params);
    }
    let mut out_declared: Vec<Option<Type>> = Vec::new();
    let mut out_params = Vec::new();
    for v in &g.output {
        let d = declared(v);
        out_declared.push(match &d {
            Some(d) if d.dims.is_some() => Some(r.declared_type(d, &v.name)?),
            _ => None,
        });
        out_params.push(d.map(|d| d.params).unwrap_or_default());
    }
    let mut value_info: HashMap<&str, Type> = HashMap::new();
    for v in &g.value_info {
        if let Some(d) = declared(v).filter(|d| d.dims.is_some()) {
            if let Ok(t) = r.declared_type(&d, &v.name) {
                value_info.insert(v.name.as_str(), t);
            }
        }
    }
    let arg_specs: Vec<(Type, Location)> = inputs
        .iter()
        .zip(&in_types)
        .map(|(v, t)| (*t, Location::name(ctx, &v.name, Location::unknown(ctx))))
        .collect();
    let region = Region::new();
    region.append_block(Block::new(&arg_specs));
    let in_names: Vec<String> = inputs.iter().map(|v| v.name.clone()).collect();
    let out_names: Vec<String> = g.output.iter().map(|v| v.name.clone()).collect();
    let mut fattrs = vec![
        named(ctx, "onnx.input_names", strings_attr(ctx, &in_names)),
        named(ctx, "onnx.output_names", strings_attr(ctx, &out_names)),
    ];
    let params_attr = |p: &[Vec<String>]| -> Attribute {
        let items: Vec<Attribute> = p.iter().map(|v| strings_attr(ctx, v)).collect();
        ArrayAttribute::new(ctx, &items).into()
    };
    if in_params.iter().flatten().any(|s| !s.is_empty()) {
        fattrs.push(named(ctx, "onnx.input_dim_params", params_attr(&in_params)));
    }
    if out_params.iter().flatten().any(|s| !s.is_empty()) {
        fattrs.push(named(ctx, "onnx.output_dim_params", params_attr(&out_params)));
    }
    // the result types are fixed once the body is built
    let placeholder = FunctionType::new(ctx, &in_types, &[]);
    let f = func::func(
        ctx,
        StringAttribute::new(ctx, "main"),
        TypeAttribute::new(placeholder.into()),
        region,
        &fattrs,
        Location::new(ctx, file, 0, 0),
    );
    let fref = module.body().append_operation(f);
    let block = fref
        .region(0)
        .ok()
        .and_then(|rg| rg.first_block())
        .ok_or_else(|| err("internal: function without a body".into()))?;
    let mut values: HashMap<String, Value> = HashMap::new();
    for (k, v) in inputs.iter().enumerate() {
        let a = block.argument(k).map_err(|e| err(e.to_string()))?;
        values.insert(v.name.clone(), a.into());
    }
    let value_attr = Identifier::new(ctx, "value");
    for t in &g.initializer {
        let attr = r.tensor_attr(t, &t.name)?;
        let op = OperationBuilder::new("onnx.Constant", Location::name(ctx, &t.name, Location::unknown(ctx)))
            .add_attributes(&[(value_attr, attr)])
            .add_results(&[attr_type(attr)])
            .build()
            .map_err(|e| err(format!("initializer '{}': {e}", t.name)))?;
        let op = block.append_operation(op);
        values.insert(t.name.clone(), op.result(0).map_err(|e| err(e.to_string()))?.into());
    }
    let mut no_value: Option<Value> = None;
    for (idx, n) in g.node.iter().enumerate() {
        let node_name = if n.name.is_empty() {
            format!("{}_{idx}", n.op_type)
        } else {
            n.name.clone()
        };
        let node_loc = Location::name(ctx, &node_name, Location::new(ctx, file, idx + 1, 1));
        let name_loc = |out: &str| Location::name(ctx, out, node_loc);
        let loc = match n.output.as_slice() {
            [one] => name_loc(one),
            outs => {
                let locs: Vec<Location> = outs
                    .iter()
                    .enumerate()
                    .map(|(j, o)| {
                        if o.is_empty() {
                            name_loc(&format!("{node_name}:{j}"))
                        } else {
                            name_loc(o)
                        }
                    })
                    .collect();
                if locs.is_empty() {
                    node_loc
                } else {
                    Location::fused(ctx, &locs, Attribute::unit(ctx))
                }
            }
        };
        let mut operands = Vec::new();
        for i in &n.input {
            if i.is_empty() {
                let v = match no_value {
                    Some(v) => v,
                    None => {
                        let none = crate::ir::types::none_type(ctx);
                        let op = OperationBuilder::new(NO_VALUE, Location::unknown(ctx))
                            .add_results(&[none])
                            .build()
                            .map_err(|e| err(e.to_string()))?;
                        let op = match block.first_operation() {
                            Some(first) => block.insert_operation_before(first, op),
                            None => block.append_operation(op),
                        };
                        let v: Value = op.result(0).map_err(|e| err(e.to_string()))?.into();
                        no_value = Some(v);
                        v
                    }
                };
                operands.push(v);
                continue;
            }
            operands.push(*values.get(i.as_str()).ok_or_else(|| {
                err(format!(
                    "node '{node_name}' ({}): input '{i}' is not produced by any node, input or initializer before it",
                    n.op_type
                ))
            })?);
        }
        let op = if n.op_type == "Constant" && (n.domain.is_empty() || n.domain == "ai.onnx") {
            let attr = r.constant_value(n)?;
            OperationBuilder::new("onnx.Constant", loc)
                .add_attributes(&[(value_attr, attr)])
                .add_results(&[attr_type(attr)])
                .build()
        } else {
            let mut attrs = Vec::new();
            for a in &n.attribute {
                attrs.push((Identifier::new(ctx, &a.name), r.attribute(a, &node_name)?));
            }
            let operand_types: Vec<Type> = operands.iter().map(|v| v.r#type()).collect();
            let results: Vec<Type> = n
                .output
                .iter()
                .enumerate()
                .map(|(j, o)| {
                    value_info
                        .get(o.as_str())
                        .copied()
                        .unwrap_or_else(|| tensor_type_of(result_element(ctx, n, &operand_types, j), None))
                })
                .collect();
            OperationBuilder::new(&op_name_of(&n.domain, &n.op_type), loc)
                .add_operands(&operands)
                .add_attributes(&attrs)
                .add_results(&results)
                .build()
        }
        .map_err(|e| err(format!("node '{node_name}' ({}): {e}", n.op_type)))?;
        let op = block.append_operation(op);
        for (j, o) in n.output.iter().enumerate() {
            if !o.is_empty() {
                values.insert(o.clone(), op.result(j).map_err(|e| err(e.to_string()))?.into());
            }
        }
    }
    let mut rets = Vec::new();
    for (k, v) in g.output.iter().enumerate() {
        let val = *values
            .get(v.name.as_str())
            .ok_or_else(|| err(format!("output '{}' is not produced by any node", v.name)))?;
        if let Some(t) = out_declared[k] {
            // the declared type is what the signature promises
            crate::ir::graph::set_value_type(val, t);
        }
        rets.push(val);
    }
    let result_types: Vec<Type> = rets.iter().map(|v| v.r#type()).collect();
    block.append_operation(func::r#return(&rets, Location::unknown(ctx)));
    set_function_type(ctx, fref, &in_types, &result_types);
    Ok(())
}
