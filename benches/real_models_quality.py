#!/usr/bin/env python3
"""quantir's int8 quality on the shared real models, per algorithm setting, in onnxruntime.

For each real model of ../shared/models/real (ppocr_cls and ppocr_det as shipped, with their
dynamic dims; basic_pitch.onnx; basic_pitch's and fer's SavedModels) and each variant (a name
and the extra `quantir quantize` arguments, e.g. a recipe), this script runs

  quantir quantize MODEL --data M_calib.npz --no-cache [ARGS] -o q.onnx

and scores q.onnx against the float model (the .onnx itself; a SavedModel's float lowering
`quantir opt --pass prepare --pass tf-to-onnx`) on M_test.npz, one sample per run, 1 thread:
SQNR = 10·log10(Σf² / Σ(f − q)²) per output over all test samples, at onnxruntime's
ORT_DISABLE_ALL (the QDQ graph as written) and ORT_ENABLE_ALL (its default, fused int8
kernels). Prints one JSON object per (model, variant) and a markdown table at the end.

The test sets hold 16 samples, and two of the models end in a softmax over 2 or 7 classes,
where one borderline sample moves the figure by dB. `--swap` adds the second fold: the model
calibrated on M_test.npz and scored on M_calib.npz (32 samples), so that a gain seen on one
split only is told apart from one seen on both. `--splits K` goes further: the calibration and
test samples are pooled and split again K times at random (seeds 0..K−1, the same sizes as
the shipped split, the same K splits for every variant), and the table gives each output's
median SQNR over the K splits and, for each variant, on how many splits it beat the defaults
and the mean of its paired differences from them (paired figures, which the spread between
splits does not blur).

Usage: .venv/bin/python benches/real_models_quality.py --quantir target/release/quantir
           [--models DIR] [--only NAME] [--variant NAME=ARGS ...] [--swap | --splits K]
       (no --variant: the defaults only; ARGS is split on spaces, e.g.
        --variant "clip=--config /tmp/clip.toml")
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnxruntime as ort

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# name: (model, calibration/test stem)
MODELS = {
    "ppocr_cls": ("ppocr_cls.onnx", "ppocr_cls"),
    "ppocr_det": ("ppocr_det.onnx", "ppocr_det"),
    "basic_pitch.onnx": ("basic_pitch.onnx", "basic_pitch"),
    "basic_pitch_savedmodel": ("basic_pitch_savedmodel", "basic_pitch"),
    "fer_savedmodel": ("fer_savedmodel", "fer"),
}

LEVELS = {
    "DISABLE": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "ENABLE": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}


def outputs(path, data, level, limit=None):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.graph_optimization_level = level
    s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    name = s.get_inputs()[0].name
    x = (data[name] if name in data.files else data[data.files[0]])[:limit]
    runs = [s.run(None, {name: x[i : i + 1].astype(np.float32)}) for i in range(len(x))]
    return {o.name: np.concatenate([r[j] for r in runs]) for j, o in enumerate(s.get_outputs())}


def models(a, work):
    """(name, model as given, its calibration data, its test data, the float .onnx to score
    against) for each real model `a.only` selects; a SavedModel's float .onnx is quantir's
    lowering (`opt --pass prepare --pass tf-to-onnx`), written under `work`."""
    for name, (model, stem) in MODELS.items():
        if a.only and a.only not in name:
            continue
        src = os.path.join(a.models, model)
        float_path = src
        if os.path.isdir(src):
            float_path = os.path.join(work, f"{name}_float.onnx")
            subprocess.run([a.quantir, "opt", src, "--pass", "prepare", "--pass", "tf-to-onnx", "-o", float_path],
                           check=True, capture_output=True)
        calib = os.path.join(a.models, f"{stem}_calib.npz")
        test = os.path.join(a.models, f"{stem}_test.npz")
        yield name, src, calib, test, float_path


def sqnr(f, q):
    f, q = f.astype(np.float64), q.astype(np.float64)
    noise = ((f - q) ** 2).sum()
    return float("inf") if noise == 0 else float(10 * np.log10((f**2).sum() / noise))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quantir", default=os.path.join(ROOT, "target/release/quantir"))
    ap.add_argument("--models", default=os.path.join(ROOT, "..", "shared", "models", "real"))
    ap.add_argument("--only")
    ap.add_argument("--variant", action="append", default=[])
    ap.add_argument("--swap", action="store_true", help="also calibrate on the test set, score on the calibration set")
    ap.add_argument("--splits", type=int, default=0,
                    help="score on K random re-splits of the pooled samples instead of the shipped split")
    a = ap.parse_args()
    if a.splits and a.swap:
        ap.error("--splits and --swap are two ways to re-split: give one")
    if a.splits:
        return main_splits(a)
    variants = variants_of(a)
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for name, src, calib, test, float_path in models(a, work):
            folds = [("", calib, test)] + ([("swapped", test, calib)] if a.swap else [])
            data = {p: np.load(p) for p in (calib, test)}
            refs = {score: outputs(float_path, data[score], LEVELS["DISABLE"]) for _, _, score in folds}
            for vname, args in variants:
                row = {"model": name, "variant": vname}
                for fold, cal, score in folds:
                    q = os.path.join(work, f"{name}_{vname}{fold}.onnx")
                    p = subprocess.run([a.quantir, "quantize", src, "--data", cal,
                                        "--no-cache", *args, "-o", q], capture_output=True, text=True)
                    if p.returncode != 0:
                        row["error"] = p.stderr.strip()
                        break
                    for lname, level in LEVELS.items():
                        got = outputs(q, data[score], level)
                        row[f"{fold}{lname}"] = {k: round(sqnr(refs[score][k], got[k]), 2) for k in refs[score]}
                print(json.dumps(row), flush=True)
                if "error" not in row:
                    rows.append(row)
    head = "| model | variant | SQNR dB, ORT_DISABLE_ALL | SQNR dB, ORT_ENABLE_ALL |"
    rule = "|---|---|---|---|"
    if a.swap:
        head += " swapped: DISABLE | swapped: ENABLE |"
        rule += "---|---|"
    print(f"\n{head}\n{rule}")
    for r in rows:
        fmt = lambda d: " / ".join(f"{v:.2f}" for v in d.values())
        cells = [fmt(r[k]) for k in ("DISABLE", "ENABLE", "swappedDISABLE", "swappedENABLE") if k in r]
        print(f"| {r['model']} | {r['variant']} | " + " | ".join(cells) + " |")


def variants_of(a):
    """The defaults, then each `--variant NAME=ARGS` as (name, arguments)."""
    return [("defaults", [])] + [(v.split("=", 1)[0], v.split("=", 1)[1].split()) for v in a.variant]


def split_order(total, n_calib, seed):
    """Re-split `seed` of `total` pooled samples: (calibration indices, scoring indices), the
    first `n_calib` of a seeded permutation and the rest. Every script that re-splits takes it
    from here, so that their split `seed` holds the same samples."""
    order = np.random.RandomState(seed).permutation(total)
    return order[:n_calib], order[n_calib:]


def resplit(calib, test, k, work, stem):
    """K random re-splits of the samples of `calib` and `test` pooled (every array split along
    its first axis alike), each with as many calibration samples as `calib`: a list of
    (calibration path, scoring path) written under `work`."""
    a, b = np.load(calib), np.load(test)
    pooled = {n: np.concatenate([a[n], b[n]]) for n in a.files}
    total, n_calib = len(pooled[a.files[0]]), len(a[a.files[0]])
    out = []
    for seed in range(k):
        paths = []
        for part, idx in zip(("calib", "test"), split_order(total, n_calib, seed)):
            path = os.path.join(work, f"{stem}_split{seed}_{part}.npz")
            np.savez(path, **{n: v[idx] for n, v in pooled.items()})
            paths.append(path)
        out.append(tuple(paths))
    return out


def main_splits(a):
    """`--splits K`: every variant on the same K re-splits; medians and paired win counts."""
    variants = variants_of(a)
    table = []
    with tempfile.TemporaryDirectory() as work:
        for name, src, calib, test, float_path in models(a, work):
            stem = MODELS[name][1]
            splits = resplit(calib, test, a.splits, work, stem)
            scores = [np.load(t) for _, t in splits]
            refs = [outputs(float_path, d, LEVELS["DISABLE"]) for d in scores]
            per_variant = {}
            for vname, args in variants:
                runs = []
                for i, (cal, _) in enumerate(splits):
                    q = os.path.join(work, f"{name}_{vname}_split{i}.onnx")
                    p = subprocess.run([a.quantir, "quantize", src, "--data", cal, "--no-cache", *args, "-o", q],
                                       capture_output=True, text=True)
                    if p.returncode != 0:
                        runs = p.stderr.strip()
                        break
                    runs.append({lname: {k: sqnr(refs[i][k], v) for k, v in outputs(q, scores[i], level).items()}
                                 for lname, level in LEVELS.items()})
                if isinstance(runs, list):
                    print(json.dumps({"model": name, "variant": vname, "splits": runs}), flush=True)
                    per_variant[vname] = runs
                else:
                    # a variant quantir refuses is said, and left out of the table
                    print(json.dumps({"model": name, "variant": vname, "error": runs}), flush=True)
            table.append((name, per_variant))
    print(f"\n{a.splits} random re-splits; median SQNR dB over them per output (DISABLE · ENABLE), "
          "on how many splits the variant beat the defaults at DISABLE, and the mean of its paired "
          "differences from them (dB), per output\n")
    print("| model | variant | median DISABLE | median ENABLE | beat the defaults | mean paired difference |")
    print("|---|---|---|---|---|---|")
    for name, per_variant in table:
        base = per_variant.get("defaults")
        for vname, runs in per_variant.items():
            keys = list(runs[0]["DISABLE"])
            med = lambda lname: " / ".join(f"{np.median([r[lname][k] for r in runs]):.2f}" for k in keys)
            wins = diff = "—"
            if base is not None and vname != "defaults":
                pairs = list(zip(runs, base))
                wins = " / ".join(f"{sum(r['DISABLE'][k] > b['DISABLE'][k] for r, b in pairs)} of {len(runs)}"
                                  for k in keys)
                diff = " / ".join(f"{np.mean([r['DISABLE'][k] - b['DISABLE'][k] for r, b in pairs]):+.2f}"
                                  for k in keys)
            print(f"| {name} | {vname} | {med('DISABLE')} | {med('ENABLE')} | {wins} | {diff} |")


if __name__ == "__main__":
    sys.exit(main())
