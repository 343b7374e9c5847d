//! Measurements on the first calibration samples that refine how `quantize` rounds: bias
//! correction's output shifts (each layer alone, or in the quantized model wave by wave) and
//! GPTQ's input Gram matrices.

use super::JobError;
use crate::calibration::StatsFile;
use crate::formats::data::{self, Dataset};
use crate::interp;
use crate::quantize::{self, QuantConfig};
use melior::ir::Module;

/// Calibration samples bias correction and GPTQ measure on (the first ones).
pub const BIAS_SAMPLES: usize = 128;

/// One program compiled from `module`, with the first [`BIAS_SAMPLES`] of a data set bound to
/// its inputs: compiled and bound once, however many runs measure on it.
struct FirstSamples {
    program: interp::Program,
    binding: data::Binding,
    indices: Vec<usize>,
}

impl FirstSamples {
    fn new(module: &Module, data: &Dataset, overrides: &[(String, String)]) -> Result<FirstSamples, JobError> {
        // one compiled program binds the data and runs it
        let program = interp::Program::compile(module, None)?;
        let binding = data::bind(data, &program.inputs, overrides)?;
        let indices: Vec<usize> = (0..binding.samples.min(BIAS_SAMPLES)).collect();
        Ok(FirstSamples {
            program,
            binding,
            indices,
        })
    }

    fn feed(&self) -> crate::run::Feed<'_> {
        crate::run::Feed::Indexed {
            data: &self.binding,
            indices: &self.indices,
        }
    }
}

/// Runs `measure` on one program compiled from `module` and the first [`BIAS_SAMPLES`] of
/// `data` bound to its inputs.
fn on_first_samples<T>(
    module: &Module,
    data: &Dataset,
    overrides: &[(String, String)],
    measure: impl FnOnce(&interp::Program, crate::run::Feed) -> Result<T, quantize::QuantizeError>,
) -> Result<T, JobError> {
    let first = FirstSamples::new(module, data, overrides)?;
    Ok(measure(&first.program, first.feed())?)
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

/// Bias correction's shifts measured in the quantized model, wave by wave
/// (`--bias-correction-sequential`): each wave's layers are measured side by side with
/// `module` (prepared, calibrated as `stats` say) in a quantized form of it (`twin`,
/// quantized with `config`) whose earlier waves' biases are already corrected. On the first
/// [`BIAS_SAMPLES`] of `data` on `threads` workers (0 = all cores); `config.bias_shifts`
/// ends as the shifts measured.
pub fn sequential_bias_shifts<'c>(
    module: &Module,
    twin: &dyn Fn() -> Result<Module<'c>, JobError>,
    stats: &StatsFile,
    config: &mut QuantConfig,
    data: &Dataset,
    (threads, overrides): (usize, &[(String, String)]),
) -> Result<quantize::bias_correction::BiasCorrection, JobError> {
    use quantize::bias_correction::sequential::{bias_layers, measure_wave_shifts, WaveLayer};
    // the layers are selected once; each wave quantizes and runs the model afresh
    let (layers, without_bias) = bias_layers(module, stats, config)?;
    let mut by_wave: std::collections::BTreeMap<usize, Vec<WaveLayer>> = Default::default();
    for l in layers {
        by_wave.entry(l.wave).or_default().push(l);
    }
    let mut out = quantize::bias_correction::BiasCorrection {
        without_bias,
        ..Default::default()
    };
    config.bias_shifts.clear();
    let mut waves = by_wave.into_values().peekable();
    if waves.peek().is_some() {
        wave_by_wave(
            module,
            twin,
            stats,
            config,
            data,
            overrides,
            |config, programs, feed| {
                let Some(wave) = waves.next() else { return Ok(false) };
                let n = measure_wave_shifts(programs, &wave, feed, threads, &mut out)?;
                out.samples = out.samples.max(n);
                out.waves += 1;
                config.bias_shifts = out.shifts.clone();
                Ok(waves.peek().is_some())
            },
        )?;
    }
    Ok(out)
}

