//! Cholesky factors and triangular inverses of the symmetric k×k matrices GPTQ factors (its
//! Gram matrices, k up to 4096), blocked so that their k³/3 multiply-adds each run in the GEMM
//! rather than in scalar dot products: a 1152×1152 Gram matrix (a 3×3 convolution over 128
//! channels) took 250 ms unblocked.
//!
//! ```text
//! A = [A11  .  ]   L11 = chol(A11)              (a BLOCK × BLOCK block, unblocked)
//!     [A21 A22 ]   L21 = A21 L11⁻ᵀ              (row by row, forward substitution)
//!                  A22 ← A22 − L21 L21ᵀ         (the GEMM: most of the work), then on
//! ```
//!
//! Every sum is taken in an order fixed by n alone (the GEMM runs on one thread), so the
//! factors are the same bits on every run and thread count.

use super::gemm_f64::gemm_f64_subtract;

/// Columns per block: the unblocked kernels' share of the work is about BLOCK / n.
const BLOCK: usize = 64;

/// Σ a_i b_i in four interleaved partial sums (which the compiler keeps in vector lanes;
/// one running sum would have to be added in order).
fn dot(a: &[f64], b: &[f64]) -> f64 {
    let mut acc = [0f64; 4];
    let (ca, cb) = (a.chunks_exact(4), b.chunks_exact(4));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for l in 0..4 {
            acc[l] += x[l] * y[l];
        }
    }
    let tail: f64 = ra.iter().zip(rb).map(|(x, y)| x * y).sum();
    (acc[0] + acc[1]) + (acc[2] + acc[3]) + tail
}

/// The lower Cholesky factor L of the symmetric positive definite `a` (n×n, row-major; only
/// its lower triangle is read): A = L Lᵀ, with zeros above the diagonal. None when `a` is not
/// positive definite (or holds NaN).
pub fn cholesky(a: &[f64], n: usize) -> Option<Vec<f64>> {
    assert_eq!(a.len(), n * n, "cholesky of {} values as {n}×{n}", a.len());
    let mut l = a.to_vec();
    for kb in (0..n).step_by(BLOCK) {
        let b = BLOCK.min(n - kb);
        let end = kb + b;
        // the diagonal block, whose earlier columns' terms the updates below already took off
        for i in kb..end {
            for j in kb..=i {
                let v = l[i * n + j] - dot(&l[i * n + kb..i * n + j], &l[j * n + kb..j * n + j]);
                if i == j {
                    if v.is_nan() || v <= 0.0 {
                        return None;
                    }
                    l[i * n + i] = v.sqrt();
                } else {
                    l[i * n + j] = v / l[j * n + j];
                }
            }
        }
        // the panel below it: L21 = A21 L11⁻ᵀ
        for r in end..n {
            for j in kb..end {
                let v = l[r * n + j] - dot(&l[r * n + kb..r * n + j], &l[j * n + kb..j * n + j]);
                l[r * n + j] = v / l[j * n + j];
            }
        }
        // the trailing lower triangle, a block row at a time: A22 −= L21 L21ᵀ, from a copy
        // of the panel (the GEMM writes `l` where it reads it)
        let below = n - end;
        let mut panel = Vec::with_capacity(below * b);
        for r in end..n {
            panel.extend_from_slice(&l[r * n + kb..r * n + end]);
        }
        for ib in (end..n).step_by(BLOCK) {
            let rows = BLOCK.min(n - ib);
            gemm_f64_subtract(
                rows,
                ib + rows - end,
                b,
                &mut l[ib * n + end..],
                n,
                &panel[(ib - end) * b..],
                (b, 1),
                &panel,
                (1, b),
            );
        }
    }
    for i in 0..n {
        l[i * n + i + 1..(i + 1) * n].fill(0.0);
    }
    Some(l)
}

/// Inverse of the lower-triangular `l` (n×n, nonzero diagonal), itself lower triangular, by
/// substitution: column j of the inverse is built as row j of a transposed buffer, so that the
/// inner products run along contiguous rows of both. The diagonal blocks' kernel.
fn invert_lower_unblocked(l: &[f64], n: usize) -> Vec<f64> {
    let mut t = vec![0f64; n * n];
    for j in 0..n {
        let col = &mut t[j * n..(j + 1) * n];
        col[j] = 1.0 / l[j * n + j];
        for i in j + 1..n {
            let s = dot(&l[i * n + j..i * n + i], &col[j..i]);
            col[i] = -s / l[i * n + i];
        }
    }
    (0..n * n).map(|i| t[(i % n) * n + i / n]).collect()
}

