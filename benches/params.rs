//! quantize / dequantize / f32→f16 throughput on 16 M elements, and GPTQ's factorisation of a
//! Gram matrix (single thread).
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ndarray::{ArrayD, IxDyn};
use quantir::params::*;
use std::hint::black_box;

const N: usize = 16 << 20;

fn data() -> ArrayD<f32> {
    let v: Vec<f32> = (0..N)
        .map(|i| ((i as u32).wrapping_mul(2654435761) >> 8) as f32 / (1 << 24) as f32 * 8.0 - 3.0)
        .collect();
    ArrayD::from_shape_vec(IxDyn(&[N / 256, 256]), v).unwrap()
}

fn bench(c: &mut Criterion) {
    let x = data();
    let pt = compute(Scheme::Onnx, StorageType::Int8, -3.0, 5.0, &RangeOptions::default()).unwrap();
    let mins: Vec<f64> = (0..256).map(|i| -3.0 + i as f64 * 0.001).collect();
    let maxs: Vec<f64> = (0..256).map(|i| 5.0 - i as f64 * 0.001).collect();
    let pa = compute_per_axis(
        Scheme::Onnx,
        StorageType::Int8,
        &mins,
        &maxs,
        1,
        &RangeOptions::default(),
    )
    .unwrap();
    let mut g = c.benchmark_group("params_16M");
    g.throughput(Throughput::Elements(N as u64));
    g.sample_size(10);
    for (name, p) in [("per_tensor", &pt), ("per_axis_256", &pa)] {
        g.bench_with_input(BenchmarkId::new("quantize_int8", name), p, |b, p| {
            b.iter(|| black_box(quantize(&x.view(), p, Rounding::HalfEven).unwrap()))
        });
        let q = quantize(&x.view(), p, Rounding::HalfEven).unwrap();
        g.bench_with_input(BenchmarkId::new("dequantize_int8", name), p, |b, p| {
            b.iter(|| black_box(dequantize(&q, p).unwrap()))
        });
    }
    // the slice kernel alone, without the output allocation
    let xs = x.as_slice().unwrap();
    let mut out = vec![0i8; N];
    g.bench_function("quantize_slice_int8_per_tensor", |b| {
        b.iter(|| {
            quantize_slice(
                black_box(xs),
                &mut out,
                pt.scale[0] as f32,
                pt.zero_point[0],
                -128,
                127,
                Rounding::HalfEven,
            )
        })
    });
    let mut deq = vec![0f32; N];
    g.bench_function("dequantize_slice_int8_per_tensor", |b| {
        b.iter(|| dequantize_slice(black_box(&out), &mut deq, pt.scale[0] as f32, pt.zero_point[0]))
    });
    g.bench_function("f32_to_f16", |b| b.iter(|| black_box(to_f16(&x.view()))));
    g.finish();
}

/// GPTQ's factor of a k×k Gram matrix (the upper Cholesky factor of its damped inverse), at
/// the patch lengths of a 3×3 convolution over 32 and 128 channels. The matrix is a
/// Kac–Murdock–Szegő one (0.9^|i−j|: positive definite, correlated like neighbouring pixels).
fn bench_gptq(c: &mut Criterion) {
    let mut g = c.benchmark_group("gptq_factor");
    g.sample_size(10);
    for k in [288usize, 1152] {
        let h: Vec<f64> = (0..k * k)
            .map(|i| 0.9f64.powi((i / k).abs_diff(i % k) as i32))
            .collect();
        g.bench_with_input(BenchmarkId::from_parameter(k), &h, |b, h| {
            b.iter(|| black_box(gptq::factor(h, k).unwrap()))
        });
    }
}

criterion_group!(benches, bench, bench_gptq);
criterion_main!(benches);
