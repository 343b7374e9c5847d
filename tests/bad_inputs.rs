//! Bad input, as a table (issue #20): each case is a command on a broken or mismatched input.
//! Every one must exit 1 with exactly one error line that names the file (and the array or
//! tensor where there is one) and says what was expected — and must write no output.

mod common;

use common::{arg, data, quantir, stderr};
use std::path::Path;

/// Writes an `.npz` of one f32 array named `input` (the digits MLP's input).
fn npz(path: &Path, shape: Vec<usize>, values: Vec<f32>) {
    let mut w = ndarray_npy::NpzWriter::new(std::fs::File::create(path).unwrap());
    w.add_array("input", &ndarray::ArrayD::from_shape_vec(shape, values).unwrap())
        .unwrap();
    w.finish().unwrap();
}

#[test]
fn every_bad_input_is_one_line_exit_1_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mlp = arg(&data("digits_mlp.mlir"));
    let calib = arg(&data("digits_mlp_calib.npz"));
    // broken and mismatched inputs
    let onnx = std::fs::read(data("digits_mlp.onnx")).unwrap();
    std::fs::write(d.join("cut.onnx"), &onnx[..onnx.len() / 3]).unwrap();
    let text = std::fs::read_to_string(data("digits_mlp.mlir")).unwrap();
    std::fs::write(d.join("cut.mlir"), &text[..text.len() / 2]).unwrap();
    let z = std::fs::read(data("digits_mlp_calib.npz")).unwrap();
    std::fs::write(d.join("cut.npz"), &z[..z.len() / 2]).unwrap();
    npz(
        &d.join("nan.npz"),
        vec![2, 64],
        (0..128).map(|i| if i == 70 { f32::NAN } else { 0.5 }).collect(),
    );
    npz(&d.join("shape.npz"), vec![2, 7], vec![0.5; 14]);
    {
        let mut w = ndarray_npy::NpzWriter::new(std::fs::File::create(d.join("ints.npz")).unwrap());
        w.add_array("input", &ndarray::ArrayD::<i64>::zeros(ndarray::IxDyn(&[2, 64])))
            .unwrap();
        w.finish().unwrap();
    }
    ndarray_npy::NpzWriter::new(std::fs::File::create(d.join("empty.npz")).unwrap())
        .finish()
        .unwrap();
    std::fs::write(d.join("bad.toml"), "weights = \"int8\"\nweigths = \"int4\"\n").unwrap();
    std::fs::write(d.join("stats.json"), "{\"not\": \"stats\"}").unwrap();
    let p = |name: &str| arg(&d.join(name));
    let out = |name: &str| arg(&d.join(format!("out_{name}")));
    // (what, arguments, output it must not write, what the error line must say)
    let cases: Vec<(&str, Vec<String>, String, Vec<&str>)> = vec![
        (
            "missing model",
            vec![
                "run".into(),
                p("nope.onnx"),
                "--data".into(),
                calib.clone(),
                "-o".into(),
                out("a.npz"),
            ],
            out("a.npz"),
            vec!["nope.onnx"],
        ),
        (
            "truncated .onnx",
            vec![
                "run".into(),
                p("cut.onnx"),
                "--data".into(),
                calib.clone(),
                "-o".into(),
                out("b.npz"),
            ],
            out("b.npz"),
            vec!["cut.onnx"],
        ),
        (
            "truncated .mlir",
            vec![
                "run".into(),
                p("cut.mlir"),
                "--data".into(),
                calib.clone(),
                "-o".into(),
                out("c.npz"),
            ],
            out("c.npz"),
            vec!["cut.mlir:"],
        ),
        (
            "truncated .npz",
            vec![
                "run".into(),
                mlp.clone(),
                "--data".into(),
                p("cut.npz"),
                "-o".into(),
                out("d.npz"),
            ],
            out("d.npz"),
            vec!["cut.npz"],
        ),
        (
            "NaN in calibration data",
            vec![
                "calibrate".into(),
                mlp.clone(),
                "--data".into(),
                p("nan.npz"),
                "-o".into(),
                out("e.json"),
            ],
            out("e.json"),
            vec!["nan.npz", "NaN"],
        ),
        (
            "data of the wrong shape",
            vec![
                "run".into(),
                mlp.clone(),
                "--data".into(),
                p("shape.npz"),
                "-o".into(),
                out("f.npz"),
            ],
            out("f.npz"),
            vec!["shape.npz", "'input'", "64"],
        ),
        (
            "integer data for a float input",
            vec![
                "run".into(),
                mlp.clone(),
                "--data".into(),
                p("ints.npz"),
                "-o".into(),
                out("g.npz"),
            ],
            out("g.npz"),
            vec!["ints.npz", "'input'", "i64"],
        ),
        (
            "data with no arrays",
            vec![
                "calibrate".into(),
                mlp.clone(),
                "--data".into(),
                p("empty.npz"),
                "-o".into(),
                out("h.json"),
            ],
            out("h.json"),
            vec!["empty.npz", "no arrays"],
        ),
        (
            "a recipe with a misspelt key",
            vec![
                "quantize".into(),
                mlp.clone(),
                "--data".into(),
                calib.clone(),
                "--config".into(),
                p("bad.toml"),
                "-o".into(),
                out("i.mlir"),
            ],
            out("i.mlir"),
            vec!["bad.toml", "line 2", "weigths"],
        ),
        (
            "a stats file that is not one",
            vec![
                "quantize".into(),
                mlp.clone(),
                "--stats".into(),
                p("stats.json"),
                "-o".into(),
                out("j.mlir"),
            ],
            out("j.mlir"),
            vec!["stats.json"],
        ),
        (
            "an output folder that does not exist",
            vec![
                "quantize".into(),
                mlp.clone(),
                "--data".into(),
                calib.clone(),
                "-o".into(),
                p("no/such/dir/q.mlir"),
            ],
            p("no/such/dir/q.mlir"),
            vec!["q.mlir", "does not exist"],
        ),
        (
            "an output over the input",
            vec!["opt".into(), p("cut.mlir"), "-o".into(), p("cut.mlir")],
            p("never-written"),
            vec!["cut.mlir"],
        ),
        (
            "an output of an unknown format",
            vec![
                "quantize".into(),
                mlp.clone(),
                "--data".into(),
                calib.clone(),
                "-o".into(),
                out("k.txt"),
            ],
            out("k.txt"),
            vec!["k.txt", ".onnx"],
        ),
    ];
    let mut bad = Vec::new();
    for (what, args, output, says) in &cases {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = quantir(&a);
        let e = stderr(&o);
        let errors: Vec<&str> = e.lines().filter(|l| l.contains("error")).collect();
        let ok = o.status.code() == Some(1)
            && errors.len() == 1
            && says.iter().all(|s| errors[0].contains(s))
            && !Path::new(output).exists()
            && !e.contains("panicked");
        if !ok {
            bad.push(format!("{what}: exit {:?}, stderr:\n{e}", o.status.code()));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n---\n"));
    // the truncated input was left as it was
    assert_eq!(
        std::fs::read_to_string(d.join("cut.mlir")).unwrap(),
        text[..text.len() / 2]
    );
}
