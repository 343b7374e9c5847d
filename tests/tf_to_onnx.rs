//! TensorFlow models written as ONNX (`tf-to-onnx`): the lowered SavedModels reproduce
//! TensorFlow's outputs in the real onnxruntime, a hand-built TF module exercising every layout
//! case lowers op for op, quantizing a SavedModel to `.onnx` reaches the quality of the `.mlir`
//! path, and ops without an ONNX form are named before anything is written.

mod common;

use common::{arg, data, example, ok, onnx_ref, quantir, stderr};
use ndarray::ArrayD;
use prost::Message;
use quantir::formats::onnx::proto;
use std::path::Path;

fn read(path: &Path, key: &str) -> ArrayD<f32> {
    let mut z = ndarray_npy::NpzReader::new(std::fs::File::open(path).unwrap()).unwrap();
    z.by_name(key)
        .unwrap_or_else(|e| panic!("{}: {key}: {e}", path.display()))
}

fn max_abs_diff(a: &ArrayD<f32>, b: &ArrayD<f32>) -> f32 {
    assert_eq!(a.shape(), b.shape());
    a.iter().zip(b.iter()).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

fn op_types(path: &Path) -> Vec<String> {
    let m = proto::ModelProto::decode(std::fs::read(path).unwrap().as_slice()).unwrap();
    m.graph.unwrap().node.into_iter().map(|n| n.op_type).collect()
}

/// The float module as `quantize -o x.onnx` sees it, written out.
fn lower(model: &Path, out: &Path) {
    ok(quantir(&[
        "opt",
        &arg(model),
        "--pass",
        "strip-identity",
        "--pass",
        "fold-constants",
        "--pass",
        "fold-batchnorm",
        "--pass",
        "tf-to-onnx",
        "-o",
        &arg(out),
    ]));
}

/// Runs a TF module three ways on `x`: quantir on the TF ops, onnxruntime on the lowered
/// `.onnx`, quantir on the lowered `.onnx`. Returns the three output files and the `.onnx`.
fn three_runs(dir: &Path, model: &Path, x: &Path) -> ([std::path::PathBuf; 3], std::path::PathBuf) {
    let tf_out = dir.join("tf.npz");
    ok(quantir(&["run", &arg(model), "--data", &arg(x), "-o", &arg(&tf_out)]));
    let onnx = dir.join("lowered.onnx");
    lower(model, &onnx);
    let ort_out = dir.join("ort.npz");
    onnx_ref(&["run", &arg(&onnx), &arg(x), &arg(&ort_out)]);
    let onnx_out = dir.join("onnx.npz");
    ok(quantir(&["run", &arg(&onnx), "--data", &arg(x), "-o", &arg(&onnx_out)]));
    ([tf_out, ort_out, onnx_out], onnx)
}

#[test]
fn lowered_savedmodels_reproduce_tensorflow_in_onnxruntime() {
    let dir = tempfile::tempdir().unwrap();
    // Transpose nodes left: CNN NHWC input in and flatten out, MLP none, MobileNet input only
    for ((model, test, reference), transposes) in common::saved_models().into_iter().zip([2, 0, 1]) {
        let onnx = dir.path().join(format!("{model}.onnx"));
        lower(&data(model), &onnx);
        let ops = op_types(&onnx);
        assert_eq!(
            ops.iter().filter(|t| *t == "Transpose").count(),
            transposes,
            "{model}: {ops:?}"
        );
        let out = dir.path().join(format!("{model}_ort.npz"));
        onnx_ref(&["run", &arg(&onnx), &arg(&test), &arg(&out)]);
        let d = max_abs_diff(&read(&out, "output_0"), &read(&reference, "y"));
        assert!(d <= 1e-4, "{model}: max |onnxruntime - TensorFlow| = {d}");
    }
}

/// Deterministic values in [-scale, scale] as an MLIR hex dense literal.
fn dense(n: usize, seed: u64, scale: f32) -> String {
    let mut s = seed;
    let mut hex = String::from("0x");
    for _ in 0..n {
        s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let v = ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale;
        for b in v.to_le_bytes() {
            hex.push_str(&format!("{b:02X}"));
        }
    }
    format!("dense<\"{hex}\">")
}

/// Every layout case of the lowering in one TF module: strided SAME convolution, bias,
/// ReLU6, depthwise with multiplier 2, asymmetric Pad, VALID max and SAME average pooling,
/// Mean with and without kept dims, Squeeze, concatenation on the channel axis of twins and
/// of plain values, a per-channel Mul, MatMul with transpose_b, and NHWC results returned.
fn layout_module() -> String {
    let c = |ty: &str, n: usize, seed: u64, scale: f32| {
        format!(
            "\"tf.Const\"() {{value = {} : tensor<{ty}>}} : () -> tensor<{ty}>",
            dense(n, seed, scale)
        )
    };
    format!(
        r#"module {{
  func.func @main(%x: tensor<1x9x9x4xf32>) -> (tensor<1x10xf32>, tensor<1x5x5x16xf32>, tensor<1x400xf32>) attributes {{tf.entry_function = {{inputs = "x", outputs = "logits,feat,flat"}}}} {{
    %w1 = {w1}
    %c1 = "tf.Conv2D"(%x, %w1) {{data_format = "NHWC", dilations = [1, 1, 1, 1], padding = "SAME", strides = [1, 2, 2, 1]}} : (tensor<1x9x9x4xf32>, tensor<3x3x4x8xf32>) -> tensor<1x5x5x8xf32>
    %b1 = {b1}
    %a1 = "tf.BiasAdd"(%c1, %b1) {{data_format = "NHWC"}} : (tensor<1x5x5x8xf32>, tensor<8xf32>) -> tensor<1x5x5x8xf32>
    %r1 = "tf.Relu6"(%a1) : (tensor<1x5x5x8xf32>) -> tensor<1x5x5x8xf32>
    %dw = {dw}
    %d1 = "tf.DepthwiseConv2dNative"(%r1, %dw) {{data_format = "NHWC", dilations = [1, 1, 1, 1], padding = "SAME", strides = [1, 1, 1, 1]}} : (tensor<1x5x5x8xf32>, tensor<3x3x8x2xf32>) -> tensor<1x5x5x16xf32>
    %p = "tf.Const"() {{value = dense<[[0, 0], [1, 1], [0, 1], [0, 0]]> : tensor<4x2xi32>}} : () -> tensor<4x2xi32>
    %pd = "tf.Pad"(%d1, %p) : (tensor<1x5x5x16xf32>, tensor<4x2xi32>) -> tensor<1x7x6x16xf32>
    %mp = "tf.MaxPool"(%pd) {{data_format = "NHWC", ksize = [1, 2, 2, 1], padding = "VALID", strides = [1, 2, 2, 1]}} : (tensor<1x7x6x16xf32>) -> tensor<1x3x3x16xf32>
    %ap = "tf.AvgPool"(%pd) {{data_format = "NHWC", ksize = [1, 3, 3, 1], padding = "SAME", strides = [1, 2, 2, 1]}} : (tensor<1x7x6x16xf32>) -> tensor<1x4x3x16xf32>
    %hw = "tf.Const"() {{value = dense<[1, 2]> : tensor<2xi32>}} : () -> tensor<2xi32>
    %m1k = "tf.Mean"(%mp, %hw) {{keep_dims = true}} : (tensor<1x3x3x16xf32>, tensor<2xi32>) -> tensor<1x1x1x16xf32>
    %m1 = "tf.Squeeze"(%m1k) {{squeeze_dims = [1, 2]}} : (tensor<1x1x1x16xf32>) -> tensor<1x16xf32>
    %m2 = "tf.Mean"(%ap, %hw) {{keep_dims = false}} : (tensor<1x4x3x16xf32>, tensor<2xi32>) -> tensor<1x16xf32>
    %ax1 = "tf.Const"() {{value = dense<1> : tensor<i32>}} : () -> tensor<i32>
    %cat = "tf.ConcatV2"(%m1, %m2, %ax1) : (tensor<1x16xf32>, tensor<1x16xf32>, tensor<i32>) -> tensor<1x32xf32>
    %wf = {wf}
    %mm = "tf.MatMul"(%cat, %wf) {{transpose_a = false, transpose_b = true}} : (tensor<1x32xf32>, tensor<10x32xf32>) -> tensor<1x10xf32>
    %lg = "tf.Sigmoid"(%mm) : (tensor<1x10xf32>) -> tensor<1x10xf32>
    %axc = "tf.Const"() {{value = dense<-1> : tensor<i32>}} : () -> tensor<i32>
    %cc = "tf.ConcatV2"(%a1, %r1, %axc) : (tensor<1x5x5x8xf32>, tensor<1x5x5x8xf32>, tensor<i32>) -> tensor<1x5x5x16xf32>
    %k = {k}
    %sc = "tf.Mul"(%cc, %k) : (tensor<1x5x5x16xf32>, tensor<16xf32>) -> tensor<1x5x5x16xf32>
    %feat = "tf.Relu"(%sc) : (tensor<1x5x5x16xf32>) -> tensor<1x5x5x16xf32>
    %shape = "tf.Const"() {{value = dense<[1, -1]> : tensor<2xi32>}} : () -> tensor<2xi32>
    %flat = "tf.Reshape"(%feat, %shape) : (tensor<1x5x5x16xf32>, tensor<2xi32>) -> tensor<1x400xf32>
    func.return %lg, %feat, %flat : tensor<1x10xf32>, tensor<1x5x5x16xf32>, tensor<1x400xf32>
  }}
}}
"#,
        w1 = c("3x3x4x8xf32", 288, 1, 0.4),
        b1 = c("8xf32", 8, 2, 0.5),
        dw = c("3x3x8x2xf32", 144, 3, 0.5),
        wf = c("10x32xf32", 320, 4, 0.3),
        k = c("16xf32", 16, 5, 1.5),
    )
}

