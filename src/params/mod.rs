//! quant-params: from a calibrated range to the integers a runtime uses.
//!
//! Three schemes, each reproducing its target's own tool bit for bit
//! (`notes/reference-algorithms.md` §2):
//! - [`Scheme::Mlir`]: MLIR/TF `fakeQuantAttrsToType` — f64, range shifted (not widened) to
//!   contain 0, smaller-error zero-point candidate, ties away from zero, degenerate range →
//!   (1.0, qmin);
//! - [`Scheme::Onnx`]: onnxruntime `compute_scale_zp` — range widened to contain 0 in f32,
//!   scale in f64 stored as f32, ties to even, symmetric zero point round((qmin+qmax)/2);
//! - [`Scheme::Torch`]: PyTorch `_calculate_qparams` — f32 throughout, eps floor on the scale,
//!   symmetric scale absmax / ((qmax - qmin) / 2), ties to even, zero point clamped.

mod bias;
mod cholesky;
mod gemm_f64;
pub mod gptq;
mod kernels;
pub mod saturation;
mod schemes;
mod storage;

pub use bias::{quantize_bias, BiasOverflow, BiasOverflowPolicy, QuantizedBias};
pub use kernels::{
    dequantize, dequantize_slice, fake_quant, quantize, quantize_slice, to_bf16, to_f16, Rounding, StorageElem,
};
pub use storage::StorageType;

use serde::{Deserialize, Serialize};

/// Which target's parameter algorithm to reproduce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scheme {
    Mlir,
    Onnx,
    Torch,
}

impl std::str::FromStr for Scheme {
    type Err = ParamsError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "mlir" | "tf" => Ok(Scheme::Mlir),
            "onnx" | "ort" => Ok(Scheme::Onnx),
            "torch" | "pytorch" => Ok(Scheme::Torch),
            _ => Err(ParamsError::Unknown {
                what: "scheme",
                value: s.into(),
                expected: "mlir, onnx, torch",
            }),
        }
    }
}

impl std::fmt::Display for Scheme {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Scheme::Mlir => "mlir",
            Scheme::Onnx => "onnx",
            Scheme::Torch => "torch",
        })
    }
}

/// How a range is turned into parameters, beyond the scheme and storage type.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct RangeOptions {
    /// Symmetric range [-absmax, absmax]; zero point at the middle of the storage range.
    pub symmetric: bool,
    /// Drop the lowest storage value (int8 → [-127, 127]).
    pub narrow_range: bool,
    /// Use 7 bits of an 8-bit type (onnxruntime and PyTorch, for CPUs without VNNI).
    pub reduce_range: bool,
    /// onnxruntime's `MinimumRealRange`: widen max so that max - min ≥ this.
    pub min_real_range: Option<f32>,
    /// PyTorch's eps floor on the scale (default f32::EPSILON).
    pub eps: Option<f32>,
}

/// Scale(s) and zero point(s) of a quantized tensor, and how they were made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuantParams {
    pub scheme: Scheme,
    pub dtype: StorageType,
    /// One scale per channel (one element when per-tensor). ONNX and PyTorch scales are f32
    /// values held exactly in an f64.
    pub scale: Vec<f64>,
    pub zero_point: Vec<i64>,
    /// The channel axis when per-axis.
    pub axis: Option<usize>,
    pub qmin: i64,
    pub qmax: i64,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ParamsError {
    #[error("unknown {what} '{value}' (expected one of: {expected})")]
    Unknown {
        what: &'static str,
        value: String,
        expected: &'static str,
    },
    #[error("{what} must be finite, got {value}")]
    NonFinite { what: String, value: f64 },
    #[error("min {min} is greater than max {max}{}", channel_suffix(*channel))]
    MinAboveMax { min: f64, max: f64, channel: Option<usize> },
    #[error("the {scheme} scheme does not define {what}")]
    Unsupported { scheme: Scheme, what: String },
    #[error("{mins} minimums but {maxs} maximums")]
    LengthMismatch { mins: usize, maxs: usize },
    #[error("scale {scale} is not finite and positive{}", channel_suffix(*channel))]
    BadScale { scale: f64, channel: Option<usize> },
    #[error("zero point {zero_point} is outside [{qmin}, {qmax}]{}", channel_suffix(*channel))]
    ZeroPointOutOfRange {
        zero_point: i64,
        qmin: i64,
        qmax: i64,
        channel: Option<usize>,
    },
    #[error("{0}")]
    Invalid(String),
}

fn channel_suffix(c: Option<usize>) -> String {
    c.map(|c| format!(" (channel {c})")).unwrap_or_default()
}

impl QuantParams {
    pub fn is_per_axis(&self) -> bool {
        self.axis.is_some()
    }

    /// Checks what MLIR's verifier does not: every scale finite and > 0, every zero point in
    /// [qmin, qmax], [qmin, qmax] inside the storage type, one zero point per scale.
    pub fn validate(&self) -> Result<(), ParamsError> {
        let (lo, hi) = self.dtype.full_range();
        if self.qmin < lo || self.qmax > hi || self.qmin >= self.qmax {
            return Err(ParamsError::Invalid(format!(
                "storage range [{}, {}] is not inside {} [{lo}, {hi}]",
                self.qmin, self.qmax, self.dtype
            )));
        }
        if self.scale.len() != self.zero_point.len() || self.scale.is_empty() {
            return Err(ParamsError::Invalid(format!(
                "{} scales but {} zero points",
                self.scale.len(),
                self.zero_point.len()
            )));
        }
        if self.axis.is_none() && self.scale.len() != 1 {
            return Err(ParamsError::Invalid("per-tensor parameters with several scales".into()));
        }
        let ch = |i| self.axis.map(|_| i);
        for (i, (&s, &z)) in self.scale.iter().zip(&self.zero_point).enumerate() {
            if !(s.is_finite() && s > 0.0) {
                return Err(ParamsError::BadScale {
                    scale: s,
                    channel: ch(i),
                });
            }
            if z < self.qmin || z > self.qmax {
                return Err(ParamsError::ZeroPointOutOfRange {
                    zero_point: z,
                    qmin: self.qmin,
                    qmax: self.qmax,
                    channel: ch(i),
                });
            }
        }
        Ok(())
    }

