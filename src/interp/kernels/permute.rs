//! Axis permutations (Transpose, NCHW ↔ NHWC) in standard layout, as cache-blocked 2-D
//! transposes where the permutation is one: ndarray's element-by-element copy through permuted
//! strides was half of the ONNX MobileNet's run time.
//!
//! A permutation is reduced first: axes of size 1 are dropped and runs of axes that stay next
//! to each other in the same order are merged, so that NCHW → NHWC ([0, 2, 3, 1] on
//! [N, C, H, W]) becomes a batch of N transposes of [C, H·W], and [1, 0, 2] a batch-less
//! transpose of [A, B] blocks of rows. Anything else falls back to ndarray.
//!
//! The 2-D transposes of 4-byte elements (f32, i32, u32: the NCHW ↔ NHWC of every ONNX conv
//! that is not 1×1) go through one bit-moving kernel: 8 × 8 blocks transposed in AVX
//! registers where the CPU has them, written straight into the output without zero-filling
//! it first; a third of the ONNX MobileNet's run time was these copies one element at a time.

use ndarray::{ArrayD, ArrayViewD, IxDyn};
use std::any::TypeId;

/// Side of the square tiles the 2-D transpose copies: 16 × 16 f32 are 1 KB each way, well
/// inside L1.
const TILE: usize = 16;

/// `a` with its axes permuted (`out.shape[i] = a.shape[perm[i]]`), in standard layout.
/// `perm` must be a permutation of `a`'s axes (checked by the callers).
pub fn permute<T: Clone + 'static>(a: ArrayViewD<'_, T>, perm: &[usize]) -> ArrayD<T> {
    let out_shape: Vec<usize> = perm.iter().map(|&p| a.shape()[p]).collect();
    // (an empty array has nothing to move, and its size-0 axes would not be in the plan)
    if let (Some(src), Some(plan), false) = (a.as_slice(), Plan::of(a.shape(), perm), a.is_empty()) {
        let mut out = Vec::with_capacity(src.len());
        plan.run(src, &mut out);
        if let Ok(y) = ArrayD::from_shape_vec(IxDyn(&out_shape), out) {
            return y;
        }
    }
    a.permuted_axes(IxDyn(perm)).as_standard_layout().into_owned()
}

/// A permutation reduced to `batch` copies of a `rows × cols` block transposed, each followed
/// by `inner` contiguous elements per (row, col) pair; `rows == 1` or `cols == 1` is a copy.
#[derive(Debug, PartialEq, Eq)]
struct Plan {
    batch: usize,
    rows: usize,
    cols: usize,
    inner: usize,
}

impl Plan {
    fn of(shape: &[usize], perm: &[usize]) -> Option<Plan> {
        // output axes of size > 1, each named by its input axis
        let kept: Vec<usize> = perm.iter().copied().filter(|&p| shape[p] > 1).collect();
        // merge runs that are consecutive input axes in order: groups of input axes
        let mut groups: Vec<(usize, usize)> = Vec::new(); // (first input axis, size)
        let mut last: Option<usize> = None;
        for &p in &kept {
            // the next kept input axis after `last`, skipping size-1 axes
            let follows = last.is_some_and(|l| (l + 1..p).all(|q| shape[q] == 1) && p > l);
            match groups.last_mut() {
                Some(g) if follows => g.1 *= shape[p],
                _ => groups.push((p, shape[p])),
            }
            last = Some(p);
        }
        // the groups in input order, and where each lands in the output
        let mut by_input: Vec<usize> = (0..groups.len()).collect();
        by_input.sort_by_key(|&g| groups[g].0);
        let size = |g: usize| groups[g].1;
        match by_input.as_slice() {
            [] => Some(Plan {
                batch: 1,
                rows: 1,
                cols: 1,
                inner: 1,
            }),
            [a] => Some(Plan {
                batch: 1,
                rows: 1,
                cols: 1,
                inner: size(*a),
            }),
            // output order is groups' index order: by_input[k] is the output position of the
            // k-th group in input order
            [a, b] if (*a, *b) == (1, 0) => Some(Plan {
                batch: 1,
                rows: size(1),
                cols: size(0),
                inner: 1,
            }),
            [a, b] if (*a, *b) == (0, 1) => Some(Plan {
                batch: 1,
                rows: 1,
                cols: 1,
                inner: size(0) * size(1),
            }),
            [a, b, c] if (*a, *b, *c) == (0, 2, 1) => Some(Plan {
                batch: size(0),
                rows: size(2),
                cols: size(1),
                inner: 1,
            }),
            [a, b, c] if (*a, *b, *c) == (1, 0, 2) => Some(Plan {
                batch: 1,
                rows: size(1),
                cols: size(0),
                inner: size(2),
            }),
            _ => None,
        }
    }

