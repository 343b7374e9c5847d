//! Range selection on known distributions: each expected value is explained next to it.

mod common;
use common::{empirical_quantile, Rng};
use quantir_calibration::{select, Histogram};

const N: usize = 1_000_000;

fn hist(xs: &[f32], bins: usize) -> Histogram {
    let mut h = Histogram::new(bins);
    for c in xs.chunks(10_000) {
        h.observe_slice(c);
    }
    h
}

#[test]
fn percentiles_are_within_one_bin_of_the_data_quantiles() {
    let mut r = Rng::new(1);
    for (name, xs) in [
        ("uniform(-1,3)", r.vec(N, |r| -1.0 + 4.0 * r.uniform())),
        ("normal(0,1)", r.vec(N, |r| r.normal())),
        ("laplace(0,0.5)", r.vec(N, |r| r.laplace(0.5))),
        ("relu(normal)", r.vec(N, |r| r.normal().max(0.0))),
    ] {
        let h = hist(&xs, 2048);
        let w = h.width() as f32;
        for p in [99.0, 99.9, 99.99] {
            let (lo, hi) = select::percentile(&h, p).unwrap();
            let tail = (100.0 - p) / 200.0;
            let (elo, ehi) = (empirical_quantile(&xs, tail), empirical_quantile(&xs, 1.0 - tail));
            assert!(
                (lo - elo).abs() <= w && (hi - ehi).abs() <= w,
                "{name} p{p}: ({lo}, {hi}) vs data ({elo}, {ehi}), bin {w}"
            );
        }
        let abs: Vec<f32> = xs.iter().map(|x| x.abs()).collect();
        let (lo, hi) = select::percentile_symmetric(&h, 99.9).unwrap();
        let t = empirical_quantile(&abs, 0.999);
        assert!(
            (hi - t.min(h.max())).abs() <= w && (lo - (-t).max(h.min())).abs() <= w,
            "{name} symmetric: ({lo}, {hi}) vs ±{t}"
        );
    }
    // the analytic value too, where sampling noise is below a bin: uniform(-1, 3) at 99.99 %
    let xs = r.vec(N, |r| -1.0 + 4.0 * r.uniform());
    let (lo, hi) = select::percentile(&hist(&xs, 2048), 99.99).unwrap();
    assert!(
        (lo + 0.9998).abs() < 0.002 && (hi - 2.9998).abs() < 0.002,
        "({lo}, {hi})"
    );
}

#[test]
fn mse_clips_where_the_theory_says() {
    // Banner et al. (ACIQ, 2019): the clipping value minimising the expected squared error of
    // a symmetric uniform quantizer is ≈ 2.55σ for a Gaussian at 4 bits and ≈ 5.03b for a
    // Laplace(0, b) at 4 bits, ≈ 9.89b at 8 bits. The search sees a sample, not the density,
    // so a tolerance of 10 % (15 % at 8 bits, where the answer sits in the sparse tail) is
    // allowed.
    let mut r = Rng::new(2);
    let normal = hist(&r.vec(N, |r| r.normal()), 2048);
    let (_, t) = select::mse(&normal, 4, true).unwrap();
    assert!((t - 2.55).abs() < 0.255, "gaussian 4-bit clip {t}");
    let lap = hist(&r.vec(N, |r| r.laplace(1.0)), 2048);
    let (_, t) = select::mse(&lap, 4, true).unwrap();
    assert!((t - 5.03).abs() < 0.503, "laplace 4-bit clip {t}");
    let (_, t) = select::mse(&lap, 8, true).unwrap();
    assert!((t - 9.89).abs() < 1.5, "laplace 8-bit clip {t}");
    assert!(
        t < lap.max(),
        "8-bit MSE still clips the heavy tail ({t} < {})",
        lap.max()
    );
    // asymmetric on ReLU outputs: the range starts at 0 and clips the top
    let relu = hist(&r.vec(N, |r| r.normal().max(0.0)), 2048);
    let (lo, hi) = select::mse(&relu, 4, false).unwrap();
    assert_eq!(lo, 0.0);
    assert!(hi > 2.0 && hi < relu.max(), "relu 4-bit range ({lo}, {hi})");
}

