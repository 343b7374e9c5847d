//! The int16 pair sums of onnxruntime's int8 GEMM on x86 CPUs without VNNI, and weight scales
//! that keep them from saturating.
//!
//! onnxruntime (MLAS, AVX2 without VNNI) multiplies a u8 activation row by an s8 weight column
//! with `vpmaddubsw`: products of neighbouring reduction elements 2j and 2j+1 are added in
//! int16 with saturation, and only then widened and summed in int32. An int8 activation is
//! first made u8 (`q + 128`, onnxruntime's QDQ S8→U8 transform), so the raw u8 values, not the
//! zero-point-corrected ones, enter the pair. Measured on onnxruntime 1.32 under an emulated
//! AVX2 CPU (benches/ort_no_vnni.py, tests/ort_no_vnni.rs), the reduction order is:
//! - Conv (not depthwise): kernel taps row-major, then the group's input channels, innermost
//!   (onnxruntime runs QLinearConv channels-last), pairs crossing taps when the group has an
//!   odd channel count; the padding is the input's zero point;
//! - MatMul, Gemm: the reduction axis as stored;
//! - a depthwise Conv (one input and one output channel per group) has its own kernel, which
//!   accumulates in int32 and never saturates.
//!
//! A pair (a0·b0 + a1·b1) can only leave int16 when b0 and b1 have the same sign: with
//! a ∈ [0, 255] and |b| ≤ 127 a mixed-sign pair stays within ±32385. For a same-sign pair the
//! bound is hi0·|b0| + hi1·|b1|, with hi the largest raw u8 value the activation element takes.

/// The largest magnitude a pair sum keeps (int16; the negative side has one more).
pub const PAIR_LIMIT: i64 = 32767;

/// The raw u8 values an activation element takes in the kernel: its calibrated range and its
/// zero point (which padding and a clipped 0 produce), in the unsigned form the kernel sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawRange {
    pub lo: i64,
    pub hi: i64,
}

impl RawRange {
    /// The whole u8 range: what an activation with no per-element statistics may take.
    pub const FULL: RawRange = RawRange { lo: 0, hi: 255 };

    /// The raw range of real values in [lo, hi] quantized at `scale`, `zero_point` into
    /// [qmin, qmax] of a storage type whose smallest value is `storage_min` (−128 for int8,
    /// which the kernel makes u8 by adding 128; 0 for uint8).
    pub fn of(lo: f64, hi: f64, scale: f64, zero_point: i64, (qmin, qmax): (i64, i64), storage_min: i64) -> RawRange {
        let q = |x: f64| -> i64 {
            let v = (x / scale).round_ties_even();
            let v = if v.is_finite() { v.clamp(-1e12, 1e12) as i64 } else { 0 };
            (v + zero_point).clamp(qmin, qmax) - storage_min
        };
        let (a, b, z) = (q(lo), q(hi), zero_point.clamp(qmin, qmax) - storage_min);
        RawRange {
            lo: a.min(b).min(z),
            hi: a.max(b).max(z),
        }
    }
}

/// The extreme values (min, max) of the pair sum a0·q0 + a1·q1 over a0 ∈ r0, a1 ∈ r1.
pub fn pair_extremes(q0: i64, r0: RawRange, q1: i64, r1: RawRange) -> (i64, i64) {
    let ends = |q: i64, r: RawRange| {
        let (x, y) = (q * r.lo, q * r.hi);
        (x.min(y), x.max(y))
    };
    let (a, b) = (ends(q0, r0), ends(q1, r1));
    (a.0 + b.0, a.1 + b.1)
}

/// The first pair (index j of elements 2j, 2j+1) whose sum can leave int16, for one output
/// channel's quantized weights `q` in the kernel's reduction order and the raw ranges of the
/// activation elements they multiply.
pub fn first_saturating_pair<Q: Copy + Into<i64>>(q: &[Q], ranges: &[RawRange]) -> Option<usize> {
    (0..q.len().div_ceil(2)).find(|&j| {
        let (i0, i1) = (2 * j, 2 * j + 1);
        let (q1, r1) = match q.get(i1) {
            Some(&v) => (v.into(), ranges[i1]),
            None => (0, RawRange::FULL),
        };
        let (lo, hi) = pair_extremes(q[i0].into(), ranges[i0], q1, r1);
        lo < -PAIR_LIMIT - 1 || hi > PAIR_LIMIT
    })
}

