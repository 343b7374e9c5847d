//! `equalize-layers` (cross-layer equalization) on small modules of both dialects: the function
//! is unchanged, the two layers' channel ranges meet, only scale-commuting chains are touched,
//! the changed values get new keys, and a second run changes nothing.

mod common;

use common::dense;
use melior::ir::operation::OperationLike;
use ndarray::{ArrayD, Axis, IxDyn};
use quantir::interp::Program;
use quantir::ir::ops::constant_value;
use quantir::passes::{run_pipeline, Change, PassOptions};
use quantir::tensor::Tensor;
use std::path::Path;

/// A seeded f32 array of `shape` in [-1, 1), times `scale` per slice of axis `axis` (so that
/// channels have ranges that differ by 100×, which is what equalization is for).
fn weights(shape: &[usize], seed: u64, axis: usize, scale: &[f32]) -> ArrayD<f32> {
    let mut s = seed;
    let mut a = ArrayD::from_shape_fn(IxDyn(shape), |_| {
        s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    });
    for (mut sub, k) in a.axis_iter_mut(Axis(axis)).zip(scale.iter().cycle()) {
        sub.mapv_inplace(|v| v * k);
    }
    a
}

/// Channel scales 0.01 … 1 over 8 channels.
const SPREAD: [f32; 8] = [1.0, 0.01, 0.3, 0.05, 0.7, 0.02, 0.1, 0.5];

/// Conv 3→8 (bias) → `act` → Conv 8→4, ONNX dialect, NCHW 1x3x6x6.
fn onnx_conv_pair(act: &str) -> String {
    let w1 = weights(&[8, 3, 3, 3], 1, 0, &SPREAD);
    let b1 = weights(&[8], 2, 0, &[0.1]);
    let w2 = weights(&[4, 8, 1, 1], 3, 1, &SPREAD.iter().rev().copied().collect::<Vec<_>>());
    let act = match act {
        "relu" => r#"%2 = "onnx.Relu"(%1) : (tensor<1x8x4x4xf32>) -> tensor<1x8x4x4xf32> loc("relu")"#.to_string(),
        "clip" => r#"%lo = "arith.constant"() {value = dense<0.0> : tensor<f32>} : () -> tensor<f32>
    %hi = "arith.constant"() {value = dense<6.0> : tensor<f32>} : () -> tensor<f32>
    %2 = "onnx.Clip"(%1, %lo, %hi) : (tensor<1x8x4x4xf32>, tensor<f32>, tensor<f32>) -> tensor<1x8x4x4xf32> loc("relu6")"#
            .to_string(),
        _ => unreachable!(),
    };
    format!(
        r#"module {{
  func.func @main(%x: tensor<1x3x6x6xf32>) -> tensor<1x4x4x4xf32> {{
    %w1 = "arith.constant"() {{value = {w1}}} : () -> tensor<8x3x3x3xf32>
    %b1 = "arith.constant"() {{value = {b1}}} : () -> tensor<8xf32>
    %w2 = "arith.constant"() {{value = {w2}}} : () -> tensor<4x8x1x1xf32>
    %n = "onnx.NoValue"() {{value}} : () -> none
    %1 = "onnx.Conv"(%x, %w1, %b1) {{group = 1 : si64, kernel_shape = [3, 3], pads = [0, 0, 0, 0], strides = [1, 1]}} : (tensor<1x3x6x6xf32>, tensor<8x3x3x3xf32>, tensor<8xf32>) -> tensor<1x8x4x4xf32> loc("conv1")
    {act}
    %3 = "onnx.Conv"(%2, %w2, %n) {{group = 1 : si64, kernel_shape = [1, 1], pads = [0, 0, 0, 0], strides = [1, 1]}} : (tensor<1x8x4x4xf32>, tensor<4x8x1x1xf32>, none) -> tensor<1x4x4x4xf32> loc("conv2")
    return %3 : tensor<1x4x4x4xf32>
  }}
}}"#,
        w1 = dense(&w1),
        b1 = dense(&b1),
        w2 = dense(&w2),
    )
}

