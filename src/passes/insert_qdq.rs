//! `insert-qdq`: puts a `quant.qcast` → `quant.dcast` pair on every quantized activation of the
//! plan (one pair per value, shared by all its consumers), with parameters from the stats file.
//!
//! ```mlir
//! %0 = "tf.Conv2D"(%x, %w) ... loc("conv1")
//! %1 = "tf.Relu"(%0) ...
//! // becomes, when conv1's output point is the Relu
//! %1 = "tf.Relu"(%0) ...
//! %q = quant.qcast %1 : tensor<1x8x8x16xf32> to tensor<1x8x8x16x!quant.uniform<i8:f32, 0.0235:-128>>
//! %d = quant.dcast %q : tensor<1x8x8x16x!quant.uniform<i8:f32, 0.0235:-128>> to tensor<1x8x8x16xf32>
//! ... every former use of %1 now uses %d
//! ```
//! Never run upstream `canonicalize` on the result: it folds `dcast(qcast(x))` back to `x`.

use super::{PassOptions, PassReport};
use crate::ir::graph::{defining_op, insert_after, insert_before, set_operand, uses};
use crate::ir::quant::quantized_tensor_type;
use crate::passes::report::{Change, PassError};
use crate::recipe::plan;
use melior::ir::operation::{OperationBuilder, OperationLike};
use melior::ir::{Location, Module, Value, ValueLike};

pub fn run(module: &Module, options: &PassOptions) -> Result<PassReport, PassError> {
    let stats = options
        .stats
        .as_ref()
        .ok_or_else(|| PassError::new("needs statistics (--stats)"))?;
    let plan = plan(module, Some(stats), &options.config)?;
    run_with_plan(&plan)
}

/// The pass with a plan made already (`quantize` makes one for both quantize passes).
pub fn run_with_plan(plan: &crate::recipe::Plan) -> Result<PassReport, PassError> {
    let mut report = PassReport::default();
    for point in &plan.activations {
        let Some(p) = &point.params else { continue };
        insert_pair(point.value, &point.key, p)?;
        report.count(Change::QdqPairsInserted);
    }
    Ok(report)
}

/// Inserts qcast → dcast after the definition of `v` and moves every use of `v` to the dcast.
pub fn insert_pair<'c: 'a, 'a>(
    v: Value<'c, 'a>,
    key: &str,
    p: &crate::params::QuantParams,
) -> Result<Value<'c, 'a>, PassError> {
    let ctx = crate::ir::graph::value_context(v);
    let qty = quantized_tensor_type(ctx, v.r#type(), p)?;
    let old_uses = uses(v);
    let base = v.location();
    let q = OperationBuilder::new("quant.qcast", Location::name(ctx, &format!("{key}/quantize"), base))
        .add_operands(&[v])
        .add_results(&[qty])
        .build()
        .map_err(|e| PassError::new(format!("cannot build quant.qcast for '{key}': {e}")))?;
    let q: melior::ir::OperationRef<'c, 'a> = match defining_op(v) {
        Some(def) => insert_after(def, q)?,
        // a block argument: before its first user (all users are in its block)
        None => {
            let first = old_uses.iter().map(|u| u.owner).min_by(|a, b| {
                if a.is_before_in_block(*b) {
                    std::cmp::Ordering::Less
                } else {
                    std::cmp::Ordering::Greater
                }
            });
            insert_before(first.ok_or_else(|| PassError::new(format!("'{key}' has no use")))?, q)?
        }
    };
    let qv: melior::ir::operation::OperationResult<'c, 'a> = q.result(0).map_err(|e| PassError::new(e.to_string()))?;
    let d = OperationBuilder::new("quant.dcast", Location::name(ctx, &format!("{key}/dequantize"), base))
        .add_operands(&[qv.into()])
        .add_results(&[v.r#type()])
        .build()
        .map_err(|e| PassError::new(format!("cannot build quant.dcast for '{key}': {e}")))?;
    let d: melior::ir::OperationRef<'c, 'a> = insert_after(q, d)?;
    let dv: Value<'c, 'a> = d.result(0).map_err(|e| PassError::new(e.to_string()))?.into();
    for u in old_uses {
        set_operand(u.owner, u.operand, dv);
    }
    Ok(dv)
}
