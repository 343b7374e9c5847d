//! Range selection from a [`Histogram`]: percentile, entropy (KL) and MSE.
//!
//! All three assume values are uniformly spread inside a bin, and clip their result to the
//! observed [min, max]. Entropy and MSE evaluate each candidate in O(levels) and O(1) with
//! prefix sums, so a 2048-bin search takes well under a millisecond (benches/observers.rs).

use crate::{Histogram, Range};

fn clip(h: &Histogram, lo: f64, hi: f64) -> Range {
    let (min, max) = (h.min() as f64, h.max() as f64);
    (lo.clamp(min, max) as f32, hi.clamp(min, max) as f32)
}

/// The value below which a fraction `f` of the mass of `counts` lies, on bins of width `w`
/// starting at `start`, interpolating linearly inside the bin.
fn quantile(counts: &[u64], start: f64, w: f64, f: f64) -> f64 {
    let total: u64 = counts.iter().sum();
    let target = f.clamp(0.0, 1.0) * total as f64;
    let mut acc = 0.0;
    for (i, &c) in counts.iter().enumerate() {
        let next = acc + c as f64;
        if c > 0 && next >= target {
            let frac = ((target - acc) / c as f64).clamp(0.0, 1.0);
            return start + (i as f64 + frac) * w;
        }
        acc = next;
    }
    start + counts.len() as f64 * w
}

/// Two-sided percentile: cuts (100 − p)/2 % of the mass from each side (onnxruntime's
/// non-symmetric percentile; TF takes the two percentiles separately, see [`percentiles`]).
pub fn percentile(h: &Histogram, p: f64) -> Option<Range> {
    let tail = (100.0 - p) / 200.0;
    percentiles(h, tail * 100.0, 100.0 - tail * 100.0)
}

/// min at the `lower` percentile, max at the `upper` percentile (both in 0..=100).
pub fn percentiles(h: &Histogram, lower: f64, upper: f64) -> Option<Range> {
    if h.is_empty() {
        return None;
    }
    let lo = quantile(&h.counts, h.edge(0), h.width(), lower / 100.0);
    let hi = quantile(&h.counts, h.edge(0), h.width(), upper / 100.0);
    Some(clip(h, lo, hi))
}

/// Symmetric percentile on |x|: threshold t with p % of |x| below it; range [−t, t] clipped to
/// the observed extremes (onnxruntime's default percentile calibration).
pub fn percentile_symmetric(h: &Histogram, p: f64) -> Option<Range> {
    if h.is_empty() {
        return None;
    }
    let (start, counts) = h.folded_abs();
    let t = quantile(&counts, start as f64 * h.width(), h.width(), p / 100.0);
    Some(clip(h, -t, t))
}

/// Entropy calibration (TensorRT / onnxruntime's KL search) on the histogram of |x| (from its
/// first occupied bin when the data does not straddle 0): for each
/// candidate threshold bin i ≥ `levels`, P = bins [0, i) with the clipped mass added to the
/// last bin, Q = P without it merged into `levels` groups and spread uniformly over each
/// group's bins that are non-zero in P; the threshold minimising KL(P‖Q) wins. `levels` is 128
/// for int8 (2^(bits−1) on |x|); data that is never negative gets twice as many, since an
/// asymmetric grid spends all its steps on [0, t] (the activations of every scheme quantir
/// writes are asymmetric unless `--symmetric-activations` is asked for; then such a tensor has
/// half the steps the search assumed, and its threshold errs towards clipping less). Two
/// choices follow NVIDIA's calibrator for TensorRT rather than onnxruntime's: the bin
/// holding 0 counts as its neighbour does — zero is exact on every grid, and a ReLU's exact
/// zeros (40 % of its outputs is common) are a spike that any merging of bins spreads, which
/// made the first candidate (no merging) win whatever it clipped (fer: thresholds at 1.5 of
/// a ReLU's 8.2, 3.6 dB SQNR); and the number of levels above. Returns [−t, t] clipped to the observed extremes; when the histogram of |x|
/// has no more bins than the levels, no clipping can help and [min, max] is returned.
pub fn entropy(h: &Histogram, levels: usize) -> Option<Range> {
    let kl = KlSearch::new(h, levels)?;
    if kl.p.len() <= kl.levels {
        return Some((h.min(), h.max()));
    }
    let mut best = (f64::INFINITY, kl.p.len());
    for i in kl.levels..=kl.p.len() {
        let d = kl.divergence(i);
        if d < best.0 {
            best = (d, i);
        }
    }
    let t = (kl.start + best.1 as i64) as f64 * h.width();
    Some(clip(h, -t, t))
}

