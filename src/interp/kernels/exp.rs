//! exp(a) for a ≤ 0 in f32 without branches, so that a slice of it vectorises: softmax's
//! exp(x − max) and erf's tail (`kernels::erf`), where libm's `expf` ran one value at a time.
//!
//! a = n·ln 2 + r with |r| ≤ ln 2 / 2 (Cody and Waite's two-part ln 2), exp(r) by a degree-6
//! polynomial (a weighted least-squares fit towards the minimax error, rounded to f32), and
//! 2ⁿ as two powers of two built from their exponent bits, so that results below f32's
//! smallest normal number (a < −87.3) round once into the subnormals as they should. About
//! one unit in the last place from the exact value (1.05 at most over the test's two million
//! points, against f64's exp); every path computes the same fused multiply-adds, so results
//! do not depend on the CPU.

/// exp(r), r ∈ [−ln 2 / 2, ln 2 / 2], highest degree first.
const POLY: [f32; 7] = [0.0013836821, 0.008374816, 0.041668225, 0.1666642, 0.4999999, 1.0, 1.0];

/// ln 2 in two parts: n·LN2_HI is exact for |n| < 512 (LN2_HI has 15 significant bits).
const LN2_HI: f32 = 0.693_145_751_953_125;
const LN2_LO: f32 = 1.4286068e-6;

/// 1.5·2²³: adding it rounds a float below 2²² to an integer (ties to even), which it then
/// holds in its low mantissa bits. n is read from there, not by a float-to-int cast, whose
/// saturating semantics do not vectorise.
const ROUNDER: f32 = 12_582_912.0;

/// Below this exp(a) rounds to 0 (2⁻¹⁵⁰·e^0.03 is under half the smallest subnormal).
const FLOOR: f32 = -104.0;

#[inline(always)]
pub(super) fn horner<const N: usize>(c: &[f32; N], x: f32) -> f32 {
    c[1..].iter().fold(c[0], |r, &k| r.mul_add(x, k))
}

/// exp(a) for a ≤ 0 (−∞ gives 0, NaN stays NaN); not for positive a.
#[inline(always)]
pub fn exp_nonpositive(a: f32) -> f32 {
    // NaN fails the comparison and stays NaN
    let a = if a < FLOOR { FLOOR } else { a };
    let j = a * std::f32::consts::LOG2_E + ROUNDER;
    let n = j - ROUNDER;
    let r = n.mul_add(-LN2_HI, a);
    let r = n.mul_add(-LN2_LO, r);
    // n = n1 + n2, each ≥ −75: both powers are normal numbers, and only the last product can
    // round (into the subnormals)
    let n = (j.to_bits() as i32).wrapping_sub(ROUNDER.to_bits() as i32);
    let (n1, n2) = (n >> 1, n - (n >> 1));
    let power = |k: i32| f32::from_bits(((k + 127) as u32) << 23);
    horner(&POLY, r) * power(n1) * power(n2)
}

/// e^(x − m) of every value of `xs`, in place (softmax's numerators; every x ≤ m).
pub fn exp_shifted_in_place(xs: &mut [f32], m: f32) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU has AVX2 and FMA (checked just above)
        return unsafe { exp_shifted_avx2(xs, m) };
    }
    xs.iter_mut().for_each(|x| *x = exp_nonpositive(*x - m));
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn exp_shifted_avx2(xs: &mut [f32], m: f32) {
    xs.iter_mut().for_each(|x| *x = exp_nonpositive(*x - m));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_is_within_about_one_ulp_down_to_the_subnormals() {
        let mut worst = (0.0, 0.0f32);
        for i in 0..=2_000_000 {
            let a = -(i as f32) * 5.2e-5;
            let exact = (a as f64).exp();
            // one unit in the last place of f32 at `exact`, subnormal spacing at the bottom
            let ulp = 2f64.powf((exact.log2().floor() - 23.0).max(-149.0));
            let err = (exp_nonpositive(a) as f64 - exact).abs() / ulp;
            if err > worst.0 {
                worst = (err, a);
            }
        }
        assert!(worst.0 < 1.1, "{} ulp at a = {}", worst.0, worst.1);
        assert_eq!(exp_nonpositive(0.0), 1.0);
        assert_eq!(exp_nonpositive(-0.0), 1.0);
        assert_eq!(exp_nonpositive(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_nonpositive(-200.0), 0.0);
        assert!(exp_nonpositive(f32::NAN).is_nan());
        // the smallest subnormal: e^-103.28 ≈ 2^-149
        assert_eq!(exp_nonpositive(-103.28), f32::from_bits(1));
    }

    #[test]
    fn the_slice_form_is_the_scalar_form_bit_for_bit() {
        let xs: Vec<f32> = (0..10_000)
            .map(|i| ((i * 7919) % 10_000) as f32 * -0.011 + 3.0)
            .collect();
        let mut got = xs.clone();
        exp_shifted_in_place(&mut got, 3.0);
        for (x, g) in xs.iter().zip(got) {
            assert_eq!(g.to_bits(), exp_nonpositive(x - 3.0).to_bits(), "{x}");
        }
    }
}
