//! quantir's main job end to end on the bundled digits CNN: calibrate → quantize → evaluate,
//! through the CLI, checking the quantized module's structure and its accuracy.

mod common;

use common::{ok, quantir};

use melior::ir::operation::OperationLike;
use melior::ir::ValueLike;
use quantir::ir::graph::{body_ops, defining_op, find_function, op_name, uses};
use quantir::ir::ops::is_constant_op;

fn data(name: &str) -> String {
    common::data(name).to_string_lossy().into_owned()
}

#[test]
fn digits_cnn_calibrate_quantize_evaluate() {
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n).to_string_lossy().into_owned();
    let model = common::example("digits_cnn.mlir").to_string_lossy().into_owned();
    let calib = common::example("digits_calib.npz").to_string_lossy().into_owned();
    let test = common::example("digits_test.npz").to_string_lossy().into_owned();
    ok(quantir(&[
        "calibrate",
        &model,
        "--data",
        &calib,
        "-o",
        &p("stats.json"),
    ]));
    ok(quantir(&[
        "quantize",
        &model,
        "--stats",
        &p("stats.json"),
        "-o",
        &p("q.mlir"),
    ]));
    let (accepted, err) = common::mlir_opt_accepts(std::path::Path::new(&p("q.mlir")));
    assert!(accepted, "{err}");
    assert_compute_is_int8(&p("q.mlir"));

    // structure: every Conv2D/MatMul weight int8 per-channel, every bias int32, the reshape's
    // shape constant untouched and private to it
    let ctx = quantir::ir::new_context();
    let m = quantir::ir::load(&ctx, std::path::Path::new(&p("q.mlir"))).unwrap();
    let ops = body_ops(find_function(&m, None).unwrap());
    let mut weights = 0;
    for op in ops
        .iter()
        .filter(|o| matches!(op_name(*o).as_str(), "tf.Conv2D" | "tf.MatMul"))
    {
        let d = defining_op(op.operand(1).unwrap()).unwrap();
        assert_eq!(op_name(&d), "quant.dcast");
        let t = d.operand(0).unwrap().r#type().to_string();
        assert!(t.contains("!quant.uniform<i8<-127:127>:f32:"), "{t}");
        let storage = defining_op(defining_op(d.operand(0).unwrap()).unwrap().operand(0).unwrap()).unwrap();
        assert!(storage.result(0).unwrap().r#type().to_string().ends_with("xi8>"));
        weights += 1;
    }
    assert_eq!(weights, 4);
    let biases: Vec<String> = ops
        .iter()
        .filter(|o| op_name(*o) == "tf.BiasAdd")
        .map(|o| {
            defining_op(o.operand(1).unwrap())
                .unwrap()
                .operand(0)
                .unwrap()
                .r#type()
                .to_string()
        })
        .collect();
    assert_eq!(biases.len(), 4);
    assert!(
        biases.iter().all(|t| t.contains("!quant.uniform<i32:f32:0,")),
        "{biases:?}"
    );
    for r in ops.iter().filter(|o| op_name(*o) == "tf.Reshape") {
        let s = defining_op(r.operand(1).unwrap()).unwrap();
        assert!(is_constant_op(&s));
        assert_eq!(uses(s.result(0).unwrap().into()).len(), 1);
        assert!(s.result(0).unwrap().r#type().to_string().ends_with("xi32>"));
    }

    // the quantized module runs in the interpreter and keeps the float model's top-1
    let out = ok(quantir(&[
        "evaluate",
        &model,
        &p("q.mlir"),
        "--data",
        &test,
        "--labels",
        "y",
        "--per-layer",
        "--json",
        "--report",
        &p("r.html"),
    ]));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let o = &r["outputs"][0];
    assert_eq!(r["samples"], 397);
    // float 393/397 (TF's own top-1); the best peer, TensorFlow's quantizer (XLA, per-channel),
    // reaches 37.0 dB here and TFLite's int8 model 36.34 dB: defaults must beat them by 1 dB
    assert!((o["float_accuracy"].as_f64().unwrap() - 393.0 / 397.0).abs() < 1e-12);
    assert_eq!(o["quantized_accuracy"], o["float_accuracy"], "{o}");
    assert!(o["top1_agreement"].as_f64().unwrap() >= 0.995, "{o}");
    assert!(o["sqnr_db"].as_f64().unwrap() >= 38.0, "{o}");
    assert!(r["per_layer"].as_array().unwrap().len() >= 8);
    assert_eq!(r["sqnr_db"], o["sqnr_db"]);
    assert!(r["cosine"].as_f64().unwrap() > 0.999);
    assert_eq!(r["top1_float"], o["float_accuracy"]);
    let html = std::fs::read_to_string(p("r.html")).unwrap();
    assert!(html.contains("Per layer") && html.contains("tf.Conv2D"));
    // the per-layer chart plus one histogram per quantized activation, all inline SVG
    assert!(html.contains("Quantized activations"));
    assert!(html.matches("<svg").count() >= 5, "charts missing");
    assert!(!html.contains("<script") && !html.contains("src=\"http"));
    // program order is recorded and at most one layer is the first sharp drop
    let layers = r["per_layer"].as_array().unwrap();
    assert!(layers.iter().all(|l| l["order"].is_u64()));
    assert!(layers.iter().filter(|l| l["sharp_drop"] == true).count() <= 1);
    ok(quantir(&[
        "run",
        &p("q.mlir"),
        "--data",
        &test,
        "-o",
        &p("q.npz"),
        "--limit",
        "3",
    ]));
}

/// Every Conv2D / MatMul of a quantized module reads an int8 weight and a dequantized int8
/// activation: quality is not bought by leaving compute in float.
fn assert_compute_is_int8(path: &str) {
    let ctx = quantir::ir::new_context();
    let m = quantir::ir::load(&ctx, std::path::Path::new(path)).unwrap();
    let f = find_function(&m, None).unwrap();
    let mut n = 0;
    for op in body_ops(f) {
        if !matches!(
            op_name(&op).as_str(),
            "tf.Conv2D" | "tf.MatMul" | "tf.DepthwiseConv2dNative"
        ) {
            continue;
        }
        n += 1;
        for i in 0..2 {
            let d = defining_op(op.operand(i).unwrap()).unwrap();
            assert_eq!(op_name(&d), "quant.dcast", "operand {i} of {}", op_name(&op));
            let t = d.operand(0).unwrap().r#type().to_string();
            assert!(t.contains("!quant.uniform<i8"), "operand {i} of {}: {t}", op_name(&op));
        }
    }
    assert!(n > 0);
}

#[test]
fn digits_mlp_defaults_beat_the_best_peer_by_one_db() {
    let dir = tempfile::tempdir().unwrap();
    let q = dir.path().join("q.mlirbc").display().to_string();
    let model = data("digits_mlp.mlir");
    ok(quantir(&[
        "quantize",
        &model,
        "--data",
        &data("digits_mlp_calib.npz"),
        "-o",
        &q,
    ]));
    assert_compute_is_int8(&q);
    let out = ok(quantir(&[
        "evaluate",
        &model,
        &q,
        "--data",
        &data("digits_mlp_test.npz"),
        "--labels",
        "y",
        "--json",
    ]));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // TensorFlow's quantizer (XLA per-channel) 39.59 dB, onnxruntime 37.34 dB; float top-1 0.9798
    assert!(r["sqnr_db"].as_f64().unwrap() >= 40.6, "{r}");
    assert!(
        r["top1_quant"].as_f64().unwrap() >= r["top1_float"].as_f64().unwrap() - 1e-12,
        "{r}"
    );
}

#[test]
fn sharded_calibration_merges_to_the_single_run_and_quantizes_identically() {
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n).to_string_lossy().into_owned();
    let model = common::example("digits_cnn.mlir").to_string_lossy().into_owned();
    let calib = common::example("digits_calib.npz").to_string_lossy().into_owned();
    for args in [vec!["--threads", "1"], vec!["--threads", "2"]] {
        let mut a = vec!["calibrate", &model, "--data", &calib, "--method", "percentile"];
        a.extend(args.iter().copied());
        let out = p(&format!("all{}.json", args[1]));
        a.extend(["-o", &out]);
        ok(quantir(&a));
    }
    for i in 0..3 {
        let shard = format!("{i}/3");
        ok(quantir(&[
            "calibrate",
            &model,
            "--data",
            &calib,
            "--method",
            "percentile",
            "--shard",
            &shard,
            "-o",
            &p(&format!("s{i}.json")),
        ]));
    }
    ok(quantir(&[
        "merge",
        &p("s2.json"),
        &p("s0.json"),
        &p("s1.json"),
        "-o",
        &p("merged.json"),
    ]));
    let load = |n: &str| quantir::stats_io::load_stats(std::path::Path::new(&p(n))).unwrap();
    let (one, two, merged) = (load("all1.json"), load("all2.json"), load("merged.json"));
    assert_eq!(one, two, "statistics depend on the thread count");
    assert_eq!(merged.num_samples, one.num_samples);
    for (k, t) in &one.tensors {
        let m = &merged.tensors[k];
        assert_eq!((m.min, m.max, m.range), (t.min, t.max, t.range), "{k}");
        assert_eq!(
            serde_json::to_string(&m.observer.state).unwrap(),
            serde_json::to_string(&t.observer.state).unwrap(),
            "{k}"
        );
    }
    ok(quantir(&[
        "quantize",
        &model,
        "--stats",
        &p("all1.json"),
        "-o",
        &p("a.mlirbc"),
    ]));
    ok(quantir(&[
        "quantize",
        &model,
        "--stats",
        &p("merged.json"),
        "-o",
        &p("b.mlirbc"),
    ]));
    assert_eq!(
        std::fs::read(p("a.mlirbc")).unwrap(),
        std::fs::read(p("b.mlirbc")).unwrap(),
        "same inputs, same bytes"
    );
}