/// KL(P‖Q) of [`entropy`]'s objective for the threshold `t` (rounded to a bin edge of |x|),
/// so that another tool's threshold can be scored on the same histogram.
pub fn entropy_divergence(h: &Histogram, levels: usize, t: f64) -> Option<f64> {
    let kl = KlSearch::new(h, levels)?;
    let i = ((t / h.width()).round() as i64 - kl.start).clamp(1, kl.p.len() as i64) as usize;
    Some(kl.divergence(i))
}

/// Prefix sums of the |x| histogram for O(levels) KL evaluation per candidate.
struct KlSearch {
    start: i64,
    p: Vec<u64>,
    levels: usize,
    /// mass, Σ p·ln p and non-zero bins, as prefix sums
    cm: Vec<f64>,
    cl: Vec<f64>,
    cz: Vec<u32>,
}

impl KlSearch {
    fn new(h: &Histogram, levels: usize) -> Option<Self> {
        if h.is_empty() {
            return None;
        }
        let (start, mut p) = h.folded_abs();
        if start == 0 && p.len() > 1 {
            p[0] = p[1];
        }
        let levels = if h.min() >= 0.0 { 2 * levels } else { levels };
        let n = p.len();
        let (mut cm, mut cl, mut cz) = (vec![0f64; n + 1], vec![0f64; n + 1], vec![0u32; n + 1]);
        for (i, &c) in p.iter().enumerate() {
            let c = c as f64;
            cm[i + 1] = cm[i] + c;
            cl[i + 1] = cl[i] + if c > 0.0 { c * c.ln() } else { 0.0 };
            cz[i + 1] = cz[i] + (c > 0.0) as u32;
        }
        Some(KlSearch {
            start,
            p,
            levels: levels.max(2),
            cm,
            cl,
            cz,
        })
    }

    /// KL divergence for the threshold at the end of bin i − 1 (infinite when P has mass in a
    /// bin where Q has none).
    fn divergence(&self, i: usize) -> f64 {
        let (p, cm, cl, cz) = (&self.p, &self.cm, &self.cl, &self.cz);
        let total = cm[p.len()];
        let outliers = total - cm[i];
        let last = p[i - 1] as f64;
        if last == 0.0 && outliers > 0.0 {
            return f64::INFINITY;
        }
        // Σ p ln p over P (its last bin also carries the clipped mass)
        let plnp = |x: f64| if x > 0.0 { x * x.ln() } else { 0.0 };
        let sum_plnp = cl[i] - plnp(last) + plnp(last + outliers);
        // Σ p ln q group by group (ORT's grouping: ⌊i/levels⌋ bins each, the rest in the last)
        let levels = self.levels.min(i);
        let per = i / levels;
        let mut sum_plnq = 0.0;
        for g in 0..levels {
            let a = g * per;
            let b = if g + 1 == levels { i } else { a + per };
            let nz = cz[b] - cz[a];
            if nz == 0 {
                continue;
            }
            let mass = cm[b] - cm[a];
            let p_mass = if b == i { mass + outliers } else { mass };
            sum_plnq += p_mass * (mass / nz as f64).ln();
        }
        // KL(P/|P| ‖ Q/|Q|) with |P| = total and |Q| = cm[i]
        (sum_plnp - sum_plnq) / total - total.ln() + cm[i].ln()
    }
}

/// Prefix sums over the signed histogram's bin mid-points.
struct Moments {
    c: Vec<f64>,
    s1: Vec<f64>,
    s2: Vec<f64>,
}

impl Moments {
    fn new(counts: &[u64], start: f64, w: f64) -> Self {
        let n = counts.len();
        let (mut c, mut s1, mut s2) = (vec![0.0; n + 1], vec![0.0; n + 1], vec![0.0; n + 1]);
        for (i, &k) in counts.iter().enumerate() {
            let m = start + (i as f64 + 0.5) * w;
            let k = k as f64;
            c[i + 1] = c[i] + k;
            s1[i + 1] = s1[i] + k * m;
            s2[i + 1] = s2[i] + k * m * m;
        }
        Moments { c, s1, s2 }
    }

    /// Expected squared error of quantizing with range [a, b] (a = edge ia, b = edge ib) on
    /// `steps` steps: rounding noise step²/12 inside, squared clipping distance outside.
    fn error(&self, ia: usize, a: f64, ib: usize, b: f64, steps: f64) -> f64 {
        let n = self.c.len() - 1;
        let step = (b - a) / steps;
        let inner = (self.c[ib] - self.c[ia]) * step * step / 12.0;
        let left = a * a * self.c[ia] - 2.0 * a * self.s1[ia] + self.s2[ia];
        let (cr, s1r, s2r) = (
            self.c[n] - self.c[ib],
            self.s1[n] - self.s1[ib],
            self.s2[n] - self.s2[ib],
        );
        let right = b * b * cr - 2.0 * b * s1r + s2r;
        inner + left.max(0.0) + right.max(0.0)
    }
}

