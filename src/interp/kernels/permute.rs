//! Axis permutations (Transpose, NCHW ↔ NHWC) in standard layout, as cache-blocked 2-D
//! transposes where the permutation is one: ndarray's element-by-element copy through permuted
//! strides was half of the ONNX MobileNet's run time.
//!
//! A permutation is reduced first: axes of size 1 are dropped and runs of axes that stay next
//! to each other in the same order are merged, so that NCHW → NHWC ([0, 2, 3, 1] on
//! [N, C, H, W]) becomes a batch of N transposes of [C, H·W], and [1, 0, 2] a batch-less
//! transpose of [A, B] blocks of rows. Anything else falls back to ndarray.

use ndarray::{ArrayD, ArrayViewD, IxDyn};

/// Side of the square tiles the 2-D transpose copies: 16 × 16 f32 are 1 KB each way, well
/// inside L1.
const TILE: usize = 16;

/// `a` with its axes permuted (`out.shape[i] = a.shape[perm[i]]`), in standard layout.
/// `perm` must be a permutation of `a`'s axes (checked by the callers).
pub fn permute<T: Clone>(a: ArrayViewD<'_, T>, perm: &[usize]) -> ArrayD<T> {
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
    fn run<T: Clone>(&self, src: &[T], out: &mut Vec<T>) {
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
