//! What a pass reports — typed counters and warnings — and the one error every pass returns:
//! the pass, where in the module, on which op, and why.

use crate::ir::IrError;
use melior::ir::operation::OperationLike;
use std::collections::BTreeMap;

/// A kind of change a pass counts. Each pass has its own; the text is what `opt` and
/// `quantize` print.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Change {
    /// strip-identity: uses moved from an identity op to its input.
    UsesForwarded,
    /// strip-identity: identity ops removed.
    IdentitiesErased,
    /// duplicate-shape-constants: constants given a private copy.
    ConstantsDuplicated,
    /// fold-constants: ops replaced by constants.
    OpsFolded,
    /// fold-batchnorm: per-channel scales folded into a weight.
    ScalesFolded,
    /// fold-batchnorm: per-channel adds turned into BiasAdd.
    AddsToBiasAdd,
    /// fold-batchnorm: ONNX Mul/Add chains folded into a Conv/Gemm's weight and bias.
    OnnxScaleShiftFolded,
    /// equalize-layers: pairs of layers whose channels were equalized.
    LayerPairsEqualized,
    /// Normalization gains whose channels SmoothQuant moved into the matmuls reading them.
    NormsSmoothed,
    /// tf-to-onnx: TF ops rewritten.
    TfOpsLowered,
    /// tf-to-onnx: ONNX ops written, by op name.
    Written(String),
    /// quantize-weights: weights stored as integers (or halves).
    WeightsQuantized,
    /// quantize-weights: uses of a weight already quantized for another op.
    SharedWeightsReused,
    /// quantize-weights: biases stored as int32.
    BiasesQuantized,
    /// quantize-weights: float biases (of ops with a float input) given bias correction's shift.
    FloatBiasesCorrected,
    /// quantize-weights: zero biases given to ops without one, for bias correction's shift.
    BiasesAdded,
    /// quantize-weights: weights rounded by GPTQ (from their inputs' Gram matrices).
    WeightsGptq,
    /// quantize-weights: dead output channels (weights ≈ 0) given their layer's largest scale.
    DeadChannels,
    /// quantize-weights: layers that onnxruntime runs on its u8s8 GEMM (runtime onnxruntime).
    U8s8Layers,
    /// quantize-weights: of those, layers whose weight scale was widened so that no int16
    /// pair sum can saturate on x86 CPUs without VNNI.
    U8s8LayersWidened,
    /// quantize-weights: of those, layers given uint8 weights with zero point 128 instead
    /// (onnxruntime's u8u8 GEMM, which cannot saturate), where wider scales cost more.
    U8s8LayersAsU8u8,
    /// quantize-weights: output channels so widened.
    U8s8ChannelsWidened,
    /// quantize-weights: u8s8 layers whose input has no per-channel statistics (bounded at
    /// the whole u8 range).
    U8s8WithoutChannelRanges,
    /// insert-qdq: qcast → dcast pairs inserted.
    QdqPairsInserted,
    /// pin-keys: ops given their key as a name location.
    KeysPinned,
}

