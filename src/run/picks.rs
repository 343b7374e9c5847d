//! Which samples a run takes: `--limit N`'s first N, or N spread over the data — from a file,
//! whose length is known, or from a stream read once (a Python generator), whose length is not
//! known until it ends. Both follow one rule, so that a stream and a file of the same samples
//! pick the same ones.

/// The samples of `total` that `limit` and `spread` pick, in order: the first `limit`, or
/// `limit` of them spread over all `total` (the ones a [`Decimator`] keeping `limit` picks
/// from a stream of `total` samples). The one rule of `--limit` for calibration (whose shards
/// then split these), evaluation, `run` and a target's scoring samples.
///
/// Spread: of the samples at a stride `s` — the least power of two that leaves at most
/// 2 · `limit` of them — sample `s · ⌊i · held / limit⌋` for i < `limit`, `held` = ⌈total / s⌉.
///
/// ```text
/// total 32, limit 16: first 0 1 2 … 15; spread (s = 1) 0 2 4 … 30
/// total 100, limit 16: spread (s = 4, 25 held) 0 4 12 16 24 28 36 40 48 56 60 68 72 80 84 92
/// ```
pub fn picked_samples(total: usize, limit: Option<usize>, spread: bool) -> Vec<usize> {
    let n = limit.map_or(total, |l| l.min(total));
    if !spread || n == total || n == 0 {
        return (0..n).collect();
    }
    let s = stride(total, n);
    let held = total.div_ceil(s);
    (0..n).map(|i| s * (i * held / n)).collect()
}

/// `limit` samples spread over the `among` ones [`picked_samples`] spreads over `total`: a
/// target's sensitivity samples among its scoring ones, so that the scoring samples a stream
/// keeps give the same.
///
/// ```text
/// total 32, among 16 (0 2 4 … 30), limit 4: 0 8 16 24
/// ```
pub fn picked_among(total: usize, among: usize, limit: usize) -> Vec<usize> {
    let outer = picked_samples(total, Some(among), true);
    picked_samples(outer.len(), Some(limit), true)
        .into_iter()
        .map(|i| outer[i])
        .collect()
}

/// The least power of two `s` with ⌈total / s⌉ ≤ 2 · keep (keep > 0).
fn stride(total: usize, keep: usize) -> usize {
    let mut s = 1;
    while total.div_ceil(s) > 2 * keep {
        s *= 2;
    }
    s
}

/// Keeps, from a stream of unknown length read once, the samples [`picked_samples`] spreads
/// `keep` of over the whole stream, holding at most 2 · `keep` at a time: every sample at the
/// current stride; when 2 · `keep` are held and one more is due, every other one is dropped
/// and the stride doubles.
///
/// ```text
/// keep 2: offered 0 1 2 3 → holds 0 1 2 3; offered 4 → holds 0 2 4 (stride 2); 5 skipped;
///         6 → 0 2 4 6; 8 → 0 4 8 (stride 4); finish(9) → samples 0 and 4
/// ```
pub struct Decimator<T> {
    keep: usize,
    stride: usize,
    held: Vec<(usize, T)>,
}

impl<T> Decimator<T> {
    pub fn new(keep: usize) -> Self {
        Decimator {
            keep,
            stride: 1,
            held: Vec::new(),
        }
    }
    /// Offers sample `index` (0, 1, 2, … in stream order); `item` makes the copy kept, and is
    /// called only for a sample held.
    pub fn offer(&mut self, index: usize, item: impl FnOnce() -> T) {
        if self.keep == 0 || index % self.stride != 0 {
            return;
        }
        if self.held.len() == 2 * self.keep {
            let mut at = 0;
            self.held.retain(|_| {
                at += 1;
                at % 2 == 1
            });
            self.stride *= 2;
            if index % self.stride != 0 {
                return;
            }
        }
        self.held.push((index, item()));
    }
    /// The samples `picked_samples(total, Some(keep), true)` picks, with their indices, once
    /// the stream ended after `total` samples.
    pub fn finish(self, total: usize) -> Vec<(usize, T)> {
        let picked = picked_samples(total, Some(self.keep), true);
        let mut wanted = picked.iter().peekable();
        let mut out = Vec::with_capacity(picked.len());
        for (i, t) in self.held {
            if wanted.peek() == Some(&&i) {
                wanted.next();
                out.push((i, t));
            }
        }
        debug_assert!(wanted.next().is_none(), "a picked sample was not held");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_samples_cover_the_data_in_order() {
        assert_eq!(
            picked_samples(32, Some(16), true),
            (0..16).map(|i| 2 * i).collect::<Vec<_>>()
        );
        assert_eq!(picked_samples(32, Some(16), false), (0..16).collect::<Vec<_>>());
        assert_eq!(picked_samples(10, Some(4), true), vec![0, 2, 4, 6]);
        assert_eq!(
            picked_samples(100, Some(16), true),
            vec![0, 4, 12, 16, 24, 28, 36, 40, 48, 56, 60, 68, 72, 80, 84, 92]
        );
        // fewer samples than asked: all of them, either way
        assert_eq!(picked_samples(5, Some(16), true), (0..5).collect::<Vec<_>>());
        assert_eq!(picked_samples(7, None, true), (0..7).collect::<Vec<_>>());
        assert!(picked_samples(0, Some(16), true).is_empty());
        assert!(picked_samples(9, Some(0), true).is_empty());
    }

    #[test]
    fn samples_among_the_spread_ones_are_the_same_from_the_kept_ones() {
        assert_eq!(picked_among(32, 16, 4), vec![0, 8, 16, 24]);
        assert_eq!(picked_among(3, 16, 4), vec![0, 1, 2]);
        for total in 0..=300 {
            let kept = picked_samples(total, Some(16), true);
            let from_kept: Vec<usize> = picked_among(kept.len(), 16, 4).iter().map(|&i| kept[i]).collect();
            assert_eq!(picked_among(total, 16, 4), from_kept, "total {total}");
        }
    }

    #[test]
    fn a_stream_keeps_the_samples_a_file_of_its_length_picks() {
        for keep in 0..=6 {
            for total in 0..=200 {
                let mut d = Decimator::new(keep);
                let mut most = 0;
                for i in 0..total {
                    d.offer(i, || i);
                    most = most.max(d.held.len());
                }
                assert!(most <= 2 * keep, "keep {keep}, total {total}: held {most}");
                let got: Vec<usize> = d
                    .finish(total)
                    .into_iter()
                    .map(|(i, t)| {
                        assert_eq!(i, t);
                        i
                    })
                    .collect();
                let want = picked_samples(total, Some(keep), true);
                assert_eq!(got, want, "keep {keep}, total {total}");
                assert_eq!(want.len(), keep.min(total));
                assert!(want.windows(2).all(|w| w[0] < w[1]) && want.iter().all(|&i| i < total));
            }
        }
    }

    #[test]
    fn no_two_picks_are_further_apart_than_twice_an_even_spacing() {
        // the stride s < total / n (half of it left more than 2n samples), and a gap is at most
        // 2s: so every gap, the one after the last pick to the end included, < 2 · total / n
        for n in 1..=20 {
            for total in n + 1..=400 {
                let p = picked_samples(total, Some(n), true);
                assert_eq!(p[0], 0);
                let ends = p.windows(2).map(|w| w[1] - w[0]).chain([total - p[n - 1]]);
                for gap in ends {
                    assert!(gap * n < 2 * total, "n {n}, total {total}: gap {gap} in {p:?}");
                }
            }
        }
    }
}