#[test]
fn quantize_errors_and_weight_only_modes() {
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n).to_string_lossy().into_owned();
    let model = common::example("digits_cnn.mlir").to_string_lossy().into_owned();
    let mlp = common::data("digits_mlp.mlir").to_string_lossy().into_owned();
    let calib = common::example("digits_calib.npz").to_string_lossy().into_owned();
    ok(quantir(&["calibrate", &model, "--data", &calib, "-o", &p("cnn.json")]));
    // statistics of another model are refused
    let o = quantir(&["quantize", &mlp, "--stats", &p("cnn.json"), "-o", &p("x.mlir")]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("the statistics were computed for another model"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(!std::path::Path::new(&p("x.mlir")).exists());
    // no statistics and no data
    let o = quantir(&["quantize", &model, "-o", &p("x.mlir")]);
    assert_eq!(o.status.code(), Some(2));
    // bad method / shard
    assert_eq!(
        quantir(&[
            "calibrate",
            &model,
            "--data",
            &calib,
            "--method",
            "magic",
            "-o",
            &p("s.json")
        ])
        .status
        .code(),
        Some(2)
    );
    assert_eq!(
        quantir(&[
            "calibrate",
            &model,
            "--data",
            &calib,
            "--shard",
            "3/3",
            "-o",
            &p("s.json")
        ])
        .status
        .code(),
        Some(2)
    );
    // weight-only fp16 needs no data; the model still runs and agrees
    ok(quantir(&[
        "quantize",
        &model,
        "--activations",
        "none",
        "--weights",
        "fp16",
        "-o",
        &p("h.mlir"),
    ]));
    let text = std::fs::read_to_string(p("h.mlir")).unwrap();
    assert!(text.contains("xf16>") && text.contains("tf.Cast") && !text.contains("quant.qcast"));
    let out = ok(quantir(&[
        "evaluate",
        &model,
        &p("h.mlir"),
        "--data",
        &common::example("digits_test.npz").to_string_lossy(),
        "--json",
    ]));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(r["outputs"][0]["sqnr_db"].as_f64().unwrap() > 60.0, "{r}");
    // int4 weights, per-tensor, through the onnx scheme
    ok(quantir(&[
        "quantize",
        &model,
        "--stats",
        &p("cnn.json"),
        "--weights",
        "int4",
        "--per-tensor",
        "--scheme",
        "onnx",
        "-o",
        &p("i4.mlir"),
    ]));
    let text = std::fs::read_to_string(p("i4.mlir")).unwrap();
    assert!(text.contains("!quant.uniform<i4:f32,"), "int4 per-tensor weights");
    let (accepted, err) = common::mlir_opt_accepts(std::path::Path::new(&p("i4.mlir")));
    assert!(accepted, "{err}");
}

#[test]
fn mobilenet_quantizes_with_folded_batchnorm_and_int32_biases() {
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n).to_string_lossy().into_owned();
    std::fs::write(
        p("m.mlir"),
        common::model_text(&common::data("mobilenet_v2_035.mlir.gz")),
    )
    .unwrap();
    let data = common::data("mobilenet_test.npz").to_string_lossy().into_owned();
    // calibrate on the first 8 images (MSE), evaluate on all 16
    ok(quantir(&[
        "quantize",
        &p("m.mlir"),
        "--data",
        &data,
        "--limit",
        "8",
        "--method",
        "mse",
        "-o",
        &p("q.mlirbc"),
    ]));
    let (accepted, err) = common::mlir_opt_accepts(std::path::Path::new(&p("q.mlirbc")));
    assert!(accepted, "{err}");
    let ctx = quantir::ir::new_context();
    let m = quantir::ir::load(&ctx, std::path::Path::new(&p("q.mlirbc"))).unwrap();
    let ops = body_ops(find_function(&m, None).unwrap());
    let count = |n: &str| ops.iter().filter(|o| op_name(*o) == n).count();
    // 52 batch norms folded: no per-channel Mul is left after a convolution, every conv has an
    // int8 weight and an int32 bias
    assert_eq!(count("tf.Conv2D") + count("tf.DepthwiseConv2dNative"), 52);
    assert_eq!(count("tf.BiasAdd"), 53);
    let int32_biases = ops
        .iter()
        .filter(|o| op_name(*o) == "tf.BiasAdd")
        .filter(|o| {
            defining_op(o.operand(1).unwrap())
                .unwrap()
                .operand(0)
                .unwrap()
                .r#type()
                .to_string()
                .contains("!quant.uniform<i32")
        })
        .count();
    assert_eq!(int32_biases, 53);
    let out = ok(quantir(&[
        "evaluate",
        &p("m.mlir"),
        &p("q.mlirbc"),
        "--data",
        &data,
        "--json",
    ]));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // TFLite's int8 per-channel model of this network: 13.22 dB on these 16 images
    assert!(r["sqnr_db"].as_f64().unwrap() > 12.0, "{r}");
}

