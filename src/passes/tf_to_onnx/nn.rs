//! `tf-to-onnx`, neural-network ops: convolutions (HWIO → OIHW filters, TF's SAME padding
//! as explicit pads), matmuls, bias adds, pools, batch norm, resize and softmax. Convolutions,
//! pools and batch norm compute in NCHW and leave an NCHW twin for the ops after them.

use super::*;

/// The TF ops of this family, sorted by name.
pub(super) const TABLE: &[(&str, Rule)] = &[
    ("tf.AvgPool", Custom(pool, &["onnx.AveragePool", "onnx.MaxPool"])),
    ("tf.BatchMatMul", Custom(matmul, &["onnx.MatMul"])),
    ("tf.BatchMatMulV2", Custom(matmul, &["onnx.MatMul"])),
    ("tf.BatchMatMulV3", Custom(matmul, &["onnx.MatMul"])),
    ("tf.BiasAdd", Custom(bias_add, &["onnx.Add", "onnx.Reshape"])),
    ("tf.Conv2D", Custom(conv, &["onnx.Conv", "onnx.Reshape"])),
    ("tf.DepthwiseConv2dNative", Custom(conv, &["onnx.Conv", "onnx.Reshape"])),
    ("tf.Einsum", Custom(einsum, &["onnx.Einsum"])),
    ("tf.FusedBatchNorm", Custom(batch_norm, &["onnx.BatchNormalization"])),
    ("tf.FusedBatchNormV2", Custom(batch_norm, &["onnx.BatchNormalization"])),
    ("tf.FusedBatchNormV3", Custom(batch_norm, &["onnx.BatchNormalization"])),
    ("tf.LogSoftmax", Custom(softmax, &["onnx.LogSoftmax", "onnx.Softmax"])),
    ("tf.MatMul", Custom(matmul, &["onnx.MatMul"])),
    ("tf.MaxPool", Custom(pool, &["onnx.AveragePool", "onnx.MaxPool"])),
    ("tf.ResizeBilinear", Custom(resize, &["onnx.Cast", "onnx.Resize"])),
    (
        "tf.ResizeNearestNeighbor",
        Custom(resize, &["onnx.Cast", "onnx.Resize"]),
    ),
    ("tf.Softmax", Custom(softmax, &["onnx.LogSoftmax", "onnx.Softmax"])),
];

