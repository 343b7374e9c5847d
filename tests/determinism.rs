//! Determinism (issue #20 item 4): `calibrate`, `quantize` to every output format and
//! `evaluate --json` give byte-identical results with 1 and 2 threads and on a repeated run,
//! and sharded-then-merged calibration quantizes to the same bytes as one run — on the digits
//! CNN and on a real model as shipped (PaddleOCR's direction classifier, dynamic dims);
//! `quantize --choose-range` too.

mod common;

use common::{arg, data, example, ok, quantir};
use std::path::{Path, PathBuf};

fn read(p: &Path) -> Vec<u8> {
    std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn check(model: PathBuf, calib: PathBuf, test: PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n);
    let (model, calib, test) = (arg(&model), arg(&calib), arg(&test));
    for ext in ["mlir", "mlirbc", "onnx"] {
        // a TF model written as .onnx is calibrated on its ONNX lowering
        let lowered: &[&str] = if ext == "onnx" && model.ends_with(".mlir") {
            &["--onnx"]
        } else {
            &[]
        };
        // statistics: threads 1, threads 2, threads 2 again; two shards merged
        let calibrate = |out: &str, extra: &[&str]| {
            let mut a = vec!["calibrate", &model, "--data", &calib, "--method", "percentile"];
            a.extend_from_slice(lowered);
            a.extend_from_slice(extra);
            let o = arg(&p(out));
            a.extend_from_slice(&["-o", &o]);
            ok(quantir(&a));
            read(&p(out))
        };
        let s1 = calibrate("t1.json", &["--threads", "1"]);
        assert_eq!(
            s1,
            calibrate("t2.json", &["--threads", "2"]),
            "{model}: stats differ with 2 threads"
        );
        assert_eq!(
            s1,
            calibrate("t2b.json", &["--threads", "2"]),
            "{model}: stats differ between runs"
        );
        calibrate("h0.json", &["--shard", "0/2"]);
        calibrate("h1.json", &["--shard", "1/2"]);
        ok(quantir(&[
            "merge",
            &arg(&p("h1.json")),
            &arg(&p("h0.json")),
            "-o",
            &arg(&p("merged.json")),
        ]));
        let quantize = |stats: &str, threads: &str, out: &str| {
            let o = arg(&p(out));
            ok(quantir(&[
                "quantize",
                &model,
                "--stats",
                &arg(&p(stats)),
                "--threads",
                threads,
                "-o",
                &o,
            ]));
            read(&p(out))
        };
        let a = quantize("t1.json", "1", &format!("a.{ext}"));
        assert_eq!(
            a,
            quantize("t1.json", "2", &format!("b.{ext}")),
            "{model} .{ext}: 2 threads"
        );
        assert_eq!(
            a,
            quantize("merged.json", "2", &format!("c.{ext}")),
            "{model} .{ext}: merged shards"
        );
        // from data in one step, with the options given
        let from_data = |options: &[&str], out: &str| {
            let o = arg(&p(out));
            let mut args = vec!["quantize", &model, "--data", &calib, "--no-cache", "-o", &o];
            args.extend_from_slice(options);
            ok(quantir(&args));
            read(&p(out))
        };
        assert_eq!(
            a,
            from_data(&["--method", "percentile"], &format!("d.{ext}")),
            "{model} .{ext}: quantize --data"
        );
        // ranges chosen per activation: the same with 1 and 2 threads
        assert_eq!(
            from_data(&["--choose-range", "--threads", "1"], &format!("e.{ext}")),
            from_data(&["--choose-range", "--threads", "2"], &format!("f.{ext}")),
            "{model} .{ext}: --choose-range with 2 threads"
        );
        if ext == "onnx" {
            let evaluate = |threads: &str| {
                ok(quantir(&[
                    "evaluate",
                    &model,
                    &arg(&p("a.onnx")),
                    "--data",
                    &test,
                    "--per-layer",
                    "--json",
                    "--threads",
                    threads,
                ]))
                .stdout
            };
            let e1 = evaluate("1");
            assert!(!e1.is_empty());
            assert_eq!(e1, evaluate("2"), "{model}: evaluate --json differs with 2 threads");
            assert_eq!(e1, evaluate("2"), "{model}: evaluate --json differs between runs");
        }
    }
}

#[test]
fn digits_cnn_is_deterministic() {
    check(
        example("digits_cnn.mlir"),
        example("digits_calib.npz"),
        example("digits_test.npz"),
    );
}

#[test]
fn ppocr_cls_as_shipped_is_deterministic() {
    check(
        data("real/ppocr_cls.onnx"),
        data("real/ppocr_cls_calib.npz"),
        data("real/ppocr_cls_test.npz"),
    );
}
