//! MLIR attributes as plain Rust values, so that kernels and dialect tables never hold MLIR
//! handles (the compiled interpreter program is `Send + Sync`).

use super::constants::attribute_to_tensor;
use crate::tensor::Tensor;
use melior::ir::attribute::AttributeLike;
use melior::ir::operation::OperationLike;
use melior::ir::{Attribute, Type};
use std::collections::BTreeMap;

/// The module attribute listing what `quantize --target-sqnr` raised above int8 and why, as
/// `[[key, why], ...]` string pairs (`precision::mark_raised`), so that `evaluate --per-layer`
/// and its report can mark those layers in the model written. An `.onnx` file carries each
/// pair as a `metadata_props` entry `quantir.raised/KEY` ([`RAISED_PROP_PREFIX`]).
pub const RAISED_ATTR: &str = "quantir.raised";

/// The `metadata_props` key prefix of a raised value in an ONNX file.
pub const RAISED_PROP_PREFIX: &str = "quantir.raised/";

#[derive(Debug, Clone, PartialEq)]
pub enum AttrValue {
    Unit,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    /// A type attribute, as its MLIR spelling (`f32`, `tensor<2xi32>`).
    Type(String),
    Array(Vec<AttrValue>),
    Ints(Vec<i64>),
    /// A dense f32/f64 array (`array<f32: ...>`).
    Floats(Vec<f64>),
    Dense(Tensor),
    Dict(BTreeMap<String, AttrValue>),
    /// Anything else, printed.
    Other(String),
}

impl AttrValue {
    pub fn as_int(&self) -> Option<i64> {
        match self {
            AttrValue::Int(i) => Some(*i),
            AttrValue::Bool(b) => Some(*b as i64),
            _ => None,
        }
    }
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            AttrValue::Float(f) => Some(*f),
            AttrValue::Int(i) => Some(*i as f64),
            _ => None,
        }
    }
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            AttrValue::Bool(b) => Some(*b),
            AttrValue::Int(i) => Some(*i != 0),
            _ => None,
        }
    }
    pub fn as_str(&self) -> Option<&str> {
        match self {
            AttrValue::Str(s) => Some(s),
            _ => None,
        }
    }
    /// A list of integers from an array of integer attributes or a dense i32/i64 array.
    pub fn as_ints(&self) -> Option<Vec<i64>> {
        match self {
            AttrValue::Ints(v) => Some(v.clone()),
            AttrValue::Array(v) => v.iter().map(AttrValue::as_int).collect(),
            _ => None,
        }
    }
}

fn string_of(raw: mlir_sys::MlirStringRef) -> String {
    if raw.length == 0 || raw.data.is_null() {
        return String::new();
    }
    let bytes = unsafe { std::slice::from_raw_parts(raw.data as *const u8, raw.length) };
    String::from_utf8_lossy(bytes).into_owned()
}

/// Converts one attribute.
pub fn attr_value(a: Attribute) -> AttrValue {
    let raw = a.to_raw();
    unsafe {
        if mlir_sys::mlirAttributeIsAUnit(raw) {
            AttrValue::Unit
        } else if mlir_sys::mlirAttributeIsABool(raw) {
            AttrValue::Bool(mlir_sys::mlirBoolAttrGetValue(raw))
        } else if mlir_sys::mlirAttributeIsAInteger(raw) {
            AttrValue::Int(mlir_sys::mlirIntegerAttrGetValueInt(raw))
        } else if mlir_sys::mlirAttributeIsAFloat(raw) {
            AttrValue::Float(mlir_sys::mlirFloatAttrGetValueDouble(raw))
        } else if mlir_sys::mlirAttributeIsAString(raw) {
            AttrValue::Str(string_of(mlir_sys::mlirStringAttrGetValue(raw)))
        } else if mlir_sys::mlirAttributeIsAType(raw) {
            AttrValue::Type(Type::from_raw(mlir_sys::mlirTypeAttrGetValue(raw)).to_string())
        } else if mlir_sys::mlirAttributeIsAArray(raw) {
            let n = mlir_sys::mlirArrayAttrGetNumElements(raw);
            AttrValue::Array(
                (0..n)
                    .map(|i| attr_value(Attribute::from_raw(mlir_sys::mlirArrayAttrGetElement(raw, i))))
                    .collect(),
            )
        } else if mlir_sys::mlirAttributeIsADenseI64Array(raw) {
            let n = mlir_sys::mlirDenseArrayGetNumElements(raw);
            AttrValue::Ints((0..n).map(|i| mlir_sys::mlirDenseI64ArrayGetElement(raw, i)).collect())
        } else if mlir_sys::mlirAttributeIsADenseF32Array(raw) {
            let n = mlir_sys::mlirDenseArrayGetNumElements(raw);
            AttrValue::Floats(
                (0..n)
                    .map(|i| mlir_sys::mlirDenseF32ArrayGetElement(raw, i) as f64)
                    .collect(),
            )
        } else if mlir_sys::mlirAttributeIsADenseI32Array(raw) {
            let n = mlir_sys::mlirDenseArrayGetNumElements(raw);
            AttrValue::Ints(
                (0..n)
                    .map(|i| mlir_sys::mlirDenseI32ArrayGetElement(raw, i) as i64)
                    .collect(),
            )
        } else if mlir_sys::mlirAttributeIsAElements(raw) {
            match attribute_to_tensor(a, "attribute") {
                Ok(t) => AttrValue::Dense(t),
                Err(_) => AttrValue::Other(a.to_string()),
            }
        } else if mlir_sys::mlirAttributeIsADictionary(raw) {
            let n = mlir_sys::mlirDictionaryAttrGetNumElements(raw);
            let mut m = BTreeMap::new();
            for i in 0..n {
                let na = mlir_sys::mlirDictionaryAttrGetElement(raw, i);
                let name = string_of(mlir_sys::mlirIdentifierStr(na.name));
                m.insert(name, attr_value(Attribute::from_raw(na.attribute)));
            }
            AttrValue::Dict(m)
        } else {
            AttrValue::Other(a.to_string())
        }
    }
}

