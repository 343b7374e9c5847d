//! SavedModel directories as models: the shared TensorFlow exports reproduce TensorFlow's
//! outputs and quantize as their frozen `.mlir` exports do; hand-built SavedModels check
//! inlining, op-list defaults, signatures and the constructs that are refused by name.

mod common;

use common::{arg, data, example, ok, quantir, stderr};
use ndarray::ArrayD;
use prost::Message;
use quantir::formats::savedmodel::proto::{
    ArgDef, AttrDef, AttrValue, FunctionDef, FunctionDefLibrary, GraphDef, ListValue, MetaGraphDef, MetaInfoDef,
    NameAttrList, NodeDef, OpDef, OpList, SavedModel, SignatureDef, TensorInfo, TensorProto, TensorShapeDim,
    TensorShapeProto,
};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

fn read_npz(path: &Path, key: &str) -> ArrayD<f32> {
    let mut z = ndarray_npy::NpzReader::new(std::fs::File::open(path).unwrap()).unwrap();
    z.by_name(key).unwrap()
}

fn max_abs_diff(a: &ArrayD<f32>, b: &ArrayD<f32>) -> f32 {
    assert_eq!(a.shape(), b.shape());
    a.iter().zip(b.iter()).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

#[test]
fn run_reproduces_tensorflow_outputs() {
    let dir = tempfile::tempdir().unwrap();
    for (model, test, reference) in common::saved_models() {
        let out = dir.path().join(format!("{model}.npz"));
        ok(quantir(&[
            "run",
            &arg(&data(model)),
            "--data",
            &arg(&test),
            "-o",
            &arg(&out),
        ]));
        // outputs are named by the signature's keys
        let got = read_npz(&out, "output_0");
        let want = read_npz(&reference, "y");
        let d = max_abs_diff(&got, &want);
        assert!(d <= 1e-4, "{model}: max |quantir - TensorFlow| = {d}");
    }
}

#[test]
fn imported_module_is_frozen_tf_dialect_that_mlir_opt_accepts() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("m.mlir");
    ok(quantir(&[
        "opt",
        &arg(&data("mobilenet_v2_035_savedmodel")),
        "-o",
        &arg(&out),
    ]));
    let (accepted, err) = common::mlir_opt_accepts(&out);
    assert!(accepted, "{err}");
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.contains("func.func @serving_default("));
    assert!(text.contains(r#"tf.entry_function = {control_outputs = "", inputs = "input", outputs = "output_0"}"#));
    // no resource variables, calls or identities left; defaults stripped at save are back
    for gone in [
        "ReadVariableOp",
        "VarHandleOp",
        "PartitionedCall",
        "tf.Identity",
        "tf.NoOp",
    ] {
        assert!(!text.contains(gone), "{gone} left in the module");
    }
    assert!(text.contains(r#""tf.DepthwiseConv2dNative""#));
    assert!(text.contains(r#"data_format = "NHWC""#));
    // 262 variables, each one tf.Const named after it
    assert!(text.contains(r#"loc("block_16_project/kernel")"#));
    let inspect = ok(quantir(&["inspect", &arg(&out), "--json"]));
    let r: serde_json::Value = serde_json::from_slice(&inspect.stdout).unwrap();
    assert_eq!(r["op_counts"]["tf.Conv2D"], 35);
    assert_eq!(r["op_counts"]["tf.DepthwiseConv2dNative"], 17);
}

/// SQNR and top-1 agreement with the float model of `quantize MODEL`, evaluated on `test`.
fn quantize_and_score(model: &Path, calib: &Path, test: &Path, out: &Path) -> (f64, f64) {
    ok(quantir(&[
        "quantize",
        &arg(model),
        "--data",
        &arg(calib),
        "--no-cache",
        "-o",
        &arg(out),
    ]));
    let o = ok(quantir(&[
        "evaluate",
        &arg(model),
        &arg(out),
        "--data",
        &arg(test),
        "--json",
    ]));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    (
        r["sqnr_db"].as_f64().unwrap(),
        r["outputs"][0]["top1_agreement"].as_f64().unwrap(),
    )
}

#[test]
fn quantize_reaches_the_quality_of_the_frozen_mlir() {
    let dir = tempfile::tempdir().unwrap();
    let mobilenet = dir.path().join("mobilenet.mlir");
    std::fs::write(&mobilenet, common::model_text(&data("mobilenet_v2_035.mlir.gz"))).unwrap();
    for (saved, frozen, calib, test) in [
        (
            "digits_cnn_savedmodel",
            example("digits_cnn.mlir"),
            example("digits_calib.npz"),
            example("digits_test.npz"),
        ),
        (
            "digits_mlp_savedmodel",
            data("digits_mlp.mlir"),
            data("digits_mlp_calib.npz"),
            data("digits_mlp_test.npz"),
        ),
        // calibrated on its 16 test images: only the two paths' agreement is asserted
        (
            "mobilenet_v2_035_savedmodel",
            mobilenet.clone(),
            data("mobilenet_test.npz"),
            data("mobilenet_test.npz"),
        ),
    ] {
        let from_saved = quantize_and_score(&data(saved), &calib, &test, &dir.path().join("a.mlir"));
        let from_frozen = quantize_and_score(&frozen, &calib, &test, &dir.path().join("b.mlir"));
        assert!(
            (from_saved.0 - from_frozen.0).abs() < 0.01 && from_saved.1 == from_frozen.1,
            "{saved}: SavedModel (SQNR, top-1 agreement) {from_saved:?}, frozen .mlir {from_frozen:?}"
        );
    }
}

#[test]
fn inspect_lists_the_signatures() {
    let o = ok(quantir(&["inspect", &arg(&data("digits_cnn_savedmodel"))]));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("signature 'serving_default' (tensorflow/serving/predict)"),
        "{text}"
    );
    assert!(
        text.contains("input  input: f32[1x8x8x1] (serving_default_input:0)"),
        "{text}"
    );
    assert!(
        text.contains("output output_0: f32[1x10] (StatefulPartitionedCall:0)"),
        "{text}"
    );
    let o = ok(quantir(&["inspect", &arg(&data("digits_cnn_savedmodel")), "--json"]));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["signatures"][0]["name"], "serving_default");
    assert_eq!(
        r["signatures"][0]["inputs"][0]["shape"],
        serde_json::json!([1, 8, 8, 1])
    );
    assert_eq!(r["functions"][0]["name"], "serving_default");
}

/// A copy of a shared SavedModel that a test may damage.
fn copy_model(name: &str, to: &Path) -> PathBuf {
    let dst = to.join(name);
    std::fs::create_dir_all(dst.join("variables")).unwrap();
    for sub in ["", "variables"] {
        for e in std::fs::read_dir(data(name).join(sub)).unwrap() {
            let e = e.unwrap();
            if e.path().is_file() {
                std::fs::copy(e.path(), dst.join(sub).join(e.file_name())).unwrap();
            }
        }
    }
    dst
}

/// Runs `quantize` on a SavedModel that must be refused: one line naming `expect`, exit 1,
/// nothing written.
fn assert_refused(model: &Path, extra: &[&str], expect: &[&str]) {
    let out = model.parent().unwrap().join("never.mlir");
    let mut args = vec!["quantize", model.to_str().unwrap()];
    args.extend_from_slice(extra);
    let calib = arg(&example("digits_calib.npz"));
    let o_arg = arg(&out);
    args.extend_from_slice(&["--data", &calib, "-o", &o_arg]);
    let o = quantir(&args);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert_eq!(e.trim().lines().count(), 1, "{e}");
    for x in expect {
        assert!(e.contains(x), "'{x}' not in: {e}");
    }
    assert!(!out.exists());
}

#[test]
fn corrupted_saved_model_pb_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let m = copy_model("digits_cnn_savedmodel", dir.path());
    let pb = m.join("saved_model.pb");
    let bytes = std::fs::read(&pb).unwrap();
    std::fs::write(&pb, &bytes[..bytes.len() / 2]).unwrap();
    assert_refused(&m, &[], &["saved_model.pb", "not a valid SavedModel"]);
    // random bytes (a fixed LCG: the test is reproducible)
    let mut x = 12345u64;
    let noise: Vec<u8> = (0..4096)
        .map(|_| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (x >> 56) as u8
        })
        .collect();
    std::fs::write(&pb, noise).unwrap();
    assert_refused(&m, &[], &["saved_model.pb"]);
    std::fs::write(&pb, b"").unwrap();
    assert_refused(&m, &[], &["saved_model.pb", "no meta graph"]);
    std::fs::rename(&pb, m.join("saved_model.pbtxt")).unwrap();
    assert_refused(&m, &[], &["saved_model.pbtxt", "text-format"]);
}

#[test]
fn missing_or_corrupted_variables_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let m = copy_model("digits_cnn_savedmodel", dir.path());
    let shard = m.join("variables/variables.data-00000-of-00001");
    let mut bytes = std::fs::read(&shard).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    std::fs::write(&shard, &bytes).unwrap();
    assert_refused(&m, &[], &["variables.data-00000-of-00001", "checksum mismatch"]);
    std::fs::remove_file(&shard).unwrap();
    assert_refused(&m, &[], &["variables.data-00000-of-00001", "missing"]);
}

#[test]
fn unknown_signature_lists_the_known_ones() {
    let m = data("digits_cnn_savedmodel");
    let o = quantir(&["inspect", &arg(&m), "--signature", "predict"]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert_eq!(e.trim().lines().count(), 1, "{e}");
    assert!(
        e.contains("no signature 'predict'") && e.contains("serving_default"),
        "{e}"
    );
    ok(quantir(&["inspect", &arg(&m), "--signature", "serving_default"]));
}

// ---- hand-built SavedModels -------------------------------------------------------------

const DT_FLOAT: i32 = 1;

fn shape(dims: &[i64]) -> TensorShapeProto {
    TensorShapeProto {
        dim: dims
            .iter()
            .map(|&size| TensorShapeDim {
                size,
                name: String::new(),
            })
            .collect(),
        unknown_rank: false,
    }
}

fn type_attr(t: i32) -> AttrValue {
    AttrValue {
        r#type: Some(t),
        ..Default::default()
    }
}

fn node(name: &str, op: &str, inputs: &[&str], attrs: &[(&str, AttrValue)]) -> NodeDef {
    NodeDef {
        name: name.into(),
        op: op.into(),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        device: String::new(),
        attr: attrs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect(),
    }
}

fn arg_def(name: &str, type_attr: &str, fixed: i32) -> ArgDef {
    ArgDef {
        name: name.into(),
        r#type: fixed,
        type_attr: type_attr.into(),
        ..Default::default()
    }
}

/// OpDef of a binary elementwise op `z = op(x, y)` of type T.
fn binary_op(name: &str) -> OpDef {
    OpDef {
        name: name.into(),
        input_arg: vec![arg_def("x", "T", 0), arg_def("y", "T", 0)],
        output_arg: vec![arg_def("z", "T", 0)],
        attr: vec![AttrDef {
            name: "T".into(),
            r#type: "type".into(),
            default_value: None,
        }],
        is_stateful: false,
    }
}

fn const_f32(name: &str, v: f32) -> NodeDef {
    node(
        name,
        "Const",
        &[],
        &[
            ("dtype", type_attr(DT_FLOAT)),
            (
                "value",
                AttrValue {
                    tensor: Some(TensorProto {
                        dtype: DT_FLOAT,
                        tensor_shape: Some(shape(&[])),
                        float_val: vec![v],
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            ),
        ],
    )
}

/// A SavedModel whose serving signature maps input `x` (f32[?,3]) through `main_nodes` to
/// output tensor `out`; `functions` and `ops` fill the library and op list.
fn write_model(
    dir: &Path,
    main_nodes: Vec<NodeDef>,
    out: &str,
    functions: Vec<FunctionDef>,
    ops: Vec<OpDef>,
) -> PathBuf {
    let info = |name: &str| TensorInfo {
        name: Some(name.into()),
        dtype: DT_FLOAT,
        tensor_shape: Some(shape(&[-1, 3])),
        coo_sparse: None,
        composite_tensor: None,
    };
    let mut nodes = vec![node(
        "serving_default_x",
        "Placeholder",
        &[],
        &[("dtype", type_attr(DT_FLOAT))],
    )];
    nodes.extend(main_nodes);
    let sig = SignatureDef {
        inputs: HashMap::from([("x".to_string(), info("serving_default_x:0"))]),
        outputs: HashMap::from([("y".to_string(), info(out))]),
        method_name: "tensorflow/serving/predict".into(),
    };
    let sm = SavedModel {
        saved_model_schema_version: 1,
        meta_graphs: vec![MetaGraphDef {
            meta_info_def: Some(MetaInfoDef {
                tags: vec!["serve".into()],
                stripped_op_list: Some(OpList { op: ops }),
                stripped_default_attrs: true,
                ..Default::default()
            }),
            graph_def: Some(GraphDef {
                node: nodes,
                library: Some(FunctionDefLibrary { function: functions }),
                versions: None,
            }),
            signature_def: HashMap::from([("serving_default".to_string(), sig)]),
            object_graph_def: None,
        }],
    };
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("saved_model.pb"), sm.encode_to_vec()).unwrap();
    dir.to_path_buf()
}

fn func_attr(name: &str) -> AttrValue {
    AttrValue {
        func: Some(NameAttrList {
            name: name.into(),
            attr: HashMap::new(),
        }),
        ..Default::default()
    }
}

/// `double(a) = a * 2`, written as TensorFlow writes function bodies.
fn double_fn() -> FunctionDef {
    FunctionDef {
        signature: Some(OpDef {
            name: "double".into(),
            input_arg: vec![arg_def("a", "", DT_FLOAT)],
            output_arg: vec![arg_def("out", "", DT_FLOAT)],
            ..Default::default()
        }),
        node_def: vec![
            const_f32("two", 2.0),
            node("mul", "Mul", &["a", "two:output:0"], &[("T", type_attr(DT_FLOAT))]),
            node("id", "Identity", &["mul:z:0", "^two"], &[("T", type_attr(DT_FLOAT))]),
        ],
        ret: HashMap::from([("out".to_string(), "id:output:0".to_string())]),
    }
}

fn identity_op() -> OpDef {
    OpDef {
        name: "Identity".into(),
        input_arg: vec![arg_def("input", "T", 0)],
        output_arg: vec![arg_def("output", "T", 0)],
        attr: vec![AttrDef {
            name: "T".into(),
            r#type: "type".into(),
            default_value: None,
        }],
        is_stateful: false,
    }
}

fn const_op() -> OpDef {
    OpDef {
        name: "Const".into(),
        output_arg: vec![arg_def("output", "dtype", 0)],
        ..Default::default()
    }
}

#[test]
fn calls_are_inlined_each_time_with_unique_names() {
    let dir = tempfile::tempdir().unwrap();
    let call = |name: &str, input: &str, op: &str| {
        let tout = AttrValue {
            list: Some(ListValue {
                r#type: vec![DT_FLOAT],
                ..Default::default()
            }),
            ..Default::default()
        };
        node(name, op, &[input], &[("f", func_attr("double")), ("Tout", tout)])
    };
    // y = double(double(x)) - x: two inlinings of one body, a plain-graph op after them
    let m = write_model(
        &dir.path().join("m"),
        vec![
            call("first", "serving_default_x", "StatefulPartitionedCall"),
            call("second", "first:0", "PartitionedCall"),
            node(
                "sub",
                "Sub",
                &["second", "serving_default_x:0"],
                &[("T", type_attr(DT_FLOAT))],
            ),
        ],
        "sub:0",
        vec![double_fn()],
        vec![binary_op("Mul"), binary_op("Sub"), identity_op(), const_op()],
    );
    let out = dir.path().join("m.mlir");
    ok(quantir(&["opt", &arg(&m), "-o", &arg(&out)]));
    let text = std::fs::read_to_string(&out).unwrap();
    assert_eq!(text.matches("\"tf.Mul\"").count(), 2, "{text}");
    assert!(
        text.contains("loc(\"mul\"(") && text.contains("loc(\"second/mul\"("),
        "{text}"
    );
    assert!(text.contains("tensor<?x3xf32>"), "{text}");
    // run: y = 3x on a batch of 2
    let x = ndarray::Array2::<f32>::from_shape_vec((2, 3), vec![1.0, -2.0, 0.5, 4.0, 0.0, -1.5])
        .unwrap()
        .into_dyn();
    let npz = dir.path().join("x.npz");
    let mut w = ndarray_npy::NpzWriter::new(std::fs::File::create(&npz).unwrap());
    w.add_array("x", &x).unwrap();
    w.finish().unwrap();
    let res = dir.path().join("y.npz");
    ok(quantir(&["run", &arg(&m), "--data", &arg(&npz), "-o", &arg(&res)]));
    let y = read_npz(&res, "y");
    assert_eq!(y, x.mapv(|v| 3.0 * v));
}

#[test]
fn unsupported_constructs_are_named() {
    let dir = tempfile::tempdir().unwrap();
    // functional control flow
    let m = write_model(
        &dir.path().join("while"),
        vec![node("loop", "StatelessWhile", &["serving_default_x"], &[])],
        "loop:0",
        vec![],
        vec![],
    );
    assert_refused(&m, &[], &["node 'loop' (StatelessWhile)", "control flow"]);
    // inspect still shows the signatures, on stdout, before the one-line error
    let o = quantir(&["inspect", &arg(&m)]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stdout).contains("signature 'serving_default'"));
    assert_eq!(stderr(&o).trim().lines().count(), 1, "{}", stderr(&o));
    // a string op (its output type comes from the op list)
    let as_string = OpDef {
        name: "AsString".into(),
        input_arg: vec![arg_def("input", "T", 0)],
        output_arg: vec![arg_def("output", "", 7)],
        ..Default::default()
    };
    let m = write_model(
        &dir.path().join("string"),
        vec![node("fmt", "AsString", &["serving_default_x"], &[])],
        "fmt:0",
        vec![],
        vec![as_string],
    );
    assert_refused(&m, &[], &["node 'fmt' (AsString)", "string tensors"]);
    // an op the SavedModel does not describe
    let m = write_model(
        &dir.path().join("unknown"),
        vec![node("odd", "Frobnicate", &["serving_default_x"], &[])],
        "odd:0",
        vec![],
        vec![],
    );
    assert_refused(&m, &[], &["node 'odd' (Frobnicate)", "op list"]);
    // a call to a function the library lacks
    let m = write_model(
        &dir.path().join("nofn"),
        vec![node(
            "c",
            "PartitionedCall",
            &["serving_default_x"],
            &[("f", func_attr("gone"))],
        )],
        "c:0",
        vec![],
        vec![],
    );
    assert_refused(&m, &[], &["node 'c' (PartitionedCall)", "'gone'"]);
}

fn const_vec(name: &str, v: &[f32]) -> NodeDef {
    let mut n = const_f32(name, 0.0);
    if let Some(t) = n.attr.get_mut("value").and_then(|a| a.tensor.as_mut()) {
        t.tensor_shape = Some(shape(&[v.len() as i64]));
        t.float_val = v.to_vec();
    }
    n
}

fn attr_def(name: &str, ty: &str, default: Option<AttrValue>) -> AttrDef {
    AttrDef {
        name: name.into(),
        r#type: ty.into(),
        default_value: default,
    }
}

#[test]
fn multi_output_ops_and_op_list_defaults() {
    // f(a) = u[2] - u[0] with u = unstack(batch_norm(a), axis 1): outputs named by arg
    // ("bn:y:0", "u:output:2" of a list arg); epsilon left to the op list's default
    let float = |f: f32| AttrValue {
        f: Some(f),
        ..Default::default()
    };
    let bn_op = OpDef {
        name: "FusedBatchNormV3".into(),
        input_arg: ["x", "scale", "offset", "mean", "variance"]
            .iter()
            .map(|n| arg_def(n, if *n == "x" { "T" } else { "U" }, 0))
            .collect(),
        output_arg: [
            "y",
            "batch_mean",
            "batch_variance",
            "reserve_space_1",
            "reserve_space_2",
            "reserve_space_3",
        ]
        .iter()
        .map(|n| arg_def(n, if *n == "y" { "T" } else { "U" }, 0))
        .collect(),
        attr: vec![
            attr_def("T", "type", None),
            attr_def("U", "type", None),
            attr_def("epsilon", "float", Some(float(1e-4))),
            attr_def("exponential_avg_factor", "float", Some(float(1.0))),
            attr_def(
                "data_format",
                "string",
                Some(AttrValue {
                    s: Some(b"NHWC".to_vec()),
                    ..Default::default()
                }),
            ),
            attr_def(
                "is_training",
                "bool",
                Some(AttrValue {
                    b: Some(true),
                    ..Default::default()
                }),
            ),
        ],
        is_stateful: false,
    };
    let unpack_op = OpDef {
        name: "Unpack".into(),
        input_arg: vec![arg_def("value", "T", 0)],
        output_arg: vec![ArgDef {
            name: "output".into(),
            type_attr: "T".into(),
            number_attr: "num".into(),
            ..Default::default()
        }],
        attr: vec![
            attr_def("num", "int", None),
            attr_def("T", "type", None),
            attr_def(
                "axis",
                "int",
                Some(AttrValue {
                    i: Some(0),
                    ..Default::default()
                }),
            ),
        ],
        is_stateful: false,
    };
    let int = |i: i64| AttrValue {
        i: Some(i),
        ..Default::default()
    };
    let f = FunctionDef {
        signature: Some(OpDef {
            name: "f".into(),
            input_arg: vec![arg_def("a", "", DT_FLOAT)],
            output_arg: vec![arg_def("out", "", DT_FLOAT)],
            ..Default::default()
        }),
        node_def: vec![
            const_vec("scale", &[1.0, 2.0, 0.5]),
            const_vec("offset", &[0.0, 1.0, -1.0]),
            const_vec("mean", &[0.5, -0.5, 0.0]),
            const_vec("var", &[1.0, 4.0, 0.25]),
            node(
                "bn",
                "FusedBatchNormV3",
                &[
                    "a",
                    "scale:output:0",
                    "offset:output:0",
                    "mean:output:0",
                    "var:output:0",
                ],
                &[
                    ("T", type_attr(DT_FLOAT)),
                    ("U", type_attr(DT_FLOAT)),
                    (
                        "is_training",
                        AttrValue {
                            b: Some(false),
                            ..Default::default()
                        },
                    ),
                ],
            ),
            node(
                "u",
                "Unpack",
                &["bn:y:0"],
                &[("num", int(3)), ("axis", int(1)), ("T", type_attr(DT_FLOAT))],
            ),
            node("d", "Sub", &["u:output:2", "u:output:0"], &[("T", type_attr(DT_FLOAT))]),
        ],
        ret: HashMap::from([("out".to_string(), "d:z:0".to_string())]),
    };
    let dir = tempfile::tempdir().unwrap();
    let m = write_model(
        &dir.path().join("m"),
        vec![node("call", "f", &["serving_default_x"], &[])],
        "call:0",
        vec![f],
        vec![bn_op, unpack_op, binary_op("Sub"), const_op()],
    );
    let out = dir.path().join("m.mlir");
    ok(quantir(&["opt", &arg(&m), "-o", &arg(&out)]));
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(
        text.contains("epsilon = 9.99999974E-5 : f32") && text.contains("is_training = false"),
        "{text}"
    );
    let x = ndarray::Array2::<f32>::from_shape_vec((2, 3), vec![1.0, -2.0, 0.5, 4.0, 0.0, -1.5])
        .unwrap()
        .into_dyn();
    let npz = dir.path().join("x.npz");
    let mut w = ndarray_npy::NpzWriter::new(std::fs::File::create(&npz).unwrap());
    w.add_array("x", &x).unwrap();
    w.finish().unwrap();
    let res = dir.path().join("y.npz");
    ok(quantir(&["run", &arg(&m), "--data", &arg(&npz), "-o", &arg(&res)]));
    let y = read_npz(&res, "y");
    let bn = |v: f32, c: usize| {
        let (s, o, mu, var) = [(1.0, 0.0, 0.5, 1.0), (2.0, 1.0, -0.5, 4.0), (0.5, -1.0, 0.0, 0.25)][c];
        (v - mu) / (var + 1e-4f32).sqrt() * s + o
    };
    let want: Vec<f32> = (0..2).map(|r| bn(x[[r, 2]], 2) - bn(x[[r, 0]], 0)).collect();
    assert_eq!(y.shape(), &[2]);
    for (g, w) in y.iter().zip(&want) {
        assert!((g - w).abs() < 1e-5, "{y} vs {want:?}");
    }
}

#[test]
fn variables_are_found_by_name_when_no_call_binds_them() {
    let dir = tempfile::tempdir().unwrap();
    let m = copy_model("digits_cnn_savedmodel", dir.path());
    let pb = m.join("saved_model.pb");
    let mut sm = SavedModel::decode(std::fs::read(&pb).unwrap().as_slice()).unwrap();
    let objects = sm.meta_graphs[0].object_graph_def.as_mut().unwrap();
    for f in objects.concrete_functions.values_mut() {
        f.bound_inputs.clear();
    }
    std::fs::write(&pb, sm.encode_to_vec()).unwrap();
    let out = dir.path().join("y.npz");
    assert_reproduces_digits_cnn(&m, &out);
    // without the object graph the variables' names are not checkpoint keys: named error
    sm.meta_graphs[0].object_graph_def = None;
    std::fs::write(&pb, sm.encode_to_vec()).unwrap();
    assert_refused(&m, &[], &["variables.index", "no checkpoint value for variable"]);
}

/// `quantir run` of a variant of the digits CNN SavedModel gives TensorFlow's outputs.
fn assert_reproduces_digits_cnn(model: &Path, out: &Path) {
    ok(quantir(&[
        "run",
        &arg(model),
        "--data",
        &arg(&example("digits_test.npz")),
        "-o",
        &arg(out),
    ]));
    let d = max_abs_diff(
        &read_npz(out, "output_0"),
        &read_npz(&data("digits_cnn_test_outputs.npz"), "y"),
    );
    assert!(d <= 1e-4, "{}: max |quantir - TensorFlow| = {d}", model.display());
}

/// Makes the first dim of `s` unknown when it is 1.
fn unknown_batch(s: &mut TensorShapeProto) {
    if let Some(d) = s.dim.first_mut() {
        if d.size == 1 {
            d.size = -1;
        }
    }
}

#[test]
fn dynamic_batch_savedmodel_runs_and_quantizes() {
    // the digits CNN as Keras exports it by default: batch dimension unknown everywhere
    let dir = tempfile::tempdir().unwrap();
    let m = copy_model("digits_cnn_savedmodel", dir.path());
    let pb = m.join("saved_model.pb");
    let mut sm = SavedModel::decode(std::fs::read(&pb).unwrap().as_slice()).unwrap();
    let mg = &mut sm.meta_graphs[0];
    for sig in mg.signature_def.values_mut() {
        for t in sig.inputs.values_mut().chain(sig.outputs.values_mut()) {
            if let Some(s) = t.tensor_shape.as_mut() {
                unknown_batch(s);
            }
        }
    }
    let graph = mg.graph_def.as_mut().unwrap();
    let mut nodes: Vec<&mut NodeDef> = graph.node.iter_mut().collect();
    for f in &mut graph.library.as_mut().unwrap().function {
        nodes.extend(f.node_def.iter_mut());
    }
    for n in nodes {
        if let Some(l) = n.attr.get_mut("_output_shapes").and_then(|a| a.list.as_mut()) {
            l.shape.iter_mut().for_each(unknown_batch);
        }
        // the flatten's target shape [1, 512] becomes [-1, 512]
        if n.name.ends_with("flatten_1/Reshape/shape") {
            let t = n.attr.get_mut("value").and_then(|a| a.tensor.as_mut()).unwrap();
            t.tensor_content[..4].copy_from_slice(&(-1i32).to_le_bytes());
        }
    }
    std::fs::write(&pb, sm.encode_to_vec()).unwrap();
    let out = dir.path().join("m.mlir");
    ok(quantir(&["opt", &arg(&m), "-o", &arg(&out)]));
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.contains("(%arg0: tensor<?x8x8x1xf32>"), "{text}");
    let y = dir.path().join("y.npz");
    assert_reproduces_digits_cnn(&m, &y);
    let (sqnr, agreement) = quantize_and_score(
        &m,
        &example("digits_calib.npz"),
        &example("digits_test.npz"),
        &dir.path().join("q.mlir"),
    );
    assert!(
        sqnr >= 38.0 && agreement >= 0.995,
        "SQNR {sqnr}, top-1 agreement {agreement}"
    );
}

#[test]
fn damaged_saved_model_pb_never_panics() {
    // every byte of a real saved_model.pb flipped in turn (a deterministic stride through the
    // file): the import returns a module or an error, and never panics or aborts
    let bytes = std::fs::read(data("digits_cnn_savedmodel/saved_model.pb")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let m = copy_model("digits_cnn_savedmodel", dir.path());
    let ctx = quantir::ir::new_context();
    let (mut loaded, mut refused) = (0, 0);
    for (k, pos) in (0..bytes.len()).step_by(61).enumerate() {
        let mut b = bytes.clone();
        b[pos] ^= [0x01, 0x80, 0xff, 0x10][k % 4];
        std::fs::write(m.join("saved_model.pb"), &b).unwrap();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            quantir::formats::savedmodel::load(&ctx, &m, None).map(|_| ())
        }));
        match r {
            Ok(Ok(())) => loaded += 1,
            Ok(Err(_)) => refused += 1,
            Err(_) => panic!("import panicked with byte {pos} changed"),
        }
    }
    assert!(loaded > 0 && refused > 0, "{loaded} loaded, {refused} refused");
    // the same for the checkpoint's index (every byte: it is small)
    std::fs::write(m.join("saved_model.pb"), &bytes).unwrap();
    let index = std::fs::read(data("digits_cnn_savedmodel/variables/variables.index")).unwrap();
    for pos in 0..index.len() {
        let mut b = index.clone();
        b[pos] ^= 0xff;
        std::fs::write(m.join("variables/variables.index"), &b).unwrap();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            quantir::formats::savedmodel::load(&ctx, &m, None).map(|_| ())
        }));
        assert!(r.is_ok(), "import panicked with byte {pos} of the index changed");
    }
}
