//! MLIR → ONNX: writes @main of a module of `onnx.*` ops (imported, then possibly quantized)
//! as a QDQ ONNX model.
//!
//! ```mlir
//! %q = quant.qcast %x : tensor<1x16xf32> to tensor<1x16x!quant.uniform<i8:f32, 0.02:-3>>
//! %d = quant.dcast %q : ... to tensor<1x16xf32>
//! %w = "onnx.Constant"() {value = dense<...> : tensor<16x8xi8>}
//! %s = quant.scast %w : tensor<16x8xi8> to tensor<16x8x!quant.uniform<i8:f32:0, {...}>>
//! %v = quant.dcast %s : ... to tensor<16x8xf32>
//! ```
//! becomes `QuantizeLinear(x, scale, zp) → DequantizeLinear(..., scale, zp)` for the
//! activation and an int8 initializer `w` read by `DequantizeLinear(w, scales, zps, axis=0)`
//! for the weight (`quant.scast` is no node: storage and quantized value are the same bytes).
//! Every other `onnx.*` op goes back to its node with its attributes; constants become
//! initializers; names come from tensor keys (ONNX names after an import), the graph's
//! outputs keep their names. The default-domain opset is raised to what the quantized types
//! need (10 per-tensor int8/uint8, 13 per-axis, 21 for int4/int16) when no op of the model
//! changed meaning in between. Where one did and only the 16/4-bit types need 21, those Q/DQ
//! nodes are written as onnxruntime's `com.microsoft` contrib ops instead (the same ops with the
//! wider types, as onnxruntime's quantizer writes them below opset 21).

use super::import::CONTRIB_DOMAIN;
use super::opsets::{blocking_op, opset_for, Change, CHANGED_AT, WIDE_OPSET};
use super::props::module_attr;
use super::proto::{self, attribute_type as at, data_type as dt, AttributeProto, NodeProto, TensorProto};
use crate::dialects::onnx::NO_VALUE;
use crate::dialects::onnx_types::onnx_element;
use crate::formats::FormatError;
use crate::fsutil::write_atomic;
use crate::ir::attrs::{attr_value, op_attrs, AttrValue};
use crate::ir::graph::{body_ops, find_function, op_name};
use crate::ir::keys::{location_name, TensorKeys};
use crate::ir::ops::{entry_function_names, is_constant_op};
use crate::ir::quant::params_from_type;
use crate::ir::types::element_type;
use crate::params::Scheme;
use crate::tensor::Tensor;
use melior::ir::block::BlockLike;
use melior::ir::operation::OperationLike;
use melior::ir::{Location, Module, OperationRef, RegionLike, Type, Value, ValueLike};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

/// Encodes `module` as ONNX and writes it atomically to `path` (never over `inputs`).
pub fn save(module: &Module, path: &Path, inputs: &[&Path]) -> Result<(), FormatError> {
    let m = export(module, path)?;
    write_atomic(path, &proto::encode_model(&m), inputs).map_err(crate::ir::IrError::from)?;
    Ok(())
}

fn e(path: &Path, reason: String) -> FormatError {
    FormatError::Onnx {
        path: path.to_path_buf(),
        reason,
    }
}

/// Moves the `axes` attribute of the nodes whose [`CHANGED_AT`] change is [`Change::AxesToInput`]
/// to an int64 initializer read as input 1, for a raise from opset `from` to `to`.
fn axes_to_inputs(graph: &mut proto::GraphProto, names: &mut Names, from: i64, to: i64) {
    let proto::GraphProto { node, initializer, .. } = graph;
    for n in node.iter_mut().filter(|n| n.domain.is_empty() || n.domain == "ai.onnx") {
        let crosses = CHANGED_AT
            .iter()
            .any(|(op, at, c)| *c == Change::AxesToInput && n.op_type == *op && from < *at && to >= *at);
        let Some(i) = n.attribute.iter().position(|a| a.name == "axes") else {
            continue;
        };
        if !crosses {
            continue;
        }
        let axes = n.attribute.remove(i).ints;
        let name = names.fresh(&format!("{}_axes", n.name));
        let t = Tensor::I64(ndarray::Array1::from(axes).into_dyn());
        initializer.push(tensor_proto(&name, &t, dt::INT64));
        n.input.truncate(1);
        n.input.push(name);
    }
}

