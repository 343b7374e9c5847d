"""The onnxruntime side of quantir's ONNX tests (run with the test venv's Python).

  roundtrip ORIG OUT DATA         outputs of ORIG and OUT on DATA compared bit for bit
  eval FLOAT QUANT DATA INTERP    SQNR/top-1 of QUANT vs FLOAT in onnxruntime, QUANT's weight
                                  storage, and quantir's outputs (INTERP .npz) vs onnxruntime's
  ops DIR                         small models of single ops + inputs + onnxruntime's outputs
  levels FLOAT QUANT DATA [LIMIT [LEVELS [FLOAT_OUT]]]
                                  SQNR of QUANT vs FLOAT at every graph-optimization level (the
                                  fused int8 kernels run from EXTENDED on), QUANT's largest
                                  |int8 weight| and its initializers no node reads; with LIMIT,
                                  the first LIMIT samples at DISABLE_ALL and ENABLE_ALL only, or
                                  at LEVELS (comma-separated); FLOAT's outputs are read from
                                  FLOAT_OUT (.npy) where it exists, else computed and written
                                  there
  run MODEL DATA OUT              MODEL on every sample of DATA (key x, or the input's name),
                                  outputs by graph output name into OUT (.npz)
  fix_dims MODEL OUT SHAPE        MODEL with its first input's dims fixed to SHAPE (1,3,48,192)
                                  and every other dim left as it was, written to OUT
  layers DIR                      small models of the layer patterns real exports have (Conv →
                                  BatchNormalization → Relu; a Conv whose channels differ 100×
                                  in range → depthwise Conv; Conv → Sigmoid → Conv), each with
                                  NAME_calib.npz and NAME_test.npz (key x)
  pairs DIR                       a float 1x1 Conv (pairs.onnx) whose output channel 0 of 32 has
                                  two large same-sign weights on neighbouring input channels and
                                  the others the same weights one channel apart; one whose every
                                  channel has such a pair (pairs_all.onnx); with
                                  pairs_calib.npz / pairs_test.npz (key x, up to 2.55)
  weights MODEL                   per weight a DequantizeLinear reads: its storage type and
                                  largest |q - zero point| per output channel (axis 0)
  ort_quantize FLOAT CALIB OUT    onnxruntime's own quantize_static of FLOAT on CALIB (key x, or
                                  the input's name): QDQ, QInt8 weights per channel and
                                  activations, MinMax
  fused MODEL                     the op types of onnxruntime's graph of MODEL at its default
                                  level (ORT_ENABLE_ALL), counted
  qdq MODEL                       per QuantizeLinear: the tensor it quantizes, its number of
                                  scales and its axis; and the model's op types

Every command prints one JSON object.
"""
import json
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper


def session(path):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    # the model as written: no fusions that would change float results
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def run_all(path, x):
    s = session(path)
    name = s.get_inputs()[0].name
    return np.concatenate([s.run(None, {name: x[i : i + 1].astype(np.float32)})[0] for i in range(len(x))])


def roundtrip(orig, out, data):
    onnx.checker.check_model(onnx.load(out), full_check=True)
    x = np.load(data)["x"]
    a, b = run_all(orig, x), run_all(out, x)
    m0, m1 = onnx.load(orig), onnx.load(out)
    same_meta = (
        m0.producer_name == m1.producer_name
        and m0.producer_version == m1.producer_version
        and [(p.key, p.value) for p in m0.metadata_props] == [(p.key, p.value) for p in m1.metadata_props]
        and [i.name for i in m0.graph.input] == [i.name for i in m1.graph.input]
        and [o.name for o in m0.graph.output] == [o.name for o in m1.graph.output]
    )
    print(json.dumps({"bit_exact": bool(np.array_equal(a.view(np.uint32), b.view(np.uint32))), "metadata_kept": same_meta}))