fn layout_data(path: &Path) {
    let n = 3 * 9 * 9 * 4;
    let mut s = 99u64;
    let v: Vec<f32> = (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
        })
        .collect();
    let x = ArrayD::from_shape_vec(vec![3, 9, 9, 4], v).unwrap();
    let mut w = ndarray_npy::NpzWriter::new(std::fs::File::create(path).unwrap());
    w.add_array("x", &x).unwrap();
    w.finish().unwrap();
}

#[test]
fn hand_built_tf_module_lowers_op_for_op() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("layout.mlir");
    std::fs::write(&model, layout_module()).unwrap();
    let x = dir.path().join("x.npz");
    layout_data(&x);
    let ([tf_out, ort_out, onnx_out], onnx) = three_runs(dir.path(), &model, &x);
    // the twins carry NCHW from the first convolution to every consumer: one Transpose in, one
    // out for each NHWC result (feat, and flat's Reshape reading it)
    let ops = op_types(&onnx);
    assert_eq!(ops.iter().filter(|t| *t == "Transpose").count(), 2, "{ops:?}");
    assert!(!ops.iter().any(|t| t.starts_with("tf.")), "{ops:?}");
    for name in ["logits", "feat", "flat"] {
        let want = read(&tf_out, name);
        let d = max_abs_diff(&read(&ort_out, name), &want);
        assert!(d <= 1e-5, "{name}: max |onnxruntime(lowered) - quantir(TF)| = {d}");
        let d = max_abs_diff(&read(&onnx_out, name), &want);
        assert!(d <= 1e-5, "{name}: max |quantir(lowered) - quantir(TF)| = {d}");
    }
}

#[test]
fn quantized_tf_models_as_onnx_match_the_mlir_path_and_run_in_onnxruntime() {
    // the SavedModel (ops named after TF's nodes) and the frozen .mlir (no names: positional
    // keys pinned before the lowering, which must not collide with the ops it adds)
    for (model, lowered) in [(data("digits_cnn_savedmodel"), 13), (example("digits_cnn.mlir"), 14)] {
        tf_model_as_onnx(&model, lowered);
    }
}

