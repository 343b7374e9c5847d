//! The interpreter against TensorFlow's own outputs, op by op on small modules, and its errors.

mod common;

use ndarray::{ArrayD, IxDyn};
use quantir::formats::data::{bind, Dataset};
use quantir::interp::{InterpError, Program};
use quantir::run::{run_samples, stack_outputs};
use quantir::tensor::Tensor;
use std::path::Path;

fn run_model(text: &[u8], name: &str, data: &Path, threads: usize) -> (Vec<Tensor>, usize) {
    let ctx = quantir::ir::new_context();
    let m = quantir::ir::load_bytes(&ctx, text, Path::new(name)).unwrap();
    let p = Program::compile(&m, None).unwrap();
    let d = Dataset::open(data).unwrap();
    let b = bind(&d, &p.inputs, &[]).unwrap();
    let idx: Vec<usize> = (0..b.samples).collect();
    let outs = run_samples(
        &p,
        &b,
        &idx,
        threads,
        &Default::default(),
        true,
        &mut |_, _, _| Ok(()),
        "test",
    )
    .unwrap();
    (stack_outputs(&outs, true).unwrap(), b.samples)
}

fn reference(name: &str) -> ArrayD<f32> {
    let mut z = ndarray_npy::NpzReader::new(std::fs::File::open(common::data(name)).unwrap()).unwrap();
    z.by_name("y.npy").unwrap()
}

fn max_abs_diff(a: &ArrayD<f32>, b: &ArrayD<f32>) -> f32 {
    assert_eq!(a.shape(), b.shape());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

fn argmax_rows(a: &ArrayD<f32>) -> Vec<usize> {
    a.outer_iter()
        .map(|r| {
            r.iter()
                .enumerate()
                .fold((0, f32::MIN), |b, (i, &v)| if v > b.1 { (i, v) } else { b })
                .0
        })
        .collect()
}

#[test]
fn reproduces_tensorflow_outputs_on_every_bundled_model() {
    let cases = [
        (
            "digits_cnn.mlir",
            common::model_text(&common::example("digits_cnn.mlir")),
            common::example("digits_test.npz"),
            "digits_cnn_test_outputs.npz",
        ),
        (
            "digits_mlp.mlir",
            common::model_text(&common::data("digits_mlp.mlir")),
            common::data("digits_mlp_test.npz"),
            "digits_mlp_test_outputs.npz",
        ),
        (
            "mobilenet_v2_035.mlir",
            common::model_text(&common::data("mobilenet_v2_035.mlir.gz")),
            common::data("mobilenet_test.npz"),
            "mobilenet_v2_035_test_outputs.npz",
        ),
    ];
    for (name, text, data, refs) in cases {
        let (outs, n) = run_model(&text, name, &data, 2);
        let got = outs[0].as_f32().unwrap();
        let want = reference(refs);
        let d = max_abs_diff(got, &want);
        assert!(d <= 1e-4, "{name}: max |quantir − TF| = {d} over {n} samples");
        assert_eq!(argmax_rows(got), argmax_rows(&want), "{name}: top-1 differs from TF");
    }
}

#[test]
fn digits_cnn_top1_equals_tensorflow_and_results_do_not_depend_on_threads() {
    let text = common::model_text(&common::example("digits_cnn.mlir"));
    let (one, _) = run_model(&text, "d.mlir", &common::example("digits_test.npz"), 1);
    let (two, n) = run_model(&text, "d.mlir", &common::example("digits_test.npz"), 2);
    assert!(one[0].bit_eq(&two[0]), "outputs differ between 1 and 2 threads");
    let labels: ArrayD<i64> =
        ndarray_npy::NpzReader::new(std::fs::File::open(common::example("digits_test.npz")).unwrap())
            .unwrap()
            .by_name("y.npy")
            .unwrap();
    let top1 = argmax_rows(one[0].as_f32().unwrap())
        .iter()
        .zip(labels.iter())
        .filter(|(p, y)| **p as i64 == **y)
        .count();
    // TF's float top-1 on this set is 0.9899244332493703 = 393/397 (reference/tf_results.json)
    assert_eq!((top1, n), (393, 397));
}

/// Compiles a module written to `t.mlir` (so that locations carry a file name).
fn compile_src(src: &str) -> Result<Program, InterpError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.mlir");
    std::fs::write(&path, src).unwrap();
    let ctx = quantir::ir::new_context();
    let m = quantir::ir::load(&ctx, &path).unwrap();
    Program::compile(&m, None)
}

fn f32t(shape: &[usize], v: Vec<f32>) -> Tensor {
    Tensor::F32(ArrayD::from_shape_vec(IxDyn(shape), v).unwrap())
}

#[test]
fn small_modules_compute_what_numpy_computes() {
    // y = mean(relu6(x * 2 - 1), axis 1, keep_dims) ; z = concat(y, transpose) etc.
    let src = r#"
func.func @main(%x: tensor<2x3xf32>) -> (tensor<2x1xf32>, tensor<3x2xf32>, tensor<2x2xf32>, tensor<1x3xf32>) {
  %one = "tf.Const"() <{value = dense<1.0> : tensor<f32>}> : () -> tensor<f32>
  %two = "tf.AddV2"(%one, %one) : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %ax = "tf.Const"() <{value = dense<1> : tensor<1xi32>}> : () -> tensor<1xi32>
  %perm = "tf.Const"() <{value = dense<[1, 0]> : tensor<2xi32>}> : () -> tensor<2xi32>
  %0 = "tf.Mul"(%x, %two) : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
  %1 = "tf.Sub"(%0, %one) : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
  %2 = "tf.Relu6"(%1) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %3 = "tf.Mean"(%2, %ax) <{keep_dims = true}> : (tensor<2x3xf32>, tensor<1xi32>) -> tensor<2x1xf32>
  %4 = "tf.Transpose"(%x, %perm) : (tensor<2x3xf32>, tensor<2xi32>) -> tensor<3x2xf32>
  %5 = "tf.MatMul"(%x, %x) <{transpose_b = true}> : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x2xf32>
  %b = "tf.Const"() <{value = dense<[1, 0]> : tensor<2xi32>}> : () -> tensor<2xi32>
  %e = "tf.Const"() <{value = dense<[2, 3]> : tensor<2xi32>}> : () -> tensor<2xi32>
  %s = "tf.Const"() <{value = dense<[1, 1]> : tensor<2xi32>}> : () -> tensor<2xi32>
  %6 = "tf.StridedSlice"(%x, %b, %e, %s) <{begin_mask = 0 : i64, end_mask = 0 : i64, ellipsis_mask = 0 : i64, new_axis_mask = 0 : i64, shrink_axis_mask = 0 : i64}> : (tensor<2x3xf32>, tensor<2xi32>, tensor<2xi32>, tensor<2xi32>) -> tensor<1x3xf32>
  return %3, %4, %5, %6 : tensor<2x1xf32>, tensor<3x2xf32>, tensor<2x2xf32>, tensor<1x3xf32>
}"#;
    let p = compile_src(src).unwrap();
    let x = f32t(&[2, 3], vec![0.0, 1.0, 4.0, -1.0, 0.5, 2.0]);
    let out = p.run(&[x]).unwrap();
    // relu6(2x − 1): [0, 1, 6], [0, 0, 3] → means 7/3, 1
    assert_eq!(out[0], f32t(&[2, 1], vec![7.0 / 3.0, 1.0]));
    assert_eq!(out[1], f32t(&[3, 2], vec![0.0, -1.0, 1.0, 0.5, 4.0, 2.0]));
    assert_eq!(out[2], f32t(&[2, 2], vec![17.0, 8.5, 8.5, 5.25]));
    assert_eq!(out[3], f32t(&[1, 3], vec![-1.0, 0.5, 2.0]));
    // AddV2 of two constants is folded at compile time; the 7 ops that depend on x run
    assert_eq!(p.step_count(), 7);
}