def eval_quant(fm, qm, data, interp):
    model = onnx.load(qm)
    onnx.checker.check_model(model, full_check=True)
    d = np.load(data)
    x, y = d["x"], d["y"] if "y" in d.files else None
    f, q = run_all(fm, x), run_all(qm, x)
    sqnr = 10 * np.log10((f**2).sum() / ((f - q) ** 2).sum())
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    producer = {o: n for n in model.graph.node for o in n.output}
    # every Conv/Gemm/MatMul weight: an 8-bit initializer read by a DequantizeLinear (int8, or
    # uint8 around zero point 128 where onnxruntime's u8s8 kernel could saturate)
    weights_int8 = []
    for n in model.graph.node:
        if n.op_type in ("Conv", "Gemm", "MatMul"):
            dq = producer.get(n.input[1])
            ok = dq is not None and dq.op_type == "DequantizeLinear" and dq.input[0] in inits
            ok = ok and inits[dq.input[0]].dtype in (np.int8, np.uint8)
            weights_int8.append(bool(ok))
    # one quantization step at the output: the effect of one step of the last quantized
    # activation before each output through the weight that reads it
    step = 0.0
    for n in model.graph.node:
        if n.op_type in ("Conv", "Gemm", "MatMul"):
            a, w = producer.get(n.input[0]), producer.get(n.input[1])
            if a is not None and a.op_type == "DequantizeLinear" and w is not None:
                s_a = float(np.max(inits[a.input[1]]))
                wq = inits[w.input[0]].astype(np.float64)
                s_w = inits[w.input[1]].astype(np.float64)
                axis = 0 if n.op_type == "Conv" else 1
                shape = [1] * wq.ndim
                shape[axis if s_w.size > 1 else 0] = s_w.size
                wf = np.abs(wq * s_w.reshape(shape))
                step = max(step, s_a * float(wf.max()))
    r = np.load(interp)
    r = r[r.files[0]].reshape(q.shape)
    out = {
        "sqnr": float(sqnr),
        "top1": float((q.argmax(1) == y).mean()) if y is not None else None,
        "float_top1": float((f.argmax(1) == y).mean()) if y is not None else None,
        "weights_int8": weights_int8,
        "max_diff_vs_quantir": float(np.abs(r - q).max()),
        "step": step,
        "top1_agreement_vs_quantir": float((r.argmax(1) == q.argmax(1)).mean()),
        "sqnr_vs_quantir": float(10 * np.log10((q**2).sum() / max(((r - q) ** 2).sum(), 1e-30))),
    }
    print(json.dumps(out))