/// Conv 3→8 (bias) → Relu → depthwise Conv 3x3 (group 8), ONNX dialect, NCHW 1x3x6x6.
fn onnx_conv_depthwise_pair() -> String {
    let w1 = weights(&[8, 3, 3, 3], 1, 0, &SPREAD);
    let b1 = weights(&[8], 2, 0, &[0.1]);
    let w2 = weights(&[8, 1, 3, 3], 3, 0, &SPREAD.iter().rev().copied().collect::<Vec<_>>());
    format!(
        r#"module {{
  func.func @main(%x: tensor<1x3x6x6xf32>) -> tensor<1x8x2x2xf32> {{
    %w1 = "arith.constant"() {{value = {w1}}} : () -> tensor<8x3x3x3xf32>
    %b1 = "arith.constant"() {{value = {b1}}} : () -> tensor<8xf32>
    %w2 = "arith.constant"() {{value = {w2}}} : () -> tensor<8x1x3x3xf32>
    %n = "onnx.NoValue"() {{value}} : () -> none
    %1 = "onnx.Conv"(%x, %w1, %b1) {{group = 1 : si64, kernel_shape = [3, 3], pads = [0, 0, 0, 0], strides = [1, 1]}} : (tensor<1x3x6x6xf32>, tensor<8x3x3x3xf32>, tensor<8xf32>) -> tensor<1x8x4x4xf32> loc("conv1")
    %2 = "onnx.Relu"(%1) : (tensor<1x8x4x4xf32>) -> tensor<1x8x4x4xf32> loc("relu")
    %3 = "onnx.Conv"(%2, %w2, %n) {{group = 8 : si64, kernel_shape = [3, 3], pads = [0, 0, 0, 0], strides = [1, 1]}} : (tensor<1x8x4x4xf32>, tensor<8x1x3x3xf32>, none) -> tensor<1x8x2x2xf32> loc("dw")
    return %3 : tensor<1x8x2x2xf32>
  }}
}}"#,
        w1 = dense(&w1),
        b1 = dense(&b1),
        w2 = dense(&w2),
    )
}

/// Depthwise 3x3 (8 channels) → BiasAdd → Relu → MaxPool → pointwise Conv2D 8→4, TF dialect, NHWC.
fn tf_depthwise_pair() -> String {
    let w1 = weights(&[3, 3, 8, 1], 4, 2, &SPREAD);
    let b1 = weights(&[8], 5, 0, &[0.1]);
    let w2 = weights(&[1, 1, 8, 4], 6, 2, &SPREAD.iter().rev().copied().collect::<Vec<_>>());
    format!(
        r#"module {{
  func.func @main(%x: tensor<1x6x6x8xf32>) -> tensor<1x2x2x4xf32> {{
    %w1 = "tf.Const"() {{value = {w1}}} : () -> tensor<3x3x8x1xf32>
    %b1 = "tf.Const"() {{value = {b1}}} : () -> tensor<8xf32>
    %w2 = "tf.Const"() {{value = {w2}}} : () -> tensor<1x1x8x4xf32>
    %1 = "tf.DepthwiseConv2dNative"(%x, %w1) {{data_format = "NHWC", dilations = [1, 1, 1, 1], padding = "VALID", strides = [1, 1, 1, 1]}} : (tensor<1x6x6x8xf32>, tensor<3x3x8x1xf32>) -> tensor<1x4x4x8xf32> loc("dw")
    %2 = "tf.BiasAdd"(%1, %b1) {{data_format = "NHWC"}} : (tensor<1x4x4x8xf32>, tensor<8xf32>) -> tensor<1x4x4x8xf32> loc("dw_bias")
    %3 = "tf.Relu"(%2) : (tensor<1x4x4x8xf32>) -> tensor<1x4x4x8xf32> loc("dw_relu")
    %4 = "tf.MaxPool"(%3) {{data_format = "NHWC", ksize = [1, 2, 2, 1], padding = "VALID", strides = [1, 2, 2, 1]}} : (tensor<1x4x4x8xf32>) -> tensor<1x2x2x8xf32> loc("pool")
    %5 = "tf.Conv2D"(%4, %w2) {{data_format = "NHWC", dilations = [1, 1, 1, 1], padding = "VALID", strides = [1, 1, 1, 1]}} : (tensor<1x2x2x8xf32>, tensor<1x1x8x4xf32>) -> tensor<1x2x2x4xf32> loc("pw")
    return %5 : tensor<1x2x2x4xf32>
  }}
}}"#,
        w1 = dense(&w1),
        b1 = dense(&b1),
        w2 = dense(&w2),
    )
}

