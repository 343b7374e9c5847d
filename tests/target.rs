//! `quantize --target-sqnr`: the fewest activations raised until the target holds on the
//! calibration samples it is scored on; an unreachable target writes nothing.

mod common;

use common::{arg, data, example, ok, quantir, stderr};

fn sqnr_on_first_16(float: &str, quant: &str, calib: &str) -> f64 {
    let o = ok(quantir(&[
        "evaluate", float, quant, "--data", calib, "--limit", "16", "--json",
    ]));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    r["outputs"][0]["sqnr_db"].as_f64().unwrap()
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
        let base = sqnr_on_first_16(&model, &arg(&all_int8), &calib);
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
        let got = sqnr_on_first_16(&model, &arg(&out), &calib);
        assert!(got >= target, "{model}: {got} dB < target {target:.2} ({t})");
        assert!((got - t["sqnr_db"].as_f64().unwrap()).abs() < 1e-9, "{got} vs {t}");
        // and held-out data gain too
        assert!(sqnr_on_first_16(&model, &arg(&out), &test) > sqnr_on_first_16(&model, &arg(&all_int8), &test));
        assert!(
            stderr(&o).contains(&format!("target {target:.2} dB reached")),
            "{}",
            stderr(&o)
        );
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
