//! Rewriter passes, tested like MLIR's lit tests: a small module in, assertions on the ops,
//! operands and types out; every output must verify and be accepted by mlir-opt-22.

mod common;

use melior::ir::operation::OperationLike;
use melior::ir::{Module, OperationRef, ValueLike};
use quantir::calibration::{Method, NonFinitePolicy, StatsFile};
use quantir::ir::graph::{body_ops, defining_op, find_function, op_name};
use quantir::ir::ops::is_constant_op;
use quantir::passes::{find, PassOptions, PassReport};
use quantir::quantize::{model_hash, prepare, QuantConfig};
use std::path::Path;

fn load<'c>(ctx: &'c melior::Context, src: &str) -> Module<'c> {
    quantir::ir::load_bytes(ctx, src.as_bytes(), Path::new("t.mlir")).unwrap()
}

fn run(m: &Module, pass: &str, opts: &PassOptions) -> PassReport {
    let r = (find(pass).unwrap().run)(m, opts).unwrap();
    quantir::ir::io::verify(m).unwrap();
    r
}

fn ops<'c, 'a>(m: &'a Module<'c>) -> Vec<OperationRef<'c, 'a>> {
    body_ops(find_function(m, None).unwrap())
}

fn count(m: &Module, name: &str) -> usize {
    ops(m).iter().filter(|o| op_name(*o) == name).count()
}

/// The op named `name` (the n-th one).
fn nth<'c, 'a>(m: &'a Module<'c>, name: &str, n: usize) -> OperationRef<'c, 'a> {
    ops(m).into_iter().filter(|o| op_name(o) == name).nth(n).unwrap()
}

/// The defining op of operand `i`, as a raw pointer for identity checks.
fn def_of(op: OperationRef, i: usize) -> usize {
    defining_op(op.operand(i).unwrap())
        .map(|d| d.to_raw().ptr as usize)
        .unwrap_or(0)
}

fn uses_of_def(op: OperationRef, i: usize) -> usize {
    let d = defining_op(op.operand(i).unwrap()).unwrap();
    quantir::ir::graph::uses(d.result(0).unwrap().into()).len()
}

fn mlir_opt_ok(m: &Module) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("out.mlir");
    quantir::ir::save(m, &p, &[]).unwrap();
    let (ok, err) = common::mlir_opt_accepts(&p);
    assert!(ok, "{err}");
}

fn none() -> PassOptions {
    PassOptions::default()
}

// --- duplicate-shape-constants: TensorFlow's lit test, case by case (notes §1.4) ---

#[test]
fn dup_1_const_for_shape_operand_at_idx_1() {
    let ctx = quantir::ir::new_context();
    let m = load(
        &ctx,
        r#"func.func @f(%arg0: tensor<2xf32>) -> (tensor<2x1xf32>, tensor<i32>) {
  %cst = "tf.Const"() {value = dense<2> : tensor<i32>} : () -> tensor<i32>
  %0 = "tf.ExpandDims"(%arg0, %cst) : (tensor<2xf32>, tensor<i32>) -> tensor<2x1xf32>
  %1 = "tf.AddV2"(%cst, %cst) : (tensor<i32>, tensor<i32>) -> tensor<i32>
  return %0, %1 : tensor<2x1xf32>, tensor<i32>
}"#,
    );
    run(&m, "duplicate-shape-constants", &none());
    assert_eq!(count(&m, "tf.Const"), 2);
    let (e, a) = (nth(&m, "tf.ExpandDims", 0), nth(&m, "tf.AddV2", 0));
    assert_ne!(def_of(e, 1), def_of(a, 0));
    assert_eq!(def_of(a, 0), def_of(a, 1));
    assert_eq!(uses_of_def(e, 1), 1);
    mlir_opt_ok(&m);
}