fn run_on(m: &melior::ir::Module, x: &ArrayD<f32>) -> ArrayD<f32> {
    let p = Program::compile(m, None).unwrap();
    match p.run(&[Tensor::F32(x.clone())]).unwrap().remove(0) {
        Tensor::F32(a) => a,
        t => panic!("f32 output expected, got {t:?}"),
    }
}

fn equalize(m: &melior::ir::Module) -> usize {
    let r = run_pipeline(m, &["equalize-layers".to_string()], &PassOptions::default()).unwrap();
    r[0].1.get(&Change::LayerPairsEqualized)
}

/// The weights of the compute ops, in order.
fn compute_weights(m: &melior::ir::Module) -> Vec<ArrayD<f32>> {
    let func = quantir::ir::graph::find_function(m, None).unwrap();
    quantir::ir::graph::body_ops(func)
        .into_iter()
        .filter(|op| {
            let n = quantir::ir::graph::op_name(op);
            n.ends_with("Conv") || n.ends_with("Conv2D") || n.ends_with("Conv2dNative")
        })
        .map(|op| {
            let d = quantir::ir::graph::defining_op(op.operand(1).unwrap()).unwrap();
            match constant_value(d).unwrap() {
                Tensor::F32(a) => a,
                _ => panic!(),
            }
        })
        .collect()
}

fn ranges(w: &ArrayD<f32>, axis: usize) -> Vec<f32> {
    w.axis_iter(Axis(axis))
        .map(|s| s.iter().fold(0.0f32, |m, v| m.max(v.abs())))
        .collect()
}

fn keys(m: &melior::ir::Module) -> Vec<String> {
    let func = quantir::ir::graph::find_function(m, None).unwrap();
    quantir::ir::graph::body_ops(func)
        .into_iter()
        .filter_map(|op| quantir::ir::keys::location_name(op.location()))
        .collect()
}

fn assert_close(a: &ArrayD<f32>, b: &ArrayD<f32>) {
    let top = a.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let d = a.iter().zip(b).fold(0.0f32, |m, (x, y)| m.max((x - y).abs()));
    assert!(d <= 1e-5 * top.max(1.0), "max |before − after| = {d} (largest {top})");
}

/// Per-channel ranges of the first layer's outputs equal those of the second layer's inputs.
fn assert_ranges_meet(r1: &[f32], r2: &[f32]) {
    for (a, b) in r1.iter().zip(r2) {
        assert!(
            (a / b - 1.0).abs() < 1e-3,
            "channel ranges after equalization: {a} vs {b}"
        );
    }
}

fn assert_has_keys(m: &melior::ir::Module, names: &[&str]) {
    let k = keys(m);
    for name in names {
        assert!(k.iter().any(|n| n == name), "{name} in {k:?}");
    }
}

/// `quantir calibrate MODEL --data DATA EXTRA… -o OUT`.
fn calibrate(model: &Path, data: &Path, extra: &[&str], out: &Path) -> std::process::Output {
    let (model, data, out) = (common::arg(model), common::arg(data), common::arg(out));
    let mut args = vec!["calibrate", &model, "--data", &data];
    args.extend_from_slice(extra);
    args.extend(["-o", &out]);
    common::quantir(&args)
}

/// `quantir quantize MODEL --stats STATS EXTRA… -o OUT`.
fn quantize(model: &Path, stats: &Path, extra: &[&str], out: &Path) -> std::process::Output {
    let (model, stats, out) = (common::arg(model), common::arg(stats), common::arg(out));
    let mut args = vec!["quantize", &model, "--stats", &stats];
    args.extend_from_slice(extra);
    args.extend(["-o", &out]);
    common::quantir(&args)
}

