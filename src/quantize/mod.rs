//! quantir's main job as library calls: [`prepare`] a module, [`plan`] what to quantize,
//! [`calibrate`] it on sample data, [`quantize_module`] it from statistics, and
//! [`evaluate`](crate::evaluate) the result.

pub mod cache;
pub mod calibrate;
pub mod plan;
pub mod recipe;
pub mod summary;

pub use calibrate::{calibrate, calibrate_cached, CalibrateOptions, Calibrated};
pub use plan::{plan, ActivationPoint, Plan};
pub use recipe::{parse_activations, Override, Resolved};

use crate::calibration::StatsFile;
use crate::ir::IrError;
use crate::params::{BiasOverflowPolicy, Scheme, StorageType};
use crate::passes::{self, PassOptions, PassReport};
use melior::ir::Module;
use serde::{Deserialize, Serialize};

/// How weights are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WeightMode {
    Int8,
    Int4,
    Fp16,
    Bf16,
}

/// The quantization recipe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct QuantConfig {
    /// Parameter scheme for activations and weights.
    pub scheme: Scheme,
    /// Activation storage; `None` = weight-only.
    pub activations: Option<StorageType>,
    pub symmetric_activations: bool,
    pub weights: WeightMode,
    /// Per-channel weights (per-tensor otherwise).
    pub per_channel: bool,
    /// Op names (`tf.MatMul`, `*Conv*`) or tensor keys left in float.
    pub exclude: Vec<String>,
    pub bias_overflow: BiasOverflowPolicy,
    /// Quantize the model's outputs too (a fully integer graph); off by default, the outputs
    /// come out of the last op in float.
    pub quantize_outputs: bool,
    /// 7-bit weights in int8 storage (onnxruntime's `reduce_range`): x86 CPUs without VNNI
    /// multiply u8×s8 pairs into int16 and saturate on full-range weights. Not in the `mlir`
    /// scheme.
    pub reduce_range: bool,
    /// Calibration method when `quantize` calibrates itself (a recipe's `method`).
    pub method: Option<String>,
    pub percentile: Option<f64>,
    /// Per-op / per-tensor overrides, later ones winning.
    pub overrides: Vec<recipe::Override>,
}

impl Default for QuantConfig {
    fn default() -> Self {
        QuantConfig {
            scheme: Scheme::Mlir,
            activations: Some(StorageType::Int8),
            symmetric_activations: false,
            weights: WeightMode::Int8,
            per_channel: true,
            exclude: Vec::new(),
            bias_overflow: BiasOverflowPolicy::Clip,
            quantize_outputs: false,
            reduce_range: false,
            method: None,
            percentile: None,
            overrides: Vec::new(),
        }
    }
}

/// True when `pattern` (with `*` wildcards) matches `text`.
pub fn glob(pattern: &str, text: &str) -> bool {
    fn go(p: &[u8], t: &[u8]) -> bool {
        match (p.first(), t.first()) {
            (None, None) => true,
            (Some(b'*'), _) => go(&p[1..], t) || (!t.is_empty() && go(p, &t[1..])),
            (Some(a), Some(b)) if a == b => go(&p[1..], &t[1..]),
            _ => false,
        }
    }
    go(pattern.as_bytes(), text.as_bytes())
}

/// The passes run before calibration and before quantization alike, so that both see the
/// same ops and the same tensor keys.
pub const PREPARE: &[&str] = &[
    "strip-identity",
    "fold-constants",
    "fold-batchnorm",
    "duplicate-shape-constants",
];

/// Runs [`PREPARE`] and pins every value's key as a name location (so that keys survive the
/// insertions the rewriter makes). Returns the reports.
pub fn prepare(module: &Module) -> Result<Vec<(String, PassReport)>, IrError> {
    let names: Vec<String> = PREPARE.iter().map(|s| s.to_string()).collect();
    let reports = passes::run_pipeline(module, &names, &PassOptions::default())?;
    crate::ir::keys::pin_keys(module);
    Ok(reports)
}

