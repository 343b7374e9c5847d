"""Per-sample SQNR of a quantized ONNX model against its float model, in onnxruntime.

    .venv/bin/python benches/per_sample_sqnr.py FLOAT.onnx QUANT.onnx DATA.npz

One line per sample (the float model's largest first-output value, both argmaxes, that
sample's SQNR over every output and its noise energy), then the SQNR over all samples as
quantir's evaluate and the side-by-side scripts compute it (10·log10 Σf² / Σ(f−q)²).
Runs at ORT_DISABLE_ALL, one sample per run. Shows which samples set a figure: on a softmax
output the few samples with no confident class do.
"""
import sys

import numpy as np
import onnxruntime as ort


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    float_path, quant_path, data_path = sys.argv[1:4]
    data = np.load(data_path)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    f = ort.InferenceSession(float_path, so, providers=["CPUExecutionProvider"])
    q = ort.InferenceSession(quant_path, so, providers=["CPUExecutionProvider"])
    names = [i.name for i in f.get_inputs()]
    missing = [n for n in names if n not in data]
    if missing:
        sys.exit(f"{data_path}: no array named {missing[0]!r} (the model's inputs: {names})")
    count = len(data[names[0]])
    signal = noise = 0.0
    for i in range(count):
        feed = {n: data[n][i : i + 1] for n in names}
        a, b = f.run(None, feed), q.run(None, feed)
        s = sum(float((x.astype(np.float64) ** 2).sum()) for x in a)
        e = sum(float(((x.astype(np.float64) - y) ** 2).sum()) for x, y in zip(a, b))
        signal, noise = signal + s, noise + e
        db = 10 * np.log10(s / e) if e > 0 else float("inf")
        print(f"{i:4d}  top {a[0].max():.3f}  argmax {a[0].argmax()}/{b[0].argmax()}  sqnr {db:6.2f} dB  noise {e:.2e}")
    print(f"all {count}: {10 * np.log10(signal / noise):.2f} dB")


if __name__ == "__main__":
    main()
