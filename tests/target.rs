//! `quantize --target-sqnr`: the fewest activations raised until the target holds on the
//! calibration samples it is scored on; an unreachable target writes nothing.

mod common;

use common::{arg, data, example, ok, quantir, stderr};

/// The first output's SQNR on the 16 samples spread over `calib` that a target is scored on.
fn sqnr_on_scored_16(float: &str, quant: &str, calib: &str) -> f64 {
    let o = ok(quantir(&[
        "evaluate", float, quant, "--data", calib, "--limit", "16", "--spread", "--json",
    ]));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    r["outputs"][0]["sqnr_db"].as_f64().unwrap()
}

/// [`sqnr_on_scored_16`] of `quantize MODEL FLAGS -o OUT`.
fn quantized_sqnr_on_scored_16(model: &str, calib: &str, flags: &[&str], out: &std::path::Path) -> f64 {
    let out = arg(out);
    let mut args = vec!["quantize", model];
    args.extend_from_slice(flags);
    args.extend(["-o", &out]);
    ok(quantir(&args));
    sqnr_on_scored_16(model, &out, calib)
}

/// `quantize MODEL --data CALIB --no-cache FLAGS --target-sqnr TARGET --json -o OUT`, which
/// must succeed.
fn quantize_to_target(
    model: &str,
    calib: &str,
    flags: &[&str],
    target: f64,
    out: &std::path::Path,
) -> std::process::Output {
    let target = format!("{target:.2}");
    let out = arg(out);
    let mut args = vec!["quantize", model, "--data", calib, "--no-cache"];
    args.extend_from_slice(flags);
    args.extend(["--target-sqnr", &target, "--json", "-o", &out]);
    ok(quantir(&args))
}

#[test]
fn a_reachable_target_raises_the_fewest_activations_and_holds() {
    let dir = tempfile::tempdir().unwrap();
    let (calib, test) = (arg(&example("digits_calib.npz")), arg(&example("digits_test.npz")));
    for (model, out) in [
        (arg(&example("digits_cnn.mlir")), dir.path().join("t.mlir")),
        (arg(&data("digits_cnn.onnx")), dir.path().join("t.onnx")),
    ] {
        let all_int8 = dir
            .path()
            .join(format!("int8.{}", out.extension().unwrap().to_string_lossy()));
        ok(quantir(&[
            "quantize",
            &model,
            "--data",
            &calib,
            "--no-cache",
            "-o",
            &arg(&all_int8),
        ]));
        let base = sqnr_on_scored_16(&model, &arg(&all_int8), &calib);
        let target = base + 0.5;
        let o = ok(quantir(&[
            "quantize",
            &model,
            "--data",
            &calib,
            "--no-cache",
            "--target-sqnr",
            &format!("{target:.2}"),
            "--json",
            "-o",
            &arg(&out),
        ]));
        let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let t = &doc["target"];
        let raised = t["raised"].as_array().unwrap();
        assert!(
            !raised.is_empty() && raised.len() < t["points"].as_u64().unwrap() as usize,
            "{t}"
        );
        // the model written is the one scored: its SQNR on those samples is the search's
        let got = sqnr_on_scored_16(&model, &arg(&out), &calib);
        assert!(got >= target, "{model}: {got} dB < target {target:.2} ({t})");
        assert!((got - t["sqnr_db"].as_f64().unwrap()).abs() < 1e-9, "{got} vs {t}");
        // and held-out data gain too
        assert!(sqnr_on_scored_16(&model, &arg(&out), &test) > sqnr_on_scored_16(&model, &arg(&all_int8), &test));
        assert!(
            stderr(&o).contains(&format!("target {target:.2} dB reached")),
            "{}",
            stderr(&o)
        );
        // the model written says which layers the target raised: `evaluate --per-layer`
        // marks exactly those, with why
        let e = ok(quantir(&[
            "evaluate",
            &model,
            &arg(&out),
            "--data",
            &calib,
            "--limit",
            "4",
            "--per-layer",
            "--json",
        ]));
        let ev: serde_json::Value = serde_json::from_slice(&e.stdout).unwrap();
        let keys: Vec<&str> = raised.iter().map(|r| r["key"].as_str().unwrap()).collect();
        let marked: Vec<&serde_json::Value> = ev["per_layer"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|l| l.get("raised").is_some())
            .collect();
        assert!(!marked.is_empty(), "{model}: no layer marked; raised {keys:?}");
        for l in &marked {
            assert!(keys.contains(&l["key"].as_str().unwrap()), "{l}");
            let why = l["raised"].as_str().unwrap();
            assert!(
                why.starts_with("raised to int16 by --target-sqnr") || why.starts_with("left float by --target-sqnr"),
                "{why}"
            );
        }
        // the all-int8 model has no marks
        let e = ok(quantir(&[
            "evaluate",
            &model,
            &arg(&all_int8),
            "--data",
            &calib,
            "--limit",
            "4",
            "--per-layer",
            "--json",
        ]));
        let ev: serde_json::Value = serde_json::from_slice(&e.stdout).unwrap();
        assert!(ev["per_layer"]
            .as_array()
            .unwrap()
            .iter()
            .all(|l| l.get("raised").is_none()));
    }
}

