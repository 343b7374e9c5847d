//! Layer depth in waves: a value's wave is the number of quantized-weight layers on the
//! longest path to it from the model's inputs, so a layer reading a value of wave w reads only
//! what layers of waves < w make. What is measured in the quantized model itself
//! (`--gptq-asymmetric`'s Gram matrices, `--bias-correction-sequential`'s shifts) goes wave by
//! wave: each wave's layers measured with every earlier wave already as it will be.
//!
//! ```text
//! %a = onnx.Conv(%x, %w0)     // reads wave 0 (the input); %a is wave 1
//! %b = onnx.Relu(%a)          // wave 1
//! %c = onnx.Conv(%b, %w1)     // reads wave 1; %c is wave 2
//! %d = onnx.Add(%c, %x)       // wave 2: its deepest operand
//! ```

use crate::ir::keys::TensorKeys;
use melior::ir::operation::OperationLike;
use melior::ir::OperationRef;
use std::collections::HashMap;

/// Each value's wave, by key, as the ops are visited in program order.
#[derive(Default)]
pub struct Waves {
    of: HashMap<String, usize>,
}

impl Waves {
    /// Records the wave of `op`'s results: its deepest operand's, one deeper when `op` is a
    /// quantized-weight `layer`.
    pub fn visit(&mut self, op: OperationRef, keys: &TensorKeys, layer: bool) {
        let wave_in = op
            .operands()
            .filter_map(|v| keys.get(v).and_then(|k| self.of.get(k)))
            .max()
            .copied()
            .unwrap_or(0);
        for r in op.results() {
            if let Some(k) = keys.get(r.into()) {
                self.of.insert(k.to_string(), wave_in + usize::from(layer));
            }
        }
    }

    /// The wave of the value of `key` (0: a model input, a constant, or a key not visited).
    pub fn of(&self, key: &str) -> usize {
        self.of.get(key).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::graph::{body_ops, find_function, op_name};

    #[test]
    fn a_value_is_as_deep_as_the_most_layers_on_a_path_to_it() {
        let ctx = crate::ir::new_context();
        let m = melior::ir::Module::parse(
            &ctx,
            r#"func.func @main(%x: tensor<1x2xf32> loc("x")) -> tensor<1x2xf32> {
  %w = "onnx.Constant"() {value = dense<1.0> : tensor<2x2xf32>} : () -> tensor<2x2xf32> loc("w")
  %a = "onnx.MatMul"(%x, %w) : (tensor<1x2xf32>, tensor<2x2xf32>) -> tensor<1x2xf32> loc("a")
  %b = "onnx.Relu"(%a) : (tensor<1x2xf32>) -> tensor<1x2xf32> loc("b")
  %c = "onnx.MatMul"(%b, %w) : (tensor<1x2xf32>, tensor<2x2xf32>) -> tensor<1x2xf32> loc("c")
  %d = "onnx.Add"(%c, %x) : (tensor<1x2xf32>, tensor<1x2xf32>) -> tensor<1x2xf32> loc("d")
  return %d : tensor<1x2xf32>
}"#,
        )
        .expect("parses");
        let func = find_function(&m, None).unwrap();
        let keys = TensorKeys::new(func);
        let mut waves = Waves::default();
        for op in body_ops(func) {
            waves.visit(op, &keys, op_name(&op) == "onnx.MatMul");
        }
        let got: Vec<usize> = ["x", "w", "a", "b", "c", "d", "nowhere"]
            .iter()
            .map(|k| waves.of(k))
            .collect();
        assert_eq!(got, [0, 0, 1, 1, 2, 2, 0]);
    }
}
