//! Interpreter speed: whole MobileNet v2 0.35 per sample (single thread, TF-dialect and ONNX
//! exports), an NCHW → NHWC permutation, the conv and
//! depthwise shapes it runs, the digits MLP matmuls, and transformer-sized batch matmuls.
mod common;

use criterion::{criterion_group, criterion_main, Criterion};
use ndarray::{ArrayD, Dimension, IxDyn};
use quantir::interp::kernels::conv::{conv2d, depthwise_conv2d, Padding};
use quantir::interp::kernels::matmul::{batch_matmul, matmul};
use quantir::interp::Program;
use quantir::tensor::Tensor;
use std::hint::black_box;

fn arr(shape: &[usize]) -> ArrayD<f32> {
    ArrayD::from_shape_fn(IxDyn(shape), |i| {
        ((i.as_array_view().iter().sum::<usize>() * 7919) % 97) as f32 / 97.0 - 0.5
    })
}

fn bench(c: &mut Criterion) {
    let text = common::mobilenet_text();
    let ctx = quantir::ir::new_context();
    let m = quantir::ir::load_bytes(&ctx, &text, std::path::Path::new("mobilenet.mlir")).unwrap();
    let p = Program::compile(&m, None).unwrap();
    let x = vec![Tensor::F32(arr(&[1, 224, 224, 3]))];
    let mut g = c.benchmark_group("model");
    g.sample_size(20);
    g.bench_function("mobilenet_v2_035_1thread", |b| b.iter(|| black_box(p.run(&x).unwrap())));
    // the same network as shipped in ONNX (NCHW inside, an NHWC input transposed in)
    let onnx = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/mobilenet_v2_035.onnx");
    let mo = quantir::formats::model::load(&ctx, &onnx).unwrap();
    let po = Program::compile(&mo, None).unwrap();
    g.bench_function("mobilenet_v2_035_onnx_1thread", |b| {
        b.iter(|| black_box(po.run(&x).unwrap()))
    });
    g.finish();

    let mut g = c.benchmark_group("kernels");
    // MobileNet v2 0.35 shapes: first 3×3 s2 conv, a 1×1 expansion, depthwise 3×3 s1 and s2
    let (xi, fi) = (arr(&[1, 224, 224, 3]), arr(&[3, 3, 3, 16]));
    g.bench_function("conv3x3_s2_224x224x3_to_16", |b| {
        b.iter(|| conv2d(&xi, &fi, [2, 2], [1, 1], &Padding::Same, None).unwrap())
    });
    let (xe, fe) = (arr(&[1, 56, 56, 8]), arr(&[1, 1, 8, 48]));
    g.bench_function("conv1x1_56x56x8_to_48", |b| {
        b.iter(|| conv2d(&xe, &fe, [1, 1], [1, 1], &Padding::Same, None).unwrap())
    });
    // basic_pitch's 3×39 conv over its harmonic stack, 8 channels in and out (row GEMMs)
    let (xb, fb) = (arr(&[1, 172, 264, 8]), arr(&[3, 39, 8, 8]));
    g.bench_function("conv3x39_172x264x8_to_8", |b| {
        b.iter(|| conv2d(&xb, &fb, [1, 1], [1, 1], &Padding::Same, None).unwrap())
    });
    let (xd, fd) = (arr(&[1, 112, 112, 16]), arr(&[3, 3, 16, 1]));
    g.bench_function("depthwise3x3_s1_112x112x16", |b| {
        b.iter(|| depthwise_conv2d(&xd, &fd, [1, 1], [1, 1], &Padding::Same, None).unwrap())
    });
    let (xd2, fd2) = (arr(&[1, 112, 112, 48]), arr(&[3, 3, 48, 1]));
    g.bench_function("depthwise3x3_s2_112x112x48", |b| {
        b.iter(|| depthwise_conv2d(&xd2, &fd2, [2, 2], [1, 1], &Padding::Same, None).unwrap())
    });
    // NCHW -> NHWC of a MobileNet activation (what an ONNX conv without an NCHW kernel pays)
    let xt = arr(&[1, 16, 112, 112]);
    g.bench_function("permute_nchw_to_nhwc_1x16x112x112", |b| {
        b.iter(|| quantir::interp::kernels::permute::permute(xt.view(), &[0, 2, 3, 1]))
    });
    // digits MLP: [1,64]·[64,64]; transformer-sized: 4×16×8 · 4×8×16
    let (a, w) = (arr(&[1, 64]), arr(&[64, 64]));
    g.bench_function("matmul_1x64x64", |b| b.iter(|| matmul(&a, &w, false, false).unwrap()));
    let (q, k) = (arr(&[4, 16, 8]), arr(&[4, 8, 16]));
    g.bench_function("batch_matmul_4x16x8_4x8x16", |b| {
        b.iter(|| batch_matmul(&q, &k, false, false).unwrap())
    });
    let (s, v) = (arr(&[8, 12, 128, 64]), arr(&[8, 12, 64, 128]));
    g.bench_function("batch_matmul_8x12x128x64_x_64x128", |b| {
        b.iter(|| batch_matmul(&s, &v, false, false).unwrap())
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
