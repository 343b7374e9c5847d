//! `quantir inspect`: what a module holds — functions and signatures, op counts, constants,
//! float tensors and their keys.

use crate::ir::graph::{body_ops, function_name, functions, nested_ops, op_name};
use crate::ir::keys::TensorKeys;
use crate::ir::ops::{entry_function_names, is_constant_op};
use crate::ir::types::tensor_type;
use crate::ir::IrError;
use melior::ir::attribute::AttributeLike;
use melior::ir::block::BlockLike;
use melior::ir::operation::OperationLike;
use melior::ir::RegionLike;
use melior::ir::{Module, ValueLike};
use serde::Serialize;
use std::collections::BTreeMap;

/// A function's signature, with the argument/result names TF export records.
#[derive(Debug, Serialize)]
pub struct FunctionInfo {
    pub name: String,
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
    /// Names from `tf.entry_function` (`inputs = "a,b"`), when present.
    pub input_names: Vec<String>,
    pub output_names: Vec<String>,
}

/// Constants grouped by element type.
#[derive(Debug, Default, Serialize)]
pub struct ConstantGroup {
    pub count: usize,
    pub bytes: usize,
}

#[derive(Debug, Serialize)]
pub struct FloatTensor {
    pub key: String,
    pub r#type: String,
    pub producer: String,
}

