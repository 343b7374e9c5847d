//! Calibration as the front ends ask for it: flags to options, statistics from a file, arrays
//! or a stream read once (keeping the samples read again afterwards), and the line it prints.

use super::{usage, JobError};
use crate::calibration::{Method, NonFinitePolicy};
use crate::formats::data::{self, DataError, Dataset};
use crate::interp;
use crate::quantize::{self, CalibrateOptions, Calibrated, QuantConfig};
use crate::tensor::Tensor;
use melior::ir::Module;
use std::path::Path;

/// How to calibrate (the command line's calibration flags).
#[derive(Debug, Clone)]
pub struct CalibFlags {
    /// Range method [default: the recipe's, else minmax].
    pub method: Option<String>,
    pub percentile: Option<f64>,
    pub bins: usize,
    /// Shard i of n: samples i, i + n, …
    pub shard: Option<(usize, usize)>,
    pub skip_non_finite: bool,
    pub threads: usize,
    pub limit: Option<usize>,
    /// `input=array` pairs binding arrays to inputs by name.
    pub overrides: Vec<(String, String)>,
}

impl Default for CalibFlags {
    fn default() -> Self {
        CalibFlags {
            method: None,
            percentile: None,
            bins: 2048,
            shard: None,
            skip_non_finite: false,
            threads: 0,
            limit: None,
            overrides: Vec::new(),
        }
    }
}

/// Parses `I/N`.
pub fn parse_shard(s: &str) -> Result<(usize, usize), JobError> {
    let bad = || usage(format!("shard takes I/N with 0 <= I < N, got '{s}'"));
    let (i, n) = s.split_once('/').ok_or_else(bad)?;
    let (i, n) = (
        i.trim().parse::<usize>().map_err(|_| bad())?,
        n.trim().parse::<usize>().map_err(|_| bad())?,
    );
    if n == 0 || i >= n {
        return Err(bad());
    }
    Ok((i, n))
}

/// The calibration options: `method` (a `--choose-method` candidate) wins over the flags,
/// which win over the recipe's method, which wins over minmax.
pub fn calibrate_options(
    flags: &CalibFlags,
    config: &QuantConfig,
    method: Option<&str>,
) -> Result<CalibrateOptions, JobError> {
    let (name, pct) = match method.or(flags.method.as_deref()) {
        Some(m) => (m.to_string(), flags.percentile),
        None => (
            config.method.clone().unwrap_or_else(|| "minmax".into()),
            flags.percentile.or(config.percentile),
        ),
    };
    Ok(CalibrateOptions {
        method: Method::from_name(&name, pct).map_err(usage)?,
        bins: flags.bins,
        threads: flags.threads,
        limit: flags.limit,
        shard: flags.shard,
        non_finite: if flags.skip_non_finite {
            NonFinitePolicy::Skip
        } else {
            NonFinitePolicy::Error
        },
        config: config.clone(),
    })
}

/// One item of a calibration stream: named arrays (one sample, or a batch along the first axis).
pub type Item = Result<Vec<(String, Tensor)>, DataError>;