/// A scale ≥ `scale` at which one output channel's float weights `w` (in the kernel's
/// reduction order) quantize to values whose every pair sum stays within int16 for
/// activations in `ranges`, whatever the rounding of w / scale: a same-sign pair's bound
/// hi0·|q0| + hi1·|q1| with |q| ≤ |w| / s + ½ stays ≤ 32767 when
/// s ≥ (hi0·|w0| + hi1·|w1|) / (32767 − (hi0 + hi1) / 2).
pub fn bounded_scale(w: &[f32], ranges: &[RawRange], scale: f64) -> f64 {
    debug_assert_eq!(w.len(), ranges.len());
    bounded_scale_of(w, &Reading::new(ranges.to_vec()), scale)
}

/// [`bounded_scale`] with the ranges' highs and the pairs' denominators made already: four
/// running maxima (a maximum is the same in any order) and no branch on the pairs' signs,
/// which are as often alike as not.
pub fn bounded_scale_of(w: &[f32], reading: &Reading, scale: f64) -> f64 {
    let (highs, denominators) = (&reading.highs, &reading.denominators);
    debug_assert_eq!(w.len(), highs.len());
    let need = |w0: f32, w1: f32, h0: f64, h1: f64, d: f64| {
        let (w0, w1) = (w0 as f64, w1 as f64);
        let n = (h0 * w0.abs() + h1 * w1.abs()) / d;
        if w0 * w1 > 0.0 {
            n
        } else {
            f64::NEG_INFINITY
        }
    };
    let max = |a: f64, b: f64| if b > a { b } else { a };
    let mut lanes = [scale; 4];
    let (w4, h4, d4) = (w.chunks_exact(8), highs.chunks_exact(8), denominators.chunks_exact(4));
    let (w_rest, h_rest, d_rest) = (w4.remainder(), h4.remainder(), d4.remainder());
    for ((w, h), d) in w4.zip(h4).zip(d4) {
        for (l, lane) in lanes.iter_mut().enumerate() {
            *lane = max(*lane, need(w[2 * l], w[2 * l + 1], h[2 * l], h[2 * l + 1], d[l]));
        }
    }
    let mut s = lanes.into_iter().fold(scale, max);
    for ((w, h), &d) in w_rest.chunks_exact(2).zip(h_rest.chunks_exact(2)).zip(d_rest) {
        s = max(s, need(w[0], w[1], h[0], h[1], d));
    }
    s
}

/// The smallest scale ≥ `scale` (to 2⁻³⁰ of the gap) at which `w` quantized with ties to even
/// has no saturating pair: `scale` itself when none saturates there, else a bisection up to
/// [`bounded_scale`] (a pair's bound only falls as the scale grows).
///
/// Only the pairs that saturate at `scale` are tried in the bisection: |round(w / s)| only
/// falls as s grows, so a pair safe at `scale` is safe at every larger scale (a BERT layer's
/// 768 × 3072 weights have a few such pairs per column, not 1536).
pub fn safe_scale(w: &[f32], ranges: &[RawRange], scale: f64) -> f64 {
    safe_scale_of(w, &Reading::new(ranges.to_vec()), scale)
}

/// The raw ranges of the activation elements a column multiplies, with each one's largest
/// magnitude as f64: made once for all the columns that read the same elements (a MatMul's
/// N columns all read the same K inputs), so that [`safe_scale_of`]'s screening of the pairs
/// is a loop of f64 arithmetic that vectorises.
#[derive(Debug, Clone, PartialEq)]
pub struct Reading {
    ranges: Vec<RawRange>,
    magnitudes: Vec<f64>,
    /// Each element's highest raw value, and each whole pair's [`bounded_scale`] denominator
    /// 32767 − (hi0 + hi1) / 2: the same for every column of the reading.
    highs: Vec<f64>,
    denominators: Vec<f64>,
}

impl Reading {
    pub fn new(ranges: Vec<RawRange>) -> Reading {
        let magnitudes = ranges.iter().map(|r| r.lo.abs().max(r.hi.abs()) as f64).collect();
        let highs: Vec<f64> = ranges.iter().map(|r| r.hi as f64).collect();
        let denominators = highs
            .chunks_exact(2)
            .map(|h| PAIR_LIMIT as f64 - (h[0] + h[1]) / 2.0)
            .collect();
        Reading {
            ranges,
            magnitudes,
            highs,
            denominators,
        }
    }