fn tf_model_as_onnx(model: &Path, lowered: usize) {
    let dir = tempfile::tempdir().unwrap();
    let (calib, test) = (example("digits_calib.npz"), example("digits_test.npz"));
    let q_onnx = dir.path().join("q.onnx");
    let o = ok(quantir(&[
        "quantize",
        &arg(model),
        "--data",
        &arg(&calib),
        "--no-cache",
        // the weights the .mlir gets: full range (the .onnx default keeps onnxruntime's u8s8
        // kernels from saturating, tests/ort_no_vnni.rs)
        "--runtime",
        "generic",
        "-o",
        &arg(&q_onnx),
    ]));
    let text = stderr(&o);
    assert!(text.contains(&format!("lowered {lowered} TF ops to ONNX")), "{text}");
    assert!(text.contains("4 weights"), "{text}");
    let q_mlir = dir.path().join("q.mlir");
    ok(quantir(&[
        "quantize",
        &arg(model),
        "--data",
        &arg(&calib),
        "--no-cache",
        "--scheme",
        "onnx",
        "-o",
        &arg(&q_mlir),
    ]));
    // the same parameters on the same tensors: the same quality, to the printed digit
    let quality = |q: &Path| {
        let o = ok(quantir(&[
            "evaluate",
            &arg(model),
            &arg(q),
            "--data",
            &arg(&test),
            "--labels",
            "y",
        ]));
        let text = String::from_utf8_lossy(&o.stdout).to_string() + &stderr(&o);
        text.lines()
            .filter(|l| l.contains("SQNR") || l.contains("accuracy"))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let (a, b) = (quality(&q_onnx), quality(&q_mlir));
    assert!(!a.is_empty(), "no quality lines");
    assert_eq!(a, b);
    // layer by layer too: the NCHW tensors of the .onnx are compared as the float model's NHWC
    // ones, and a convolution whose bias was folded in answers for the bias add
    let layers = |q: &Path| {
        let o = ok(quantir(&[
            "evaluate",
            &arg(model),
            &arg(q),
            "--data",
            &arg(&test),
            "--per-layer",
            "--json",
        ]));
        let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        r["per_layer"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| (l["key"].as_str().unwrap().to_string(), l["sqnr_db"].as_f64()))
            .collect::<std::collections::BTreeMap<_, _>>()
    };
    let (lo, lm) = (layers(&q_onnx), layers(&q_mlir));
    assert!(lo.len() >= 8, "{lo:?}");
    for (k, v) in &lo {
        let want = lm
            .get(k)
            .unwrap_or_else(|| panic!("{k} is not a layer of the .mlir: {lm:?}"));
        let (v, want) = (v.unwrap(), want.unwrap());
        assert!(
            (v - want).abs() < 0.01,
            "{k}: {v:.2} dB as .onnx, {want:.2} dB as .mlir"
        );
    }
    // in onnxruntime: int8 weights, within one step of quantir's run, above the peers' target
    let float = dir.path().join("f.onnx");
    lower(model, &float);
    let interp = dir.path().join("interp.npz");
    ok(quantir(&[
        "run",
        &arg(&q_onnx),
        "--data",
        &arg(&test),
        "-o",
        &arg(&interp),
    ]));
    let r = onnx_ref(&["eval", &arg(&float), &arg(&q_onnx), &arg(&test), &arg(&interp)]);
    let w = r["weights_int8"].as_array().unwrap();
    assert!(w.len() == 4 && w.iter().all(|b| b == true), "{r}");
    let (diff, step) = (r["max_diff_vs_quantir"].as_f64().unwrap(), r["step"].as_f64().unwrap());
    assert!(
        diff <= step,
        "quantir and onnxruntime differ by {diff} > one step {step}"
    );
    let sqnr = r["sqnr"].as_f64().unwrap();
    assert!(sqnr >= 38.0, "SQNR {sqnr:.2} dB in onnxruntime");
}

#[test]
fn statistics_for_an_onnx_output_come_from_calibrate_onnx() {
    let dir = tempfile::tempdir().unwrap();
    let model = data("digits_cnn_savedmodel");
    let calib = example("digits_calib.npz");
    let (s_onnx, s_tf) = (dir.path().join("onnx.json"), dir.path().join("tf.json"));
    ok(quantir(&[
        "calibrate",
        &arg(&model),
        "--data",
        &arg(&calib),
        "--onnx",
        "-o",
        &arg(&s_onnx),
    ]));
    ok(quantir(&[
        "calibrate",
        &arg(&model),
        "--data",
        &arg(&calib),
        "-o",
        &arg(&s_tf),
    ]));
    let q = dir.path().join("q.onnx");
    ok(quantir(&[
        "quantize",
        &arg(&model),
        "--stats",
        &arg(&s_onnx),
        "-o",
        &arg(&q),
    ]));
    assert!(op_types(&q).iter().any(|t| t == "QuantizeLinear"));
    let q2 = dir.path().join("q2.onnx");
    let o = quantir(&["quantize", &arg(&model), "--stats", &arg(&s_tf), "-o", &arg(&q2)]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("another model") && e.contains("--onnx"), "{e}");
    assert!(!q2.exists());
}

#[test]
fn tf_ops_without_an_onnx_form_are_named_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("m.mlir");
    std::fs::write(
        &model,
        r#"module {
  func.func @main(%x: tensor<1x8xf32>) -> tensor<1x8xf32> {
    %w = "tf.Const"() {value = dense<0.5> : tensor<8x8xf32>} : () -> tensor<8x8xf32>
    %m = "tf.MatMul"(%x, %w) {transpose_a = false, transpose_b = false} : (tensor<1x8xf32>, tensor<8x8xf32>) -> tensor<1x8xf32>
    %d = "tf.Const"() {value = dense<0.75> : tensor<f32>} : () -> tensor<f32>
    %r = "tf.Atan2"(%m, %d) : (tensor<1x8xf32>, tensor<f32>) -> tensor<1x8xf32>
    %a = "tf.Const"() {value = dense<1> : tensor<i32>} : () -> tensor<i32>
    %y = "tf.Cumprod"(%r, %a) {exclusive = false, reverse = false} : (tensor<1x8xf32>, tensor<i32>) -> tensor<1x8xf32>
    func.return %y : tensor<1x8xf32>
  }
}
"#,
    )
    .unwrap();
    let out = dir.path().join("q.onnx");
    let o = quantir(&["quantize", &arg(&model), "--activations", "none", "-o", &arg(&out)]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("1 tf.Atan2, 1 tf.Cumprod") && e.contains("m.mlir"), "{e}");
    assert_eq!(e.trim().lines().count(), 1, "{e}");
    assert!(!out.exists());
    // the same model as MLIR needs no lowering
    let mlir = dir.path().join("q.mlir");
    ok(quantir(&[
        "quantize",
        &arg(&model),
        "--activations",
        "none",
        "-o",
        &arg(&mlir),
    ]));
}

