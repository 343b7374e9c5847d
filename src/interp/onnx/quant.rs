//! The ONNX table's QuantizeLinear / DequantizeLinear builders, with the parameters read from
//! their scale and zero-point operands.

use super::*;
use crate::interp::kernels::integer::{conv2d_i64, matmul_i64, ConvGeometry};

/// Quantization parameters from QuantizeLinear/DequantizeLinear operands: the scale tensor,
/// the zero-point tensor (whose type is the storage type; uint8 when absent) and the axis.
pub(crate) fn qparams(
    scale: &Tensor,
    zp: Option<&Tensor>,
    storage: StorageType,
    axis: Option<usize>,
) -> KernelResult<QuantParams> {
    let s: Vec<f64> = match layout::cast(scale, DType::F64)? {
        Tensor::F64(a) => a.iter().copied().collect(),
        _ => return Err("scale".into()),
    };
    let z: Vec<i64> = match zp {
        Some(t) if !t.is_empty() => crate::interp::kernels::ints_of(t).ok_or("zero point must be an integer tensor")?,
        _ => vec![0; s.len()],
    };
    if s.len() != z.len() {
        return Err(format!("{} scales and {} zero points", s.len(), z.len()));
    }
    let (qmin, qmax) = storage.full_range();
    Ok(QuantParams {
        scheme: Scheme::Onnx,
        dtype: storage,
        axis: if s.len() > 1 { axis } else { None },
        scale: s,
        zero_point: z,
        qmin,
        qmax,
    })
}

/// The storage type of a quantized ONNX tensor from its MLIR element type name.
pub(crate) fn storage_of(elem: &str) -> Option<StorageType> {
    Some(match elem {
        "i4" | "si4" => StorageType::Int4,
        "ui4" => StorageType::Uint4,
        "i8" | "si8" => StorageType::Int8,
        "ui8" => StorageType::Uint8,
        "i16" | "si16" => StorageType::Int16,
        "ui16" => StorageType::Uint16,
        "i32" | "si32" => StorageType::Int32,
        _ => return None,
    })
}

/// The storage type whose values a tensor of `dtype` holds (4-bit types are held in bytes;
/// only a declared type tells them apart).
pub(crate) fn held_in(dtype: DType) -> Option<StorageType> {
    Some(match dtype {
        DType::I8 => StorageType::Int8,
        DType::U8 => StorageType::Uint8,
        DType::I16 => StorageType::Int16,
        DType::U16 => StorageType::Uint16,
        DType::I32 => StorageType::Int32,
        _ => return None,
    })
}

pub(super) fn quantize_linear(d: &OpDesc) -> Result<Box<dyn Kernel>, String> {
    let storage = d
        .result_types
        .first()
        .and_then(|t| t.as_ref())
        .and_then(|t| storage_of(&t.element));
    let axis = d.int_attr("axis", 1);
    let block = d.int_attr("block_size", 0).max(0) as usize;
    Ok(one(move |x| {
        if block > 0 {
            // the zero point's type, else the declared result type (output_dtype), else uint8
            let z = x.get(2).filter(|z| !z.is_empty()).map(|z| z.dtype());
            let st = z.and_then(held_in).or(storage).unwrap_or(StorageType::Uint8);
            let out = z.unwrap_or(match st {
                StorageType::Int4 | StorageType::Int8 => DType::I8,
                StorageType::Uint4 | StorageType::Uint8 => DType::U8,
                StorageType::Int16 => DType::I16,
                StorageType::Uint16 => DType::U16,
                StorageType::Int32 => DType::I32,
            });
            return quantize_blocked(x, axis, block, st, out);
        }
        let a = f32_arg(x, 0)?;
        let ax = norm_axis(axis, a.ndim().max(1)).ok();
        // the zero point's type is the output type (4-bit types only the result type tells)
        let storage = match (storage, x.get(2).filter(|z| !z.is_empty())) {
            (Some(s @ (StorageType::Int4 | StorageType::Uint4)), _) => s,
            (s, Some(z)) => held_in(z.dtype()).or(s).unwrap_or(StorageType::Uint8),
            (s, None) => s.unwrap_or(StorageType::Uint8),
        };
        let p = qparams(x[1], x.get(2).copied(), storage, ax)?;
        quantize(&a.view(), &p, Rounding::HalfEven).map_err(|e| e.to_string())
    }))
}