struct Names {
    by_value: HashMap<usize, String>,
    used: HashSet<String>,
}

impl Names {
    fn fresh(&mut self, want: &str) -> String {
        let base = if want.is_empty() { "t" } else { want };
        let mut name = base.to_string();
        let mut i = 1;
        while self.used.contains(&name) {
            name = format!("{base}_{i}");
            i += 1;
        }
        self.used.insert(name.clone());
        name
    }
    fn get(&self, v: Value) -> Option<&String> {
        self.by_value.get(&(v.to_raw().ptr as usize))
    }
}

fn dims_of(t: Type) -> Option<Vec<Option<i64>>> {
    let tt = crate::ir::types::tensor_type(t)?;
    Some(
        tt.dims
            .iter()
            .map(|d| match d {
                crate::ir::types::Dim::Static(n) => Some(*n as i64),
                crate::ir::types::Dim::Dynamic => None,
            })
            .collect(),
    )
}

fn value_info(name: &str, t: Type, params: &[String]) -> Option<proto::ValueInfoProto> {
    let elem = onnx_element(element_type(t)?)?;
    let shape = dims_of(t).map(|dims| proto::TensorShapeProto {
        dim: dims
            .iter()
            .enumerate()
            .map(|(i, d)| proto::Dimension {
                value: match (d, params.get(i).filter(|p| !p.is_empty())) {
                    (_, Some(p)) => Some(proto::Dim::Param(p.clone())),
                    (Some(n), None) => Some(proto::Dim::Value(*n)),
                    (None, None) => None,
                },
                denotation: String::new(),
            })
            .collect(),
    });
    Some(proto::ValueInfoProto {
        name: name.to_string(),
        r#type: Some(proto::TypeProto {
            value: Some(proto::type_proto::Value::TensorType(proto::type_proto::Tensor {
                elem_type: elem,
                shape,
            })),
            denotation: String::new(),
        }),
        ..Default::default()
    })
}

/// A TensorProto from a tensor (`elem` says the ONNX type, for 4-bit values held in bytes).
fn tensor_proto(name: &str, t: &Tensor, elem: i32) -> TensorProto {
    let raw = match (t, elem) {
        (Tensor::I8(a), dt::INT4 | dt::UINT4) => pack4(&a.iter().map(|&x| x as u8).collect::<Vec<_>>()),
        (Tensor::U8(a), dt::INT4 | dt::UINT4) => pack4(a.as_slice().unwrap_or(&a.iter().copied().collect::<Vec<_>>())),
        _ => crate::ir::constants::tensor_le_bytes(t),
    };
    TensorProto {
        dims: t.shape().iter().map(|&d| d as i64).collect(),
        data_type: elem,
        name: name.to_string(),
        raw_data: raw,
        ..Default::default()
    }
}

/// Two 4-bit values per byte, the first in the low nibble.
fn pack4(v: &[u8]) -> Vec<u8> {
    v.chunks(2)
        .map(|c| (c[0] & 0xF) | (c.get(1).copied().unwrap_or(0) & 0xF) << 4)
        .collect()
}

/// An initializer from a constant op's `value` (raw bytes copied as they are when MLIR holds
/// them unpacked and not splat).
fn initializer(op: OperationRef, name: &str, path: &Path) -> Result<TensorProto, FormatError> {
    let attr = op
        .attribute("value")
        .map_err(|x| e(path, format!("constant '{name}': {x}")))?;
    let ty = crate::ir::types::attr_type(attr);
    let elem_ty = element_type(ty).ok_or_else(|| e(path, format!("constant '{name}' is not a tensor")))?;
    let elem = onnx_element(elem_ty).ok_or_else(|| {
        e(
            path,
            format!("constant '{name}': element type {elem_ty} has no ONNX type"),
        )
    })?;
    let dims = dims_of(ty).unwrap_or_default();
    let n: i64 = dims.iter().map(|d| d.unwrap_or(0)).product();
    let size = crate::dialects::onnx_types::raw_size(elem).unwrap_or(0);
    let raw = (size > 0 && elem != dt::BOOL)
        .then(|| crate::ir::constants::dense_raw_bytes(attr, n as usize * size))
        .flatten();
    if let Some(raw) = raw {
        return Ok(TensorProto {
            dims: dims.iter().map(|d| d.unwrap_or(0)).collect(),
            data_type: elem,
            name: name.to_string(),
            raw_data: raw,
            ..Default::default()
        });
    }
    let t = crate::ir::attribute_to_tensor(attr, name).map_err(|x| e(path, x.to_string()))?;
    Ok(tensor_proto(name, &t, elem))
}

