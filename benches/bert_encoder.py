#!/usr/bin/env python3
"""A BERT-base-shaped ONNX encoder with seeded random weights, and quantir against
onnxruntime's `quantize_static` on it (issue #19, scale): stage wall times, peak RSS, output
size and SQNR, for 2, 6 and 12 layers.

The encoder is what PyTorch exports for BERT's layers (no embeddings, no pooler): input
hidden states [N, 128, 768] → per layer Q/K/V MatMul + Add, reshape to 12 heads, Q·Kᵀ,
scale, Softmax, P·V, output MatMul + Add, residual, LayerNormalization, FFN 768 → 3072 with
GELU written with Erf, 3072 → 768, residual, LayerNormalization. 12 layers hold 85 M
parameters (340 MB), written as ONNX external data. Samples are seeded N(0, 1) hidden states.

    .venv/bin/python benches/bert_encoder.py --quantir target/release/quantir [--layers 2,6,12]
        [--calib 16] [--test 4] [--work DIR] [--pre-ln] [--outliers N] [--variant NAME=FLAGS]

`--pre-ln --outliers 6` makes the encoder pre-LN (each sublayer reads a norm of the residual
stream, as GPT and ViT do) with 6 hidden channels of every norm's gain 30× the others — the
activation outliers of trained transformers that SmoothQuant (`--equalize-layers`) moves into
the weights; `--variant "sq=--equalize-layers"` runs quantir with it too.

Each tool runs as its own process under GNU time (`/usr/bin/time -f "%e %M"`): quantir
`quantize MODEL --data CALIB --no-cache --json -o Q.onnx` (its stage times from `--json`),
onnxruntime `quantize_static` (QDQ, QInt8, per-channel, MinMax, external data for its output)
in a child Python. SQNR of each output on the test samples at ORT_DISABLE_ALL.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HIDDEN, HEADS, FFN, SEQ = 768, 12, 3072, 128


def encoder(layers, seed=19, pre_ln=False, outliers=0):
    """`layers` encoder layers. `pre_ln`: each sublayer reads a LayerNormalization of the
    residual stream and adds its output to it (GPT, ViT, most models since), a final norm at
    the end; otherwise BERT's post-LN. `outliers`: that many hidden channels of every norm's
    gain are 30× the others, as trained transformers' norms have (the activation outliers
    SmoothQuant is about)."""
    rng = np.random.default_rng(seed)
    hot = rng.choice(HIDDEN, size=outliers, replace=False)
    inits, nodes = [], []

    def const(name, value, dtype=np.float32):
        inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def node(op, ins, out, **attrs):
        nodes.append(helper.make_node(op, ins, [out], name=out, **attrs))
        return out

    def linear(x, name, din, dout):
        w = const(name + ".weight", rng.standard_normal((din, dout), dtype=np.float32) * (0.8 / np.sqrt(din)))
        b = const(name + ".bias", rng.standard_normal(dout, dtype=np.float32) * 0.02)
        return node("Add", [node("MatMul", [x, w], name + ".mm"), b], name)

    def norm(x, name):
        gamma = 1.0 + 0.1 * rng.standard_normal(HIDDEN, dtype=np.float32)
        gamma[hot] *= 30.0
        g = const(name + ".gamma", gamma)
        b = const(name + ".beta", 0.05 * rng.standard_normal(HIDDEN, dtype=np.float32))
        return node("LayerNormalization", [x, g, b], name, axis=-1, epsilon=1e-12)

    heads = const("heads_shape", [0, SEQ, HEADS, HIDDEN // HEADS], np.int64)
    merged = const("merged_shape", [0, SEQ, HIDDEN], np.int64)
    scale = const("attention_scale", 1.0 / np.sqrt(HIDDEN // HEADS))
    half, one, root2 = const("half", 0.5), const("one", 1.0), const("sqrt2", np.sqrt(2.0))
    h = "hidden_states"
    for i in range(layers):
        p = f"layer{i}"
        x = norm(h, f"{p}.norm1") if pre_ln else h
        split = lambda name, perm: node("Transpose", [node("Reshape", [linear(x, f"{p}.{name}", HIDDEN, HIDDEN), heads], f"{p}.{name}.heads")], f"{p}.{name}.t", perm=perm)
        q, k, v = split("query", [0, 2, 1, 3]), split("key", [0, 2, 3, 1]), split("value", [0, 2, 1, 3])
        scores = node("Mul", [node("MatMul", [q, k], f"{p}.scores"), scale], f"{p}.scores.scaled")
        probs = node("Softmax", [scores], f"{p}.probs", axis=-1)
        ctx = node("Transpose", [node("MatMul", [probs, v], f"{p}.context")], f"{p}.context.t", perm=[0, 2, 1, 3])
        ctx = node("Reshape", [ctx, merged], f"{p}.context.merged")
        h = node("Add", [h, linear(ctx, f"{p}.attention.output", HIDDEN, HIDDEN)], f"{p}.residual1")
        if not pre_ln:
            h = norm(h, f"{p}.norm1")
        f = linear(norm(h, f"{p}.norm2") if pre_ln else h, f"{p}.intermediate", HIDDEN, FFN)
        erf = node("Erf", [node("Div", [f, root2], f"{p}.gelu.div")], f"{p}.gelu.erf")
        f = node("Mul", [node("Mul", [f, node("Add", [erf, one], f"{p}.gelu.add")], f"{p}.gelu.mul"), half], f"{p}.gelu")
        h = node("Add", [h, linear(f, f"{p}.output", FFN, HIDDEN)], f"{p}.residual2")
        if not pre_ln:
            h = norm(h, f"{p}.norm2")
    if pre_ln:
        h = norm(h, "final_norm")
    graph = helper.make_graph(
        nodes,
        "bert_encoder",
        [helper.make_tensor_value_info("hidden_states", TensorProto.FLOAT, ["N", SEQ, HIDDEN])],
        [helper.make_tensor_value_info(h, TensorProto.FLOAT, ["N", SEQ, HIDDEN])],
        inits,
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="quantir-benches")
    m.ir_version = 8
    return m


ORT_CHILD = r"""
import sys, numpy as np
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
src, calib, out = sys.argv[1:4]
x = np.load(calib)["hidden_states"]
class Reader(CalibrationDataReader):
    def __init__(self): self.it = iter({"hidden_states": x[i:i+1]} for i in range(len(x)))
    def get_next(self): return next(self.it, None)