/// Runs `step` once per wave, until it says no deeper wave is left: on one program compiled
/// from `module` (prepared) with the first [`BIAS_SAMPLES`] of `data` bound to it, compiled
/// and bound once, beside a quantized form of it (`twin`, quantized as `stats` and `config`
/// say when the wave starts) compiled afresh each wave, so that each wave measures with
/// what the waves before it changed in `config` already applied.
fn wave_by_wave<'c>(
    module: &Module,
    twin: &dyn Fn() -> Result<Module<'c>, JobError>,
    stats: &StatsFile,
    config: &mut QuantConfig,
    data: &Dataset,
    overrides: &[(String, String)],
    mut step: impl FnMut(&mut QuantConfig, [&interp::Program; 2], crate::run::Feed) -> Result<bool, quantize::QuantizeError>,
) -> Result<(), JobError> {
    let first = FirstSamples::new(module, data, overrides)?;
    loop {
        let quantized = twin()?;
        quantize::quantize_module(&quantized, stats, config)?;
        let pq = interp::Program::compile(&quantized, None)?;
        if !step(config, [&first.program, &pq], first.feed())? {
            return Ok(());
        }
    }
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

/// What [`asymmetric_weight_grams`] measured.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AsymmetricGrams {
    /// Layers measured on the quantized model's inputs.
    pub layers: usize,
    /// Layers GPTQ measured on float inputs.
    pub of: usize,
    pub waves: usize,
    /// Layers whose rows move toward a map, chosen by cross-validation over `folds` of the
    /// samples (the others are rounded as they are, on their quantized inputs).
    pub mapped: usize,
    pub folds: usize,
    /// Layers that keep their float-input Gram matrices, with why.
    pub float_only: Vec<(String, String)>,
}

impl std::fmt::Display for AsymmetricGrams {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(
            f,
            "GPTQ on the quantized model's inputs: {} of {} layers, in {} waves",
            self.layers, self.of, self.waves
        )?;
        if self.folds > 0 {
            write!(
                f,
                "; {} moved toward the float output, where {}-fold cross-validation says it helps",
                self.mapped, self.folds
            )?;
        }
        write!(f, "{}", crate::text::first_of(&self.float_only, "on float inputs only"))
    }
}

/// GPTQ's Gram matrices measured side by side on `module` (prepared, calibrated as `stats`
/// say) and its quantized form (asymmetric calibration), wave by wave: each wave's layers are
/// measured on a quantized form (`twin`, quantized with `config`'s Gram matrices so far) whose
/// earlier waves are already rounded toward their own targets, so that each layer makes up
/// for the drift the layers before it leave, as they will be. On the first [`BIAS_SAMPLES`] of
/// `data` on `threads` workers (0 = all cores); `config.weight_grams` (GPTQ's, on float
/// inputs) is updated in place, and a layer measured only there keeps its matrices.
pub fn asymmetric_weight_grams<'c>(
    module: &Module,
    twin: &dyn Fn() -> Result<Module<'c>, JobError>,
    stats: &StatsFile,
    config: &mut QuantConfig,
    data: &Dataset,
    (threads, overrides): (usize, &[(String, String)]),
) -> Result<AsymmetricGrams, JobError> {
    let mut out = AsymmetricGrams {
        of: config.weight_grams.len(),
        ..Default::default()
    };
    wave_by_wave(
        module,
        twin,
        stats,
        config,
        data,
        overrides,
        |config, programs, feed| {
            let paired =
                quantize::gram::measure_paired_grams(module, programs, stats, config, feed, threads, out.waves)?;
            let g = paired.grams;
            out.layers += g.grams.len();
            out.mapped += paired.mapped;
            out.folds = out.folds.max(paired.folds);
            // where GPTQ measured a layer on float inputs, it keeps those matrices (the others
            // were named in GPTQ's own line)
            out.float_only
                .extend(g.left.into_iter().filter(|(k, _)| config.weight_grams.contains_key(k)));
            config.weight_grams.extend(g.grams);
            out.waves += 1;
            Ok(paired.deeper)
        },
    )?;
    Ok(out)
}