    /// Input [batch, rows, cols, inner] → output [batch, cols, rows, inner], appended to `out`.
    fn run<T: Clone + 'static>(&self, src: &[T], out: &mut Vec<T>) {
        let Plan {
            batch,
            rows,
            cols,
            inner,
        } = *self;
        if rows == 1 || cols == 1 {
            out.extend_from_slice(src);
            return;
        }
        let block = rows * cols * inner;
        if inner == 1 && is_plain_u32::<T>() && src.len() >= batch * block {
            let start = out.len();
            out.reserve(batch * block);
            for b in 0..batch {
                // SAFETY: T is f32, i32 or u32 (4 plain bytes, any bit pattern valid, no drop),
                // `src` holds `batch` blocks, and `out` has room for them after `start`; every
                // element of the block is written by `transpose32` before the length covers it
                unsafe {
                    let s = std::slice::from_raw_parts(src.as_ptr().add(b * block).cast::<u32>(), block);
                    transpose32(s, rows, cols, out.as_mut_ptr().add(start + b * block).cast::<u32>());
                }
            }
            // SAFETY: all `batch * block` elements after `start` were written above
            unsafe { out.set_len(start + batch * block) };
            return;
        }
        for b in 0..batch {
            let s = &src[b * block..(b + 1) * block];
            let start = out.len();
            // every element is written below; cloning the first fills the buffer without
            // needing T: Default
            out.resize(start + block, s[0].clone());
            let d = &mut out[start..];
            for r0 in (0..rows).step_by(TILE) {
                for c0 in (0..cols).step_by(TILE) {
                    let (r1, c1) = ((r0 + TILE).min(rows), (c0 + TILE).min(cols));
                    if inner == 1 {
                        // the common case (NCHW ↔ NHWC): one element per pair; reading along
                        // the output's row keeps the writes contiguous
                        for c in c0..c1 {
                            let out_row = &mut d[c * rows + r0..c * rows + r1];
                            for (o, r) in out_row.iter_mut().zip(r0..r1) {
                                *o = s[r * cols + c].clone();
                            }
                        }
                        continue;
                    }
                    for r in r0..r1 {
                        for c in c0..c1 {
                            let (from, to) = ((r * cols + c) * inner, (c * rows + r) * inner);
                            d[to..to + inner].clone_from_slice(&s[from..from + inner]);
                        }
                    }
                }
            }
        }
    }
}

/// True for the element types [`transpose32`] moves as raw 4-byte words.
fn is_plain_u32<T: 'static>() -> bool {
    let t = TypeId::of::<T>();
    t == TypeId::of::<f32>() || t == TypeId::of::<i32>() || t == TypeId::of::<u32>()
}

/// Output rows per tile: a tile's writes fill whole 64-byte lines of 16 words.
const TILE_ROWS: usize = 16;
/// Input columns per tile: 16 × 64 words read, 4 KB, stay in L1 while written out.
const TILE_COLS: usize = 64;

/// `d[c·rows + r] = s[r·cols + c]` for a `rows × cols` matrix `s`.
///
/// # Safety
/// `s.len() == rows · cols` and `d` is valid for `rows · cols` writes.
unsafe fn transpose32(s: &[u32], rows: usize, cols: usize, d: *mut u32) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx") {
        // SAFETY: the CPU has AVX (checked above); the rest is the caller's contract
        unsafe { transpose32_avx(s, rows, cols, d) };
        return;
    }
    // SAFETY: the caller's contract
    unsafe { transpose32_tile(s, rows, cols, d, 0..rows, 0..cols) };
}

