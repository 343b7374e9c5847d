//! Regression tests for the bugs issue #20 found trying quantir as a new user: each asserts the
//! behaviour the issue asks for.

mod common;

use common::{arg, data, example, ok, quantir, stderr};
use prost::Message;
use quantir::formats::onnx::proto;

/// A stats file serves every quantize option that leaves the graph alone: `calibrate`
/// observes the model's outputs too, so `--quantize-outputs` needs no recalibration.
#[test]
fn one_stats_file_serves_quantize_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let stats = dir.path().join("s.json");
    let model = arg(&example("digits_cnn.mlir"));
    ok(quantir(&[
        "calibrate",
        &model,
        "--data",
        &arg(&example("digits_calib.npz")),
        "-o",
        &arg(&stats),
    ]));
    let q = dir.path().join("q.mlir");
    let o = ok(quantir(&[
        "quantize",
        &model,
        "--stats",
        &arg(&stats),
        "--quantize-outputs",
        "-o",
        &arg(&q),
    ]));
    assert!(q.exists(), "{}", stderr(&o));
    // and the same stats without the option give the same graph they always did
    let q2 = dir.path().join("q2.mlir");
    ok(quantir(&["quantize", &model, "--stats", &arg(&stats), "-o", &arg(&q2)]));
    assert_ne!(std::fs::read(&q).unwrap(), std::fs::read(&q2).unwrap());
}

/// A recipe override whose pattern selects nothing is named in a warning (a typo would
/// otherwise change nothing, silently); one that matches is not.
#[test]
fn an_override_that_matches_nothing_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let recipe = dir.path().join("r.toml");
    std::fs::write(
        &recipe,
        "[[override]]\nmatch = \"tf.Conv2d\"\nexclude = true\n\n[[override]]\nmatch = \"tf.MatMul\"\nactivations = \"int16\"\n",
    )
    .unwrap();
    let o = ok(quantir(&[
        "quantize",
        &arg(&example("digits_cnn.mlir")),
        "--data",
        &arg(&example("digits_calib.npz")),
        "--no-cache",
        "--config",
        &arg(&recipe),
        "-o",
        &arg(&dir.path().join("q.mlir")),
    ]));
    let e = stderr(&o);
    assert!(
        e.contains("warning: recipe override match = \"tf.Conv2d\" selects no op and no tensor"),
        "{e}"
    );
    assert!(!e.contains("\"tf.MatMul\" selects"), "{e}");
}

/// An override may select a model input by its name (as `--target-sqnr` does when it raises
/// the input's activation point): that is a match, applied and not warned about.
#[test]
fn an_override_of_a_model_input_matches_it() {
    let dir = tempfile::tempdir().unwrap();
    let recipe = dir.path().join("r.toml");
    std::fs::write(&recipe, "[[override]]\nmatch = \"x\"\nactivations = \"int16\"\n").unwrap();
    let q = dir.path().join("q.onnx");
    let o = ok(quantir(&[
        "quantize",
        &arg(&data("real/ppocr_cls.onnx")),
        "--data",
        &arg(&data("real/ppocr_cls_calib.npz")),
        "--limit",
        "4",
        "--no-cache",
        "--config",
        &arg(&recipe),
        "-o",
        &arg(&q),
    ]));
    let e = stderr(&o);
    assert!(!e.contains("selects no op"), "{e}");
    // the input's QuantizeLinear is int16, the next one 8-bit (uint8, the .onnx default)
    let m = proto::ModelProto::decode(std::fs::read(&q).unwrap().as_slice()).unwrap();
    let g = m.graph.unwrap();
    let zp_type = |input: &str| {
        let n = g
            .node
            .iter()
            .find(|n| n.op_type == "QuantizeLinear" && n.input[0] == input)
            .unwrap();
        g.initializer.iter().find(|t| t.name == n.input[2]).unwrap().data_type
    };
    assert_eq!(zp_type("x"), proto::data_type::INT16);
    assert_eq!(zp_type("hardswish_0.tmp_0"), proto::data_type::UINT8);
}

/// An output that cannot be written says why once, on one line.
#[test]
fn an_unwritable_output_gives_the_os_error_once() {
    let o = quantir(&[
        "calibrate",
        &arg(&example("digits_cnn.mlir")),
        "--data",
        &arg(&example("digits_calib.npz")),
        "-o",
        "/proc/quantir-stats.json",
    ]);
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    let errors: Vec<&str> = e.lines().filter(|l| l.contains("error")).collect();
    assert_eq!(errors.len(), 1, "{e}");
    assert!(errors[0].contains("/proc/quantir-stats.json: cannot write"), "{e}");
    assert_eq!(errors[0].matches("os error").count(), 1, "{e}");
}