/// Inverse of the lower-triangular `l` (n×n, nonzero diagonal), itself lower triangular:
///
/// ```text
/// X_jj = L_jj⁻¹                               (each diagonal block, unblocked)
/// X_ij = −X_ii · Σ_{j ≤ m < i} L_im X_mj      (i > j: one GEMM for the sum, one for X_ii)
/// ```
pub fn invert_lower(l: &[f64], n: usize) -> Vec<f64> {
    assert_eq!(l.len(), n * n, "inverse of {} values as {n}×{n}", l.len());
    let mut x = vec![0f64; n * n];
    let starts: Vec<usize> = (0..n).step_by(BLOCK).collect();
    let size = |s: usize| BLOCK.min(n - s);
    // each diagonal block's inverse, kept apart too: the GEMM reads it while writing `x`
    let diagonal: Vec<Vec<f64>> = starts
        .iter()
        .map(|&s| {
            let b = size(s);
            let block: Vec<f64> = (0..b * b).map(|i| l[(s + i / b) * n + s + i % b]).collect();
            invert_lower_unblocked(&block, b)
        })
        .collect();
    for (&s, inv) in starts.iter().zip(&diagonal) {
        let b = size(s);
        for r in 0..b {
            x[(s + r) * n + s..(s + r) * n + s + b].copy_from_slice(&inv[r * b..(r + 1) * b]);
        }
    }
    let mut sum = vec![0f64; BLOCK * BLOCK];
    for (jn, &js) in starts.iter().enumerate() {
        let bj = size(js);
        for (inn, &is) in starts.iter().enumerate().skip(jn + 1) {
            let bi = size(is);
            // sum ← 0 − Σ_m L_im X_mj over the rows js..is of X (block column j), then negated
            sum[..bi * bj].fill(0.0);
            gemm_f64_subtract(
                bi,
                bj,
                is - js,
                &mut sum,
                bj,
                &l[is * n + js..],
                (n, 1),
                &x[js * n + js..],
                (n, 1),
            );
            sum[..bi * bj].iter_mut().for_each(|v| *v = -*v);
            // X_ij ← 0 − X_ii · sum, into the zeros of X_ij
            gemm_f64_subtract(
                bi,
                bj,
                bi,
                &mut x[is * n + js..],
                n,
                &diagonal[inn],
                (bi, 1),
                &sum,
                (bj, 1),
            );
        }
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A seeded symmetric positive definite n×n matrix: Σ of 2n + 3 outer products.
    fn spd(seed: u64, n: usize) -> Vec<f64> {
        let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let mut next = || {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (s >> 11) as f64 / (1u64 << 52) as f64 - 1.0
        };
        let m = 2 * n + 3;
        let x: Vec<f64> = (0..m * n).map(|_| next()).collect();
        let mut a = vec![0f64; n * n];
        for p in 0..m {
            for i in 0..n {
                for j in 0..n {
                    a[i * n + j] += x[p * n + i] * x[p * n + j];
                }
            }
        }
        a
    }

    fn product(a: &[f64], b: &[f64], n: usize, transpose_b: bool) -> Vec<f64> {
        let mut c = vec![0f64; n * n];
        for i in 0..n {
            for j in 0..n {
                c[i * n + j] = (0..n)
                    .map(|m| a[i * n + m] * if transpose_b { b[j * n + m] } else { b[m * n + j] })
                    .sum();
            }
        }
        c
    }

    fn max_diff(a: &[f64], b: &[f64]) -> f64 {
        a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max)
    }

    #[test]
    fn the_factor_times_its_transpose_is_the_matrix_across_block_edges() {
        // one block, one block exactly, a column past it, several blocks with a ragged end
        for n in [1, 5, 64, 65, 130, 200] {
            let a = spd(n as u64, n);
            let l = cholesky(&a, n).unwrap();
            for i in 0..n {
                assert!(l[i * n + i] > 0.0, "n {n}: positive diagonal");
                assert!(l[i * n + i + 1..(i + 1) * n].iter().all(|v| *v == 0.0), "n {n}: lower");
            }
            let scale = a.iter().fold(0.0, |m: f64, v| m.max(v.abs()));
            let err = max_diff(&product(&l, &l, n, true), &a);
            assert!(err < 1e-12 * scale * n as f64, "n {n}: L Lᵀ − A = {err}");
        }
    }

    #[test]
    fn the_inverse_times_the_factor_is_the_identity_across_block_edges() {
        for n in [1, 5, 64, 65, 130, 200] {
            let l = cholesky(&spd(100 + n as u64, n), n).unwrap();
            let x = invert_lower(&l, n);
            for i in 0..n {
                assert!(x[i * n + i + 1..(i + 1) * n].iter().all(|v| *v == 0.0), "n {n}: lower");
            }
            let eye: Vec<f64> = (0..n * n).map(|i| if i % (n + 1) == 0 { 1.0 } else { 0.0 }).collect();
            let err = max_diff(&product(&x, &l, n, false), &eye);
            assert!(err < 1e-9, "n {n}: X L − I = {err}");
            // the blocked inverse agrees with plain substitution to rounding
            let plain = invert_lower_unblocked(&l, n);
            let scale = plain.iter().fold(0.0, |m: f64, v| m.max(v.abs()));
            assert!(max_diff(&x, &plain) < 1e-11 * scale, "n {n}");
        }
    }

    #[test]
    fn a_matrix_that_is_not_positive_definite_has_no_factor() {
        // eigenvalues 4 and −2; and a NaN past the first block, found there
        assert_eq!(cholesky(&[1.0, 3.0, 3.0, 1.0], 2), None);
        let n = 70;
        let mut a = spd(9, n);
        a[69 * n + 69] = f64::NAN;
        assert_eq!(cholesky(&a, n), None);
    }

    #[test]
    fn the_same_matrix_gives_the_same_bits() {
        let n = 150;
        let a = spd(5, n);
        let (l1, l2) = (cholesky(&a, n).unwrap(), cholesky(&a, n).unwrap());
        assert_eq!(l1, l2);
        assert_eq!(invert_lower(&l1, n), invert_lower(&l2, n));
    }
}
