//! Kernels shared by every dialect: plain functions and small structs over [`Tensor`]s. A
//! dialect table (`interp/tf.rs`) maps an op name and its attributes to one of these.

pub mod conv;
pub mod conv_nchw;
pub mod conv_transpose;
pub mod depthwise;
pub mod dot;
pub mod einsum;
pub mod elementwise;
pub mod epilogue;
pub mod erf;
pub mod exp;
pub mod indexing;
pub mod integer;
pub mod join;
pub mod layout;
pub mod matmul;
pub mod norm;
pub mod packed_gemm;
pub mod permute;
pub mod pool;
pub mod quant;
pub mod reduce;
pub mod resize;
pub mod rotary;
pub mod scatter;
pub mod widen;

use crate::tensor::{DType, Tensor};
use ndarray::{ArrayD, IxDyn};

/// A kernel failure, as text; the interpreter adds the op, its location and the tensor key.
pub type KernelResult<T> = Result<T, String>;

/// How a 4-D operand 0 and the result of one kernel call lie in memory: `true` is channels
/// last (NHWC) for a value whose logical layout is NCHW. Two ONNX convolutions that hand a
/// value only to each other keep it NHWC between them, so neither transposes it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChannelsLast {
    pub input: bool,
    pub output: bool,
}

/// A compiled op: its attributes are already parsed; it only sees runtime operands.
pub trait Kernel: Send + Sync {
    fn run(&self, inputs: &[&Tensor]) -> KernelResult<Vec<Tensor>>;

    /// Runs with a per-channel scale, bias and activation applied to the result inside the
    /// kernel, block by block while the data is in cache; `None` when the kernel has no fused
    /// form (the caller then applies the epilogue in a separate pass).
    fn run_fused(&self, _inputs: &[&Tensor], _ep: &epilogue::Epilogue) -> Option<KernelResult<Vec<Tensor>>> {
        None
    }

    /// Runs with ownership of operand 0, which no later op reads, so that elementwise kernels
    /// can write their result into its buffer instead of allocating one.
    fn run_owned(&self, first: Tensor, rest: &[&Tensor]) -> KernelResult<Vec<Tensor>> {
        self.run(&operands(&first, rest))
    }

    /// True when [`Kernel::run_owned`] reuses operand 0's buffer.
    fn reuses_first_operand(&self) -> bool {
        false
    }

    /// The results' element types and shapes, worked out without the arithmetic: for kernels
    /// whose cost is all arithmetic (convolutions, matrix products), so that type inference,
    /// which runs a model on zeros only to learn its shapes, can skip it. `None` when the kernel has no such form
    /// (it is then run); an error when the operands do not fit, as `run` would say.
    fn result_shapes(&self, _inputs: &[&Tensor]) -> Option<KernelResult<Vec<(DType, Vec<usize>)>>> {
        None
    }

    /// The zeros this op adds around the spatial axes (2 and 3) of a 4-D NCHW operand 0, as
    /// [(top, bottom), (left, right)], when that is all it does, given its other operands
    /// (`None` where not a constant): a Pad that the convolution after it can take as padding
    /// of its own ([`Kernel::padded`]).
    fn zero_spatial_pads(&self, _rest: &[Option<&Tensor>]) -> Option<[(usize, usize); 2]> {
        None
    }

    /// This kernel computing, bit for bit, what it computes on operand 0 with `extra` zeros
    /// more around its spatial axes, without those zeros being written; `None` when it cannot.
    fn padded(&self, _extra: [(usize, usize); 2]) -> Option<Box<dyn Kernel>> {
        None
    }

    /// True when [`Kernel::run_channels_last`] takes every [`ChannelsLast`] combination.
    fn takes_channels_last(&self) -> bool {
        false
    }

    /// Runs with operand 0 and the result laid out as `layout` says, and with the epilogue
    /// `ep` (if any) applied inside; only called where [`Kernel::takes_channels_last`].
    fn run_channels_last(
        &self,
        _inputs: &[&Tensor],
        _ep: Option<&epilogue::Epilogue>,
        _layout: ChannelsLast,
    ) -> KernelResult<Vec<Tensor>> {
        Err("this kernel has no channels-last form".into())
    }

