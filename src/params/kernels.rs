//! Quantize / dequantize / fake-quant over ndarray, per-tensor and per-axis, and f32 → f16/bf16.
//!
//! The inner loops are branch-free so that they vectorise on baseline x86-64 (SSE2, no
//! `roundps`): values are clamped to the storage range in float first (for integer bounds,
//! round∘clamp = clamp∘round), then rounded with the 1.5·2²³ trick, which rounds half to even
//! under the default FP environment for |v| ≤ 2²².

use super::{ParamsError, QuantParams, StorageType};
use crate::tensor::Tensor;
use half::{bf16, f16};
use ndarray::{ArrayD, ArrayViewD, IxDyn};

/// How a real value divided by the scale is rounded to an integer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Rounding {
    /// ONNX QuantizeLinear, StableHLO, PyTorch.
    #[default]
    HalfEven,
    /// TFLite / gemmlowp (`std::round`).
    HalfAway,
}

const MAGIC: f32 = 12_582_912.0; // 1.5 * 2^23

#[inline(always)]
fn rne(v: f32) -> f32 {
    (v + MAGIC) - MAGIC
}

#[inline(always)]
fn round(v: f32, r: Rounding) -> f32 {
    let e = rne(v);
    match r {
        Rounding::HalfEven => e,
        Rounding::HalfAway => {
            // a tie rounded toward zero by `rne` moves one step away from zero
            let d = v - e;
            let away = if v >= 0.0 { d == 0.5 } else { d == -0.5 };
            e + if away { v.signum() } else { 0.0 }
        }
    }
}

/// An integer element quantized values are stored in.
pub trait StorageElem: Copy + Default + Send + Sync + 'static {
    fn from_f32(v: f32) -> Self;
    fn to_f32(self) -> f32;
}

macro_rules! storage_elem {
    ($($t:ty),*) => {$(
        impl StorageElem for $t {
            #[inline(always)]
            fn from_f32(v: f32) -> Self { v as $t }
            #[inline(always)]
            fn to_f32(self) -> f32 { self as f32 }
        }
    )*};
}
storage_elem!(i8, u8, i16, u16, i32);

/// Quantizes a contiguous slice with one scale and zero point:
/// q = clamp(round(x / scale) + zp, qmin, qmax). NaN maps to the zero point.
///
/// Bounds beyond ±2²² (int32 storage) are exact only for |x / scale| ≤ 2²²; int32 biases go
/// through [`super::quantize_bias`], which works in f64.
pub fn quantize_slice<T: StorageElem>(
    x: &[f32],
    out: &mut [T],
    scale: f32,
    zp: i64,
    qmin: i64,
    qmax: i64,
    r: Rounding,
) {
    let lo = (qmin - zp) as f32;
    let hi = (qmax - zp) as f32;
    let zpf = zp as f32;
    for (o, &v) in out.iter_mut().zip(x) {
        let t = v / scale;
        let t = if t.is_nan() { 0.0 } else { t.max(lo).min(hi) };
        *o = T::from_f32(round(t, r) + zpf);
    }
}

/// Dequantizes a contiguous slice: x = (q - zp) * scale, in f32 as ONNX DequantizeLinear.
pub fn dequantize_slice<T: StorageElem>(q: &[T], out: &mut [f32], scale: f32, zp: i64) {
    let zpf = zp as f32;
    for (o, &v) in out.iter_mut().zip(q) {
        *o = (v.to_f32() - zpf) * scale;
    }
}

/// An array of `shape` over `v`, whose length is the shape's product by construction.
fn from_vec<T>(shape: &[usize], v: Vec<T>) -> ArrayD<T> {
    ArrayD::from_shape_vec(IxDyn(shape), v).expect("buffer length equals the shape's product")
}

/// Runs `f(channel, input_chunk, output_chunk)` over the contiguous runs of a standard-layout
/// array split along `axis` (per-tensor: one run, channel 0).
fn for_each_channel_run<A, B>(
    shape: &[usize],
    axis: Option<usize>,
    input: &[A],
    output: &mut [B],
    mut f: impl FnMut(usize, &[A], &mut [B]),
) {
    match axis {
        None => f(0, input, output),
        Some(a) => {
            let c = shape[a];
            let inner: usize = shape[a + 1..].iter().product();
            if inner == 0 || c == 0 {
                return;
            }
            for (k, (i, o)) in input.chunks(inner).zip(output.chunks_mut(inner)).enumerate() {
                f(k % c, i, o);
            }
        }
    }
}

