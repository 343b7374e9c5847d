//! Resize (ONNX): nearest, (multi-)linear and cubic interpolation, one axis after the other
//! (all three are separable), with ONNX's coordinate transformations, nearest rounding modes,
//! antialiasing filters for downsampling, `exclude_outside` and `tf_crop_and_resize`'s region
//! of interest and extrapolation value.
//!
//! Nearest is a gather; linear and cubic weigh a few neighbours of each output position's
//! source coordinate in f64, as ONNX's reference does, and cast back to the input's type.

use super::layout::{cast, gather};
use super::{from_vec, KernelResult};
use crate::tensor::{DType, Tensor};

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Coordinates {
    HalfPixel,
    HalfPixelSymmetric,
    PytorchHalfPixel,
    AlignCorners,
    Asymmetric,
    TfHalfPixelForNn,
    TfCropAndResize,
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
    /// Keys' cubic convolution with coefficient `a` (−0.75 by default, −0.5 in TF).
    Cubic(f64),
}

/// Everything about one Resize that is not the data.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Filter {
    pub mode: Mode,
    pub coords: Coordinates,
    /// Widen the linear/cubic kernel by 1/scale when downsampling.
    pub antialias: bool,
    /// Taps outside the input get weight 0 (the others renormalized) instead of the edge value.
    pub exclude_outside: bool,
    /// What `tf_crop_and_resize` writes where the source lies outside the input.
    pub extrapolation: f64,
}

/// One axis's resize: its scale, output length, and (tf_crop_and_resize) region of interest.
#[derive(Debug, Clone, Copy)]
pub struct AxisResize {
    pub scale: f64,
    pub len_out: usize,
    pub roi: (f64, f64),
}

