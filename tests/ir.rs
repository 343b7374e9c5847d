//! The MLIR layer: load/save round trips on every bundled model, mlir-opt acceptance,
//! constants for every element type, tensor keys, graph helpers, diagnostics.

mod common;

use half::{bf16, f16};
use melior::ir::operation::OperationLike;
use ndarray::{ArrayD, IxDyn};
use quantir::ir::graph::{erase_op, find_function, nested_ops, op_name, uses};
use quantir::ir::ops::is_constant_op;
use quantir::ir::{self, attribute_to_tensor, tensor_to_attribute, IrError, ModuleFormat, TensorKeys};
use quantir::tensor::Tensor;
use std::path::Path;

#[test]
fn every_model_round_trips_text_and_bytecode_and_mlir_opt_accepts_it() {
    let ctx = ir::new_context();
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in common::all_models() {
        let m = ir::load_bytes(&ctx, &text, Path::new(&name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        let printed = ir::print_module(&m);
        // text -> text
        let again = ir::load_bytes(&ctx, printed.as_bytes(), Path::new(&name)).unwrap();
        assert_eq!(
            ir::print_module(&again),
            printed,
            "{name}: text round trip changed the IR"
        );
        // text -> bytecode -> text, through files (save + load)
        let bc = dir.path().join(format!("{name}.mlirbc"));
        ir::save(&m, &bc, &[]).unwrap();
        assert!(std::fs::read(&bc).unwrap().starts_with(b"ML\xEFR"));
        let from_bc = ir::load(&ctx, &bc).unwrap();
        assert_eq!(
            ir::print_module(&from_bc),
            printed,
            "{name}: bytecode round trip changed the IR"
        );
        let txt = dir.path().join(format!("{name}.mlir"));
        ir::save(&from_bc, &txt, &[]).unwrap();
        let (ok, err) = common::mlir_opt_accepts(&txt);
        assert!(ok, "{name}: mlir-opt-22 rejected the output: {err}");
    }
}

fn sample_tensors() -> Vec<Tensor> {
    let shape = IxDyn(&[2, 3]);
    let f = [0.5f32, -1.25, f32::MAX, f32::MIN_POSITIVE, -0.0, 3.0e-42];
    vec![
        Tensor::F32(ArrayD::from_shape_vec(shape.clone(), f.to_vec()).unwrap()),
        Tensor::F64(ArrayD::from_shape_vec(shape.clone(), f.iter().map(|&x| x as f64 * 1.1).collect()).unwrap()),
        Tensor::F16(ArrayD::from_shape_vec(shape.clone(), f.iter().map(|&x| f16::from_f32(x)).collect()).unwrap()),
        Tensor::BF16(ArrayD::from_shape_vec(shape.clone(), f.iter().map(|&x| bf16::from_f32(x)).collect()).unwrap()),
        Tensor::I1(ArrayD::from_shape_vec(shape.clone(), vec![true, false, false, true, true, false]).unwrap()),
        Tensor::I8(ArrayD::from_shape_vec(shape.clone(), vec![-128, -1, 0, 1, 7, 127]).unwrap()),
        Tensor::U8(ArrayD::from_shape_vec(shape.clone(), vec![0, 1, 128, 200, 254, 255]).unwrap()),
        Tensor::I16(ArrayD::from_shape_vec(shape.clone(), vec![-32768, -1, 0, 1, 300, 32767]).unwrap()),
        Tensor::U16(ArrayD::from_shape_vec(shape.clone(), vec![0, 1, 300, 40000, 65534, 65535]).unwrap()),
        Tensor::I32(ArrayD::from_shape_vec(shape.clone(), vec![i32::MIN, -1, 0, 1, 70000, i32::MAX]).unwrap()),
        Tensor::I64(ArrayD::from_shape_vec(shape, vec![i64::MIN, -1, 0, 1, 1 << 40, i64::MAX]).unwrap()),
    ]
}

#[test]
fn constants_read_back_bit_identically_for_every_element_type_also_after_text_round_trip() {
    let ctx = ir::new_context();
    for t in sample_tensors() {
        let attr = tensor_to_attribute(&ctx, &t);
        let back = attribute_to_tensor(attr, "test").unwrap();
        assert!(back.bit_eq(&t), "{}: {back:?} != {t:?}", t.dtype());
        // through the printer and parser (hex or list form)
        let src = format!(
            "func.func @f() -> () {{\n  %0 = \"tf.Const\"() {{value = {attr}}} : () -> {}\n  return\n}}",
            attr.r#type()
        );
        let m = ir::load_bytes(&ctx, src.as_bytes(), Path::new("t.mlir")).unwrap();
        let f = find_function(&m, None).unwrap();
        let c = nested_ops(f).into_iter().find(is_constant_op).unwrap();
        let parsed = attribute_to_tensor(c.attribute("value").unwrap(), "parsed").unwrap();
        assert!(parsed.bit_eq(&t), "{} after printing", t.dtype());
    }
}

use melior::ir::attribute::AttributeLike;

#[test]
fn splat_hex_and_resource_constants() {
    let ctx = ir::new_context();
    let src = r#"
func.func @f() -> () {
  %a = arith.constant dense<0.5> : tensor<2x2xf32>
  %b = arith.constant dense<"0x0000803F00000040"> : tensor<2xf32>
  %c = arith.constant dense<[true, false, true]> : tensor<3xi1>
  %d = arith.constant dense<7> : tensor<4xi8>
  %e = arith.constant dense_resource<blob1> : tensor<3xf32>
  return
}
{-#
  dialect_resources: {
    builtin: {
      blob1: "0x040000000000803F0000004000004040"
    }
  }
#-}
"#;
    let m = ir::load_bytes(&ctx, src.as_bytes(), Path::new("c.mlir")).unwrap();
    let f = find_function(&m, None).unwrap();
    let vals: Vec<Tensor> = nested_ops(f)
        .into_iter()
        .filter(|o| op_name(o) == "arith.constant")
        .map(|o| attribute_to_tensor(o.attribute("value").unwrap(), "c").unwrap())
        .collect();
    assert_eq!(vals[0], Tensor::F32(ArrayD::from_elem(IxDyn(&[2, 2]), 0.5)));
    assert_eq!(
        vals[1],
        Tensor::F32(ArrayD::from_shape_vec(IxDyn(&[2]), vec![1.0, 2.0]).unwrap())
    );
    assert_eq!(
        vals[2],
        Tensor::I1(ArrayD::from_shape_vec(IxDyn(&[3]), vec![true, false, true]).unwrap())
    );
    assert_eq!(vals[3], Tensor::I8(ArrayD::from_elem(IxDyn(&[4]), 7)));
    assert_eq!(
        vals[4],
        Tensor::F32(ArrayD::from_shape_vec(IxDyn(&[3]), vec![1.0, 2.0, 3.0]).unwrap())
    );
}

#[test]
fn parse_errors_carry_file_line_column() {
    let ctx = ir::new_context();
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bad.mlir");
    std::fs::write(
        &p,
        "func.func @f(%a: tensor<2xf32>) -> tensor<2xf32> {\n  return %a : tensor<2xf32\n}\n",
    )
    .unwrap();
    match ir::load(&ctx, &p) {
        Err(IrError::Parse { diagnostics, .. }) => {
            let expect = format!("{}:2:27: error: expected '>' in tensor type", p.display());
            assert!(diagnostics[0].starts_with(&expect), "{diagnostics:?}");
        }
        other => panic!("expected a parse error, got {:?}", other.map(|_| ())),
    }
    // verifier errors are errors too
    std::fs::write(
        &p,
        "func.func @f(%a: tensor<2xf32>) -> tensor<3xf32> {\n  return %a : tensor<2xf32>\n}\n",
    )
    .unwrap();
    let e = ir::load(&ctx, &p).expect_err("verifier error").to_string();
    assert!(
        e.contains("bad.mlir:2:3: error:") && e.contains("doesn't match function result type"),
        "{e}"
    );
    // binary garbage with NULs and invalid UTF-8 is an error, not a panic
    std::fs::write(&p, b"\x00\xff\xfe garbage \x00").unwrap();
    assert!(matches!(ir::load(&ctx, &p), Err(IrError::Parse { .. })));
    assert!(matches!(
        ir::load(&ctx, &dir.path().join("missing.mlir")),
        Err(IrError::Read { .. })
    ));
}

#[test]
fn tensor_keys_are_positional_or_named_and_stable_across_save_and_load() {
    let ctx = ir::new_context();
    let src = r#"
func.func @main(%x: tensor<4xf32> loc("input")) -> tensor<4xf32> {
  %0 = "tf.Relu"(%x) : (tensor<4xf32>) -> tensor<4xf32> loc("block1/relu")
  %1 = "tf.Neg"(%0) : (tensor<4xf32>) -> tensor<4xf32>
  %2:2 = "tf.Split2"(%1) : (tensor<4xf32>) -> (tensor<2xf32>, tensor<2xf32>) loc(fused["split", "x.py":1:1])
  return %1 : tensor<4xf32>
}
"#;
    let keys_of = |m: &melior::ir::Module| {
        let f = find_function(m, None).unwrap();
        let keys = TensorKeys::new(f);
        let mut v = Vec::new();
        let block = f.region(0).unwrap().first_block().unwrap();
        v.push(keys.get(block.argument(0).unwrap().into()).unwrap().to_string());
        for op in nested_ops(f) {
            for r in op.results() {
                v.push(keys.get(r.into()).unwrap().to_string());
            }
        }
        v
    };
    use melior::ir::{BlockLike, RegionLike};
    let m = ir::load_bytes(&ctx, src.as_bytes(), Path::new("k.mlir")).unwrap();
    let k1 = keys_of(&m);
    assert_eq!(
        k1,
        vec!["input", "block1/relu", "@main/op#1:result#0", "split", "split:1"]
    );
    let dir = tempfile::tempdir().unwrap();
    for ext in ["mlir", "mlirbc"] {
        let p = dir.path().join(format!("k.{ext}"));
        ir::save(&m, &p, &[]).unwrap();
        let m2 = ir::load(&ctx, &p).unwrap();
        assert_eq!(keys_of(&m2), k1, "keys changed after a {ext} round trip");
    }
}

#[test]
fn uses_and_safe_erase() {
    let ctx = ir::new_context();
    let src = r#"
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %c = "tf.Const"() {value = dense<1.0> : tensor<4xf32>} : () -> tensor<4xf32>
  %0 = "tf.AddV2"(%x, %c) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = "tf.Mul"(%c, %0) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %dead = "tf.Neg"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
"#;
    let m = ir::load_bytes(&ctx, src.as_bytes(), Path::new("u.mlir")).unwrap();
    let f = find_function(&m, None).unwrap();
    let ops = nested_ops(f);
    let c = ops[0];
    let mut u: Vec<(String, usize)> = uses(c.result(0).unwrap().into())
        .iter()
        .map(|u| (op_name(&u.owner), u.operand))
        .collect();
    u.sort();
    assert_eq!(u, vec![("tf.AddV2".to_string(), 1), ("tf.Mul".to_string(), 0)]);
    let e = erase_op(c).unwrap_err();
    assert!(matches!(e, IrError::EraseWithUses { uses: 2, .. }), "{e}");
    erase_op(ops[3]).unwrap();
    assert!(!ir::print_module(&m).contains("tf.Neg"));
    assert!(quantir::ir::io::verify(&m).is_ok());
}

#[test]
fn save_refuses_the_input_and_unknown_extensions() {
    let ctx = ir::new_context();
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("m.mlir");
    std::fs::write(&input, "module {}\n").unwrap();
    let m = ir::load(&ctx, &input).unwrap();
    assert!(matches!(ir::save(&m, &input, &[&input]), Err(IrError::Write(_))));
    assert!(matches!(
        ir::save(&m, &dir.path().join("m.txt"), &[&input]),
        Err(IrError::UnknownFormat { .. })
    ));
    assert_eq!(ModuleFormat::detect(b"ML\xEFR\x00"), ModuleFormat::Bytecode);
    assert_eq!(std::fs::read_to_string(&input).unwrap(), "module {}\n");
}