    /// True for an elementwise op whose result, when every operand of rank 4 has the same
    /// shape and every other operand holds one value, is laid out as those operands are: it
    /// then runs on channels-last operands as they are and gives a channels-last result (the
    /// residual Add between two convolutions of an NCHW model).
    fn layout_free(&self) -> bool {
        false
    }

    /// [`Kernel::run_channels_last`] (without an epilogue) with ownership of operand 0, as
    /// [`Kernel::run_owned`] is to [`Kernel::run`].
    fn run_owned_channels_last(
        &self,
        first: Tensor,
        rest: &[&Tensor],
        layout: ChannelsLast,
    ) -> KernelResult<Vec<Tensor>> {
        self.run_channels_last(&operands(&first, rest), None, layout)
    }
}

/// Operand 0 (owned by the caller of a `run_owned` form) before the others, as `run` takes them.
pub fn operands<'t>(first: &'t Tensor, rest: &[&'t Tensor]) -> Vec<&'t Tensor> {
    let mut all = Vec::with_capacity(rest.len() + 1);
    all.push(first);
    all.extend_from_slice(rest);
    all
}

/// A kernel from a closure.
pub struct FnKernel<F>(pub F);

impl<F> Kernel for FnKernel<F>
where
    F: Fn(&[&Tensor]) -> KernelResult<Vec<Tensor>> + Send + Sync,
{
    fn run(&self, inputs: &[&Tensor]) -> KernelResult<Vec<Tensor>> {
        (self.0)(inputs)
    }
}

/// A kernel from a closure and a second one that gives its results' types and shapes without
/// the arithmetic ([`Kernel::result_shapes`]): normalizations and softmax, whose type
/// inference on zeros would otherwise cost what a sample's run does.
pub struct Shaped<F, S>(pub F, pub S);

/// Results' element types and shapes, as [`Kernel::result_shapes`] gives them.
pub type ResultShapes = Option<KernelResult<Vec<(DType, Vec<usize>)>>>;

impl<F, S> Kernel for Shaped<F, S>
where
    F: Fn(&[&Tensor]) -> KernelResult<Vec<Tensor>> + Send + Sync,
    S: Fn(&[&Tensor]) -> ResultShapes + Send + Sync,
{
    fn run(&self, inputs: &[&Tensor]) -> KernelResult<Vec<Tensor>> {
        (self.0)(inputs)
    }

    fn result_shapes(&self, inputs: &[&Tensor]) -> ResultShapes {
        (self.1)(inputs)
    }
}

/// Identity: its operands as they are. Where operand 0 dies at it, its buffer is handed on
/// instead of copied (a SavedModel's graph passes its image input through `tf.Identity`).
pub struct Identity;

impl Kernel for Identity {
    fn run(&self, inputs: &[&Tensor]) -> KernelResult<Vec<Tensor>> {
        Ok(inputs.iter().map(|&t| t.clone()).collect())
    }

    fn run_owned(&self, first: Tensor, rest: &[&Tensor]) -> KernelResult<Vec<Tensor>> {
        Ok(std::iter::once(first).chain(rest.iter().map(|&t| t.clone())).collect())
    }

    fn reuses_first_operand(&self) -> bool {
        true
    }
}

/// Boxes a closure returning one tensor.
pub fn one<F>(f: F) -> Box<dyn Kernel>
where
    F: Fn(&[&Tensor]) -> KernelResult<Tensor> + Send + Sync + 'static,
{
    Box::new(FnKernel(move |x: &[&Tensor]| f(x).map(|t| vec![t])))
}

/// Rebuilds the same variant around the array `$body` makes from `$a`.
#[macro_export]
macro_rules! map_tensor {
    ($t:expr, $a:ident => $body:expr) => {
        match $t {
            $crate::tensor::Tensor::F32($a) => $crate::tensor::Tensor::F32($body),
            $crate::tensor::Tensor::F64($a) => $crate::tensor::Tensor::F64($body),
            $crate::tensor::Tensor::F16($a) => $crate::tensor::Tensor::F16($body),
            $crate::tensor::Tensor::BF16($a) => $crate::tensor::Tensor::BF16($body),
            $crate::tensor::Tensor::I1($a) => $crate::tensor::Tensor::I1($body),
            $crate::tensor::Tensor::I8($a) => $crate::tensor::Tensor::I8($body),
            $crate::tensor::Tensor::U8($a) => $crate::tensor::Tensor::U8($body),
            $crate::tensor::Tensor::I16($a) => $crate::tensor::Tensor::I16($body),
            $crate::tensor::Tensor::U16($a) => $crate::tensor::Tensor::U16($body),
            $crate::tensor::Tensor::I32($a) => $crate::tensor::Tensor::I32($body),
            $crate::tensor::Tensor::U32($a) => $crate::tensor::Tensor::U32($body),
            $crate::tensor::Tensor::I64($a) => $crate::tensor::Tensor::I64($body),
            $crate::tensor::Tensor::U64($a) => $crate::tensor::Tensor::U64($body),
        }
    };
}

/// The f32 array of an operand, or an error naming its position.
pub fn f32_arg<'t>(inputs: &[&'t Tensor], i: usize) -> KernelResult<&'t ArrayD<f32>> {
    match inputs.get(i) {
        Some(Tensor::F32(a)) => Ok(a),
        Some(t) => Err(format!("operand #{i} is {}, expected f32", t.dtype())),
        None => Err(format!("missing operand #{i}")),
    }
}

