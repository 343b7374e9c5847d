//! quantir's main job as library calls: [`prepare`] a module, [`plan`] what to quantize,
//! [`calibrate`] it on sample data, [`quantize_module`] it from statistics, and
//! [`evaluate`](crate::evaluate) the result.

pub mod bias_correction;
pub mod cache;
pub mod calibrate;
pub mod choose_range;
pub mod gram;
pub mod local_op;
pub mod ort_int8;
pub mod summary;
pub mod waves;

pub use crate::recipe::file as recipe;
pub use crate::recipe::plan::{self, plan, ActivationPoint, Plan};
pub use crate::recipe::{glob, parse_activations, Override, QuantConfig, Resolved, WeightMode};
pub use calibrate::{calibrate, calibrate_cached, CalibrateOptions, Calibrated};
use std::collections::BTreeMap;

use crate::calibration::StatsFile;
use crate::ir::IrError;
use crate::passes::{self, Change, PassError, PassOptions, PassReport};
use melior::ir::operation::OperationLike;
use melior::ir::Module;
use serde::Serialize;

pub use crate::passes::PREPARE;

/// Why quantizing failed.
#[derive(Debug, thiserror::Error)]
pub enum QuantizeError {
    #[error(transparent)]
    Ir(#[from] IrError),
    #[error(transparent)]
    Pass(#[from] PassError),
    /// Statistics of another model (or another quantir).
    #[error("{0}")]
    Stats(String),
    /// The model carries quantization already: quantizing it again would put a second
    /// rounding on every tensor, silently.
    #[error("already quantized ({0}): quantir quantizes float models; give it the float model this one came from (`quantir evaluate FLOAT THIS` compares the two)")]
    AlreadyQuantized(String),
}

/// Ops that mean a model is quantized already: Q/DQ in any dialect quantir reads, integer
/// kernels, and TF's fake-quant ops (a quantization-aware-trained model). Sorted.
const QUANTIZATION_OPS: &[&str] = &[
    "onnx.ConvInteger",
    "onnx.DequantizeLinear",
    "onnx.DynamicQuantizeLinear",
    "onnx.MatMulInteger",
    "onnx.QLinearConv",
    "onnx.QLinearMatMul",
    "onnx.QuantizeLinear",
    "tf.Dequantize",
    "tf.FakeQuantWithMinMaxArgs",
    "tf.FakeQuantWithMinMaxVars",
    "tf.FakeQuantWithMinMaxVarsPerChannel",
    "tf.QuantizeAndDequantizeV2",
    "tf.QuantizeAndDequantizeV3",
    "tf.QuantizeAndDequantizeV4",
    "tf.QuantizeV2",
    "tf.UniformDequantize",
    "tf.UniformQuantize",
];

/// The quantization ops of `module`'s entry function, counted (`quant.*` ops included), or
/// `None` when it has none: a float model.
pub fn quantization_ops(module: &Module) -> Result<Option<String>, QuantizeError> {
    let func = crate::ir::graph::find_function(module, None)?;
    let mut found = std::collections::BTreeMap::<String, usize>::new();
    for op in crate::ir::graph::body_ops(func) {
        let name = crate::ir::graph::op_name(&op);
        if name.starts_with("quant.") || QUANTIZATION_OPS.binary_search(&name.as_str()).is_ok() {
            *found.entry(name).or_default() += 1;
        }
    }
    Ok((!found.is_empty()).then(|| crate::text::counts(&found, "")))
}

/// [`quantization_ops`] as the error a quantize job stops with.
pub fn check_float(module: &Module) -> Result<(), QuantizeError> {
    match quantization_ops(module)? {
        Some(ops) => Err(QuantizeError::AlreadyQuantized(ops)),
        None => Ok(()),
    }
}

/// Runs the [`PREPARE`] pipeline (its last pass pins every value's key as a name location, so
/// that keys survive the insertions the rewriter makes). Returns the reports.
pub fn prepare(module: &Module) -> Result<Vec<(String, PassReport)>, PassError> {
    passes::run_pipeline(module, &["prepare".to_string()], &PassOptions::default())
}

/// [`prepare`], then what `config` asks of the prepared model before it is calibrated:
/// cross-layer equalization (`equalize-layers`, which leaves a module it equalized before
/// alone). The float reference of `evaluate` is prepared without it.
pub fn prepare_with(module: &Module, config: &QuantConfig) -> Result<Vec<(String, PassReport)>, PassError> {
    let mut reports = prepare(module)?;
    if config.equalize_layers {
        let options = PassOptions {
            stats: None,
            config: config.clone(),
        };
        reports.extend(passes::run_pipeline(
            module,
            &["equalize-layers".to_string()],
            &options,
        )?);
    }
    Ok(reports)
}

/// Gives the entry function's unranked results types from running it on zeros shaped like a
/// sample (`shapes`, one per input: the data's first), when the importer's guess for the
/// dynamic dims could not type them; does nothing when every result is typed. The outcome says
/// how many results stay untyped and why.
pub fn resolve_types(module: &Module, shapes: &[Vec<usize>]) -> crate::interp::infer_types::Inferred {
    let ctx = crate::ir::graph::module_context(module);
    crate::interp::infer_types::infer_types_from_sample(ctx, module, &[crate::dialects::onnx::NO_VALUE], shapes)
}

/// True when an input of the entry function has a dynamic dim (or no ranked type).
pub fn has_dynamic_inputs(module: &Module) -> bool {
    crate::ir::graph::find_function(module, None).is_ok_and(|func| {
        crate::ir::graph::argument_types(func)
            .into_iter()
            .any(|t| crate::ir::types::tensor_type(t).is_none_or(|t| t.static_shape().is_none()))
    })
}

/// Results of the entry function that have no type yet (see [`resolve_types`]).
pub fn untyped_results(module: &Module) -> usize {
    crate::interp::infer_types::unranked_results(module, &[crate::dialects::onnx::NO_VALUE])
}

/// What [`resolve_types_from`] used and did.
pub struct SampleTypes {
    /// The first sample's input shapes, one per function input.
    pub shapes: Vec<Vec<usize>>,
    pub outcome: crate::interp::infer_types::Inferred,
}

/// [`resolve_types`] with the shapes of `data`'s first sample; `None` when it has no samples.
pub fn resolve_types_from(
    module: &Module,
    data: &crate::formats::data::Binding,
) -> Result<Option<SampleTypes>, crate::formats::data::DataError> {
    let Some(shapes) = first_sample_shapes(data)? else {
        return Ok(None);
    };
    let outcome = resolve_types(module, &shapes);
    Ok(Some(SampleTypes { shapes, outcome }))
}

/// The input shapes of `data`'s first sample; `None` when it has no samples.
pub fn first_sample_shapes(
    data: &crate::formats::data::Binding,
) -> Result<Option<Vec<Vec<usize>>>, crate::formats::data::DataError> {
    if data.samples == 0 {
        return Ok(None);
    }
    Ok(Some(data.sample(0)?.iter().map(|t| t.shape().to_vec()).collect()))
}

/// Readies a TF-dialect module for an `.onnx` output: [`prepare`]s it with TF's own passes
/// (batch norm and bias reshapes folded where TF's patterns see them) and lowers it with
/// `tf-to-onnx`, so that calibration and quantization see the ONNX ops that will be written.
/// `None` when the module has no TF op (an ONNX import, or already lowered).
pub fn lower_to_onnx(module: &Module) -> Result<Option<PassReport>, PassError> {
    if !passes::tf_to_onnx::has_tf_ops(module) {
        return Ok(None);
    }
    prepare(module)?;
    let names = ["tf-to-onnx".to_string()];
    let mut reports = passes::run_pipeline(module, &names, &PassOptions::default())?;
    Ok(reports.pop().map(|(_, r)| r))
}

pub use crate::ir::identity::model_hash;

/// What [`quantize_module`] did.
#[derive(Debug, Default, Serialize)]
pub struct QuantizeReport {
    pub activations: usize,
    pub weights: PassReport,
    pub qdq: PassReport,
    pub summary: summary::Summary,
    /// Bytes of the module's constants before and after.
    pub bytes_before: usize,
    pub bytes_after: usize,
    /// Seconds per stage, in order.
    pub stages: Vec<(String, f64)>,
    /// Recipe overrides whose pattern selects nothing in the model (a typo changes nothing).
    pub unmatched_overrides: Vec<String>,
    /// `--exclude` / recipe `exclude` patterns that select nothing in the model.
    pub unmatched_excludes: Vec<String>,
    /// For `--runtime onnxruntime`: per op onnxruntime has an int8 kernel for, how many of
    /// them its default level will run in int8, and how many there are (`ort_int8`).
    pub onnxruntime_int8: BTreeMap<String, (usize, usize)>,
    /// True when those counts are lower bounds: with int8 activations onnxruntime converts
    /// some Q/DQ pairs to uint8 itself (its QDQS8ToU8Transformer) and fuses more.
    pub onnxruntime_int8_at_least: bool,
}

/// The `match` patterns of `config`'s overrides, then its `exclude` patterns, that select no op
/// (by name or location) and no tensor key of the main function.
fn unmatched_patterns(module: &Module, config: &QuantConfig) -> Result<(Vec<String>, Vec<String>), QuantizeError> {
    if config.overrides.is_empty() && config.exclude.is_empty() {
        return Ok((Vec::new(), Vec::new()));
    }
    let func = crate::ir::graph::find_function(module, None)?;
    let keys = crate::ir::keys::TensorKeys::new(func);
    let mut names: Vec<String> = Vec::new();
    for op in crate::ir::graph::body_ops(func) {
        names.push(crate::ir::graph::op_name(&op));
        names.extend(crate::ir::keys::location_names(op.location()));
    }
    // tensors: the function's arguments (a model input an override raises) and op results
    names.extend(keys.all().map(str::to_string));
    let unmatched = |ps: &mut dyn Iterator<Item = &String>| -> Vec<String> {
        ps.filter(|p| !names.iter().any(|n| crate::recipe::glob(p, n)))
            .cloned()
            .collect()
    };
    Ok((
        unmatched(&mut config.overrides.iter().map(|o| &o.pattern)),
        unmatched(&mut config.exclude.iter()),
    ))
}

impl std::fmt::Display for QuantizeReport {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        writeln!(
            f,
            "quantized: {} ({} weights, {} int32 biases, {} activation Q/DQ pairs)",
            crate::text::counts(&self.summary.quantized_ops, "no compute op"),
            self.weights.get(&Change::WeightsQuantized),
            self.weights.get(&Change::BiasesQuantized),
            self.qdq.get(&Change::QdqPairsInserted),
        )?;
        let gptq = self.weights.get(&Change::WeightsGptq);
        if gptq > 0 {
            writeln!(
                f,
                "GPTQ: {gptq} weights rounded for their layer's output, the others to nearest"
            )?;
        }
        let (corrected, added) = (
            self.weights.get(&Change::FloatBiasesCorrected),
            self.weights.get(&Change::BiasesAdded),
        );
        if corrected + added > 0 {
            writeln!(
                f,
                "bias correction: {corrected} float biases (of ops with a float input) corrected, {added} biases added to ops without one"
            )?;
        }
        let dead = self.weights.get(&Change::DeadChannels);
        if dead > 0 {
            writeln!(
                f,
                "dead weight channels: {dead} (largest |weight| ≤ {:e} of their layer's), quantized to 0 at the layer's scale",
                crate::passes::quantize_weights::DEAD_CHANNEL
            )?;
        }
        let u8s8 = self.weights.get(&Change::U8s8Layers);
        if u8s8 > 0 {
            let (layers, channels) = (
                self.weights.get(&Change::U8s8LayersWidened),
                self.weights.get(&Change::U8s8ChannelsWidened),
            );
            let blind = self.weights.get(&Change::U8s8WithoutChannelRanges);
            let u8u8 = self.weights.get(&Change::U8s8LayersAsU8u8);
            writeln!(
                f,
                "onnxruntime u8s8 GEMM (x86 without VNNI): {u8s8} layers; {} at full range, {layers} with {channels} \
                 output channels given a wider weight scale, {u8u8} with uint8 weights (its u8u8 GEMM): no int16 \
                 pair sum can saturate while each input channel stays within its calibrated range{}",
                u8s8 - layers - u8u8,
                if blind > 0 {
                    format!(" ({blind} bounded at the whole u8 range: no per-channel input statistics)")
                } else {
                    String::new()
                }
            )?;
        }
        if !self.onnxruntime_int8.is_empty() {
            writeln!(
                f,
                "onnxruntime (default level) runs in int8: {}{}",
                if self.onnxruntime_int8_at_least {
                    "at least "
                } else {
                    ""
                },
                ort_int8::describe(&self.onnxruntime_int8)
            )?;
        }
        for o in &self.summary.left_float {
            writeln!(f, "left float: {} {} ({})", o.op, o.key, o.reason)?;
        }
        if !self.summary.unknown_ops.is_empty() {
            let u = crate::text::counts(&self.summary.unknown_ops, "");
            writeln!(f, "float (no quantization rule): {u}")?;
        }
        let ratio = self.bytes_after as f64 / self.bytes_before.max(1) as f64;
        writeln!(
            f,
            "constants: {} → {} bytes ({:.1} %)",
            self.bytes_before,
            self.bytes_after,
            100.0 * ratio
        )?;
        let t: Vec<String> = self.stages.iter().map(|(k, s)| format!("{k} {:.3} s", s)).collect();
        write!(f, "time: {}", t.join(", "))
    }
}

/// Prepares `module` as calibration prepared it for `stats`: the types resolved from the
/// data's shapes, and cross-layer equalization with the moments calibration measured (so that
/// the keys, `~equalized` ones included, are the statistics' own). Returns `config` with those
/// moments (borrowed where there are none: a config may hold GPTQ's Gram matrices).
pub fn prepare_as_calibrated<'q>(
    module: &Module,
    stats: &StatsFile,
    config: &'q QuantConfig,
) -> Result<std::borrow::Cow<'q, QuantConfig>, QuantizeError> {
    use std::borrow::Cow;
    // the types calibration resolved from its data, resolved again the same way
    if let Some(shapes) = &stats.input_shapes {
        resolve_types(module, shapes);
    }
    // the model is equalized again with the moments calibration measured
    let config = match (&stats.equalization, config.equalize_layers) {
        (None, true) => {
            return Err(QuantizeError::Stats(
                "the statistics were calibrated without cross-layer equalization: calibrate with --equalize-layers, or quantize without it".into(),
            ))
        }
        (Some(_), false) => {
            return Err(QuantizeError::Stats(
                "the statistics were calibrated after cross-layer equalization: quantize with --equalize-layers (recipe equalize_layers = true)".into(),
            ))
        }
        (Some(ranges), true) => Cow::Owned(QuantConfig {
            equalize_ranges: ranges.clone(),
            ..config.clone()
        }),
        (None, false) => Cow::Borrowed(config),
    };
    prepare_with(module, &config)?;
    Ok(config)
}

