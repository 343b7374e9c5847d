//! GPTQ rounding (Frantar et al., "GPTQ: Accurate Post-Training Quantization for Generative
//! Pre-trained Transformers", ICLR 2023 — the Optimal Brain Quantizer of Frantar & Alistarh,
//! NeurIPS 2022, in its one-pass form): each row of a weight matrix is rounded to its grid one
//! column at a time, and each column's rounding error is spread over the columns not yet
//! rounded, so that the layer's *output* on calibration inputs stays closest to float, not
//! each weight.
//!
//! ```text
//! minimise ‖(W − Q) X‖²      H = X Xᵀ (K×K, summed over calibration inputs) + λ·I
//! U = the upper Cholesky factor of H⁻¹ (H⁻¹ = UᵀU)
//! for i in the columns, largest H_ii first:
//!     q_i = grid(w_i);   e = (w_i − q_i) / U_ii;   w_j −= e · U_ij   for the columns j after i
//! ```
//!
//! Rows are independent (one output channel each), so the loop runs row by row over one
//! shared U. Scales and zero points are the caller's: GPTQ only picks the levels.

/// One row's quantization grid: level q stands for (q − zero_point) · scale, q in [qmin, qmax].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Grid {
    pub scale: f64,
    pub zero_point: i64,
    pub qmin: i64,
    pub qmax: i64,
}

impl Grid {
    /// The nearest level (ties to even), clamped to the grid.
    pub fn level(&self, x: f64) -> i64 {
        let t = (x / self.scale).round_ties_even();
        let t = if t.is_nan() { 0.0 } else { t };
        (t as i64).saturating_add(self.zero_point).clamp(self.qmin, self.qmax)
    }

    pub fn value(&self, q: i64) -> f64 {
        (q - self.zero_point) as f64 * self.scale
    }
}

/// The Gram matrices X Xᵀ of the patches a layer's weight rows multiply, one k×k block per
/// group (row-major), summed over calibration samples.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Gram {
    pub groups: usize,
    pub k: usize,
    pub sums: Vec<f64>,
    /// Patches summed.
    pub patches: u64,
    /// Each group's [`Factor`], once [`Gram::factorize`] made them (the sums are then dropped:
    /// rounding needs only the factors).
    pub factors: Vec<Factor>,
    /// Where the sums are those of the *quantized* model's inputs X̃: each group's k×k
    /// [`target_map`] M (row-major), which moves a weight row w to the row w M that X̃ best
    /// maps to the float layer's output W X; empty: the rows are rounded as they are.
    pub targets: Vec<f64>,
}

impl Gram {
    /// Replaces the sums by each group's [`Factor`], so that every rounding of this layer (a
    /// target search quantizes the model many times) reuses one factorisation.
    pub fn factorize(&mut self) -> Result<(), GptqError> {
        let kk = self.k * self.k;
        if self.sums.len() != self.groups * kk {
            return Err(GptqError::Shape(format!(
                "{} sums for {} groups of {}",
                self.sums.len(),
                self.groups,
                self.k
            )));
        }
        self.factors = self
            .sums
            .chunks(kk)
            .map(|h| factor(h, self.k))
            .collect::<Result<_, _>>()?;
        self.sums = Vec::new();
        Ok(())
    }

    /// Group `g`'s factor: the stored one, or made from the sums.
    pub fn factor_of(&self, g: usize) -> Result<std::borrow::Cow<'_, Factor>, GptqError> {
        let kk = self.k * self.k;
        match self.factors.get(g) {
            Some(f) => Ok(std::borrow::Cow::Borrowed(f)),
            None => match self.sums.get(g * kk..(g + 1) * kk) {
                Some(h) => Ok(std::borrow::Cow::Owned(factor(h, self.k)?)),
                None => Err(GptqError::Shape(format!("no Gram matrix for group {g}"))),
            },
        }
    }
}

/// Damping added to H's diagonal, as a fraction of its mean (GPTQ's `percdamp`).
pub const DAMP: f64 = 0.01;