#[test]
fn dup_2_const_at_idx_2_and_3_variadic_concat() {
    let ctx = quantir::ir::new_context();
    let m = load(
        &ctx,
        r#"func.func @f(%a: tensor<2x2xf32>, %i: tensor<2xi32>) -> (tensor<2x2xf32>, tensor<1xi32>, tensor<2x8xf32>, tensor<i32>) {
  %cst = "tf.Const"() {value = dense<[1]> : tensor<1xi32>} : () -> tensor<1xi32>
  %0 = "tf.GatherV2"(%a, %i, %cst) {batch_dims = 1 : i64} : (tensor<2x2xf32>, tensor<2xi32>, tensor<1xi32>) -> tensor<2x2xf32>
  %1 = "tf.AddV2"(%cst, %cst) : (tensor<1xi32>, tensor<1xi32>) -> tensor<1xi32>
  %axis = "tf.Const"() {value = dense<1> : tensor<i32>} : () -> tensor<i32>
  %2 = "tf.ConcatV2"(%a, %a, %a, %a, %axis) : (tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>, tensor<i32>) -> tensor<2x8xf32>
  %3 = "tf.AddV2"(%axis, %axis) : (tensor<i32>, tensor<i32>) -> tensor<i32>
  return %0, %1, %2, %3 : tensor<2x2xf32>, tensor<1xi32>, tensor<2x8xf32>, tensor<i32>
}"#,
    );
    run(&m, "duplicate-shape-constants", &none());
    assert_eq!(count(&m, "tf.Const"), 4);
    let (g, c) = (nth(&m, "tf.GatherV2", 0), nth(&m, "tf.ConcatV2", 0));
    assert_eq!((uses_of_def(g, 2), uses_of_def(c, 4)), (1, 1));
    assert_eq!(uses_of_def(nth(&m, "tf.AddV2", 1), 0), 2);
    mlir_opt_ok(&m);
}

#[test]
fn dup_4_multiple_shape_operands() {
    let ctx = quantir::ir::new_context();
    let m = load(
        &ctx,
        r#"func.func @f(%x: tensor<1x2x3x3xf32>, %w: tensor<3x3x3xf32>) -> (tensor<1x2x3x3xf32>, tensor<3xi32>, tensor<3x2xi32>, tensor<3xi32>, tensor<3xi32>, tensor<i32>) {
  %s = "tf.Const"() {value = dense<[3, 1, 1]> : tensor<3xi32>} : () -> tensor<3xi32>
  %p = "tf.Const"() {value = dense<0> : tensor<3x2xi32>} : () -> tensor<3x2xi32>
  %l = "tf.Const"() {value = dense<[4, 1, 1]> : tensor<3xi32>} : () -> tensor<3xi32>
  %r = "tf.Const"() {value = dense<1> : tensor<3xi32>} : () -> tensor<3xi32>
  %g = "tf.Const"() {value = dense<1> : tensor<i32>} : () -> tensor<i32>
  %0 = "tf.XlaConvV2"(%x, %w, %s, %p, %l, %r, %g) : (tensor<1x2x3x3xf32>, tensor<3x3x3xf32>, tensor<3xi32>, tensor<3x2xi32>, tensor<3xi32>, tensor<3xi32>, tensor<i32>) -> tensor<1x2x3x3xf32>
  %1 = "tf.AddV2"(%s, %s) : (tensor<3xi32>, tensor<3xi32>) -> tensor<3xi32>
  %2 = "tf.AddV2"(%p, %p) : (tensor<3x2xi32>, tensor<3x2xi32>) -> tensor<3x2xi32>
  %3 = "tf.AddV2"(%l, %l) : (tensor<3xi32>, tensor<3xi32>) -> tensor<3xi32>
  %4 = "tf.AddV2"(%r, %r) : (tensor<3xi32>, tensor<3xi32>) -> tensor<3xi32>
  %5 = "tf.AddV2"(%g, %g) : (tensor<i32>, tensor<i32>) -> tensor<i32>
  return %0, %1, %2, %3, %4, %5 : tensor<1x2x3x3xf32>, tensor<3xi32>, tensor<3x2xi32>, tensor<3xi32>, tensor<3xi32>, tensor<i32>
}"#,
    );
    let r = run(&m, "duplicate-shape-constants", &none());
    assert_eq!(count(&m, "tf.Const"), 10);
    assert_eq!(r.get(&quantir::passes::Change::ConstantsDuplicated), 5);
    let conv = nth(&m, "tf.XlaConvV2", 0);
    for i in 2..=6 {
        assert_eq!(uses_of_def(conv, i), 1, "operand {i}");
    }
}

