//! Min/max observers.

use crate::{CalibError, Range};
use ndarray::ArrayViewD;
use serde::{Deserialize, Serialize};

const LANES: usize = 16;

/// Min and max of `xs` plus the number of non-finite values, in one pass that vectorises
/// (16 independent lanes; AVX2 when the CPU has it, chosen at run time — min and max are
/// exact, so the result is the same on every path). Non-finite values are left out of
/// min/max.
pub fn batch_min_max(xs: &[f32]) -> (f32, f32, usize) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2 (checked just above).
        return unsafe { batch_min_max_avx2(xs) };
    }
    batch_min_max_portable(xs)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn batch_min_max_avx2(xs: &[f32]) -> (f32, f32, usize) {
    batch_min_max_portable(xs)
}

/// NaN never wins a `<` or `>` comparison, so it is flagged by `x != x`; ±Inf shows up in the
/// extremes themselves.
#[inline(always)]
fn batch_min_max_portable(xs: &[f32]) -> (f32, f32, usize) {
    let mut lo = [f32::INFINITY; LANES];
    let mut hi = [f32::NEG_INFINITY; LANES];
    let mut bad = [false; LANES];
    let chunks = xs.chunks_exact(LANES);
    let rest = chunks.remainder();
    for c in chunks {
        for i in 0..LANES {
            let x = c[i];
            lo[i] = if x < lo[i] { x } else { lo[i] };
            hi[i] = if x > hi[i] { x } else { hi[i] };
            bad[i] |= x.is_nan();
        }
    }
    let mut any_bad = bad.iter().any(|&b| b);
    for &x in rest {
        lo[0] = if x < lo[0] { x } else { lo[0] };
        hi[0] = if x > hi[0] { x } else { hi[0] };
        any_bad |= x.is_nan();
    }
    let l = lo.iter().fold(f32::INFINITY, |a, &b| a.min(b));
    let h = hi.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
    if any_bad || l == f32::NEG_INFINITY || h == f32::INFINITY {
        // slow path only for batches that hold non-finite values
        let (mut l, mut h, mut n) = (f32::INFINITY, f32::NEG_INFINITY, 0);
        for &x in xs {
            if x.is_finite() {
                l = l.min(x);
                h = h.max(x);
            } else {
                n += 1;
            }
        }
        return (l, h, n);
    }
    (l, h, 0)
}

/// Index of the first non-finite value.
pub(crate) fn first_non_finite(xs: &[f32]) -> usize {
    xs.iter().position(|x| !x.is_finite()).unwrap_or(0)
}

/// Global min and max (TF MIN_MAX, onnxruntime MinMax, PyTorch MinMaxObserver).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MinMax {
    pub min: f32,
    pub max: f32,
    /// Number of finite values observed.
    pub count: u64,
}

impl Default for MinMax {
    fn default() -> Self {
        MinMax {
            min: f32::INFINITY,
            max: f32::NEG_INFINITY,
            count: 0,
        }
    }
}

impl MinMax {
    /// Adds a batch's finite values; returns how many non-finite values it held.
    pub fn observe_slice(&mut self, xs: &[f32]) -> usize {
        let (l, h, bad) = batch_min_max(xs);
        self.min = self.min.min(l);
        self.max = self.max.max(h);
        self.count += (xs.len() - bad) as u64;
        bad
    }

    pub fn merge(&mut self, o: &MinMax) {
        self.min = self.min.min(o.min);
        self.max = self.max.max(o.max);
        self.count += o.count;
    }

    pub fn range(&self) -> Option<Range> {
        (self.count > 0).then_some((self.min, self.max))
    }
}

/// How per-batch extremes are averaged.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum MovingAverage {
    /// TF AVERAGE_MIN_MAX: the mean of per-batch min and max. Mergeable across shards.
    Mean,
    /// onnxruntime / PyTorch: the first batch sets the range, then
    /// range += c · (batch range − range). Order-dependent by definition, so not mergeable.
    Ema { constant: f32 },
}

/// Moving-average min/max over batches (a batch is one call to `observe`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MovingAverageMinMax {
    pub flavour: MovingAverage,
    /// Mean: sums of per-batch extremes (f64). Ema: the current averages.
    pub min_acc: f64,
    pub max_acc: f64,
    pub batches: u64,
}

impl MovingAverageMinMax {
    pub fn new(flavour: MovingAverage) -> Self {
        MovingAverageMinMax {
            flavour,
            min_acc: 0.0,
            max_acc: 0.0,
            batches: 0,
        }
    }