/// The weights the quantized model's inputs should multiply (asymmetric calibration, as in
/// GPTAQ: Li et al., "GPTAQ: Efficient Finetuning-Free Quantization for Asymmetric
/// Calibration", ICML 2025): a layer reads X̃, the inputs the quantized layers before it and
/// its own input rounding make, not the float X. With C = Σ x x̃ᵀ and H̃ = Σ x̃ x̃ᵀ over
/// the same patches, the row w* nearest w (ridge λ: `ridge` times H̃'s mean diagonal, at least
/// GPTQ's [`DAMP`], and more where H̃ is not positive definite) that maps X̃ to w X is
///
/// ```text
/// minimise ‖w X − w* X̃‖² + λ ‖w* − w‖²   ⇒   w* = w M,   M = (C + λI)(H̃ + λI)⁻¹
/// ```
///
/// and ‖w X − q X̃‖² = ‖(w* − q) X̃‖² + const, so GPTQ then rounds w* with H̃. M = I where
/// X̃ = X; where X̃ = a·X (an input read a factor a too small), M = I/a in the limit λ → 0.
pub fn target_map(hq: &[f64], cross: &[f64], k: usize, ridge: f64) -> Result<Vec<f64>, GptqError> {
    if hq.len() != k * k || cross.len() != k * k {
        return Err(GptqError::Shape(format!(
            "{} and {} Gram entries for k = {k}",
            hq.len(),
            cross.len()
        )));
    }
    if !hq.iter().chain(cross).all(|v| v.is_finite()) {
        return Err(GptqError::NotFinite);
    }
    let live: Vec<f64> = (0..k).map(|i| hq[i * k + i]).filter(|d| *d > 0.0).collect();
    let mean = match live.len() {
        0 => 1.0,
        n => live.iter().sum::<f64>() / n as f64,
    };
    let mut damp = ridge.max(DAMP);
    let li = loop {
        let mut a = hq.to_vec();
        (0..k).for_each(|i| a[i * k + i] += damp * mean);
        if let Some(l) = super::cholesky::cholesky(&a, k) {
            break super::cholesky::invert_lower(&l, k);
        }
        if damp >= 1.0 {
            return Err(GptqError::NotPositiveDefinite(damp));
        }
        damp *= 10.0;
    };
    // (H̃ + λI)⁻¹ = Liᵀ Li: M = ((C + λI) Liᵀ) Li
    let mut b = cross.to_vec();
    (0..k).for_each(|i| b[i * k + i] += damp * mean);
    let t = product(k, k, k, &b, &li, (1, k));
    Ok(product(k, k, k, &t, &li, (k, 1)))
}

/// lhs (m × k, row-major) · rhs (k × n, with its (row, column) strides), on one thread in an
/// order fixed by the shapes: 0 − (−lhs) · rhs, the GEMM there is being one that subtracts.
fn product(m: usize, n: usize, k: usize, lhs: &[f64], rhs: &[f64], rhs_strides: (usize, usize)) -> Vec<f64> {
    let neg: Vec<f64> = lhs[..m * k].iter().map(|v| -v).collect();
    let mut out = vec![0f64; m * n];
    super::gemm_f64::gemm_f64_subtract(m, n, k, &mut out, n, &neg, (k, 1), rhs, rhs_strides);
    out
}

/// Rows w (r × k, row-major) moved by a [`target_map`] M (k × k) to w M.
pub fn moved_rows(w: &[f64], m: &[f64], k: usize) -> Vec<f64> {
    product(w.len() / k.max(1), k, k, w, m, (k, 1))
}

