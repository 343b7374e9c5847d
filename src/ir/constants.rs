//! Constants: `DenseElementsAttr` and `dense_resource<...>` ⇄ [`Tensor`].
//!
//! Dense attributes are read and written as one raw little-endian buffer (no per-element C
//! calls), except i1, which MLIR bit-packs and which is read element by element.

use super::types::{dtype_to_type, tensor_type};
use super::IrError;
use crate::tensor::{DType, Tensor};
use half::{bf16, f16};
use melior::ir::attribute::AttributeLike;
use melior::ir::{Attribute, TypeLike};
use ndarray::{ArrayD, IxDyn};

fn constant_err(what: &str, reason: impl Into<String>) -> IrError {
    IrError::Constant {
        what: what.to_string(),
        reason: reason.into(),
    }
}

/// Decodes `n` little-endian elements of `T` from `bytes` (`stored` of them, splat when 1 < n).
macro_rules! decode {
    ($bytes:expr, $t:ty, $width:expr, $from:expr) => {
        $bytes
            .chunks_exact($width)
            .map(|c| $from(c.try_into().unwrap_or([0; $width])))
            .collect::<Vec<$t>>()
    };
}

fn array_from<T: Clone>(shape: &[usize], mut v: Vec<T>, n: usize, what: &str) -> Result<ArrayD<T>, IrError> {
    if v.len() == 1 && n != 1 {
        let x = v[0].clone();
        v = vec![x; n];
    }
    ArrayD::from_shape_vec(IxDyn(shape), v).map_err(|e| constant_err(what, e.to_string()))
}

fn tensor_from_le_bytes(dtype: DType, shape: &[usize], bytes: &[u8], n: usize, what: &str) -> Result<Tensor, IrError> {
    Ok(match dtype {
        DType::F32 => Tensor::F32(array_from(shape, decode!(bytes, f32, 4, f32::from_le_bytes), n, what)?),
        DType::F64 => Tensor::F64(array_from(shape, decode!(bytes, f64, 8, f64::from_le_bytes), n, what)?),
        DType::F16 => Tensor::F16(array_from(shape, decode!(bytes, f16, 2, f16::from_le_bytes), n, what)?),
        DType::BF16 => Tensor::BF16(array_from(
            shape,
            decode!(bytes, bf16, 2, bf16::from_le_bytes),
            n,
            what,
        )?),
        DType::I8 => Tensor::I8(array_from(shape, bytes.iter().map(|b| *b as i8).collect(), n, what)?),
        DType::U8 => Tensor::U8(array_from(shape, bytes.to_vec(), n, what)?),
        DType::I16 => Tensor::I16(array_from(shape, decode!(bytes, i16, 2, i16::from_le_bytes), n, what)?),
        DType::U16 => Tensor::U16(array_from(shape, decode!(bytes, u16, 2, u16::from_le_bytes), n, what)?),
        DType::I32 => Tensor::I32(array_from(shape, decode!(bytes, i32, 4, i32::from_le_bytes), n, what)?),
        DType::U32 => Tensor::U32(array_from(shape, decode!(bytes, u32, 4, u32::from_le_bytes), n, what)?),
        DType::I64 => Tensor::I64(array_from(shape, decode!(bytes, i64, 8, i64::from_le_bytes), n, what)?),
        DType::U64 => Tensor::U64(array_from(shape, decode!(bytes, u64, 8, u64::from_le_bytes), n, what)?),
        DType::I1 => return Err(constant_err(what, "i1 is not stored byte-wise")),
    })
}

/// A constant's value attribute as a handle that may cross threads, so that many constants
/// are read at once (copying a BERT encoder's 340 MB of weights out of their mapping is mostly
/// the kernel faulting in and zeroing fresh pages, which it does on as many cores as fault).
/// MLIR attributes are immutable once made and live as long as their context, which the
/// lifetime `'c` ties the handle to; only read-only queries are made through it.
#[derive(Clone, Copy)]
pub struct SharedConstant<'c>(mlir_sys::MlirAttribute, std::marker::PhantomData<&'c melior::Context>);