impl std::fmt::Display for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            Change::UsesForwarded => f.write_str("uses forwarded"),
            Change::IdentitiesErased => f.write_str("identity ops erased"),
            Change::ConstantsDuplicated => f.write_str("constants duplicated"),
            Change::OpsFolded => f.write_str("ops folded"),
            Change::ScalesFolded => f.write_str("scales folded into weights"),
            Change::AddsToBiasAdd => f.write_str("adds turned into BiasAdd"),
            Change::DeadChannels => f.write_str("dead weight channels given their layer's scale"),
            Change::OnnxScaleShiftFolded => f.write_str("per-channel scale/shift folded into ONNX weights and biases"),
            Change::LayerPairsEqualized => f.write_str("layer pairs equalized"),
            Change::NormsSmoothed => f.write_str("norms smoothed (SmoothQuant)"),
            Change::TfOpsLowered => f.write_str("tf ops lowered"),
            Change::Written(op) => write!(f, "{op} written"),
            Change::WeightsQuantized => f.write_str("weights quantized"),
            Change::SharedWeightsReused => f.write_str("shared weights reused"),
            Change::BiasesQuantized => f.write_str("biases quantized to int32"),
            Change::BiasesAdded => f.write_str("biases added for bias correction"),
            Change::FloatBiasesCorrected => f.write_str("float biases corrected for their weights' rounding"),
            Change::WeightsGptq => f.write_str("weights rounded by GPTQ"),
            Change::U8s8Layers => f.write_str("layers on onnxruntime's u8s8 GEMM"),
            Change::U8s8LayersWidened => f.write_str("u8s8 layers with widened weight scales"),
            Change::U8s8LayersAsU8u8 => f.write_str("u8s8 layers given uint8 weights (u8u8 GEMM)"),
            Change::U8s8ChannelsWidened => f.write_str("u8s8 output channels with widened weight scales"),
            Change::U8s8WithoutChannelRanges => f.write_str("u8s8 layers bounded without per-channel input ranges"),
            Change::QdqPairsInserted => f.write_str("q/dq pairs inserted"),
            Change::KeysPinned => f.write_str("keys pinned"),
        }
    }
}

/// What a pass did: counts by kind of change, and warnings worth showing a user.
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PassReport {
    #[serde(serialize_with = "changes_by_text")]
    pub changes: BTreeMap<Change, usize>,
    pub warnings: Vec<String>,
}

fn changes_by_text<S: serde::Serializer>(c: &BTreeMap<Change, usize>, s: S) -> Result<S::Ok, S::Error> {
    s.collect_map(c.iter().map(|(k, v)| (k.to_string(), v)))
}

impl PassReport {
    pub fn count(&mut self, what: Change) {
        self.add(what, 1);
    }
    pub fn add(&mut self, what: Change, n: usize) {
        *self.changes.entry(what).or_insert(0) += n;
    }
    /// How many changes of one kind (0 when none).
    pub fn get(&self, what: &Change) -> usize {
        self.changes.get(what).copied().unwrap_or(0)
    }
    pub fn total(&self) -> usize {
        self.changes.values().sum()
    }
}

/// A pass that failed, located: `pass: file:line:col: op: reason`.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{}", self.render())]
pub struct PassError {
    /// The pass (filled in by the pipeline when the pass left it empty).
    pub pass: String,
    /// Where in the input the op came from (`file:line:col`, with the ONNX node when known).
    pub location: Option<String>,
    /// The op the pass failed on.
    pub op: Option<String>,
    pub reason: String,
}

impl PassError {
    /// A failure not tied to one op.
    pub fn new(reason: impl std::fmt::Display) -> PassError {
        PassError {
            pass: String::new(),
            location: None,
            op: None,
            reason: reason.to_string(),
        }
    }

    /// A failure on `op`, with its location.
    pub fn at<'c: 'a, 'a>(op: &impl OperationLike<'c, 'a>, reason: impl std::fmt::Display) -> PassError {
        PassError {
            pass: String::new(),
            location: Some(crate::ir::ops::location_string(op.location())),
            op: Some(crate::ir::graph::op_name(op)),
            reason: reason.to_string(),
        }
    }

    /// The same error, named as `pass`'s unless it already names one.
    pub fn in_pass(mut self, pass: &str) -> PassError {
        if self.pass.is_empty() {
            self.pass = pass.to_string();
        }
        self
    }

    fn render(&self) -> String {
        let mut parts: Vec<&str> = Vec::new();
        if !self.pass.is_empty() {
            parts.push(&self.pass);
        }
        if let Some(l) = &self.location {
            parts.push(l);
        }
        if let Some(o) = &self.op {
            parts.push(o);
        }
        parts.push(&self.reason);
        parts.join(": ")
    }
}

impl From<IrError> for PassError {
    fn from(e: IrError) -> PassError {
        PassError::new(e)
    }
}

/// A failure not tied to one op (the shorthand passes use with `map_err`).
pub fn err(e: impl std::fmt::Display) -> PassError {
    PassError::new(e)
}
