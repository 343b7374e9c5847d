//! The ONNX ops besides Conv, Gemm and MatMul that onnxruntime's CPU QDQ transformers run as
//! int8 kernels (`QLinearAdd`, `QLinearConcat`, ...), at its default optimization level, when
//! every activation input comes from a DequantizeLinear and the output goes to one
//! QuantizeLinear (onnxruntime's `qdq_selector_action_transformer.cc`). Sorted by op name.
//!
//! quantir reads it for `--runtime onnxruntime`: a compute op's output that such an op reads
//! gets a Q/DQ pair even though no int8 kernel of quantir's own needs it, when the op's other
//! inputs and its output are quantized too, so that onnxruntime fuses the whole run.

/// How many of an op's operands are activations onnxruntime dequantizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inputs {
    /// Operand 0 (AveragePool, Sigmoid, ...).
    Unary,
    /// Operands 0 and 1 (Add, Mul).
    Binary,
    /// Every operand (Concat).
    Variadic,
}

/// The ops and how many activation inputs they dequantize, sorted.
pub const QLINEAR: &[(&str, Inputs)] = &[
    ("onnx.Add", Inputs::Binary),
    ("onnx.AveragePool", Inputs::Unary),
    ("onnx.Concat", Inputs::Variadic),
    ("onnx.GlobalAveragePool", Inputs::Unary),
    ("onnx.LeakyRelu", Inputs::Unary),
    ("onnx.Mul", Inputs::Binary),
    ("onnx.Sigmoid", Inputs::Unary),
    ("onnx.Softmax", Inputs::Unary),
];

/// The operand indices of `op` that must be dequantized activations for onnxruntime to run it
/// in int8, given its operand count; `None` when it has no such kernel.
pub fn activation_inputs(op: &str, operands: usize) -> Option<Vec<usize>> {
    let (_, inputs) = QLINEAR.iter().find(|(n, _)| *n == op)?;
    Some(match inputs {
        Inputs::Unary => vec![0],
        Inputs::Binary => vec![0, 1],
        Inputs::Variadic => (0..operands).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_sorted_and_names_onnx_ops() {
        assert!(QLINEAR.windows(2).all(|p| p[0].0 < p[1].0));
        assert!(QLINEAR.iter().all(|(n, _)| crate::interp::supports(n)));
        assert_eq!(activation_inputs("onnx.Concat", 3), Some(vec![0, 1, 2]));
        assert_eq!(activation_inputs("onnx.Relu", 1), None);
    }
}
