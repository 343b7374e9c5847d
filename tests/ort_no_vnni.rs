//! quantir's .onnx output in onnxruntime's fused int8 kernels of an x86 CPU without VNNI
//! (issue #18), whatever the host: onnxruntime runs under `qemu-x86_64 -cpu EPYC-Rome` (AVX2,
//! no VNNI), so its MLAS picks the u8s8 kernels that add neighbouring products in int16 with
//! saturation (only the fused level is emulated: see `levels`). The default `--runtime
//! onnxruntime` must keep every level's quality; `--runtime generic` (full-range weights) shows
//! that the emulated kernels do saturate, so these tests can fail.

mod common;

use common::{arg, data, example, ok, onnx_ref, onnx_ref_on, quantir};
use std::path::Path;

const NO_VNNI: Option<&str> = Some("EPYC-Rome");

fn quantize(model: &Path, calib: &Path, out: &Path, extra: &[&str]) -> String {
    let mut args = vec![
        "quantize",
        model.to_str().unwrap(),
        "--data",
        calib.to_str().unwrap(),
        "--no-cache",
    ];
    args.extend_from_slice(extra);
    let o = arg(out);
    args.extend(["-o", &o]);
    let o = ok(quantir(&args));
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// SQNR at ORT_DISABLE_ALL and ORT_ENABLE_ALL, on the first `limit` samples. Only the fused
/// level runs on the emulated CPU: the float model, and a Q/DQ model at ORT_DISABLE_ALL
/// (DequantizeLinear → float op → QuantizeLinear, no integer kernel), compute the same on any
/// x86 CPU up to float rounding, and run >1,000× slower emulated than natively (basic_pitch's
/// two test samples: 127 s and 119 s emulated, 0.07 s and 0.09 s natively; the fused int8
/// level 32 s emulated).
fn levels(float: &Path, q: &Path, test: &Path, limit: usize) -> (f64, f64, serde_json::Value) {
    let dir = tempfile::tempdir().unwrap();
    let f = arg(&dir.path().join("float.npy"));
    let (float, q, test, limit) = (arg(float), arg(q), arg(test), limit.to_string());
    let native = onnx_ref(&["levels", &float, &q, &test, &limit, "ORT_DISABLE_ALL", &f]);
    assert_eq!(
        native["integer_ops"], 0,
        "{q}: integer ops run their kernels unfused too, so ORT_DISABLE_ALL must be emulated"
    );
    let mut r = onnx_ref_on(NO_VNNI, &["levels", &float, &q, &test, &limit, "ORT_ENABLE_ALL", &f]);
    r["ORT_DISABLE_ALL"] = native["ORT_DISABLE_ALL"].clone();
    (
        r["ORT_DISABLE_ALL"].as_f64().unwrap(),
        r["ORT_ENABLE_ALL"].as_f64().unwrap(),
        r,
    )
}

/// Hand-made weights: an output channel whose two large same-sign weights the kernel adds in
/// one int16 pair is widened (and then runs at its own quality in the fused kernel), the ones
/// whose weights fall in two pairs keep full range (and with a float output, which onnxruntime
/// runs as a float Conv, nothing changes at all); a layer whose every channel would be
/// widened takes uint8 weights, which onnxruntime runs on its u8u8 kernel without saturation.
#[test]
fn saturating_pairs_are_found_and_only_their_channels_change() {
    let dir = tempfile::tempdir().unwrap();
    onnx_ref(&["pairs", &arg(dir.path())]);
    let p = |n: &str| dir.path().join(n);
    let (calib, test) = (p("pairs_calib.npz"), p("pairs_test.npz"));
    let w = |m: &Path| {
        let r = onnx_ref(&["weights", &arg(m)]);
        r.as_object().unwrap().values().next().unwrap().clone()
    };
    for (model, expect) in [
        (
            "pairs.onnx",
            "1 with 1 output channels given a wider weight scale, 0 with uint8",
        ),
        (
            "pairs_all.onnx",
            "0 with 0 output channels given a wider weight scale, 1 with uint8",
        ),
    ] {
        let (q, g) = (p("q.onnx"), p("g.onnx"));
        // the output quantized: onnxruntime fuses a Conv into its int8 kernel only then
        let summary = quantize(&p(model), &calib, &q, &["--quantize-outputs"]);
        assert!(summary.contains(expect), "{model}: {summary}");
        quantize(&p(model), &calib, &g, &["--quantize-outputs", "--runtime", "generic"]);
        let (wq, wg) = (w(&q), w(&g));
        assert!(wg["max_abs"].as_array().unwrap().iter().all(|v| v == 127), "{wg}");
        if model == "pairs.onnx" {
            // channel 0: 255·(q0 + q1) ≤ 32767 with q1 ≈ 0.79 q0; the others untouched
            let m = wq["max_abs"].as_array().unwrap();
            let m0 = m[0].as_i64().unwrap();
            assert!(m0 < 127 && m0 > 64, "{wq}");
            assert!(m[1..].iter().all(|v| v == 127), "{wq}");
            assert_eq!(wq["stored"], "int8", "{wq}");
        } else {
            // full-range values around zero point 128
            assert_eq!(wq["stored"], "uint8", "{wq}");
            assert!(wq["max_abs"].as_array().unwrap().iter().all(|v| v == 127), "{wq}");
        }
        let (gd, ge, r) = levels(&p(model), &g, &test, 16);
        assert!(
            ge < gd - 6.0,
            "{model}: full-range int8 weights should saturate in the emulated kernel: {r}"
        );
        let (qd, qe, r) = levels(&p(model), &q, &test, 16);
        assert!((qd - qe).abs() <= 0.5 && qd > 35.0, "{model}: {r}");
        let summary = quantize(&p(model), &calib, &q, &[]);
        assert!(!summary.contains("u8s8"), "{model}: {summary}");
        let f = w(&q);
        assert!(
            f["max_abs"].as_array().unwrap().iter().all(|v| v == 127) && f["stored"] == "int8",
            "{f}"
        );
    }
}

/// SQNR and the simulated ops of `quantir evaluate --json` on the first `limit` samples.
fn evaluate(float: &Path, q: &Path, test: &Path, limit: usize, runtime: &str) -> (f64, serde_json::Value) {
    let o = ok(quantir(&[
        "evaluate",
        &arg(float),
        &arg(q),
        "--data",
        &arg(test),
        "--limit",
        &limit.to_string(),
        "--runtime",
        runtime,
        "--json",
    ]));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    (r["sqnr_db"].as_f64().unwrap(), r)
}

/// `evaluate --runtime onnxruntime` predicts what onnxruntime's default level computes on the
/// emulated CPU, on quantir's full-range output and on onnxruntime's own `quantize_static`
/// output of the digits CNN: within 0.3 dB, where exact numerics (`--runtime generic`, the
/// default) give ORT_DISABLE_ALL's figure, more than 10 dB above it. It names the ops that
/// saturated; on quantir's default output none does.
#[test]
fn evaluate_predicts_onnxruntimes_default_level_without_vnni() {
    let dir = tempfile::tempdir().unwrap();
    let (model, calib, test) = (
        data("digits_cnn.onnx"),
        example("digits_calib.npz"),
        example("digits_test.npz"),
    );
    let (g, o, q) = (
        dir.path().join("g.onnx"),
        dir.path().join("ort.onnx"),
        dir.path().join("q.onnx"),
    );
    quantize(&model, &calib, &g, &["--runtime", "generic"]);
    onnx_ref(&["ort_quantize", &arg(&model), &arg(&calib), &arg(&o)]);
    for file in [&g, &o] {
        let (d, e, r) = levels(&model, file, &test, 64);
        assert!(
            e < d - 10.0,
            "{}: the emulated kernels should saturate: {r}",
            file.display()
        );
        let (exact, _) = evaluate(&model, file, &test, 64, "generic");
        let (sim, rs) = evaluate(&model, file, &test, 64, "onnxruntime");
        assert!((exact - d).abs() <= 0.3, "{}: exact {exact} vs {r}", file.display());
        assert!((sim - e).abs() <= 0.3, "{}: simulated {sim} vs {r}", file.display());
        let ops = rs["simulated_onnxruntime_x86"].as_array().unwrap();
        assert!(
            ops.iter()
                .any(|o| o["op"] == "onnx.Conv" && o["saturated"].as_u64().unwrap() > 0),
            "{rs}"
        );
    }
    quantize(&model, &calib, &q, &[]);
    let (sim, rs) = evaluate(&model, &q, &test, 64, "onnxruntime");
    let (exact, _) = evaluate(&model, &q, &test, 64, "generic");
    assert_eq!(sim, exact, "{rs}");
    let ops = rs["simulated_onnxruntime_x86"].as_array().unwrap();
    assert!(!ops.is_empty() && ops.iter().all(|o| o["saturated"] == 0), "{rs}");
}

/// `quantize`'s count of what onnxruntime's default level runs in int8 (`onnxruntime_int8` in
/// `--json`) is what onnxruntime's optimized graph holds on the emulated CPU: QLinearConv per
/// int8 Conv, QGemm / MatMulIntegerToFloat / QLinearMatMul per int8 Gemm and MatMul,
/// QLinearAdd per int8 Add, on the digits CNN and MobileNet with and without
/// `--qlinear-outputs`. With int8 activations it is a lower bound (onnxruntime converts some
/// int8 Q/DQ pairs to uint8 itself), and says so.
#[test]
fn the_int8_report_matches_onnxruntimes_graph() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (data("digits_cnn.onnx"), example("digits_calib.npz"), vec![]),
        (data("mobilenet_v2_035.onnx"), data("mobilenet_test.npz"), vec![]),
        (
            data("mobilenet_v2_035.onnx"),
            data("mobilenet_test.npz"),
            vec!["--qlinear-outputs"],
        ),
        (
            data("mobilenet_v2_035.onnx"),
            data("mobilenet_test.npz"),
            vec!["--activations", "int8"],
        ),
    ];
    for (model, calib, extra) in cases {
        let q = dir.path().join("q.onnx");
        let (m, c, o) = (arg(&model), arg(&calib), arg(&q));
        let mut args = vec![
            "quantize",
            &m,
            "--data",
            &c,
            "--limit",
            "8",
            "--no-cache",
            "--json",
            "-o",
            &o,
        ];
        args.extend(extra.iter());
        let j: serde_json::Value = serde_json::from_slice(&ok(quantir(&args)).stdout).unwrap();
        let r = &j["onnxruntime_int8"];
        let int8 = |op: &str| r[op][0].as_u64().unwrap_or(0);
        let g = onnx_ref_on(NO_VNNI, &["fused", &arg(&q)]);
        let n = |op: &str| g[op].as_u64().unwrap_or(0);
        let what = format!("{} {extra:?}: report {r}, onnxruntime {g}", model.display());
        if extra.contains(&"int8") {
            assert_eq!(j["onnxruntime_int8_at_least"], true, "{what}");
            assert!(int8("Conv") <= n("QLinearConv") && int8("Conv") > 0, "{what}");
            continue;
        }
        assert_eq!(j["onnxruntime_int8_at_least"], false, "{what}");
        assert_eq!(int8("Conv"), n("QLinearConv"), "{what}");
        assert_eq!(
            int8("Gemm") + int8("MatMul"),
            n("QGemm") + n("MatMulIntegerToFloat") + n("QLinearMatMul"),
            "{what}"
        );
        assert_eq!(int8("Add"), n("QLinearAdd"), "{what}");
        assert!(int8("Conv") > 0, "{what}");
    }
}