/// `BiasAdd` is an `Add` whose bias broadcasts on the channel axis; for NCHW data the bias is
/// reshaped to `[C, 1, ..., 1]` first.
fn bias_add<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), PassError> {
    let a = op_attrs(&op);
    let (x, b) = (op.operand(0).map_err(err)?, op.operand(1).map_err(err)?);
    if attr_str(&a, "data_format") != Some("NCHW") {
        return l.elementwise_on(op, "onnx.Add", &[x, b], &[]);
    }
    let r = rank(x).ok_or_else(|| err(format!("{}: unranked input", label(op))))?;
    let mut shape = vec![-1i64];
    shape.extend(std::iter::repeat_n(1, r.saturating_sub(2)));
    let b2 = match constant_of(b) {
        Some(t) => {
            let t = layout::reshape(&t, &shape, false).map_err(err)?;
            l.constant(op, &t)?
        }
        None => {
            let s = l.i64s(op, &shape)?;
            let c = dims(b).and_then(|d| d.first().copied().flatten());
            let d: Vec<Option<usize>> = std::iter::once(c)
                .chain(std::iter::repeat_n(Some(1), r.saturating_sub(2)))
                .collect();
            let ty = ranked(element_of(b.r#type()), &d);
            let loc = l.loc(op, "bias");
            l.build1(op, "onnx.Reshape", &[b, s], &[], ty, loc)?
        }
    };
    l.replace(op, false, "onnx.Add", &[x, b2], &[])
}

/// TF's SAME padding of one spatial axis: the extra pixel goes at the end (ONNX SAME_UPPER).
pub(super) fn same_pads(input: usize, k: usize, s: usize, d: usize) -> (i64, i64) {
    let out = input.div_ceil(s.max(1));
    let needed = ((out.saturating_sub(1)) * s + (k.saturating_sub(1)) * d + 1).saturating_sub(input);
    let begin = needed / 2;
    (begin as i64, (needed - begin) as i64)
}

/// ONNX padding attributes for a TF window op on `hw` with kernel `k`, strides `s`, dilations
/// `d`: explicit `pads` where the spatial size is known, `auto_pad` otherwise.
fn window_pads(
    a: &BTreeMap<String, AttrValue>,
    hw: [Option<usize>; 2],
    k: [usize; 2],
    s: [usize; 2],
    d: [usize; 2],
    spatial: [usize; 2],
    op: OperationRef,
) -> Result<Result<Vec<i64>, &'static str>, PassError> {
    match attr_str(a, "padding").unwrap_or("VALID") {
        "VALID" => Ok(Ok(vec![0; 4])),
        "SAME" => match hw {
            [Some(h), Some(w)] => {
                let (t, b) = same_pads(h, k[0], s[0], d[0]);
                let (l, r) = same_pads(w, k[1], s[1], d[1]);
                Ok(Ok(vec![t, l, b, r]))
            }
            _ => Ok(Err("SAME_UPPER")),
        },
        "EXPLICIT" => {
            let p = attr_ints(a, "explicit_paddings").unwrap_or_default();
            if p.len() != 8 {
                return Err(err(format!(
                    "{}: explicit_paddings has {} values, not 8",
                    label(op),
                    p.len()
                )));
            }
            let [h, w] = spatial;
            Ok(Ok(vec![p[2 * h], p[2 * w], p[2 * h + 1], p[2 * w + 1]]))
        }
        other => Err(err(format!("{}: padding \"{other}\" has no ONNX form", label(op)))),
    }
}

fn two(v: &[i64], at: [usize; 2], what: &str, op: OperationRef) -> Result<[usize; 2], PassError> {
    let get = |i: usize| {
        v.get(i)
            .copied()
            .filter(|&x| x > 0)
            .map(|x| x as usize)
            .ok_or_else(|| err(format!("{}: {what} {v:?} has no positive value at axis {i}", label(op))))
    };
    Ok([get(at[0])?, get(at[1])?])
}

/// `Conv2D` (HWIO filter) and `DepthwiseConv2dNative` (`[KH, KW, C, M]` filter) as an NCHW
/// `Conv` with an OIHW weight (`[C·M, 1, KH, KW]` and `group = C` for depthwise).
fn conv<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), PassError> {
    let a = op_attrs(&op);
    let depthwise = op_name(&op) == "tf.DepthwiseConv2dNative";
    let nchw_data = attr_str(&a, "data_format") == Some("NCHW");
    let spatial = if nchw_data { [2, 3] } else { [1, 2] };
    let (x, f) = (op.operand(0).map_err(err)?, op.operand(1).map_err(err)?);
    let fdims = dims(f)
        .filter(|d| d.len() == 4 && d.iter().all(Option::is_some))
        .map(|d| d.into_iter().flatten().collect::<Vec<usize>>())
        .ok_or_else(|| err(format!("{}: the filter needs a static rank-4 shape", label(op))))?;
    let (kh, kw, fi, fo) = (fdims[0], fdims[1], fdims[2], fdims[3]);
    let xd = dims(x)
        .filter(|d| d.len() == 4)
        .ok_or_else(|| err(format!("{}: the input is not rank 4", label(op))))?;
    let strides = two(&attr_ints(&a, "strides").unwrap_or(vec![1; 4]), spatial, "strides", op)?;
    let dil = two(
        &attr_ints(&a, "dilations").unwrap_or(vec![1; 4]),
        spatial,
        "dilations",
        op,
    )?;
    let channels = xd[if nchw_data { 1 } else { 3 }];
    let group = if depthwise {
        fi
    } else {
        match channels {
            Some(c) if fi > 0 && c % fi == 0 => c / fi,
            Some(c) => return Err(err(format!("{}: {c} input channels for a filter of {fi}", label(op)))),
            None => 1,
        }
    };
    let pads = window_pads(
        &a,
        [xd[spatial[0]], xd[spatial[1]]],
        [kh, kw],
        strides,
        dil,
        spatial,
        op,
    )?;
    // the weight in OIHW
    let (w_shape, perm): (Vec<i64>, [i64; 4]) = if depthwise {
        (vec![kh as i64, kw as i64, 1, (fi * fo) as i64], [3, 2, 0, 1])
    } else {
        (fdims.iter().map(|&d| d as i64).collect(), [3, 2, 0, 1])
    };
    let w = match constant_of(f) {
        Some(t) => {
            let t = layout::reshape(&t, &w_shape, false).map_err(err)?;
            let t = layout::transpose(&t, &perm).map_err(err)?;
            l.constant(op, &t)?
        }
        None => {
            let mut f2 = f;
            if depthwise {
                let s = l.i64s(op, &w_shape)?;
                let elem = element_of(f.r#type());
                let ty = ranked(elem, &w_shape.iter().map(|&d| Some(d as usize)).collect::<Vec<_>>());
                let loc = l.loc(op, "filter");
                f2 = l.build1(op, "onnx.Reshape", &[f, s], &[], ty, loc)?;
            }
            let loc = l.loc(op, "filter_oihw");
            l.transpose_op(op, f2, &[3, 2, 0, 1], loc)?
        }
    };
    let xin = if nchw_data { x } else { l.nchw_of(op, x)? };
    let mut attrs = vec![
        ("dilations", l.ints(&[dil[0] as i64, dil[1] as i64])),
        ("group", l.int(group as i64)),
        ("kernel_shape", l.ints(&[kh as i64, kw as i64])),
        ("strides", l.ints(&[strides[0] as i64, strides[1] as i64])),
    ];
    attrs.push(l.pads_attr(pads));
    l.replace(op, !nchw_data, "onnx.Conv", &[xin, w], &attrs)
}

/// `MaxPool` / `AvgPool` (NHWC `ksize` and `strides`) as NCHW pooling; TF's average leaves the
/// padding out, as ONNX's default `count_include_pad = 0` does.
fn pool<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), PassError> {
    let a = op_attrs(&op);
    let nchw_data = attr_str(&a, "data_format") == Some("NCHW");
    let spatial = if nchw_data { [2, 3] } else { [1, 2] };
    let x = op.operand(0).map_err(err)?;
    let xd = dims(x)
        .filter(|d| d.len() == 4)
        .ok_or_else(|| err(format!("{}: the input is not rank 4", label(op))))?;
    let k = two(&attr_ints(&a, "ksize").unwrap_or_default(), spatial, "ksize", op)?;
    let s = two(&attr_ints(&a, "strides").unwrap_or(vec![1; 4]), spatial, "strides", op)?;
    let pads = window_pads(&a, [xd[spatial[0]], xd[spatial[1]]], k, s, [1, 1], spatial, op)?;
    let name = one_of(op, "tf.MaxPool", "onnx.MaxPool", "onnx.AveragePool");
    let mut attrs = vec![
        ("kernel_shape", l.ints(&[k[0] as i64, k[1] as i64])),
        ("strides", l.ints(&[s[0] as i64, s[1] as i64])),
    ];
    attrs.push(l.pads_attr(pads));
    let xin = if nchw_data { x } else { l.nchw_of(op, x)? };
    l.replace(op, !nchw_data, name, &[xin], &attrs)
}

