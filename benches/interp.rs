//! Interpreter speed: whole MobileNet v2 0.35 per sample (single thread, TF-dialect and ONNX
//! exports), an NCHW → NHWC permutation, the conv and
//! depthwise shapes it runs, the digits MLP matmuls, transformer-sized batch matmuls, and a
//! BERT-base layer's elementwise kernels (erf/GELU, softmax, layer norm) beside the scalar
//! forms they replaced.
mod common;

use criterion::{criterion_group, criterion_main, Criterion};
use ndarray::{ArrayD, Dimension, IxDyn};
use quantir::interp::kernels::conv::{conv2d, Padding};
use quantir::interp::kernels::depthwise::depthwise_conv2d;
use quantir::interp::kernels::elementwise::UnOp;
use quantir::interp::kernels::epilogue::Epilogue;
use quantir::interp::kernels::erf::{erf_in_place, gelu_in_place};
use quantir::interp::kernels::exp::exp_shifted_in_place;
use quantir::interp::kernels::matmul::{batch_matmul, gemm_strided, matmul};
use quantir::interp::kernels::norm::{normalize, softmax};
use quantir::interp::kernels::packed_gemm::{gemm_packed, PackedMatrix, Strides};
use quantir::interp::Program;
use quantir::tensor::Tensor;
use std::hint::black_box;

/// The command line's allocator, so that kernels are timed on the buffers they get there.
#[global_allocator]
static GLOBAL: quantir::alloc::CacheAligned = quantir::alloc::CacheAligned;

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
    let (xs, fs) = (arr(&[1, 16, 16, 32]), arr(&[3, 3, 32, 1]));
    g.bench_function("depthwise3x3_s1_16x16x32", |b| {
        b.iter(|| depthwise_conv2d(&xs, &fs, [1, 1], [1, 1], &Padding::Same, None).unwrap())
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

    // The 1×1 convolutions' GEMM with its bias + ReLU6 epilogue: B packed once and the epilogue
    // applied in registers, against the gemm crate (which packs B each call) and a separate
    // epilogue pass. MobileNet v2 0.35's shapes (pixels × ci × co), its first conv's im2col,
    // and its classifier.
    let mut g = c.benchmark_group("pointwise_gemm");
    for (m, k, n) in [
        (12544, 16, 8),
        (3136, 8, 48),
        (196, 144, 24),
        (49, 112, 1280),
        (12544, 27, 16),
        (1, 1280, 1000),
    ] {
        let (a, bm) = (arr(&[m, k]), arr(&[k, n]));
        let (a, bm) = (a.as_slice().unwrap(), bm.as_slice().unwrap());
        let bias = vec![0.25f32; n];
        let ep = Epilogue {
            scale: None,
            bias: Some(&bias),
            act: Some(UnOp::Relu6),
        };
        let packed = PackedMatrix::new(bm, k, n).unwrap();
        let mut out = vec![0f32; m * n];
        g.bench_function(format!("packed_{m}x{k}x{n}"), |b| {
            b.iter(|| {
                let (sa, sc) = (Strides { rs: k as isize, cs: 1 }, Strides { rs: n as isize, cs: 1 });
                // SAFETY: A is m × k, C is m × n, both row-major inside their buffers
                unsafe { gemm_packed(m, a.as_ptr(), sa, &packed, out.as_mut_ptr(), sc, Some(&ep)).unwrap() }
            })
        });
        g.bench_function(format!("gemm_crate_{m}x{k}x{n}"), |b| {
            b.iter(|| {
                gemm_strided(m, n, k, a, k as isize, 1, bm, n as isize, 1, &mut out);
                ep.apply(&mut out, n);
            })
        });
    }
    g.finish();
}

/// One BERT-base layer's elementwise work on a sequence of 128: the FFN's GELU over
/// [128 × 3072] (erf branch-free and vectorised, against libm's `erff` value by value), the
/// exps of softmax over the 12 heads' [128 × 128] scores (against `f32::exp`), the whole
/// softmax, and the layer norm over [128 × 768].
fn transformer(c: &mut Criterion) {
    let mut g = c.benchmark_group("transformer");
    let ffn = arr(&[128, 3072]).mapv(|v| 6.0 * v);
    let ffn = ffn.as_slice().unwrap().to_vec();
    let mut buf = ffn.clone();
    g.bench_function("erf_128x3072", |b| {
        b.iter(|| {
            buf.copy_from_slice(&ffn);
            erf_in_place(black_box(&mut buf));
        })
    });
    g.bench_function("erf_libm_128x3072", |b| {
        b.iter(|| {
            buf.copy_from_slice(&ffn);
            buf.iter_mut().for_each(|v| *v = libm::erff(*v));
            black_box(&buf);
        })
    });
    g.bench_function("gelu_128x3072", |b| {
        b.iter(|| {
            buf.copy_from_slice(&ffn);
            gelu_in_place(black_box(&mut buf));
        })
    });
    let scores = arr(&[12, 128, 128]).mapv(|v| 8.0 * v);
    let rows = scores.as_slice().unwrap().to_vec();
    let mut lanes = rows.clone();
    g.bench_function("softmax_exps_12x128x128", |b| {
        b.iter(|| {
            lanes.copy_from_slice(&rows);
            for row in lanes.chunks_exact_mut(128) {
                let m = row.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
                exp_shifted_in_place(row, m);
            }
            black_box(&lanes);
        })
    });
    g.bench_function("softmax_exps_std_12x128x128", |b| {
        b.iter(|| {
            lanes.copy_from_slice(&rows);
            for row in lanes.chunks_exact_mut(128) {
                let m = row.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
                row.iter_mut().for_each(|v| *v = (*v - m).exp());
            }
            black_box(&lanes);
        })
    });
    g.bench_function("softmax_12x128x128", |b| {
        b.iter(|| softmax(black_box(&scores), false).unwrap())
    });
    let hidden = arr(&[1, 128, 768]);
    g.bench_function("layer_norm_128x768", |b| {
        b.iter(|| normalize(black_box(&hidden), 2, 1e-12))
    });
    g.finish();
}

criterion_group!(benches, bench, transformer);
criterion_main!(benches);