/// An operand that holds integers (i32/i64/i8/u8/i16), read as i64 (shapes, axes, indices).
pub fn int_arg(inputs: &[&Tensor], i: usize) -> KernelResult<Vec<i64>> {
    let t = inputs.get(i).ok_or_else(|| format!("missing operand #{i}"))?;
    ints_of(t).ok_or_else(|| format!("operand #{i} is {}, expected an integer tensor", t.dtype()))
}

pub fn ints_of(t: &Tensor) -> Option<Vec<i64>> {
    Some(match t {
        Tensor::I32(a) => a.iter().map(|&x| x as i64).collect(),
        Tensor::I64(a) => a.iter().copied().collect(),
        Tensor::I8(a) => a.iter().map(|&x| x as i64).collect(),
        Tensor::U8(a) => a.iter().map(|&x| x as i64).collect(),
        Tensor::I16(a) => a.iter().map(|&x| x as i64).collect(),
        Tensor::U16(a) => a.iter().map(|&x| x as i64).collect(),
        Tensor::U32(a) => a.iter().map(|&x| x as i64).collect(),
        Tensor::U64(a) => a.iter().map(|&x| x as i64).collect(),
        _ => return None,
    })
}

/// Resolves a possibly negative axis against a rank.
pub fn norm_axis(axis: i64, rank: usize) -> KernelResult<usize> {
    let r = rank as i64;
    let a = if axis < 0 { axis + r } else { axis };
    if a < 0 || a >= r.max(1) {
        return Err(format!("axis {axis} is out of range for rank {rank}"));
    }
    Ok(a as usize)
}

/// An array of `shape` over `v` (lengths agree by construction).
pub fn from_vec<T>(shape: &[usize], v: Vec<T>) -> KernelResult<ArrayD<T>> {
    ArrayD::from_shape_vec(IxDyn(shape), v).map_err(|e| format!("internal shape error: {e}"))
}

/// Row-major strides of a shape.
pub fn strides_of(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Identity copies operands it is lent and hands on the buffer of one it is given.
    #[test]
    fn identity_hands_on_an_owned_buffer_and_copies_a_lent_one() {
        let x = Tensor::F32(ArrayD::from_shape_fn(IxDyn(&[2, 3]), |i| (i[0] * 3 + i[1]) as f32));
        let y = Tensor::I64(ArrayD::from_elem(IxDyn(&[2]), 7));
        let lent = Identity.run(&[&x, &y]).unwrap();
        assert!(lent[0].bit_eq(&x) && lent[1].bit_eq(&y));
        let at = x.as_f32().unwrap().as_ptr();
        let owned = Identity.run_owned(x.clone(), &[&y]).unwrap();
        assert!(owned[0].bit_eq(&x) && owned[1].bit_eq(&y));
        let moved = Identity.run_owned(x, &[]).unwrap();
        assert_eq!(moved[0].as_f32().unwrap().as_ptr(), at, "the same buffer, not a copy");
        assert!(Identity.reuses_first_operand());
    }
}
