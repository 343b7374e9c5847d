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

/// The `!quant.uniform` type of `p`. Valid parameters go straight to the quant C API
/// (spelling a per-channel type with every scale and parsing it back cost 7 % of quantizing a
/// BERT-sized model); anything else goes through MLIR's parser of [`QuantParams::mlir_type`],
/// which checks the type and says what is wrong. Both give the same type: the spelling is
/// shortest round-trip, so the parser reads back the same f64 scales.
pub fn quant_type<'c>(ctx: &'c Context, p: &QuantParams) -> Result<Type<'c>, IrError> {
    match built_type(ctx, p) {
        Some(t) => Ok(t),
        None => parse_type(ctx, &p.mlir_type()),
    }
}

/// The type of `p` from the C API, when [`QuantParams::validate`] accepts it (positive finite
/// scales, zero points within a storage range that lies within the storage type's, one zero
/// point per scale, an axis for more than one scale), which the parser would too.
fn built_type<'c>(ctx: &'c Context, p: &QuantParams) -> Option<Type<'c>> {
    p.validate().ok()?;
    unsafe {
        let storage = mlir_sys::mlirIntegerTypeGet(ctx.to_raw(), p.dtype.bits());
        let expressed = mlir_sys::mlirF32TypeGet(ctx.to_raw());
        let flags = match p.dtype.is_signed() {
            true => mlir_sys::mlirQuantizedTypeGetSignedFlag(),
            false => 0,
        };
        let raw = match p.axis {
            None => mlir_sys::mlirUniformQuantizedTypeGet(
                flags,
                storage,
                expressed,
                p.scale[0],
                p.zero_point[0],
                p.qmin,
                p.qmax,
            ),
            Some(axis) => {
                let (mut scales, mut zps) = (p.scale.clone(), p.zero_point.clone());
                mlir_sys::mlirUniformQuantizedPerAxisTypeGet(
                    flags,
                    storage,
                    expressed,
                    scales.len() as isize,
                    scales.as_mut_ptr(),
                    zps.as_mut_ptr(),
                    i32::try_from(axis).ok()?,
                    p.qmin,
                    p.qmax,
                )
            }
        };
        (!raw.ptr.is_null()).then(|| Type::from_raw(raw))
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn storage() -> impl Strategy<Value = StorageType> {
        prop_oneof![
            Just(StorageType::Int4),
            Just(StorageType::Uint4),
            Just(StorageType::Int8),
            Just(StorageType::Uint8),
            Just(StorageType::Int16),
            Just(StorageType::Uint16),
            Just(StorageType::Int32),
        ]
    }

    proptest! {
        #[test]
        fn the_built_type_is_the_parsed_type(
            dtype in storage(),
            narrow in any::<bool>(),
            channels in proptest::option::of(1usize..6),
            axis in 0usize..4,
            seeds in proptest::collection::vec((1e-12f64..1e3, 0.0f64..1.0), 6),
        ) {
            let ctx = crate::ir::new_context();
            let (lo, hi) = dtype.full_range();
            let qmin = if narrow && dtype.is_signed() { lo + 1 } else { lo };
            let n = channels.unwrap_or(1);
            let p = QuantParams {
                scheme: Scheme::Onnx,
                dtype,
                scale: seeds[..n].iter().map(|(s, _)| *s).collect(),
                zero_point: seeds[..n].iter().map(|(_, z)| qmin + ((hi - qmin) as f64 * z) as i64).collect(),
                axis: channels.map(|_| axis),
                qmin,
                qmax: hi,
            };
            let built = built_type(&ctx, &p).expect("valid parameters are built");
            let parsed = parse_type(&ctx, &p.mlir_type()).unwrap();
            prop_assert!(built == parsed, "{} vs {}", crate::ir::type_text(built), crate::ir::type_text(parsed));
        }
    }

    #[test]
    fn parameters_the_parser_refuses_are_not_built() {
        let ctx = crate::ir::new_context();
        let ok = QuantParams {
            scheme: Scheme::Onnx,
            dtype: StorageType::Int8,
            scale: vec![0.5],
            zero_point: vec![3],
            axis: None,
            qmin: -128,
            qmax: 127,
        };
        assert!(built_type(&ctx, &ok).is_some());
        for bad in [
            QuantParams {
                scale: vec![f64::NAN],
                ..ok.clone()
            },
            QuantParams {
                scale: vec![0.0],
                ..ok.clone()
            },
            QuantParams {
                zero_point: vec![200],
                ..ok.clone()
            },
            QuantParams {
                qmax: 300,
                ..ok.clone()
            },
            QuantParams {
                scale: vec![0.5, 0.25],
                zero_point: vec![0, 0],
                ..ok.clone()
            },
        ] {
            // the parser's answer, whatever it is (it refuses a NaN or zero scale, a storage
            // range beyond i8's, two scales without an axis)
            assert!(built_type(&ctx, &bad).is_none());
            let parsed = parse_type(&ctx, &bad.mlir_type()).ok();
            assert_eq!(quant_type(&ctx, &bad).ok(), parsed);
        }
    }
}