pub(super) fn dequantize_linear(d: &OpDesc) -> Result<Box<dyn Kernel>, String> {
    let storage = d
        .operand_types
        .first()
        .and_then(|t| t.as_ref())
        .and_then(|t| storage_of(&t.element));
    let axis = d.int_attr("axis", 1);
    let block = d.int_attr("block_size", 0).max(0) as usize;
    Ok(one(move |x| {
        if block > 0 {
            return dequantize_blocked(x, axis, block);
        }
        // an input of unknown type (before inference): its storage from the values' type
        let storage = storage
            .or_else(|| held_in(x[0].dtype()))
            .ok_or_else(|| format!("DequantizeLinear of {}", x[0].dtype()))?;
        let ax = norm_axis(axis, x[0].shape().len().max(1)).ok();
        let p = qparams(x[1], x.get(2).copied(), storage, ax)?;
        dequantize(x[0], &p).map(Tensor::F32).map_err(|e| e.to_string())
    }))
}

/// The values of a tensor held as integers, as i64 (quantized storage, zero points, biases).
fn ints64(t: &Tensor, what: &str) -> KernelResult<ArrayD<i64>> {
    match layout::cast(t, DType::I64)? {
        Tensor::I64(a) if !t.dtype().is_float() => Ok(a),
        _ => Err(format!("{what} is {}, expected integers", t.dtype())),
    }
}

/// `x − zp`, broadcast as NumPy does (an absent or empty zero point is 0).
fn minus_zero_point(x: &Tensor, zp: Option<&&Tensor>, what: &str) -> KernelResult<ArrayD<i64>> {
    let a = ints64(x, what)?;
    match zp.filter(|z| !z.is_empty()) {
        None => Ok(a),
        Some(z) => match arith(BinOp::Sub, &Tensor::I64(a), &Tensor::I64(ints64(z, "zero point")?))? {
            Tensor::I64(d) => Ok(d),
            _ => Err("zero point".into()),
        },
    }
}

/// A per-output-channel operand of a conv ([M]) reshaped to broadcast against the output
/// (NCHW: [1, -1, 1, 1]) or the OIHW filter ([-1, 1, 1, 1]); a scalar stays as it is.
fn per_channel(t: &Tensor, shape: &[i64; 4]) -> KernelResult<Tensor> {
    if t.shape().len() == 1 && t.len() > 1 {
        layout::reshape(t, shape, false)
    } else {
        Ok(t.clone())
    }
}

const OUTPUT_CHANNELS: [i64; 4] = [1, -1, 1, 1];
const FILTER_CHANNELS: [i64; 4] = [-1, 1, 1, 1];

/// The integer convolution of an ONNX ConvInteger/QLinearConv, its geometry read once.
fn integer_conv(d: &OpDesc) -> Result<impl Fn(&ArrayD<i64>, &ArrayD<i64>) -> KernelResult<ArrayD<i64>>, String> {
    let (strides, dilations, pads) = (
        nn::pair(d, "strides", 1)?,
        nn::pair(d, "dilations", 1)?,
        nn::pads_of(d)?,
    );
    let group = d.int_attr("group", 1).max(1) as usize;
    Ok(move |x: &ArrayD<i64>, w: &ArrayD<i64>| {
        let (xs, ws) = (x.shape(), w.shape());
        if xs.len() != 4 || ws.len() != 4 {
            return Err(format!("integer convolution of {xs:?} by {ws:?}: 2-D NCHW only"));
        }
        let Padding::Explicit(p) = pads.resolve([xs[2], xs[3]], [ws[2], ws[3]], strides, dilations) else {
            return Err("padding".into());
        };
        conv2d_i64(
            x,
            w,
            &ConvGeometry {
                strides,
                dilations,
                pads: p,
                group,
            },
        )
    })
}

