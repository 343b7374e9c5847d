//! One op of a model run alone, on values a float run observed: what `--choose-range` scores a
//! point's candidate ranges with, and what bias correction measures a layer's output shift
//! with.
//!
//! ```text
//! %y = onnx.Conv(%x, %w, %b)   // LocalOp: %x the point (given per run), %w and %b constants,
//!                              //   any other operand read from the float run by its key
//! ```

use crate::interp::{build_kernel, Kernel};
use crate::ir::graph::{defining_op, op_name};
use crate::ir::ops::{constant_value, is_constant_op};
use crate::ir::value_key;
use crate::tensor::Tensor;
use melior::ir::operation::OperationLike;
use melior::ir::{OperationRef, Value};
use ndarray::ArrayD;
use std::collections::HashMap;

/// An op ready to run alone: its kernel and, per operand, where the value comes from.
pub struct LocalOp {
    kernel: Box<dyn Kernel>,
    operands: Vec<Operand>,
}

enum Operand {
    /// The value given to [`LocalOp::run`].
    Point,
    Const(Tensor),
    /// A runtime value of the float run, by key.
    Runtime(String),
}

impl LocalOp {
    /// `op` with `point` as the operand given per run, constants resolved (a folded value of
    /// the compiled program counts as one) and `replace`d where asked (operand index, value:
    /// quantized weights), every other operand read by its key. `None` when an operand has no
    /// key, `op` is a `func.return` or the interpreter has no kernel for it.
    pub fn new<'c, 'a>(
        op: OperationRef<'c, 'a>,
        point: Value<'c, 'a>,
        func: OperationRef<'c, 'a>,
        folded: &HashMap<&str, &Tensor>,
        replace: &[(usize, Tensor)],
    ) -> Option<LocalOp> {
        if op_name(&op) == "func.return" {
            return None;
        }
        let mut operands = Vec::new();
        for (i, x) in op.operands().enumerate() {
            if let Some((_, t)) = replace.iter().find(|(j, _)| *j == i) {
                operands.push(Operand::Const(t.clone()));
                continue;
            }
            if x == point {
                operands.push(Operand::Point);
                continue;
            }
            let key = value_key(func, x);
            let constant = defining_op(x)
                .filter(|d| is_constant_op(d))
                .and_then(constant_value)
                .or_else(|| key.as_deref().and_then(|k| folded.get(k)).map(|c| (*c).clone()));
            operands.push(match (constant, key) {
                (Some(c), _) => Operand::Const(c),
                (None, Some(k)) => Operand::Runtime(k),
                (None, None) => return None,
            });
        }
        // what the kernel is built with: the constant operands' values
        let consts = operands
            .iter()
            .map(|o| match o {
                Operand::Const(t) => Some(t.clone()),
                _ => None,
            })
            .collect();
        let kernel = build_kernel(op, consts).ok()?;
        Some(LocalOp { kernel, operands })
    }

    /// Keys of the runtime operands other than the point: what a float run must observe.
    pub fn runtime_keys(&self) -> impl Iterator<Item = &str> {
        self.operands.iter().filter_map(|o| match o {
            Operand::Runtime(k) => Some(k.as_str()),
            _ => None,
        })
    }

    /// The op's first result with `x` in the point's place and the other runtime operands
    /// from `seen`; `None` when one of those was not seen or the result is not f32.
    pub fn run(&self, x: &Tensor, seen: &HashMap<String, Tensor>) -> Result<Option<ArrayD<f32>>, String> {
        let args: Option<Vec<&Tensor>> = self
            .operands
            .iter()
            .map(|o| match o {
                Operand::Point => Some(x),
                Operand::Const(t) => Some(t),
                Operand::Runtime(k) => seen.get(k),
            })
            .collect();
        let Some(args) = args else { return Ok(None) };
        Ok(match self.kernel.run(&args)?.into_iter().next() {
            Some(Tensor::F32(y)) => Some(y),
            _ => None,
        })
    }
}
