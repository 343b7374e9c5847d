//! `duplicate-shape-constants`: gives every shape-determining operand private copies of the
//! constants it is computed from, so that no shape value is ever shared with data (and so
//! observed, quantized or moved away from its consumer). TensorFlow's
//! `quant-duplicate-shape-determining-constants` semantics, plus `arith.constant` and
//! `onnx.Constant` leaves and the operands its table misses (Split/SplitV, Min/Prod/All/Any).
//!
//! For each (op, shape operand) of the dialect tables, walk up breadth first:
//! - a constant with more than one use is cloned right after itself and only this operand is
//!   rewired to the clone (a constant with one use is already private);
//! - `Shape`/`ShapeN`/`Rank`/`Size` end the walk (their results are constants to XLA);
//! - a block argument gives a warning, not an error;
//! - any other op is not cloned; its operands are walked in turn.
//!
//! ```mlir
//! %c = "tf.Const"() {value = dense<2> : tensor<i32>} : () -> tensor<i32>
//! %0 = "tf.ExpandDims"(%x, %c) : (tensor<4xf32>, tensor<i32>) -> tensor<4x1xf32>
//! %1 = "tf.AddV2"(%c, %c) : (tensor<i32>, tensor<i32>) -> tensor<i32>
//! // becomes
//! %c = "tf.Const"() {value = dense<2> : tensor<i32>} : () -> tensor<i32>
//! %c_0 = "tf.Const"() {value = dense<2> : tensor<i32>} : () -> tensor<i32>
//! %0 = "tf.ExpandDims"(%x, %c_0) : (tensor<4xf32>, tensor<i32>) -> tensor<4x1xf32>
//! %1 = "tf.AddV2"(%c, %c) : (tensor<i32>, tensor<i32>) -> tensor<i32>
//! ```
//! Idempotent: after one run every shape path's constants have a single use.

use super::{PassOptions, PassReport};
use crate::dialects::{self, rule};
use crate::ir::graph::{body_ops, clone_op, defining_op, functions, insert_after, op_name, set_operand, uses};
use crate::ir::ops::is_constant_op;
use crate::ir::ops::location_string;
use crate::passes::report::{Change, PassError};
use melior::ir::operation::OperationLike;
use melior::ir::{Module, OperationRef};
use std::collections::{HashSet, VecDeque};

pub fn run(module: &Module, _: &PassOptions) -> Result<PassReport, PassError> {
    let mut report = PassReport::default();
    for func in functions(module) {
        let ops = body_ops(func);
        // table order, then op order, as TensorFlow iterates; every dialect's table
        for r in dialects::tf::RULES
            .iter()
            .chain(dialects::onnx::RULES)
            .filter(|r| !r.shape_operands.is_empty())
        {
            for op in ops.iter().filter(|o| op_name(*o) == r.name) {
                let idx = dialects::shape_operands(r.name, op.operand_count());
                duplicate_from(*op, &idx, &mut report)?;
            }
        }
    }
    Ok(report)
}

fn duplicate_from(user: OperationRef, operands: &[usize], report: &mut PassReport) -> Result<(), PassError> {
    let mut work: VecDeque<(OperationRef, usize)> = operands.iter().map(|&i| (user, i)).collect();
    let mut seen: HashSet<(usize, usize)> = HashSet::new();
    while let Some((op, i)) = work.pop_front() {
        if !seen.insert((op.to_raw().ptr as usize, i)) {
            continue;
        }
        let value = op.operand(i).map_err(|e| PassError::new(e.to_string()))?;
        let Some(def) = defining_op(value) else {
            report.warnings.push(format!(
                "{}: {}: Operand idx (zero-based): {i} does not have a defining op and cannot be duplicated.",
                location_string(op.location()),
                op_name(&op)
            ));
            continue;
        };
        if is_constant_op(&def) {
            let result = def.result(0).map_err(|e| PassError::new(e.to_string()))?;
            if uses(result.into()).len() > 1 {
                let copy = insert_after(def, clone_op(def))?;
                let v = copy.result(0).map_err(|e| PassError::new(e.to_string()))?;
                set_operand(op, i, v.into());
                report.count(Change::ConstantsDuplicated);
            }
            continue;
        }
        if rule(&op_name(&def)).is_some_and(|r| r.shape_source) {
            continue;
        }
        for j in 0..def.operand_count() {
            work.push_back((def, j));
        }
    }
    Ok(())
}