#[test]
fn dup_5_block_argument_warns_and_changes_nothing() {
    let ctx = quantir::ir::new_context();
    let src = r#"func.func @f(%arg0: tensor<2x2xf32>, %arg1: tensor<1xi32>) -> tensor<2xf32> {
  %0 = "tf.Mean"(%arg0, %arg1) : (tensor<2x2xf32>, tensor<1xi32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}"#;
    let m = load(&ctx, src);
    let before = quantir::ir::print_module(&m);
    let r = run(&m, "duplicate-shape-constants", &none());
    assert_eq!(quantir::ir::print_module(&m), before);
    assert_eq!(r.warnings.len(), 1);
    assert!(
        r.warnings[0]
            .ends_with("tf.Mean: Operand idx (zero-based): 1 does not have a defining op and cannot be duplicated."),
        "{:?}",
        r.warnings
    );
}

#[test]
fn dup_6_7_single_use_untouched_shared_recursively_duplicated() {
    let ctx = quantir::ir::new_context();
    let single = r#"func.func @f(%x: tensor<2x2xf32>) -> tensor<2xf32> {
  %c0 = "tf.Const"() {value = dense<0> : tensor<i32>} : () -> tensor<i32>
  %c1 = "tf.Const"() {value = dense<1> : tensor<i32>} : () -> tensor<i32>
  %s = "tf.AddV2"(%c0, %c1) : (tensor<i32>, tensor<i32>) -> tensor<i32>
  %0 = "tf.Max"(%x, %s) : (tensor<2x2xf32>, tensor<i32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}"#;
    let m = load(&ctx, single);
    run(&m, "duplicate-shape-constants", &none());
    assert_eq!(count(&m, "tf.Const"), 2);
    let shared = r#"func.func @f(%x: tensor<2x2xf32>) -> (tensor<2xf32>, tensor<i32>) {
  %c0 = "tf.Const"() {value = dense<0> : tensor<i32>} : () -> tensor<i32>
  %c1 = "tf.Const"() {value = dense<1> : tensor<i32>} : () -> tensor<i32>
  %s = "tf.AddV2"(%c0, %c1) : (tensor<i32>, tensor<i32>) -> tensor<i32>
  %0 = "tf.Max"(%x, %s) : (tensor<2x2xf32>, tensor<i32>) -> tensor<2xf32>
  %1 = "tf.Mul"(%c0, %c1) : (tensor<i32>, tensor<i32>) -> tensor<i32>
  return %0, %1 : tensor<2xf32>, tensor<i32>
}"#;
    let m = load(&ctx, shared);
    run(&m, "duplicate-shape-constants", &none());
    assert_eq!(count(&m, "tf.Const"), 4);
    let add = nth(&m, "tf.AddV2", 0);
    assert_eq!((uses_of_def(add, 0), uses_of_def(add, 1)), (1, 1));
    assert_eq!(count(&m, "tf.AddV2"), 1, "intermediate ops are not cloned");
}

#[test]
fn dup_8_stops_at_shape_ops() {
    let ctx = quantir::ir::new_context();
    let m = load(
        &ctx,
        r#"func.func @f() -> (tensor<1x3xf32>, tensor<1x3xf32>) {
  %c = "tf.Const"() {value = dense<1.0> : tensor<1x3xf32>} : () -> tensor<1x3xf32>
  %c0 = "tf.Const"() {value = dense<2.0> : tensor<f32>} : () -> tensor<f32>
  %s = "tf.Shape"(%c) : (tensor<1x3xf32>) -> tensor<2xi32>
  %0 = "tf.Fill"(%s, %c0) : (tensor<2xi32>, tensor<f32>) -> tensor<1x3xf32>
  %1 = "tf.Mul"(%c, %c) : (tensor<1x3xf32>, tensor<1x3xf32>) -> tensor<1x3xf32>
  return %0, %1 : tensor<1x3xf32>, tensor<1x3xf32>
}"#,
    );
    run(&m, "duplicate-shape-constants", &none());
    assert_eq!(count(&m, "tf.Const"), 2);
}

