//! What an op is and how constants come and go: constant ops and their values, a function's
//! entry names, a location as `file:line:col`, and inserting or erasing constants.
//!
//! ```mlir
//! %c = "tf.Const"() {value = dense<1.0> : tensor<4xf32>} : () -> tensor<4xf32>  // is_constant_op
//! func.func @main(...) attributes {tf.entry_function = {inputs = "x", outputs = "y"}}
//! ```

use super::graph::{context_of, defining_op, dictionary_get, erase_op, insert_before, string_value, uses};
use super::{attribute_to_tensor, tensor_to_attribute, IrError};
use crate::tensor::Tensor;
use melior::ir::attribute::AttributeLike;
use melior::ir::operation::{OperationBuilder, OperationLike};
use melior::ir::{Identifier, Location, OperationRef};

/// True for an op that holds a constant tensor: no operands and an elements-valued `value`
/// attribute (`tf.Const`, `arith.constant`, `onnx.Constant`, ...).
pub fn is_constant_op<'c: 'a, 'a>(op: &impl OperationLike<'c, 'a>) -> bool {
    op.operand_count() == 0
        && op.result_count() == 1
        && op
            .attribute("value")
            .map(super::constants::is_elements)
            .unwrap_or(false)
}

fn split_names(s: Option<String>) -> Vec<String> {
    s.map(|s| s.split(',').filter(|x| !x.is_empty()).map(str::to_string).collect())
        .unwrap_or_default()
}

/// The input and output names of a function: an ONNX import's graph names, else
/// `tf.entry_function`'s `inputs` / `outputs`.
pub fn entry_function_names(func: OperationRef) -> (Vec<String>, Vec<String>) {
    let names = |k: &str| -> Option<Vec<String>> {
        let a = func.attribute(k).ok()?;
        match super::attrs::attr_value(a) {
            super::attrs::AttrValue::Array(v) => v.iter().map(|x| x.as_str().map(str::to_string)).collect(),
            _ => None,
        }
    };
    if let (Some(i), Some(o)) = (names("onnx.input_names"), names("onnx.output_names")) {
        return (i, o);
    }
    let Ok(dict) = func.attribute("tf.entry_function") else {
        return (vec![], vec![]);
    };
    let get = |k: &str| dictionary_get(dict, k).and_then(string_value);
    (split_names(get("inputs")), split_names(get("outputs")))
}

/// `file:line:col` of a location when it has one (through names, fusions and call sites).
pub fn location_string(loc: Location) -> String {
    fn find(loc: Location) -> Option<String> {
        if loc.is_file_line_col_range() {
            let f = super::ref_str(loc.file_line_col_range_filename().as_string_ref())
                .unwrap_or("?")
                .to_string();
            return Some(format!(
                "{f}:{}:{}",
                loc.file_line_col_range_start_line(),
                loc.file_line_col_range_start_column()
            ));
        }
        if loc.is_name() {
            let child = loc.name_child_location();
            // ONNX import: loc("tensor"("node"(file:N:1))) — name the node too
            if child.is_name() && child.name_child_location().is_file_line_col_range() {
                let node = super::ref_str(child.name_value().as_string_ref())
                    .unwrap_or("?")
                    .to_string();
                return find(child).map(|f| format!("{f} (node '{node}')"));
            }
            return find(child);
        }
        if loc.is_fused() {
            return (0..loc.fused_num_locations()).find_map(|i| find(loc.fused_location(i)));
        }
        if loc.is_call_site() {
            return find(loc.call_site_caller());
        }
        None
    }
    find(loc).unwrap_or_else(|| crate::ir::location_text(loc))
}

/// The value of a constant op's `value` attribute.
pub fn constant_value(op: OperationRef) -> Option<Tensor> {
    if !is_constant_op(&op) {
        return None;
    }
    attribute_to_tensor(op.attribute("value").ok()?, "constant").ok()
}

/// A new constant op holding `t`, in the dialect of `like` (`tf.Const` next to TF ops,
/// `arith.constant` otherwise), inserted before `anchor`.
pub fn insert_constant<'c, 'a>(
    anchor: OperationRef<'c, 'a>,
    t: &Tensor,
    tf: bool,
    loc: melior::ir::Location<'c>,
) -> Result<OperationRef<'c, 'a>, IrError> {
    let ctx = context_of(&anchor);
    insert_constant_attr(anchor, tensor_to_attribute(ctx, t), tf, loc)
}

/// A new constant op holding `attr`, inserted before `anchor`.
pub fn insert_constant_attr<'c, 'a>(
    anchor: OperationRef<'c, 'a>,
    attr: melior::ir::Attribute<'c>,
    tf: bool,
    loc: melior::ir::Location<'c>,
) -> Result<OperationRef<'c, 'a>, IrError> {
    let ctx = context_of(&anchor);
    let name = if tf { "tf.Const" } else { "arith.constant" };
    let op = OperationBuilder::new(name, loc)
        .add_attributes(&[(Identifier::new(ctx, "value"), attr)])
        .add_results(&[attr.r#type()])
        .build()
        .map_err(|e| IrError::Invalid(format!("cannot build {name}: {e}")))?;
    insert_before(anchor, op)
}

/// Erases `op` (which must have no uses left), then each distinct constant that fed it and is
/// now unused.
pub fn erase_with_dead_constants(op: melior::ir::OperationRef) -> Result<(), IrError> {
    let mut consts: Vec<melior::ir::OperationRef> =
        op.operands().filter_map(defining_op).filter(is_constant_op).collect();
    consts.sort_by_key(|d| d.to_raw().ptr as usize);
    consts.dedup_by_key(|d| d.to_raw().ptr as usize);
    erase_op(op)?;
    for d in consts {
        if d.results().all(|r| uses(r.into()).is_empty()) {
            erase_op(d)?;
        }
    }
    Ok(())
}

/// The value of every constant op in `func`'s body, by op address, read on every thread
/// (errors name each constant by its key in `keys`).
pub fn read_constants(
    func: melior::ir::OperationRef,
    keys: &super::TensorKeys,
) -> std::collections::HashMap<usize, Result<Tensor, IrError>> {
    use rayon::prelude::*;
    let work: Vec<(usize, super::constants::SharedConstant, String)> = crate::ir::graph::body_ops(func)
        .into_iter()
        .filter(is_constant_op)
        .filter_map(|op| {
            let key = op.result(0).ok().and_then(|r| keys.get(r.into()).map(str::to_string));
            Some((
                op.to_raw().ptr as usize,
                super::constants::SharedConstant::of(&op)?,
                key.unwrap_or_else(|| "-".into()),
            ))
        })
        .collect();
    work.into_par_iter().map(|(id, c, key)| (id, c.value(&key))).collect()
}