    pub fn observe_slice(&mut self, xs: &[f32]) -> usize {
        let (l, h, bad) = batch_min_max(xs);
        if bad == xs.len() {
            return bad;
        }
        match self.flavour {
            MovingAverage::Mean => {
                self.min_acc += l as f64;
                self.max_acc += h as f64;
            }
            MovingAverage::Ema { constant } => {
                if self.batches == 0 {
                    self.min_acc = l as f64;
                    self.max_acc = h as f64;
                } else {
                    let c = constant as f64;
                    self.min_acc += c * (l as f64 - self.min_acc);
                    self.max_acc += c * (h as f64 - self.max_acc);
                }
            }
        }
        self.batches += 1;
        bad
    }

    pub fn merge(&mut self, o: &MovingAverageMinMax) -> Result<(), CalibError> {
        match (self.flavour, o.flavour) {
            (MovingAverage::Mean, MovingAverage::Mean) => {
                self.min_acc += o.min_acc;
                self.max_acc += o.max_acc;
                self.batches += o.batches;
                Ok(())
            }
            (MovingAverage::Ema { .. }, _) => Err(CalibError::Mismatch(
                "an exponential moving average depends on the order of batches and cannot be merged across shards; calibrate with the mean moving average (avg-minmax) to shard".into(),
            )),
            _ => Err(CalibError::Mismatch("moving averages of different kinds".into())),
        }
    }

    pub fn range(&self) -> Option<Range> {
        if self.batches == 0 {
            return None;
        }
        Some(match self.flavour {
            MovingAverage::Mean => {
                let n = self.batches as f64;
                ((self.min_acc / n) as f32, (self.max_acc / n) as f32)
            }
            MovingAverage::Ema { .. } => (self.min_acc as f32, self.max_acc as f32),
        })
    }
}

/// Each index of `axis`'s extremes over `x`, and how many non-finite values `x` holds, in one
/// pass over `x` in memory order: seen as blocks of [C, inner], channel c owns the c-th run of
/// `inner` values of each block. A matrix product's input [.., K] is observed per K (inner = 1),
/// where gathering each channel's lane would stride through the whole tensor once per channel.
fn channel_extremes(x: &ArrayViewD<f32>, axis: usize) -> (Vec<MinMax>, usize) {
    let c = x.shape()[axis];
    let inner: usize = x.shape()[axis + 1..].iter().product();
    let standard = x.as_standard_layout();
    let flat = standard.as_slice().expect("standard layout");
    let mut mine = vec![MinMax::default(); c];
    if c == 0 || inner == 0 {
        return (mine, 0);
    }
    if inner > 1 {
        let mut bad = 0;
        for block in flat.chunks_exact(c * inner) {
            for (m, run) in mine.iter_mut().zip(block.chunks_exact(inner)) {
                bad += m.observe_slice(run);
            }
        }
        return (mine, bad);
    }
    let (mut lo, mut hi) = (vec![f32::INFINITY; c], vec![f32::NEG_INFINITY; c]);
    let mut non_finite = vec![0u64; c];
    rows_min_max(flat, &mut lo, &mut hi, &mut non_finite);
    let rows = (flat.len() / c) as u64;
    let mut bad = 0;
    for (m, ((l, h), n)) in mine.iter_mut().zip(lo.into_iter().zip(hi).zip(non_finite)) {
        *m = MinMax {
            min: l,
            max: h,
            count: rows - n,
        };
        bad += n as usize;
    }
    (mine, bad)
}

/// Folds each row of `flat` (rows of `lo.len()` values) into the per-column extremes and
/// non-finite counts: finite values only, as [`batch_min_max`] counts them.
fn rows_min_max(flat: &[f32], lo: &mut [f32], hi: &mut [f32], non_finite: &mut [u64]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2 (checked just above).
        return unsafe { rows_min_max_avx2(flat, lo, hi, non_finite) };
    }
    rows_min_max_portable(flat, lo, hi, non_finite)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn rows_min_max_avx2(flat: &[f32], lo: &mut [f32], hi: &mut [f32], non_finite: &mut [u64]) {
    rows_min_max_portable(flat, lo, hi, non_finite)
}

#[inline(always)]
fn rows_min_max_portable(flat: &[f32], lo: &mut [f32], hi: &mut [f32], non_finite: &mut [u64]) {
    // counts in u32 lanes (they vectorise), added to the u64 totals every 2^20 rows
    let c = lo.len();
    let mut count = vec![0u32; c];
    for rows in flat.chunks(c << 20) {
        for row in rows.chunks_exact(c) {
            for (((l, h), n), &x) in lo.iter_mut().zip(hi.iter_mut()).zip(count.iter_mut()).zip(row) {
                // NaN and ±Inf both fail |x| < Inf
                let finite = x.abs() < f32::INFINITY;
                let (xl, xh) = if finite {
                    (x, x)
                } else {
                    (f32::INFINITY, f32::NEG_INFINITY)
                };
                *l = if xl < *l { xl } else { *l };
                *h = if xh > *h { xh } else { *h };
                *n += u32::from(!finite);
            }
        }
        for (t, n) in non_finite.iter_mut().zip(count.iter_mut()) {
            *t += u64::from(std::mem::take(n));
        }
    }
}

