//! The `quantir` command line: parse arguments, call the library, print — one function per
//! subcommand. The arguments are declared in `cli/args.rs`.

mod cli;

use anyhow::{bail, Context as _, Result};
use clap::Parser;
use cli::args::{
    name_of, CalibOpts, CalibrateArgs, Cli, Command, EvaluateArgs, ImageArgs, InspectArgs, MergeArgs, MethodArg,
    OptArgs, ParamsArgs, QuantizeArgs, RecipeArgs, RunArgs,
};
use quantir::params::{self, RangeOptions, Scheme, StorageType};
use quantir::{formats, inspect, interp, ir, passes, quantize, run, stats_io};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// A command line that parsed but asks for something that does not exist (exit code 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct UsageError(String);

fn usage(e: impl std::fmt::Display) -> anyhow::Error {
    UsageError(e.to_string()).into()
}

/// `NAME=ARRAY` pairs of `--input`.
fn parse_overrides(v: &[String]) -> Result<Vec<(String, String)>> {
    v.iter()
        .map(|s| match s.split_once('=') {
            Some((a, b)) if !a.is_empty() && !b.is_empty() => Ok((a.to_string(), b.to_string())),
            _ => Err(usage(format!("--input takes NAME=ARRAY, got '{s}'"))),
        })
        .collect()
}