def ops(out_dir):
    """Single-op models covering the attribute forms the ONNX kernels handle."""
    rng = np.random.default_rng(7)
    cases = []

    def case(name, node, inputs, inits=(), opset=17, out_type=TensorProto.FLOAT):
        graph_inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, a.shape) for n, a in inputs]
        outs = [helper.make_tensor_value_info(o, out_type, None) for o in node.output]
        g = helper.make_graph([node], name, graph_inputs, outs, [numpy_helper.from_array(a, n) for n, a in inits])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
        m.ir_version = 8

        p = os.path.join(out_dir, name + ".onnx")
        onnx.save(m, p)
        feeds = {n: a for n, a in inputs}
        res = session(p).run(None, feeds)
        np.savez(os.path.join(out_dir, name + "_in.npz"), **{n: a[None] for n, a in inputs})
        np.savez(os.path.join(out_dir, name + "_out.npz"), *[r[None] for r in res])
        cases.append(name)

    f = lambda *s: rng.standard_normal(s).astype(np.float32)
    x = f(1, 4, 9, 7)
    case("conv_group2_pads_strides", helper.make_node("Conv", ["x", "w", "b"], ["y"], group=2, pads=[1, 0, 2, 1], strides=[2, 1]), [("x", x)], [("w", f(6, 2, 3, 3)), ("b", f(6))])
    case("conv_depthwise_same_lower", helper.make_node("Conv", ["x", "w"], ["y"], group=4, auto_pad="SAME_LOWER", strides=[2, 2]), [("x", x)], [("w", f(8, 1, 3, 3))])
    case("conv_dilated_pads", helper.make_node("Conv", ["x", "w"], ["y"], pads=[2, 1, 0, 3], dilations=[2, 2]), [("x", x)], [("w", f(5, 4, 3, 2))])
    case("avgpool_include_pad", helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1), [("x", x)])
    case("avgpool_exclude_pad", helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 3], strides=[2, 2], pads=[0, 1, 1, 0]), [("x", x)])
    case("maxpool_same_upper", helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER"), [("x", x)])
    case("gemm_trans_alpha_beta", helper.make_node("Gemm", ["a", "b", "c"], ["y"], transA=1, transB=1, alpha=0.5, beta=2.0), [("a", f(5, 3))], [("b", f(4, 5)), ("c", f(1, 4))])
    case("matmul_batched_broadcast", helper.make_node("MatMul", ["a", "b"], ["y"]), [("a", f(2, 3, 4, 5))], [("b", f(3, 5, 6))])
    case("softmax_axis1", helper.make_node("Softmax", ["x"], ["y"], axis=1), [("x", x)])
    case("slice_negative_steps", helper.make_node("Slice", ["x", "s", "e", "a", "t"], ["y"]), [("x", x)], [("s", np.array([-1, 1], np.int64)), ("e", np.array([-100, 8], np.int64)), ("a", np.array([3, 2], np.int64)), ("t", np.array([-2, 3], np.int64))])
    case("pad_reflect", helper.make_node("Pad", ["x", "p"], ["y"], mode="reflect"), [("x", x)], [("p", np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64))])
    case("pad_constant_value", helper.make_node("Pad", ["x", "p", "v"], ["y"]), [("x", x)], [("p", np.array([0, 1, 0, 2, 0, 0, 1, 0], np.int64)), ("v", np.array(1.5, np.float32))])
    case("concat_neg_axis", helper.make_node("Concat", ["x", "z"], ["y"], axis=-1), [("x", x)], [("z", f(1, 4, 9, 2))])
    case("split_sizes", helper.make_node("Split", ["x", "s"], ["y0", "y1"], axis=2), [("x", x)], [("s", np.array([4, 5], np.int64))])
    case("gather_negative", helper.make_node("Gather", ["x", "i"], ["y"], axis=3), [("x", x)], [("i", np.array([[0, -1], [2, 3]], np.int64))])
    case("reduce_mean_keepdims0", helper.make_node("ReduceMean", ["x", "a"], ["y"], keepdims=0), [("x", x)], [("a", np.array([1, -1], np.int64))], opset=18)
    case("clip_min_only", helper.make_node("Clip", ["x", "lo", ""], ["y"]), [("x", x)], [("lo", np.array(-0.3, np.float32))])
    ties = np.round(x * 2) / 2  # repeated values: which index wins a tie matters
    case("argmax_keepdims", helper.make_node("ArgMax", ["x"], ["y"], axis=2), [("x", ties)], out_type=TensorProto.INT64)
    case("argmin_last_index", helper.make_node("ArgMin", ["x"], ["y"], axis=-1, keepdims=0, select_last_index=1), [("x", ties)], out_type=TensorProto.INT64)
    case("layernorm", helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1, epsilon=1e-3), [("x", x)], [("g", f(7)), ("b", f(7))])
    case("instancenorm", helper.make_node("InstanceNormalization", ["x", "g", "b"], ["y"]), [("x", x)], [("g", f(4)), ("b", f(4))])
    case("hardswish", helper.make_node("HardSwish", ["x"], ["y"]), [("x", x)])
    case("flatten_axis2", helper.make_node("Flatten", ["x"], ["y"], axis=2), [("x", x)])
    case("unsqueeze_squeeze", helper.make_node("Unsqueeze", ["x", "a"], ["y"]), [("x", x)], [("a", np.array([0, -1], np.int64))])
    case("expand", helper.make_node("Expand", ["x", "s"], ["y"]), [("x", f(1, 4, 1, 7))], [("s", np.array([2, 1, 3, 1], np.int64))])
    case("conv_transpose_pads_outpad", helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], strides=[2, 2], pads=[1, 0, 0, 1], output_padding=[1, 0]), [("x", x)], [("w", f(4, 3, 3, 3)), ("b", f(3))])
    case("conv_transpose_group_dilated", helper.make_node("ConvTranspose", ["x", "w"], ["y"], group=2, dilations=[2, 1], strides=[1, 2]), [("x", x)], [("w", f(4, 2, 2, 3))])
    case("conv_transpose_output_shape", helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2], output_shape=[17, 13]), [("x", x)], [("w", f(4, 2, 3, 3))])
    empty = np.zeros(0, np.float32)
    case("resize_nearest_scales", helper.make_node("Resize", ["x", "r", "s"], ["y"], mode="nearest"), [("x", x)], [("r", empty), ("s", np.array([1, 1, 2.0, 1.5], np.float32))])
    case("resize_nearest_asymmetric_floor", helper.make_node("Resize", ["x", "r", "s"], ["y"], mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor"), [("x", x)], [("r", empty), ("s", np.array([1, 1, 3.0, 2.0], np.float32))])
    case("resize_linear_sizes", helper.make_node("Resize", ["x", "r", "", "z"], ["y"], mode="linear"), [("x", x)], [("r", empty), ("z", np.array([1, 4, 14, 5], np.int64))])
    case("resize_linear_align_corners", helper.make_node("Resize", ["x", "r", "s"], ["y"], mode="linear", coordinate_transformation_mode="align_corners"), [("x", x)], [("r", empty), ("s", np.array([1, 1, 2.0, 2.0], np.float32))])
    case("resize_linear_pytorch", helper.make_node("Resize", ["x", "r", "s"], ["y"], mode="linear", coordinate_transformation_mode="pytorch_half_pixel"), [("x", x)], [("r", empty), ("s", np.array([1, 1, 0.5, 1.0], np.float32))])
    q = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"])
    dq = helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])
    g = helper.make_graph(
        [q, dq], "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array(0.02, np.float32), "s"), numpy_helper.from_array(np.array(3, np.int8), "z")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    p = os.path.join(out_dir, "qdq_int8.onnx")
    onnx.save(m, p)
    np.savez(os.path.join(out_dir, "qdq_int8_in.npz"), x=(x * 3)[None])
    np.savez(os.path.join(out_dir, "qdq_int8_out.npz"), session(p).run(None, {"x": x * 3})[0][None])
    cases.append("qdq_int8")
    print(json.dumps({"cases": cases}))


def levels(fm, qm, data, limit=None, only=None, float_out=None):
    d = np.load(data)
    x = d["x"] if "x" in d.files else d[d.files[0]]
    x = x[: int(limit)] if limit else x
    # An emulated CPU runs float kernels >1,000x slower than the host (and ~4x slower than its
    # own int8 ones): a caller runs the float model and the unfused level natively, and only the
    # fused level emulated, sharing FLOAT_OUT
    if float_out and os.path.exists(float_out):
        f = np.load(float_out)
    else:
        f = run_all(fm, x)
        if float_out:
            np.save(float_out, f)
    # a limited run (an emulated CPU) measures the two levels that matter
    wanted = only.split(",") if only else ["ORT_DISABLE_ALL", "ORT_ENABLE_ALL"] if limit else None
    out = {}
    for name in ["ORT_DISABLE_ALL", "ORT_ENABLE_BASIC", "ORT_ENABLE_EXTENDED", "ORT_ENABLE_ALL"]:
        if wanted and name not in wanted:
            continue
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, name)
        s = ort.InferenceSession(qm, so, providers=["CPUExecutionProvider"])
        n = s.get_inputs()[0].name
        q = np.concatenate([s.run(None, {n: x[i : i + 1].astype(np.float32)})[0] for i in range(len(x))])
        out[name] = float(10 * np.log10((f**2).sum() / ((f - q) ** 2).sum()))
    m = onnx.load(qm)
    # the stored weights: int8 initializers that a DequantizeLinear reads as its data
    data = {n.input[0] for n in m.graph.node if n.op_type == "DequantizeLinear"}
    ints = [numpy_helper.to_array(t) for t in m.graph.initializer if t.data_type == TensorProto.INT8 and t.name in data]
    out["max_abs_int8"] = int(max(np.abs(a.astype(np.int64)).max() for a in ints)) if ints else None
    used = {i for n in m.graph.node for i in n.input} | {o.name for o in m.graph.output}
    out["unused_initializers"] = sum(t.name not in used for t in m.graph.initializer)
    # ops that run integer kernels at every level, unfused ones included
    integer = {"ConvInteger", "MatMulInteger", "QLinearConv", "QLinearMatMul", "QGemm", "MatMulIntegerToFloat"}
    out["integer_ops"] = sum(n.op_type in integer for n in m.graph.node)
    print(json.dumps(out))