#[test]
fn an_onnx_conv_relu_conv_pair_meets_in_range_and_computes_the_same() {
    let ctx = quantir::ir::new_context();
    let m = quantir::ir::load_bytes(&ctx, onnx_conv_pair("relu").as_bytes(), Path::new("pair.mlir")).unwrap();
    let x = weights(&[1, 3, 6, 6], 7, 0, &[1.0]);
    let before = run_on(&m, &x);
    let w = compute_weights(&m);
    let spread = |r: &[f32]| r.iter().fold(0.0f32, |a, &b| a.max(b)) / r.iter().fold(f32::MAX, |a, &b| a.min(b));
    assert!(
        spread(&ranges(&w[0], 0)) > 30.0,
        "the test's first layer has spread-out channels"
    );

    assert_eq!(equalize(&m), 1);
    assert_close(&before, &run_on(&m, &x));
    let w = compute_weights(&m);
    assert_ranges_meet(&ranges(&w[0], 0), &ranges(&w[1], 1));
    // the values whose channels moved have new keys; the second layer's output keeps its own
    assert_has_keys(&m, &["conv1~equalized", "relu~equalized", "conv2"]);
    // a second run (prepare runs again on a prepared module) leaves it alone
    let text = quantir::ir::identity::model_hash(&m);
    assert_eq!(equalize(&m), 0);
    assert_eq!(quantir::ir::identity::model_hash(&m), text);
}

#[test]
fn measured_activation_ranges_spread_less_after_equalization() {
    // channels of the relu output spanning 100×: the pass picks a scale (s_i read back from the
    // second layer's input columns) that brings them closer, the function unchanged
    let ctx = quantir::ir::new_context();
    let m = quantir::ir::load_bytes(&ctx, onnx_conv_pair("relu").as_bytes(), Path::new("pair.mlir")).unwrap();
    let x = weights(&[1, 3, 6, 6], 7, 0, &[1.0]);
    let before = run_on(&m, &x);
    let r2 = ranges(&compute_weights(&m)[1], 1);
    let a: Vec<f32> = SPREAD.iter().map(|k| 4.0 * k).collect();
    let mut options = PassOptions::default();
    options.config.equalize_ranges.insert(
        "relu".into(),
        quantir::calibration::ChannelMoments {
            min: vec![0.0; 8],
            max: a.clone(),
            mean_square: a.iter().map(|v| v * v / 9.0).collect(),
            ..Default::default()
        },
    );
    let r = run_pipeline(&m, &["equalize-layers".to_string()], &options).unwrap();
    assert_eq!(r[0].1.get(&Change::LayerPairsEqualized), 1);
    assert_close(&before, &run_on(&m, &x));
    let r2e = ranges(&compute_weights(&m)[1], 1);
    let after: Vec<f32> = (0..8).map(|i| a[i] / (r2e[i] / r2[i])).collect();
    let spread = |r: &[f32]| r.iter().fold(0.0f32, |m, &v| m.max(v)) / r.iter().fold(f32::MAX, |m, &v| m.min(v));
    assert!(
        spread(&after) < spread(&a) / 2.0,
        "channel spread {} → {}",
        spread(&a),
        spread(&after)
    );
}

#[test]
fn a_depthwise_input_quantized_per_channel_gains_nothing_from_a_scale() {
    // channels spanning 100× into a depthwise conv: quantized per channel there (the default),
    // both roundings are per channel and no scale lowers the noise, so the pair is left alone;
    // with one scale per tensor at depthwise inputs, the same pair is rescaled — as it is
    // when the small channels are expected to reach as far as the largest on new samples (the
    // plan then gives the input one scale)
    let moments = |far_reach: bool| {
        let a: Vec<f32> = SPREAD.iter().map(|k| 4.0 * k).collect();
        let top = a.iter().copied().fold(0.0f32, f32::max);
        quantir::calibration::ChannelMoments {
            min: vec![0.0; 8],
            max: a.clone(),
            mean_square: a.iter().map(|v| v * v / 9.0).collect(),
            reach_min: vec![0.0; 8],
            reach_max: if far_reach { vec![top; 8] } else { a.clone() },
        }
    };
    for (per_channel_inputs, far_reach) in [(true, false), (false, false), (true, true)] {
        let ctx = quantir::ir::new_context();
        let m = quantir::ir::load_bytes(&ctx, onnx_conv_depthwise_pair().as_bytes(), Path::new("dw.mlir")).unwrap();
        let x = weights(&[1, 3, 6, 6], 7, 0, &[1.0]);
        let before = run_on(&m, &x);
        let hash = quantir::ir::identity::model_hash(&m);
        let mut options = PassOptions::default();
        options.config.per_channel_depthwise_inputs = per_channel_inputs;
        options.config.equalize_ranges.insert("relu".into(), moments(far_reach));
        let r = run_pipeline(&m, &["equalize-layers".to_string()], &options).unwrap();
        let rescaled = r[0].1.get(&Change::LayerPairsEqualized);
        let per_channel = per_channel_inputs && !far_reach;
        assert_eq!(
            rescaled,
            usize::from(!per_channel),
            "per-channel depthwise inputs: {per_channel_inputs}, far reach: {far_reach}"
        );
        assert_close(&before, &run_on(&m, &x));
        assert_eq!(quantir::ir::identity::model_hash(&m) == hash, per_channel);
    }
}

