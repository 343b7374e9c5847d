#!/usr/bin/env python3
"""Throughput in onnxruntime at its default optimization level, 1 thread, one sample per run
(issue #18): the float model, quantir's default .onnx, quantir --qlinear-outputs, quantir
--runtime generic and onnxruntime's own quantize_static (QDQ, QInt8, per-channel, MinMax) on each shared model.
Rounds alternate between the models; each round times RUNS runs of one test sample; the
median round gives samples/s. The host's int8 kernels are used (say which CPU you ran on:
AVX-512 VNNI and AVX2-only CPUs differ).

Usage: .venv/bin/python benches/ort_throughput.py --quantir target/release/quantir [--only NAME]
           [--rounds 7] [--runs 50]
"""
import argparse
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnxruntime as ort

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ort_no_vnni import MODELS, first_array, ort_quantize, path  # noqa: E402


def session(model):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quantir", default="target/release/quantir")
    ap.add_argument("--only")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--runs", type=int, default=50)
    a = ap.parse_args()
    ort.set_default_logger_severity(3)
    logging.disable(logging.WARNING)  # quantize_static's advice on every model
    quantir = os.path.abspath(a.quantir)
    print("| model | float /s | quantir default /s | quantir --qlinear-outputs /s | quantir --runtime generic /s | onnxruntime quantize_static /s | quantir / float | --qlinear-outputs / float | quantir / onnxruntime |")
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as work:
        for name, (model, calib, test) in MODELS.items():
            if a.only and a.only not in name:
                continue
            src, calib = path(model), path(calib)
            float_path = src
            if os.path.isdir(src):
                float_path = os.path.join(work, f"{name}_float.onnx")
                subprocess.run([quantir, "opt", src, "--pass", "prepare", "--pass", "tf-to-onnx", "-o", float_path],
                               check=True, capture_output=True)
            files = {"float": float_path}
            for v, args in [("quantir", []), ("qlinear", ["--qlinear-outputs"]), ("generic", ["--runtime", "generic"])]:
                files[v] = os.path.join(work, f"{name}_{v}.onnx")
                subprocess.run([quantir, "quantize", src, "--data", calib, "--no-cache", *args, "-o", files[v]],
                               check=True, capture_output=True)
            files["ort"] = os.path.join(work, f"{name}_ort.onnx")
            try:
                ort_quantize(float_path, calib, files["ort"])
            except Exception as e:  # noqa: BLE001 — a quantizer failure is a result
                print(f"onnxruntime quantize_static on {name}: {str(e).splitlines()[0][:100]}", file=sys.stderr)
                del files["ort"]
            sessions = {}
            for k, f in files.items():
                try:
                    sessions[k] = session(f)
                except Exception as e:  # noqa: BLE001
                    print(f"{k} on {name} does not load: {str(e).splitlines()[0][:100]}", file=sys.stderr)
            s0 = next(iter(sessions.values()))
            iname = s0.get_inputs()[0].name
            x = first_array(np.load(path(test)), iname)[:1].astype(np.float32)
            rates = {k: [] for k in sessions}
            for s in sessions.values():
                s.run(None, {s.get_inputs()[0].name: x})
            for _ in range(a.rounds):
                for k, s in sessions.items():
                    n = s.get_inputs()[0].name
                    t = time.perf_counter()
                    for _ in range(a.runs):
                        s.run(None, {n: x})
                    rates[k].append(a.runs / (time.perf_counter() - t))
            med = {k: statistics.median(v) for k, v in rates.items()}
            cell = lambda k: f"{med[k]:.0f}" if k in med else "—"
            ratio = lambda a, k: f"{med[a] / med[k]:.2f}" if k in med and a in med else "—"
            print(f"| {name} | {cell('float')} | {cell('quantir')} | {cell('qlinear')} | {cell('generic')} | {cell('ort')} "
                  f"| {ratio('quantir', 'float')} | {ratio('qlinear', 'float')} | {ratio('quantir', 'ort')} |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