def run(model, data, out):
    s = session(model)
    d = np.load(data)
    inp = s.get_inputs()[0]
    # by the input's name, else the only array (as quantir binds it)
    x = d[inp.name] if inp.name in d.files else d["x"] if "x" in d.files else d[d.files[0]]
    res = [s.run(None, {inp.name: x[i : i + 1].astype(np.float32)}) for i in range(len(x))]
    names = [o.name for o in s.get_outputs()]
    np.savez(out, **{n: np.concatenate([r[k] for r in res]) for k, n in enumerate(names)})
    print(json.dumps({"outputs": names, "samples": len(x)}))


def fix_dims(model, out, shape):
    m = onnx.load(model)
    dims = m.graph.input[0].type.tensor_type.shape.dim
    for d, n in zip(dims, (int(v) for v in shape.split(","))):
        d.ClearField("dim_param")
        d.dim_value = n
    onnx.save(m, out)
    print(json.dumps({"input": m.graph.input[0].name, "shape": [d.dim_value for d in dims]}))


def layers(out_dir):
    rng = np.random.default_rng(11)

    def save(name, nodes, inits, x_shape, opset=13):
        for i, n in enumerate(nodes):
            n.name = f"{name}_{i}"
        g = helper.make_graph(
            nodes,
            name,
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4] + list(x_shape[2:]))],
            [numpy_helper.from_array(a.astype(np.float32), n) for n, a in inits.items()],
        )
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
        m.ir_version = 8
        onnx.checker.check_model(m, full_check=True)
        onnx.save(m, os.path.join(out_dir, name + ".onnx"))
        for split, n in (("calib", 32), ("test", 16)):
            x = rng.standard_normal((n,) + tuple(x_shape[1:])).astype(np.float32)
            np.savez(os.path.join(out_dir, f"{name}_{split}.npz"), x=x)

    # Conv → BatchNormalization (channels scaled 0.05..4) → Relu → Conv
    c = 8
    save(
        "conv_bn_relu",
        [
            helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
            helper.make_node("BatchNormalization", ["c1", "g", "b", "m", "v"], ["bn"], epsilon=1e-3),
            helper.make_node("Relu", ["bn"], ["r"]),
            helper.make_node("Conv", ["r", "w2", "b2"], ["y"]),
        ],
        {
            "w1": rng.standard_normal((c, 3, 3, 3)) * 0.3,
            "g": np.geomspace(0.05, 4.0, c),
            "b": rng.standard_normal(c) * 0.1,
            "m": rng.standard_normal(c) * 0.2,
            "v": rng.uniform(0.5, 2.0, c),
            "w2": rng.standard_normal((4, c, 1, 1)) * 0.3,
            "b2": rng.standard_normal(4) * 0.1,
        },
        [1, 3, 10, 10],
        opset=12,
    )
    # a 1x1 Conv whose output channels differ 100× in range, read by a depthwise Conv alone
    w1 = rng.standard_normal((c, 3, 1, 1)) * np.geomspace(0.02, 2.0, c)[:, None, None, None]
    save(
        "depthwise_ranges",
        [
            helper.make_node("Conv", ["x", "w1", "b1"], ["c1"]),
            helper.make_node("Conv", ["c1", "wd", "bd"], ["d"], group=c, pads=[1, 1, 1, 1]),
            helper.make_node("Conv", ["d", "w2"], ["y"]),
        ],
        {
            "w1": w1,
            "b1": rng.standard_normal(c) * 0.01,
            "wd": rng.standard_normal((c, 1, 3, 3)) / np.geomspace(0.02, 2.0, c)[:, None, None, None] * 0.3,
            "bd": rng.standard_normal(c) * 0.1,
            "w2": rng.standard_normal((4, c, 1, 1)) * 0.3,
        },
        [1, 3, 8, 8],
    )
    # Conv → Sigmoid → Conv: the first Conv's output is read by a float op only
    save(
        "conv_sigmoid_conv",
        [
            helper.make_node("Conv", ["x", "w1", "b1"], ["c1"]),
            helper.make_node("Sigmoid", ["c1"], ["s"]),
            helper.make_node("Conv", ["s", "w2"], ["y"]),
        ],
        {
            "w1": rng.standard_normal((c, 3, 1, 1)) * 3.0,
            "b1": rng.standard_normal(c),
            "w2": rng.standard_normal((4, c, 1, 1)) * 0.3,
        },
        [1, 3, 6, 6],
    )
    # the model input read by a depthwise Conv alone, one channel 3× the others' range; in
    # `_outlier.npz` the small channels are near 0 but in one sample, which alone sets their
    # extremes (a third of the large channel's, as in the stable data)
    save(
        "depthwise_input",
        [
            helper.make_node("Conv", ["x", "wd", "bd"], ["d"], group=c, pads=[1, 1, 1, 1]),
            helper.make_node("Conv", ["d", "w2"], ["y"]),
        ],
        {
            "wd": rng.standard_normal((c, 1, 3, 3)) * 0.3,
            "bd": rng.standard_normal(c) * 0.1,
            "w2": rng.standard_normal((4, c, 1, 1)) * 0.3,
        },
        [1, c, 6, 6],
    )
    scale = np.array([2.0] + [0.01] * (c - 1), np.float32)[None, :, None, None]
    x = rng.standard_normal((32, c, 6, 6)).astype(np.float32) * scale
    x[0, 1:] *= 100.0
    np.savez(os.path.join(out_dir, "depthwise_input_outlier.npz"), x=x)
    x = rng.standard_normal((32, c, 6, 6)).astype(np.float32)
    x[:, 1:] *= 0.3
    np.savez(os.path.join(out_dir, "depthwise_input_calib.npz"), x=x)
    print(json.dumps({"models": ["conv_bn_relu", "depthwise_ranges", "conv_sigmoid_conv", "depthwise_input"]}))


