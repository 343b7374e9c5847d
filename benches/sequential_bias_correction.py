#!/usr/bin/env python3
"""Bias correction measured in the quantized model, layer after layer: what it would give.

quantir's `--bias-correction` measures each layer alone, on float inputs (one float run for
all layers). The paper's sequential form measures each layer's mean output shift in the
quantized model itself, whose earlier layers are already corrected. This script measured what
that form would give before quantir built it (now `--bias-correction-sequential`, wave by wave
in quantir's own interpreter); it stays as a check of that form in onnxruntime: on each re-split of a shared real model
(as `real_models_quality.py --splits`), it quantizes with quantir's defaults to QDQ ONNX, then
in program order, for each Conv with an int32 bias,

  shift[c] = mean over calibration samples and positions of (quantized − float)[c] at its output
  bias_int32[c] −= round(shift[c] / bias_scale[c])

running the partly corrected model in onnxruntime (ORT_DISABLE_ALL) for each layer, and scores
the result on the split's test samples (first output), next to the defaults and to
`--bias-correction` on the same split. A Conv whose output the float model does not name alike,
or whose bias is not an int32 DequantizeLinear, is left as it is (counted).

`--on=ARGS` corrects the model quantir writes with ARGS (e.g. `--on=--gptq-asymmetric`; the `=`
because ARGS start with a dash) instead of the defaults', and scores that model too.

Usage: .venv/bin/python benches/sequential_bias_correction.py --quantir target/release/quantir
           --only fer [--splits K] [--on=ARGS]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from real_models_quality import MODELS, ROOT, models, resplit, sqnr  # noqa: E402


def session(model):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def exposing(model, names):
    """A copy of `model` whose graph outputs also hold `names`."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    m.graph.output.extend(onnx.helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None)
                          for n in names if n not in have)
    return m


def run(model, x, names):
    s = session(model)
    feed = s.get_inputs()[0].name
    runs = [s.run(names, {feed: x[i : i + 1]}) for i in range(len(x))]
    return [np.concatenate([r[j] for r in runs]) for j in range(len(names))]


def corrected(float_model, quant, calib):
    """`quant` with each int32-biased Conv's mean output shift taken off, in program order;
    and how many Convs were left as they were."""
    init = {i.name: i for i in quant.graph.initializer}
    made_by = {o: n for n in quant.graph.node for o in n.output}
    float_names = {o for n in float_model.graph.node for o in n.output}
    convs, left = [], 0
    for n in quant.graph.node:
        if n.op_type != "Conv" or len(n.input) < 3:
            continue
        b = made_by.get(n.input[2])
        if n.output[0] in float_names and b is not None and b.op_type == "DequantizeLinear" and b.input[0] in init:
            convs.append((n.output[0], init[b.input[0]], numpy_helper.to_array(init[b.input[1]]).astype(np.float64)))
        else:
            left += 1
    keys = [k for k, _, _ in convs]
    float_out = dict(zip(keys, run(exposing(float_model, keys), calib, keys)))
    for key, bias, scale in convs:
        q = run(exposing(quant, [key]), calib, [key])[0]
        shift = (q - float_out[key]).astype(np.float64).mean(axis=tuple(i for i in range(q.ndim) if i != 1))
        b = numpy_helper.to_array(bias).astype(np.int64) - np.round(shift / scale).astype(np.int64)
        bias.CopyFrom(numpy_helper.from_array(np.clip(b, -(2**31), 2**31 - 1).astype(np.int32), bias.name))
    return quant, len(convs), left


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quantir", default=os.path.join(ROOT, "target/release/quantir"))
    ap.add_argument("--models", default=os.path.join(ROOT, "..", "shared", "models", "real"))
    ap.add_argument("--only", required=True)
    ap.add_argument("--splits", type=int, default=10)
    ap.add_argument("--on", default="", help="quantize ARGS of the model to correct (default: the defaults)")
    a = ap.parse_args()
    settings = [("defaults", []), ("bias-correction", ["--bias-correction"])]
    if a.on:
        settings.append((a.on, a.on.split()))
    with tempfile.TemporaryDirectory() as work:
        for name, src, calib, test, float_path in models(a, work):
            float_model = onnx.load(float_path)
            out_name = float_model.graph.output[0].name
            rows = []
            for i, (cal, score) in enumerate(resplit(calib, test, a.splits, work, MODELS[name][1])):
                c, t = np.load(cal), np.load(score)
                xc, xt = c[c.files[0]].astype(np.float32), t[t.files[0]].astype(np.float32)
                ref = run(float_model, xt, [out_name])[0]
                row = {"model": name, "split": i}
                written = {}
                for k, (label, args) in enumerate(settings):
                    written[label] = os.path.join(work, f"setting{k}.onnx")
                    subprocess.run([a.quantir, "quantize", src, "--data", cal, "--no-cache", *args, "-o",
                                    written[label]], check=True, capture_output=True)
                    row[label] = sqnr(ref, run(onnx.load(written[label]), xt, [out_name])[0])
                # the model corrected: --on's, else the defaults'
                seq, n, left = corrected(float_model, onnx.load(written[a.on or "defaults"]), xc)
                row["sequential"] = sqnr(ref, run(seq, xt, [out_name])[0])
                row["convs corrected"], row["convs left"] = n, left
                print(json.dumps(row), flush=True)
                rows.append(row)
            on = f" on {a.on}" if a.on else ""
            print(f"\n| model | setting (sequential{on}) | median SQNR dB ({out_name}) | splits above the defaults |")
            print("|---|---|---|---|")
            for label in [l for l, _ in settings] + ["sequential"]:
                v = [r[label] for r in rows]
                wins = "—" if label == "defaults" else f"{sum(r[label] > r['defaults'] for r in rows)} of {len(rows)}"
                print(f"| {name} | {label} | {np.median(v):.2f} | {wins} |")


if __name__ == "__main__":
    sys.exit(main())
