//! The command line's shape: every subcommand, argument and option with its help text, and
//! each enumerated option as a `ValueEnum`, so that a bad value is a usage error (exit 2) that
//! lists the choices. The values convert to the library's types through the library's own
//! parsers (one spelling of each name).

use clap::builder::{PossibleValue, PossibleValuesParser};
use clap::{Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

#[derive(Parser)]
#[command(name = "quantir", version, about = "Post-training quantization on MLIR")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Signature of a SavedModel directory to import (default: serving_default; models in
    /// other formats have one function and ignore it).
    #[arg(long, global = true, value_name = "NAME")]
    pub signature: Option<String>,
}

/// MODEL, as every subcommand takes it.
const MODEL_HELP: &str = "The model: .mlir or .mlirbc (TF, ONNX or upstream dialects), .onnx, or a \
                          TensorFlow SavedModel directory";

#[derive(Subcommand)]
pub enum Command {
    /// Functions, op counts, constants and float tensors of a model.
    Inspect(InspectArgs),
    /// Run rewriter passes in order (mlir-opt style); no --pass is a faithful round trip.
    Opt(OptArgs),
    /// Run a model on every sample of a data set and write its outputs (.npz).
    Run(RunArgs),
    /// Gather statistics of every tensor that will be quantized, from sample data.
    Calibrate(CalibrateArgs),
    /// Quantize a model from statistics (or calibrate on --data first).
    Quantize(QuantizeArgs),
    /// Compare a quantized model with its float original on held-out data.
    Evaluate(EvaluateArgs),
    /// Merge statistics of calibration shards (same model, same method).
    Merge(MergeArgs),
    /// Scale and zero point for a range, as a target runtime's own tool computes them.
    Params(ParamsArgs),
}

