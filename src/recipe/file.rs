//! Recipe files (`quantize --config RECIPE.toml`): the whole [`QuantConfig`] plus calibration
//! defaults in one TOML document, with per-op / per-tensor overrides.
//!
//! ```toml
//! weights = "int8"            # int8 | int4 | fp16 | bf16
//! activations = "int8"        # int8 | uint8 | int16 | none
//! scheme = "mlir"             # mlir | onnx | torch
//! method = "minmax"           # calibration method (when quantize calibrates itself)
//! exclude = ["*Softmax*"]
//! bias_overflow = "enlarge-weight-scale"  # or "clip": an int32 bias that would not fit
//! bias_correction = true      # each layer's mean output shift on calibration data off its bias
//! bias_correction_sequential = true  # ... measured in the quantized model, layer depth by depth
//! gptq = true                 # weights rounded for the layer's output on calibration data
//! gptq_asymmetric = true      # ... for the float output from the quantized model's inputs
//! per_channel_depthwise_inputs = true  # one scale per channel at depthwise conv inputs
//! float_read_outputs = false  # no Q/DQ on a compute op's output that only float ops read
//! qlinear_outputs = false     # no Q/DQ that only completes an int8 kernel of onnxruntime's
//! activation_matmuls = true   # both operands of attention's Q·Kᵀ and P·V quantized
//! equalize_layers = false     # cross-layer equalization of consecutive conv/matmul layers
//! equalize_by = "activations" # or "weights" (data-free): what the next layer's weights are balanced against
//!
//! [[override]]
//! match = "tf.MatMul"         # glob over op names and tensor keys
//! activations = "int16"
//! method = "percentile"
//!
//! [[override]]
//! match = "@main/op#12:result#0"
//! exclude = true
//! ```
//! Later overrides win over earlier ones, field by field.

use super::{QuantConfig, WeightMode};
use crate::params::{Scheme, StorageType};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// One `[[override]]` table.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Override {
    /// Glob (`*` wildcards) over op names and tensor keys.
    #[serde(rename = "match")]
    pub pattern: String,
    /// Leave matching ops / tensors in float.
    pub exclude: bool,
    pub weights: Option<WeightMode>,
    /// Activation storage, `"none"` for weight-only.
    pub activations: Option<String>,
    pub scheme: Option<Scheme>,
    pub per_channel: Option<bool>,
    /// Calibration method of matching tensors.
    pub method: Option<String>,
    pub percentile: Option<f64>,
    /// What added this override when quantir did (`--target-sqnr`), not the user: the reason a
    /// layer it excludes is reported with.
    #[serde(skip)]
    pub by: Option<String>,
    /// Matches ops only, never an activation point by its own key: the target search leaves an
    /// op float this way while the value it writes stays int8 for the ops that read it (an op's
    /// output key is also its readers' input key).
    #[serde(skip)]
    pub op_only: bool,
}

/// The document as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct RecipeFile {
    scheme: Option<Scheme>,
    weights: Option<WeightMode>,
    activations: Option<String>,
    per_channel: Option<bool>,
    symmetric_activations: Option<bool>,
    quantize_outputs: Option<bool>,
    reduce_range: Option<bool>,
    /// onnxruntime, onnxruntime-vnni or generic
    runtime: Option<String>,
    /// `enlarge-weight-scale` (the default) or `clip`
    bias_overflow: Option<crate::params::BiasOverflowPolicy>,
    /// each layer's mean output shift taken off its bias when quantize calibrates
    bias_correction: Option<bool>,
    /// bias correction measured in the quantized model (implies bias_correction)
    bias_correction_sequential: Option<bool>,
    /// GPTQ rounding of int8/int4 weights when quantize calibrates
    gptq: Option<bool>,
    /// GPTQ on the quantized model's inputs (implies gptq)
    gptq_asymmetric: Option<bool>,
    /// per-channel scales at the activation input of depthwise convolutions
    per_channel_depthwise_inputs: Option<bool>,
    /// Q/DQ on compute op outputs that only float ops read
    float_read_outputs: Option<bool>,
    /// Q/DQ on compute op outputs that complete an int8 kernel of onnxruntime's
    qlinear_outputs: Option<bool>,
    /// both operands of matmuls with no constant operand (attention) quantized
    activation_matmuls: Option<bool>,
    /// cross-layer equalization (the `equalize-layers` pass) before calibration
    equalize_layers: Option<bool>,
    /// `activations` (measured on calibration data) or `weights` (data-free)
    equalize_by: Option<super::EqualizeBy>,
    exclude: Vec<String>,
    method: Option<String>,
    percentile: Option<f64>,
    #[serde(rename = "override")]
    overrides: Vec<Override>,
}