#[test]
fn arg_max_clip_and_broadcast_follow_tensorflow() {
    let src = r#"
func.func @main(%x: tensor<2x3xf32>) -> (tensor<2xi32>, tensor<3xi64>, tensor<2x3xf32>, tensor<2x2x3xf32>) {
  %one = "tf.Const"() <{value = dense<1> : tensor<i32>}> : () -> tensor<i32>
  %zero = "tf.Const"() <{value = dense<0> : tensor<i32>}> : () -> tensor<i32>
  %lo = "tf.Const"() <{value = dense<-0.5> : tensor<f32>}> : () -> tensor<f32>
  %hi = "tf.Const"() <{value = dense<[0.5, 1.0, 1.5]> : tensor<3xf32>}> : () -> tensor<3xf32>
  %shape = "tf.Const"() <{value = dense<[2, 2, 3]> : tensor<3xi32>}> : () -> tensor<3xi32>
  %0 = "tf.ArgMax"(%x, %one) : (tensor<2x3xf32>, tensor<i32>) -> tensor<2xi32>
  %1 = "tf.ArgMin"(%x, %zero) : (tensor<2x3xf32>, tensor<i32>) -> tensor<3xi64>
  %2 = "tf.ClipByValue"(%x, %lo, %hi) : (tensor<2x3xf32>, tensor<f32>, tensor<3xf32>) -> tensor<2x3xf32>
  %3 = "tf.BroadcastTo"(%x, %shape) : (tensor<2x3xf32>, tensor<3xi32>) -> tensor<2x2x3xf32>
  return %0, %1, %2, %3 : tensor<2xi32>, tensor<3xi64>, tensor<2x3xf32>, tensor<2x2x3xf32>
}"#;
    let p = compile_src(src).unwrap();
    let v = vec![4.0, 1.0, 4.0, -1.0, 1.0, 2.0];
    let out = p.run(&[f32t(&[2, 3], v.clone())]).unwrap();
    // ties go to the first index, as in TensorFlow; the index type is the result's
    assert_eq!(
        out[0],
        Tensor::I32(ArrayD::from_shape_vec(IxDyn(&[2]), vec![0, 2]).unwrap())
    );
    assert_eq!(
        out[1],
        Tensor::I64(ArrayD::from_shape_vec(IxDyn(&[3]), vec![1, 0, 1]).unwrap())
    );
    assert_eq!(out[2], f32t(&[2, 3], vec![0.5, 1.0, 1.5, -0.5, 1.0, 1.5]));
    assert_eq!(out[3], f32t(&[2, 2, 3], [v.clone(), v].concat()));
}

#[test]
fn tensorflow_resize_follows_its_three_coordinate_conventions() {
    let resize = |op: &str, attrs: &str, h: usize, w: usize| {
        let src = format!(
            r#"
func.func @main(%x: tensor<1x2x2x1xf32>) -> tensor<1x{h}x{w}x1xf32> {{
  %s = "tf.Const"() <{{value = dense<[{h}, {w}]> : tensor<2xi32>}}> : () -> tensor<2xi32>
  %0 = "tf.{op}"(%x, %s) <{{{attrs}}}> : (tensor<1x2x2x1xf32>, tensor<2xi32>) -> tensor<1x{h}x{w}x1xf32>
  return %0 : tensor<1x{h}x{w}x1xf32>
}}"#
        );
        let p = compile_src(&src).unwrap();
        let out = p.run(&[f32t(&[1, 2, 2, 1], vec![1.0, 2.0, 3.0, 4.0])]).unwrap();
        let Tensor::F32(a) = &out[0] else { panic!() };
        a.iter().copied().collect::<Vec<f32>>()
    };
    // tf.image.resize (TF2, half-pixel centres): [[1, 2], [3, 4]] to 4x4
    let row = |r: [f32; 4]| r.to_vec();
    assert_eq!(
        resize("ResizeBilinear", "half_pixel_centers = true", 4, 4),
        [
            row([1.0, 1.25, 1.75, 2.0]),
            row([1.5, 1.75, 2.25, 2.5]),
            row([2.5, 2.75, 3.25, 3.5]),
            row([3.0, 3.25, 3.75, 4.0])
        ]
        .concat()
    );
    // TF1 default: x_in = x_out / 2, the last row and column repeat the edge
    assert_eq!(
        resize("ResizeBilinear", "", 4, 4),
        [
            row([1.0, 1.5, 2.0, 2.0]),
            row([2.0, 2.5, 3.0, 3.0]),
            row([3.0, 3.5, 4.0, 4.0]),
            row([3.0, 3.5, 4.0, 4.0])
        ]
        .concat()
    );
    // corners aligned: thirds
    let third = resize("ResizeBilinear", "align_corners = true", 1, 4);
    assert_eq!(third.len(), 4);
    for (g, w) in third.iter().zip([1.0, 4.0 / 3.0, 5.0 / 3.0, 2.0]) {
        assert!((g - w).abs() < 1e-6, "{third:?}");
    }
    // nearest to 1x3: legacy floors x·2/3 (columns 0, 0, 1; row 0); half-pixel floors (x+½)·2/3
    // (columns 0, 1, 1) and (y+½)·2 (row 1); aligned corners round x·1/2 half up (0, 1, 1)
    assert_eq!(resize("ResizeNearestNeighbor", "", 1, 3), vec![1.0, 1.0, 2.0]);
    assert_eq!(
        resize("ResizeNearestNeighbor", "half_pixel_centers = true", 1, 3),
        vec![3.0, 4.0, 4.0]
    );
    assert_eq!(
        resize("ResizeNearestNeighbor", "align_corners = true", 1, 3),
        vec![1.0, 2.0, 2.0]
    );
}