/// Readies a TF-dialect module for an `.onnx` output: [`prepare`]s it with TF's own passes
/// (batch norm and bias reshapes folded where TF's patterns see them) and lowers it with
/// `tf-to-onnx`, so that calibration and quantization see the ONNX ops that will be written.
/// `None` when the module has no TF op (an ONNX import, or already lowered).
pub fn lower_to_onnx(module: &Module) -> Result<Option<PassReport>, IrError> {
    if !passes::tf_to_onnx::has_tf_ops(module) {
        return Ok(None);
    }
    prepare(module)?;
    let names = ["tf-to-onnx".to_string()];
    let mut reports = passes::run_pipeline(module, &names, &PassOptions::default())?;
    Ok(reports.pop().map(|(_, r)| r))
}

/// A stable identity of a prepared module: FNV-1a 64 of its generic printed form (no
/// locations), as 16 hex digits.
pub fn model_hash(module: &Module) -> String {
    let mut h = cache::Fnv::default();
    crate::ir::io::print_module_generic_to(module, &mut |chunk| {
        h.bytes(chunk);
    });
    h.hex()
}

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
}

impl std::fmt::Display for QuantizeReport {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        let ops: Vec<String> = self
            .summary
            .quantized_ops
            .iter()
            .map(|(k, v)| format!("{v} {k}"))
            .collect();
        writeln!(
            f,
            "quantized: {} ({} weights, {} int32 biases, {} activation Q/DQ pairs)",
            if ops.is_empty() {
                "no compute op".into()
            } else {
                ops.join(", ")
            },
            self.weights.changes.get("weights quantized").copied().unwrap_or(0),
            self.weights
                .changes
                .get("biases quantized to int32")
                .copied()
                .unwrap_or(0),
            self.qdq.changes.get("q/dq pairs inserted").copied().unwrap_or(0),
        )?;
        for o in &self.summary.left_float {
            writeln!(f, "left float: {} {} ({})", o.op, o.key, o.reason)?;
        }
        if !self.summary.unknown_ops.is_empty() {
            let u: Vec<String> = self
                .summary
                .unknown_ops
                .iter()
                .map(|(k, v)| format!("{v} {k}"))
                .collect();
            writeln!(f, "float (no quantization rule): {}", u.join(", "))?;
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

/// Quantizes a module with statistics from `calibrate` on the same model: prepares it, checks
/// the model hash, quantizes weights and biases, then inserts Q/DQ on activations.
pub fn quantize_module(module: &Module, stats: &StatsFile, config: &QuantConfig) -> Result<QuantizeReport, IrError> {
    let mut stages = Vec::new();
    let mut clock = std::time::Instant::now();
    let mut lap = |name: &str, stages: &mut Vec<(String, f64)>| {
        stages.push((name.to_string(), clock.elapsed().as_secs_f64()));
        clock = std::time::Instant::now();
    };
    let bytes_before = crate::inspect::inspect(module)?.constant_bytes;
    prepare(module)?;
    let hash = model_hash(module);
    stats.check_model(&hash).map_err(|e| IrError::Invalid(e.to_string()))?;
    lap("prepare", &mut stages);
    let options = PassOptions {
        stats: Some(stats.clone()),
        config: config.clone(),
    };
    let plan_size = plan(module, Some(stats), config)?.activations.len();
    let weights = passes::quantize_weights::run(module, &options)?;
    lap("quantize-weights", &mut stages);
    let qdq = passes::insert_qdq::run(module, &options)?;
    lap("insert-qdq", &mut stages);
    crate::ir::io::verify(module).map_err(|d| IrError::Invalid(format!("quantized module does not verify: {d}")))?;
    let summary = summary::summarize(module, config)?;
    let bytes_after = crate::inspect::inspect(module)?.constant_bytes;
    lap("verify", &mut stages);
    Ok(QuantizeReport {
        activations: plan_size,
        weights,
        qdq,
        summary,
        bytes_before,
        bytes_after,
        stages,
    })
}
