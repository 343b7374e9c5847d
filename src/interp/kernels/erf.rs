//! The error function (ONNX Erf, TF Erf) and the exact GELU built on it, in f32, without
//! branches: a slice of them vectorises (AVX2 + FMA where the CPU has them, chosen at run
//! time), where libm's `erff` — piecewise, two `expf` calls per value above 1.25 — ran one
//! value at a time and took 8 % of a BERT encoder's calibration.
//!
//! Every path computes the same fused multiply-adds in the same order (`mul_add`), so results
//! depend neither on the CPU nor on the path (slice, in place, or one value). Within one unit
//! in the last place of the exact erf (0.87 at most over the test's grid):
//!
//! ```text
//! |x| < 1:       erf(x) = x + x·Q(x²)                    Q ≈ erf(x)/x − 1, degree 6
//! 1 ≤ |x| ≤ 4:   erf(x) = ±(1 − exp(G(|x|) − x²))        G ≈ ln erfc(z) + z², degree 8 in z − 2.46
//! |x| > 4:       ±1 (erfc(4) = 1.5e-8 is below half a unit of 1)
//! ```
//!
//! The exponential is `kernels::exp`'s. The coefficients are weighted least-squares fits (Lawson's iteration towards the minimax
//! error, Chebyshev nodes, in f64) rounded to f32; the error was then measured with the f32
//! evaluation itself. Q carries erf(x)/x − 1 rather than erf(x)/x so that its rounding errors
//! are scaled by 0.13, not 1.13.

/// Q(s), s = x² ∈ [0, 1): erf(x)/x − 1, highest degree first.
const SMALL: [f32; 7] = [
    7.854324e-5,
    -8.010345e-4,
    0.005188347,
    -0.026853824,
    0.112835854,
    -0.37612626,
    0.12837917,
];

/// Where G's variable is centred: the middle of [1, 3.92].
const MID: f32 = 2.46;

/// G(u), u = z − [`MID`], z ∈ [1, 4]: ln erfc(z) + z², highest degree first.
const LARGE: [f32; 9] = [
    1.6319805e-6,
    -1.3800541e-5,
    8.112352e-5,
    -4.3925855e-4,
    0.00225116,
    -0.011211683,
    0.057430405,
    -0.35722187,
    -1.5426176,
];

use super::exp::{exp_nonpositive, horner};

/// erf(x); NaN stays NaN, erf(±0) = ±0, erf(±∞) = ±1.
#[inline(always)]
pub fn erf(x: f32) -> f32 {
    let z = x.abs();
    let small = x.mul_add(horner(&SMALL, x * x), x);
    // NaN fails `z > 4` and stays NaN through the large branch
    let zc = if z > 4.0 { 4.0 } else { z };
    let e = exp_nonpositive((-zc).mul_add(zc, horner(&LARGE, zc - MID)));
    let large = (1.0 - e).copysign(x);
    if z < 1.0 {
        small
    } else {
        large
    }
}

/// The exact GELU, x·Φ(x) = ½·x·(1 + erf(x/√2)) (ONNX Gelu without approximation).
#[inline(always)]
pub fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x / std::f32::consts::SQRT_2))
}

/// `f` over a slice, compiled for AVX2 + FMA when the CPU has them.
macro_rules! in_place {
    ($name:ident, $avx2:ident, $f:ident, $doc:literal) => {
        #[doc = $doc]
        pub fn $name(xs: &mut [f32]) {
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
                // SAFETY: the CPU has AVX2 and FMA (checked just above)
                return unsafe { $avx2(xs) };
            }
            xs.iter_mut().for_each(|x| *x = $f(*x));
        }

        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2,fma")]
        unsafe fn $avx2(xs: &mut [f32]) {
            xs.iter_mut().for_each(|x| *x = $f(*x));
        }
    };
}

in_place!(erf_in_place, erf_avx2, erf, "[`erf`] of every value of `xs`, in place.");
in_place!(
    gelu_in_place,
    gelu_avx2,
    gelu,
    "[`gelu`] of every value of `xs`, in place."
);

#[cfg(test)]
mod tests {
    use super::*;

    /// Units in the last place of f32 at `v`.
    fn ulp(v: f64) -> f64 {
        let v = v.abs();
        if v < f32::MIN_POSITIVE as f64 {
            return (f32::from_bits(1)) as f64;
        }
        let e = v.log2().floor();
        2f64.powf(e - 23.0)
    }

    fn grid() -> Vec<f32> {
        // dense over [0, 4.5], finer across both joins (1 and 4), and tiny values
        let mut xs: Vec<f32> = (0..=450_000).map(|i| i as f32 * 1e-5).collect();
        xs.extend((0..20_000).map(|i| 0.99 + i as f32 * 1e-6));
        xs.extend((0..20_000).map(|i| 3.99 + i as f32 * 1e-6));
        xs.extend((0..200).map(|i| f32::from_bits(1 + i * 4_000_000)));
        xs.extend(xs.clone().iter().map(|x| -x));
        xs
    }

    #[test]
    fn erf_is_within_one_ulp_of_the_exact_value() {
        let mut worst = (0.0, 0.0f32);
        for &x in &grid() {
            let exact = libm::erf(x as f64);
            let err = (erf(x) as f64 - exact).abs() / ulp(exact);
            if err > worst.0 {
                worst = (err, x);
            }
        }
        assert!(worst.0 < 1.0, "{} ulp at x = {}", worst.0, worst.1);
    }

    #[test]
    fn erf_keeps_its_special_values_sign_and_order() {
        assert_eq!(erf(0.0).to_bits(), 0f32.to_bits());
        assert_eq!(erf(-0.0).to_bits(), (-0f32).to_bits());
        assert_eq!((erf(f32::INFINITY), erf(f32::NEG_INFINITY)), (1.0, -1.0));
        assert_eq!((erf(1e30), erf(-5.0)), (1.0, -1.0));
        assert!(erf(f32::NAN).is_nan());
        let xs: Vec<f32> = (0..=900_000).map(|i| i as f32 * 5e-6).collect();
        for w in xs.windows(2) {
            assert!(erf(w[0]) <= erf(w[1]), "not monotone at {}", w[1]);
            assert_eq!(erf(-w[1]), -erf(w[1]));
        }
    }

    #[test]
    fn slices_and_single_values_agree_bit_for_bit() {
        let xs = grid();
        let mut e = xs.clone();
        erf_in_place(&mut e);
        let mut g = xs.clone();
        gelu_in_place(&mut g);
        for ((&x, e), g) in xs.iter().zip(e).zip(g) {
            assert_eq!(e.to_bits(), erf(x).to_bits(), "erf {x}");
            assert_eq!(g.to_bits(), gelu(x).to_bits(), "gelu {x}");
        }
    }

    #[test]
    fn gelu_is_x_times_the_normal_cdf() {
        for &x in &grid() {
            let x64 = x as f64;
            let exact = 0.5 * x64 * (1.0 + libm::erf(x64 / std::f64::consts::SQRT_2));
            // the f32 steps around erf add their own roundings (x/√2, 1 + erf, the products),
            // and erf's own error, up to one unit of 1, is scaled by x/2
            let err = (gelu(x) as f64 - exact).abs();
            let bound = 3.0 * ulp(exact) + 0.5 * x64.abs() * f32::EPSILON as f64;
            assert!(err <= bound, "gelu({x}) = {} vs {exact}", gelu(x));
        }
    }
}