#[test]
fn quant_ops_round_half_to_even_and_saturate() {
    let src = r#"
func.func @main(%x: tensor<6xf32>) -> (tensor<6xf32>, tensor<6xi8>) {
  %q = quant.qcast %x : tensor<6xf32> to tensor<6x!quant.uniform<i8:f32, 0.5:1>>
  %i = quant.scast %q : tensor<6x!quant.uniform<i8:f32, 0.5:1>> to tensor<6xi8>
  %d = quant.dcast %q : tensor<6x!quant.uniform<i8:f32, 0.5:1>> to tensor<6xf32>
  return %d, %i : tensor<6xf32>, tensor<6xi8>
}"#;
    let p = compile_src(src).unwrap();
    // x/0.5 = 0.5, 1.5, 2.5, -0.5, 400, -400 → rne 0, 2, 2, -0, sat; + zp 1
    let out = p
        .run(&[f32t(&[6], vec![0.25, 0.75, 1.25, -0.25, 200.0, -200.0])])
        .unwrap();
    assert_eq!(
        out[1],
        Tensor::I8(ArrayD::from_shape_vec(IxDyn(&[6]), vec![1, 3, 3, 1, 127, -128]).unwrap())
    );
    assert_eq!(out[0], f32t(&[6], vec![0.0, 1.0, 1.0, 0.0, 63.0, -64.5]));
}

#[test]
fn errors_name_the_op_location_and_tensor() {
    let unsupported = r#"func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
  %0 = "tf.FancyNewOp"(%x) : (tensor<2xf32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}"#;
    let e = compile_src(unsupported).err().unwrap().to_string();
    assert!(
        e.contains("t.mlir:2:8: tf.FancyNewOp (tensor '@main/op#0:result#0'): op not supported by the interpreter"),
        "{e}"
    );
    let bad_attr = r#"func.func @main(%x: tensor<1x4x4x1xf32>, %f: tensor<1x1x1x1xf32>) -> tensor<1x4x4x1xf32> {
  %0 = "tf.Conv2D"(%x, %f) <{data_format = "NCHW", padding = "SAME", strides = [1, 1, 1, 1]}> : (tensor<1x4x4x1xf32>, tensor<1x1x1x1xf32>) -> tensor<1x4x4x1xf32>
  return %0 : tensor<1x4x4x1xf32>
}"#;
    let e = compile_src(bad_attr).err().unwrap().to_string();
    assert!(
        e.contains("tf.Conv2D") && e.contains("data_format = \"NCHW\" is not supported"),
        "{e}"
    );
    let p = compile_src(
        r#"func.func @main(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = "tf.Relu"(%x) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}"#,
    )
    .unwrap();
    let e = p.run(&[f32t(&[3, 2], vec![0.0; 6])]).unwrap_err().to_string();
    assert_eq!(
        e,
        "input '@main/arg#0': expected tensor<2x3xf32>, got f32 of shape [3, 2]"
    );
    let e = p
        .run(&[Tensor::I32(ArrayD::zeros(IxDyn(&[2, 3])))])
        .unwrap_err()
        .to_string();
    assert!(e.contains("got i32 of shape [2, 3]"), "{e}");
    let e = p.run(&[]).unwrap_err().to_string();
    assert_eq!(e, "the function takes 1 inputs, got 0");
    // a kernel failure at run time names the op and its location
    let p = compile_src(
        r#"func.func @main(%x: tensor<?xf32>, %s: tensor<2xi32>) -> tensor<?x?xf32> {
  %0 = "tf.Reshape"(%x, %s) : (tensor<?xf32>, tensor<2xi32>) -> tensor<?x?xf32>
  return %0 : tensor<?x?xf32>
}"#,
    )
    .unwrap();
    let e = p
        .run(&[
            f32t(&[5], vec![0.0; 5]),
            Tensor::I32(ArrayD::from_shape_vec(IxDyn(&[2]), vec![2, 2]).unwrap()),
        ])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("t.mlir:2:8: tf.Reshape (tensor '@main/op#0:result#0') failed: cannot reshape [5]"),
        "{e}"
    );
}

#[test]
fn data_binding_errors_are_clear() {
    let dir = tempfile::tempdir().unwrap();
    let p = compile_src(
        r#"func.func @main(%x: tensor<1x4xf32>) -> tensor<1x4xf32> {
  return %x : tensor<1x4xf32>
}"#,
    )
    .unwrap();
    let write = |name: &str, arrays: Vec<(&str, ArrayD<f32>)>| {
        let path = dir.path().join(name);
        let mut w = ndarray_npy::NpzWriter::new(std::fs::File::create(&path).unwrap());
        for (n, a) in arrays {
            w.add_array(n, &a).unwrap();
        }
        w.finish().unwrap();
        path
    };
    let ok = write("ok.npz", vec![("x", ArrayD::zeros(IxDyn(&[3, 4])))]);
    let b = bind(&Dataset::open(&ok).unwrap(), &p.inputs, &[]).unwrap();
    assert_eq!((b.samples, b.sample(1).unwrap()[0].shape().to_vec()), (3, vec![1, 4]));
    let wrong = write("wrong.npz", vec![("x", ArrayD::zeros(IxDyn(&[3, 5])))]);
    let e = bind(&Dataset::open(&wrong).unwrap(), &p.inputs, &[])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("wrong.npz: no array for input '@main/arg#0' (tensor<1x4xf32>); arrays: x f32[3, 5]"),
        "{e}"
    );
    let e = bind(
        &Dataset::open(&wrong).unwrap(),
        &p.inputs,
        &[("@main/arg#0".into(), "x".into())],
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("array 'x' for input '@main/arg#0': expected tensor<1x4xf32> per sample, got f32 of shape [5]"),
        "{e}"
    );
    let two = write(
        "two.npz",
        vec![
            ("a", ArrayD::zeros(IxDyn(&[3, 4]))),
            ("b", ArrayD::zeros(IxDyn(&[3, 4]))),
        ],
    );
    let e = bind(&Dataset::open(&two).unwrap(), &p.inputs, &[])
        .unwrap_err()
        .to_string();
    assert!(e.contains("could take any of a, b"), "{e}");
    let mut nan = ArrayD::zeros(IxDyn(&[2, 4]));
    nan[[1, 2]] = f32::NAN;
    let nanf = write("nan.npz", vec![("x", nan)]);
    let b = bind(&Dataset::open(&nanf).unwrap(), &p.inputs, &[]).unwrap();
    assert!(b.sample(0).is_ok());
    assert!(b
        .sample(1)
        .unwrap_err()
        .to_string()
        .contains("nan.npz: array 'x', sample 1: 1 non-finite value(s)"));
    let empty = write("empty.npz", vec![("x", ArrayD::zeros(IxDyn(&[0, 4])))]);
    assert!(bind(&Dataset::open(&empty).unwrap(), &p.inputs, &[])
        .unwrap_err()
        .to_string()
        .contains("no samples"));
    assert!(Dataset::open(&dir.path().join("missing.npz"))
        .unwrap_err()
        .to_string()
        .contains("missing.npz: cannot read"));
    std::fs::write(dir.path().join("junk.npz"), b"not a zip").unwrap();
    assert!(Dataset::open(&dir.path().join("junk.npz"))
        .unwrap_err()
        .to_string()
        .contains("junk.npz: cannot read: not an .npz file"));
}

