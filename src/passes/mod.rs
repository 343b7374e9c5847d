//! The MLIR rewriter: one pass per file, run by name (`quantir opt --pass NAME`).
//!
//! A pass is a function over a whole module that reports what it changed. The registry
//! below is the only list of passes: the CLI, `opt` and the tests all go through it.

pub mod duplicate_shape_constants;
pub mod fold_batchnorm;
pub mod fold_constants;
pub mod insert_qdq;
pub mod quantize_weights;
pub mod strip_identity;
pub mod tf_to_onnx;

use crate::ir::IrError;
use melior::ir::Module;

/// What a pass did: counts by kind of change, and warnings worth showing a user.
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PassReport {
    pub changes: std::collections::BTreeMap<String, usize>,
    pub warnings: Vec<String>,
}

impl PassReport {
    pub fn count(&mut self, what: &str) {
        *self.changes.entry(what.to_string()).or_insert(0) += 1;
    }
    pub fn total(&self) -> usize {
        self.changes.values().sum()
    }
}

/// What passes may need beyond the module: statistics and the quantization recipe.
#[derive(Debug, Clone, Default)]
pub struct PassOptions {
    pub stats: Option<crate::calibration::StatsFile>,
    pub config: crate::recipe::QuantConfig,
}

/// One registered pass.
pub struct PassInfo {
    pub name: &'static str,
    pub summary: &'static str,
    pub run: fn(&Module, &PassOptions) -> Result<PassReport, IrError>,
}

/// Every pass quantir knows, by the name `opt --pass` takes.
pub const PASSES: &[PassInfo] = &[
    PassInfo {
        name: "strip-identity",
        summary: "remove tf.Identity / IdentityN / StopGradient between producers and consumers (function results keep theirs)",
        run: strip_identity::run,
    },
    PassInfo {
        name: "duplicate-shape-constants",
        summary: "give shape-determining operands private copies of the constants they are computed from",
        run: duplicate_shape_constants::run,
    },
    PassInfo {
        name: "fold-constants",
        summary: "evaluate ops whose operands are all constants (interpreter kernels) and replace them by constants",
        run: fold_constants::run,
    },
    PassInfo {
        name: "fold-batchnorm",
        summary: "fold per-channel Mul/Add (batch norm) after conv/matmul into the weight and a BiasAdd",
        run: fold_batchnorm::run,
    },
    PassInfo {
        name: "tf-to-onnx",
        summary: "rewrite TF-dialect ops as ONNX-dialect ops (NHWC → NCHW around convolutions and pools), for an .onnx output",
        run: tf_to_onnx::run,
    },
    PassInfo {
        name: "quantize-weights",
        summary: "weights to int8 (per-channel symmetric) constants + quant.scast/dcast; biases to int32 at input × weight scale (needs --stats)",
        run: quantize_weights::run,
    },
    PassInfo {
        name: "insert-qdq",
        summary: "quant.qcast → quant.dcast on every quantized activation, parameters from --stats",
        run: insert_qdq::run,
    },
];

/// The pass called `name`.
pub fn find(name: &str) -> Option<&'static PassInfo> {
    PASSES.iter().find(|p| p.name == name)
}

/// Names of all passes, for usage errors.
pub fn names() -> Vec<&'static str> {
    PASSES.iter().map(|p| p.name).collect()
}

/// Runs the named passes in order and checks that the module still verifies after each.
pub fn run_pipeline(
    module: &Module,
    names: &[String],
    options: &PassOptions,
) -> Result<Vec<(String, PassReport)>, IrError> {
    let mut out = Vec::new();
    for n in names {
        let pass = find(n).ok_or_else(|| IrError::Invalid(format!("unknown pass '{n}'")))?;
        let report = (pass.run)(module, options)?;
        crate::ir::io::verify(module)
            .map_err(|d| IrError::Invalid(format!("module does not verify after pass {n}: {d}")))?;
        out.push((n.clone(), report));
    }
    Ok(out)
}
