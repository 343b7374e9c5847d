#!/usr/bin/env python3
"""Side-by-side throughput: quantir's interpreter vs onnxruntime on MobileNet v2 0.35.

The 16 test images (tests/data/mobilenet_test.npz, repeated 8 times) run through onnxruntime (the ONNX
export of the model, CPU provider, all graph optimisations) and through `quantir run` on both
exports — the TF-dialect MLIR (NHWC) and the same ONNX file onnxruntime runs (NCHW) — batch 1,
with 1 and with 2 threads, in one run. Prints samples/s and the quantir / onnxruntime ratios.

Both rates are steady-state: onnxruntime's after one untimed warm-up run, quantir's as issue #19
measures it, 128 minus 16 samples — (128 − 16) / (t(128) − t(16)), t the run time `quantir run`
reports (model loading excluded) — so that neither side's one-off start-up costs count.

Usage: .venv/bin/python benches/compare_runtime.py   (builds quantir in release first)
"""
import gzip, os, re, shutil, subprocess, sys, tempfile, time
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPS = 9
# samples whose time is left out of quantir's rate (see quantir_rate)
WARM_UP = 16


def ort_session(threads):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    s = ort.InferenceSession(os.path.join(ROOT, "tests/data/mobilenet_v2_035.onnx"), so, providers=["CPUExecutionProvider"])
    return s, s.get_inputs()[0].name


def ort_rate(session, x):
    s, name = session
    s.run(None, {name: x[:1]})  # warm-up, not timed
    t = time.perf_counter()
    for i in range(len(x)):
        s.run(None, {name: x[i:i + 1]})
    return len(x) / (time.perf_counter() - t)


def quantir_seconds(model, data, threads, out_dir, limit):
    """Seconds `quantir run` spends running `limit` samples (after loading the model)."""
    exe = os.path.join(ROOT, "target/release/quantir")
    r = subprocess.run([exe, "run", model, "--data", data, "--threads", str(threads), "--limit", str(limit),
                        "-o", os.path.join(out_dir, "o.npz")], capture_output=True, text=True, check=True)
    return limit / float(re.search(r"\(([\d.]+) samples/s\)", r.stderr).group(1))


def quantir_rate(model, data, threads, out_dir, total):
    """Samples per second past the first WARM_UP: (total − WARM_UP) / (t(total) − t(WARM_UP)),
    the issue's "128 minus 16 samples", so that what a run pays once (its thread pool, the first
    allocations, packing each constant filter on its first use) is left out as onnxruntime's
    warm-up run is."""
    t_all = quantir_seconds(model, data, threads, out_dir, total)
    t_warm = quantir_seconds(model, data, threads, out_dir, WARM_UP)
    return (total - WARM_UP) / (t_all - t_warm)


def median(v):
    return sorted(v)[len(v) // 2]


def main():
    subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
    data = os.path.join(ROOT, "tests/data/mobilenet_test.npz")
    # the 16 test images 8 times over: 128 runs per measurement (quantir's rate is taken over
    # the last 112 of them, onnxruntime's over all 128 after one warm-up run)
    x = np.concatenate([np.load(data)["x"].astype(np.float32)] * 8)
    with tempfile.TemporaryDirectory() as d:
        model = os.path.join(d, "mobilenet.mlir")
        with gzip.open(os.path.join(ROOT, "tests/data/mobilenet_v2_035.mlir.gz"), "rb") as f, open(model, "wb") as g:
            shutil.copyfileobj(f, g)
        # an uncompressed copy: quantir reads samples from the file as they run, and the
        # comparison is about inference, not about inflating the test file
        data = os.path.join(d, "images.npz")
        np.savez(data, x=x)
        import onnxruntime
        print(f"MobileNet v2 0.35, {len(x)} images of 224x224, batch 1; medians of {REPS} alternating runs; onnxruntime {onnxruntime.__version__}")
        # the two tools alternate, and the ratio is taken per pair before the median, so that
        # a slow phase of this shared machine hits both sides of a pair
        print(f"{'threads':>7} {'onnxruntime/s':>14} {'quantir TF/s':>13} {'quantir ONNX/s':>15} {'TF ratio':>9} {'ONNX ratio':>11}")
        onnx_model = os.path.join(ROOT, "tests/data/mobilenet_v2_035.onnx")
        for t in (1, 2):
            session = ort_session(t)
            os_, tfs, ons, tf_r, on_r = [], [], [], [], []
            for _ in range(REPS):
                o = ort_rate(session, x)
                q = quantir_rate(model, data, t, d, len(x))
                n = quantir_rate(onnx_model, data, t, d, len(x))
                os_.append(o)
                tfs.append(q)
                ons.append(n)
                tf_r.append(q / o)
                on_r.append(n / o)
            print(f"{t:>7} {median(os_):>14.1f} {median(tfs):>13.1f} {median(ons):>15.1f} {median(tf_r):>9.2f} {median(on_r):>11.2f}")

if __name__ == "__main__":
    sys.exit(main())