def pairs(out_dir):
    def conv(name, w):
        nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"])]
        m = len(w)
        g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 3, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, m, 3, 3])],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.zeros(m, np.float32), "b")])
        model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
        model.ir_version = 8
        onnx.save(model, os.path.join(out_dir, f"{name}.onnx"))

    w = np.zeros((32, 4, 1, 1), np.float32)
    w[0, :2, 0, 0] = [1.27, 1.0]  # neighbours: one int16 pair of the u8s8 kernel
    w[1:, [0, 2], 0, 0] = [1.27, 1.0]  # one apart: two pairs
    w[1:, 3, 0, 0] = -0.5
    conv("pairs", w)
    # every channel has a saturating pair: widening them all would cost more than uint8 weights
    w = np.zeros((4, 4, 1, 1), np.float32)
    w[:, :2, 0, 0] = [1.27, 1.0]
    w[:, 2:, 0, 0] = [-0.9, -1.1]
    conv("pairs_all", w)
    rng = np.random.default_rng(0)
    for name, n in [("calib", 32), ("test", 16)]:
        x = rng.uniform(0.0, 2.55, (n, 4, 3, 3)).astype(np.float32)
        x[:, :, 1, 1] = 2.55  # every channel reaches the top of the range at once
        np.savez(os.path.join(out_dir, f"pairs_{name}.npz"), x=x)
    print(json.dumps({"written": "pairs.onnx"}))


