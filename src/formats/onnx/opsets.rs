//! Default-domain opsets of a written model: what each quantized type needs, and the ops whose
//! form changed between opsets, which stop a raise across them (or, for `axes`, rewrite the node).

use crate::params::StorageType;

/// What changed in an op at an opset of [`CHANGED_AT`].
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Only `axes` moved from an attribute to input 1: a raise across it rewrites the node.
    AxesToInput,
    /// Anything else: a raise across it stops the export.
    Other,
}

/// Opset versions at which default-domain ops changed their inputs or attributes in ways a
/// re-labelled model would not survive (axes/split/pads moved from attributes to inputs, ...).
pub const CHANGED_AT: &[(&str, i64, Change)] = &[
    ("Squeeze", 13, Change::AxesToInput),
    ("Unsqueeze", 13, Change::AxesToInput),
    ("Split", 13, Change::Other),
    ("ReduceSum", 13, Change::AxesToInput),
    ("ReduceMean", 18, Change::AxesToInput),
    ("ReduceMax", 18, Change::AxesToInput),
    ("ReduceMin", 18, Change::AxesToInput),
    ("ReduceProd", 18, Change::AxesToInput),
    ("ReduceL1", 18, Change::AxesToInput),
    ("ReduceL2", 18, Change::AxesToInput),
    ("ReduceLogSum", 18, Change::AxesToInput),
    ("ReduceLogSumExp", 18, Change::AxesToInput),
    ("ReduceSumSquare", 18, Change::AxesToInput),
    ("Split", 18, Change::Other),
    ("Pad", 11, Change::Other),
    ("Resize", 11, Change::Other),
    ("Upsample", 10, Change::Other),
    ("Slice", 10, Change::Other),
    ("TopK", 10, Change::Other),
    ("Clip", 11, Change::Other),
    ("BatchNormalization", 14, Change::Other),
    ("Dropout", 12, Change::Other),
];

/// The ops of [`CHANGED_AT`] (for the table cross-check).
pub fn opset_changed_ops() -> Vec<&'static str> {
    CHANGED_AT.iter().map(|(op, _, _)| *op).collect()
}

/// The default-domain opset of 16- and 4-bit Q/DQ types.
pub const WIDE_OPSET: i64 = 21;

/// The smallest default-domain opset that can express a quantized type.
pub fn opset_for(dtype: StorageType, per_axis: bool) -> i64 {
    match dtype {
        StorageType::Int4 | StorageType::Uint4 | StorageType::Int16 | StorageType::Uint16 => WIDE_OPSET,
        _ if per_axis => 13,
        _ => 10,
    }
}

/// The first op `used` names whose form changed between opset `current` and `needs` in a way a
/// relabelled model would not survive, with the opset it changed at.
pub fn blocking_op(used: &dyn Fn(&str) -> bool, current: i64, needs: i64) -> Option<(&'static str, i64)> {
    CHANGED_AT
        .iter()
        .find(|(op, at, c)| used(op) && current < *at && needs >= *at && *c == Change::Other)
        .map(|&(op, at, _)| (op, at))
}