#[test]
fn int16_activations_raise_the_opset_and_move_reduction_axes_to_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let model = data("mobilenet_v2_035_savedmodel");
    let test = data("mobilenet_test.npz");
    let q = dir.path().join("q16.onnx");
    ok(quantir(&[
        "quantize",
        &arg(&model),
        "--data",
        &arg(&test),
        "--limit",
        "4",
        "--activations",
        "int16",
        "--no-cache",
        "-o",
        &arg(&q),
    ]));
    // int16 Q/DQ needs opset 21; ReduceMean's axes moved from its attribute to input 1 (18)
    let m = proto::ModelProto::decode(std::fs::read(&q).unwrap().as_slice()).unwrap();
    let opset = m.opset_import.iter().find(|o| o.domain.is_empty()).unwrap().version;
    assert_eq!(opset, 21);
    let g = m.graph.unwrap();
    let mean = g.node.iter().find(|n| n.op_type == "ReduceMean").unwrap();
    assert!(mean.attribute.iter().all(|a| a.name != "axes"), "{mean:?}");
    let axes = g.initializer.iter().find(|t| t.name == mean.input[1]).unwrap();
    assert_eq!(axes.dims, vec![2]);
    // and onnxruntime runs it as quantir does
    let float = dir.path().join("f.onnx");
    lower(&model, &float);
    let interp = dir.path().join("interp.npz");
    ok(quantir(&["run", &arg(&q), "--data", &arg(&test), "-o", &arg(&interp)]));
    let r = onnx_ref(&["eval", &arg(&float), &arg(&q), &arg(&test), &arg(&interp)]);
    // int16 steps are fine enough for float summation order to move a rounding here and there
    // over 52 layers: the two runs agree far above the quantization error itself
    let (agree, sqnr) = (r["sqnr_vs_quantir"].as_f64().unwrap(), r["sqnr"].as_f64().unwrap());
    assert!(
        agree >= sqnr + 20.0,
        "quantir vs onnxruntime {agree:.1} dB, quantization {sqnr:.1} dB"
    );
    assert_eq!(r["top1_agreement_vs_quantir"].as_f64().unwrap(), 1.0, "{r}");
}