/// Where calibration samples come from.
pub enum Samples<'a> {
    /// A data set (a file, a folder, or arrays in memory), read again as often as needed.
    Data(&'a Dataset),
    /// Items read once, in order (a Python generator or `CalibrationDataReader`), in bounded
    /// memory: see [`data::item_samples`] for what an item holds.
    Stream(&'a mut dyn Iterator<Item = Item>),
}

/// Binds the samples to the (prepared or not) module's inputs and calibrates it — in place, as
/// [`quantize::calibrate`] does. `cache` is the calibration cache's folder (file data only).
pub fn calibrate(
    module: &Module,
    samples: Samples,
    flags: &CalibFlags,
    opts: &CalibrateOptions,
    cache: Option<&Path>,
) -> Result<Calibrated, JobError> {
    Ok(calibrate_keeping(module, samples, flags, opts, cache, Keep::default())?.0)
}

/// The samples of a calibration stream kept for what reads them again once it has ended.
#[derive(Debug, Default, Clone, Copy)]
pub struct Keep {
    /// The first ones (GPTQ, bias correction).
    pub first: usize,
    /// This many spread over the whole stream, the ones `run::picked_samples` spreads over a
    /// file of its length (a target's scoring samples, `--choose-range`'s).
    pub spread: usize,
}

/// The samples [`Keep`] asked for, each as a data set (one array per input, named as the
/// input); `None` for file data, which can be read again, and for samples whose shapes differ.
#[derive(Default)]
pub struct Kept {
    pub first: Option<Dataset>,
    pub spread: Option<Dataset>,
}

/// [`calibrate`], keeping the samples of a stream that `keep` asks for.
pub fn calibrate_keeping(
    module: &Module,
    samples: Samples,
    flags: &CalibFlags,
    opts: &CalibrateOptions,
    cache: Option<&Path>,
    keep: Keep,
) -> Result<(Calibrated, Kept), JobError> {
    // the inputs' specs, from a program that holds no copy of the large weights: calibration
    // compiles its own, and both at once would hold the weights three times
    let inputs = interp::Program::compile_for_shapes(module)?.inputs;
    match samples {
        Samples::Data(dataset) => {
            let binding = data::bind(dataset, &inputs, &flags.overrides)?;
            // arrays in memory have no file to key a cache entry by
            let cache = cache.filter(|_| dataset.path.exists());
            Ok((
                quantize::calibrate_cached(module, &binding, opts, cache)?,
                Kept::default(),
            ))
        }
        Samples::Stream(items) => {
            let mut n = 0usize;
            let mut first: Vec<Vec<Tensor>> = Vec::new();
            let mut spread = crate::run::Decimator::new(keep.spread);
            let mut read = 0usize;
            let mut samples = items
                .flat_map(|item| {
                    n += 1;
                    let label = format!("calibration item {}", n - 1);
                    let samples = item.and_then(|arrays| data::item_samples(&label, arrays, &inputs, &flags.overrides));
                    match samples {
                        Ok(v) => v.into_iter().map(Ok).collect::<Vec<_>>(),
                        Err(e) => vec![Err(e)],
                    }
                })
                .inspect(|s| {
                    if let Ok(s) = s {
                        if first.len() < keep.first {
                            first.push(s.clone());
                        }
                        spread.offer(read, || s.clone());
                        read += 1;
                    }
                })
                .fuse();
            let c = quantize::calibrate::calibrate_stream(module, &mut samples, opts)?;
            drop(samples);
            let spread: Vec<Vec<Tensor>> = spread.finish(read).into_iter().map(|(_, s)| s).collect();
            let kept = Kept {
                first: stacked(&inputs, &first),
                spread: stacked(&inputs, &spread),
            };
            Ok((c, kept))
        }
    }
}

/// Samples (each the inputs of one run) as a data set whose rows are those inputs; `None` when
/// there are none or their shapes differ.
fn stacked(inputs: &[interp::InputSpec], samples: &[Vec<Tensor>]) -> Option<Dataset> {
    if samples.is_empty() {
        return None;
    }
    let mut arrays = Vec::new();
    for (j, spec) in inputs.iter().enumerate() {
        let col: Vec<&Tensor> = samples.iter().filter_map(|s| s.get(j)).collect();
        let t = crate::interp::kernels::join::pack(&col, 0).ok()?;
        arrays.push((spec.name.clone(), t));
    }
    Dataset::from_arrays("the calibration stream's first samples", arrays).ok()
}

/// The line a front end prints after a calibration.
pub fn calibrated_line(c: &Calibrated, seconds: f64) -> String {
    match &c.from_cache {
        Some(key) => format!(
            "statistics of {} tensors on {} samples from cache ({key}; --no-cache to recalibrate)",
            c.stats.tensors.len(),
            c.stats.num_samples
        ),
        None => format!(
            "calibrated {} tensors on {} samples in {seconds:.2} s ({:?})",
            c.stats.tensors.len(),
            c.stats.num_samples,
            c.stats.method
        ),
    }
}
