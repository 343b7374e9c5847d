//! Dot products of f32 runs, in a summation order fixed by their length alone (the same bits
//! on every CPU this runs on): GPTQ's Gram matrices of depthwise convolutions are made of them.

/// Partial sums of [`dot_lanes`]: four vector registers of eight, so that four additions are in
/// flight rather than one waiting on the last.
const LANES: usize = 32;

/// The lanes of a dot product added pairwise (32 → 16 → … → 1), then the tail.
fn reduce_lanes(mut acc: [f32; LANES], a: &[f32], b: &[f32]) -> f32 {
    let mut n = LANES;
    while n > 1 {
        n /= 2;
        for l in 0..n {
            acc[l] += acc[l + n];
        }
    }
    let mut tail = 0f32;
    for (x, y) in a.iter().zip(b) {
        tail += x * y;
    }
    acc[0] + tail
}

/// Σ a_i b_i in f32: lane l sums the products at l, l + 32, …, in order; multiplies and adds
/// stay separate (no fused multiply-add), so the AVX2 form gives the same bits as this one.
fn dot_lanes(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; LANES];
    let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for l in 0..LANES {
            acc[l] += x[l] * y[l];
        }
    }
    reduce_lanes(acc, ra, rb)
}

/// Σ a_i b_i in f32 over the shorter of the two, [`dot_lanes`]' sums, in AVX2 registers where
/// the CPU has them.
pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2 (checked above)
        return unsafe { dot_lanes_avx2(a, b) };
    }
    dot_lanes(a, b)
}

/// [`dot_lanes`] in AVX2 registers.
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn dot_lanes_avx2(a: &[f32], b: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    let n = a.len().min(b.len()) / LANES * LANES;
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i < n {
        for (r, v) in acc.iter_mut().enumerate() {
            // SAFETY: i + 8r + 8 ≤ n ≤ both lengths
            let (x, y) = unsafe {
                (
                    _mm256_loadu_ps(a.as_ptr().add(i + 8 * r)),
                    _mm256_loadu_ps(b.as_ptr().add(i + 8 * r)),
                )
            };
            *v = _mm256_add_ps(*v, _mm256_mul_ps(x, y));
        }
        i += LANES;
    }
    let mut lanes = [0f32; LANES];
    for (r, v) in acc.iter().enumerate() {
        // SAFETY: lanes holds 32 values: 8 at 8r
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr().add(8 * r), *v) };
    }
    reduce_lanes(lanes, &a[n..], &b[n..])
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_avx2_dot_product_gives_the_portable_bits() {
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("avx2") {
            for n in [0, 1, 31, 32, 33, 100, 1000] {
                let a: Vec<f32> = (0..n).map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0).collect();
                let b: Vec<f32> = (0..n).map(|i| ((i * 53 % 89) as f32 - 44.0) / 3.0).collect();
                // SAFETY: checked above
                let fast = unsafe { super::dot_lanes_avx2(&a, &b) };
                assert_eq!(fast.to_bits(), super::dot_lanes(&a, &b).to_bits(), "n {n}");
            }
        }
    }
}
