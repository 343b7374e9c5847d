"""ONNX's own backend node tests, run through `quantir run` (the interpreter's conformance suite).

  onnx_conformance.py QUANTIR OUT_DIR [--only NAME_SUBSTRING]

The installed `onnx` package generates the tests (`onnx.backend.test.case.node`: a model, its
inputs and the expected outputs). Every test whose ops are all in OPS below runs once: its
inputs are written to an .npz (each array with a leading sample axis of 1), `quantir run`
computes the outputs, and they are compared with the test's own rtol/atol. A test is

  passed   outputs match;
  failed   quantir refused it (exit 1, the one-line reason recorded) or computed other values;
  crashed  any other exit, or "panicked" on stderr (never acceptable);
  skipped  an input or output dtype an .npz cannot hold (bfloat16, float8, int4, ...), or
           sequences/optionals.

Prints one JSON object (counts, and per failing test its reason) and writes it to
OUT_DIR/conformance.json.
"""
import json
import os
import subprocess
import sys
import tempfile
import warnings

import numpy as np

# The op types an interpreter for quantized CNNs and transformers needs (issue #16).
OPS = set(
    """Abs Acos Add And ArgMax ArgMin Asin Atan AveragePool BatchNormalization BitwiseAnd BitwiseNot
BitwiseOr BitwiseXor Cast CastLike Ceil Celu Clip Concat Constant ConstantOfShape Conv ConvInteger
ConvTranspose Cos Cosh CumSum DepthToSpace DequantizeLinear Div Dropout DynamicQuantizeLinear
Einsum Elu Equal Erf Exp Expand EyeLike Flatten Floor Gather GatherElements GatherND Gelu Gemm
GlobalAveragePool GlobalMaxPool Greater GreaterOrEqual GroupNormalization HardSigmoid HardSwish
Hardmax Identity InstanceNormalization IsInf IsNaN LRN LayerNormalization LeakyRelu Less
LessOrEqual Log LogSoftmax MatMul MatMulInteger Max MaxPool Mean MeanVarianceNormalization Min
Mish Mod Mul Neg Not OneHot Or PRelu Pad Pow QLinearConv QLinearMatMul QuantizeLinear
RMSNormalization Range Reciprocal ReduceL1 ReduceL2 ReduceLogSum ReduceLogSumExp ReduceMax
ReduceMean ReduceMin ReduceProd ReduceSum ReduceSumSquare Relu Reshape Resize RotaryEmbedding
Round ScatterElements ScatterND Selu Shape Shrink Sigmoid Sign Sin Sinh Size Slice Softmax
Softplus Softsign SpaceToDepth Split Sqrt Squeeze Sub Sum Tan Tanh ThresholdedRelu Tile TopK
Transpose Trilu Unsqueeze Where Xor""".split()
)

# dtypes an .npz holds and quantir reads or refuses by name
NPZ_KINDS = "fiub"


def as_array(a):
    """A test value as a NumPy array (TensorProto for types NumPy lacks), or None."""
    from onnx import TensorProto, numpy_helper

    if isinstance(a, TensorProto):
        try:
            a = numpy_helper.to_array(a)
        except Exception:
            return None
    if isinstance(a, np.generic):
        a = np.asarray(a)
    return a if isinstance(a, np.ndarray) else None


def storable(a):
    # ml_dtypes' bfloat16 / float8 / int4 report kind 'V' or a non-native name
    return a is not None and a.dtype.kind in NPZ_KINDS and a.dtype.itemsize <= 8 and a.dtype.isnative and a.dtype.name in np.sctypeDict


# ONNX element types an .npz cannot hold: bfloat16, the float8s, int4/uint4, float4, float8e8m0,
# int2/uint2 (the test data may still arrive as a storable array, e.g. float8 values read as
# float32, but the model's input or output is of the narrow type)
NARROW_ELEM_TYPES = {16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26}


