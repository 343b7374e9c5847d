//! ONNX's `TensorProto.DataType` codes and their MLIR element types and quantir dtypes (used
//! by the ONNX import and export, the ONNX interpreter table's Cast, and the TF → ONNX lowering).

use melior::ir::r#type::IntegerType;
use melior::ir::Type;
use melior::Context;

use data_type as dt;

/// The codes of `TensorProto.DataType` quantir reads and writes.
pub mod data_type {
    pub const FLOAT: i32 = 1;
    pub const UINT8: i32 = 2;
    pub const INT8: i32 = 3;
    pub const UINT16: i32 = 4;
    pub const INT16: i32 = 5;
    pub const INT32: i32 = 6;
    pub const INT64: i32 = 7;
    pub const STRING: i32 = 8;
    pub const BOOL: i32 = 9;
    pub const FLOAT16: i32 = 10;
    pub const DOUBLE: i32 = 11;
    pub const UINT32: i32 = 12;
    pub const UINT64: i32 = 13;
    pub const BFLOAT16: i32 = 16;
    pub const UINT4: i32 = 21;
    pub const INT4: i32 = 22;
}

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
        dt::UINT32 => DType::U32,
        dt::UINT64 => DType::U64,
        _ => return None,
    })
}

/// The ONNX data type of an MLIR element type (`!quant.uniform` types by their storage type).
pub fn onnx_element(t: Type) -> Option<i32> {
    use crate::ir::types::Scalar;
    Some(match crate::ir::types::scalar_kind(t)? {
        Scalar::F32 => dt::FLOAT,
        Scalar::F64 => dt::DOUBLE,
        Scalar::F16 => dt::FLOAT16,
        Scalar::BF16 => dt::BFLOAT16,
        // a quantized type's storage is never bool or 64-bit
        Scalar::Quantized { width: 1 | 64, .. } => return None,
        Scalar::Int { width, signed } | Scalar::Quantized { width, signed } => match (width, signed) {
            (1, _) => dt::BOOL,
            (4, true) => dt::INT4,
            (4, false) => dt::UINT4,
            (8, true) => dt::INT8,
            (8, false) => dt::UINT8,
            (16, true) => dt::INT16,
            (16, false) => dt::UINT16,
            (32, true) => dt::INT32,
            (32, false) => dt::UINT32,
            (64, true) => dt::INT64,
            (64, false) => dt::UINT64,
            _ => return None,
        },
    })
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
