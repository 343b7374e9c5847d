//! Real models made by others, as they ship (`tests/data/real/`, copied from the shared set
//! with trimmed sample data): quantir runs them, quantizes every compute op on int8 weights and
//! activations, and writes an ONNX model that keeps the file's dynamic dims and loads in
//! onnxruntime.

mod common;

use common::{arg, data, ok, onnx_ref, quantir, stderr};

fn real(name: &str) -> String {
    arg(&data(&format!("real/{name}")))
}

/// `quantize MODEL --data CALIB --no-cache --json -o OUT`: its summary and its stderr.
fn quantize_json(model: &str, calib: &str, out: &std::path::Path) -> (serde_json::Value, String) {
    let o = ok(quantir(&[
        "quantize",
        model,
        "--data",
        calib,
        "--no-cache",
        "--json",
        "-o",
        &arg(out),
    ]));
    (serde_json::from_slice(&o.stdout).unwrap(), stderr(&o))
}

/// ppocr_cls.onnx declares its input `[?, 3, ?, ?]`: the importer's guess of 1 for the dynamic
/// dims cannot run (a 2×2 pool on a 1×1 image), so its types come from the calibration data's
/// first sample. Every Conv and the MatMul get int8 weights and activations, as on the same
/// model with fixed dims, and the output still takes any input size.
#[test]
fn ppocr_cls_as_shipped_quantizes_like_its_static_copy() {
    let dir = tempfile::tempdir().unwrap();
    let calib = real("ppocr_cls_calib.npz");
    let (shipped, _) = quantize_json(&real("ppocr_cls.onnx"), &calib, &dir.path().join("dynamic.onnx"));
    let fixed = dir.path().join("static.onnx");
    onnx_ref(&["fix_dims", &real("ppocr_cls.onnx"), &arg(&fixed), "1,3,48,192"]);
    let (static_copy, _) = quantize_json(&arg(&fixed), &calib, &dir.path().join("static.int8.onnx"));
    let ops = shipped["ops"].as_array().unwrap();
    let convs = ops.iter().filter(|o| o["op"] == "onnx.Conv").count();
    assert_eq!(convs, 53);
    assert_eq!(ops.len(), 54, "53 Conv and 1 MatMul");
    // 8-bit weights: int8, or uint8 (zero point 128) where onnxruntime's u8s8 kernel could
    // saturate (`--runtime onnxruntime`, the .onnx default)
    for o in ops {
        assert!(
            matches!(o["weights"].as_str(), Some("i8" | "u8"))
                && matches!(o["activations"].as_str(), Some("i8" | "u8")),
            "{o}"
        );
    }
    // the same compute ops, the same storage, the same activation points
    let view = |j: &serde_json::Value| -> Vec<(String, String, String, String)> {
        j["ops"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| {
                let s = |k: &str| o[k].as_str().unwrap_or_default().to_string();
                (s("key"), s("op"), s("weights"), s("activations"))
            })
            .collect()
    };
    assert_eq!(view(&shipped), view(&static_copy));
    assert_eq!(
        shipped["totals"]["activation_points"],
        static_copy["totals"]["activation_points"]
    );
    // calibrate, then quantize from the statistics: the types are resolved the same way (the
    // statistics record the sample shapes), so the output is the same file
    let stats = dir.path().join("s.json");
    ok(quantir(&[
        "calibrate",
        &real("ppocr_cls.onnx"),
        "--data",
        &real("ppocr_cls_calib.npz"),
        "-o",
        &arg(&stats),
    ]));
    let from_stats = dir.path().join("from_stats.onnx");
    ok(quantir(&[
        "quantize",
        &real("ppocr_cls.onnx"),
        "--stats",
        &arg(&stats),
        "-o",
        &arg(&from_stats),
    ]));
    assert_eq!(
        std::fs::read(&from_stats).unwrap(),
        std::fs::read(dir.path().join("dynamic.onnx")).unwrap(),
        "quantize --stats differs from quantize --data"
    );
    // inspect says what the importer left untyped, and what the data's first sample types
    let o = ok(quantir(&["inspect", &real("ppocr_cls.onnx")]));
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        text.contains("values untyped (dynamic dims the importer could not resolve"),
        "{text}"
    );
    let o = ok(quantir(&[
        "inspect",
        &real("ppocr_cls.onnx"),
        "--data",
        &real("ppocr_cls_test.npz"),
    ]));
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        text.contains("(input shapes [[1, 3, 48, 192]])") && !text.contains("untyped"),
        "{text}"
    );
    // the written model keeps the dynamic input dims
    let o = ok(quantir(&["inspect", &arg(&dir.path().join("dynamic.onnx"))]));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("func @main(tensor<?x3x?x?xf32>)"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    // and onnxruntime runs it close to the float model with its graph optimizations off (the
    // reference QDQ semantics; the default level's fused kernels are #18's to keep)
    let r = onnx_ref(&[
        "levels",
        &real("ppocr_cls.onnx"),
        &arg(&dir.path().join("dynamic.onnx")),
        &real("ppocr_cls_test.npz"),
    ]);
    let sqnr = r["ORT_DISABLE_ALL"].as_f64().unwrap();
    assert!(sqnr > 25.0, "ppocr_cls int8 in onnxruntime: {sqnr} dB ({r})");
}

