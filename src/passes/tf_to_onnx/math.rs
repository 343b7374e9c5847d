//! `tf-to-onnx`, activations and math: elementwise ops (on the NCHW twin when their input has
//! one), the TF ops ONNX spells in two steps (Rsqrt, FloorDiv, SquaredDifference), reductions.

use super::*;

/// What [`reduce`] writes: the ONNX reduction of the TF op's kind.
const REDUCTIONS: &[&str] = &[
    "onnx.ReduceMax",
    "onnx.ReduceMean",
    "onnx.ReduceMin",
    "onnx.ReduceProd",
    "onnx.ReduceSum",
];

/// The TF ops of this family, sorted by name.
pub(super) const TABLE: &[(&str, Rule)] = &[
    ("tf.Abs", Elementwise("onnx.Abs")),
    ("tf.Add", Elementwise("onnx.Add")),
    ("tf.AddN", Elementwise("onnx.Sum")),
    ("tf.AddV2", Elementwise("onnx.Add")),
    ("tf.Ceil", Elementwise("onnx.Ceil")),
    ("tf.Cos", Elementwise("onnx.Cos")),
    ("tf.Div", Elementwise("onnx.Div")),
    (
        "tf.DivNoNan",
        Custom(div_no_nan, &["onnx.Div", "onnx.Equal", "onnx.Where"]),
    ),
    ("tf.Elu", Elementwise("onnx.Elu")),
    ("tf.Erf", Elementwise("onnx.Erf")),
    ("tf.Exp", Elementwise("onnx.Exp")),
    ("tf.Floor", Elementwise("onnx.Floor")),
    ("tf.FloorDiv", Custom(floor_div, &["onnx.Div", "onnx.Floor"])),
    (
        "tf.FloorMod",
        Custom(
            floor_mod,
            &["onnx.Div", "onnx.Floor", "onnx.Mod", "onnx.Mul", "onnx.Sub"],
        ),
    ),
    ("tf.Inv", Elementwise("onnx.Reciprocal")),
    ("tf.LeakyRelu", Custom(leaky_relu, &["onnx.LeakyRelu"])),
    ("tf.Log", Elementwise("onnx.Log")),
    ("tf.Max", Custom(reduce, REDUCTIONS)),
    ("tf.Maximum", Elementwise("onnx.Max")),
    ("tf.Mean", Custom(reduce, REDUCTIONS)),
    ("tf.Min", Custom(reduce, REDUCTIONS)),
    ("tf.Minimum", Elementwise("onnx.Min")),
    ("tf.Mul", Elementwise("onnx.Mul")),
    ("tf.Neg", Elementwise("onnx.Neg")),
    ("tf.Pow", Elementwise("onnx.Pow")),
    ("tf.Prod", Custom(reduce, REDUCTIONS)),
    ("tf.RealDiv", Elementwise("onnx.Div")),
    ("tf.Reciprocal", Elementwise("onnx.Reciprocal")),
    ("tf.Relu", Elementwise("onnx.Relu")),
    ("tf.Relu6", Custom(relu6, &["onnx.Clip"])),
    ("tf.Round", Elementwise("onnx.Round")),
    ("tf.Rsqrt", Custom(rsqrt, &["onnx.Reciprocal", "onnx.Sqrt"])),
    ("tf.Selu", Elementwise("onnx.Selu")),
    ("tf.Sigmoid", Elementwise("onnx.Sigmoid")),
    ("tf.Sign", Elementwise("onnx.Sign")),
    ("tf.Sin", Elementwise("onnx.Sin")),
    ("tf.Softplus", Elementwise("onnx.Softplus")),
    ("tf.Sqrt", Elementwise("onnx.Sqrt")),
    ("tf.Square", Custom(square, &["onnx.Mul"])),
    (
        "tf.SquaredDifference",
        Custom(squared_difference, &["onnx.Mul", "onnx.Sub"]),
    ),
    ("tf.Sub", Elementwise("onnx.Sub")),
    ("tf.Sum", Custom(reduce, REDUCTIONS)),
    ("tf.Tanh", Elementwise("onnx.Tanh")),
];

fn leaky_relu<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), PassError> {
    elementwise(l, op, "onnx.LeakyRelu")
}

/// `Relu6(x)` is `Clip(x, 0, 6)`, which int8 kernels fuse as ReLU6.
fn relu6<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), PassError> {
    let x = op.operand(0).map_err(err)?;
    let lo = l.scalar_like(op, x, 0.0)?;
    let hi = l.scalar_like(op, x, 6.0)?;
    l.elementwise_on(op, "onnx.Clip", &[x, lo, hi], &[])
}

fn rsqrt<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), PassError> {
    let x = operands(op);
    two_step(l, op, "onnx.Sqrt", &x, "onnx.Reciprocal", false)
}

