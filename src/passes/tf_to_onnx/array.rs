//! `tf-to-onnx`, array ops: reshapes, squeezes, concatenation, padding, slicing, gathers,
//! splits, tiling, casts and shapes, with TF's axis and mask conventions made explicit.

use super::*;

/// The TF ops of this family, sorted by name.
pub(super) const TABLE: &[(&str, Rule)] = &[
    (
        "tf.ArgMax",
        Custom(arg_extreme, &["onnx.ArgMax", "onnx.ArgMin", "onnx.Cast"]),
    ),
    (
        "tf.ArgMin",
        Custom(arg_extreme, &["onnx.ArgMax", "onnx.ArgMin", "onnx.Cast"]),
    ),
    (
        "tf.BroadcastTo",
        Custom(tile_or_expand, &["onnx.Cast", "onnx.Expand", "onnx.Tile"]),
    ),
    ("tf.Cast", Custom(cast, &["onnx.Cast"])),
    ("tf.ClipByValue", Custom(clip_by_value, &["onnx.Clip", "onnx.Squeeze"])),
    ("tf.Concat", Custom(concat, &["onnx.Concat"])),
    ("tf.ConcatV2", Custom(concat, &["onnx.Concat"])),
    ("tf.ExpandDims", Custom(expand_dims, &["onnx.Unsqueeze"])),
    ("tf.Fill", Custom(fill, &["onnx.Cast", "onnx.Expand"])),
    ("tf.Gather", Custom(gather, &["onnx.Gather"])),
    ("tf.GatherV2", Custom(gather, &["onnx.Gather"])),
    ("tf.MirrorPad", Custom(pad, &["onnx.Pad"])),
    ("tf.OnesLike", Custom(fill_like, &["onnx.Expand", "onnx.Shape"])),
    ("tf.Pack", Custom(pack, &["onnx.Concat", "onnx.Unsqueeze"])),
    ("tf.Pad", Custom(pad, &["onnx.Pad"])),
    ("tf.PadV2", Custom(pad, &["onnx.Pad"])),
    ("tf.Range", Custom(range, &["onnx.Range"])),
    ("tf.Rank", Custom(rank_op, &[])),
    ("tf.Reshape", Custom(reshape, &["onnx.Cast", "onnx.Reshape"])),
    ("tf.Shape", Custom(shape, &["onnx.Cast", "onnx.Shape"])),
    ("tf.Size", Custom(shape, &["onnx.Cast", "onnx.Size"])),
    ("tf.Slice", Custom(slice, &["onnx.Slice"])),
    ("tf.Split", Custom(split, &["onnx.Split"])),
    ("tf.SplitV", Custom(split, &["onnx.Split"])),
    ("tf.Squeeze", Custom(squeeze, &["onnx.Squeeze"])),
    (
        "tf.StridedSlice",
        Custom(strided_slice, &["onnx.Slice", "onnx.Squeeze", "onnx.Unsqueeze"]),
    ),
    (
        "tf.Tile",
        Custom(tile_or_expand, &["onnx.Cast", "onnx.Expand", "onnx.Tile"]),
    ),
    ("tf.Transpose", Custom(transpose, &["onnx.Transpose"])),
    ("tf.Unpack", Custom(unpack, &["onnx.Split", "onnx.Squeeze"])),
    ("tf.ZerosLike", Custom(fill_like, &["onnx.Expand", "onnx.Shape"])),
];

/// A TF int32 shape operand as the int64 ONNX wants: a constant converted, else a Cast.
fn i64_operand<'c, 'a>(
    l: &mut Lowering<'c, 'a>,
    op: OperationRef<'c, 'a>,
    i: usize,
) -> Result<Value<'c, 'a>, PassError> {
    let v = op.operand(i).map_err(err)?;
    if let Some(t) = constant_of(v) {
        let vals = ints_of(&t).ok_or_else(|| err(format!("{}: operand {i} is not integer", label(op))))?;
        let t = Tensor::I64(ndarray::ArrayD::from_shape_vec(t.shape().to_vec(), vals).map_err(err)?);
        return l.constant(op, &t);
    }
    let d = dims(v).ok_or_else(|| err(format!("{}: operand {i} is unranked", label(op))))?;
    let ty = ranked(IntegerType::new(l.ctx, 64).into(), &d);
    let to = l.int(crate::dialects::onnx_types::data_type::INT64 as i64);
    let loc = l.loc(op, "shape_i64");
    l.build1(op, "onnx.Cast", &[v], &[("to", to)], ty, loc)
}