/// MSE calibration: the range minimising the expected squared quantization error for a
/// `bits`-bit grid. Symmetric: candidates [−t, t] over every bin edge of |x| (O(bins)).
/// Asymmetric: candidates [a, b] with a ≤ 0 ≤ b on bin edges (ranges that do not contain 0
/// are widened by every runtime anyway): a coarse pass over at most 256 edges per side, then
/// every pair within one coarse step of the best.
pub fn mse(h: &Histogram, bits: u32, symmetric: bool) -> Option<Range> {
    if h.is_empty() {
        return None;
    }
    let steps = ((1u64 << bits.clamp(1, 32)) - 1) as f64;
    let w = h.width();
    if symmetric {
        let (start, p) = h.folded_abs();
        let base = start as f64 * w;
        let m = Moments::new(&p, base, w);
        let n = p.len();
        // on |x| the error of [-t, t] is the error of [0, t] with step 2t/steps
        let mut best = (f64::INFINITY, n);
        for i in 1..=n {
            let t = base + i as f64 * w;
            let e = m.error(0, 0.0, i, t, steps / 2.0);
            if e < best.0 {
                best = (e, i);
            }
        }
        let t = base + best.1 as f64 * w;
        return Some(clip(h, -t, t));
    }
    let n = h.counts.len();
    let m = Moments::new(&h.counts, h.edge(0), w);
    // the edge at 0 (the grid is aligned to 0), or the end the range is widened to
    let z = (-h.origin).clamp(0, n as i64) as usize;
    let edge = |i: usize| h.edge(i).clamp(h.min().min(0.0) as f64, h.max().max(0.0) as f64);
    let eval = |ia: usize, ib: usize| m.error(ia, edge(ia), ib, edge(ib), steps);
    let left: Vec<usize> = (0..=z).collect();
    let right: Vec<usize> = (z..=n).collect();
    let stride = left.len().max(right.len()).div_ceil(256).max(1);
    let mut best = (f64::INFINITY, 0, n);
    let search = |las: &mut dyn Iterator<Item = usize>, rbs: &[usize], best: &mut (f64, usize, usize)| {
        for ia in las {
            for &ib in rbs {
                if ib <= ia {
                    continue;
                }
                let e = eval(ia, ib);
                if e < best.0 {
                    *best = (e, ia, ib);
                }
            }
        }
    };
    let coarse_r: Vec<usize> = right
        .iter()
        .copied()
        .step_by(stride)
        .chain(std::iter::once(n))
        .collect();
    search(
        &mut left.iter().copied().step_by(stride).chain(std::iter::once(0)),
        &coarse_r,
        &mut best,
    );
    if stride > 1 {
        let (_, ca, cb) = best;
        let fine_r: Vec<usize> = (cb.saturating_sub(stride).max(z)..=(cb + stride).min(n)).collect();
        search(
            &mut (ca.saturating_sub(stride)..=(ca + stride).min(z)),
            &fine_r,
            &mut best,
        );
    }
    Some(clip(h, edge(best.1), edge(best.2)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hist(xs: &[f32]) -> Histogram {
        let mut h = Histogram::new(2048);
        h.observe_slice(xs);
        h
    }

    #[test]
    fn never_negative_data_gets_the_whole_grid_and_zero_counts_as_its_neighbour() {
        let xs: Vec<f32> = (0..5000)
            .map(|i| if i % 2 == 0 { 0.0 } else { (i % 997) as f32 / 97.0 })
            .collect();
        let kl = KlSearch::new(&hist(&xs), 128).unwrap();
        assert_eq!(kl.levels, 256);
        assert_eq!((kl.start, kl.p[0]), (0, kl.p[1]));
        let signed: Vec<f32> = xs
            .iter()
            .enumerate()
            .map(|(i, x)| if i % 4 == 1 { -x } else { *x })
            .collect();
        let kl = KlSearch::new(&hist(&signed), 128).unwrap();
        assert_eq!(kl.levels, 128);
        assert_eq!(kl.p[0], kl.p[1]);
        // data that does not reach 0 keeps its first bin as it is
        let shifted: Vec<f32> = xs.iter().map(|x| x + 3.0).collect();
        let h = hist(&shifted);
        let kl = KlSearch::new(&h, 128).unwrap();
        assert!(kl.start > 0);
        assert_eq!(kl.p[0], h.folded_abs().1[0]);
    }
}
