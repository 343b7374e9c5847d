//! What each compute op of a quantized module runs at: the storage type of the values its
//! activation and weight operands are dequantized from, read off the IR (`quant.dcast` of a
//! `!quant.uniform` value, ONNX `DequantizeLinear` of an integer tensor, a cast from a half
//! constant), so that `evaluate --per-layer` shows each layer's precision next to its error —
//! including the layers `--target-sqnr` or a recipe raised to int16 or left float.
//!
//! ```mlir
//! %a = quant.dcast %x : tensor<1x64x!quant.uniform<i8:f32, 0.1>> to tensor<1x64xf32>
//! %w = quant.dcast %c : tensor<64x10x!quant.uniform<i8<-127:127>:f32:1, {...}>> to ...
//! %y = "tf.MatMul"(%a, %w)   // → "int8 weights, int8 activations"
//! ```

use crate::dialects::rule;
use crate::ir::graph::{body_ops, defining_op, find_function, op_name};
use melior::ir::operation::OperationLike;
use melior::ir::{Module, Value, ValueLike};
use std::collections::BTreeMap;

/// The precision of the value `v` is dequantized from: a storage type name (`int8`, `uint8`,
/// `int16`, `int4`, ...), `f16`/`bf16` for a half constant cast up, else `float`.
fn storage_of(v: Value) -> String {
    let float = "float".to_string();
    let Some(def) = defining_op(v) else { return float };
    let operand_elem = || {
        def.operand(0)
            .ok()
            .and_then(|x| crate::ir::types::element_type(x.r#type()))
    };
    match op_name(&def).as_str() {
        "quant.dcast" => operand_elem()
            .and_then(|t| crate::ir::quant::params_from_type(t, crate::params::Scheme::Mlir).ok())
            .map_or(float, |p| p.dtype.to_string()),
        "onnx.DequantizeLinear" => operand_elem().map_or(float, |t| integer_name(&crate::ir::type_text(t))),
        "tf.Cast" | "arith.extf" => match operand_elem().map(crate::ir::type_text).as_deref() {
            Some(t @ ("f16" | "bf16")) => t.to_string(),
            _ => float,
        },
        _ => float,
    }
}

/// `i8` → `int8`, `ui8` → `uint8`, ... (an ONNX integer tensor's element type).
fn integer_name(t: &str) -> String {
    match (t.strip_prefix("ui"), t.strip_prefix('i')) {
        (Some(bits), _) => format!("uint{bits}"),
        (None, Some(bits)) => format!("int{bits}"),
        _ => t.to_string(),
    }
}

/// The precision of every compute op (by the key of its first result): `int8 weights, int8
/// activations`, `int8 weights, int16 activations`, `f16 weights, float activations`,
/// `float`.
pub fn compute_precisions(module: &Module) -> Result<BTreeMap<String, String>, crate::ir::IrError> {
    let func = find_function(module, None)?;
    let keys = crate::ir::keys::TensorKeys::new(func);
    let mut out = BTreeMap::new();
    for op in body_ops(func) {
        let Some(r) = rule(&op_name(&op)).filter(|r| r.is_compute()) else {
            continue;
        };
        let Some(key) = op.result(0).ok().and_then(|v| keys.get(v.into())) else {
            continue;
        };
        let acts: Vec<String> = r
            .activations
            .iter()
            .filter_map(|&i| op.operand(i).ok().map(storage_of))
            .collect();
        let mut act = acts.first().cloned().unwrap_or_else(|| "float".into());
        if acts.iter().any(|a| *a != act) {
            act = acts.join(" × ");
        }
        let weight = r.weight.and_then(|(i, _)| op.operand(i).ok()).map(storage_of);
        let text = match weight {
            _ if act == "float" && weight.as_deref().is_none_or(|w| w == "float") => "float".to_string(),
            Some(w) => format!("{w} weights, {act} activations"),
            None => format!("{act} activations"),
        };
        out.insert(key.to_string(), text);
    }
    Ok(out)
}

pub use crate::ir::attrs::{RAISED_ATTR, RAISED_PROP_PREFIX};

/// Records `marks` (value key → why) on `module` as [`RAISED_ATTR`].
pub fn mark_raised(module: &Module, marks: &[(String, String)]) {
    use melior::ir::attribute::{ArrayAttribute, StringAttribute};
    use melior::ir::operation::OperationMutLike;
    let ctx = crate::ir::graph::module_context(module);
    let items: Vec<melior::ir::Attribute> = marks
        .iter()
        .map(|(k, why)| {
            ArrayAttribute::new(
                ctx,
                &[
                    StringAttribute::new(ctx, k).into(),
                    StringAttribute::new(ctx, why).into(),
                ],
            )
            .into()
        })
        .collect();
    let mut op = crate::ir::graph::module_op_mut(module);
    op.set_attribute(RAISED_ATTR, ArrayAttribute::new(ctx, &items).into());
}

/// The raised values recorded on `module` (key → why): its [`RAISED_ATTR`], or in a module
/// imported from ONNX the `quantir.raised/KEY` entries of its `metadata_props`.
pub fn raised_marks(module: &Module) -> BTreeMap<String, String> {
    use crate::ir::attrs::{attr_value, AttrValue};
    let op = module.as_operation();
    let pairs = |name: &str| -> Vec<(String, String)> {
        let Ok(AttrValue::Array(items)) = op.attribute(name).map(attr_value) else {
            return vec![];
        };
        items
            .iter()
            .filter_map(|p| match p {
                AttrValue::Array(kv) if kv.len() == 2 => {
                    Some((kv[0].as_str()?.to_string(), kv[1].as_str()?.to_string()))
                }
                _ => None,
            })
            .collect()
    };
    let mut out: BTreeMap<String, String> = pairs("onnx.metadata_props")
        .into_iter()
        .filter_map(|(k, v)| Some((k.strip_prefix(RAISED_PROP_PREFIX)?.to_string(), v)))
        .collect();
    out.extend(pairs(RAISED_ATTR));
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn onnx_integer_names() {
        assert_eq!(super::integer_name("i8"), "int8");
        assert_eq!(super::integer_name("ui8"), "uint8");
        assert_eq!(super::integer_name("i16"), "int16");
        assert_eq!(super::integer_name("f32"), "f32");
    }
}
