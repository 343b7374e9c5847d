//! int32 biases: scale = input scale × weight scale (per channel when the weight is), zero
//! point 0, with overflow detection.

use super::ParamsError;
use serde::{Deserialize, Serialize};

/// What to do with a bias value that does not fit in int32 at scale s_in·s_w.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BiasOverflowPolicy {
    /// Saturate to the int32 range (and report it).
    #[default]
    Clip,
    /// Enlarge that channel's weight scale just enough for the bias to fit, as onnxruntime's
    /// newer quantizer does; the caller re-quantizes the weight with the returned scales.
    EnlargeWeightScale,
}

/// One channel whose bias did not fit: |bias / scale| was `factor` times i32::MAX.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BiasOverflow {
    pub channel: usize,
    pub factor: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuantizedBias {
    pub values: Vec<i32>,
    /// Bias scale per channel (s_in·s_w).
    pub scale: Vec<f64>,
    /// Weight scale per channel after the policy (unchanged unless enlarged).
    pub weight_scale: Vec<f64>,
    pub overflows: Vec<BiasOverflow>,
}

/// Quantizes `bias` to int32 with scale `input_scale * weight_scale[c]` (ties to even, in f64).
/// `weight_scale` has one element (per-tensor weight) or one per bias element.
pub fn quantize_bias(
    bias: &[f32],
    input_scale: f64,
    weight_scale: &[f64],
    policy: BiasOverflowPolicy,
) -> Result<QuantizedBias, ParamsError> {
    if weight_scale.len() != 1 && weight_scale.len() != bias.len() {
        return Err(ParamsError::Invalid(format!(
            "{} weight scales for a bias of {} elements",
            weight_scale.len(),
            bias.len()
        )));
    }
    if !(input_scale.is_finite() && input_scale > 0.0) {
        return Err(ParamsError::BadScale {
            scale: input_scale,
            channel: None,
        });
    }
    let limit = i32::MAX as f64;
    let mut out = QuantizedBias {
        values: Vec::with_capacity(bias.len()),
        scale: vec![],
        weight_scale: vec![],
        overflows: vec![],
    };
    for (c, &b) in bias.iter().enumerate() {
        if !b.is_finite() {
            return Err(ParamsError::NonFinite {
                what: format!("bias element {c}"),
                value: b as f64,
            });
        }
        let mut ws = weight_scale[if weight_scale.len() == 1 { 0 } else { c }];
        if !(ws.is_finite() && ws > 0.0) {
            return Err(ParamsError::BadScale {
                scale: ws,
                channel: Some(c),
            });
        }
        let mut s = input_scale * ws;
        let q = (b as f64 / s).round_ties_even();
        if q.abs() > limit {
            let factor = q.abs() / limit;
            out.overflows.push(BiasOverflow { channel: c, factor });
            if policy == BiasOverflowPolicy::EnlargeWeightScale {
                // the smallest weight scale (to f64 precision) at which the bias fits
                ws *= factor * (1.0 + 1e-9);
                s = input_scale * ws;
            }
        }
        let q = (b as f64 / s).round_ties_even().clamp(i32::MIN as f64, limit);
        out.values.push(q as i32);
        out.scale.push(s);
        out.weight_scale.push(ws);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_channel_values_and_overflow() {
        // hand computation: 0.5 / (0.1 * 0.02) = 250; -0.3 / (0.1 * 0.03) = -100
        let q = quantize_bias(&[0.5, -0.3], 0.1, &[0.02, 0.03], BiasOverflowPolicy::Clip).unwrap();
        assert_eq!(q.values, vec![250, -100]);
        assert!(q.overflows.is_empty());
        // 1e3 / (1e-4 * 1e-6) = 1e13 = 4656.6 × i32::MAX
        let q = quantize_bias(&[1.0e3, 1.0], 1e-4, &[1e-6], BiasOverflowPolicy::Clip).unwrap();
        assert_eq!(q.values[0], i32::MAX);
        assert_eq!(q.overflows.len(), 1);
        assert_eq!(q.overflows[0].channel, 0);
        assert!((q.overflows[0].factor - 1e13 / i32::MAX as f64).abs() < 1e-6);
        let q = quantize_bias(&[1.0e3, 1.0], 1e-4, &[1e-6], BiasOverflowPolicy::EnlargeWeightScale).unwrap();
        assert!(q.values[0] < i32::MAX && q.values[0] > i32::MAX - 100);
        assert!(q.weight_scale[0] > 1e-6 && q.weight_scale[1] == 1e-6);
    }
}
