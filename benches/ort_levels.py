"""SQNR of quantized ONNX models in onnxruntime at each graph-optimization level.

quantir writes each bundled SavedModel as QDQ ONNX (`quantize DIR -o q.onnx`) and its float
form (`opt DIR --pass ... tf-to-onnx`); onnxruntime runs both one sample at a time on one
thread. onnxruntime's own `quantize_static` model of the digits CNN is measured the same way,
so the column for the fused int8 kernels (EXTENDED / ALL) compares like with like.

  .venv/bin/python benches/ort_levels.py [--quantir target/release/quantir]
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnxruntime as ort
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
D = lambda *p: os.path.join(ROOT, *p)
LEVELS = [
    ("DISABLE_ALL", ort.GraphOptimizationLevel.ORT_DISABLE_ALL),
    ("BASIC", ort.GraphOptimizationLevel.ORT_ENABLE_BASIC),
    ("EXTENDED", ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED),
    ("ALL", ort.GraphOptimizationLevel.ORT_ENABLE_ALL),
]
# (name, model, calibration data, test data, extra quantize flags)
CASES = [
    ("digits CNN (int8)", "tests/data/digits_cnn_savedmodel", "examples/digits_calib.npz", "examples/digits_test.npz", []),
    ("digits CNN (int8, --reduce-range)", "tests/data/digits_cnn_savedmodel", "examples/digits_calib.npz", "examples/digits_test.npz", ["--reduce-range"]),
    ("digits MLP (int8)", "tests/data/digits_mlp_savedmodel", "tests/data/digits_mlp_calib.npz", "tests/data/digits_mlp_test.npz", []),
    ("MobileNet v2 0.35 (int8)", "tests/data/mobilenet_v2_035_savedmodel", "tests/data/mobilenet_test.npz", "tests/data/mobilenet_test.npz", []),
    ("MobileNet v2 0.35 (int8, --reduce-range)", "tests/data/mobilenet_v2_035_savedmodel", "tests/data/mobilenet_test.npz", "tests/data/mobilenet_test.npz", ["--reduce-range"]),
    ("MobileNet v2 0.35 (int16 act.)", "tests/data/mobilenet_v2_035_savedmodel", "tests/data/mobilenet_test.npz", "tests/data/mobilenet_test.npz", ["--activations", "int16"]),
]


def run(path, x, level):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.graph_optimization_level = level
    s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    name = s.get_inputs()[0].name
    return np.concatenate([s.run(None, {name: x[i : i + 1].astype(np.float32)})[0] for i in range(len(x))])


def sqnr(f, q):
    return 10 * np.log10((f**2).sum() / ((f - q) ** 2).sum())


def row(name, float_model, quant_model, test):
    x = np.load(D(test))["x"]
    f = run(float_model, x, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    cells = []
    for _, level in LEVELS:
        try:
            cells.append(f"{sqnr(f, run(quant_model, x, level)):.2f} dB")
        except Exception as e:  # a level onnxruntime cannot build (a kernel it lacks)
            cells.append(f"fails: {str(e).splitlines()[0][:60]}")
    print(f"| {name} | " + " | ".join(cells) + " |", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quantir", default=D("target/release/quantir"))
    a = ap.parse_args()
    q = lambda *args: subprocess.run([a.quantir, *args], check=True, capture_output=True)
    print("| model → .onnx | " + " | ".join(n for n, _ in LEVELS) + " |")
    print("|---|" + "---|" * len(LEVELS))
    with tempfile.TemporaryDirectory() as tmp:
        for name, model, calib, test, extra in CASES:
            fm, qm = os.path.join(tmp, "f.onnx"), os.path.join(tmp, "q.onnx")
            passes = ["strip-identity", "fold-constants", "fold-batchnorm", "tf-to-onnx"]
            q("opt", D(model), *[p for s in passes for p in ("--pass", s)], "-o", fm)
            q("quantize", D(model), "--data", D(calib), "--no-cache", *extra, "-o", qm)
            row("quantir, " + name, fm, qm, test)
        # onnxruntime's own quantizer on the ONNX export of the digits CNN
        x = np.load(D("examples/digits_calib.npz"))["x"].astype(np.float32)

        class Reader(CalibrationDataReader):
            def __init__(self):
                self.i = 0

            def get_next(self):
                if self.i >= len(x):
                    return None
                self.i += 1
                return {"input": x[self.i - 1 : self.i]}

        for reduce_range in [False, True]:
            om = os.path.join(tmp, "ort.onnx")
            quantize_static(D("tests/data/digits_cnn.onnx"), om, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                            reduce_range=reduce_range, weight_type=QuantType.QInt8, activation_type=QuantType.QInt8)
            name = "onnxruntime quantize_static, digits CNN (int8" + (", reduce_range)" if reduce_range else ")")
            row(name, D("tests/data/digits_cnn.onnx"), om, "examples/digits_test.npz")


if __name__ == "__main__":
    sys.exit(main())
