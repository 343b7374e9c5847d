//! MLIR types as quantir sees them: element type and shape of a ranked tensor.

use crate::tensor::DType;
use melior::ir::{Type, TypeLike};

/// One dimension of a tensor type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(untagged)]
pub enum Dim {
    Static(usize),
    Dynamic,
}

/// Element type and shape of a ranked tensor type; `dtype` is `None` for element types quantir
/// does not compute with (quant types, `!tf_type.resource`, strings, ...).
#[derive(Debug, Clone, PartialEq)]
pub struct TensorType {
    pub dtype: Option<DType>,
    pub element: String,
    pub dims: Vec<Dim>,
}

impl TensorType {
    /// The static shape, or `None` when a dimension is dynamic.
    pub fn static_shape(&self) -> Option<Vec<usize>> {
        self.dims
            .iter()
            .map(|d| if let Dim::Static(n) = d { Some(*n) } else { None })
            .collect()
    }
}

/// The [`DType`] of a scalar MLIR type, if quantir computes with it.
pub fn element_dtype(t: Type) -> Option<DType> {
    let raw = t.to_raw();
    unsafe {
        if mlir_sys::mlirTypeIsAF32(raw) {
            Some(DType::F32)
        } else if mlir_sys::mlirTypeIsAF64(raw) {
            Some(DType::F64)
        } else if mlir_sys::mlirTypeIsAF16(raw) {
            Some(DType::F16)
        } else if mlir_sys::mlirTypeIsABF16(raw) {
            Some(DType::BF16)
        } else if mlir_sys::mlirTypeIsAInteger(raw) {
            let unsigned = mlir_sys::mlirIntegerTypeIsUnsigned(raw);
            match (mlir_sys::mlirIntegerTypeGetWidth(raw), unsigned) {
                (1, _) => Some(DType::I1),
                // 4-bit storage is held one element per byte (MLIR's dense storage does the same)
                (4, false) => Some(DType::I8),
                (4, true) => Some(DType::U8),
                (8, false) => Some(DType::I8),
                (8, true) => Some(DType::U8),
                (16, false) => Some(DType::I16),
                (16, true) => Some(DType::U16),
                (32, false) => Some(DType::I32),
                (64, false) => Some(DType::I64),
                _ => None,
            }
        } else {
            None
        }
    }
}

/// The element type of a shaped type (tensor, vector, memref); `None` for any other type.
pub fn element_type(t: Type) -> Option<Type> {
    unsafe {
        mlir_sys::mlirTypeIsAShaped(t.to_raw())
            .then(|| Type::from_raw(mlir_sys::mlirShapedTypeGetElementType(t.to_raw())))
    }
}

/// Element type and shape of `t` if it is a ranked tensor type.
pub fn tensor_type(t: Type) -> Option<TensorType> {
    let raw = t.to_raw();
    unsafe {
        if !mlir_sys::mlirTypeIsARankedTensor(raw) {
            return None;
        }
        let rank = mlir_sys::mlirShapedTypeGetRank(raw);
        let dims = (0..rank)
            .map(|i| {
                if mlir_sys::mlirShapedTypeIsDynamicDim(raw, i as isize) {
                    Dim::Dynamic
                } else {
                    Dim::Static(mlir_sys::mlirShapedTypeGetDimSize(raw, i as isize) as usize)
                }
            })
            .collect();
        let elem = Type::from_raw(mlir_sys::mlirShapedTypeGetElementType(raw));
        Some(TensorType {
            dtype: element_dtype(elem),
            element: elem.to_string(),
            dims,
        })
    }
}

/// The scalar MLIR type of a [`DType`].
pub fn dtype_to_type<'c>(ctx: &'c melior::Context, d: DType) -> Type<'c> {
    use melior::ir::r#type::IntegerType;
    match d {
        DType::F32 => Type::float32(ctx),
        DType::F64 => Type::float64(ctx),
        DType::F16 => Type::float16(ctx),
        DType::BF16 => Type::bfloat16(ctx),
        DType::I1 => IntegerType::new(ctx, 1).into(),
        DType::I8 => IntegerType::new(ctx, 8).into(),
        DType::U8 => IntegerType::unsigned(ctx, 8).into(),
        DType::I16 => IntegerType::new(ctx, 16).into(),
        DType::U16 => IntegerType::unsigned(ctx, 16).into(),
        DType::I32 => IntegerType::new(ctx, 32).into(),
        DType::I64 => IntegerType::new(ctx, 64).into(),
    }
}