/// Writes to stdout; a closed pipe (`quantir inspect m | head`) is not an error.
fn out(text: &str) -> Result<()> {
    use std::io::Write;
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

impl ImageArgs {
    /// Opens `.npz`, `.npy`, a folder of `.npy` or a folder of images.
    fn open(&self, path: &Path, limit: Option<usize>) -> Result<formats::data::Dataset> {
        let size = match &self.image_size {
            None => None,
            Some(t) => {
                let bad = || usage(format!("--image-size takes H,W (two positive integers), got '{t}'"));
                let (h, w) = t.split_once(',').ok_or_else(bad)?;
                let (h, w) = (
                    h.trim().parse::<usize>().map_err(|_| bad())?,
                    w.trim().parse::<usize>().map_err(|_| bad())?,
                );
                if h == 0 || w == 0 {
                    return Err(bad());
                }
                Some((h, w))
            }
        };
        let options = formats::images::ImageOptions {
            size,
            mean: self.mean.clone(),
            std: self.std.clone(),
            layout: name_of(&self.layout).parse().map_err(usage)?,
            limit,
        };
        Ok(formats::data::Dataset::open_with(path, &options)?)
    }
}

fn parse_shard(s: &str) -> Result<(usize, usize)> {
    let bad = || usage(format!("--shard takes I/N with 0 <= I < N, got '{s}'"));
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

impl RecipeArgs {
    /// The settings; `target` is the output model, whose format picks the default scheme
    /// (ONNX's parameter arithmetic for an .onnx output, MLIR/TF's otherwise).
    fn config(&self, target: Option<&Path>) -> Result<quantize::QuantConfig> {
        let mut base = quantize::QuantConfig::default();
        if target.is_some_and(formats::model::is_onnx) {
            base.scheme = Scheme::Onnx;
        }
        let mut c = match &self.config {
            Some(p) => quantize::recipe::load_onto(p, base)?,
            None => base,
        };
        if let Some(s) = &self.scheme {
            c.scheme = name_of(s).parse().map_err(usage)?;
        }
        if let Some(w) = &self.weights {
            c.weights = name_of(w)
                .parse()
                .map_err(|e: String| usage(format!("--weights: {e}")))?;
        }
        if let Some(a) = &self.activations {
            c.activations =
                quantize::parse_activations(&name_of(a)).map_err(|e| usage(format!("--activations: {e}")))?;
        }
        c.per_channel &= !self.per_tensor;
        c.symmetric_activations |= self.symmetric_activations;
        c.quantize_outputs |= self.quantize_outputs;
        c.reduce_range |= self.reduce_range;
        c.exclude.extend(self.exclude.iter().cloned());
        Ok(c)
    }
}

/// Loads the data, binds it to the prepared model's inputs and calibrates.
fn run_calibration(
    module: &melior::ir::Module,
    data: &Path,
    o: &CalibOpts,
    config: &quantize::QuantConfig,
    cache: Option<&Path>,
    method: Option<&MethodArg>,
) -> Result<quantir::calibration::StatsFile> {
    // --choose-method's candidate, else the command line, which wins over a recipe's method,
    // which wins over minmax
    let (name, pct) = match method.or(o.method.as_ref()) {
        Some(m) => (name_of(m), o.percentile),
        None => (
            config.method.clone().unwrap_or_else(|| "minmax".into()),
            o.percentile.or(config.percentile),
        ),
    };
    let method = quantir::calibration::Method::from_name(&name, pct).map_err(usage)?;
    let shard = o.shard.as_deref().map(parse_shard).transpose()?;
    let overrides = parse_overrides(&o.feed.inputs)?;
    let program = interp::Program::compile(module, None)?;
    let dataset = o.images.open(data, o.feed.limit)?;
    let binding = formats::data::bind(&dataset, &program.inputs, &overrides)?;
    let opts = quantize::CalibrateOptions {
        method,
        bins: o.bins,
        threads: o.feed.threads,
        limit: o.feed.limit,
        shard,
        non_finite: if o.skip_non_finite {
            quantir::calibration::NonFinitePolicy::Skip
        } else {
            quantir::calibration::NonFinitePolicy::Error
        },
        config: config.clone(),
    };
    let t0 = std::time::Instant::now();
    let done = quantize::calibrate_cached(module, &binding, &opts, cache)?;
    if let Some(w) = &done.cache_warning {
        eprintln!("warning: calibration cache: {w}");
    }
    if let Some(w) = &done.type_warning {
        eprintln!("warning: {}: {w}", data.display());
    }
    let stats = done.stats;
    if let Some(key) = &done.from_cache {
        eprintln!(
            "statistics of {} tensors on {} samples from cache ({key}; --no-cache to recalibrate)",
            stats.tensors.len(),
            stats.num_samples
        );
        return Ok(stats);
    }
    eprintln!(
        "calibrated {} tensors on {} samples in {:.2} s ({:?})",
        stats.tensors.len(),
        stats.num_samples,
        t0.elapsed().as_secs_f64(),
        stats.method
    );
    Ok(stats)
}

/// Lowers a TF model to ONNX ops for an .onnx output, saying so; false when it had none.
fn lower_to_onnx(module: &melior::ir::Module, model: &Path) -> Result<bool> {
    let Some(report) = quantize::lower_to_onnx(module).with_context(|| model.display().to_string())? else {
        return Ok(false);
    };
    let lowered = report.get(&passes::Change::TfOpsLowered);
    let transposes = report.get(&passes::Change::Written("onnx.Transpose".into()));
    eprintln!("lowered {lowered} TF ops to ONNX ({transposes} layout transposes)");
    Ok(true)
}

/// Loads a model; `--signature` names a signature of whichever model is a SavedModel.
fn load<'c>(ctx: &'c melior::Context, path: &Path, signature: Option<&str>) -> Result<melior::ir::Module<'c>> {
    let sig = signature.filter(|_| formats::savedmodel::is_saved_model(path));
    Ok(formats::model::load_signature(ctx, path, sig)?)
}