/// The array ops of the lowering: StridedSlice with shrink, reverse and masked bounds (and
/// `x[:, tf.newaxis, ..., 2]`: a new axis, an ellipsis and a shrink in one spec), Slice
/// to the end, Pack, Gather, Split, SplitV, Tile, BroadcastTo, ClipByValue, ArgMax/ArgMin with
/// either index type, comparisons and SelectV2.
const ARRAY_MODULE: &str = r#"module {
  func.func @main(%x: tensor<1x6x8xf32>) -> (tensor<1x3xf32>, tensor<1x6x4xf32>, tensor<1x2x3x5xf32>, tensor<1x6x3xf32>, tensor<1x4x8xf32>, tensor<1x4x3xf32>, tensor<1x6x8xf32>, tensor<1x6xf32>, tensor<1x6xf32>, tensor<1x6x8xf32>, tensor<1x1x6xf32>) attributes {tf.entry_function = {inputs = "x", outputs = "ss1,ss2,pk,g,spv,b,c,amax,amin,sel,ss3"}} {
    %b1 = "tf.Const"() {value = dense<[0, 2, 1]> : tensor<3xi32>} : () -> tensor<3xi32>
    %e1 = "tf.Const"() {value = dense<[1, 3, 7]> : tensor<3xi32>} : () -> tensor<3xi32>
    %s1 = "tf.Const"() {value = dense<[1, 1, 2]> : tensor<3xi32>} : () -> tensor<3xi32>
    %ss1 = "tf.StridedSlice"(%x, %b1, %e1, %s1) {begin_mask = 0 : i64, ellipsis_mask = 0 : i64, end_mask = 0 : i64, new_axis_mask = 0 : i64, shrink_axis_mask = 2 : i64} : (tensor<1x6x8xf32>, tensor<3xi32>, tensor<3xi32>, tensor<3xi32>) -> tensor<1x3xf32>
    %b2 = "tf.Const"() {value = dense<[0, -1, 0]> : tensor<3xi32>} : () -> tensor<3xi32>
    %e2 = "tf.Const"() {value = dense<[0, 0, 0]> : tensor<3xi32>} : () -> tensor<3xi32>
    %s2 = "tf.Const"() {value = dense<[1, -1, -2]> : tensor<3xi32>} : () -> tensor<3xi32>
    %ss2 = "tf.StridedSlice"(%x, %b2, %e2, %s2) {begin_mask = 5 : i64, ellipsis_mask = 0 : i64, end_mask = 7 : i64, new_axis_mask = 0 : i64, shrink_axis_mask = 0 : i64} : (tensor<1x6x8xf32>, tensor<3xi32>, tensor<3xi32>, tensor<3xi32>) -> tensor<1x6x4xf32>
    %b3 = "tf.Const"() {value = dense<[0, 0, 0, 2]> : tensor<4xi32>} : () -> tensor<4xi32>
    %e3 = "tf.Const"() {value = dense<[0, 0, 0, 3]> : tensor<4xi32>} : () -> tensor<4xi32>
    %s3 = "tf.Const"() {value = dense<1> : tensor<4xi32>} : () -> tensor<4xi32>
    %ss3 = "tf.StridedSlice"(%x, %b3, %e3, %s3) {begin_mask = 1 : i64, ellipsis_mask = 4 : i64, end_mask = 1 : i64, new_axis_mask = 2 : i64, shrink_axis_mask = 8 : i64} : (tensor<1x6x8xf32>, tensor<4xi32>, tensor<4xi32>, tensor<4xi32>) -> tensor<1x1x6xf32>
    %sb = "tf.Const"() {value = dense<[0, 2, 3]> : tensor<3xi32>} : () -> tensor<3xi32>
    %sz = "tf.Const"() {value = dense<[-1, 3, -1]> : tensor<3xi32>} : () -> tensor<3xi32>
    %sl = "tf.Slice"(%x, %sb, %sz) : (tensor<1x6x8xf32>, tensor<3xi32>, tensor<3xi32>) -> tensor<1x3x5xf32>
    %pk = "tf.Pack"(%sl, %sl) {axis = 1 : i64} : (tensor<1x3x5xf32>, tensor<1x3x5xf32>) -> tensor<1x2x3x5xf32>
    %gi = "tf.Const"() {value = dense<[5, 0, 2]> : tensor<3xi32>} : () -> tensor<3xi32>
    %ga = "tf.Const"() {value = dense<2> : tensor<i32>} : () -> tensor<i32>
    %g = "tf.GatherV2"(%x, %gi, %ga) {batch_dims = 0 : i64} : (tensor<1x6x8xf32>, tensor<3xi32>, tensor<i32>) -> tensor<1x6x3xf32>
    %sp:2 = "tf.Split"(%ga, %x) {num_split = 2 : i64} : (tensor<i32>, tensor<1x6x8xf32>) -> (tensor<1x6x4xf32>, tensor<1x6x4xf32>)
    %vs = "tf.Const"() {value = dense<[2, -1]> : tensor<2xi32>} : () -> tensor<2xi32>
    %va = "tf.Const"() {value = dense<1> : tensor<i32>} : () -> tensor<i32>
    %spv:2 = "tf.SplitV"(%x, %vs, %va) : (tensor<1x6x8xf32>, tensor<2xi32>, tensor<i32>) -> (tensor<1x2x8xf32>, tensor<1x4x8xf32>)
    %tm = "tf.Const"() {value = dense<[1, 1, 2]> : tensor<3xi32>} : () -> tensor<3xi32>
    %t = "tf.Tile"(%sp#0, %tm) : (tensor<1x6x4xf32>, tensor<3xi32>) -> tensor<1x6x8xf32>
    %bs = "tf.Const"() {value = dense<[1, 4, 3]> : tensor<3xi32>} : () -> tensor<3xi32>
    %b = "tf.BroadcastTo"(%ss1, %bs) : (tensor<1x3xf32>, tensor<3xi32>) -> tensor<1x4x3xf32>
    %lo = "tf.Const"() {value = dense<-0.5> : tensor<f32>} : () -> tensor<f32>
    %hi = "tf.Const"() {value = dense<0.7> : tensor<f32>} : () -> tensor<f32>
    %c = "tf.ClipByValue"(%x, %lo, %hi) : (tensor<1x6x8xf32>, tensor<f32>, tensor<f32>) -> tensor<1x6x8xf32>
    %am = "tf.ArgMax"(%x, %ga) : (tensor<1x6x8xf32>, tensor<i32>) -> tensor<1x6xi64>
    %an = "tf.ArgMin"(%x, %ga) : (tensor<1x6x8xf32>, tensor<i32>) -> tensor<1x6xi32>
    %amf = "tf.Cast"(%am) {Truncate = false} : (tensor<1x6xi64>) -> tensor<1x6xf32>
    %anf = "tf.Cast"(%an) {Truncate = false} : (tensor<1x6xi32>) -> tensor<1x6xf32>
    %zero = "tf.Const"() {value = dense<0.0> : tensor<f32>} : () -> tensor<f32>
    %pos = "tf.Greater"(%x, %zero) : (tensor<1x6x8xf32>, tensor<f32>) -> tensor<1x6x8xi1>
    %sel = "tf.SelectV2"(%pos, %x, %t) : (tensor<1x6x8xi1>, tensor<1x6x8xf32>, tensor<1x6x8xf32>) -> tensor<1x6x8xf32>
    func.return %ss1, %ss2, %pk, %g, %spv#1, %b, %c, %amf, %anf, %sel, %ss3 : tensor<1x3xf32>, tensor<1x6x4xf32>, tensor<1x2x3x5xf32>, tensor<1x6x3xf32>, tensor<1x4x8xf32>, tensor<1x4x3xf32>, tensor<1x6x8xf32>, tensor<1x6xf32>, tensor<1x6xf32>, tensor<1x6x8xf32>, tensor<1x1x6xf32>
  }
}
"#;

#[test]
fn array_ops_lower_to_their_onnx_forms() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("array.mlir");
    std::fs::write(&model, ARRAY_MODULE).unwrap();
    let n = 3 * 6 * 8;
    let v: Vec<f32> = (0..n).map(|i| ((i * 37 % 101) as f32 - 50.0) / 40.0).collect();
    let x = dir.path().join("x.npz");
    let mut w = ndarray_npy::NpzWriter::new(std::fs::File::create(&x).unwrap());
    w.add_array("x", &ArrayD::from_shape_vec(vec![3, 6, 8], v).unwrap())
        .unwrap();
    w.finish().unwrap();
    let ([tf_out, ort_out, onnx_out], _) = three_runs(dir.path(), &model, &x);
    for name in ["ss1", "ss2", "pk", "g", "spv", "b", "c", "amax", "amin", "sel", "ss3"] {
        let want = read(&tf_out, name);
        // values are moved, never computed: exact
        assert_eq!(
            read(&ort_out, name),
            want,
            "{name}: onnxruntime(lowered) vs quantir(TF)"
        );
        assert_eq!(read(&onnx_out, name), want, "{name}: quantir(lowered) vs quantir(TF)");
    }
}