#[test]
fn prepared_mobilenet_with_folded_batchnorm_keeps_tensorflow_outputs() {
    let ctx = quantir::ir::new_context();
    let text = common::model_text(&common::data("mobilenet_v2_035.mlir.gz"));
    let m = quantir::ir::load_bytes(&ctx, &text, Path::new("mobilenet.mlir")).unwrap();
    let reports = quantir::quantize::prepare(&m).unwrap();
    let folded = reports
        .iter()
        .find(|(n, _)| n == "fold-batchnorm")
        .unwrap()
        .1
        .get(&quantir::passes::Change::ScalesFolded);
    assert_eq!(folded, 52, "every batch norm of MobileNet v2 is folded");
    let p = Program::compile(&m, None).unwrap();
    let d = Dataset::open(&common::data("mobilenet_test.npz")).unwrap();
    let b = bind(&d, &p.inputs, &[]).unwrap();
    let idx: Vec<usize> = (0..b.samples).collect();
    let outs = run_samples(
        &p,
        &b,
        &idx,
        2,
        &Default::default(),
        true,
        &mut |_, _, _| Ok(()),
        "test",
    )
    .unwrap();
    let got = stack_outputs(&outs, true).unwrap();
    let want = reference("mobilenet_v2_035_test_outputs.npz");
    let d = max_abs_diff(got[0].as_f32().unwrap(), &want);
    assert!(d <= 1e-4, "max |folded − TF| = {d}");
    assert_eq!(argmax_rows(got[0].as_f32().unwrap()), argmax_rows(&want));
}

#[test]
fn fused_epilogues_give_the_same_bits_as_the_separate_ops() {
    // watching every value forces the unfused path; watching none lets conv → mul → add → relu6
    // run as one step
    let ctx = quantir::ir::new_context();
    let text = common::model_text(&common::data("mobilenet_v2_035.mlir.gz"));
    let m = quantir::ir::load_bytes(&ctx, &text, Path::new("mobilenet.mlir")).unwrap();
    let p = Program::compile(&m, None).unwrap();
    let d = Dataset::open(&common::data("mobilenet_test.npz")).unwrap();
    let b = bind(&d, &p.inputs, &[]).unwrap();
    let x = b.sample(3).unwrap();
    let all: Vec<String> = p.values.iter().filter(|v| !v.constant).map(|v| v.key.clone()).collect();
    let mut seen = 0;
    let unfused = p
        .run_observed(&x, &p.watch(&all).unwrap(), &mut |_, _| {
            seen += 1;
            Ok(())
        })
        .unwrap();
    let fused = p.run(&x).unwrap();
    assert!(seen > 200);
    assert!(fused[0].bit_eq(&unfused[0]));
}

/// Every value of `p` watched (so none is handed over channels last, none fused) against
/// none watched: the outputs must be the same bits.
fn assert_hand_offs_change_no_bit(p: &Program, x: &[Tensor]) {
    let all: Vec<String> = p.values.iter().filter(|v| !v.constant).map(|v| v.key.clone()).collect();
    let nchw = p.run_observed(x, &p.watch(&all).unwrap(), &mut |_, _| Ok(())).unwrap();
    let handed = p.run(x).unwrap();
    assert_eq!(nchw.len(), handed.len());
    for (a, b) in nchw.iter().zip(&handed) {
        assert_eq!(a.shape(), b.shape());
        assert!(a.bit_eq(b), "{:?} vs {:?}", a.as_f32(), b.as_f32());
    }
}

/// The 1×4×9×7 NCHW input of the conv hand-off tests: values in [−2.5, 2.5] in a scrambled
/// order.
fn image_1x4x9x7() -> Tensor {
    f32t(
        &[1, 4, 9, 7],
        (0..252).map(|i| ((i * 7919 % 251) as f32 - 125.0) / 50.0).collect(),
    )
}

/// An ONNX conv filter `%{name}` of `dims` (OIHW) made of sines, as MLIR lines: a flat
/// constant reshaped (so that it is folded, as exporters' weights are).
fn filter_src(name: &str, dims: [usize; 4], seed: f32) -> String {
    let n: usize = dims.iter().product();
    let v: Vec<String> = (0..n)
        .map(|i| format!("{:.4}", (i as f32 * 0.37 + seed).sin()))
        .collect();
    let [o, i, h, w] = dims;
    format!(
        r#"    %{name}_w = "arith.constant"() {{value = dense<[{v}]> : tensor<{n}xf32>}} : () -> tensor<{n}xf32>
    %{name}_s = "arith.constant"() {{value = dense<[{o}, {i}, {h}, {w}]> : tensor<4xi64>}} : () -> tensor<4xi64>
    %{name} = "onnx.Reshape"(%{name}_w, %{name}_s) : (tensor<{n}xf32>, tensor<4xi64>) -> tensor<{o}x{i}x{h}x{w}xf32>
"#,
        v = v.join(", ")
    )
}

