//! `fold-constants`: evaluates ops whose operands are all constants with the interpreter's
//! kernels and replaces their results by constants, so that what later passes see as a weight
//! or a bias is the value the runtime will use (TF exports bias reshapes, batch-norm
//! `Rsqrt(var + eps) * gamma` chains and the like as runtime computations).
//!
//! ```mlir
//! %s = "tf.Const"() {value = dense<[1, 1, 1, 16]> : tensor<4xi32>} : () -> tensor<4xi32>
//! %r = "tf.Reshape"(%b, %s) : (tensor<16xf32>, tensor<4xi32>) -> tensor<1x1x1x16xf32>
//! // with %b a constant, becomes
//! %r = "tf.Const"() {value = dense<...> : tensor<1x1x1x16xf32>} : () -> tensor<1x1x1x16xf32>
//! ```
//! Quant casts are never folded (they are what the rewriter inserts); constants left without
//! uses are erased.

use super::{erase_with_dead_constants, PassOptions, PassReport};
use crate::inspect::is_constant_op;
use crate::interp::build_kernel;
use crate::ir::graph::{body_ops, defining_op, erase_op, functions, insert_before, op_name, replace_all_uses, uses};
use crate::ir::{attribute_to_tensor, tensor_to_attribute, IrError};
use crate::tensor::Tensor;
use melior::ir::attribute::AttributeLike;
use melior::ir::operation::{OperationBuilder, OperationLike};
use melior::ir::{Identifier, Module, OperationRef, ValueLike};

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
    let ctx_ref = anchor.context();
    let ctx = unsafe { ctx_ref.to_ref() };
    insert_constant_attr(anchor, tensor_to_attribute(ctx, t), tf, loc)
}

/// A new constant op holding `attr`, inserted before `anchor`.
pub fn insert_constant_attr<'c, 'a>(
    anchor: OperationRef<'c, 'a>,
    attr: melior::ir::Attribute<'c>,
    tf: bool,
    loc: melior::ir::Location<'c>,
) -> Result<OperationRef<'c, 'a>, IrError> {
    let ctx_ref = anchor.context();
    let ctx = unsafe { ctx_ref.to_ref() };
    let name = if tf { "tf.Const" } else { "arith.constant" };
    let op = OperationBuilder::new(name, loc)
        .add_attributes(&[(Identifier::new(ctx, "value"), attr)])
        .add_results(&[attr.r#type()])
        .build()
        .map_err(|e| IrError::Invalid(format!("cannot build {name}: {e}")))?;
    insert_before(anchor, op)
}

pub fn run(module: &Module, _: &PassOptions) -> Result<PassReport, IrError> {
    let mut report = PassReport::default();
    for func in functions(module) {
        for op in body_ops(func) {
            let name = op_name(&op);
            if name.starts_with("quant.")
                || name == "func.return"
                || is_constant_op(&op)
                || op.operand_count() == 0
                || op.region_count() > 0
            {
                continue;
            }
            let consts: Option<Vec<Tensor>> = op.operands().map(|v| defining_op(v).and_then(constant_value)).collect();
            let Some(consts) = consts else { continue };
            let Ok(kernel) = build_kernel(op, consts.iter().cloned().map(Some).collect()) else {
                continue;
            };
            let args: Vec<&Tensor> = consts.iter().collect();
            let Ok(results) = kernel.run(&args) else { continue };
            if results.len() != op.result_count() {
                continue;
            }
            let tf = name.starts_with("tf.");
            for (r, t) in op.results().zip(&results) {
                let c = insert_constant(op, t, tf, op.location())?;
                let v = c.result(0).map_err(|e| IrError::Invalid(e.to_string()))?;
                if v.r#type() != r.r#type() {
                    // a declared type the kernel's result does not have (dynamic dims): keep the op
                    erase_op(c)?;
                    continue;
                }
                replace_all_uses(r.into(), v.into());
            }
            if op.results().all(|r| uses(r.into()).is_empty()) {
                erase_with_dead_constants(op)?;
                report.count("ops folded");
            }
        }
    }
    Ok(report)
}
