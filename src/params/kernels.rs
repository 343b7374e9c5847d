//! Quantize / dequantize / fake-quant over ndarray, per-tensor and per-axis, and f32 → f16/bf16.
//!
//! The inner loops are branch-free so that they vectorise on baseline x86-64 (SSE2, no
//! `roundps`) and, chosen at run time, AVX2: values are clamped to the storage range in float
//! first (for integer bounds, round∘clamp = clamp∘round), then rounded with the 1.5·2²³ trick,
//! which rounds half to even under the default FP environment for |v| ≤ 2²², and the integer
//! is read from the bits of `v + 1.5·2²³` (Rust's saturating `as i32` does not vectorise and
//! costs 4× here).

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

/// The integer value of a float that holds an exact integer with |e| ≤ 2²².
#[inline(always)]
fn exact_int(e: f32) -> i32 {
    (e + MAGIC).to_bits() as i32 - MAGIC.to_bits() as i32
}

/// Rounds to the nearest integer; ties to even, or away from zero when `AWAY`. A const
/// parameter rather than a runtime mode so that each loop compiles without a branch.
#[inline(always)]
fn round<const AWAY: bool>(v: f32) -> f32 {
    let e = rne(v);
    if AWAY {
        // a tie rounded toward zero by `rne` moves one step away from zero
        let d = v - e;
        let away = if v >= 0.0 { d == 0.5 } else { d == -0.5 };
        e + if away { v.signum() } else { 0.0 }
    } else {
        e
    }
}

/// An integer element quantized values are stored in.
pub trait StorageElem: Copy + Default + Send + Sync + 'static {
    /// From an i32 already inside the storage range.
    fn from_i32(v: i32) -> Self;
    fn to_f32(self) -> f32;
}

macro_rules! storage_elem {
    ($($t:ty),*) => {$(
        impl StorageElem for $t {
            #[inline(always)]
            fn from_i32(v: i32) -> Self { v as $t }
            #[inline(always)]
            fn to_f32(self) -> f32 { self as f32 }
        }
    )*};
}
storage_elem!(i8, u8, i16, u16, i32);

/// Runs `$body` compiled for AVX2 when the CPU has it, else for the baseline target. The
/// arithmetic is IEEE either way, so both paths give identical results.
macro_rules! dispatch_avx2 {
    ($name:ident, fn($($arg:ident: $ty:ty),*) $body:block) => {{
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2")]
        unsafe fn $name<T: StorageElem>($($arg: $ty),*) $body
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2 (checked just above).
            return unsafe { $name($($arg),*) };
        }
        $body
    }};
}

/// Quantizes a contiguous slice with one scale and zero point:
/// q = clamp(round(x / scale) + zp, qmin, qmax). NaN maps to the zero point.
///
/// Exact for |x / scale| ≤ 2²²; int32 biases go through [`super::quantize_bias`] (f64).
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
    let zp = zp as i32;
    #[inline(always)]
    fn body<T: StorageElem, const AWAY: bool>(x: &[f32], out: &mut [T], scale: f32, lo: f32, hi: f32, zp: i32) {
        for (o, &v) in out.iter_mut().zip(x) {
            let t = v / scale;
            let t = if t.is_nan() { 0.0 } else { t }; // NaN → the zero point
            let t = if t < lo {
                lo
            } else if t > hi {
                hi
            } else {
                t
            };
            *o = T::from_i32(exact_int(round::<AWAY>(t)) + zp);
        }
    }
    dispatch_avx2!(quantize_avx2, fn(x: &[f32], out: &mut [T], scale: f32, lo: f32, hi: f32, zp: i32, r: Rounding) {
        match r {
            Rounding::HalfEven => body::<T, false>(x, out, scale, lo, hi, zp),
            Rounding::HalfAway => body::<T, true>(x, out, scale, lo, hi, zp),
        }
    })
}

