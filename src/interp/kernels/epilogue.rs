//! The fused epilogue of a convolution or matmul (`interp::fusion` decides which ops fold
//! into it): y = act(y · scale + bias) per output channel, in the head kernel's own pass over
//! its output.

use super::elementwise::{relu, relu6, unary_fn, UnOp};
use ndarray::ArrayD;

/// The fused epilogue of a convolution or matmul: y[..., c] = act(y[..., c] · scale[c] +
/// bias[c]) over arrays whose last axis is the channel. The operations and their order are
/// those of the separate Mul, Add and activation ops, so results are bit-identical to running
/// them one by one.
#[derive(Debug, Clone, Copy, Default)]
pub struct Epilogue<'a> {
    pub scale: Option<&'a [f32]>,
    pub bias: Option<&'a [f32]>,
    pub act: Option<UnOp>,
}

impl Epilogue<'_> {
    /// Applies the epilogue to `y` with its channels on `axis` (made C order first if need
    /// be); an error, never a silent skip, when `scale` or `bias` does not have one value per
    /// channel.
    pub fn apply_on_axis(&self, y: &mut ArrayD<f32>, axis: usize) -> Result<(), String> {
        let Some(&c) = y.shape().get(axis) else {
            return Err(format!("no channel axis {axis} in a value of shape {:?}", y.shape()));
        };
        self.check(c)?;
        if !y.is_standard_layout() {
            *y = y.as_standard_layout().into_owned();
        }
        let inner: usize = y.shape()[axis + 1..].iter().product();
        let x = y.as_slice_mut().ok_or("a fused epilogue on a strided value")?;
        if inner == 1 {
            self.apply(x, c);
        } else {
            self.apply_planes(x, c, inner);
        }
        Ok(())
    }

    /// An error unless `scale` and `bias`, where given, have one value per each of `c` channels.
    pub fn check(&self, c: usize) -> Result<(), String> {
        match [self.scale, self.bias].iter().flatten().any(|v| v.len() != c) {
            true => Err(format!("the fused epilogue does not have {c} values per channel")),
            false => Ok(()),
        }
    }

    /// Applies the epilogue to planes of `inner` values, plane i being channel i mod `c`
    /// (channels outside the last axis: NCHW's planes of H·W); `check(c)` first.
    pub fn apply_planes(&self, x: &mut [f32], c: usize, inner: usize) {
        if c == 0 || self.check(c).is_err() {
            return;
        }
        // one tile of a single channel, refilled per plane rather than built per plane (two
        // allocations a channel were 2.4 % of an NCHW MobileNet's run)
        let first = Epilogue {
            scale: self.scale.map(|v| &v[..1]),
            bias: self.bias.map(|v| &v[..1]),
            act: self.act,
        };
        let Some(mut t) = first.tiled(1) else { return };
        for (i, plane) in x.chunks_exact_mut(inner.max(1)).enumerate() {
            let ch = i % c;
            if let Some(v) = self.scale {
                t.k.fill(v[ch]);
            }
            if let Some(v) = self.bias {
                t.b.fill(v[ch]);
            }
            t.apply(plane);
        }
    }

    /// Applies the epilogue to whole rows of `c` channels (`x.len()` a multiple of `c`, and
    /// `scale`/`bias` of length `c`; anything else is left untouched).
    pub fn apply(&self, x: &mut [f32], c: usize) {
        if let Some(t) = self.tiled(c) {
            t.apply(x);
        }
    }

    /// The epilogue prepared for rows of `c` channels, once per kernel call; `None` when
    /// `scale` or `bias` does not have `c` values.
    pub fn tiled(&self, c: usize) -> Option<TiledEpilogue> {
        if c == 0 || self.check(c).is_err() {
            return None;
        }
        // Channels are often few (8–48): repeat scale and bias to a tile of ≥ 64 values so the
        // inner loops are long enough to vectorise
        let reps = 64usize.div_ceil(c).max(1);
        let tile = |v: Option<&[f32]>, neutral: f32| -> Vec<f32> {
            match v {
                Some(v) => v.iter().copied().cycle().take(c * reps).collect(),
                None => vec![neutral; c * reps],
            }
        };
        Some(TiledEpilogue {
            k: tile(self.scale, 1.0),
            b: tile(self.bias, 0.0),
            has_k: self.scale.is_some(),
            has_b: self.bias.is_some(),
            act: self.act,
            c,
        })
    }
}

/// An [`Epilogue`] with scale and bias repeated to tiles of whole rows.
#[derive(Debug, Clone)]
pub struct TiledEpilogue {
    k: Vec<f32>,
    b: Vec<f32>,
    has_k: bool,
    has_b: bool,
    act: Option<UnOp>,
    c: usize,
}

