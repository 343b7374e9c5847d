//! Products against a constant right-hand matrix packed once, with the epilogue applied in
//! registers: C = ep(A·B) for B [k × n] stored as panels of 16 columns (8 for a last run of
//! at most 8), each k rows deep, so the micro-kernel reads B contiguously, nothing is packed
//! per call, and each tile of C is scaled, biased, activated and stored once.
//!
//! A convolution's filter is such a matrix (HWIO is [kh·kw·ci, co] row-major), and so is a
//! MatMul's constant weight: the kernel packs it on its first run ([`PackOnce`]) and every
//! sample reuses it.
//!
//! Every result is Σₖ a[i,k]·b[k,j] accumulated in k order by fused multiply-adds from +0, on
//! every path (AVX2 + FMA, or portable `mul_add`): results depend neither on the CPU, nor on
//! blocking, nor on where a tile falls.

use super::elementwise::unary_fn;
use super::epilogue::{Columns, Epilogue};
use std::borrow::Cow;

/// Rows of A (and of C) one micro-kernel call computes against a 16-wide panel: 6 × 2
/// accumulators of 8 columns.
const MR: usize = 6;
/// Rows against an 8-wide panel: 12 × 1 accumulators, as many independent add chains.
const MR_NARROW: usize = 12;
/// Widest panel: two AVX vectors.
const NR: usize = 16;

/// B [k × n] in panels of [`NR`] columns, the last one 8 wide when at most 8 columns are left;
/// columns past n are zeros.
#[derive(Debug, Clone)]
pub struct PackedMatrix {
    k: usize,
    n: usize,
    data: Vec<f32>,
}

impl PackedMatrix {
    /// Packs the row-major `b` of `k` rows and `n` columns; `None` when `b` does not hold
    /// k·n values.
    pub fn new(b: &[f32], k: usize, n: usize) -> Option<Self> {
        if b.len() != k.checked_mul(n)? {
            return None;
        }
        let mut data = Vec::with_capacity(k * n.next_multiple_of(8));
        for (j0, w) in panels(n) {
            for row in b.chunks_exact(n.max(1)).take(k) {
                let valid = w.min(n - j0);
                data.extend_from_slice(&row[j0..j0 + valid]);
                data.extend(std::iter::repeat_n(0.0, w - valid));
            }
        }
        Some(PackedMatrix { k, n, data })
    }

    /// `given` when it is a packing of k × n (a constant's, made once), else `b` packed now
    /// (a filter that is a run-time operand); `None` when `b` does not hold k·n values.
    pub fn given_or_packed<'a>(
        given: Option<&'a PackedMatrix>,
        b: &[f32],
        k: usize,
        n: usize,
    ) -> Option<Cow<'a, PackedMatrix>> {
        match given {
            Some(p) if (p.k, p.n) == (k, n) => Some(Cow::Borrowed(p)),
            _ => PackedMatrix::new(b, k, n).map(Cow::Owned),
        }
    }
}

/// A constant matrix packed on first use, once for every sample and thread: type inference
/// compiles programs whose products never run, and a product the packed GEMM does not take
/// (a large B against many rows) should not hold a second copy of its weights.
#[derive(Debug, Default)]
pub struct PackOnce(std::sync::OnceLock<Option<PackedMatrix>>);

impl PackOnce {
    /// The packed matrix, made by `pack` on the first call (`None` stays `None`).
    pub fn get(&self, pack: impl FnOnce() -> Option<PackedMatrix>) -> Option<&PackedMatrix> {
        self.0.get_or_init(pack).as_ref()
    }

    /// Whether a matrix has been packed (tests check which path a product took).
    pub fn is_packed(&self) -> bool {
        matches!(self.0.get(), Some(Some(_)))
    }
}

/// (first column, width) of each panel of a matrix of `n` columns.
fn panels(n: usize) -> impl Iterator<Item = (usize, usize)> {
    let mut j0 = 0;
    std::iter::from_fn(move || {
        (j0 < n).then(|| {
            let w = if n - j0 > 8 { NR } else { 8 };
            j0 += w;
            (j0 - w, w)
        })
    })
}

