//! The u8s8 widening of `quantize-weights` (`--runtime onnxruntime`, the `.onnx` default): for
//! an op onnxruntime runs on its u8s8 GEMM (`dialects::ort_u8s8`) with an 8-bit per-tensor
//! activation input, the weight scale of each output channel is widened just enough that no
//! int16 pair sum of that GEMM can saturate on x86 CPUs without VNNI (`params::saturation`),
//! for activations within their calibrated per-channel ranges (the whole u8 range where the
//! statistics have none). Channels that cannot saturate keep their full-range scale.
//!
//! ```text
//! Conv W[o] = [1.27, 1.0, ...] (adjacent input channels, one tap), inputs up to raw 255:
//! scale 0.01 → q = 127, 100: 255·227 = 57885 > 32767, so scale 0.0178 → q = 71, 56
//! ```
//!
//! What a layer's widening reads of the IR and the plan is gathered first ([`u8s8_layer`]), on
//! the pass's thread; the widening itself ([`widen_for_u8s8`]) needs only that and the weight,
//! so the pass widens several layers at once.

use crate::dialects::ort_u8s8::{activation_axis, columns, reduction, runs_int8, Column, Reduction, BLOCK};
use crate::ir::attrs::{op_attrs, AttrValue};
use crate::ir::graph::op_name;
use crate::ir::types::{tensor_type, Dim};
use crate::params::saturation::{
    bounded_scale_of, quantized_pairs_saturate, quantized_saturates, safe_scale_screened, RawRange, Reading,
};
use crate::params::{QuantParams, StorageType};
use crate::passes::report::Change;
use crate::recipe::plan::fused_output;
use crate::recipe::Plan;
use melior::ir::operation::OperationLike;
use melior::ir::{OperationRef, ValueLike};
use ndarray::ArrayD;
use rayon::prelude::*;
use std::collections::BTreeMap;

/// What the widening of one layer's weight reads besides the weight.
pub(super) struct U8s8Layer {
    red: Reduction,
    attrs: BTreeMap<String, AttrValue>,
    /// The activation input's (per-tensor, 8-bit) parameters.
    act: QuantParams,
    /// The activation's reduced dim, when it is static (a batch dim may be dynamic).
    channels: Option<usize>,
    /// The activation's calibrated (min, max) per reduced channel, when there is one for each.
    channel_range: Option<(Vec<f32>, Vec<f32>)>,
}

/// What widening `op`'s weight reads of the IR and `plan`; `None` for an op onnxruntime does
/// not run on its u8s8 GEMM, or whose activation input is not 8-bit per tensor.
pub(super) fn u8s8_layer(op: OperationRef, plan: &Plan) -> Option<U8s8Layer> {
    let name = op_name(&op);
    let red = reduction(&name)?;
    // a Conv or Gemm whose output gets no Q/DQ runs in float: nothing to saturate
    let out_quantized = fused_output(op).is_some_and(|v| plan.params_of(v).is_some());
    if !runs_int8(&name, out_quantized) {
        return None;
    }
    let x = op.operand(0).ok()?;
    let act = plan.params_of(x)?;
    if act.scale.len() != 1 || !matches!(act.dtype, StorageType::Int8 | StorageType::Uint8) {
        return None;
    }
    let attrs = op_attrs(&op);
    let channels =
        tensor_type(x.r#type()).and_then(|t| match t.dims.get(activation_axis(red, t.dims.len(), &attrs)?)? {
            Dim::Static(n) => Some(*n),
            _ => None,
        });
    let channel_range = plan
        .channel_range_of(x)
        .filter(|(lo, hi)| Some(lo.len()) == channels && hi.len() == lo.len())
        .map(|(lo, hi)| (lo.to_vec(), hi.to_vec()));
    Some(U8s8Layer {
        red,
        attrs,
        act: act.clone(),
        channels,
        channel_range,
    })
}

