//! The ONNX table's QuantizeLinear / DequantizeLinear builders, with the parameters read from
//! their scale and zero-point operands.

use super::*;

/// Quantization parameters from QuantizeLinear/DequantizeLinear operands: the scale tensor,
/// the zero-point tensor (whose type is the storage type; uint8 when absent) and the axis.
pub(super) fn qparams(
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
pub(super) fn storage_of(elem: &str) -> Option<StorageType> {
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
pub(super) fn held_in(dtype: DType) -> Option<StorageType> {
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
    if d.int_attr("block_size", 0) != 0 {
        return Err("blocked quantization (block_size) is not supported".into());
    }
    Ok(one(move |x| {
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
    if d.int_attr("block_size", 0) != 0 {
        return Err("blocked quantization (block_size) is not supported".into());
    }
    Ok(one(move |x| {
        // an input of unknown type (before inference): its storage from the values' type
        let storage = storage
            .or_else(|| held_in(x[0].dtype()))
            .ok_or_else(|| format!("DequantizeLinear of {}", x[0].dtype()))?;
        let ax = norm_axis(axis, x[0].shape().len().max(1)).ok();
        let p = qparams(x[1], x.get(2).copied(), storage, ax)?;
        dequantize(x[0], &p).map(Tensor::F32).map_err(|e| e.to_string())
    }))
}