/// Rows of A per outer block: that block (m·k values) stays in L2 while every panel of B
/// passes over it.
pub(super) fn row_block(k: usize) -> usize {
    (16 * 1024 / k.max(1)).clamp(MR_NARROW, 50 * MR_NARROW) / MR_NARROW * MR_NARROW
}

/// Where A and C lie: element (i, j) of a matrix at `base + i·rs + j·cs`.
#[derive(Debug, Clone, Copy)]
pub struct Strides {
    pub rs: isize,
    pub cs: isize,
}

/// How one row of A lies: `count` runs of `len` contiguous values, run r from `r · stride`
/// after the row's start (count · len = k). A convolution's windows over an NHWC image are
/// such rows, read in place: one run per filter row, `kw · ci` values each, `dh · W · ci`
/// apart; a plain matrix row is one run of k.
///
/// ```text
/// image rows iy, iy+1, iy+2 (W·ci values each); pixel ox's window (kw = 3, ci = 3):
///   row(ox) = [x(iy, ox..ox+3, :) | x(iy+1, ox..ox+3, :) | x(iy+2, ox..ox+3, :)]   (k = 27)
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Runs {
    pub count: usize,
    pub len: usize,
    pub stride: isize,
}

impl Runs {
    /// The offset of each of the k values from the row's start, in k order.
    fn offsets(&self) -> Vec<isize> {
        (0..self.count as isize)
            .flat_map(|r| (0..self.len as isize).map(move |l| r * self.stride + l))
            .collect()
    }

    /// A row of `k` contiguous values.
    pub fn whole(k: usize) -> Runs {
        Runs {
            count: 1,
            len: k,
            stride: 0,
        }
    }
}

/// C[m × n] = ep(A[m × k] · B), A and C through their strides; every value of C is written,
/// none read. An error when the epilogue does not have one value per column.
///
/// # Safety
/// For every i < m, j < n, k' < k: `a + i·a.rs + k'·a.cs` is readable and `c + i·c.rs + j·c.cs`
/// writable, and the C positions are distinct and do not overlap A.
pub unsafe fn gemm_packed(
    m: usize,
    a: *const f32,
    a_strides: Strides,
    b: &PackedMatrix,
    c: *mut f32,
    c_strides: Strides,
    ep: Option<&Epilogue>,
) -> Result<(), String> {
    gemm_blocks(m, a, a_strides, Runs::whole(b.k), b, c, c_strides, ep)
}

/// [`gemm_packed`] with each row of A in `runs` (`a_rs` apart): the same sums in the same
/// k order as over the rows laid out whole, without copying them. An error when the runs do
/// not hold k values or the epilogue does not have one value per column.
///
/// # Safety
/// For every i < m, r < runs.count, l < runs.len, j < n: `a + i·a_rs + r·runs.stride + l` is
/// readable and `c + i·c.rs + j·c.cs` writable, and the C positions are distinct and do not
/// overlap A.
#[allow(clippy::too_many_arguments)]
pub unsafe fn gemm_packed_runs(
    m: usize,
    a: *const f32,
    a_rs: isize,
    runs: Runs,
    b: &PackedMatrix,
    c: *mut f32,
    c_strides: Strides,
    ep: Option<&Epilogue>,
) -> Result<(), String> {
    if runs.count * runs.len != b.k {
        return Err(format!(
            "{} runs of {} values for a product over {}",
            runs.count, runs.len, b.k
        ));
    }
    gemm_blocks(m, a, Strides { rs: a_rs, cs: 1 }, runs, b, c, c_strides, ep)
}

