//! Rewriter pass timings on MobileNet v2 0.35 (each pass on a freshly loaded module) and the
//! whole quantization of the prepared module from a statistics file.
mod common;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use quantir::passes::{find, PassOptions};

fn bench(c: &mut Criterion) {
    let text = common::mobilenet_text();
    let ctx = quantir::ir::new_context();
    let load = || quantir::ir::load_bytes(&ctx, &text, std::path::Path::new("mobilenet.mlir")).unwrap();
    let none = PassOptions::default();
    let mut g = c.benchmark_group("passes_mobilenet_v2_035");
    g.sample_size(10);
    // each pass runs on a module that went through the passes before it in `prepare`
    let mut before: Vec<&str> = Vec::new();
    for name in quantir::quantize::PREPARE {
        let pass = find(name).unwrap();
        let prior = before.clone();
        g.bench_function(*name, |b| {
            b.iter_batched(
                || {
                    let m = load();
                    for p in &prior {
                        (find(p).unwrap().run)(&m, &none).unwrap();
                    }
                    m
                },
                |m| (pass.run)(&m, &none).unwrap(),
                BatchSize::PerIteration,
            )
        });
        before.push(name);
    }
    // quantize-weights + insert-qdq from synthetic statistics (every activation in [0, 6])
    let prepared = load();
    quantir::quantize::prepare(&prepared).unwrap();
    let plan = quantir::quantize::plan(&prepared, None, &Default::default()).unwrap();
    let mut stats = quantir::calibration::StatsFile::new(
        quantir::quantize::model_hash(&prepared),
        quantir::calibration::Method::MinMax,
        0,
        Default::default(),
    );
    let v = ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&[2]), vec![0.0f32, 6.0]).unwrap();
    for k in plan.observed_keys() {
        stats.observe(&k, 0, &v.view(), None).unwrap();
    }
    stats.finalize().unwrap();
    g.bench_function("quantize_module (prepare + quantize-weights + insert-qdq)", |b| {
        b.iter_batched(
            load,
            |m| quantir::quantize::quantize_module(&m, &stats, &Default::default()).unwrap(),
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
