//! `tf-to-onnx`, comparisons, logic and identities (which the lowering removes).

use super::*;

/// The TF ops of this family, sorted by name.
pub(super) const TABLE: &[(&str, Rule)] = &[
    (
        "tf.All",
        Custom(all_any, &["onnx.Cast", "onnx.ReduceMax", "onnx.ReduceMin"]),
    ),
    (
        "tf.Any",
        Custom(all_any, &["onnx.Cast", "onnx.ReduceMax", "onnx.ReduceMin"]),
    ),
    // a debugging check (fails on NaN/Inf in TensorFlow); inference passes the value on
    ("tf.CheckNumerics", Custom(identity, &[])),
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
    ("tf.PreventGradient", Custom(identity, &[])),
    ("tf.Select", Custom(select, &["onnx.Unsqueeze", "onnx.Where"])),
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

/// `Select(c, t, e)` (TF1): a condition of the values' rank is `Where`; a rank-1 condition
/// picks whole rows, so it is unsqueezed over the other axes first.
fn select<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), PassError> {
    let [c, t, e] = operands(op)[..] else {
        return Err(err(format!("{}: Select takes 3 operands", label(op))));
    };
    let (rc, rt) = (
        rank(c),
        rank(t).ok_or_else(|| err(format!("{}: unranked values", label(op))))?,
    );
    let cond = match rc {
        Some(1) if rt > 1 => {
            let axes: Vec<i64> = (1..rt as i64).collect();
            let mut d = dims(c).unwrap_or_default();
            d.extend(std::iter::repeat_n(Some(1), rt - 1));
            let ty = ranked(element_of(c.r#type()), &d);
            let ax = l.i64s(op, &axes)?;
            let loc = l.loc(op, "rows");
            l.build1(op, "onnx.Unsqueeze", &[c, ax], &[], ty, loc)?
        }
        Some(r) if r == rt => c,
        _ => {
            return Err(err(format!(
                "{}: a condition of rank {rc:?} for values of rank {rt}",
                label(op)
            )))
        }
    };
    l.replace(op, false, "onnx.Where", &[cond, t, e], &[])
}

/// `All` / `Any` over constant axes: the booleans as int32, ReduceMin / ReduceMax, back to bool.
fn all_any<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), PassError> {
    use crate::dialects::onnx_types::data_type as dt;
    let a = op_attrs(&op);
    let keep = a.get("keep_dims").and_then(AttrValue::as_bool).unwrap_or(false);
    let x = op.operand(0).map_err(err)?;
    let d = dims(x).ok_or_else(|| err(format!("{}: unranked input", label(op))))?;
    let r = d.len();
    let axes: Vec<i64> = const_axes(op, 1, r)?.into_iter().map(|a| a as i64).collect();
    let i32t: Type = IntegerType::new(l.ctx, 32).into();
    let to32 = l.int(dt::INT32 as i64);
    let loc = l.loc(op, "i32");
    let xi = l.build1(op, "onnx.Cast", &[x], &[("to", to32)], ranked(i32t, &d), loc)?;
    let out = dims(op.result(0).map_err(err)?.into()).unwrap_or_default();
    let name = one_of(op, "tf.All", "onnx.ReduceMin", "onnx.ReduceMax");
    let (ax, kd) = (l.ints(&axes), l.int(keep as i64));
    let loc = l.loc(op, "reduce");
    let red = l.build1(
        op,
        name,
        &[xi],
        &[("axes", ax), ("keepdims", kd)],
        ranked(i32t, &out),
        loc,
    )?;
    let to_bool = l.int(dt::BOOL as i64);
    let ty = l.result_type(op, 0)?;
    let loc = l.loc(op, "");
    let y = l.build1(op, "onnx.Cast", &[red], &[("to", to_bool)], ty, loc)?;
    l.finish(op, 0, y)
}