fn cmd_inspect(a: &InspectArgs, signature: Option<&str>) -> Result<()> {
    let (model, json) = (a.model.as_path(), a.json);
    let ctx = ir::new_context();
    let signatures = if formats::savedmodel::is_saved_model(model) {
        formats::savedmodel::signatures(model)?
    } else {
        Vec::new()
    };
    let module = match load(&ctx, model, signature) {
        Ok(m) => m,
        Err(e) => {
            // the signatures still tell which one to import instead
            if !json {
                for s in &signatures {
                    out(&s.to_string())?;
                }
            }
            return Err(e);
        }
    };
    let resolved = match &a.data {
        Some(data) => {
            let program = interp::Program::compile(&module, None)?;
            let dataset = formats::data::Dataset::open(data)?;
            let binding = formats::data::bind(&dataset, &program.inputs, &[])?;
            quantize::resolve_types_from(&module, &binding)?.map(|t| inspect::ResolvedDims {
                data: data.display().to_string(),
                input_shapes: t.shapes,
                values_typed: t.outcome.refined,
                failure: t.outcome.failure,
            })
        }
        None => None,
    };
    let mut report = inspect::inspect(&module).with_context(|| model.display().to_string())?;
    report.signatures = signatures;
    report.resolved_from = resolved;
    if json {
        out(&format!("{}\n", serde_json::to_string_pretty(&report)?))
    } else {
        out(&report.to_string())
    }
}

fn cmd_opt(a: &OptArgs, signature: Option<&str>) -> Result<()> {
    let (model, output, stats) = (a.model.as_path(), a.output.as_path(), a.stats.as_deref());
    formats::model::check_output(output)?;
    let ctx = ir::new_context();
    let module = load(&ctx, model, signature)?;
    let options = passes::PassOptions {
        stats: stats.map(stats_io::load_stats).transpose()?,
        config: a.recipe.config(Some(output))?,
    };
    let reports = passes::run_pipeline(&module, &a.passes, &options).with_context(|| model.display().to_string())?;
    let mut inputs = vec![model];
    inputs.extend(stats);
    formats::model::save(&module, output, &inputs)?;
    for (name, r) in reports {
        eprintln!("{name}: {}", quantir::text::counts(&r.changes, "no change"));
        for w in r.warnings {
            eprintln!("{name}: warning: {w}");
        }
    }
    Ok(())
}

fn cmd_run(a: &RunArgs, signature: Option<&str>) -> Result<()> {
    let (model, data, output, feed) = (a.model.as_path(), a.data.as_path(), a.output.as_path(), &a.feed);
    let overrides = parse_overrides(&feed.inputs)?;
    let ctx = ir::new_context();
    let module = load(&ctx, model, signature)?;
    let program =
        interp::Program::compile(&module, a.function.as_deref()).with_context(|| model.display().to_string())?;
    let dataset = a.images.open(data, feed.limit)?;
    let mut binding = formats::data::bind(&dataset, &program.inputs, &overrides)?;
    binding.allow_non_finite = true;
    let t0 = std::time::Instant::now();
    let indices: Vec<usize> = (0..feed.limit.map_or(binding.samples, |l| l.min(binding.samples))).collect();
    let outs = run::run_samples(
        &program,
        &binding,
        &indices,
        feed.threads,
        &Default::default(),
        true,
        &mut |_, _, _| Ok(()),
        "run",
    )?;
    let secs = t0.elapsed().as_secs_f64();
    let concat = binding.columns.iter().all(|c| c.add_batch);
    let stacked = run::stack_outputs(&outs, concat)?;
    let named: Vec<(String, quantir::tensor::Tensor)> = program.output_names.iter().cloned().zip(stacked).collect();
    run::write_npz(output, &named, &[model, data])?;
    eprintln!(
        "ran {} samples in {secs:.2} s ({:.1} samples/s); wrote {}",
        outs.len(),
        outs.len() as f64 / secs.max(1e-9),
        output.display()
    );
    Ok(())
}

fn cmd_calibrate(a: &CalibrateArgs, signature: Option<&str>) -> Result<()> {
    let ctx = ir::new_context();
    let module = load(&ctx, &a.model, signature)?;
    if a.onnx {
        lower_to_onnx(&module, &a.model)?;
    }
    let stats = run_calibration(&module, &a.data, &a.opts, &quantize::QuantConfig::default(), None, None)
        .with_context(|| a.model.display().to_string())?;
    stats_io::save_stats(&stats, &a.output, &[&a.model, &a.data])?;
    Ok(())
}