impl TiledEpilogue {
    /// Applies it to whole rows (`x.len()` a multiple of the channel count; else untouched);
    /// rows that do not fill a tile go one by one.
    pub fn apply(&self, x: &mut [f32]) {
        if x.len() % self.c != 0 {
            return;
        }
        let (k, b, has_k, has_b) = (&self.k, &self.b, self.has_k, self.has_b);
        #[inline(always)]
        fn run(x: &mut [f32], k: &[f32], b: &[f32], has_k: bool, has_b: bool, f: impl Fn(f32) -> f32 + Copy) {
            let t = k.len();
            let mut chunks = x.chunks_exact_mut(t);
            for row in &mut chunks {
                match (has_k, has_b) {
                    (true, true) => row
                        .iter_mut()
                        .zip(k)
                        .zip(b)
                        .for_each(|((p, &kk), &bb)| *p = f(*p * kk + bb)),
                    (true, false) => row.iter_mut().zip(k).for_each(|(p, &kk)| *p = f(*p * kk)),
                    (false, true) => row.iter_mut().zip(b).for_each(|(p, &bb)| *p = f(*p + bb)),
                    (false, false) => row.iter_mut().for_each(|p| *p = f(*p)),
                }
            }
            let rest = chunks.into_remainder();
            for (p, (&kk, &bb)) in rest.iter_mut().zip(k.iter().zip(b)) {
                let mut v = *p;
                if has_k {
                    v *= kk;
                }
                if has_b {
                    v += bb;
                }
                *p = f(v);
            }
        }
        // inlined into the AVX2 wrapper below: a separate function would be compiled for the
        // baseline target only, and the wrapper's target feature would reach no loop
        #[inline(always)]
        fn dispatch(x: &mut [f32], k: &[f32], b: &[f32], has_k: bool, has_b: bool, act: Option<UnOp>) {
            match act {
                Some(UnOp::Relu) => run(x, k, b, has_k, has_b, relu),
                Some(UnOp::Relu6) => run(x, k, b, has_k, has_b, relu6),
                // any other activation by its scalar function, never dropped (the register
                // kernels apply it after their store: `Columns::act_after`)
                Some(op) => run(x, k, b, has_k, has_b, &*unary_fn(op)),
                None if !has_k && !has_b => {}
                None => run(x, k, b, has_k, has_b, |v| v),
            }
        }
        // the same code compiled for AVX2 where the CPU has it (mul and add stay separate
        // instructions, so results are identical to the portable path)
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2")]
        unsafe fn dispatch_avx2(x: &mut [f32], k: &[f32], b: &[f32], has_k: bool, has_b: bool, act: Option<UnOp>) {
            dispatch(x, k, b, has_k, has_b, act)
        }
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2 (checked above)
            unsafe { dispatch_avx2(x, k, b, has_k, has_b, self.act) };
            return;
        }
        dispatch(x, k, b, has_k, has_b, self.act)
    }
}

/// An [`Epilogue`] for kernels that apply it in registers, 8 channels at a time, before their
/// one store: scale and bias padded with neutral values (1, 0) to whole 16-channel panels and
/// one more, so a vector load from any channel below `n` stays inside.
pub(super) struct Columns {
    scale: Option<Vec<f32>>,
    bias: Option<Vec<f32>>,
    pub(super) act: Option<UnOp>,
}

/// Whether kernels apply `act` in registers ([`avx2::finish`]); any other activation is
/// applied to the stored values afterwards ([`Columns::act_after`]).
pub(super) fn in_tile(act: Option<UnOp>) -> bool {
    matches!(act, None | Some(UnOp::Relu | UnOp::Relu6))
}

impl Columns {
    /// `ep` for `n` channels (its lengths are checked by the caller).
    pub(super) fn new(ep: Option<&Epilogue>, n: usize) -> Columns {
        let padded = n.next_multiple_of(16) + 16;
        let spread = |v: Option<&[f32]>, neutral: f32| {
            v.map(|v| {
                let mut p = vec![neutral; padded];
                p[..n].copy_from_slice(v);
                p
            })
        };
        Columns {
            scale: spread(ep.and_then(|e| e.scale), 1.0),
            bias: spread(ep.and_then(|e| e.bias), 0.0),
            act: ep.and_then(|e| e.act),
        }
    }

    /// The epilogue on one value of channel `j`, in the order of the separate ops: · scale,
    /// + bias, activation (only one [`in_tile`] applies: the rest come after).
    #[inline(always)]
    pub(super) fn one(&self, v: f32, j: usize) -> f32 {
        let mut v = v;
        if let Some(s) = &self.scale {
            v *= s[j];
        }
        if let Some(b) = &self.bias {
            v += b[j];
        }
        match self.act {
            Some(UnOp::Relu) => relu(v),
            Some(UnOp::Relu6) => relu6(v),
            _ => v,
        }
    }

    /// The activation left for a pass over the stored values: one that is not [`in_tile`].
    pub(super) fn act_after(&self) -> Option<UnOp> {
        self.act.filter(|&op| !in_tile(Some(op)))
    }
}

