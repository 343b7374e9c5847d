//! ONNX in and out, checked against the real onnxruntime (the test venv's Python runs
//! tests/python/onnx_ref.py): import → run matches TensorFlow's outputs, import → export is
//! bit-exact in onnxruntime, quantized models run in onnxruntime with the quality targets,
//! single-op models match onnxruntime, and bad ONNX input fails cleanly.

mod common;

use common::{arg, ok, onnx_ref as python, quantir};

use ndarray::ArrayD;
use ndarray_npy::NpzReader;
use prost::Message;
use quantir::formats::onnx::proto;
use std::path::Path;

fn read_npz(p: &Path) -> Vec<(String, ArrayD<f32>)> {
    let mut r = NpzReader::new(std::fs::File::open(p).unwrap()).unwrap();
    let mut names = r.names().unwrap();
    names.sort();
    // integer outputs (ArgMax) are compared as f32 too
    names
        .into_iter()
        .map(|n| {
            let a: ArrayD<f32> = match r.by_name(&n) {
                Ok(a) => a,
                Err(_) => r
                    .by_name::<ndarray::OwnedRepr<i64>, ndarray::IxDyn>(&n)
                    .unwrap()
                    .mapv(|v| v as f32),
            };
            (n, a)
        })
        .collect()
}

const MODELS: &[(&str, &str, &str)] = &[
    ("digits_cnn.onnx", "digits_test.npz", "digits_cnn_test_outputs.npz"),
    ("digits_mlp.onnx", "digits_mlp_test.npz", "digits_mlp_test_outputs.npz"),
    (
        "mobilenet_v2_035.onnx",
        "mobilenet_test.npz",
        "mobilenet_v2_035_test_outputs.npz",
    ),
];

fn data_path(name: &str) -> std::path::PathBuf {
    let d = common::data(name);
    if d.exists() {
        d
    } else {
        common::example(name)
    }
}

#[test]
fn run_matches_tensorflow_outputs() {
    let dir = tempfile::tempdir().unwrap();
    for (model, test, reference) in MODELS {
        let out = dir.path().join(format!("{model}.npz"));
        ok(quantir(&[
            "run",
            &arg(&common::data(model)),
            "--data",
            &arg(&data_path(test)),
            "-o",
            &arg(&out),
        ]));
        let got = read_npz(&out);
        let want = read_npz(&common::data(reference));
        let (_, g) = &got[0];
        let w = want
            .iter()
            .find(|(_, a)| a.len() == g.len())
            .unwrap_or_else(|| panic!("{model}: no reference array of {} values", g.len()));
        let max = g
            .iter()
            .zip(w.1.iter())
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(max <= 1e-4, "{model}: max abs difference {max} to TensorFlow");
    }
}

#[test]
fn import_export_round_trip_is_bit_exact_in_onnxruntime() {
    let dir = tempfile::tempdir().unwrap();
    for (model, test, _) in MODELS {
        let out = dir.path().join(model);
        ok(quantir(&["opt", &arg(&common::data(model)), "-o", &arg(&out)]));
        let r = python(&[
            "roundtrip",
            &arg(&common::data(model)),
            &arg(&out),
            &arg(&data_path(test)),
        ]);
        assert_eq!(r["bit_exact"], true, "{model}: {r}");
        assert_eq!(r["metadata_kept"], true, "{model}: {r}");
    }
}