/// The input coordinate of output index `x`; `None` where tf_crop_and_resize extrapolates.
fn source(c: Coordinates, x: usize, a: &AxisResize, len_in: usize) -> Option<f64> {
    let (x, n, scale) = (x as f64, len_in as f64, a.scale);
    // the output length the scale implies, which may not be a whole number (a scale computed
    // from sizes gives the size back up to rounding: that size, exactly)
    let width = match scale * n {
        w if (w - a.len_out as f64).abs() <= 1e-9 * w => a.len_out as f64,
        w => w,
    };
    Some(match c {
        Coordinates::HalfPixel => (x + 0.5) / scale - 0.5,
        Coordinates::HalfPixelSymmetric => {
            let offset = n / 2.0 * (1.0 - a.len_out as f64 / width);
            offset + (x + 0.5) / scale - 0.5
        }
        Coordinates::PytorchHalfPixel if a.len_out > 1 => (x + 0.5) / scale - 0.5,
        Coordinates::PytorchHalfPixel => -0.5,
        Coordinates::AlignCorners if width != 1.0 => x * (n - 1.0) / (width - 1.0),
        Coordinates::AlignCorners => 0.0,
        Coordinates::Asymmetric => x / scale,
        Coordinates::TfHalfPixelForNn => (x + 0.5) / scale,
        Coordinates::TfCropAndResize => {
            let (lo, hi) = a.roi;
            let v = if width == 1.0 {
                (hi - lo) * (n - 1.0) / 2.0
            } else {
                x * (hi - lo) * (n - 1.0) / (width - 1.0)
            } + lo * (n - 1.0);
            if v < 0.0 || v > n - 1.0 {
                return None;
            }
            v
        }
    })
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

/// Keys' cubic kernel at distance `x`.
fn cubic(x: f64, a: f64) -> f64 {
    let x = x.abs();
    if x <= 1.0 {
        ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    } else if x < 2.0 {
        ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a
    } else {
        0.0
    }
}

/// The weights of the taps around a source coordinate whose fractional part is `ratio` (in
/// (0, 1]: an integer coordinate counts as 1 past the tap on its left).
fn coefficients(mode: Mode, ratio: f64, scale: f64, antialias: bool) -> Vec<f64> {
    match (mode, antialias) {
        (Mode::Linear, false) => vec![1.0 - ratio, ratio],
        (Mode::Cubic(a), false) => [ratio + 1.0, ratio, 1.0 - ratio, 2.0 - ratio]
            .iter()
            .map(|&d| cubic(d, a))
            .collect(),
        (Mode::Linear, true) => {
            let s = scale.min(1.0);
            let start = (-1.0 / s).floor() as i64 + 1;
            let w: Vec<f64> = (start..2 - start)
                .map(|i| (1.0 - ((i as f64 - ratio) * s).abs()).clamp(0.0, 1.0))
                .collect();
            normalized(w)
        }
        (Mode::Cubic(a), true) => {
            let s = scale.min(1.0);
            let start = (-2.0 / s).floor() as i64 + 1;
            normalized((start..2 - start).map(|i| cubic(s * (i as f64 - ratio), a)).collect())
        }
        (Mode::Nearest(_), _) => vec![1.0],
    }
}

fn normalized(w: Vec<f64>) -> Vec<f64> {
    let sum: f64 = w.iter().sum();
    if sum == 0.0 {
        return w;
    }
    w.into_iter().map(|v| v / sum).collect()
}

/// Taps (input index, weight) of each output position along an axis; `None` where the output
/// is the extrapolation value.
fn taps(f: &Filter, a: &AxisResize, len_in: usize) -> Vec<Option<Vec<(usize, f64)>>> {
    (0..a.len_out)
        .map(|o| {
            let x = source(f.coords, o, a, len_in)?;
            if let Mode::Nearest(n) = f.mode {
                return Some(vec![(nearest_index(n, x, len_in) as usize, 1.0)]);
            }
            let left = x.floor();
            let ratio = if x == left { 1.0 } else { x - left };
            let mut w = coefficients(f.mode, ratio, a.scale, f.antialias);
            let n = w.len() as i64;
            // the n taps nearest to x, ties to the smaller index: their first one
            let pad = (n + 1) / 2;
            let xp = x + pad as f64;
            let p = xp.floor() as i64;
            let frac = xp - p as f64;
            let offset = if n % 2 == 0 {
                if frac == 0.0 {
                    -(n / 2)
                } else {
                    -(n / 2) + 1
                }
            } else if frac <= 0.5 {
                -((n - 1) / 2)
            } else {
                -((n - 1) / 2) + 1
            };
            let first = p + offset - pad;
            let idx: Vec<i64> = (first..first + n).collect();
            if f.exclude_outside {
                for (wi, &i) in w.iter_mut().zip(&idx) {
                    if i < 0 || i >= len_in as i64 {
                        *wi = 0.0;
                    }
                }
                let sum: f64 = w.iter().sum();
                if sum != 0.0 {
                    w.iter_mut().for_each(|v| *v /= sum);
                }
            }
            Some(
                idx.iter()
                    .zip(w)
                    .map(|(&i, w)| (i.clamp(0, len_in as i64 - 1) as usize, w))
                    .collect(),
            )
        })
        .collect()
}

/// Resamples axis `axis` of `x` (row-major, `shape`) with the taps of each output position.
fn weigh(x: &[f64], shape: &[usize], axis: usize, taps: &[Option<Vec<(usize, f64)>>], extrapolation: f64) -> Vec<f64> {
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    let len_in = shape[axis];
    let mut y = vec![0.0; outer * taps.len() * inner];
    for o in 0..outer {
        for (j, t) in taps.iter().enumerate() {
            let dst = &mut y[(o * taps.len() + j) * inner..][..inner];
            match t {
                None => dst.fill(extrapolation),
                Some(t) => {
                    for &(i, w) in t {
                        let src = &x[(o * len_in + i) * inner..][..inner];
                        for (d, s) in dst.iter_mut().zip(src) {
                            *d += w * s;
                        }
                    }
                }
            }
        }
    }
    y
}

/// Resizes `x`, one [`AxisResize`] per dim (dims to leave alone have scale 1 and their length).
pub fn resize(x: &Tensor, axes: &[AxisResize], f: &Filter) -> KernelResult<Tensor> {
    let rank = x.shape().len();
    if axes.len() != rank {
        return Err(format!("{} sizes / scales for a rank-{rank} input", axes.len()));
    }
    let identity = |a: &AxisResize, len_in: usize| {
        a.len_out == len_in && a.scale == 1.0 && (f.coords != Coordinates::TfCropAndResize || a.roi == (0.0, 1.0))
    };
    if let Mode::Nearest(n) = f.mode {
        if f.coords != Coordinates::TfCropAndResize {
            let mut cur = x.clone();
            for (axis, a) in axes.iter().enumerate() {
                let len_in = cur.shape()[axis];
                if identity(a, len_in) {
                    continue;
                }
                check(a, len_in)?;
                let idx: Vec<i64> = (0..a.len_out)
                    .map(|o| nearest_index(n, source(f.coords, o, a, len_in).unwrap_or(0.0), len_in))
                    .collect();
                cur = gather(&cur, &idx, &[a.len_out], axis as i64)?;
            }
            return Ok(cur);
        }
    }
    let Tensor::F64(wide) = cast(x, DType::F64)? else {
        return Err("Resize input".into());
    };
    let mut shape = x.shape().to_vec();
    let mut cur: Vec<f64> = wide.iter().copied().collect();
    for (axis, a) in axes.iter().enumerate() {
        if identity(a, shape[axis]) {
            continue;
        }
        check(a, shape[axis])?;
        let t = taps(f, a, shape[axis]);
        cur = weigh(&cur, &shape, axis, &t, f.extrapolation);
        shape[axis] = a.len_out;
    }
    cast(&Tensor::F64(from_vec(&shape, cur)?), x.dtype())
}

fn check(a: &AxisResize, len_in: usize) -> KernelResult<()> {
    if len_in == 0 || !(a.scale > 0.0) {
        return Err(format!("cannot resize a dim of {len_in} by {}", a.scale));
    }
    Ok(())
}
