#!/usr/bin/env python3
"""quantir's .onnx output in onnxruntime as users run it, on an x86 CPU without VNNI (issue #18).

onnxruntime's default optimization level fuses DQ -> Conv/MatMul/Gemm -> Q into its int8
kernels; on x86 without VNNI (AVX2) those add neighbouring u8 x s8 products in int16 with
saturation. This script measures, for each shared model, SQNR against the float model at
ORT_DISABLE_ALL (the QDQ graph as written) and ORT_ENABLE_ALL (the default) for

  - quantir's default .onnx (`--runtime onnxruntime`: weight scales widened only where a pair
    sum could saturate),
  - quantir `--runtime generic` (full-range weights everywhere),
  - quantir `--reduce-range` (7-bit weights everywhere),
  - onnxruntime's own `quantize_static` (QDQ, QInt8, per-channel, MinMax);

and, for each of those files, what `quantir evaluate --runtime onnxruntime` predicts for the
default level: quantir's interpreter with onnxruntime's int16 pair saturation simulated
(`src/interp/ort_x86.rs`), run natively.

With `--cpu EPYC-Rome` (or any QEMU CPU model) the script re-runs itself under
`qemu-x86_64 -cpu MODEL`, so that onnxruntime's MLAS picks the kernels of that CPU: EPYC-Rome
is AVX2 without VNNI, the CPU of issue #18, on any x86 host. quantir and onnxruntime's
quantizer run natively in subprocesses (their results do not depend on the CPU's int8
kernels). One sample per run, 1 thread; SQNR = 10*log10(sum f^2 / sum (f - q)^2) per output.

Usage: .venv/bin/python benches/ort_no_vnni.py --quantir target/release/quantir --cpu EPYC-Rome
           [--only NAME] [--limit N] [--no-reduce-range]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from real_models_quality import sqnr  # noqa: E402
SHARED = os.path.join(ROOT, "..", "shared", "models")
REAL = os.path.join(SHARED, "real")

# name: (model, calibration data, test data)
MODELS = {
    "digits_cnn": ("tests/data/digits_cnn.onnx", "examples/digits_calib.npz", "examples/digits_test.npz"),
    "digits_mlp": ("tests/data/digits_mlp.onnx", "tests/data/digits_mlp_calib.npz", "tests/data/digits_mlp_test.npz"),
    "mobilenet_v2_035": ("tests/data/mobilenet_v2_035.onnx", f"{SHARED}/mobilenet_calib.npz", "tests/data/mobilenet_test.npz"),
    "ppocr_cls": (f"{REAL}/ppocr_cls.onnx", f"{REAL}/ppocr_cls_calib.npz", f"{REAL}/ppocr_cls_test.npz"),
    "ppocr_det": (f"{REAL}/ppocr_det.onnx", f"{REAL}/ppocr_det_calib.npz", f"{REAL}/ppocr_det_test.npz"),
    "basic_pitch.onnx": (f"{REAL}/basic_pitch.onnx", f"{REAL}/basic_pitch_calib.npz", f"{REAL}/basic_pitch_test.npz"),
    "fer": (f"{REAL}/fer_savedmodel", f"{REAL}/fer_calib.npz", f"{REAL}/fer_test.npz"),
}

VARIANTS = {
    "quantir (default: --runtime onnxruntime)": [],
    "quantir --runtime generic": ["--runtime", "generic"],
    "quantir --reduce-range": ["--reduce-range"],
}


def path(p):
    return p if os.path.isabs(p) else os.path.join(ROOT, p)


def first_array(data, name):
    return data[name] if name in data.files else data[data.files[0]]


def outputs(model, data, level, limit):
    import onnxruntime as ort

    from real_models_quality import outputs as run_all

    ort.set_default_logger_severity(3)
    return run_all(model, data, getattr(ort.GraphOptimizationLevel, level), limit)


def ort_quantize(src, calib, out):
    """onnxruntime's quantize_static with the settings of the issue (run natively)."""
    import onnx
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    m = onnx.load(src)
    name = m.graph.input[0].name
    x = first_array(np.load(calib), name)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter({name: x[i : i + 1].astype(np.float32)} for i in range(len(x)))

        def get_next(self):
            return next(self.it, None)

    quantize_static(src, out, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    weight_type=QuantType.QInt8, activation_type=QuantType.QInt8)


