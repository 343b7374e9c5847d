//! quantir's main job as library calls: [`prepare`] a module, [`plan`] what to quantize,
//! [`calibrate`] it on sample data, [`quantize_module`] it from statistics, and
//! [`evaluate`](crate::evaluate) the result.

pub mod cache;
pub mod calibrate;
pub mod summary;

pub use crate::recipe::file as recipe;
pub use crate::recipe::plan::{self, plan, ActivationPoint, Plan};
pub use crate::recipe::{glob, parse_activations, Override, QuantConfig, Resolved, WeightMode};
pub use calibrate::{calibrate, calibrate_cached, CalibrateOptions, Calibrated};

use crate::calibration::StatsFile;
use crate::ir::IrError;
use crate::passes::{self, PassOptions, PassReport};
use melior::ir::Module;
use serde::Serialize;

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
