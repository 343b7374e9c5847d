//! The three parameter algorithms, each written in the arithmetic width its target uses.

use super::{ParamsError, RangeOptions, Scheme, StorageType};

fn unsupported(scheme: Scheme, what: impl Into<String>) -> ParamsError {
    ParamsError::Unsupported {
        scheme,
        what: what.into(),
    }
}

/// [qmin, qmax] for a scheme, type and options (each scheme's own table).
pub(super) fn storage_bounds(scheme: Scheme, t: StorageType, o: &RangeOptions) -> Result<(i64, i64), ParamsError> {
    let (lo, hi) = t.full_range();
    match scheme {
        // MLIR/TF: the storage type's range, narrow_range drops the lowest value. TF only
        // defines symmetric ranges for signed narrow types (GetUniformQuantizedTypeForWeight).
        Scheme::Mlir => {
            if o.reduce_range {
                return Err(unsupported(scheme, "reduce_range"));
            }
            if o.min_real_range.is_some() {
                return Err(unsupported(scheme, "a minimum real range"));
            }
            if o.symmetric && !(t.is_signed() && o.narrow_range) {
                return Err(unsupported(
                    scheme,
                    "symmetric ranges except on signed types with narrow_range",
                ));
            }
            Ok((lo + o.narrow_range as i64, hi))
        }
        // onnxruntime get_qmin_qmax_for_qType: reduce_range wins over symmetric.
        Scheme::Onnx => {
            if o.narrow_range && !o.symmetric {
                return Err(unsupported(
                    scheme,
                    "narrow_range without symmetric (its symmetric table is the narrow range)",
                ));
            }
            Ok(match (t, o.reduce_range, o.symmetric) {
                (StorageType::Int32, _, _) => {
                    return Err(unsupported(
                        scheme,
                        "int32 activations or weights (int32 is for biases)",
                    ))
                }
                (StorageType::Uint8, true, _) => (0, 127),
                (StorageType::Int8, true, _) => (-64, 64),
                (StorageType::Uint16, true, _) => (0, 32767),
                (StorageType::Int16, true, _) => (-16384, 16384),
                (StorageType::Uint4, true, _) => (0, 7),
                (StorageType::Int4, true, _) => (-4, 3),
                // ONNX_INT_TYPE_SYMMETRIC_RANGE (onnxruntime 1.32) has the signed types only:
                // symmetric uint8/uint16 keep the full range (zero point 128 / 32768)
                (StorageType::Int8, false, true) => (-127, 127),
                (StorageType::Int16, false, true) => (-32767, 32767),
                _ => (lo, hi),
            })
        }
        // PyTorch calculate_qmin_qmax; narrow_range is its custom quant_min = qmin + 1.
        Scheme::Torch => {
            if o.min_real_range.is_some() {
                return Err(unsupported(scheme, "a minimum real range"));
            }
            let (lo, hi) = (lo + o.narrow_range as i64, hi);
            Ok(match (t, o.reduce_range) {
                (StorageType::Int8, true) if !o.narrow_range => (-64, 63),
                (StorageType::Uint8, true) if !o.narrow_range => (0, 127),
                (_, true) => (lo.div_euclid(2), hi.div_euclid(2)),
                _ => (lo, hi),
            })
        }
    }
}

/// C `round()`: ties away from zero.
fn round_half_away(x: f64) -> f64 {
    x.round()
}

/// MLIR `getNudgedScaleAndZeroPoint` / `fakeQuantAttrsToType` (all f64).
fn mlir(min: f64, max: f64, qmin: i64, qmax: i64, o: &RangeOptions) -> Result<(f64, i64), ParamsError> {
    let (mut rmin, mut rmax) = (min, max);
    if o.symmetric {
        // TF's weight path: widen to contain 0, then mirror the larger side.
        rmin = rmin.min(0.0);
        rmax = rmax.max(0.0);
        let m = rmax.max(-rmin);
        (rmin, rmax) = (-m, m);
    }
    if (rmax - rmin).abs() < f64::EPSILON {
        return Ok((1.0, qmin));
    }
    let (qminf, qmaxf) = (qmin as f64, qmax as f64);
    let scale = (rmax - rmin) / (qmaxf - qminf);
    if !scale.is_finite() {
        return Err(ParamsError::BadScale { scale, channel: None });
    }
    let zp_from_min = qminf - rmin / scale;
    let err_min = qminf.abs() + (rmin / scale).abs();
    let zp_from_max = qmaxf - rmax / scale;
    let err_max = qmaxf.abs() + (rmax / scale).abs();
    let zp = if err_min < err_max { zp_from_min } else { zp_from_max };
    let nudged = if zp < qminf {
        qmin
    } else if zp > qmaxf {
        qmax
    } else {
        round_half_away(zp) as i64
    };
    Ok((scale, nudged))
}

/// onnxruntime `compute_scale_zp` on float32 data.
fn onnx(min: f64, max: f64, qmin: i64, qmax: i64, o: &RangeOptions) -> Result<(f64, i64), ParamsError> {
    let (mut rmin, mut rmax) = ((min as f32).min(0.0), (max as f32).max(0.0));
    if let Some(m) = o.min_real_range {
        rmax = rmax.max(rmin + m);
    }
    if o.symmetric {
        let a = rmin.abs().max(rmax.abs());
        (rmin, rmax) = (-a, a);
    }
    let dr = (rmax - rmin) as f64;
    let dq = (qmax - qmin) as f64;
    let scale = dr / dq;
    if scale < f32::MIN_POSITIVE as f64 {
        return Ok((1.0, 0));
    }
    let zp = if o.symmetric {
        ((qmin + qmax) as f64 / 2.0).round_ties_even()
    } else {
        (qmin as f64 - rmin as f64 / scale).round_ties_even()
    };
    Ok((scale as f32 as f64, zp as i64))
}

/// PyTorch `UniformQuantizationObserverBase._calculate_qparams` (f32 tensors).
fn torch(
    t: StorageType,
    min: f64,
    max: f64,
    qmin: i64,
    qmax: i64,
    o: &RangeOptions,
) -> Result<(f64, i64), ParamsError> {
    let eps = o.eps.unwrap_or(f32::EPSILON);
    let min_neg = (min as f32).min(0.0);
    let max_pos = (max as f32).max(0.0);
    let (qminf, qmaxf) = (qmin as f32, qmax as f32);
    if o.symmetric {
        let m = (-min_neg).max(max_pos);
        let scale = (m / ((qmaxf - qminf) / 2.0)).max(eps);
        let zp = if t.is_signed() {
            0
        } else if o.narrow_range {
            // a custom quant range: PyTorch uses the integer middle of it
            (qmin + qmax).div_euclid(2)
        } else {
            1i64 << (t.bits() - 1)
        };
        return Ok((scale as f64, zp));
    }
    let scale = ((max_pos - min_neg) / (qmaxf - qminf)).max(eps);
    let zp = qmin - (min_neg / scale).round_ties_even() as i64;
    Ok((scale as f64, zp.clamp(qmin, qmax)))
}

pub(super) fn scale_zero_point(
    scheme: Scheme,
    t: StorageType,
    min: f64,
    max: f64,
    qmin: i64,
    qmax: i64,
    o: &RangeOptions,
) -> Result<(f64, i64), ParamsError> {
    match scheme {
        Scheme::Mlir => mlir(min, max, qmin, qmax, o),
        Scheme::Onnx => onnx(min, max, qmin, qmax, o),
        Scheme::Torch => torch(t, min, max, qmin, qmax, o),
    }
}