#[test]
fn quantized_digits_run_in_onnxruntime_above_the_peers() {
    let dir = tempfile::tempdir().unwrap();
    let ort: serde_json::Value =
        serde_json::from_slice(&std::fs::read(common::data("ort_results.json")).unwrap()).unwrap();
    // (model, calibration, test, ORT's key, SQNR target = best peer + 1 dB)
    for (model, calib, test, key, target) in [
        ("digits_cnn", "digits_calib.npz", "digits_test.npz", "digits_cnn", 38.0),
        (
            "digits_mlp",
            "digits_mlp_calib.npz",
            "digits_mlp_test.npz",
            "digits_mlp",
            40.6,
        ),
    ] {
        let q = dir.path().join(format!("{model}_q.onnx"));
        ok(quantir(&[
            "quantize",
            &arg(&common::data(&format!("{model}.onnx"))),
            "--data",
            &arg(&data_path(calib)),
            "--no-cache",
            "-o",
            &arg(&q),
        ]));
        let interp = dir.path().join(format!("{model}_q.npz"));
        ok(quantir(&[
            "run",
            &arg(&q),
            "--data",
            &arg(&data_path(test)),
            "-o",
            &arg(&interp),
        ]));
        let r = python(&[
            "eval",
            &arg(&common::data(&format!("{model}.onnx"))),
            &arg(&q),
            &arg(&data_path(test)),
            &arg(&interp),
        ]);
        let ort_top1 = ort[key]["QInt8/per_channel/MinMax"]["top1"].as_f64().unwrap();
        let top1 = r["top1"].as_f64().unwrap();
        let sqnr = r["sqnr"].as_f64().unwrap();
        assert!(top1 >= ort_top1, "{model}: top-1 {top1} < onnxruntime's {ort_top1}");
        assert!(sqnr >= target, "{model}: SQNR {sqnr:.2} dB < {target} dB");
        let w = r["weights_int8"].as_array().unwrap();
        assert!(
            !w.is_empty() && w.iter().all(|b| b == true),
            "{model}: weights not 8-bit behind DequantizeLinear: {r}"
        );
        let (diff, step) = (r["max_diff_vs_quantir"].as_f64().unwrap(), r["step"].as_f64().unwrap());
        assert!(
            diff <= step,
            "{model}: quantir and onnxruntime differ by {diff} > one step {step}"
        );
        assert_eq!(r["top1_agreement_vs_quantir"], 1.0, "{model}: {r}");
    }
}

#[test]
fn single_op_models_match_onnxruntime() {
    let dir = tempfile::tempdir().unwrap();
    let r = python(&["ops", &arg(dir.path())]);
    let cases: Vec<String> = r["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap().to_string())
        .collect();
    assert!(cases.len() >= 20);
    for c in &cases {
        let p = |suffix: &str| dir.path().join(format!("{c}{suffix}"));
        ok(quantir(&[
            "run",
            &arg(&p(".onnx")),
            "--data",
            &arg(&p("_in.npz")),
            "-o",
            &arg(&p("_q.npz")),
        ]));
        let want = read_npz(&p("_out.npz"));
        let got = read_npz(&p("_q.npz"));
        assert_eq!(want.len(), got.len(), "{c}");
        for ((_, w), (n, g)) in want.iter().zip(&got) {
            assert_eq!(w.shape(), g.shape(), "{c}: {n}");
            let max = w.iter().zip(g.iter()).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
            assert!(max <= 1e-5, "{c}: {n} differs from onnxruntime by {max}");
        }
    }
}

/// A one-node model: y = OP(x), x: [1, 4].
fn tiny_model(op: &str, initializer: Option<proto::TensorProto>) -> Vec<u8> {
    let vi = |n: &str| proto::ValueInfoProto {
        name: n.into(),
        r#type: Some(proto::TypeProto {
            value: Some(proto::type_proto::Value::TensorType(proto::type_proto::Tensor {
                elem_type: proto::data_type::FLOAT,
                shape: Some(proto::TensorShapeProto {
                    dim: [1, 4]
                        .iter()
                        .map(|&d| proto::Dimension {
                            value: Some(proto::Dim::Value(d)),
                            denotation: String::new(),
                        })
                        .collect(),
                }),
            })),
            denotation: String::new(),
        }),
        ..Default::default()
    };
    let mut inputs = vec!["x".to_string()];
    if let Some(t) = &initializer {
        inputs.push(t.name.clone());
    }
    proto::ModelProto {
        ir_version: 8,
        opset_import: vec![proto::OperatorSetIdProto {
            domain: String::new(),
            version: 17,
        }],
        graph: Some(proto::GraphProto {
            node: vec![proto::NodeProto {
                input: inputs,
                output: vec!["y".into()],
                name: "the_node".into(),
                op_type: op.into(),
                ..Default::default()
            }],
            initializer: initializer.into_iter().collect(),
            input: vec![vi("x")],
            output: vec![vi("y")],
            ..Default::default()
        }),
        ..Default::default()
    }
    .encode_to_vec()
}