#[derive(Debug, thiserror::Error)]
pub enum RecipeError {
    #[error("{path}: cannot read: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("{path}: {message}")]
    Invalid { path: String, message: String },
}

/// Parses `"none"` or a storage type name.
pub fn parse_activations(s: &str) -> Result<Option<StorageType>, String> {
    match s {
        "none" => Ok(None),
        a => a
            .parse::<StorageType>()
            .map(Some)
            .map_err(|e| format!("{e} (or 'none')")),
    }
}

/// Reads a recipe file into a configuration. Every error names the file (and TOML's line and
/// column for syntax errors).
pub fn load(path: &Path) -> Result<QuantConfig, RecipeError> {
    load_onto(path, QuantConfig::default())
}

/// [`load`] over `base`.
pub fn load_onto(path: &Path, base: QuantConfig) -> Result<QuantConfig, RecipeError> {
    let text = std::fs::read_to_string(path).map_err(|source| RecipeError::Read {
        path: path.display().to_string(),
        source,
    })?;
    parse_onto(&text, base).map_err(|message| RecipeError::Invalid {
        path: path.display().to_string(),
        message,
    })
}

/// Parses recipe text; see the module documentation for the format.
pub fn parse(text: &str) -> Result<QuantConfig, String> {
    parse_onto(text, QuantConfig::default())
}

/// Parses recipe text over `base` (settings the recipe leaves out keep `base`'s values).
pub fn parse_onto(text: &str, base: QuantConfig) -> Result<QuantConfig, String> {
    let f: RecipeFile = toml::from_str(text).map_err(|e| {
        let at = e.span().map(|span| {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let col = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
            format!("line {line}, column {col}: ")
        });
        format!("{}{}", at.unwrap_or_default(), e.message())
    })?;
    let mut c = base;
    if let Some(s) = f.scheme {
        c.scheme = s;
    }
    if let Some(w) = f.weights {
        c.weights = w;
    }
    if let Some(a) = &f.activations {
        c.activations = parse_activations(a).map_err(|e| format!("activations: {e}"))?;
    }
    c.per_channel = f.per_channel.unwrap_or(c.per_channel);
    c.symmetric_activations = f.symmetric_activations.unwrap_or(c.symmetric_activations);
    c.quantize_outputs = f.quantize_outputs.unwrap_or(c.quantize_outputs);
    c.reduce_range = f.reduce_range.unwrap_or(c.reduce_range);
    if let Some(r) = &f.runtime {
        c.runtime = r.parse().map_err(|e| format!("runtime: {e}"))?;
    }
    c.bias_correction = f.bias_correction.unwrap_or(c.bias_correction);
    c.bias_correction_sequential = f.bias_correction_sequential.unwrap_or(c.bias_correction_sequential);
    c.bias_correction |= c.bias_correction_sequential;
    c.gptq = f.gptq.unwrap_or(c.gptq);
    c.gptq_asymmetric = f.gptq_asymmetric.unwrap_or(c.gptq_asymmetric);
    c.gptq |= c.gptq_asymmetric;
    c.per_channel_depthwise_inputs = f.per_channel_depthwise_inputs.unwrap_or(c.per_channel_depthwise_inputs);
    c.float_read_outputs = f.float_read_outputs.unwrap_or(c.float_read_outputs);
    c.qlinear_outputs = f.qlinear_outputs.unwrap_or(c.qlinear_outputs);
    c.activation_matmuls = f.activation_matmuls.unwrap_or(c.activation_matmuls);
    c.equalize_layers = f.equalize_layers.unwrap_or(c.equalize_layers);
    c.equalize_by = f.equalize_by.unwrap_or(c.equalize_by);
    c.bias_overflow = f.bias_overflow.unwrap_or(c.bias_overflow);
    c.exclude = f.exclude;
    c.method = f.method;
    c.percentile = f.percentile;
    for (i, o) in f.overrides.iter().enumerate() {
        if o.pattern.is_empty() {
            return Err(format!("override {} has no 'match'", i + 1));
        }
        if let Some(a) = &o.activations {
            parse_activations(a).map_err(|e| format!("override '{}': activations: {e}", o.pattern))?;
        }
        if let Some(m) = &o.method {
            crate::calibration::Method::from_name(m, o.percentile)
                .map_err(|e| format!("override '{}': {e}", o.pattern))?;
        }
    }
    if let Some(m) = &c.method {
        crate::calibration::Method::from_name(m, c.percentile).map_err(|e| e.to_string())?;
    }
    c.overrides = f.overrides;
    Ok(c)
}