#[test]
fn values_handed_channels_last_between_onnx_convs_give_the_same_bits() {
    // the ONNX MobileNet: NHWC input → Transpose → Conv, Conv → Pad → depthwise Conv, 1×1
    // convs reading and writing NHWC through the GEMM's strides
    let ctx = quantir::ir::new_context();
    let m = quantir::formats::model::load(&ctx, &common::data("mobilenet_v2_035.onnx")).unwrap();
    let p = Program::compile(&m, None).unwrap();
    let d = Dataset::open(&common::data("mobilenet_test.npz")).unwrap();
    let b = bind(&d, &p.inputs, &[]).unwrap();
    assert_hand_offs_change_no_bit(&p, &b.sample(5).unwrap());

    // reflect and constant pads, a grouped conv, strides, a transpose between convs with an
    // odd permutation, and a value with two users that both take it channels last
    let src = format!(
        r#"module {{
  func.func @main(%x: tensor<1x4x9x7xf32>) -> (tensor<1x6x5x4xf32>, tensor<1x4x9x7xf32>) {{
{k1}{k2}{k3}    %n = "onnx.NoValue"() {{value}} : () -> none
    %p1 = "arith.constant"() {{value = dense<[0, 0, 1, 1, 0, 0, 1, 1]> : tensor<8xi64>}} : () -> tensor<8xi64>
    %p2 = "arith.constant"() {{value = dense<[0, 0, 2, 0, 0, 0, 0, 1]> : tensor<8xi64>}} : () -> tensor<8xi64>
    %1 = "onnx.Conv"(%x, %k1, %n) {{group = 1 : si64, kernel_shape = [3, 3], pads = [1, 1, 1, 1], strides = [1, 1]}} : (tensor<1x4x9x7xf32>, tensor<4x4x3x3xf32>, none) -> tensor<1x4x9x7xf32>
    %2 = "onnx.Pad"(%1, %p1, %n, %n) {{mode = "reflect"}} : (tensor<1x4x9x7xf32>, tensor<8xi64>, none, none) -> tensor<1x4x11x9xf32>
    %3 = "onnx.Conv"(%2, %k2, %n) {{group = 4 : si64, kernel_shape = [3, 3], pads = [0, 0, 0, 0], strides = [2, 2]}} : (tensor<1x4x11x9xf32>, tensor<4x1x3x3xf32>, none) -> tensor<1x4x5x4xf32>
    %4 = "onnx.Pad"(%3, %p2, %n, %n) {{mode = "constant"}} : (tensor<1x4x5x4xf32>, tensor<8xi64>, none, none) -> tensor<1x4x7x5xf32>
    %5 = "onnx.Transpose"(%4) {{perm = [0, 1, 3, 2]}} : (tensor<1x4x7x5xf32>) -> tensor<1x4x5x7xf32>
    %6 = "onnx.Conv"(%5, %k3, %n) {{group = 1 : si64, kernel_shape = [1, 1], pads = [0, 0, 0, 0], strides = [1, 2]}} : (tensor<1x4x5x7xf32>, tensor<6x4x1x1xf32>, none) -> tensor<1x6x5x4xf32>
    %7 = "onnx.Conv"(%1, %k1, %n) {{group = 1 : si64, kernel_shape = [3, 3], pads = [1, 1, 1, 1], strides = [1, 1]}} : (tensor<1x4x9x7xf32>, tensor<4x4x3x3xf32>, none) -> tensor<1x4x9x7xf32>
    return %6, %7 : tensor<1x6x5x4xf32>, tensor<1x4x9x7xf32>
  }}
}}"#,
        k1 = filter_src("k1", [4, 4, 3, 3], 0.1),
        k2 = filter_src("k2", [4, 1, 3, 3], 1.3),
        k3 = filter_src("k3", [6, 4, 1, 1], 2.9),
    );
    let p = compile_src(&src).unwrap();
    assert_eq!(
        p.results_held_channels_last(),
        5,
        "%1 to %5 (%6 and %7 leave the function)"
    );
    let x = image_1x4x9x7();
    assert_hand_offs_change_no_bit(&p, &[x]);
}

