//! The `quantir` command line: parse arguments, call the library, print — one function per
//! subcommand. The arguments are declared in `cli/args.rs`.

mod cli;

use anyhow::{bail, Context as _, Result};
use clap::Parser;
use cli::args::{
    name_of, CalibOpts, CalibrateArgs, Cli, Command, EvaluateArgs, ImageArgs, InspectArgs, MergeArgs, OptArgs,
    ParamsArgs, QuantizeArgs, RecipeArgs, RunArgs,
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

/// A `--flag` / `--no-flag` pair: on, off, or the recipe's (neither given).
fn on_off(on: bool, off: bool) -> Option<bool> {
    match (on, off) {
        (true, _) => Some(true),
        (_, true) => Some(false),
        _ => None,
    }
}

impl RecipeArgs {
    /// The flags as the library's jobs take them.
    fn flags(&self) -> quantir::jobs::RecipeFlags {
        quantir::jobs::RecipeFlags {
            recipe: self.config.clone().map(quantir::jobs::RecipeSource::File),
            scheme: self.scheme.as_ref().map(name_of),
            weights: self.weights.as_ref().map(name_of),
            activations: self.activations.as_ref().map(name_of),
            per_tensor: self.per_tensor,
            symmetric_activations: self.symmetric_activations,
            quantize_outputs: self.quantize_outputs,
            reduce_range: self.reduce_range,
            runtime: self.runtime.as_ref().map(name_of),
            exclude: self.exclude.clone(),
            target: None,
            bias_correction: on_off(self.bias_correction, self.no_bias_correction),
            bias_correction_sequential: on_off(self.bias_correction_sequential, self.no_bias_correction_sequential),
            gptq: on_off(self.gptq, self.no_gptq),
            gptq_asymmetric: on_off(self.gptq_asymmetric, self.no_gptq_asymmetric),
            per_channel_depthwise_inputs: on_off(
                self.per_channel_depthwise_inputs,
                self.no_per_channel_depthwise_inputs,
            ),
            float_read_outputs: self.float_read_outputs,
            qlinear_outputs: self.qlinear_outputs,
            activation_matmuls: self.no_activation_matmuls.then_some(false),
            equalize_layers: on_off(self.equalize_layers, self.no_equalize_layers),
            equalize_by: self.equalize_by.as_ref().map(name_of),
        }
    }

    /// The settings; `target` is the output model, whose format picks the default scheme.
    fn config(&self, target: Option<&Path>) -> Result<quantize::QuantConfig> {
        Ok(quantir::jobs::config(&self.flags(), target).map_err(job)?)
    }
}

impl CalibOpts {
    /// The flags as the library's jobs take them.
    fn flags(&self) -> Result<quantir::jobs::CalibFlags> {
        Ok(quantir::jobs::CalibFlags {
            method: self.method.as_ref().map(name_of),
            percentile: self.percentile,
            bins: self.bins,
            shard: self
                .shard
                .as_deref()
                .map(quantir::jobs::parse_shard)
                .transpose()
                .map_err(job)?,
            skip_non_finite: self.skip_non_finite,
            threads: self.feed.threads,
            limit: self.feed.limit,
            overrides: parse_overrides(&self.feed.inputs)?,
        })
    }
}

/// A job's error, with a request that asks for something that does not exist as a usage error.
fn job(e: quantir::jobs::JobError) -> anyhow::Error {
    match e.root() {
        quantir::jobs::JobError::Usage(_) => usage(e),
        _ => e.into(),
    }
}

/// Loads the data, binds it to the module's inputs and calibrates (preparing it in place).
fn run_calibration(
    module: &melior::ir::Module,
    data: &Path,
    o: &CalibOpts,
    config: &quantize::QuantConfig,
) -> Result<quantir::calibration::StatsFile> {
    let flags = o.flags()?;
    let opts = quantir::jobs::calibrate_options(&flags, config, None).map_err(job)?;
    let dataset = o.images.open(data, o.feed.limit)?;
    let t0 = std::time::Instant::now();
    let done =
        quantir::jobs::calibrate(module, quantir::jobs::Samples::Data(&dataset), &flags, &opts, None).map_err(job)?;
    if let Some(w) = &done.type_warning {
        eprintln!("warning: {}: {w}", data.display());
    }
    eprintln!("{}", quantir::jobs::calibrated_line(&done, t0.elapsed().as_secs_f64()));
    Ok(done.stats)
}

/// Loads a model; `--signature` names a signature of whichever model is a SavedModel.
fn load<'c>(ctx: &'c melior::Context, path: &Path, signature: Option<&str>) -> Result<melior::ir::Module<'c>> {
    quantir::jobs::load(ctx, path, signature).map_err(job)
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
            let inputs = interp::Program::compile_for_shapes(&module)?.inputs;
            let dataset = formats::data::Dataset::open(data)?;
            let binding = formats::data::bind(&dataset, &inputs, &[])?;
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
    let indices = quantir::run::picked_samples(binding.samples, feed.limit, false);
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
        if let Some(line) = quantir::jobs::lower_to_onnx(&module, &a.model).map_err(job)? {
            eprintln!("{line}");
        }
    }
    let config = quantize::QuantConfig {
        equalize_layers: a.equalize_layers,
        equalize_by: match a.equalize_by {
            Some(b) => name_of(&b).parse().map_err(|e: String| anyhow::anyhow!(e))?,
            None => Default::default(),
        },
        ..Default::default()
    };
    let stats = run_calibration(&module, &a.data, &a.opts, &config).with_context(|| a.model.display().to_string())?;
    stats_io::save_stats(&stats, &a.output, &[&a.model, &a.data])?;
    Ok(())
}

