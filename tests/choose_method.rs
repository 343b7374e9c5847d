//! `quantize --choose-method`: every candidate is quantized and scored, the best kept — and the
//! output is exactly what `--method` with that method writes.

mod common;

use common::{arg, example, ok, quantir, stderr};

#[test]
fn the_chosen_method_scores_best_and_writes_what_that_method_writes() {
    let dir = tempfile::tempdir().unwrap();
    let (model, data) = (arg(&example("digits_cnn.mlir")), arg(&example("digits_calib.npz")));
    let chosen = dir.path().join("auto.mlir");
    let o = ok(quantir(&[
        "quantize",
        &model,
        "--data",
        &data,
        "--no-cache",
        "--choose-method",
        "--candidates",
        "minmax,entropy,mse",
        "-o",
        &arg(&chosen),
    ]));
    let e = stderr(&o);
    let line = e
        .lines()
        .find(|l| l.starts_with("method: "))
        .unwrap_or_else(|| panic!("{e}"));
    // "method: NAME (mean output SQNR on 16 calibration samples: minmax A dB, entropy B dB, mse C dB)"
    let name = line["method: ".len()..].split_whitespace().next().unwrap().to_string();
    let scores: Vec<(String, f64)> = line
        .split(": ")
        .last()
        .unwrap()
        .trim_end_matches(')')
        .split(", ")
        .map(|s| {
            let mut w = s.split_whitespace();
            (w.next().unwrap().to_string(), w.next().unwrap().parse().unwrap())
        })
        .collect();
    assert_eq!(scores.len(), 3, "{line}");
    let best = scores.iter().max_by(|a, b| a.1.total_cmp(&b.1)).unwrap();
    assert_eq!(best.0, name, "{line}");
    let direct = dir.path().join("direct.mlir");
    ok(quantir(&[
        "quantize",
        &model,
        "--data",
        &data,
        "--no-cache",
        "--method",
        &name,
        "-o",
        &arg(&direct),
    ]));
    assert_eq!(std::fs::read(&chosen).unwrap(), std::fs::read(&direct).unwrap());
    // it needs data, and it is not --method
    let o = quantir(&[
        "quantize",
        &model,
        "--choose-method",
        "--method",
        "mse",
        "--data",
        &data,
        "-o",
        &arg(&direct),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}