/// How far `rows` (r × k, row-major) land from the float layer's output on a set of inputs
/// they were not fitted on, summed over the rows: Σ (v·x̃ − w·x)² less the constant Σ (w·x)²,
/// from that set's H̃ = Σ x̃ x̃ᵀ and C = Σ x x̃ᵀ (`hq`, `cross`) and the float rows `w`.
/// Between candidates for the same `w` (w M at each ridge, and w itself) the least is the one
/// that carries to other inputs.
///
/// ```text
/// Σ (v·x̃ − w·x)² = v H̃ vᵀ − 2 w C vᵀ + w H wᵀ
/// ```
pub fn held_out_error(rows: &[f64], w: &[f64], hq: &[f64], cross: &[f64], k: usize) -> Result<f64, GptqError> {
    let r = rows.len() / k.max(1);
    if k == 0 || rows.len() != r * k || w.len() != rows.len() || hq.len() != k * k || cross.len() != k * k {
        return Err(GptqError::Shape(format!(
            "{} candidate and {} float weights, {} and {} Gram entries for k = {k}",
            rows.len(),
            w.len(),
            hq.len(),
            cross.len()
        )));
    }
    let (vh, wc) = (product(r, k, k, rows, hq, (k, 1)), product(r, k, k, w, cross, (k, 1)));
    let e: f64 = vh.iter().zip(&wc).zip(rows).map(|((a, b), v)| (a - 2.0 * b) * v).sum();
    if e.is_finite() {
        Ok(e)
    } else {
        Err(GptqError::NotFinite)
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GptqError {
    #[error("the Gram matrix is not positive definite, even damped by {0:.0e} of its mean diagonal")]
    NotPositiveDefinite(f64),
    #[error("the Gram matrix holds NaN or infinity")]
    NotFinite,
    #[error("{0}")]
    Shape(String),
}

/// The upper Cholesky factor U of H⁻¹ (H⁻¹ = UᵀU), without forming H⁻¹: with P the order
/// reversal, chol(P H P) = L gives H⁻¹ = P L⁻ᵀ L⁻¹ P = (P L⁻¹ P)ᵀ (P L⁻¹ P), and P L⁻¹ P is
/// upper triangular with a positive diagonal — the unique factor.
pub fn upper_cholesky_of_inverse(h: &[f64], n: usize) -> Option<Vec<f64>> {
    upper_from_reversed(&reversed(h, n), n)
}

/// P M P for the order reversal P: row i is row n − 1 − i read backwards.
fn reversed(m: &[f64], n: usize) -> Vec<f64> {
    let mut out = Vec::with_capacity(n * n);
    for i in (0..n).rev() {
        out.extend(m[i * n..(i + 1) * n].iter().rev());
    }
    out
}

/// [`upper_cholesky_of_inverse`] of H given as P H P.
fn upper_from_reversed(rev: &[f64], n: usize) -> Option<Vec<f64>> {
    let l = super::cholesky::cholesky(rev, n)?;
    Some(reversed(&super::cholesky::invert_lower(&l, n), n))
}

/// What GPTQ needs of a Gram matrix, computed once per layer: the column order (largest
/// H_ii first) and U, the upper Cholesky factor of the damped H⁻¹ in that order.
#[derive(Debug, Clone, PartialEq)]
pub struct Factor {
    pub order: Vec<usize>,
    pub u: Vec<f64>,
}

/// The [`Factor`] of the Gram matrix `h` (k×k). Inputs that were always 0 (H_ii = 0) are
/// decoupled from the others, so that they round to nearest and take no error.
pub fn factor(h: &[f64], k: usize) -> Result<Factor, GptqError> {
    if h.len() != k * k {
        return Err(GptqError::Shape(format!("{} Gram entries for k = {k}", h.len())));
    }
    if !h.iter().all(|v| v.is_finite()) {
        return Err(GptqError::NotFinite);
    }
    let diag: Vec<f64> = (0..k).map(|i| h[i * k + i]).collect();
    let live: Vec<bool> = diag.iter().map(|d| *d > 0.0).collect();
    // largest input energy first ("act-order"); ties by index, so the order is deterministic
    let mut order: Vec<usize> = (0..k).collect();
    order.sort_by(|&a, &b| diag[b].total_cmp(&diag[a]).then(a.cmp(&b)));
    let n_live = live.iter().filter(|l| **l).count();
    let mean = if n_live > 0 {
        order.iter().filter(|&&i| live[i]).map(|&i| diag[i]).sum::<f64>() / n_live as f64
    } else {
        1.0
    };
    // H in that order and then reversed (what the factorisation takes), a dead input
    // decoupled from the others with a unit diagonal
    let reversed_order: Vec<usize> = order.iter().rev().copied().collect();
    let hp = |damp: f64| -> Vec<f64> {
        let mut m = Vec::with_capacity(k * k);
        for (a, &i) in reversed_order.iter().enumerate() {
            let row = &h[i * k..(i + 1) * k];
            if live[i] {
                m.extend(reversed_order.iter().map(|&j| if live[j] { row[j] } else { 0.0 }));
                m[a * k + a] += damp * mean;
            } else {
                m.extend((0..k).map(|b| if a == b { 1.0 } else { 0.0 }));
            }
        }
        m
    };
    let mut damp = DAMP;
    loop {
        if let Some(u) = upper_from_reversed(&hp(damp), k) {
            return Ok(Factor { order, u });
        }
        if damp >= 1.0 {
            return Err(GptqError::NotPositiveDefinite(damp));
        }
        damp *= 10.0;
    }
}

/// Rounds each row of `w` (`rows` × `k`, row-major) to its grid (`grids[r]`) by GPTQ, given the
/// [`Factor`] of the Gram matrix of the inputs the rows multiply. On return `w` holds each
/// row's dequantized values, exactly on its grid; the levels are returned in the same order.
pub fn round_rows(w: &mut [f64], rows: usize, k: usize, f: &Factor, grids: &[Grid]) -> Result<Vec<i64>, GptqError> {
    if w.len() != rows * k || f.order.len() != k || f.u.len() != k * k || grids.len() != rows {
        return Err(GptqError::Shape(format!(
            "{} weights, a factor of {} and {} grids for {rows} rows of {k}",
            w.len(),
            f.order.len(),
            grids.len()
        )));
    }
    let (order, u) = (&f.order, &f.u);
    let mut levels = vec![0i64; rows * k];
    let mut row = vec![0f64; k];
    for r in 0..rows {
        let g = &grids[r];
        for (a, &i) in order.iter().enumerate() {
            row[a] = w[r * k + i];
        }
        for a in 0..k {
            let q = g.level(row[a]);
            let v = g.value(q);
            let e = (row[a] - v) / u[a * k + a];
            row[a] = v;
            levels[r * k + order[a]] = q;
            if e != 0.0 {
                let ur = &u[a * k + a + 1..(a + 1) * k];
                row[a + 1..].iter_mut().zip(ur).for_each(|(x, uij)| *x -= e * uij);
            }
        }
        for (a, &i) in order.iter().enumerate() {
            w[r * k + i] = row[a];
        }
    }
    Ok(levels)
}

/// [`factor`] then [`round_rows`]: `w` rounded by GPTQ given the Gram matrix `h` itself.
pub fn gptq_round(w: &mut [f64], rows: usize, k: usize, h: &[f64], grids: &[Grid]) -> Result<Vec<i64>, GptqError> {
    if w.len() != rows * k || grids.len() != rows {
        return Err(GptqError::Shape(format!(
            "{} weights and {} grids for {rows} rows of {k}",
            w.len(),
            grids.len()
        )));
    }
    round_rows(w, rows, k, &factor(h, k)?, grids)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn grid(scale: f64) -> Grid {
        Grid {
            scale,
            zero_point: 0,
            qmin: -127,
            qmax: 127,
        }
    }

    /// A seeded stream of values in [-1, 1).
    /// Deterministic values in [−1, 1).
    pub(crate) fn noise(seed: u64, n: usize) -> Vec<f64> {
        let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (0..n)
            .map(|_| {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (s >> 11) as f64 / (1u64 << 52) as f64 - 1.0
            })
            .collect()
    }

    #[test]
    fn the_factor_is_the_upper_cholesky_factor_of_the_inverse() {
        let n = 5;
        let x = noise(7, n * 40);
        let mut h = vec![0f64; n * n];
        for p in 0..40 {
            for i in 0..n {
                for j in 0..n {
                    h[i * n + j] += x[p * n + i] * x[p * n + j];
                }
            }
        }
        let u = upper_cholesky_of_inverse(&h, n).unwrap();
        for i in 0..n {
            assert!(u[i * n + i] > 0.0);
            for j in 0..i {
                assert_eq!(u[i * n + j], 0.0, "U is upper triangular");
            }
        }
        // UᵀU H = I
        for i in 0..n {
            for j in 0..n {
                let v: f64 = (0..n)
                    .map(|m| (0..n).map(|p| u[p * n + i] * u[p * n + m]).sum::<f64>() * h[m * n + j])
                    .sum();
                assert!((v - if i == j { 1.0 } else { 0.0 }).abs() < 1e-9, "({i},{j}): {v}");
            }
        }
    }

    #[test]
    fn uncorrelated_inputs_round_to_nearest() {
        // a diagonal H: no column's error can be made up by another
        let (rows, k) = (3, 4);
        let h: Vec<f64> = (0..k * k)
            .map(|i| if i % (k + 1) == 0 { 1.0 + i as f64 } else { 0.0 })
            .collect();
        let w0 = noise(3, rows * k);
        let grids = vec![grid(0.01), grid(0.003), grid(0.02)];
        let mut w = w0.clone();
        let q = gptq_round(&mut w, rows, k, &h, &grids).unwrap();
        for r in 0..rows {
            for c in 0..k {
                assert_eq!(q[r * k + c], grids[r].level(w0[r * k + c]));
                assert_eq!(w[r * k + c], grids[r].value(q[r * k + c]));
            }
        }
    }

    #[test]
    fn correlated_inputs_give_a_smaller_output_error_than_nearest() {
        // inputs with a strong common component, as neighbouring pixels or channels have
        let (rows, k, n) = (8, 16, 400);
        let base = noise(11, n);
        let own = noise(12, n * k);
        let x: Vec<f64> = (0..n * k).map(|i| base[i / k] + 0.2 * own[i]).collect();
        let mut h = vec![0f64; k * k];
        for p in 0..n {
            for i in 0..k {
                for j in 0..k {
                    h[i * k + j] += x[p * k + i] * x[p * k + j];
                }
            }
        }
        let w0 = noise(13, rows * k);
        let grids: Vec<Grid> = (0..rows).map(|_| grid(1.0 / 64.0)).collect();
        let mut w = w0.clone();
        let q = gptq_round(&mut w, rows, k, &h, &grids).unwrap();
        let err = |wq: &dyn Fn(usize) -> f64| -> f64 {
            (0..rows)
                .map(|r| {
                    (0..n)
                        .map(|p| {
                            (0..k)
                                .map(|c| (w0[r * k + c] - wq(r * k + c)) * x[p * k + c])
                                .sum::<f64>()
                                .powi(2)
                        })
                        .sum::<f64>()
                })
                .sum()
        };
        let nearest = err(&|i| grids[i / k].value(grids[i / k].level(w0[i])));
        let gptq = err(&|i| w[i]);
        assert!(q.iter().all(|v| (-127..=127).contains(v)));
        assert!(gptq < 0.5 * nearest, "GPTQ {gptq} against nearest {nearest}");
    }

    #[test]
    fn a_factorized_gram_rounds_as_its_sums_do() {
        let (k, n) = (6, 50);
        let x = noise(21, n * k * 2);
        let mut sums = vec![0f64; 2 * k * k];
        for g in 0..2 {
            for p in 0..n {
                for i in 0..k {
                    for j in 0..k {
                        sums[g * k * k + i * k + j] += x[(g * n + p) * k + i] * x[(g * n + p) * k + j];
                    }
                }
            }
        }
        let plain = Gram {
            groups: 2,
            k,
            sums,
            patches: n as u64,
            factors: Vec::new(),
            targets: Vec::new(),
        };
        let mut factored = plain.clone();
        factored.factorize().unwrap();
        assert!(factored.sums.is_empty() && factored.factors.len() == 2);
        for g in 0..2 {
            assert_eq!(*plain.factor_of(g).unwrap(), *factored.factor_of(g).unwrap());
        }
        assert!(factored.factor_of(2).is_err());
    }

    /// Σ a bᵀ over n patches of k (rows of `a` and `b`).
    fn cross_sum(a: &[f64], b: &[f64], n: usize, k: usize) -> Vec<f64> {
        let mut s = vec![0f64; k * k];
        for p in 0..n {
            for i in 0..k {
                for j in 0..k {
                    s[i * k + j] += a[p * k + i] * b[p * k + j];
                }
            }
        }
        s
    }

    #[test]
    fn the_target_map_is_the_identity_where_the_inputs_are_float() {
        let (k, n) = (7, 60);
        let x = noise(31, n * k);
        let h = cross_sum(&x, &x, n, k);
        let m = target_map(&h, &h, k, DAMP).unwrap();
        for i in 0..k {
            for j in 0..k {
                let want = if i == j { 1.0 } else { 0.0 };
                assert!((m[i * k + j] - want).abs() < 1e-9, "({i},{j}): {}", m[i * k + j]);
            }
        }
    }

    #[test]
    fn the_target_map_solves_its_ridge_normal_equations() {
        // M (H̃ + λI) = C + λI, with X̃ a distorted copy of X: a gain, a leak between inputs, noise
        let (k, n) = (6, 80);
        let x = noise(41, n * k);
        let e = noise(42, n * k);
        let xq: Vec<f64> = (0..n * k)
            .map(|i| 0.9 * x[i] + 0.1 * x[(i / k) * k + (i + 1) % k] + 0.05 * e[i])
            .collect();
        let (hq, c) = (cross_sum(&xq, &xq, n, k), cross_sum(&x, &xq, n, k));
        let m = target_map(&hq, &c, k, DAMP).unwrap();
        let lambda = DAMP * (0..k).map(|i| hq[i * k + i]).sum::<f64>() / k as f64;
        for i in 0..k {
            for j in 0..k {
                let lhs: f64 = (0..k).map(|a| m[i * k + a] * hq[a * k + j]).sum::<f64>() + lambda * m[i * k + j];
                let rhs = c[i * k + j] + if i == j { lambda } else { 0.0 };
                assert!(
                    (lhs - rhs).abs() < 1e-8 * rhs.abs().max(1.0),
                    "({i},{j}): {lhs} against {rhs}"
                );
            }
        }
        // and the weights it gives make up most of the distortion: ‖w X − w M X̃‖ ≪ ‖w X − w X̃‖
        let w = noise(43, k);
        let out = |row: &[f64], v: &[f64], p: usize| (0..k).map(|i| row[i] * v[p * k + i]).sum::<f64>();
        let wm: Vec<f64> = (0..k).map(|j| (0..k).map(|a| w[a] * m[a * k + j]).sum()).collect();
        let before: f64 = (0..n).map(|p| (out(&w, &x, p) - out(&w, &xq, p)).powi(2)).sum();
        let after: f64 = (0..n).map(|p| (out(&w, &x, p) - out(&wm, &xq, p)).powi(2)).sum();
        assert!(after < 0.1 * before, "{after} against {before}");
    }

    #[test]
    fn the_held_out_error_is_the_squared_output_error_less_the_float_output() {
        let (k, n, r) = (5, 40, 3);
        let x = noise(51, n * k);
        let e = noise(52, n * k);
        let xq: Vec<f64> = (0..n * k).map(|i| 0.8 * x[i] + 0.1 * e[i]).collect();
        let (hq, c) = (cross_sum(&xq, &xq, n, k), cross_sum(&x, &xq, n, k));
        let (w, v) = (noise(53, r * k), noise(54, r * k));
        let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(p, q)| p * q).sum::<f64>();
        let mut want = 0.0;
        for row in 0..r {
            let (wr, vr) = (&w[row * k..(row + 1) * k], &v[row * k..(row + 1) * k]);
            for p in 0..n {
                let (f, q) = (dot(wr, &x[p * k..(p + 1) * k]), dot(vr, &xq[p * k..(p + 1) * k]));
                want += (q - f).powi(2) - f * f;
            }
        }
        let got = held_out_error(&v, &w, &hq, &c, k).unwrap();
        assert!((got - want).abs() < 1e-9 * want.abs().max(1.0), "{got} against {want}");
        // w itself on inputs read 0.8 too small is worse than w / 0.8
        let scaled: Vec<f64> = w.iter().map(|a| a / 0.8).collect();
        assert!(held_out_error(&scaled, &w, &hq, &c, k).unwrap() < held_out_error(&w, &w, &hq, &c, k).unwrap());
        assert!(matches!(
            held_out_error(&v[1..], &w, &hq, &c, k),
            Err(GptqError::Shape(_))
        ));
    }

    #[test]
    fn a_target_map_of_bad_sums_is_refused() {
        let nan = vec![f64::NAN, 0.0, 0.0, 1.0];
        let one = vec![1.0, 0.0, 0.0, 1.0];
        assert_eq!(target_map(&nan, &one, 2, DAMP), Err(GptqError::NotFinite));
        assert_eq!(target_map(&one, &nan, 2, DAMP), Err(GptqError::NotFinite));
        assert!(matches!(target_map(&one, &one, 3, DAMP), Err(GptqError::Shape(_))));
    }

    #[test]
    fn an_input_that_is_always_zero_rounds_to_nearest() {
        let k = 3;
        let h = vec![4.0, 1.0, 0.0, 1.0, 2.0, 0.0, 0.0, 0.0, 0.0];
        let mut w = vec![0.0123, -0.0456, 0.0789];
        let q = gptq_round(&mut w, 1, k, &h, &[grid(0.01)]).unwrap();
        assert_eq!(q[2], 8);
        assert_eq!(w[2], 0.08);
    }

    #[test]
    fn a_gram_matrix_that_is_not_one_is_refused() {
        let mut w = vec![0.1, 0.2];
        let nan = vec![f64::NAN, 0.0, 0.0, 1.0];
        assert_eq!(gptq_round(&mut w, 1, 2, &nan, &[grid(0.01)]), Err(GptqError::NotFinite));
        // eigenvalues 4 and −2: no damping up to the mean diagonal makes it definite
        let indefinite = vec![1.0, 3.0, 3.0, 1.0];
        assert!(matches!(
            gptq_round(&mut w, 1, 2, &indefinite, &[grid(0.01)]),
            Err(GptqError::NotPositiveDefinite(_))
        ));
        assert_eq!(w, vec![0.1, 0.2], "the weights are left as they were");
    }
}
