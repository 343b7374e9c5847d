//! `quantize --bias-correction`: the mean shift that rounding a layer's weights and input
//! causes in its output, measured on calibration samples, is taken off the layer's bias.

mod common;

use common::{arg, ok, quantir, stderr};
use std::path::Path;

/// `y = Gemm(x, w, b)`, x of 3 features, w 3×2 with values int8 per-channel rounding moves:
/// column 0's scale is 1/127, so 0.5 → 63.5 → 64 (+0.0039); column 1's is 0.3/127, so
/// 0.1 → 42.33 → 42 (−0.00079). Row 2 is 0.
fn model(dir: &Path) -> String {
    model_with(
        dir,
        "gemm.mlir",
        r#""onnx.Gemm"(%x, %w, %b)"#,
        "tensor<1x3xf32>, tensor<3x2xf32>, tensor<2xf32>",
    )
}

/// The weights above in a Gemm written as `call` on operands of types `types`.
fn model_with(dir: &Path, name: &str, call: &str, types: &str) -> String {
    model_of(dir, name, "[[1.0, 0.3], [0.5, 0.1], [0.0, 0.0]]", call, types)
}

/// A Gemm of weights `w` (3×2) written as `call` on operands of types `types`.
fn model_of(dir: &Path, name: &str, w: &str, call: &str, types: &str) -> String {
    let text = format!(
        r#"func.func @main(%x: tensor<1x3xf32> loc("x")) -> tensor<1x2xf32> {{
  %w = "onnx.Constant"() {{value = dense<{w}> : tensor<3x2xf32>}} : () -> tensor<3x2xf32> loc("w")
  %b = "onnx.Constant"() {{value = dense<[0.25, -0.5]> : tensor<2xf32>}} : () -> tensor<2xf32> loc("b")
  %y = {call} : ({types}) -> tensor<1x2xf32> loc("y")
  return %y : tensor<1x2xf32>
}}
"#
    );
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    arg(&p)
}

/// `n` samples of x; `vary` false: every one [1, 1, 0] (exact at the range [0, 1]).
fn data(dir: &Path, n: usize, vary: bool) -> String {
    let mut x = ndarray::Array3::<f32>::ones((n, 1, 3));
    x.slice_mut(ndarray::s![.., .., 2]).fill(0.0);
    if vary {
        for s in 0..n {
            x[[s, 0, 0]] = ((s * 37) % 100) as f32 / 100.0;
            x[[s, 0, 1]] = ((s * 61 + 13) % 100) as f32 / 100.0;
        }
    }
    let p = dir.join(format!("x{n}{vary}.npy"));
    ndarray_npy::write_npy(&p, &x).unwrap();
    arg(&p)
}

fn quantize(model: &str, data: &str, out: &Path, flag: &str) -> String {
    quantize_with(model, data, out, &[flag])
}

fn quantize_with(model: &str, data: &str, out: &Path, flags: &[&str]) -> String {
    let out = arg(out);
    let mut args = vec!["quantize", model, "--data", data, "--no-cache", "-o", &out];
    args.extend_from_slice(flags);
    stderr(&ok(quantir(&args)))
}

/// Quantizes `model` with `flags` (bias correction among them) on the 8 samples `data`,
/// checks that its one layer was corrected, and returns what quantir said and the largest
/// error left against the float model.
fn corrected(model: &str, data: &str, out: &Path, flags: &[&str]) -> (String, f64) {
    let said = quantize_with(model, data, out, flags);
    assert!(
        said.contains("bias correction: 1 layers on 8 calibration samples"),
        "{said}"
    );
    (said, errors(model, out, data).0)
}

/// (max |error|, mean error per output) of `q` against `model` on `data`.
fn errors(model: &str, q: &Path, data: &str) -> (f64, Vec<f64>) {
    let dir = tempfile::tempdir().unwrap();
    let run = |m: &str, name: &str| -> ndarray::ArrayD<f32> {
        let out = dir.path().join(name);
        ok(quantir(&["run", m, "--data", data, "-o", &arg(&out)]));
        let mut npz = ndarray_npy::NpzReader::new(std::fs::File::open(&out).unwrap()).unwrap();
        let names = npz.names().unwrap();
        npz.by_name(&names[0]).unwrap()
    };
    let (f, q) = (run(model, "f.npz"), run(&arg(q), "q.npz"));
    assert_eq!(f.shape(), q.shape());
    let d = &q.mapv(f64::from) - &f.mapv(f64::from);
    let max = d.iter().fold(0f64, |m, v| m.max(v.abs()));
    let c = *d.shape().last().unwrap();
    let flat = d.into_shape_with_order((f.len() / c, c)).unwrap();
    (max, flat.mean_axis(ndarray::Axis(0)).unwrap().to_vec())
}

