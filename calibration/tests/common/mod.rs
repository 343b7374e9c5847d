//! Deterministic sample generators for the tests (xorshift64*, Box–Muller, inverse CDF).
#![allow(dead_code)]

pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    /// Uniform in (0, 1).
    pub fn uniform(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let x = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D);
        ((x >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
    pub fn normal(&mut self) -> f64 {
        let (u, v) = (self.uniform(), self.uniform());
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }
    pub fn laplace(&mut self, b: f64) -> f64 {
        let u = self.uniform() - 0.5;
        -b * u.signum() * (1.0 - 2.0 * u.abs()).ln()
    }
    pub fn vec(&mut self, n: usize, f: impl Fn(&mut Rng) -> f64) -> Vec<f32> {
        (0..n).map(|_| f(self) as f32).collect()
    }
}

/// The exact empirical quantile (lower interpolation) of `xs` at fraction `q`.
pub fn empirical_quantile(xs: &[f32], q: f64) -> f32 {
    let mut s = xs.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let i = ((q * s.len() as f64).floor() as usize).min(s.len() - 1);
    s[i]
}
