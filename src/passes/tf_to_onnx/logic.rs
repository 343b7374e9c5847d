//! `tf-to-onnx`, comparisons, logic and identities (which the lowering removes).

use super::*;

/// The TF ops of this family, sorted by name.
pub(super) const TABLE: &[(&str, Rule)] = &[
    ("tf.Equal", Elementwise("onnx.Equal")),
    ("tf.Greater", Elementwise("onnx.Greater")),
    ("tf.GreaterEqual", Elementwise("onnx.GreaterOrEqual")),
    ("tf.Identity", Custom(identity, &[])),
    ("tf.IdentityN", Custom(identity, &[])),
    ("tf.Less", Elementwise("onnx.Less")),
    ("tf.LessEqual", Elementwise("onnx.LessOrEqual")),
    ("tf.LogicalAnd", Elementwise("onnx.And")),
    ("tf.LogicalNot", Elementwise("onnx.Not")),
    ("tf.LogicalOr", Elementwise("onnx.Or")),
    ("tf.NotEqual", Custom(not_equal, &["onnx.Equal", "onnx.Not"])),
    ("tf.SelectV2", Elementwise("onnx.Where")),
    ("tf.Snapshot", Custom(identity, &[])),
    ("tf.StopGradient", Custom(identity, &[])),
];

fn not_equal<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), PassError> {
    let x = operands(op);
    two_step(l, op, "onnx.Equal", &x, "onnx.Not", false)
}

fn identity<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), PassError> {
    for i in 0..op.result_count().min(op.operand_count()) {
        let x = op.operand(i).map_err(err)?;
        l.finish(op, i, x)?;
    }
    Ok(())
}