/// The settings that apply to one op (and its weights and activations) after overrides.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    pub exclude: bool,
    pub weights: WeightMode,
    pub activations: Option<StorageType>,
    pub scheme: Scheme,
    pub per_channel: bool,
    /// 7-bit weights ([`QuantConfig::reduce_range`](super::QuantConfig::reduce_range)).
    pub reduce_range: bool,
    /// Calibration method name and percentile, when an override sets one.
    pub method: Option<(String, Option<f64>)>,
    /// Why it is excluded when quantir's own override did it ([`Override::by`]).
    pub excluded_by: Option<String>,
    /// What set `activations` when quantir's own override did ([`Override::by`]).
    pub activations_by: Option<String>,
}

/// The names a recipe pattern can select op `op` by: its op name (`onnx.Conv`), `extra` (tensor
/// keys), and every name in its location (an ONNX op's output tensor and node names).
pub fn op_names<'c: 'a, 'a>(op: &impl melior::ir::operation::OperationLike<'c, 'a>, extra: &[&str]) -> Vec<String> {
    let mut names = vec![crate::ir::graph::op_name(op)];
    names.extend(extra.iter().map(|s| s.to_string()));
    names.extend(crate::ir::keys::location_names(op.location()));
    names
}

impl QuantConfig {
    /// The settings for op `op` (by [`op_names`], with `extra` names such as tensor keys).
    pub fn resolve_op<'c: 'a, 'a>(
        &self,
        op: &impl melior::ir::operation::OperationLike<'c, 'a>,
        extra: &[&str],
    ) -> Resolved {
        let names = op_names(op, extra);
        self.resolve(&names.iter().map(String::as_str).collect::<Vec<_>>())
    }

    /// The settings for something named by any of `names` (op name, tensor keys).
    pub fn resolve(&self, names: &[&str]) -> Resolved {
        self.resolve_point(names, None)
    }

    /// The settings for an activation point with its own key `key`, of the op named by `names`:
    /// as [`resolve`](Self::resolve) over both, except that an [`Override::op_only`] does not
    /// match by `key`.
    pub fn resolve_point(&self, names: &[&str], key: Option<&str>) -> Resolved {
        let on_op = |p: &str| names.iter().any(|n| super::glob(p, n));
        let hit = |p: &str| on_op(p) || key.is_some_and(|k| super::glob(p, k));
        let mut r = Resolved {
            exclude: self.exclude.iter().any(|p| hit(p)),
            weights: self.weights,
            activations: self.activations,
            scheme: self.scheme,
            per_channel: self.per_channel,
            reduce_range: self.reduce_range,
            method: None,
            excluded_by: None,
            activations_by: None,
        };
        let by_user = r.exclude;
        for o in self
            .overrides
            .iter()
            .filter(|o| if o.op_only { on_op(&o.pattern) } else { hit(&o.pattern) })
        {
            r.exclude |= o.exclude;
            if o.exclude && !by_user && r.excluded_by.is_none() {
                r.excluded_by = o.by.clone();
            }
            if let Some(w) = o.weights {
                r.weights = w;
            }
            if let Some(a) = o.activations.as_deref().and_then(|a| parse_activations(a).ok()) {
                r.activations = a;
                r.activations_by = o.by.clone();
            }
            if let Some(s) = o.scheme {
                r.scheme = s;
            }
            if let Some(p) = o.per_channel {
                r.per_channel = p;
            }
            if let Some(m) = &o.method {
                r.method = Some((m.clone(), o.percentile));
            }
        }
        r
    }
}

impl std::str::FromStr for WeightMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "int8" => Ok(WeightMode::Int8),
            "int4" => Ok(WeightMode::Int4),
            "fp16" => Ok(WeightMode::Fp16),
            "bf16" => Ok(WeightMode::Bf16),
            w => Err(format!("expected int8, int4, fp16 or bf16, got '{w}'")),
        }
    }
}