/// A chain of `n` 1×1 convolutions on 256×256×8: every activation is 2 MB, so one sample's
/// activations (2·n MB) are far more than the few a run holds at once.
fn deep_chain(n: usize) -> String {
    let t = "tensor<1x256x256x8xf32>";
    let mut s = format!(
        "func.func @main(%x: {t}) -> {t} {{\n  %w = \"tf.Const\"() <{{value = dense<0.125> : tensor<1x1x8x8xf32>}}> : () -> tensor<1x1x8x8xf32>\n  %c0 = \"tf.Identity\"(%x) : ({t}) -> {t}\n"
    );
    for i in 0..n {
        s += &format!(
            "  %c{} = \"tf.Conv2D\"(%c{i}, %w) <{{data_format = \"NHWC\", padding = \"SAME\", strides = [1, 1, 1, 1]}}> : ({t}, tensor<1x1x8x8xf32>) -> {t}\n",
            i + 1
        );
    }
    s + &format!("  return %c{n} : {t}\n}}\n")
}

#[test]
fn per_layer_evaluation_holds_a_few_activations_not_all() {
    let dir = tempfile::tempdir().unwrap();
    let (model, quant, data) = (
        dir.path().join("deep.mlir"),
        dir.path().join("q.mlir"),
        dir.path().join("x.npz"),
    );
    std::fs::write(&model, deep_chain(24)).unwrap();
    let x = ndarray::Array4::<f32>::from_shape_fn((4, 256, 256, 8), |(i, y, x, c)| {
        ((i + y * 3 + x + c) % 17) as f32 / 17.0
    });
    let mut w = ndarray_npy::NpzWriter::new(std::fs::File::create(&data).unwrap());
    w.add_array("x", &x).unwrap();
    w.finish().unwrap();
    let [m, q, d] = [&model, &quant, &data].map(|p| p.to_str().unwrap().to_string());
    ok(quantir(&["quantize", &m, "--data", &d, "-o", &q]));
    let evaluate = |extra: &[&str]| {
        let mut a = vec!["evaluate", &m, &q, "--data", &d, "--threads", "2", "--json"];
        a.extend(extra);
        common::peak_rss_kb(&a)
    };
    let (plain, per_layer) = (evaluate(&[]), evaluate(&["--per-layer"]));
    // one sample's 24 float activations are 48 MB; held until the quantized run compares them,
    // two samples in flight would add ≥ 96 MB
    assert!(
        (per_layer as f64) <= 1.5 * plain as f64,
        "peak RSS {per_layer} KB with --per-layer, {plain} KB without"
    );
}