fn attribute(name: &str, v: &AttrValue) -> Option<AttributeProto> {
    let mut a = AttributeProto {
        name: name.to_string(),
        ..Default::default()
    };
    match v {
        AttrValue::Int(i) => {
            a.r#type = at::INT;
            a.i = *i;
        }
        AttrValue::Bool(b) => {
            a.r#type = at::INT;
            a.i = *b as i64;
        }
        AttrValue::Float(f) => {
            a.r#type = at::FLOAT;
            a.f = *f as f32;
        }
        AttrValue::Str(s) => {
            a.r#type = at::STRING;
            a.s = s.as_bytes().to_vec();
        }
        AttrValue::Ints(v) => {
            a.r#type = at::INTS;
            a.ints = v.clone();
        }
        AttrValue::Floats(v) => {
            a.r#type = at::FLOATS;
            a.floats = v.iter().map(|&x| x as f32).collect();
        }
        AttrValue::Array(items) if items.iter().all(|x| matches!(x, AttrValue::Str(_))) && !items.is_empty() => {
            a.r#type = at::STRINGS;
            a.strings = items
                .iter()
                .filter_map(|x| x.as_str())
                .map(|s| s.as_bytes().to_vec())
                .collect();
        }
        AttrValue::Array(items) if items.iter().all(|x| matches!(x, AttrValue::Float(_))) && !items.is_empty() => {
            a.r#type = at::FLOATS;
            a.floats = items.iter().filter_map(AttrValue::as_f64).map(|x| x as f32).collect();
        }
        AttrValue::Array(items) => {
            a.r#type = at::INTS;
            a.ints = items.iter().map(AttrValue::as_int).collect::<Option<Vec<_>>>()?;
        }
        AttrValue::Dense(t) => {
            a.r#type = at::TENSOR;
            let elem = match t {
                Tensor::F32(_) => dt::FLOAT,
                Tensor::F64(_) => dt::DOUBLE,
                Tensor::F16(_) => dt::FLOAT16,
                Tensor::BF16(_) => dt::BFLOAT16,
                Tensor::I1(_) => dt::BOOL,
                Tensor::I8(_) => dt::INT8,
                Tensor::U8(_) => dt::UINT8,
                Tensor::I16(_) => dt::INT16,
                Tensor::U16(_) => dt::UINT16,
                Tensor::I32(_) => dt::INT32,
                Tensor::U32(_) => dt::UINT32,
                Tensor::I64(_) => dt::INT64,
                Tensor::U64(_) => dt::UINT64,
            };
            a.t = Some(tensor_proto("", t, elem));
        }
        _ => return None,
    }
    Some(a)
}

/// The node name kept in an imported op's location (`loc("out"("node"(file:N:1)))`).
fn node_name(loc: Location) -> Option<String> {
    let first = if loc.is_fused() && loc.fused_num_locations() > 0 {
        loc.fused_location(0)
    } else {
        loc
    };
    if first.is_name() {
        let child = first.name_child_location();
        if child.is_name() {
            return location_name(child);
        }
    }
    None
}

fn module_str(module: &Module, k: &str) -> Option<String> {
    let a = module.as_operation().attribute(k).ok()?;
    attr_value(a).as_str().map(str::to_string)
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    (0..s.len())
        .step_by(2)
        .map(|i| s.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()))
        .collect()
}

fn string_lists(v: Option<AttrValue>) -> Vec<Vec<String>> {
    let Some(AttrValue::Array(items)) = v else {
        return vec![];
    };
    items
        .iter()
        .map(|p| match p {
            AttrValue::Array(s) => s.iter().map(|x| x.as_str().unwrap_or("").to_string()).collect(),
            _ => vec![],
        })
        .collect()
}

