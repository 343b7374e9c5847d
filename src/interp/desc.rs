//! `OpDesc`: what a dialect table sees of an op — its name, attributes as Rust values, operand
//! and result types, quantization parameters of quantized types, and the values of operands
//! that are constants. No MLIR handle survives compilation.

use crate::ir::attrs::AttrValue;
use crate::ir::types::TensorType;
use crate::params::QuantParams;
use crate::tensor::{DType, Tensor};
use std::collections::BTreeMap;

#[derive(Debug, Clone)]
pub struct OpDesc {
    pub name: String,
    pub attrs: BTreeMap<String, AttrValue>,
    pub operand_types: Vec<Option<TensorType>>,
    pub result_types: Vec<Option<TensorType>>,
    /// Parameters of `!quant.uniform` element types, per operand / result.
    pub operand_quant: Vec<Option<QuantParams>>,
    pub result_quant: Vec<Option<QuantParams>>,
    /// Values of operands defined by constants (or folded at compile time), shared with the
    /// program that holds them.
    pub consts: Vec<Option<std::sync::Arc<Tensor>>>,
}

impl OpDesc {
    pub fn attr(&self, name: &str) -> Option<&AttrValue> {
        self.attrs.get(name)
    }
    pub fn str_attr(&self, name: &str) -> Option<&str> {
        self.attr(name).and_then(AttrValue::as_str)
    }
    pub fn ints_attr(&self, name: &str) -> Option<Vec<i64>> {
        self.attr(name).and_then(AttrValue::as_ints)
    }
    pub fn bool_attr(&self, name: &str, default: bool) -> bool {
        self.attr(name).and_then(AttrValue::as_bool).unwrap_or(default)
    }
    pub fn int_attr(&self, name: &str, default: i64) -> i64 {
        self.attr(name).and_then(AttrValue::as_int).unwrap_or(default)
    }
    pub fn f64_attr(&self, name: &str, default: f64) -> f64 {
        self.attr(name).and_then(AttrValue::as_f64).unwrap_or(default)
    }
    /// The element type of result `i`, when quantir computes with it.
    pub fn result_dtype(&self, i: usize) -> Option<DType> {
        self.result_types.get(i)?.as_ref()?.dtype
    }
    /// A string attribute that must have one of `allowed` values (default when absent).
    pub fn choice(&self, name: &str, allowed: &[&str], default: &str) -> Result<String, String> {
        let v = self.str_attr(name).unwrap_or(default);
        if allowed.contains(&v) {
            Ok(v.to_string())
        } else {
            Err(format!(
                "{name} = \"{v}\" is not supported (supported: {})",
                allowed.join(", ")
            ))
        }
    }
}