/// Every attribute of an op (inherent and discardable), by name.
///
/// The C API cannot enumerate inherent attributes, and those of unregistered ops (every
/// `tf.*` op, whose `<{...}>` properties hold `strides`, `padding`, ...) are not among the
/// enumerable ones. So the op is printed in generic form (regions skipped) and its
/// `<{...}>` dictionary is parsed back as a `DictionaryAttr` and enumerated.
pub fn op_attrs<'c: 'a, 'a>(op: &impl OperationLike<'c, 'a>) -> BTreeMap<String, AttrValue> {
    let mut out: BTreeMap<String, AttrValue> = op
        .attributes()
        .map(|(k, v)| {
            (
                crate::ir::ref_str(k.as_string_ref()).unwrap_or("").to_string(),
                attr_value(v),
            )
        })
        .collect();
    if let Some(dict) = properties_dict(op) {
        if let AttrValue::Dict(m) = attr_value(dict) {
            out.extend(m);
        }
    }
    out
}

/// The generic form of one op, without its regions.
fn print_generic<'c: 'a, 'a>(op: &impl OperationLike<'c, 'a>) -> String {
    unsafe extern "C" fn sink(s: mlir_sys::MlirStringRef, data: *mut std::ffi::c_void) {
        let out = unsafe { &mut *(data as *mut Vec<u8>) };
        if s.length > 0 && !s.data.is_null() {
            out.extend_from_slice(unsafe { std::slice::from_raw_parts(s.data as *const u8, s.length) });
        }
    }
    let mut buf: Vec<u8> = Vec::new();
    unsafe {
        let flags = mlir_sys::mlirOpPrintingFlagsCreate();
        mlir_sys::mlirOpPrintingFlagsPrintGenericOpForm(flags);
        mlir_sys::mlirOpPrintingFlagsSkipRegions(flags);
        mlir_sys::mlirOpPrintingFlagsUseLocalScope(flags);
        mlir_sys::mlirOperationPrintWithFlags(op.to_raw(), flags, Some(sink), &mut buf as *mut Vec<u8> as *mut _);
        mlir_sys::mlirOpPrintingFlagsDestroy(flags);
    }
    String::from_utf8_lossy(&buf).into_owned()
}

/// The text between the matching brackets starting at `open` (which is `open_ch`), honouring
/// string literals.
fn matching(text: &[u8], open: usize, open_ch: u8, close_ch: u8) -> Option<usize> {
    let mut depth = 0usize;
    let mut i = open;
    let mut in_str = false;
    while i < text.len() {
        let c = text[i];
        if in_str {
            if c == b'\\' {
                i += 1;
            } else if c == b'"' {
                in_str = false;
            }
        } else if c == b'"' {
            in_str = true;
        } else if c == open_ch {
            depth += 1;
        } else if c == close_ch {
            depth -= 1;
            if depth == 0 {
                return Some(i);
            }
        }
        i += 1;
    }
    None
}

/// The `<{...}>` properties of an op in generic form, parsed as a dictionary attribute.
fn properties_dict<'c: 'a, 'a>(op: &impl OperationLike<'c, 'a>) -> Option<Attribute<'c>> {
    let text = print_generic(op);
    let b = text.as_bytes();
    // `"dialect.op"(operands)` — skip the name string, then the operand list
    let q1 = text.find('"')?;
    let q2 = q1 + 1 + text[q1 + 1..].find('"')?;
    let lp = q2 + 1 + text[q2 + 1..].find('(')?;
    let rp = matching(b, lp, b'(', b')')?;
    let rest = text[rp + 1..].trim_start();
    if !rest.starts_with("<{") {
        return None;
    }
    let start = rp + 1 + (text[rp + 1..].len() - rest.len()) + 1;
    let end = matching(b, start, b'{', b'}')?;
    let dict = &text[start..=end];
    let ctx = op.context();
    unsafe {
        let src = mlir_sys::MlirStringRef {
            data: dict.as_ptr() as *const _,
            length: dict.len(),
        };
        let a = mlir_sys::mlirAttributeParseGet(ctx.to_ref().to_raw(), src);
        (!a.ptr.is_null() && mlir_sys::mlirAttributeIsADictionary(a)).then(|| Attribute::from_raw(a))
    }
}
