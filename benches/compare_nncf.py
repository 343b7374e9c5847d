#!/usr/bin/env python3
"""quantir next to onnxruntime's `quantize_static` and NNCF on the shared real models, in one
run: int8 quality in onnxruntime and the time each tool takes to quantize (issue #17).

For each real model of ../shared/models/real (the .onnx files as shipped; the SavedModels
through quantir's float ONNX lowering, which the other tools need) each tool quantizes from the
32 calibration samples:
- quantir: `quantir quantize MODEL --data CALIB --no-cache -o q.onnx` (its defaults), and
  "quantir entropy" with `--method entropy`;
- onnxruntime: `quantize_static`, QDQ, QInt8 activations and weights, per-channel, MinMax, and
  "onnxruntime Entropy" with `calibrate_method=Entropy` (its defaults: 128 histogram bins,
  128 quantized bins);
- NNCF (`nncf.quantize`, ONNX backend), default preset and MIXED, on the model with its
  weights' `Constant` nodes moved to initializers (NNCF leaves weights in Constant nodes float:
  ppocr_det 8.9 dB as shipped, 16.8 dB moved; `../shared/models/real/README.md`), and
  converted to opset 13 where it is older (ppocr_det: per-channel weights only then).
Each output is scored against the float model on the 16 test samples, one sample per run,
1 thread: SQNR = 10·log10(Σf² / Σ(f − q)²) per output, at ORT_DISABLE_ALL and ORT_ENABLE_ALL.
The quantize time is the tool's wall time (quantir: the whole process; the others: the call,
in this process, model loading included).

NNCF is not in the test venv (it pulls in its own stack); give it a venv of its own:
    python3 -m venv .venv-nncf && .venv-nncf/bin/pip install nncf onnx onnxruntime numpy
    .venv-nncf/bin/python benches/compare_nncf.py --quantir target/release/quantir [--only NAME]
`--tools quantir,onnxruntime,...` runs some of the tools only (names as in the table; the test
venv has all but NNCF).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from real_models_quality import LEVELS, ROOT, models, outputs, sqnr  # noqa: E402


def samples(model_path, calib):
    m = onnx.load(model_path, load_external_data=False)
    name = m.graph.input[0].name
    d = np.load(calib)
    x = d[name] if name in d.files else d[d.files[0]]
    return [{name: x[i : i + 1].astype(np.float32)} for i in range(len(x))]


def constants_to_initializers(src, dst):
    """The model with the `Constant` nodes that hold a Conv/ConvTranspose/Gemm/MatMul weight
    or bias moved to initializers (only those: NNCF's own passes expect the others as nodes)."""
    m = onnx.load(src)
    weights = {i for n in m.graph.node if n.op_type in ("Conv", "ConvTranspose", "Gemm", "MatMul") for i in n.input[1:]}
    keep = []
    for n in m.graph.node:
        if (n.op_type == "Constant" and len(n.attribute) == 1 and n.attribute[0].name == "value"
                and n.output[0] in weights):
            t = numpy_helper.to_array(n.attribute[0].t)
            m.graph.initializer.append(numpy_helper.from_array(t, n.output[0]))
        else:
            keep.append(n)
    del m.graph.node[:]
    m.graph.node.extend(keep)
    # NNCF quantizes ppocr_det's opset-12 BatchNormalization graph per tensor only; at opset 13
    # it reaches its best (18.3 dB MIXED, `../shared/models/real/README.md`)
    opset = next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), 13)
    if opset < 13:
        from onnx import version_converter

        m = version_converter.convert_version(m, 13)
    onnx.save(m, dst)


def quantir(args, src, calib, out, extra=()):
    t = time.perf_counter()
    p = subprocess.run([args.quantir, "quantize", src, "--data", calib, "--no-cache", "-o", out, *extra],
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(p.stderr.strip().splitlines()[-1])
    return time.perf_counter() - t


def ort_static(float_path, calib, out, method="MinMax"):
    from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType,
                                          quantize_static)

    feed = samples(float_path, calib)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(feed)

        def get_next(self):
            return next(self.it, None)

    t = time.perf_counter()
    quantize_static(float_path, out, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    weight_type=QuantType.QInt8, activation_type=QuantType.QInt8,
                    calibrate_method=getattr(CalibrationMethod, method))
    return time.perf_counter() - t


def nncf_quantize(preset):
    def run(float_path, calib, out):
        import nncf

        feed = samples(float_path, calib)
        t = time.perf_counter()
        moved = out + ".in.onnx"
        constants_to_initializers(float_path, moved)
        kwargs = {"preset": getattr(nncf.QuantizationPreset, preset)} if preset else {}
        q = nncf.quantize(onnx.load(moved), nncf.Dataset(feed), subset_size=len(feed), **kwargs)
        onnx.save(q, out)
        return time.perf_counter() - t

    return run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quantir", default=os.path.join(ROOT, "target/release/quantir"))
    ap.add_argument("--models", default=os.path.join(ROOT, "..", "shared", "models", "real"))
    ap.add_argument("--only")
    ap.add_argument("--tools", help="comma-separated tool names (default: all)")
    a = ap.parse_args()
    tools = [
        ("quantir", lambda f, c, o, src: quantir(a, src, c, o)),
        ("quantir entropy", lambda f, c, o, src: quantir(a, src, c, o, ["--method", "entropy"])),
        ("onnxruntime", lambda f, c, o, src: ort_static(f, c, o)),
        ("onnxruntime Entropy", lambda f, c, o, src: ort_static(f, c, o, "Entropy")),
        ("nncf", lambda f, c, o, src: nncf_quantize(None)(f, c, o)),
        ("nncf MIXED", lambda f, c, o, src: nncf_quantize("MIXED")(f, c, o)),
    ]
    if a.tools:
        wanted = a.tools.split(",")
        unknown = set(wanted) - {t for t, _ in tools}
        if unknown:
            ap.error(f"unknown tools {sorted(unknown)}")
        tools = [t for t in tools if t[0] in wanted]
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for name, src, calib, test, float_path in models(a, work):
            data = np.load(test)
            ref = outputs(float_path, data, LEVELS["DISABLE"])
            for tool, fn in tools:
                q = os.path.join(work, f"{name}_{tool.replace(' ', '_')}.onnx")
                row = {"model": name, "tool": tool}
                try:
                    row["seconds"] = round(fn(float_path, calib, q, src), 2)
                    for lname, level in LEVELS.items():
                        got = outputs(q, data, level)
                        row[lname] = {k: round(sqnr(ref[k], got[k]), 2) for k in ref}
                except Exception as e:  # a tool that fails on a model is a result too
                    row["error"] = str(e).strip().splitlines()[-1][:160] if str(e).strip() else type(e).__name__
                print(json.dumps(row), flush=True)
                rows.append(row)
    print("\n| model | tool | SQNR dB, ORT_DISABLE_ALL | SQNR dB, ORT_ENABLE_ALL | quantize s |\n|---|---|---|---|---|")
    for r in rows:
        fmt = lambda d: " / ".join(f"{v:.2f}" for v in d.values())
        cells = [fmt(r[k]) if k in r else f"fails: {r['error']}" for k in LEVELS]
        print(f"| {r['model']} | {r['tool']} | {cells[0]} | {cells[1]} | {r.get('seconds', '')} |")


if __name__ == "__main__":
    sys.exit(main())
