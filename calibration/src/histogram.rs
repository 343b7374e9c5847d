//! A fixed-memory histogram whose bins are powers of two wide and aligned to 0.
//!
//! Bin `i` covers `[(origin + i)·w, (origin + i + 1)·w)` with `w = 2^k`. The exponent `k` is
//! the smallest that fits the observed [min, max] into `2·bins` bins (and never finer than
//! 2⁻⁴⁰ of the largest magnitude), so the range is resolved into at least `bins` bins (the
//! resolution users ask for, as onnxruntime's and TensorRT's 2048) and memory never exceeds
//! `2·bins` counters. Because `x / 2^k` is exact and aligned grids nest
//! (`floor(x / 2w) = floor(floor(x / w) / 2)`), a histogram coarsened from a finer one equals
//! one built directly at the coarser width. Hence the final counts are a function of the data
//! alone — not of batching, sharding or merge order — and merging is exact integer addition.

use crate::minmax::batch_min_max;
use serde::{Deserialize, Serialize};

/// Default number of bins (TensorRT's 2048).
pub const DEFAULT_BINS: usize = 2048;
const FINEST_RELATIVE: i32 = 40;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Histogram {
    /// The resolution asked for: the observed range spans between `bins` and `2·bins` bins.
    pub bins: usize,
    /// Bin width is 2^log2_width.
    pub log2_width: i32,
    /// Index (in bin widths) of the first bin's left edge.
    pub origin: i64,
    pub counts: Vec<u64>,
    /// Exact extremes of the finite values observed (bit patterns, so `Eq` is exact).
    min_bits: u32,
    max_bits: u32,
    /// Number of finite values observed.
    pub count: u64,
}

fn pow2(k: i32) -> f64 {
    2f64.powi(k)
}

/// floor(x / 2^k) for a finite f32, exactly.
#[inline(always)]
fn bin_index(x: f32, inv_w: f64) -> i64 {
    let v = x as f64 * inv_w;
    let t = v as i64;
    t - ((t as f64) > v) as i64
}

/// ⌊i / 2^s⌋, also for s ≥ 64: a histogram of zeros has width 2^-149, and the first nonzero
/// sample after it regrids by a shift of more than 100.
fn floor_shr(i: i64, s: u32) -> i64 {
    match i.checked_shr(s) {
        Some(v) => v,
        None if i < 0 => -1,
        None => 0,
    }
}

/// The width exponent for a range: the smallest k ≥ the finest allowed with
/// floor(max/2^k) − floor(min/2^k) + 1 ≤ 2·bins. Monotone in the range, so it only grows as
/// data arrives.
fn required_log2(min: f32, max: f32, bins: usize) -> i32 {
    let max_bins = 2 * bins;
    let mag = min.abs().max(max.abs()) as f64;
    let finest = if mag > 0.0 {
        mag.log2().floor() as i32 - FINEST_RELATIVE
    } else {
        -149
    };
    let span = max as f64 - min as f64;
    let mut k = if span > 0.0 {
        ((span / max_bins.max(2) as f64).log2().floor() as i32).max(finest)
    } else {
        finest
    };
    while {
        let inv = pow2(-k);
        bin_index(max, inv) - bin_index(min, inv) + 1 > max_bins as i64
    } {
        k += 1;
    }
    k
}

impl Histogram {
    pub fn new(bins: usize) -> Self {
        Histogram {
            bins: bins.max(4),
            log2_width: i32::MIN,
            origin: 0,
            counts: Vec::new(),
            min_bits: f32::INFINITY.to_bits(),
            max_bits: f32::NEG_INFINITY.to_bits(),
            count: 0,
        }
    }

    pub fn min(&self) -> f32 {
        f32::from_bits(self.min_bits)
    }

    pub fn max(&self) -> f32 {
        f32::from_bits(self.max_bits)
    }