/// Residual paths between convolutions stay channels last (`layout_plan`): an Add of two conv
/// results, a Relu and a scalar Mul after it, feeding a conv and a second Add, run on the NHWC
/// buffers, a global average pooling reads its conv's NHWC result, and so does an Add the
/// fused result of a conv (conv → Relu run as one step). An Add with a per-channel [1, C, 1, 1] operand, whose broadcast depends on the
/// layout, keeps its operands in NCHW. The bits are those of the run that watches everything
/// (where nothing is channels last), and of runs that watch one operand of an Add only (its
/// operands then differ in layout and the channels-last one is read back in NCHW order).
#[test]
fn residual_paths_held_channels_last_change_no_bit() {
    let src = format!(
        r#"module {{
  func.func @main(%x: tensor<1x4x9x7xf32>) -> (TRES, tensor<1x4x1x1xf32>, tensor<1x4x1x1xf32>, TRES) {{
{k1}{k3}    %n = "onnx.NoValue"() {{value}} : () -> none
    %two = "arith.constant"() {{value = dense<2.0> : tensor<1xf32>}} : () -> tensor<1xf32>
    %pc = "arith.constant"() {{value = dense<[[[0.5]], [[-1.0]], [[0.25]], [[3.0]]]> : tensor<4x1x1xf32>}} : () -> tensor<4x1x1xf32>
    %1 = "onnx.Conv"(%x, %k1, %n) {{group = 1 : si64, kernel_shape = [3, 3], pads = [1, 1, 1, 1]}} : (TRES, tensor<4x4x3x3xf32>, none) -> TRES
    %2 = "onnx.Conv"(%1, %k3, %n) {{group = 1 : si64, kernel_shape = [1, 1]}} : (TRES, tensor<4x4x1x1xf32>, none) -> TRES
    %3 = "onnx.Add"(%1, %2) : (TRES, TRES) -> TRES
    %4 = "onnx.Relu"(%3) : (TRES) -> TRES
    %5 = "onnx.Mul"(%4, %two) : (TRES, tensor<1xf32>) -> TRES
    %6 = "onnx.Conv"(%5, %k3, %n) {{group = 1 : si64, kernel_shape = [1, 1]}} : (TRES, tensor<4x4x1x1xf32>, none) -> TRES
    %7 = "onnx.Add"(%6, %5) : (TRES, TRES) -> TRES
    %8 = "onnx.Conv"(%7, %k1, %n) {{group = 1 : si64, kernel_shape = [3, 3], pads = [1, 1, 1, 1]}} : (TRES, tensor<4x4x3x3xf32>, none) -> TRES
    %9 = "onnx.Conv"(%7, %k3, %n) {{group = 1 : si64, kernel_shape = [1, 1]}} : (TRES, tensor<4x4x1x1xf32>, none) -> TRES
    %10 = "onnx.Add"(%9, %pc) : (TRES, tensor<4x1x1xf32>) -> TRES
    %11 = "onnx.Conv"(%10, %k1, %n) {{group = 1 : si64, kernel_shape = [3, 3], pads = [1, 1, 1, 1]}} : (TRES, tensor<4x4x3x3xf32>, none) -> TRES
    %12 = "onnx.GlobalAveragePool"(%11) : (TRES) -> tensor<1x4x1x1xf32>
    %13 = "onnx.Conv"(%x, %k3, %n) {{group = 1 : si64, kernel_shape = [1, 1]}} : (TRES, tensor<4x4x1x1xf32>, none) -> TRES
    %14 = "onnx.Relu"(%13) : (TRES) -> TRES
    %15 = "onnx.GlobalMaxPool"(%14) : (TRES) -> tensor<1x4x1x1xf32>
    %16 = "onnx.Conv"(%x, %k1, %n) {{group = 1 : si64, kernel_shape = [3, 3], pads = [1, 1, 1, 1]}} : (TRES, tensor<4x4x3x3xf32>, none) -> TRES
    %17 = "onnx.Relu"(%16) : (TRES) -> TRES
    %18 = "onnx.Add"(%17, %1) : (TRES, TRES) -> TRES
    %19 = "onnx.Conv"(%18, %k3, %n) {{group = 1 : si64, kernel_shape = [1, 1]}} : (TRES, tensor<4x4x1x1xf32>, none) -> TRES
    return %8, %12, %15, %19 : TRES, tensor<1x4x1x1xf32>, tensor<1x4x1x1xf32>, TRES
  }}
}}"#,
        k1 = filter_src("k1", [4, 4, 3, 3], 0.7),
        k3 = filter_src("k3", [4, 4, 1, 1], 2.1),
    )
    .replace("TRES", "tensor<1x4x9x7xf32>");
    let p = compile_src(&src).unwrap();
    // %1 … %7 (the Relu and Mul after the first Add included), %11 (read by the global
    // average pooling), %17 (a conv's fused result: its Relu applied in the conv) and the Add
    // %18 of it and %1; not %9 (its Add broadcasts a per-channel operand), %10, %14 (read by a
    // kernel without a channels-last form), nor the results
    assert_eq!(p.results_held_channels_last(), 10);
    let x = image_1x4x9x7();
    assert_hand_offs_change_no_bit(&p, &[x.clone()]);
    let plain = p.run(&[x.clone()]).unwrap();
    // the runtime values in order: %x, %1, %2, …
    let runtime: Vec<_> = p.values.iter().filter(|v| !v.constant).collect();
    let producers: Vec<&str> = runtime.iter().map(|v| v.producer.as_str()).collect();
    assert_eq!(
        producers[..8],
        [
            "argument",
            "onnx.Conv",
            "onnx.Conv",
            "onnx.Add",
            "onnx.Relu",
            "onnx.Mul",
            "onnx.Conv",
            "onnx.Add"
        ]
    );
    for watched in [2, 3, 6, 5, 11] {
        let w = p.watch(&[runtime[watched].key.clone()]).unwrap();
        let got = p.run_observed(&[x.clone()], &w, &mut |_, _| Ok(())).unwrap();
        for (a, b) in plain.iter().zip(&got) {
            assert!(a.bit_eq(b), "watching {watched}");
        }
    }
}

/// A zero Pad before a convolution is taken into the conv's own padding (`pad_fusion`): a
/// conv with pads of its own at stride 2 and a dilated depthwise conv take theirs; a non-zero
/// pad, a reflect pad, a 1×1 conv and a Pad with two readers run as they are. The results have
/// the bits of the run that watches every value (where no Pad is taken).
#[test]
fn zero_pads_taken_into_the_conv_after_them_change_no_bit() {
    let pad = |out: &str, pads: &str, value: &str, mode: &str| {
        format!(
            r#"    {out} = "onnx.Pad"(%x, {pads}, {value}, %n) {{mode = "{mode}"}} : (tensor<1x4x9x7xf32>, tensor<8xi64>, {vt}, none) -> TPAD"#,
            vt = if value == "%n" { "none" } else { "tensor<f32>" }
        )
    };
    let conv = |out: &str, x: &str, k: &str, kt: &str, attrs: &str, yt: &str| {
        format!(r#"    {out} = "onnx.Conv"({x}, {k}, %n) {{{attrs}}} : (TPAD, {kt}, none) -> {yt}"#)
    };
    let (k1, k2, k3) = ("tensor<4x4x3x3xf32>", "tensor<4x1x3x3xf32>", "tensor<4x4x1x1xf32>");
    let lines = [
        pad("%1", "%p", "%n", "constant"),
        conv(
            "%2",
            "%1",
            "%k1",
            k1,
            "group = 1 : si64, kernel_shape = [3, 3], pads = [1, 0, 0, 1], strides = [2, 2]",
            "tensor<1x4x6x5xf32>",
        ),
        pad("%3", "%p", "%n", "constant"),
        conv(
            "%4",
            "%3",
            "%k2",
            k2,
            "group = 4 : si64, kernel_shape = [3, 3], dilations = [1, 2], pads = [0, 0, 0, 0]",
            "tensor<1x4x9x5xf32>",
        ),
        pad("%5", "%q", "%half", "constant"),
        conv(
            "%6",
            "%5",
            "%k1",
            k1,
            "group = 1 : si64, kernel_shape = [3, 3], pads = [1, 1, 1, 1]",
            "TPAD",
        ),
        pad("%7", "%q", "%n", "reflect"),
        conv(
            "%8",
            "%7",
            "%k1",
            k1,
            "group = 1 : si64, kernel_shape = [3, 3], pads = [1, 1, 1, 1]",
            "TPAD",
        ),
        pad("%9", "%q", "%n", "constant"),
        conv(
            "%10",
            "%9",
            "%k3",
            k3,
            "group = 1 : si64, kernel_shape = [1, 1]",
            "TPAD",
        ),
        pad("%11", "%q", "%n", "constant"),
        conv(
            "%12",
            "%11",
            "%k1",
            k1,
            "group = 1 : si64, kernel_shape = [3, 3], pads = [1, 1, 1, 1]",
            "TPAD",
        ),
        r#"    %13 = "onnx.Add"(%12, %11) : (TPAD, TPAD) -> TPAD"#.to_string(),
    ];
    let src = format!(
        r#"module {{
  func.func @main(%x: tensor<1x4x9x7xf32>) -> (tensor<1x4x6x5xf32>, tensor<1x4x9x5xf32>, TPAD, TPAD, TPAD, TPAD) {{
{k1}{k2}{k3}    %n = "onnx.NoValue"() {{value}} : () -> none
    %half = "arith.constant"() {{value = dense<0.5> : tensor<f32>}} : () -> tensor<f32>
    %p = "arith.constant"() {{value = dense<[0, 0, 1, 2, 0, 0, 1, 0]> : tensor<8xi64>}} : () -> tensor<8xi64>
    %q = "arith.constant"() {{value = dense<[0, 0, 1, 1, 0, 0, 1, 1]> : tensor<8xi64>}} : () -> tensor<8xi64>
{body}
    return %2, %4, %6, %8, %10, %13 : tensor<1x4x6x5xf32>, tensor<1x4x9x5xf32>, TPAD, TPAD, TPAD, TPAD
  }}
}}"#,
        k1 = filter_src("k1", [4, 4, 3, 3], 0.1),
        k2 = filter_src("k2", [4, 1, 3, 3], 1.3),
        k3 = filter_src("k3", [4, 4, 1, 1], 2.9),
        body = lines.join("\n"),
    )
    .replace("TPAD", "tensor<1x4x11x9xf32>");
    let p = compile_src(&src).unwrap();
    assert_eq!(p.pads_taken(), 2);
    let x = image_1x4x9x7();
    assert_hand_offs_change_no_bit(&p, &[x]);
}