#[test]
fn relu6_does_not_commute_with_a_scale_and_ends_the_pair() {
    let ctx = quantir::ir::new_context();
    let m = quantir::ir::load_bytes(&ctx, onnx_conv_pair("clip").as_bytes(), Path::new("pair.mlir")).unwrap();
    let hash = quantir::ir::identity::model_hash(&m);
    assert_eq!(equalize(&m), 0);
    assert_eq!(quantir::ir::identity::model_hash(&m), hash);
}

#[test]
fn a_tf_depthwise_bias_relu_pool_pointwise_chain_is_equalized() {
    let ctx = quantir::ir::new_context();
    let m = quantir::ir::load_bytes(&ctx, tf_depthwise_pair().as_bytes(), Path::new("dw.mlir")).unwrap();
    let x = weights(&[1, 6, 6, 8], 8, 3, &[1.0]);
    let before = run_on(&m, &x);
    assert_eq!(equalize(&m), 1);
    assert_close(&before, &run_on(&m, &x));
    let w = compute_weights(&m);
    assert_ranges_meet(&ranges(&w[0], 2), &ranges(&w[1], 2));
    assert_has_keys(
        &m,
        &[
            "dw~equalized",
            "dw_bias~equalized",
            "dw_relu~equalized",
            "pool~equalized",
            "pw",
        ],
    );
}

#[test]
fn quantize_with_equalization_needs_stats_of_the_equalized_model() {
    // calibrate → quantize --stats must agree on --equalize-layers: the stats describe the
    // equalized model, and the hash check says so when they do not
    let dir = tempfile::tempdir().unwrap();
    let model = common::data("digits_cnn.onnx");
    let data = common::example("digits_calib.npz");
    let stats = dir.path().join("s.json");
    common::ok(calibrate(&model, &data, &["--equalize-layers"], &stats));
    let out = dir.path().join("q.onnx");
    let q = common::ok(quantize(&model, &stats, &["--equalize-layers"], &out));
    assert!(out.exists(), "{}", common::stderr(&q));
    // the stats hold the measured ranges, one per channel of each value equalized against
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&stats).unwrap()).unwrap();
    let eq = json["equalization"]
        .as_object()
        .expect("equalization ranges in the stats");
    assert!(!eq.is_empty());
    for (k, v) in eq {
        let (lo, hi, ms) = (
            v["min"].as_array().unwrap(),
            v["max"].as_array().unwrap(),
            v["mean_square"].as_array().unwrap(),
        );
        let (rlo, rhi) = (v["reach_min"].as_array().unwrap(), v["reach_max"].as_array().unwrap());
        assert!(!hi.is_empty() && lo.len() == hi.len() && ms.len() == hi.len(), "{k}");
        assert!(
            rlo.len() == hi.len() && rhi.len() == hi.len(),
            "{k}: the channels' reach"
        );
        for ((l, h), q) in lo.iter().zip(hi).zip(ms) {
            let (l, h, q) = (l.as_f64().unwrap(), h.as_f64().unwrap(), q.as_f64().unwrap());
            assert!(
                l <= 0.0 && h >= 0.0 && q >= 0.0 && q <= l.abs().max(h).powi(2) * 1.0001,
                "{k}: {l} {h} {q}"
            );
        }
        // a channel reaches at least as far as its extremes (with 0 held, as `min`/`max` hold it)
        for (((l, h), rl), rh) in lo.iter().zip(hi).zip(rlo).zip(rhi) {
            let (l, h) = (l.as_f64().unwrap(), h.as_f64().unwrap());
            let (rl, rh) = (rl.as_f64().unwrap().min(0.0), rh.as_f64().unwrap().max(0.0));
            assert!(rl <= l && rh >= h, "{k}: reach {rl}..{rh}, extremes {l}..{h}");
        }
    }
    // data-free: equalized, with no ranges measured
    let wstats = dir.path().join("w.json");
    common::ok(calibrate(
        &model,
        &data,
        &["--equalize-layers", "--equalize-by", "weights"],
        &wstats,
    ));
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&wstats).unwrap()).unwrap();
    assert_eq!(json["equalization"], serde_json::json!({}));
    let plain = quantize(&model, &stats, &[], &dir.path().join("p.onnx"));
    assert!(!plain.status.success());
    assert!(
        common::stderr(&plain).contains("calibrated after cross-layer equalization: quantize with --equalize-layers"),
        "{}",
        common::stderr(&plain)
    );
    assert!(!dir.path().join("p.onnx").exists());
    // quantize --data says what it did
    let d = common::ok(common::quantir(&[
        "quantize",
        &common::arg(&model),
        "--data",
        &common::arg(&data),
        "--no-cache",
        "--equalize-layers",
        "-o",
        &common::arg(&dir.path().join("d.onnx")),
    ]));
    let said = common::stderr(&d);
    assert!(
        said.contains("cross-layer equalization: ")
            && said.contains(" layer pairs and 0 norms (SmoothQuant) rescaled, each scale chosen on the activations"),
        "{said}"
    );
    // and the other way round
    let plain_stats = dir.path().join("plain.json");
    common::ok(calibrate(&model, &data, &[], &plain_stats));
    let eq = quantize(&model, &plain_stats, &["--equalize-layers"], &dir.path().join("e.onnx"));
    assert!(
        common::stderr(&eq).contains("calibrate with --equalize-layers"),
        "{}",
        common::stderr(&eq)
    );
    assert!(!dir.path().join("e.onnx").exists());
}