fn reshape<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), PassError> {
    let x = op.operand(0).map_err(err)?;
    let s = i64_operand(l, op, 1)?;
    l.replace(op, false, "onnx.Reshape", &[x, s], &[])
}

fn squeeze<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), PassError> {
    let a = op_attrs(&op);
    let x = op.operand(0).map_err(err)?;
    let d = dims(x).ok_or_else(|| err(format!("{}: unranked input", label(op))))?;
    let r = d.len();
    let given = attr_ints(&a, "squeeze_dims").unwrap_or_default();
    let axes: Vec<usize> = if given.is_empty() {
        // every unit axis, which needs them known
        if d.iter().any(Option::is_none) {
            return Err(err(format!(
                "{}: squeezing all unit axes of a dynamic shape",
                label(op)
            )));
        }
        (0..r).filter(|&i| d[i] == Some(1)).collect()
    } else {
        given
            .iter()
            .map(|&v| norm_axis(v, r).ok_or_else(|| err(format!("{}: axis {v} out of rank {r}", label(op)))))
            .collect::<Result<_, _>>()?
    };
    let on_twin = r == 4 && l.has_twin(x) && order_kept(&axes);
    let (xin, mut ax): (Value, Vec<i64>) = if on_twin {
        (l.nchw_of(op, x)?, axes.iter().map(|&a| nchw_axis(a) as i64).collect())
    } else {
        (x, axes.iter().map(|&a| a as i64).collect())
    };
    ax.sort_unstable();
    let axv = l.i64s(op, &ax)?;
    l.replace(op, false, "onnx.Squeeze", &[xin, axv], &[])
}

fn expand_dims<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), PassError> {
    let x = op.operand(0).map_err(err)?;
    let out_rank =
        rank(op.result(0).map_err(err)?.into()).ok_or_else(|| err(format!("{}: unranked result", label(op))))?;
    let dim = const_ints(op, 1)?;
    let [d] = dim.as_slice() else {
        return Err(err(format!("{}: dim must be one value", label(op))));
    };
    let a = norm_axis(*d, out_rank).ok_or_else(|| err(format!("{}: dim {d} out of rank {out_rank}", label(op))))?;
    let axv = l.i64s(op, &[a as i64])?;
    l.replace(op, false, "onnx.Unsqueeze", &[x, axv], &[])
}

fn concat<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), PassError> {
    let ins = operands(op);
    let n = ins.len();
    if n < 2 {
        return Err(err(format!("{}: no axis operand", label(op))));
    }
    // ConcatV2(values..., axis); the older Concat(axis, values...)
    let (values, axis_at) = if op_name(&op) == "tf.Concat" {
        (&ins[1..], 0)
    } else {
        (&ins[..n - 1], n - 1)
    };
    let result: Value = op.result(0).map_err(err)?.into();
    let r = rank(result).ok_or_else(|| err(format!("{}: unranked result", label(op))))?;
    let axis = const_ints(op, axis_at)?;
    let [axis] = axis.as_slice() else {
        return Err(err(format!("{}: axis must be one value", label(op))));
    };
    let axis = norm_axis(*axis, r).ok_or_else(|| err(format!("{}: axis {axis} out of rank {r}", label(op))))?;
    let ty = l.result_type(op, 0)?;
    let loc = l.loc(op, "");
    let nchw =
        r == 4 && values.iter().any(|v| l.has_twin(*v)) && values.iter().all(|v| l.has_twin(*v) || rank(*v) == Some(4));
    if nchw {
        let ins = values
            .iter()
            .map(|v| l.nchw_of(op, *v))
            .collect::<Result<Vec<_>, _>>()?;
        let ax = l.int(nchw_axis(axis) as i64);
        l.replace(op, true, "onnx.Concat", &ins, &[("axis", ax)])
    } else {
        let ax = l.int(axis as i64);
        let y = l.build1(op, "onnx.Concat", values, &[("axis", ax)], ty, loc)?;
        l.finish(op, 0, y)
    }
}