#[cfg(target_arch = "x86_64")]
pub(super) mod avx2 {
    use super::{Columns, UnOp};
    use std::arch::x86_64::*;

    /// The epilogue on one vector of 8 channels from `j` for each of `R` registers, as
    /// [`Columns::one`] computes it value by value (relu: +0 below 0, NaN kept; relu6: −0
    /// kept, as the scalar). Inlined into the caller's AVX2 code.
    ///
    /// # Safety
    /// AVX2 must be available and `j < n` of [`Columns::new`].
    #[inline(always)]
    pub unsafe fn finish<const R: usize>(mut y: [__m256; R], cols: &Columns, j: usize) -> [__m256; R] {
        if let Some(s) = &cols.scale {
            let s = _mm256_loadu_ps(s.as_ptr().add(j));
            for v in y.iter_mut() {
                *v = _mm256_mul_ps(*v, s);
            }
        }
        if let Some(b) = &cols.bias {
            let b = _mm256_loadu_ps(b.as_ptr().add(j));
            for v in y.iter_mut() {
                *v = _mm256_add_ps(*v, b);
            }
        }
        let zero = _mm256_setzero_ps();
        let six = _mm256_set1_ps(6.0);
        match cols.act {
            None => {}
            // maxps returns its second operand unless the first is greater: max(0, v) keeps
            // NaN and −0, and + 0 then turns −0 into +0 (and nothing else), as relu does
            Some(UnOp::Relu) => {
                for v in y.iter_mut() {
                    *v = _mm256_add_ps(_mm256_max_ps(zero, *v), zero);
                }
            }
            // relu6 keeps −0 and NaN: max(0, v), then min(6, ·) (minps likewise returns its
            // second operand unless the first is less)
            Some(UnOp::Relu6) => {
                for v in y.iter_mut() {
                    *v = _mm256_min_ps(six, _mm256_max_ps(zero, *v));
                }
            }
            // other activations are applied after the store ([`Columns::act_after`])
            Some(_) => {}
        }
        y
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{array, IxDyn};

    #[test]
    fn an_epilogue_applies_on_any_channel_axis_or_says_it_cannot() {
        let ep = Epilogue {
            scale: Some(&[2.0, 3.0]),
            bias: Some(&[1.0, -1.0]),
            act: Some(UnOp::Relu),
        };
        // NCHW [1, 2, 1, 2]: channel 0 is (1, 2), channel 1 is (-1, 4)
        let mut y = array![[[[1.0f32, 2.0]], [[-1.0, 4.0]]]].into_dyn();
        ep.apply_on_axis(&mut y, 1).unwrap();
        assert_eq!(y, array![[[[3.0f32, 5.0]], [[0.0, 11.0]]]].into_dyn());
        // channels last, on a transposed (not C-order) value
        let mut t = array![[1.0f32, -1.0], [2.0, 4.0]].reversed_axes().into_dyn();
        ep.apply_on_axis(&mut t, 1).unwrap();
        assert_eq!(t, array![[3.0f32, 5.0], [0.0, 11.0]].into_dyn());
        // three channels against two values per channel
        let mut z = ArrayD::<f32>::zeros(IxDyn(&[1, 3]));
        assert!(ep.apply_on_axis(&mut z, 1).is_err());
        // an activation with no vector form is applied, not dropped
        let sigmoid = Epilogue {
            act: Some(UnOp::Sigmoid),
            ..ep
        };
        let mut s = array![[1.0f32, -1.0], [2.0, 4.0]].into_dyn();
        sigmoid.apply_on_axis(&mut s, 1).unwrap();
        let f = unary_fn(UnOp::Sigmoid);
        assert_eq!(s, array![[f(3.0f32), f(-4.0)], [f(5.0), f(11.0)]].into_dyn());
    }

    /// Planes longer than a tile (150 values: two whole tiles and a rest), channel i mod 3 of
    /// two images, each with its own scale and bias, or one of them: every value as the
    /// formula says.
    #[test]
    fn planes_take_their_own_channels_scale_and_bias() {
        let (c, inner) = (3, 150);
        let x: Vec<f32> = (0..2 * c * inner).map(|i| (i % 17) as f32 - 8.0).collect();
        let (k, b) = ([0.5f32, 2.0, -1.0], [1.0f32, -3.0, 0.25]);
        for (scale, bias) in [(Some(&k[..]), Some(&b[..])), (Some(&k[..]), None), (None, Some(&b[..]))] {
            let ep = Epilogue {
                scale,
                bias,
                act: Some(UnOp::Relu),
            };
            let mut y = x.clone();
            ep.apply_planes(&mut y, c, inner);
            for (i, (&v, &got)) in x.iter().zip(&y).enumerate() {
                let ch = (i / inner) % c;
                let want = (v * scale.map_or(1.0, |s| s[ch]) + bias.map_or(0.0, |s| s[ch])).max(0.0);
                assert_eq!(got, want, "value {i}");
            }
        }
    }
}