/// One tile of [`transpose32`], element by element.
///
/// # Safety
/// As [`transpose32`], with `rs` and `cs` inside `0..rows` and `0..cols`.
#[inline(always)]
unsafe fn transpose32_tile(
    s: &[u32],
    rows: usize,
    cols: usize,
    d: *mut u32,
    rs: std::ops::Range<usize>,
    cs: std::ops::Range<usize>,
) {
    for c in cs {
        for r in rs.clone() {
            // SAFETY: c·rows + r < rows·cols (the caller's ranges)
            unsafe { d.add(c * rows + r).write(s[r * cols + c]) };
        }
    }
}

/// [`transpose32`] in tiles of 8 × 8 blocks transposed in registers; the ragged right and
/// bottom edges element by element.
///
/// # Safety
/// As [`transpose32`], on a CPU with AVX.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn transpose32_avx(s: &[u32], rows: usize, cols: usize, d: *mut u32) {
    let (rows8, cols8) = (rows / 8 * 8, cols / 8 * 8);
    for r0 in (0..rows8).step_by(TILE_ROWS) {
        let r1 = (r0 + TILE_ROWS).min(rows8);
        for c0 in (0..cols8).step_by(TILE_COLS) {
            let c1 = (c0 + TILE_COLS).min(cols8);
            for r in (r0..r1).step_by(8) {
                for c in (c0..c1).step_by(8) {
                    // SAFETY: r + 8 ≤ rows and c + 8 ≤ cols, so the block's reads and writes
                    // are in bounds
                    unsafe { block8x8(s.as_ptr().add(r * cols + c), cols, d.add(c * rows + r), rows) };
                }
            }
        }
    }
    // SAFETY: the edges are inside the matrix
    unsafe {
        transpose32_tile(s, rows, cols, d, 0..rows8, cols8..cols);
        transpose32_tile(s, rows, cols, d, rows8..rows, 0..cols);
    }
}