/// `Pad` / `PadV2` / `MirrorPad(REFLECT)`: TF's `[[b0, e0], [b1, e1], ...]` paddings as ONNX's
/// `[b0, b1, ..., e0, e1, ...]`, reordered for a twin.
fn pad<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), PassError> {
    let a = op_attrs(&op);
    let name = op_name(&op);
    let mode = if name == "tf.MirrorPad" {
        match attr_str(&a, "mode") {
            Some("REFLECT") => "reflect",
            m => {
                return Err(err(format!(
                    "{}: mode {} has no ONNX form (only REFLECT)",
                    label(op),
                    m.unwrap_or("?")
                )))
            }
        }
    } else {
        "constant"
    };
    let x = op.operand(0).map_err(err)?;
    let r = rank(x).ok_or_else(|| err(format!("{}: unranked input", label(op))))?;
    let p = const_ints(op, 1)?;
    if p.len() != 2 * r {
        return Err(err(format!("{}: {} paddings for rank {r}", label(op), p.len())));
    }
    let on_twin = r == 4 && l.has_twin(x);
    let order: Vec<usize> = if on_twin { TO_NCHW.to_vec() } else { (0..r).collect() };
    let mut pads: Vec<i64> = order.iter().map(|&i| p[2 * i]).collect();
    pads.extend(order.iter().map(|&i| p[2 * i + 1]));
    let xin = if on_twin { l.nchw_of(op, x)? } else { x };
    let pv = l.i64s(op, &pads)?;
    let mut ins = vec![xin, pv];
    if name == "tf.PadV2" {
        ins.push(op.operand(2).map_err(err)?);
    }
    let ty = l.result_type(op, 0)?;
    let ty = if on_twin { permuted_type(ty, &TO_NCHW)? } else { ty };
    let m = l.string(mode);
    let loc = l.loc(op, "");
    let y = l.build1(op, "onnx.Pad", &ins, &[("mode", m)], ty, loc)?;
    if on_twin {
        l.finish_nchw(op, 0, y)
    } else {
        l.finish(op, 0, y)
    }
}

fn transpose<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), PassError> {
    let x = op.operand(0).map_err(err)?;
    let perm = const_ints(op, 1)?;
    let p = l.ints(&perm);
    l.replace(op, false, "onnx.Transpose", &[x], &[("perm", p)])
}

fn cast<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), PassError> {
    let x = op.operand(0).map_err(err)?;
    let elem = element_of(l.result_type(op, 0)?);
    let to = onnx_element(elem).ok_or_else(|| err(format!("{}: {elem} has no ONNX type", label(op))))?;
    let to = l.int(to as i64);
    l.replace(op, false, "onnx.Cast", &[x], &[("to", to)])
}

/// `Shape` and `Size` are int64 in ONNX; TF's int32 forms get a Cast.
fn shape<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), PassError> {
    let name = one_of(op, "tf.Size", "onnx.Size", "onnx.Shape");
    let x = op.operand(0).map_err(err)?;
    let dims64: Vec<Option<usize>> = if name == "onnx.Size" {
        Vec::new()
    } else {
        vec![Some(
            rank(x).ok_or_else(|| err(format!("{}: unranked input", label(op))))?,
        )]
    };
    let ty = l.result_type(op, 0)?;
    let i64t = ranked(IntegerType::new(l.ctx, 64).into(), &dims64);
    let loc = l.loc(op, "");
    let elem = element_of(ty);
    if elem == IntegerType::new(l.ctx, 64).into() {
        let y = l.build1(op, name, &[x], &[], ty, loc)?;
        return l.finish(op, 0, y);
    }
    let loc64 = l.loc(op, "i64");
    let s = l.build1(op, name, &[x], &[], i64t, loc64)?;
    let to = onnx_element(elem).ok_or_else(|| err(format!("{}: {elem} has no ONNX type", label(op))))?;
    let to = l.int(to as i64);
    let y = l.build1(op, "onnx.Cast", &[s], &[("to", to)], ty, loc)?;
    l.finish(op, 0, y)
}

