//! `Tensor`: a dynamically typed n-d array, the value that flows between the MLIR constants,
//! the sample data readers and (later) the interpreter.

use half::{bf16, f16};
use ndarray::ArrayD;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Element types quantir reads and writes. Names follow MLIR's spelling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    F32,
    F64,
    F16,
    BF16,
    I1,
    I8,
    U8,
    I16,
    U16,
    I32,
    U32,
    I64,
    U64,
}

impl DType {
    /// The MLIR spelling (`f32`, `ui8`, `i1`, ...).
    pub fn mlir_name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::I1 => "i1",
            DType::I8 => "i8",
            DType::U8 => "ui8",
            DType::I16 => "i16",
            DType::U16 => "ui16",
            DType::I32 => "i32",
            DType::U32 => "ui32",
            DType::I64 => "i64",
            DType::U64 => "ui64",
        }
    }

    /// Bytes one element takes in a packed buffer (i1 counted as one byte).
    pub fn size_bytes(self) -> usize {
        match self {
            DType::I1 | DType::I8 | DType::U8 => 1,
            DType::F16 | DType::BF16 | DType::I16 | DType::U16 => 2,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F64 | DType::I64 | DType::U64 => 8,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64 | DType::F16 | DType::BF16)
    }
}

/// Elements of a tensor of `shape`; None when the count overflows (a corrupt shape in a file).
pub fn element_count(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d))
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.mlir_name())
    }
}

/// A dense tensor of one of the [`DType`]s.
#[derive(Debug, Clone, PartialEq)]
pub enum Tensor {
    F32(ArrayD<f32>),
    F64(ArrayD<f64>),
    F16(ArrayD<f16>),
    BF16(ArrayD<bf16>),
    I1(ArrayD<bool>),
    I8(ArrayD<i8>),
    U8(ArrayD<u8>),
    I16(ArrayD<i16>),
    U16(ArrayD<u16>),
    I32(ArrayD<i32>),
    U32(ArrayD<u32>),
    I64(ArrayD<i64>),
    U64(ArrayD<u64>),
}

/// Applies `$body` to the array inside any variant, binding it to `$a`.
#[macro_export]
macro_rules! with_array {
    ($t:expr, $a:ident => $body:expr) => {
        match $t {
            $crate::tensor::Tensor::F32($a) => $body,
            $crate::tensor::Tensor::F64($a) => $body,
            $crate::tensor::Tensor::F16($a) => $body,
            $crate::tensor::Tensor::BF16($a) => $body,
            $crate::tensor::Tensor::I1($a) => $body,
            $crate::tensor::Tensor::I8($a) => $body,
            $crate::tensor::Tensor::U8($a) => $body,
            $crate::tensor::Tensor::I16($a) => $body,
            $crate::tensor::Tensor::U16($a) => $body,
            $crate::tensor::Tensor::I32($a) => $body,
            $crate::tensor::Tensor::U32($a) => $body,
            $crate::tensor::Tensor::I64($a) => $body,
            $crate::tensor::Tensor::U64($a) => $body,
        }
    };
}

impl Tensor {
    pub fn dtype(&self) -> DType {
        match self {
            Tensor::F32(_) => DType::F32,
            Tensor::F64(_) => DType::F64,
            Tensor::F16(_) => DType::F16,
            Tensor::BF16(_) => DType::BF16,
            Tensor::I1(_) => DType::I1,
            Tensor::I8(_) => DType::I8,
            Tensor::U8(_) => DType::U8,
            Tensor::I16(_) => DType::I16,
            Tensor::U16(_) => DType::U16,
            Tensor::I32(_) => DType::I32,
            Tensor::U32(_) => DType::U32,
            Tensor::I64(_) => DType::I64,
            Tensor::U64(_) => DType::U64,
        }
    }

    pub fn shape(&self) -> &[usize] {
        with_array!(self, a => a.shape())
    }

    /// Zeros (false for i1) of `dtype` and `shape`.
    pub fn zeros(dtype: DType, shape: &[usize]) -> Tensor {
        use ndarray::ArrayD as A;
        let s = ndarray::IxDyn(shape);
        match dtype {
            DType::F32 => Tensor::F32(A::zeros(s)),
            DType::F64 => Tensor::F64(A::zeros(s)),
            DType::F16 => Tensor::F16(A::from_elem(s, half::f16::ZERO)),
            DType::BF16 => Tensor::BF16(A::from_elem(s, half::bf16::ZERO)),
            DType::I1 => Tensor::I1(A::from_elem(s, false)),
            DType::I8 => Tensor::I8(A::zeros(s)),
            DType::U8 => Tensor::U8(A::zeros(s)),
            DType::I16 => Tensor::I16(A::zeros(s)),
            DType::U16 => Tensor::U16(A::zeros(s)),
            DType::I32 => Tensor::I32(A::zeros(s)),
            DType::U32 => Tensor::U32(A::zeros(s)),
            DType::I64 => Tensor::I64(A::zeros(s)),
            DType::U64 => Tensor::U64(A::zeros(s)),
        }
    }

    pub fn len(&self) -> usize {
        with_array!(self, a => a.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Size in bytes when packed (i1 as one byte per element).
    pub fn size_bytes(&self) -> usize {
        self.len() * self.dtype().size_bytes()
    }

    /// The f32 array, if this is an f32 tensor.
    pub fn as_f32(&self) -> Option<&ArrayD<f32>> {
        match self {
            Tensor::F32(a) => Some(a),
            _ => None,
        }
    }

    /// Bitwise equality: NaNs with the same payload compare equal, +0 and -0 differ.
    pub fn bit_eq(&self, other: &Tensor) -> bool {
        fn bits<T: Copy, U: PartialEq>(a: &ArrayD<T>, b: &ArrayD<T>, f: impl Fn(T) -> U) -> bool {
            a.shape() == b.shape() && a.iter().zip(b.iter()).all(|(x, y)| f(*x) == f(*y))
        }
        match (self, other) {
            (Tensor::F32(a), Tensor::F32(b)) => bits(a, b, f32::to_bits),
            (Tensor::F64(a), Tensor::F64(b)) => bits(a, b, f64::to_bits),
            (Tensor::F16(a), Tensor::F16(b)) => bits(a, b, f16::to_bits),
            (Tensor::BF16(a), Tensor::BF16(b)) => bits(a, b, bf16::to_bits),
            _ => self == other,
        }
    }
}

macro_rules! impl_from_array {
    ($($t:ty => $v:ident),*) => {$(
        impl From<ArrayD<$t>> for Tensor {
            fn from(a: ArrayD<$t>) -> Self { Tensor::$v(a) }
        }
    )*};
}
impl_from_array!(f32 => F32, f64 => F64, f16 => F16, bf16 => BF16, bool => I1, i8 => I8, u8 => U8,
    i16 => I16, u16 => U16, i32 => I32, u32 => U32, i64 => I64, u64 => U64);
