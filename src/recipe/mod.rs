//! What the user asked for, below the passes that carry it out: the quantization settings
//! ([`QuantConfig`]), recipe files with per-op / per-tensor overrides ([`file`]), and the
//! quantization [`plan`] — which values become quantization points and with what parameters —
//! built once from the module, the statistics and the settings.

pub mod file;
pub mod plan;

pub use file::{parse_activations, Override, Resolved};
pub use plan::{plan, ActivationPoint, Plan};

use crate::params::{BiasOverflowPolicy, Scheme, StorageType};
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

/// The runtime a quantized model is made for, where its int8 kernels constrain the weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Runtime {
    /// Any runtime that accumulates int8 products in int32: full-range weights.
    #[default]
    Generic,
    /// onnxruntime on any x86 CPU: where its int8 GEMM without VNNI could saturate an int16
    /// pair sum (`params::saturation`), those output channels get a wider weight scale.
    Onnxruntime,
    /// onnxruntime on CPUs with VNNI (AVX-512 VNNI, AVX-VNNI) or on ARM: full-range weights.
    OnnxruntimeVnni,
}

impl Runtime {
    /// True for onnxruntime, whose QDQ transformers fuse DQ → op → Q into its int8 kernels
    /// (`dialects::ort_qlinear`): a Q/DQ pair that completes such a pattern pays off there.
    pub fn is_onnxruntime(self) -> bool {
        matches!(self, Runtime::Onnxruntime | Runtime::OnnxruntimeVnni)
    }
}

impl std::str::FromStr for Runtime {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "generic" => Ok(Runtime::Generic),
            "onnxruntime" | "ort" => Ok(Runtime::Onnxruntime),
            "onnxruntime-vnni" | "onnxruntime-arm" => Ok(Runtime::OnnxruntimeVnni),
            _ => Err(format!(
                "unknown runtime '{s}' (expected onnxruntime, onnxruntime-vnni, onnxruntime-arm or generic)"
            )),
        }
    }
}

impl std::fmt::Display for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Runtime::Generic => "generic",
            Runtime::Onnxruntime => "onnxruntime",
            Runtime::OnnxruntimeVnni => "onnxruntime-vnni",
        })
    }
}

/// What `equalize-layers` balances the next layer's input-channel weight ranges against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EqualizeBy {
    /// The activation in between, measured channel by channel on the calibration data's first
    /// samples: of no scaling, SmoothQuant's balance at α = ¼, ½, ¾ and the weight balance,
    /// the scale of least estimated rounding noise at the second layer's output (with
    /// per-channel weights it is the per-tensor activation between the layers that loses
    /// resolution).
    #[default]
    Activations,
    /// The first layer's output-channel weight ranges (Nagel et al.'s data-free form).
    Weights,
}