def narrow_io(graph):
    return any(v.type.tensor_type.elem_type in NARROW_ELEM_TYPES for v in list(graph.input) + list(graph.output))


def run_case(quantir, case, work):
    inputs, outputs = case.data_sets[0]
    inputs, outputs = [as_array(a) for a in inputs], [as_array(a) for a in outputs]
    graph = case.model.graph
    if not all(storable(a) for a in list(inputs) + list(outputs)) or narrow_io(graph):
        return "skipped", "an input or output dtype an .npz cannot hold"
    names = [i.name for i in graph.input][: len(inputs)]
    model = os.path.join(work, "model.onnx")
    data = os.path.join(work, "in.npz")
    out = os.path.join(work, "out.npz")
    with open(model, "wb") as f:
        f.write(case.model.SerializeToString())
    np.savez(data, **{n: a[None] for n, a in zip(names, inputs)})
    if os.path.exists(out):
        os.remove(out)
    try:
        p = subprocess.run(
            [quantir, "run", model, "--data", data, "-o", out, "--threads", "1"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except subprocess.TimeoutExpired:
        return "crashed", "timeout after 60 s"
    err = p.stderr.strip().splitlines()
    if "panicked" in p.stderr or p.returncode not in (0, 1):
        return "crashed", f"exit {p.returncode}: {err[-1] if err else ''}"
    if p.returncode == 1:
        line = next((l for l in err if "error:" in l), err[-1] if err else "")
        # the temporary folder's name would make the record differ from run to run
        return "failed", line.split("error: ", 1)[-1].replace(work + os.sep, "")[:300]
    got = np.load(out)
    out_names = [o.name for o in graph.output]
    for name, want in zip(out_names, outputs):
        if name not in got.files:
            return "failed", f"output '{name}' missing"
        g = got[name]
        if g.shape == (1,) + want.shape:
            g = g[0]
        if g.shape != want.shape:
            return "failed", f"output '{name}': shape {g.shape}, expected {want.shape}"
        if want.dtype.kind in "fc":
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ok = np.allclose(g.astype(np.float64), want.astype(np.float64), rtol=case.rtol, atol=max(case.atol, 1e-6), equal_nan=True)
        else:
            ok = np.array_equal(g.astype(want.dtype), want)
        if not ok:
            return "failed", f"output '{name}': values differ (max |diff| {float(np.nanmax(np.abs(g.astype(np.float64) - want.astype(np.float64)))) if g.size else 0:.3g})"
    return "passed", ""


def main():
    quantir, out_dir = sys.argv[1], sys.argv[2]
    only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from onnx.backend.test.case import node

        cases = node.collect_testcases(None)
    results = {}
    with tempfile.TemporaryDirectory() as work:
        for case in sorted(cases, key=lambda c: c.name):
            if only and only not in case.name:
                continue
            ops = {n.op_type for n in case.model.graph.node}
            if not ops <= OPS or any(n.domain not in ("", "ai.onnx") for n in case.model.graph.node):
                continue
            results[case.name] = run_case(quantir, case, work)
    counts = {k: sum(1 for s, _ in results.values() if s == k) for k in ("passed", "failed", "crashed", "skipped")}
    run = counts["passed"] + counts["failed"] + counts["crashed"]
    report = {
        "onnx_version": __import__("onnx").__version__,
        **counts,
        "run": run,
        "pass_rate": counts["passed"] / run if run else 0.0,
        "not_passed": {n: f"{s}: {r}" for n, (s, r) in sorted(results.items()) if s != "passed"},
        "passed_tests": sorted(n for n, (s, _) in results.items() if s == "passed"),
    }
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "conformance.json"), "w") as f:
        json.dump(report, f, indent=1, sort_keys=True)
    print(json.dumps({k: report[k] for k in ("onnx_version", "passed", "failed", "crashed", "skipped", "run", "pass_rate")}))


if __name__ == "__main__":
    main()