/// Builds the `ModelProto` of @main; `path` names the output in errors.
pub fn export(module: &Module, path: &Path) -> Result<proto::ModelProto, FormatError> {
    let func = find_function(module, None)?;
    let keys = TensorKeys::new(func);
    let block = func
        .region(0)
        .ok()
        .and_then(|r| r.first_block())
        .ok_or_else(|| e(path, "the function has no body".into()))?;
    let ops = body_ops(func);
    let ret = ops
        .iter()
        .find(|o| op_name(*o) == "func.return")
        .copied()
        .ok_or_else(|| e(path, "the function has no return".into()))?;
    let (in_names, out_names) = entry_function_names(func);
    let fattr = |k: &str| func.attribute(k).ok().map(attr_value);
    let in_params = string_lists(fattr("onnx.input_dim_params"));
    let out_params = string_lists(fattr("onnx.output_dim_params"));
    let mut names = Names {
        by_value: HashMap::new(),
        used: HashSet::new(),
    };
    let mut graph = proto::GraphProto {
        name: module_str(module, "onnx.graph_name").unwrap_or_else(|| "main".into()),
        doc_string: module_str(module, "onnx.graph_doc_string").unwrap_or_default(),
        metadata_props: super::props::pairs(module_attr(module, "onnx.graph_metadata_props")),
        ..Default::default()
    };
    // inputs first, then the outputs' names, so nothing else takes them
    for k in 0..block.argument_count() {
        let a = block.argument(k).map_err(|x| e(path, x.to_string()))?;
        let v: Value = a.into();
        let want = in_names
            .get(k)
            .cloned()
            .or_else(|| keys.get(v).map(str::to_string))
            .unwrap_or_else(|| format!("input_{k}"));
        let n = names.fresh(&want);
        names.by_value.insert(v.to_raw().ptr as usize, n.clone());
        graph.input.push(
            value_info(&n, v.r#type(), in_params.get(k).map(Vec::as_slice).unwrap_or(&[])).ok_or_else(|| {
                e(
                    path,
                    format!(
                        "input '{n}': type {} has no ONNX form",
                        crate::ir::type_text(v.r#type())
                    ),
                )
            })?,
        );
    }
    let mut identities = Vec::new();
    let mut out_values = Vec::new();
    for (k, v) in ret.operands().enumerate() {
        let want = out_names
            .get(k)
            .cloned()
            .or_else(|| keys.get(v).map(str::to_string))
            .unwrap_or_else(|| format!("output_{k}"));
        if names.get(v).is_some() {
            // an input or a value already returned under another name: a copy
            let n = names.fresh(&want);
            identities.push((v, n.clone()));
            out_values.push((v, n));
            continue;
        }
        let n = names.fresh(&want);
        names.by_value.insert(v.to_raw().ptr as usize, n.clone());
        out_values.push((v, n));
    }
    for op in &ops {
        for r in op.results() {
            let v: Value = r.into();
            if names.get(v).is_none() {
                let want = keys.get(v).map(str::to_string).unwrap_or_default();
                let n = names.fresh(&want);
                names.by_value.insert(v.to_raw().ptr as usize, n);
            }
        }
    }
    // what the Q/DQ nodes of 8-bit types need, and the nodes of 16/4-bit types (opset 21)
    let mut needs_narrow = 1i64;
    let mut wide_nodes: Vec<usize> = Vec::new();
    let mut used_ops: BTreeMap<String, ()> = BTreeMap::new();
    #[allow(clippy::type_complexity)]
    let mut qparam_names: HashMap<(Vec<u32>, Vec<i64>, i32, bool), (String, String)> = HashMap::new();
    let name_of = |names: &Names, v: Value| -> Result<String, FormatError> {
        if op_name_of_def(v).as_deref() == Some(NO_VALUE) {
            return Ok(String::new());
        }
        names
            .get(v)
            .cloned()
            .ok_or_else(|| e(path, "an operand is defined outside the function".into()))
    };
    for op in &ops {
        let name = op_name(op);
        let out = |i: usize| -> Result<String, FormatError> {
            let r = op.result(i).map_err(|x| e(path, x.to_string()))?;
            name_of(&names, r.into())
        };
        let node_label = node_name(op.location());
        match name.as_str() {
            "func.return" | NO_VALUE => {}
            _ if is_constant_op(op) => {
                graph.initializer.push(initializer(*op, &out(0)?, path)?);
            }
            "quant.scast" => {
                // same bytes, new type: the result is another name for the operand
                let src = name_of(&names, op.operand(0).map_err(|x| e(path, x.to_string()))?)?;
                let r: Value = op.result(0).map_err(|x| e(path, x.to_string()))?.into();
                // unsigned 8-bit storage is held by a signless i8 constant (MLIR's quant storage
                // is signless): its initializer is the same bytes typed uint8
                if element_type(r.r#type()).and_then(onnx_element) == Some(dt::UINT8) {
                    if let Some(t) = graph
                        .initializer
                        .iter_mut()
                        .find(|t| t.name == src && t.data_type == dt::INT8)
                    {
                        t.data_type = dt::UINT8;
                    }
                }
                names.by_value.insert(r.to_raw().ptr as usize, src);
            }
            "quant.qcast" | "quant.dcast" => {
                let quantize = name == "quant.qcast";
                let x = op.operand(0).map_err(|x| e(path, x.to_string()))?;
                let qty = if quantize {
                    op.result(0).map_err(|x| e(path, x.to_string()))?.r#type()
                } else {
                    x.r#type()
                };
                let elem = element_type(qty).ok_or_else(|| e(path, format!("{name} of a non-tensor")))?;
                let p = params_from_type(elem, Scheme::Onnx).map_err(|x| e(path, x.to_string()))?;
                let needs = opset_for(p.dtype, p.axis.is_some());
                match needs >= WIDE_OPSET {
                    true => wide_nodes.push(graph.node.len()),
                    false => needs_narrow = needs_narrow.max(needs),
                }
                let zp_type = onnx_element(elem).ok_or_else(|| e(path, format!("{elem} has no ONNX type")))?;
                let base = out(0)?;
                // a Q/DQ pair (and every other point with the same parameters) shares one
                // scale and one zero-point initializer, as onnxruntime writes them
                let id = (
                    p.scale.iter().map(|&s| (s as f32).to_bits()).collect::<Vec<u32>>(),
                    p.zero_point.clone(),
                    zp_type,
                    p.axis.is_some(),
                );
                let (sname, zname) = match qparam_names.get(&id) {
                    Some(n) => n.clone(),
                    None => {
                        let (sname, zname) = (
                            names.fresh(&format!("{base}_scale")),
                            names.fresh(&format!("{base}_zero_point")),
                        );
                        let shape: Vec<usize> = if p.axis.is_some() { vec![p.scale.len()] } else { vec![] };
                        let scale = Tensor::F32(
                            ndarray::ArrayD::from_shape_vec(shape.clone(), p.scale.iter().map(|&s| s as f32).collect())
                                .map_err(|x| e(path, x.to_string()))?,
                        );
                        graph.initializer.push(tensor_proto(&sname, &scale, dt::FLOAT));
                        let zp = zero_point_tensor(&p.zero_point, &shape, zp_type).map_err(|x| e(path, x))?;
                        graph.initializer.push(TensorProto {
                            name: zname.clone(),
                            ..zp
                        });
                        qparam_names.insert(id, (sname.clone(), zname.clone()));
                        (sname, zname)
                    }
                };
                let mut node = NodeProto {
                    input: vec![name_of(&names, x)?, sname, zname],
                    output: vec![base.clone()],
                    name: names.fresh(&format!(
                        "{}_{}",
                        base,
                        if quantize { "QuantizeLinear" } else { "DequantizeLinear" }
                    )),
                    op_type: if quantize { "QuantizeLinear" } else { "DequantizeLinear" }.into(),
                    ..Default::default()
                };
                if let Some(axis) = p.axis {
                    node.attribute.push(AttributeProto {
                        name: "axis".into(),
                        r#type: at::INT,
                        i: axis as i64,
                        ..Default::default()
                    });
                }
                used_ops.insert(node.op_type.clone(), ());
                graph.node.push(node);
            }
            "arith.extf" | "arith.truncf" | "tf.Cast" => {
                let to = op
                    .result(0)
                    .ok()
                    .and_then(|r| element_type(r.r#type()))
                    .and_then(onnx_element)
                    .ok_or_else(|| e(path, format!("{name}: result type has no ONNX form")))?;
                let base = out(0)?;
                graph.node.push(NodeProto {
                    input: vec![name_of(&names, op.operand(0).map_err(|x| e(path, x.to_string()))?)?],
                    output: vec![base.clone()],
                    name: names.fresh(&format!("{base}_Cast")),
                    op_type: "Cast".into(),
                    attribute: vec![AttributeProto {
                        name: "to".into(),
                        r#type: at::INT,
                        i: to as i64,
                        ..Default::default()
                    }],
                    ..Default::default()
                });
                used_ops.insert("Cast".into(), ());
            }
            _ => {
                let Some(rest) = name.strip_prefix("onnx.") else {
                    return Err(e(
                        path,
                        format!(
                            "op {name} ({}) has no ONNX form: .onnx holds ONNX ops (an ONNX import, or a TF model lowered by --pass tf-to-onnx, which quantize -o x.onnx runs itself)",
                            crate::ir::ops::location_string(op.location())
                        ),
                    ));
                };
                let (domain, op_type) = match rest.rsplit_once('.') {
                    Some((d, t)) => (d.to_string(), t.to_string()),
                    None => (String::new(), rest.to_string()),
                };
                let mut node = NodeProto {
                    op_type: op_type.clone(),
                    domain,
                    ..Default::default()
                };
                for v in op.operands() {
                    node.input.push(name_of(&names, v)?);
                }
                // trailing absent inputs are left out, as ONNX writes them
                while node.input.last().is_some_and(String::is_empty) {
                    node.input.pop();
                }
                for i in 0..op.result_count() {
                    node.output.push(out(i)?);
                }
                for (k, v) in op_attrs(op) {
                    if k.contains('.') {
                        continue;
                    }
                    node.attribute.push(attribute(&k, &v).ok_or_else(|| {
                        e(
                            path,
                            format!("node of {name}: attribute '{k}' ({v:?}) has no ONNX form"),
                        )
                    })?);
                }
                let label = node_label
                    .clone()
                    .unwrap_or_else(|| format!("{}_{}", node.output.first().cloned().unwrap_or_default(), op_type));
                node.name = names.fresh(&label);
                if node.domain.is_empty() {
                    used_ops.insert(op_type, ());
                }
                graph.node.push(node);
            }
        }
    }
    for (v, n) in identities {
        graph.node.push(NodeProto {
            input: vec![name_of(&names, v)?],
            output: vec![n.clone()],
            name: names.fresh(&format!("{n}_Identity")),
            op_type: "Identity".into(),
            ..Default::default()
        });
    }
    for (k, (v, n)) in out_values.iter().enumerate() {
        graph.output.push(
            value_info(n, v.r#type(), out_params.get(k).map(Vec::as_slice).unwrap_or(&[])).ok_or_else(|| {
                e(
                    path,
                    format!(
                        "output '{n}': type {} has no ONNX form",
                        crate::ir::type_text(v.r#type())
                    ),
                )
            })?,
        );
    }
    // opsets: the imported ones, the default domain raised as far as the Q/DQ types need
    let mut opset_import: Vec<proto::OperatorSetIdProto> = match module_attr(module, "onnx.opset_import") {
        Some(AttrValue::Array(items)) => items
            .iter()
            .filter_map(|p| match p {
                AttrValue::Array(kv) if kv.len() == 2 => Some(proto::OperatorSetIdProto {
                    domain: kv[0].as_str()?.to_string(),
                    version: kv[1].as_int()?,
                }),
                _ => None,
            })
            .collect(),
        _ => vec![],
    };
    let default = opset_import
        .iter()
        .position(|o| o.domain.is_empty() || o.domain == "ai.onnx");
    let current = default.map(|i| opset_import[i].version).unwrap_or(0);
    let blocker = |needs: i64| blocking_op(&|op| used_ops.contains_key(op), current, needs);
    let mut needs_opset = match wide_nodes.is_empty() {
        true => needs_narrow,
        false => WIDE_OPSET,
    };
    if needs_opset > current
        && !wide_nodes.is_empty()
        && blocker(needs_opset).is_some()
        && blocker(needs_narrow).is_none()
    {
        // the model cannot be raised to opset 21 as it stands: its 16/4-bit Q/DQ nodes are
        // onnxruntime's contrib ops, as onnxruntime's quantizer writes them in that case
        for &i in &wide_nodes {
            graph.node[i].domain = CONTRIB_DOMAIN.into();
        }
        if !opset_import.iter().any(|o| o.domain == CONTRIB_DOMAIN) {
            opset_import.push(proto::OperatorSetIdProto {
                domain: CONTRIB_DOMAIN.into(),
                version: 1,
            });
        }
        needs_opset = needs_narrow;
    }
    if needs_opset > current {
        if let Some((op, at)) = blocker(needs_opset) {
            return Err(e(
                path,
                format!(
                    "the quantized types need opset {needs_opset}, but the model is opset {current} and its {op} nodes changed form at opset {at}; convert the model to opset {needs_opset} first (onnx.version_converter)"
                ),
            ));
        }
        if default.is_some() {
            axes_to_inputs(&mut graph, &mut names, current, needs_opset);
        }
        match default {
            Some(i) => opset_import[i].version = needs_opset,
            // a module that names no opset holds ops in their opset-13 form (tf-to-onnx's)
            None => opset_import.push(proto::OperatorSetIdProto {
                domain: String::new(),
                version: needs_opset.max(13),
            }),
        }
    }
    if opset_import.is_empty() {
        opset_import.push(proto::OperatorSetIdProto {
            domain: String::new(),
            version: needs_opset.max(13),
        });
    }
    let default_version = opset_import
        .iter()
        .find(|o| o.domain.is_empty() || o.domain == "ai.onnx")
        .map(|o| o.version)
        .unwrap_or(13);
    // the IR version each opset needs at least
    let ir_needed = match default_version {
        v if v >= 21 => 10,
        v if v >= 19 => 9,
        v if v >= 15 => 8,
        v if v >= 13 => 7,
        _ => 6,
    };
    let ir_version = module_attr(module, "onnx.ir_version")
        .and_then(|v| v.as_int())
        .unwrap_or(ir_needed)
        .max(ir_needed);
    let blobs = |k: &str| -> Vec<Vec<u8>> {
        match module_attr(module, k) {
            Some(AttrValue::Array(items)) => items.iter().filter_map(|x| x.as_str().and_then(unhex)).collect(),
            _ => vec![],
        }
    };
    use prost::Message;
    let functions = blobs("onnx.functions")
        .iter()
        .map(|b| proto::FunctionProto::decode(b.as_slice()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|x| e(path, format!("kept model functions: {x}")))?;
    let training_info = blobs("onnx.training_info")
        .iter()
        .map(|b| proto::TrainingInfoProto::decode(b.as_slice()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|x| e(path, format!("kept training info: {x}")))?;
    Ok(proto::ModelProto {
        ir_version,
        opset_import,
        producer_name: module_str(module, "onnx.producer_name").unwrap_or_else(|| "quantir".into()),
        producer_version: module_str(module, "onnx.producer_version").unwrap_or_default(),
        domain: module_str(module, "onnx.domain").unwrap_or_default(),
        model_version: module_attr(module, "onnx.model_version")
            .and_then(|v| v.as_int())
            .unwrap_or(0),
        doc_string: module_str(module, "onnx.doc_string").unwrap_or_default(),
        graph: Some(graph),
        metadata_props: super::props::metadata_props(module),
        training_info,
        functions,
        configuration: vec![],
    })
}

fn op_name_of_def(v: Value) -> Option<String> {
    crate::ir::graph::defining_op(v).map(|d| op_name(&d))
}

fn zero_point_tensor(zp: &[i64], shape: &[usize], elem: i32) -> Result<TensorProto, String> {
    let t = match elem {
        dt::INT8 | dt::INT4 => Tensor::I8(
            ndarray::ArrayD::from_shape_vec(shape.to_vec(), zp.iter().map(|&z| z as i8).collect())
                .map_err(|x| x.to_string())?,
        ),
        dt::UINT8 | dt::UINT4 => Tensor::U8(
            ndarray::ArrayD::from_shape_vec(shape.to_vec(), zp.iter().map(|&z| z as u8).collect())
                .map_err(|x| x.to_string())?,
        ),
        dt::INT16 => Tensor::I16(
            ndarray::ArrayD::from_shape_vec(shape.to_vec(), zp.iter().map(|&z| z as i16).collect())
                .map_err(|x| x.to_string())?,
        ),
        dt::UINT16 => Tensor::U16(
            ndarray::ArrayD::from_shape_vec(shape.to_vec(), zp.iter().map(|&z| z as u16).collect())
                .map_err(|x| x.to_string())?,
        ),
        dt::INT32 => Tensor::I32(
            ndarray::ArrayD::from_shape_vec(shape.to_vec(), zp.iter().map(|&z| z as i32).collect())
                .map_err(|x| x.to_string())?,
        ),
        t => return Err(format!("zero point of ONNX type {t}")),
    };
    Ok(tensor_proto("", &t, elem))
}