/// ConvInteger: (x − x_zp) ⊛ (w − w_zp) in int32.
pub(super) fn conv_integer(d: &OpDesc) -> Result<Box<dyn Kernel>, String> {
    let conv = integer_conv(d)?;
    Ok(one(move |x| {
        let xi = minus_zero_point(x[0], x.get(2), "ConvInteger input")?;
        let wz = x.get(3).map(|z| per_channel(z, &FILTER_CHANNELS)).transpose()?;
        let wi = minus_zero_point(x[1], wz.as_ref().as_ref(), "ConvInteger filter")?;
        layout::cast(&Tensor::I64(conv(&xi, &wi)?), DType::I32)
    }))
}

/// MatMulInteger: (a − a_zp) · (b − b_zp) in int32.
pub(super) fn matmul_integer(_: &OpDesc) -> Result<Box<dyn Kernel>, String> {
    Ok(one(|x| {
        let a = minus_zero_point(x[0], x.get(2), "MatMulInteger A")?;
        let b = minus_zero_point(x[1], x.get(3), "MatMulInteger B")?;
        layout::cast(&Tensor::I64(matmul_i64(&a, &b)?), DType::I32)
    }))
}

/// x_scale · w_scale / y_scale in the scales' own float type (NumPy rounds f16 products to f16).
fn multiplier(a: &Tensor, b: &Tensor, y: &Tensor) -> KernelResult<Tensor> {
    let t = a.dtype();
    let f = |v: &Tensor| layout::cast(v, DType::F32);
    let round = |v: Tensor| -> KernelResult<Tensor> { layout::cast(&layout::cast(&v, t)?, DType::F64) };
    let ab = round(arith(BinOp::Mul, &f(a)?, &f(b)?)?)?;
    round(arith(BinOp::Div, &layout::cast(&ab, DType::F32)?, &f(y)?)?)
}

/// acc · multiplier + y_zp, rounded half to even and saturated to the zero point's type (the
/// input's type without one): the requantization of QLinearConv / QLinearMatMul.
fn requantize(acc: ArrayD<i64>, mult: &Tensor, y_zp: Option<&&Tensor>, fallback: DType) -> KernelResult<Tensor> {
    let scaled = arith(BinOp::Mul, &layout::cast(&Tensor::I64(acc), DType::F64)?, mult)?;
    let (scaled, out) = match y_zp.filter(|z| !z.is_empty()) {
        Some(z) => (arith(BinOp::Add, &scaled, &layout::cast(z, DType::F64)?)?, z.dtype()),
        None => (scaled, fallback),
    };
    let storage = held_in(out).ok_or_else(|| format!("a quantized output of {out}"))?;
    let (lo, hi) = storage.full_range();
    let Tensor::F64(v) = scaled else {
        return Err("requantize".into());
    };
    layout::cast(
        &Tensor::F64(v.mapv(|r| r.clamp(lo as f64, hi as f64).round_ties_even())),
        out,
    )
}

/// QLinearConv: the integer convolution of (x − x_zp) and (w − w_zp) plus the int32 bias,
/// requantized with x_scale · w_scale / y_scale (per output channel when w_scale is).
pub(super) fn qlinear_conv(d: &OpDesc) -> Result<Box<dyn Kernel>, String> {
    let conv = integer_conv(d)?;
    Ok(one(move |x| {
        let xi = minus_zero_point(x[0], x.get(2), "QLinearConv input")?;
        let wz = x.get(5).map(|z| per_channel(z, &FILTER_CHANNELS)).transpose()?;
        let wi = minus_zero_point(x[3], wz.as_ref().as_ref(), "QLinearConv filter")?;
        let mut acc = conv(&xi, &wi)?;
        if let Some(b) = x.get(8).filter(|b| !b.is_empty()) {
            let Tensor::I64(s) = arith(
                BinOp::Add,
                &Tensor::I64(acc),
                &per_channel(&Tensor::I64(ints64(b, "bias")?), &OUTPUT_CHANNELS)?,
            )?
            else {
                return Err("bias".into());
            };
            acc = s;
        }
        let mult = multiplier(x[1], &per_channel(x[4], &OUTPUT_CHANNELS)?, x[6])?;
        requantize(acc, &mult, x.get(7), x[0].dtype())
    }))
}

