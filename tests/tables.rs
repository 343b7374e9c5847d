//! The op tables checked against each other, so that supporting an op stays one or two table
//! entries and the entries cannot drift apart:
//! - every op with a quantization rule or a shape-operand entry runs in the interpreter (bar
//!   the rows of TensorFlow's shape table kept for parity, which must *not* run: when a kernel
//!   comes, the row leaves that list);
//! - every TF op the lowering handles runs in the TF table, every ONNX op a lowering may write
//!   runs in the ONNX table, and the quantization roles of a TF op survive its lowering;
//! - the reverse: every TF op the interpreter runs has a lowering, so that whatever SavedModel
//!   runs can also be written as `.onnx`;
//! - the duplicate-shape pass reads every dialect's shape operands;
//! - the opset-change table of the ONNX export names ops the ONNX table runs;
//! - the ops of onnxruntime's u8s8 GEMM table are ONNX compute ops (activation 0, weight 1);
//! - no table lists an op twice, and each lowering family is sorted.

mod common;

use quantir::dialects::{self, OpRule};
use quantir::{interp, passes};
use std::collections::BTreeSet;

fn all_rules() -> Vec<&'static OpRule> {
    dialects::tf::RULES.iter().chain(dialects::onnx::RULES).collect()
}

#[test]
fn every_op_with_a_rule_runs_in_the_interpreter() {
    let parity: BTreeSet<&str> = dialects::tf::TENSORFLOW_SHAPE_ONLY.iter().copied().collect();
    let mut missing = Vec::new();
    for r in all_rules() {
        if parity.contains(r.name) {
            continue;
        }
        if !interp::supports(r.name) {
            missing.push(r.name);
        }
    }
    assert!(
        missing.is_empty(),
        "ops with a rule but no interpreter kernel: {missing:?}"
    );
}

#[test]
fn tensorflow_parity_rows_are_shape_only_and_not_run() {
    for name in dialects::tf::TENSORFLOW_SHAPE_ONLY {
        let r = dialects::rule(name).unwrap_or_else(|| panic!("{name}: listed for parity but has no rule"));
        assert!(
            !r.is_compute()
                && !r.same_scale
                && !r.fused_activation
                && !r.bias
                && (!r.shape_operands.is_empty() || r.shape_source),
            "{name}: a parity row must only name shape operands"
        );
        assert!(
            !interp::supports(name),
            "{name} runs in the interpreter now: move it out of TENSORFLOW_SHAPE_ONLY"
        );
    }
}