/// `x: 2x4x8` → LayerNormalization (gain `g`, bias `b`, channel 5 of the gain 40× the others)
/// → `readers` MatMuls 8→6 (summed), and, with `residual`, the norm's output added to the sum
/// too (post-LN: the residual stream reads it).
fn onnx_norm_matmuls(readers: usize, residual: bool) -> String {
    let mut g = weights(&[8], 11, 0, &[0.5]).mapv(|v| v + 1.0);
    g[5] *= 40.0;
    let b = weights(&[8], 12, 0, &[0.1]);
    let mut body = String::new();
    let mut sum = String::new();
    for r in 0..readers {
        let w = weights(&[8, 6], 20 + r as u64, 0, &[0.3]);
        body += &format!(
            "    %w{r} = \"arith.constant\"() {{value = {}}} : () -> tensor<8x6xf32>\n    %m{r} = \"onnx.MatMul\"(%h, %w{r}) : (tensor<2x4x8xf32>, tensor<8x6xf32>) -> tensor<2x4x6xf32> loc(\"mm{r}\")\n",
            dense(&w)
        );
        sum = match r {
            0 => format!("%m{r}"),
            _ => {
                body += &format!("    %s{r} = \"onnx.Add\"({sum}, %m{r}) : (tensor<2x4x6xf32>, tensor<2x4x6xf32>) -> tensor<2x4x6xf32>\n");
                format!("%s{r}")
            }
        };
    }
    let (ret, ty) = match residual {
        false => (sum, "tensor<2x4x6xf32>"),
        true => {
            // the residual reads the first 6 channels of the norm's output
            body += "    %st = \"arith.constant\"() {value = dense<[0, 0, 0]> : tensor<3xi64>} : () -> tensor<3xi64>\n    %en = \"arith.constant\"() {value = dense<[2, 4, 6]> : tensor<3xi64>} : () -> tensor<3xi64>\n    %hs = \"onnx.Slice\"(%h, %st, %en) : (tensor<2x4x8xf32>, tensor<3xi64>, tensor<3xi64>) -> tensor<2x4x6xf32>\n";
            body += &format!(
                "    %res = \"onnx.Add\"({sum}, %hs) : (tensor<2x4x6xf32>, tensor<2x4x6xf32>) -> tensor<2x4x6xf32>\n"
            );
            ("%res".to_string(), "tensor<2x4x6xf32>")
        }
    };
    format!(
        r#"module {{
  func.func @main(%x: tensor<2x4x8xf32>) -> {ty} {{
    %g = "arith.constant"() {{value = {g}}} : () -> tensor<8xf32>
    %b = "arith.constant"() {{value = {b}}} : () -> tensor<8xf32>
    %h = "onnx.LayerNormalization"(%x, %g, %b) {{axis = -1 : i64, epsilon = 1.0E-5 : f32}} : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32> loc("ln")
{body}    return {ret} : {ty}
  }}
}}"#,
        g = dense(&g.into_dyn()),
        b = dense(&b),
    )
}