// SAFETY: see above
unsafe impl Send for SharedConstant<'_> {}
unsafe impl Sync for SharedConstant<'_> {}

impl<'c> SharedConstant<'c> {
    /// The `value` attribute of `op` (a constant op: `ir::ops::is_constant_op`).
    pub fn of(op: &melior::ir::OperationRef<'c, '_>) -> Option<SharedConstant<'c>> {
        use melior::ir::operation::OperationLike;
        let a = op.attribute("value").ok()?;
        Some(SharedConstant(a.to_raw(), std::marker::PhantomData))
    }

    /// Its value ([`attribute_to_tensor`]).
    pub fn value(&self, what: &str) -> Result<Tensor, IrError> {
        // SAFETY: the attribute lives as long as its context, which outlives 'c, and is only read
        attribute_to_tensor(unsafe { Attribute::from_raw(self.0) }, what)
    }
}

/// Reads a constant attribute (`dense<...>` in any form, including splat and hex, or
/// `dense_resource<...>`) into a [`Tensor`]. `what` names the constant in errors.
pub fn attribute_to_tensor(attr: Attribute, what: &str) -> Result<Tensor, IrError> {
    let raw = attr.to_raw();
    let ty = tensor_type(attr.r#type()).ok_or_else(|| {
        constant_err(
            what,
            format!("type {} is not a ranked tensor", crate::ir::type_text(attr.r#type())),
        )
    })?;
    let shape = ty
        .static_shape()
        .ok_or_else(|| constant_err(what, "constant with a dynamic shape"))?;
    let dtype = ty
        .dtype
        .ok_or_else(|| constant_err(what, format!("unsupported element type {}", ty.element)))?;
    let n: usize = shape.iter().product();
    unsafe {
        if mlir_sys::mlirAttributeIsADenseElements(raw) {
            let splat = mlir_sys::mlirDenseElementsAttrIsSplat(raw);
            if dtype == DType::I1 {
                let stored = if splat { 1 } else { n };
                let v = (0..stored)
                    .map(|i| mlir_sys::mlirDenseElementsAttrGetBoolValue(raw, i as isize))
                    .collect();
                return Ok(Tensor::I1(array_from(&shape, v, n, what)?));
            }
            let stored = if splat { n.min(1) } else { n };
            let len = stored * dtype.size_bytes();
            let ptr = mlir_sys::mlirDenseElementsAttrGetRawData(raw) as *const u8;
            if len > 0 && ptr.is_null() {
                return Err(constant_err(what, "no data"));
            }
            let bytes = if len == 0 {
                &[][..]
            } else {
                std::slice::from_raw_parts(ptr, len)
            };
            return tensor_from_le_bytes(dtype, &shape, bytes, n, what);
        }
        if mlir_sys::mlirAttributeIsADenseResourceElements(raw) {
            if dtype != DType::I1 {
                if let Some(t) = super::blobs::with_bytes(attr, |b| tensor_from_le_bytes(dtype, &shape, b, n, what)) {
                    return t;
                }
            }
            return resource_to_tensor(attr, dtype, &shape, n, what);
        }
    }
    Err(constant_err(
        what,
        // its type, not the attribute: printing a large constant would make the message as large
        format!(
            "attribute of type {} is not a dense elements attribute",
            super::type_text(attr.r#type())
        ),
    ))
}

/// `dense_resource` blobs have no raw-data accessor in the C API, so they are read element by
/// element with the typed getters (f16/bf16 have none and are reported as unsupported).
unsafe fn resource_to_tensor(
    attr: Attribute,
    dtype: DType,
    shape: &[usize],
    n: usize,
    what: &str,
) -> Result<Tensor, IrError> {
    let raw = attr.to_raw();
    macro_rules! get {
        ($f:ident, $v:ident) => {
            Tensor::$v(array_from(
                shape,
                (0..n).map(|i| unsafe { mlir_sys::$f(raw, i as isize) }).collect(),
                n,
                what,
            )?)
        };
    }
    Ok(match dtype {
        DType::F32 => get!(mlirDenseFloatResourceElementsAttrGetValue, F32),
        DType::F64 => get!(mlirDenseDoubleResourceElementsAttrGetValue, F64),
        DType::I1 => get!(mlirDenseBoolResourceElementsAttrGetValue, I1),
        DType::I8 => get!(mlirDenseInt8ResourceElementsAttrGetValue, I8),
        DType::U8 => get!(mlirDenseUInt8ResourceElementsAttrGetValue, U8),
        DType::I16 => get!(mlirDenseInt16ResourceElementsAttrGetValue, I16),
        DType::U16 => get!(mlirDenseUInt16ResourceElementsAttrGetValue, U16),
        DType::I32 => get!(mlirDenseInt32ResourceElementsAttrGetValue, I32),
        DType::I64 => get!(mlirDenseInt64ResourceElementsAttrGetValue, I64),
        DType::U32 => get!(mlirDenseUInt32ResourceElementsAttrGetValue, U32),
        DType::U64 => get!(mlirDenseUInt64ResourceElementsAttrGetValue, U64),
        DType::F16 | DType::BF16 => {
            return Err(constant_err(
                what,
                format!("dense_resource of {dtype} is not supported"),
            ))
        }
    })
}

fn le_bytes<T: Copy, const W: usize>(a: &ArrayD<T>, f: impl Fn(T) -> [u8; W]) -> Vec<u8> {
    fn write<T, const W: usize>(out: &mut [u8], values: impl Iterator<Item = T>, f: impl Fn(T) -> [u8; W]) {
        out.chunks_exact_mut(W)
            .zip(values)
            .for_each(|(o, x)| o.copy_from_slice(&f(x)));
    }
    let mut out = vec![0u8; a.len() * W];
    // a standard-layout array as a slice: a loop the compiler turns into a plain copy
    match a.as_slice() {
        Some(s) => write(&mut out, s.iter().copied(), f),
        None => write(&mut out, a.iter().copied(), f),
    }
    out
}

/// A `DenseElementsAttr` of 4-bit integers (`i4`, or `ui4` when unsigned) from values held one
/// per byte, as MLIR stores them.
pub fn int4_attribute<'c>(ctx: &'c melior::Context, shape: &[usize], values: &[u8], unsigned: bool) -> Attribute<'c> {
    let shape: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
    unsafe {
        let elem = if unsigned {
            mlir_sys::mlirIntegerTypeUnsignedGet(ctx.to_raw(), 4)
        } else {
            mlir_sys::mlirIntegerTypeGet(ctx.to_raw(), 4)
        };
        let ty = mlir_sys::mlirRankedTensorTypeGet(
            shape.len() as isize,
            shape.as_ptr(),
            elem,
            mlir_sys::mlirAttributeGetNull(),
        );
        Attribute::from_raw(mlir_sys::mlirDenseElementsAttrRawBufferGet(
            ty,
            values.len(),
            values.as_ptr() as *const _,
        ))
    }
}

