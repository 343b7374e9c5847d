//! Measurements on the first calibration samples that refine how `quantize` rounds: bias
//! correction's output shifts and GPTQ's input Gram matrices.

use super::JobError;
use crate::calibration::StatsFile;
use crate::formats::data::{self, Dataset};
use crate::interp;
use crate::quantize::{self, QuantConfig};
use melior::ir::Module;

/// Calibration samples bias correction and GPTQ measure on (the first ones).
pub const BIAS_SAMPLES: usize = 128;

/// Runs `measure` on one program compiled from `module` and the first [`BIAS_SAMPLES`] of
/// `data` bound to its inputs.
fn on_first_samples<T>(
    module: &Module,
    data: &Dataset,
    overrides: &[(String, String)],
    measure: impl FnOnce(&interp::Program, crate::run::Feed) -> Result<T, quantize::QuantizeError>,
) -> Result<T, JobError> {
    // one compiled program binds the data and runs it
    let program = interp::Program::compile(module, None)?;
    let binding = data::bind(data, &program.inputs, overrides)?;
    let indices: Vec<usize> = (0..binding.samples.min(BIAS_SAMPLES)).collect();
    let feed = crate::run::Feed::Indexed {
        data: &binding,
        indices: &indices,
    };
    Ok(measure(&program, feed)?)
}

/// Bias correction's shifts for `module` (prepared, calibrated as `stats` say), measured on
/// the first [`BIAS_SAMPLES`] of `data` on `threads` workers (0 = all cores); with
/// `float_inputs_too` (a quality target may raise inputs to float) also with float inputs.
pub fn correct_biases(
    module: &Module,
    stats: &StatsFile,
    config: &QuantConfig,
    data: &Dataset,
    (threads, overrides): (usize, &[(String, String)]),
    float_inputs_too: bool,
) -> Result<quantize::bias_correction::BiasCorrection, JobError> {
    on_first_samples(module, data, overrides, |program, feed| {
        quantize::bias_correction::measure_bias_shifts(module, program, stats, config, feed, threads, float_inputs_too)
    })
}

/// GPTQ's Gram matrices for `module` (prepared), measured on the first [`BIAS_SAMPLES`] of
/// `data` on `threads` workers (0 = all cores).
pub fn weight_grams(
    module: &Module,
    config: &QuantConfig,
    data: &Dataset,
    (threads, overrides): (usize, &[(String, String)]),
) -> Result<quantize::gram::WeightGrams, JobError> {
    on_first_samples(module, data, overrides, |program, feed| {
        quantize::gram::measure_grams(module, program, config, feed, threads)
    })
}

/// GPTQ's Gram matrices measured side by side on `module` (prepared, calibrated as `stats`
/// say) and its quantized form (asymmetric calibration), wave by wave: each wave's layers are
/// measured on a quantized form (`twin`, quantized with `config`'s Gram matrices so far) whose
/// earlier waves are already rounded toward their own targets, so that each layer makes up
/// for the drift the layers before it leave, as they will be. On the first [`BIAS_SAMPLES`] of
/// `data` on `threads` workers (0 = all cores); `config.weight_grams` is updated in place.
pub fn asymmetric_weight_grams<'c>(
    module: &Module,
    twin: &dyn Fn() -> Result<Module<'c>, JobError>,
    stats: &StatsFile,
    config: &mut QuantConfig,
    data: &Dataset,
    (threads, overrides): (usize, &[(String, String)]),
) -> Result<(quantize::gram::WeightGrams, usize), JobError> {
    let mut all = quantize::gram::WeightGrams::default();
    let mut wave = 0;
    loop {
        let quantized = twin()?;
        quantize::quantize_module(&quantized, stats, config)?;
        let pq = interp::Program::compile(&quantized, None)?;
        let (g, deeper) = on_first_samples(module, data, overrides, |program, feed| {
            quantize::gram::measure_paired_grams(module, [program, &pq], stats, config, feed, threads, wave)
        })?;
        config
            .weight_grams
            .extend(g.grams.iter().map(|(k, v)| (k.clone(), v.clone())));
        all.samples = g.samples;
        all.grams.extend(g.grams);
        all.left.extend(g.left);
        wave += 1;
        if !deeper {
            return Ok((all, wave));
        }
    }
}