/// The digits models: onnxruntime's default level gives the Q/DQ model's own quality (within
/// 0.5 dB), which is within 0.5 dB of full-range weights everywhere; full-range weights lose
/// more than 10 dB there.
#[test]
fn digits_models_keep_their_quality_in_the_fused_kernels() {
    let dir = tempfile::tempdir().unwrap();
    for (model, calib, test) in [
        (
            data("digits_cnn.onnx"),
            example("digits_calib.npz"),
            example("digits_test.npz"),
        ),
        (
            data("digits_mlp.onnx"),
            data("digits_mlp_calib.npz"),
            data("digits_mlp_test.npz"),
        ),
    ] {
        let (q, g) = (dir.path().join("q.onnx"), dir.path().join("g.onnx"));
        quantize(&model, &calib, &q, &[]);
        quantize(&model, &calib, &g, &["--runtime", "generic"]);
        let (gd, ge, rg) = levels(&model, &g, &test, 64);
        let (qd, qe, rq) = levels(&model, &q, &test, 64);
        let name = model.display();
        assert!(ge < gd - 10.0, "{name}: generic {rg}");
        assert!((qd - qe).abs() <= 0.5, "{name}: default {rq}");
        assert!(qd >= gd - 0.5, "{name}: default {rq} vs generic {rg}");
    }
}

