//! The `quantir` command line: parse arguments, call the library, print.

use anyhow::{bail, Context as _, Result};
use clap::{Parser, Subcommand};
use quantir::params::{self, RangeOptions, Scheme, StorageType};
use quantir::{formats, inspect, interp, ir, passes, run, stats_io};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "quantir", version, about = "Post-training quantization on MLIR")]
struct Cli {
    #[command(subcommand)]
    command: Command,
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
        /// Output file: .mlir (text) or .mlirbc (bytecode).
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

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Inspect { model, json } => {
            let ctx = ir::new_context();
            let module = ir::load(&ctx, &model)?;
            let report = inspect::inspect(&module).with_context(|| model.display().to_string())?;
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
            let module = ir::load(&ctx, &model)?;
            let reports = passes::run_pipeline(&module, &names).with_context(|| model.display().to_string())?;
            ir::save(&module, &output, &[&model])?;
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
        } => {
            let overrides = parse_overrides(&inputs)?;
            let ctx = ir::new_context();
            let module = ir::load(&ctx, &model)?;
            let program =
                interp::Program::compile(&module, function.as_deref()).with_context(|| model.display().to_string())?;
            let dataset = formats::data::Dataset::open(&data)?;
            let binding = formats::data::bind(&dataset, &program.inputs, &overrides)?;
            let t0 = std::time::Instant::now();
            let outs = run::run_samples(
                &program,
                &binding,
                threads,
                limit,
                &Default::default(),
                true,
                &mut |_, _, _| Ok(()),
                "run",
            )?;
            let secs = t0.elapsed().as_secs_f64();
            let concat = binding.columns.iter().all(|c| c.2);
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