#[test]
fn mse_keeps_a_lone_outlier_because_clipping_it_costs_more() {
    // One value at 40 among N values of N(0,1), 8 bits, range [−4.8, t]. The objective trades
    // the outlier's clipping error (40 − t)² against the rounding noise N·step²/12 with
    // step = (t + 4.8)/255. For N = 10⁶ the noise term is 1.28·(t + 4.8)², which balances
    // (40 − t)² near t ≈ 15 (cost ≈ 1100, against ≈ 1350 at t = 5 and ≈ 2500 at t = 40): the
    // outlier is partly clipped. For N = 10⁴ the noise is 100× smaller and keeping the outlier
    // (cost ≈ 25) beats any clipping.
    let mut r = Rng::new(3);
    let mut xs = r.vec(N, |r| r.normal());
    xs[12345] = 40.0;
    let (_, hi) = select::mse(&hist(&xs, 2048), 8, false).unwrap();
    assert!(
        hi > 10.0 && hi < 20.0,
        "10⁶ samples: clip the outlier near 15, got {hi}"
    );
    let mut small = r.vec(10_000, |r| r.normal());
    small[17] = 40.0;
    let (_, hi) = select::mse(&hist(&small, 2048), 8, false).unwrap();
    assert!(hi > 35.0, "10⁴ samples: keep the outlier, got {hi}");
}

#[test]
fn entropy_clips_heavy_tails_and_outliers_but_not_uniform_data() {
    let mut r = Rng::new(4);
    // uniform data has no tail: any clipping loses mass and gains no resolution worth it
    let u = hist(&r.vec(N, |r| -1.0 + 4.0 * r.uniform()), 2048);
    let (lo, hi) = select::entropy(&u, 128).unwrap();
    assert!(lo <= -0.99 && hi >= 2.95, "uniform ({lo}, {hi})");
    // Laplace(0,1): clipped inside the tail — beyond the 99th percentile of |x| (4.6), below max
    let xs = r.vec(N, |r| r.laplace(1.0));
    let lap = hist(&xs, 2048);
    let (_, hi) = select::entropy(&lap, 128).unwrap();
    assert!(
        hi > 4.6 && hi < 0.9 * lap.max(),
        "laplace threshold {hi}, max {}",
        lap.max()
    );
    // a lone outlier at 40 carries 10⁻⁶ of the mass: the threshold stays with the bulk
    let mut xs = r.vec(N, |r| r.normal());
    xs[99] = 40.0;
    let (lo, hi) = select::entropy(&hist(&xs, 2048), 128).unwrap();
    assert!(hi < 6.0 && lo > -6.0, "outlier ({lo}, {hi})");
    // ReLU outputs: the range keeps 0 as its lower end
    let relu = hist(&r.vec(N, |r| r.normal().max(0.0)), 2048);
    let (lo, hi) = select::entropy(&relu, 128).unwrap();
    assert_eq!(lo, 0.0);
    assert!(hi > 1.5 && hi < relu.max(), "relu ({lo}, {hi})");
}

#[test]
fn constant_tensors_give_a_point_range() {
    for c in [0.0f32, 2.5, -7.25] {
        let h = hist(&vec![c; 1000], 2048);
        assert_eq!(select::percentile(&h, 99.9), Some((c, c)));
        assert_eq!(select::percentile_symmetric(&h, 99.9), Some((c, c)));
        assert_eq!(select::entropy(&h, 128), Some((c, c)));
        assert_eq!(select::mse(&h, 8, false).map(|r| r.1), Some(c.max(c)));
    }
    assert_eq!(select::entropy(&Histogram::new(2048), 128), None);
}

#[test]
fn entropy_is_not_pulled_down_by_the_exact_zeros_of_a_relu() {
    // a ReLU after a conv: 45 % exact zeros, the rest |Laplace(1)| — fer's activations look so.
    // Merging bins spreads the zero spike, so a KL that counts it picks the threshold that
    // merges nothing (128 bins of |x|: 0.5 here) whatever that clips; zero is exact on every
    // grid, and the threshold belongs in the tail (|Laplace(1)|: 99 % below 4.6)
    let mut r = Rng::new(6);
    let xs = r.vec(N, |r| if r.uniform() < 0.45 { 0.0 } else { r.laplace(1.0).abs() });
    let h = hist(&xs, 2048);
    let (lo, hi) = select::entropy(&h, 128).unwrap();
    assert_eq!(lo, 0.0);
    assert!(hi > 4.6 && hi < h.max(), "relu ({lo}, {hi}), max {}", h.max());
}
