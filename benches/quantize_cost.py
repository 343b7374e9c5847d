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
import argparse, os, statistics, subprocess, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_nncf import ort_static  # noqa: E402
from real_models_quality import ROOT, models  # noqa: E402

# basic_pitch is timed once, as .onnx: its SavedModel is the same network
SKIP = {"basic_pitch_savedmodel"}


def timed(cmd):
    """Wall seconds and peak RSS (MB) of a child process; raises with its last stderr line."""
    p = subprocess.run(["/usr/bin/time", "-f", "%e %M"] + cmd, capture_output=True, text=True)
    lines = p.stderr.strip().splitlines()
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {lines[-2] if len(lines) > 1 else lines}")
    wall, kb = lines[-1].split()
    return float(wall), int(kb) / 1024


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
        for name, src, calib, _, fp in models(a, work):
            if name in SKIP:
                continue
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
