//! `strip-identity`: forwards the operand of identity-like ops (`tf.Identity`, `tf.IdentityN`,
//! `tf.StopGradient`, `tf.Snapshot`) to their consumers, so that Q/DQ placement and the
//! dialect tables see the real producer of a weight or activation.
//!
//! ```mlir
//! %w = "tf.Const"() {value = dense<...>} : () -> tensor<3x3x1x8xf32>
//! %i = "tf.Identity"(%w) : (tensor<3x3x1x8xf32>) -> tensor<3x3x1x8xf32>
//! %y = "tf.Conv2D"(%x, %i) ...
//! // becomes
//! %w = "tf.Const"() {value = dense<...>} : () -> tensor<3x3x1x8xf32>
//! %y = "tf.Conv2D"(%x, %w) ...
//! ```
//! Uses by `func.return` keep the identity (the function's results stay where TF put them, and
//! an identity feeding a return is how TF names an output), so the pass is idempotent.

use super::{PassOptions, PassReport};
use crate::ir::graph::{erase_op, functions, nested_ops, op_name, set_operand, uses};
use crate::passes::report::{Change, PassError};
use melior::ir::operation::OperationLike;
use melior::ir::{Module, ValueLike};

const IDENTITY_OPS: &[&str] = &["tf.Identity", "tf.IdentityN", "tf.StopGradient", "tf.Snapshot"];

pub fn run(module: &Module, _: &PassOptions) -> Result<PassReport, PassError> {
    let mut report = PassReport::default();
    for func in functions(module) {
        for op in nested_ops(func) {
            if !IDENTITY_OPS.contains(&op_name(&op).as_str()) {
                continue;
            }
            let mut all_gone = true;
            for (i, result) in op.results().enumerate() {
                let Ok(src) = op.operand(i) else {
                    all_gone = false;
                    continue;
                };
                if src.r#type() != result.r#type() {
                    all_gone = false;
                    continue;
                }
                for u in uses(result.into()) {
                    if op_name(&u.owner) == "func.return" {
                        all_gone = false;
                    } else {
                        set_operand(u.owner, u.operand, src);
                        report.count(Change::UsesForwarded);
                    }
                }
            }
            if all_gone {
                erase_op(op)?;
                report.count(Change::IdentitiesErased);
            }
        }
    }
    Ok(report)
}