/// The TF ops added for the reverse table check (every TF op that runs also lowers): FloorMod
/// on floats and integers, TF1's Select with a row condition, All/Any, the old Concat and
/// Gather, Unpack, Fill, ZerosLike/OnesLike, Rank, Size, Range, Einsum and the identities.
const MORE_MODULE: &str = r#"module {
  func.func @main(%x0: tensor<1x2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2xf32>, tensor<1x3xf32>, tensor<4x3xf32>, tensor<2xf32>, tensor<2x2xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<1xf32>, tensor<1xf32>, tensor<2x3xf32>, tensor<3xf32>, tensor<2x2xf32>, tensor<2x3xf32>) attributes {tf.entry_function = {inputs = "x", outputs = "fm,fmi,sel,all,any,cat,up,fill,zl,ol,rk,sz,ga,rg,es,id"}} {
    %s23 = "tf.Const"() {value = dense<[2, 3]> : tensor<2xi32>} : () -> tensor<2xi32>
    %x = "tf.Reshape"(%x0, %s23) : (tensor<1x2x3xf32>, tensor<2xi32>) -> tensor<2x3xf32>
    %c07 = "tf.Const"() {value = dense<0.7> : tensor<f32>} : () -> tensor<f32>
    %fm = "tf.FloorMod"(%x, %c07) : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
    %ten = "tf.Const"() {value = dense<10.0> : tensor<f32>} : () -> tensor<f32>
    %x10 = "tf.Mul"(%x, %ten) : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
    %xi = "tf.Cast"(%x10) {Truncate = false} : (tensor<2x3xf32>) -> tensor<2x3xi32>
    %three = "tf.Const"() {value = dense<3> : tensor<i32>} : () -> tensor<i32>
    %fmi32 = "tf.FloorMod"(%xi, %three) : (tensor<2x3xi32>, tensor<i32>) -> tensor<2x3xi32>
    %fmi = "tf.Cast"(%fmi32) {Truncate = false} : (tensor<2x3xi32>) -> tensor<2x3xf32>
    %rows = "tf.Const"() {value = dense<[true, false]> : tensor<2xi1>} : () -> tensor<2xi1>
    %nx = "tf.Neg"(%x) : (tensor<2x3xf32>) -> tensor<2x3xf32>
    %sel = "tf.Select"(%rows, %x, %nx) : (tensor<2xi1>, tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
    %zero = "tf.Const"() {value = dense<0.0> : tensor<f32>} : () -> tensor<f32>
    %pos = "tf.Greater"(%x, %zero) : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xi1>
    %a1 = "tf.Const"() {value = dense<1> : tensor<1xi32>} : () -> tensor<1xi32>
    %a0 = "tf.Const"() {value = dense<0> : tensor<1xi32>} : () -> tensor<1xi32>
    %allb = "tf.All"(%pos, %a1) {keep_dims = false} : (tensor<2x3xi1>, tensor<1xi32>) -> tensor<2xi1>
    %anyb = "tf.Any"(%pos, %a0) {keep_dims = true} : (tensor<2x3xi1>, tensor<1xi32>) -> tensor<1x3xi1>
    %all = "tf.Cast"(%allb) {Truncate = false} : (tensor<2xi1>) -> tensor<2xf32>
    %any = "tf.Cast"(%anyb) {Truncate = false} : (tensor<1x3xi1>) -> tensor<1x3xf32>
    %ax0 = "tf.Const"() {value = dense<0> : tensor<i32>} : () -> tensor<i32>
    %cat = "tf.Concat"(%ax0, %x, %x) : (tensor<i32>, tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
    %up:3 = "tf.Unpack"(%x) {axis = 1 : i64} : (tensor<2x3xf32>) -> (tensor<2xf32>, tensor<2xf32>, tensor<2xf32>)
    %dims = "tf.Const"() {value = dense<2> : tensor<2xi32>} : () -> tensor<2xi32>
    %v15 = "tf.Const"() {value = dense<1.5> : tensor<f32>} : () -> tensor<f32>
    %fill = "tf.Fill"(%dims, %v15) : (tensor<2xi32>, tensor<f32>) -> tensor<2x2xf32>
    %zl = "tf.ZerosLike"(%x) : (tensor<2x3xf32>) -> tensor<2x3xf32>
    %ol = "tf.OnesLike"(%x) : (tensor<2x3xf32>) -> tensor<2x3xf32>
    %rki = "tf.Rank"(%x) : (tensor<2x3xf32>) -> tensor<i32>
    %rkf = "tf.Cast"(%rki) {Truncate = false} : (tensor<i32>) -> tensor<f32>
    %s1 = "tf.Const"() {value = dense<1> : tensor<1xi32>} : () -> tensor<1xi32>
    %rk = "tf.Reshape"(%rkf, %s1) : (tensor<f32>, tensor<1xi32>) -> tensor<1xf32>
    %szi = "tf.Size"(%x) : (tensor<2x3xf32>) -> tensor<i32>
    %szf = "tf.Cast"(%szi) {Truncate = false} : (tensor<i32>) -> tensor<f32>
    %sz = "tf.Reshape"(%szf, %s1) : (tensor<f32>, tensor<1xi32>) -> tensor<1xf32>
    %gi = "tf.Const"() {value = dense<[1, 0]> : tensor<2xi32>} : () -> tensor<2xi32>
    %ga = "tf.Gather"(%x, %gi) {validate_indices = true} : (tensor<2x3xf32>, tensor<2xi32>) -> tensor<2x3xf32>
    %r0 = "tf.Const"() {value = dense<0.0> : tensor<f32>} : () -> tensor<f32>
    %r3 = "tf.Const"() {value = dense<3.0> : tensor<f32>} : () -> tensor<f32>
    %r1 = "tf.Const"() {value = dense<1.0> : tensor<f32>} : () -> tensor<f32>
    %rg = "tf.Range"(%r0, %r3, %r1) : (tensor<f32>, tensor<f32>, tensor<f32>) -> tensor<3xf32>
    %es = "tf.Einsum"(%x, %x) {equation = "ij,kj->ik"} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x2xf32>
    %pg = "tf.PreventGradient"(%x) {message = ""} : (tensor<2x3xf32>) -> tensor<2x3xf32>
    %id = "tf.CheckNumerics"(%pg) {message = "x"} : (tensor<2x3xf32>) -> tensor<2x3xf32>
    func.return %fm, %fmi, %sel, %all, %any, %cat, %up#1, %fill, %zl, %ol, %rk, %sz, %ga, %rg, %es, %id : tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2xf32>, tensor<1x3xf32>, tensor<4x3xf32>, tensor<2xf32>, tensor<2x2xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<1xf32>, tensor<1xf32>, tensor<2x3xf32>, tensor<3xf32>, tensor<2x2xf32>, tensor<2x3xf32>
  }
}
"#;

#[test]
fn every_tf_op_that_runs_lowers_and_agrees() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("more.mlir");
    std::fs::write(&model, MORE_MODULE).unwrap();
    let x = dir.path().join("x.npz");
    let v = vec![-1.35f32, -0.2, 0.0, 0.45, 0.7, 2.05];
    let mut w = ndarray_npy::NpzWriter::new(std::fs::File::create(&x).unwrap());
    w.add_array("x0", &ArrayD::from_shape_vec(vec![1, 2, 3], v).unwrap())
        .unwrap();
    w.finish().unwrap();
    let ([tf_out, ort_out, onnx_out], onnx) = three_runs(dir.path(), &model, &x);
    let ops = op_types(&onnx);
    for (name, tol) in [
        ("fm", 1e-6),
        ("fmi", 0.0),
        ("sel", 0.0),
        ("all", 0.0),
        ("any", 0.0),
        ("cat", 0.0),
        ("up", 0.0),
        ("fill", 0.0),
        ("zl", 0.0),
        ("ol", 0.0),
        ("rk", 0.0),
        ("sz", 0.0),
        ("ga", 0.0),
        ("rg", 0.0),
        ("es", 1e-6),
        ("id", 0.0),
    ] {
        // one sample: the runs stack it with or without a leading axis of 1, so compare values
        let flat = |p: &Path| read(p, name).iter().copied().collect::<Vec<f32>>();
        let want = ArrayD::from_shape_vec(vec![flat(&tf_out).len()], flat(&tf_out)).unwrap();
        for (what, got) in [("onnxruntime(lowered)", &ort_out), ("quantir(lowered)", &onnx_out)] {
            let got = ArrayD::from_shape_vec(vec![flat(got).len()], flat(got)).unwrap();
            let d = max_abs_diff(&got, &want);
            assert!(d <= tol, "{name}: {what} vs quantir(TF): {d} ({ops:?})");
        }
    }
    // the float FloorMod is spelled out (ONNX's Mod takes floats only with fmod = 1)
    assert!(
        ops.contains(&"Mod".to_string()) && ops.contains(&"Floor".to_string()),
        "{ops:?}"
    );
}

