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

use super::{PassOptions, PassReport};
use crate::interp::build_kernel;
use crate::ir::graph::{body_ops, defining_op, erase_op, functions, op_name, replace_all_uses, uses};
use crate::ir::ops::{constant_value, erase_with_dead_constants, insert_constant, is_constant_op};
use crate::passes::report::{Change, PassError};
use crate::tensor::Tensor;
use melior::ir::operation::OperationLike;
use melior::ir::{Module, ValueLike};

pub fn run(module: &Module, _: &PassOptions) -> Result<PassReport, PassError> {
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
                let v = c.result(0).map_err(|e| PassError::new(e.to_string()))?;
                if v.r#type() != r.r#type() {
                    // a declared type the kernel's result does not have (dynamic dims): keep the op
                    erase_op(c)?;
                    continue;
                }
                replace_all_uses(r.into(), v.into());
            }
            if op.results().all(|r| uses(r.into()).is_empty()) {
                erase_with_dead_constants(op)?;
                report.count(Change::OpsFolded);
            }
        }
    }
    Ok(report)
}