#[test]
fn a_constant_rounding_shift_is_taken_off_the_bias() {
    let dir = tempfile::tempdir().unwrap();
    let m = model(dir.path());
    let x = data(dir.path(), 8, false);
    let plain = dir.path().join("plain.mlir");
    quantize(&m, &x, &plain, "--no-bias-correction");
    let (max, mean) = errors(&m, &plain, &x);
    // the weights' rounding alone: +0.0039 on y0, −0.0008 on y1 (bias rounding is ≤ 1.6e-5)
    assert!((mean[0] - (64.0 / 127.0 - 0.5)).abs() < 5e-5, "{mean:?}");
    assert!((mean[1] - (42.0 * 0.3 / 127.0 - 0.1)).abs() < 5e-5, "{mean:?}");
    assert!(max > 3.5e-3, "{max}");
    let (_, max) = corrected(&m, &x, &dir.path().join("corrected.mlir"), &["--bias-correction"]);
    // what is left: the int32 bias's rounding at input scale × weight scale
    assert!(max < 5e-5, "{max}");
}

#[test]
fn the_mean_error_on_the_measured_samples_goes_to_zero() {
    let dir = tempfile::tempdir().unwrap();
    let m = model(dir.path());
    let x = data(dir.path(), 32, true);
    let (plain, corrected) = (dir.path().join("p.mlir"), dir.path().join("c.mlir"));
    quantize(&m, &x, &plain, "--no-bias-correction");
    quantize(&m, &x, &corrected, "--bias-correction");
    let (_, before) = errors(&m, &plain, &x);
    let (_, after) = errors(&m, &corrected, &x);
    for (b, a) in before.iter().zip(&after) {
        // per sample the input's rounding still varies; its mean and the weights' are gone
        assert!(
            a.abs() < 2e-5 && a.abs() < b.abs() / 10.0,
            "before {before:?}, after {after:?}"
        );
    }
}

#[test]
fn the_shifts_do_not_depend_on_the_thread_count() {
    let dir = tempfile::tempdir().unwrap();
    let m = model(dir.path());
    let x = data(dir.path(), 40, true);
    same_bits_on_1_and_2_threads(dir.path(), &m, &x, "--bias-correction");
}

/// Quantizes `model` with `flag` on 1 and on 2 threads: the outputs are the same bytes.
fn same_bits_on_1_and_2_threads(dir: &Path, model: &str, data: &str, flag: &str) {
    let on = |t: &str| {
        let p = dir.join(format!("t{t}.onnx"));
        quantize_with(model, data, &p, &[flag, "--threads", t]);
        std::fs::read(p).unwrap()
    };
    assert_eq!(on("1"), on("2"), "{flag}");
}