/// The elements of `t` as one little-endian buffer (i1 as one byte per element, 0 or 1).
pub fn tensor_le_bytes(t: &Tensor) -> Vec<u8> {
    match t {
        Tensor::F32(a) => le_bytes(a, f32::to_le_bytes),
        Tensor::F64(a) => le_bytes(a, f64::to_le_bytes),
        Tensor::F16(a) => le_bytes(a, f16::to_le_bytes),
        Tensor::BF16(a) => le_bytes(a, bf16::to_le_bytes),
        Tensor::I1(a) => a.iter().map(|&b| b as u8).collect(),
        Tensor::I8(a) => le_bytes(a, i8::to_le_bytes),
        Tensor::U8(a) => le_bytes(a, u8::to_le_bytes),
        Tensor::I16(a) => le_bytes(a, i16::to_le_bytes),
        Tensor::U16(a) => le_bytes(a, u16::to_le_bytes),
        Tensor::I32(a) => le_bytes(a, i32::to_le_bytes),
        Tensor::I64(a) => le_bytes(a, i64::to_le_bytes),
        Tensor::U32(a) => le_bytes(a, u32::to_le_bytes),
        Tensor::U64(a) => le_bytes(a, u64::to_le_bytes),
    }
}

/// A tensor of `dtype` and `shape` from its elements as one little-endian buffer (i1: one byte
/// per element); `what` names it in errors.
pub fn tensor_from_le(dtype: DType, shape: &[usize], bytes: &[u8], what: &str) -> Result<Tensor, IrError> {
    let n = crate::tensor::element_count(shape)
        .filter(|n| n.checked_mul(dtype.size_bytes()).is_some())
        .ok_or_else(|| constant_err(what, format!("shape {shape:?} is too large")))?;
    if bytes.len() != n * dtype.size_bytes() {
        return Err(constant_err(
            what,
            format!("{} bytes for {n} elements of {dtype}", bytes.len()),
        ));
    }
    if dtype == DType::I1 {
        return Ok(Tensor::I1(array_from(
            shape,
            bytes.iter().map(|&b| b != 0).collect(),
            n,
            what,
        )?));
    }
    tensor_from_le_bytes(dtype, shape, bytes, n, what)
}