/// `StridedSlice` with constant begin/end/strides as ONNX `Slice`, then `Squeeze` of the
/// shrunk axes and `Unsqueeze` of the new ones. The spec is first made dense over the input's
/// dims: an ellipsis stands for every dim the other entries do not name, a new axis names no
/// input dim but a size-1 dim of the output.
///
/// ```text
/// tf.StridedSlice(x: 2x3x4, begin [0, 1], end [0, 2], strides [1, 1])
///     {ellipsis_mask = 1, new_axis_mask = 0, shrink_axis_mask = 2}        // x[..., 1]
///   → onnx.Slice(x, starts [0, 0, 1], ends [MAX, MAX, 2], axes [0, 1, 2]) : 2x3x1
///   → onnx.Squeeze(axes [2]) : 2x3
/// ```
fn strided_slice<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), PassError> {
    let a = op_attrs(&op);
    let mask = |k: &str| a.get(k).and_then(AttrValue::as_int).unwrap_or(0);
    let (begin, end, strides) = (const_ints(op, 1)?, const_ints(op, 2)?, const_ints(op, 3)?);
    if begin.len() != end.len() || begin.len() != strides.len() || strides.contains(&0) {
        return Err(err(format!(
            "{}: begin/end/strides {begin:?} {end:?} {strides:?}",
            label(op)
        )));
    }
    let (bm, em, sm, el, na) = (
        mask("begin_mask"),
        mask("end_mask"),
        mask("shrink_axis_mask"),
        mask("ellipsis_mask"),
        mask("new_axis_mask"),
    );
    let x = op.operand(0).map_err(err)?;
    let n = begin.len();
    let input_rank = rank(x);
    let (mut starts, mut ends, mut steps) = (Vec::new(), Vec::new(), Vec::new());
    let (mut shrink, mut new_axes) = (Vec::new(), Vec::new());
    let (mut dim, mut out_pos, mut seen_ellipsis) = (0i64, 0i64, false);
    let named = (0..n).filter(|i| (el | na) & (1 << i) == 0).count();
    for i in 0..n {
        let bit = 1i64 << i;
        if el & bit != 0 && !seen_ellipsis {
            // TensorFlow honours the first ellipsis only
            seen_ellipsis = true;
            let r = input_rank.ok_or_else(|| err(format!("{}: an ellipsis on an unranked input", label(op))))?;
            for _ in 0..r
                .checked_sub(named)
                .ok_or_else(|| err(format!("{}: more slice entries than dims", label(op))))?
            {
                starts.push(0);
                ends.push(i64::MAX);
                steps.push(1);
                dim += 1;
                out_pos += 1;
            }
            continue;
        }
        if el & bit != 0 {
            continue;
        }
        if na & bit != 0 {
            new_axes.push(out_pos);
            out_pos += 1;
            continue;
        }
        let up = strides[i] > 0;
        if sm & bit != 0 {
            // one element: [b, b + 1), with b = -1 running to the end
            starts.push(begin[i]);
            ends.push(if begin[i] == -1 { i64::MAX } else { begin[i] + 1 });
            steps.push(1);
            shrink.push(dim);
            dim += 1;
            continue;
        }
        starts.push(match (bm & bit != 0, up) {
            (true, true) => 0,
            (true, false) => i64::MAX,
            (false, _) => begin[i],
        });
        ends.push(match (em & bit != 0, up) {
            (true, true) => i64::MAX,
            (true, false) => i64::MIN,
            (false, _) => end[i],
        });
        steps.push(strides[i]);
        dim += 1;
        out_pos += 1;
    }
    let axes: Vec<i64> = (0..dim).collect();
    let ins = [
        x,
        l.i64s(op, &starts)?,
        l.i64s(op, &ends)?,
        l.i64s(op, &axes)?,
        l.i64s(op, &steps)?,
    ];
    let ty = l.result_type(op, 0)?;
    let loc = l.loc(op, "");
    if shrink.is_empty() && new_axes.is_empty() {
        let y = l.build1(op, "onnx.Slice", &ins, &[], ty, loc)?;
        return l.finish(op, 0, y);
    }
    // the types between: the output without its new axes, then with the shrunk axes at 1
    let r = input_rank.ok_or_else(|| err(format!("{}: unranked input", label(op))))?;
    let out = dims(op.result(0).map_err(err)?.into()).unwrap_or_default();
    let squeezed: Vec<Option<usize>> = out
        .iter()
        .enumerate()
        .filter(|(i, _)| !new_axes.contains(&(*i as i64)))
        .map(|(_, d)| *d)
        .collect();
    let mut kept = squeezed.iter();
    let sliced: Vec<Option<usize>> = (0..r as i64)
        .map(|i| {
            if shrink.contains(&i) {
                Some(1)
            } else {
                kept.next().copied().flatten()
            }
        })
        .collect();
    let elem = element_of(ty);
    // the type once the shrunk axes are gone: the result's, unless new axes come after
    let squeezed_ty = if new_axes.is_empty() {
        ty
    } else {
        ranked(elem, &squeezed)
    };
    let mut cur = if shrink.is_empty() {
        l.build1(op, "onnx.Slice", &ins, &[], squeezed_ty, l.loc(op, "slice"))?
    } else {
        let s1 = l.build1(op, "onnx.Slice", &ins, &[], ranked(elem, &sliced), l.loc(op, "slice"))?;
        let ax = l.i64s(op, &shrink)?;
        let at = if new_axes.is_empty() { loc } else { l.loc(op, "squeeze") };
        l.build1(op, "onnx.Squeeze", &[s1, ax], &[], squeezed_ty, at)?
    };
    if !new_axes.is_empty() {
        let ax = l.i64s(op, &new_axes)?;
        cur = l.build1(op, "onnx.Unsqueeze", &[cur, ax], &[], ty, loc)?;
    }
    l.finish(op, 0, cur)
}

