//! ONNX element types ⇄ MLIR element types.

use super::proto::data_type as dt;
use melior::ir::r#type::IntegerType;
use melior::ir::{Type, TypeLike};
use melior::Context;

/// The MLIR element type of an ONNX `TensorProto.DataType` (signless integers for signed ONNX
/// types, as TF and the quant dialect's storage types spell them).
pub fn mlir_element<'c>(ctx: &'c Context, t: i32) -> Option<Type<'c>> {
    Some(match t {
        dt::FLOAT => Type::float32(ctx),
        dt::DOUBLE => Type::float64(ctx),
        dt::FLOAT16 => Type::float16(ctx),
        dt::BFLOAT16 => Type::bfloat16(ctx),
        dt::BOOL => IntegerType::new(ctx, 1).into(),
        dt::INT4 => IntegerType::new(ctx, 4).into(),
        dt::UINT4 => IntegerType::unsigned(ctx, 4).into(),
        dt::INT8 => IntegerType::new(ctx, 8).into(),
        dt::UINT8 => IntegerType::unsigned(ctx, 8).into(),
        dt::INT16 => IntegerType::new(ctx, 16).into(),
        dt::UINT16 => IntegerType::unsigned(ctx, 16).into(),
        dt::INT32 => IntegerType::new(ctx, 32).into(),
        dt::UINT32 => IntegerType::unsigned(ctx, 32).into(),
        dt::INT64 => IntegerType::new(ctx, 64).into(),
        dt::UINT64 => IntegerType::unsigned(ctx, 64).into(),
        _ => return None,
    })
}

/// The [`DType`](crate::tensor::DType) of an ONNX `TensorProto.DataType` quantir computes with.
pub fn dtype_of(t: i32) -> Option<crate::tensor::DType> {
    use crate::tensor::DType;
    Some(match t {
        dt::FLOAT => DType::F32,
        dt::DOUBLE => DType::F64,
        dt::FLOAT16 => DType::F16,
        dt::BFLOAT16 => DType::BF16,
        dt::BOOL => DType::I1,
        dt::INT8 => DType::I8,
        dt::UINT8 => DType::U8,
        dt::INT16 => DType::I16,
        dt::UINT16 => DType::U16,
        dt::INT32 => DType::I32,
        dt::INT64 => DType::I64,
        _ => return None,
    })
}

/// The ONNX data type of an MLIR element type (`!quant.uniform` types by their storage type).
pub fn onnx_element(t: Type) -> Option<i32> {
    let raw = t.to_raw();
    unsafe {
        if mlir_sys::mlirTypeIsAQuantizedType(raw) {
            let storage = Type::from_raw(mlir_sys::mlirQuantizedTypeGetStorageType(raw));
            let signed = mlir_sys::mlirQuantizedTypeIsSigned(raw);
            let w = mlir_sys::mlirIntegerTypeGetWidth(storage.to_raw());
            return Some(match (w, signed) {
                (4, true) => dt::INT4,
                (4, false) => dt::UINT4,
                (8, true) => dt::INT8,
                (8, false) => dt::UINT8,
                (16, true) => dt::INT16,
                (16, false) => dt::UINT16,
                (32, true) => dt::INT32,
                (32, false) => dt::UINT32,
                _ => return None,
            });
        }
        if mlir_sys::mlirTypeIsAF32(raw) {
            return Some(dt::FLOAT);
        }
        if mlir_sys::mlirTypeIsAF64(raw) {
            return Some(dt::DOUBLE);
        }
        if mlir_sys::mlirTypeIsAF16(raw) {
            return Some(dt::FLOAT16);
        }
        if mlir_sys::mlirTypeIsABF16(raw) {
            return Some(dt::BFLOAT16);
        }
        if mlir_sys::mlirTypeIsAInteger(raw) {
            let unsigned = mlir_sys::mlirIntegerTypeIsUnsigned(raw);
            return Some(match (mlir_sys::mlirIntegerTypeGetWidth(raw), unsigned) {
                (1, _) => dt::BOOL,
                (4, false) => dt::INT4,
                (4, true) => dt::UINT4,
                (8, false) => dt::INT8,
                (8, true) => dt::UINT8,
                (16, false) => dt::INT16,
                (16, true) => dt::UINT16,
                (32, false) => dt::INT32,
                (32, true) => dt::UINT32,
                (64, false) => dt::INT64,
                (64, true) => dt::UINT64,
                _ => return None,
            });
        }
    }
    None
}

/// Bytes per element in ONNX `raw_data` (4-bit types: 0, they are packed two per byte).
pub fn raw_size(t: i32) -> Option<usize> {
    Some(match t {
        dt::BOOL | dt::INT8 | dt::UINT8 => 1,
        dt::INT16 | dt::UINT16 | dt::FLOAT16 | dt::BFLOAT16 => 2,
        dt::FLOAT | dt::INT32 | dt::UINT32 => 4,
        dt::DOUBLE | dt::INT64 | dt::UINT64 => 8,
        dt::INT4 | dt::UINT4 => 0,
        _ => return None,
    })
}

/// A readable name of an ONNX data type, for errors.
pub fn name(t: i32) -> String {
    match t {
        dt::FLOAT => "float".into(),
        dt::DOUBLE => "double".into(),
        dt::FLOAT16 => "float16".into(),
        dt::BFLOAT16 => "bfloat16".into(),
        dt::BOOL => "bool".into(),
        dt::STRING => "string".into(),
        dt::INT4 => "int4".into(),
        dt::UINT4 => "uint4".into(),
        dt::INT8 => "int8".into(),
        dt::UINT8 => "uint8".into(),
        dt::INT16 => "int16".into(),
        dt::UINT16 => "uint16".into(),
        dt::INT32 => "int32".into(),
        dt::UINT32 => "uint32".into(),
        dt::INT64 => "int64".into(),
        dt::UINT64 => "uint64".into(),
        t => format!("data type {t}"),
    }
}
