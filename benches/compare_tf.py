#!/usr/bin/env python3
"""quantir next to TensorFlow's own quantizer on the shared real SavedModels, on the same splits.

TensorFlow's quantizer (`tensorflow.compiler.mlir.quantization.tensorflow.python.quantize_model`,
static-range int8, XLA op set; per tensor and per channel) quantizes each SavedModel of
../shared/models/real on the calibration samples; its model runs in TensorFlow and is scored
against the float SavedModel's outputs there. quantir quantizes the same SavedModel on the same
samples to .onnx (`quantize --no-cache [ARGS]`), scored in onnxruntime at ORT_DISABLE_ALL against
quantir's float lowering (`opt --pass prepare --pass tf-to-onnx`, which matches TensorFlow's
float outputs within 5e-7 on fer). SQNR = 10·log10(Σf² / Σ(f − q)²) per output, one sample per run.

The shipped test sets hold 16 samples, and a gap of 1 dB on them is within what the choice of
samples moves a figure by. `--splits K` adds K re-splits of the calibration and test samples
pooled (seeds 0..K−1, the shipped sizes, as `real_models_quality.py --splits`), and the table
gives medians over them and, per quantir setting, on how many splits it beat each TensorFlow
setting.

Needs TensorFlow, onnxruntime and numpy in one venv (not the test venv):
  python3 -m venv .venv-tf && .venv-tf/bin/pip install tensorflow-cpu==2.21.0 onnxruntime numpy
Usage: .venv-tf/bin/python benches/compare_tf.py --quantir target/release/quantir
           [--only fer] [--splits K] [--variant NAME=ARGS ...]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from real_models_quality import LEVELS, ROOT, outputs, split_order, sqnr  # noqa: E402

# name: calibration/test stem
MODELS = {"fer_savedmodel": "fer", "basic_pitch_savedmodel": "basic_pitch"}


def tf_outputs(tf, path, x, name):
    """The serving signature's outputs on each sample of `x` (one per run), by output name."""
    f = tf.saved_model.load(path).signatures["serving_default"]
    runs = [f(**{name: tf.constant(x[i : i + 1])}) for i in range(len(x))]
    return {k: np.concatenate([r[k].numpy() for r in runs]) for k in sorted(runs[0])}


def tf_quantize(tf, src, out, calib, name, per_channel):
    from tensorflow.compiler.mlir.quantization.tensorflow import quantization_options_pb2 as qo
    from tensorflow.compiler.mlir.quantization.tensorflow.python import quantize_model

    opts = qo.QuantizationOptions(
        quantization_method=qo.QuantizationMethod(
            preset_method=qo.QuantizationMethod.PresetMethod.METHOD_STATIC_RANGE_INT8),
        op_set=qo.OpSet.XLA,
        tags={"serve"},
        signature_keys=["serving_default"],
        enable_per_channel_quantization=per_channel,
    )
    if os.path.exists(out):
        shutil.rmtree(out)
    quantize_model.quantize(src, out, opts,
                            representative_dataset=({name: calib[i : i + 1]} for i in range(len(calib))))


def splits_of(calib, test, k):
    """The shipped split, then `k` re-splits of the pooled samples (`split_order`'s, as
    `real_models_quality.py --splits` takes them): (label, calib, test) arrays."""
    yield "shipped", calib, test
    pooled = np.concatenate([calib, test])
    for seed in range(k):
        c, t = split_order(len(pooled), len(calib), seed)
        yield f"split{seed}", pooled[c], pooled[t]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quantir", default=os.path.join(ROOT, "target/release/quantir"))
    ap.add_argument("--models", default=os.path.join(ROOT, "..", "shared", "models", "real"))
    ap.add_argument("--only")
    ap.add_argument("--splits", type=int, default=0)
    ap.add_argument("--variant", action="append", default=[])
    a = ap.parse_args()
    import tensorflow as tf

    variants = [("quantir", [])] + [("quantir " + v.split("=", 1)[0], v.split("=", 1)[1].split()) for v in a.variant]
    tools = ["tf per-tensor", "tf per-channel"] + [v for v, _ in variants]
    table = []
    with tempfile.TemporaryDirectory() as work:
        for model, stem in MODELS.items():
            if a.only and a.only not in model:
                continue
            src = os.path.join(a.models, model)
            try:
                sig = tf.saved_model.load(src).signatures["serving_default"]
            except Exception as e:  # basic_pitch's holds Keras 2 optimizer slots TF 2.21 cannot load
                print(f"{model}: TensorFlow {tf.__version__} cannot load it ({type(e).__name__}: {e}); skipped",
                      file=sys.stderr)
                continue
            name = list(sig.structured_input_signature[1])[0]
            calib = np.load(os.path.join(a.models, f"{stem}_calib.npz"))[name]
            test = np.load(os.path.join(a.models, f"{stem}_test.npz"))[name]
            lowered = os.path.join(work, f"{model}_float.onnx")
            subprocess.run([a.quantir, "opt", src, "--pass", "prepare", "--pass", "tf-to-onnx", "-o", lowered],
                           check=True, capture_output=True)
            rows = []
            for label, cal, score in splits_of(calib, test, a.splits):
                row = {"model": model, "split": label}
                f_tf = tf_outputs(tf, src, score, name)
                for per_channel, tool in ((False, "tf per-tensor"), (True, "tf per-channel")):
                    out = os.path.join(work, "tfq")
                    tf_quantize(tf, src, out, cal, name, per_channel)
                    q = tf_outputs(tf, out, score, name)
                    row[tool] = [sqnr(f_tf[k], q[k]) for k in sorted(f_tf)]
                data, scored = os.path.join(work, "calib.npz"), os.path.join(work, "score.npz")
                np.savez(data, **{name: cal})
                np.savez(scored, **{name: score})
                scored = np.load(scored)
                f_ort = outputs(lowered, scored, LEVELS["DISABLE"])
                for tool, args in variants:
                    q_path = os.path.join(work, "q.onnx")
                    subprocess.run([a.quantir, "quantize", src, "--data", data, "--no-cache", *args, "-o", q_path],
                                   check=True, capture_output=True)
                    q = outputs(q_path, scored, LEVELS["DISABLE"])
                    row[tool] = [sqnr(f_ort[k], q[k]) for k in sorted(f_ort)]
                print(json.dumps(row), flush=True)
                rows.append(row)
            table.append((model, rows))
    print("\nSQNR dB per output (outputs in name order): the shipped split, and the median over the "
          f"{a.splits} re-splits; quantir at ORT_DISABLE_ALL\n")
    print("| model | tool | shipped split | median over re-splits | re-splits it beat TF per-tensor · per-channel on |")
    print("|---|---|---|---|---|")
    for model, rows in table:
        shipped, rest = rows[0], rows[1:]
        for tool in tools:
            fmt = lambda v: " / ".join(f"{x:.2f}" for x in v)
            med = fmt(np.median([r[tool] for r in rest], axis=0)) if rest else "—"
            wins = "—"
            if rest and tool.startswith("quantir"):
                n = len(shipped[tool])
                wins = " · ".join(" / ".join(
                    f"{sum(r[tool][i] > r[tf_tool][i] for r in rest)} of {len(rest)}" for i in range(n))
                    for tf_tool in ("tf per-tensor", "tf per-channel"))
            print(f"| {model} | {tool} | {fmt(shipped[tool])} | {med} | {wins} |")


if __name__ == "__main__":
    sys.exit(main())