/// The blocked product of [`gemm_packed`] and [`gemm_packed_runs`]; `runs` is
/// [`Runs::whole`] unless A's columns are next to each other (`cs` = 1).
#[allow(clippy::too_many_arguments)]
unsafe fn gemm_blocks(
    m: usize,
    a: *const f32,
    a_strides: Strides,
    runs: Runs,
    b: &PackedMatrix,
    c: *mut f32,
    c_strides: Strides,
    ep: Option<&Epilogue>,
) -> Result<(), String> {
    debug_assert!(a_strides.cs == 1 || runs == Runs::whole(b.k));
    if let Some(e) = ep {
        e.check(b.n)?;
    }
    if m == 0 || b.n == 0 {
        return Ok(());
    }
    let cols = Columns::new(ep, b.n);
    let offsets = (runs != Runs::whole(b.k)).then(|| runs.offsets());
    #[cfg(target_arch = "x86_64")]
    let fast = std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma");
    #[cfg(not(target_arch = "x86_64"))]
    let fast = false;
    let block = row_block(b.k);
    // A whose rows are not contiguous (an NCHW image: a pixel's channels H·W apart) is copied
    // a block at a time into rows of k, so that the kernel's loads walk along its rows; read
    // through its strides, every k would touch another cache line (and page)
    let mut rows_of_a = if a_strides.cs == 1 {
        Vec::new()
    } else {
        vec![0f32; block.min(m) * b.k]
    };
    for i0 in (0..m).step_by(block) {
        let i1 = (i0 + block).min(m);
        // row i0 of A and the distance between rows, columns next to each other
        let (a_block, a_rs) = if a_strides.cs == 1 {
            (a.offset(i0 as isize * a_strides.rs), a_strides.rs)
        } else {
            let first = a.offset(i0 as isize * a_strides.rs);
            copy_into_rows(first, a_strides, i1 - i0, b.k, &mut rows_of_a, fast);
            (rows_of_a.as_ptr(), b.k as isize)
        };
        let mut offset = 0;
        for (j0, w) in panels(b.n) {
            let panel = &b.data[offset..offset + b.k * w];
            offset += b.k * w;
            let mr = if w == NR { MR } else { MR_NARROW };
            for i in (i0..i1).step_by(mr) {
                let t = Tile {
                    offsets: offsets.as_deref(),
                    rows: (i1 - i).min(mr),
                    j0,
                    width: w.min(b.n - j0),
                    a: a_block.offset((i - i0) as isize * a_rs),
                    a_rs,
                    c: c.offset(i as isize * c_strides.rs + j0 as isize * c_strides.cs),
                    c_strides,
                };
                #[cfg(target_arch = "x86_64")]
                if fast {
                    // a tile of fewer rows (the last of a block, or an A of one row) runs a
                    // kernel of that many rows: the full one would multiply the last row again
                    // for each missing one
                    // and rows in runs take their own copies of the kernels: one loop over
                    // k either way (nested loops over runs split the accumulators' live
                    // ranges: stored and reloaded at each run), and the contiguous loop keeps
                    // its plain addressing (reading offsets from a table cost it up to 45 %)
                    macro_rules! kernel_for {
                        ($runs:literal) => {
                            match (w, t.rows) {
                                (NR, 1) => avx2::tile::<1, 2, $runs>(&t, b.k, panel, &cols),
                                (NR, 2) => avx2::tile::<2, 2, $runs>(&t, b.k, panel, &cols),
                                (NR, 3) => avx2::tile::<3, 2, $runs>(&t, b.k, panel, &cols),
                                (NR, 4) => avx2::tile::<4, 2, $runs>(&t, b.k, panel, &cols),
                                (NR, _) => avx2::tile::<MR, 2, $runs>(&t, b.k, panel, &cols),
                                (_, 1) => avx2::tile::<1, 1, $runs>(&t, b.k, panel, &cols),
                                (_, 2) => avx2::tile::<2, 1, $runs>(&t, b.k, panel, &cols),
                                (_, 3) => avx2::tile::<3, 1, $runs>(&t, b.k, panel, &cols),
                                (_, 4) => avx2::tile::<4, 1, $runs>(&t, b.k, panel, &cols),
                                _ => avx2::tile::<MR_NARROW, 1, $runs>(&t, b.k, panel, &cols),
                            }
                        };
                    }
                    match t.offsets.is_some() {
                        true => kernel_for!(true),
                        false => kernel_for!(false),
                    }
                    continue;
                }
                let _ = fast;
                portable_tile(&t, b.k, w, panel, &cols);
            }
        }
        if let Some(op) = cols.act_after() {
            let f = unary_fn(op);
            for i in i0..i1 {
                for j in 0..b.n {
                    let y = c.offset(i as isize * c_strides.rs + j as isize * c_strides.cs);
                    *y = f(*y);
                }
            }
        }
    }
    Ok(())
}