fn cmd_quantize(a: &QuantizeArgs, signature: Option<&str>) -> Result<()> {
    let flags = a.opts.flags()?;
    let dataset = a
        .data
        .as_deref()
        .map(|d| a.opts.images.open(d, a.opts.feed.limit))
        .transpose()?;
    let candidates: Vec<String> = a.candidates.iter().map(name_of).collect();
    let stats = match (a.stats.as_deref(), &dataset) {
        (Some(p), _) => quantir::jobs::StatsSource::File(p),
        (None, Some(d)) => quantir::jobs::StatsSource::Calibrate {
            samples: quantir::jobs::Samples::Data(d),
            flags: &flags,
            cache: if a.no_cache {
                None
            } else {
                quantize::cache::default_dir()
            },
            choose: match (a.choose_method, a.choose_range) {
                (true, _) => Some(quantir::jobs::Choose::Method(&candidates)),
                (false, true) => Some(quantir::jobs::Choose::Range(&candidates)),
                (false, false) => None,
            },
        },
        (None, None) => quantir::jobs::StatsSource::None,
    };
    let recipe = quantir::jobs::RecipeFlags {
        target: quantir::target::Goal::from_options(a.target_sqnr, a.target_top1, a.labels.clone()),
        ..a.recipe.flags()
    };
    let validation = a
        .validation
        .as_deref()
        .map(|d| a.opts.images.open(d, None))
        .transpose()?;
    let done = quantir::jobs::quantize(
        &a.model,
        signature,
        &a.output,
        &recipe,
        stats,
        validation.as_ref(),
        &mut |line| eprintln!("{line}"),
    )
    .map_err(job)?;
    let (config, report) = (&done.config, &done.report);
    if a.json {
        let doc = quantir::jobs::quantize_summary(&a.output, &done);
        return out(&format!("{}\n", serde_json::to_string_pretty(&doc)?));
    }
    eprintln!("{report}");
    eprintln!(
        "wrote {} ({:?} weights, {} activations, scheme {}, runtime {})",
        a.output.display(),
        config.weights,
        config.activations.map_or("float".to_string(), |a| a.to_string()),
        config.scheme,
        config.runtime,
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
    // spread samples are picked from all of them
    let dataset = a.images.open(data, a.feed.limit.filter(|_| !a.spread))?;
    let opts = quantir::evaluate::EvalOptions {
        threads: a.feed.threads,
        limit: a.feed.limit,
        spread: a.spread,
        labels: a.labels.clone(),
        per_layer: a.per_layer || report.is_some(),
        histograms: report.is_some(),
        overrides: parse_overrides(&a.feed.inputs)?,
        numerics: match &a.runtime {
            Some(r) => quantir::interp::ort_x86::Numerics::of_runtime(name_of(r).parse().map_err(anyhow::Error::msg)?),
            None => Default::default(),
        },
        ..Default::default()
    };
    let r = quantir::evaluate::evaluate(&float, &quant, &dataset, &opts).map_err(|e| match e {
        quantir::evaluate::EvalError::Mismatch(m) => anyhow::anyhow!("{}: {m}", quant_model.display()),
        e => e.into(),
    })?;
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

/// Tensors on cache lines: the kernels' vector loads never straddle two (`quantir::alloc`).
#[global_allocator]
static GLOBAL: quantir::alloc::CacheAligned = quantir::alloc::CacheAligned;

fn main() -> ExitCode {
    quantir::ir::fatal::install();
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("quantir: error: {}", quantir::text::one_line(e.as_ref()));
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