impl std::str::FromStr for EqualizeBy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "activations" => Ok(EqualizeBy::Activations),
            "weights" => Ok(EqualizeBy::Weights),
            _ => Err(format!("unknown equalization '{s}' (expected activations or weights)")),
        }
    }
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
    /// The runtime the model is made for ([`Runtime`]); `quantize` picks onnxruntime for an
    /// .onnx output, generic otherwise.
    pub runtime: Runtime,
    /// Calibration method when `quantize` calibrates itself (a recipe's `method`).
    pub method: Option<String>,
    pub percentile: Option<f64>,
    /// Per-op / per-tensor overrides, later ones winning.
    pub overrides: Vec<file::Override>,
    /// Bias correction when `quantize` calibrates: the mean shift that quantizing each
    /// layer's weights and input causes in its output on calibration samples is taken off its
    /// bias (`quantize::bias_correction`).
    pub bias_correction: bool,
    /// Bias correction measured in the quantized model, wave by wave (implies
    /// `bias_correction`): each layer's shift with the layers before it quantized and already
    /// corrected, so that it also takes off the mean drift they leave
    /// (`quantize::bias_correction::sequential`).
    pub bias_correction_sequential: bool,
    /// GPTQ rounding of int8/int4 weights when `quantize` calibrates: each weight row rounded
    /// one input at a time, the error spread over the inputs not yet rounded, so that the
    /// layer's output on calibration samples stays closest to float (`params::gptq`).
    pub gptq: bool,
    /// GPTQ on the quantized model's inputs (asymmetric calibration; implies `gptq`): each
    /// layer's rows rounded toward the weights that map what its quantized input will be to
    /// the float layer's output, measured wave by wave (`quantize::gram::paired`).
    pub gptq_asymmetric: bool,
    /// Per-channel scales and zero points for the activation input of a depthwise
    /// convolution (ONNX `Conv` with one input channel per group): each output channel reads
    /// one input channel, so an integer kernel takes one input scale per channel as it takes
    /// one weight scale per channel, and channels whose ranges differ by 10× (after a batch
    /// norm, a HardSwish) keep their resolution. onnxruntime's QLinearConv takes one input
    /// scale, so it runs such a convolution (and the op producing its input) in float.
    /// Applies where the point is calibrated with min/max (the default method) and stored in
    /// 8 bits or fewer.
    pub per_channel_depthwise_inputs: bool,
    /// Quantize a compute op's output point even when only float ops read it (an exported
    /// HardSwish, a Sigmoid, a LayerNorm): onnxruntime then runs the op as its int8 kernel
    /// with an int8 output, at the cost of one more rounding of a pre-activation range.
    pub float_read_outputs: bool,
    /// Quantize a compute op's output that an int8 kernel of onnxruntime's reads (Add, Mul,
    /// Concat, AveragePool, GlobalAveragePool, Sigmoid, LeakyRelu, Softmax;
    /// `dialects::ort_qlinear`) when that op's other inputs and its output are quantized:
    /// onnxruntime then runs the whole run in int8, at one more rounding per such output.
    pub qlinear_outputs: bool,
    /// Quantize both operands of a compute op whose "weight" is an activation too — attention's
    /// Q·Kᵀ and P·V (MatMul, Einsum, BatchMatMul with no constant operand) — per tensor, as
    /// every other activation: the op then runs W8A8 like the rest of a transformer. Off, such
    /// an op stays float (its other input is still quantized).
    pub activation_matmuls: bool,
    /// Cross-layer equalization (`passes::equalize_layers`) as the last step of prepare, so
    /// that calibration and quantization see the equalized weights: pairs of conv/matmul
    /// layers joined through ReLU, LeakyReLU, max pooling or a bias get a per-channel scale
    /// moved from the first to the second ([`EqualizeBy`] says how it is chosen). The stats
    /// of an equalized model are of that model only.
    pub equalize_layers: bool,
    /// What the equalization balances against ([`EqualizeBy`]).
    pub equalize_by: EqualizeBy,
    /// Per-channel moments of the values `equalize-layers` balances against the next layer's
    /// weights, by key (measured on calibration data; empty: the weights alone decide):
    /// computed, never read from a recipe.
    #[serde(skip)]
    pub equalize_ranges: std::collections::BTreeMap<String, crate::calibration::ChannelMoments>,
    /// The shifts bias correction measured, by compute op output key: computed, never read
    /// from a recipe.
    #[serde(skip)]
    pub bias_shifts: std::collections::BTreeMap<String, Vec<f32>>,
    /// The shifts of the layers with a quantized input had that input stayed float (for the
    /// layers a quality target raises to float input), by compute op output key.
    #[serde(skip)]
    pub bias_shifts_float_input: std::collections::BTreeMap<String, Vec<f32>>,
    /// The Gram matrices of each layer's inputs GPTQ rounds its weight with, by compute op
    /// output key: computed, never read from a recipe.
    #[serde(skip)]
    pub weight_grams: std::collections::BTreeMap<String, std::sync::Arc<crate::params::gptq::Gram>>,
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
            bias_overflow: BiasOverflowPolicy::EnlargeWeightScale,
            quantize_outputs: false,
            reduce_range: false,
            runtime: Runtime::Generic,
            method: None,
            percentile: None,
            overrides: Vec::new(),
            bias_correction: false,
            bias_correction_sequential: false,
            gptq: false,
            gptq_asymmetric: false,
            per_channel_depthwise_inputs: true,
            float_read_outputs: false,
            qlinear_outputs: false,
            activation_matmuls: true,
            equalize_layers: false,
            equalize_by: EqualizeBy::Activations,
            equalize_ranges: Default::default(),
            bias_shifts: Default::default(),
            bias_shifts_float_input: Default::default(),
            weight_grams: Default::default(),
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
