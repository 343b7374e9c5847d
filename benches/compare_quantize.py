#!/usr/bin/env python3
"""quantir quantize --data vs onnxruntime quantize_static, side by side in one run.

For each shared model (digits CNN, digits MLP, MobileNet v2 0.35) and each calibration
method (MinMax, Percentile 99.999, Entropy with 2048 histogram bins), per-tensor and
per-channel weights, this script runs in child processes under /usr/bin/time -v:

  onnxruntime: quantize_static(model.onnx, QDQ, QInt8 activations and weights) with a
               calibration reader over the calibration .npz, batch 1;
  quantir:     quantir quantize model.onnx --data calib.npz --method M --no-cache -o q.onnx
               (--input mlir: model.mlir → q.mlirbc, the TF-dialect path)

and records wall time and peak RSS of each process. Then it measures the quality of both
outputs on the test set against their own float model: with ONNX input both QDQ models in
onnxruntime (1 intra-op thread, graph optimisations off); with MLIR input quantir's through
`quantir evaluate`. It prints a table with
the time and memory ratios (quantir / onnxruntime; below 1 = quantir better).

Usage: .venv/bin/python benches/compare_quantize.py [--models DIR] [--only NAME] [--methods M,...]
                                                    [--input onnx|mlir]
       (DIR defaults to ../shared/models; builds quantir in release first)
"""
import argparse, gzip, json, os, re, shutil, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MODELS = {
    # name: (mlir file, onnx file, calibration npz, test npz)
    "digits_cnn": ("digits_cnn.mlir", "digits_cnn.onnx", "digits_calib.npz", "digits_test.npz"),
    "digits_mlp": ("digits_mlp.mlir", "digits_mlp.onnx", "digits_mlp_calib.npz", "digits_mlp_test.npz"),
    "mobilenet_v2_035": ("mobilenet_v2_035.mlir.gz", "mobilenet_v2_035.onnx", "mobilenet_calib.npz", "mobilenet_test.npz"),
}
METHODS = {
    # name: (onnxruntime CalibrationMethod, extra num_bins, quantir --method)
    "MinMax": ("MinMax", None, "minmax"),
    "Percentile": ("Percentile", None, "percentile-symmetric"),
    "Entropy2048": ("Entropy", 2048, "entropy"),
}

ORT_CHILD = r'''
import sys, numpy as np
import onnxruntime.quantization as q
qq = sys.modules["onnxruntime.quantization.quantize"]
src, calib, out, method, bins, per_channel = sys.argv[1:7]
if bins != "none":
    orig = qq.create_calibrator
    def with_bins(*a, **k):
        k.setdefault("extra_options", {})["num_bins"] = int(bins)
        return orig(*a, **k)
    qq.create_calibrator = with_bins
x = np.load(calib)
arr = x[x.files[0]] if "x" not in x.files else x["x"]
import onnx
name = onnx.load(src).graph.input[0].name
class Reader(q.CalibrationDataReader):
    def __init__(self): self.i = 0
    def get_next(self):
        if self.i >= len(arr): return None
        self.i += 1
        return {name: arr[self.i - 1:self.i].astype(np.float32)}
q.quantize_static(src, out, Reader(), quant_format=q.QuantFormat.QDQ, per_channel=per_channel == "1",
                  activation_type=q.QuantType.QInt8, weight_type=q.QuantType.QInt8,
                  calibrate_method=getattr(q.CalibrationMethod, method))
'''


def timed(cmd, cwd=None):
    """Runs cmd under /usr/bin/time -v; returns (wall s, peak RSS MB, stderr)."""
    r = subprocess.run(["/usr/bin/time", "-v"] + cmd, capture_output=True, text=True, cwd=cwd)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{r.stderr[-2000:]}")
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([\d.]+)", r.stderr)
    h, m, s = wall.groups()
    secs = int(h or 0) * 3600 + int(m) * 60 + float(s)
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr).group(1)) / 1024
    return secs, rss, r.stderr


def sqnr(f, q):
    import numpy as np
    f, q = f.astype(np.float64), q.astype(np.float64)
    return 10 * np.log10((f ** 2).sum() / max(((f - q) ** 2).sum(), 1e-300))


