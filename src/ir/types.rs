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
    /// The element type's text; a uniform quantized type's without its scales and zero points
    /// (see [`element_text`]).
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
                (32, true) => Some(DType::U32),
                (64, false) => Some(DType::I64),
                (64, true) => Some(DType::U64),
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
            element: element_text(elem),
            dims,
        })
    }
}

/// An element type's text, a uniform quantized type's cut to its storage, expressed type and
/// axis (`!quant.uniform<i8:f32>`, `!quant.uniform<u8:f32:1>`): printing a per-channel type
/// spells every scale and zero point, which costs more than the op it types (a BERT layer's
/// FFN weight: 3,072 of them) and says nothing a name or a group needs.
pub fn element_text(elem: Type) -> String {
    let raw = elem.to_raw();
    unsafe {
        let uniform = mlir_sys::mlirTypeIsAUniformQuantizedType(raw);
        let per_axis = mlir_sys::mlirTypeIsAUniformQuantizedPerAxisType(raw);
        if !uniform && !per_axis {
            return elem.to_string();
        }
        let sign = if mlir_sys::mlirQuantizedTypeIsSigned(raw) {
            'i'
        } else {
            'u'
        };
        let width = mlir_sys::mlirQuantizedTypeGetStorageTypeIntegralWidth(raw);
        let expressed = Type::from_raw(mlir_sys::mlirQuantizedTypeGetExpressedType(raw));
        match per_axis {
            false => format!("!quant.uniform<{sign}{width}:{expressed}>"),
            true => {
                let axis = mlir_sys::mlirUniformQuantizedPerAxisTypeGetQuantizedDimension(raw);
                format!("!quant.uniform<{sign}{width}:{expressed}:{axis}>")
            }
        }
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
        DType::U32 => IntegerType::unsigned(ctx, 32).into(),
        DType::U64 => IntegerType::unsigned(ctx, 64).into(),
    }
}

/// A tensor type: unranked when `dims` is None, `?` for an unknown dim.
pub fn tensor_type_of<'c>(elem: Type<'c>, dims: Option<&[Option<i64>]>) -> Type<'c> {
    unsafe {
        match dims {
            None => Type::from_raw(mlir_sys::mlirUnrankedTensorTypeGet(elem.to_raw())),
            Some(d) => {
                let shape: Vec<i64> = d.iter().map(|x| x.unwrap_or(i64::MIN)).collect();
                Type::from_raw(mlir_sys::mlirRankedTensorTypeGet(
                    shape.len() as isize,
                    shape.as_ptr(),
                    elem.to_raw(),
                    mlir_sys::mlirAttributeGetNull(),
                ))
            }
        }
    }
}

/// The type of an attribute (a dense constant's tensor type).
pub fn attr_type(a: melior::ir::Attribute) -> Type {
    use melior::ir::attribute::AttributeLike;
    unsafe { Type::from_raw(mlir_sys::mlirAttributeGetType(a.to_raw())) }
}

/// True for a ranked tensor type.
pub fn is_ranked_tensor(t: Type) -> bool {
    unsafe { mlir_sys::mlirTypeIsARankedTensor(t.to_raw()) }
}

/// MLIR's `none` type (the type of an absent optional operand).
pub fn none_type(ctx: &melior::Context) -> Type<'_> {
    unsafe { Type::from_raw(mlir_sys::mlirNoneTypeGet(ctx.to_raw())) }
}

/// What a scalar element type is, for translating it to another type system (ONNX data types).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scalar {
    F32,
    F64,
    F16,
    BF16,
    /// An integer of `width` bits; `signed` is false only for `ui` types.
    Int {
        width: u32,
        signed: bool,
    },
    /// A `!quant` type, by its storage integer.
    Quantized {
        width: u32,
        signed: bool,
    },
}

/// The [`Scalar`] kind of an element type; `None` for types with no such reading.
pub fn scalar_kind(t: Type) -> Option<Scalar> {
    let raw = t.to_raw();
    unsafe {
        if mlir_sys::mlirTypeIsAQuantizedType(raw) {
            let storage = mlir_sys::mlirQuantizedTypeGetStorageType(raw);
            return Some(Scalar::Quantized {
                width: mlir_sys::mlirIntegerTypeGetWidth(storage),
                signed: mlir_sys::mlirQuantizedTypeIsSigned(raw),
            });
        }
        if mlir_sys::mlirTypeIsAF32(raw) {
            return Some(Scalar::F32);
        }
        if mlir_sys::mlirTypeIsAF64(raw) {
            return Some(Scalar::F64);
        }
        if mlir_sys::mlirTypeIsAF16(raw) {
            return Some(Scalar::F16);
        }
        if mlir_sys::mlirTypeIsABF16(raw) {
            return Some(Scalar::BF16);
        }
        if mlir_sys::mlirTypeIsAInteger(raw) {
            return Some(Scalar::Int {
                width: mlir_sys::mlirIntegerTypeGetWidth(raw),
                signed: !mlir_sys::mlirIntegerTypeIsUnsigned(raw),
            });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantized_element_text_drops_the_parameters() {
        let ctx = crate::ir::new_context();
        for (ty, text) in [
            ("tensor<2xf32>", "f32"),
            ("tensor<2x!quant.uniform<i8:f32, 0.5:-3>>", "!quant.uniform<i8:f32>"),
            ("tensor<2x!quant.uniform<u8:f16, 0.25>>", "!quant.uniform<u8:f16>"),
            (
                "tensor<2x3x!quant.uniform<i4:f32:1, {0.5, 0.25, 2.0}>>",
                "!quant.uniform<i4:f32:1>",
            ),
        ] {
            let t = crate::ir::quant::parse_type(&ctx, ty).unwrap();
            assert_eq!(tensor_type(t).unwrap().element, text, "{ty}");
        }
    }
}
