#!/usr/bin/env python3
"""Side-by-side: onnxruntime's calibration code vs quantir's, on the same arrays, in one run.

Times onnxruntime's HistogramCollector (collect + compute_collection_result) for percentile and
entropy, and numpy min/max, on the arrays of calibration/tests/data/calibration_vectors.npz
(tiled to 4 M values per tensor), then runs quantir's criterion bench binary for the same
sizes and prints the ratios.

Usage: .venv/bin/python benches/compare_calibration.py
"""
import json, os, re, subprocess, sys, time
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
N = 1 << 22  # 4 M values, as in calibration/benches/observers.rs


def median_time(f, reps=5):
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    return sorted(ts)[len(ts) // 2]


def ort_times(x):
    from onnxruntime.quantization.calibrate import HistogramCollector

    def minmax():
        np.min(x), np.max(x)

    def hist(method, **kw):
        def run():
            c = HistogramCollector(method=method, symmetric=False, num_bins=2048,
                                   num_quantized_bins=128, percentile=99.99, scenario="same")
            c.collect({"t": [x]})
            c.compute_collection_result()
        return run

    return {
        "minmax": median_time(minmax),
        "percentile": median_time(hist("percentile")),
        "entropy": median_time(hist("entropy"), reps=3),
    }


def quantir_times():
    out = subprocess.run(
        ["cargo", "bench", "-p", "quantir-calibration", "--bench", "observers", "--", "--noplot"],
        cwd=ROOT, capture_output=True, text=True, check=True).stdout
    med = {}
    for name, val, unit in re.findall(r"^(\S+)\s+time:\s+\[\S+ \S+ (\S+) (\S+) ", out, re.M):
        scale = {"ns": 1e-9, "µs": 1e-6, "us": 1e-6, "ms": 1e-3, "s": 1.0}[unit]
        med[name] = float(val) * scale
    return med


def main():
    z = np.load(os.path.join(ROOT, "calibration/tests/data/calibration_vectors.npz"))
    x = np.resize(z["normal_0_1"].astype(np.float32).ravel(), N)
    import onnxruntime
    ort = ort_times(x)
    q = quantir_times()
    # quantir's histogram pass + a range search = what ORT's collect + compute does
    rows = [
        ("min/max of 4M values", ort["minmax"], q["observe_4M/minmax"]),
        ("percentile 99.99, 4M values", ort["percentile"], q["observe_4M/histogram_2048"] + q["range_search_2048_bins/percentile"]),
        ("entropy 128 levels, 4M values", ort["entropy"], q["observe_4M/histogram_2048"] + q["range_search_2048_bins/entropy_128"]),
        ("entropy search alone (2048 bins)", None, q["range_search_2048_bins/entropy_128"]),
    ]
    print(f"onnxruntime {onnxruntime.__version__}, numpy {np.__version__}; medians")
    print(f"{'task':38} {'onnxruntime':>12} {'quantir':>12} {'speed-up':>9}")
    for name, o, r in rows:
        os_ = f"{o * 1e3:9.2f} ms" if o is not None else "         -"
        ratio = f"{o / r:8.1f}x" if o is not None else "       -"
        print(f"{name:38} {os_:>12} {r * 1e3:9.3f} ms {ratio:>9}")


if __name__ == "__main__":
    sys.exit(main())
