//! The one f64 GEMM quantir needs: the O(k³) updates of GPTQ's blocked Cholesky factor and
//! triangular inverse (`params::cholesky`), through the `gemm` crate's raw-pointer API behind a
//! bounds-checked slice one.

/// The largest index `rows` × `cols` elements with strides (`rs`, `cs`) reach, from 0.
fn reach(rows: usize, cols: usize, rs: usize, cs: usize) -> usize {
    (rows - 1) * rs + (cols - 1) * cs
}

/// dst (m×n, rows `dst_rs` apart, columns adjacent) −= lhs · rhs in f64, each operand with its
/// (row, column) strides; on one thread, so the sums run in an order fixed by the shapes.
/// Panics when a stride reaches past its slice.
#[allow(clippy::too_many_arguments)]
pub fn gemm_f64_subtract(
    m: usize,
    n: usize,
    k: usize,
    dst: &mut [f64],
    dst_rs: usize,
    lhs: &[f64],
    (lhs_rs, lhs_cs): (usize, usize),
    rhs: &[f64],
    (rhs_rs, rhs_cs): (usize, usize),
) {
    if m == 0 || n == 0 || k == 0 {
        return;
    }
    assert!(
        reach(m, n, dst_rs, 1) < dst.len()
            && reach(m, k, lhs_rs, lhs_cs) < lhs.len()
            && reach(k, n, rhs_rs, rhs_cs) < rhs.len(),
        "gemm_f64_subtract: {m}×{k} · {k}×{n} past its operands"
    );
    // SAFETY: every index is inside its slice (checked above); dst is a distinct &mut, so it
    // aliases neither operand; gemm computes dst = 1·dst + (−1)·lhs·rhs
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            dst_rs as isize,
            true,
            lhs.as_ptr(),
            lhs_cs as isize,
            lhs_rs as isize,
            rhs.as_ptr(),
            rhs_cs as isize,
            rhs_rs as isize,
            1.0,
            -1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        )
    }
}