/// `Slice(x, begin, size)`: ends are `begin + size`, or the end of the axis for `size = -1`.
fn slice<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), PassError> {
    let (begin, size) = (const_ints(op, 1)?, const_ints(op, 2)?);
    if begin.len() != size.len() {
        return Err(err(format!("{}: begin {begin:?} and size {size:?}", label(op))));
    }
    let ends: Vec<i64> = begin
        .iter()
        .zip(&size)
        .map(|(&b, &s)| if s < 0 { i64::MAX } else { b + s })
        .collect();
    let axes: Vec<i64> = (0..begin.len() as i64).collect();
    let x = op.operand(0).map_err(err)?;
    let ins = [x, l.i64s(op, &begin)?, l.i64s(op, &ends)?, l.i64s(op, &axes)?];
    l.replace(op, false, "onnx.Slice", &ins, &[])
}

/// `Pack` (tf.stack) as an `Unsqueeze` of each value, then `Concat`.
fn pack<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), PassError> {
    let a = op_attrs(&op);
    let r = rank(op.result(0).map_err(err)?.into()).ok_or_else(|| err(format!("{}: unranked result", label(op))))?;
    let axis = a.get("axis").and_then(AttrValue::as_int).unwrap_or(0);
    let axis = norm_axis(axis, r).ok_or_else(|| err(format!("{}: axis {axis} out of rank {r}", label(op))))?;
    let mut parts = Vec::new();
    for (i, v) in operands(op).into_iter().enumerate() {
        let mut d = dims(v).ok_or_else(|| err(format!("{}: unranked operand", label(op))))?;
        d.insert(axis.min(d.len()), Some(1));
        let t = ranked(element_of(v.r#type()), &d);
        let ax = l.i64s(op, &[axis as i64])?;
        let loc = l.loc(op, &format!("unsqueeze_{i}"));
        parts.push(l.build1(op, "onnx.Unsqueeze", &[v, ax], &[], t, loc)?);
    }
    let ax = l.int(axis as i64);
    l.replace(op, false, "onnx.Concat", &parts, &[("axis", ax)])
}

fn gather<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), PassError> {
    let a = op_attrs(&op);
    if a.get("batch_dims").and_then(AttrValue::as_int).unwrap_or(0) != 0 {
        return Err(err(format!("{}: batch_dims has no ONNX Gather form", label(op))));
    }
    let (x, idx) = (op.operand(0).map_err(err)?, op.operand(1).map_err(err)?);
    // the older Gather has no axis operand: it gathers along 0
    let axis = if op_name(&op) == "tf.Gather" {
        vec![0]
    } else {
        const_ints(op, 2)?
    };
    let [axis] = axis.as_slice() else {
        return Err(err(format!("{}: axis must be one value", label(op))));
    };
    let ax = l.int(*axis);
    l.replace(op, false, "onnx.Gather", &[x, idx], &[("axis", ax)])
}

/// `Split(axis, x)` (equal parts) and `SplitV(x, sizes, axis)` as ONNX `Split` with its sizes.
fn split<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), PassError> {
    let v = op_name(&op) == "tf.SplitV";
    let (x, axis) = if v {
        (op.operand(0).map_err(err)?, const_ints(op, 2)?)
    } else {
        (op.operand(1).map_err(err)?, const_ints(op, 0)?)
    };
    let [axis] = axis.as_slice() else {
        return Err(err(format!("{}: axis must be one value", label(op))));
    };
    let xd = dims(x).ok_or_else(|| err(format!("{}: unranked input", label(op))))?;
    let ax = norm_axis(*axis, xd.len()).ok_or_else(|| err(format!("{}: axis {axis} out of rank", label(op))))?;
    // sizes from the results' static extents along the axis (they are what TF inferred)
    let mut sizes = Vec::new();
    for i in 0..op.result_count() {
        let d = dims(op.result(i).map_err(err)?.into()).and_then(|d| d.get(ax).copied().flatten());
        sizes.push(d.ok_or_else(|| err(format!("{}: result {i} has no static size on axis {ax}", label(op))))? as i64);
    }
    let types: Vec<Type> = (0..op.result_count())
        .map(|i| l.result_type(op, i))
        .collect::<Result<_, _>>()?;
    let sv = l.i64s(op, &sizes)?;
    let a = l.int(ax as i64);
    let loc = l.loc(op, "");
    let s = l.build(op, "onnx.Split", &[x, sv], &[("axis", a)], &types, loc)?;
    for i in 0..op.result_count() {
        let y: Value = s.result(i).map_err(err)?.into();
        l.finish(op, i, y)?;
    }
    Ok(())
}