def weights(model):
    m = onnx.load(model)
    inits = {t.name: t for t in m.graph.initializer}
    out = {}
    for n in m.graph.node:
        if n.op_type != "DequantizeLinear" or n.input[0] not in inits or inits[n.input[0]].data_type == TensorProto.INT32:
            continue
        q = numpy_helper.to_array(inits[n.input[0]]).astype(np.int64)
        zp = numpy_helper.to_array(inits[n.input[2]]).astype(np.int64) if len(n.input) > 2 else np.zeros(1, np.int64)
        zp = zp.reshape([-1] + [1] * (q.ndim - 1)) if zp.size > 1 else zp.reshape(())
        d = np.abs(q - zp).reshape(q.shape[0], -1).max(axis=1)
        out[n.input[0]] = {"dtype": str(q.dtype if inits[n.input[0]].data_type != TensorProto.UINT8 else "uint8"),
                           "stored": onnx.TensorProto.DataType.Name(inits[n.input[0]].data_type).lower(),
                           "max_abs": [int(v) for v in d]}
    print(json.dumps(out))


def qdq(model):
    m = onnx.load(model)
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    qs = []
    for n in m.graph.node:
        if n.op_type == "QuantizeLinear":
            axis = [a.i for a in n.attribute if a.name == "axis"]
            qs.append({"input": n.input[0], "scales": int(inits[n.input[1]].size), "axis": axis[0] if axis else None})
    print(json.dumps({"quantize": qs, "ops": [n.op_type for n in m.graph.node]}))


def fused(model):
    import collections
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.optimized_model_filepath = os.path.join(d, "opt.onnx")
        ort.set_default_logger_severity(3)
        ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
        m = onnx.load(so.optimized_model_filepath)
    print(json.dumps(dict(collections.Counter(n.op_type for n in m.graph.node))))


def ort_quantize(fm, calib, out):
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    name = onnx.load(fm).graph.input[0].name
    d = np.load(calib)
    x = d[name] if name in d.files else d["x"] if "x" in d.files else d[d.files[0]]

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter({name: x[i : i + 1].astype(np.float32)} for i in range(len(x)))

        def get_next(self):
            return next(self.it, None)

    quantize_static(fm, out, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    weight_type=QuantType.QInt8, activation_type=QuantType.QInt8)
    print(json.dumps({"wrote": out, "samples": len(x)}))


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    {"roundtrip": roundtrip, "eval": eval_quant, "ops": ops, "run": run, "levels": levels, "fix_dims": fix_dims, "layers": layers, "qdq": qdq, "pairs": pairs, "weights": weights, "ort_quantize": ort_quantize, "fused": fused}[cmd](*args)
