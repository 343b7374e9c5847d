//! Module attributes ↔ an ONNX model's `metadata_props`: string pairs kept from the file
//! imported, and the record of what `quantize --target-sqnr` raised.

use super::proto;
use crate::ir::attrs::{attr_value, AttrValue};
use melior::ir::operation::OperationLike;
use melior::ir::Module;

/// A module attribute's value, if the module has it.
pub(super) fn module_attr(module: &Module, k: &str) -> Option<AttrValue> {
    module.as_operation().attribute(k).ok().map(attr_value)
}

/// The model's `metadata_props`: those it was imported with, and the values `--target-sqnr`
/// raised (`ir::attrs::RAISED_ATTR`) as `quantir.raised/KEY` entries, which replace any an
/// imported file carried.
pub(super) fn metadata_props(module: &Module) -> Vec<proto::StringStringEntryProto> {
    use crate::ir::attrs::{RAISED_ATTR, RAISED_PROP_PREFIX};
    let mut props = pairs(module_attr(module, "onnx.metadata_props"));
    let raised = pairs(module_attr(module, RAISED_ATTR));
    if !raised.is_empty() {
        props.retain(|p| !p.key.starts_with(RAISED_PROP_PREFIX));
        props.extend(raised.into_iter().map(|p| proto::StringStringEntryProto {
            key: format!("{RAISED_PROP_PREFIX}{}", p.key),
            value: p.value,
        }));
    }
    props
}

/// The `[[key, value], ...]` string pairs of a module attribute.
pub(super) fn pairs(v: Option<AttrValue>) -> Vec<proto::StringStringEntryProto> {
    let Some(AttrValue::Array(items)) = v else {
        return vec![];
    };
    items
        .iter()
        .filter_map(|p| match p {
            AttrValue::Array(kv) if kv.len() == 2 => Some(proto::StringStringEntryProto {
                key: kv[0].as_str()?.to_string(),
                value: kv[1].as_str()?.to_string(),
            }),
            _ => None,
        })
        .collect()
}