#[test]
fn reduce_range_weights_keep_their_quality_in_onnxruntimes_fused_kernels() {
    let dir = tempfile::tempdir().unwrap();
    let model = data("digits_cnn_savedmodel");
    let q = dir.path().join("q.onnx");
    ok(quantir(&[
        "quantize",
        &arg(&model),
        "--data",
        &arg(&example("digits_calib.npz")),
        "--no-cache",
        "--reduce-range",
        "-o",
        &arg(&q),
    ]));
    let float = dir.path().join("f.onnx");
    lower(&model, &float);
    let r = onnx_ref(&["levels", &arg(&float), &arg(&q), &arg(&example("digits_test.npz"))]);
    // 7-bit weights: onnxruntime's int8 kernels cannot saturate whatever the CPU, so every
    // optimization level gives the quality of the Q/DQ model itself (onnxruntime's own
    // reduce_range model: 35.68 dB)
    assert!(r["max_abs_int8"].as_i64().unwrap() <= 64, "{r}");
    for level in ["ORT_DISABLE_ALL", "ORT_ENABLE_ALL"] {
        let s = r[level].as_f64().unwrap();
        assert!(s >= 38.0, "{level}: {s:.2} dB: {r}");
    }
    // and the mlir scheme, which has no such range, says so
    let o = quantir(&[
        "quantize",
        &arg(&model),
        "--activations",
        "none",
        "--reduce-range",
        "-o",
        &arg(&dir.path().join("q.mlir")),
    ]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("reduce_range"), "{}", stderr(&o));
}

