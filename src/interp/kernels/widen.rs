//! Float widening: most kernels are written for f32 only; a model (or an ONNX test) that runs
//! the same op on f16, bf16 or f64 gets it through f32. When a kernel refuses operands of one of
//! those types, they are cast to f32, the kernel runs again, and its f32 results are cast back
//! to the operands' type. f16 and bf16 results are then what NumPy gives (it computes
//! half-precision ufuncs in f32 and rounds once); f64 results carry f32's precision, which is
//! reported nowhere as f64-exact.
//!
//! Kernels that handle a type natively (casts, layout ops, comparisons of f64, ...) never reach
//! the fallback: it runs only after the kernel itself said no.

use super::layout::cast;
use super::{epilogue::Epilogue, ChannelsLast, Kernel, KernelResult};
use crate::tensor::{DType, Tensor};

pub struct FloatWidening(pub Box<dyn Kernel>);

/// The first operand type that is a float other than f32, if any.
fn other_float(inputs: &[&Tensor]) -> Option<DType> {
    inputs
        .iter()
        .map(|t| t.dtype())
        .find(|d| d.is_float() && *d != DType::F32)
}

impl FloatWidening {
    fn widened(&self, inputs: &[&Tensor], refused: String) -> KernelResult<Vec<Tensor>> {
        let Some(to) = other_float(inputs) else {
            return Err(refused);
        };
        let wide: Vec<Tensor> = inputs
            .iter()
            .map(|t| match t.dtype() {
                d if d.is_float() && d != DType::F32 => cast(t, DType::F32),
                _ => Ok((*t).clone()),
            })
            .collect::<KernelResult<_>>()?;
        let refs: Vec<&Tensor> = wide.iter().collect();
        // the kernel's own refusal is the message when f32 does not help either
        let out = self.0.run(&refs).map_err(|_| refused)?;
        out.into_iter()
            .map(|t| if t.dtype() == DType::F32 { cast(&t, to) } else { Ok(t) })
            .collect()
    }
}

impl Kernel for FloatWidening {
    fn run(&self, inputs: &[&Tensor]) -> KernelResult<Vec<Tensor>> {
        self.0.run(inputs).or_else(|e| self.widened(inputs, e))
    }

    fn run_fused(&self, inputs: &[&Tensor], ep: &Epilogue) -> Option<KernelResult<Vec<Tensor>>> {
        self.0.run_fused(inputs, ep)
    }

    fn run_owned(&self, first: Tensor, rest: &[&Tensor]) -> KernelResult<Vec<Tensor>> {
        let narrow = other_float(rest).is_some() || other_float(&[&first]).is_some();
        if narrow {
            return self.run(&super::operands(&first, rest));
        }
        self.0.run_owned(first, rest)
    }

    // (operands of another float type: the kernel's own types would be f32's, so it runs)
    fn result_shapes(&self, inputs: &[&Tensor]) -> Option<KernelResult<Vec<(DType, Vec<usize>)>>> {
        match other_float(inputs) {
            Some(_) => None,
            None => self.0.result_shapes(inputs),
        }
    }

    fn reuses_first_operand(&self) -> bool {
        self.0.reuses_first_operand()
    }

    fn layout_free(&self) -> bool {
        self.0.layout_free()
    }

    // (the program hands values over channels last only between f32 values)
    fn takes_channels_last(&self) -> bool {
        self.0.takes_channels_last()
    }

    fn run_channels_last(
        &self,
        inputs: &[&Tensor],
        ep: Option<&Epilogue>,
        layout: ChannelsLast,
    ) -> KernelResult<Vec<Tensor>> {
        self.0.run_channels_last(inputs, ep, layout)
    }

    fn run_owned_channels_last(
        &self,
        first: Tensor,
        rest: &[&Tensor],
        layout: ChannelsLast,
    ) -> KernelResult<Vec<Tensor>> {
        self.0.run_owned_channels_last(first, rest, layout)
    }

    fn zero_spatial_pads(&self, rest: &[Option<&Tensor>]) -> Option<[(usize, usize); 2]> {
        self.0.zero_spatial_pads(rest)
    }

    // (padding by zeros commutes with widening: the padded kernel widens as this one does)
    fn padded(&self, extra: [(usize, usize); 2]) -> Option<Box<dyn Kernel>> {
        self.0
            .padded(extra)
            .map(|k| Box::new(FloatWidening(k)) as Box<dyn Kernel>)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interp::kernels::one;
    use half::f16;
    use ndarray::{arr1, ArrayD};

    fn f32_only() -> Box<dyn Kernel> {
        one(|x| match x[0] {
            Tensor::F32(a) => Ok(Tensor::F32(a.mapv(|v| v * 3.0))),
            t => Err(format!("Triple of {} is not supported", t.dtype())),
        })
    }

    #[test]
    fn f16_runs_through_f32_and_rounds_once() {
        let k = FloatWidening(f32_only());
        let x = Tensor::F16(arr1(&[f16::from_f32(0.1), f16::from_f32(-2.5)]).into_dyn());
        let y = k.run(&[&x]).unwrap();
        let want: ArrayD<f16> =
            arr1(&[f16::from_f32(f16::from_f32(0.1).to_f32() * 3.0), f16::from_f32(-7.5)]).into_dyn();
        assert_eq!(y, vec![Tensor::F16(want)]);
    }

    #[test]
    fn integer_refusals_stay_refusals() {
        let k = FloatWidening(f32_only());
        let x = Tensor::I32(arr1(&[1]).into_dyn());
        assert_eq!(k.run(&[&x]).unwrap_err(), "Triple of i32 is not supported");
    }
}
