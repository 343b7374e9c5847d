//! Resize (ONNX): nearest and (multi-)linear interpolation, one axis after the other (both
//! are separable), with ONNX's coordinate transformations and nearest rounding modes.

use super::elementwise::{arith, BinOp};
use super::layout::{cast, gather, reshape};
use super::KernelResult;
use crate::tensor::{DType, Tensor};

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Coordinates {
    HalfPixel,
    PytorchHalfPixel,
    AlignCorners,
    Asymmetric,
    TfHalfPixelForNn,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Nearest {
    RoundPreferFloor,
    RoundPreferCeil,
    Floor,
    Ceil,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Mode {
    Nearest(Nearest),
    Linear,
}

/// The input coordinate of output index `x` along a dim resized from `len_in` to `len_out`.
fn source(c: Coordinates, x: usize, scale: f64, len_in: usize, len_out: usize) -> f64 {
    let x = x as f64;
    match c {
        Coordinates::HalfPixel => (x + 0.5) / scale - 0.5,
        Coordinates::PytorchHalfPixel if len_out > 1 => (x + 0.5) / scale - 0.5,
        Coordinates::PytorchHalfPixel => 0.0,
        Coordinates::AlignCorners if len_out > 1 => x * (len_in as f64 - 1.0) / (len_out as f64 - 1.0),
        Coordinates::AlignCorners => 0.0,
        Coordinates::Asymmetric => x / scale,
        Coordinates::TfHalfPixelForNn => (x + 0.5) / scale,
    }
}

fn nearest_index(n: Nearest, v: f64, len_in: usize) -> i64 {
    let i = match n {
        Nearest::Floor => v.floor(),
        Nearest::Ceil => v.ceil(),
        Nearest::RoundPreferFloor if v.fract() == 0.5 => v.floor(),
        Nearest::RoundPreferCeil if v.fract() == 0.5 => v.ceil(),
        _ => v.round(),
    };
    (i as i64).clamp(0, len_in as i64 - 1)
}

/// Resizes `x` to `out` (one size per dim); `scales` are the per-dim scales the coordinate
/// transformation uses (the given scales, or out/in when sizes were given).
pub fn resize(x: &Tensor, out: &[usize], scales: &[f64], mode: Mode, coords: Coordinates) -> KernelResult<Tensor> {
    let rank = x.shape().len();
    if out.len() != rank || scales.len() != rank {
        return Err(format!(
            "{} sizes / {} scales for a rank-{rank} input",
            out.len(),
            scales.len()
        ));
    }
    let mut cur = x.clone();
    for axis in 0..rank {
        let (len_in, len_out, scale) = (cur.shape()[axis], out[axis], scales[axis]);
        if len_in == len_out && scale == 1.0 {
            continue;
        }
        if len_in == 0 || scale <= 0.0 {
            return Err(format!("cannot resize a dim of {len_in} by {scale}"));
        }
        let pos: Vec<f64> = (0..len_out)
            .map(|o| source(coords, o, scale, len_in, len_out))
            .collect();
        cur = match mode {
            Mode::Nearest(n) => {
                let idx: Vec<i64> = pos.iter().map(|&v| nearest_index(n, v, len_in)).collect();
                gather(&cur, &idx, &[len_out], axis as i64)?
            }
            Mode::Linear => {
                let f = cast(&cur, DType::F32)?;
                let last = len_in as f64 - 1.0;
                let clamped: Vec<f64> = pos.iter().map(|&v| v.clamp(0.0, last)).collect();
                let i0: Vec<i64> = clamped.iter().map(|&v| v.floor() as i64).collect();
                let i1: Vec<i64> = i0.iter().map(|&i| (i + 1).min(len_in as i64 - 1)).collect();
                let w1: Vec<f32> = clamped.iter().zip(&i0).map(|(&v, &i)| (v - i as f64) as f32).collect();
                let w0: Vec<f32> = w1.iter().map(|w| 1.0 - w).collect();
                let mut wshape = vec![1i64; rank];
                wshape[axis] = len_out as i64;
                let wt = |v: Vec<f32>| -> KernelResult<Tensor> {
                    reshape(&Tensor::F32(super::from_vec(&[len_out], v)?), &wshape, false)
                };
                let a = arith(BinOp::Mul, &gather(&f, &i0, &[len_out], axis as i64)?, &wt(w0)?)?;
                let b = arith(BinOp::Mul, &gather(&f, &i1, &[len_out], axis as i64)?, &wt(w1)?)?;
                cast(&arith(BinOp::Add, &a, &b)?, x.dtype())?
            }
        };
    }
    Ok(cur)
}