    /// The MLIR quant type: `!quant.uniform<i8:f32, 0.0235:-128>`, or per-axis
    /// `!quant.uniform<i8<-127:127>:f32:3, {0.1:0,0.2:0}>`. The storage bounds are written
    /// only when narrower than the storage type.
    pub fn mlir_type(&self) -> String {
        let (lo, hi) = self.dtype.full_range();
        let mut storage = self.dtype.mlir_storage().to_string();
        if (self.qmin, self.qmax) != (lo, hi) {
            storage = format!("{storage}<{}:{}>", self.qmin, self.qmax);
        }
        let pair = |s: f64, z: i64| format!("{}:{z}", mlir_float(s));
        match self.axis {
            None => format!(
                "!quant.uniform<{storage}:f32, {}>",
                pair(self.scale[0], self.zero_point[0])
            ),
            Some(a) => {
                let v: Vec<String> = self
                    .scale
                    .iter()
                    .zip(&self.zero_point)
                    .map(|(s, z)| pair(*s, *z))
                    .collect();
                format!("!quant.uniform<{storage}:f32:{a}, {{{}}}>", v.join(","))
            }
        }
    }
}

/// Shortest round-trip spelling of `x` that MLIR's lexer reads as a float (`1.0e0`, not `1e0`).
fn mlir_float(x: f64) -> String {
    let s = format!("{x:e}");
    match s.split_once('e') {
        Some((m, e)) if !m.contains('.') => format!("{m}.0e{e}"),
        _ => s,
    }
}

fn check_range(min: f64, max: f64, channel: Option<usize>) -> Result<(), ParamsError> {
    for (what, v) in [("min", min), ("max", max)] {
        if !v.is_finite() {
            let what = match channel {
                Some(c) => format!("{what} of channel {c}"),
                None => what.to_string(),
            };
            return Err(ParamsError::NonFinite { what, value: v });
        }
    }
    if min > max {
        return Err(ParamsError::MinAboveMax { min, max, channel });
    }
    Ok(())
}

/// Per-tensor parameters for the range [min, max].
pub fn compute(
    scheme: Scheme,
    dtype: StorageType,
    min: f64,
    max: f64,
    opts: &RangeOptions,
) -> Result<QuantParams, ParamsError> {
    check_range(min, max, None)?;
    let (qmin, qmax) = schemes::storage_bounds(scheme, dtype, opts)?;
    let (s, z) = schemes::scale_zero_point(scheme, dtype, min, max, qmin, qmax, opts)?;
    let p = QuantParams {
        scheme,
        dtype,
        scale: vec![s],
        zero_point: vec![z],
        axis: None,
        qmin,
        qmax,
    };
    p.validate()?;
    Ok(p)
}

/// Per-axis parameters: channel c gets the parameters of [mins[c], maxs[c]].
pub fn compute_per_axis(
    scheme: Scheme,
    dtype: StorageType,
    mins: &[f64],
    maxs: &[f64],
    axis: usize,
    opts: &RangeOptions,
) -> Result<QuantParams, ParamsError> {
    if mins.len() != maxs.len() || mins.is_empty() {
        return Err(ParamsError::LengthMismatch {
            mins: mins.len(),
            maxs: maxs.len(),
        });
    }
    let (qmin, qmax) = schemes::storage_bounds(scheme, dtype, opts)?;
    let mut scale = Vec::with_capacity(mins.len());
    let mut zero_point = Vec::with_capacity(mins.len());
    for (c, (&lo, &hi)) in mins.iter().zip(maxs).enumerate() {
        check_range(lo, hi, Some(c))?;
        let (s, z) = schemes::scale_zero_point(scheme, dtype, lo, hi, qmin, qmax, opts).map_err(|e| match e {
            ParamsError::BadScale { scale, .. } => ParamsError::BadScale {
                scale,
                channel: Some(c),
            },
            e => e,
        })?;
        scale.push(s);
        zero_point.push(z);
    }
    let p = QuantParams {
        scheme,
        dtype,
        scale,
        zero_point,
        axis: Some(axis),
        qmin,
        qmax,
    };
    p.validate()?;
    Ok(p)
}

/// The document `quantir params --json` prints: scalars for per-tensor, arrays for per-axis.
#[derive(Debug, Serialize)]
pub struct ParamsJson {
    pub scheme: Scheme,
    pub dtype: StorageType,
    pub scale: serde_json::Value,
    pub zero_point: serde_json::Value,
    pub qmin: i64,
    pub qmax: i64,
}

impl From<&QuantParams> for ParamsJson {
    fn from(p: &QuantParams) -> Self {
        let (scale, zero_point) = if p.axis.is_some() {
            (serde_json::json!(p.scale), serde_json::json!(p.zero_point))
        } else {
            (serde_json::json!(p.scale[0]), serde_json::json!(p.zero_point[0]))
        };
        ParamsJson {
            scheme: p.scheme,
            dtype: p.dtype,
            scale,
            zero_point,
            qmin: p.qmin,
            qmax: p.qmax,
        }
    }
}