#[test]
fn dup_beyond_tensorflow_arith_split_chain_and_idempotence() {
    let ctx = quantir::ir::new_context();
    let m = load(
        &ctx,
        r#"func.func @f(%x: tensor<4x6xf32>) -> (tensor<6x4xf32>, tensor<2xi32>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<i32>, tensor<24xf32>) {
  %perm = arith.constant dense<[1, 0]> : tensor<2xi32>
  %0 = "tf.Transpose"(%x, %perm) : (tensor<4x6xf32>, tensor<2xi32>) -> tensor<6x4xf32>
  %1 = "tf.AddV2"(%perm, %perm) : (tensor<2xi32>, tensor<2xi32>) -> tensor<2xi32>
  %ax = "tf.Const"() {value = dense<1> : tensor<i32>} : () -> tensor<i32>
  %2:2 = "tf.Split"(%ax, %x) {num_split = 2 : i64} : (tensor<i32>, tensor<4x6xf32>) -> (tensor<4x3xf32>, tensor<4x3xf32>)
  %3 = "tf.Neg"(%ax) : (tensor<i32>) -> tensor<i32>
  %n = "tf.Const"() {value = dense<-1> : tensor<1xi32>} : () -> tensor<1xi32>
  %a = "tf.Abs"(%n) : (tensor<1xi32>) -> tensor<1xi32>
  %b = "tf.Neg"(%a) : (tensor<1xi32>) -> tensor<1xi32>
  %4 = "tf.Reshape"(%x, %b) : (tensor<4x6xf32>, tensor<1xi32>) -> tensor<24xf32>
  %5 = "tf.Sub"(%n, %n) : (tensor<1xi32>, tensor<1xi32>) -> tensor<1xi32>
  return %0, %1, %2#0, %2#1, %3, %4 : tensor<6x4xf32>, tensor<2xi32>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<i32>, tensor<24xf32>
}"#,
    );
    let r = run(&m, "duplicate-shape-constants", &none());
    assert_eq!(
        r.get(&quantir::passes::Change::ConstantsDuplicated),
        3,
        "arith.constant perm, Split axis, the leaf under Abs→Neg"
    );
    assert_eq!(count(&m, "arith.constant"), 2);
    assert_eq!(uses_of_def(nth(&m, "tf.Transpose", 0), 1), 1);
    assert_eq!(uses_of_def(nth(&m, "tf.Split", 0), 0), 1);
    assert_eq!(
        count(&m, "tf.Abs"),
        1,
        "the chain's ops are shared, only the leaf is cloned"
    );
    assert_eq!(uses_of_def(nth(&m, "tf.Abs", 0), 0), 1);
    let once = quantir::ir::print_module(&m);
    let again = run(&m, "duplicate-shape-constants", &none());
    assert!(again.changes.is_empty());
    assert_eq!(quantir::ir::print_module(&m), once, "idempotent");
    mlir_opt_ok(&m);
}

// --- fold-constants, insert-qdq, quantize-weights ---