quantize_static(src, out, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                weight_type=QuantType.QInt8, activation_type=QuantType.QInt8, use_external_data_format=True)
"""


def timed(cmd):
    """(wall s, peak RSS MB, stdout) of `cmd` under GNU time. MB is 10^6 bytes, as for the
    weights and outputs (GNU time's %M is in KiB: until 2026-12-05 it was divided by 1024,
    which put RSS in MiB beside weights in MB and understated RSS / weights by 4.6 %)."""
    p = subprocess.run(["/usr/bin/time", "-f", "TIME %e %M", *cmd], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(p.stderr.strip().splitlines()[-2 if len(p.stderr.strip().splitlines()) > 1 else -1])
    wall, kb = next(l for l in p.stderr.splitlines() if l.startswith("TIME ")).split()[1:]
    return float(wall), int(kb) * 1024 / 1e6, p.stdout


def size_mb(model):
    d = os.path.dirname(model)
    stem = os.path.basename(model)
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d) if f.startswith(stem) or f.startswith(stem.replace(".onnx", ""))) / 1e6


def sqnr_of(float_model, quant, test):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    run = lambda m: np.concatenate([ort.InferenceSession(m, so).run(None, {"hidden_states": x[None]})[0] for x in test])
    f, q = run(float_model).astype(np.float64), run(quant).astype(np.float64)
    return float(10 * np.log10((f**2).sum() / ((f - q) ** 2).sum()))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quantir", default="target/release/quantir")
    ap.add_argument("--layers", default="2,6,12")
    ap.add_argument("--calib", type=int, default=16)
    ap.add_argument("--test", type=int, default=4)
    ap.add_argument("--work")
    ap.add_argument("--pre-ln", action="store_true", help="pre-LN layers (GPT, ViT) instead of BERT's post-LN")
    ap.add_argument("--outliers", type=int, default=0, help="hidden channels whose norm gains are 30x the others")
    ap.add_argument("--variant", action="append", default=[], help="NAME=FLAGS: quantir again with these flags")
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(dir=a.work) as work:
        rng = np.random.default_rng(23)
        calib = os.path.join(work, "calib.npz")
        np.savez(calib, hidden_states=rng.standard_normal((a.calib, SEQ, HIDDEN), dtype=np.float32))
        test = rng.standard_normal((a.test, SEQ, HIDDEN), dtype=np.float32)
        for layers in [int(n) for n in a.layers.split(",")]:
            d = os.path.join(work, f"l{layers}")
            for sub in ("float", "quantir", "ort"):
                os.makedirs(os.path.join(d, sub))
            src = os.path.join(d, "float", "bert.onnx")
            onnx.save(encoder(layers, pre_ln=a.pre_ln, outliers=a.outliers), src, save_as_external_data=True, location="bert.onnx.data")
            weights_mb = os.path.getsize(src + ".data") / 1e6
            row = {"layers": layers, "weights_mb": round(weights_mb, 1)}
            q = os.path.join(d, "quantir", "q.onnx")
            try:
                wall, rss, out = timed([a.quantir, "quantize", src, "--data", calib, "--no-cache", "--json", "-o", q])
                row["quantir"] = {"wall_s": wall, "rss_mb": round(rss), "out_mb": round(size_mb(q), 1),
                                  "stages": json.loads(out).get("stages"), "sqnr_db": round(sqnr_of(src, q, test), 2)}
            except Exception as e:
                row["quantir"] = {"error": str(e)[:300]}
            for v in a.variant:
                name, flags = v.split("=", 1)
                qv = os.path.join(d, "quantir", name + ".onnx")
                try:
                    wall, rss, out = timed([a.quantir, "quantize", src, "--data", calib, "--no-cache", "--json", *flags.split(), "-o", qv])
                    row[name] = {"wall_s": wall, "rss_mb": round(rss), "sqnr_db": round(sqnr_of(src, qv, test), 2)}
                except Exception as e:
                    row[name] = {"error": str(e)[:300]}
            o = os.path.join(d, "ort", "q.onnx")
            try:
                wall, rss, _ = timed([sys.executable, "-c", ORT_CHILD, src, calib, o])
                row["onnxruntime"] = {"wall_s": wall, "rss_mb": round(rss), "out_mb": round(size_mb(o), 1),
                                      "sqnr_db": round(sqnr_of(src, o, test), 2)}
            except Exception as e:
                row["onnxruntime"] = {"error": str(e)[:300]}
            print(json.dumps(row), flush=True)
            rows.append(row)
    print("\n| layers | weights MB | quantir wall s | quantir RSS MB | ORT wall s | ORT RSS MB | wall ratio | RSS ratio | RSS / weights (quantir) | output MB quantir / ORT | SQNR dB quantir / ORT |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        qa, oa = r["quantir"], r["onnxruntime"]
        if "error" in qa or "error" in oa:
            print(f"| {r['layers']} | {r['weights_mb']} | {qa} | | {oa} | | | | | | |")
            continue
        print(f"| {r['layers']} | {r['weights_mb']} | {qa['wall_s']} | {qa['rss_mb']} | {oa['wall_s']} | {oa['rss_mb']} | "
              f"{qa['wall_s'] / oa['wall_s']:.2f} | {qa['rss_mb'] / oa['rss_mb']:.2f} | {qa['rss_mb'] / r['weights_mb']:.2f} | "
              f"{qa['out_mb']} / {oa['out_mb']} | {qa['sqnr_db']} / {oa['sqnr_db']} |")
    for v in a.variant:
        name = v.split("=", 1)[0]
        print(f"\nquantir `{v.split('=', 1)[1]}` ({name}): " + "; ".join(
            f"{r['layers']} layers {r[name].get('sqnr_db', r[name].get('error'))} dB, {r[name].get('wall_s')} s, {r[name].get('rss_mb')} MB" for r in rows))


if __name__ == "__main__":
    sys.exit(main())