/// Quantizes a contiguous slice whose elements each have their own parameters (a row of a
/// per-axis tensor whose channel axis is innermost): `scale`, `lo`, `hi`, `zp` are as long as `x`.
fn quantize_slice_params<T: StorageElem>(
    x: &[f32],
    out: &mut [T],
    scale: &[f32],
    lo: &[f32],
    hi: &[f32],
    zp: &[i32],
    r: Rounding,
) {
    #[inline(always)]
    fn body<T: StorageElem, const AWAY: bool>(
        x: &[f32],
        out: &mut [T],
        scale: &[f32],
        lo: &[f32],
        hi: &[f32],
        zp: &[i32],
    ) {
        let params = scale.iter().zip(lo).zip(hi).zip(zp);
        for ((o, &v), (((&s, &l), &h), &z)) in out.iter_mut().zip(x).zip(params) {
            let t = v / s;
            let t = if t.is_nan() { 0.0 } else { t };
            let t = if t < l {
                l
            } else if t > h {
                h
            } else {
                t
            };
            *o = T::from_i32(exact_int(round::<AWAY>(t)) + z);
        }
    }
    dispatch_avx2!(quantize_params_avx2, fn(x: &[f32], out: &mut [T], scale: &[f32], lo: &[f32], hi: &[f32], zp: &[i32], r: Rounding) {
        match r {
            Rounding::HalfEven => body::<T, false>(x, out, scale, lo, hi, zp),
            Rounding::HalfAway => body::<T, true>(x, out, scale, lo, hi, zp),
        }
    })
}

/// Dequantizes a contiguous slice: x = (q - zp) * scale, in f32 as ONNX DequantizeLinear.
pub fn dequantize_slice<T: StorageElem>(q: &[T], out: &mut [f32], scale: f32, zp: i64) {
    let zp = zp as f32;
    dispatch_avx2!(dequantize_avx2, fn(q: &[T], out: &mut [f32], scale: f32, zp: f32) {
        for (o, &v) in out.iter_mut().zip(q) {
            *o = (v.to_f32() - zp) * scale;
        }
    })
}

fn dequantize_slice_params<T: StorageElem>(q: &[T], out: &mut [f32], scale: &[f32], zp: &[f32]) {
    dispatch_avx2!(dequantize_params_avx2, fn(q: &[T], out: &mut [f32], scale: &[f32], zp: &[f32]) {
        for ((o, &v), (&s, &z)) in out.iter_mut().zip(q).zip(scale.iter().zip(zp)) {
            *o = (v.to_f32() - z) * s;
        }
    })
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

/// Channel runs shorter than this are handled as rows with per-element parameters.
const SHORT_RUN: usize = 32;

/// Per-element parameter rows for a per-axis tensor whose runs are short: one period of
/// `channels × inner` elements.
fn param_rows(p: &QuantParams, inner: usize) -> (Vec<f32>, Vec<f32>, Vec<f32>, Vec<i32>) {
    let mut s = Vec::new();
    let (mut lo, mut hi, mut z) = (Vec::new(), Vec::new(), Vec::new());
    for (sc, &zp) in p.scale.iter().zip(&p.zero_point) {
        for _ in 0..inner {
            s.push(*sc as f32);
            lo.push((p.qmin - zp) as f32);
            hi.push((p.qmax - zp) as f32);
            z.push(zp as i32);
        }
    }
    (s, lo, hi, z)
}

fn inner_len(shape: &[usize], axis: usize) -> usize {
    shape[axis + 1..].iter().product()
}

fn quantize_as<T: StorageElem>(x: &ArrayViewD<f32>, p: &QuantParams, r: Rounding) -> ArrayD<T> {
    let x = x.as_standard_layout();
    let input = x.as_slice().unwrap_or(&[]);
    let mut out = vec![T::default(); input.len()];
    match p.axis {
        Some(a) if inner_len(x.shape(), a) < SHORT_RUN => {
            let (s, lo, hi, z) = param_rows(p, inner_len(x.shape(), a));
            for (i, o) in input.chunks(s.len()).zip(out.chunks_mut(s.len())) {
                quantize_slice_params(i, o, &s, &lo, &hi, &z, r);
            }
        }
        _ => for_each_channel_run(x.shape(), p.axis, input, &mut out, |c, i, o| {
            quantize_slice(i, o, p.scale[c] as f32, p.zero_point[c], p.qmin, p.qmax, r)
        }),
    }
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
    match p.axis {
        Some(a) if inner_len(q.shape(), a) < SHORT_RUN => {
            let (s, _, _, z) = param_rows(p, inner_len(q.shape(), a));
            let z: Vec<f32> = z.iter().map(|&v| v as f32).collect();
            for (i, o) in input.chunks(s.len()).zip(out.chunks_mut(s.len())) {
                dequantize_slice_params(i, o, &s, &z);
            }
        }
        _ => for_each_channel_run(q.shape(), p.axis, input, &mut out, |c, i, o| {
            dequantize_slice(i, o, p.scale[c] as f32, p.zero_point[c])
        }),
    }
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
    dequantize(&quantize(x, p, r)?, p)
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
