//! `quantize --choose-range`: each activation's range is the candidate whose rounding changes
//! the outputs of the ops reading it least — so the same activation, with the same statistics,
//! gets a different range when its consumer weighs its values differently.

mod common;

use common::{arg, ok, quantir, stderr};
use std::path::Path;

/// `x → Relu → MatMul(w)`, x of 200 features; `w` is one column of 200 weights.
fn model(dir: &Path, name: &str, w: &[f32]) -> String {
    let w: Vec<String> = w.iter().map(|v| format!("[{v:?}]")).collect();
    let text = format!(
        r#"func.func @main(%x: tensor<1x200xf32> loc("x")) -> tensor<1x1xf32> {{
  %r = "onnx.Relu"(%x) : (tensor<1x200xf32>) -> tensor<1x200xf32> loc("r")
  %w = "onnx.Constant"() {{value = dense<[{}]> : tensor<200x1xf32>}} : () -> tensor<200x1xf32> loc("w")
  %y = "onnx.MatMul"(%r, %w) : (tensor<1x200xf32>, tensor<200x1xf32>) -> tensor<1x1xf32> loc("y")
  return %y : tensor<1x1xf32>
}}
"#,
        w.join(", ")
    );
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    arg(&p)
}

/// 64 samples: feature 0 is 50 in every sample (0.5 % of the values, above the 99th
/// percentile), features 1–199 spread over [0, 1).
fn data(dir: &Path) -> String {
    let mut x = ndarray::Array3::<f32>::zeros((64, 1, 200));
    for s in 0..64 {
        x[[s, 0, 0]] = 50.0;
        for f in 1..200 {
            x[[s, 0, f]] = ((s * 200 + f) * 7919 % 1000) as f32 / 1000.0;
        }
    }
    let p = dir.join("x.npy");
    ndarray_npy::write_npy(&p, &x).unwrap();
    arg(&p)
}

fn choice(model: &str, data: &str, out: &Path) -> String {
    let o = ok(quantir(&[
        "quantize",
        model,
        "--data",
        data,
        "--no-cache",
        "--choose-range",
        "--candidates",
        "minmax,percentile",
        "--percentile",
        "99",
        "-o",
        &arg(out),
    ]));
    let err = stderr(&o);
    err.lines()
        .find(|l| l.starts_with("ranges chosen"))
        .unwrap_or_else(|| panic!("no choice line in:\n{err}"))
        .to_string()
}

#[test]
fn the_range_follows_what_the_consumer_reads() {
    let dir = tempfile::tempdir().unwrap();
    let x = data(dir.path());
    // the MatMul reads only feature 0: clipping it at the 99th percentile costs 49 per sample,
    // min/max's coarse steps cost nothing on 0 and 50
    let mut only_outlier = vec![0.0f32; 200];
    only_outlier[0] = 1.0;
    let a = choice(
        &model(dir.path(), "a.mlir", &only_outlier),
        &x,
        &dir.path().join("a.onnx"),
    );
    assert!(a.contains("minmax 1, percentile 0"), "{a}");
    // the MatMul ignores feature 0: min/max's steps of 50/255 on the 199 others cost more
    // than clipping a value it does not read
    let mut all_but = vec![1.0f32; 200];
    all_but[0] = 0.0;
    let b = choice(&model(dir.path(), "b.mlir", &all_but), &x, &dir.path().join("b.onnx"));
    assert!(b.contains("minmax 0, percentile 1"), "{b}");
    assert!(b.contains("on 16 calibration samples"), "{b}");
}

#[test]
fn choose_range_takes_only_ranges_a_histogram_holds() {
    let dir = tempfile::tempdir().unwrap();
    let m = model(dir.path(), "m.mlir", &[1.0; 200]);
    let o = quantir(&[
        "quantize",
        &m,
        "--data",
        &data(dir.path()),
        "--choose-range",
        "--candidates",
        "minmax,avg-minmax",
        "-o",
        &arg(&dir.path().join("q.onnx")),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("avg-minmax is not one"), "{}", stderr(&o));
    assert!(!dir.path().join("q.onnx").exists());
}
