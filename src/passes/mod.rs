//! The MLIR rewriter: one pass per file (or folder, for a pass with dialect halves), run by
//! name (`quantir opt --pass NAME`).
//!
//! A pass is a function over a whole module that reports what it changed. The registry below
//! is the only list of passes, declared as MLIR's `Passes.td` declares them: name, one-line
//! summary, description, what it runs on and whether it needs statistics. The CLI, `opt`,
//! `quantize` and the tests all go through it. Passes never import each other; what they share
//! lives in `ir/` (graph and constant helpers), `dialects/` (op tables) and `recipe/` (the
//! settings and the plan).

pub mod duplicate_shape_constants;
pub mod equalize_layers;
pub mod fold_batchnorm;
pub mod fold_constants;
pub mod insert_qdq;
pub mod pin_keys;
pub mod quantize_weights;
pub mod report;
pub mod strip_identity;
pub mod tf_to_onnx;

pub use report::{Change, PassError, PassReport};

use melior::ir::Module;

/// What passes may need beyond the module: statistics and the quantization recipe.
#[derive(Debug, Clone, Default)]
pub struct PassOptions {
    pub stats: Option<crate::calibration::StatsFile>,
    pub config: crate::recipe::QuantConfig,
}

/// Which functions a pass rewrites.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scope {
    /// Every `func.func` of the module.
    EveryFunction,
    /// The entry function only (`main`, else the only public one): what calibration observes.
    EntryFunction,
    /// The module itself (its attributes).
    Module,
}

/// What a pass needs besides the module.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Needs {
    Nothing,
    /// Statistics of this (prepared) model, from `quantir calibrate`.
    Statistics,
    /// Statistics, unless activations stay float (weight-only: no bias needs an input scale).
    StatisticsUnlessWeightOnly,
}

/// One registered pass.
pub struct PassInfo {
    pub name: &'static str,
    pub summary: &'static str,
    pub description: &'static str,
    pub scope: Scope,
    pub needs: Needs,
    pub run: fn(&Module, &PassOptions) -> Result<PassReport, PassError>,
}

/// Every pass quantir knows, by the name `opt --pass` takes, in the order `quantize` runs them.
pub const PASSES: &[PassInfo] = &[
    PassInfo {
        name: "strip-identity",
        summary: "remove identity ops between producers and consumers",
        description: "tf.Identity / IdentityN / StopGradient / Snapshot: every use reads the op's input instead; \
                      function results keep theirs (their names are the outputs')",
        scope: Scope::EveryFunction,
        needs: Needs::Nothing,
        run: strip_identity::run,
    },
    PassInfo {
        name: "fold-constants",
        summary: "evaluate ops whose operands are all constants and replace them by constants",
        description: "runs the interpreter's kernels on constant operands, so that what later passes see as a \
                      weight or a bias is the value the runtime will use; quant casts are never folded",
        scope: Scope::EveryFunction,
        needs: Needs::Nothing,
        run: fold_constants::run,
    },
    PassInfo {
        name: "fold-batchnorm",
        summary: "fold per-channel scale and shift after a conv/matmul into its weight and bias",
        description: "TF: Mul/AddV2/Sub and inference FusedBatchNorm into the weight and a BiasAdd; ONNX: the \
                      per-channel Mul/Add after a Conv/Gemm into its weight and bias input",
        scope: Scope::EveryFunction,
        needs: Needs::Nothing,
        run: fold_batchnorm::run,
    },
    PassInfo {
        name: "duplicate-shape-constants",
        summary: "give shape-determining operands private copies of the constants they are computed from",
        description: "TensorFlow's quant-duplicate-shape-determining-constants over every dialect's table of \
                      shape operands, so that no shape value is shared with data (and so observed or quantized)",
        scope: Scope::EveryFunction,
        needs: Needs::Nothing,
        run: duplicate_shape_constants::run,
    },
    PassInfo {
        name: "pin-keys",
        summary: "give every op its tensor key as a name location",
        description: "positional keys (@func/op#i:result#j) would shift when the rewriter inserts ops; pinned \
                      keys name the same tensor in calibrate, quantize and evaluate",
        scope: Scope::EveryFunction,
        needs: Needs::Nothing,
        run: pin_keys::run,
    },
    PassInfo {
        name: "equalize-layers",
        summary: "cross-layer equalization: move per-channel scales between consecutive conv/matmul layers",
        description: "Nagel et al. 2019: through ReLU, LeakyReLU, max pooling and biases, output channel i of a layer \
                      is divided by s_i and the next layer's input channel i multiplied by it: sqrt(r1/r2), so that \
                      both weight ranges meet, or, where calibration measured the activation in between, the scale \
                      of least estimated rounding noise; the function is unchanged, the values in between get \
                      '~equalized' keys. Where calibration measured a norm's output read only by matmuls (a \
                      LayerNormalization or per-channel Mul gain), SmoothQuant moves its channels' scale into the \
                      matmuls' weight rows the same way. Run by prepare when the recipe asks (--equalize-layers)",
        scope: Scope::EveryFunction,
        needs: Needs::Nothing,
        run: equalize_layers::run,
    },
    PassInfo {
        name: "tf-to-onnx",
        summary: "rewrite TF-dialect ops as ONNX-dialect ops, for an .onnx output",
        description: "NHWC → NCHW around convolutions and pools, an NCHW twin carried through layout-free ops, \
                      unread Transposes erased; a TF op without a lowering stops the pass with every such op named",
        scope: Scope::EveryFunction,
        needs: Needs::Nothing,
        run: tf_to_onnx::run,
    },
    PassInfo {
        name: "quantize-weights",
        summary: "weights to integer constants + quant.scast/dcast; biases to int32 at input × weight scale",
        description: "per-channel symmetric narrow-range int8 by default (int4, per-tensor, fp16/bf16 by the \
                      recipe); a bias needs its input's scale, so statistics unless activations stay float",
        scope: Scope::EntryFunction,
        needs: Needs::StatisticsUnlessWeightOnly,
        run: quantize_weights::run,
    },
    PassInfo {
        name: "insert-qdq",
        summary: "quant.qcast → quant.dcast on every quantized activation, parameters from statistics",
        description: "one pair per value of the plan, shared by all its consumers; never run upstream \
                      canonicalize afterwards (it folds dcast(qcast(x)) away)",
        scope: Scope::EntryFunction,
        needs: Needs::Statistics,
        run: insert_qdq::run,
    },
];