fn check_axis(p: &QuantParams, shape: &[usize]) -> Result<(), ParamsError> {
    if let Some(a) = p.axis {
        if a >= shape.len() || shape[a] != p.scale.len() {
            return Err(ParamsError::Invalid(format!(
                "per-axis parameters with {} channels on axis {a} do not fit a tensor of shape {shape:?}",
                p.scale.len()
            )));
        }
    }
    Ok(())
}

fn quantize_as<T: StorageElem>(x: &ArrayViewD<f32>, p: &QuantParams, r: Rounding) -> ArrayD<T> {
    let x = x.as_standard_layout();
    let input = x.as_slice().unwrap_or(&[]);
    let mut out = vec![T::default(); input.len()];
    for_each_channel_run(x.shape(), p.axis, input, &mut out, |c, i, o| {
        quantize_slice(i, o, p.scale[c] as f32, p.zero_point[c], p.qmin, p.qmax, r)
    });
    from_vec(x.shape(), out)
}

/// Quantizes `x` with `p` (per-tensor or per-axis) into the storage type's container
/// (int4 in i8, uint4 in u8).
pub fn quantize(x: &ArrayViewD<f32>, p: &QuantParams, r: Rounding) -> Result<Tensor, ParamsError> {
    check_axis(p, x.shape())?;
    Ok(match p.dtype {
        StorageType::Int4 | StorageType::Int8 => Tensor::I8(quantize_as(x, p, r)),
        StorageType::Uint4 | StorageType::Uint8 => Tensor::U8(quantize_as(x, p, r)),
        StorageType::Int16 => Tensor::I16(quantize_as(x, p, r)),
        StorageType::Uint16 => Tensor::U16(quantize_as(x, p, r)),
        StorageType::Int32 => Tensor::I32(quantize_as(x, p, r)),
    })
}

fn dequantize_as<T: StorageElem>(q: &ArrayD<T>, p: &QuantParams) -> ArrayD<f32> {
    let q = q.as_standard_layout();
    let input = q.as_slice().unwrap_or(&[]);
    let mut out = vec![0f32; input.len()];
    for_each_channel_run(q.shape(), p.axis, input, &mut out, |c, i, o| {
        dequantize_slice(i, o, p.scale[c] as f32, p.zero_point[c])
    });
    from_vec(q.shape(), out)
}

/// Dequantizes integer storage with `p`.
pub fn dequantize(q: &Tensor, p: &QuantParams) -> Result<ArrayD<f32>, ParamsError> {
    check_axis(p, q.shape())?;
    Ok(match q {
        Tensor::I8(a) => dequantize_as(a, p),
        Tensor::U8(a) => dequantize_as(a, p),
        Tensor::I16(a) => dequantize_as(a, p),
        Tensor::U16(a) => dequantize_as(a, p),
        Tensor::I32(a) => dequantize_as(a, p),
        other => {
            return Err(ParamsError::Invalid(format!(
                "cannot dequantize a {} tensor",
                other.dtype()
            )))
        }
    })
}

/// dequantize(quantize(x)): the values a quantized runtime computes with.
pub fn fake_quant(x: &ArrayViewD<f32>, p: &QuantParams, r: Rounding) -> Result<ArrayD<f32>, ParamsError> {
    check_axis(p, x.shape())?;
    let x = x.as_standard_layout();
    let input = x.as_slice().unwrap_or(&[]);
    let mut out = vec![0f32; input.len()];
    let mut buf = Vec::<i32>::new();
    for_each_channel_run(x.shape(), p.axis, input, &mut out, |c, i, o| {
        buf.resize(i.len(), 0);
        let (s, z) = (p.scale[c] as f32, p.zero_point[c]);
        quantize_slice(i, &mut buf, s, z, p.qmin, p.qmax, r);
        dequantize_slice(&buf, o, s, z);
    });
    Ok(from_vec(x.shape(), out))
}

/// f32 → f16 (round to nearest even, overflow to ±inf) with `half`'s vectorised conversion.
pub fn to_f16(x: &ArrayViewD<f32>) -> ArrayD<f16> {
    use half::slice::HalfFloatSliceExt;
    let x = x.as_standard_layout();
    let mut out = vec![f16::ZERO; x.len()];
    out.convert_from_f32_slice(x.as_slice().unwrap_or(&[]));
    from_vec(x.shape(), out)
}

/// f32 → bf16 (round to nearest even).
pub fn to_bf16(x: &ArrayViewD<f32>) -> ArrayD<bf16> {
    use half::slice::HalfFloatSliceExt;
    let x = x.as_standard_layout();
    let mut out = vec![bf16::ZERO; x.len()];
    out.convert_from_f32_slice(x.as_slice().unwrap_or(&[]));
    from_vec(x.shape(), out)
}
