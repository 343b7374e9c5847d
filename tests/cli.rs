//! The CLI end to end: inspect, opt, params, and every error case (exit code, message, nothing
//! written).

mod common;

use common::{files_in, quantir, stderr};

#[test]
fn inspect_json_reports_the_digits_cnn() {
    let m = common::example("digits_cnn.mlir");
    let o = quantir(&["inspect", m.to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["op_counts"]["tf.Conv2D"], 2);
    assert_eq!(v["op_counts"]["tf.MatMul"], 2);
    assert_eq!(v["op_counts"]["tf.Const"], 11);
    assert_eq!(v["constant_count"], 11);
    assert_eq!(v["functions"][0]["input_names"][0], "input");
    assert_eq!(
        v["quantizable_ops"],
        serde_json::json!({"tf.Conv2D": 2, "tf.MatMul": 2})
    );
    assert_eq!(v["functions"][0]["inputs"][0], "tensor<1x8x8x1xf32>");
    let text = quantir(&["inspect", m.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&text.stdout).contains("tf.Conv2D"));
}

#[test]
fn opt_without_passes_is_a_faithful_round_trip_and_strip_identity_works() {
    let dir = tempfile::tempdir().unwrap();
    let m = common::example("digits_cnn.mlir");
    let bc = dir.path().join("a.mlirbc");
    let txt = dir.path().join("b.mlir");
    assert!(quantir(&["opt", m.to_str().unwrap(), "-o", bc.to_str().unwrap()])
        .status
        .success());
    assert!(quantir(&["opt", bc.to_str().unwrap(), "-o", txt.to_str().unwrap()])
        .status
        .success());
    let ctx = quantir::ir::new_context();
    let orig = quantir::ir::print_module(&quantir::ir::load(&ctx, &m).unwrap());
    let back = quantir::ir::print_module(&quantir::ir::load(&ctx, &txt).unwrap());
    assert_eq!(orig, back);

    let stripped = dir.path().join("s.mlir");
    let o = quantir(&[
        "opt",
        m.to_str().unwrap(),
        "--pass",
        "strip-identity",
        "-o",
        stripped.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("strip-identity: "), "{}", stderr(&o));
    let inspect = quantir(&["inspect", stripped.to_str().unwrap(), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&inspect.stdout).unwrap();
    // of the 20 identities only the one feeding the return stays (the chain of 3 in front of
    // it collapses: the inner two only fed identities)
    assert_eq!(v["op_counts"]["tf.Identity"], 1);
    let (ok, err) = common::mlir_opt_accepts(&stripped);
    assert!(ok, "{err}");
    // idempotent
    let again = dir.path().join("s2.mlir");
    let o = quantir(&[
        "opt",
        stripped.to_str().unwrap(),
        "--pass",
        "strip-identity",
        "-o",
        again.to_str().unwrap(),
    ]);
    assert!(stderr(&o).contains("strip-identity: no change"), "{}", stderr(&o));
}

#[test]
fn missing_file_is_exit_1_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o.mlir");
    let o = quantir(&["opt", "/nonexistent/model.mlir", "-o", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(
        e.starts_with("quantir: error: /nonexistent/model.mlir: cannot read: No such file"),
        "{e}"
    );
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(files_in(dir.path()).is_empty());
}

#[test]
fn malformed_mlir_is_exit_1_with_file_line_col_and_no_output() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.mlir");
    std::fs::write(
        &bad,
        "func.func @f() {\n  %0 = \"tf.Const\"() : () -> tensor<2xf32\n}\n",
    )
    .unwrap();
    let out = dir.path().join("o.mlir");
    for args in [
        vec!["inspect", bad.to_str().unwrap()],
        vec!["opt", bad.to_str().unwrap(), "-o", out.to_str().unwrap()],
    ] {
        let o = quantir(&args);
        assert_eq!(o.status.code(), Some(1));
        let e = stderr(&o);
        assert!(
            e.contains(&format!("{}:2:", bad.display())) && e.contains("error:"),
            "{e}"
        );
    }
    assert_eq!(files_in(dir.path()), vec!["bad.mlir"]);
}

#[test]
fn output_over_input_is_refused_and_input_kept() {
    let dir = tempfile::tempdir().unwrap();
    let m = dir.path().join("m.mlir");
    std::fs::copy(common::example("digits_cnn.mlir"), &m).unwrap();
    let before = std::fs::read(&m).unwrap();
    let same = dir.path().join(".").join("m.mlir");
    let o = quantir(&[
        "opt",
        m.to_str().unwrap(),
        "--pass",
        "strip-identity",
        "-o",
        same.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("refusing to write the output over the input file"),
        "{}",
        stderr(&o)
    );
    assert_eq!(std::fs::read(&m).unwrap(), before);
    assert_eq!(files_in(dir.path()), vec!["m.mlir"]);
}

#[test]
fn missing_or_unwritable_output_folder_is_exit_1() {
    let m = common::example("digits_cnn.mlir");
    let o = quantir(&["opt", m.to_str().unwrap(), "-o", "/nonexistent-dir/out.mlir"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("/nonexistent-dir/out.mlir: output folder /nonexistent-dir does not exist"),
        "{}",
        stderr(&o)
    );
    // /proc refuses new files even to root
    let o = quantir(&["opt", m.to_str().unwrap(), "-o", "/proc/quantir-out.mlir"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("/proc/quantir-out.mlir: cannot write"),
        "{}",
        stderr(&o)
    );
    let o = quantir(&["opt", m.to_str().unwrap(), "-o", "/tmp/out.txt"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("unknown output format"), "{}", stderr(&o));
}

#[test]
fn unknown_pass_is_a_usage_error_listing_known_passes() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o.mlir");
    let m = common::example("digits_cnn.mlir");
    let o = quantir(&[
        "opt",
        m.to_str().unwrap(),
        "--pass",
        "no-such-pass",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("invalid value 'no-such-pass' for '--pass <NAME>'")
            && stderr(&o).contains("[possible values: strip-identity, "),
        "{}",
        stderr(&o)
    );
    assert!(files_in(dir.path()).is_empty());
    assert_eq!(quantir(&["inspect"]).status.code(), Some(2));
}

#[test]
fn params_json_and_errors() {
    let o = quantir(&["params", "--min", "-1", "--max", "1", "--scheme", "onnx", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        v,
        serde_json::json!({"scheme":"onnx","dtype":"int8","scale":0.007843137718737125,"zero_point":0,"qmin":-128,"qmax":127})
    );
    let o = quantir(&[
        "params",
        "--min",
        "-1,0,0.5",
        "--max",
        "1,0,2",
        "--scheme",
        "mlir",
        "--narrow-range",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["zero_point"], serde_json::json!([0, -127, -127]));
    assert_eq!(v["scale"][1], 1.0);
    let text = quantir(&["params", "--min", "0", "--max", "6"]);
    assert!(String::from_utf8_lossy(&text.stdout).contains("!quant.uniform<i8:f32, 2.3529411764705882e-2:-128>"));

    let cases: [(&[&str], &str); 5] = [
        (&["--min", "2", "--max", "1"], "min 2 is greater than max 1"),
        (&["--min", "nan", "--max", "1"], "min must be finite"),
        (&["--min", "-1", "--max", "inf"], "max must be finite"),
        (
            &["--min", "-1", "--max", "1", "--scheme", "mlir", "--reduce-range"],
            "the mlir scheme does not define reduce_range",
        ),
        (&["--min", "-1,0", "--max", "1"], "--min has 2 values but --max has 1"),
    ];
    for (args, msg) in cases {
        let mut a = vec!["params"];
        a.extend_from_slice(args);
        let o = quantir(&a);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        assert!(stderr(&o).contains(msg), "{args:?}: {}", stderr(&o));
        assert_eq!(stderr(&o).lines().count(), 1);
    }
    // an enumerated option's bad value is a usage error listing the choices
    let o = quantir(&["params", "--min", "-1", "--max", "1", "--dtype", "int7"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("invalid value 'int7' for '--dtype <DTYPE>'")
            && stderr(&o).contains("[possible values: int8, uint8, int16, uint16, int4, uint4, int32]"),
        "{}",
        stderr(&o)
    );
    // the mlir spelling of a storage type is an alias
    let o = quantir(&["params", "--min", "-1", "--max", "1", "--dtype", "i16", "--json"]);
    assert!(o.status.success() && String::from_utf8_lossy(&o.stdout).contains("\"dtype\":\"int16\""));
}

#[test]
fn merge_combines_shards_and_refuses_mismatches() {
    use quantir::calibration::{Method, NonFinitePolicy, StatsFile};
    let dir = tempfile::tempdir().unwrap();
    let shard = |name: &str, hash: &str, method: Method, xs: &[f32]| {
        let mut s = StatsFile::new(hash, method, 2048, NonFinitePolicy::Error);
        let v = ndarray::ArrayViewD::from_shape(ndarray::IxDyn(&[xs.len()]), xs).unwrap();
        s.observe("t", 0, &v, None).unwrap();
        s.num_samples = 1;
        s.finalize().unwrap();
        let p = dir.path().join(name);
        std::fs::write(&p, s.to_json().unwrap()).unwrap();
        p
    };
    let a = shard("a.json", "m1", Method::MinMax, &[-1.0, 2.0]);
    let b = shard("b.json", "m1", Method::MinMax, &[-3.0, 0.5]);
    let out = dir.path().join("all.json");
    let o = quantir(&[
        "merge",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let merged = StatsFile::from_json(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(
        (merged.tensors["t"].min, merged.tensors["t"].max, merged.num_samples),
        (-3.0, 2.0, 2)
    );

    let c = shard("c.json", "m2", Method::MinMax, &[0.0]);
    let bad = dir.path().join("bad.json");
    let o = quantir(&[
        "merge",
        a.to_str().unwrap(),
        c.to_str().unwrap(),
        "-o",
        bad.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("c.json: cannot merge statistics: model (model_hash) differs: m1 vs m2"),
        "{}",
        stderr(&o)
    );
    let d = shard("d.json", "m1", Method::Entropy { levels: 128 }, &[0.0, 1.0]);
    let o = quantir(&[
        "merge",
        a.to_str().unwrap(),
        d.to_str().unwrap(),
        "-o",
        bad.to_str().unwrap(),
    ]);
    assert!(stderr(&o).contains("method differs"), "{}", stderr(&o));
    std::fs::write(dir.path().join("junk.json"), "[1,2]").unwrap();
    let o = quantir(&[
        "merge",
        dir.path().join("junk.json").to_str().unwrap(),
        "-o",
        bad.to_str().unwrap(),
    ]);
    assert!(
        stderr(&o).contains("junk.json: stats file: not a quantir stats file"),
        "{}",
        stderr(&o)
    );
    assert!(!bad.exists());
}

#[test]
fn run_writes_outputs_and_reports_bad_data() {
    let dir = tempfile::tempdir().unwrap();
    let m = common::example("digits_cnn.mlir");
    let out = dir.path().join("out.npz");
    let o = quantir(&[
        "run",
        m.to_str().unwrap(),
        "--data",
        common::example("digits_test.npz").to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--limit",
        "5",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let mut z = ndarray_npy::NpzReader::new(std::fs::File::open(&out).unwrap()).unwrap();
    let y: ndarray::ArrayD<f32> = z.by_name("identity_RetVal.npy").unwrap();
    assert_eq!(y.shape(), &[5, 10]);
    // the MLP's data does not fit the CNN
    let o = quantir(&[
        "run",
        m.to_str().unwrap(),
        "--data",
        common::data("digits_mlp_test.npz").to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("digits_mlp_test.npz: no array for input 'input' (tensor<1x8x8x1xf32>)"),
        "{}",
        stderr(&o)
    );
    let o = quantir(&[
        "run",
        m.to_str().unwrap(),
        "--data",
        "/nonexistent.npz",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(stderr(&o).contains("/nonexistent.npz: cannot read"), "{}", stderr(&o));
    let o = quantir(&[
        "run",
        m.to_str().unwrap(),
        "--data",
        common::example("digits_test.npz").to_str().unwrap(),
        "--input",
        "bad",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
}