    pub fn width(&self) -> f64 {
        pow2(self.log2_width)
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Left edge of bin `i` (i may be `counts.len()` for the right edge of the last bin).
    pub fn edge(&self, i: usize) -> f64 {
        (self.origin + i as i64) as f64 * self.width()
    }

    /// Moves to width 2^k (k ≥ current) and the canonical grid of [min, max].
    fn regrid(&mut self, k: i32, min: f32, max: f32) {
        let inv = pow2(-k);
        let origin = bin_index(min, inv);
        let len = (bin_index(max, inv) - origin + 1) as usize;
        let mut counts = vec![0u64; len];
        if !self.counts.is_empty() {
            let shift = (k - self.log2_width) as u32;
            for (i, &c) in self.counts.iter().enumerate() {
                if c > 0 {
                    let abs = floor_shr(self.origin + i as i64, shift);
                    counts[(abs - origin) as usize] += c;
                }
            }
        }
        self.log2_width = k;
        self.origin = origin;
        self.counts = counts;
        self.min_bits = min.to_bits();
        self.max_bits = max.to_bits();
    }

    /// Adds the finite values of `xs` (non-finite ones are skipped; the caller decides whether
    /// they are an error). Returns the number of non-finite values.
    pub fn observe_slice(&mut self, xs: &[f32]) -> usize {
        let (l, h, bad) = batch_min_max(xs);
        if bad == xs.len() {
            return bad;
        }
        let (min, max) = if self.count == 0 {
            (l, h)
        } else {
            (self.min().min(l), self.max().max(h))
        };
        let k = required_log2(min, max, self.bins).max(self.log2_width);
        if k != self.log2_width || min != self.min() || max != self.max() || self.count == 0 {
            self.regrid(k, min, max);
        }
        let inv = pow2(-self.log2_width);
        let origin = self.origin;
        let counts = &mut self.counts[..];
        if bad == 0 {
            for &x in xs {
                counts[(bin_index(x, inv) - origin) as usize] += 1;
            }
        } else {
            for &x in xs.iter().filter(|x| x.is_finite()) {
                counts[(bin_index(x, inv) - origin) as usize] += 1;
            }
        }
        self.count += (xs.len() - bad) as u64;
        bad
    }

    /// Adds another histogram of the same tensor: exact, associative and commutative.
    pub fn merge(&mut self, o: &Histogram) -> Result<(), crate::CalibError> {
        if self.bins != o.bins {
            return Err(crate::CalibError::Mismatch(format!(
                "histograms of {} and {} bins",
                self.bins, o.bins
            )));
        }
        if o.count == 0 {
            return Ok(());
        }
        if self.count == 0 {
            *self = o.clone();
            return Ok(());
        }
        let (min, max) = (self.min().min(o.min()), self.max().max(o.max()));
        let k = required_log2(min, max, self.bins)
            .max(self.log2_width)
            .max(o.log2_width);
        self.regrid(k, min, max);
        let mut other = o.clone();
        other.regrid(k, min, max);
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.count += o.count;
        Ok(())
    }

    /// The histogram of |x| on the same grid: `(start, counts)` where `counts[j]` covers
    /// [(start + j)·w, (start + j + 1)·w). Exact, since the grid is aligned to 0 (a negative bin
    /// [−(a+1)w, −aw) folds onto bin a, up to which side owns the edge). `start` is 0 when the
    /// data straddles 0, else the first occupied bin, so the result never exceeds 2·bins bins.
    pub fn folded_abs(&self) -> (i64, Vec<u64>) {
        if self.counts.is_empty() {
            return (0, Vec::new());
        }
        let first = self.origin;
        let last = self.origin + self.counts.len() as i64 - 1;
        let fold = |a: i64| if a >= 0 { a } else { -a - 1 };
        let (lo, hi) = if first >= 0 {
            (first, last)
        } else if last < 0 {
            (fold(last), fold(first))
        } else {
            (0, last.max(fold(first)))
        };
        let mut out = vec![0u64; (hi - lo + 1) as usize];
        for (i, &c) in self.counts.iter().enumerate() {
            out[(fold(self.origin + i as i64) - lo) as usize] += c;
        }
        (lo, out)
    }

    /// Approximate bytes of state: bounded by `max_bins`, whatever was observed.
    pub fn state_bytes(&self) -> usize {
        std::mem::size_of::<Self>() + self.counts.capacity() * std::mem::size_of::<u64>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeros_then_a_wide_range_regrid_by_a_shift_beyond_64_bits() {
        let mut h = Histogram::new(2048);
        h.observe_slice(&[0.0; 4]);
        h.observe_slice(&[-3.0, 0.5, 7.0]);
        assert_eq!((h.min(), h.max(), h.count), (-3.0, 7.0, 7));
        // the four zeros sit in the bin of 0
        let w = h.width();
        let zero_bin = (0.0f64 / w).floor() as i64 - h.origin;
        assert_eq!(h.counts[zero_bin as usize], 4);
        let mut merged = Histogram::new(2048);
        merged.observe_slice(&[0.0; 4]);
        let mut wide = Histogram::new(2048);
        wide.observe_slice(&[-3.0, 0.5, 7.0]);
        merged.merge(&wide).unwrap();
        assert_eq!(merged, h);
    }

    #[test]
    fn grid_is_exact_and_batching_invariant() {
        let xs: Vec<f32> = (0..10_000)
            .map(|i| ((i * 7919) % 10_007) as f32 / 1000.0 - 3.0)
            .collect();
        let mut one = Histogram::new(256);
        one.observe_slice(&xs);
        let mut many = Histogram::new(256);
        for c in xs.chunks(37) {
            many.observe_slice(c);
        }
        assert_eq!(one, many);
        assert!(one.counts.len() <= 512 && one.counts.len() >= 256);
        assert_eq!(one.counts.iter().sum::<u64>(), 10_000);
        assert_eq!(one.min(), -3.0);
    }

    #[test]
    fn constant_and_zero_tensors() {
        let mut h = Histogram::new(2048);
        h.observe_slice(&[0.0; 10]);
        assert_eq!(h.counts, vec![10]);
        let mut h = Histogram::new(2048);
        h.observe_slice(&[-2.5; 10]);
        assert_eq!(h.counts, vec![10]);
        assert!(h.edge(0) <= -2.5 && h.edge(1) > -2.5);
    }

    #[test]
    fn fold_abs() {
        let mut h = Histogram::new(4);
        h.observe_slice(&[-3.5, -0.5, 0.5, 1.5, 3.5]);
        assert_eq!(h.log2_width, 0);
        assert_eq!(h.folded_abs(), (0, vec![2, 1, 0, 2]));
        let mut far = Histogram::new(2048);
        far.observe_slice(&[-2.5; 4]);
        let (start, counts) = far.folded_abs();
        assert_eq!(counts, vec![4]);
        assert!(start as f64 * far.width() < 2.5 && (start + 1) as f64 * far.width() >= 2.5);
    }
}