/// Widens the weight scales `p` of `wt`, the weight of `layer`, where its pair sums could
/// saturate (or makes its weights uint8, see [`U8_WEIGHTS_ABOVE_DB`]); returns what changed,
/// for the pass report.
pub(super) fn widen_for_u8s8(layer: &U8s8Layer, wt: &ArrayD<f32>, p: &mut QuantParams) -> Vec<(Change, usize)> {
    let mut changes = Vec::new();
    let U8s8Layer {
        red,
        attrs,
        act: xp,
        channels,
        channel_range,
    } = layer;
    let Some(cols) = columns(*red, wt, attrs) else {
        return changes;
    };
    changes.push((Change::U8s8Layers, 1));
    // the kernel sees int8 storage as u8 (q + 128): raw values count from the type's minimum
    let storage_min = xp.dtype.full_range().0;
    let raw = |lo: f64, hi: f64| RawRange::of(lo, hi, xp.scale[0], xp.zero_point[0], (xp.qmin, xp.qmax), storage_min);
    let ranges: Option<Vec<RawRange>> = channel_range
        .as_ref()
        .map(|(lo, hi)| lo.iter().zip(hi).map(|(&l, &h)| raw(l as f64, h as f64)).collect());
    if ranges.is_none() && *channels != Some(1) {
        changes.push((Change::U8s8WithoutChannelRanges, 1));
    }
    // an input channel without statistics may take any value of the type
    let whole = RawRange {
        lo: xp.qmin - storage_min,
        hi: xp.qmax - storage_min,
    };
    // scales are stored as f32: the nearest f32 at or above
    let up = |x: f64| {
        let f = x as f32;
        if (f as f64) < x {
            f.next_up() as f64
        } else {
            f as f64
        }
    };
    let slot = |c: &Column| if p.scale.len() == 1 { 0 } else { c.channel };
    // the raw ranges of a column's activation elements depend on the column only through which
    // inputs it reads (first input, period, length): made once for each such reading, not once
    // per column (a MatMul's 3072 columns all read the same 768 inputs)
    let mut readings: Vec<((usize, usize, usize), Reading)> = Vec::new();
    let reading_of: Vec<usize> = (0..cols.len())
        .map(|k| {
            let c = cols.column(k);
            let key = (c.first_input, c.period, c.len);
            match readings.iter().position(|(k, _)| *k == key) {
                Some(at) => at,
                None => {
                    let rs = c
                        .inputs()
                        .map(|i| ranges.as_ref().and_then(|r| r.get(i).copied()).unwrap_or(whole))
                        .collect();
                    readings.push((key, Reading::new(rs)));
                    readings.len() - 1
                }
            }
        })
        .collect();
    let col_reading = |k: usize| -> &Reading { &readings[reading_of[k]].1 };
    // the columns of each scale, in order: scales are widened one column after another, and
    // different scales in parallel (the same result on any number of threads)
    let mut of_slot: Vec<Vec<usize>> = vec![Vec::new(); p.scale.len()];
    for k in 0..cols.len() {
        if let Some(v) = of_slot.get_mut(slot(&cols.column(k))) {
            v.push(k);
        }
    }
    let q = (p.qmin, p.qmax);
    // a column's scale s widened where its pair sums could saturate; when it stays s, and s is
    // stored as it is, also the pairs screened there (a check at s reads the same ones)
    let widen = |w: &[f32], s: f64, reading: &Reading| {
        let (wide, screened) = safe_scale_screened(w, reading, s);
        match wide > s {
            true => (up(wide), None),
            false => (s, (s as f32 as f64 == s).then_some(screened)),
        }
    };
    // checked with the quantizer itself at `trial`, its scale's widened value (what quantizing
    // the whole weight gives the column; `screened`: the pairs screened at `trial`, when
    // known); a column that still saturates (its f32 division rounded a tie the other way)
    // takes the bound that holds for any rounding
    let check = |w: &[f32], s: f64, trial: f64, at: usize, reading: &Reading, screened: Option<&[usize]>| {
        let (trial, zp) = (trial as f32, p.zero_point[at]);
        let saturates = |pairs: Option<&[usize]>| match pairs {
            Some(pairs) => quantized_pairs_saturate(w, reading, trial, zp, q, pairs),
            None => quantized_saturates(w, reading, trial, zp, q),
        };
        match p.dtype {
            StorageType::Int8 | StorageType::Int4 if saturates(screened) => up(bounded_scale_of(w, reading, s)),
            _ => s,
        }
    };
    let one_each = p.scale.len() == cols.len() && of_slot.iter().enumerate().all(|(s, ks)| ks[..] == [s]);
    let scales: Vec<f64> = if one_each {
        // column k is scale k's only one (per-channel weights of one matrix or conv, the common
        // case): widened and checked at once, in blocks of neighbouring columns gathered together
        let len = cols.column_len();
        p.scale
            .par_chunks(BLOCK)
            .enumerate()
            .map_init(Vec::new, |buf, (b, ss)| {
                cols.gather_block(b * BLOCK, ss.len(), buf);
                let one = |(i, &s): (usize, &f64)| {
                    let (k, w) = (b * BLOCK + i, &buf[i * len..(i + 1) * len]);
                    let (wide, screened) = widen(w, s, col_reading(k));
                    check(w, wide, wide, k, col_reading(k), screened.as_deref())
                };
                ss.iter().enumerate().map(one).collect::<Vec<_>>()
            })
            .flatten_iter()
            .collect()
    } else {
        // each scale folded over its columns in order by `step(column's weights, column, scale,
        // its ranges)`, different scales in parallel (the same result on any number of threads)
        let per_scale = |scales: &[f64], step: &(dyn Fn(&[f32], usize, f64, &Reading) -> f64 + Sync)| -> Vec<f64> {
            of_slot
                .par_iter()
                .zip(scales.par_iter())
                .map_init(Vec::new, |buf, (ks, &s0)| {
                    ks.iter().fold(s0, |s, &k| {
                        cols.gather(k, buf);
                        step(buf, k, s, col_reading(k))
                    })
                })
                .collect()
        };
        let wide = per_scale(&p.scale, &|w, _, s, reading| widen(w, s, reading).0);
        per_scale(&wide, &|w, k, s, reading| {
            let at = slot(&cols.column(k));
            check(w, s, wide[at], at, reading, None)
        })
    };
    let widened = scales.iter().zip(&p.scale).filter(|(a, b)| a != b).count();
    if widened == 0 {
        return changes;
    }
    // the weight rounding noise the wider scales add, over the layer (channels of one size)
    let power = |v: &[f64]| v.iter().map(|s| s * s).sum::<f64>();
    let noise_db = 10.0 * (power(&scales) / power(&p.scale).max(f64::MIN_POSITIVE)).log10();
    if noise_db > U8_WEIGHTS_ABOVE_DB && p.qmin == -p.qmax {
        // uint8 weights around 128: onnxruntime runs the layer on its u8u8 GEMM, which widens
        // to int16 before multiplying and cannot saturate, at the full-range scales
        changes.push((Change::U8s8LayersAsU8u8, 1));
        let n = p.zero_point.len();
        p.dtype = StorageType::Uint8;
        p.zero_point = vec![128; n];
        (p.qmin, p.qmax) = (128 - p.qmax, 128 + p.qmax);
        return changes;
    }
    changes.push((Change::U8s8LayersWidened, 1));
    changes.push((Change::U8s8ChannelsWidened, widened));
    p.scale = scales;
    changes
}

/// The weight noise (dB over the full-range scales) above which a layer whose u8s8 pair sums
/// could saturate takes uint8 weights (onnxruntime's u8u8 kernel) rather than wider scales.
/// Measured on the shared models at ORT_DISABLE_ALL against full-range weights everywhere
/// (BENCHMARKS.md, "onnxruntime on x86 without VNNI"): at 0.5 every model is within 0.11 dB of
/// them or above; at 1 dB fer lost 0.34 and ppocr_cls 0.63; widening every layer lost up to
/// 1.9 dB (fer).
pub const U8_WEIGHTS_ABOVE_DB: f64 = 0.5;