/// Rows `0..m` of A (element (i, k') at `a + i·rs + k'·cs`) into `rows` as m rows of k.
/// Where A's rows are next to each other (an NCHW image: `rs` = 1) and AVX2 is there
/// (`fast`), 8 × 8 blocks are transposed in registers, so that neither the reads nor the
/// writes go one value at a time; the rest value by value.
///
/// # Safety
/// Every (i, k') with i < m, k' < k must be readable; `rows` holds at least m·k values.
unsafe fn copy_into_rows(a: *const f32, s: Strides, m: usize, k: usize, rows: &mut [f32], fast: bool) {
    assert!(rows.len() >= m * k);
    let (mut m8, mut k8) = (0, 0);
    #[cfg(target_arch = "x86_64")]
    if fast && s.rs == 1 {
        (m8, k8) = (m / 8 * 8, k / 8 * 8);
        for kk in (0..k8).step_by(8) {
            for i in (0..m8).step_by(8) {
                avx2::transpose_8x8(
                    a.offset(i as isize + kk as isize * s.cs),
                    s.cs,
                    rows.as_mut_ptr().add(i * k + kk),
                    k,
                );
            }
        }
    }
    let _ = fast;
    for kk in 0..k {
        // the values the blocks left: rows past m8 of every column, columns past k8 of all
        let from = if kk < k8 { m8 } else { 0 };
        let src = a.offset(kk as isize * s.cs);
        for i in from..m {
            rows[i * k + kk] = *src.offset(i as isize * s.rs);
        }
    }
}

/// One micro-kernel call: `rows` ≤ [`MR`] (or [`MR_NARROW`]) rows of A from `a`, one panel
/// of `width` valid columns from column `j0`, into C at `c`.
struct Tile<'o> {
    /// Where A's k values lie from the start of each row ([`Runs::offsets`]); `None` for
    /// contiguous rows.
    offsets: Option<&'o [isize]>,
    rows: usize,
    j0: usize,
    width: usize,
    /// Row 0 of A's rows, each `a_rs` apart and contiguous.
    a: *const f32,
    a_rs: isize,
    c: *mut f32,
    c_strides: Strides,
}

