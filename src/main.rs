//! The `quantir` command line: parse arguments, call the library, print.

use anyhow::{bail, Context as _, Result};
use clap::{Parser, Subcommand};
use quantir::params::{self, RangeOptions, Scheme, StorageType};
use quantir::{formats, inspect, interp, ir, passes, quantize, run, stats_io};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "quantir", version, about = "Post-training quantization on MLIR")]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Signature of a SavedModel directory to import (default: serving_default; models in
    /// other formats have one function and ignore it).
    #[arg(long, global = true, value_name = "NAME")]
    signature: Option<String>,
}

#[derive(Subcommand)]
enum Command {
    /// Functions, op counts, constants and float tensors of a model.
    Inspect {
        model: PathBuf,
        /// Print a JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Run rewriter passes in order (mlir-opt style); no --pass is a faithful round trip.
    Opt {
        model: PathBuf,
        /// A pass to run (repeatable, in order).
        #[arg(long = "pass", value_name = "NAME")]
        passes: Vec<String>,
        /// Output file: .mlir (text), .mlirbc (bytecode) or .onnx (ONNX ops: an ONNX import, or
        /// a TF model after --pass tf-to-onnx).
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Run a model on every sample of a data set and write its outputs (.npz).
    Run {
        model: PathBuf,
        /// .npz file or folder of .npy files; the first axis of every array indexes samples.
        #[arg(long)]
        data: PathBuf,
        #[arg(short, long)]
        output: PathBuf,
        /// Bind an input to an array: --input NAME=ARRAY (repeatable).
        #[arg(long = "input", value_name = "NAME=ARRAY")]
        inputs: Vec<String>,
        /// Worker threads (0 = all cores).
        #[arg(long, default_value_t = 0)]
        threads: usize,
        /// Run only the first N samples.
        #[arg(long)]
        limit: Option<usize>,
        /// Function to run (default: main, else the first public function).
        #[arg(long)]
        function: Option<String>,
        #[command(flatten)]
        images: ImageArgs,
    },
    /// Gather statistics of every tensor that will be quantized, from sample data.
    Calibrate {
        model: PathBuf,
        #[command(flatten)]
        calib: CalibArgs,
        /// Calibrate the ONNX form of a TF model (what `quantize -o x.onnx` quantizes).
        #[arg(long)]
        onnx: bool,
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Quantize a model from statistics (or calibrate on --data first).
    Quantize {
        model: PathBuf,
        /// Statistics from `quantir calibrate` on the same model.
        #[arg(long, conflicts_with = "data")]
        stats: Option<PathBuf>,
        #[command(flatten)]
        calib: OptCalibArgs,
        #[command(flatten)]
        recipe: RecipeArgs,
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Compare a quantized model with its float original on held-out data.
    Evaluate {
        float_model: PathBuf,
        quant_model: PathBuf,
        #[arg(long)]
        data: PathBuf,
        /// Integer array of class labels in the data (for accuracy).
        #[arg(long)]
        labels: Option<String>,
        /// SQNR of every layer both models compute, worst first.
        #[arg(long)]
        per_layer: bool,
        /// Write an HTML report.
        #[arg(long)]
        report: Option<PathBuf>,
        #[arg(long = "input", value_name = "NAME=ARRAY")]
        inputs: Vec<String>,
        #[arg(long, default_value_t = 0)]
        threads: usize,
        #[arg(long)]
        limit: Option<usize>,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        images: ImageArgs,
    },
    /// Merge statistics of calibration shards (same model, same method).
    Merge {
        #[arg(required = true)]
        inputs: Vec<PathBuf>,
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Scale and zero point for a range, as a target runtime's own tool computes them.
    Params {
        /// Range minimum; several comma-separated values give per-channel parameters.
        #[arg(long, allow_hyphen_values = true, value_delimiter = ',', required = true)]
        min: Vec<f64>,
        /// Range maximum; as many values as --min.
        #[arg(long, allow_hyphen_values = true, value_delimiter = ',', required = true)]
        max: Vec<f64>,
        /// Storage type: int8, uint8, int16, uint16, int4, uint4, int32.
        #[arg(long, default_value = "int8")]
        dtype: String,
        /// mlir (TF/MLIR nudged), onnx (onnxruntime), torch (PyTorch observers).
        #[arg(long, default_value = "mlir")]
        scheme: String,
        #[arg(long)]
        symmetric: bool,
        #[arg(long)]
        narrow_range: bool,
        #[arg(long)]
        reduce_range: bool,
        /// Channel axis recorded in per-channel parameters.
        #[arg(long, default_value_t = 0)]
        axis: usize,
        #[arg(long)]
        json: bool,
    },
}

/// A command line that parsed but asks for something that does not exist (exit code 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct UsageError(String);

/// `NAME=ARRAY` pairs of `--input`.
fn parse_overrides(v: &[String]) -> Result<Vec<(String, String)>> {
    v.iter()
        .map(|s| match s.split_once('=') {
            Some((a, b)) if !a.is_empty() && !b.is_empty() => Ok((a.to_string(), b.to_string())),
            _ => Err(UsageError(format!("--input takes NAME=ARRAY, got '{s}'")).into()),
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

#[derive(clap::Args)]
struct CalibArgs {
    /// .npz file or folder of .npy files (first axis = samples).
    #[arg(long)]
    data: PathBuf,
    #[command(flatten)]
    opts: CalibOpts,
}

#[derive(clap::Args)]
struct OptCalibArgs {
    /// Calibrate on this data first (instead of --stats).
    #[arg(long)]
    data: Option<PathBuf>,
    /// Calibrate even when the cache holds statistics for this model, data and method.
    #[arg(long)]
    no_cache: bool,
    #[command(flatten)]
    opts: CalibOpts,
}

#[derive(clap::Args)]
struct CalibOpts {
    /// minmax, avg-minmax, ema-minmax, percentile, percentile-symmetric, entropy, mse,
    /// mse-symmetric [default: minmax].
    #[arg(long)]
    method: Option<String>,
    /// Percentile for the percentile methods (default 99.999).
    #[arg(long)]
    percentile: Option<f64>,
    /// Histogram resolution for histogram methods.
    #[arg(long, default_value_t = 2048)]
    bins: usize,
    /// Calibrate shard I of N (samples I, I+N, ...), for `quantir merge`.
    #[arg(long, value_name = "I/N")]
    shard: Option<String>,
    /// Skip NaN/Inf values (counted) instead of failing.
    #[arg(long)]
    skip_non_finite: bool,
    #[arg(long = "input", value_name = "NAME=ARRAY")]
    inputs: Vec<String>,
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// Use only the first N samples.
    #[arg(long)]
    limit: Option<usize>,
    #[command(flatten)]
    images: ImageArgs,
}

/// How a folder of images becomes samples.
#[derive(clap::Args)]
struct ImageArgs {
    /// Resize images to H,W (default: the model input's size).
    #[arg(long, value_name = "H,W")]
    image_size: Option<String>,
    /// Per-channel mean subtracted from pixels scaled to [0, 1] (one value or one per channel).
    #[arg(long, value_delimiter = ',', allow_hyphen_values = true, default_value = "0")]
    mean: Vec<f32>,
    /// Per-channel standard deviation the centred pixels are divided by.
    #[arg(long, value_delimiter = ',', default_value = "1")]
    std: Vec<f32>,
    /// Layout of the model's image input: nhwc or nchw.
    #[arg(long, default_value = "nhwc")]
    layout: String,
}

impl ImageArgs {
    /// Opens `.npz`, `.npy`, a folder of `.npy` or a folder of images.
    fn open(&self, path: &std::path::Path, limit: Option<usize>) -> Result<formats::data::Dataset> {
        let size = match &self.image_size {
            None => None,
            Some(t) => {
                let bad = || UsageError(format!("--image-size takes H,W (two positive integers), got '{t}'"));
                let (h, w) = t.split_once(',').ok_or_else(bad)?;
                let (h, w) = (
                    h.trim().parse::<usize>().map_err(|_| bad())?,
                    w.trim().parse::<usize>().map_err(|_| bad())?,
                );
                if h == 0 || w == 0 {
                    return Err(bad().into());
                }
                Some((h, w))
            }
        };
        let options = formats::images::ImageOptions {
            size,
            mean: self.mean.clone(),
            std: self.std.clone(),
            layout: self
                .layout
                .parse()
                .map_err(|e: String| UsageError(format!("--layout: {e}")))?,
            limit,
        };
        Ok(formats::data::Dataset::open_with(path, &options)?)
    }
}

fn parse_shard(s: &str) -> Result<(usize, usize)> {
    let bad = || UsageError(format!("--shard takes I/N with 0 <= I < N, got '{s}'"));
    let (i, n) = s.split_once('/').ok_or_else(bad)?;
    let (i, n) = (
        i.trim().parse::<usize>().map_err(|_| bad())?,
        n.trim().parse::<usize>().map_err(|_| bad())?,
    );
    if n == 0 || i >= n {
        return Err(bad().into());
    }
    Ok((i, n))
}

/// How to quantize: the options of `quantize`, on top of an optional `--config` recipe file.
#[derive(clap::Args)]
struct RecipeArgs {
    /// A recipe file (TOML): defaults plus per-op / per-tensor overrides; flags given on the
    /// command line win over its top-level settings.
    #[arg(long, value_name = "RECIPE.toml")]
    config: Option<PathBuf>,
    /// Parameter scheme: mlir (TF/MLIR nudged), onnx, torch [default: mlir].
    #[arg(long)]
    scheme: Option<String>,
    /// Weight storage: int8, int4, fp16, bf16 [default: int8].
    #[arg(long)]
    weights: Option<String>,
    /// Activation storage: int8, uint8, int16, none (weight-only) [default: int8].
    #[arg(long)]
    activations: Option<String>,
    /// Per-tensor weights instead of per-channel.
    #[arg(long)]
    per_tensor: bool,
    #[arg(long)]
    symmetric_activations: bool,
    /// Quantize the model's outputs too (fully integer graph); by default they stay float.
    #[arg(long)]
    quantize_outputs: bool,
    /// 7-bit weights (int8 storage, onnx and torch schemes): for onnxruntime on x86 CPUs
    /// without VNNI, whose int8 kernels saturate on full-range weights.
    #[arg(long)]
    reduce_range: bool,
    /// Leave ops (by name, `*` wildcards) or tensors (by key) in float (repeatable).
    #[arg(long)]
    exclude: Vec<String>,
}

impl RecipeArgs {
    /// The settings; `target` is the output model, whose format picks the default scheme
    /// (ONNX's parameter arithmetic for an .onnx output, MLIR/TF's otherwise).
    fn config(&self, target: Option<&std::path::Path>) -> Result<quantize::QuantConfig> {
        let mut base = quantize::QuantConfig::default();
        if target.is_some_and(formats::model::is_onnx) {
            base.scheme = Scheme::Onnx;
        }
        let mut c = match &self.config {
            Some(p) => quantize::recipe::load_onto(p, base)?,
            None => base,
        };
        let usage = |e: String| anyhow::Error::from(UsageError(e));
        if let Some(s) = &self.scheme {
            c.scheme = s.parse().map_err(|e: params::ParamsError| usage(e.to_string()))?;
        }
        if let Some(w) = &self.weights {
            c.weights = w.parse().map_err(|e: String| usage(format!("--weights: {e}")))?;
        }
        if let Some(a) = &self.activations {
            c.activations = quantize::parse_activations(a).map_err(|e| usage(format!("--activations: {e}")))?;
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
    data: &std::path::Path,
    o: &CalibOpts,
    config: &quantize::QuantConfig,
    cache: Option<&std::path::Path>,
) -> Result<quantir::calibration::StatsFile> {
    // the command line wins over a recipe's method, which wins over minmax
    let (name, pct) = match &o.method {
        Some(m) => (m.as_str(), o.percentile),
        None => (
            config.method.as_deref().unwrap_or("minmax"),
            o.percentile.or(config.percentile),
        ),
    };
    let method = quantir::calibration::Method::from_name(name, pct).map_err(|e| UsageError(e.to_string()))?;
    let shard = o.shard.as_deref().map(parse_shard).transpose()?;
    let overrides = parse_overrides(&o.inputs)?;
    let program = interp::Program::compile(module, None)?;
    let dataset = o.images.open(data, o.limit)?;
    let binding = formats::data::bind(&dataset, &program.inputs, &overrides)?;
    let opts = quantize::CalibrateOptions {
        method,
        bins: o.bins,
        threads: o.threads,
        limit: o.limit,
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
fn lower_to_onnx(module: &melior::ir::Module, model: &std::path::Path) -> Result<bool> {
    let Some(report) = quantize::lower_to_onnx(module).with_context(|| model.display().to_string())? else {
        return Ok(false);
    };
    let lowered = report.get(&quantir::passes::Change::TfOpsLowered);
    let transposes = report.get(&quantir::passes::Change::Written("onnx.Transpose".into()));
    eprintln!("lowered {lowered} TF ops to ONNX ({transposes} layout transposes)");
    Ok(true)
}

fn run(cli: Cli) -> Result<()> {
    let signature = cli.signature.as_deref();
    // --signature names a signature of whichever model is a SavedModel directory
    let load = |ctx, path: &std::path::Path| {
        let sig = signature.filter(|_| formats::savedmodel::is_saved_model(path));
        formats::model::load_signature(ctx, path, sig)
    };
    match cli.command {
        Command::Inspect { model, json } => {
            let ctx = ir::new_context();
            let signatures = if formats::savedmodel::is_saved_model(&model) {
                formats::savedmodel::signatures(&model)?
            } else {
                Vec::new()
            };
            let module = match load(&ctx, &model) {
                Ok(m) => m,
                Err(e) => {
                    // the signatures still tell which one to import instead
                    if !json {
                        for s in &signatures {
                            out(&s.to_string())?;
                        }
                    }
                    return Err(e.into());
                }
            };
            let mut report = inspect::inspect(&module).with_context(|| model.display().to_string())?;
            report.signatures = signatures;
            if json {
                out(&format!("{}\n", serde_json::to_string_pretty(&report)?))?;
            } else {
                out(&report.to_string())?;
            }
        }
        Command::Opt {
            model,
            passes: names,
            output,
        } => {
            if let Some(bad) = names.iter().find(|n| passes::find(n).is_none()) {
                return Err(UsageError(format!(
                    "unknown pass '{bad}'; known passes: {}",
                    passes::names().join(", ")
                ))
                .into());
            }
            let ctx = ir::new_context();
            let module = load(&ctx, &model)?;
            let reports = passes::run_pipeline(&module, &names, &passes::PassOptions::default())
                .with_context(|| model.display().to_string())?;
            quantir::formats::model::save(&module, &output, &[&model])?;
            for (name, r) in reports {
                let changes: Vec<String> = r.changes.iter().map(|(k, v)| format!("{v} {k}")).collect();
                eprintln!(
                    "{name}: {}",
                    if changes.is_empty() {
                        "no change".into()
                    } else {
                        changes.join(", ")
                    }
                );
                for w in r.warnings {
                    eprintln!("{name}: warning: {w}");
                }
            }
        }
        Command::Run {
            model,
            data,
            output,
            inputs,
            threads,
            limit,
            function,
            images,
        } => {
            let overrides = parse_overrides(&inputs)?;
            let ctx = ir::new_context();
            let module = load(&ctx, &model)?;
            let program =
                interp::Program::compile(&module, function.as_deref()).with_context(|| model.display().to_string())?;
            let dataset = images.open(&data, limit)?;
            let binding = formats::data::bind(&dataset, &program.inputs, &overrides)?;
            let t0 = std::time::Instant::now();
            let indices: Vec<usize> = (0..limit.map_or(binding.samples, |l| l.min(binding.samples))).collect();
            let outs = run::run_samples(
                &program,
                &binding,
                &indices,
                threads,
                &Default::default(),
                true,
                &mut |_, _, _| Ok(()),
                "run",
            )?;
            let secs = t0.elapsed().as_secs_f64();
            let concat = binding.columns.iter().all(|c| c.add_batch);
            let stacked = run::stack_outputs(&outs, concat)?;
            let named: Vec<(String, quantir::tensor::Tensor)> =
                program.output_names.iter().cloned().zip(stacked).collect();
            run::write_npz(&output, &named, &[&model, &data])?;
            eprintln!(
                "ran {} samples in {secs:.2} s ({:.1} samples/s); wrote {}",
                outs.len(),
                outs.len() as f64 / secs.max(1e-9),
                output.display()
            );
        }
        Command::Calibrate {
            model,
            calib,
            onnx,
            output,
        } => {
            let ctx = ir::new_context();
            let module = load(&ctx, &model)?;
            if onnx {
                lower_to_onnx(&module, &model)?;
            }
            let stats = run_calibration(
                &module,
                &calib.data,
                &calib.opts,
                &quantize::QuantConfig::default(),
                None,
            )
            .with_context(|| model.display().to_string())?;
            stats_io::save_stats(&stats, &output, &[&model, &calib.data])?;
        }
        Command::Quantize {
            model,
            stats: stats_file,
            calib,
            recipe,
            output,
        } => {
            let config = recipe.config(Some(&output))?;
            let t0 = std::time::Instant::now();
            let ctx = ir::new_context();
            let module = load(&ctx, &model)?;
            let lowered = formats::model::is_onnx(&output) && lower_to_onnx(&module, &model)?;
            let stats = match (&stats_file, &calib.data) {
                (Some(p), _) => stats_io::load_stats(p)?,
                (None, Some(d)) => {
                    // calibration prepares the module in place, as quantize_module would
                    let cache = if calib.no_cache {
                        None
                    } else {
                        quantize::cache::default_dir()
                    };
                    run_calibration(&module, d, &calib.opts, &config, cache.as_deref())
                        .with_context(|| model.display().to_string())?
                }
                (None, None) => {
                    if config.activations.is_some() {
                        return Err(UsageError(
                            "quantize needs --stats or --data (or --activations none for weight-only)".into(),
                        )
                        .into());
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
                if lowered && stats_file.is_some() {
                    // the usual cause: statistics of the TF form for its ONNX form
                    format!("{} (for an .onnx output, calibrate with --onnx)", model.display())
                } else {
                    model.display().to_string()
                }
            })?;
            let mut inputs: Vec<&std::path::Path> = vec![&model];
            if let Some(s) = &stats_file {
                inputs.push(s);
            }
            let t_save = std::time::Instant::now();
            quantir::formats::model::save(&module, &output, &inputs)?;
            report
                .stages
                .insert(0, ("load + calibrate".into(), t_calib.as_secs_f64()));
            report.stages.push(("save".into(), t_save.elapsed().as_secs_f64()));
            for w in report.weights.warnings.iter().chain(&report.qdq.warnings) {
                eprintln!("warning: {w}");
            }
            eprintln!("{report}");
            eprintln!(
                "wrote {} ({:?} weights, {} activations, scheme {})",
                output.display(),
                config.weights,
                config.activations.map_or("float".to_string(), |a| a.to_string()),
                config.scheme,
            );
        }
        Command::Evaluate {
            float_model,
            quant_model,
            data,
            labels,
            per_layer,
            report,
            inputs,
            threads,
            limit,
            json,
            images,
        } => {
            let ctx = ir::new_context();
            let float = load(&ctx, &float_model)?;
            let quant = load(&ctx, &quant_model)?;
            let dataset = images.open(&data, limit)?;
            let opts = quantir::evaluate::EvalOptions {
                threads,
                limit,
                labels,
                per_layer: per_layer || report.is_some(),
                histograms: report.is_some(),
                overrides: parse_overrides(&inputs)?,
            };
            let r = quantir::evaluate::evaluate(&float, &quant, &dataset, &opts)?;
            if let Some(path) = &report {
                quantir::fsutil::write_atomic(
                    path,
                    quantir::report::html(&r, &quant_model.display().to_string()).as_bytes(),
                    &[&float_model, &quant_model, &data],
                )?;
            }
            if json {
                out(&format!("{}\n", serde_json::to_string_pretty(&r)?))?;
            } else {
                out(&r.to_string())?;
            }
        }
        Command::Merge { inputs, output } => {
            let merged = stats_io::merge_files(&inputs)?;
            let refs: Vec<&std::path::Path> = inputs.iter().map(PathBuf::as_path).collect();
            stats_io::save_stats(&merged, &output, &refs)?;
            eprintln!(
                "merged {} files: {} samples, {} tensors",
                inputs.len(),
                merged.num_samples,
                merged.tensors.len()
            );
        }
        Command::Params {
            min,
            max,
            dtype,
            scheme,
            symmetric,
            narrow_range,
            reduce_range,
            axis,
            json,
        } => {
            let scheme: Scheme = scheme.parse()?;
            let dtype: StorageType = dtype.parse()?;
            let opts = RangeOptions {
                symmetric,
                narrow_range,
                reduce_range,
                ..Default::default()
            };
            if min.len() != max.len() {
                bail!("--min has {} values but --max has {}", min.len(), max.len());
            }
            let p = if min.len() == 1 {
                params::compute(scheme, dtype, min[0], max[0], &opts)?
            } else {
                params::compute_per_axis(scheme, dtype, &min, &max, axis, &opts)?
            };
            if json {
                out(&format!("{}\n", serde_json::to_string(&params::ParamsJson::from(&p))?))?;
            } else {
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
                out(&text)?;
            }
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("quantir: error: {e:#}");
            ExitCode::from(if e.is::<UsageError>() { 2 } else { 1 })
        }
    }
}