/// `Tile(x, multiples)` and `BroadcastTo(x, shape)`: ONNX's `Tile` and `Expand`, int64 operand.
fn tile_or_expand<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), PassError> {
    let name = one_of(op, "tf.Tile", "onnx.Tile", "onnx.Expand");
    let x = op.operand(0).map_err(err)?;
    let s = i64_operand(l, op, 1)?;
    l.replace(op, false, name, &[x, s], &[])
}

/// `ClipByValue` with scalar bounds is ONNX's `Clip`; tensor bounds are `Max(Min(x, hi), lo)`.
fn clip_by_value<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), PassError> {
    let ins = operands(op);
    let scalar = |v: &Value| dims(*v).is_some_and(|d| d.iter().all(|x| *x == Some(1)));
    if ins.len() == 3 && scalar(&ins[1]) && scalar(&ins[2]) {
        let mut bounds = Vec::new();
        for v in &ins[1..] {
            bounds.push(if rank(*v) == Some(0) {
                *v
            } else {
                let ax = l.i64s(op, &(0..rank(*v).unwrap_or(0) as i64).collect::<Vec<_>>())?;
                let t = ranked(element_of(v.r#type()), &[]);
                let loc = l.loc(op, "bound");
                l.build1(op, "onnx.Squeeze", &[*v, ax], &[], t, loc)?
            });
        }
        return l.elementwise_on(op, "onnx.Clip", &[ins[0], bounds[0], bounds[1]], &[]);
    }
    Err(err(format!(
        "{}: bounds that are not scalars have no ONNX Clip form",
        label(op)
    )))
}

/// `ArgMax`/`ArgMin` over a constant axis (ONNX's result is int64; an int32 result gets a Cast).
fn arg_extreme<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), PassError> {
    let name = one_of(op, "tf.ArgMax", "onnx.ArgMax", "onnx.ArgMin");
    let x = op.operand(0).map_err(err)?;
    let axis = const_ints(op, 1)?;
    let [axis] = axis.as_slice() else {
        return Err(err(format!("{}: dimension must be one value", label(op))));
    };
    let ty = l.result_type(op, 0)?;
    let attrs = [("axis", l.int(*axis)), ("keepdims", l.int(0))];
    let loc = l.loc(op, "");
    let i64t: Type = IntegerType::new(l.ctx, 64).into();
    if element_of(ty) == i64t {
        let y = l.build1(op, name, &[x], &attrs, ty, loc)?;
        return l.finish(op, 0, y);
    }
    let t64 = ranked(i64t, &dims(op.result(0).map_err(err)?.into()).unwrap_or_default());
    let loc64 = l.loc(op, "i64");
    let a = l.build1(op, name, &[x], &attrs, t64, loc64)?;
    let to = onnx_element(element_of(ty)).ok_or_else(|| err(format!("{}: index type has no ONNX form", label(op))))?;
    let to = l.int(to as i64);
    let y = l.build1(op, "onnx.Cast", &[a], &[("to", to)], ty, loc)?;
    l.finish(op, 0, y)
}

/// `Fill(dims, value)` as `Expand(value, dims)`: a scalar broadcast to the shape.
fn fill<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), PassError> {
    let dims = i64_operand(l, op, 0)?;
    let value = op.operand(1).map_err(err)?;
    l.replace(op, false, "onnx.Expand", &[value, dims], &[])
}

