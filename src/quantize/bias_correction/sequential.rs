//! Bias correction measured in the quantized model (`--bias-correction-sequential`; Nagel et
//! al. 2019 §4.2 applied layer after layer): the float model and its quantized form run side
//! by side on calibration samples, and each layer's shift is the mean difference of its
//! outputs there, with every layer before it quantized and already corrected. So a layer
//! takes off the mean drift the layers before it leave as well as its own rounding's, which
//! the alone form ([`super::measure_bias_shifts`], each layer on float inputs) cannot see.
//!
//! ```text
//! wave 0:  %y = onnx.Conv(%x, %w, %b)     shift[c] = mean (y as quantized − y float)[c]
//! wave 1:  the model quantized with wave 0's biases corrected; each of wave 1's layers measured there
//! ...      one quantization and side-by-side run per wave (`crate::quantize::waves`)
//! ```
//!
//! Layers of one wave do not read each other, so each wave's shifts are measured at once.

use super::{bias_sites, BiasCorrection, Sums};
use crate::calibration::StatsFile;
use crate::interp::fusion::ChannelAxis;
use crate::interp::Program;
use crate::ir::graph::find_function;
use crate::quantize::{plan, QuantConfig, QuantizeError};
use crate::run::{compare_side_by_side, Feed};
use crate::tensor::Tensor;
use melior::ir::Module;
use std::collections::HashSet;

/// A layer the sequential form corrects, selected once for all waves.
pub struct WaveLayer {
    out_key: String,
    /// Its output's runtime key, in both models.
    out_value: String,
    channel_axis: ChannelAxis,
    channels: Option<usize>,
    /// The wave of its input ([`crate::quantize::waves`]): it is measured with every layer of
    /// a smaller wave already corrected.
    pub wave: usize,
}

/// The layers of `module` (prepared, calibrated as `stats` say) whose int8/int4 weight and
/// bias `config` quantizes, in program order with their waves, and how many quantized layers
/// have no constant bias to take a shift.
pub fn bias_layers(
    module: &Module,
    stats: &StatsFile,
    config: &QuantConfig,
) -> Result<(Vec<WaveLayer>, usize), QuantizeError> {
    let plan = plan(module, Some(stats), config)?;
    let (sites, without_bias) = bias_sites(find_function(module, None)?, &plan, config);
    let layers = sites
        .into_iter()
        .map(|s| WaveLayer {
            out_key: s.site.out_key,
            out_value: s.out_value,
            channel_axis: s.channel_axis,
            channels: s.channels,
            wave: s.wave,
        })
        .collect();
    Ok((layers, without_bias))
}

/// Measures, on the samples of `feed`, the shift of each of `wave` (one wave's layers):
/// `float` is the prepared, calibrated module compiled, `quantized` its quantized form
/// compiled, with every layer of an earlier wave already corrected. Into `out`: the shifts,
/// and the layers left with why (one whose output the quantized model does not compute under
/// the same key). Samples run on `threads` workers and are added in sample order: the shifts
/// do not depend on the thread count. Returns the number of samples run.
pub fn measure_wave_shifts(
    [float, quantized]: [&Program; 2],
    wave: &[WaveLayer],
    feed: Feed,
    threads: usize,
    out: &mut BiasCorrection,
) -> Result<usize, QuantizeError> {
    let failed = |m: String| QuantizeError::Stats(format!("bias correction (sequential): {m}"));
    let computed: HashSet<&str> = quantized.values.iter().map(|v| v.key.as_str()).collect();
    let (layers, gone): (Vec<&WaveLayer>, Vec<&WaveLayer>) =
        wave.iter().partition(|l| computed.contains(l.out_value.as_str()));
    out.left.extend(gone.into_iter().map(|l| {
        (
            l.out_key.clone(),
            "the quantized model does not compute its output".into(),
        )
    }));
    if layers.is_empty() {
        return Ok(0);
    }
    let (readers, keys) = crate::run::readers(layers.iter().map(|l| l.out_value.as_str()));
    type State = Vec<Option<Sums>>;
    let compare = |s: &mut State, key: &str, f: &Tensor, q: &Tensor| -> Result<(), String> {
        let (Tensor::F32(f), Tensor::F32(q)) = (f, q) else {
            return Ok(());
        };
        for &i in readers.get(key).map_or(&[][..], |v| v.as_slice()) {
            let l = &layers[i];
            if s[i].is_some() {
                return Err(format!("{}: its output was computed twice in one sample", l.out_key));
            }
            s[i] = Some(
                super::channel_sums((l.channel_axis, l.channels), f, q, None)
                    .map_err(|e| format!("{}: {e}", l.out_key))?,
            );
        }
        Ok(())
    };
    let mut totals: Vec<Sums> = vec![Sums::default(); layers.len()];
    let mut combine = |_: usize, s: State| {
        for (t, x) in totals.iter_mut().zip(&s) {
            if let Some(x) = x {
                t.add(x);
            }
        }
        Ok(())
    };
    let n = compare_side_by_side(
        [float, quantized],
        feed,
        threads,
        &keys,
        &|| vec![None; layers.len()],
        &compare,
        &mut combine,
        "bias correction (sequential)",
    )
    .map_err(|e| failed(e.to_string()))?;
    for (l, t) in layers.into_iter().zip(totals) {
        if t.count == 0 {
            out.left
                .push((l.out_key.clone(), "its output was never an f32 value".into()));
        } else {
            out.add_layer(l.out_key.clone(), &t, false);
        }
    }
    Ok(n)
}
