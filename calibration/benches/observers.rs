//! Observer throughput (single thread) and the time of each range search on a 2048-bin histogram.
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use quantir_calibration::{select, Histogram, MinMax};
use std::hint::black_box;

const N: usize = 1 << 22;

fn normal(n: usize) -> Vec<f32> {
    let mut s = 0x2545_F491_4F6C_DD1Du64;
    let mut u = || {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        ((s.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    };
    (0..n)
        .map(|_| ((-2.0 * u().ln()).sqrt() * (std::f64::consts::TAU * u()).cos()) as f32)
        .collect()
}

fn bench(c: &mut Criterion) {
    let xs = normal(N);
    let mut g = c.benchmark_group("observe_4M");
    g.throughput(Throughput::Elements(N as u64));
    g.sample_size(20);
    g.bench_function("minmax", |b| {
        b.iter(|| {
            let mut m = MinMax::default();
            m.observe_slice(black_box(&xs));
            m
        })
    });
    let mut warm = Histogram::new(2048);
    warm.observe_slice(&xs);
    g.bench_function("histogram_2048", |b| {
        b.iter(|| {
            let mut h = warm.clone();
            h.observe_slice(black_box(&xs));
            h
        })
    });
    g.finish();

    let mut g = c.benchmark_group("range_search_2048_bins");
    let h = warm;
    g.bench_function("percentile", |b| b.iter(|| select::percentile(black_box(&h), 99.99)));
    g.bench_function("percentile_symmetric", |b| {
        b.iter(|| select::percentile_symmetric(black_box(&h), 99.99))
    });
    g.bench_function("entropy_128", |b| b.iter(|| select::entropy(black_box(&h), 128)));
    g.bench_function("mse_asymmetric", |b| b.iter(|| select::mse(black_box(&h), 8, false)));
    g.bench_function("mse_symmetric", |b| b.iter(|| select::mse(black_box(&h), 8, true)));
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