#[test]
fn an_unreachable_target_writes_nothing_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.mlir");
    let o = quantir(&[
        "quantize",
        &arg(&example("digits_cnn.mlir")),
        "--data",
        &arg(&example("digits_calib.npz")),
        "--target-sqnr",
        "90",
        "-o",
        &arg(&out),
    ]);
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(
        e.contains("target 90 dB is out of reach") && e.contains("nothing written"),
        "{e}"
    );
    assert!(!out.exists());
    // and a target needs data to score on
    let o = quantir(&[
        "quantize",
        &arg(&example("digits_cnn.mlir")),
        "--target-sqnr",
        "30",
        "-o",
        &arg(&out),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

/// Where the weights are the limit (here: int16 activations, W8A16, whose weight-only SQNR a
/// target 3 dB above is beyond), the
/// search leaves the fewest compute ops float, each ranked by the damage it alone does, and
/// the model written holds the target.
#[test]
fn a_target_beyond_the_weights_leaves_the_fewest_ops_float() {
    let dir = tempfile::tempdir().unwrap();
    let (model, calib) = (arg(&example("digits_cnn.mlir")), arg(&example("digits_calib.npz")));
    let weights_only = dir.path().join("w.mlir");
    let target = quantized_sqnr_on_scored_16(&model, &calib, &["--activations", "none"], &weights_only) + 3.0;
    let out = dir.path().join("t.mlir");
    let o = quantize_to_target(&model, &calib, &["--activations", "int16"], target, &out);
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let raised = doc["target"]["raised"].as_array().unwrap();
    let ops = doc["ops"].as_array().unwrap();
    let floated = raised
        .iter()
        .filter(|r| r["kind"] == "op" && r["to"] == "float")
        .count();
    assert!(floated > 0 && floated < ops.len(), "{doc:#}");
    // each raised op is float in the model written, with the reason
    for r in raised.iter().filter(|r| r["kind"] == "op") {
        let op = ops.iter().find(|o| o["key"] == r["key"]).unwrap();
        assert_eq!(op["weights"], "float", "{op}");
        assert!(
            op["reason"]
                .as_str()
                .unwrap()
                .starts_with("left float by --target-sqnr"),
            "{op}"
        );
    }
    let got = sqnr_on_scored_16(&model, &arg(&out), &calib);
    assert!(got >= target, "{got} dB < target {target:.2}");
    assert!(stderr(&o).contains("compute ops left float"), "{}", stderr(&o));
}

/// A target 2 dB above all int8: each op is also measured alone left float, and the ops are
/// searched in both orders — alone and in context — each trimmed, then its costly floated ops
/// exchanged for cheaper ones. The model written keeps the larger share of the MACs of the two,
/// and holds the target. On digits the alone order first floats 9.9 % of the MACs, and the
/// exchange brings it to 2.9 % (97.1 % int8, as the in-context order).
#[test]
fn a_target_near_all_int8_ranks_the_ops_in_context_too_and_exchanges() {
    let dir = tempfile::tempdir().unwrap();
    let (model, calib) = (arg(&example("digits_cnn.mlir")), arg(&example("digits_calib.npz")));
    let all = dir.path().join("a.mlir");
    let target = quantized_sqnr_on_scored_16(&model, &calib, &["--data", &calib, "--no-cache"], &all) + 2.0;
    let out = dir.path().join("t.mlir");
    let o = quantize_to_target(&model, &calib, &[], target, &out);
    let err = stderr(&o);
    assert!(err.contains("ranked alone, then in context"), "{err}");
    // "target: ranked alone, N compute ops left float keep X % of the MACs int8"
    let kept = |by: &str| -> f64 {
        let line = err
            .lines()
            .find(|l| l.starts_with(&format!("target: {by}, ")))
            .expect(&err);
        let pct = line
            .split(" keep ")
            .nth(1)
            .and_then(|t| t.split(' ').next())
            .expect(line);
        pct.parse::<f64>().expect(line)
    };
    let kept_most = kept("ranked alone").max(kept("ranked in context"));
    // "target: floated ops exchanged for cheaper ones: N left float, X % of the MACs float
    // instead of Y %"
    let line = err
        .lines()
        .find(|l| l.starts_with("target: floated ops exchanged for cheaper ones"))
        .expect(&err);
    let pcts: Vec<f64> = line.split(' ').filter_map(|w| w.parse::<f64>().ok()).collect();
    assert!(pcts.len() == 3 && pcts[1] < pcts[2], "{line}");
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let share = 100.0 * doc["totals"]["int8_mac_share"].as_f64().unwrap();
    assert!(
        (share - kept_most).abs() < 0.05,
        "kept {share:.2} % of the MACs int8: {err}"
    );
    // each op left float says what the model gave with it alone int8, and alone float
    let ops: Vec<_> = doc["target"]["raised"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["kind"] == "op")
        .collect();
    assert!(!ops.is_empty(), "{doc:#}");
    for r in ops {
        assert!(r["without_sqnr_db"].as_f64().is_some(), "{r}");
    }
    let got = sqnr_on_scored_16(&model, &arg(&out), &calib);
    assert!(got >= target, "{got} dB < target {target:.2}");
}

/// `--validation`: the target is scored on held-out samples, not on the calibration data the
/// ranges were fitted to; the model written holds it there.
#[test]
fn a_target_scored_on_validation_data_holds_there() {
    let dir = tempfile::tempdir().unwrap();
    let (model, calib, test) = (
        arg(&example("digits_cnn.mlir")),
        arg(&example("digits_calib.npz")),
        arg(&example("digits_test.npz")),
    );
    let (all_int8, out) = (dir.path().join("int8.mlir"), dir.path().join("t.mlir"));
    ok(quantir(&[
        "quantize",
        &model,
        "--data",
        &calib,
        "--no-cache",
        "-o",
        &arg(&all_int8),
    ]));
    let base = sqnr_on_scored_16(&model, &arg(&all_int8), &test);
    let target = base + 0.5;
    let o = ok(quantir(&[
        "quantize",
        &model,
        "--data",
        &calib,
        "--no-cache",
        "--target-sqnr",
        &format!("{target:.2}"),
        "--validation",
        &test,
        "--json",
        "-o",
        &arg(&out),
    ]));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let t = &doc["target"];
    assert_eq!(t["scored_on"], "validation", "{t}");
    assert_eq!(t["samples"], 16, "{t}");
    // the search's all-int8 figure is the one on the validation samples
    assert!(
        (t["int8_sqnr_db"].as_f64().unwrap() - base).abs() < 1e-9,
        "{base} vs {t}"
    );
    let got = sqnr_on_scored_16(&model, &arg(&out), &test);
    assert!(got >= target, "{got} dB < target {target:.2} ({t})");
    assert!((got - t["sqnr_db"].as_f64().unwrap()).abs() < 1e-9, "{got} vs {t}");
    assert!(stderr(&o).contains("on 16 validation samples"), "{}", stderr(&o));
    // validation data without a target is a usage error, and nothing is written
    let none = dir.path().join("none.mlir");
    let o = quantir(&[
        "quantize",
        &model,
        "--data",
        &calib,
        "--validation",
        &test,
        "-o",
        &arg(&none),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(!none.exists());
}

/// `--target-top1`: top-1 agreement with the float model on every validation sample (here
/// with int4 weights, whose all-quantized model disagrees on 2 of 397), reached and held by
/// the model written; against labels the float model's own accuracy bounds it.
#[test]
fn a_top1_target_holds_on_every_validation_sample() {
    let dir = tempfile::tempdir().unwrap();
    let (model, calib, test) = (
        arg(&example("digits_cnn.mlir")),
        arg(&example("digits_calib.npz")),
        arg(&example("digits_test.npz")),
    );
    let out = dir.path().join("t.mlir");
    let quantize = |extra: &[&str], out: &std::path::Path| {
        let mut a = vec![
            "quantize",
            model.as_str(),
            "--data",
            calib.as_str(),
            "--no-cache",
            "--weights",
            "int4",
            "--validation",
            test.as_str(),
            "--json",
        ];
        a.extend_from_slice(extra);
        let out = arg(out);
        quantir(&[a.as_slice(), &["-o", out.as_str()]].concat())
    };
    let o = ok(quantize(&["--target-top1", "0.999"], &out));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let t = &doc["target"];
    assert_eq!(t["target_top1"], 0.999, "{t}");
    assert_eq!(t["top1_of"], "the float model", "{t}");
    assert_eq!(t["samples"], 397, "{t}");
    assert!(t.get("target_db").is_none() && t.get("sqnr_db").is_none(), "{t}");
    assert!(t["int8_top1"].as_f64().unwrap() < 0.999, "{t}");
    assert!(!t["raised"].as_array().unwrap().is_empty(), "{t}");
    // and the summary's reason for each op left float names the option that did it
    for r in t["raised"].as_array().unwrap().iter().filter(|r| r["kind"] == "op") {
        let op = doc["ops"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["key"] == r["key"])
            .unwrap();
        assert!(
            op["reason"]
                .as_str()
                .unwrap()
                .starts_with("left float by --target-top1 0.999"),
            "{op}"
        );
    }
    let top1 = t["top1"].as_f64().unwrap();
    assert!(top1 >= 0.999, "{t}");
    // the model written is the one scored
    let e = ok(quantir(&["evaluate", &model, &arg(&out), "--data", &test, "--json"]));
    let ev: serde_json::Value = serde_json::from_slice(&e.stdout).unwrap();
    assert_eq!(ev["outputs"][0]["top1_agreement"].as_f64().unwrap(), top1, "{ev}");
    assert!(
        stderr(&o).contains("target top-1 0.999 (agreement with the float model) reached"),
        "{}",
        stderr(&o)
    );
    // against labels: above the float model's own accuracy (98.99 %) no precision reaches it
    let never = dir.path().join("never.mlir");
    let o = quantize(&["--target-top1", "0.995", "--labels", "y"], &never);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("target top-1 0.995 (accuracy against labels 'y') is out of reach") && e.contains("nothing written"),
        "{e}"
    );
    assert!(!never.exists());
    // and the options that only make sense together
    for extra in [
        &["--target-top1", "1.5"][..],
        &["--target-top1", "0.9", "--target-sqnr", "30"],
        &["--labels", "y", "--target-sqnr", "30"],
        &["--labels", "y"],
    ] {
        let o = quantize(extra, &never);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {}", stderr(&o));
        assert!(!never.exists());
    }
}

/// With cross-layer equalization the values between equalized layers carry `~equalized`
/// keys: the target's ranking and op list are taken on the model as calibration prepared it
/// (the search used to fail with "no statistics for tensor ..." on the unequalized keys).
#[test]
fn a_target_on_equalized_layers_searches_the_calibrated_keys() {
    let dir = tempfile::tempdir().unwrap();
    let (model, calib) = (arg(&example("digits_cnn.mlir")), arg(&example("digits_calib.npz")));
    let quantize = |extra: &[&str], out: &str| {
        let head = ["quantize", &model, "--data", &calib, "--no-cache", "--equalize-layers"];
        ok(quantir(&[&head[..], extra, &["-o", out]].concat()))
    };
    let all_int8 = arg(&dir.path().join("int8.mlir"));
    let o = quantize(&[], &all_int8);
    assert!(stderr(&o).contains("2 layer pairs"), "{}", stderr(&o));
    let target = format!("{:.2}", sqnr_on_scored_16(&model, &all_int8, &calib) + 0.5);
    let out = arg(&dir.path().join("t.mlir"));
    let o = quantize(&["--target-sqnr", &target, "--json"], &out);
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(!doc["target"]["raised"].as_array().unwrap().is_empty(), "{doc:#}");
    let got = sqnr_on_scored_16(&model, &out, &calib);
    assert!(got >= target.parse::<f64>().unwrap(), "{got} dB < target {target}");
}

/// `--limit N` holds for everything read from the calibration data: a target's scoring samples
/// are spread over the first N (as a stream, which stops reading at N, keeps them), so the
/// model written is the one a file of those N samples alone gives.
#[test]
fn a_target_under_a_limit_reads_only_the_first_samples() {
    use ndarray::{ArrayD, Axis, Slice};
    let dir = tempfile::tempdir().unwrap();
    let calib = example("digits_calib.npz");
    let mut r = ndarray_npy::NpzReader::new(std::fs::File::open(&calib).unwrap()).unwrap();
    let x: ArrayD<f32> = r.by_name("x").unwrap();
    assert!(x.shape()[0] > 40);
    let first = dir.path().join("first40.npz");
    let mut w = ndarray_npy::NpzWriter::new(std::fs::File::create(&first).unwrap());
    w.add_array("x", &x.slice_axis(Axis(0), Slice::from(0..40)).to_owned())
        .unwrap();
    w.finish().unwrap();
    let model = arg(&example("digits_cnn.mlir"));
    let run = |data: &std::path::Path, limit: Option<&str>, out: &str| -> serde_json::Value {
        let out = arg(&dir.path().join(out));
        let data = arg(data);
        let mut args = vec![
            "quantize",
            &model,
            "--data",
            &data,
            "--no-cache",
            "--target-sqnr",
            "43.5",
        ];
        if let Some(n) = limit {
            args.extend(["--limit", n]);
        }
        args.extend(["--json", "-o", &out]);
        let o = ok(quantir(&args));
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let limited = run(&calib, Some("40"), "limited.mlir");
    let alone = run(&first, None, "alone.mlir");
    assert_eq!(limited["target"]["sqnr_db"], alone["target"]["sqnr_db"], "{limited}");
    assert_eq!(limited["target"]["raised"], alone["target"]["raised"]);
    let bytes = |f: &str| std::fs::read(dir.path().join(f)).unwrap();
    assert!(bytes("limited.mlir") == bytes("alone.mlir"));
}

/// A target's search scores every candidate against the float model's outputs computed once
/// (`evaluate::evaluate_outputs`). The figures are the same, bit for bit, as `evaluate`'s,
/// which runs both models side by side. Checked on a model with dynamic dims, typed from the
/// data, and with labels, on a target's scoring samples and on 4 spread among those
/// (`EvalOptions::among`), both read from the outputs kept for the scoring ones. Samples the
/// kept outputs do not hold are refused.
#[test]
fn float_outputs_kept_once_score_as_side_by_side() {
    use quantir::evaluate::{evaluate, evaluate_outputs, float_outputs, EvalOptions};
    use quantir::formats::data::Dataset;
    use quantir::formats::model::load;
    let dir = tempfile::tempdir().unwrap();
    for (model, calib, labels, out) in [
        (
            example("digits_cnn.mlir"),
            example("digits_test.npz"),
            Some("y"),
            "q.mlir",
        ),
        (
            data("real/ppocr_cls.onnx"),
            data("real/ppocr_cls_calib.npz"),
            None,
            "q.onnx",
        ),
    ] {
        let q = dir.path().join(out);
        ok(quantir(&[
            "quantize",
            &arg(&model),
            "--data",
            &arg(&calib),
            "--no-cache",
            "-o",
            &arg(&q),
        ]));
        let ctx = quantir::ir::new_context();
        let d = Dataset::open(&calib).unwrap();
        let scoring = EvalOptions {
            threads: 2,
            limit: Some(16),
            spread: true,
            labels: labels.map(String::from),
            ..Default::default()
        };
        let among = EvalOptions {
            limit: Some(4),
            among: Some(16),
            ..scoring.clone()
        };
        // kept once for the scoring samples, as a target keeps them, and read for both (fresh
        // copies of the models for each: both functions type a dynamic-dim model in place)
        let kept = float_outputs(&load(&ctx, &model).unwrap(), &d, &scoring)
            .unwrap()
            .unwrap();
        // samples it does not hold are refused, not scored against other samples' outputs
        let all = EvalOptions {
            limit: None,
            spread: false,
            ..scoring.clone()
        };
        let held = evaluate(&load(&ctx, &model).unwrap(), &load(&ctx, &q).unwrap(), &d, &all)
            .unwrap()
            .samples;
        let e = evaluate_outputs(&kept, &load(&ctx, &q).unwrap(), &d, &all);
        assert_eq!(e.is_err(), held > 16, "{}: {held} samples", model.display());
        for opts in [scoring, among] {
            let side = evaluate(&load(&ctx, &model).unwrap(), &load(&ctx, &q).unwrap(), &d, &opts).unwrap();
            let alone = evaluate_outputs(&kept, &load(&ctx, &q).unwrap(), &d, &opts).unwrap();
            assert!(alone.samples > 0, "{}", model.display());
            assert_eq!(
                serde_json::to_value(&alone).unwrap(),
                serde_json::to_value(&side).unwrap(),
                "{}",
                model.display()
            );
            assert!(side.outputs[0].sqnr_db.is_some_and(|db| db > 10.0), "{side:?}");
            if labels.is_some() {
                assert!(side.top1_quant.is_some(), "{side:?}");
            }
        }
    }
}