    pub fn ranges(&self) -> &[RawRange] {
        &self.ranges
    }

    /// The pairs (index j of elements 2j, 2j+1; a lone last element pairs with 0) of `w` whose
    /// sum |q0|·m0 + |q1|·m1 the bound |q| ≤ |w| · inv + ½ does not keep within int16 (with a
    /// margin of 1 for the bound's own rounding, and for f32's in w / s): every pair that can
    /// saturate at the scale 1 / `inv`, and a few that cannot. Screened 16 whole pairs at a
    /// time (a branch-free loop), pair by pair only in a block where one passes the bound.
    fn unbounded_pairs(&self, w: &[f32], inv: f64) -> Vec<usize> {
        let limit = PAIR_LIMIT as f64 - 1.0;
        let term = |m: f64, w: f32| m * ((w as f64).abs() * inv + 0.5);
        let pair = |m: &[f64], w: &[f32]| term(m[0], w[0]) + term(m[1], w[1]) > limit;
        let whole = w.len() / 2;
        let (w2, m2) = (&w[..2 * whole], &self.magnitudes[..2 * whole]);
        let mut out = Vec::new();
        for (block, (wb, mb)) in w2.chunks(32).zip(m2.chunks(32)).enumerate() {
            let any = wb
                .chunks_exact(2)
                .zip(mb.chunks_exact(2))
                .fold(false, |any, (w, m)| any | pair(m, w));
            if any {
                let pairs = wb.chunks_exact(2).zip(mb.chunks_exact(2)).enumerate();
                out.extend(pairs.filter(|(_, (w, m))| pair(m, w)).map(|(j, _)| 16 * block + j));
            }
        }
        if w.len() % 2 == 1 && term(self.magnitudes[2 * whole], w[2 * whole]) > limit {
            out.push(whole);
        }
        out
    }
}

/// True when `w`, one column in the kernel's reduction order, quantized as
/// [`quantize_slice`](super::quantize_slice) quantizes it (ties to even, into [qmin, qmax] of
/// int8 or int4 storage) has a pair sum that can leave int16 for activations in `reading`:
/// `first_saturating_pair` of the whole quantized column, with only the pairs the bound does
/// not clear quantized. With a zero point other than 0 the bound does not hold, and the
/// whole column is quantized.
pub fn quantized_saturates(w: &[f32], reading: &Reading, scale: f32, zero_point: i64, q: (i64, i64)) -> bool {
    let unbounded = match zero_point {
        0 => reading.unbounded_pairs(w, 1.0 / scale as f64),
        _ => Vec::new(),
    };
    quantized_pairs_saturate(w, reading, scale, zero_point, q, &unbounded)
}

/// [`quantized_saturates`] given the pairs the bound does not clear at `scale` (from
/// [`safe_scale_screened`] at that scale).
pub fn quantized_pairs_saturate(
    w: &[f32],
    reading: &Reading,
    scale: f32,
    zero_point: i64,
    (qmin, qmax): (i64, i64),
    unbounded: &[usize],
) -> bool {
    use super::{quantize_slice, Rounding};
    debug_assert_eq!(w.len(), reading.ranges.len());
    let quantized = |w: &[f32]| {
        let mut q = vec![0i8; w.len()];
        quantize_slice(w, &mut q, scale, zero_point, qmin, qmax, Rounding::HalfEven);
        q
    };
    // |q| ≤ |w / s| + ½ needs the clamp to hold 0 and no offset
    if zero_point != 0 || qmin > 0 || qmax < 0 {
        return first_saturating_pair(&quantized(w), &reading.ranges).is_some();
    }
    unbounded.iter().any(|&j| {
        let at = 2 * j..(2 * j + 2).min(w.len());
        first_saturating_pair(&quantized(&w[at.clone()]), &reading.ranges[at]).is_some()
    })
}

/// [`safe_scale`] with the ranges' magnitudes made already.
pub fn safe_scale_of(w: &[f32], reading: &Reading, scale: f64) -> f64 {
    safe_scale_screened(w, reading, scale).0
}