/// The real models of tests/data/real (as shipped: dynamic dims, Constant weights, a
/// SavedModel's lowering), on their first test samples: the default level within 0.5 dB of
/// ORT_DISABLE_ALL on the emulated CPU.
#[test]
fn real_models_keep_their_quality_in_the_fused_kernels() {
    let dir = tempfile::tempdir().unwrap();
    let real = |n: &str| data(&format!("real/{n}"));
    let fer_float = dir.path().join("fer_float.onnx");
    ok(quantir(&[
        "opt",
        &arg(&real("fer_savedmodel")),
        "--pass",
        "prepare",
        "--pass",
        "tf-to-onnx",
        "-o",
        &arg(&fer_float),
    ]));
    for (name, model, float, stem, floor) in [
        (
            "ppocr_cls",
            real("ppocr_cls.onnx"),
            real("ppocr_cls.onnx"),
            "ppocr_cls",
            25.0,
        ),
        (
            "ppocr_det",
            real("ppocr_det.onnx"),
            real("ppocr_det.onnx"),
            "ppocr_det",
            15.0,
        ),
        (
            "basic_pitch",
            real("basic_pitch.onnx"),
            real("basic_pitch.onnx"),
            "basic_pitch",
            15.0,
        ),
        ("fer", real("fer_savedmodel"), fer_float.clone(), "fer", 20.0),
    ] {
        let q = dir.path().join(format!("{name}.onnx"));
        quantize(&model, &real(&format!("{stem}_calib.npz")), &q, &[]);
        let (d, e, r) = levels(&float, &q, &real(&format!("{stem}_test.npz")), 2);
        // two saturated softmax outputs can agree to 100 dB and then differ by more than
        // 0.5 dB in the last bits
        assert!((d - e).abs() <= 0.5 || d.min(e) > 60.0, "{name}: {r}");
        assert!(d > floor, "{name}: {r}");
        assert_eq!(r["unused_initializers"], 0, "{name}: {r}");
    }
}
