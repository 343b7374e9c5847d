//! Tensor keys: the stable names statistics, parameters and reports use for a value.
//!
//! A value's key is its name location (`loc("conv1/Relu")`, as ONNX import and TF export set
//! them; `name:j` for result j > 0 of a multi-result op) when it has one, else its position:
//! `@func/op#i:result#j` (i = pre-order index of the op inside the function) or `@func/arg#k`.

use super::graph::{function_name, nested_ops};
use melior::ir::block::BlockLike;
use melior::ir::operation::OperationLike;
use melior::ir::RegionLike;
use melior::ir::{Location, OperationRef, Value, ValueLike};
use std::collections::HashMap;

/// The first name found in a location (through fused and call-site locations).
pub fn location_name(loc: Location) -> Option<String> {
    if loc.is_name() {
        return crate::ir::ref_str(loc.name_value().as_string_ref())
            .ok()
            .map(str::to_string);
    }
    if loc.is_fused() {
        return (0..loc.fused_num_locations()).find_map(|i| location_name(loc.fused_location(i)));
    }
    if loc.is_call_site() {
        return location_name(loc.call_site_callee());
    }
    None
}

/// Every name in `loc`, outermost first: an ONNX op's output tensor name, then its node's name
/// (`loc("y"(loc("node"(...))))`), and the names inside fused locations.
pub fn location_names(loc: Location) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![loc];
    while let Some(l) = stack.pop() {
        if l.is_name() {
            if let Ok(n) = crate::ir::ref_str(l.name_value().as_string_ref()) {
                out.push(n.to_string());
            }
            // SAFETY: `l` is a name location of a live context; the child is one of its own
            let child = unsafe { mlir_sys::mlirLocationNameGetChildLoc(l.to_raw()) };
            stack.push(unsafe { Location::from_raw(child) });
        } else if l.is_fused() {
            stack.extend((0..l.fused_num_locations()).rev().map(|i| l.fused_location(i)));
        } else if l.is_call_site() {
            stack.push(l.call_site_callee());
        }
    }
    out
}

/// Keys of every value in one function, computed once (positional keys need the op index).
pub struct TensorKeys {
    by_value: HashMap<usize, String>,
}

impl TensorKeys {
    pub fn new(func: OperationRef<'_, '_>) -> Self {
        let fname = function_name(&func);
        let mut by_value = HashMap::new();
        if let Some(block) = func.region(0).ok().and_then(|r| r.first_block()) {
            for k in 0..block.argument_count() {
                if let Ok(arg) = block.argument(k) {
                    let key = location_name(arg.location()).unwrap_or_else(|| format!("@{fname}/arg#{k}"));
                    by_value.insert(arg.to_raw().ptr as usize, key);
                }
            }
        }
        for (i, op) in nested_ops(func).into_iter().enumerate() {
            let name = location_name(op.location());
            for (j, r) in op.results().enumerate() {
                let key = match &name {
                    Some(n) if j == 0 => n.clone(),
                    Some(n) => format!("{n}:{j}"),
                    None => format!("@{fname}/op#{i}:result#{j}"),
                };
                by_value.insert(r.to_raw().ptr as usize, key);
            }
        }
        TensorKeys { by_value }
    }

    /// Every key of the function: its arguments' and its ops' results'.
    pub fn all(&self) -> impl Iterator<Item = &str> {
        self.by_value.values().map(String::as_str)
    }

    /// The key of `value`, if it belongs to this function.
    pub fn get(&self, value: Value) -> Option<&str> {
        self.by_value.get(&(value.to_raw().ptr as usize)).map(String::as_str)
    }
}

/// The key of one value of `func` (computes all keys of the function; use [`TensorKeys`] when
/// naming many values).
pub fn value_key(func: OperationRef<'_, '_>, value: Value) -> Option<String> {
    TensorKeys::new(func).get(value).map(str::to_string)
}

/// Gives every op that has results but no name location the name of its first result's key,
/// so that keys stay the same when the rewriter inserts ops (positional keys would shift).
/// Locations keep their file:line:col as the name's child.
/// A positional key that an op already carries as its name (a rewrite moved ops after their
/// keys were pinned) gets a `'` until it is unique.
/// Returns how many ops it named.
pub fn pin_keys(module: &melior::ir::Module) -> usize {
    let mut pinned = 0;
    for func in super::graph::functions(module) {
        let keys = TensorKeys::new(func);
        let mut taken: std::collections::HashSet<String> = nested_ops(func)
            .into_iter()
            .filter_map(|op| location_name(op.location()))
            .collect();
        for op in nested_ops(func) {
            if op.result_count() == 0 || location_name(op.location()).is_some() {
                continue;
            }
            let Some(mut key) = op.result(0).ok().and_then(|r| keys.get(r.into()).map(str::to_string)) else {
                continue;
            };
            while taken.contains(&key) {
                key.push('\'');
            }
            taken.insert(key.clone());
            let loc = Location::name(super::graph::context_of(&op), &key, op.location());
            use melior::ir::operation::OperationMutLike;
            super::graph::op_mut(op).set_location(loc);
            pinned += 1;
        }
    }
    pinned
}
