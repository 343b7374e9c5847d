//! The quantization settings of a request: the defaults an output format implies, a recipe,
//! and the flags (or Python keywords) on top, in that order.

use super::{usage, JobError};
use crate::formats;
use crate::quantize::{self, QuantConfig};
use std::path::{Path, PathBuf};

/// A recipe: a TOML file, or TOML text (a Python dict, converted).
#[derive(Debug, Clone)]
pub enum RecipeSource {
    File(PathBuf),
    Text(String),
}

/// The quantization settings a request gives on top of the defaults and its recipe (the
/// command line's flags, Python's keywords); names as the command line spells them.
#[derive(Debug, Clone, Default)]
pub struct RecipeFlags {
    pub recipe: Option<RecipeSource>,
    /// mlir, onnx or torch [default: onnx for an .onnx output, else mlir].
    pub scheme: Option<String>,
    pub weights: Option<String>,
    pub activations: Option<String>,
    pub per_tensor: bool,
    pub symmetric_activations: bool,
    pub quantize_outputs: bool,
    pub reduce_range: bool,
    /// onnxruntime, onnxruntime-vnni or generic [default: onnxruntime for an .onnx output,
    /// else the recipe's, else generic].
    pub runtime: Option<String>,
    pub exclude: Vec<String>,
    /// Raise the fewest activations (int8 → int16 → float), then compute ops, until the model
    /// reaches this quality on the calibration (or validation) data (see [`crate::target`]).
    pub target: Option<crate::target::Goal>,
    /// Bias correction on or off [default: the recipe's].
    pub bias_correction: Option<bool>,
    /// Bias correction measured in the quantized model on or off (on implies bias
    /// correction) [default: the recipe's].
    pub bias_correction_sequential: Option<bool>,
    /// GPTQ weight rounding on or off [default: the recipe's].
    pub gptq: Option<bool>,
    /// GPTQ on the quantized model's inputs on or off (on implies GPTQ) [default: the recipe's].
    pub gptq_asymmetric: Option<bool>,
    /// Per-channel scales at depthwise convolution inputs on or off [default: the recipe's].
    pub per_channel_depthwise_inputs: Option<bool>,
    /// Q/DQ on compute op outputs that only float ops read (on when set; else the recipe's).
    pub float_read_outputs: bool,
    /// Q/DQ on compute outputs that complete an onnxruntime int8 kernel (on when set; else
    /// the recipe's).
    pub qlinear_outputs: bool,
    /// Both operands of activation × activation matmuls quantized on or off [default: the
    /// recipe's].
    pub activation_matmuls: Option<bool>,
    /// Cross-layer equalization on or off [default: the recipe's].
    pub equalize_layers: Option<bool>,
    /// `activations` or `weights` [default: the recipe's].
    pub equalize_by: Option<String>,
}

/// The settings; `target` is the output model, whose format picks the default scheme (ONNX's
/// parameter arithmetic for an .onnx output, MLIR/TF's otherwise). Flags win over the recipe.
pub fn config(flags: &RecipeFlags, target: Option<&Path>) -> Result<QuantConfig, JobError> {
    let mut base = QuantConfig::default();
    if target.is_some_and(formats::model::is_onnx) {
        base.scheme = crate::params::Scheme::Onnx;
        base.runtime = crate::recipe::Runtime::Onnxruntime;
        // onnxruntime's x86 selectors fuse int8 activations only with int8 weights: uint8 (its
        // U8S8 default; int8's rounding shifted by 128) lets layers with uint8 weights fuse
        if flags.runtime.as_deref() != Some("generic") {
            base.activations = Some(crate::params::StorageType::Uint8);
        }
    }
    let mut c = match &flags.recipe {
        Some(RecipeSource::File(p)) => quantize::recipe::load_onto(p, base)?,
        Some(RecipeSource::Text(t)) => {
            quantize::recipe::parse_onto(t, base).map_err(|e| usage(format!("config: {e}")))?
        }
        None => base,
    };
    if let Some(s) = &flags.scheme {
        c.scheme = s.parse().map_err(|e| usage(format!("scheme: {e}")))?;
    }
    if let Some(w) = &flags.weights {
        c.weights = w.parse().map_err(|e: String| usage(format!("weights: {e}")))?;
    }
    if let Some(a) = &flags.activations {
        c.activations = quantize::parse_activations(a).map_err(|e| usage(format!("activations: {e}")))?;
    }
    c.per_channel &= !flags.per_tensor;
    c.symmetric_activations |= flags.symmetric_activations;
    c.quantize_outputs |= flags.quantize_outputs;
    c.reduce_range |= flags.reduce_range;
    if let Some(r) = &flags.runtime {
        c.runtime = r.parse().map_err(|e| usage(format!("runtime: {e}")))?;
    }
    c.exclude.extend(flags.exclude.iter().cloned());
    c.bias_correction = flags.bias_correction.unwrap_or(c.bias_correction);
    // --no-bias-correction turns both off
    c.bias_correction_sequential = flags.bias_correction_sequential.unwrap_or(c.bias_correction_sequential)
        && flags.bias_correction != Some(false);
    c.bias_correction |= c.bias_correction_sequential;
    c.gptq = flags.gptq.unwrap_or(c.gptq);
    // --no-gptq turns both off
    c.gptq_asymmetric = flags.gptq_asymmetric.unwrap_or(c.gptq_asymmetric) && flags.gptq != Some(false);
    c.gptq |= c.gptq_asymmetric;
    c.float_read_outputs |= flags.float_read_outputs;
    c.qlinear_outputs |= flags.qlinear_outputs;
    c.activation_matmuls = flags.activation_matmuls.unwrap_or(c.activation_matmuls);
    c.equalize_layers = flags.equalize_layers.unwrap_or(c.equalize_layers);
    if let Some(b) = &flags.equalize_by {
        c.equalize_by = b.parse().map_err(|e: String| usage(format!("equalize-by: {e}")))?;
    }
    c.per_channel_depthwise_inputs = flags
        .per_channel_depthwise_inputs
        .unwrap_or(c.per_channel_depthwise_inputs);
    Ok(c)
}