/// Min and max per channel along `axis` (weights, or per-channel activations).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PerChannelMinMax {
    pub axis: usize,
    pub channels: Vec<MinMax>,
    /// The same extremes over the even- and the odd-numbered samples apart (activations, which
    /// are observed sample by sample): how far the two halves disagree is how far samples not
    /// yet seen are expected to reach beyond `channels` ([`Self::reach`]).
    #[serde(default, skip_serializing_if = "no_halves")]
    pub halves: [Vec<MinMax>; 2],
}

fn no_halves(h: &[Vec<MinMax>; 2]) -> bool {
    h.iter().all(Vec::is_empty)
}

impl PerChannelMinMax {
    pub fn new(axis: usize) -> Self {
        PerChannelMinMax {
            axis,
            channels: Vec::new(),
            halves: [Vec::new(), Vec::new()],
        }
    }

    /// Observes sample `sample` (its parity picks the half it counts in).
    pub fn observe(&mut self, x: &ArrayViewD<f32>, sample: usize) -> Result<usize, CalibError> {
        if self.axis >= x.ndim() {
            return Err(CalibError::BadAxis {
                axis: self.axis,
                rank: x.ndim(),
            });
        }
        let c = x.shape()[self.axis];
        if self.channels.is_empty() {
            self.channels = vec![MinMax::default(); c];
        } else if self.channels.len() != c {
            return Err(CalibError::Mismatch(format!(
                "{} channels observed before, {c} now",
                self.channels.len()
            )));
        }
        let half = &mut self.halves[sample % 2];
        if half.is_empty() {
            *half = vec![MinMax::default(); c];
        } else if half.len() != c {
            return Err(CalibError::Mismatch(format!(
                "{} channels in a half of the samples, {c} now",
                half.len()
            )));
        }
        let (mine, bad) = channel_extremes(x, self.axis);
        for ((ch, h), m) in self.channels.iter_mut().zip(half.iter_mut()).zip(&mine) {
            ch.merge(m);
            h.merge(m);
        }
        Ok(bad)
    }

    pub fn merge(&mut self, o: &PerChannelMinMax) -> Result<(), CalibError> {
        if self.axis != o.axis {
            return Err(CalibError::Mismatch(format!(
                "per-channel axis {} vs {}",
                self.axis, o.axis
            )));
        }
        let merge_into = |a: &mut Vec<MinMax>, b: &Vec<MinMax>| -> Result<(), CalibError> {
            if a.is_empty() {
                a.clone_from(b);
            } else if !b.is_empty() {
                if a.len() != b.len() {
                    return Err(CalibError::Mismatch(format!("{} channels vs {}", a.len(), b.len())));
                }
                a.iter_mut().zip(b).for_each(|(a, b)| a.merge(b));
            }
            Ok(())
        };
        merge_into(&mut self.channels, &o.channels)?;
        let [a0, a1] = &mut self.halves;
        merge_into(a0, &o.halves[0])?;
        merge_into(a1, &o.halves[1])
    }

    /// (mins, maxs) per channel; a channel that saw no finite value gets (0, 0).
    pub fn ranges(&self) -> (Vec<f32>, Vec<f32>) {
        self.channels.iter().map(|c| c.range().unwrap_or((0.0, 0.0))).unzip()
    }