/// `run` reproduces onnxruntime's float outputs (≤ 5e-4 × max(1, max |ref|)).
#[test]
fn ppocr_cls_runs_as_onnxruntime_does() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.npz");
    let o = ok(quantir(&[
        "run",
        &real("ppocr_cls.onnx"),
        "--data",
        &real("ppocr_cls_test.npz"),
        "-o",
        &arg(&out),
    ]));
    assert!(!stderr(&o).contains("warning"), "{}", stderr(&o));
    let read = |p: &std::path::Path| -> ndarray::ArrayD<f32> {
        let mut z = ndarray_npy::NpzReader::new(std::fs::File::open(p).unwrap()).unwrap();
        z.by_name("save_infer_model/scale_0.tmp_1").unwrap()
    };
    let (d, bound) = close(&read(&out), &read(&data("real/ppocr_cls_test_outputs_ort.npz")));
    assert!(d <= bound, "max |quantir - onnxruntime| = {d} > {bound}");
}

/// The max |a − b| of two outputs and the bound 5e-4 × max(1, max |b|).
fn close(got: &ndarray::ArrayD<f32>, want: &ndarray::ArrayD<f32>) -> (f32, f32) {
    assert_eq!(got.shape(), want.shape());
    let d = got.iter().zip(want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    (d, 5e-4 * want.iter().fold(1f32, |m, v| m.max(v.abs())))
}

/// basic-pitch's SavedModel (an audio front end of 26 conv1d, `tf.DivNoNan`, 3 heads, strided
/// slices with an ellipsis and new axes) as an `.onnx`, like the other shipped models.
#[test]
fn basic_pitch_savedmodel_as_shipped() {
    as_shipped(
        "basic_pitch_savedmodel",
        "basic_pitch",
        "basic_pitch_test_outputs_tf.npz",
        32,
    );
}

/// The same SavedModel kept in the TF dialect: every Conv2D on int8 weights and activations,
/// and the `.mlir` accepted by mlir-opt.
#[test]
fn basic_pitch_savedmodel_quantizes_in_tf_dialect() {
    let dir = tempfile::tempdir().unwrap();
    let (j, _) = quantize_json(
        &real("basic_pitch_savedmodel"),
        &real("basic_pitch_calib.npz"),
        &dir.path().join("q.mlir"),
    );
    let ops = j["ops"].as_array().unwrap();
    assert_eq!(ops.iter().filter(|o| o["op"] == "tf.Conv2D").count(), 32, "{j:#}");
    for o in ops {
        assert_eq!(
            (o["weights"].as_str(), o["activations"].as_str()),
            (Some("i8"), Some("i8")),
            "{o}"
        );
    }
    let (ok_, msg) = common::mlir_opt_accepts(&dir.path().join("q.mlir"));
    assert!(ok_, "{msg}");
}

/// One real model as shipped: `run` reproduces the reference outputs on the test samples
/// (≤ 5e-4 × max(1, max |ref|)), the default `quantize -o .onnx` puts every one of `convs`
/// compute ops on int8 weights and activations, and onnxruntime loads and runs the output.
fn as_shipped(model: &str, stem: &str, reference: &str, convs: usize) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.npz");
    ok(quantir(&[
        "run",
        &real(model),
        "--data",
        &real(&format!("{stem}_test.npz")),
        "-o",
        &arg(&out),
    ]));
    let mut want =
        ndarray_npy::NpzReader::new(std::fs::File::open(data(&format!("real/{reference}"))).unwrap()).unwrap();
    let mut got = ndarray_npy::NpzReader::new(std::fs::File::open(&out).unwrap()).unwrap();
    for name in want.names().unwrap() {
        let name = name.trim_end_matches(".npy").to_string();
        let w: ndarray::ArrayD<f32> = want.by_name(&name).unwrap();
        let g: ndarray::ArrayD<f32> = got
            .by_name(&name)
            .unwrap_or_else(|e| panic!("{model}: output {name}: {e}"));
        let (d, bound) = close(&g, &w);
        assert!(d <= bound, "{model} {name}: max |quantir - reference| = {d} > {bound}");
    }
    let q = dir.path().join("q.onnx");
    let (j, _) = quantize_json(&real(model), &real(&format!("{stem}_calib.npz")), &q);
    // no bias is ever clipped: an int32 overflow enlarges that channel's weight scale
    let warnings = j["passes"]["quantize-weights"]["warnings"].as_array().unwrap();
    assert!(
        warnings.iter().all(|w| !w.as_str().unwrap_or("").contains("clipped")),
        "{model}: {warnings:?}"
    );
    let ops = j["ops"].as_array().unwrap();
    assert_eq!(ops.len(), convs, "{model}: {j:#}");
    // every op's MACs are counted, a dynamic-dim model's at its first calibration sample
    let t = &j["totals"];
    assert_eq!(t["ops_without_macs"], 0, "{model}: {t}");
    assert_eq!(t["int8_mac_share"], 1.0, "{model}: {t}");
    if model == "ppocr_det.onnx" {
        assert_eq!(t["macs_at"], serde_json::json!([[1, 3, 320, 320]]), "{model}: {t}");
    }
    for o in ops {
        assert!(
            matches!(o["weights"].as_str(), Some("i8" | "u8"))
                && matches!(o["activations"].as_str(), Some("i8" | "u8")),
            "{model}: {o}"
        );
    }
    // every initializer is read by some node (a weight shared by several convs used to leave
    // its float copy behind)
    use prost::Message;
    let m = quantir::formats::onnx::proto::ModelProto::decode(std::fs::read(&q).unwrap().as_slice()).unwrap();
    let g = m.graph.unwrap();
    let read: std::collections::HashSet<&str> = g
        .node
        .iter()
        .flat_map(|n| n.input.iter().map(String::as_str))
        .chain(g.output.iter().map(|o| o.name.as_str()))
        .collect();
    let unused: Vec<&str> = g
        .initializer
        .iter()
        .map(|i| i.name.as_str())
        .filter(|n| !read.contains(n))
        .collect();
    assert!(unused.is_empty(), "{model}: unused initializers {unused:?}");
    let r = onnx_ref(&[
        "run",
        &arg(&q),
        &real(&format!("{stem}_test.npz")),
        &arg(&dir.path().join("ort.npz")),
    ]);
    assert!(r["samples"].as_u64().unwrap() > 0, "{model}: {r}");
}