/// Inference-mode `FusedBatchNorm` as `BatchNormalization` on NCHW.
fn batch_norm<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), PassError> {
    let a = op_attrs(&op);
    if a.get("is_training").and_then(AttrValue::as_bool) == Some(true) {
        return Err(err(format!(
            "{}: training-mode batch norm has no inference form",
            label(op)
        )));
    }
    for i in 1..op.result_count() {
        if !uses(op.result(i).map_err(err)?.into()).is_empty() {
            return Err(err(format!(
                "{}: result {i} (batch statistics) is used; only the normalized output has an ONNX form",
                label(op)
            )));
        }
    }
    let ins = operands(op);
    if ins.len() < 5 {
        return Err(err(format!("{}: {} operands, not 5", label(op), ins.len())));
    }
    let eps = a.get("epsilon").and_then(AttrValue::as_f64).unwrap_or(1e-4);
    let attrs = [("epsilon", l.float(eps))];
    let ty = l.result_type(op, 0)?;
    let loc = l.loc(op, "");
    if attr_str(&a, "data_format") == Some("NCHW") {
        let y = l.build1(op, "onnx.BatchNormalization", &ins[..5], &attrs, ty, loc)?;
        return l.finish(op, 0, y);
    }
    let mut nins = ins[..5].to_vec();
    nins[0] = l.nchw_of(op, ins[0])?;
    l.replace(op, true, "onnx.BatchNormalization", &nins, &attrs)
}