/// Float `FloorDiv` is `Floor(Div)`; ONNX's integer `Div` truncates, which TF's does not.
fn floor_div<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), PassError> {
    let ty = l.result_type(op, 0)?;
    if !tensor_type(ty).and_then(|t| t.dtype).is_some_and(|d| d.is_float()) {
        return Err(err(format!(
            "{}: integer FloorDiv has no ONNX form (ONNX's Div truncates)",
            label(op)
        )));
    }
    let x = operands(op);
    two_step(l, op, "onnx.Div", &x, "onnx.Floor", false)
}

fn square<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), PassError> {
    let x = op.operand(0).map_err(err)?;
    l.elementwise_on(op, "onnx.Mul", &[x, x], &[])
}

fn squared_difference<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), PassError> {
    let x = operands(op);
    two_step(l, op, "onnx.Sub", &x, "onnx.Mul", true)
}

/// `Mean`/`Sum`/`Max`/`Min`/`Prod` over constant axes.
fn reduce<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), PassError> {
    let a = op_attrs(&op);
    let keep = a.get("keep_dims").and_then(AttrValue::as_bool).unwrap_or(false);
    let x = op.operand(0).map_err(err)?;
    let r = rank(x).ok_or_else(|| err(format!("{}: unranked input", label(op))))?;
    let axes = const_axes(op, 1, r)?;
    let name = match op_name(&op).as_str() {
        "tf.Mean" => "onnx.ReduceMean",
        "tf.Sum" => "onnx.ReduceSum",
        "tf.Max" => "onnx.ReduceMax",
        "tf.Min" => "onnx.ReduceMin",
        _ => "onnx.ReduceProd",
    };
    let on_twin = r == 4 && l.has_twin(x) && (keep || order_kept(&axes));
    let (xin, axes): (Value, Vec<i64>) = if on_twin {
        let mut s: Vec<i64> = axes.iter().map(|&a| nchw_axis(a) as i64).collect();
        s.sort_unstable();
        (l.nchw_of(op, x)?, s)
    } else {
        (x, axes.iter().map(|&a| a as i64).collect())
    };
    let ty = l.result_type(op, 0)?;
    let ty = if on_twin && keep {
        permuted_type(ty, &TO_NCHW)?
    } else {
        ty
    };
    let keepdims = l.int(keep as i64);
    let loc = l.loc(op, "");
    // opset 13: ReduceSum reads its axes from an input, the others from an attribute
    let y = if name == "onnx.ReduceSum" {
        let ax = l.i64s(op, &axes)?;
        l.build1(op, name, &[xin, ax], &[("keepdims", keepdims)], ty, loc)?
    } else {
        let ax = l.ints(&axes);
        l.build1(op, name, &[xin], &[("axes", ax), ("keepdims", keepdims)], ty, loc)?
    };
    if on_twin && keep {
        l.finish_nchw(op, 0, y)
    } else {
        l.finish(op, 0, y)
    }
}

/// `DivNoNan(x, y)` = `Where(Equal(y, 0), 0, Div(x, y))`, as tf2onnx writes it.
fn div_no_nan<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), PassError> {
    let [x, y] = operands(op)[..] else {
        return Err(err(format!("{}: DivNoNan takes 2 operands", label(op))));
    };
    let ty = l.result_type(op, 0)?;
    let loc = l.loc(op, "div");
    let q = l.build1(op, "onnx.Div", &[x, y], &[], ty, loc)?;
    let zero = l.scalar_like(op, y, 0.0)?;
    let bool_ty = ranked(IntegerType::new(l.ctx, 1).into(), &dims(y).unwrap_or_default());
    let loc = l.loc(op, "is_zero");
    let is_zero = l.build1(op, "onnx.Equal", &[y, zero], &[], bool_ty, loc)?;
    let loc = l.loc(op, "");
    let r = l.build1(op, "onnx.Where", &[is_zero, zero, q], &[], ty, loc)?;
    l.finish(op, 0, r)
}

/// `FloorMod(x, y)`, the remainder with the divisor's sign: ONNX `Mod` (fmod = 0) on integers;
/// ONNX allows only C's fmod on floats, so there it is `x − ⌊x / y⌋ · y`.
fn floor_mod<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), PassError> {
    let [x, y] = operands(op)[..] else {
        return Err(err(format!("{}: FloorMod takes 2 operands", label(op))));
    };
    let ty = l.result_type(op, 0)?;
    if !tensor_type(ty).and_then(|t| t.dtype).is_some_and(|d| d.is_float()) {
        let f = l.int(0);
        return l.replace(op, false, "onnx.Mod", &[x, y], &[("fmod", f)]);
    }
    let loc = l.loc(op, "div");
    let q = l.build1(op, "onnx.Div", &[x, y], &[], ty, loc)?;
    let loc = l.loc(op, "floor");
    let f = l.build1(op, "onnx.Floor", &[q], &[], ty, loc)?;
    let loc = l.loc(op, "mul");
    let m = l.build1(op, "onnx.Mul", &[f, y], &[], ty, loc)?;
    l.replace(op, false, "onnx.Sub", &[x, m], &[])
}