#[test]
fn every_lowering_runs_on_both_sides() {
    let mut bad = Vec::new();
    for (tf, emits) in passes::tf_to_onnx::lowerings() {
        if !interp::supports(tf) {
            bad.push(format!("{tf} lowers to ONNX but does not run in the TF table"));
        }
        for e in emits {
            if !interp::supports(e) {
                bad.push(format!("{tf} lowers to {e}, which the ONNX table does not run"));
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn every_tf_op_that_runs_lowers_to_onnx() {
    let lowered: BTreeSet<&str> = passes::tf_to_onnx::lowerings().into_iter().map(|(n, _)| n).collect();
    let missing: Vec<&str> = interp::tf::TABLE
        .iter()
        .map(|(n, _)| *n)
        .filter(|n| !lowered.contains(n))
        .collect();
    assert!(
        missing.is_empty(),
        "TF ops that run but have no ONNX lowering: {missing:?}"
    );
}

#[test]
fn quantization_roles_survive_the_lowering() {
    let mut bad = Vec::new();
    for (tf, emits) in passes::tf_to_onnx::lowerings() {
        let Some(r) = dialects::rule(tf) else { continue };
        let onnx: Vec<&OpRule> = emits.iter().filter_map(|e| dialects::rule(e)).collect();
        let held = |role: fn(&OpRule) -> bool| onnx.iter().any(|o| role(o));
        for (name, role) in [
            ("compute", OpRule::is_compute as fn(&OpRule) -> bool),
            ("same-scale", |o: &OpRule| o.same_scale),
            ("fused activation", |o: &OpRule| o.fused_activation),
            ("bias", |o: &OpRule| o.bias || o.bias_operand.is_some()),
        ] {
            if role(r) && !held(role) {
                bad.push(format!("{tf} is {name}, but none of {emits:?} is"));
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn no_table_lists_an_op_twice_and_families_are_sorted() {
    let mut dup = Vec::new();
    let mut check = |what: &str, names: Vec<&str>| {
        let mut seen = BTreeSet::new();
        for n in names {
            if !seen.insert(n) {
                dup.push(format!("{what}: {n}"));
            }
        }
    };
    check("tf rules", dialects::tf::RULES.iter().map(|r| r.name).collect());
    check("onnx rules", dialects::onnx::RULES.iter().map(|r| r.name).collect());
    check("tf kernels", interp::tf::TABLE.iter().map(|(n, _)| *n).collect());
    check("onnx kernels", interp::onnx::TABLE.iter().map(|(n, _)| *n).collect());
    check(
        "upstream kernels",
        interp::upstream::TABLE.iter().map(|(n, _)| *n).collect(),
    );
    check(
        "lowerings",
        passes::tf_to_onnx::lowerings().into_iter().map(|(n, _)| n).collect(),
    );
    assert!(dup.is_empty(), "listed twice: {dup:?}");
    for family in passes::tf_to_onnx::families() {
        let mut sorted = family.clone();
        sorted.sort();
        assert_eq!(family, sorted, "a lowering family table is not sorted by TF op name");
    }
}

#[test]
fn opset_changes_name_ops_the_onnx_table_runs() {
    // Upsample: deprecated by ONNX at opset 10 (Resize replaced it); kept so that an old model
    // raised across 10 is refused by name rather than mislabelled
    let deprecated = ["Upsample"];
    let missing: Vec<&str> = quantir::formats::onnx::opsets::opset_changed_ops()
        .into_iter()
        .filter(|op| !deprecated.contains(op) && !interp::supports(&format!("onnx.{op}")))
        .collect();
    assert!(
        missing.is_empty(),
        "opset-change entries the interpreter does not run: {missing:?}"
    );
}

/// The duplicate-shape pass reads the ONNX table as well as TF's: a constant shared by a
/// Reshape's shape operand and a data use gets a private copy for the Reshape.
#[test]
fn duplicate_shape_constants_reads_every_dialect() {
    let text = r#"
func.func @main(%x: tensor<2x3xf32>) -> (tensor<3x2xf32>, tensor<2xi64>) {
  %s = "onnx.Constant"() {value = dense<[3, 2]> : tensor<2xi64>} : () -> tensor<2xi64>
  %r = "onnx.Reshape"(%x, %s) : (tensor<2x3xf32>, tensor<2xi64>) -> tensor<3x2xf32>
  %a = "onnx.Add"(%s, %s) : (tensor<2xi64>, tensor<2xi64>) -> tensor<2xi64>
  return %r, %a : tensor<3x2xf32>, tensor<2xi64>
}
"#;
    let ctx = quantir::ir::new_context();
    let module = quantir::ir::load_bytes(&ctx, text.as_bytes(), "shared.mlir".as_ref()).unwrap();
    let reports =
        passes::run_pipeline(&module, &["duplicate-shape-constants".to_string()], &Default::default()).unwrap();
    assert_eq!(
        reports[0].1.get(&passes::Change::ConstantsDuplicated),
        1,
        "{:?}",
        reports[0].1
    );
    let printed = quantir::ir::print_module(&module);
    assert_eq!(printed.matches("onnx.Constant").count(), 2, "{printed}");
}

/// Every op onnxruntime's u8s8 GEMM table names is an ONNX compute op whose activation is
/// operand 0 and whose weight is operand 1, as `quantize-weights` reads them.
#[test]
fn the_u8s8_gemm_table_names_onnx_compute_ops() {
    for (name, _, _) in dialects::ort_u8s8::U8S8_GEMM {
        let r = dialects::rule(name).unwrap_or_else(|| panic!("{name}: no quantization rule"));
        assert_eq!(r.activations.first(), Some(&0), "{name}");
        assert_eq!(r.weight.map(|w| w.0), Some(1), "{name}");
    }
}

#[test]
fn the_equalization_tables_are_sorted_and_name_ops_the_rules_know() {
    // every channel rule is a compute op of its dialect with that weight operand, and every
    // scale-commuting op is one the interpreter runs
    for (rules, homogeneous, kernels) in [
        (
            dialects::tf::CHANNEL_RULES,
            dialects::tf::POSITIVE_HOMOGENEOUS,
            interp::tf::TABLE,
        ),
        (
            dialects::onnx::CHANNEL_RULES,
            dialects::onnx::POSITIVE_HOMOGENEOUS,
            interp::onnx::TABLE,
        ),
    ] {
        let names: Vec<&str> = rules.iter().map(|r| r.name).collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted, "channel rules not sorted");
        for r in rules {
            let rule = dialects::rule(r.name).unwrap_or_else(|| panic!("{} has no op rule", r.name));
            assert_eq!(rule.weight.map(|w| w.0), Some(r.weight), "{}: weight operand", r.name);
            assert_eq!(rule.bias_operand, r.bias_operand, "{}: bias operand", r.name);
        }
        let mut sorted = homogeneous.to_vec();
        sorted.sort();
        assert_eq!(homogeneous, sorted.as_slice(), "scale-commuting ops not sorted");
        for n in homogeneous {
            assert!(kernels.iter().any(|(k, _)| k == n), "{n} has no kernel");
        }
    }
}