/// Quantizes a module with statistics from `calibrate` on the same model: prepares it, checks
/// the model hash, quantizes weights and biases, then inserts Q/DQ on activations.
pub fn quantize_module(
    module: &Module,
    stats: &StatsFile,
    config: &QuantConfig,
) -> Result<QuantizeReport, QuantizeError> {
    let mut stages = Vec::new();
    let mut clock = std::time::Instant::now();
    let mut lap = |name: &str, stages: &mut Vec<(String, f64)>| {
        stages.push((name.to_string(), clock.elapsed().as_secs_f64()));
        clock = std::time::Instant::now();
    };
    check_float(module)?;
    let bytes_before = crate::inspect::inspect(module)?.constant_bytes;
    let config = prepare_as_calibrated(module, stats, config)?;
    let config: &QuantConfig = &config;
    let hash = model_hash(module);
    stats
        .check_model(&hash)
        .map_err(|e| QuantizeError::Stats(e.to_string()))?;
    // a dynamic-dim model's MACs, counted at the calibration data's input shapes
    let at = stats
        .input_shapes
        .as_ref()
        .and_then(|s| crate::interp::infer_types::shapes_at_sample(module, s).ok());
    lap("prepare", &mut stages);
    let (unmatched_overrides, unmatched_excludes) = unmatched_patterns(module, config)?;
    // one plan for both passes: quantize-weights changes weights only, never the activation
    // values the plan points at
    let plan = plan(module, Some(stats), config)?;
    let plan_size = plan.activations.len();
    let weights =
        passes::quantize_weights::run_with_plan(module, config, &plan).map_err(|e| e.in_pass("quantize-weights"))?;
    lap("quantize-weights", &mut stages);
    let qdq = passes::insert_qdq::run_with_plan(&plan).map_err(|e| e.in_pass("insert-qdq"))?;
    drop(plan);
    lap("insert-qdq", &mut stages);
    crate::ir::io::verify(module).map_err(|d| IrError::Invalid(format!("quantized module does not verify: {d}")))?;
    let mut summary = summary::summarize(module, config, at.as_ref())?;
    if at.is_some() {
        summary.totals.macs_at = stats.input_shapes.clone();
    }
    let bytes_after = crate::inspect::inspect(module)?.constant_bytes;
    let onnxruntime_int8 = match config.runtime.is_onnxruntime() {
        true => ort_int8::count(module)?,
        false => BTreeMap::new(),
    };
    lap("verify", &mut stages);
    Ok(QuantizeReport {
        activations: plan_size,
        weights,
        qdq,
        summary,
        bytes_before,
        bytes_after,
        stages,
        unmatched_overrides,
        unmatched_excludes,
        onnxruntime_int8,
        onnxruntime_int8_at_least: config.activations == Some(crate::params::StorageType::Int8),
    })
}