const CHAIN: &str = r#"func.func @main(%x: tensor<1x4x4x1xf32>) -> tensor<1x2xf32> {
  %w = "tf.Const"() <{value = dense<[[[[0.5, -1.0]]]]> : tensor<1x1x1x2xf32>}> : () -> tensor<1x1x1x2xf32>
  %b = "tf.Const"() <{value = dense<[0.25, -0.5]> : tensor<2xf32>}> : () -> tensor<2xf32>
  %shape = "tf.Const"() <{value = dense<[1, 8]> : tensor<2xi32>}> : () -> tensor<2xi32>
  %m = "tf.Const"() <{value = dense<[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [2.0, 0.0], [0.0, 2.0], [1.0, -1.0], [-1.0, 1.0], [0.5, 0.5]]> : tensor<8x2xf32>}> : () -> tensor<8x2xf32>
  %0 = "tf.Conv2D"(%x, %w) <{data_format = "NHWC", padding = "VALID", strides = [1, 1, 1, 1]}> : (tensor<1x4x4x1xf32>, tensor<1x1x1x2xf32>) -> tensor<1x4x4x2xf32>
  %1 = "tf.BiasAdd"(%0, %b) : (tensor<1x4x4x2xf32>, tensor<2xf32>) -> tensor<1x4x4x2xf32>
  %2 = "tf.Relu"(%1) : (tensor<1x4x4x2xf32>) -> tensor<1x4x4x2xf32>
  %3 = "tf.MaxPool"(%2) <{data_format = "NHWC", ksize = [1, 2, 2, 1], padding = "VALID", strides = [1, 2, 2, 1]}> : (tensor<1x4x4x2xf32>) -> tensor<1x2x2x2xf32>
  %4 = "tf.Reshape"(%3, %shape) : (tensor<1x2x2x2xf32>, tensor<2xi32>) -> tensor<1x8xf32>
  %5 = "tf.MatMul"(%4, %m) : (tensor<1x8xf32>, tensor<8x2xf32>) -> tensor<1x2xf32>
  return %5 : tensor<1x2xf32>
}"#;

/// Stats with hand-picked ranges for the chain's points (keys after `prepare`).
fn chain_stats(m: &Module, ranges: &[(&str, f32, f32)]) -> StatsFile {
    let mut s = StatsFile::new(model_hash(m), Method::MinMax, 0, NonFinitePolicy::Error);
    for &(key, lo, hi) in ranges {
        let v = ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&[2]), vec![lo, hi]).unwrap();
        s.observe(key, 0, &v.view(), None).unwrap();
    }
    s.finalize().unwrap();
    s
}