/// Calibration samples `--choose-method` scores each candidate on.
const CHOOSE_SAMPLES: usize = 16;

/// `quantize --choose-method`: quantizes with each candidate range method and returns the
/// statistics of the one whose model is closest to the float model on the first
/// [`CHOOSE_SAMPLES`] calibration samples — the mean over the outputs of their SQNR in
/// quantir's interpreter (which reproduces onnxruntime's QDQ semantics). One method for the
/// whole model: per-layer choice is not made.
fn choose_method(
    a: &QuantizeArgs,
    config: &quantize::QuantConfig,
    signature: Option<&str>,
    data: &Path,
    cache: Option<&Path>,
) -> Result<quantir::calibration::StatsFile> {
    // the float model, the samples and the options every candidate is scored with
    let ctx = ir::new_context();
    let float = load(&ctx, &a.model, signature)?;
    if formats::model::is_onnx(&a.output) {
        quantize::lower_to_onnx(&float)?;
    }
    let dataset = a.opts.images.open(data, Some(CHOOSE_SAMPLES))?;
    let opts = quantir::evaluate::EvalOptions {
        threads: a.opts.feed.threads,
        limit: Some(CHOOSE_SAMPLES),
        labels: None,
        per_layer: false,
        histograms: false,
        overrides: parse_overrides(&a.opts.feed.inputs)?,
    };
    let mut best: Option<(f64, MethodArg, quantir::calibration::StatsFile)> = None;
    let mut said = Vec::new();
    for m in &a.candidates {
        let module = load(&ctx, &a.model, signature)?;
        if formats::model::is_onnx(&a.output) {
            quantize::lower_to_onnx(&module)?;
        }
        let stats = run_calibration(&module, data, &a.opts, config, cache, Some(m))?;
        quantize::quantize_module(&module, &stats, config).with_context(|| a.model.display().to_string())?;
        let r = quantir::evaluate::evaluate(&float, &module, &dataset, &opts)?;
        // an exact output counts as 100 dB
        let db: Vec<f64> = r
            .outputs
            .iter()
            .map(|o| o.sqnr_db.unwrap_or(100.0).min(100.0))
            .collect();
        let score = db.iter().sum::<f64>() / db.len().max(1) as f64;
        said.push(format!("{} {score:.2} dB", name_of(m)));
        if best.as_ref().is_none_or(|(s, _, _)| score > *s) {
            best = Some((score, m.clone(), stats));
        }
    }
    let (_, m, stats) = best.ok_or_else(|| usage("--choose-method needs at least one --candidates method"))?;
    eprintln!(
        "method: {} (mean output SQNR on {CHOOSE_SAMPLES} calibration samples: {})",
        name_of(&m),
        said.join(", ")
    );
    Ok(stats)
}