/// QLinearMatMul: (a − a_zp) · (b − b_zp) requantized with a_scale · b_scale / y_scale.
pub(super) fn qlinear_matmul(_: &OpDesc) -> Result<Box<dyn Kernel>, String> {
    Ok(one(|x| {
        let a = minus_zero_point(x[0], x.get(2), "QLinearMatMul A")?;
        let b = minus_zero_point(x[3], x.get(5), "QLinearMatMul B")?;
        let mult = multiplier(x[1], x[4], x[6])?;
        requantize(matmul_i64(&a, &b)?, &mult, x.get(7), x[0].dtype())
    }))
}

/// DynamicQuantizeLinear: uint8 over [min(0, x), max(0, x)], with the scale and zero point.
pub(super) fn dynamic_quantize_linear(_: &OpDesc) -> Result<Box<dyn Kernel>, String> {
    Ok(Box::new(FnKernel(|x: &[&Tensor]| {
        let a = f32_arg(x, 0)?;
        let hi = a.iter().copied().fold(0f32, f32::max);
        let lo = a.iter().copied().fold(0f32, f32::min);
        let scale = if hi == lo { 1.0 } else { hi - lo } / 255.0;
        let zp = (0.0 - lo / scale).clamp(0.0, 255.0).round_ties_even();
        let y = a.mapv(|v| ((v / scale).round_ties_even() + zp).clamp(0.0, 255.0) as u8);
        Ok(vec![
            Tensor::U8(y),
            Tensor::F32(ndarray::arr0(scale).into_dyn()),
            Tensor::U8(ndarray::arr0(zp as u8).into_dyn()),
        ])
    })))
}

/// A blocked scale or zero point ([.., ⌈n/b⌉, ..] along `axis`) repeated to the data's
/// [.., n, ..].
fn unblocked(t: &Tensor, axis: usize, block: usize, n: usize) -> KernelResult<Tensor> {
    if t.shape().len() <= axis || t.shape()[axis] != n.div_ceil(block) {
        return Err(format!(
            "a blocked parameter of shape {:?} for {n} elements in blocks of {block} along axis {axis}",
            t.shape()
        ));
    }
    let idx: Vec<i64> = (0..n).map(|j| (j / block) as i64).collect();
    layout::gather(t, &idx, &[n], axis as i64)
}

/// Blocked QuantizeLinear: x / scale rounded half to even, plus the zero point, saturated —
/// with one scale per `block` elements along `axis`.
fn quantize_blocked(x: &[&Tensor], axis: i64, block: usize, storage: StorageType, out: DType) -> KernelResult<Tensor> {
    let ax = norm_axis(axis, x[0].shape().len())?;
    let n = x[0].shape()[ax];
    let s = unblocked(&layout::cast(x[1], DType::F32)?, ax, block, n)?;
    let Tensor::F32(q) = arith(BinOp::Div, &layout::cast(x[0], DType::F32)?, &s)? else {
        return Err("quantize".into());
    };
    let q = Tensor::F32(q.mapv(f32::round_ties_even));
    let q = match x.get(2).filter(|z| !z.is_empty()) {
        Some(z) => arith(BinOp::Add, &q, &unblocked(&layout::cast(z, DType::F32)?, ax, block, n)?)?,
        None => q,
    };
    let (lo, hi) = storage.full_range();
    let Tensor::F32(q) = q else {
        return Err("quantize".into());
    };
    layout::cast(&Tensor::F32(q.mapv(|v| v.clamp(lo as f32, hi as f32))), out)
}

/// Blocked DequantizeLinear: (q − zero point) · scale, one scale per `block` elements.
fn dequantize_blocked(x: &[&Tensor], axis: i64, block: usize) -> KernelResult<Tensor> {
    let ax = norm_axis(axis, x[0].shape().len())?;
    let n = x[0].shape()[ax];
    let q = layout::cast(x[0], DType::F32)?;
    let q = match x.get(2).filter(|z| !z.is_empty()) {
        Some(z) => arith(BinOp::Sub, &q, &unblocked(&layout::cast(z, DType::F32)?, ax, block, n)?)?,
        None => q,
    };
    let y = arith(
        BinOp::Mul,
        &q,
        &unblocked(&layout::cast(x[1], DType::F32)?, ax, block, n)?,
    )?;
    layout::cast(&y, x[1].dtype())
}
