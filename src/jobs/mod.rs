//! quantir's jobs as its front ends run them — the command line and the Python package: the
//! settings from flags, calibration from a file, arrays in memory or a stream, quantizing and
//! the `--json` summary. Both front ends call these, so that the same request gives
//! byte-identical files whichever way it is made; they only parse their arguments and print.

use crate::calibration::{Method, StatsFile};
use crate::formats::data::{self, DataError, Dataset};
use crate::quantize::{self, QuantConfig, QuantizeReport};
use crate::tensor::Tensor;
use crate::{evaluate, formats, interp, ir, stats_io};
use melior::ir::Module;
use std::path::{Path, PathBuf};

mod calibrate;
mod measure;
mod settings;

/// Why a job failed. [`JobError::Usage`] is a request that asks for something that does not
/// exist (exit code 2, Python's `ValueError`); [`JobError::In`] says which file it concerns.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Recipe(#[from] crate::recipe::file::RecipeError),
    #[error(transparent)]
    Format(#[from] formats::FormatError),
    #[error(transparent)]
    Data(#[from] DataError),
    #[error(transparent)]
    Calibrate(#[from] quantize::calibrate::CalibrateError),
    #[error(transparent)]
    Quantize(#[from] quantize::QuantizeError),
    #[error(transparent)]
    Evaluate(#[from] evaluate::EvalError),
    #[error(transparent)]
    Stats(#[from] stats_io::StatsIoError),
    #[error(transparent)]
    Pass(#[from] crate::passes::PassError),
    #[error(transparent)]
    Interp(#[from] interp::InterpError),
    #[error(transparent)]
    Run(#[from] crate::run::RunError),
    #[error(transparent)]
    Write(#[from] crate::fsutil::WriteError),
    #[error(transparent)]
    Target(#[from] crate::target::TargetError),
    #[error("{context}: {source}")]
    In { context: String, source: Box<JobError> },
}

impl JobError {
    /// The error with the file it concerns in front.
    pub fn within(self, context: &Path) -> JobError {
        JobError::In {
            context: context.display().to_string(),
            source: Box::new(self),
        }
    }

    /// The error under every [`JobError::In`].
    pub fn root(&self) -> &JobError {
        match self {
            JobError::In { source, .. } => source.root(),
            e => e,
        }
    }
}

fn usage(e: impl std::fmt::Display) -> JobError {
    JobError::Usage(e.to_string())
}

pub use calibrate::{
    calibrate, calibrate_keeping, calibrate_options, calibrated_line, parse_shard, CalibFlags, Item, Keep, Kept,
    Samples,
};
pub use measure::{
    asymmetric_weight_grams, correct_biases, sequential_bias_shifts, weight_grams, AsymmetricGrams, BIAS_SAMPLES,
};
pub use settings::{config, RecipeFlags, RecipeSource};

/// `--choose-range`'s candidates as methods (`percentile` at `--percentile`): those a
/// histogram holds, and min/max.
fn range_candidates(names: &[String], percentile: Option<f64>) -> Result<Vec<(String, Method)>, JobError> {
    names
        .iter()
        .map(|n| {
            let m = Method::from_name(n, percentile).map_err(usage)?;
            if m.uses_histogram() || m == Method::MinMax {
                Ok((n.clone(), m))
            } else {
                Err(usage(format!(
                    "--choose-range chooses among ranges one histogram holds: {n} is not one (minmax, percentile, mse, entropy are)"
                )))
            }
        })
        .collect()
}

/// `n` samples spread over `data` (`run::picked_samples`) as inputs of `module`'s function.
fn spread_samples(
    module: &Module,
    data: &Dataset,
    overrides: &[(String, String)],
    n: usize,
) -> Result<Vec<Vec<Tensor>>, JobError> {
    let inputs = interp::Program::compile_for_shapes(module)?.inputs;
    let binding = data::bind(data, &inputs, overrides)?;
    Ok(crate::run::picked_samples(binding.samples, Some(n), true)
        .into_iter()
        .map(|i| binding.sample(i))
        .collect::<Result<_, _>>()?)
}

/// What cross-layer equalization did to the (calibrated) module, in one line.
fn equalized_line(module: &Module, config: &QuantConfig) -> String {
    let n = crate::passes::equalize_layers::equalized_pairs(module);
    let by = match config.equalize_by {
        crate::recipe::EqualizeBy::Activations => format!(
            "each scale chosen on the activations of up to {} calibration samples",
            quantize::calibrate::EQUALIZE_SAMPLES
        ),
        crate::recipe::EqualizeBy::Weights => "by weight ranges (data-free)".to_string(),
    };
    let norms = crate::passes::equalize_layers::smoothed_norms(module);
    format!("cross-layer equalization: {n} layer pairs and {norms} norms (SmoothQuant) rescaled, {by}")
}

/// The statistics of a weight-only quantization: none, for the prepared module.
fn weight_only_stats(module: &Module, config: &QuantConfig) -> Result<StatsFile, JobError> {
    quantize::prepare_with(module, config)?;
    Ok(StatsFile::new(
        quantize::model_hash(module),
        Method::MinMax,
        0,
        Default::default(),
    ))
}

/// Calibration samples [`choose_method`] scores each candidate on.
pub const CHOOSE_SAMPLES: usize = 16;

/// `--choose-method`: quantizes a fresh copy of the model (`load`) with each candidate range
/// method and returns the statistics of the one whose model is closest to the float model on
/// [`CHOOSE_SAMPLES`] calibration samples spread over the data — the mean over the outputs of their SQNR in
/// quantir's interpreter (which reproduces onnxruntime's QDQ semantics), and a line saying
/// each candidate's score. One method for the whole model: per-layer choice is not made.
pub fn choose_method<'c>(
    load: &dyn Fn() -> Result<Module<'c>, JobError>,
    dataset: &Dataset,
    candidates: &[String],
    flags: &CalibFlags,
    config: &QuantConfig,
    cache: Option<&Path>,
) -> Result<(StatsFile, String), JobError> {
    let float = load()?;
    let opts = evaluate::EvalOptions {
        threads: flags.threads,
        limit: Some(CHOOSE_SAMPLES),
        // a data set in order has its first samples alike (ppocr_cls's first 16 are easy)
        spread: true,
        labels: None,
        per_layer: false,
        histograms: false,
        overrides: flags.overrides.clone(),
        ..Default::default()
    };
    let mut best: Option<(f64, &str, StatsFile)> = None;
    let mut said = Vec::new();
    for m in candidates {
        let module = load()?;
        let calib = calibrate_options(flags, config, Some(m))?;
        let stats = calibrate(&module, Samples::Data(dataset), flags, &calib, cache)?.stats;
        quantize::quantize_module(&module, &stats, config)?;
        let r = evaluate::evaluate(&float, &module, dataset, &opts)?;
        let db: Vec<f64> = r.output_sqnrs_db().collect();
        let score = db.iter().sum::<f64>() / db.len().max(1) as f64;
        said.push(format!("{m} {score:.2} dB"));
        if best.as_ref().is_none_or(|(s, _, _)| score > *s) {
            best = Some((score, m, stats));
        }
    }
    let (_, m, stats) = best.ok_or_else(|| usage("choosing a method needs at least one candidate method"))?;
    let line = format!(
        "method: {m} (mean output SQNR on {CHOOSE_SAMPLES} calibration samples: {})",
        said.join(", ")
    );
    Ok((stats, line))
}

/// Loads a model; `signature` names a signature of a SavedModel (ignored for other formats).
pub fn load<'c>(ctx: &'c melior::Context, path: &Path, signature: Option<&str>) -> Result<Module<'c>, JobError> {
    let sig = signature.filter(|_| formats::savedmodel::is_saved_model(path));
    Ok(formats::model::load_signature(ctx, path, sig)?)
}

/// Lowers a TF model to ONNX ops for an .onnx output; the line saying so, `None` when it had no
/// TF op.
pub fn lower_to_onnx(module: &Module, model: &Path) -> Result<Option<String>, JobError> {
    let Some(report) = quantize::lower_to_onnx(module).map_err(|e| JobError::from(e).within(model))? else {
        return Ok(None);
    };
    let lowered = report.get(&crate::passes::Change::TfOpsLowered);
    let transposes = report.get(&crate::passes::Change::Written("onnx.Transpose".into()));
    Ok(Some(format!(
        "lowered {lowered} TF ops to ONNX ({transposes} layout transposes)"
    )))
}

/// What `quantize --json` prints: the settings, the summary, the passes' reports and the stages.
pub fn quantize_summary(output: &Path, done: &Quantized) -> serde_json::Value {
    let (config, report) = (&done.config, &done.report);
    serde_json::json!({
        "output": output,
        "weights": format!("{:?}", config.weights).to_lowercase(),
        "activations": config.activations.map_or("float".to_string(), |s| s.to_string()),
        "scheme": config.scheme.to_string(),
        "runtime": config.runtime.to_string(),
        "ops": report.summary.ops,
        "totals": {
            "macs": report.summary.totals.macs,
            "int8_macs": report.summary.totals.int8_macs,
            "int8_mac_share": report.summary.totals.int8_mac_share,
            "ops_without_macs": report.summary.totals.ops_without_macs,
            "macs_at": report.summary.totals.macs_at,
            "constant_bytes_before": report.bytes_before,
            "constant_bytes_after": report.bytes_after,
            "activation_points": report.activations,
        },
        "quantized_ops": report.summary.quantized_ops,
        "onnxruntime_int8": report.onnxruntime_int8, // per op: [run in int8, total]
        "onnxruntime_int8_at_least": report.onnxruntime_int8_at_least,
        "left_float": report.summary.left_float,
        "unknown_ops": report.summary.unknown_ops,
        "passes": {"quantize-weights": report.weights, "insert-qdq": report.qdq},
        "stages": report.stages.iter().map(|(k, s)| serde_json::json!({"stage": k, "seconds": s})).collect::<Vec<_>>(),
        "target": done.target,
    })
}

/// The warnings a quantize run gives, one line each.
pub fn quantize_warnings(report: &QuantizeReport) -> Vec<String> {
    let mut w: Vec<String> = report
        .weights
        .warnings
        .iter()
        .chain(&report.qdq.warnings)
        .cloned()
        .collect();
    w.extend(report.unmatched_overrides.iter().map(|p| {
        format!("recipe override match = \"{p}\" selects no op and no tensor of the model; it changes nothing")
    }));
    w.extend(report.unmatched_excludes.iter().map(|p| {
        format!("exclude pattern \"{p}\" selects no op (by type or node name) and no tensor of the model; nothing is left float by it")
    }));
    w
}

/// Where a quantize job's statistics come from.
pub enum StatsSource<'a> {
    /// Weight-only (no activation statistics).
    None,
    /// A statistics file.
    File(&'a Path),
    /// Statistics in memory (Python's `Stats`).
    Given(&'a StatsFile),
    /// Calibrate on these samples, choosing among range methods first if asked.
    Calibrate {
        samples: Samples<'a>,
        flags: &'a CalibFlags,
        cache: Option<PathBuf>,
        choose: Option<Choose<'a>>,
    },
}

/// What `quantize` chooses among candidate range methods (names as `--method` takes them).
#[derive(Debug, Clone, Copy)]
pub enum Choose<'a> {
    /// One method for the whole model: the candidate whose quantized model scores best
    /// (`--choose-method`; data that can be read again only).
    Method(&'a [String]),
    /// Each activation's own range, among the candidates' (`--choose-range`; histogram-based
    /// candidates and min/max).
    Range(&'a [String]),
}

/// What a quantize job did: its settings, its report, and the lines it said on the way.
pub struct Quantized {
    pub config: QuantConfig,
    pub report: QuantizeReport,
    pub stats: StatsFile,
    /// What the quality target's search found.
    pub target: Option<crate::target::TargetReport>,
}

/// The quantize job: loads `model`, lowers it to ONNX ops for an .onnx output, gets its
/// statistics, quantizes and writes `output` atomically. A quality target (`flags.target`)
/// is scored on `validation` where given, else on the calibration data. `say` receives each line of progress
/// and each warning (a warning's line starts with "warning: ").
pub fn quantize(
    model: &Path,
    signature: Option<&str>,
    output: &Path,
    flags: &RecipeFlags,
    stats: StatsSource,
    validation: Option<&Dataset>,
    say: &mut dyn FnMut(String),
) -> Result<Quantized, JobError> {
    formats::model::check_output(output)?;
    let config = config(flags, Some(output))?;
    let t0 = std::time::Instant::now();
    let ctx = ir::new_context();
    let module = load(&ctx, model, signature)?;
    // before calibration, which would otherwise run for nothing
    quantize::check_float(&module).map_err(|e| JobError::from(e).within(model))?;
    let onnx = formats::model::is_onnx(output);
    let lowered = match onnx {
        true => lower_to_onnx(&module, model)?,
        false => None,
    };
    // a fresh copy of the model in the output's form, for the quantizations a run may try
    // before the one it writes: `--choose-method`'s candidates, `--gptq-asymmetric`'s waves, a
    // target's trials
    let twin = || -> Result<Module<'_>, JobError> {
        let m = load(&ctx, model, signature)?;
        if onnx {
            quantize::lower_to_onnx(&m)?;
        }
        Ok(m)
    };
    let stats_file: Option<&Path> = match &stats {
        StatsSource::File(p) => Some(*p),
        _ => None,
    };
    // the calibration data, read again by a target, the range choice, GPTQ and bias
    // correction: its first --limit samples only, as calibration reads (and a stream stops at)
    let (whole, limited): (Option<&Dataset>, Option<Dataset>) = match &stats {
        StatsSource::Calibrate {
            samples: Samples::Data(d),
            flags,
            ..
        } => (Some(*d), flags.limit.map(|n| d.first(n))),
        _ => (None, None),
    };
    let target_data: Option<&Dataset> = limited.as_ref().or(whole);
    // the threads and input bindings it runs with
    let target_feed = match &stats {
        StatsSource::Calibrate { flags, .. } => (flags.threads, flags.overrides.clone()),
        _ => (0, Vec::new()),
    };
    let stats_source_calibrates = matches!(stats, StatsSource::Calibrate { .. });
    if flags.target.is_some() && !stats_source_calibrates {
        return Err(usage("a quality target needs calibration data to score on (--data)"));
    }
    if validation.is_some() && flags.target.is_none() {
        return Err(usage(
            "validation data serve a quality target only (--target-sqnr, --target-top1)",
        ));
    }
    if let Some(crate::target::Goal::Top1 { fraction, .. }) = &flags.target {
        if !(*fraction > 0.0 && *fraction <= 1.0) {
            return Err(usage(format!(
                "--target-top1 {fraction}: expected a fraction in (0, 1]"
            )));
        }
    }
    let mut kept = Kept::default();
    if let Some(l) = &lowered {
        say(l.clone());
    }
    let stats = match stats {
        StatsSource::File(p) => stats_io::load_stats(p)?,
        StatsSource::Given(s) => s.clone(),
        // weight-only: no activation to calibrate; the data serve GPTQ, bias correction and a target
        StatsSource::Calibrate {
            samples: Samples::Data(_),
            ..
        } if config.activations.is_none() => {
            if !(config.gptq || config.bias_correction || flags.target.is_some()) {
                say("warning: weight-only (activations none): the data are read only by --gptq, --bias-correction or a target; not read".into());
            }
            weight_only_stats(&module, &config)?
        }
        StatsSource::Calibrate {
            samples,
            flags: cf,
            cache,
            choose,
        } => {
            let chosen = match (choose, samples) {
                (Some(Choose::Method(candidates)), Samples::Data(d)) => {
                    // its first --limit samples
                    let dataset = target_data.unwrap_or(d);
                    let (stats, line) = choose_method(&twin, dataset, candidates, cf, &config, cache.as_deref())
                        .map_err(|e| e.within(model))?;
                    say(line);
                    // the winner's statistics serve the module (quantize_module prepares it as its twins were)
                    Ok(stats)
                }
                (Some(Choose::Method(_)), Samples::Stream(_)) => Err(usage(
                    "choosing the method needs calibration data that can be read again (a file or arrays), not a stream",
                )),
                (choose, samples) => {
                    let per_point = match choose {
                        Some(Choose::Range(c)) => Some(range_candidates(c, cf.percentile)?),
                        _ => None,
                    };
                    let (dataset, from) = match &samples {
                        Samples::Data(d) => (target_data, d.path.display().to_string()),
                        Samples::Stream(_) => (None, "calibration stream".into()),
                    };
                    let t = std::time::Instant::now();
                    // every candidate is read off one histogram: calibrate with a histogram method
                    let histogram = per_point.as_ref().map(|_| "mse");
                    let opts = calibrate_options(cf, &config, histogram)?;
                    let keep = Keep {
                        first: if config.bias_correction || config.gptq { BIAS_SAMPLES } else { 0 },
                        // what the range choice and the target score on (held-out validation
                        // data score the target instead)
                        spread: match &per_point {
                            Some(_) => CHOOSE_SAMPLES,
                            None => 0,
                        }
                        .max(match (&flags.target, validation) {
                            (Some(_), None) => crate::target::TARGET_SAMPLES,
                            _ => 0,
                        }),
                    };
                    let (c, k) = calibrate_keeping(&module, samples, cf, &opts, cache.as_deref(), keep)
                        .map_err(|e| e.within(model))?;
                    kept = k;
                    if let Some(w) = &c.cache_warning {
                        say(format!("warning: calibration cache: {w}"));
                    }
                    if let Some(w) = &c.type_warning {
                        say(format!("warning: {from}: {w}"));
                    }
                    say(calibrated_line(&c, t.elapsed().as_secs_f64()));
                    if config.equalize_layers {
                        say(equalized_line(&module, &config));
                    }
                    let mut stats = c.stats;
                    if let Some(candidates) = &per_point {
                        let scored = dataset.or(kept.spread.as_ref()).ok_or_else(|| {
                            usage("choosing ranges needs the samples kept from the calibration stream to have one shape; give the data as a file or arrays")
                        })?;
                        let samples = spread_samples(&module, scored, &cf.overrides, CHOOSE_SAMPLES)?;
                        let choice = quantize::choose_range::choose_ranges(&module, &mut stats, &config, candidates, &samples)
                            .map_err(|e| JobError::from(e).within(model))?;
                        say(choice.to_string());
                    }
                    Ok(stats)
                }
            };
            chosen?
        }
        StatsSource::None => {
            if config.activations.is_some() {
                return Err(usage(
                    "quantize needs statistics or calibration data (or activations 'none' for weight-only)",
                ));
            }
            weight_only_stats(&module, &config)?
        }
    };
    let mut config = config;
    // the samples GPTQ, bias correction and a quality target measure on
    let first = target_data.or(kept.first.as_ref());
    // GPTQ where quantir calibrates; from a stats file the weights round to nearest
    let gptq = config.gptq
        && stats_source_calibrates
        && matches!(
            config.weights,
            crate::recipe::WeightMode::Int8 | crate::recipe::WeightMode::Int4
        );
    // both measure the prepared module: prepared once
    if first.is_some() && (gptq || config.bias_correction) {
        quantize::prepare_with(&module, &config)?;
    }
    if gptq {
        match first {
            Some(data) => {
                let g = weight_grams(&module, &config, data, (target_feed.0, &target_feed.1)).map_err(|e| e.within(model))?;
                say(g.to_string());
                config.weight_grams = g.grams;
                if config.gptq_asymmetric {
                    let g = asymmetric_weight_grams(&module, &twin, &stats, &mut config, data, (target_feed.0, &target_feed.1))
                        .map_err(|e| e.within(model))?;
                    say(g.to_string());
                }
            }
            None => say("warning: GPTQ measures on the calibration stream's first samples, but their shapes differ; weights rounded to nearest (give the data as a file or arrays)".into()),
        }
    }
    if config.bias_correction {
        match (first, stats_source_calibrates) {
            (Some(data), _) => {
                let target = flags.target.is_some();
                let feed = (target_feed.0, target_feed.1.as_slice());
                let bc = match config.bias_correction_sequential {
                    true => {
                        let mut bc = sequential_bias_shifts(&module, &twin, &stats, &mut config, data, feed)
                            .map_err(|e| e.within(model))?;
                        if target {
                            // a layer whose input a target raises to float takes the shift of
                            // its weights' rounding alone, as with the alone form
                            bc.float_input_shifts = correct_biases(&module, &stats, &config, data, feed, true)
                                .map_err(|e| e.within(model))?
                                .float_input_shifts;
                        }
                        bc
                    }
                    false => correct_biases(&module, &stats, &config, data, feed, target).map_err(|e| e.within(model))?,
                };
                say(bc.to_string());
                config.bias_shifts = bc.shifts;
                config.bias_shifts_float_input = bc.float_input_shifts;
            }
            (None, true) => {
                return Err(usage(
                    "bias correction measures on the calibration stream's first samples, but their shapes differ; give the data as a file or arrays, or --no-bias-correction",
                ))
            }
            (None, false) => say("warning: bias correction needs calibration data (--data); not made".into()),
        }
    }
    // held-out samples where given: a target scored on the data that set the ranges, GPTQ and
    // bias correction can hold there and not on other inputs
    let (scored, scored_on) = match validation {
        Some(v) => (Some(v), "validation"),
        None => (target_data.or(kept.spread.as_ref()), "calibration"),
    };
    let (config, target) = match (&flags.target, scored) {
        (Some(goal), Some(data)) => {
            let target_twin = || twin().map_err(|e| crate::target::TargetError::Load(e.to_string()));
            // a trial write of a candidate, in the output's format
            let writable = |m: &Module| -> Result<(), String> {
                let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
                let name = output.file_name().map(PathBuf::from).unwrap_or_else(|| "model.onnx".into());
                formats::model::save(m, &dir.path().join(name), &[]).map_err(|e| {
                    let text = e.to_string();
                    // without the temporary path
                    text.split_once(": ").map_or(text.clone(), |(_, why)| why.to_string())
                })
            };
            let (threads, overrides) = &target_feed;
            let r = crate::target::reach_target(
                &target_twin, &writable, &stats, &config, data, scored_on, goal, *threads, overrides, say,
            )
                .map_err(|e| JobError::from(e).within(model))?;
            say(target_line(&r.report));
            (r.config, Some(r.report))
        }
        (Some(_), None) => {
            return Err(usage(
                "a quality target is scored on samples kept from the calibration stream, but their shapes differ; give the data as a file or arrays",
            ))
        }
        (None, _) => (config, None),
    };
    let t_calib = t0.elapsed();
    let mut report = quantize::quantize_module(&module, &stats, &config).map_err(|e| {
        let e = JobError::from(e);
        if lowered.is_some() && stats_file.is_some() {
            // the usual cause: statistics of the TF form for its ONNX form
            JobError::In {
                context: format!("{} (for an .onnx output, calibrate with --onnx)", model.display()),
                source: Box::new(e),
            }
        } else {
            e.within(model)
        }
    })?;
    if let Some(t) = &target {
        // so that `evaluate --per-layer` can say which layers the target raised, and why
        crate::precision::mark_raised(&module, &t.marks());
    }
    let mut inputs: Vec<&Path> = vec![model];
    inputs.extend(stats_file);
    let t_save = std::time::Instant::now();
    formats::model::save(&module, output, &inputs)?;
    report
        .stages
        .insert(0, ("load + calibrate".into(), t_calib.as_secs_f64()));
    report.stages.push(("save".into(), t_save.elapsed().as_secs_f64()));
    for w in quantize_warnings(&report) {
        say(format!("warning: {w}"));
    }
    Ok(Quantized {
        config,
        report,
        stats,
        target,
    })
}

/// The line saying what a quality target's search did.
pub fn target_line(r: &crate::target::TargetReport) -> String {
    let count = |kind: &str, to: &str| r.raised.iter().filter(|p| p.kind == kind && p.to == to).count();
    let ops = match count("op", "float") {
        0 => String::new(),
        // why ops rather than activations (none reached it, or they floated more MACs) was
        // said as the search went
        n => format!(" and {n} compute ops left float (weights and all)"),
    };
    let (base, got) = r.figures();
    format!(
        "target {} reached: {} (all int8: {}) on {} {} samples with {} of {} activations raised ({} to int16, {} to float){ops}; {} evaluations in {:.1} s",
        r.goal,
        r.goal.show(got),
        r.goal.show(base),
        r.samples,
        r.scored_on,
        count("activation", "int16") + count("activation", "float"),
        r.points,
        count("activation", "int16"),
        count("activation", "float"),
        r.evaluations,
        r.seconds
    )
}

/// The inputs of one run from named arrays, in the function's order: each array goes to the
/// input of its name (or tensor key); a function with one input takes the only array. Types
/// are checked when the program runs.
pub fn feed_of(inputs: &[interp::InputSpec], mut arrays: Vec<(String, Tensor)>) -> Result<Vec<Tensor>, JobError> {
    let names = |a: &[(String, Tensor)]| a.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(", ");
    if let ([_], [_]) = (inputs, arrays.as_slice()) {
        return Ok(vec![arrays.remove(0).1]);
    }
    let mut feed = Vec::with_capacity(inputs.len());
    for spec in inputs {
        let Some(at) = arrays.iter().position(|(n, _)| *n == spec.name || *n == spec.key) else {
            return Err(usage(format!(
                "no array for input '{}' ({}); arrays: {}",
                spec.name,
                spec.r#type,
                names(&arrays)
            )));
        };
        feed.push(arrays.remove(at).1);
    }
    if !arrays.is_empty() {
        return Err(usage(format!("arrays {} name no input of the model", names(&arrays))));
    }
    Ok(feed)
}