/// Resizes in TF's three conventions each way, NotEqual and float FloorDiv.
const RESIZE_MODULE: &str = r#"module {
  func.func @main(%x: tensor<1x5x7x3xf32>) -> (tensor<1x9x12x3xf32>, tensor<1x10x14x3xf32>, tensor<1x8x8x3xf32>, tensor<1x9x12x3xf32>, tensor<1x10x14x3xf32>, tensor<1x8x8x3xf32>, tensor<1x5x7x3xf32>, tensor<1x5x7x3xf32>) attributes {tf.entry_function = {inputs = "x", outputs = "b_half,b_align,b_asym,n_half,n_align,n_asym,ne,fd"}} {
    %s1 = "tf.Const"() {value = dense<[9, 12]> : tensor<2xi32>} : () -> tensor<2xi32>
    %s2 = "tf.Const"() {value = dense<[10, 14]> : tensor<2xi32>} : () -> tensor<2xi32>
    %s3 = "tf.Const"() {value = dense<[8, 8]> : tensor<2xi32>} : () -> tensor<2xi32>
    %b1 = "tf.ResizeBilinear"(%x, %s1) {align_corners = false, half_pixel_centers = true} : (tensor<1x5x7x3xf32>, tensor<2xi32>) -> tensor<1x9x12x3xf32>
    %b2 = "tf.ResizeBilinear"(%x, %s2) {align_corners = true, half_pixel_centers = false} : (tensor<1x5x7x3xf32>, tensor<2xi32>) -> tensor<1x10x14x3xf32>
    %b3 = "tf.ResizeBilinear"(%x, %s3) {align_corners = false, half_pixel_centers = false} : (tensor<1x5x7x3xf32>, tensor<2xi32>) -> tensor<1x8x8x3xf32>
    %n1 = "tf.ResizeNearestNeighbor"(%x, %s1) {align_corners = false, half_pixel_centers = true} : (tensor<1x5x7x3xf32>, tensor<2xi32>) -> tensor<1x9x12x3xf32>
    %n2 = "tf.ResizeNearestNeighbor"(%x, %s2) {align_corners = true, half_pixel_centers = false} : (tensor<1x5x7x3xf32>, tensor<2xi32>) -> tensor<1x10x14x3xf32>
    %n3 = "tf.ResizeNearestNeighbor"(%x, %s3) {align_corners = false, half_pixel_centers = false} : (tensor<1x5x7x3xf32>, tensor<2xi32>) -> tensor<1x8x8x3xf32>
    %two = "tf.Const"() {value = dense<2.0> : tensor<f32>} : () -> tensor<f32>
    %x2 = "tf.Mul"(%x, %two) : (tensor<1x5x7x3xf32>, tensor<f32>) -> tensor<1x5x7x3xf32>
    %fl = "tf.Floor"(%x2) : (tensor<1x5x7x3xf32>) -> tensor<1x5x7x3xf32>
    %zero = "tf.Const"() {value = dense<0.0> : tensor<f32>} : () -> tensor<f32>
    %neb = "tf.NotEqual"(%fl, %zero) {incompatible_shape_error = true} : (tensor<1x5x7x3xf32>, tensor<f32>) -> tensor<1x5x7x3xi1>
    %ne = "tf.Cast"(%neb) {Truncate = false} : (tensor<1x5x7x3xi1>) -> tensor<1x5x7x3xf32>
    %d = "tf.Const"() {value = dense<0.3> : tensor<f32>} : () -> tensor<f32>
    %fd = "tf.FloorDiv"(%x, %d) : (tensor<1x5x7x3xf32>, tensor<f32>) -> tensor<1x5x7x3xf32>
    func.return %b1, %b2, %b3, %n1, %n2, %n3, %ne, %fd : tensor<1x9x12x3xf32>, tensor<1x10x14x3xf32>, tensor<1x8x8x3xf32>, tensor<1x9x12x3xf32>, tensor<1x10x14x3xf32>, tensor<1x8x8x3xf32>, tensor<1x5x7x3xf32>, tensor<1x5x7x3xf32>
  }
}
"#;

#[test]
fn resizes_lower_with_tensorflows_coordinate_conventions() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("resize.mlir");
    std::fs::write(&model, RESIZE_MODULE).unwrap();
    let n = 2 * 5 * 7 * 3;
    let v: Vec<f32> = (0..n).map(|i| ((i * 53 % 97) as f32 - 48.0) / 17.0).collect();
    let x = dir.path().join("x.npz");
    let mut w = ndarray_npy::NpzWriter::new(std::fs::File::create(&x).unwrap());
    w.add_array("x", &ArrayD::from_shape_vec(vec![2, 5, 7, 3], v).unwrap())
        .unwrap();
    w.finish().unwrap();
    let ([tf_out, ort_out, onnx_out], onnx) = three_runs(dir.path(), &model, &x);
    // every resize is an ONNX Resize (none falls back to a float path)
    let ops = op_types(&onnx);
    assert_eq!(ops.iter().filter(|t| *t == "Resize").count(), 6, "{ops:?}");
    for name in ["b_half", "b_align", "b_asym", "n_half", "n_align", "n_asym", "ne", "fd"] {
        let want = read(&tf_out, name);
        let d = max_abs_diff(&read(&ort_out, name), &want);
        assert!(d <= 1e-5, "{name}: max |onnxruntime(lowered) - quantir(TF)| = {d}");
        let d = max_abs_diff(&read(&onnx_out, name), &want);
        assert!(d <= 1e-5, "{name}: max |quantir(lowered) - quantir(TF)| = {d}");
    }
}

/// `tf.DivNoNan` (basic-pitch's log-magnitude normalisation): x / y, 0 where y is 0, in TF and
/// as ONNX's Where(Equal(y, 0), 0, Div(x, y)).
#[test]
fn div_no_nan_runs_and_lowers() {
    let module = r#"module {
  func.func @main(%x: tensor<1x6x8xf32>) -> tensor<1x6x8xf32> attributes {tf.entry_function = {inputs = "x", outputs = "q"}} {
    %y = "tf.Const"() {value = dense<[2.0, 0.0, -4.0, 0.5, 0.0, 1.0, 8.0, -0.25]> : tensor<8xf32>} : () -> tensor<8xf32>
    %q = "tf.DivNoNan"(%x, %y) : (tensor<1x6x8xf32>, tensor<8xf32>) -> tensor<1x6x8xf32>
    func.return %q : tensor<1x6x8xf32>
  }
}
"#;
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("dnn.mlir");
    std::fs::write(&model, module).unwrap();
    let v: Vec<f32> = (0..48).map(|i| (i as f32 - 20.0) / 3.0).collect();
    let x = dir.path().join("x.npz");
    let mut w = ndarray_npy::NpzWriter::new(std::fs::File::create(&x).unwrap());
    w.add_array("x", &ArrayD::from_shape_vec(vec![1, 6, 8], v.clone()).unwrap())
        .unwrap();
    w.finish().unwrap();
    let ([tf_out, ort_out, onnx_out], _) = three_runs(dir.path(), &model, &x);
    let want = read(&tf_out, "q");
    let y = [2.0f32, 0.0, -4.0, 0.5, 0.0, 1.0, 8.0, -0.25];
    let by_hand: Vec<f32> = v
        .iter()
        .enumerate()
        .map(|(i, a)| if y[i % 8] == 0.0 { 0.0 } else { a / y[i % 8] })
        .collect();
    assert_eq!(want.iter().copied().collect::<Vec<_>>(), by_hand);
    assert_eq!(read(&ort_out, "q"), want, "onnxruntime(lowered) vs quantir(TF)");
    assert_eq!(read(&onnx_out, "q"), want, "quantir(lowered) vs quantir(TF)");
    assert_eq!(
        op_types(&dir.path().join("lowered.onnx")),
        ["Div", "Equal", "Where"],
        "the lowering writes what its table entry declares"
    );
}
