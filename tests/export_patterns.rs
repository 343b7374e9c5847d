//! Layer patterns of real exports, quantized and run in the real onnxruntime (the models are
//! made by tests/python/onnx_ref.py `layers`): a BatchNormalization after a Conv is folded
//! into it, a depthwise Conv whose input channels differ 100× in range reads them at one scale
//! per channel (unless a channel's range is not expected to hold new samples), a Conv output that only a float op (Sigmoid) reads stays float, and --exclude
//! takes node names.

mod common;

use common::{arg, ok, onnx_ref as python, quantir};
use std::path::Path;

fn quantize(dir: &Path, model: &str, out: &str, extra: &[&str]) -> std::path::PathBuf {
    quantize_logged(dir, model, out, extra).0
}

/// `quantize DIR/MODEL.onnx --data DIR/MODEL_calib.npz --no-cache -o DIR/OUT EXTRA...`, which
/// must succeed: the output and what it printed on stderr.
fn quantize_logged(dir: &Path, model: &str, out: &str, extra: &[&str]) -> (std::path::PathBuf, String) {
    let p = |s: &str| dir.join(s);
    let q = p(out);
    let mut args = vec![
        "quantize".to_string(),
        arg(&p(&format!("{model}.onnx"))),
        "--data".into(),
        arg(&p(&format!("{model}_calib.npz"))),
        "--no-cache".into(),
        "-o".into(),
        arg(&q),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let o = ok(quantir(&args.iter().map(String::as_str).collect::<Vec<_>>()));
    (q, String::from_utf8_lossy(&o.stderr).into_owned())
}

/// The tensors the QuantizeLinear nodes of `q` quantize, in order.
fn points(q: &Path) -> Vec<String> {
    qdq(q).0.into_iter().map(|(t, _, _)| t).collect()
}

/// SQNR of `q` against the float model on its test data, at onnxruntime's ORT_DISABLE_ALL and
/// at its default level.
fn sqnr(dir: &Path, model: &str, q: &Path) -> (f64, f64) {
    let r = python(&[
        "levels",
        &arg(&dir.join(format!("{model}.onnx"))),
        &arg(q),
        &arg(&dir.join(format!("{model}_test.npz"))),
    ]);
    (
        r["ORT_DISABLE_ALL"].as_f64().unwrap(),
        r["ORT_ENABLE_ALL"].as_f64().unwrap(),
    )
}

/// (tensor, number of scales, axis) of every QuantizeLinear, and the model's op types.
fn qdq(q: &Path) -> (Vec<(String, u64, Option<i64>)>, Vec<String>) {
    let r = python(&["qdq", &arg(q)]);
    let qs = r["quantize"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| {
            (
                q["input"].as_str().unwrap().to_string(),
                q["scales"].as_u64().unwrap(),
                q["axis"].as_i64(),
            )
        })
        .collect();
    let ops = r["ops"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o.as_str().unwrap().to_string())
        .collect();
    (qs, ops)
}

fn layers() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    python(&["layers", &arg(dir.path())]);
    dir
}

#[test]
fn batch_normalization_after_a_conv_is_folded_into_it() {
    let dir = layers();
    let q = quantize(dir.path(), "conv_bn_relu", "q.onnx", &[]);
    let ops = qdq(&q).1;
    assert!(!ops.iter().any(|o| o == "BatchNormalization"), "{ops:?}");
    // the Relu after the folded op is the fused output point: the Conv input and the Relu
    // output, nothing between Conv and Relu
    assert_eq!(points(&q), ["x", "r"]);
    // channels whose batch-norm scale differs 80× are quantized as the folded weight's
    // per-channel scales, not as one pre-scale range
    let (off, default) = sqnr(dir.path(), "conv_bn_relu", &q);
    assert!(off >= 35.0 && default >= 35.0, "SQNR {off} / {default} dB");
}