/// TensorFlow's zero Pad before a VALID convolution (Keras' ZeroPadding2D before a stride-2
/// conv) is taken into the conv's padding as ONNX's is: a stride-2 Conv2D and a depthwise conv
/// take theirs; PadV2 of a non-zero value, a Pad of the batch axis and a SAME conv run as they
/// are. The results have the bits of the run that watches every value.
#[test]
fn tf_zero_pads_taken_into_the_conv_after_them_change_no_bit() {
    let consts = |name: &str, dims: [usize; 4], seed: f32| {
        let n: usize = dims.iter().product();
        let v: Vec<String> = (0..n)
            .map(|i| format!("{:.4}", (i as f32 * 0.37 + seed).sin()))
            .collect();
        let t = format!("tensor<{}x{}x{}x{}xf32>", dims[0], dims[1], dims[2], dims[3]);
        format!(
            "    %{name} = \"tf.Const\"() {{value = dense<[{}]> : tensor<{n}xf32>}} : () -> tensor<{n}xf32>\n    %{name}s = \"tf.Const\"() {{value = dense<[{}, {}, {}, {}]> : tensor<4xi64>}} : () -> tensor<4xi64>\n    %{name}r = \"tf.Reshape\"(%{name}, %{name}s) : (tensor<{n}xf32>, tensor<4xi64>) -> {t}\n",
            v.join(", "),
            dims[0],
            dims[1],
            dims[2],
            dims[3]
        )
    };
    let src = format!(
        r#"module {{
  func.func @main(%x: tensor<1x9x7x4xf32>) -> (tensor<1x5x3x4xf32>, tensor<1x5x4x4xf32>, tensor<1x11x9x4xf32>, tensor<1x11x9x4xf32>, tensor<3x9x7x4xf32>) {{
{k}{d}    %p = "tf.Const"() {{value = dense<[[0, 0], [1, 1], [0, 1], [0, 0]]> : tensor<4x2xi32>}} : () -> tensor<4x2xi32>
    %q = "tf.Const"() {{value = dense<[[0, 0], [1, 1], [1, 1], [0, 0]]> : tensor<4x2xi32>}} : () -> tensor<4x2xi32>
    %b = "tf.Const"() {{value = dense<[[1, 1], [1, 1], [1, 1], [0, 0]]> : tensor<4x2xi32>}} : () -> tensor<4x2xi32>
    %half = "tf.Const"() {{value = dense<0.5> : tensor<f32>}} : () -> tensor<f32>
    %1 = "tf.Pad"(%x, %p) : (tensor<1x9x7x4xf32>, tensor<4x2xi32>) -> tensor<1x11x8x4xf32>
    %2 = "tf.Conv2D"(%1, %kr) {{data_format = "NHWC", dilations = [1, 1, 1, 1], padding = "VALID", strides = [1, 2, 2, 1]}} : (tensor<1x11x8x4xf32>, tensor<3x3x4x4xf32>) -> tensor<1x5x3x4xf32>
    %3 = "tf.Pad"(%x, %q) : (tensor<1x9x7x4xf32>, tensor<4x2xi32>) -> tensor<1x11x9x4xf32>
    %4 = "tf.DepthwiseConv2dNative"(%3, %dr) {{data_format = "NHWC", dilations = [1, 1, 1, 1], padding = "VALID", strides = [1, 2, 2, 1]}} : (tensor<1x11x9x4xf32>, tensor<3x3x4x1xf32>) -> tensor<1x5x4x4xf32>
    %5 = "tf.PadV2"(%x, %q, %half) : (tensor<1x9x7x4xf32>, tensor<4x2xi32>, tensor<f32>) -> tensor<1x11x9x4xf32>
    %6 = "tf.Conv2D"(%5, %kr) {{data_format = "NHWC", dilations = [1, 1, 1, 1], padding = "SAME", strides = [1, 1, 1, 1]}} : (tensor<1x11x9x4xf32>, tensor<3x3x4x4xf32>) -> tensor<1x11x9x4xf32>
    %7 = "tf.Pad"(%x, %q) : (tensor<1x9x7x4xf32>, tensor<4x2xi32>) -> tensor<1x11x9x4xf32>
    %8 = "tf.Conv2D"(%7, %kr) {{data_format = "NHWC", dilations = [1, 1, 1, 1], padding = "SAME", strides = [1, 1, 1, 1]}} : (tensor<1x11x9x4xf32>, tensor<3x3x4x4xf32>) -> tensor<1x11x9x4xf32>
    %9 = "tf.Pad"(%x, %b) : (tensor<1x9x7x4xf32>, tensor<4x2xi32>) -> tensor<3x11x9x4xf32>
    %10 = "tf.DepthwiseConv2dNative"(%9, %dr) {{data_format = "NHWC", dilations = [1, 1, 1, 1], padding = "VALID", strides = [1, 1, 1, 1]}} : (tensor<3x11x9x4xf32>, tensor<3x3x4x1xf32>) -> tensor<3x9x7x4xf32>
    return %2, %4, %6, %8, %10 : tensor<1x5x3x4xf32>, tensor<1x5x4x4xf32>, tensor<1x11x9x4xf32>, tensor<1x11x9x4xf32>, tensor<3x9x7x4xf32>
  }}
}}"#,
        k = consts("k", [3, 3, 4, 4], 0.1),
        d = consts("d", [3, 3, 4, 1], 1.3),
    );
    let p = compile_src(&src).unwrap();
    assert_eq!(p.pads_taken(), 2);
    let x = f32t(
        &[1, 9, 7, 4],
        (0..252).map(|i| ((i * 7919 % 251) as f32 - 125.0) / 50.0).collect(),
    );
    assert_hand_offs_change_no_bit(&p, &[x]);
}