/// The 8 × 8 block at `s` (row stride `ls`) written transposed at `d` (row stride `ld`); pure
/// data movement (unpacks and lane shuffles), so any 32-bit pattern passes through unchanged.
///
/// # Safety
/// AVX; 8 rows of 8 words readable at `s` and writable at `d`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
#[inline]
unsafe fn block8x8(s: *const u32, ls: usize, d: *mut u32, ld: usize) {
    use std::arch::x86_64::*;
    // SAFETY: the caller's contract
    unsafe {
        let row = |i: usize| _mm256_loadu_ps(s.add(i * ls).cast::<f32>());
        let (a0, a1, a2, a3, a4, a5, a6, a7) = (row(0), row(1), row(2), row(3), row(4), row(5), row(6), row(7));
        // pairs of rows interleaved: [a0 b0 a1 b1 | a4 b4 a5 b5], ...
        let (t0, t1) = (_mm256_unpacklo_ps(a0, a1), _mm256_unpackhi_ps(a0, a1));
        let (t2, t3) = (_mm256_unpacklo_ps(a2, a3), _mm256_unpackhi_ps(a2, a3));
        let (t4, t5) = (_mm256_unpacklo_ps(a4, a5), _mm256_unpackhi_ps(a4, a5));
        let (t6, t7) = (_mm256_unpacklo_ps(a6, a7), _mm256_unpackhi_ps(a6, a7));
        // quads: columns 0/4, 1/5, 2/6, 3/7 of rows 0–3 and 4–7
        let (u0, u1) = (_mm256_shuffle_ps::<0x44>(t0, t2), _mm256_shuffle_ps::<0xEE>(t0, t2));
        let (u2, u3) = (_mm256_shuffle_ps::<0x44>(t1, t3), _mm256_shuffle_ps::<0xEE>(t1, t3));
        let (u4, u5) = (_mm256_shuffle_ps::<0x44>(t4, t6), _mm256_shuffle_ps::<0xEE>(t4, t6));
        let (u6, u7) = (_mm256_shuffle_ps::<0x44>(t5, t7), _mm256_shuffle_ps::<0xEE>(t5, t7));
        let out = [
            _mm256_permute2f128_ps::<0x20>(u0, u4),
            _mm256_permute2f128_ps::<0x20>(u1, u5),
            _mm256_permute2f128_ps::<0x20>(u2, u6),
            _mm256_permute2f128_ps::<0x20>(u3, u7),
            _mm256_permute2f128_ps::<0x31>(u0, u4),
            _mm256_permute2f128_ps::<0x31>(u1, u5),
            _mm256_permute2f128_ps::<0x31>(u2, u6),
            _mm256_permute2f128_ps::<0x31>(u3, u7),
        ];
        for (j, v) in out.into_iter().enumerate() {
            _mm256_storeu_ps(d.add(j * ld).cast::<f32>(), v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(a: &ArrayD<i32>, perm: &[usize]) -> ArrayD<i32> {
        a.view().permuted_axes(IxDyn(perm)).as_standard_layout().into_owned()
    }

    fn perms(n: usize) -> Vec<Vec<usize>> {
        if n == 0 {
            return vec![vec![]];
        }
        let mut all = Vec::new();
        for p in perms(n - 1) {
            for at in 0..=p.len() {
                let mut q = p.clone();
                q.insert(at, n - 1);
                all.push(q);
            }
        }
        all
    }

    #[test]
    fn equals_ndarrays_permutation_for_every_permutation_of_rank_up_to_4() {
        for shape in [
            vec![],
            vec![5],
            vec![3, 17],
            vec![1, 33, 2],
            vec![2, 3, 19, 1],
            vec![1, 8, 20, 35],
            vec![2, 1, 1, 3],
            vec![0, 3, 4],
            vec![4, 5, 6, 7],
        ] {
            let n: usize = shape.iter().product();
            let a = ArrayD::from_shape_vec(IxDyn(&shape), (0..n as i32).collect()).unwrap();
            for p in perms(shape.len()) {
                assert_eq!(permute(a.view(), &p), reference(&a, &p), "shape {shape:?} perm {p:?}");
            }
        }
    }

    #[test]
    fn the_word_transpose_moves_every_bit_pattern_across_tiles_and_ragged_edges() {
        // rows and cols around the 8 × 8 blocks and the 16 × 64 tiles, NaN payloads and
        // signed zeros included: the f32 result must equal ndarray's bit for bit
        for (rows, cols) in [(8, 8), (9, 7), (16, 64), (17, 65), (40, 131), (3, 200), (129, 5)] {
            let mut bits: Vec<u32> = (0..rows * cols)
                .map(|i| (i as u32).wrapping_mul(0x9E37_79B9) | if i % 5 == 0 { 0x7FC0_0001 } else { 0 })
                .collect();
            bits[1] = 0x8000_0000;
            let a = ArrayD::from_shape_vec(IxDyn(&[2, rows, cols]), [bits.clone(), bits].concat()).unwrap();
            let f = a.mapv(f32::from_bits);
            let got = permute(f.view(), &[0, 2, 1]).mapv(f32::to_bits);
            assert_eq!(
                got,
                reference(&a.mapv(|x| x as i32), &[0, 2, 1]).mapv(|x| x as u32),
                "{rows}×{cols}"
            );
        }
    }

    #[test]
    fn nchw_to_nhwc_is_a_batch_of_transposes() {
        assert_eq!(
            Plan::of(&[2, 8, 5, 7], &[0, 2, 3, 1]),
            Some(Plan {
                batch: 2,
                rows: 8,
                cols: 35,
                inner: 1
            })
        );
        // a batch of 1 is dropped: one transpose
        assert_eq!(
            Plan::of(&[1, 8, 5, 7], &[0, 3, 1, 2]),
            Some(Plan {
                batch: 1,
                rows: 40,
                cols: 7,
                inner: 1
            })
        );
        // a non-contiguous view takes ndarray's path and still permutes right
        let a = ArrayD::from_shape_vec(IxDyn(&[4, 6]), (0..24).collect::<Vec<i32>>()).unwrap();
        let t = a.t();
        assert_eq!(permute(t.view().into_dyn(), &[1, 0]), a);
    }
}
