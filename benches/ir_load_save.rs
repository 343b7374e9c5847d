//! Load + save of the MobileNet v2 (0.35) TF-dialect module: text parse, text print, bytecode,
//! and the import of the same model from its SavedModel directory.
mod common;

use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;

fn bench(c: &mut Criterion) {
    let text = common::mobilenet_text();
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("mobilenet.mlir");
    std::fs::write(&src, &text).unwrap();
    let ctx = quantir::ir::new_context();
    let module = quantir::ir::load(&ctx, &src).unwrap();
    let bc = dir.path().join("m.mlirbc");
    quantir::ir::save(&module, &bc, &[]).unwrap();
    let mut g = c.benchmark_group("mobilenet_v2_035");
    g.sample_size(10);
    g.bench_function("load_text", |b| {
        b.iter(|| black_box(quantir::ir::load(&ctx, &src).unwrap()))
    });
    g.bench_function("load_bytecode", |b| {
        b.iter(|| black_box(quantir::ir::load(&ctx, &bc).unwrap()))
    });
    let saved = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/mobilenet_v2_035_savedmodel");
    g.bench_function("import_savedmodel", |b| {
        b.iter(|| black_box(quantir::formats::savedmodel::load(&ctx, &saved, None).unwrap()))
    });
    // what quantize -o x.onnx adds for a TF model: TF's prepare passes, then tf-to-onnx
    g.bench_function("lower_tf_to_onnx", |b| {
        b.iter_batched(
            || quantir::formats::savedmodel::load(&ctx, &saved, None).unwrap(),
            |m| black_box(quantir::quantize::lower_to_onnx(&m).unwrap()),
            criterion::BatchSize::LargeInput,
        )
    });
    let out_t = dir.path().join("out.mlir");
    let out_b = dir.path().join("out.mlirbc");
    g.bench_function("save_text", |b| {
        b.iter(|| quantir::ir::save(&module, &out_t, &[&src]).unwrap())
    });
    g.bench_function("save_bytecode", |b| {
        b.iter(|| quantir::ir::save(&module, &out_b, &[&src]).unwrap())
    });
    g.bench_function("load_save_text", |b| {
        b.iter(|| {
            let m = quantir::ir::load(&ctx, &src).unwrap();
            quantir::ir::save(&m, &out_t, &[&src]).unwrap()
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