/// [`Tile`] without SIMD: the same fused multiply-adds in the same order.
unsafe fn portable_tile(t: &Tile<'_>, k: usize, w: usize, panel: &[f32], cols: &Columns) {
    for r in 0..t.rows {
        let row = t.a.offset(r as isize * t.a_rs);
        for j in 0..t.width {
            let mut acc = 0f32;
            for kk in 0..k {
                let at = t.offsets.map_or(kk as isize, |o| o[kk]);
                acc = (*row.offset(at)).mul_add(panel[kk * w + j], acc);
            }
            *t.c.offset(r as isize * t.c_strides.rs + j as isize * t.c_strides.cs) = cols.one(acc, t.j0 + j);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::super::epilogue::avx2::finish;
    use super::{Columns, Tile};
    use std::arch::x86_64::*;

    /// `R` rows × `NV` vectors of 8 columns: R·NV accumulators in registers, B's panel row
    /// loaded once per k and each A value broadcast once per k. Rows past `t.rows` re-read
    /// the last row and are not stored. (Loops, not closures: a closure would not inherit
    /// the target features, and each intrinsic in it would become a call.)
    #[target_feature(enable = "avx2,fma")]
    #[allow(clippy::needless_range_loop)]
    pub(super) unsafe fn tile<const R: usize, const NV: usize, const RUNS: bool>(
        t: &Tile<'_>,
        k: usize,
        panel: &[f32],
        cols: &Columns,
    ) {
        let mut acc = [[_mm256_setzero_ps(); R]; NV];
        let mut rows = [t.a; R];
        for (r, p) in rows.iter_mut().enumerate() {
            *p = t.a.offset(r.min(t.rows - 1) as isize * t.a_rs);
        }
        let mut bp = panel.as_ptr();
        // one step of k: A's values at offset `$at` of each row (a macro, not a closure, for
        // the target features)
        macro_rules! step {
            ($at:expr) => {{
                let at = $at;
                let mut bv = [_mm256_setzero_ps(); NV];
                for (v, b) in bv.iter_mut().enumerate() {
                    *b = _mm256_loadu_ps(bp.add(8 * v));
                }
                bp = bp.add(8 * NV);
                for r in 0..R {
                    let av = _mm256_broadcast_ss(&*rows[r].offset(at));
                    for v in 0..NV {
                        acc[v][r] = _mm256_fmadd_ps(av, bv[v], acc[v][r]);
                    }
                }
            }};
        }
        match (RUNS, t.offsets) {
            (true, Some(offsets)) => {
                debug_assert_eq!(offsets.len(), k);
                for &at in offsets {
                    step!(at);
                }
            }
            _ => {
                for kk in 0..k as isize {
                    step!(kk);
                }
            }
        }
        // constant trip counts with the bounds as conditions inside: indexed by a run-time
        // count, the accumulators would live in memory, stored on every k
        for v in 0..NV {
            let j = 8 * v;
            if j >= t.width {
                continue;
            }
            let y = finish(acc[v], cols, t.j0 + j);
            let whole = t.width - j >= 8 && t.c_strides.cs == 1;
            for r in 0..R {
                if r >= t.rows {
                    continue;
                }
                let dst = t.c.offset(r as isize * t.c_strides.rs + j as isize);
                if whole {
                    _mm256_storeu_ps(dst, y[r]);
                } else {
                    store_lanes(
                        y[r],
                        t.c.offset(r as isize * t.c_strides.rs + j as isize * t.c_strides.cs),
                        t.c_strides.cs,
                        t.width - j,
                    );
                }
            }
        }
    }

    /// The 8 × 8 block with rows `src + r·rs` (8 contiguous values each) to `dst` transposed:
    /// value (r, c) to `dst + c·ds + r`.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn transpose_8x8(src: *const f32, rs: isize, dst: *mut f32, ds: usize) {
        // (a loop, not `array::from_fn`: a closure would not inherit the target feature)
        let mut r = [_mm256_setzero_ps(); 8];
        for (i, v) in r.iter_mut().enumerate() {
            *v = _mm256_loadu_ps(src.offset(i as isize * rs));
        }
        // pairs of rows interleaved, then pairs of pairs, then the 128-bit halves
        let t = [
            _mm256_unpacklo_ps(r[0], r[1]),
            _mm256_unpackhi_ps(r[0], r[1]),
            _mm256_unpacklo_ps(r[2], r[3]),
            _mm256_unpackhi_ps(r[2], r[3]),
            _mm256_unpacklo_ps(r[4], r[5]),
            _mm256_unpackhi_ps(r[4], r[5]),
            _mm256_unpacklo_ps(r[6], r[7]),
            _mm256_unpackhi_ps(r[6], r[7]),
        ];
        let u = [
            _mm256_shuffle_ps::<0x44>(t[0], t[2]),
            _mm256_shuffle_ps::<0xEE>(t[0], t[2]),
            _mm256_shuffle_ps::<0x44>(t[1], t[3]),
            _mm256_shuffle_ps::<0xEE>(t[1], t[3]),
            _mm256_shuffle_ps::<0x44>(t[4], t[6]),
            _mm256_shuffle_ps::<0xEE>(t[4], t[6]),
            _mm256_shuffle_ps::<0x44>(t[5], t[7]),
            _mm256_shuffle_ps::<0xEE>(t[5], t[7]),
        ];
        for c in 0..4 {
            _mm256_storeu_ps(dst.add(c * ds), _mm256_permute2f128_ps::<0x20>(u[c], u[c + 4]));
            _mm256_storeu_ps(dst.add((c + 4) * ds), _mm256_permute2f128_ps::<0x31>(u[c], u[c + 4]));
        }
    }

    /// The first `n` lanes of `y` to `dst`, `cs` apart (a partial panel, or C transposed).
    #[inline(never)]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn store_lanes(y: __m256, dst: *mut f32, cs: isize, n: usize) {
        let mut lanes = [0f32; 8];
        _mm256_storeu_ps(lanes.as_mut_ptr(), y);
        for (l, &x) in lanes.iter().enumerate().take(n) {
            *dst.offset(l as isize * cs) = x;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interp::kernels::elementwise::UnOp;

    fn reference(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
        let mut c = vec![0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                let mut acc = 0f32;
                for kk in 0..k {
                    acc = a[i * k + kk].mul_add(b[kk * n + j], acc);
                }
                c[i * n + j] = acc;
            }
        }
        c
    }

    fn values(len: usize, seed: u32) -> Vec<f32> {
        (0..len)
            .map(|i| ((i as u32).wrapping_mul(2654435761).wrapping_add(seed) % 1000) as f32 / 250.0 - 2.0)
            .collect()
    }

    /// Every shape class (row tails, 8- and 16-wide panels, partial panels, k = 1, blocks of
    /// rows past one outer block): bit-identical to k-ordered fused multiply-adds, row-major
    /// and transposed C, unit and strided A.
    #[test]
    fn products_are_k_ordered_fused_sums_for_every_shape() {
        for (m, k, n) in [
            (1, 1, 1),
            (7, 3, 8),
            (13, 27, 16),
            (6, 5, 24),
            (11, 40, 21),
            (700, 30, 3),
            (5, 336, 56),
        ] {
            let (a, b) = (values(m * k, 1), values(k * n, 7));
            let want = reference(&a, &b, m, k, n);
            let p = PackedMatrix::new(&b, k, n).unwrap();
            let mut c = vec![f32::NAN; m * n];
            unsafe {
                let s = Strides { rs: k as isize, cs: 1 };
                gemm_packed(
                    m,
                    a.as_ptr(),
                    s,
                    &p,
                    c.as_mut_ptr(),
                    Strides { rs: n as isize, cs: 1 },
                    None,
                )
                .unwrap();
            }
            assert_eq!(c, want, "{m}×{k}×{n}");
            // A column-major (as an NCHW image) and C transposed
            let at: Vec<f32> = (0..m * k).map(|x| a[(x % m) * k + x / m]).collect();
            let mut ct = vec![f32::NAN; m * n];
            unsafe {
                let s = Strides { rs: 1, cs: m as isize };
                gemm_packed(
                    m,
                    at.as_ptr(),
                    s,
                    &p,
                    ct.as_mut_ptr(),
                    Strides { rs: 1, cs: m as isize },
                    None,
                )
                .unwrap();
            }
            let back: Vec<f32> = (0..m * n).map(|x| ct[(x % n) * m + x / n]).collect();
            assert_eq!(back, want, "{m}×{k}×{n} transposed");
            // rows of A in runs with gaps of NaN between them (read, they would show), on both
            // paths: the same bits
            let count = [3, 4, 2].into_iter().find(|d| k % d == 0).unwrap_or(1);
            let runs = Runs {
                count,
                len: k / count,
                stride: (k / count + 5) as isize,
            };
            let a_rs = count * (k / count + 5) + 3;
            let mut spread = vec![f32::NAN; m * a_rs];
            for i in 0..m {
                for (kk, at) in runs.offsets().into_iter().enumerate() {
                    spread[i * a_rs + at as usize] = a[i * k + kk];
                }
            }
            let mut cr = vec![f32::NAN; m * n];
            let c_rows = Strides { rs: n as isize, cs: 1 };
            unsafe {
                gemm_packed_runs(
                    m,
                    spread.as_ptr(),
                    a_rs as isize,
                    runs,
                    &p,
                    cr.as_mut_ptr(),
                    c_rows,
                    None,
                )
            }
            .unwrap();
            assert_eq!(cr, want, "{m}×{k}×{n} in {count} runs");
            let offsets = runs.offsets();
            let mut crp = vec![f32::NAN; m * n];
            let cols = Columns::new(None, n);
            let mut offset = 0;
            for (j0, w) in panels(n) {
                for i in (0..m).step_by(MR) {
                    let tile = Tile {
                        offsets: Some(&offsets),
                        rows: (m - i).min(MR),
                        j0,
                        width: w.min(n - j0),
                        a: unsafe { spread.as_ptr().add(i * a_rs) },
                        a_rs: a_rs as isize,
                        c: unsafe { crp.as_mut_ptr().add(i * n + j0) },
                        c_strides: c_rows,
                    };
                    unsafe { portable_tile(&tile, k, w, &p.data[offset..offset + k * w], &cols) };
                }
                offset += k * w;
            }
            assert_eq!(crp, want, "{m}×{k}×{n} in {count} runs, portable");
            let bad = Runs {
                count: 2,
                len: k,
                stride: 0,
            };
            let refused = unsafe {
                gemm_packed_runs(
                    m,
                    spread.as_ptr(),
                    a_rs as isize,
                    bad,
                    &p,
                    cr.as_mut_ptr(),
                    c_rows,
                    None,
                )
            };
            assert!(refused.is_err(), "runs that do not hold k values");
            let mut cp = vec![f32::NAN; m * n];
            let t = Tile {
                offsets: None,
                rows: 0,
                j0: 0,
                width: 0,
                a: a.as_ptr(),
                a_rs: k as isize,
                c: cp.as_mut_ptr(),
                c_strides: Strides { rs: n as isize, cs: 1 },
            };
            // the portable path, tile by tile, gives the same bits
            let cols = Columns::new(None, n);
            let mut offset = 0;
            for (j0, w) in panels(n) {
                for i in (0..m).step_by(MR) {
                    let tile = Tile {
                        rows: (m - i).min(MR),
                        j0,
                        width: w.min(n - j0),
                        a: unsafe { t.a.add(i * k) },
                        c: unsafe { t.c.add(i * n + j0) },
                        ..t
                    };
                    unsafe { portable_tile(&tile, k, w, &p.data[offset..offset + k * w], &cols) };
                }
                offset += k * w;
            }
            assert_eq!(cp, want, "{m}×{k}×{n} portable");
        }
    }

    /// The epilogue gives what the separate ops give, value for value: −0 and NaN through relu
    /// and relu6, a scale, a bias, and an activation the vector path has no form for.
    #[test]
    fn the_epilogue_is_the_separate_ops_bit_for_bit() {
        let (m, k, n) = (9, 2, 11);
        let mut a = values(m * k, 3);
        a[0] = f32::NAN;
        a[2] = -0.0;
        a[3] = 0.0;
        let b = values(k * n, 5);
        let p = PackedMatrix::new(&b, k, n).unwrap();
        let plain = reference(&a, &b, m, k, n);
        let (scale, bias) = (values(n, 11), values(n, 13));
        for act in [None, Some(UnOp::Relu), Some(UnOp::Relu6), Some(UnOp::Elu)] {
            for (s, bb) in [
                (Some(&scale[..]), Some(&bias[..])),
                (None, None),
                (Some(&scale[..]), None),
            ] {
                let ep = Epilogue {
                    scale: s,
                    bias: bb,
                    act,
                };
                let mut c = vec![f32::NAN; m * n];
                unsafe {
                    let sa = Strides { rs: k as isize, cs: 1 };
                    gemm_packed(
                        m,
                        a.as_ptr(),
                        sa,
                        &p,
                        c.as_mut_ptr(),
                        Strides { rs: n as isize, cs: 1 },
                        Some(&ep),
                    )
                    .unwrap();
                }
                let mut want = plain.clone();
                ep.apply(&mut want, n);
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(
                    bits(&c),
                    bits(&want),
                    "{act:?} scale {} bias {}",
                    s.is_some(),
                    bb.is_some()
                );
            }
        }
        let short = Epilogue {
            scale: Some(&scale[..3]),
            ..Default::default()
        };
        let mut c = vec![0f32; m * n];
        let r = unsafe {
            gemm_packed(
                m,
                a.as_ptr(),
                Strides { rs: k as isize, cs: 1 },
                &p,
                c.as_mut_ptr(),
                Strides { rs: n as isize, cs: 1 },
                Some(&short),
            )
        };
        assert!(r.is_err());
        assert!(PackedMatrix::new(&b, k, n + 1).is_none());
    }
}
