//! `quant.qcast` / `quant.dcast` / `quant.scast`: a value of a `!quant.uniform` type is held
//! as its integer storage; the parameters come from the type at compile time. Rounding is half
//! to even with saturation (ONNX QuantizeLinear, StableHLO) — not the truncation of upstream
//! `lower-quant-ops`.

use super::KernelResult;
use crate::params::{dequantize, quantize, QuantParams, Rounding};
use crate::tensor::Tensor;

pub fn qcast(x: &Tensor, p: &QuantParams) -> KernelResult<Tensor> {
    let Tensor::F32(a) = x else {
        return Err(format!("qcast of {}, expected f32", x.dtype()));
    };
    quantize(&a.view(), p, Rounding::HalfEven).map_err(|e| e.to_string())
}

pub fn dcast(q: &Tensor, p: &QuantParams) -> KernelResult<Tensor> {
    // MLIR's quant storage is signless: unsigned 8-bit values come as i8 bits
    if let (Tensor::I8(a), crate::params::StorageType::Uint8) = (q, p.dtype) {
        return dequantize(&Tensor::U8(a.mapv(|v| v as u8)), p)
            .map(Tensor::F32)
            .map_err(|e| e.to_string());
    }
    dequantize(q, p).map(Tensor::F32).map_err(|e| e.to_string())
}