def simulated(quantir, float_path, q, test, limit):
    """SQNR per output that quantir's evaluate predicts for onnxruntime's default level."""
    cmd = [quantir, "evaluate", float_path, q, "--data", test, "--runtime", "onnxruntime", "--json"]
    if limit:
        cmd += ["--limit", str(limit)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        return p.stderr.strip()[:120]
    return [round(o["sqnr_db"], 2) if o["sqnr_db"] is not None else 999.0 for o in json.loads(p.stdout)["outputs"]]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quantir", default=os.path.join(ROOT, "target/release/quantir"))
    ap.add_argument("--cpu", help="QEMU CPU model to run onnxruntime on (e.g. EPYC-Rome: AVX2, no VNNI)")
    ap.add_argument("--only")
    ap.add_argument("--limit", type=int, help="test samples per model (default: all)")
    ap.add_argument("--no-reduce-range", action="store_true", help="skip the --reduce-range variant")
    ap.add_argument("--ort-quantize", nargs=3, metavar=("SRC", "CALIB", "OUT"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.ort_quantize:
        return ort_quantize(*a.ort_quantize)
    if a.cpu and os.environ.get("QUANTIR_EMULATED") != a.cpu:
        argv = [sys.executable, os.path.abspath(__file__)] + sys.argv[1:]
        env = dict(os.environ, QUANTIR_EMULATED=a.cpu)
        os.execve("/usr/bin/qemu-x86_64", ["qemu-x86_64", "-cpu", a.cpu] + argv, env)
    quantir = os.path.abspath(a.quantir)
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for name, (model, calib, test) in MODELS.items():
            if a.only and a.only not in name:
                continue
            src, calib, data = path(model), path(calib), np.load(path(test))
            float_path = src
            if os.path.isdir(src):
                float_path = os.path.join(work, f"{name}_float.onnx")
                subprocess.run([quantir, "opt", src, "--pass", "prepare", "--pass", "tf-to-onnx", "-o", float_path],
                               check=True, capture_output=True)
            ref = outputs(float_path, data, "ORT_DISABLE_ALL", a.limit)
            made = {}
            for vname, args in VARIANTS.items():
                if a.no_reduce_range and "--reduce-range" in args:
                    continue
                q = os.path.join(work, f"{name}_{len(made)}.onnx")
                p = subprocess.run([quantir, "quantize", src, "--data", calib, "--no-cache", *args, "-o", q],
                                   capture_output=True, text=True)
                made[vname] = q if p.returncode == 0 else p.stderr.strip()
            q = os.path.join(work, f"{name}_ort.onnx")
            p = subprocess.run([sys.executable, os.path.abspath(__file__), "--ort-quantize", float_path, calib, q],
                               capture_output=True, text=True, env=dict(os.environ, QUANTIR_EMULATED=""))
            made["onnxruntime quantize_static"] = q if p.returncode == 0 else p.stderr.strip().splitlines()[-1]
            for vname, q in made.items():
                row = {"model": name, "variant": vname}
                if not os.path.exists(q):
                    row["error"] = q
                else:
                    for level in ("ORT_DISABLE_ALL", "ORT_ENABLE_ALL"):
                        try:
                            got = outputs(q, data, level, a.limit)
                            row[level] = [round(sqnr(ref[k], got[k]), 2) for k in ref]
                        except Exception as e:  # a model onnxruntime refuses is a result too
                            row[level] = str(e).splitlines()[0][:120]
                    row["simulated"] = simulated(quantir, float_path, q, path(test), a.limit)
                print(json.dumps(row), flush=True)
                rows.append(row)
    print(f"\nonnxruntime CPU: {a.cpu or 'host'}; SQNR in dB (outputs separated by /), test samples: {a.limit or 'all'}")
    print("\n| model | variant | ORT_DISABLE_ALL | ORT_ENABLE_ALL (default) | quantir evaluate --runtime onnxruntime |\n|---|---|---|---|---|")
    fmt = lambda v: " / ".join(f"{x:.2f}" for x in v) if isinstance(v, list) else f"error: {v}"
    for r in rows:
        if "error" in r:
            print(f"| {r['model']} | {r['variant']} | error: {r['error'][:100]} | | |")
        else:
            print(f"| {r['model']} | {r['variant']} | {fmt(r['ORT_DISABLE_ALL'])} | {fmt(r['ORT_ENABLE_ALL'])} | {fmt(r['simulated'])} |")


if __name__ == "__main__":
    sys.exit(main())