fn cmd_quantize(a: &QuantizeArgs, signature: Option<&str>) -> Result<()> {
    formats::model::check_output(&a.output)?;
    let config = a.recipe.config(Some(&a.output))?;
    let t0 = std::time::Instant::now();
    let ctx = ir::new_context();
    let module = load(&ctx, &a.model, signature)?;
    let lowered = formats::model::is_onnx(&a.output) && lower_to_onnx(&module, &a.model)?;
    let stats = match (a.stats.as_deref(), a.data.as_deref()) {
        (Some(p), _) => stats_io::load_stats(p)?,
        (None, Some(d)) => {
            // calibration prepares the module in place, as quantize_module would
            let cache = if a.no_cache {
                None
            } else {
                quantize::cache::default_dir()
            };
            // --choose-method calibrated the module's twin already: its statistics serve
            if a.choose_method {
                choose_method(a, &config, signature, d, cache.as_deref())
            } else {
                run_calibration(&module, d, &a.opts, &config, cache.as_deref(), None)
            }
            .with_context(|| a.model.display().to_string())?
        }
        (None, None) => {
            if config.activations.is_some() {
                return Err(usage(
                    "quantize needs --stats or --data (or --activations none for weight-only)",
                ));
            }
            quantize::prepare(&module)?;
            quantir::calibration::StatsFile::new(
                quantize::model_hash(&module),
                quantir::calibration::Method::MinMax,
                0,
                Default::default(),
            )
        }
    };
    let t_calib = t0.elapsed();
    let mut report = quantize::quantize_module(&module, &stats, &config).with_context(|| {
        if lowered && a.stats.is_some() {
            // the usual cause: statistics of the TF form for its ONNX form
            format!("{} (for an .onnx output, calibrate with --onnx)", a.model.display())
        } else {
            a.model.display().to_string()
        }
    })?;
    let mut inputs: Vec<&Path> = vec![&a.model];
    inputs.extend(a.stats.as_deref());
    let t_save = std::time::Instant::now();
    formats::model::save(&module, &a.output, &inputs)?;
    report
        .stages
        .insert(0, ("load + calibrate".into(), t_calib.as_secs_f64()));
    report.stages.push(("save".into(), t_save.elapsed().as_secs_f64()));
    for w in report.weights.warnings.iter().chain(&report.qdq.warnings) {
        eprintln!("warning: {w}");
    }
    for p in &report.unmatched_overrides {
        eprintln!(
            "warning: recipe override match = \"{p}\" selects no op and no tensor of the model; it changes nothing"
        );
    }
    if a.json {
        let doc = serde_json::json!({
            "output": a.output,
            "weights": format!("{:?}", config.weights).to_lowercase(),
            "activations": config.activations.map_or("float".to_string(), |s| s.to_string()),
            "scheme": config.scheme.to_string(),
            "ops": report.summary.ops,
            "totals": {
                "macs": report.summary.totals.macs,
                "int8_macs": report.summary.totals.int8_macs,
                "int8_mac_share": report.summary.totals.int8_mac_share,
                "ops_without_macs": report.summary.totals.ops_without_macs,
                "constant_bytes_before": report.bytes_before,
                "constant_bytes_after": report.bytes_after,
                "activation_points": report.activations,
            },
            "quantized_ops": report.summary.quantized_ops,
            "left_float": report.summary.left_float,
            "unknown_ops": report.summary.unknown_ops,
            "passes": {"quantize-weights": report.weights, "insert-qdq": report.qdq},
            "stages": report.stages.iter().map(|(k, s)| serde_json::json!({"stage": k, "seconds": s})).collect::<Vec<_>>(),
        });
        return out(&format!("{}\n", serde_json::to_string_pretty(&doc)?));
    }
    eprintln!("{report}");
    eprintln!(
        "wrote {} ({:?} weights, {} activations, scheme {})",
        a.output.display(),
        config.weights,
        config.activations.map_or("float".to_string(), |a| a.to_string()),
        config.scheme,
    );
    Ok(())
}

fn cmd_evaluate(a: &EvaluateArgs, signature: Option<&str>) -> Result<()> {
    let (float_model, quant_model, data, report) = (
        a.float_model.as_path(),
        a.quant_model.as_path(),
        a.data.as_path(),
        a.report.as_deref(),
    );
    let ctx = ir::new_context();
    let float = load(&ctx, float_model, signature)?;
    let quant = load(&ctx, quant_model, signature)?;
    let dataset = a.images.open(data, a.feed.limit)?;
    let opts = quantir::evaluate::EvalOptions {
        threads: a.feed.threads,
        limit: a.feed.limit,
        labels: a.labels.clone(),
        per_layer: a.per_layer || report.is_some(),
        histograms: report.is_some(),
        overrides: parse_overrides(&a.feed.inputs)?,
    };
    let r = quantir::evaluate::evaluate(&float, &quant, &dataset, &opts)?;
    if let Some(path) = report {
        quantir::fsutil::write_atomic(
            path,
            quantir::report::html(&r, &quant_model.display().to_string()).as_bytes(),
            &[float_model, quant_model, data],
        )?;
    }
    if a.json {
        out(&format!("{}\n", serde_json::to_string_pretty(&r)?))
    } else {
        out(&r.to_string())
    }
}