/// [`safe_scale_of`], and the pairs the bound does not clear at `scale` (which a check of the
/// column quantized at `scale` itself reads again).
pub fn safe_scale_screened(w: &[f32], reading: &Reading, scale: f64) -> (f64, Vec<usize>) {
    let ranges = &reading.ranges;
    debug_assert_eq!(w.len(), ranges.len());
    let q = |i: usize, s: f64| (w[i] as f64 / s).round_ties_even() as i64;
    // pair j at scale s, as `first_saturating_pair` reads it (a lone last element pairs with 0)
    let saturates = |j: usize, s: f64| {
        let (i0, i1) = (2 * j, 2 * j + 1);
        let (q1, r1) = if i1 < w.len() {
            (q(i1, s), ranges[i1])
        } else {
            (0, RawRange::FULL)
        };
        let (lo, hi) = pair_extremes(q(i0, s), ranges[i0], q1, r1);
        lo < -PAIR_LIMIT - 1 || hi > PAIR_LIMIT
    };
    // |round(w / s)| ≤ |w| / s + ½ and raw values are ≥ 0: a pair whose sum is bounded within
    // int16 by that is passed over without rounding its weights, which is most pairs of most
    // columns
    let unbounded = reading.unbounded_pairs(w, 1.0 / scale);
    let risky: Vec<usize> = unbounded.iter().copied().filter(|&j| saturates(j, scale)).collect();
    if risky.is_empty() {
        return (scale, unbounded);
    }
    let (mut lo, mut hi) = (scale, bounded_scale_of(w, reading, scale));
    for _ in 0..30 {
        let mid = 0.5 * (lo + hi);
        if !risky.iter().any(|&j| saturates(j, mid)) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    (hi, unbounded)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn q(w: &[f32], s: f64) -> Vec<i64> {
        w.iter().map(|&x| (x as f64 / s).round_ties_even() as i64).collect()
    }

    #[test]
    fn raw_range_of_int8_and_uint8() {
        // int8, zero point -128 (a ReLU output): 0 → raw 0, the top of the range → 255
        assert_eq!(
            RawRange::of(0.0, 2.55, 0.01, -128, (-128, 127), -128),
            RawRange { lo: 0, hi: 255 }
        );
        // a channel that reaches 1.0 only: raw 100; the zero point (raw 0) is in
        assert_eq!(
            RawRange::of(0.5, 1.0, 0.01, -128, (-128, 127), -128),
            RawRange { lo: 0, hi: 100 }
        );
        // signed activations: zero point 0 → raw 128, which the range holds
        assert_eq!(
            RawRange::of(-0.2, 0.3, 0.01, 0, (-128, 127), -128),
            RawRange { lo: 108, hi: 158 }
        );
        // a narrow int8 range (qmin −127) is still offset by 128
        assert_eq!(
            RawRange::of(-9.0, 9.0, 0.01, 0, (-127, 127), -128),
            RawRange { lo: 1, hi: 255 }
        );
        // uint8 storage is raw already; values beyond the range clip
        assert_eq!(
            RawRange::of(-9.0, 9.0, 0.01, 10, (0, 255), 0),
            RawRange { lo: 0, hi: 255 }
        );
    }

    #[test]
    fn the_pairs_that_saturate_are_the_same_sign_ones() {
        let full = [RawRange::FULL; 4];
        // 255·127 + 255·127 = 64770: the pair (0, 1) saturates, onnxruntime's 320 for 640 in
        // tests/ort_no_vnni.rs
        assert_eq!(first_saturating_pair(&[127, 127, 0, 0], &full), Some(0));
        // the same values split over two pairs cannot
        assert_eq!(first_saturating_pair(&[127, 0, 127, 0], &full), None);
        assert_eq!(first_saturating_pair(&[0, 0, -127, -127], &full), Some(1));
        // opposite signs never do
        assert_eq!(first_saturating_pair(&[127, -127, -127, 127], &full), None);
        // 7-bit weights never do: 255·64·2 = 32640
        assert_eq!(first_saturating_pair(&[64, 64, -64, -64], &full), None);
        // an odd count pairs the last element with a zero
        assert_eq!(first_saturating_pair(&[1, 1, 127], &[RawRange::FULL; 3]), None);
        // activations that stay small cannot: 100·127·2 = 25400
        let small = [RawRange { lo: 0, hi: 100 }; 2];
        assert_eq!(first_saturating_pair(&[127, 127], &small), None);
    }

    #[test]
    fn safe_scale_keeps_full_range_where_nothing_can_saturate() {
        let w = [1.27f32, -1.27, 0.5, -0.3, 0.01, 0.02];
        let r = [RawRange::FULL; 6];
        assert_eq!(safe_scale(&w, &r, 0.01), 0.01);
        assert_eq!(first_saturating_pair(&q(&w, 0.01), &r), None);
    }

    #[test]
    fn safe_scale_narrows_a_saturating_channel_just_enough() {
        let w = [1.27f32, 1.0, -0.3, 0.2];
        let r = [RawRange::FULL; 4];
        assert_eq!(first_saturating_pair(&q(&w, 0.01), &r), Some(0));
        let s = safe_scale(&w, &r, 0.01);
        assert!(s > 0.01);
        let qs = q(&w, s);
        assert_eq!(first_saturating_pair(&qs, &r), None);
        // no more than needed: one step less on either weight would not saturate either,
        // but the pair sits within one rounding step of the limit
        assert!(255 * (qs[0] + qs[1] + 1) > PAIR_LIMIT, "{qs:?}");
        // the bound that holds for any rounding is wider
        assert!(bounded_scale(&w, &r, 0.01) >= s);
        // the largest weight keeps more than 7 bits (7-bit weights would give it 64)
        assert!(qs[0] > 64, "{qs:?}");
    }

    #[test]
    fn activation_ranges_decide_how_much() {
        let w = [1.27f32, 1.27];
        // a channel that reaches raw 100 beside one at 255: 100·127 + 255·|q1| ≤ 32767
        let r = [RawRange { lo: 0, hi: 100 }, RawRange::FULL];
        let s = safe_scale(&w, &r, 0.01);
        let qs = q(&w, s);
        assert_eq!(first_saturating_pair(&qs, &r), None);
        assert!(qs[0] >= 90, "{qs:?}");
    }

    /// The bound as written before the readings carried it: one division per same-sign pair.
    fn bounded_scale_pair_by_pair(w: &[f32], ranges: &[RawRange], scale: f64) -> f64 {
        let mut s = scale;
        for j in 0..w.len() / 2 {
            let (w0, w1) = (w[2 * j] as f64, w[2 * j + 1] as f64);
            if w0 * w1 > 0.0 {
                let (h0, h1) = (ranges[2 * j].hi as f64, ranges[2 * j + 1].hi as f64);
                s = s.max((h0 * w0.abs() + h1 * w1.abs()) / (PAIR_LIMIT as f64 - (h0 + h1) / 2.0));
            }
        }
        s
    }

    fn column() -> impl Strategy<Value = (Vec<f32>, Vec<RawRange>)> {
        (1usize..40).prop_flat_map(|n| {
            (
                proptest::collection::vec(-2.0f32..2.0, n),
                proptest::collection::vec((0i64..=255, 0i64..=255), n).prop_map(|v| {
                    v.into_iter()
                        .map(|(a, b)| RawRange {
                            lo: a.min(b),
                            hi: a.max(b),
                        })
                        .collect()
                }),
            )
        })
    }

    proptest! {
        /// Checking only the pairs the bound does not clear says what checking every pair of
        /// the quantized column says, at any scale and with or without a zero point.
        #[test]
        fn the_screened_check_is_the_whole_columns((w, r) in column(), scale in 0.002f32..0.03, zp in prop_oneof![Just(0i64), -3i64..3]) {
            let mut q = vec![0i8; w.len()];
            crate::params::quantize_slice(&w, &mut q, scale, zp, -127, 127, crate::params::Rounding::HalfEven);
            let whole = first_saturating_pair(&q, &r).is_some();
            let reading = Reading::new(r.clone());
            prop_assert_eq!(quantized_saturates(&w, &reading, scale, zp, (-127, 127)), whole);
            // the pairs screened at a scale serve the check at that scale
            let (wide, unbounded) = safe_scale_screened(&w, &reading, scale as f64);
            if wide == scale as f64 {
                prop_assert_eq!(quantized_pairs_saturate(&w, &reading, scale, zp, (-127, 127), &unbounded), whole);
            }
        }

        /// The branch-free bound over precomputed highs is the pair-by-pair one, bit for bit.
        #[test]
        fn the_bound_is_the_pair_by_pair_one((w, r) in column(), scale in 0.0001f64..0.1) {
            prop_assert_eq!(bounded_scale(&w, &r, scale).to_bits(), bounded_scale_pair_by_pair(&w, &r, scale).to_bits());
        }
    }
}
