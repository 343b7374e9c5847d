#!/usr/bin/env python3
"""What `quantize` costs on the shared real models, quantir against onnxruntime's
`quantize_static`, in one run (issue #17: quantize ≤ 0.5× onnxruntime with the defaults).

For each model and round, alternating:
  quantir:      `quantir quantize MODEL --data M_calib.npz --no-cache [FLAGS] -o q.onnx` for each
                `--variant NAME=FLAGS` (and `--baseline BIN`'s, the same flags, where given), as
                a child process under /usr/bin/time: whole-process wall and peak RSS;
  onnxruntime:  `quantize_static` (QDQ, QInt8, per-channel, MinMax) on the same samples, in this
                process, timed around the call alone (its Python start-up and imports not
                counted).
Prints medians over the rounds and each quantir variant's ratio to onnxruntime.

Usage: .venv/bin/python benches/quantize_cost.py --quantir target/release/quantir
           [--variant "gptq=--gptq" ...] [--baseline OLD_BIN] [--rounds 3] [--only NAME]
"""
import argparse, os, statistics, subprocess, sys, tempfile, time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# name: (model as shipped, calibration data); a SavedModel is lowered to ONNX for onnxruntime
MODELS = {
    "ppocr_cls": ("ppocr_cls.onnx", "ppocr_cls_calib.npz"),
    "ppocr_det": ("ppocr_det.onnx", "ppocr_det_calib.npz"),
    "basic_pitch.onnx": ("basic_pitch.onnx", "basic_pitch_calib.npz"),
    "fer_savedmodel": ("fer_savedmodel", "fer_calib.npz"),
}


def timed(cmd):
    """Wall seconds and peak RSS (MB) of a child process; raises with its last stderr line."""
    p = subprocess.run(["/usr/bin/time", "-f", "%e %M"] + cmd, capture_output=True, text=True)
    lines = p.stderr.strip().splitlines()
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {lines[-2] if len(lines) > 1 else lines}")
    wall, kb = lines[-1].split()
    return float(wall), int(kb) / 1024


def float_onnx(quantir, src, work):
    if src.endswith(".onnx"):
        return src
    out = os.path.join(work, os.path.basename(src) + ".onnx")
    subprocess.run([quantir, "opt", src, "--pass", "prepare", "--pass", "tf-to-onnx", "-o", out],
                   check=True, capture_output=True)
    return out


def ort_static(float_path, calib, out):
    import onnxruntime as ort
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    sess = ort.InferenceSession(float_path, providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    data = np.load(calib)
    arrays = [data[k] for k in data.files]
    n = arrays[0].shape[0]
    # one sample at a time, batch 1, bound to the inputs in order
    feed = [{nm: a[i:i + 1] for nm, a in zip(names, arrays)} for i in range(n)]

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(feed)

        def get_next(self):
            return next(self.it, None)

    t = time.perf_counter()
    quantize_static(float_path, out, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    weight_type=QuantType.QInt8, activation_type=QuantType.QInt8)
    return time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quantir", default=os.path.join(ROOT, "target/release/quantir"))
    ap.add_argument("--baseline", help="another quantir binary, run with the same variants")
    ap.add_argument("--variant", action="append", default=[], help="NAME=FLAGS")
    ap.add_argument("--models", default=os.path.join(ROOT, "..", "shared", "models", "real"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only")
    a = ap.parse_args()
    variants = [("defaults", [])] + [(v.split("=", 1)[0], v.split("=", 1)[1].split()) for v in a.variant]
    runs = [(f"quantir {n}", a.quantir, f) for n, f in variants]
    if a.baseline:
        runs += [(f"baseline {n}", a.baseline, f) for n, f in variants]
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for name, (model, calib) in MODELS.items():
            if a.only and a.only != name:
                continue
            src, calib = os.path.join(a.models, model), os.path.join(a.models, calib)
            fp = float_onnx(a.quantir, src, work)
            times = {r[0]: [] for r in runs}
            rss = {r[0]: [] for r in runs}
            ort_times = []
            for _ in range(a.rounds):
                for label, binary, flags in runs:
                    out = os.path.join(work, "q.onnx")
                    w, m = timed([binary, "quantize", src, "--data", calib, "--no-cache", *flags, "-o", out])
                    times[label].append(w)
                    rss[label].append(m)
                ort_times.append(ort_static(fp, calib, os.path.join(work, "ort.onnx")))
            ort_t = statistics.median(ort_times)
            for label, _, _ in runs:
                t = statistics.median(times[label])
                rows.append((name, label, t, statistics.median(rss[label]), ort_t, t / ort_t))
                print(rows[-1], file=sys.stderr, flush=True)
    print(f"\n{a.rounds} rounds, medians; onnxruntime `quantize_static` timed in-process\n")
    print("| model | run | wall s | peak RSS MB | onnxruntime s | ratio |")
    print("|---|---|---|---|---|---|")
    for name, label, t, m, o, r in rows:
        print(f"| {name} | {label} | {t:.2f} | {m:.0f} | {o:.2f} | {r:.2f} |")


if __name__ == "__main__":
    main()