#[test]
fn without_calibration_data_it_says_it_made_none() {
    let dir = tempfile::tempdir().unwrap();
    let m = model(dir.path());
    let x = data(dir.path(), 4, true);
    let stats = dir.path().join("s.json");
    ok(quantir(&["calibrate", &m, "--data", &x, "-o", &arg(&stats)]));
    let o = ok(quantir(&[
        "quantize",
        &m,
        "--stats",
        &arg(&stats),
        "--bias-correction",
        "-o",
        &arg(&dir.path().join("q.mlir")),
    ]));
    assert!(
        stderr(&o).contains("warning: bias correction needs calibration data (--data); not made"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn weight_only_the_float_bias_takes_the_weights_shift() {
    let dir = tempfile::tempdir().unwrap();
    let m = model(dir.path());
    let x = data(dir.path(), 8, false);
    let plain = dir.path().join("plain.onnx");
    let said = quantize_with(&m, &x, &plain, &["--activations", "none"]);
    // the data serve nothing here, and quantir says so
    assert!(
        said.contains("the data are read only by --gptq, --bias-correction or a target"),
        "{said}"
    );
    let (_, mean) = errors(&m, &plain, &x);
    assert!((mean[0] - (64.0 / 127.0 - 0.5)).abs() < 5e-5, "{mean:?}");
    let (said, max) = corrected(
        &m,
        &x,
        &dir.path().join("corrected.onnx"),
        &["--activations", "none", "--bias-correction"],
    );
    assert!(
        said.contains("1 float biases (of ops with a float input) corrected"),
        "{said}"
    );
    // the input is exact and the bias float: the shift goes entirely
    assert!(max < 1e-6, "{max}");
}

#[test]
fn an_op_without_a_bias_is_given_one_for_its_shift() {
    let dir = tempfile::tempdir().unwrap();
    let x = data(dir.path(), 8, false);
    let m = model_with(
        dir.path(),
        "nobias.mlir",
        r#""onnx.Gemm"(%x, %w)"#,
        "tensor<1x3xf32>, tensor<3x2xf32>",
    );
    let (said, max) = corrected(&m, &x, &dir.path().join("c.onnx"), &["--bias-correction"]);
    assert!(said.contains("1 biases added to ops without one"), "{said}");
    assert!(max < 5e-5, "{max}");
    // with beta 0.5 a C would be halved: no bias is given, and quantir says so
    let m = model_with(
        dir.path(),
        "beta.mlir",
        r#""onnx.Gemm"(%x, %w) {beta = 5.000000e-01 : f32}"#,
        "tensor<1x3xf32>, tensor<3x2xf32>",
    );
    let said = quantize(&m, &x, &dir.path().join("b.onnx"), "--bias-correction");
    assert!(
        said.contains("bias correction: 0 layers on 8 calibration samples; 1 without a bias to correct"),
        "{said}"
    );
}

/// A target that only a float input reaches: the input's int8 rounding has a mean the shift
/// measured with it takes off, and that same shift would be wrong once the input is float.
#[test]
fn an_input_a_target_raises_to_float_takes_its_weights_shift_alone() {
    let dir = tempfile::tempdir().unwrap();
    // weights exact at int8 (±127 steps of their column's scale): with a float input the
    // weights' shift, and the whole error, is 0
    let m = model_of(
        dir.path(),
        "exact.mlir",
        "[[1.0, 0.5], [-1.0, -0.5], [0.0, 0.0]]",
        r#""onnx.Gemm"(%x, %w, %b)"#,
        "tensor<1x3xf32>, tensor<3x2xf32>, tensor<2xf32>",
    );
    // x0 and x1 a fraction of a step above a level of the [0, 1] uint8 grid (1/255): rounded
    // down by 0.2 or 0.4 steps, and 0.1 or 0.3; x2 (weights 0) spans the range
    let mut x = ndarray::Array3::<f32>::zeros((32, 1, 3));
    for s in 0..32 {
        x[[s, 0, 0]] = (((s * 37) % 200) as f32 + [0.2, 0.4][s % 2]) / 255.0;
        x[[s, 0, 1]] = (((s * 61 + 13) % 200) as f32 + [0.1, 0.3][(s / 2) % 2]) / 255.0;
        x[[s, 0, 2]] = (s % 2) as f32;
    }
    let data = dir.path().join("x.npy");
    ndarray_npy::write_npy(&data, &x).unwrap();
    // either form: measured in the quantized model, the input's float shift is still measured alone
    for form in ["--bias-correction", "--bias-correction-sequential"] {
        let q = dir.path().join("q.onnx");
        let said = quantize_with(&m, &arg(&data), &q, &[form, "--target-sqnr", "90"]);
        // int8 leaves the rounding's spread (60 dB on the 16 samples spread over the 32 the
        // target scores); int16 with the int8 input's shift, or float with it, a constant error
        // of a tenth of a step (63.5 dB); float with the weights' shift alone none
        assert!(said.contains("all int8: 60.69 dB"), "{form}: {said}");
        assert!(
            said.contains("1 of 1 activations raised (0 to int16, 1 to float)"),
            "{form}: {said}"
        );
        let (max, _) = errors(&m, &q, &arg(&data));
        assert!(max < 1e-6, "{form}: {max}");
    }
}

/// `h = MatMul(x, w1)` with the rounding-shift weights above and no bias to take its shift,
/// then `y = Gemm(h, w2, b)` with weights exact at int8 per channel (±127 steps of their
/// column's scale).
fn two_layers(dir: &Path) -> String {
    let text = r#"func.func @main(%x: tensor<1x3xf32> loc("x")) -> tensor<1x2xf32> {
  %w1 = "onnx.Constant"() {value = dense<[[1.0, 0.3], [0.5, 0.1], [0.0, 0.0]]> : tensor<3x2xf32>} : () -> tensor<3x2xf32> loc("w1")
  %h = "onnx.MatMul"(%x, %w1) : (tensor<1x3xf32>, tensor<3x2xf32>) -> tensor<1x2xf32> loc("h")
  %w2 = "onnx.Constant"() {value = dense<[[1.0, 0.5], [-1.0, -0.5]]> : tensor<2x2xf32>} : () -> tensor<2x2xf32> loc("w2")
  %b = "onnx.Constant"() {value = dense<[0.25, -0.5]> : tensor<2xf32>} : () -> tensor<2xf32> loc("b")
  %y = "onnx.Gemm"(%h, %w2, %b) : (tensor<1x2xf32>, tensor<2x2xf32>, tensor<2xf32>) -> tensor<1x2xf32> loc("y")
  return %y : tensor<1x2xf32>
}
"#;
    let p = dir.join("two.mlir");
    std::fs::write(&p, text).unwrap();
    arg(&p)
}

/// The first layer's shift has no bias to go to: measured alone, the second layer never sees
/// it; measured in the quantized model (`--bias-correction-sequential`), the second layer's
/// bias takes it, and the model's mean error on the measured samples goes.
#[test]
fn measured_in_the_quantized_model_a_layer_takes_the_drift_of_the_layers_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let m = two_layers(dir.path());
    let x = data(dir.path(), 32, true);
    let (alone, sequential) = (dir.path().join("a.onnx"), dir.path().join("s.onnx"));
    let said = quantize(&m, &x, &alone, "--bias-correction");
    assert!(
        said.contains("bias correction: 1 layers on 32 calibration samples (")
            && said.contains("; 1 without a bias to correct"),
        "{said}"
    );
    let (_, left) = errors(&m, &alone, &x);
    // h0 reads x1 through 0.5 → 64/127, h1 through 0.1 → 42·0.3/127: y0 = h0 − h1 drifts by
    // about (0.0039 + 0.0008) × mean x1
    assert!(left[0] > 1.5e-3, "{left:?}");
    let said = quantize(&m, &x, &sequential, "--bias-correction-sequential");
    assert!(
        said.contains(
            "bias correction: 1 layers on 32 calibration samples, measured in the quantized model in 1 waves"
        ),
        "{said}"
    );
    let (_, after) = errors(&m, &sequential, &x);
    for (b, a) in left.iter().zip(&after) {
        assert!(
            a.abs() < 2e-5 && a.abs() < b.abs(),
            "alone {left:?}, sequential {after:?}"
        );
    }
    same_bits_on_1_and_2_threads(dir.path(), &m, &x, "--bias-correction-sequential");
}

/// The recipe key does what the flag does, and `--no-bias-correction` turns both forms off.
#[test]
fn the_sequential_form_is_a_recipe_key_and_no_bias_correction_turns_it_off() {
    let dir = tempfile::tempdir().unwrap();
    let m = two_layers(dir.path());
    let x = data(dir.path(), 8, true);
    let recipe = dir.path().join("r.toml");
    std::fs::write(&recipe, "bias_correction_sequential = true\n").unwrap();
    let (by_flag, by_recipe, off) = (
        dir.path().join("f.onnx"),
        dir.path().join("r.onnx"),
        dir.path().join("o.onnx"),
    );
    quantize(&m, &x, &by_flag, "--bias-correction-sequential");
    let said = quantize_with(&m, &x, &by_recipe, &["--config", &arg(&recipe)]);
    assert!(said.contains("measured in the quantized model in 1 waves"), "{said}");
    assert_eq!(std::fs::read(&by_flag).unwrap(), std::fs::read(&by_recipe).unwrap());
    let said = quantize_with(&m, &x, &off, &["--bias-correction-sequential", "--no-bias-correction"]);
    assert!(!said.contains("bias correction"), "{said}");
}