#[test]
fn qdq_placement_on_conv_relu_maxpool_reshape_matmul() {
    let ctx = quantir::ir::new_context();
    let m = load(&ctx, CHAIN);
    prepare(&m).unwrap();
    let plan = quantir::quantize::plan(&m, None, &QuantConfig::default()).unwrap();
    let keys: Vec<(String, Option<String>)> = plan
        .activations
        .iter()
        .map(|a| (a.key.clone(), a.same_as.clone()))
        .collect();
    // conv input (the argument), conv output point after BiasAdd+Relu (op #6), MaxPool and
    // Reshape reuse it; the MatMul input is the Reshape output (already there); the MatMul
    // output is the model's output and stays float
    assert_eq!(
        keys,
        vec![
            ("@main/arg#0".to_string(), None),
            ("@main/op#6:result#0".to_string(), None),
            (
                "@main/op#8:result#0".to_string(),
                Some("@main/op#6:result#0".to_string())
            ),
            (
                "@main/op#7:result#0".to_string(),
                Some("@main/op#6:result#0".to_string())
            ),
        ]
    );
    // a fully integer graph quantizes the output too
    let all_int = QuantConfig {
        quantize_outputs: true,
        ..Default::default()
    };
    let with_out = quantir::quantize::plan(&m, None, &all_int).unwrap();
    assert_eq!(with_out.activations.len(), 5);
    assert!(with_out.activations.iter().any(|a| a.key == "@main/op#9:result#0"));
    let stats = chain_stats(
        &m,
        &[
            ("@main/arg#0", 0.0, 1.0),
            ("@main/op#6:result#0", 0.0, 2.0),
            ("@main/op#9:result#0", -3.0, 5.0),
        ],
    );
    let opts = PassOptions {
        stats: Some(stats.clone()),
        config: QuantConfig::default(),
    };
    let w = run(&m, "quantize-weights", &opts);
    assert_eq!(
        (
            w.get(&quantir::passes::Change::WeightsQuantized),
            w.get(&quantir::passes::Change::BiasesQuantized)
        ),
        (2, 1)
    );
    let q = run(&m, "insert-qdq", &opts);
    assert_eq!(q.get(&quantir::passes::Change::QdqPairsInserted), 4);
    // the Reshape's shape operand is still a plain i32 constant
    let reshape = nth(&m, "tf.Reshape", 0);
    assert!(defining_op(reshape.operand(1).unwrap()).is_some_and(|d| is_constant_op(&d)));
    // the MaxPool consumes the dequantized Relu output; same-scale outputs share its type
    let mp = nth(&m, "tf.MaxPool", 0);
    assert_eq!(op_name(&defining_op(mp.operand(0).unwrap()).unwrap()), "quant.dcast");
    let qcasts: Vec<String> = ops(&m)
        .iter()
        .filter(|o| op_name(*o) == "quant.qcast")
        .map(|o| o.result(0).unwrap().r#type().to_string())
        .collect();
    assert_eq!(qcasts.len(), 4);
    let relu_q = "!quant.uniform<i8:f32, 0.0078431372549019607:-128>"; // 2/255
    assert_eq!(qcasts.iter().filter(|t| t.contains(relu_q)).count(), 3, "{qcasts:?}");
    mlir_opt_ok(&m);
}

#[test]
fn weights_per_channel_and_int32_bias_values_match_hand_computation() {
    let ctx = quantir::ir::new_context();
    let m = load(&ctx, CHAIN);
    prepare(&m).unwrap();
    let stats = chain_stats(
        &m,
        &[
            ("@main/arg#0", 0.0, 1.0),
            ("@main/op#6:result#0", 0.0, 2.0),
            ("@main/op#9:result#0", -3.0, 5.0),
        ],
    );
    run(
        &m,
        "quantize-weights",
        &PassOptions {
            stats: Some(stats),
            config: QuantConfig::default(),
        },
    );
    let conv = nth(&m, "tf.Conv2D", 0);
    let dcast = defining_op(conv.operand(1).unwrap()).unwrap();
    let ty = dcast.operand(0).unwrap().r#type().to_string();
    // per-channel on axis 3, symmetric narrow: channel 0 absmax 0.5 → 0.5/127; channel 1 → 1/127
    assert_eq!(
        ty,
        "tensor<1x1x1x2x!quant.uniform<i8<-127:127>:f32:3, {0.003937007874015748,0.0078740157480314959}>>"
    );
    let int_w = defining_op(defining_op(dcast.operand(0).unwrap()).unwrap().operand(0).unwrap()).unwrap();
    let wv = quantir::ir::attribute_to_tensor(int_w.attribute("value").unwrap(), "w").unwrap();
    assert_eq!(quantir::interp::kernels::ints_of(&wv).unwrap(), vec![127, -127]);
    // bias: input scale 1/255 (MLIR scheme on [0, 1]) × weight scale; 0.25 / (1/255 · 0.5/127) = 16192.5 → 16192 (ties to even)
    let bias_add = nth(&m, "tf.BiasAdd", 0);
    let bd = defining_op(bias_add.operand(1).unwrap()).unwrap();
    let int_b = defining_op(defining_op(bd.operand(0).unwrap()).unwrap().operand(0).unwrap()).unwrap();
    let bv = quantir::ir::attribute_to_tensor(int_b.attribute("value").unwrap(), "b").unwrap();
    assert_eq!(bv.dtype(), quantir::tensor::DType::I32);
    let want: Vec<i64> = vec![
        (0.25f64 / (1.0 / 255.0 * 0.5 / 127.0)).round_ties_even() as i64,
        (-0.5f64 / (1.0 / 255.0 * 1.0 / 127.0)).round_ties_even() as i64,
    ];
    assert_eq!(quantir::interp::kernels::ints_of(&bv).unwrap(), want);
    assert_eq!(want, vec![16192, -16192]);
}

#[test]
fn bias_overflow_is_reported_per_channel() {
    let ctx = quantir::ir::new_context();
    let m = load(&ctx, &CHAIN.replace("dense<[0.25, -0.5]>", "dense<[1.0e6, -0.5]>"));
    prepare(&m).unwrap();
    let stats = chain_stats(
        &m,
        &[
            ("@main/arg#0", 0.0, 1.0e-3),
            ("@main/op#6:result#0", 0.0, 2.0),
            ("@main/op#9:result#0", -3.0, 5.0),
        ],
    );
    // the default enlarges the channel's weight scale; a recipe may ask for the old clip
    for (policy, ending) in [
        (
            quantir::params::BiasOverflowPolicy::EnlargeWeightScale,
            "(weight scale enlarged)",
        ),
        (quantir::params::BiasOverflowPolicy::Clip, "(clipped)"),
    ] {
        let m = load(&ctx, &CHAIN.replace("dense<[0.25, -0.5]>", "dense<[1.0e6, -0.5]>"));
        prepare(&m).unwrap();
        let r = run(
            &m,
            "quantize-weights",
            &PassOptions {
                stats: Some(stats.clone()),
                config: QuantConfig {
                    bias_overflow: policy,
                    ..QuantConfig::default()
                },
            },
        );
        assert_eq!(r.warnings.len(), 1, "{:?}", r.warnings);
        let w = &r.warnings[0];
        assert!(
            w.contains("bias of channel 0 (largest |weight| ")
                && w.contains("overflows int32 by a factor of")
                && w.ends_with(ending),
            "{w}"
        );
    }
    drop(m);
}

#[test]
fn exclusions_keep_ops_in_float() {
    let ctx = quantir::ir::new_context();
    let m = load(&ctx, CHAIN);
    prepare(&m).unwrap();
    let stats = chain_stats(
        &m,
        &[
            ("@main/arg#0", 0.0, 1.0),
            ("@main/op#6:result#0", 0.0, 2.0),
            ("@main/op#9:result#0", -3.0, 5.0),
        ],
    );
    let config = QuantConfig {
        exclude: vec!["tf.MatMul".into()],
        ..Default::default()
    };
    let plan = quantir::quantize::plan(&m, Some(&stats), &config).unwrap();
    assert!(
        plan.activations.iter().all(|a| a.key != "@main/op#9:result#0"),
        "the MatMul output is not quantized"
    );
    let opts = PassOptions {
        stats: Some(stats),
        config,
    };
    let w = run(&m, "quantize-weights", &opts);
    assert_eq!(
        w.get(&quantir::passes::Change::WeightsQuantized),
        1,
        "only the conv weight"
    );
    let mm = nth(&m, "tf.MatMul", 0);
    assert!(
        defining_op(mm.operand(1).unwrap()).is_some_and(|d| is_constant_op(&d)),
        "MatMul keeps its float weight"
    );
}

#[test]
fn fold_constants_folds_bias_reshapes() {
    let ctx = quantir::ir::new_context();
    let m = load(
        &ctx,
        r#"func.func @main(%x: tensor<1x4xf32>) -> tensor<1x4xf32> {
  %b = "tf.Const"() <{value = dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>}> : () -> tensor<4xf32>
  %s = "tf.Const"() <{value = dense<[1, 4]> : tensor<2xi32>}> : () -> tensor<2xi32>
  %r = "tf.Reshape"(%b, %s) : (tensor<4xf32>, tensor<2xi32>) -> tensor<1x4xf32>
  %t = "tf.Squeeze"(%r) <{squeeze_dims = [0]}> : (tensor<1x4xf32>) -> tensor<4xf32>
  %0 = "tf.BiasAdd"(%x, %t) : (tensor<1x4xf32>, tensor<4xf32>) -> tensor<1x4xf32>
  return %0 : tensor<1x4xf32>
}"#,
    );
    let r = run(&m, "fold-constants", &none());
    assert_eq!(r.get(&quantir::passes::Change::OpsFolded), 2);
    assert_eq!(count(&m, "tf.Reshape") + count(&m, "tf.Squeeze"), 0);
    assert_eq!(count(&m, "tf.Const"), 1);
    let bias = defining_op(nth(&m, "tf.BiasAdd", 0).operand(1).unwrap()).unwrap();
    let v = quantir::ir::attribute_to_tensor(bias.attribute("value").unwrap(), "b").unwrap();
    assert_eq!(
        v.as_f32().unwrap().iter().copied().collect::<Vec<_>>(),
        vec![1.0, 2.0, 3.0, 4.0]
    );
}
