//! int32 biases: scale = input scale × weight scale (per channel when the weight is), zero
//! point 0, with overflow detection.

use super::ParamsError;
use serde::{Deserialize, Serialize};

/// What to do with a bias value that does not fit in int32 at scale s_in·s_w.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BiasOverflowPolicy {
    /// Saturate to the int32 range (and report it): the bias is then wrong by the excess.
    Clip,
    /// Enlarge that channel's weight scale just enough for the bias to fit, as onnxruntime's
    /// newer quantizer does; the caller re-quantizes the weight with the returned scales. The
    /// default: the bias stays exact and only that channel's weights get coarser.
    #[default]
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

/// Quantizes `bias` to int32 with scale `input_scale[c] * weight_scale[c]` (ties to even, in
/// f64). Each of `input_scale` and `weight_scale` has one element (per tensor) or one per bias
/// element (an input quantized per channel feeding a depthwise convolution, channel `c`'s
/// input scale given for output channel `c`; a per-channel weight).
pub fn quantize_bias(
    bias: &[f32],
    input_scale: &[f64],
    weight_scale: &[f64],
    policy: BiasOverflowPolicy,
) -> Result<QuantizedBias, ParamsError> {
    for (what, s) in [("weight", weight_scale), ("input", input_scale)] {
        if s.len() != 1 && s.len() != bias.len() {
            return Err(ParamsError::Invalid(format!(
                "{} {what} scales for a bias of {} elements",
                s.len(),
                bias.len()
            )));
        }
    }
    for (c, &s) in input_scale.iter().enumerate() {
        if !(s.is_finite() && s > 0.0) {
            return Err(ParamsError::BadScale {
                scale: s,
                channel: (input_scale.len() > 1).then_some(c),
            });
        }
    }
    let limit = i32::MAX as f64;
    for (c, &b) in bias.iter().enumerate() {
        if !b.is_finite() {
            return Err(ParamsError::NonFinite {
                what: format!("bias element {c}"),
                value: b as f64,
            });
        }
    }
    for (c, &ws) in weight_scale.iter().enumerate() {
        if !(ws.is_finite() && ws > 0.0) {
            return Err(ParamsError::BadScale {
                scale: ws,
                channel: Some(c),
            });
        }
    }
    let per_channel = weight_scale.len() == bias.len() && weight_scale.len() > 1;
    let ws_of = |c: usize| weight_scale[if weight_scale.len() == 1 { 0 } else { c }];
    let is_of = |c: usize| input_scale[if input_scale.len() == 1 { 0 } else { c }];
    // how far each channel overflows at the given scales
    let factors: Vec<f64> = bias
        .iter()
        .enumerate()
        .map(|(c, &b)| (b as f64 / (is_of(c) * ws_of(c))).round_ties_even().abs() / limit)
        .collect();
    let overflows: Vec<BiasOverflow> = factors
        .iter()
        .enumerate()
        .filter(|(_, &f)| f > 1.0)
        .map(|(channel, &factor)| BiasOverflow { channel, factor })
        .collect();
    let mut ws: Vec<f64> = (0..bias.len()).map(ws_of).collect();
    if policy == BiasOverflowPolicy::EnlargeWeightScale && !overflows.is_empty() {
        // the smallest weight scale (to f64 precision) at which the bias fits; one factor for
        // all channels when the weight has a single scale
        let grow = |f: f64| f * (1.0 + 1e-9);
        if per_channel {
            for o in &overflows {
                ws[o.channel] *= grow(o.factor);
            }
        } else {
            let f = overflows.iter().map(|o| o.factor).fold(1.0, f64::max);
            ws.iter_mut().for_each(|w| *w *= grow(f));
        }
    }
    let scale: Vec<f64> = ws.iter().enumerate().map(|(c, w)| is_of(c) * w).collect();
    let values = bias
        .iter()
        .zip(&scale)
        .map(|(&b, &s)| (b as f64 / s).round_ties_even().clamp(i32::MIN as f64, limit) as i32)
        .collect();
    let weight_scale = if per_channel {
        ws
    } else {
        vec![ws.first().copied().unwrap_or(weight_scale[0])]
    };
    Ok(QuantizedBias {
        values,
        scale,
        weight_scale,
        overflows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_channel_values_and_overflow() {
        // hand computation: 0.5 / (0.1 * 0.02) = 250; -0.3 / (0.1 * 0.03) = -100
        let q = quantize_bias(&[0.5, -0.3], &[0.1], &[0.02, 0.03], BiasOverflowPolicy::Clip).unwrap();
        assert_eq!(q.values, vec![250, -100]);
        assert!(q.overflows.is_empty());
        // 1e3 / (1e-4 * 1e-6) = 1e13 = 4656.6 × i32::MAX
        let q = quantize_bias(&[1.0e3, 0.1], &[1e-4], &[1e-6], BiasOverflowPolicy::Clip).unwrap();
        assert_eq!(q.values[0], i32::MAX);
        assert_eq!(q.overflows.len(), 1);
        assert_eq!(q.overflows[0].channel, 0);
        assert!((q.overflows[0].factor - 1e13 / i32::MAX as f64).abs() < 1e-6);
        // per-channel weight scales: only the overflowing channel's scale grows
        let q = quantize_bias(
            &[1.0e3, 0.1],
            &[1e-4],
            &[1e-6, 1e-6],
            BiasOverflowPolicy::EnlargeWeightScale,
        )
        .unwrap();
        assert!(q.values[0] < i32::MAX && q.values[0] > i32::MAX - 100);
        assert!(q.weight_scale[0] > 1e-6 && q.weight_scale[1] == 1e-6);
        // a single weight scale grows for every channel
        let q = quantize_bias(&[1.0e3, 0.1], &[1e-4], &[1e-6], BiasOverflowPolicy::EnlargeWeightScale).unwrap();
        assert_eq!(q.weight_scale.len(), 1);
        assert!(q.weight_scale[0] > 4.6e-3 && q.values[0] > i32::MAX - 100);
        // per-channel input scales (a depthwise convolution's): 0.5 / (0.1 · 0.02) = 250,
        // -0.3 / (0.2 · 0.02) = -75, bias scales 0.002 and 0.004
        let q = quantize_bias(&[0.5, -0.3], &[0.1, 0.2], &[0.02], BiasOverflowPolicy::Clip).unwrap();
        assert_eq!(q.values, vec![250, -75]);
        assert_eq!(q.scale, vec![0.1 * 0.02, 0.2 * 0.02]);
        assert_eq!(q.weight_scale, vec![0.02]);
        assert!(quantize_bias(&[0.5, -0.3, 1.0], &[0.1, 0.2], &[0.02], BiasOverflowPolicy::Clip).is_err());
    }
}
