//! `evaluate --per-layer` says what each compute op runs at in the quantized model (issue #17
//! item 8): read off the IR of the `.mlir` or the `.onnx` it is given, so that the layers a
//! recipe or `--target-sqnr` raised to int16 or left float show as such.

mod common;

use common::{arg, data, example, ok, quantir};
use std::collections::BTreeMap;

/// op name → the precisions `evaluate --per-layer --json` lists for it.
fn precisions(float: &str, quant: &std::path::Path, test: &str) -> BTreeMap<String, Vec<Option<String>>> {
    let o = ok(quantir(&[
        "evaluate",
        float,
        &arg(quant),
        "--data",
        test,
        "--per-layer",
        "--json",
    ]));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let mut out: BTreeMap<String, Vec<Option<String>>> = BTreeMap::new();
    let mut layers: Vec<&serde_json::Value> = r["per_layer"].as_array().unwrap().iter().collect();
    layers.sort_by_key(|l| l["order"].as_u64());
    for l in layers {
        out.entry(l["op"].as_str().unwrap().to_string())
            .or_default()
            .push(l["precision"].as_str().map(str::to_string));
    }
    out
}

#[test]
fn per_layer_precision_follows_the_recipe_in_mlir_and_onnx() {
    let dir = tempfile::tempdir().unwrap();
    let recipe = dir.path().join("r.toml");
    std::fs::write(
        &recipe,
        "[[override]]\nmatch = \"tf.MatMul\"\nactivations = \"int16\"\n\n[[override]]\nmatch = \"tf.Conv2D\"\nweights = \"fp16\"\n",
    )
    .unwrap();
    let (cnn, calib, test) = (
        arg(&example("digits_cnn.mlir")),
        arg(&example("digits_calib.npz")),
        arg(&example("digits_test.npz")),
    );
    let q = dir.path().join("q.mlir");
    ok(quantir(&[
        "quantize",
        &cnn,
        "--data",
        &calib,
        "--no-cache",
        "--config",
        &arg(&recipe),
        "-o",
        &arg(&q),
    ]));
    let p = precisions(&cnn, &q, &test);
    let s = |v: &str| Some(v.to_string());
    assert_eq!(p["tf.MatMul"], vec![s("int8 weights, int16 activations"); 2]);
    assert_eq!(p["tf.Conv2D"], vec![s("f16 weights, int8 activations"); 2]);
    assert!(p["tf.Relu"].iter().all(Option::is_none), "{p:?}");

    // an ONNX model written as .onnx: int16 activations for every MatMul
    let (mlp, mlp_calib, mlp_test) = (
        arg(&data("digits_mlp.onnx")),
        arg(&data("digits_mlp_calib.npz")),
        arg(&data("digits_mlp_test.npz")),
    );
    let recipe = dir.path().join("o.toml");
    std::fs::write(
        &recipe,
        "[[override]]\nmatch = \"onnx.MatMul\"\nactivations = \"int16\"\n",
    )
    .unwrap();
    let q = dir.path().join("q.onnx");
    ok(quantir(&[
        "quantize",
        &mlp,
        "--data",
        &mlp_calib,
        "--no-cache",
        "--config",
        &arg(&recipe),
        "-o",
        &arg(&q),
    ]));
    let p = precisions(&mlp, &q, &mlp_test);
    assert_eq!(p["onnx.MatMul"], vec![s("int8 weights, int16 activations"); 3], "{p:?}");
    // the last MatMul (by its op location) excluded
    let q8 = dir.path().join("q8.onnx");
    ok(quantir(&[
        "quantize",
        &mlp,
        "--data",
        &mlp_calib,
        "--no-cache",
        "--exclude",
        "*dense_4_1/MatMul*",
        // full-range int8 weights everywhere (the .onnx default gives a layer whose u8s8 pair
        // sums could saturate uint8 weights, listed as such)
        "--runtime",
        "generic",
        "-o",
        &arg(&q8),
    ]));
    let p = precisions(&mlp, &q8, &mlp_test);
    let int8 = s("int8 weights, int8 activations");
    // its weights stay float; its input is still the int8 output of the layer before
    assert_eq!(
        p["onnx.MatMul"],
        vec![int8.clone(), int8, s("float weights, int8 activations")],
        "{p:?}"
    );
}