#[test]
fn a_depthwise_input_with_unequal_channels_is_quantized_per_channel() {
    let dir = layers();
    let q = quantize(dir.path(), "depthwise_ranges", "q.onnx", &[]);
    let (qs, _) = qdq(&q);
    assert!(qs.contains(&("c1".to_string(), 8, Some(1))), "{qs:?}");
    // the input of the other convolutions keeps one scale
    assert!(qs.contains(&("x".to_string(), 1, None)), "{qs:?}");
    let pt = quantize(
        dir.path(),
        "depthwise_ranges",
        "pt.onnx",
        &["--no-per-channel-depthwise-inputs"],
    );
    assert!(qdq(&pt).0.iter().all(|(_, n, _)| *n == 1));
    // at 16 bits one scale already leaves the small channels thousands of levels, and a
    // channel's own range would only clip what calibration did not see: one scale
    let a16 = quantize(dir.path(), "depthwise_ranges", "a16.onnx", &["--activations", "int16"]);
    let (qs16, _) = qdq(&a16);
    assert!(qs16.contains(&("c1".to_string(), 1, None)), "{qs16:?}");
    let (pc_off, pc_default) = sqnr(dir.path(), "depthwise_ranges", &q);
    let (pt_off, pt_default) = sqnr(dir.path(), "depthwise_ranges", &pt);
    // its one step is still finer than 8 bits' finest per-channel one
    let (a16_off, _) = sqnr(dir.path(), "depthwise_ranges", &a16);
    assert!(
        a16_off > pc_off,
        "int16 per tensor {a16_off} dB, int8 per channel {pc_off} dB"
    );
    // channel ranges 100× apart: one scale leaves the small channels a few levels
    assert!(
        pc_off >= pt_off + 15.0,
        "per channel {pc_off} dB, per tensor {pt_off} dB"
    );
    assert!(
        (pc_default - pc_off).abs() < 0.5 && (pt_default - pt_off).abs() < 0.5,
        "{pc_default} / {pt_default}"
    );
}

#[test]
fn a_depthwise_input_whose_small_channels_reach_their_range_in_one_sample_keeps_one_scale() {
    let dir = layers();
    // channels a third of the large one's range in every sample: one scale per channel
    let q = quantize(dir.path(), "depthwise_input", "q.onnx", &[]);
    assert!(qdq(&q).0.contains(&("x".to_string(), 8, Some(1))), "{:?}", qdq(&q).0);
    // the same extremes, but the small channels reach them in one sample of 32 and stay near
    // 0 in the others: their ranges are not expected to hold new samples (the two halves of
    // the data disagree by as much as the range), so the input keeps one scale
    let p = |s: &str| arg(&dir.path().join(s));
    let o = p("o.onnx");
    ok(quantir(&[
        "quantize",
        &p("depthwise_input.onnx"),
        "--data",
        &p("depthwise_input_outlier.npz"),
        "--no-cache",
        "-o",
        &o,
    ]));
    let (qs, _) = qdq(Path::new(&o));
    assert!(qs.contains(&("x".to_string(), 1, None)), "{qs:?}");
}

#[test]
fn a_conv_output_only_a_float_op_reads_stays_float() {
    let dir = layers();
    let q = quantize(dir.path(), "conv_sigmoid_conv", "q.onnx", &[]);
    assert_eq!(points(&q), ["x", "s"], "the Sigmoid's input is not rounded");
    let fro = quantize(dir.path(), "conv_sigmoid_conv", "fro.onnx", &["--float-read-outputs"]);
    assert_eq!(points(&fro), ["x", "c1", "s"]);
    let (a, _) = sqnr(dir.path(), "conv_sigmoid_conv", &q);
    let (b, _) = sqnr(dir.path(), "conv_sigmoid_conv", &fro);
    assert!(a > b, "one rounding fewer: {a} dB vs {b} dB");
}

#[test]
fn exclude_takes_node_names_and_warns_when_it_selects_nothing() {
    let dir = layers();
    let (q, err) = quantize_logged(
        dir.path(),
        "conv_sigmoid_conv",
        "q.onnx",
        &["--exclude", "conv_sigmoid_conv_0", "--exclude", "no_such_node*"],
    );
    assert!(err.contains("quantized: 1 onnx.Conv"), "{err}");
    assert!(
        err.contains("left float: onnx.Conv c1 (excluded by --exclude / recipe)"),
        "{err}"
    );
    assert!(err.contains("exclude pattern \"no_such_node*\" selects no op"), "{err}");
    // the excluded Conv's input is not quantized for it; the second Conv's is
    assert_eq!(points(&q), ["s"]);
}