/// `ZerosLike(x)` / `OnesLike(x)` as `Expand(0 or 1, Shape(x))`, the scalar of x's type.
fn fill_like<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), PassError> {
    let x = op.operand(0).map_err(err)?;
    let dtype = tensor_type(x.r#type())
        .and_then(|t| t.dtype)
        .ok_or_else(|| err(format!("{}: an input of unknown element type", label(op))))?;
    let one = op_name(&op) == "tf.OnesLike";
    let v = layout::cast(&Tensor::F64(ndarray::arr0(f64::from(u8::from(one))).into_dyn()), dtype).map_err(err)?;
    let v = l.constant(op, &v)?;
    let r = rank(x).ok_or_else(|| err(format!("{}: unranked input", label(op))))?;
    let st = ranked(IntegerType::new(l.ctx, 64).into(), &[Some(r)]);
    let loc = l.loc(op, "shape");
    let s = l.build1(op, "onnx.Shape", &[x], &[], st, loc)?;
    l.replace(op, false, "onnx.Expand", &[v, s], &[])
}

/// `Range(start, limit, delta)`: ONNX's Range takes the same three scalars.
fn range<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), PassError> {
    let ins = operands(op);
    l.replace(op, false, "onnx.Range", &ins, &[])
}

/// `Rank(x)`: the input's rank, known from its type, as a constant.
fn rank_op<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), PassError> {
    let x = op.operand(0).map_err(err)?;
    let r = rank(x).ok_or_else(|| err(format!("{}: unranked input", label(op))))?;
    let dtype = tensor_type(l.result_type(op, 0)?)
        .and_then(|t| t.dtype)
        .unwrap_or(crate::tensor::DType::I32);
    let v = layout::cast(&Tensor::I64(ndarray::arr0(r as i64).into_dyn()), dtype).map_err(err)?;
    let c = l.constant(op, &v)?;
    l.finish(op, 0, c)
}

/// `Unpack(x)` along `axis` as `Split` into unit slices, each then `Squeeze`d.
fn unpack<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), PassError> {
    let a = op_attrs(&op);
    let x = op.operand(0).map_err(err)?;
    let d = dims(x).ok_or_else(|| err(format!("{}: unranked input", label(op))))?;
    let axis = a.get("axis").and_then(AttrValue::as_int).unwrap_or(0);
    let ax = norm_axis(axis, d.len()).ok_or_else(|| err(format!("{}: axis {axis} out of rank", label(op))))?;
    let n = op.result_count();
    let mut part = d.clone();
    part[ax] = Some(1);
    let elem = element_of(x.r#type());
    let types = vec![ranked(elem, &part); n];
    let sizes = l.i64s(op, &vec![1; n])?;
    let at = l.int(ax as i64);
    let loc = l.loc(op, "split");
    let s = l.build(op, "onnx.Split", &[x, sizes], &[("axis", at)], &types, loc)?;
    for i in 0..n {
        let piece: Value = s.result(i).map_err(err)?.into();
        let axv = l.i64s(op, &[ax as i64])?;
        let ty = l.result_type(op, i)?;
        let loc = l.loc(op, &format!("squeeze_{i}"));
        let y = l.build1(op, "onnx.Squeeze", &[piece, axv], &[], ty, loc)?;
        l.finish(op, i, y)?;
    }
    Ok(())
}