def ort_quality(float_onnx, quant_onnx, test):
    import numpy as np, onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    # the QDQ graph as written (float ops between Q/DQ), as in reference/ort_results.json: with
    # all optimisations onnxruntime fuses it into its int8 kernels, whose u8s8 arithmetic
    # loses far more here (18 dB instead of 36 on the digits CNN)
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    fs = ort.InferenceSession(float_onnx, so, providers=["CPUExecutionProvider"])
    qs = ort.InferenceSession(quant_onnx, so, providers=["CPUExecutionProvider"])
    d = np.load(test)
    x = d["x"].astype(np.float32)
    name = fs.get_inputs()[0].name
    fo = np.concatenate([fs.run(None, {name: x[i:i + 1]})[0] for i in range(len(x))])
    qo = np.concatenate([qs.run(None, {name: x[i:i + 1]})[0] for i in range(len(x))])
    return sqnr(fo, qo), float((fo.argmax(1) == qo.argmax(1)).mean())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=os.path.join(ROOT, "..", "shared", "models"))
    ap.add_argument("--only", default=None)
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--input", choices=["onnx", "mlir"], default="onnx")
    args = ap.parse_args()
    subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
    exe = os.path.join(ROOT, "target/release/quantir")
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for name, (mlir, onnx_file, calib, test) in MODELS.items():
            if args.only and name != args.only:
                continue
            mlir = os.path.join(args.models, mlir)
            if mlir.endswith(".gz"):
                plain = os.path.join(d, name + ".mlir")
                with gzip.open(mlir, "rb") as src, open(plain, "wb") as dst:
                    shutil.copyfileobj(src, dst)
                mlir = plain
            onnx_path, calib, test = (os.path.join(args.models, f) for f in (onnx_file, calib, test))
            for method in args.methods.split(","):
                ort_method, bins, qmethod = METHODS[method]
                for per_channel in (False, True):
                    gran = "per-channel" if per_channel else "per-tensor"
                    ort_out = os.path.join(d, f"{name}_{method}_{gran}.onnx")
                    ot, orss, _ = timed([sys.executable, "-c", ORT_CHILD, onnx_path, calib, ort_out, ort_method,
                                         str(bins) if bins else "none", "1" if per_channel else "0"])
                    o_sqnr, o_agree = ort_quality(onnx_path, ort_out, test)
                    src = onnx_path if args.input == "onnx" else mlir
                    ext = "onnx" if args.input == "onnx" else "mlirbc"
                    q_out = os.path.join(d, f"{name}_{method}_{gran}_quantir.{ext}")
                    cmd = [exe, "quantize", src, "--data", calib, "--method", qmethod, "--no-cache", "-o", q_out]
                    if not per_channel:
                        cmd.append("--per-tensor")
                    qt, qrss, _ = timed(cmd)
                    if args.input == "onnx":
                        q_sqnr, q_agree = ort_quality(onnx_path, q_out, test)
                        r = {"sqnr_db": q_sqnr, "top1_agreement": q_agree}
                    else:
                        ev = subprocess.run([exe, "evaluate", mlir, q_out, "--data", test, "--json"],
                                            capture_output=True, text=True, check=True)
                        r = json.loads(ev.stdout)
                    row = dict(model=name, method=method, weights=gran, ort_s=ot, quantir_s=qt, ort_rss_mb=orss,
                               quantir_rss_mb=qrss, ort_sqnr=o_sqnr, quantir_sqnr=r["sqnr_db"],
                               ort_agree=o_agree, quantir_agree=r["top1_agreement"],
                               ort_bytes=os.path.getsize(ort_out), quantir_bytes=os.path.getsize(q_out))
                    rows.append(row)
                    print(f"{name:17} {method:11} {gran:11} time {qt:6.2f} / {ot:6.2f} s = {qt / ot:5.3f}  "
                          f"RSS {qrss:7.1f} / {orss:7.1f} MB = {qrss / orss:5.3f}  "
                          f"SQNR {r['sqnr_db']:6.2f} vs {o_sqnr:6.2f} dB  "
                          f"top-1 agr {r['top1_agreement']:.4f} vs {o_agree:.4f}", flush=True)
    print("\n| model | method | weights | quantir s | onnxruntime s | time ratio | quantir RSS MB | "
          "onnxruntime RSS MB | RSS ratio | quantir SQNR | onnxruntime SQNR | size quantir / ort |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['method']} | {r['weights']} | {r['quantir_s']:.2f} | {r['ort_s']:.2f} | "
              f"{r['quantir_s'] / r['ort_s']:.3f} | {r['quantir_rss_mb']:.0f} | {r['ort_rss_mb']:.0f} | "
              f"{r['quantir_rss_mb'] / r['ort_rss_mb']:.2f} | {r['quantir_sqnr']:.2f} | {r['ort_sqnr']:.2f} | "
              f"{r['quantir_bytes']} / {r['ort_bytes']} |")


if __name__ == "__main__":
    main()