/// Type inference's shapes-only run (a program compiled for shapes: large weights as zeros,
/// convolutions and matrix products hand over zeros of their result shape instead of
/// computing) sees every value with the dtype and shape a full run computes: ONNX and
/// TF-dialect convolutions (1×1, depthwise, strided) and matrix products.
#[test]
fn a_shapes_only_run_sees_the_shapes_a_full_run_computes() {
    let cases = [
        ("mobilenet_v2_035.onnx", "mobilenet_test.npz"),
        ("mobilenet_v2_035.mlir.gz", "mobilenet_test.npz"),
        ("digits_mlp.onnx", "digits_mlp_test.npz"),
        ("digits_mlp.mlir", "digits_mlp_test.npz"),
    ];
    for (model, data) in cases {
        let ctx = quantir::ir::new_context();
        let m = match model.ends_with(".onnx") {
            true => quantir::formats::model::load(&ctx, &common::data(model)).unwrap(),
            false => {
                quantir::ir::load_bytes(&ctx, &common::model_text(&common::data(model)), Path::new(model)).unwrap()
            }
        };
        let p = Program::compile(&m, None).unwrap();
        let d = Dataset::open(&common::data(data)).unwrap();
        let x = bind(&d, &p.inputs, &[]).unwrap().sample(0).unwrap();
        let all: Vec<String> = p.values.iter().filter(|v| !v.constant).map(|v| v.key.clone()).collect();
        let seen = |p: &Program, watch: &quantir::interp::Watch| {
            let mut types = std::collections::BTreeMap::new();
            p.run_observed(&x, watch, &mut |k, t| {
                types.insert(k.to_string(), (t.dtype(), t.shape().to_vec()));
                Ok(())
            })
            .unwrap();
            types
        };
        let full = seen(&p, &p.watch(&all).unwrap());
        assert!(full.len() >= 8, "{model}: {} values", full.len());
        // compiled for shapes: the weights only convolutions and matrix products read are zeros
        let ps = Program::compile_for_shapes(&m).unwrap();
        let zeroed = ps
            .constant_values()
            .filter(|(k, t)| {
                t.len() >= 4096
                    && t.as_f32().is_some_and(|a| a.iter().all(|&v| v == 0.0))
                    && p.constant_values().any(|(k2, t2)| k2 == *k && !t2.bit_eq(t))
            })
            .count();
        // (the TF-dialect exports read their weights through tf.Identity: kept)
        assert!(
            zeroed > 0 || !model.ends_with(".onnx"),
            "{model}: no weight left unread"
        );
        assert_eq!(
            seen(&ps, &ps.watch(&all).unwrap()),
            full,
            "{model}, compiled for shapes"
        );
    }
}

/// The transformer ops that tell their shapes without computing them (layer norm, softmax
/// over the last axis and over another, erf, broadcasting arithmetic) hand a shapes-only run
/// the dtypes and shapes a full run computes; on operands that do not fit, the run's own
/// error comes out (the kernels are run, not skipped).
#[test]
fn transformer_ops_tell_the_shapes_they_compute() {
    let module = |scale_len: usize| {
        format!(
            r#"module {{
  func.func @main(%x: tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>) {{
    %g = "arith.constant"() {{value = dense<1.5> : tensor<{scale_len}xf32>}} : () -> tensor<{scale_len}xf32>
    %b = "arith.constant"() {{value = dense<0.25> : tensor<8xf32>}} : () -> tensor<8xf32>
    %c = "arith.constant"() {{value = dense<0.5> : tensor<4x1xf32>}} : () -> tensor<4x1xf32>
    %h = "onnx.LayerNormalization"(%x, %g, %b) {{axis = -1 : i64, epsilon = 1.0E-5 : f32}} : (tensor<2x4x8xf32>, tensor<{scale_len}xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
    %e = "onnx.Erf"(%h) : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    %m = "onnx.Mul"(%e, %c) : (tensor<2x4x8xf32>, tensor<4x1xf32>) -> tensor<2x4x8xf32>
    %s = "onnx.Softmax"(%m) {{axis = -1 : i64}} : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    %t = "onnx.Softmax"(%m) {{axis = 1 : i64}} : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    return %s, %t : tensor<2x4x8xf32>, tensor<2x4x8xf32>
  }}
}}"#
        )
    };
    let x = vec![Tensor::F32(ndarray::ArrayD::from_shape_fn(
        ndarray::IxDyn(&[2, 4, 8]),
        |i| (i[0] * 32 + i[1] * 8 + i[2]) as f32 * 0.1 - 3.0,
    ))];
    let ctx = quantir::ir::new_context();
    let m = quantir::ir::load_bytes(&ctx, module(8).as_bytes(), Path::new("t.mlir")).unwrap();
    let (p, ps) = (
        Program::compile(&m, None).unwrap(),
        Program::compile_for_shapes(&m).unwrap(),
    );
    let all: Vec<String> = p.values.iter().filter(|v| !v.constant).map(|v| v.key.clone()).collect();
    let seen = |p: &Program| {
        let mut types = std::collections::BTreeMap::new();
        p.run_observed(&x, &p.watch(&all).unwrap(), &mut |k, t| {
            types.insert(k.to_string(), (t.dtype(), t.shape().to_vec()));
            Ok(())
        })
        .map(|_| types)
    };
    let full = seen(&p).unwrap();
    assert_eq!(full.len(), 6, "{full:?}");
    assert_eq!(seen(&ps).unwrap(), full);
    // a norm scale that does not broadcast: the shapes-only run fails as the full one does
    let bad = quantir::ir::load_bytes(&ctx, module(3).as_bytes(), Path::new("t.mlir")).unwrap();
    let (p, ps) = (
        Program::compile(&bad, None).unwrap(),
        Program::compile_for_shapes(&bad).unwrap(),
    );
    let (e1, e2) = (seen(&p).unwrap_err().to_string(), seen(&ps).unwrap_err().to_string());
    assert_eq!(e1, e2);
}