    /// How far each channel is expected to reach on samples not yet seen: its extremes moved
    /// out by how far its two halves' extremes differ, the classic estimate of an end point
    /// from the largest observations (X₍ₙ₎ + (X₍ₙ₎ − X₍ₙ₋₁₎), on halves rather than single
    /// values). A channel bounded by its function (a ReLU6, a saturated sigmoid) or reached
    /// by many samples alike keeps its range; one whose extreme came from one sample does
    /// not. Without both halves (one sample, or the statistics of a weight) the extremes.
    pub fn reach(&self) -> (Vec<f32>, Vec<f32>) {
        let (lo, hi) = self.ranges();
        let [e, o] = &self.halves;
        if e.len() != lo.len() || o.len() != lo.len() {
            return (lo, hi);
        }
        let spread = |a: &MinMax, b: &MinMax| match (a.range(), b.range()) {
            (Some(a), Some(b)) => ((a.0 - b.0).abs(), (a.1 - b.1).abs()),
            _ => (0.0, 0.0),
        };
        (0..lo.len())
            .map(|c| {
                let (dl, dh) = spread(&e[c], &o[c]);
                (lo[c] - dl, hi[c] + dh)
            })
            .unzip()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::Axis;

    #[test]
    fn min_max_and_non_finite() {
        let xs: Vec<f32> = (0..100).map(|i| (i as f32 - 37.0) * 0.5).collect();
        assert_eq!(batch_min_max(&xs), (-18.5, 31.0, 0));
        let mut ys = xs.clone();
        ys[40] = f32::NAN;
        ys[3] = f32::INFINITY;
        assert_eq!(batch_min_max(&ys), (-18.5, 31.0, 2));
        assert_eq!(first_non_finite(&ys), 3);
        assert_eq!(batch_min_max(&[]), (f32::INFINITY, f32::NEG_INFINITY, 0));
    }

    /// Observed in one pass in memory order, each channel's extremes, count and the non-finite
    /// total are those of its own lane, whichever axis holds the channels.
    #[test]
    fn per_channel_extremes_are_each_lanes_own() {
        let x = ndarray::Array3::from_shape_fn((3, 5, 4), |(i, j, k)| match (i * 20 + j * 4 + k) % 17 {
            3 => f32::NAN,
            11 => f32::INFINITY,
            5 if j == 2 => f32::NEG_INFINITY,
            v => (v as f32 - 8.0) * (1.0 + k as f32) * if i == 1 { -0.5 } else { 1.0 },
        })
        .into_dyn();
        for axis in 0..3 {
            for view in [x.view(), x.view().reversed_axes()] {
                let (mine, bad) = channel_extremes(&view, axis);
                let mut want_bad = 0;
                for (c, lane) in view.axis_iter(Axis(axis)).enumerate() {
                    let lane: Vec<f32> = lane.iter().copied().collect();
                    let mut m = MinMax::default();
                    want_bad += m.observe_slice(&lane);
                    assert_eq!(mine[c], m, "axis {axis}, channel {c}");
                }
                assert_eq!(bad, want_bad, "axis {axis}");
            }
        }
        // a channel that saw only non-finite values has no range
        let all_bad = ndarray::arr2(&[[f32::NAN, 1.0], [f32::INFINITY, 2.0]]).into_dyn();
        let (mine, bad) = channel_extremes(&all_bad.view(), 1);
        assert_eq!((mine[0].range(), mine[1].range(), bad), (None, Some((1.0, 2.0)), 2));
    }

    #[test]
    fn moving_averages() {
        let mut m = MovingAverageMinMax::new(MovingAverage::Mean);
        m.observe_slice(&[-1.0, 1.0]);
        m.observe_slice(&[-3.0, 5.0]);
        assert_eq!(m.range(), Some((-2.0, 3.0)));
        let mut e = MovingAverageMinMax::new(MovingAverage::Ema { constant: 0.5 });
        e.observe_slice(&[-1.0, 1.0]);
        e.observe_slice(&[-3.0, 5.0]);
        assert_eq!(e.range(), Some((-2.0, 3.0)));
        e.observe_slice(&[0.0, 1.0]);
        assert_eq!(e.range(), Some((-1.0, 2.0)));
        assert!(e.clone().merge(&e).is_err());
    }

    /// Channel 0 reaches 1.0 on every sample, channel 1 reaches 3.0 on one sample of four:
    /// channel 0's reach is its extremes, channel 1's goes as far again past its extreme as
    /// its halves differ, and shards of the samples merge to the same state.
    #[test]
    fn per_channel_reach_widens_a_channel_by_its_halves_disagreement() {
        let sample = |hi1: f32| ndarray::arr2(&[[0.0f32, 1.0], [-0.5, hi1]]).into_dyn();
        let his = [1.0, 1.0, 1.0, 3.0];
        let mut all = PerChannelMinMax::new(0);
        for (i, &h) in his.iter().enumerate() {
            all.observe(&sample(h).view(), i).unwrap();
        }
        assert_eq!(all.ranges(), (vec![0.0, -0.5], vec![1.0, 3.0]));
        assert_eq!(all.reach(), (vec![0.0, -0.5], vec![1.0, 5.0]));
        let (mut even, mut odd) = (PerChannelMinMax::new(0), PerChannelMinMax::new(0));
        for (i, &h) in his.iter().enumerate() {
            let shard = if i % 2 == 0 { &mut even } else { &mut odd };
            shard.observe(&sample(h).view(), i).unwrap();
        }
        odd.merge(&even).unwrap();
        assert_eq!(odd, all);
        // one sample (or statistics written before the halves were kept): the extremes
        let mut one = PerChannelMinMax::new(0);
        one.observe(&sample(3.0).view(), 0).unwrap();
        assert_eq!(one.reach(), one.ranges());
        let old: PerChannelMinMax = serde_json::from_str(r#"{"axis":0,"channels":[]}"#).unwrap();
        assert_eq!(old.reach(), (vec![], vec![]));
    }
}