fn cmd_merge(a: &MergeArgs) -> Result<()> {
    let merged = stats_io::merge_files(&a.inputs)?;
    let refs: Vec<&Path> = a.inputs.iter().map(PathBuf::as_path).collect();
    stats_io::save_stats(&merged, &a.output, &refs)?;
    eprintln!(
        "merged {} files: {} samples, {} tensors",
        a.inputs.len(),
        merged.num_samples,
        merged.tensors.len()
    );
    Ok(())
}

fn cmd_params(a: &ParamsArgs) -> Result<()> {
    let (min, max) = (&a.min, &a.max);
    let dtype: StorageType = name_of(&a.dtype).parse()?;
    let scheme: Scheme = name_of(&a.scheme).parse()?;
    let opts = RangeOptions {
        symmetric: a.symmetric,
        narrow_range: a.narrow_range,
        reduce_range: a.reduce_range,
        ..Default::default()
    };
    if min.len() != max.len() {
        bail!("--min has {} values but --max has {}", min.len(), max.len());
    }
    let p = if min.len() == 1 {
        params::compute(scheme, dtype, min[0], max[0], &opts)?
    } else {
        params::compute_per_axis(scheme, dtype, min, max, a.axis, &opts)?
    };
    if a.json {
        return out(&format!("{}\n", serde_json::to_string(&params::ParamsJson::from(&p))?));
    }
    let mut text = format!("scheme {scheme}, {dtype} [{}, {}]\n", p.qmin, p.qmax);
    for (c, (s, z)) in p.scale.iter().zip(&p.zero_point).enumerate() {
        let label = if p.axis.is_some() {
            format!("channel {c}: ")
        } else {
            String::new()
        };
        text.push_str(&format!("{label}scale {s:e}  zero_point {z}\n"));
    }
    text.push_str(&format!("{}\n", p.mlir_type()));
    out(&text)
}

fn run(cli: Cli) -> Result<()> {
    let sig = cli.signature.as_deref();
    match &cli.command {
        Command::Inspect(a) => cmd_inspect(a, sig),
        Command::Opt(a) => cmd_opt(a, sig),
        Command::Run(a) => cmd_run(a, sig),
        Command::Calibrate(a) => cmd_calibrate(a, sig),
        Command::Quantize(a) => cmd_quantize(a, sig),
        Command::Evaluate(a) => cmd_evaluate(a, sig),
        Command::Merge(a) => cmd_merge(a),
        Command::Params(a) => cmd_params(a),
    }
}

/// The error and its causes on one line, each said once: the library's errors already spell
/// out their source in their own message (`{path}: cannot write: {source}`), so a cause whose
/// text is there is not repeated.
fn one_line(e: &anyhow::Error) -> String {
    let mut msg = e.to_string();
    for cause in e.chain().skip(1) {
        let c = cause.to_string();
        if !msg.contains(&c) {
            msg.push_str(": ");
            msg.push_str(&c);
        }
    }
    msg
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("quantir: error: {}", one_line(&e));
            ExitCode::from(if e.is::<UsageError>() { 2 } else { 1 })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::CommandFactory;

    /// Every subcommand, argument and option says what it is.
    #[test]
    fn every_argument_has_help() {
        let mut missing = Vec::new();
        let cli = Cli::command();
        for sub in cli.get_subcommands() {
            if sub.get_about().is_none() {
                missing.push(sub.get_name().to_string());
            }
            for a in sub.get_arguments() {
                if a.get_help().is_none() && !matches!(a.get_id().as_str(), "help" | "version") {
                    missing.push(format!("{} {}", sub.get_name(), a.get_id()));
                }
            }
        }
        assert!(missing.is_empty(), "without help text: {missing:?}");
    }
}