/// PP-OCRv4's text detector (paddle2onnx, dynamic dims): 62 Conv and 2 ConvTranspose.
#[test]
fn ppocr_det_as_shipped() {
    as_shipped("ppocr_det.onnx", "ppocr_det", "ppocr_det_test_outputs_ort.npz", 64);
}

/// basic-pitch's tf2onnx export: its 32 convolutions (26 of the CQT front end).
#[test]
fn basic_pitch_onnx_as_shipped() {
    as_shipped(
        "basic_pitch.onnx",
        "basic_pitch",
        "basic_pitch_test_outputs_ort.npz",
        32,
    );
}

/// fer's mini-Xception SavedModel (Keras 2): 15 Conv2D and 8 depthwise convs, as ONNX.
#[test]
fn fer_savedmodel_as_shipped() {
    as_shipped("fer_savedmodel", "fer", "fer_test_outputs_tf.npz", 23);
}

/// fer's two dead filters (largest weight ≈ 2e-34): quantized at their layer's scale, their
/// int32 biases fit — no overflow warning at all — and the summary names them.
#[test]
fn fer_dead_filters_get_a_safe_scale() {
    let dir = tempfile::tempdir().unwrap();
    let (j, err) = quantize_json(
        &real("fer_savedmodel"),
        &real("fer_calib.npz"),
        &dir.path().join("q.onnx"),
    );
    let w = &j["passes"]["quantize-weights"];
    assert_eq!(w["changes"]["dead weight channels given their layer's scale"], 2, "{w}");
    assert_eq!(w["warnings"].as_array().unwrap().len(), 0, "{w}");
    assert!(!err.contains("overflow"), "{err}");
}