/// `quantir inspect`.
#[derive(clap::Args)]
pub struct InspectArgs {
    #[arg(help = MODEL_HELP)]
    pub model: PathBuf,
    /// Sample data: dynamic dims the importer could not resolve are resolved from its first
    /// sample, as calibration would, and the report says what that typed.
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Print a JSON document instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `quantir opt`.
#[derive(clap::Args)]
pub struct OptArgs {
    #[arg(help = MODEL_HELP)]
    pub model: PathBuf,
    /// A pass or pipeline to run (repeatable, in order).
    #[arg(long = "pass", value_name = "NAME", value_parser = pass_names())]
    pub passes: Vec<String>,
    /// Statistics from `quantir calibrate` on this model, for the passes that need them
    /// (quantize-weights, insert-qdq); run --pass prepare before those on a model that was
    /// not prepared.
    #[arg(long, value_name = "STATS.json")]
    pub stats: Option<PathBuf>,
    #[command(flatten)]
    pub recipe: RecipeArgs,
    /// Output file: .mlir (text), .mlirbc (bytecode) or .onnx (ONNX ops: an ONNX import, or
    /// a TF model after --pass tf-to-onnx).
    #[arg(short, long)]
    pub output: PathBuf,
}

/// `quantir run`.
#[derive(clap::Args)]
pub struct RunArgs {
    #[arg(help = MODEL_HELP)]
    pub model: PathBuf,
    /// Sample data: .npz, .npy, a folder of .npy files or of images (first axis = samples).
    #[arg(long)]
    pub data: PathBuf,
    /// Output .npz: one array per model output, samples along the first axis.
    #[arg(short, long)]
    pub output: PathBuf,
    #[command(flatten)]
    pub feed: FeedArgs,
    /// Function to run (default: main, else the first public function).
    #[arg(long)]
    pub function: Option<String>,
    #[command(flatten)]
    pub images: ImageArgs,
}

/// `quantir calibrate`.
#[derive(clap::Args)]
pub struct CalibrateArgs {
    #[arg(help = MODEL_HELP)]
    pub model: PathBuf,
    /// Sample data: .npz, .npy, a folder of .npy files or of images (first axis = samples).
    #[arg(long)]
    pub data: PathBuf,
    #[command(flatten)]
    pub opts: CalibOpts,
    /// Calibrate the ONNX form of a TF model (what `quantize -o x.onnx` quantizes).
    #[arg(long)]
    pub onnx: bool,
    /// Calibrate the model after cross-layer equalization (for `quantize --equalize-layers
    /// --stats`).
    #[arg(long)]
    pub equalize_layers: bool,
    /// What the equalization balances against [default: activations].
    #[arg(long, value_enum, requires = "equalize_layers")]
    pub equalize_by: Option<EqualizeByArg>,
    /// Output statistics (JSON), for `quantize --stats` and `merge`.
    #[arg(short, long)]
    pub output: PathBuf,
}

/// `quantir quantize`.
#[derive(clap::Args)]
pub struct QuantizeArgs {
    #[arg(help = MODEL_HELP)]
    pub model: PathBuf,
    /// Statistics from `quantir calibrate` on the same model.
    #[arg(long, conflicts_with = "data")]
    pub stats: Option<PathBuf>,
    /// Calibrate on this data first (instead of --stats).
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Calibrate even when the cache holds statistics for this model, data and method.
    #[arg(long)]
    pub no_cache: bool,
    /// Quantize with each range method of --candidates and keep the one whose model is
    /// closest to the float model on the calibration data (mean output SQNR); needs --data.
    #[arg(long, requires = "data", conflicts_with = "method")]
    pub choose_method: bool,
    /// Choose each activation's range on its own: of --candidates, the one whose rounding
    /// changes the outputs of the ops reading it least on 16 calibration samples spread over the data
    /// (one histogram calibration serves every candidate; needs --data).
    #[arg(long, requires = "data", conflicts_with_all = ["method", "choose_method"])]
    pub choose_range: bool,
    /// The methods --choose-method and --choose-range try.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "minmax,percentile,mse")]
    pub candidates: Vec<MethodArg>,
    /// Raise the fewest activations from int8 to int16, then to float (or, where that cannot or
    /// keeps fewer MACs int8, leave the fewest compute ops float), until the SQNR of every output
    /// on 16 calibration samples spread over the data reaches DB (needs --data).
    #[arg(long, value_name = "DB", requires = "data", group = "target")]
    pub target_sqnr: Option<f64>,
    /// As --target-sqnr, for top-1 on every scoring sample: the share whose first output's
    /// argmax is right — against the integer array --labels names, else the float model's.
    #[arg(long, value_name = "FRACTION", requires = "data", group = "target")]
    pub target_top1: Option<f64>,
    /// The integer array of class labels in the scoring data, for --target-top1.
    #[arg(long, value_name = "NAME", requires = "target_top1", conflicts_with = "target_sqnr")]
    pub labels: Option<String>,
    /// Score the target on these held-out data (--target-sqnr on 16 of their samples spread
    /// over them) instead of the calibration data (the ranges, GPTQ and bias correction are
    /// fitted to those).
    #[arg(long, value_name = "DATA", requires = "target")]
    pub validation: Option<PathBuf>,
    #[command(flatten)]
    pub opts: CalibOpts,
    #[command(flatten)]
    pub recipe: RecipeArgs,
    /// Print the summary as one JSON document on stdout (per compute op: key, op, weight
    /// and activation storage, why not W8A8, MACs; totals with int8_mac_share).
    #[arg(long)]
    pub json: bool,
    /// Output model: .mlir, .mlirbc, or .onnx (QDQ ONNX).
    #[arg(short, long)]
    pub output: PathBuf,
}

/// `quantir evaluate`.
#[derive(clap::Args)]
pub struct EvaluateArgs {
    /// The float model (any MODEL format).
    pub float_model: PathBuf,
    /// The quantized model (any MODEL format).
    pub quant_model: PathBuf,
    /// Held-out data: .npz, .npy, a folder of .npy files or of images.
    #[arg(long)]
    pub data: PathBuf,
    /// Integer array of class labels in the data (for accuracy).
    #[arg(long)]
    pub labels: Option<String>,
    /// SQNR of every layer both models compute, worst first.
    #[arg(long)]
    pub per_layer: bool,
    /// With --limit N: N samples spread over the data instead of the first N (the samples
    /// `quantize --target-sqnr` scores on)
    #[arg(long, requires = "limit")]
    pub spread: bool,
    /// Write an HTML report (per-layer chart and histograms).
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Compute the quantized model as this runtime will [default: generic, exact int32
    /// accumulation]: onnxruntime simulates its default level on x86 CPUs without VNNI, whose
    /// int8 kernels add neighbouring products in int16 with saturation, and names the ops
    /// where that saturated.
    #[arg(long, value_enum)]
    pub runtime: Option<RuntimeArg>,
    #[command(flatten)]
    pub feed: FeedArgs,
    /// Print a JSON document instead of text.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub images: ImageArgs,
}

/// `quantir merge`.
#[derive(clap::Args)]
pub struct MergeArgs {
    /// Statistics files of the shards.
    #[arg(required = true)]
    pub inputs: Vec<PathBuf>,
    /// Output statistics (JSON).
    #[arg(short, long)]
    pub output: PathBuf,
}

/// `quantir params`.
#[derive(clap::Args)]
pub struct ParamsArgs {
    /// Range minimum; several comma-separated values give per-channel parameters.
    #[arg(long, allow_hyphen_values = true, value_delimiter = ',', required = true)]
    pub min: Vec<f64>,
    /// Range maximum; as many values as --min.
    #[arg(long, allow_hyphen_values = true, value_delimiter = ',', required = true)]
    pub max: Vec<f64>,
    /// Storage type.
    #[arg(long, value_enum, default_value_t = DtypeArg::Int8)]
    pub dtype: DtypeArg,
    /// Parameter arithmetic: mlir (TF/MLIR nudged), onnx (onnxruntime), torch (PyTorch).
    #[arg(long, value_enum, default_value_t = SchemeArg::Mlir)]
    pub scheme: SchemeArg,
    /// Symmetric range (zero point at the storage type's middle).
    #[arg(long)]
    pub symmetric: bool,
    /// Drop the storage type's lowest value (int8: −127..127).
    #[arg(long)]
    pub narrow_range: bool,
    /// One bit less of range (onnxruntime's reduce_range; onnx and torch schemes).
    #[arg(long)]
    pub reduce_range: bool,
    /// Channel axis recorded in per-channel parameters.
    #[arg(long, default_value_t = 0)]
    pub axis: usize,
    /// Print a JSON document instead of text.
    #[arg(long)]
    pub json: bool,
}

/// The registered passes and pipelines, with their summaries as `--help` shows them.
fn pass_names() -> PossibleValuesParser {
    let passes = quantir::passes::PASSES.iter().map(|p| {
        let needs = match p.needs {
            quantir::passes::Needs::Nothing => "",
            _ => " [needs --stats]",
        };
        PossibleValue::new(p.name).help(format!("{}{needs}", p.summary))
    });
    let pipelines = quantir::passes::PIPELINES
        .iter()
        .map(|(name, summary, _)| PossibleValue::new(*name).help(format!("pipeline: {summary}")));
    PossibleValuesParser::new(passes.chain(pipelines))
}

/// How samples are fed: input bindings, threads, a sample limit.
#[derive(clap::Args)]
pub struct FeedArgs {
    /// Bind an input to an array: --input NAME=ARRAY (repeatable).
    #[arg(long = "input", value_name = "NAME=ARRAY")]
    pub inputs: Vec<String>,
    /// Worker threads (0 = all cores); results do not depend on it.
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// Use only the first N samples.
    #[arg(long)]
    pub limit: Option<usize>,
}

/// Calibration options (shared by `calibrate` and `quantize --data`).
#[derive(clap::Args)]
pub struct CalibOpts {
    /// Range method [default: minmax, or the recipe's].
    #[arg(long, value_enum)]
    pub method: Option<MethodArg>,
    /// Percentile for the percentile methods (default 99.999).
    #[arg(long)]
    pub percentile: Option<f64>,
    /// Histogram resolution for histogram methods.
    #[arg(long, default_value_t = 2048)]
    pub bins: usize,
    /// Calibrate shard I of N (samples I, I+N, ...), for `quantir merge`.
    #[arg(long, value_name = "I/N")]
    pub shard: Option<String>,
    /// Skip NaN/Inf values (counted) instead of failing.
    #[arg(long)]
    pub skip_non_finite: bool,
    #[command(flatten)]
    pub feed: FeedArgs,
    #[command(flatten)]
    pub images: ImageArgs,
}

/// How a folder of images becomes samples.
#[derive(clap::Args)]
pub struct ImageArgs {
    /// Resize images to H,W (default: the model input's size).
    #[arg(long, value_name = "H,W")]
    pub image_size: Option<String>,
    /// Per-channel mean subtracted from pixels scaled to [0, 1] (one value or one per channel).
    #[arg(long, value_delimiter = ',', allow_hyphen_values = true, default_value = "0")]
    pub mean: Vec<f32>,
    /// Per-channel standard deviation the centred pixels are divided by.
    #[arg(long, value_delimiter = ',', default_value = "1")]
    pub std: Vec<f32>,
    /// Layout of the model's image input.
    #[arg(long, value_enum, default_value_t = LayoutArg::Nhwc)]
    pub layout: LayoutArg,
}

/// How to quantize: the options of `quantize` (and `opt`), on top of an optional `--config`
/// recipe file.
#[derive(clap::Args)]
pub struct RecipeArgs {
    /// A recipe file (TOML): defaults plus per-op / per-tensor overrides; flags given on the
    /// command line win over its top-level settings.
    #[arg(long, value_name = "RECIPE.toml")]
    pub config: Option<PathBuf>,
    /// Parameter arithmetic [default: onnx for an .onnx output, else mlir].
    #[arg(long, value_enum)]
    pub scheme: Option<SchemeArg>,
    /// Weight storage [default: int8].
    #[arg(long, value_enum)]
    pub weights: Option<WeightsArg>,
    /// Activation storage; none = weight-only [default: int8].
    #[arg(long, value_enum)]
    pub activations: Option<ActivationsArg>,
    /// Per-tensor weights instead of per-channel.
    #[arg(long)]
    pub per_tensor: bool,
    /// Symmetric activation ranges (zero point 0).
    #[arg(long)]
    pub symmetric_activations: bool,
    /// Quantize the model's outputs too (fully integer graph); by default they stay float.
    #[arg(long)]
    pub quantize_outputs: bool,
    /// 7-bit weights (int8 storage, onnx and torch schemes): for onnxruntime on x86 CPUs
    /// without VNNI, whose int8 kernels saturate on full-range weights.
    #[arg(long)]
    pub reduce_range: bool,
    /// The runtime the model is made for [default: onnxruntime for an .onnx output, else
    /// generic]: onnxruntime keeps every int16 pair sum of its x86 int8 kernels without VNNI
    /// from saturating, widening the weight scale of just the output channels that could;
    /// onnxruntime-vnni (also ARM) and generic keep full-range weights.
    #[arg(long, value_enum)]
    pub runtime: Option<RuntimeArg>,
    /// Leave ops (by op name such as onnx.Conv, or by node name; `*` wildcards) or tensors (by
    /// key) in float (repeatable); a pattern that selects nothing is warned about.
    #[arg(long, value_name = "PATTERN")]
    pub exclude: Vec<String>,
    /// Bias correction when quantize calibrates: each layer's mean output shift from
    /// quantizing its weights and input, measured on calibration samples, taken off its bias.
    #[arg(long, overrides_with = "no_bias_correction")]
    pub bias_correction: bool,
    /// No bias correction.
    #[arg(long)]
    pub no_bias_correction: bool,
    /// Bias correction measured in the quantized model (implies --bias-correction): each
    /// layer's mean output shift with the layers before it quantized and already corrected,
    /// so that it also takes off the mean drift they leave. Measured wave by wave: one
    /// quantization and side-by-side run per layer depth.
    #[arg(long, overrides_with = "no_bias_correction_sequential")]
    pub bias_correction_sequential: bool,
    /// Bias correction measured on float inputs, each layer alone (the default with
    /// --bias-correction).
    #[arg(long)]
    pub no_bias_correction_sequential: bool,
    /// GPTQ weight rounding when quantize calibrates: each int8/int4 weight row rounded one
    /// input at a time, the rounding error spread over the inputs not yet rounded, so that the
    /// layer's output on calibration samples stays closest to float.
    #[arg(long, overrides_with = "no_gptq")]
    pub gptq: bool,
    /// Round weights to nearest (the default).
    #[arg(long)]
    pub no_gptq: bool,
    /// GPTQ on the quantized model's inputs (asymmetric calibration; implies --gptq): each
    /// layer's weights rounded toward those that map what its quantized input will be to the
    /// float layer's output, so that it makes up for the drift of the quantized layers before
    /// it. Measured wave by wave: one quantization and side-by-side run per layer depth.
    #[arg(long, overrides_with = "no_gptq_asymmetric")]
    pub gptq_asymmetric: bool,
    /// GPTQ on float inputs only (the default with --gptq).
    #[arg(long)]
    pub no_gptq_asymmetric: bool,
    /// One scale and zero point per channel at the activation input of each depthwise
    /// convolution (ONNX models): an integer kernel takes them as it takes per-channel weight
    /// scales; onnxruntime runs those convolutions in float.
    #[arg(long, overrides_with = "no_per_channel_depthwise_inputs")]
    pub per_channel_depthwise_inputs: bool,
    /// One scale per tensor at depthwise convolution inputs.
    #[arg(long)]
    pub no_per_channel_depthwise_inputs: bool,
    /// Q/DQ on a compute op's output even when only float ops read it (an exported
    /// HardSwish, a Sigmoid): onnxruntime then runs the op as an int8 kernel, at the cost of
    /// one more rounding; by default such outputs stay float.
    #[arg(long)]
    pub float_read_outputs: bool,
    /// Q/DQ on a compute op's output that an int8 kernel of onnxruntime's reads (Add, Mul,
    /// Concat, AveragePool, GlobalAveragePool, Sigmoid, LeakyRelu, Softmax) when that op's
    /// other inputs and its output are quantized: onnxruntime then runs the whole run in int8
    /// (fewer DQ/Q nodes, faster), at one more rounding per such output.
    #[arg(long)]
    pub qlinear_outputs: bool,
    /// Leave float the matmuls whose operands are both activations (attention's Q·Kᵀ and
    /// P·V); by default both their operands get Q/DQ, so a transformer runs W8A8 throughout.
    #[arg(long)]
    pub no_activation_matmuls: bool,
    /// Cross-layer equalization before calibration (Nagel et al. 2019): consecutive
    /// conv/matmul layers joined through ReLU, LeakyReLU, max pooling or a bias get a
    /// per-channel scale moved from the first to the second, the function unchanged.
    /// Statistics must come from `calibrate --equalize-layers`.
    #[arg(long, overrides_with = "no_equalize_layers")]
    pub equalize_layers: bool,
    /// No cross-layer equalization.
    #[arg(long)]
    pub no_equalize_layers: bool,
    /// What cross-layer equalization balances the next layer's weights against: each
    /// channel's measured activation range (calibration data) or the first layer's weights
    /// (data-free) [default: activations].
    #[arg(long, value_enum)]
    pub equalize_by: Option<EqualizeByArg>,
}

/// The name a value enum is spelled with on the command line (what the library parses).
pub fn name_of(v: &impl ValueEnum) -> String {
    v.to_possible_value()
        .map(|p| p.get_name().to_string())
        .unwrap_or_default()
}

#[derive(Clone, Copy, ValueEnum)]
pub enum EqualizeByArg {
    /// each channel's measured activation range (the calibration data's first samples)
    Activations,
    /// the first layer's output-channel weight ranges (data-free)
    Weights,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum RuntimeArg {
    /// onnxruntime on any x86 CPU (u8s8 int16 pair sums kept from saturating)
    Onnxruntime,
    /// onnxruntime on CPUs with VNNI, or on ARM: full-range weights
    OnnxruntimeVnni,
    /// any runtime accumulating in int32: full-range weights
    Generic,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum SchemeArg {
    /// TF/MLIR: nudged zero point in f64, ties away from zero
    Mlir,
    /// onnxruntime: range widened to hold 0 in f32, ties to even
    Onnx,
    /// PyTorch observers: f32 with an eps floor
    Torch,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum WeightsArg {
    Int8,
    Int4,
    Fp16,
    Bf16,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum ActivationsArg {
    Int8,
    Uint8,
    Int16,
    /// weight-only: activations stay float
    None,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum DtypeArg {
    #[value(alias = "i8")]
    Int8,
    #[value(alias = "ui8")]
    Uint8,
    #[value(alias = "i16")]
    Int16,
    #[value(alias = "ui16")]
    Uint16,
    #[value(alias = "i4")]
    Int4,
    #[value(alias = "ui4")]
    Uint4,
    #[value(alias = "i32")]
    Int32,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum LayoutArg {
    Nhwc,
    Nchw,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum MethodArg {
    /// running minimum and maximum
    Minmax,
    /// average of per-batch minima and maxima
    AvgMinmax,
    /// exponential moving average of minima and maxima
    EmaMinmax,
    /// histogram percentile (--percentile)
    Percentile,
    /// symmetric histogram percentile
    PercentileSymmetric,
    /// KL divergence (TensorRT / onnxruntime entropy)
    Entropy,
    /// least mean squared quantization error
    Mse,
    /// least mean squared error, symmetric range
    MseSymmetric,
}