/// Named pipelines `opt --pass` also takes.
pub const PIPELINES: &[(&str, &str, &[&str])] = &[(
    "prepare",
    "what calibrate and quantize run first: strip-identity, fold-constants, fold-batchnorm, duplicate-shape-constants, pin-keys",
    PREPARE,
)];

/// The passes run before calibration and before quantization alike, so that both see the
/// same ops and the same tensor keys.
pub const PREPARE: &[&str] = &[
    "strip-identity",
    "fold-constants",
    "fold-batchnorm",
    "duplicate-shape-constants",
    "pin-keys",
];

/// The pass called `name`.
pub fn find(name: &str) -> Option<&'static PassInfo> {
    PASSES.iter().find(|p| p.name == name)
}

/// Names of all passes and pipelines, for usage errors and `opt --help`.
pub fn names() -> Vec<&'static str> {
    PASSES
        .iter()
        .map(|p| p.name)
        .chain(PIPELINES.iter().map(|p| p.0))
        .collect()
}

/// The passes a name stands for: itself, or a pipeline's.
fn expand(name: &str) -> Result<Vec<&'static PassInfo>, PassError> {
    if let Some((_, _, passes)) = PIPELINES.iter().find(|p| p.0 == name) {
        return passes
            .iter()
            .map(|n| expand(n))
            .collect::<Result<Vec<_>, _>>()
            .map(|v| v.concat());
    }
    find(name)
        .map(|p| vec![p])
        .ok_or_else(|| PassError::new(format!("unknown pass '{name}'; known: {}", names().join(", "))))
}

/// Checks that `options` hold what `pass` needs, and — at the first pass of a pipeline that
/// reads them (`hash_checked` false) — that the statistics are of this module: the passes
/// after it see the module it changed.
fn check_needs(
    module: &Module,
    pass: &PassInfo,
    options: &PassOptions,
    hash_checked: &mut bool,
) -> Result<(), PassError> {
    let needed = match pass.needs {
        Needs::Nothing => false,
        Needs::Statistics => true,
        Needs::StatisticsUnlessWeightOnly => options.config.activations.is_some(),
    };
    if !needed {
        return Ok(());
    }
    let Some(stats) = &options.stats else {
        return Err(PassError::new(
            "needs statistics (--stats STATS.json, from quantir calibrate on this model)",
        ));
    };
    if std::mem::replace(hash_checked, true) {
        return Ok(());
    }
    let hash = crate::ir::identity::model_hash(module);
    stats.check_model(&hash).map_err(|e| {
        PassError::new(format!(
            "{e}; statistics from calibrate describe the prepared model (run --pass prepare first)"
        ))
    })
}

/// Runs the named passes (and pipelines) in order and checks that the module still verifies
/// after each.
pub fn run_pipeline(
    module: &Module,
    names: &[String],
    options: &PassOptions,
) -> Result<Vec<(String, PassReport)>, PassError> {
    let mut out = Vec::new();
    let mut hash_checked = false;
    for n in names {
        for pass in expand(n)? {
            check_needs(module, pass, options, &mut hash_checked).map_err(|e| e.in_pass(pass.name))?;
            let report = (pass.run)(module, options).map_err(|e| e.in_pass(pass.name))?;
            crate::ir::io::verify(module)
                .map_err(|d| PassError::new(format!("module does not verify afterwards: {d}")).in_pass(pass.name))?;
            out.push((pass.name.to_string(), report));
        }
    }
    Ok(out)
}