/// `ResizeBilinear` / `ResizeNearestNeighbor` (NHWC, constant `[h, w]`) as ONNX `Resize` on
/// NCHW with `sizes`, TF's `align_corners` / `half_pixel_centers` as the coordinate
/// transformation and rounding TF uses.
fn resize<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), PassError> {
    let a = op_attrs(&op);
    let nearest = op_name(&op) == "tf.ResizeNearestNeighbor";
    let flag = |k: &str| a.get(k).and_then(AttrValue::as_bool).unwrap_or(false);
    let (coords, rounding) = match (flag("align_corners"), flag("half_pixel_centers"), nearest) {
        (true, true, _) => {
            return Err(err(format!(
                "{}: align_corners and half_pixel_centers are both set",
                label(op)
            )))
        }
        (true, false, _) => ("align_corners", "round_prefer_ceil"),
        (false, true, true) => ("tf_half_pixel_for_nn", "floor"),
        (false, true, false) => ("half_pixel", "floor"),
        (false, false, _) => ("asymmetric", "floor"),
    };
    let x = op.operand(0).map_err(err)?;
    let xd = dims(x).filter(|d| d.len() == 4);
    let (n, c) = match xd.as_deref() {
        Some([Some(n), _, _, Some(c)]) => (*n as i64, *c as i64),
        _ => {
            return Err(err(format!(
                "{}: the input needs a static batch and channel count",
                label(op)
            )))
        }
    };
    let size = const_ints(op, 1)?;
    let [h, w] = size.as_slice() else {
        return Err(err(format!("{}: size {size:?} is not [height, width]", label(op))));
    };
    let ty = l.result_type(op, 0)?;
    let mut xin = l.nchw_of(op, x)?;
    // bilinear yields float whatever the input; ONNX's Resize keeps the input's type
    if !nearest && element_of(xin.r#type()) != element_of(ty) {
        let to = onnx_element(element_of(ty)).ok_or_else(|| err(format!("{}: result type", label(op))))?;
        let to = l.int(to as i64);
        let cast_ty = ranked(element_of(ty), &dims(xin).unwrap_or_default());
        let loc = l.loc(op, "cast");
        xin = l.build1(op, "onnx.Cast", &[xin], &[("to", to)], cast_ty, loc)?;
    }
    let none_ty = crate::ir::types::none_type(l.ctx);
    let none = l.build1(
        op,
        crate::dialects::onnx::NO_VALUE,
        &[],
        &[],
        none_ty,
        Location::unknown(l.ctx),
    )?;
    let sizes = l.i64s(op, &[n, c, *h, *w])?;
    let mut attrs = vec![
        ("coordinate_transformation_mode", l.string(coords)),
        ("mode", l.string(if nearest { "nearest" } else { "linear" })),
    ];
    if nearest {
        attrs.push(("nearest_mode", l.string(rounding)));
    }
    l.replace(op, true, "onnx.Resize", &[xin, none, none, sizes], &attrs)
}

fn softmax<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), PassError> {
    let name = one_of(op, "tf.Softmax", "onnx.Softmax", "onnx.LogSoftmax");
    let x = op.operand(0).map_err(err)?;
    let axis = l.int(-1);
    l.replace(op, false, name, &[x], &[("axis", axis)])
}

/// `a @ b` with TF's transpose / adjoint flags made explicit: on constants ahead of time, on
/// activations as a Transpose of the two last axes.
fn matmul<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), PassError> {
    let a = op_attrs(&op);
    let flag = |k: &str| a.get(k).and_then(AttrValue::as_bool).unwrap_or(false);
    let (ta, tb) = if op_name(&op) == "tf.MatMul" {
        (flag("transpose_a"), flag("transpose_b"))
    } else {
        (flag("adj_x"), flag("adj_y"))
    };
    let mut ins = Vec::new();
    for (i, t) in [(0, ta), (1, tb)] {
        let v = op.operand(i).map_err(err)?;
        if !t {
            ins.push(v);
            continue;
        }
        let r = rank(v)
            .filter(|&r| r >= 2)
            .ok_or_else(|| err(format!("{}: operand {i} is not a matrix", label(op))))?;
        let mut perm: Vec<usize> = (0..r).collect();
        perm.swap(r - 2, r - 1);
        ins.push(match constant_of(v) {
            Some(c) => {
                let p: Vec<i64> = perm.iter().map(|&x| x as i64).collect();
                let c = layout::transpose(&c, &p).map_err(err)?;
                l.constant(op, &c)?
            }
            None => {
                let loc = l.loc(op, &format!("transpose_{i}"));
                l.transpose_op(op, v, &perm, loc)?
            }
        });
    }
    l.replace(op, false, "onnx.MatMul", &ins, &[])
}

/// `Einsum`: ONNX's takes the same equation (NumPy's notation on both sides).
fn einsum<'c, 'a>(l: &mut Lowering<'c, 'a>, op: OperationRef<'c, 'a>) -> Result<(), PassError> {
    let a = op_attrs(&op);
    let eq = attr_str(&a, "equation").ok_or_else(|| err(format!("{}: no equation", label(op))))?;
    let eq = l.string(eq);
    let ins = operands(op);
    l.replace(op, false, "onnx.Einsum", &ins, &[("equation", eq)])
}