/// What calibration measures at the norm's output: channel 5 spans ±40, the others ±1.5.
fn norm_moments() -> quantir::calibration::ChannelMoments {
    let hi: Vec<f32> = (0..8).map(|i| if i == 5 { 40.0 } else { 1.5 }).collect();
    quantir::calibration::ChannelMoments {
        min: hi.iter().map(|v| -v).collect(),
        max: hi.clone(),
        mean_square: hi.iter().map(|v| v * v / 9.0).collect(),
        ..Default::default()
    }
}

fn smooth(m: &melior::ir::Module) -> (usize, usize) {
    let mut options = PassOptions::default();
    options.config.equalize_ranges.insert("ln".into(), norm_moments());
    let r = run_pipeline(m, &["equalize-layers".to_string()], &options).unwrap();
    (
        r[0].1.get(&Change::LayerPairsEqualized),
        r[0].1.get(&Change::NormsSmoothed),
    )
}

/// The norm's gain, from the module.
fn norm_gain(m: &melior::ir::Module) -> ArrayD<f32> {
    let func = quantir::ir::graph::find_function(m, None).unwrap();
    let ln = quantir::ir::graph::body_ops(func)
        .into_iter()
        .find(|op| quantir::ir::graph::op_name(op) == "onnx.LayerNormalization")
        .unwrap();
    match constant_value(quantir::ir::graph::defining_op(ln.operand(1).unwrap()).unwrap()).unwrap() {
        Tensor::F32(a) => a,
        _ => panic!(),
    }
}

#[test]
fn a_layer_norm_read_by_matmuls_alone_is_smoothed_and_computes_the_same() {
    // SmoothQuant: the outlier channel's range moves from the norm's output into the rows of
    // the three matmuls' weights, and the function is unchanged
    let ctx = quantir::ir::new_context();
    let m = quantir::ir::load_bytes(&ctx, onnx_norm_matmuls(3, false).as_bytes(), Path::new("ln.mlir")).unwrap();
    let x = weights(&[2, 4, 8], 9, 0, &[1.0]);
    let before = run_on(&m, &x);
    let g0 = norm_gain(&m);
    assert_eq!(smooth(&m), (0, 1));
    assert_close(&before, &run_on(&m, &x));
    let s: Vec<f32> = g0.iter().zip(norm_gain(&m).iter()).map(|(a, b)| a / b).collect();
    // the measured range over s: the outlier channel no longer sets the per-tensor range alone
    let spread = |r: &[f32]| r.iter().fold(0.0f32, |m, &v| m.max(v)) / r.iter().fold(f32::MAX, |m, &v| m.min(v));
    let a: Vec<f32> = norm_moments().max;
    let after: Vec<f32> = a.iter().zip(&s).map(|(v, k)| v / k).collect();
    assert!(
        spread(&after) < spread(&a) / 4.0,
        "channel spread {} → {}",
        spread(&a),
        spread(&after)
    );
    assert_has_keys(&m, &["ln~equalized", "mm0", "mm1", "mm2"]);
    // prepare runs again on a prepared module: nothing changes
    let hash = quantir::ir::identity::model_hash(&m);
    assert_eq!(smooth(&m), (0, 0));
    assert_eq!(quantir::ir::identity::model_hash(&m), hash);
}

#[test]
fn a_norm_the_residual_stream_also_reads_is_left_alone() {
    // post-LN (BERT): a scale of the norm's channels would reach the residual sum too
    let ctx = quantir::ir::new_context();
    let m = quantir::ir::load_bytes(&ctx, onnx_norm_matmuls(2, true).as_bytes(), Path::new("ln.mlir")).unwrap();
    let g0 = norm_gain(&m);
    assert_eq!(smooth(&m), (0, 0));
    assert_eq!(norm_gain(&m), g0);
    // and without measured channels (data-free) a norm is never touched
    let m = quantir::ir::load_bytes(&ctx, onnx_norm_matmuls(3, false).as_bytes(), Path::new("ln.mlir")).unwrap();
    assert_eq!(equalize(&m), 0);
    assert_eq!(norm_gain(&m), g0);
}