/// Everything `quantir inspect` reports.
#[derive(Debug, Serialize)]
pub struct Inspection {
    /// A SavedModel's signatures (the function below is the one imported).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub signatures: Vec<crate::formats::savedmodel::SignatureInfo>,
    pub functions: Vec<FunctionInfo>,
    pub op_counts: BTreeMap<String, usize>,
    pub constants: BTreeMap<String, ConstantGroup>,
    pub constant_count: usize,
    pub constant_bytes: usize,
    /// Float tensors that are not constants (activations), by key.
    pub float_tensors: Vec<FloatTensor>,
    /// Compute ops the dialect tables mark for int8 (weights and activation inputs quantized).
    pub quantizable_ops: BTreeMap<String, usize>,
    /// Op results without a ranked type: dynamic dims the importer could not resolve by running
    /// the model on zeros (calibration types them from its data's first sample).
    #[serde(skip_serializing_if = "is_zero")]
    pub untyped_values: usize,
    /// How the dims were resolved from sample data (`inspect --data`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resolved_from: Option<ResolvedDims>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// Dims resolved from a sample: where from, the shapes used, and what they typed.
#[derive(Debug, Serialize)]
pub struct ResolvedDims {
    pub data: String,
    pub input_shapes: Vec<Vec<usize>>,
    pub values_typed: usize,
    /// Why some values are still untyped, when they are.
    pub failure: Option<String>,
}

pub fn inspect(module: &Module) -> Result<Inspection, IrError> {
    let mut functions_info = Vec::new();
    let mut op_counts = BTreeMap::new();
    let mut constants: BTreeMap<String, ConstantGroup> = BTreeMap::new();
    let mut float_tensors = Vec::new();
    let mut quantizable_ops = BTreeMap::new();
    for func in functions(module) {
        let name = function_name(&func);
        let (input_names, output_names) = entry_function_names(func);
        let mut inputs = Vec::new();
        if let Some(b) = func.region(0).ok().and_then(|r| r.first_block()) {
            for k in 0..b.argument_count() {
                inputs.push(
                    b.argument(k)
                        .map(|a| crate::ir::type_text(a.r#type()))
                        .unwrap_or_default(),
                );
            }
        }
        let outputs = body_ops(func)
            .last()
            .filter(|t| op_name(*t) == "func.return")
            .map(|t| t.operands().map(|v| crate::ir::type_text(v.r#type())).collect())
            .unwrap_or_default();
        functions_info.push(FunctionInfo {
            name: name.clone(),
            inputs,
            outputs,
            input_names,
            output_names,
        });
        let keys = TensorKeys::new(func);
        for op in nested_ops(func) {
            let opname = op_name(&op);
            *op_counts.entry(opname.clone()).or_insert(0) += 1;
            if crate::dialects::rule(&opname).is_some_and(|r| r.is_compute()) {
                *quantizable_ops.entry(opname.clone()).or_insert(0) += 1;
            }
            if is_constant_op(&op) {
                let value = op.attribute("value").map_err(|e| IrError::Invalid(e.to_string()))?;
                // bytes from the type (elements × element size), without decoding the data
                let (elem, bytes) = match tensor_type(value.r#type()) {
                    Some(t) => {
                        let bytes = match (t.static_shape(), t.dtype) {
                            (Some(shape), Some(d)) => shape.iter().product::<usize>() * d.size_bytes(),
                            _ => 0,
                        };
                        (t.element, bytes)
                    }
                    None => (crate::ir::type_text(value.r#type()), 0),
                };
                let g = constants.entry(elem).or_default();
                g.count += 1;
                g.bytes += bytes;
                continue;
            }
            for r in op.results() {
                if let Some(t) = tensor_type(r.r#type()) {
                    if t.dtype.is_some_and(|d| d.is_float()) {
                        float_tensors.push(FloatTensor {
                            key: keys.get(r.into()).unwrap_or("?").to_string(),
                            r#type: crate::ir::type_text(r.r#type()),
                            producer: opname.clone(),
                        });
                    }
                }
            }
        }
    }
    let constant_count = constants.values().map(|g| g.count).sum();
    let constant_bytes = constants.values().map(|g| g.bytes).sum();
    Ok(Inspection {
        signatures: Vec::new(),
        functions: functions_info,
        op_counts,
        constants,
        constant_count,
        constant_bytes,
        float_tensors,
        quantizable_ops,
        untyped_values: crate::interp::infer_types::unranked_results(module, &[crate::dialects::onnx::NO_VALUE]),
        resolved_from: None,
    })
}

impl std::fmt::Display for Inspection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for sig in &self.signatures {
            write!(f, "{sig}")?;
        }
        if !self.signatures.is_empty() {
            writeln!(f)?;
        }
        for func in &self.functions {
            writeln!(
                f,
                "func @{}({}) -> ({})",
                func.name,
                func.inputs.join(", "),
                func.outputs.join(", ")
            )?;
            if !func.input_names.is_empty() || !func.output_names.is_empty() {
                writeln!(
                    f,
                    "  inputs: {}  outputs: {}",
                    func.input_names.join(","),
                    func.output_names.join(",")
                )?;
            }
        }
        if let Some(r) = &self.resolved_from {
            writeln!(
                f,
                "types: dynamic dims resolved from {} (input shapes {:?}): {} values typed{}",
                r.data,
                r.input_shapes,
                r.values_typed,
                r.failure
                    .as_ref()
                    .map(|e| format!("; not all: {e}"))
                    .unwrap_or_default()
            )?;
        }
        if self.untyped_values > 0 {
            writeln!(
                f,
                "types: {} values untyped (dynamic dims the importer could not resolve by running the model on \
                 zeros; calibration types them from its data, `inspect --data` shows how)",
                self.untyped_values
            )?;
        }
        writeln!(f, "\nops:")?;
        for (name, n) in &self.op_counts {
            writeln!(f, "  {n:>6}  {name}")?;
        }
        writeln!(
            f,
            "\nconstants: {} ({} bytes)",
            self.constant_count, self.constant_bytes
        )?;
        for (elem, g) in &self.constants {
            writeln!(f, "  {:>6}  {elem:<8} {} bytes", g.count, g.bytes)?;
        }
        let q: Vec<String> = self.quantizable_ops.iter().map(|(k, v)| format!("{v} {k}")).collect();
        writeln!(
            f,
            "\nquantizable ops: {}",
            if q.is_empty() { "none".into() } else { q.join(", ") }
        )?;
        writeln!(f, "\nfloat tensors: {}", self.float_tensors.len())?;
        for t in &self.float_tensors {
            writeln!(f, "  {:<40} {:<28} {}", t.key, t.r#type, t.producer)?;
        }
        Ok(())
    }
}