/// Builds a `DenseElementsAttr` holding `t` (one raw buffer; i1 through the bool getter).
pub fn tensor_to_attribute<'c>(ctx: &'c melior::Context, t: &Tensor) -> Attribute<'c> {
    let shape: Vec<i64> = t.shape().iter().map(|&d| d as i64).collect();
    let elem = dtype_to_type(ctx, t.dtype());
    unsafe {
        let ty = mlir_sys::mlirRankedTensorTypeGet(
            shape.len() as isize,
            shape.as_ptr(),
            elem.to_raw(),
            mlir_sys::mlirAttributeGetNull(),
        );
        if let Tensor::I1(a) = t {
            let v: Vec<i32> = a.iter().map(|&b| b as i32).collect();
            return Attribute::from_raw(mlir_sys::mlirDenseElementsAttrBoolGet(ty, v.len() as isize, v.as_ptr()));
        }
        let bytes = tensor_le_bytes(t);
        Attribute::from_raw(mlir_sys::mlirDenseElementsAttrRawBufferGet(
            ty,
            bytes.len(),
            bytes.as_ptr() as *const _,
        ))
    }
}

/// A `DenseElementsAttr` of type `ty` from its raw little-endian bytes, as they are.
pub fn dense_from_raw<'c>(ty: melior::ir::Type<'c>, bytes: &[u8]) -> Attribute<'c> {
    unsafe {
        Attribute::from_raw(mlir_sys::mlirDenseElementsAttrRawBufferGet(
            ty.to_raw(),
            bytes.len(),
            bytes.as_ptr() as *const _,
        ))
    }
}

/// A `DenseF32ArrayAttr` (`array<f32: ...>`).
pub fn dense_f32_array<'c>(ctx: &'c melior::Context, values: &[f32]) -> Attribute<'c> {
    unsafe {
        Attribute::from_raw(mlir_sys::mlirDenseF32ArrayGet(
            ctx.to_raw(),
            values.len() as isize,
            values.as_ptr(),
        ))
    }
}

/// True for an elements attribute (dense, splat or resource): what a constant op holds.
pub fn is_elements(a: Attribute) -> bool {
    unsafe { mlir_sys::mlirAttributeIsAElements(a.to_raw()) }
}

/// The raw little-endian bytes of a non-splat `DenseElementsAttr` or a mapped blob
/// ([`super::blobs`]) of `len` bytes, copied; `None` for splat, other resource or other
/// attributes, whose bytes are not stored expanded.
pub fn dense_raw_bytes(a: Attribute, len: usize) -> Option<Vec<u8>> {
    if let Some(b) = super::blobs::with_bytes(a, |b| (b.len() == len).then(|| b.to_vec())) {
        return b;
    }
    unsafe {
        if !mlir_sys::mlirAttributeIsADenseElements(a.to_raw()) || mlir_sys::mlirDenseElementsAttrIsSplat(a.to_raw()) {
            return None;
        }
        let ptr = mlir_sys::mlirDenseElementsAttrGetRawData(a.to_raw()) as *const u8;
        Some(if len == 0 || ptr.is_null() {
            Vec::new()
        } else {
            std::slice::from_raw_parts(ptr, len).to_vec()
        })
    }
}
