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
            "every compute op excluded: nothing to calibrate, and why",
            vec![
                "quantize".into(),
                mlp.clone(),
                "--data".into(),
                calib.clone(),
                "--exclude".into(),
                "*".into(),
                "-o".into(),
                out("ex.mlir"),
            ],
            out("ex.mlir"),
            vec!["digits_mlp.mlir", "all 3 compute ops are left float (--exclude"],
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

/// More of the table, one row per line: (what, the command with `{d}` for the case folder and
/// `{mlp}`/`{cnn}`/`{calib}`/`{cnn_calib}` for the bundled files, the exit code, what the one
/// error line must say). Exit 2 is a usage error (clap's), 1 everything else. The output after
/// `-o` must not exist afterwards.
#[test]
fn every_bad_input_of_the_second_table_is_one_line_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mlp = data("digits_mlp.mlir");
    let calib = data("digits_mlp_calib.npz");
    let cnn = common::example("digits_cnn.mlir");
    let cnn_calib = common::example("digits_calib.npz");
    let write = |name: &str, bytes: &[u8]| {
        let p = d.join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
    };
    // models: a SavedModel whose saved_model.pb is garbage, one without its variables,
    // truncated bytecode, models quantized already
    write("sm_bad/saved_model.pb", b"\x0a\x05hello\xff\xff\xff");
    write(
        "sm_novars/saved_model.pb",
        &std::fs::read(data("digits_mlp_savedmodel/saved_model.pb")).unwrap(),
    );
    let q = |model: &Path, out: &str| {
        common::ok(quantir(&[
            "quantize",
            &arg(model),
            "--data",
            &arg(&calib),
            "--no-cache",
            "-o",
            &arg(&d.join(out)),
        ]));
    };
    q(&mlp, "q.mlir");
    q(&data("digits_mlp.onnx"), "q.onnx");
    common::ok(quantir(&["opt", &arg(&mlp), "-o", &arg(&d.join("m.mlirbc"))]));
    let bc = std::fs::read(d.join("m.mlirbc")).unwrap();
    write("cut.mlirbc", &bc[..bc.len() / 2]);
    // bytecode whose producer string is not UTF-8 (found by libFuzzer: printing the diagnostic
    // aborted the process)
    write(
        "bytes.mlirbc",
        &std::fs::read(data("fuzz_crashes/mlir_bytecode/non_utf8_producer.mlirbc")).unwrap(),
    );
    // bytecode on which MLIR's own reader calls report_fatal_error (found by libFuzzer)
    write(
        "aborts.mlirbc",
        &std::fs::read(data("mlir_aborts/huge_shape_list.mlirbc")).unwrap(),
    );
    std::fs::copy(&mlp, d.join("m.mlir")).unwrap();
    std::os::unix::fs::symlink(d.join("m.mlir"), d.join("link.mlir")).unwrap();
    // data: .npy of the wrong shape, a declared shape far beyond the file (found by libFuzzer),
    // an .npz member shorter than its header says, ±Inf, zero samples, an empty image folder
    ndarray_npy::write_npy(d.join("shape.npy"), &ndarray::Array2::<f32>::zeros((3, 7))).unwrap();
    write(
        "huge.npy",
        &std::fs::read(data("fuzz_crashes/npy/huge_declared_shape")).unwrap(),
    );
    {
        use std::io::Write;
        let mut z = zip::ZipWriter::new(std::fs::File::create(d.join("short.npz")).unwrap());
        z.start_file(
            "input.npy",
            zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored),
        )
        .unwrap();
        let mut header = b"{'descr': '<f4', 'fortran_order': False, 'shape': (4, 64), }".to_vec();
        while (header.len() + 11) % 64 != 0 {
            header.push(b' ');
        }
        header.push(b'\n');
        z.write_all(b"\x93NUMPY\x01\x00").unwrap();
        z.write_all(&(header.len() as u16).to_le_bytes()).unwrap();
        z.write_all(&header).unwrap();
        z.write_all(&[0u8; 100]).unwrap(); // 4 × 64 × 4 bytes declared
        z.finish().unwrap();
    }
    npz(
        &d.join("inf.npz"),
        vec![2, 64],
        (0..128).map(|i| if i == 3 { f32::NEG_INFINITY } else { 0.5 }).collect(),
    );
    npz(&d.join("zero.npz"), vec![0, 64], vec![]);
    std::fs::create_dir(d.join("no_images")).unwrap();
    // statistics: of another model, of another format version
    common::ok(quantir(&[
        "calibrate",
        &arg(&cnn),
        "--data",
        &arg(&cnn_calib),
        "-o",
        &arg(&d.join("cnn.json")),
    ]));
    common::ok(quantir(&[
        "calibrate",
        &arg(&mlp),
        "--data",
        &arg(&calib),
        "-o",
        &arg(&d.join("mlp.json")),
    ]));
    let stats = std::fs::read_to_string(d.join("mlp.json")).unwrap();
    assert!(stats.contains("\"format_version\": 2"), "{stats}");
    write(
        "v9.json",
        stats
            .replace("\"format_version\": 2", "\"format_version\": 9")
            .as_bytes(),
    );
    // recipes: a bad value, an override without a pattern, a pattern of the wrong type
    write("int9.toml", b"activations = \"int9\"\n");
    write("nomatch.toml", b"[[override]]\nexclude = true\n");
    write("badtype.toml", b"exclude = \"*Softmax*\"\n");
    #[rustfmt::skip]
    let rows: &[(&str, &str, i32, &[&str])] = &[
        ("garbage saved_model.pb", "run {d}/sm_bad --data {calib} -o {d}/o1.npz", 1, &["saved_model.pb"]),
        ("SavedModel without variables", "run {d}/sm_novars --data {calib} -o {d}/o2.npz", 1, &["sm_novars", "variables"]),
        ("truncated MLIR bytecode", "run {d}/cut.mlirbc --data {calib} -o {d}/o3.npz", 1, &["cut.mlirbc"]),
        ("MLIR bytecode MLIR's reader gives up on", "run {d}/aborts.mlirbc --data {calib} -o {d}/o4.npz", 1, &["aborts.mlirbc", "MLIR gave up", "SmallVector"]),
        ("MLIR bytecode with non-UTF-8 bytes", "inspect {d}/bytes.mlirbc", 1, &["bytes.mlirbc", "invalid MLIR", "section"]),
        ("an already quantized MLIR model", "quantize {d}/q.mlir --data {calib} -o {d}/o4.mlir", 1, &["q.mlir", "already quantized", "quant.dcast"]),
        ("an already quantized ONNX model", "quantize {d}/q.onnx --data {calib} -o {d}/o5.onnx", 1, &["q.onnx", "already quantized", "onnx.DequantizeLinear"]),
        ("output = input through a symlink", "quantize {d}/m.mlir --data {calib} --no-cache -o {d}/link.mlir", 1, &["link.mlir", "over the input"]),
        ("output = input spelt with ./", "quantize {d}/m.mlir --data {calib} --no-cache -o {d}/./m.mlir", 1, &["m.mlir", "over the input"]),
        (".npy data of the wrong shape", "run {mlp} --data {d}/shape.npy -o {d}/o6.npz", 1, &["shape.npy", "64"]),
        ("a huge declared shape", "run {mlp} --data {d}/huge.npy -o {d}/o7.npz", 1, &["huge.npy", "declares shape"]),
        ("an .npz member shorter than declared", "calibrate {mlp} --data {d}/short.npz -o {d}/o8.json", 1, &["short.npz", "'input'", "declares shape [4, 64]"]),
        ("-Inf in calibration data", "calibrate {mlp} --data {d}/inf.npz -o {d}/o9.json", 1, &["inf.npz", "Inf"]),
        ("zero samples", "quantize {mlp} --data {d}/zero.npz --no-cache -o {d}/o10.mlir", 1, &["zero.npz", "no samples"]),
        ("an empty image folder", "calibrate {cnn} --data {d}/no_images -o {d}/o11.json", 1, &["no_images"]),
        ("a missing data file", "calibrate {mlp} --data {d}/nope.npz -o {d}/o12.json", 1, &["nope.npz"]),
        ("a missing stats file", "quantize {mlp} --stats {d}/nope.json -o {d}/o13.mlir", 1, &["nope.json"]),
        ("stats of another model", "quantize {mlp} --stats {d}/cnn.json -o {d}/o14.mlir", 1, &["digits_mlp.mlir", "another model"]),
        ("stats of another format version", "quantize {mlp} --stats {d}/v9.json -o {d}/o15.mlir", 1, &["v9.json", "format_version 9"]),
        ("merging stats of two models", "merge {d}/mlp.json {d}/cnn.json -o {d}/o16.json", 1, &["cnn.json", "model_hash", "differs"]),
        ("a recipe with a bad value", "quantize {mlp} --data {calib} --config {d}/int9.toml -o {d}/o17.mlir", 1, &["int9.toml", "int9"]),
        ("an override without a pattern", "quantize {mlp} --data {calib} --config {d}/nomatch.toml -o {d}/o18.mlir", 1, &["nomatch.toml", "match"]),
        ("a recipe value of the wrong type", "quantize {mlp} --data {calib} --config {d}/badtype.toml -o {d}/o19.mlir", 1, &["badtype.toml", "line 1", "expected a sequence"]),
        ("--shard 3/2", "calibrate {mlp} --data {calib} --shard 3/2 -o {d}/o20.json", 2, &["3/2"]),
        ("--limit 0", "calibrate {mlp} --data {calib} --limit 0 -o {d}/o21.json", 1, &["no samples"]),
        ("an input name the model lacks", "calibrate {mlp} --data {calib} --input nope=input -o {d}/o22.json", 1, &["--input nope=input", "no input 'nope'"]),
        ("an array name the data lacks", "calibrate {mlp} --data {calib} --input input=nope -o {d}/o23.json", 1, &["digits_mlp_calib.npz", "nope"]),
        ("an unknown method", "calibrate {mlp} --data {calib} --method median -o {d}/o24.json", 2, &["median"]),
        ("evaluating models of different inputs", "evaluate {mlp} {cnn} --data {calib}", 1, &["digits_cnn.mlir", "not its quantized form", "digits_mlp_calib.npz"]),
    ];
    let mut bad = Vec::new();
    for (what, cmd, code, says) in rows {
        let cmd = cmd
            .replace("{d}", &arg(d))
            .replace("{mlp}", &arg(&mlp))
            .replace("{calib}", &arg(&calib))
            .replace("{cnn_calib}", &arg(&cnn_calib))
            .replace("{cnn}", &arg(&cnn));
        let args: Vec<&str> = cmd.split_whitespace().collect();
        let o = quantir(&args);
        let e = stderr(&o);
        let errors: Vec<&str> = e.lines().filter(|l| l.contains("error")).collect();
        let output = args.iter().position(|a| *a == "-o").map(|i| args[i + 1]);
        let ok = o.status.code() == Some(*code)
            && errors.len() == 1
            && says.iter().all(|s| errors[0].contains(s))
            && output.is_none_or(|p| !Path::new(p).exists() || p.ends_with("link.mlir") || p.ends_with("m.mlir"))
            && !e.contains("panicked");
        if !ok {
            bad.push(format!("{what}: exit {:?}, stderr:\n{e}", o.status.code()));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n---\n"));
    // the inputs written over were left as they were
    assert_eq!(std::fs::read(d.join("m.mlir")).unwrap(), std::fs::read(&mlp).unwrap());
    assert!(rows.len() >= 27, "{}", rows.len());
}