fn fails_cleanly(args: &[&str], output: &Path, must_name: &[&str]) {
    let o = quantir(args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
    assert_eq!(err.trim().lines().count(), 1, "{args:?}: one line expected: {err}");
    for m in must_name {
        assert!(err.contains(m), "{args:?}: '{m}' not in: {err}");
    }
    assert!(!output.exists(), "{args:?}: wrote {}", output.display());
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn bad_onnx_input_fails_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.onnx");
    let model = std::fs::read(common::data("digits_cnn.onnx")).unwrap();
    // truncated
    let truncated = dir.path().join("truncated.onnx");
    std::fs::write(&truncated, &model[..model.len() / 2]).unwrap();
    fails_cleanly(
        &["opt", &arg(&truncated), "-o", &arg(&out)],
        &out,
        &["truncated.onnx", "not a valid ONNX model"],
    );
    // not ONNX at all
    let junk = dir.path().join("junk.onnx");
    std::fs::write(
        &junk,
        (0..4096u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect::<Vec<_>>(),
    )
    .unwrap();
    fails_cleanly(&["inspect", &arg(&junk)], &out, &["junk.onnx"]);
    // an op the interpreter does not know: named with its node
    let unknown = dir.path().join("unknown_op.onnx");
    std::fs::write(&unknown, tiny_model("FrobnicateV9", None)).unwrap();
    let data = dir.path().join("x.npz");
    {
        let mut w = ndarray_npy::NpzWriter::new(std::fs::File::create(&data).unwrap());
        w.add_array("x", &ndarray::Array3::<f32>::zeros((2, 1, 4))).unwrap();
        w.finish().unwrap();
    }
    let run_out = dir.path().join("out.npz");
    fails_cleanly(
        &["run", &arg(&unknown), "--data", &arg(&data), "-o", &arg(&run_out)],
        &run_out,
        &["onnx.FrobnicateV9", "the_node", "not supported"],
    );
    // external data whose file is missing
    let ext = proto::TensorProto {
        dims: vec![1, 4],
        data_type: proto::data_type::FLOAT,
        name: "w".into(),
        data_location: 1,
        external_data: vec![proto::StringStringEntryProto {
            key: "location".into(),
            value: "weights.bin".into(),
        }],
        ..Default::default()
    };
    let missing = dir.path().join("external.onnx");
    std::fs::write(&missing, tiny_model("Add", Some(ext))).unwrap();
    fails_cleanly(
        &["opt", &arg(&missing), "-o", &arg(&out)],
        &out,
        &["external.onnx", "'w'", "weights.bin"],
    );
    // a TF-dialect model cannot be written as ONNX, and says so
    fails_cleanly(
        &["opt", &arg(&common::example("digits_cnn.mlir")), "-o", &arg(&out)],
        &out,
        &["no ONNX form"],
    );
}

#[test]
fn onnx_quantized_as_mlir_passes_mlir_opt() {
    let dir = tempfile::tempdir().unwrap();
    let q = dir.path().join("q.mlir");
    ok(quantir(&[
        "quantize",
        &arg(&common::data("digits_mlp.onnx")),
        "--data",
        &arg(&common::data("digits_mlp_calib.npz")),
        "--no-cache",
        "-o",
        &arg(&q),
    ]));
    let (accepted, err) = common::mlir_opt_accepts(&q);
    assert!(accepted, "{err}");
    let text = std::fs::read_to_string(&q).unwrap();
    assert!(text.contains("quant.qcast") && text.contains("\"onnx.MatMul\""));
}

/// The Q/DQ nodes of a model by (domain, op type, zero point's data type).
fn qdq_nodes(m: &proto::ModelProto) -> Vec<(String, String, i32)> {
    let g = m.graph.as_ref().unwrap();
    g.node
        .iter()
        .filter(|n| n.op_type.ends_with("Linear"))
        .map(|n| {
            let zp = g.initializer.iter().find(|t| t.name == n.input[2]).unwrap();
            (n.domain.clone(), n.op_type.clone(), zp.data_type)
        })
        .collect()
}

/// ppocr_det is opset 12 with a BatchNormalization that stays float, an op that changed form at
/// opset 14 (and Resize, changed at 13): int16
/// activations cannot raise it to opset 21, so their Q/DQ nodes are onnxruntime's
/// `com.microsoft` contrib ops (as onnxruntime's quantizer writes them there) while the int8
/// weights' stay standard. onnxruntime runs the model at both levels, better than int8
/// activations, and quantir reads it back to the same figure; int4 weights likewise.
#[test]
fn int16_activations_below_opset_21_are_written_as_contrib_qdq() {
    let dir = tempfile::tempdir().unwrap();
    let (model, calib, test) = (
        data_path("real/ppocr_det.onnx"),
        data_path("real/ppocr_det_calib.npz"),
        data_path("real/ppocr_det_test.npz"),
    );
    let q = |flag: &str, value: &str| {
        let out = dir.path().join(format!("{value}.onnx"));
        ok(quantir(&[
            "quantize",
            &arg(&model),
            "--data",
            &arg(&calib),
            "--limit",
            "4",
            flag,
            value,
            "--no-cache",
            "-o",
            &arg(&out),
        ]));
        out
    };
    let (q8, q16, w4) = (
        q("--activations", "int8"),
        q("--activations", "int16"),
        q("--weights", "int4"),
    );
    let m = proto::ModelProto::decode(std::fs::read(&q16).unwrap().as_slice()).unwrap();
    let opset = |d: &str| m.opset_import.iter().find(|o| o.domain == d).map(|o| o.version);
    assert_eq!(opset("com.microsoft"), Some(1));
    assert!(opset("").unwrap() < 14, "{:?}", m.opset_import);
    let nodes = qdq_nodes(&m);
    let int16 = proto::data_type::INT16;
    assert!(nodes.iter().any(|(_, _, t)| *t == int16), "{nodes:?}");
    for (domain, op, t) in &nodes {
        // 16-bit nodes contrib, 8-bit nodes standard
        assert_eq!(domain == "com.microsoft", *t == int16, "{op} of type {t} in '{domain}'");
    }
    let levels = |p: &Path| python(&["levels", &arg(&model), &arg(p), &arg(&test), "4"]);
    let (l8, l16) = (levels(&q8), levels(&q16));
    for level in ["ORT_DISABLE_ALL", "ORT_ENABLE_ALL"] {
        let (a, b) = (l8[level].as_f64().unwrap(), l16[level].as_f64().unwrap());
        assert!(b > a, "{level}: int16 activations {b:.2} dB, int8 {a:.2} dB");
    }
    // quantir's own evaluation of the written models agrees with onnxruntime's, int4 weights
    // (contrib DequantizeLinear per axis) included
    for (q, l) in [(&q16, l16), (&w4, levels(&w4))] {
        let out = ok(quantir(&[
            "evaluate",
            &arg(&model),
            &arg(q),
            "--data",
            &arg(&test),
            "--limit",
            "4",
            "--json",
        ]));
        let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let ours = r["outputs"][0]["sqnr_db"].as_f64().unwrap();
        for level in ["ORT_DISABLE_ALL", "ORT_ENABLE_ALL"] {
            let ort = l[level].as_f64().unwrap();
            assert!(
                (ours - ort).abs() < 0.1,
                "{q:?} {level}: quantir {ours:.3} dB, onnxruntime {ort:.3} dB"
            );
        }
    }
}

/// `model` with every tensor of at least `at_least` bytes (initializers and `Constant` node
/// values) moved to one external-data file beside it, the first of them at an offset that is
/// not a multiple of 4; the number moved.
fn with_external_data(model: &Path, out: &Path, at_least: usize) -> usize {
    fn moved(t: &mut proto::TensorProto, data: &mut Vec<u8>, at_least: usize) -> bool {
        if t.raw_data.len() < at_least || t.data_location == 1 {
            return false;
        }
        // the first tensor 2 bytes in, misaligned for f32 (imported by copying), the others
        // page-aligned (mapped)
        let offset = if data.is_empty() {
            2
        } else {
            data.len().next_multiple_of(4096)
        };
        data.resize(offset, 0);
        let entry = |k: &str, v: String| proto::StringStringEntryProto {
            key: k.into(),
            value: v,
        };
        t.external_data = vec![
            entry("location", "weights.bin".into()),
            entry("offset", data.len().to_string()),
            entry("length", t.raw_data.len().to_string()),
        ];
        t.data_location = 1;
        data.extend(std::mem::take(&mut t.raw_data));
        true
    }
    let mut m = proto::ModelProto::decode(&std::fs::read(model).unwrap()[..]).unwrap();
    let mut data = Vec::new();
    let g = m.graph.as_mut().unwrap();
    let mut n = 0;
    for t in g.initializer.iter_mut() {
        n += usize::from(moved(t, &mut data, at_least));
    }
    for node in g.node.iter_mut() {
        for a in node.attribute.iter_mut() {
            if let Some(t) = a.t.as_mut() {
                n += usize::from(moved(t, &mut data, at_least));
            }
        }
    }
    std::fs::write(out.with_file_name("weights.bin"), data).unwrap();
    std::fs::write(out, m.encode_to_vec()).unwrap();
    n
}

#[test]
fn weights_kept_in_their_external_file_give_the_same_results_as_inline_ones() {
    // Large external tensors are imported as dense_resource blobs over the mapped file
    // (quantir::ir::blobs), not copied: running, quantizing and writing MLIR must not tell
    // them from the same tensors stored inline.
    let dir = tempfile::tempdir().unwrap();
    let inline = common::data("mobilenet_v2_035.onnx");
    let ext = dir.path().join("ext.onnx");
    let moved = with_external_data(&inline, &ext, 64 << 10);
    assert!(moved >= 5, "only {moved} tensors moved");
    let data = arg(&data_path("mobilenet_test.npz"));
    let calib = data.clone();
    let run = |model: &Path, name: &str| {
        let out = dir.path().join(name);
        ok(quantir(&["run", &arg(model), "--data", &data, "-o", &arg(&out)]));
        read_npz(&out)
    };
    let quantize = |model: &Path, name: &str| {
        let out = dir.path().join(name);
        ok(quantir(&[
            "quantize",
            &arg(model),
            "--data",
            &calib,
            "--no-cache",
            "-o",
            &arg(&out),
        ]));
        std::fs::read(out).unwrap()
    };
    assert_eq!(run(&inline, "inline.npz"), run(&ext, "ext.npz"));
    assert!(
        quantize(&inline, "q_inline.onnx") == quantize(&ext, "q_ext.onnx"),
        "quantized models differ"
    );
    // written as MLIR, the blobs become a resource section mlir-opt reads, and the file
    // runs as the ONNX model does
    let text = dir.path().join("ext.mlir");
    ok(quantir(&["opt", &arg(&ext), "-o", &arg(&text)]));
    let (accepted, err) = common::mlir_opt_accepts(&text);
    assert!(accepted, "{err}");
    assert!(std::fs::read_to_string(&text).unwrap().contains("dense_resource<"));
    assert_eq!(run(&inline, "inline2.npz"), run(&text, "mlir.npz"));
    // written back as ONNX, the blobs' bytes are the initializers' data
    let written = dir.path().join("written.onnx");
    ok(quantir(&["opt", &arg(&ext), "-o", &arg(&written)]));
    assert_eq!(run(&inline, "inline3.npz"), run(&written, "written.npz"));
}
