//! `!quant.uniform` types ⇄ [`QuantParams`]. melior only has `is_*` checks for quant types, so
//! construction goes through the type parser and inspection through the quant C API.

use super::io::capture_diagnostics;
use super::IrError;
use crate::params::{QuantParams, Scheme, StorageType};
use melior::ir::{Type, TypeLike};
use melior::Context;

/// Parses an MLIR type; parse errors come back with MLIR's message.
pub fn parse_type<'c>(ctx: &'c Context, s: &str) -> Result<Type<'c>, IrError> {
    let (t, diags) = capture_diagnostics(ctx, || unsafe {
        let src = mlir_sys::MlirStringRef {
            data: s.as_ptr() as *const _,
            length: s.len(),
        };
        let raw = mlir_sys::mlirTypeParseGet(ctx.to_raw(), src);
        (!raw.ptr.is_null()).then(|| Type::from_raw(raw))
    });
    t.ok_or_else(|| IrError::Invalid(format!("invalid type '{s}': {}", diags.join("; "))))
}

fn storage_of(t: Type) -> Result<StorageType, IrError> {
    let raw = t.to_raw();
    let (signed, width) = unsafe {
        (
            mlir_sys::mlirQuantizedTypeIsSigned(raw),
            mlir_sys::mlirQuantizedTypeGetStorageTypeIntegralWidth(raw),
        )
    };
    Ok(match (signed, width) {
        (true, 4) => StorageType::Int4,
        (false, 4) => StorageType::Uint4,
        (true, 8) => StorageType::Int8,
        (false, 8) => StorageType::Uint8,
        (true, 16) => StorageType::Int16,
        (false, 16) => StorageType::Uint16,
        (true, 32) => StorageType::Int32,
        _ => {
            return Err(IrError::Invalid(format!(
                "unsupported quantized storage in {}",
                super::type_text(t)
            )))
        }
    })
}

/// The parameters a `!quant.uniform` type (per-tensor or per-axis) holds. The scheme is not
/// part of the type and is supplied by the caller.
pub fn params_from_type(t: Type, scheme: Scheme) -> Result<QuantParams, IrError> {
    let raw = t.to_raw();
    unsafe {
        let per_tensor = mlir_sys::mlirTypeIsAUniformQuantizedType(raw);
        let per_axis = mlir_sys::mlirTypeIsAUniformQuantizedPerAxisType(raw);
        if !per_tensor && !per_axis {
            return Err(IrError::Invalid(format!("{t} is not a !quant.uniform type")));
        }
        let dtype = storage_of(t)?;
        let qmin = mlir_sys::mlirQuantizedTypeGetStorageTypeMin(raw);
        let qmax = mlir_sys::mlirQuantizedTypeGetStorageTypeMax(raw);
        let (scale, zero_point, axis) = if per_tensor {
            (
                vec![mlir_sys::mlirUniformQuantizedTypeGetScale(raw)],
                vec![mlir_sys::mlirUniformQuantizedTypeGetZeroPoint(raw)],
                None,
            )
        } else {
            let n = mlir_sys::mlirUniformQuantizedPerAxisTypeGetNumDims(raw);
            let s = (0..n)
                .map(|i| mlir_sys::mlirUniformQuantizedPerAxisTypeGetScale(raw, i))
                .collect();
            let z = (0..n)
                .map(|i| mlir_sys::mlirUniformQuantizedPerAxisTypeGetZeroPoint(raw, i))
                .collect();
            let axis = mlir_sys::mlirUniformQuantizedPerAxisTypeGetQuantizedDimension(raw) as usize;
            (s, z, Some(axis))
        };
        Ok(QuantParams {
            scheme,
            dtype,
            scale,
            zero_point,
            axis,
            qmin,
            qmax,
        })
    }
}

/// [`params_from_type`] of a type written as text.
pub fn params_from_type_str(ctx: &Context, s: &str, scheme: Scheme) -> Result<QuantParams, IrError> {
    params_from_type(parse_type(ctx, s)?, scheme)
}

/// The `!quant.uniform` type of `p`, built by MLIR's own parser from [`QuantParams::mlir_type`].
pub fn quant_type<'c>(ctx: &'c Context, p: &QuantParams) -> Result<Type<'c>, IrError> {
    parse_type(ctx, &p.mlir_type())
}

/// `tensor<shape x !quant.uniform<...>>` for a ranked tensor of `like`'s shape.
pub fn quantized_tensor_type<'c>(ctx: &'c Context, like: Type<'c>, p: &QuantParams) -> Result<Type<'c>, IrError> {
    let elem = quant_type(ctx, p)?;
    with_element(like, elem)
}

/// A ranked tensor type of `like`'s shape with element type `elem`.
pub fn with_element<'c>(like: Type<'c>, elem: Type<'c>) -> Result<Type<'c>, IrError> {
    unsafe {
        let raw = like.to_raw();
        if !mlir_sys::mlirTypeIsARankedTensor(raw) {
            return Err(IrError::Invalid(format!("{like} is not a ranked tensor type")));
        }
        let rank = mlir_sys::mlirShapedTypeGetRank(raw);
        let dims: Vec<i64> = (0..rank)
            .map(|i| mlir_sys::mlirShapedTypeGetDimSize(raw, i as isize))
            .collect();
        Ok(Type::from_raw(mlir_sys::mlirRankedTensorTypeGet(
            rank as isize,
            dims.as_ptr(),
            elem.to_raw(),
            mlir_sys::mlirAttributeGetNull(),
        )))
    }
}
